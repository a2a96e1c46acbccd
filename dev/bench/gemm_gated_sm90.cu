/* dev/bench/gemm_gated_sm90.cu - the gated MLP's products with the activation in their epilogues
 * (kernels/gated_mlp.cu) against the trainer's other path, cuBLASLt's product then
 * kernels/swiglu.cu's pass, checked and timed side by side:
 *   forward:  GU = X Wfc^T and H = act(gate) up         (matmul_forward, gated_forward)
 *   backward: D = dY Wproj, then dGU and H from D and GU  (matmul_backward, gated_backward)
 * at N tokens, model width C and gated width F. Both paths take the same activation
 * (kernels/gated_act.cuh), so they differ only where cuBLAS sums a product in another order.
 *
 * Run: ./build/bench_gemm_gated_sm90 [--check-only] [--shape N,C,F]... [--gelu] [--reps R]
 * It checks both products with SiLU and with GELU-tanh at awkward sizes (N off the tiles, C off the k
 * blocks and past 1536, F off the backward's 256 columns) against the other path: every bf16 output
 * within 1/32 of max(|ref|, rms), relative L2 below 4e-3, a second run bitwise equal; then times both
 * (and cuBLAS's product alone) at the families' shapes at 32768 tokens: Qwen3-0.6B and Llama-3.2-1B
 * (SiLU), Gemma-3-270M and Gemma-3-1B (GELU-tanh); --shape's with SiLU, or GELU-tanh with --gelu.
 * The versions tried on the way, and the probes of where their time went, are in this file's history
 * (commits 774b2f4-64fe9ed) and dev/RESULTS.md (2026-11-29). */
#include <cuda.h> /* CUtensorMap */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernel_util.cuh"
#include "kernels/kernels.h"

/* the trainer's path */
static void trainer_forward(int64_t N, int C, int F, GatedAct act, const bf16 *x, const bf16 *wfc, bf16 *gu,
                            bf16 *h) {
    matmul_forward(gu, NULL, x, wfc, NULL, (int)N, C, 2 * F, 0);
    gated_forward(h, gu, (size_t)N, F, act, 0);
}
static void trainer_backward(int64_t N, int C, int F, GatedAct act, const bf16 *dy, const bf16 *wproj, const bf16 *gu,
                             bf16 *d, bf16 *dgu, bf16 *h) {
    matmul_backward(d, NULL, NULL, NULL, dy, NULL, wproj, NULL, (int)N, F, C, 0);
    gated_backward(dgu, h, d, gu, (size_t)N, F, act, 0);
}

static void sync_or_die(const char *what) {
    const cudaError_t e = cudaDeviceSynchronize();
    if (e != cudaSuccess) {
        fprintf(stderr, "error: %s failed: %s\n", what, cudaGetErrorString(e));
        exit(1);
    }
}

__global__ void gg_fill_kernel(bf16 *x, int64_t n, float lo, float hi, uint32_t seed) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        uint32_t s = (uint32_t)i * 2654435761u ^ (uint32_t)(i >> 32) * 0x9e3779b9u ^ seed;
        s ^= s >> 16, s *= 0x7feb352du, s ^= s >> 15, s *= 0x846ca68bu, s ^= s >> 16;
        x[i] = __float2bfloat16(lo + (hi - lo) * (float)(s & 0xFFFFFF) / 16777216.0f);
    }
}
static void gg_fill(bf16 *x, int64_t n, float a, uint32_t seed) {
    gg_fill_kernel<<<(unsigned)(ceil_div(n, 256) < 4096 ? ceil_div(n, 256) : 4096), 256>>>(x, n, -a, a, seed);
    CUDA_CHECK(cudaGetLastError());
}

/* sums[0] += r^2, sums[1] += (o - r)^2; bad[1] counts |o - r| > tol max(|r|, rms) (NaN too), bad[0]
 * the least such index; bad[2] counts bitwise differences between o and o2 when given */
