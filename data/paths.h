/* data/paths.h - folders on disk. */
#ifndef FUSEDGPT_PATHS_H
#define FUSEDGPT_PATHS_H

#ifdef __cplusplus
extern "C" {
#endif

/* mkdir -p: creates path and its missing parents. 0, or -1 with errno set. */
int make_dirs(const char *path);

/* Creates dir if needed and takes an exclusive advisory lock on dir/.lock for the rest of the
 * process (the descriptor stays open; the kernel drops the lock when the process ends, however it
 * ends). The descriptor, or -1 with errno set: EWOULDBLOCK when another process holds it. */
int lock_dir(const char *dir);

#ifdef __cplusplus
}
#endif

#endif
