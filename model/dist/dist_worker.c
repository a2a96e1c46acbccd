/* model/dist/dist_worker.c - a worker's side of data parallelism (see dist.h): its place from the
 * environment, joining the rendezvous, the watchdog thread on the control channel, and the
 * launcher's GPU-free self-test. */
#include <errno.h>
#include <fcntl.h>
#include <omp.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common/err.h"
#include "common/rng.h"
#include "common/stop_request.h"
#include "model/dist/dist.h"
#include "model/dist/dist_wire.h"

static int env_int(const char *name, int fallback) {
    const char *v = getenv(name);
    return v && *v ? atoi(v) : fallback;
}

int dist_from_env(Dist *d, char *err) {
    memset(d, 0, sizeof *d);
    d->rank = env_int("FUSEDGPT_RANK", 0);
    d->world = env_int("FUSEDGPT_WORLD_SIZE", 1);
    d->local_rank = env_int("FUSEDGPT_LOCAL_RANK", d->rank);
    d->node_rank = env_int("FUSEDGPT_NODE_RANK", 0);
    const char *master = getenv("FUSEDGPT_MASTER");
    snprintf(d->master, sizeof d->master, "%s", master ? master : "");
    if (d->world < 1 || d->rank < 0 || d->rank >= d->world) {
        snprintf(err, ERR_LEN, "FUSEDGPT_RANK=%d / FUSEDGPT_WORLD_SIZE=%d are inconsistent (start workers with -g)",
                 d->rank, d->world);
        return -1;
    }
    if (d->world > 1 && !d->master[0]) {
        snprintf(err, ERR_LEN, "FUSEDGPT_MASTER is not set for rank %d of %d (start workers with -g)", d->rank,
                 d->world);
        return -1;
    }
    return 0;
}

/* ---- the watchdog: one per process, so its state is static (it outlives main's frame) ---- */

static struct {
    int fd;      /* control channel to node 0's launcher; -1 when none */
    int wake[2]; /* a byte here stops the thread */
    int running, rank;
    pthread_t thread;
    pthread_mutex_t lock; /* guards the hooks, and is held while one runs */
    DistAbortHook abort_hook;
    DistAsyncErrorHook async_error;
    void *ctx;
} wd = {.fd = -1, .wake = {-1, -1}, .lock = PTHREAD_MUTEX_INITIALIZER};

/* Ends this process after a fault elsewhere: abort the communicator so that nothing waits on the
 * dead peer, but never longer than 10 s (SIGALRM's default action ends us if ncclCommAbort sticks).
 * The reason is already printed; stderr then goes to /dev/null, because the abort makes the main
 * thread's next CUDA call fail ("illegal memory access") and its message would bury the reason. */
_Noreturn static void stop_this_rank(void) {
    fflush(stderr);
    int null_fd = open("/dev/null", O_WRONLY);
    if (null_fd >= 0) dup2(null_fd, STDERR_FILENO);
    alarm(10);
    pthread_mutex_lock(&wd.lock);
    if (wd.abort_hook) wd.abort_hook(wd.ctx);
    _exit(DIST_EXIT_STOPPED); /* the launcher names the rank that failed first, not us */
}

static void *watchdog_main(void *arg) {
    (void)arg;
    for (;;) {
        struct pollfd p[2] = {{wd.fd, POLLIN, 0}, {wd.wake[0], POLLIN, 0}};
        int k = poll(p, 2, 1000);
        if (k < 0 && errno != EINTR) {
            print_error("rank %d: the watchdog cannot poll: %s; stopping", wd.rank, strerror(errno));
            stop_this_rank();
        }
        if (p[1].revents) return NULL; /* dist_finish */
        if (k > 0 && p[0].revents) {
            WireMsg m;
            int r = wire_recv(wd.fd, &m, 5000);
            if (r == 1 && m.type == MSG_ABORT) {
                if (m.rank >= 0)
                    print_error("rank %d: stopping because rank %d failed (on host %s)", wd.rank, m.rank,
                                m.host);
                else
                    print_error("rank %d: stopping: %s", wd.rank, m.text);
                stop_this_rank();
            }
            if (r != 1) {
                print_error("rank %d: lost the master (node 0's launcher stopped); stopping", wd.rank);
                stop_this_rank();
            }
        }
        char msg[WIRE_TEXT_LEN] = "";
        pthread_mutex_lock(&wd.lock);
        int failed = wd.async_error && wd.async_error(wd.ctx, msg, sizeof msg);
        pthread_mutex_unlock(&wd.lock);
        if (failed) {
            /* tell the master first, so the other ranks stop even if our abort sticks */
            WireMsg f = wire_msg(MSG_FAILED, wd.rank, 0, 0);
            snprintf(f.text, sizeof f.text, "%s", msg);
            wire_send(wd.fd, &f);
            print_error("rank %d: NCCL failed: %s; stopping", wd.rank, msg);
            stop_this_rank();
        }
    }
}