__global__ void gg_compare_kernel(const bf16 *o, const bf16 *r, const bf16 *o2, int64_t n, float tol, float rms,
                                  double *sums, unsigned long long *bad) {
    double s_r = 0.0, s_d = 0.0;
    unsigned long long diff = 0;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const float rv = __bfloat162float(r[i]), ov = __bfloat162float(o[i]);
        const float d = ov - rv;
        s_r += (double)rv * rv, s_d += (double)d * d;
        if (!(fabsf(d) <= tol * fmaxf(fabsf(rv), rms))) {
            atomicMin(&bad[0], (unsigned long long)i);
            atomicAdd(&bad[1], 1ull);
        }
        if (o2) diff += __bfloat16_as_ushort(o[i]) != __bfloat16_as_ushort(o2[i]);
    }
    for (int off = 16; off > 0; off >>= 1) {
        s_r += __shfl_xor_sync(0xffffffffu, s_r, off);
        s_d += __shfl_xor_sync(0xffffffffu, s_d, off);
        diff += __shfl_xor_sync(0xffffffffu, diff, off);
    }
    if ((threadIdx.x & 31) == 0) {
        atomicAdd(&sums[0], s_r), atomicAdd(&sums[1], s_d);
        if (diff) atomicAdd(&bad[2], diff);
    }
}

#define CHECK_TOL (1.0f / 32)
#define CHECK_REL_L2 4e-3

