#include "common/paths.h"

#include "common/err.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

int path_format(char *dst, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(dst, FGPT_PATH_LEN, fmt, ap);
    va_end(ap);
    if (n < 0 || n >= FGPT_PATH_LEN) {
        dst[0] = 0;
        errno = ENAMETOOLONG;
        return -1;
    }
    return 0;
}

int file_in_dir(char *dst, const char *dir, const char *name) {
    struct stat st;
    return path_format(dst, "%s/%s", dir, name) == 0 && stat(dst, &st) == 0;
}

int make_dirs(const char *path) {
    char tmp[FGPT_PATH_LEN];
    if (!path[0]) { /* as mkdir("") says */
        errno = ENOENT;
        return -1;
    }
    if ((size_t)snprintf(tmp, sizeof tmp, "%s", path) >= sizeof tmp) {
        errno = ENAMETOOLONG;
        return -1;
    }
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(tmp, 0755) != 0 && errno != EEXIST) return -1;
        *p = '/';
    }
    return mkdir(tmp, 0755) == 0 || errno == EEXIST ? 0 : -1;
}

FILE *create_new_file(const char *path) {
    struct stat sb;
    if (lstat(path, &sb) == 0) {
        if (S_ISDIR(sb.st_mode)) {
            errno = EISDIR;
            return NULL;
        }
        if (unlink(path) != 0) return NULL;
    }
    /* O_EXCL with O_NOFOLLOW: a link put there after the unlink fails the open instead of being followed */
    const int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) return NULL;
    FILE *f = fdopen(fd, "wb");
    if (!f) {
        const int e = errno;
        close(fd);
        unlink(path);
        errno = e;
    }
    return f;
}

int write_file_whole(const char *path, const void *data, size_t n) {
    char tmp[FGPT_PATH_LEN];
    if (path_format(tmp, "%s.tmp", path) != 0) return -1;
    FILE *f = create_new_file(tmp);
    if (!f) return -1;
    /* on disk before the rename: a rename that outlives a power loss must not name an empty file */
    int ok = fwrite(data, 1, n, f) == n && fflush(f) == 0 && fsync(fileno(f)) == 0;
    int e = ok ? 0 : errno;
    if (fclose(f) != 0 && ok) ok = 0, e = errno;
    if (ok && rename(tmp, path) != 0) ok = 0, e = errno;
    if (!ok) {
        remove(tmp);
        errno = e ? e : EIO;
        return -1;
    }
    return 0;
}

int sync_dir(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return 0;
    int ok = fsync(fd) == 0;
    return (close(fd) == 0) && ok;
}

int same_file(const char *a, const char *b) {
    struct stat sa, sb;
    return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

int lock_dir(const char *dir) {
    char path[FGPT_PATH_LEN];
    if (make_dirs(dir) != 0 || path_format(path, "%s/.lock", dir) != 0) return -1;
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return -1;
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    return fd;
}

int dir_locked_by_another(const char *dir) {
    char path[FGPT_PATH_LEN];
    if (path_format(path, "%s/.lock", dir) != 0) return 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    const int held = flock(fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK;
    close(fd); /* drops the lock this took, if it took one */
    return held;
}

FILE *open_regular(const char *path, char *why) {
    why[0] = 0;
    const int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return NULL;
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        const int e = errno;
        close(fd);
        errno = e;
        return NULL;
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        if (S_ISDIR(sb.st_mode)) {
            errno = EISDIR;
            return NULL;
        }
        const char *kind = S_ISFIFO(sb.st_mode)   ? "a pipe"
                           : S_ISCHR(sb.st_mode)  ? "a character device"
                           : S_ISBLK(sb.st_mode)  ? "a block device"
                           : S_ISSOCK(sb.st_mode) ? "a socket"
                                                  : "not a regular file";
        snprintf(why, ERR_LEN, "%s is %s, not a file: save what it gives to a file and pass that", path, kind);
        errno = EINVAL;
        return NULL;
    }
    /* a regular file reads the same either way, and fdopen keeps the descriptor's flags */
    const int flags = fcntl(fd, F_GETFL);
    FILE *f = flags < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) < 0 ? NULL : fdopen(fd, "rb");
    if (!f) {
        const int e = errno;
        close(fd);
        errno = e;
    }
    return f;
}

char *read_stream_whole(FILE *f, size_t *len) {
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0) return NULL;
    if (!S_ISREG(sb.st_mode)) {
        errno = S_ISDIR(sb.st_mode) ? EISDIR : EINVAL;
        return NULL;
    }
    const size_t n = (size_t)sb.st_size;
    char *buf = malloc(n + 1);
    if (!buf) {
        errno = ENOMEM;
        return NULL;
    }
    if (fseek(f, 0, SEEK_SET) != 0 || fread(buf, 1, n, f) != n) {
        free(buf);
        errno = EIO;
        return NULL;
    }
    buf[n] = 0;
    *len = n;
    return buf;
}
