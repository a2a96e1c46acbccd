/* common/host_memory.c - how much memory this host can still give a process (see host_memory.h). */
#include "common/host_memory.h"

#include <stdio.h>
#include <unistd.h>

size_t host_memory_available(void) {
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
        if (found) return (size_t)((avail + swap) * 1024ull);
    }
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    return pages > 0 && page > 0 ? (size_t)pages * (size_t)page : 0;
}