/* ours (o, and o2 from a second run) against the trainer's r; prints one line; 1 when it passes */
static int compare(const char *what, const bf16 *o, const bf16 *o2, const bf16 *r, int64_t rows, int64_t cols) {
    const int64_t n = rows * cols;
    double *sums;
    unsigned long long *bad;
    CUDA_CHECK(cudaMalloc(&sums, 2 * sizeof(double)));
    CUDA_CHECK(cudaMalloc(&bad, 3 * sizeof(unsigned long long)));
    CUDA_CHECK(cudaMemset(sums, 0, 2 * sizeof(double)));
    CUDA_CHECK(cudaMemset(bad, 0xFF, sizeof(unsigned long long)));
    CUDA_CHECK(cudaMemset(bad + 1, 0, 2 * sizeof(unsigned long long)));
    const unsigned grid = (unsigned)(ceil_div(n, 256) < 4096 ? ceil_div(n, 256) : 4096);
    gg_compare_kernel<<<grid, 256>>>(r, r, NULL, n, 1.0f, 0.0f, sums, bad); /* the reference's rms */
    double hs[2];
    CUDA_CHECK(cudaMemcpy(hs, sums, sizeof hs, cudaMemcpyDeviceToHost));
    const float rms = (float)sqrt(hs[0] / (double)n);
    CUDA_CHECK(cudaMemset(sums, 0, 2 * sizeof(double)));
    gg_compare_kernel<<<grid, 256>>>(o, r, o2, n, CHECK_TOL, rms, sums, bad);
    CUDA_CHECK(cudaGetLastError());
    unsigned long long hb[3];
    CUDA_CHECK(cudaMemcpy(hs, sums, sizeof hs, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(hb, bad, sizeof hb, cudaMemcpyDeviceToHost));
    const double rel = hs[0] > 0 ? sqrt(hs[1] / hs[0]) : 0.0;
    const int pass = hb[1] == 0 && rel <= CHECK_REL_L2 && hb[2] == 0;
    printf("  %-4s rel-L2 %.2e, outside 1/32: %llu, rerun differs in %llu%s", what, rel, hb[1], hb[2],
           pass ? "\n" : "  FAIL");
    if (hb[1]) {
        bf16 ov, rv;
        const int64_t i = (int64_t)hb[0];
        CUDA_CHECK(cudaMemcpy(&ov, o + i, sizeof ov, cudaMemcpyDeviceToHost));
        CUDA_CHECK(cudaMemcpy(&rv, r + i, sizeof rv, cudaMemcpyDeviceToHost));
        printf(" (first at row %lld col %lld: ours %g, trainer %g)", (long long)(i / cols), (long long)(i % cols),
               (double)__bfloat162float(ov), (double)__bfloat162float(rv));
    }
    if (!pass) printf("\n");
    CUDA_CHECK(cudaFree(bad));
    CUDA_CHECK(cudaFree(sums));
    return pass;
}

typedef struct {
    int64_t N;
    int C, F;
    GatedAct act;
    bf16 *x, *wfc, *wproj, *dy, *gu_in;             /* inputs */
    bf16 *gu, *h, *d, *dgu;                         /* the trainer's outputs */
    bf16 *gu_o, *h_o, *dgu_o, *gu_o2, *h_o2, *dgu_o2; /* ours, twice */
} Problem;

static bf16 *alloc_bf16(int64_t n) {
    bf16 *p;
    CUDA_CHECK(cudaMalloc(&p, (size_t)n * sizeof(bf16)));
    return p;
}

static void problem_init(Problem *p, int64_t N, int C, int F, GatedAct act, uint32_t seed) {
    memset(p, 0, sizeof *p);
    p->N = N, p->C = C, p->F = F, p->act = act;
    const int64_t NC = N * C, NF = N * F, W = (int64_t)C * F;
    p->x = alloc_bf16(NC), p->dy = alloc_bf16(NC), p->wfc = alloc_bf16(2 * W), p->wproj = alloc_bf16(W);
    p->gu_in = alloc_bf16(2 * NF);
    p->gu = alloc_bf16(2 * NF), p->h = alloc_bf16(NF), p->d = alloc_bf16(NF), p->dgu = alloc_bf16(2 * NF);
    p->gu_o = alloc_bf16(2 * NF), p->h_o = alloc_bf16(NF), p->dgu_o = alloc_bf16(2 * NF);
    p->gu_o2 = alloc_bf16(2 * NF), p->h_o2 = alloc_bf16(NF), p->dgu_o2 = alloc_bf16(2 * NF);
    /* weights of a trained model's scale: products of order 1, some activations saturated */
    gg_fill(p->x, NC, 1.0f, seed), gg_fill(p->dy, NC, 1.0f, seed + 1);
    gg_fill(p->wfc, 2 * W, 3.0f / sqrtf((float)C), seed + 2), gg_fill(p->wproj, W, 3.0f / sqrtf((float)F), seed + 3);
    gg_fill(p->gu_in, 2 * NF, 4.0f, seed + 4);
}

static void problem_free(Problem *p) {
    bf16 *all[] = {p->x, p->dy, p->wfc, p->wproj, p->gu_in, p->gu, p->h, p->d, p->dgu,
                   p->gu_o, p->h_o, p->dgu_o, p->gu_o2, p->h_o2, p->dgu_o2};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) CUDA_CHECK(cudaFree(all[i]));
}

static void run_ours_forward(const Problem *p, bf16 *gu, bf16 *h) {
    gated_mlp_forward(gu, h, p->x, p->wfc, (size_t)p->N, p->C, p->F, p->act, 0);
}
static void run_ours_backward(const Problem *p, bf16 *dgu, bf16 *h) {
    gated_mlp_backward(dgu, h, p->dy, p->wproj, p->gu_in, (size_t)p->N, p->C, p->F, p->act, 0);
}

