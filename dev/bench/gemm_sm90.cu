/* dev/bench/gemm_sm90.cu - our Hopper GEMM (kernels/gemm_sm90.cu, whose header comment has the
 * design and the measured table) checked against cuBLAS and fp64 and timed beside cuBLAS, through
 * the launchers the fused output layer calls.
 *
 * Run: ./build/bench_gemm_sm90 [--check-only] [--shape dw:V,d,C | dh:C,d,V]... [--group G]
 *        [--splits S] [--clusters N] [--reps R]
 * (--splits S: the dH product in S k ranges instead of the launcher's rule; --clusters N: at most N
 * clusters in the persistent grid, each then walks more work units.) The dH workspace is the
 * layer's (gemm_sm90_dh_workspace_bytes), so the schedule timed is the one the layer runs.
 * It first checks the products at awkward sizes (dH as the rule schedules it, unsplit, and in 3
 * splits; the small ones also by one cluster walking every unit) against cublasGemmEx with the
 * same layouts (every element to 1e-3 relative, the first mismatch printed as row, col, ours,
 * cuBLAS, with a map of its tile) and against fp64 dot products at sampled elements, and that two
 * runs are bitwise equal; then it times both at the layer's shapes (CUDA events, 3 warm-ups,
 * median of 10) and prints TFLOP/s.
 *
 * What to look at first after a kernel change: --check-only. Its first checks are one tile and one
 * k-block: a mismatch there is an operand layout (descriptor, swizzle, transpose flag), and the
 * tile map printed under it shows which rows and columns. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublas_v2.h>

#include "kernels/cuda_check.h"
#include "kernels/device_util.cuh"
#include "kernels/gemm_sm90.h"
#include "kernels/host_device.h"

#define GM_BM GEMM_SM90_TILE_M
#define GM_BN GEMM_SM90_TILE_N

typedef struct {
    int splits;       /* dH: 0 = the launcher's rule */
    int max_clusters; /* the persistent grid's clusters at most; 0: as many as fit */
} GemmConfig;

/* The launchers' device state and the dH workspace, grown as needed. */
typedef struct {
    GemmSm90 g;
    float *workspace;
    size_t workspace_bytes;
} GemmContext;

static GemmContext *g_ctx; /* for the report after a failed launch */

static void context_init(GemmContext *c) {
    memset(c, 0, sizeof *c);
    if (gemm_sm90_init(&c->g)) exit(1);
    g_ctx = c;
}

static void context_free(GemmContext *c) {
    if (c->workspace) CUDA_CHECK(cudaFree(c->workspace));
    gemm_sm90_free(&c->g);
}

/* cudaDeviceSynchronize; on failure, what failed and the wait that timed out, if one did. */
static void sync_or_report(const char *what) {
    const cudaError_t e = cudaDeviceSynchronize();
    if (e == cudaSuccess) return;
    fprintf(stderr, "error: %s failed: %s\n", what, cudaGetErrorString(e));
    if (g_ctx) gemm_sm90_report_hang(&g_ctx->g);
    exit(1);
}

/* dW (dw = 1): C [M x N] += alpha E^T B, E [K x M]; dH (dw = 0): C = E B, E [M x K], with the
 * layer's workspace (more when --splits asks for more); E's row stride lde, B [K x N]. Returns the
 * dH schedule ({1, M} for dW). */
static GemmSm90Plan gemm_run(GemmContext *c, const GemmConfig *cfg, int dw, int64_t M, int64_t N, int64_t K,
                             const bf16 *E, int64_t lde, const bf16 *B, float *C, const float *alpha,
                             cudaStream_t stream) {
    c->g.max_clusters = cfg->max_clusters;
    if (dw) {
        gemm_sm90_dw(&c->g, M, N, K, E, lde, B, N, C, alpha, stream);
        const GemmSm90Plan one = {1, M};
        return one;
    }
    size_t need = gemm_sm90_dh_workspace_bytes(M, N);
    if (cfg->splits > 1 && (size_t)(cfg->splits - 1) * (size_t)M * (size_t)N * sizeof(float) > need)
        need = (size_t)(cfg->splits - 1) * (size_t)M * (size_t)N * sizeof(float);
    if (need > c->workspace_bytes) {
        if (c->workspace) CUDA_CHECK(cudaFree(c->workspace));
        CUDA_CHECK(cudaMalloc(&c->workspace, need));
        c->workspace_bytes = need;
    }
    return gemm_sm90_dh(&c->g, M, N, K, E, lde, B, N, C, c->workspace, need, cfg->splits, stream);
}

