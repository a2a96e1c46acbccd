/* The data-parallel launcher, rendezvous and watchdogs, without GPUs: `FUSEDGPT_TEST_LAUNCHER=1
 * ./train -g N [--nodes M --node-rank K --master HOST:PORT]` starts workers that join the TCP
 * rendezvous on the loopback and print the id they got ("rank R of W: id <hash>"). Several nodes
 * are several launchers on this host. A rank that fails must stop every other rank, quickly, with
 * an error naming it; a rendezvous that cannot complete must say why within its time limit. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/test.h"
#include "tests/test_util.h"

/* A TCP socket listening on a port the system picked, on every address; returns the fd, port in *port. */
static int listen_on_free_port(int *port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    socklen_t len = sizeof a;
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(fd, 4) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &len) != 0) {
        if (fd >= 0) close(fd);
        return -1;
    }
    *port = ntohs(a.sin_port);
    return fd;
}

/* A port nobody listens on now (the system's pick, released). */
static int free_port(void) {
    int port = 0, fd = listen_on_free_port(&port);
    if (fd >= 0) close(fd);
    return fd >= 0 ? port : 0;
}

/* Collects "rank r of W: id H" from out into ids[r]; returns how many ranks reported. */
static int collect_ids(const char *out, int world, char ids[][32]) {
    int n = 0;
    for (int r = 0; r < world; r++) {
        char key[48];
        snprintf(key, sizeof key, "rank %d of %d: id ", r, world);
        const char *p = out ? strstr(out, key) : NULL;
        if (p && sscanf(p + strlen(key), "%31[0-9a-f]", ids[r]) == 1) n++;
    }
    return n;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Two launchers, node 0 and node 1 of --nodes 2 on the loopback: their logs and exit statuses. */
typedef struct {
    char *log[2];
    int rc[2];
    double seconds0; /* until node 0's launcher ended */
} TwoNodes;

static void run_two_nodes(const char *gpus, int port, TwoNodes *t) {
    char args[256], path[2][600];
    int pid[2];
    for (int k = 1; k >= 0; k--) { /* node 1 first: its workers must wait for node 0 */
        snprintf(path[k], sizeof path[k], "%s/node%d.log", test_tmpdir(), k);
        snprintf(args, sizeof args, "-g %s --nodes 2 --node-rank %d --master 127.0.0.1:%d", gpus, k, port);
        pid[k] = spawn_train(args, path[k]);
    }
    double t0 = now_s();
    t->rc[0] = pid[0] > 0 ? wait_train(pid[0], 30) : -1;
    t->seconds0 = now_s() - t0;
    t->rc[1] = pid[1] > 0 ? wait_train(pid[1], 30) : -1;
    for (int k = 0; k < 2; k++) t->log[k] = read_text(path[k]);
}

static void free_two_nodes(TwoNodes *t) {
    free(t->log[0]);
    free(t->log[1]);
}

TEST(dist_launcher_workers_agree_on_the_id) {
    char *out = NULL;
    setenv("FUSEDGPT_TEST_LAUNCHER", "1", 1);
    int rc = run_train("-g 3", &out);
    unsetenv("FUSEDGPT_TEST_LAUNCHER");
    REQUIRE(out, "could not run ./train");
    CHECK(rc == 0, "launcher exit status %d: %s", rc, out);
    char ids[3][32] = {{0}};
    CHECK(collect_ids(out, 3, ids) == 3, "not every rank reported: %s", out);
    CHECK(ids[0][0] && !strcmp(ids[0], ids[1]) && !strcmp(ids[0], ids[2]), "ranks disagree: %s / %s / %s", ids[0],
          ids[1], ids[2]);
    /* ... on the id rank 0 brought, not merely on whatever the rendezvous handed out */
    const char *brought = strstr(out, "rank 0 brings id ");
    CHECK(brought && ids[0][0] && strncmp(brought + 17, ids[0], strlen(ids[0])) == 0, "rank 0 brought another id: %s",
          out);
    free(out);
}

/* How many host threads each of out's ranks 0..world-1 says it has; -1 where one did not say. */
static void collect_host_threads(const char *out, int world, int *threads) {
    for (int r = 0; r < world; r++) {
        char key[48];
        snprintf(key, sizeof key, "rank %d of %d: id ", r, world);
        const char *p = out ? strstr(out, key) : NULL;
        threads[r] = -1;
        if (p && sscanf(p + strlen(key), "%*s %d host threads", &threads[r]) != 1) threads[r] = -1;
    }
}

TEST(dist_workers_share_the_hosts_cores_unless_omp_num_threads_says_otherwise) {
    cpu_set_t cpus;
    REQUIRE(sched_getaffinity(0, sizeof cpus, &cpus) == 0, "sched_getaffinity failed");
    const int share = CPU_COUNT(&cpus) / 3 > 1 ? CPU_COUNT(&cpus) / 3 : 1;
    const char *before = getenv("OMP_NUM_THREADS");
    char *saved = before ? strdup(before) : NULL;
    /* unset, set, and set but empty (which OpenMP ignores: the share applies) */
    for (int k = 0; k < 3; k++) {
        const int given = k == 1;
        char *out = NULL;
        if (k == 0) unsetenv("OMP_NUM_THREADS");
        else setenv("OMP_NUM_THREADS", given ? "5" : "", 1);
        setenv("FUSEDGPT_TEST_LAUNCHER", "1", 1);
        int rc = run_train("-g 3", &out);
        unsetenv("FUSEDGPT_TEST_LAUNCHER");
        REQUIRE(out, "could not run ./train");
        CHECK(rc == 0, "launcher exit status %d: %s", rc, out);
        int threads[3];
        collect_host_threads(out, 3, threads);
        for (int r = 0; r < 3; r++)
            CHECK(threads[r] == (given ? 5 : share), "rank %d has %d host threads, expected %d: %s", r, threads[r],
                  given ? 5 : share, out);
        free(out);
    }
    if (saved) setenv("OMP_NUM_THREADS", saved, 1);
    else unsetenv("OMP_NUM_THREADS");
    free(saved);
}

TEST(dist_two_nodes_of_two_gpus_make_four_ranks_with_one_id) {
    setenv("FUSEDGPT_TEST_LAUNCHER", "1", 1);
    TwoNodes t;
    run_two_nodes("2", free_port(), &t);
    unsetenv("FUSEDGPT_TEST_LAUNCHER");
    REQUIRE(t.log[0] && t.log[1], "could not run ./train");
    CHECK(t.rc[0] == 0 && t.rc[1] == 0, "exit statuses %d / %d:\n%s\n%s", t.rc[0], t.rc[1], t.log[0], t.log[1]);
    char ids[4][32] = {{0}}, ids1[4][32] = {{0}};
    /* node 0 runs ranks 0-1, node 1 ranks 2-3 */
    collect_ids(t.log[0], 4, ids);
    collect_ids(t.log[1], 4, ids1);
    memcpy(ids[2], ids1[2], 32);
    memcpy(ids[3], ids1[3], 32);
    for (int r = 0; r < 4; r++)
        CHECK(ids[r][0] && !strcmp(ids[r], ids[0]), "rank %d has id '%s', rank 0 '%s':\n%s\n%s", r, ids[r], ids[0],
              t.log[0], t.log[1]);
    free_two_nodes(&t);
}

TEST(dist_one_gpu_per_node_still_goes_through_the_launcher) {
    setenv("FUSEDGPT_TEST_LAUNCHER", "1", 1);
    TwoNodes t;
    run_two_nodes("1", free_port(), &t);
    unsetenv("FUSEDGPT_TEST_LAUNCHER");
    REQUIRE(t.log[0] && t.log[1], "could not run ./train");
    CHECK(t.rc[0] == 0 && t.rc[1] == 0, "exit statuses %d / %d:\n%s\n%s", t.rc[0], t.rc[1], t.log[0], t.log[1]);
    char ids[2][32] = {{0}}, ids1[2][32] = {{0}};
    collect_ids(t.log[0], 2, ids);
    collect_ids(t.log[1], 2, ids1);
    CHECK(ids[0][0] && !strcmp(ids[0], ids1[1]), "ranks disagree: '%s' / '%s'", ids[0], ids1[1]);
    free_two_nodes(&t);
}

TEST(dist_launcher_fails_naming_the_rank_that_failed) {
    char *out = NULL;
    setenv("FUSEDGPT_TEST_LAUNCHER", "1", 1);
    /* rank 0 fails before joining: the others would wait for it, so the launcher must stop them */
    setenv("FUSEDGPT_TEST_FAIL_RANK", "0", 1);
    double t0 = now_s();
    int rc = run_train("-g 3", &out);
    double took = now_s() - t0;
    unsetenv("FUSEDGPT_TEST_FAIL_RANK");
    unsetenv("FUSEDGPT_TEST_LAUNCHER");
    REQUIRE(out, "could not run ./train");
    CHECK(rc == 1, "launcher exit status %d, expected 1: %s", rc, out);
    CHECK(strstr(out, "error: rank 0 exited with status 3; stopping the other ranks") != NULL,
          "the failed rank is not named: %s", out);
    CHECK(took < 10, "the launcher took %.1f s to give up", took);
    free(out);
}

TEST(dist_ctrl_c_at_the_launcher_reaches_every_worker_once_and_they_stop_as_asked) {
    /* the workers stand in for training ranks: they take the stop, "save", finish and exit 130;
     * the launcher passes its SIGINT on once, counts them as stopped, not failed, and then ends by
     * SIGINT itself, as a program Ctrl-C ended (a shell's loop stops there) */
    char log[700];
    snprintf(log, sizeof log, "%s/stop.log", test_tmpdir());
    setenv("FUSEDGPT_TEST_LAUNCHER", "1", 1);
    setenv("FUSEDGPT_TEST_WAIT_STOP", "1", 1);
    int pid = spawn_train("-g 2", log);
    unsetenv("FUSEDGPT_TEST_WAIT_STOP");
    unsetenv("FUSEDGPT_TEST_LAUNCHER");
    REQUIRE(pid > 0, "could not start ./train");
    const int ready = wait_for_log(log, "waits for a stop", 2, 20);
    kill(pid, SIGINT);
    int st = 0;
    const int ended = wait_train_status(pid, 30, &st);
    char *out = read_text(log);
    CHECK(ready, "the workers never got ready: %s", out ? out : "");
    CHECK(ended && WIFSIGNALED(st) && WTERMSIG(st) == SIGINT, "the launcher should end by SIGINT: ended %d, status %#x: %s",
          ended, st, out ? out : "");
    CHECK(out && strstr(out, "rank 0 stops on SIGINT") && strstr(out, "rank 1 stops on SIGINT") &&
              !strstr(out, "error:"),
          "each rank should stop once on the SIGINT passed on, with no error: %s", out ? out : "");
    free(out);
}

TEST(dist_launcher_passes_on_a_workers_bad_input_status) {
    /* a worker that stops on a bad flag or input (exit 2, e.g. a checkpoint that does not fit the
     * flags) makes the launcher exit 2 too, as one GPU would */
    char *out = NULL;
    setenv("FUSEDGPT_TEST_LAUNCHER", "1", 1);
    setenv("FUSEDGPT_TEST_FAIL_RANK", "1", 1);
    setenv("FUSEDGPT_TEST_FAIL_STATUS", "2", 1);
    int rc = run_train("-g 2", &out);
    unsetenv("FUSEDGPT_TEST_FAIL_STATUS");
    unsetenv("FUSEDGPT_TEST_FAIL_RANK");
    unsetenv("FUSEDGPT_TEST_LAUNCHER");
    REQUIRE(out, "could not run ./train");
    CHECK(rc == 2 && strstr(out, "error: rank 1 exited with status 2"), "exit %d: %s", rc, out);
    free(out);
}

/* Two nodes of two ranks each; rank fail_rank fails after the rendezvous while the others sleep as
 * if blocked in NCCL for 120 s, so only their watchdogs (ABORT from node 0's launcher) can end
 * them in time. */
static void run_two_nodes_with_a_failure(const char *fail_rank, TwoNodes *t) {
    setenv("FUSEDGPT_TEST_LAUNCHER", "1", 1);
    setenv("FUSEDGPT_TEST_FAIL_RANK", fail_rank, 1);
    setenv("FUSEDGPT_TEST_FAIL_WHEN", "after", 1);
    run_two_nodes("2", free_port(), t);
    unsetenv("FUSEDGPT_TEST_FAIL_WHEN");
    unsetenv("FUSEDGPT_TEST_FAIL_RANK");
    unsetenv("FUSEDGPT_TEST_LAUNCHER");
}

TEST(dist_failed_rank_on_node_1_stops_node_0_by_watchdog) {
    TwoNodes t;
    run_two_nodes_with_a_failure("3", &t);
    REQUIRE(t.log[0] && t.log[1], "could not run ./train");
    CHECK(t.rc[0] == 1 && t.seconds0 < 15, "node 0: exit %d after %.1f s:\n%s", t.rc[0], t.seconds0, t.log[0]);
    CHECK(strstr(t.log[0], "error: rank 3 (host ") && strstr(t.log[0], ") stopped without finishing; stopping the "
                                                                        "other ranks"),
          "node 0 does not name rank 3:\n%s", t.log[0]);
    CHECK(strstr(t.log[0], "error: rank 0: stopping because rank 3 failed") &&
              strstr(t.log[0], "error: rank 1: stopping because rank 3 failed"),
          "node 0's ranks were not stopped by their watchdogs:\n%s", t.log[0]);
    CHECK(t.rc[1] == 1 && strstr(t.log[1], "error: rank 3 exited with status 3") &&
              strstr(t.log[1], "error: rank 2: stopping because rank 3 failed"),
          "node 1: exit %d:\n%s", t.rc[1], t.log[1]);
    free_two_nodes(&t);
}

TEST(dist_node_whose_ranks_were_only_stopped_still_fails) {
    /* rank 0 (node 0) fails; node 1's ranks end only because node 0 told them to
     * (DIST_EXIT_STOPPED): node 1's launcher must still exit 1 and say why, not 0 */
    TwoNodes t;
    run_two_nodes_with_a_failure("0", &t);
    REQUIRE(t.log[0] && t.log[1], "could not run ./train");
    CHECK(t.rc[0] == 1 && strstr(t.log[0], "error: rank 0 exited with status 3"), "node 0: exit %d:\n%s", t.rc[0],
          t.log[0]);
    CHECK(t.rc[1] == 1 && strstr(t.log[1], "error: rank 2: stopping because rank 0 failed") &&
              strstr(t.log[1], "stopped after a failure elsewhere"),
          "node 1: exit %d:\n%s", t.rc[1], t.log[1]);
    free_two_nodes(&t);
}

TEST(dist_master_port_in_use_fails_at_once) {
    int port = 0, fd = listen_on_free_port(&port);
    REQUIRE(fd >= 0, "cannot listen on a free port");
    char args[128], *out = NULL, want[128];
    snprintf(args, sizeof args, "-g 2 --nodes 2 --node-rank 0 --master 127.0.0.1:%d", port);
    setenv("FUSEDGPT_TEST_LAUNCHER", "1", 1);
    double t0 = now_s();
    int rc = run_train(args, &out);
    double took = now_s() - t0;
    unsetenv("FUSEDGPT_TEST_LAUNCHER");
    close(fd);
    REQUIRE(out, "could not run ./train");
    snprintf(want, sizeof want, "error: --master port %d is in use on this host (pick another port)", port);
    CHECK(rc == 1 && strstr(out, want), "exit %d: %s", rc, out);
    CHECK(took < 5, "took %.1f s", took);
    free(out);
}

TEST(dist_node_that_never_shows_up_is_named_within_the_timeout) {
    char args[128], *out = NULL;
    snprintf(args, sizeof args, "-g 2 --nodes 2 --node-rank 0 --master 127.0.0.1:%d", free_port());
    setenv("FUSEDGPT_TEST_LAUNCHER", "1", 1);
    setenv("FUSEDGPT_RENDEZVOUS_TIMEOUT", "2", 1);
    double t0 = now_s();
    int rc = run_train(args, &out);
    double took = now_s() - t0;
    unsetenv("FUSEDGPT_RENDEZVOUS_TIMEOUT");
    unsetenv("FUSEDGPT_TEST_LAUNCHER");
    REQUIRE(out, "could not run ./train");
    CHECK(rc == 1 && strstr(out, "error: only 2 of 4 ranks joined within 2 s (missing: ranks 2-3); start every "
                                 "node with the same --nodes and --master"),
          "exit %d: %s", rc, out);
    CHECK(strstr(out, "error: rank 0: stopping: only 2 of 4 ranks joined"), "rank 0 was not told: %s", out);
    CHECK(took < 10, "took %.1f s", took);
    free(out);
}

TEST(dist_launch_flag_errors_name_the_flag) {
    static const struct {
        const char *args, *env, *want;
    } cases[] = {
        {"--nodes 2 --node-rank 2 --master 127.0.0.1:29500", NULL,
         "error: --node-rank 2 is out of range for --nodes 2 (0..1)"},
        {"--master nohostport", NULL, "error: --master expects HOST:PORT"},
        {"--master host:70000", NULL, "error: --master expects HOST:PORT"},
        {"--nodes 2", NULL, "error: --nodes 2 needs --master HOST:PORT"},
        {"--nodes 0", NULL, "error: --nodes must be positive"},
        /* a value from the environment: the error names the variable, which is what to change */
        {"", "FUSEDGPT_NODES=2", "error: FUSEDGPT_NODES (for --nodes) 2 needs --master HOST:PORT"},
        {"--nodes 2", "FUSEDGPT_NODE_RANK=3",
         "error: FUSEDGPT_NODE_RANK (for --node-rank) 3 is out of range for --nodes 2 (0..1)"},
        {"--nodes 2 --node-rank 2", "FUSEDGPT_NODE_RANK=1", "error: --node-rank 2 is out of range"},
        {"", "FUSEDGPT_MASTER=nohost", "error: FUSEDGPT_MASTER (for --master) expects HOST:PORT"},
        {"", "FUSEDGPT_NODE_RANK=x", "error: FUSEDGPT_NODE_RANK (for --node-rank) expects an integer, got 'x'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char args[256], *out = NULL;
        snprintf(args, sizeof args, "--device cpu -e tiny -x 1 %s", cases[i].args);
        char name[64] = "";
        if (cases[i].env) {
            snprintf(name, sizeof name, "%s", cases[i].env);
            *strchr(name, '=') = 0;
            setenv(name, strchr(cases[i].env, '=') + 1, 1);
        }
        int rc = run_train(args, &out);
        if (cases[i].env) unsetenv(name);
        int lines = 0;
        for (const char *p = out; p && *p; p++) lines += *p == '\n';
        CHECK(rc == 2 && out && strstr(out, cases[i].want) && lines == 1, "'%s' %s: exit %d: %s", cases[i].args,
              cases[i].env ? cases[i].env : "", rc, out);
        free(out);
    }
}

TEST(dist_worker_environment_errors_are_clear) {
    char *out = NULL;
    setenv("FUSEDGPT_RANK", "2", 1);
    setenv("FUSEDGPT_WORLD_SIZE", "2", 1);
    int rc = run_train("--device cpu -e tiny -x 1", &out);
    unsetenv("FUSEDGPT_RANK");
    unsetenv("FUSEDGPT_WORLD_SIZE");
    CHECK(rc == 2 && out && strstr(out, "inconsistent"), "exit %d: %s", rc, out);
    free(out);
}
