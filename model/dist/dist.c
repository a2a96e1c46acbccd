/* model/dist/dist.c - the launcher of data-parallel training and, on node 0, the rendezvous server
 * (see dist.h for the story, dist_wire.h for the messages, dist_worker.c for the worker's side).
 *
 * The launcher is one poll() loop: it accepts and reads the workers' connections (node 0), reaps
 * its own workers (waitpid WNOHANG, every 50 ms), and decides when the run is over: every rank said
 * DONE and every local worker exited 0 (status 0), or one rank failed (status 1). */
#include "common/err.h"
#include "model/dist/dist.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/stop_request.h"
#include "model/dist/dist_wire.h"

/* After a failure, how long the other local workers get to stop through their own watchdogs (they
 * then say which rank they stopped for) before the launcher sends SIGTERM. */
#define GRACE_SECONDS 15
#define STOPPED_GRACE_SECONDS 1.0 /* see reap() */

/* SIGCHLD writes a byte here, so that the poll loop wakes the moment a worker ends: the first
 * worker to fail is then reaped before the ones its failure makes stop. */
static int child_pipe[2] = {-1, -1};

static void on_sigchld(int sig) {
    (void)sig;
    int saved = errno;
    char one = 1;
    if (write(child_pipe[1], &one, 1) < 0) { /* full: a wakeup is pending anyway */
    }
    errno = saved;
}

/* SIGINT or SIGTERM at the launcher: the workers are asked to stop after their step (they save a
 * checkpoint; common/stop_request.h); a repeat STOP_REPEAT_SECONDS or more later stops them at once. */
static volatile sig_atomic_t stop_repeated;

static void on_stop_signal(int sig) {
    int saved = errno;
    if (stop_request_note(sig) == STOP_REPEATED) stop_repeated = 1;
    char one = 1;
    if (write(child_pipe[1], &one, 1) < 0) { /* full: a wakeup is pending anyway */
    }
    errno = saved;
}

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Stops every worker still running, at once: SIGKILL (a worker in training takes SIGTERM as a
 * request to stop after its step, which one stuck in a collective never reaches). */