int dist_watchdog_start(Dist *d, char *err) {
    if (d->world == 1 || wd.fd < 0 || wd.running) return 0;
    if (pipe(wd.wake) != 0) {
        snprintf(err, ERR_LEN, "rank %d cannot create the watchdog's pipe: %s", d->rank, strerror(errno));
        return -1;
    }
    wd.rank = d->rank;
    int rc = pthread_create(&wd.thread, NULL, watchdog_main, NULL);
    if (rc != 0) {
        snprintf(err, ERR_LEN, "rank %d cannot start the watchdog thread: %s", d->rank, strerror(rc));
        return -1;
    }
    wd.running = 1;
    return 0;
}

void dist_set_fault_hooks(Dist *d, DistAbortHook abort_hook, DistAsyncErrorHook async_error, void *ctx) {
    (void)d;
    pthread_mutex_lock(&wd.lock);
    wd.abort_hook = abort_hook;
    wd.async_error = async_error;
    wd.ctx = ctx;
    pthread_mutex_unlock(&wd.lock);
}

void dist_finish(Dist *d) {
    if (wd.running) {
        char one = 1;
        if (write(wd.wake[1], &one, 1) != 1) abort(); /* a fresh pipe has room: cannot happen */
        pthread_join(wd.thread, NULL);
        wd.running = 0;
        close(wd.wake[0]);
        close(wd.wake[1]);
        wd.wake[0] = wd.wake[1] = -1;
    }
    if (wd.fd >= 0) {
        WireMsg m = wire_msg(MSG_DONE, d->rank, d->world, d->node_rank);
        wire_send(wd.fd, &m);
        close(wd.fd);
        wd.fd = -1;
    }
}

/* ---- joining the rendezvous ---- */

/* One connection attempt bounded by timeout_ms (a SYN to a filtered port would block minutes). */
static int connect_once(const struct addrinfo *ai, int timeout_ms) {
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
    if (fd < 0) return -1;
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
        if (errno != EINPROGRESS) {
            close(fd);
            return -1;
        }
        struct pollfd p = {fd, POLLOUT, 0};
        int soerr = 0;
        socklen_t len = sizeof soerr;
        if (poll(&p, 1, timeout_ms) != 1 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &len) != 0 || soerr) {
            close(fd);
            return -1;
        }
    }
    int flags = fcntl(fd, F_GETFL); /* back to blocking: wire_recv bounds its waits with poll */
    if (flags < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

int dist_exchange_id(Dist *d, unsigned char *bytes, char *err) {
    if (d->world == 1) return 0;
    char host[256], port_s[16];
    int port = 0, wait_s = wire_wait_seconds();
    if (dist_parse_master(d->master, host, sizeof host, &port) != 0) {
        snprintf(err, ERR_LEN, "rank %d: FUSEDGPT_MASTER '%s' is not HOST:PORT", d->rank, d->master);
        return -1;
    }
    snprintf(port_s, sizeof port_s, "%d", port);
    struct addrinfo hints, *ais = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_INET; /* node 0's launcher listens on IPv4 */
    hints.ai_socktype = SOCK_STREAM;
    int gai = getaddrinfo(host, port_s, &hints, &ais);
    if (gai != 0) {
        snprintf(err, ERR_LEN, "rank %d cannot resolve the master host '%s' (--master HOST:PORT): %s", d->rank, host,
                 gai_strerror(gai));
        return -1;
    }
    /* Nodes start in any order: retry until node 0's launcher listens. */
    double deadline = wire_now() + wait_s;
    int fd = -1;
    while (fd < 0 && wire_now() < deadline) {
        for (struct addrinfo *ai = ais; ai && fd < 0; ai = ai->ai_next) fd = connect_once(ai, 2000);
        if (fd < 0) {
            struct timespec ts = {0, 200 * 1000000L};
            nanosleep(&ts, NULL);
        }
    }
    freeaddrinfo(ais);
    if (fd < 0) {
        snprintf(err, ERR_LEN, "rank %d cannot reach the master %s within %d s (is node 0 started, is the port open?)",
                 d->rank, d->master, wait_s);
        return -1;
    }
    wire_tune_socket(fd);
    WireMsg m = wire_msg(MSG_HELLO, d->rank, d->world, d->node_rank);
    if (d->rank == 0) memcpy(m.id, bytes, DIST_ID_BYTES);
    if (wire_send(fd, &m) != 0) {
        snprintf(err, ERR_LEN, "rank %d lost the master %s while joining: %s", d->rank, d->master, strerror(errno));
        close(fd);
        return -1;
    }
    /* The master answers once every rank joined, or gives up after its own wait: leave it time to
     * say why before we give up ourselves. */
    int r = wire_recv(fd, &m, (wait_s + 15) * 1000);
    if (r == 1 && m.type == MSG_ID) {
        memcpy(bytes, m.id, DIST_ID_BYTES);
        wd.fd = fd;
        return 0;
    }
    if (r == 1 && m.type == MSG_ABORT && m.rank >= 0)
        snprintf(err, ERR_LEN, "rank %d: stopping because rank %d failed (on host %s)", d->rank, m.rank, m.host);
    else if (r == 1 && m.type == MSG_ABORT)
        snprintf(err, ERR_LEN, "rank %d: stopping: %s", d->rank, m.text);
    else if (r == 1 && m.type == MSG_REJECT)
        snprintf(err, ERR_LEN, "rank %d: the master %s refused it: %s", d->rank, d->master, m.text);
    else if (r == -2)
        snprintf(err, ERR_LEN, "rank %d: the master %s did not answer within %d s", d->rank, d->master, wait_s + 15);
    else
        snprintf(err, ERR_LEN, "rank %d: lost the master %s during the rendezvous (node 0's launcher stopped)", d->rank,
                 d->master);
    close(fd);
    return -1;
}

/* ---- self-test of the launcher without GPUs ---- */

static uint64_t id_hash(const unsigned char *id) { /* FNV-1a: one short number to compare */
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < DIST_ID_BYTES; i++) h = (h ^ id[i]) * 1099511628211ull;
    return h;
}

