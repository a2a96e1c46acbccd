/* common/host_memory.h - how much memory this host can still give a process. */
#ifndef FUSEDGPT_HOST_MEMORY_H
#define FUSEDGPT_HOST_MEMORY_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bytes the kernel can still hand out without killing anyone: MemAvailable plus SwapFree from
 * /proc/meminfo, or the physical memory when that file cannot be read; 0 when neither is known.
 * Linux overcommits, so a large calloc succeeds and the process is killed later, when it touches
 * the pages: a caller that is about to use N bytes compares N with this first. */
size_t host_memory_available(void);

#ifdef __cplusplus
}
#endif

#endif
