/* model/dist.c - the launcher and the rendezvous of data-parallel training (see dist.h). */
#include "model/dist.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "data/rng.h"

#define MAX_WORKERS 64

static int env_int(const char *name, int fallback) {
    const char *v = getenv(name);
    return v && *v ? atoi(v) : fallback;
}

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Stops every worker still running: SIGTERM, then SIGKILL after a grace period. */
static void stop_workers(pid_t *pids, int n) {
    for (int i = 0; i < n; i++)
        if (pids[i] > 0) kill(pids[i], SIGTERM);
    for (int waited = 0; waited < 5000; waited += 50) {
        int alive = 0;
        for (int i = 0; i < n; i++) {
            if (pids[i] <= 0) continue;
            if (waitpid(pids[i], NULL, WNOHANG) == pids[i])
                pids[i] = 0;
            else
                alive = 1;
        }
        if (!alive) return;
        sleep_ms(50);
    }
    for (int i = 0; i < n; i++)
        if (pids[i] > 0) {
            kill(pids[i], SIGKILL);
            waitpid(pids[i], NULL, 0);
            pids[i] = 0;
        }
}

int dist_launch(int argc, char **argv, int n) {
    (void)argc;
    if (n < 1 || n > MAX_WORKERS) {
        fprintf(stderr, "error: -g/--gpus %d is out of range (1..%d)\n", n, MAX_WORKERS);
        return 2;
    }
    char dir[] = "/tmp/fusedgpt-rendezvous-XXXXXX";
    if (!mkdtemp(dir)) {
        fprintf(stderr, "error: cannot create a rendezvous folder in /tmp: %s\n", strerror(errno));
        return 1;
    }
    pid_t pids[MAX_WORKERS] = {0};
    pid_t launcher = getpid();
    fflush(stdout);
    fflush(stderr);
    for (int r = 0; r < n; r++) {
        pid_t pid = fork();
        if (pid < 0) {
            fprintf(stderr, "error: cannot start worker %d: %s\n", r, strerror(errno));
            stop_workers(pids, r);
            return 1;
        }
        if (pid == 0) {
            /* A worker must not outlive its launcher (killed launcher -> no orphaned GPU jobs). */
            prctl(PR_SET_PDEATHSIG, SIGTERM);
            if (getppid() != launcher) _exit(1);
            char value[32];
            snprintf(value, sizeof value, "%d", r);
            setenv("FUSEDGPT_RANK", value, 1);
            setenv("FUSEDGPT_LOCAL_RANK", value, 1);
            snprintf(value, sizeof value, "%d", n);
            setenv("FUSEDGPT_WORLD_SIZE", value, 1);
            setenv("FUSEDGPT_RENDEZVOUS", dir, 1);
            execv("/proc/self/exe", argv);
            fprintf(stderr, "error: worker %d cannot start %s: %s\n", r, argv[0], strerror(errno));
            _exit(127);
        }
        pids[r] = pid;
    }
    int status = 0, remaining = n;
    while (remaining > 0) {
        int st;
        pid_t pid = wait(&st);
        if (pid < 0) break;
        int r = -1;
        for (int i = 0; i < n; i++)
            if (pids[i] == pid) r = i;
        if (r < 0) continue;
        pids[r] = 0;
        remaining--;
        int failed = !WIFEXITED(st) || WEXITSTATUS(st) != 0;
        if (failed && status == 0) {
            if (WIFSIGNALED(st))
                fprintf(stderr, "error: rank %d was killed by signal %d; stopping the other ranks\n", r,
                        WTERMSIG(st));
            else
                fprintf(stderr, "error: rank %d exited with status %d; stopping the other ranks\n", r,
                        WEXITSTATUS(st));
            status = 1;
            stop_workers(pids, n);
            remaining = 0;
        }
    }
    char path[600];
    snprintf(path, sizeof path, "%s/nccl_id", dir);
    unlink(path);
    rmdir(dir);
    return status;
}

int dist_from_env(Dist *d, char *err) {
    memset(d, 0, sizeof *d);
    d->rank = env_int("FUSEDGPT_RANK", 0);
    d->world = env_int("FUSEDGPT_WORLD_SIZE", 1);
    d->local_rank = env_int("FUSEDGPT_LOCAL_RANK", d->rank);
    const char *dir = getenv("FUSEDGPT_RENDEZVOUS");
    snprintf(d->rendezvous, sizeof d->rendezvous, "%s", dir ? dir : "");
    if (d->world < 1 || d->rank < 0 || d->rank >= d->world) {
        snprintf(err, 512, "FUSEDGPT_RANK=%d / FUSEDGPT_WORLD_SIZE=%d are inconsistent (start workers with -g)",
                 d->rank, d->world);
        return -1;
    }
    if (d->world > 1 && !d->rendezvous[0]) {
        snprintf(err, 512, "FUSEDGPT_RENDEZVOUS is not set for rank %d of %d (start workers with -g)", d->rank,
                 d->world);
        return -1;
    }
    return 0;
}

int dist_exchange_id(const Dist *d, unsigned char *bytes, char *err) {
    if (d->world == 1) return 0;
    char path[600], tmp[620];
    snprintf(path, sizeof path, "%s/nccl_id", d->rendezvous);
    if (d->rank == 0) {
        snprintf(tmp, sizeof tmp, "%s.tmp", path);
        FILE *f = fopen(tmp, "wb");
        int ok = f && fwrite(bytes, 1, DIST_ID_BYTES, f) == DIST_ID_BYTES;
        ok = (f && fclose(f) == 0) && ok;
        if (!ok || rename(tmp, path) != 0) {
            snprintf(err, 512, "rank 0 cannot publish the NCCL id in %s: %s", d->rendezvous, strerror(errno));
            return -1;
        }
        return 0;
    }
    for (int waited = 0; waited < DIST_WAIT_SECONDS * 1000; waited += 50) {
        FILE *f = fopen(path, "rb");
        if (f) {
            size_t got = fread(bytes, 1, DIST_ID_BYTES, f);
            fclose(f);
            if (got == DIST_ID_BYTES) return 0;
        }
        sleep_ms(50);
    }
    snprintf(err, 512, "rank %d waited %d s for rank 0's NCCL id in %s; rank 0 did not start (see its error)",
             d->rank, DIST_WAIT_SECONDS, d->rendezvous);
    return -1;
}

int dist_selftest_worker(const Dist *d) {
    unsigned char id[DIST_ID_BYTES] = {0};
    char err[512];
    if (env_int("FUSEDGPT_TEST_FAIL_RANK", -1) == d->rank) {
        fprintf(stderr, "rank %d: failing on purpose (FUSEDGPT_TEST_FAIL_RANK)\n", d->rank);
        return 3;
    }
    if (d->rank == 0) {
        Rng rng;
        rng_seed(&rng, (uint64_t)time(NULL) ^ (uint64_t)getpid());
        for (int i = 0; i < DIST_ID_BYTES; i++) id[i] = (unsigned char)rng_next(&rng);
    }
    if (dist_exchange_id(d, id, err) != 0) {
        fprintf(stderr, "error: %s\n", err);
        return 1;
    }
    uint64_t h = 1469598103934665603ull; /* FNV-1a of the id: one short number to compare */
    for (int i = 0; i < DIST_ID_BYTES; i++) h = (h ^ id[i]) * 1099511628211ull;
    printf("rank %d of %d: id %016llx\n", d->rank, d->world, (unsigned long long)h);
    return 0;
}
