/* dev/bench/nccl_copy_engine.cu - what data parallelism's exchanges cost the compute that runs beside
 * them. NCCL's reduce-scatter and all-gather run as kernels that take SMs from the backward (the
 * multi-GPU entries of dev/RESULTS.md: a backward 1-2 ms longer under overlap). NCCL 2.28 can drive
 * all-to-all and all-gather with the copy engines instead (buffers in symmetric windows, a
 * communicator with CTA policy ZERO); a reduce-scatter is then an all-to-all of each rank's pieces
 * plus a sum in rank order on the receiver. Two reduce-scatters more: NCCL's own between buffers
 * registered as symmetric windows on a communicator of the default CTA policy (its symmetric
 * kernels), and the trainer's rank sum on one NVLink host (kernels/rank_sum.cu: each rank loads its
 * part of every rank's values through the window's peer addresses and sums them in rank order,
 * between two one-value all-reduces as barriers). This measures, per GPU, at ZeRO-1's sizes:
 *   - each exchange alone (ms, bus GB/s);
 *   - a stream of bf16 GEMMs (8192 x 8192 x 4096) and of a memory-bound pass (1 GiB in, 1 GiB out),
 *     alone and with the exchange repeated beside them on another stream: how much longer the
 *     compute takes is what overlapping the exchange would cost the step.
 *
 * usage: ./build/bench_nccl_copy_engine [MB of fp32 gradients]...   (default: 496 1148, GPT-2 124M at
 *        V = 50304 and 262144). One process, one thread per visible GPU (at least two).
 * Build: make build/bench_nccl_copy_engine */
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <nccl.h>
#include <nccl_device.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda_check.h"
#include "kernels/kernels.h"

#if NCCL_VERSION_CODE < NCCL_VERSION(2, 28, 0)
/* the copy-engine exchanges came with NCCL 2.28: an older one still builds `make all` */
int main(void) {
    fprintf(stderr, "error: this benchmark needs NCCL 2.28 or newer (its copy-engine exchanges); this build has %d.%d\n",
            NCCL_MAJOR, NCCL_MINOR);
    return 1;
}
#else

#define NCCL_CHECK(call)                                                                                    \
    do {                                                                                                    \
        ncclResult_t r_ = (call);                                                                           \
        if (r_ != ncclSuccess) {                                                                            \
            fprintf(stderr, "error: NCCL call %s failed at %s:%d: %s\n", #call, __FILE__, __LINE__,          \
                    ncclGetErrorString(r_));                                                                \
            exit(1);                                                                                        \
        }                                                                                                   \
    } while (0)
enum { OP_RS_SM, OP_RS_SYM, OP_RS_LOAD, OP_A2A_SM, OP_A2A_CE, OP_AG_SM, OP_AG_CE, N_OPS };
static const char *OP_NAME[N_OPS] = {"reduce-scatter fp32, kernels", "reduce-scatter fp32, symmetric",
                                     "reduce-scatter fp32, rank sum", "all-to-all fp32, kernels",
                                     "all-to-all fp32, copy engines", "all-gather bf16, kernels",
                                     "all-gather bf16, copy engines"};
enum { REPS = 4 };

typedef struct {
    int rank, world;
    ncclUniqueId id_sm, id_ce, id_sym;
    pthread_barrier_t *barrier;
    const double *mbs;
    int n_sizes;
} Worker;

static __global__ void scale_pass(const float *x, float *y, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        y[i] = 1.0001f * x[i] + 0.5f;
}

static __global__ void fill_rank_pattern(float *g, size_t n, int rank) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        g[i] = (float)(rank * 16 + (int)(i % 13));
}

typedef struct {
    cublasHandle_t blas;
    __nv_bfloat16 *a, *b, *c;
    float *x, *y;
    size_t xn;
} Compute;