int dist_selftest_worker(Dist *d) {
    unsigned char id[DIST_ID_BYTES] = {0};
    char err[ERR_LEN];
    const int fail_rank = env_int("FUSEDGPT_TEST_FAIL_RANK", -1), fail_status = env_int("FUSEDGPT_TEST_FAIL_STATUS", 3);
    const char *when = getenv("FUSEDGPT_TEST_FAIL_WHEN");
    const int fail_after = when && strcmp(when, "after") == 0;
    if (fail_rank == d->rank && !fail_after) {
        fprintf(stderr, "rank %d: failing on purpose before the rendezvous (FUSEDGPT_TEST_FAIL_RANK)\n", d->rank);
        return fail_status;
    }
    if (d->rank == 0) {
        Rng rng;
        rng_seed(&rng, (uint64_t)time(NULL) ^ (uint64_t)getpid());
        for (int i = 0; i < DIST_ID_BYTES; i++) id[i] = (unsigned char)rng_next(&rng);
        printf("rank 0 brings id %016llx\n", (unsigned long long)id_hash(id));
    }
    if (dist_exchange_id(d, id, err) != 0 || dist_watchdog_start(d, err) != 0) {
        print_error("%s", err);
        return 1;
    }
    printf("rank %d of %d: id %016llx, %d host threads\n", d->rank, d->world, (unsigned long long)id_hash(id),
           omp_get_max_threads());
    fflush(stdout);
    if (fail_rank == d->rank) {
        fprintf(stderr, "rank %d: failing on purpose after the rendezvous (FUSEDGPT_TEST_FAIL_RANK)\n", d->rank);
        return fail_status; /* no DONE: the master sees this rank stop without finishing */
    }
    if (getenv("FUSEDGPT_TEST_WAIT_STOP")) { /* as if training: a stop signal ends it after a "step" */
        stop_request_install("this rank stops");
        printf("rank %d waits for a stop\n", d->rank);
        fflush(stdout);
        for (int waited = 0; !stop_request_signal() && waited < 3000; waited++) {
            struct timespec ts = {0, 10 * 1000000L};
            nanosleep(&ts, NULL);
        }
        const int sig = stop_request_signal();
        printf("rank %d stops on %s\n", d->rank, sig ? stop_request_name(sig) : "nothing (30 s passed)");
        dist_finish(d);
        return sig ? stop_request_exit_status(sig) : 1;
    }
    if (fail_rank >= 0) { /* (a rank outside the world: everyone waits, for tests that kill one) */
        /* as if blocked in a collective with the failed rank: only the watchdog can end this */
        struct timespec ts = {120, 0};
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
        }
        print_error("rank %d: still running 120 s after rank %d failed; the watchdog did not stop it",
                    d->rank, fail_rank);
        return 1;
    }
    dist_finish(d);
    return 0;
}
