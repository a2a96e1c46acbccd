/* model/dist/dist_nccl.cu - the NCCL side of data parallelism: per worker one communicator for
 * reductions and one whose gathers the copy engines drive (dist.h), gradient averaging, and scalar
 * averaging for the printed losses. */
#include <nccl.h>
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 28, 0)
#include <nccl_device.h>
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "kernels/cuda_check.h"
#include "model/dist/dist.h"

static_assert(sizeof(ncclUniqueId) == DIST_ID_BYTES, "DIST_ID_BYTES must match ncclUniqueId");

static void nccl_check_impl(ncclResult_t r, const char *what, const char *file, int line) {
    if (r != ncclSuccess) {
        fprintf(stderr, "error: NCCL call %s failed at %s:%d: %s\n", what, file, line, ncclGetErrorString(r));
        exit(1);
    }
}
#define NCCL_CHECK(call) nccl_check_impl((call), #call, __FILE__, __LINE__)

/* NCCL 2.28 moves an all-gather between symmetric windows with the copy engines; an older NCCL
 * runs dist_allgather_copy with its kernels, on plain allocations. */
#define NCCL_HAS_COPY_ENGINES (NCCL_VERSION_CODE >= NCCL_VERSION(2, 28, 0))
#define MAX_EXCHANGED 4 /* buffers from dist_alloc_exchanged: ZeRO-1's bf16 weights and its gradients */

typedef struct {
    void *ptr;
#if NCCL_HAS_COPY_ENGINES
    ncclWindow_t window; /* NULL where NCCL could not register it: its kernels move that buffer */
#endif
} Exchanged;

typedef struct {
    ncclComm_t comm;
    /* CTA policy ZERO: gathers by the copy engines. comm itself until the first exchanged buffer
     * splits it off (and always before NCCL 2.28); read by the watchdog's thread, so set atomically */
    ncclComm_t copy;
    double *d_scalar;
    Exchanged exchanged[MAX_EXCHANGED];
} NcclState;

/* The watchdog's hooks (model/dist/dist_worker.c calls them from its own thread, which NCCL allows for
 * these two calls): abort the communicator so that collectives waiting on a dead peer return, and
 * report an error NCCL found in the background (a peer's connection closed, a timeout). */
static ncclComm_t copy_comm(const NcclState *s) {
    return __atomic_load_n(&s->copy, __ATOMIC_ACQUIRE);
}

static void nccl_abort_hook(void *ctx) {
    NcclState *s = (NcclState *)ctx;
    ncclComm_t copy = copy_comm(s);
    if (copy != s->comm) ncclCommAbort(copy);
    ncclCommAbort(s->comm);
}

static int comm_async_error(ncclComm_t comm, char *msg, size_t n) {
    ncclResult_t async = ncclSuccess, r = ncclCommGetAsyncError(comm, &async);
    if (r != ncclSuccess) {
        snprintf(msg, n, "ncclCommGetAsyncError: %s", ncclGetErrorString(r));
        return 1;
    }
    if (async == ncclSuccess || async == ncclInProgress) return 0;
    snprintf(msg, n, "%s (%s)", ncclGetErrorString(async), ncclGetLastError(comm));
    return 1;
}

static int nccl_async_error_hook(void *ctx, char *msg, size_t n) {
    NcclState *s = (NcclState *)ctx;
    ncclComm_t copy = copy_comm(s);
    return comm_async_error(s->comm, msg, n) || (copy != s->comm && comm_async_error(copy, msg, n));
}

extern "C" int dist_nccl_init(Dist *d, char *err) {
    int devices = 0;
    CUDA_CHECK(cudaGetDeviceCount(&devices));
    if (d->local_rank >= devices) {
        snprintf(err, ERR_LEN, "rank %d needs GPU %d but this host has %d", d->rank, d->local_rank, devices);
        return -1;
    }
    CUDA_CHECK(cudaSetDevice(d->local_rank));
    if (d->world == 1) return 0;
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    if (d->rank == 0) NCCL_CHECK(ncclGetUniqueId(&id));
    if (dist_exchange_id(d, (unsigned char *)&id, err) != 0) return -1;
    /* Watch from here on: a peer that dies inside ncclCommInitRank would otherwise block us in it
     * (without hooks yet, the watchdog just exits). */
    if (dist_watchdog_start(d, err) != 0) return -1;
    NcclState *s = (NcclState *)calloc(1, sizeof *s);
    if (!s) {
        snprintf(err, ERR_LEN, "out of host memory");
        return -1;
    }
    NCCL_CHECK(ncclCommInitRank(&s->comm, d->world, id, d->rank));
    s->copy = s->comm;
    CUDA_CHECK(cudaMalloc((void **)&s->d_scalar, DIST_MAX_SCALARS * sizeof(double)));
    d->nccl = s;
    dist_set_fault_hooks(d, nccl_abort_hook, nccl_async_error_hook, s);
    return 0;
}