/* ---- host: inputs, references, comparisons ------------------------------------------------------- */

__device__ __forceinline__ float hash_uniform(uint64_t i, uint32_t seed) {
    uint32_t h = (uint32_t)i * 2654435761u ^ (uint32_t)(i >> 32) * 0x9e3779b9u ^ seed;
    h ^= h >> 16, h *= 0x7feb352du, h ^= h >> 15, h *= 0x846ca68bu, h ^= h >> 16;
    return (float)(h & 0xFFFFFF) / 16777216.0f; /* [0, 1) */
}

/* x[r ld + c] uniform in [lo, hi) for c < cols; the row padding (cols <= c < ld) is NaN, so that a
 * read past the matrix shows in the result. */
__global__ void fill_bf16_kernel(bf16 *x, int64_t rows, int64_t cols, int64_t ld, float lo, float hi, uint32_t seed) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < rows * ld; i += (int64_t)gridDim.x * blockDim.x)
        x[i] = i % ld < cols ? __float2bfloat16(lo + (hi - lo) * hash_uniform((uint64_t)i, seed)) : __float2bfloat16(NAN);
}
__global__ void fill_f32_kernel(float *x, int64_t n, float lo, float hi, uint32_t seed) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        x[i] = lo + (hi - lo) * hash_uniform((uint64_t)i, seed);
}

/* sums[0] += sum of r^2; with o: sums[1] += sum of (o - r)^2, bad[1] counts the elements with
 * |o - r| > tol max(|r|, rms) (NaN included), bad[0] the least such index (initialised to ~0). */
__global__ void compare_kernel(const float *o, const float *r, int64_t n, float tol, float rms, double *sums,
                               unsigned long long *bad) {
    double s_r = 0.0, s_d = 0.0;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const float rv = r[i];
        s_r += (double)rv * rv;
        if (o) {
            const float d = o[i] - rv;
            s_d += (double)d * d;
            if (!(fabsf(d) <= tol * fmaxf(fabsf(rv), rms))) {
                atomicMin(&bad[0], (unsigned long long)i);
                atomicAdd(&bad[1], 1ull);
            }
        }
    }
    for (int off = 16; off > 0; off >>= 1) {
        s_r += __shfl_xor_sync(0xffffffffu, s_r, off);
        s_d += __shfl_xor_sync(0xffffffffu, s_d, off);
    }
    if ((threadIdx.x & 31) == 0) {
        atomicAdd(&sums[0], s_r);
        if (o) atomicAdd(&sums[1], s_d);
    }
}

/* How many 32-bit words of x and y differ. */
__global__ void count_diff_kernel(const uint32_t *x, const uint32_t *y, int64_t n, unsigned long long *count) {
    unsigned long long c = 0;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        c += x[i] != y[i];
    for (int off = 16; off > 0; off >>= 1) c += __shfl_xor_sync(0xffffffffu, c, off);
    if ((threadIdx.x & 31) == 0 && c) atomicAdd(count, c);
}

/* fp64 reference at sampled elements (row, col): sum over k of A(row, k) B(k, col), from E as the
 * product reads it (ta: E [K x M]; else E [M x K]), B [K x N]; plus alpha times that onto c0 when
 * accumulating. One thread per sample. */
__global__ void spot_ref_kernel(const bf16 *E, int64_t lde, const bf16 *B, int64_t N, int64_t K, int ta,
                                const float *c0, double alpha, const int64_t *rows, const int64_t *cols, int n,
                                double *out) {
    const int s = blockIdx.x * blockDim.x + threadIdx.x;
    if (s >= n) return;
    const int64_t m = rows[s], c = cols[s];
    double acc = 0.0;
    for (int64_t k = 0; k < K; k++) {
        const double a = __bfloat162float(ta ? E[k * lde + m] : E[m * lde + k]);
        acc += a * (double)__bfloat162float(B[k * N + c]);
    }
    out[s] = c0 ? (double)c0[m * N + c] + alpha * acc : acc;
}