static int check_problem(const Problem *p) {
    const int64_t NF = p->N * p->F;
    CUDA_CHECK(cudaMemset(p->gu_o, 0xFF, (size_t)(2 * NF) * sizeof(bf16))); /* NaN: every element written */
    CUDA_CHECK(cudaMemset(p->h_o, 0xFF, (size_t)NF * sizeof(bf16)));
    CUDA_CHECK(cudaMemset(p->dgu_o, 0xFF, (size_t)(2 * NF) * sizeof(bf16)));
    trainer_forward(p->N, p->C, p->F, p->act, p->x, p->wfc, p->gu, p->h);
    run_ours_forward(p, p->gu_o, p->h_o);
    run_ours_forward(p, p->gu_o2, p->h_o2);
    sync_or_die("the forward products");
    const char *act = p->act == GATED_SILU ? "SiLU" : "GELU-tanh";
    printf("check forward  N=%lld C=%d F=%d %s\n", (long long)p->N, p->C, p->F, act);
    int ok = compare("GU", p->gu_o, p->gu_o2, p->gu, p->N, 2 * (int64_t)p->F);
    ok &= compare("H", p->h_o, p->h_o2, p->h, p->N, p->F);
    trainer_backward(p->N, p->C, p->F, p->act, p->dy, p->wproj, p->gu_in, p->d, p->dgu, p->h);
    CUDA_CHECK(cudaMemset(p->h_o, 0xFF, (size_t)NF * sizeof(bf16)));
    run_ours_backward(p, p->dgu_o, p->h_o);
    run_ours_backward(p, p->dgu_o2, p->h_o2);
    sync_or_die("the backward products");
    printf("check backward N=%lld C=%d F=%d %s\n", (long long)p->N, p->C, p->F, act);
    ok &= compare("dGU", p->dgu_o, p->dgu_o2, p->dgu, p->N, 2 * (int64_t)p->F);
    ok &= compare("H", p->h_o, p->h_o2, p->h, p->N, p->F);
    return ok;
}

static int cmp_float(const void *x, const void *y) {
    const float a = *(const float *)x, b = *(const float *)y;
    return (a > b) - (a < b);
}

template <class Fn> static float median_ms(Fn run, int reps) {
    cudaEvent_t e0, e1;
    CUDA_CHECK(cudaEventCreate(&e0));
    CUDA_CHECK(cudaEventCreate(&e1));
    for (int i = 0; i < 3; i++) run();
    sync_or_die("warm-up");
    float t[64];
    for (int i = 0; i < reps; i++) {
        CUDA_CHECK(cudaEventRecord(e0));
        run();
        CUDA_CHECK(cudaEventRecord(e1));
        CUDA_CHECK(cudaEventSynchronize(e1));
        CUDA_CHECK(cudaEventElapsedTime(&t[i], e0, e1));
    }
    CUDA_CHECK(cudaEventDestroy(e1));
    CUDA_CHECK(cudaEventDestroy(e0));
    qsort(t, (size_t)reps, sizeof t[0], cmp_float);
    return t[reps / 2];
}

static void usage_error(const char *what) {
    fprintf(stderr,
            "error: %s (usage: bench_gemm_gated_sm90 [--check-only] [--shape N,C,F]... [--gelu] [--reps R])\n", what);
    exit(1);
}

