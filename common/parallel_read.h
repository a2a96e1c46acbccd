/* common/parallel_read.h - reading a large span of a file with every core at once.
 *
 * From the page cache one read() runs no faster than the disk: its fresh destination pages are
 * faulted in and filled by one thread. Pieces read by every core at once (pread, OpenMP) fill them
 * in parallel (a Llama-3.2-1B resume reached its first step in 17.5 s instead of 26: dev/RESULTS.md,
 * Trainer throughput); from the disk the two are level. A checkpoint's state and a Hugging Face
 * model's weights are read this way, their 16-bit arrays widened to fp32 where they land. */
#ifndef FUSEDGPT_PARALLEL_READ_H
#define FUSEDGPT_PARALLEL_READ_H

#include <stddef.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Reads `bytes` of fd from `offset` into dst, pieces of it on every core at once. 1, or 0 with errno
 * set (EIO for a file that ends early). */
int read_on_every_core(int fd, void *dst, size_t bytes, off_t offset);

/* Reads n 16-bit floats (bf16 when bf16 is set, else IEEE half) of fd from `offset` into dst as n
 * fp32 values: into the upper half of dst's bytes by every core, then widened in place there, so
 * that no second buffer is needed. 1, or 0 with errno set. */
int read_widened_on_every_core(int fd, float *dst, size_t n, off_t offset, int bf16);

#ifdef __cplusplus
}
#endif

#endif
