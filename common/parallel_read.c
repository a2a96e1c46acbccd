/* common/parallel_read.c - reading a large span of a file with every core at once, 16-bit floats
 * widened to fp32 as they come (parallel_read.h). */
#include "common/parallel_read.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>
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

static float half_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h >> 15) << 31, exp = h >> 10 & 0x1f, man = h & 0x3ff, bits;
    if (exp == 0) {
        if (man == 0) {
            bits = sign;
        } else { /* subnormal: normalise */
            int e = -1;
            do {
                e++;
                man <<= 1;
            } while (!(man & 0x400));
            bits = sign | (uint32_t)(127 - 15 - e) << 23 | (man & 0x3ff) << 13;
        }
    } else if (exp == 31) {
        bits = sign | 0x7f800000u | man << 13;
    } else {
        bits = sign | (exp + 127 - 15) << 23 | man << 13;
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* The n halves in the upper half of out's bytes widened in place (bf16: bfloat16, else IEEE half).
 * out[i] overwrites halves 2i - n and 2i - n + 1, which front to back were read already. So the
 * cores widen waves [lo, hi) with hi <= (n + lo) / 2, in any order within a wave: a wave's writes
 * end below the first half it reads. The last million go front to back in one thread. */
static void widen_in_place(float *out, size_t n, int bf16) {
    const uint16_t *h = (const uint16_t *)(out + n) - n;
    size_t lo = 0;
    for (;;) {
        const size_t hi = n - lo > ((size_t)1 << 20) ? (n + lo) / 2 : n;
#pragma omp parallel for schedule(static) if (hi < n)
        for (size_t i = lo; i < hi; i++) {
            if (bf16) {
                const uint32_t bits = (uint32_t)h[i] << 16;
                memcpy(&out[i], &bits, 4);
            } else {
                out[i] = half_to_float(h[i]);
            }
        }
        if (hi == n) return;
        lo = hi;
    }
}

int read_widened_on_every_core(int fd, float *dst, size_t n, off_t offset, int bf16) {
    if (!read_on_every_core(fd, (uint16_t *)(dst + n) - n, n * sizeof(uint16_t), offset)) return 0;
    widen_in_place(dst, n, bf16);
    return 1;
}