extern "C" void dist_nccl_free(Dist *d) {
    NcclState *s = (NcclState *)d->nccl;
    if (!s) return;
    dist_set_fault_hooks(d, NULL, NULL, NULL); /* the watchdog must not touch a destroyed communicator */
    for (int i = 0; i < MAX_EXCHANGED; i++) dist_free_exchanged(d, s->exchanged[i].ptr);
    CUDA_CHECK(cudaFree(s->d_scalar));
    if (s->copy != s->comm) NCCL_CHECK(ncclCommDestroy(s->copy));
    NCCL_CHECK(ncclCommDestroy(s->comm));
    free(s);
    d->nccl = NULL;
}

/* values[0..n) reduced across ranks in place, in one collective (blocks). */
static void allreduce_values(const Dist *d, double *values, int n, ncclRedOp_t op) {
    NcclState *s = (NcclState *)d->nccl;
    if (!s) return;
    if (n < 1 || n > DIST_MAX_SCALARS) {
        fprintf(stderr, "error: %d host values to reduce, at most %d (%s:%d)\n", n, DIST_MAX_SCALARS, __FILE__, __LINE__);
        exit(1);
    }
    CUDA_CHECK(cudaMemcpy(s->d_scalar, values, n * sizeof(double), cudaMemcpyHostToDevice));
    NCCL_CHECK(ncclAllReduce(s->d_scalar, s->d_scalar, n, ncclFloat64, op, s->comm, 0));
    CUDA_CHECK(cudaMemcpy(values, s->d_scalar, n * sizeof(double), cudaMemcpyDeviceToHost));
}

extern "C" double dist_mean_scalar(const Dist *d, double value) {
    allreduce_values(d, &value, 1, ncclAvg);
    return value;
}

extern "C" void dist_mean_scalars(const Dist *d, double *values, int n) { allreduce_values(d, values, n, ncclAvg); }

extern "C" double dist_max_scalar(const Dist *d, double value) {
    allreduce_values(d, &value, 1, ncclMax);
    return value;
}

extern "C" int dist_one_nvlink_host(const Dist *d, int nodes) {
    if (!d->nccl) return 0;
    int linked = nodes == 1;
    for (int peer = 0; linked && peer < d->world; peer++) {
        if (peer == d->local_rank) continue;
        int access = 0, atomics = 0;
        CUDA_CHECK(cudaDeviceCanAccessPeer(&access, d->local_rank, peer));
        if (access) CUDA_CHECK(cudaDeviceGetP2PAttribute(&atomics, cudaDevP2PAttrNativeAtomicSupported, d->local_rank, peer));
        linked = access && atomics;
    }
    /* one rank that sees a slower link decides for all: every rank must reduce in the same mode */
    return dist_max_scalar(d, linked ? 0.0 : 1.0) == 0.0;
}

static ncclDataType_t nccl_type(DistType t) {
    switch (t) {
    case DIST_FLOAT32: return ncclFloat32;
    case DIST_BFLOAT16: return ncclBfloat16;
    case DIST_INT32: return ncclInt32;
    case DIST_FLOAT64: return ncclFloat64;
    }
    return ncclFloat32;
}

extern "C" void dist_allreduce_sum(const Dist *d, void *values, size_t n, DistType type, void *cuda_stream) {
    NcclState *s = (NcclState *)d->nccl;
    if (!s) return;
    NCCL_CHECK(ncclAllReduce(values, values, n, nccl_type(type), ncclSum, s->comm, (cudaStream_t)cuda_stream));
}