static void stop_workers(pid_t *pids, int n) {
    for (int i = 0; i < n; i++)
        if (pids[i] > 0) kill(pids[i], SIGKILL);
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

typedef struct {
    int fd;   /* -1: closed (or a free slot when rank is -1) */
    int rank; /* -1 until its HELLO */
    int node_rank, done;
    char host[WIRE_HOST_LEN];
    size_t have; /* bytes of msg received so far */
    WireMsg msg;
} Conn;

typedef struct {
    /* this node's workers: local rank r is rank base + r */
    int gpus, base, alive;
    pid_t pids[DIST_MAX_GPUS];
    char host[WIRE_HOST_LEN];
    /* the rendezvous, node 0 only (listen_fd -1 elsewhere) */
    int listen_fd, world, wait_s;
    Conn *conns;
    int nconns;
    int *by_rank; /* rank -> index in conns, -1 until it joins */
    int joined, done, id_sent;
    unsigned char id[DIST_ID_BYTES];
    double join_deadline;
    /* a failure stops the run; the local workers get until grace_end to stop by themselves */
    int failed;
    double grace_end;
    /* the first local worker that stopped because of a failure elsewhere, -1 while none */
    int stopped_rank;
    double stopped_deadline;
    int usage_error; /* the local worker that failed the run exited with 2 (bad flag or input) */
    int stop_status;  /* a local worker stopped on request (its exit status), 0 while none */
    int killed_by_stop; /* a local worker died of the stop signal passed on (before its training loop) */
    int stop_passed;  /* this launcher's stop signal went to its workers */
} Launcher;

/* Sends ABORT to every rank still working, except the one that failed. */
static void abort_all(Launcher *L, int failed_rank, const char *failed_host, const char *text) {
    WireMsg m = wire_msg(MSG_ABORT, failed_rank, L->world, 0);
    snprintf(m.host, sizeof m.host, "%s", failed_host ? failed_host : "?");
    snprintf(m.text, sizeof m.text, "%s", text ? text : "");
    for (int i = 0; i < L->nconns; i++) {
        Conn *c = &L->conns[i];
        if (c->fd >= 0 && c->rank >= 0 && c->rank != failed_rank && !c->done) wire_send(c->fd, &m);
    }
}

/* The run failed (the caller printed why): ABORT the other ranks, start the grace period. */
static void fail(Launcher *L, int rank, const char *host, const char *text) {
    if (L->failed) return;
    L->failed = 1;
    L->grace_end = wire_now() + GRACE_SECONDS;
    if (L->listen_fd >= 0) abort_all(L, rank, host, text);
}

static void report_exit(int rank, int st) {
    if (WIFSIGNALED(st) && stop_request_signal() && WTERMSIG(st) == stop_request_signal())
        fprintf(stderr, "launcher: rank %d ended on %s (before training began, or on the signal's repeat); "
                "stopping the other ranks\n", rank, stop_request_name(stop_request_signal()));
    else if (WIFSIGNALED(st))
        print_error("rank %d was killed by signal %d; stopping the other ranks", rank, WTERMSIG(st));
    else
        print_error("rank %d exited with status %d; stopping the other ranks", rank, WEXITSTATUS(st));
}

/* Collects the local workers that ended; one that failed on its own fails the run. A worker that
 * stopped because another rank failed (DIST_EXIT_STOPPED) is not the cause: if the cause is a local
 * worker, it ended first but its exit can be collected a poll later, so the stopped one is named
 * only when no such exit turns up within STOPPED_GRACE_SECONDS. */
static void reap(Launcher *L) {
    for (int i = 0; i < L->gpus; i++) {
        int st;
        if (L->pids[i] <= 0 || waitpid(L->pids[i], &st, WNOHANG) != L->pids[i]) continue;
        L->pids[i] = 0;
        L->alive--;
        if (WIFEXITED(st) && WEXITSTATUS(st) == 0) continue;
        /* stopped on request after a step, its checkpoint written: not a failure */
        if (WIFEXITED(st) && (WEXITSTATUS(st) == stop_request_exit_status(SIGINT) ||
                              WEXITSTATUS(st) == stop_request_exit_status(SIGTERM))) {
            if (!L->stop_status) L->stop_status = WEXITSTATUS(st);
            continue;
        }
        if (WIFEXITED(st) && WEXITSTATUS(st) == DIST_EXIT_STOPPED) {
            if (L->stopped_rank < 0) {
                L->stopped_rank = L->base + i;
                L->stopped_deadline = wire_now() + STOPPED_GRACE_SECONDS;
            }
            continue;
        }
        if (WIFSIGNALED(st) && stop_request_signal() && WTERMSIG(st) == stop_request_signal()) L->killed_by_stop = 1;
        if (!L->failed) {
            report_exit(L->base + i, st);
            L->usage_error = WIFEXITED(st) && WEXITSTATUS(st) == 2;
            fail(L, L->base + i, L->host, NULL);
        }
    }
    if (!L->failed && L->stopped_rank >= 0 && wire_now() >= L->stopped_deadline) {
        print_error("rank %d stopped after a failure elsewhere; stopping the other ranks",
                    L->stopped_rank);
        fail(L, L->stopped_rank, L->host, NULL);
    }
}

/* ---- the rendezvous server ---- */

static int server_open(Launcher *L, const char *master) {
    int port = 0;
    char host[256];
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    if (master && master[0]) {
        if (dist_parse_master(master, host, sizeof host, &port) != 0) {
            print_error("--master expects HOST:PORT, got '%s'", master);
            return -1;
        }
        a.sin_addr.s_addr = htonl(INADDR_ANY); /* the other nodes reach us through HOST */
    } else {
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK); /* one node: nobody else needs to reach us */
    }
    a.sin_port = htons((uint16_t)port);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
    if (fd < 0) {
        print_error("cannot create the rendezvous socket: %s", strerror(errno));
        return -1;
    }
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one); /* a port left in TIME_WAIT is free */
    if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(fd, SOMAXCONN) != 0) {
        if (errno == EADDRINUSE)
            print_error("--master port %d is in use on this host (pick another port)", port);
        else
            print_error("cannot listen on port %d for the rendezvous: %s", port, strerror(errno));
        close(fd);
        return -1;
    }
    socklen_t len = sizeof a;
    getsockname(fd, (struct sockaddr *)&a, &len);
    L->listen_fd = fd;
    return ntohs(a.sin_port);
}