static unsigned grid_for(int64_t n) {
    const int64_t b = ceil_div(n, 256);
    return (unsigned)(b < 4096 ? b : 4096);
}

static void fill_bf16(bf16 *x, int64_t rows, int64_t cols, int64_t ld, float lo, float hi, uint32_t seed) {
    fill_bf16_kernel<<<grid_for(rows * ld), 256>>>(x, rows, cols, ld, lo, hi, seed);
    CUDA_CHECK(cudaGetLastError());
}
static void fill_f32(float *x, int64_t n, float lo, float hi, uint32_t seed) {
    fill_f32_kernel<<<grid_for(n), 256>>>(x, n, lo, hi, seed);
    CUDA_CHECK(cudaGetLastError());
}

/* cuBLAS with the layer's layouts (column-major views of the row-major matrices):
 *   dW: dW^T [d x V] += alpha . Hs^T [d x C] . (E^T [V x C])^T      (OP_N, OP_T)
 *   dH: out^T [d x C] = W^T [d x V] . E^T [V x C]                    (OP_N, OP_N) */
static void cublas_product(cublasHandle_t h, int ta, int64_t M, int64_t N, int64_t K, const bf16 *E, int64_t lde,
                           const bf16 *B, float *C, float alpha, float beta) {
    CUBLAS_CHECK(cublasGemmEx(h, CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, (int)N, (int)M, (int)K, &alpha, B,
                              CUDA_R_16BF, (int)N, E, CUDA_R_16BF, (int)lde, &beta, C, CUDA_R_32F, (int)N,
                              CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

/* One product of the layer at its sizes, with its buffers. */
typedef struct {
    int dw;          /* 1: dW (ta = 1, accumulate), 0: dH */
    int64_t M, N, K; /* GEMM sizes */
    int64_t lde;     /* E's row stride */
    bf16 *E, *B;
    float *c0, *ours, *ref, *alpha_dev;
    float alpha;
} Problem;

static const char *product_name(const Problem *p) { return p->dw ? "dW" : "dH"; }

/* The layer's sizes: dW (V, d, C) is M = V, N = d, K = C; dH (C, d, V) is M = C, N = d, K = V. E is
 * [C x V] with the layer's row stride (V rounded up to 256). */
static void problem_init(Problem *p, int dw, int64_t s0, int64_t d, int64_t s2, uint32_t seed) {
    memset(p, 0, sizeof *p);
    p->dw = dw, p->M = s0, p->N = d, p->K = s2;
    const int64_t C = dw ? s2 : s0, V = dw ? s0 : s2;
    p->lde = round_up(V, 256);
    p->alpha = dw ? 0.75f : 1.0f;
    const size_t out_bytes = (size_t)p->M * (size_t)p->N * sizeof(float);
    CUDA_CHECK(cudaMalloc(&p->E, (size_t)C * (size_t)p->lde * sizeof(bf16)));
    CUDA_CHECK(cudaMalloc(&p->B, (size_t)p->K * (size_t)p->N * sizeof(bf16)));
    CUDA_CHECK(cudaMalloc(&p->ours, out_bytes));
    CUDA_CHECK(cudaMalloc(&p->ref, out_bytes));
    CUDA_CHECK(cudaMalloc(&p->alpha_dev, sizeof(float)));
    CUDA_CHECK(cudaMemcpy(p->alpha_dev, &p->alpha, sizeof(float), cudaMemcpyHostToDevice));
    fill_bf16(p->E, C, V, p->lde, 0.0f, 1.0f, seed); /* like exponentials: positive, at most 1 */
    fill_bf16(p->B, p->K, p->N, p->N, -1.0f, 1.0f, seed + 1);
    if (dw) {
        CUDA_CHECK(cudaMalloc(&p->c0, out_bytes));
        fill_f32(p->c0, p->M * p->N, -1.0f, 1.0f, seed + 2);
    }
}

static void problem_free(Problem *p) {
    CUDA_CHECK(cudaFree(p->alpha_dev));
    if (p->c0) CUDA_CHECK(cudaFree(p->c0));
    CUDA_CHECK(cudaFree(p->ref));
    CUDA_CHECK(cudaFree(p->ours));
    CUDA_CHECK(cudaFree(p->B));
    CUDA_CHECK(cudaFree(p->E));
}

/* The output's starting state: dW's c0, or NaN for dH (every element must be written). */
static void reset_output(const Problem *p, float *out) {
    const size_t bytes = (size_t)p->M * (size_t)p->N * sizeof(float);
    if (p->dw) CUDA_CHECK(cudaMemcpy(out, p->c0, bytes, cudaMemcpyDeviceToDevice));
    else CUDA_CHECK(cudaMemset(out, 0xFF, bytes)); /* all-ones bits: a NaN */
}

static GemmSm90Plan run_ours(GemmContext *c, const GemmConfig *cfg, const Problem *p, float *out) {
    return gemm_run(c, cfg, p->dw, p->M, p->N, p->K, p->E, p->lde, p->B, out, p->alpha_dev, 0);
}
static void run_cublas(cublasHandle_t h, const Problem *p, float *out) {
    cublas_product(h, p->dw, p->M, p->N, p->K, p->E, p->lde, p->B, out, p->alpha, p->dw ? 1.0f : 0.0f);
}

#define CHECK_TOL 1e-3f

/* The output tile (128 x 256) holding element `first`, as a map of 16-row x 32-column blocks, 'x'
 * where some element misses cuBLAS, '.' where all match, ' ' outside the matrix: a wrong
 * descriptor, swizzle or epilogue index leaves a pattern (every other band, one warpgroup's half,
 * whole columns of panels). */
static void print_mismatch_map(const Problem *p, int64_t first, float rms) {
    const int64_t r0 = first / p->N / GM_BM * GM_BM, c0 = first % p->N / GM_BN * GM_BN;
    const int64_t rows = p->M - r0 < GM_BM ? p->M - r0 : GM_BM, cols = p->N - c0 < GM_BN ? p->N - c0 : GM_BN;
    float *o = (float *)malloc((size_t)(rows * cols) * sizeof(float)), *r = (float *)malloc((size_t)(rows * cols) * sizeof(float));
    if (!o || !r) {
        fprintf(stderr, "error: out of host memory for the mismatch map\n");
        exit(1);
    }
    CUDA_CHECK(cudaMemcpy2D(o, (size_t)cols * sizeof(float), p->ours + r0 * p->N + c0, (size_t)p->N * sizeof(float),
                            (size_t)cols * sizeof(float), (size_t)rows, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy2D(r, (size_t)cols * sizeof(float), p->ref + r0 * p->N + c0, (size_t)p->N * sizeof(float),
                            (size_t)cols * sizeof(float), (size_t)rows, cudaMemcpyDeviceToHost));
    printf("  tile at row %lld, col %lld (rows of 16 x columns of 32; x: a mismatch):\n", (long long)r0, (long long)c0);
    for (int br = 0; br < GM_BM / 16; br++) {
        char line[GM_BN / 32 + 1];
        for (int bc = 0; bc < GM_BN / 32; bc++) {
            char ch = ' ';
            for (int64_t i = br * 16; i < br * 16 + 16 && i < rows; i++)
                for (int64_t j = bc * 32; j < bc * 32 + 32 && j < cols; j++) {
                    const float d = fabsf(o[i * cols + j] - r[i * cols + j]);
                    if (ch == ' ') ch = '.';
                    if (!(d <= CHECK_TOL * fmaxf(fabsf(r[i * cols + j]), rms))) ch = 'x';
                }
            line[bc] = ch;
        }
        line[GM_BN / 32] = 0;
        printf("    rows %3d-%3d |%s|\n", br * 16, br * 16 + 15, line);
    }
    free(r);
    free(o);
}
#define SPOT_SAMPLES 64

/* ours against cuBLAS at every element, both against fp64 at sampled ones, and a second run of ours
 * bitwise equal to the first. Prints one line (and the first mismatch); returns 1 when it passes. */
static int check_problem(GemmContext *g, cublasHandle_t h, const GemmConfig *cfg, const Problem *p) {
    const int64_t n = p->M * p->N;
    reset_output(p, p->ours);
    reset_output(p, p->ref);
    const GemmSm90Plan plan = run_ours(g, cfg, p, p->ours);
    sync_or_report("our GEMM");
    run_cublas(h, p, p->ref);
    sync_or_report("cuBLAS");

    double *sums;
    unsigned long long *bad;
    CUDA_CHECK(cudaMalloc(&sums, 2 * sizeof(double)));
    CUDA_CHECK(cudaMalloc(&bad, 3 * sizeof(unsigned long long)));
    CUDA_CHECK(cudaMemset(sums, 0, 2 * sizeof(double)));
    CUDA_CHECK(cudaMemset(bad, 0xFF, sizeof(unsigned long long)));
    CUDA_CHECK(cudaMemset(bad + 1, 0, 2 * sizeof(unsigned long long)));
    compare_kernel<<<grid_for(n), 256>>>(NULL, p->ref, n, 0.0f, 0.0f, sums, bad);
    CUDA_CHECK(cudaGetLastError());
    double hs[2];
    CUDA_CHECK(cudaMemcpy(hs, sums, sizeof hs, cudaMemcpyDeviceToHost));
    const float rms = (float)sqrt(hs[0] / (double)n);
    /* from zero again: every call adds the sum of r^2 into sums[0], so the ratio below needs both
     * sums from this one */
    CUDA_CHECK(cudaMemset(sums, 0, 2 * sizeof(double)));
    compare_kernel<<<grid_for(n), 256>>>(p->ours, p->ref, n, CHECK_TOL, rms, sums, bad);
    CUDA_CHECK(cudaGetLastError());
    unsigned long long hb[2];
    CUDA_CHECK(cudaMemcpy(hs, sums, sizeof hs, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(hb, bad, sizeof hb, cudaMemcpyDeviceToHost));
    const double rel = sqrt(hs[1] / hs[0]);

    /* fp64 at sampled elements: the corners, then pseudo-random ones */
    int64_t hr[SPOT_SAMPLES], hc[SPOT_SAMPLES];
    uint64_t st = 0x9e3779b97f4a7c15ull ^ (uint64_t)n;
    for (int s = 0; s < SPOT_SAMPLES; s++) {
        st = st * 6364136223846793005ull + 1442695040888963407ull;
        hr[s] = s == 0 ? 0 : s == 1 ? p->M - 1 : (int64_t)((st >> 33) % (uint64_t)p->M);
        hc[s] = s == 0 ? 0 : s == 1 ? p->N - 1 : (int64_t)((st >> 11) % (uint64_t)p->N);
    }
    int64_t *drc;
    double *dref;
    CUDA_CHECK(cudaMalloc(&drc, 2 * SPOT_SAMPLES * sizeof(int64_t)));
    CUDA_CHECK(cudaMalloc(&dref, SPOT_SAMPLES * sizeof(double)));
    CUDA_CHECK(cudaMemcpy(drc, hr, sizeof hr, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(drc + SPOT_SAMPLES, hc, sizeof hc, cudaMemcpyHostToDevice));
    spot_ref_kernel<<<1, SPOT_SAMPLES>>>(p->E, p->lde, p->B, p->N, p->K, p->dw, p->c0, p->alpha, drc,
                                         drc + SPOT_SAMPLES, SPOT_SAMPLES, dref);
    CUDA_CHECK(cudaGetLastError());
    double r64[SPOT_SAMPLES];
    CUDA_CHECK(cudaMemcpy(r64, dref, sizeof r64, cudaMemcpyDeviceToHost));
    double spot_ours = 0.0, spot_cublas = 0.0;
    for (int s = 0; s < SPOT_SAMPLES; s++) {
        float o, r;
        CUDA_CHECK(cudaMemcpy(&o, p->ours + hr[s] * p->N + hc[s], sizeof o, cudaMemcpyDeviceToHost));
        CUDA_CHECK(cudaMemcpy(&r, p->ref + hr[s] * p->N + hc[s], sizeof r, cudaMemcpyDeviceToHost));
        const double scale = fmax(fabs(r64[s]), (double)rms);
        const double eo = fabs((double)o - r64[s]) / scale, er = fabs((double)r - r64[s]) / scale;
        spot_ours = isnan(eo) || eo > spot_ours ? eo : spot_ours;
        spot_cublas = er > spot_cublas ? er : spot_cublas;
    }

    /* the same inputs again: bitwise the same output */
    float *again;
    CUDA_CHECK(cudaMalloc(&again, (size_t)n * sizeof(float)));
    reset_output(p, again);
    run_ours(g, cfg, p, again);
    sync_or_report("our GEMM (second run)");
    CUDA_CHECK(cudaMemset(bad + 2, 0, sizeof(unsigned long long)));
    count_diff_kernel<<<grid_for(n), 256>>>((const uint32_t *)p->ours, (const uint32_t *)again, n, bad + 2);
    CUDA_CHECK(cudaGetLastError());
    unsigned long long ndiff;
    CUDA_CHECK(cudaMemcpy(&ndiff, bad + 2, sizeof ndiff, cudaMemcpyDeviceToHost));

    const int pass = hb[1] == 0 && spot_ours <= 10 * CHECK_TOL && ndiff == 0; /* a NaN spot fails */
    char grid[32] = "";
    if (cfg->max_clusters) snprintf(grid, sizeof grid, " clusters<=%d", cfg->max_clusters);
    printf("check %s M=%lld N=%lld K=%lld%s splits=%d panel=%lld: %s  rel-L2 %.2e, mismatches %llu, fp64 spots: ours "
           "%.1e cuBLAS %.1e, rerun differs in %llu\n",
           product_name(p), (long long)p->M, (long long)p->N, (long long)p->K, grid, plan.splits,
           (long long)plan.panel_rows, pass ? "ok" : "FAIL",
           rel, hb[1], spot_ours, spot_cublas, ndiff);
    if (hb[1]) {
        const int64_t i = (int64_t)hb[0];
        float o, r;
        CUDA_CHECK(cudaMemcpy(&o, p->ours + i, sizeof o, cudaMemcpyDeviceToHost));
        CUDA_CHECK(cudaMemcpy(&r, p->ref + i, sizeof r, cudaMemcpyDeviceToHost));
        printf("  first mismatch: row %lld col %lld (tile row %lld, col %lld): ours %.7g cuBLAS %.7g\n",
               (long long)(i / p->N), (long long)(i % p->N), (long long)(i / p->N / GM_BM),
               (long long)(i % p->N / GM_BN), o, r);
    }
    if (hb[1]) print_mismatch_map(p, (int64_t)hb[0], rms);
    CUDA_CHECK(cudaFree(again));
    CUDA_CHECK(cudaFree(dref));
    CUDA_CHECK(cudaFree(drc));
    CUDA_CHECK(cudaFree(bad));
    CUDA_CHECK(cudaFree(sums));
    return pass;
}

/* ---- host: timing --------------------------------------------------------------------------------- */

#define WARMUPS 3

static int cmp_float(const void *x, const void *y) {
    const float a = *(const float *)x, b = *(const float *)y;
    return (a > b) - (a < b);
}

/* Median of reps timed runs after WARMUPS, CUDA events around each. */
template <class F> static float median_ms(F run, int reps) {
    cudaEvent_t e0, e1;
    CUDA_CHECK(cudaEventCreate(&e0));
    CUDA_CHECK(cudaEventCreate(&e1));
    for (int i = 0; i < WARMUPS; i++) run();
    sync_or_report("warm-up");
    float t[64];
    for (int i = 0; i < reps; i++) {
        CUDA_CHECK(cudaEventRecord(e0));
        run();
        CUDA_CHECK(cudaEventRecord(e1));
        CUDA_CHECK(cudaEventSynchronize(e1));
        CUDA_CHECK(cudaEventElapsedTime(&t[i], e0, e1));
    }
    sync_or_report("timed runs");
    CUDA_CHECK(cudaEventDestroy(e1));
    CUDA_CHECK(cudaEventDestroy(e0));
    qsort(t, (size_t)reps, sizeof t[0], cmp_float);
    return t[reps / 2];
}

/* Times ours and cuBLAS on p; writes one markdown row into line. */
static void bench_problem(GemmContext *g, cublasHandle_t h, const GemmConfig *cfg, const Problem *p, int reps,
                          char *line, size_t size) {
    GemmSm90Plan plan = {1, p->M};
    const float ours = median_ms([&] { plan = run_ours(g, cfg, p, p->ours); }, reps);
    const float ref = median_ms([&] { run_cublas(h, p, p->ref); }, reps);
    const double flop = 2.0 * (double)p->M * (double)p->N * (double)p->K;
    snprintf(line, size, "| %s | %lld x %lld x %lld | %.3f | %.0f | %.3f | %.0f | %.3f | splits %d, panels of %lld rows |",
             product_name(p), (long long)p->M, (long long)p->N, (long long)p->K, ours, flop / ours * 1e-9, ref,
             flop / ref * 1e-9, ours / ref, plan.splits, (long long)plan.panel_rows);
}

/* ---- command line --------------------------------------------------------------------------------- */

typedef struct {
    int dw;
    int64_t s0, d, s2; /* dw: V, d, C; dh: C, d, V */
} ShapeArg;

#define MAX_SHAPES 32

static void usage_error(const char *what) {
    fprintf(stderr,
            "error: %s (usage: bench_gemm_sm90 [--check-only] [--shape dw:V,d,C | dh:C,d,V]... [--group G] "
            "[--splits S] [--clusters N] [--reps R])\n",
            what);
    exit(1);
}

static long long parse_int(const char *s, const char *opt, long long lo, long long hi) {
    char *end;
    const long long v = strtoll(s, &end, 10);
    if (end == s || *end || v < lo || v > hi) {
        char msg[256];
        snprintf(msg, sizeof msg, "%s takes an integer in [%lld, %lld], got '%s'", opt, lo, hi, s);
        usage_error(msg);
    }
    return v;
}

static ShapeArg parse_shape(const char *s) {
    ShapeArg a = {};
    long long x, y, z;
    char kind[3] = {0};
    int used = 0;
    if (sscanf(s, "%2[dwh]:%lld,%lld,%lld%n", kind, &x, &y, &z, &used) != 4 || s[used] ||
        (strcmp(kind, "dw") && strcmp(kind, "dh"))) {
        char msg[256];
        snprintf(msg, sizeof msg, "--shape takes dw:V,d,C or dh:C,d,V, got '%s'", s);
        usage_error(msg);
    }
    /* TMA: 16-byte row strides (d % 8) and 32-bit coordinates */
    if (x < 1 || y < 8 || z < 1 || y % 8 || x >= (1ll << 31) || y >= (1ll << 31) || z >= (1ll << 31)) {
        char msg[256];
        snprintf(msg, sizeof msg, "--shape %s: sizes must be positive, below 2^31, and d a multiple of 8", s);
        usage_error(msg);
    }
    a.dw = kind[1] == 'w', a.s0 = x, a.d = y, a.s2 = z;
    return a;
}

int main(int argc, char **argv) {
    GemmConfig cfg = {0, 0};
    int group = 0;
    int check_only = 0, reps = 10;
    ShapeArg shapes[MAX_SHAPES];
    int nshapes = 0;
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        const int has = i + 1 < argc;
        if (!strcmp(o, "--check-only")) check_only = 1;
        else if (!strcmp(o, "--shape") && has) {
            if (nshapes == MAX_SHAPES) usage_error("at most 32 --shape options");
            shapes[nshapes++] = parse_shape(argv[++i]);
        } else if (!strcmp(o, "--group") && has) group = (int)parse_int(argv[++i], o, 1, 1 << 20);
        else if (!strcmp(o, "--splits") && has) cfg.splits = (int)parse_int(argv[++i], o, 1, 16);
        else if (!strcmp(o, "--reps") && has) reps = (int)parse_int(argv[++i], o, 1, 64);
        else if (!strcmp(o, "--clusters") && has) cfg.max_clusters = (int)parse_int(argv[++i], o, 1, 1 << 16);
        else {
            char msg[256];
            snprintf(msg, sizeof msg, "unknown option or missing value: '%s'", o);
            usage_error(msg);
        }
    }

    GemmContext g;
    context_init(&g);
    if (group) g.g.group = group;
    cublasHandle_t h;
    CUBLAS_CHECK(cublasCreate(&h));
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    printf("device %s, %d SMs; resident clusters of 2: %d\n", prop.name, prop.multiProcessorCount, g.g.clusters);

    /* Awkward sizes: M, N and K off the tiles, E's padding NaN, every schedule. */
    const ShapeArg checks[] = {
        {1, 256, 256, 64},     /* one tile, one k-block: the operand layouts alone */
        {0, 256, 256, 64},
        {1, 384, 512, 200},    /* a few tiles and k-blocks, K off the blocks (the ring wraps) */
        {0, 384, 512, 200},
        {1, 50257, 768, 4100}, /* dW: V off the 128/256 rows, C off the 64-k blocks */
        {1, 1000, 832, 300},   /* dW: d off the 256 columns, a partial last column tile */
        {0, 4100, 768, 50257}, /* dH: C off the rows, V off the k blocks; the rule splits it, in panels */
        {0, 300, 832, 1000},   /* dH: d off the columns; few tiles, so several splits */
    };
    int failed = 0, total = 0;
    uint32_t seed = 1;
    for (size_t c = 0; c < sizeof checks / sizeof checks[0]; c++) {
        Problem p;
        problem_init(&p, checks[c].dw, checks[c].s0, checks[c].d, checks[c].s2, seed += 7);
        GemmConfig v = cfg;
        failed += !check_problem(&g, h, &v, &p), total++;
        if (!p.dw && cfg.splits == 0) { /* and unsplit, and in 3 splits whatever the rule says */
            for (int s = 1; s <= 3; s += 2) {
                v.splits = s;
                failed += !check_problem(&g, h, &v, &p), total++;
            }
        }
        if (p.M * p.N <= 512 * 512 && cfg.max_clusters == 0) { /* and by one cluster, all units */
            v.max_clusters = 1;
            failed += !check_problem(&g, h, &v, &p), total++;
        }
        problem_free(&p);
    }
    printf("%d of %d checks passed\n", total - failed, total);
    if (check_only || failed) {
        CUBLAS_CHECK(cublasDestroy(h));
        context_free(&g);
        return failed ? 1 : 0;
    }

    /* The layer's shapes: dW (V, d, C) and dH (C, d, V). */
    const ShapeArg layer[] = {
        {1, 128256, 4096, 4096}, {1, 262144, 768, 4096}, {1, 50304, 768, 16384},
        {0, 4096, 4096, 128256}, {0, 4096, 768, 262144}, {0, 16384, 768, 50304},
    };
    const ShapeArg *list = nshapes ? shapes : layer;
    const int nlist = nshapes ? nshapes : (int)(sizeof layer / sizeof layer[0]);
    static char rows[MAX_SHAPES][256];
    for (int s = 0; s < nlist; s++) {
        Problem p;
        problem_init(&p, list[s].dw, list[s].s0, list[s].d, list[s].s2, seed += 7);
        if (!check_problem(&g, h, &cfg, &p)) failed++;
        bench_problem(&g, h, &cfg, &p, reps, rows[s], sizeof rows[s]);
        problem_free(&p);
    }
    printf("\n%s, CUDA events, %d warm-ups, median of %d\n", prop.name, WARMUPS, reps);
    printf("| product | M x N x K | ours ms | TFLOP/s | cuBLAS ms | TFLOP/s | ours / cuBLAS | config |\n");
    printf("|---|---|---|---|---|---|---|---|\n");
    for (int s = 0; s < nlist; s++) printf("%s\n", rows[s]);
    CUBLAS_CHECK(cublasDestroy(h));
    context_free(&g);
    return failed ? 1 : 0;
}
