/* common/host_memory.c - how much memory this host can still give a process (see host_memory.h). */
#include "common/host_memory.h"

#include "common/err.h"

#include <stdio.h>
#include <unistd.h>

/* The first unsigned number in path (cgroup files hold one, or "max"): 1, or 0 when there is none. */
static int read_number(const char *path, unsigned long long *v) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    const int ok = fscanf(f, "%llu", v) == 1;
    fclose(f);
    return ok;
}

/* What the container's memory cgroup still allows (v2, then v1), or 0 when there is no limit. */
static unsigned long long cgroup_room(void) {
    unsigned long long limit, used;
    if (read_number("/sys/fs/cgroup/memory.max", &limit) && read_number("/sys/fs/cgroup/memory.current", &used))
        return limit > used ? limit - used : 1;
    /* v1 reports "no limit" as a number near 2^63 */
    if (read_number("/sys/fs/cgroup/memory/memory.limit_in_bytes", &limit) && limit < (1ull << 60) &&
        read_number("/sys/fs/cgroup/memory/memory.usage_in_bytes", &used))
        return limit > used ? limit - used : 1;
    return 0;
}

size_t host_memory_available(void) {
    unsigned long long host = 0;
    FILE *f = fopen("/proc/meminfo", "r");
    if (f) {
        char line[256];
        unsigned long long kb, avail = 0, swap = 0;
        int found = 0;
        while (fgets(line, sizeof line, f)) {
            if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) avail = kb, found = 1;
            else if (sscanf(line, "SwapFree: %llu kB", &kb) == 1) swap = kb;
        }
        fclose(f);
        if (found) host = (avail + swap) * 1024ull;
    }
    if (!host) {
        const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
        if (pages > 0 && page > 0) host = (unsigned long long)pages * (unsigned long long)page;
    }
    const unsigned long long room = cgroup_room();
    if (room && (!host || room < host)) host = room;
    return (size_t)host;
}

int host_memory_short(double bytes, const char *what, const char *fix, char *err) {
    const size_t available = host_memory_available();
    if (!available || bytes <= (double)available) return 0;
    snprintf(err, ERR_LEN, "%s needs about %.1f GB but this host has %.1f GB free; %s", what, bytes / 1e9,
             available / 1e9, fix);
    return 1;
}
