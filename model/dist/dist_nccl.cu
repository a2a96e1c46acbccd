/* model/dist/dist_nccl.cu - the NCCL side of data parallelism: one communicator per worker, gradient
 * averaging, and scalar averaging for the printed losses. */
#include <nccl.h>
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

typedef struct {
    ncclComm_t comm;
    double *d_scalar;
} NcclState;

/* The watchdog's hooks (model/dist/dist_worker.c calls them from its own thread, which NCCL allows for
 * these two calls): abort the communicator so that collectives waiting on a dead peer return, and
 * report an error NCCL found in the background (a peer's connection closed, a timeout). */
static void nccl_abort_hook(void *ctx) {
    ncclCommAbort(((NcclState *)ctx)->comm);
}

static int nccl_async_error_hook(void *ctx, char *msg, size_t n) {
    NcclState *s = (NcclState *)ctx;
    ncclResult_t async = ncclSuccess, r = ncclCommGetAsyncError(s->comm, &async);
    if (r != ncclSuccess) {
        snprintf(msg, n, "ncclCommGetAsyncError: %s", ncclGetErrorString(r));
        return 1;
    }
    if (async == ncclSuccess || async == ncclInProgress) return 0;
    snprintf(msg, n, "%s (%s)", ncclGetErrorString(async), ncclGetLastError(s->comm));
    return 1;
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
    CUDA_CHECK(cudaMalloc((void **)&s->d_scalar, sizeof(double)));
    d->nccl = s;
    dist_set_fault_hooks(d, nccl_abort_hook, nccl_async_error_hook, s);
    return 0;
}

extern "C" void dist_nccl_free(Dist *d) {
    NcclState *s = (NcclState *)d->nccl;
    if (!s) return;
    dist_set_fault_hooks(d, NULL, NULL, NULL); /* the watchdog must not touch a destroyed communicator */
    CUDA_CHECK(cudaFree(s->d_scalar));
    NCCL_CHECK(ncclCommDestroy(s->comm));
    free(s);
    d->nccl = NULL;
}

static double allreduce_scalar(const Dist *d, double value, ncclRedOp_t op) {
    NcclState *s = (NcclState *)d->nccl;
    if (!s) return value;
    CUDA_CHECK(cudaMemcpy(s->d_scalar, &value, sizeof value, cudaMemcpyHostToDevice));
    NCCL_CHECK(ncclAllReduce(s->d_scalar, s->d_scalar, 1, ncclFloat64, op, s->comm, 0));
    CUDA_CHECK(cudaMemcpy(&value, s->d_scalar, sizeof value, cudaMemcpyDeviceToHost));
    return value;
}

extern "C" double dist_mean_scalar(const Dist *d, double value) { return allreduce_scalar(d, value, ncclAvg); }
extern "C" double dist_max_scalar(const Dist *d, double value) { return allreduce_scalar(d, value, ncclMax); }

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

extern "C" void dist_group_begin(const Dist *d) {
    if (d->nccl) NCCL_CHECK(ncclGroupStart());
}

extern "C" void dist_group_end(const Dist *d) {
    if (d->nccl) NCCL_CHECK(ncclGroupEnd());
}