extern "C" void dist_reduce_scatter_sum(const Dist *d, const void *send, void *recv, size_t count, DistType type,
                                        void *cuda_stream) {
    NcclState *s = (NcclState *)d->nccl;
    if (!s) return;
    NCCL_CHECK(ncclReduceScatter(send, recv, count, nccl_type(type), ncclSum, s->comm, (cudaStream_t)cuda_stream));
}

extern "C" void dist_allgather(const Dist *d, const void *send, void *recv, size_t count, DistType type,
                               void *cuda_stream) {
    NcclState *s = (NcclState *)d->nccl;
    if (!s) return;
    NCCL_CHECK(ncclAllGather(send, recv, count, nccl_type(type), s->comm, (cudaStream_t)cuda_stream));
}

extern "C" size_t dist_type_bytes(DistType t) {
    switch (t) {
    case DIST_FLOAT32: return 4;
    case DIST_BFLOAT16: return 2;
    case DIST_INT32: return 4;
    case DIST_FLOAT64: return 8;
    }
    return 4;
}

extern "C" void dist_alltoall(const Dist *d, const void *send, const size_t *send_counts, void *recv,
                              size_t recv_count, size_t stride, DistType type, void *cuda_stream) {
    NcclState *s = (NcclState *)d->nccl;
    if (!s) return;
    const size_t step = stride * dist_type_bytes(type);
    /* a count of 0 is skipped on both sides: each rank computes every count alike */
    NCCL_CHECK(ncclGroupStart());
    for (int j = 0; j < d->world; j++) {
        if (j == d->rank) continue;
        if (send_counts[j])
            NCCL_CHECK(ncclSend((const char *)send + j * step, send_counts[j], nccl_type(type), j, s->comm,
                                (cudaStream_t)cuda_stream));
        if (recv_count)
            NCCL_CHECK(ncclRecv((char *)recv + j * step, recv_count, nccl_type(type), j, s->comm,
                                (cudaStream_t)cuda_stream));
    }
    NCCL_CHECK(ncclGroupEnd());
}

extern "C" void dist_allgather_parts(const Dist *d, void *buf, const size_t *counts, size_t part, DistType type,
                                     void *cuda_stream) {
    NcclState *s = (NcclState *)d->nccl;
    if (!s) return;
    const size_t step = part * dist_type_bytes(type);
    char *own = (char *)buf + d->rank * step;
    NCCL_CHECK(ncclGroupStart());
    for (int j = 0; j < d->world; j++) {
        if (j == d->rank) continue;
        if (counts[d->rank])
            NCCL_CHECK(ncclSend(own, counts[d->rank], nccl_type(type), j, s->comm, (cudaStream_t)cuda_stream));
        if (counts[j])
            NCCL_CHECK(ncclRecv((char *)buf + j * step, counts[j], nccl_type(type), j, s->comm,
                                (cudaStream_t)cuda_stream));
    }
    NCCL_CHECK(ncclGroupEnd());
}

extern "C" void *dist_alloc_exchanged(const Dist *d, size_t bytes, const char *what) {
    NcclState *s = (NcclState *)d->nccl;
    void *p = NULL;
    if (!s || !NCCL_HAS_COPY_ENGINES) {
        CUDA_CHECK(cudaMalloc(&p, bytes));
        return p;
    }
#if NCCL_HAS_COPY_ENGINES
    if (s->copy == s->comm) {
        /* the first exchanged buffer: every rank is here, in the same order (collective) */
        ncclComm_t copy;
        ncclConfig_t copy_config = NCCL_CONFIG_INITIALIZER;
        copy_config.CTAPolicy = NCCL_CTA_POLICY_ZERO;
        NCCL_CHECK(ncclCommSplit(s->comm, 0, d->rank, &copy, &copy_config));
        __atomic_store_n(&s->copy, copy, __ATOMIC_RELEASE);
    }
    int slot = 0;
    while (slot < MAX_EXCHANGED && s->exchanged[slot].ptr) slot++;
    if (slot == MAX_EXCHANGED) {
        fprintf(stderr, "error: internal: more than %d exchanged buffers\n", MAX_EXCHANGED);
        exit(1);
    }
    /* NCCL rounds the allocation up to its granularity, which the memory estimate does not count:
     * a run that just fits may fail here, and says so as the estimate would */
    const ncclResult_t allocated = ncclMemAlloc(&p, bytes);
    if (allocated != ncclSuccess) {
        fprintf(stderr, "error: NCCL cannot allocate %.0f MB of GPU memory (%s): the run does not fit this GPU; use a "
                        "smaller -b\n", bytes / 1e6, ncclGetErrorString(allocated));
        exit(1);
    }
    ncclWindow_t window = NULL;
    ncclResult_t r = ncclCommWindowRegister(s->copy, p, bytes, &window, NCCL_WIN_COLL_SYMMETRIC);
    if (r != ncclSuccess) {
        /* not fatal: NCCL's kernels do the work instead (ranks on several hosts, say) */
        if (d->rank == 0)
            fprintf(stderr, "note: NCCL cannot register %.0f MB (%s): %s\n", bytes / 1e6, ncclGetErrorString(r),
                    what);
        window = NULL;
    }
    s->exchanged[slot] = (Exchanged){p, window};
#endif
    return p;
}

