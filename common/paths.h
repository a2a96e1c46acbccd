/* common/paths.h - folders and whole files on disk. */
#ifndef FUSEDGPT_PATHS_H
#define FUSEDGPT_PATHS_H

#include <stddef.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The longest path the system accepts (PATH_MAX on Linux): path buffers for files inside a run or
 * data folder have this size, and path_format refuses to cut a path to fit. */
#define FGPT_PATH_LEN 4096

/* snprintf into dst (FGPT_PATH_LEN bytes). 0, or -1 with errno ENAMETOOLONG when the path does not
 * fit: a cut path would name a file outside the folder it belongs to. */
int path_format(char *dst, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Whether dir/name exists, its path left in dst (FGPT_PATH_LEN bytes): 1, or 0 when it does not
 * exist or its path does not fit. */
int file_in_dir(char *dst, const char *dir, const char *name);

/* Whether a and b name one file (through links, or two spellings of a path); 0 when either is not
 * there. */
int same_file(const char *a, const char *b);

/* mkdir -p: creates path and its missing parents. 0, or -1 with errno set. */
int make_dirs(const char *path);

/* path created empty for writing ("wb"), as a new file: whatever was at path before (a file left by
 * a crash, a link, a second name of another file) is unlinked first, so that writing a staging name
 * never reaches a file outside the folder. NULL with errno set (EISDIR for a directory there). */
FILE *create_new_file(const char *path);

/* Writes n bytes to path whole or not at all: to path.tmp first, synced, then renamed over path, so
 * a failure (a full disk, a folder that is not writable) leaves what path held before. 0, or -1
 * with errno set and no path.tmp left behind. */
int write_file_whole(const char *path, const void *data, size_t n);

/* Makes the renames inside dir durable (fsync of the folder): without it a power loss can undo a
 * rename whose files reached the disk. 1 on success, 0 with errno set. */
int sync_dir(const char *dir);

/* Whether another process holds dir's lock (lock_dir), without creating anything. */
int dir_locked_by_another(const char *dir);

/* path opened for reading ("rb") when it is a regular file. Else NULL with errno set: open's own
 * (ENOENT, EACCES, ...), EISDIR for a directory (the caller names what it wanted inside), or EINVAL
 * for a pipe, a device or a socket, which a reader would wait on or read without end; then `why`
 * (ERR_LEN bytes; "" otherwise) holds the whole message, which names what path is and the fix. A
 * FIFO is opened without waiting for a writer, to learn what it is. */
FILE *open_regular(const char *path, char *why);

/* A regular file's bytes from f's start, a NUL after them (malloc'ed; *len their count), or NULL
 * with errno set: EISDIR for a directory, EINVAL for anything else that is not a regular file (a
 * device or a FIFO, whose size is no length), ENOMEM, or EIO for a short read. */
char *read_stream_whole(FILE *f, size_t *len);

/* Creates dir if needed and takes an exclusive advisory lock on dir/.lock for the rest of the
 * process (the descriptor stays open; the kernel drops the lock when the process ends, however it
 * ends). The descriptor, or -1 with errno set: EWOULDBLOCK when another process holds it. */
int lock_dir(const char *dir);

#ifdef __cplusplus
}
#endif

#endif
