/* common/host_memory.h - how much memory this host can still give a process. */
#ifndef FUSEDGPT_HOST_MEMORY_H
#define FUSEDGPT_HOST_MEMORY_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bytes this process can still be given without being killed: MemAvailable plus SwapFree from
 * /proc/meminfo (a run that swaps is slow, not killed), or the physical memory when that file
 * cannot be read; within a container, no more than its cgroup's limit less what it uses. 0 when
 * none of these is known. */
size_t host_memory_available(void);

/* What the memory cgroup of this process still allows, in bytes: the tightest of the limits set on
 * its cgroup and the folders above it (v2 under cgroup_root, else v1 under cgroup_root/memory), less
 * what each holds that cannot be reclaimed (usage less inactive page cache). The cgroup is read from
 * self_cgroup (/proc/self/cgroup). 0 when no limit is set. */
unsigned long long host_memory_cgroup_room(const char *cgroup_root, const char *self_cgroup);

/* Linux overcommits: a large calloc succeeds and the process is killed later, when it touches the
 * pages. So a caller about to touch `bytes` asks first: 0 when they fit (or nothing is known), else
 * 1 with "<what> needs about X GB but this host has Y GB free; <fix>" in err (ERR_LEN bytes). */
int host_memory_short(double bytes, const char *what, const char *fix, char *err);

#ifdef __cplusplus
}
#endif

#endif