extern "C" void dist_free_exchanged(const Dist *d, void *p) {
    NcclState *s = (NcclState *)d->nccl;
    if (!p) return;
    if (!s || !NCCL_HAS_COPY_ENGINES) { /* the backend frees its buffers before dist_nccl_free */
        CUDA_CHECK(cudaFree(p));
        return;
    }
#if NCCL_HAS_COPY_ENGINES
    for (int i = 0; i < MAX_EXCHANGED; i++)
        if (s->exchanged[i].ptr == p) {
            if (s->exchanged[i].window) NCCL_CHECK(ncclCommWindowDeregister(s->copy, s->exchanged[i].window));
            NCCL_CHECK(ncclMemFree(p));
            s->exchanged[i] = (Exchanged){NULL, NULL};
            return;
        }
#endif
    fprintf(stderr, "error: internal: %p is not an exchanged buffer\n", p);
    exit(1);
}

#if NCCL_HAS_COPY_ENGINES
static __global__ void peer_addresses_kernel(ncclWindow_t window, void **out, int n) {
    for (int j = 0; j < n; j++) out[j] = ncclGetPeerPointer(window, 0, j);
}
#endif

extern "C" int dist_peer_addresses(const Dist *d, const void *p, void **addresses, int n) {
    NcclState *s = (NcclState *)d->nccl;
    if (!s || n != d->world) return -1;
    int reachable = 0;
#if NCCL_HAS_COPY_ENGINES
    ncclWindow_t window = NULL;
    for (int i = 0; i < MAX_EXCHANGED; i++)
        if (s->exchanged[i].ptr == p) window = s->exchanged[i].window;
    /* every rank in the team whose memory loads and stores reach (then ncclGetPeerPointer's
     * arithmetic gives each one's address) */
    reachable = window && ncclTeamLsa(copy_comm(s)).nRanks == d->world;
    if (reachable) {
        void **d_out;
        CUDA_CHECK(cudaMalloc((void **)&d_out, (size_t)n * sizeof *d_out));
        peer_addresses_kernel<<<1, 1>>>(window, d_out, n);
        CUDA_CHECK(cudaGetLastError());
        CUDA_CHECK(cudaMemcpy(addresses, d_out, (size_t)n * sizeof *d_out, cudaMemcpyDeviceToHost));
        CUDA_CHECK(cudaFree(d_out));
    }
#endif
    /* one rank that cannot read them all decides for all; a team joined by PCIe only could load
     * them too, slower than NCCL's reduce-scatter, so NVLink is asked for as well (both collectives
     * run on every rank) */
    const int everyone = dist_max_scalar(d, reachable ? 0.0 : 1.0) == 0.0;
    const int nvlink = dist_one_nvlink_host(d, 1);
    return everyone && nvlink ? 0 : -1;
}

extern "C" void dist_allgather_copy(const Dist *d, const void *send, void *recv, size_t count, DistType type,
                                    void *cuda_stream) {
    NcclState *s = (NcclState *)d->nccl;
    if (!s) return;
    NCCL_CHECK(ncclAllGather(send, recv, count, nccl_type(type), s->copy, (cudaStream_t)cuda_stream));
}

extern "C" void dist_group_begin(const Dist *d) {
    if (d->nccl) NCCL_CHECK(ncclGroupStart());
}

extern "C" void dist_group_end(const Dist *d) {
    if (d->nccl) NCCL_CHECK(ncclGroupEnd());
}