static void conn_close(Conn *c) {
    if (c->fd >= 0) close(c->fd);
    c->fd = -1;
}

static void server_accept(Launcher *L) {
    int fd = accept4(L->listen_fd, NULL, NULL, SOCK_CLOEXEC);
    if (fd < 0) return;
    int slot = -1;
    for (int i = 0; i < L->nconns && slot < 0; i++)
        if (L->conns[i].fd < 0 && L->conns[i].rank < 0) slot = i;
    if (slot < 0) { /* more connections than ranks, none of them joined: not ours */
        close(fd);
        return;
    }
    wire_tune_socket(fd);
    Conn *c = &L->conns[slot];
    memset(c, 0, sizeof *c);
    c->fd = fd;
    c->rank = -1;
}

/* Comma-separated ranges of the ranks that have not joined: "ranks 2-3, 6". */
static void missing_ranks(const Launcher *L, char *out, size_t n) {
    size_t len = 0;
    int count = 0;
    out[0] = 0;
    for (int r = 0; r < L->world; r++) {
        if (L->by_rank[r] >= 0) continue;
        int e = r;
        while (e + 1 < L->world && L->by_rank[e + 1] < 0) e++;
        count += e - r + 1;
        if (len + 32 < n)
            len += (size_t)snprintf(out + len, n - len, "%s%d", len ? ", " : "", r);
        if (e > r && len + 32 < n) len += (size_t)snprintf(out + len, n - len, "-%d", e);
        r = e;
    }
    char tmp[512];
    snprintf(tmp, sizeof tmp, "%s %s", count == 1 ? "rank" : "ranks", out);
    snprintf(out, n, "%s", tmp);
}

static void server_hello(Launcher *L, Conn *c, const WireMsg *m) {
    char why[WIRE_TEXT_LEN];
    if (L->failed) { /* a late joiner of a run that already failed */
        WireMsg a = wire_msg(MSG_ABORT, -1, L->world, 0);
        snprintf(a.text, sizeof a.text, "the run failed before rank %d joined (see node 0's error)", m->rank);
        wire_send(c->fd, &a);
        conn_close(c);
        return;
    }
    why[0] = 0;
    if (m->world != L->world || m->rank < 0 || m->rank >= L->world)
        snprintf(why, sizeof why,
                 "rank %d (host %s, node %d) was started for a world of %d ranks, but node 0 (host %s) has %d; start "
                 "every node with the same --nodes and -g",
                 m->rank, m->host, m->node_rank, m->world, L->host, L->world);
    else if (L->by_rank[m->rank] >= 0) {
        const Conn *o = &L->conns[L->by_rank[m->rank]];
        snprintf(why, sizeof why,
                 "rank %d joined twice: from host %s (node %d) and from host %s (node %d); give every node its own "
                 "--node-rank",
                 m->rank, o->host, o->node_rank, m->host, m->node_rank);
    }
    if (why[0]) {
        print_error("%s", why);
        WireMsg r = wire_msg(MSG_REJECT, m->rank, L->world, 0);
        snprintf(r.text, sizeof r.text, "%s", why);
        wire_send(c->fd, &r);
        conn_close(c);
        fail(L, -1, NULL, why);
        return;
    }
    c->rank = m->rank;
    c->node_rank = m->node_rank;
    snprintf(c->host, sizeof c->host, "%s", m->host);
    L->by_rank[m->rank] = (int)(c - L->conns);
    L->joined++;
    if (m->rank == 0) memcpy(L->id, m->id, DIST_ID_BYTES);
    if (L->joined == L->world) { /* rank 0 is among them, so the id is here */
        WireMsg idm = wire_msg(MSG_ID, -1, L->world, 0);
        memcpy(idm.id, L->id, DIST_ID_BYTES);
        for (int r = 0; r < L->world; r++) wire_send(L->conns[L->by_rank[r]].fd, &idm);
        L->id_sent = 1;
    }
}

