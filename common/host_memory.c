/* common/host_memory.c - how much memory this host can still give a process (see host_memory.h). */
#include "common/host_memory.h"

#include "common/err.h"
#include "common/paths.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* The first unsigned number in path (cgroup files hold one, or "max"): 1, or 0 when there is none. */
static int read_number(const char *path, unsigned long long *v) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    const int ok = fscanf(f, "%llu", v) == 1;
    fclose(f);
    return ok;
}

/* The value of `key` in a memory.stat file ("key value" lines), or 0 when it is not there. */
static unsigned long long stat_value(const char *path, const char *key) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char line[256], name[128];
    unsigned long long v, found = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "%127s %llu", name, &v) == 2 && !strcmp(name, key)) found = v;
    fclose(f);
    return found;
}

/* What the memory cgroup at dir still allows: its limit less what it holds that the kernel cannot
 * reclaim before it kills (the usage less the inactive page cache, as container runtimes count a
 * working set). 0 when dir sets no limit. v1 reports "no limit" as a number near 2^63. */
static unsigned long long room_at(const char *dir, int v1) {
    char path[FGPT_PATH_LEN];
    unsigned long long limit, used;
    if (path_format(path, "%s/%s", dir, v1 ? "memory.limit_in_bytes" : "memory.max") != 0 ||
        !read_number(path, &limit) || limit >= (1ull << 60))
        return 0;
    if (path_format(path, "%s/%s", dir, v1 ? "memory.usage_in_bytes" : "memory.current") != 0 ||
        !read_number(path, &used))
        return 0;
    unsigned long long reclaimable = 0;
    if (path_format(path, "%s/memory.stat", dir) == 0)
        reclaimable = stat_value(path, v1 ? "total_inactive_file" : "inactive_file");
    used = used > reclaimable ? used - reclaimable : 0;
    return limit > used ? limit - used : 1;
}

/* This process's cgroup under the hierarchy that holds the memory controller, from self_cgroup's
 * lines ("0::/path" for v2, "N:memory,...:/path" for v1), into path (e.g. "/user.slice/x"). */
static int own_cgroup(const char *self_cgroup, int v1, char *path, size_t size) {
    FILE *f = fopen(self_cgroup, "r");
    if (!f) return 0;
    char line[FGPT_PATH_LEN + 64];
    int found = 0;
    while (!found && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2) continue;
        *c2 = 0;
        const char *controllers = c1 + 1;
        int memory = 0;
        if (v1)
            for (const char *p = controllers; *p; p += strcspn(p, ","), p += *p == ',')
                memory |= !strncmp(p, "memory", 6) && (p[6] == ',' || !p[6]);
        else
            memory = !strncmp(line, "0", 1) && c1 == line + 1 && !*controllers;
        if (memory) found = snprintf(path, size, "%s", c2 + 1) < (int)size;
    }
    fclose(f);
    return found;
}

unsigned long long host_memory_cgroup_room(const char *cgroup_root, const char *self_cgroup) {
    unsigned long long room = 0;
    for (int v1 = 0; v1 <= 1 && !room; v1++) {
        char base[FGPT_PATH_LEN], dir[FGPT_PATH_LEN], own[FGPT_PATH_LEN] = "";
        if (path_format(base, "%s%s", cgroup_root, v1 ? "/memory" : "") != 0) continue;
        /* a limit can sit on any folder above this process's own (a cgroup namespace shows "/"):
         * the tightest one holds */
        if (!own_cgroup(self_cgroup, v1, own, sizeof own) || path_format(dir, "%s%s", base, own) != 0)
            snprintf(dir, sizeof dir, "%s", base);
        for (;;) {
            const unsigned long long here = room_at(dir, v1);
            if (here && (!room || here < room)) room = here;
            char *slash = strrchr(dir, '/');
            if (strlen(dir) <= strlen(base) || !slash) break;
            *slash = 0;
        }
    }
    return room;
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
    const unsigned long long room = host_memory_cgroup_room("/sys/fs/cgroup", "/proc/self/cgroup");
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