int main(int argc, char **argv) {
    int check_only = 0, reps = 10, nshapes = 0;
    GatedAct shape_act = GATED_SILU;
    int64_t shapes[16][4];
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        if (!strcmp(o, "--check-only")) check_only = 1;
        else if (!strcmp(o, "--gelu")) shape_act = GATED_GELU_TANH;
        else if (!strcmp(o, "--shape") && i + 1 < argc) {
            long long n, c, f;
            int used = 0;
            if (nshapes == 16) usage_error("at most 16 --shape options");
            if (sscanf(argv[++i], "%lld,%lld,%lld%n", &n, &c, &f, &used) != 3 || argv[i][used] || n < 1 || c < 8 ||
                c % 8 || f < 128 || f % 128 || n >= (1ll << 31))
                usage_error("--shape takes N,C,F with C a multiple of 8 and F of 128");
            shapes[nshapes][0] = n, shapes[nshapes][1] = c, shapes[nshapes][2] = f, nshapes++;
        } else if (!strcmp(o, "--reps") && i + 1 < argc) {
            reps = atoi(argv[++i]);
            if (reps < 1 || reps > 64) usage_error("--reps takes 1 to 64");
        } else {
            usage_error("unknown option or missing value");
        }
    }
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    printf("device %s, %d SMs\n", prop.name, prop.multiProcessorCount);

    /* N off the 128- and 256-row blocks, C off the k blocks, F off the backward's 256 columns; C past
     * 1536 (the backward's other copy issuer) */
    const int64_t checks[][3] = {{128, 64, 128}, {1000, 200, 384}, {4100, 1024, 3072}, {777, 640, 2048},
                                 {300, 2056, 640}};
    int failed = 0, total = 0;
    uint32_t seed = 11;
    for (size_t c = 0; c < sizeof checks / sizeof checks[0]; c++)
        for (int act = 0; act < 2; act++) {
            Problem p;
            problem_init(&p, checks[c][0], (int)checks[c][1], (int)checks[c][2], (GatedAct)act, seed += 7);
            failed += !check_problem(&p), total++;
            problem_free(&p);
        }
    printf("%d of %d checks passed\n", total - failed, total);
    if (check_only || failed) return failed ? 1 : 0;

    /* Qwen3-0.6B, Llama-3.2-1B, Gemma-3-270M and Gemma-3-1B at 32768 tokens (B 16, T 2048) */
    const int64_t families[][4] = {{32768, 1024, 3072, GATED_SILU},
                                   {32768, 2048, 8192, GATED_SILU},
                                   {32768, 640, 2048, GATED_GELU_TANH},
                                   {32768, 1152, 6912, GATED_GELU_TANH}};
    for (int s = 0; s < nshapes; s++) shapes[s][3] = shape_act;
    const int64_t(*list)[4] = nshapes ? shapes : families;
    const int nlist = nshapes ? nshapes : 4;
    static char rows[16][320];
    for (int s = 0; s < nlist; s++) {
        Problem p;
        problem_init(&p, list[s][0], (int)list[s][1], (int)list[s][2], (GatedAct)list[s][3], seed += 7);
        if (!check_problem(&p)) failed++;
        const int64_t N = p.N;
        const int C = p.C, F = p.F;
        const GatedAct act = p.act;
        const float tf = median_ms([&] { trainer_forward(N, C, F, act, p.x, p.wfc, p.gu, p.h); }, reps);
        const float tf_gemm = median_ms([&] { matmul_forward(p.gu, NULL, p.x, p.wfc, NULL, (int)N, C, 2 * F, 0); }, reps);
        const float of = median_ms([&] { run_ours_forward(&p, p.gu_o, p.h_o); }, reps);
        const float tb =
            median_ms([&] { trainer_backward(N, C, F, act, p.dy, p.wproj, p.gu_in, p.d, p.dgu, p.h); }, reps);
        const float tb_gemm =
            median_ms([&] { matmul_backward(p.d, NULL, NULL, NULL, p.dy, NULL, p.wproj, NULL, (int)N, F, C, 0); }, reps);
        const float ob = median_ms([&] { run_ours_backward(&p, p.dgu_o, p.h_o); }, reps);
        const double ff = 2.0 * N * C * 2.0 * F, fb = 2.0 * N * C * (double)F;
        snprintf(rows[s], sizeof rows[s],
                 "| %lld, %d, %d, %s | %.3f (GEMM %.3f, %.0f TF/s) | %.3f (%.0f TF/s) | %.3f | %.3f (GEMM %.3f, %.0f TF/s) | %.3f (%.0f TF/s) | %.3f |",
                 (long long)N, C, F, act == GATED_SILU ? "SiLU" : "GELU-tanh", tf, tf_gemm, ff / tf_gemm * 1e-9, of, ff / of * 1e-9, of / tf, tb, tb_gemm,
                 fb / tb_gemm * 1e-9, ob, fb / ob * 1e-9, ob / tb);
        problem_free(&p);
    }
    printf("\n%s, CUDA events, 3 warm-ups, median of %d; ms\n", prop.name, reps);
    printf("| N, C, F, act | forward: trainer | ours | ours / trainer | backward: trainer | ours | ours / trainer |\n");
    printf("|---|---|---|---|---|---|---|\n");
    for (int s = 0; s < nlist; s++) printf("%s\n", rows[s]);
    matmul_free();
    return failed ? 1 : 0;
}