/* count GEMMs (kind 0) or memory passes (kind 1) on stream s */
static void run_compute(Compute *c, int kind, int count, cudaStream_t s) {
    CUBLAS_CHECK(cublasSetStream(c->blas, s));
    const float one = 1.0f, zero = 0.0f;
    for (int i = 0; i < count; i++) {
        if (kind == 0)
            CUBLAS_CHECK(cublasGemmEx(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, 8192, 8192, 4096, &one, c->a, CUDA_R_16BF,
                                      4096, c->b, CUDA_R_16BF, 4096, &zero, c->c, CUDA_R_16BF, 8192,
                                      CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
        else {
            scale_pass<<<132 * 8, 512, 0, s>>>(c->x, c->y, c->xn);
            CUDA_CHECK(cudaGetLastError());
        }
    }
}

/* The addresses of every rank's gradients, for the rank sum's loads (resolved once a size). */
static __global__ void peer_addresses(ncclWindow_t window, const float **out, int n) {
    for (int j = 0; j < n; j++) out[j] = (const float *)ncclGetPeerPointer(window, 0, j);
}

typedef struct {
    ncclComm_t sm, ce, sym;
    RankSumPlan *rank_sum; /* this rank's part of every rank's grads into recv */
    float *grads, *recv, *flag;
    __nv_bfloat16 *weights;
    size_t per_rank; /* values each rank owns (P / world) */
} Exchange;

static void run_op(const Worker *w, Exchange *x, int op, cudaStream_t s) {
    const size_t n = x->per_rank;
    switch (op) {
    case OP_RS_SM: NCCL_CHECK(ncclReduceScatter(x->grads, x->recv, n, ncclFloat32, ncclSum, x->sm, s)); break;
    case OP_RS_SYM: NCCL_CHECK(ncclReduceScatter(x->grads, x->recv, n, ncclFloat32, ncclSum, x->sym, s)); break;
    case OP_RS_LOAD:
        /* every rank's values are final before any is read: a one-value all-reduce as the barrier */
        NCCL_CHECK(ncclAllReduce(x->flag, x->flag, 1, ncclFloat32, ncclSum, x->sm, s));
        rank_sum(x->rank_sum, x->recv, s);
        /* and none is changed before every rank has read it: a second one */
        NCCL_CHECK(ncclAllReduce(x->flag, x->flag, 1, ncclFloat32, ncclSum, x->sm, s));
        break;
    case OP_A2A_SM: NCCL_CHECK(ncclAlltoAll(x->grads, x->recv, n, ncclFloat32, x->sm, s)); break;
    case OP_A2A_CE: NCCL_CHECK(ncclAlltoAll(x->grads, x->recv, n, ncclFloat32, x->ce, s)); break;
    case OP_AG_SM:
        NCCL_CHECK(ncclAllGather(x->weights + w->rank * n, x->weights, n, ncclBfloat16, x->sm, s));
        break;
    case OP_AG_CE:
        NCCL_CHECK(ncclAllGather(x->weights + w->rank * n, x->weights, n, ncclBfloat16, x->ce, s));
        break;
    }
}

static float elapsed(cudaEvent_t a, cudaEvent_t b) {
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    return ms;
}

/* The all-to-all's pieces must land where a reduce-scatter's sum in rank order would read them:
 * piece j of rank r's recv is rank j's values r*n .. r*n + n - 1. */
static int check_alltoall(const Worker *w, const Exchange *x) {
    const size_t n = x->per_rank, probe[3] = {0, n / 2, n - 1};
    for (int j = 0; j < w->world; j++)
        for (int k = 0; k < 3; k++) {
            float got;
            CUDA_CHECK(cudaMemcpy(&got, x->recv + j * n + probe[k], sizeof got, cudaMemcpyDeviceToHost));
            const float want = (float)(j * 16 + (int)((w->rank * n + probe[k]) % 13));
            if (got != want) {
                fprintf(stderr, "rank %d: all-to-all piece %d value %zu is %g, expected %g\n", w->rank, j, probe[k],
                        got, want);
                return -1;
            }
        }
    return 0;
}

/* The reduce-scatters' sums: value k of rank r's part is the sum over ranks j of j*16 + (r*n + k) % 13. */
static int check_reduce_scatter(const Worker *w, const Exchange *x, const char *what) {
    const size_t n = x->per_rank, probe[3] = {0, n / 2, n - 1};
    for (int k = 0; k < 3; k++) {
        float got, want = 0;
        CUDA_CHECK(cudaMemcpy(&got, x->recv + probe[k], sizeof got, cudaMemcpyDeviceToHost));
        for (int j = 0; j < w->world; j++) want += (float)(j * 16 + (int)((w->rank * n + probe[k]) % 13));
        if (got != want) {
            fprintf(stderr, "rank %d: %s value %zu is %g, expected %g\n", w->rank, what, probe[k], got, want);
            return -1;
        }
    }
    return 0;
}

static void *worker_main(void *arg) {
    Worker *w = (Worker *)arg;
    CUDA_CHECK(cudaSetDevice(w->rank));
    Exchange x;
    memset(&x, 0, sizeof x);
    ncclConfig_t cfg_sm = NCCL_CONFIG_INITIALIZER, cfg_ce = NCCL_CONFIG_INITIALIZER;
    cfg_ce.CTAPolicy = NCCL_CTA_POLICY_ZERO;
    NCCL_CHECK(ncclCommInitRankConfig(&x.sm, w->world, w->id_sm, w->rank, &cfg_sm));
    NCCL_CHECK(ncclCommInitRankConfig(&x.ce, w->world, w->id_ce, w->rank, &cfg_ce));
    NCCL_CHECK(ncclCommInitRankConfig(&x.sym, w->world, w->id_sym, w->rank, &cfg_sm));
    CUDA_CHECK(cudaMalloc((void **)&x.flag, sizeof(float)));
    CUDA_CHECK(cudaMemset(x.flag, 0, sizeof(float)));

    Compute c;
    CUBLAS_CHECK(cublasCreate(&c.blas));
    CUDA_CHECK(cudaMalloc((void **)&c.a, 8192ull * 4096 * 2));
    CUDA_CHECK(cudaMalloc((void **)&c.b, 8192ull * 4096 * 2));
    CUDA_CHECK(cudaMalloc((void **)&c.c, 8192ull * 8192 * 2));
    CUDA_CHECK(cudaMemset(c.a, 0, 8192ull * 4096 * 2));
    CUDA_CHECK(cudaMemset(c.b, 0, 8192ull * 4096 * 2));
    c.xn = 1ull << 28;
    CUDA_CHECK(cudaMalloc((void **)&c.x, c.xn * 4));
    CUDA_CHECK(cudaMalloc((void **)&c.y, c.xn * 4));
    CUDA_CHECK(cudaMemset(c.x, 0, c.xn * 4));

    cudaStream_t sc, sx;
    CUDA_CHECK(cudaStreamCreateWithFlags(&sc, cudaStreamNonBlocking));
    CUDA_CHECK(cudaStreamCreateWithFlags(&sx, cudaStreamNonBlocking));
    cudaEvent_t e[4];
    for (int i = 0; i < 4; i++) CUDA_CHECK(cudaEventCreate(&e[i]));

    /* the compute streams alone: one warm-up each, then the time of one GEMM and one pass */
    float unit_ms[2];
    for (int kind = 0; kind < 2; kind++) {
        run_compute(&c, kind, 3, sc);
        CUDA_CHECK(cudaEventRecord(e[0], sc));
        run_compute(&c, kind, 20, sc);
        CUDA_CHECK(cudaEventRecord(e[1], sc));
        CUDA_CHECK(cudaEventSynchronize(e[1]));
        unit_ms[kind] = elapsed(e[0], e[1]) / 20;
    }
    if (w->rank == 0)
        printf("one GEMM 8192x8192x4096 bf16: %.3f ms (%.0f TFLOP/s); one pass over 1 GiB: %.3f ms (%.0f GB/s)\n",
               unit_ms[0], 2.0 * 8192 * 8192 * 4096 / unit_ms[0] / 1e9, unit_ms[1], 2.0 * 4 * c.xn / unit_ms[1] / 1e6);

    for (int si = 0; si < w->n_sizes; si++) {
        const size_t total = (size_t)(w->mbs[si] * 1e6 / 4) / (w->world * 1024) * (w->world * 1024);
        x.per_rank = total / w->world;
        NCCL_CHECK(ncclMemAlloc((void **)&x.grads, total * 4));
        NCCL_CHECK(ncclMemAlloc((void **)&x.recv, total * 4));
        NCCL_CHECK(ncclMemAlloc((void **)&x.weights, total * 2));
        ncclWindow_t win[3], sym_win[2];
        NCCL_CHECK(ncclCommWindowRegister(x.ce, x.grads, total * 4, &win[0], NCCL_WIN_COLL_SYMMETRIC));
        NCCL_CHECK(ncclCommWindowRegister(x.ce, x.recv, total * 4, &win[1], NCCL_WIN_COLL_SYMMETRIC));
        NCCL_CHECK(ncclCommWindowRegister(x.ce, x.weights, total * 2, &win[2], NCCL_WIN_COLL_SYMMETRIC));
        NCCL_CHECK(ncclCommWindowRegister(x.sym, x.grads, total * 4, &sym_win[0], NCCL_WIN_COLL_SYMMETRIC));
        NCCL_CHECK(ncclCommWindowRegister(x.sym, x.recv, total * 4, &sym_win[1], NCCL_WIN_COLL_SYMMETRIC));
        {
            RankSumSources sources = {{NULL}, w->world};
            const float **d_addr;
            CUDA_CHECK(cudaMalloc((void **)&d_addr, w->world * sizeof *d_addr));
            peer_addresses<<<1, 1>>>(win[0], d_addr, w->world);
            CUDA_CHECK(cudaMemcpy(sources.rank, d_addr, w->world * sizeof *d_addr, cudaMemcpyDeviceToHost));
            CUDA_CHECK(cudaFree(d_addr));
            const RankSumPiece piece = {w->rank * x.per_rank, 0, x.per_rank};
            x.rank_sum = rank_sum_plan_create(&sources, &piece, 1);
        }
        fill_rank_pattern<<<1024, 256>>>(x.grads, total, w->rank);
        CUDA_CHECK(cudaGetLastError());
        CUDA_CHECK(cudaMemset(x.weights, 0, total * 2));
        CUDA_CHECK(cudaDeviceSynchronize());

        NCCL_CHECK(ncclAlltoAll(x.grads, x.recv, x.per_rank, ncclFloat32, x.ce, sx));
        CUDA_CHECK(cudaStreamSynchronize(sx));
        const int a2a_ok = check_alltoall(w, &x) == 0;
        int rs_ok = 1;
        for (int op = OP_RS_SYM; op <= OP_RS_LOAD; op++) {
            CUDA_CHECK(cudaMemset(x.recv, 0, x.per_rank * 4));
            run_op(w, &x, op, sx);
            CUDA_CHECK(cudaStreamSynchronize(sx));
            rs_ok &= check_reduce_scatter(w, &x, OP_NAME[op]) == 0;
        }
        if (w->rank == 0)
            printf("\n%.0f MB of fp32 gradients (%zu values), %d GPUs; copy-engine all-to-all %s; reduce-scatters %s\n",
                   w->mbs[si], total, w->world, a2a_ok ? "delivers every piece where expected" : "WRONG",
                   rs_ok ? "sum right" : "WRONG");
        if (w->rank == 0)
            printf("%-32s %9s %9s | %-8s %9s %9s %9s | %-8s %9s %9s %9s\n", "exchange", "alone ms", "bus GB/s",
                   "GEMMs", "alone", "beside", "+ms", "passes", "alone", "beside", "+ms");
        for (int op = 0; op < N_OPS; op++) {
            const size_t bytes = total * (op >= OP_AG_SM ? 2 : 4);
            run_op(w, &x, op, sx); /* warm-up */
            CUDA_CHECK(cudaStreamSynchronize(sx));
            pthread_barrier_wait(w->barrier);
            CUDA_CHECK(cudaEventRecord(e[0], sx));
            for (int r = 0; r < REPS; r++) run_op(w, &x, op, sx);
            CUDA_CHECK(cudaEventRecord(e[1], sx));
            CUDA_CHECK(cudaEventSynchronize(e[1]));
            const float alone = elapsed(e[0], e[1]) / REPS;
            const double bus = bytes * (double)(w->world - 1) / w->world / alone / 1e6;
            char line[512];
            int len = snprintf(line, sizeof line, "rank %d %-25s %9.3f %9.0f", w->rank, OP_NAME[op], alone, bus);
            for (int kind = 0; kind < 2; kind++) {
                /* enough compute to cover the exchanges twice over */
                const int count = (int)(2 * REPS * alone / unit_ms[kind]) + 2;
                pthread_barrier_wait(w->barrier);
                CUDA_CHECK(cudaEventRecord(e[0], sc));
                run_compute(&c, kind, count, sc);
                CUDA_CHECK(cudaEventRecord(e[1], sc));
                CUDA_CHECK(cudaEventSynchronize(e[1]));
                const float compute_alone = elapsed(e[0], e[1]);
                pthread_barrier_wait(w->barrier);
                CUDA_CHECK(cudaEventRecord(e[0], sc));
                CUDA_CHECK(cudaEventRecord(e[2], sx));
                run_compute(&c, kind, count, sc);
                for (int r = 0; r < REPS; r++) run_op(w, &x, op, sx);
                CUDA_CHECK(cudaEventRecord(e[1], sc));
                CUDA_CHECK(cudaEventRecord(e[3], sx));
                CUDA_CHECK(cudaEventSynchronize(e[1]));
                CUDA_CHECK(cudaEventSynchronize(e[3]));
                const float compute_beside = elapsed(e[0], e[1]), exchange_beside = elapsed(e[2], e[3]) / REPS;
                len += snprintf(line + len, sizeof line - len, " | %8d %9.2f %9.2f %9.2f (exchange %.3f)", count,
                                compute_alone, compute_beside, compute_beside - compute_alone, exchange_beside);
            }
            printf("%s\n", line);
            fflush(stdout);
        }
        CUDA_CHECK(cudaDeviceSynchronize());
        pthread_barrier_wait(w->barrier);
        rank_sum_plan_free(x.rank_sum);
        for (int i = 1; i >= 0; i--) NCCL_CHECK(ncclCommWindowDeregister(x.sym, sym_win[i]));
        for (int i = 2; i >= 0; i--) NCCL_CHECK(ncclCommWindowDeregister(x.ce, win[i]));
        NCCL_CHECK(ncclMemFree(x.weights));
        NCCL_CHECK(ncclMemFree(x.recv));
        NCCL_CHECK(ncclMemFree(x.grads));
    }
    for (int i = 0; i < 4; i++) CUDA_CHECK(cudaEventDestroy(e[i]));
    CUDA_CHECK(cudaStreamDestroy(sx));
    CUDA_CHECK(cudaStreamDestroy(sc));
    CUDA_CHECK(cudaFree(c.y));
    CUDA_CHECK(cudaFree(c.x));
    CUDA_CHECK(cudaFree(c.c));
    CUDA_CHECK(cudaFree(c.b));
    CUDA_CHECK(cudaFree(c.a));
    CUBLAS_CHECK(cublasDestroy(c.blas));
    CUDA_CHECK(cudaFree(x.flag));
    NCCL_CHECK(ncclCommDestroy(x.sym));
    NCCL_CHECK(ncclCommDestroy(x.ce));
    NCCL_CHECK(ncclCommDestroy(x.sm));
    return NULL;
}

int main(int argc, char **argv) {
    int world = 0;
    CUDA_CHECK(cudaGetDeviceCount(&world));
    if (world < 2) {
        fprintf(stderr, "error: this benchmark needs at least two GPUs, this host shows %d\n", world);
        return 1;
    }
    double mbs[16] = {496, 1148};
    int n_sizes = 2;
    if (argc > 1) {
        n_sizes = 0;
        for (int i = 1; i < argc && n_sizes < 16; i++) {
            char *end;
            mbs[n_sizes] = strtod(argv[i], &end);
            if (*end || mbs[n_sizes] < 1) {
                fprintf(stderr, "error: '%s' is not a size in MB (usage: %s [MB]...)\n", argv[i], argv[0]);
                return 1;
            }
            n_sizes++;
        }
    }
    int v = 0;
    NCCL_CHECK(ncclGetVersion(&v));
    printf("NCCL %d, %d GPUs, %d repeats per measurement\n", v, world, REPS);
    ncclUniqueId id_sm, id_ce, id_sym;
    NCCL_CHECK(ncclGetUniqueId(&id_sm));
    NCCL_CHECK(ncclGetUniqueId(&id_ce));
    NCCL_CHECK(ncclGetUniqueId(&id_sym));
    pthread_barrier_t barrier;
    pthread_barrier_init(&barrier, NULL, (unsigned)world);
    Worker *ws = (Worker *)calloc(world, sizeof *ws);
    pthread_t *tids = (pthread_t *)calloc(world, sizeof *tids);
    for (int r = 0; r < world; r++) {
        ws[r] = (Worker){r, world, id_sm, id_ce, id_sym, &barrier, mbs, n_sizes};
        if (pthread_create(&tids[r], NULL, worker_main, &ws[r]) != 0) {
            fprintf(stderr, "error: cannot start the thread for GPU %d\n", r);
            return 1;
        }
    }
    for (int r = 0; r < world; r++) pthread_join(tids[r], NULL);
    pthread_barrier_destroy(&barrier);
    free(tids);
    free(ws);
    return 0;
}
#endif