/* A joined rank's connection ended before DONE: that rank is gone. A local worker's exit status
 * says more than the socket, so wait briefly for it. */
static void server_lost(Launcher *L, Conn *c) {
    int local = c->rank - L->base;
    if (local >= 0 && local < L->gpus)
        for (int waited = 0; waited < 500 && L->pids[local] > 0 && !L->failed; waited += 10) {
            sleep_ms(10);
            reap(L);
        }
    if (L->failed) return;
    print_error("rank %d (host %s) stopped without finishing; stopping the other ranks", c->rank,
                c->host);
    fail(L, c->rank, c->host, NULL);
}

static void server_read(Launcher *L, Conn *c) {
    ssize_t k = recv(c->fd, (char *)&c->msg + c->have, sizeof c->msg - c->have, MSG_DONTWAIT);
    if (k < 0 && (errno == EAGAIN || errno == EINTR)) return;
    if (k <= 0) { /* EOF, or a reset: the same thing here */
        conn_close(c);
        if (c->rank >= 0 && !c->done) server_lost(L, c);
        return;
    }
    c->have += (size_t)k;
    if (c->have < sizeof c->msg) return;
    c->have = 0;
    WireMsg m = c->msg;
    if (wire_decode(&m) != 0) { /* not one of ours (a port scanner, another program) */
        conn_close(c);
        if (c->rank >= 0 && !c->done) server_lost(L, c);
        return;
    }
    if (c->rank < 0) {
        if (m.type == MSG_HELLO)
            server_hello(L, c, &m);
        else
            conn_close(c);
    } else if (m.type == MSG_DONE && !c->done) {
        c->done = 1;
        L->done++;
    } else if (m.type == MSG_FAILED && !L->failed) {
        print_error("rank %d (host %s) failed: %s; stopping the other ranks", c->rank, c->host, m.text);
        fail(L, c->rank, c->host, NULL);
    }
}

/* Waits at most timeout_ms for a worker to end or (node 0) a message, and serves the rendezvous. */
static void launcher_poll(Launcher *L, int timeout_ms) {
    struct pollfd p[2 + 2 * DIST_MAX_WORLD + 16];
    int idx[2 + 2 * DIST_MAX_WORLD + 16], n = 0;
    p[n] = (struct pollfd){child_pipe[0], POLLIN, 0};
    idx[n++] = -2;
    if (L->listen_fd >= 0) {
        p[n] = (struct pollfd){L->listen_fd, POLLIN, 0};
        idx[n++] = -1;
    }
    for (int i = 0; i < L->nconns; i++)
        if (L->conns[i].fd >= 0) {
            p[n] = (struct pollfd){L->conns[i].fd, POLLIN, 0};
            idx[n++] = i;
        }
    if (poll(p, (nfds_t)n, timeout_ms) <= 0) return;
    if (p[0].revents) { /* a worker ended: reap it before reading what the others say about it */
        char buf[64];
        while (read(child_pipe[0], buf, sizeof buf) > 0) {
        }
        reap(L);
    }
    for (int j = 1; j < n; j++) {
        if (!p[j].revents) continue;
        if (idx[j] == -1)
            server_accept(L);
        else if (L->conns[idx[j]].fd == p[j].fd)
            server_read(L, &L->conns[idx[j]]);
    }
}

