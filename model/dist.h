/* model/dist.h - data parallelism across processes, one per GPU.
 *
 * `./train -g N` is the launcher: it starts N copies of itself (workers) with their rank in the
 * environment, waits for them, and if one fails it stops the others and fails naming that rank.
 * A worker learns its place from FUSEDGPT_RANK / FUSEDGPT_WORLD_SIZE / FUSEDGPT_LOCAL_RANK and
 * meets the others through a rendezvous folder (FUSEDGPT_RENDEZVOUS), where rank 0 publishes the
 * NCCL unique id (written to a temporary name, then renamed, so a reader never sees half of it).
 * A process started without those variables is a world of one. */
#ifndef FUSEDGPT_DIST_H
#define FUSEDGPT_DIST_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DIST_ID_BYTES 128      /* sizeof(ncclUniqueId) */
#define DIST_WAIT_SECONDS 60   /* longest a worker waits for rank 0's id */

typedef struct Dist {
    int rank, world, local_rank;
    char rendezvous[512];
    void *nccl; /* communicator state (model/dist_nccl.cu); NULL in a world of one */
} Dist;

/* Runs N workers of this program (argv as given) and waits. Returns the exit status for the
 * launcher: 0 when every worker succeeded, 1 when one failed (the others are stopped). */
int dist_launch(int argc, char **argv, int n);

/* Fills d from the environment (world of one when unset). 0, or -1 with a message in err. */
int dist_from_env(Dist *d, char *err);

/* Rank 0 publishes `bytes` (DIST_ID_BYTES) in the rendezvous folder; the others wait for them
 * (at most DIST_WAIT_SECONDS). 0, or -1 with a message in err. */
int dist_exchange_id(const Dist *d, unsigned char *bytes, char *err);

/* Test mode of the launcher (FUSEDGPT_TEST_LAUNCHER=1): each worker exchanges a random id through
 * the rendezvous and prints what it got, so tests check agreement without GPUs. Returns the
 * worker's exit status (FUSEDGPT_TEST_FAIL_RANK=r makes rank r fail before publishing). */
int dist_selftest_worker(const Dist *d);

/* ---- NCCL (model/dist_nccl.cu); all calls are no-ops in a world of one ---- */
/* Selects this rank's GPU and creates the communicator. 0, or -1 with a message in err. */
int dist_nccl_init(Dist *d, char *err);
void dist_nccl_free(Dist *d);
/* Average of one host value across ranks (blocks). */
double dist_mean_scalar(const Dist *d, double value);

/* ---- gradient and weight collectives (model/dist_nccl.cu), enqueued on a CUDA stream ---- */
typedef enum { DIST_FLOAT32, DIST_BFLOAT16, DIST_INT32, DIST_FLOAT64 } DistType;
/* In-place sum of n values across ranks. */
void dist_allreduce_sum(const Dist *d, void *values, size_t n, DistType type, void *cuda_stream);
/* send holds world·count fp32 values; recv (count) gets the sum over ranks of this rank's part. */
void dist_reduce_scatter_sum(const Dist *d, const float *send, float *recv, size_t count, void *cuda_stream);
/* recv (world·count values) gets every rank's send (count values) in rank order; send may be
 * recv + rank·count (in place). */
void dist_allgather(const Dist *d, const void *send, void *recv, size_t count, DistType type, void *cuda_stream);
/* Collectives between these two calls are launched as one (NCCL group). */
void dist_group_begin(const Dist *d);
void dist_group_end(const Dist *d);

#ifdef __cplusplus
}
#endif

#endif
