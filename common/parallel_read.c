/* common/parallel_read.c - reading a large span of a file with every core at once (parallel_read.h). */
#include "common/parallel_read.h"

#include <errno.h>
#include <unistd.h>

/* The pieces each core reads in turn. */
#define PIECE ((size_t)16 << 20)

/* Reads `bytes` of fd from `offset` into dst in this thread, through short reads and EINTR. 0, or the
 * errno that stopped it (EIO for a file that ends early). */
static int pread_whole(int fd, void *dst, size_t bytes, off_t offset) {
    for (size_t done = 0; done < bytes;) {
        const ssize_t got = pread(fd, (char *)dst + done, bytes - done, offset + (off_t)done);
        if (got > 0) {
            done += (size_t)got;
            continue;
        }
        if (got < 0 && errno == EINTR) continue;
        return got < 0 ? errno : EIO;
    }
    return 0;
}

int read_on_every_core(int fd, void *dst, size_t bytes, off_t offset) {
    const long pieces = (long)((bytes + PIECE - 1) / PIECE);
    int failed = 0;
#pragma omp parallel for schedule(dynamic, 1)
    for (long i = 0; i < pieces; i++) {
        const size_t at = (size_t)i * PIECE;
        const size_t n = bytes - at < PIECE ? bytes - at : PIECE;
        const int e = pread_whole(fd, (char *)dst + at, n, offset + (off_t)at);
        if (e) {
#pragma omp critical(parallel_read_error)
            failed = e;
        }
    }
    if (failed) errno = failed;
    return !failed;
}
