/* model/dist/dist.h - data parallelism across processes, one per GPU, on one host or several.
 *
 * Launch. `./train -g N` is the launcher of one host: it starts N copies of itself (workers), with
 * their place in the environment (FUSEDGPT_RANK, FUSEDGPT_WORLD_SIZE, FUSEDGPT_LOCAL_RANK,
 * FUSEDGPT_NODE_RANK, FUSEDGPT_MASTER), and waits for them. With `--nodes M --node-rank K --master
 * HOST:PORT` (or FUSEDGPT_NODES / FUSEDGPT_NODE_RANK / FUSEDGPT_MASTER) the same command runs on
 * each of M hosts: world = M·N ranks, rank = K·N + local rank, local rank = GPU. A process started
 * without those variables is a world of one.
 *
 * Rendezvous. Node 0's launcher listens on PORT on every address (on one host without --master:
 * 127.0.0.1 and a port the system picks) before it starts its workers, and serves the rendezvous
 * (model/dist/dist_wire.h) while it waits for them. Every worker connects (retrying for
 * DIST_WAIT_SECONDS, since the nodes start in any order) and says its rank, world and host; once
 * all ranks have joined, node 0's launcher sends each the NCCL unique id that rank 0 brought. A
 * rank missing after DIST_WAIT_SECONDS, a world that differs between nodes, a rank that joins
 * twice, or a port in use: an error naming it, and every launcher exits 1.
 *
 * Faults. The rendezvous connection stays open as a control channel. A worker that ends without
 * saying DONE (crash, kill, error exit) closes it; node 0's launcher then sends ABORT(rank) to
 * every other worker and fails naming the rank. In each worker a watchdog thread reads the channel
 * and polls NCCL's asynchronous error every second: on ABORT, on losing node 0's launcher, or on an
 * NCCL error (reported to the others through the master) it aborts the communicator (bounded by
 * alarm(10)) and exits 1, so ranks blocked inside a collective stop instead of hanging. A launcher
 * also watches its own workers (waitpid): one that fails is named, the others get a grace period to
 * stop through their watchdogs, then SIGTERM; workers die with their launcher (PR_SET_PDEATHSIG). */
#ifndef FUSEDGPT_DIST_H
#define FUSEDGPT_DIST_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DIST_ID_BYTES 128      /* sizeof(ncclUniqueId) */
#define DIST_WAIT_SECONDS 60   /* longest the rendezvous waits for every rank (env FUSEDGPT_RENDEZVOUS_TIMEOUT) */
#define DIST_MAX_GPUS 64       /* workers per launcher */
#define DIST_MAX_WORLD 1024    /* ranks in all */
#define DIST_EXIT_STOPPED 75   /* a worker's status when it stopped because another rank failed */

typedef struct Dist {
    int rank, world, local_rank, node_rank;
    char master[256]; /* HOST:PORT of node 0's launcher (the rendezvous) */
    void *nccl;       /* communicator state (model/dist/dist_nccl.cu); NULL in a world of one */
} Dist;

/* The launcher of one node: serves the rendezvous when node_rank is 0 (master NULL or "" on one
 * node: 127.0.0.1 and a free port), runs `gpus` workers of this program (argv as given) and waits.
 * Returns the exit status for the launcher: 0 when every rank finished, 1 when one failed or the
 * rendezvous did (the others are stopped), 2 for sizes out of range or when the failed worker of
 * this node exited with 2 (a bad flag or input, which the user fixes as for one GPU). */
int dist_launch(char **argv, int gpus, int nodes, int node_rank, const char *master);

/* Splits "HOST:PORT" (port 1..65535). 0, or -1 when s is not of that form. */
int dist_parse_master(const char *s, char *host, int host_len, int *port);

/* Fills d from the environment (world of one when unset). 0, or -1 with a message in err. */
int dist_from_env(Dist *d, char *err);

/* Joins the rendezvous at d->master: rank 0 brings `bytes` (DIST_ID_BYTES), every rank leaves with
 * them. Keeps the connection as this process's control channel. 0, or -1 with a message in err. */
int dist_exchange_id(Dist *d, unsigned char *bytes, char *err);

/* Starts the watchdog thread on the control channel (after dist_exchange_id). 0, or -1 with a
 * message in err. No-op in a world of one. */
int dist_watchdog_start(Dist *d, char *err);

/* What the watchdog calls: abort_hook(ctx) before it exits on a fault (NULL: just exit); every
 * second async_error(ctx, msg, n), which returns nonzero with a message when the communicator
 * failed. Set them once the communicator exists; clear them (NULLs) before destroying it: this
 * waits until the watchdog is not inside a hook. */
typedef void (*DistAbortHook)(void *ctx);
typedef int (*DistAsyncErrorHook)(void *ctx, char *msg, size_t n);
void dist_set_fault_hooks(Dist *d, DistAbortHook abort_hook, DistAsyncErrorHook async_error, void *ctx);

/* A worker that finished its work: stops the watchdog, tells node 0's launcher DONE, closes the
 * control channel. Without it, the end of the process counts as a failure of this rank. */
void dist_finish(Dist *d);