static void server_check_deadline(Launcher *L) {
    if (L->failed || L->id_sent || wire_now() < L->join_deadline) return;
    char missing[400], text[WIRE_TEXT_LEN];
    missing_ranks(L, missing, sizeof missing);
    fprintf(stderr,
            "error: only %d of %d ranks joined within %d s (missing: %s); start every node with the same --nodes "
            "and --master\n",
            L->joined, L->world, L->wait_s, missing);
    snprintf(text, sizeof text, "only %d of %d ranks joined within %d s (missing: %s)", L->joined, L->world,
             L->wait_s, missing);
    fail(L, -1, NULL, text);
}

/* ---- the launcher ---- */

/* The host threads each worker's OpenMP regions get (the checkpoints' copies and reads): this
 * host's cores shared among its workers, unless OMP_NUM_THREADS says otherwise. Each worker taking
 * every core would run G times as many threads as cores in a checkpoint that all ranks make at once. */
static int worker_host_threads(int gpus) {
    cpu_set_t cpus;
    int cores = sched_getaffinity(0, sizeof cpus, &cpus) == 0 ? CPU_COUNT(&cpus) : (int)sysconf(_SC_NPROCESSORS_ONLN);
    return cores / gpus > 1 ? cores / gpus : 1;
}

int dist_launch(char **argv, int gpus, int nodes, int node_rank, const char *master) {
    if (gpus < 1 || gpus > DIST_MAX_GPUS) {
        print_error("-g/--gpus %d is out of range (1..%d)", gpus, DIST_MAX_GPUS);
        return 2;
    }
    if (nodes < 1 || (long long)nodes * gpus > DIST_MAX_WORLD || node_rank < 0 || node_rank >= nodes) {
        print_error("--nodes %d --node-rank %d -g %d is out of range (at most %d ranks in all)", nodes,
                    node_rank, gpus, DIST_MAX_WORLD);
        return 2;
    }
    Launcher L;
    memset(&L, 0, sizeof L);
    L.gpus = gpus;
    L.base = node_rank * gpus;
    L.world = nodes * gpus;
    L.listen_fd = -1;
    L.stopped_rank = -1;
    L.wait_s = wire_wait_seconds();
    if (gethostname(L.host, sizeof L.host - 1) != 0) snprintf(L.host, sizeof L.host, "?");

    char worker_master[300];
    if (node_rank == 0) {
        int port = server_open(&L, master);
        if (port < 0) return 1;
        /* our own workers reach the server through the loopback, whatever HOST is */
        snprintf(worker_master, sizeof worker_master, "127.0.0.1:%d", port);
        L.nconns = 2 * L.world + 16;
        L.conns = calloc((size_t)L.nconns, sizeof *L.conns);
        L.by_rank = malloc((size_t)L.world * sizeof *L.by_rank);
        if (!L.conns || !L.by_rank) {
            print_error("out of host memory for the rendezvous");
            return 1;
        }
        for (int i = 0; i < L.nconns; i++) L.conns[i].fd = L.conns[i].rank = -1;
        for (int r = 0; r < L.world; r++) L.by_rank[r] = -1;
        L.join_deadline = wire_now() + L.wait_s;
        struct rlimit rl; /* one descriptor per rank */
        if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < (rlim_t)L.nconns + 64) {
            rl.rlim_cur = rl.rlim_max < (rlim_t)L.nconns + 64 ? rl.rlim_max : (rlim_t)L.nconns + 64;
            setrlimit(RLIMIT_NOFILE, &rl);
        }
    } else {
        snprintf(worker_master, sizeof worker_master, "%s", master);
    }

    if (child_pipe[0] < 0 && pipe2(child_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
        print_error("cannot create the launcher's pipe: %s", strerror(errno));
        return 1;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigchld;
    sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;
    sigaction(SIGCHLD, &sa, NULL); /* workers get the default back at exec */
    stop_request_catch(SIGINT, on_stop_signal);
    stop_request_catch(SIGTERM, on_stop_signal);

    pid_t launcher = getpid();
    char host_threads[16];
    snprintf(host_threads, sizeof host_threads, "%d", worker_host_threads(gpus));
    fflush(stdout);
    fflush(stderr);
    /* a stop signal waits until every worker exists: one passed on between a worker's fork and its
     * exec would reach the launcher's handler in the child and be lost there */
    sigset_t stops, before_fork;
    sigemptyset(&stops);
    sigaddset(&stops, SIGINT);
    sigaddset(&stops, SIGTERM);
    sigprocmask(SIG_BLOCK, &stops, &before_fork);
    for (int r = 0; r < gpus; r++) {
        pid_t pid = fork();
        if (pid < 0) {
            print_error("cannot start worker %d: %s", L.base + r, strerror(errno));
            sigprocmask(SIG_SETMASK, &before_fork, NULL);
            stop_workers(L.pids, r);
            return 1;
        }
        if (pid == 0) {
            /* A worker must not outlive its launcher (killed launcher -> no orphaned GPU jobs). */
            prctl(PR_SET_PDEATHSIG, SIGTERM);
            /* the stop signals as a program starts with them (caught ones back to the default, ignored
             * ones left so), then unblocked: one that came since fork acts now */
            for (int k = 0; k < 2; k++) {
                const int sig = k ? SIGTERM : SIGINT;
                struct sigaction now;
                if (sigaction(sig, NULL, &now) == 0 && now.sa_handler != SIG_IGN) signal(sig, SIG_DFL);
            }
            sigprocmask(SIG_SETMASK, &before_fork, NULL);
            if (getppid() != launcher) _exit(1);
            char value[32];
            snprintf(value, sizeof value, "%d", L.base + r);
            setenv("FUSEDGPT_RANK", value, 1);
            snprintf(value, sizeof value, "%d", r);
            setenv("FUSEDGPT_LOCAL_RANK", value, 1);
            snprintf(value, sizeof value, "%d", L.world);
            setenv("FUSEDGPT_WORLD_SIZE", value, 1);
            snprintf(value, sizeof value, "%d", node_rank);
            setenv("FUSEDGPT_NODE_RANK", value, 1);
            setenv("FUSEDGPT_MASTER", worker_master, 1);
            const char *threads = getenv("OMP_NUM_THREADS");
            if (!threads || !*threads) setenv("OMP_NUM_THREADS", host_threads, 1);
            execv("/proc/self/exe", argv);
            print_error("worker %d cannot start %s: %s", L.base + r, argv[0], strerror(errno));
            _exit(127);
        }
        L.pids[r] = pid;
        L.alive++;
    }
    sigprocmask(SIG_SETMASK, &before_fork, NULL);

    int status;
    for (;;) {
        reap(&L); /* also every 50 ms: a signal can be missed between reap and poll */
        launcher_poll(&L, 50);
        if (L.listen_fd >= 0) server_check_deadline(&L);
        if (stop_request_signal() && !L.stop_passed) {
            for (int i = 0; i < gpus; i++)
                if (L.pids[i] > 0) kill(L.pids[i], stop_request_signal());
            L.stop_passed = 1;
        }
        if (stop_repeated) {
            stop_workers(L.pids, gpus);
            status = stop_request_exit_status(stop_request_signal());
            break;
        }
        if (!L.failed && L.alive == 0 && L.stopped_rank < 0 && (L.listen_fd < 0 || L.done == L.world)) {
            status = L.stop_status ? L.stop_status : 0;
            break;
        }
        if (L.failed && (L.alive == 0 || wire_now() >= L.grace_end)) {
            stop_workers(L.pids, gpus);
            /* a worker the stop signal ended stopped as asked; any other failure is one */
            status = L.usage_error ? 2 : L.killed_by_stop ? stop_request_exit_status(stop_request_signal()) : 1;
            break;
        }
    }
    for (int i = 0; i < L.nconns; i++) conn_close(&L.conns[i]);
    if (L.listen_fd >= 0) close(L.listen_fd);
    free(L.by_rank);
    free(L.conns);
    return status;
}