/* Test mode of the launcher (FUSEDGPT_TEST_LAUNCHER=1): each worker joins the rendezvous with a
 * random id, prints "rank R of W: id <hash>", starts its watchdog and finishes. With
 * FUSEDGPT_TEST_FAIL_RANK=r, rank r exits 3 (or FUSEDGPT_TEST_FAIL_STATUS) (FUSEDGPT_TEST_FAIL_WHEN=before the rendezvous, the
 * default, or after it) and the others sleep as if blocked in NCCL until their watchdog ends them.
 * Returns the worker's exit status. */
int dist_selftest_worker(Dist *d);

/* ---- NCCL (model/dist/dist_nccl.cu); all calls are no-ops in a world of one ---- */
/* Selects this rank's GPU and creates the communicator. 0, or -1 with a message in err. */
int dist_nccl_init(Dist *d, char *err);
void dist_nccl_free(Dist *d);
/* Average of one host value across ranks (blocks). */
double dist_mean_scalar(const Dist *d, double value);
/* The averages of n <= DIST_MAX_SCALARS host values in one collective (one wait, not n). */
#define DIST_MAX_SCALARS 8
void dist_mean_scalars(const Dist *d, double *values, int n);
/* Largest of one host value across ranks (blocks; exact, so ranks can check they agree). */
double dist_max_scalar(const Dist *d, double value);
/* 1 when all ranks run on one host (nodes == 1) and every rank's GPU reaches every other rank's
 * through peer access with native atomics: NVLink and NVSwitch give them, PCIe peer links as a rule
 * do not (no PCIe host was at hand to check). The same answer on every rank (a collective: every rank calls it).
 * 0 in a world of one. */
int dist_one_nvlink_host(const Dist *d, int nodes);

/* ---- gradient and weight collectives (model/dist/dist_nccl.cu), enqueued on a CUDA stream ---- */
typedef enum { DIST_FLOAT32, DIST_BFLOAT16, DIST_INT32, DIST_FLOAT64 } DistType;
size_t dist_type_bytes(DistType type);
/* In-place sum of n values across ranks. */
void dist_allreduce_sum(const Dist *d, void *values, size_t n, DistType type, void *cuda_stream);
/* send holds world·count values; recv (count) gets the sum over ranks of this rank's part (fp32
 * gradients, or the vocabulary-parallel token embedding's bf16 rows, of which one rank's is non-zero). */
void dist_reduce_scatter_sum(const Dist *d, const void *send, void *recv, size_t count, DistType type,
                             void *cuda_stream);
/* recv (world·count values) gets every rank's send (count values) in rank order; send may be
 * recv + rank·count (in place). */
void dist_allgather(const Dist *d, const void *send, void *recv, size_t count, DistType type, void *cuda_stream);
/* All-to-all of one round of the bf16 gradient wire, in one NCCL group: to every other rank j,
 * send_counts[j] values from send + j·stride; from every other rank i, recv_count values into
 * recv + i·stride (strides in values). This rank's own slot is left alone. */
void dist_alltoall(const Dist *d, const void *send, const size_t *send_counts, void *recv, size_t recv_count,
                   size_t stride, DistType type, void *cuda_stream);
/* In place, in one NCCL group: this rank's part, counts[rank] values at buf + rank·part, to every other
 * rank, and every other rank j's counts[j] values into buf + j·part. */
void dist_allgather_parts(const Dist *d, void *buf, const size_t *counts, size_t part, DistType type,
                          void *cuda_stream);
/* The copy engines' gathers. A second communicator (CTA policy ZERO) moves whole pieces with the
 * GPUs' copy engines instead of kernels where the buffers lie in symmetric windows (NCCL 2.28, the
 * GPUs of one NVLink domain), so the kernels beside a gather keep every SM; elsewhere NCCL runs the
 * same calls with its kernels, with the same results. */
/* Device memory those gathers (and the rank sum's loads) reach on every rank: NCCL's allocation,
 * registered as a symmetric window. Every rank allocates the same sizes in the same order
 * (collective); cudaMalloc in a world of one. what: the note's words where NCCL cannot register it
 * (what moves the buffer instead). Freed by dist_free_exchanged, or with the communicators. */
void *dist_alloc_exchanged(const Dist *d, size_t bytes, const char *what);
void dist_free_exchanged(const Dist *d, void *p);
/* Where this GPU reads every rank's copy of the exchanged buffer p (from dist_alloc_exchanged), in rank
 * order: for a peer, the address that maps its memory over NVLink. 0, or -1 where some rank's copy
 * cannot be read so (ranks on several hosts, GPUs joined by PCIe only, an NCCL before 2.28 or one
 * that gave p no window). The same answer on every rank (a collective). */
int dist_peer_addresses(const Dist *d, const void *p, void **addresses, int n);
/* dist_allgather by the copy engines; send and recv in memory from dist_alloc_exchanged. */
void dist_allgather_copy(const Dist *d, const void *send, void *recv, size_t count, DistType type,
                         void *cuda_stream);
/* Collectives between these two calls are launched as one (NCCL group, both communicators). */
void dist_group_begin(const Dist *d);
void dist_group_end(const Dist *d);

#ifdef __cplusplus
}
#endif

#endif
