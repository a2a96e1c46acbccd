/* bench_kernels.cu - times the launchers of kernels/kernels.h at GPT-2 124M shapes (d=768,
 * T=1024) and prints, per kernel, the median time, the rate, and the floor from METHOD.md's two
 * numbers (FLOPs at the measured bf16 GEMM rate, bytes at the measured copy rate).
 *
 * Build and run (on a GPU machine; links the kernel objects the trainer does):
 *   make build/bench_kernels && ./build/bench_kernels [B [section]]
 * (dev/check/kernels_device_run.sh builds its own, plus the tests and the attention variants.)
 * Inputs are random (never zeros), medians of 20 runs after 3 warm-ups, CUDA events. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_bf16.h>

#include "kernels/cuda_check.h"
#include "kernels/kernels.h"

typedef __nv_bfloat16 bf16;

/* Deterministic pseudo-random fill on the device: uniform in [-a, a]. */
__global__ void fill_bf16_kernel(bf16 *x, size_t n, float a, uint32_t seed) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    uint32_t h = (uint32_t)i * 2654435761u ^ seed;
    h ^= h >> 16; h *= 0x7feb352du; h ^= h >> 15; h *= 0x846ca68bu; h ^= h >> 16;
    x[i] = __float2bfloat16(a * ((h & 0xFFFFFF) / 8388608.0f - 1.0f));
}
__global__ void fill_f32_kernel(float *x, size_t n, float a, uint32_t seed) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    uint32_t h = (uint32_t)i * 2654435761u ^ seed;
    h ^= h >> 16; h *= 0x7feb352du; h ^= h >> 15; h *= 0x846ca68bu; h ^= h >> 16;
    x[i] = a * ((h & 0xFFFFFF) / 8388608.0f - 1.0f);
}
__global__ void square_kernel(float *x, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = x[i] * x[i];
}
__global__ void fill_tokens_kernel(int *x, size_t n, int V, uint32_t seed) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    uint32_t h = (uint32_t)i * 2654435761u ^ seed;
    h ^= h >> 16; h *= 0x7feb352du; h ^= h >> 15;
    x[i] = (int)(h % (uint32_t)V);
}

static uint32_t g_seed = 1234;
static bf16 *rand_bf16(size_t n, float a) {
    bf16 *p;
    CUDA_CHECK(cudaMalloc(&p, n * 2));
    fill_bf16_kernel<<<(unsigned)((n + 255) / 256), 256>>>(p, n, a, g_seed++);
    CUDA_CHECK(cudaGetLastError());
    return p;
}
static float *rand_f32(size_t n, float a) {
    float *p;
    CUDA_CHECK(cudaMalloc(&p, n * 4));
    fill_f32_kernel<<<(unsigned)((n + 255) / 256), 256>>>(p, n, a, g_seed++);
    CUDA_CHECK(cudaGetLastError());
    return p;
}
static void *dmalloc(size_t bytes) {
    void *p;
    CUDA_CHECK(cudaMalloc(&p, bytes));
    return p;
}

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

static cudaEvent_t ev0, ev1;
#define REPS 20
/* Median ms of REPS runs of `body` (a statement), after 3 warm-ups. */
#define TIME_MS(result, body)                                   \
    do {                                                        \
        for (int w_ = 0; w_ < 3; w_++) { body; }                \
        float t_[REPS];                                         \
        for (int r_ = 0; r_ < REPS; r_++) {                     \
            CUDA_CHECK(cudaEventRecord(ev0, 0));                \
            body;                                               \
            CUDA_CHECK(cudaEventRecord(ev1, 0));                \
            CUDA_CHECK(cudaEventSynchronize(ev1));              \
            CUDA_CHECK(cudaEventElapsedTime(&t_[r_], ev0, ev1)); \
        }                                                       \
        qsort(t_, REPS, sizeof(float), cmp_float);              \
        result = t_[REPS / 2];                                  \
    } while (0)

static double g_gemm_tflops = 700.0, g_copy_gbs = 3000.0; /* replaced by the measured ceilings */
static int g_quiet; /* a warm-up: time, print nothing */

static void row(const char *name, float ms, double flops, double bytes) {
    if (g_quiet) return;
    double floor_ms = 1e3 * (flops / (g_gemm_tflops * 1e12) > bytes / (g_copy_gbs * 1e9)
                                 ? flops / (g_gemm_tflops * 1e12)
                                 : bytes / (g_copy_gbs * 1e9));
    printf("%-44s %9.3f ms %8.1f TFLOP/s %8.0f GB/s   floor %7.3f ms (%4.0f%%)\n", name, ms,
           flops / (ms * 1e-3) / 1e12, bytes / (ms * 1e-3) / 1e9, floor_ms, 100.0 * floor_ms / ms);
}

/* The (query, key) pairs a causal attention of T rows computes with a sliding window of W keys (0:
 * none): the unmasked work, by which its FLOPs are counted. */
static double visible_pairs(int T, int W) {
    if (W <= 0 || W >= T) return 0.5 * T * (T + 1.0);
    return 0.5 * W * (W + 1.0) + (double)(T - W) * W;
}

/* Each row's position in its document, for documents packed end to end in every sequence of T rows:
 * all of length `doc`, or (doc < 0) of lengths drawn uniformly from 1 to 2·|doc|. Returns the
 * (query, key) pairs they leave visible, causal within a document and its window of W keys. */
static double document_positions(int *pos, int B, int T, int doc, int W) {
    uint32_t h = 2463534242u;
    double pairs = 0;
    for (int b = 0; b < B; b++)
        for (int t = 0, left = 0, at = 0; t < T; t++, at++, left--) {
            if (left == 0) {
                h ^= h << 13; h ^= h >> 17; h ^= h << 5; /* xorshift32 */
                left = doc > 0 ? doc : 1 + (int)(h % (uint32_t)(-2 * doc));
                at = 0;
            }
            pos[(size_t)b * T + t] = at;
            pairs += W > 0 && at + 1 > W ? W : at + 1;
        }
    return pairs;
}

/* Attention forward and backward at one shape, the wgmma kernels then (at HS 64 and 128) the
 * mma.sync ones. FLOPs 4·B·NH·HS per visible pair forward, 2.5× that backward (FA2's count; ours
 * does 3.5× by recomputing P twice, 4.5× at HS 256 with dK,dV in two halves). Bytes: qkv and out,
 * and their gradients. doc != 0 packs documents into each sequence (document_positions): the
 * rate then counts the pairs inside documents only, the work a document-aware kernel has to do. */
static void bench_attention(int B, int T, int NH, int NKV, int HS, float scale, int window, int doc = 0) {
    const size_t N = (size_t)B * T, C = (size_t)NH * HS, W = (size_t)(NH + 2 * NKV) * HS;
    bf16 *qkv = rand_bf16(N * W, 1.0f), *out = (bf16 *)dmalloc(N * C * 2), *dout = rand_bf16(N * C, 1.0f);
    bf16 *dqkv = (bf16 *)dmalloc(N * W * 2);
    float *lse = (float *)dmalloc((size_t)B * NH * T * 4), *dbias = (float *)dmalloc(W * sizeof(float));
    double pairs = B * visible_pairs(T, window);
    int *pos = NULL;
    if (doc != 0) {
        int *host = (int *)malloc(N * sizeof(int));
        if (!host) { fprintf(stderr, "bench_kernels: out of host memory\n"); exit(1); }
        pairs = document_positions(host, B, T, doc, window);
        pos = (int *)dmalloc(N * sizeof(int));
        CUDA_CHECK(cudaMemcpy(pos, host, N * sizeof(int), cudaMemcpyHostToDevice));
        free(host);
    }
    const AttentionShape sh = {B, T, NH, NKV, HS, scale, window, pos};
    void *scratch = dmalloc(attention_backward_scratch_bytes(&sh));
    double f = 4.0 * NH * HS * pairs, bytes = (N * W + N * C) * 2.0;
    if (!g_quiet) {
        printf("attention B=%d T=%d NH=%d NKV=%d HS=%d causal window=%d", B, T, NH, NKV, HS, window);
        if (doc > 0) printf(" documents of %d", doc);
        if (doc < 0) printf(" documents of 1-%d (uniform)", -2 * doc);
        printf(" (%.3g visible pairs)\n", pairs);
    }
    char name[64];
    float ms;
    for (int wgmma = 1; wgmma >= (HS == 256 ? 1 : 0); wgmma--) {
        const char *path = wgmma ? "wgmma" : "mma.sync";
        attention_use_wgmma(wgmma);
        TIME_MS(ms, attention_forward(out, lse, qkv, NULL, &sh, 0));
        snprintf(name, sizeof name, "  attention_forward %s", path);
        row(name, ms, f, bytes);
        TIME_MS(ms, attention_backward(dqkv, NULL, scratch, dout, qkv, NULL, out, lse, &sh, 0));
        snprintf(name, sizeof name, "  attention_backward %s (FA2 FLOPs)", path);
        row(name, ms, 2.5 * f, 2.0 * bytes);
        TIME_MS(ms, attention_backward(dqkv, dbias, scratch, dout, qkv, NULL, out, lse, &sh, 0));
        snprintf(name, sizeof name, "  attention_backward %s + qkv bias sums", path);
        row(name, ms, 2.5 * f, 2.0 * bytes);
    }
    attention_use_wgmma(1);
    CUDA_CHECK(cudaFree(dbias));
    CUDA_CHECK(cudaFree(qkv)); CUDA_CHECK(cudaFree(out)); CUDA_CHECK(cudaFree(dout)); CUDA_CHECK(cudaFree(dqkv));
    CUDA_CHECK(cudaFree(lse)); CUDA_CHECK(cudaFree(scratch));
    if (pos) CUDA_CHECK(cudaFree(pos));
}

int main(int argc, char **argv) {
    int B = argc > 1 ? atoi(argv[1]) : 16, T = 1024, C = 768, NH = 12, Vp = 50304;
    /* run one section: encoder, layernorm, attention, documents, gemma-attention, matmul, families,
     * optimizer */
    const char *only = argc > 2 ? argv[2] : NULL;
#define WANT(section) (!only || strcmp(only, section) == 0)
    size_t N = (size_t)B * T;
    CUDA_CHECK(cudaEventCreate(&ev0));
    CUDA_CHECK(cudaEventCreate(&ev1));
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    printf("device: %s, %d SMs; B=%d T=%d C=%d NH=%d (N=%zu)\n", prop.name, prop.multiProcessorCount, B, T, C, NH,
           N);

    /* Ceilings: a large copy and a large bf16 GEMM, measured here. */
    {
        size_t n = (size_t)1 << 28; /* 512 MB of bf16 */
        bf16 *a = rand_bf16(n, 1.0f), *b = (bf16 *)dmalloc(n * 2);
        float ms;
        TIME_MS(ms, CUDA_CHECK(cudaMemcpyAsync(b, a, n * 2, cudaMemcpyDeviceToDevice, 0)));
        g_copy_gbs = 2.0 * n * 2 / (ms * 1e-3) / 1e9;
        CUDA_CHECK(cudaFree(a));
        CUDA_CHECK(cudaFree(b));
        int M = 8192;
        bf16 *x = rand_bf16((size_t)M * M, 1.0f), *w = rand_bf16((size_t)M * M, 0.01f), *y = (bf16 *)dmalloc((size_t)M * M * 2);
        TIME_MS(ms, matmul_forward(y, NULL, x, w, NULL, M, M, M, 0));
        g_gemm_tflops = 2.0 * M * M * (double)M / (ms * 1e-3) / 1e12;
        printf("ceilings: copy %.0f GB/s (read+write), bf16 GEMM 8192^3 %.0f TFLOP/s (our matmul_forward)\n",
               g_copy_gbs, g_gemm_tflops);
        CUDA_CHECK(cudaFree(x));
        CUDA_CHECK(cudaFree(w));
        CUDA_CHECK(cudaFree(y));
    }
    printf("%-44s %12s %16s %13s   %s\n", "kernel", "median", "rate", "bandwidth", "floor (share reached)");

    float ms;
    /* Encoder. */
    if (WANT("encoder")) {
        int *tok = (int *)dmalloc(N * 4);
        fill_tokens_kernel<<<(unsigned)((N + 255) / 256), 256>>>(tok, N, 50257, 7);
        bf16 *wte = rand_bf16((size_t)Vp * C, 0.1f), *wpe = rand_bf16((size_t)T * C, 0.1f), *out = (bf16 *)dmalloc(N * C * 2);
        float *dwte = rand_f32((size_t)Vp * C, 0.1f), *dwpe = rand_f32((size_t)T * C, 0.1f);
        void *scratch = dmalloc(encoder_backward_scratch_bytes((int)N, Vp));
        TIME_MS(ms, encoder_forward(out, tok, NULL, wte, wpe, 1.0f, B, T, C, 0));
        row("encoder_forward", ms, N * C, 3.0 * N * C * 2);
        TIME_MS(ms, encoder_backward(dwte, dwpe, scratch, out, tok, NULL, 1.0f, -1, B, T, C, Vp, 0));
        row("encoder_backward (sort + sums)", ms, 2.0 * N * C, 2.0 * N * C * 2 + 2.0 * (N + T) * C * 4);
        CUDA_CHECK(cudaFree(tok)); CUDA_CHECK(cudaFree(wte)); CUDA_CHECK(cudaFree(wpe)); CUDA_CHECK(cudaFree(out));
        CUDA_CHECK(cudaFree(dwte)); CUDA_CHECK(cudaFree(dwpe)); CUDA_CHECK(cudaFree(scratch));
    }
    /* LayerNorm. */
    if (WANT("layernorm")) {
        bf16 *a = rand_bf16(N * C, 1.0f), *b = rand_bf16(N * C, 1.0f), *w = rand_bf16(C, 1.0f), *bi = rand_bf16(C, 1.0f);
        bf16 *res = (bf16 *)dmalloc(N * C * 2), *ln = (bf16 *)dmalloc(N * C * 2), *dinp = rand_bf16(N * C, 1.0f);
        float *mean = (float *)dmalloc(N * 4), *rstd = (float *)dmalloc(N * 4);
        float *dw = rand_f32(C, 1.0f), *db = rand_f32(C, 1.0f);
        void *scratch = dmalloc(layernorm_backward_scratch_bytes(C));
        TIME_MS(ms, residual_layernorm_forward(res, ln, mean, rstd, a, b, w, bi, (int)N, C, 0));
        row("residual_layernorm_forward", ms, 8.0 * N * C, 4.0 * N * C * 2);
        TIME_MS(ms, layernorm_backward(dinp, dw, db, NULL, scratch, ln, res, w, mean, rstd, (int)N, C, 0));
        row("layernorm_backward (dinp +=)", ms, 12.0 * N * C, 4.0 * N * C * 2);
        float *dsum = (float *)dmalloc(C * sizeof(float));
        TIME_MS(ms, layernorm_backward(dinp, dw, db, dsum, scratch, ln, res, w, mean, rstd, (int)N, C, 0));
        row("layernorm_backward + dinp column sums", ms, 13.0 * N * C, 4.0 * N * C * 2);
        CUDA_CHECK(cudaFree(a)); CUDA_CHECK(cudaFree(b)); CUDA_CHECK(cudaFree(w)); CUDA_CHECK(cudaFree(bi));
        CUDA_CHECK(cudaFree(res)); CUDA_CHECK(cudaFree(ln)); CUDA_CHECK(cudaFree(dinp)); CUDA_CHECK(cudaFree(mean));
        CUDA_CHECK(cudaFree(rstd)); CUDA_CHECK(cudaFree(dw)); CUDA_CHECK(cudaFree(db)); CUDA_CHECK(cudaFree(scratch));
        CUDA_CHECK(cudaFree(dsum));
    }
    /* Attention at GPT-2's width with HS = 64 and 128, then Qwen3-0.6B's (grouped heads, T = 2048)
     * at B = 8 and 16. */
    for (int hs = 64; hs <= 128 && WANT("attention"); hs *= 2)
        bench_attention(B, T, C / hs, C / hs, hs, 1.0f / sqrtf((float)hs), 0);
    for (int qb = 8; qb <= 16 && WANT("attention"); qb *= 2)
        bench_attention(qb, 2048, 16, 8, 128, 1.0f / sqrtf(128.0f), 0);
    for (int lb = 8; lb <= 16 && WANT("attention"); lb *= 2) /* Llama-3.2-1B's */
        bench_attention(lb, 2048, 32, 8, 64, 1.0f / sqrtf(64.0f), 0);
    /* Packed documents at Qwen3-0.6B's and Llama-3.2-1B's attention (B = 8, T = 2048): one whole
     * document a sequence (the positions' cost alone), documents of 512, and fine-tuning-like
     * lengths of 1-512 and 1-2048, against the plain causal rows in the same run. The first shape
     * runs once unprinted: right after the ceilings' GEMM it ran 15-20 % slow. */
    g_quiet = 1;
    if (WANT("documents")) bench_attention(8, 2048, 16, 8, 128, 1.0f / sqrtf(128.0f), 0);
    g_quiet = 0;
    for (int l = 0; l < 2 && WANT("documents"); l++) {
        const int NH = l ? 32 : 16, HS = l ? 64 : 128;
        const int docs[] = {0, 2048, 512, -256, -1024};
        for (int d = 0; d < 5; d++) bench_attention(8, 2048, NH, 8, HS, 1.0f / sqrtf((float)HS), 0, docs[d]);
    }
    /* Gemma-3-270M's attention (T = 2048, four query heads on one key/value head of 256, scale
     * 256^-1/2): its local layers' window of 512 and its global layers, at B = 8 and 16. */
    for (int gb = 8; gb <= 16 && WANT("gemma-attention"); gb *= 2)
        for (int w = 512; w >= 0; w -= 512) bench_attention(gb, 2048, 4, 1, 256, 1.0f / 16.0f, w);
    /* Matmuls of one GPT-2 layer. */
    if (WANT("matmul")) {
        bf16 *x = rand_bf16(N * 4 * C, 1.0f), *y = (bf16 *)dmalloc(N * 4 * C * 2), *pre = (bf16 *)dmalloc(N * 4 * C * 2);
        bf16 *w = rand_bf16((size_t)4 * C * C, 0.02f), *bias = rand_bf16(4 * C, 0.02f), *dx = (bf16 *)dmalloc(N * 4 * C * 2);
        float *dw = rand_f32((size_t)4 * C * C, 0.01f), *db = rand_f32(4 * C, 0.01f);
        void *scratch = dmalloc(bias_backward_scratch_bytes(4 * C));
        struct { const char *name; int C, OC, gelu; } mm[] = {
            {"matmul qkv  768->2304 +bias", C, 3 * C, 0},
            {"matmul attproj 768->768 +bias", C, C, 0},
            {"matmul fc 768->3072 +bias+GELU", C, 4 * C, 1},
            {"matmul fcproj 3072->768 +bias", 4 * C, C, 0},
        };
        for (int i = 0; i < 4; i++) {
            double f = 2.0 * N * mm[i].C * mm[i].OC;
            double by = 2.0 * (N * mm[i].C + (double)mm[i].C * mm[i].OC + N * mm[i].OC * (mm[i].gelu ? 2 : 1));
            char name[80];
            TIME_MS(ms, matmul_forward(y, mm[i].gelu ? pre : NULL, x, w, bias, (int)N, mm[i].C, mm[i].OC, 0));
            snprintf(name, sizeof name, "%s fwd", mm[i].name);
            row(name, ms, f, by);
            /* fcproj's backward carries the dGELU epilogue (its input was gelu(pre)). */
            int dgelu = mm[i].C == 4 * C;
            TIME_MS(ms, matmul_backward(dx, dw, db, scratch, y, x, w, dgelu ? pre : NULL, (int)N, mm[i].C, mm[i].OC, 0));
            snprintf(name, sizeof name, "%s bwd%s", mm[i].name, dgelu ? " +dGELU" : "");
            row(name, ms, 2 * f, 2 * by);
        }
        TIME_MS(ms, gelu_forward(y, x, N * 4 * C, 0));
        row("gelu_forward (standalone) N x 3072", ms, 20.0 * N * 4 * C, 2.0 * N * 4 * C * 2);
        for (int oc = C; oc <= 4 * C; oc += C) {
            if (oc == 2 * C) continue; /* the trainer's widths: attproj/fcproj, qkv, fc */
            char name[64];
            snprintf(name, sizeof name, "bias_backward N x %d", oc);
            TIME_MS(ms, bias_backward(db, scratch, x, (int)N, oc, 0));
            row(name, ms, 1.0 * N * oc, 1.0 * N * oc * 2);
        }
        CUDA_CHECK(cudaFree(x)); CUDA_CHECK(cudaFree(y)); CUDA_CHECK(cudaFree(pre)); CUDA_CHECK(cudaFree(w));
        CUDA_CHECK(cudaFree(bias)); CUDA_CHECK(cudaFree(dx)); CUDA_CHECK(cudaFree(dw)); CUDA_CHECK(cudaFree(db));
        CUDA_CHECK(cudaFree(scratch));
    }
    /* The Llama/Qwen block's own kernels at Qwen3-0.6B's widths (d = 1024, 16 query and 8 key/value
     * heads of 128, F = 3072) and RMSNorm at Llama-3.2-1B's d = 2048, over the same N rows. */
    if (WANT("families")) {
        const int d = 1024, F = 3072, hd = 128, nh = 16, nkv = 8, QW = (nh + 2 * nkv) * hd;
        for (int width = d; width <= 2 * d; width *= 2) {
            bf16 *a = rand_bf16(N * width, 1.0f), *b = rand_bf16(N * width, 1.0f), *w = rand_bf16(width, 1.0f);
            bf16 *res = (bf16 *)dmalloc(N * width * 2), *out = (bf16 *)dmalloc(N * width * 2);
            bf16 *dinp = rand_bf16(N * width, 1.0f);
            float *rstd = (float *)dmalloc(N * 4), *dw = rand_f32(width, 1.0f);
            void *scratch = dmalloc(rmsnorm_backward_scratch_bytes(width));
            char name[64];
            TIME_MS(ms, residual_rmsnorm_forward(res, out, rstd, a, b, w, (int)N, width, 1e-6f, 0, 0));
            snprintf(name, sizeof name, "residual_rmsnorm_forward d=%d", width);
            row(name, ms, 4.0 * N * width, 4.0 * N * width * 2);
            TIME_MS(ms, rmsnorm_backward(dinp, dw, scratch, out, res, w, rstd, (int)N, width, 0, 0));
            snprintf(name, sizeof name, "rmsnorm_backward d=%d (dinp +=)", width);
            row(name, ms, 10.0 * N * width, 6.0 * N * width * 2);
            CUDA_CHECK(cudaFree(a)); CUDA_CHECK(cudaFree(b)); CUDA_CHECK(cudaFree(w)); CUDA_CHECK(cudaFree(res));
            CUDA_CHECK(cudaFree(out)); CUDA_CHECK(cudaFree(dinp)); CUDA_CHECK(cudaFree(rstd)); CUDA_CHECK(cudaFree(dw));
            CUDA_CHECK(cudaFree(scratch));
        }
        const RopeShape rs = {(int)(N / T), T, nh, nkv, hd, 1e-6f, 0, NULL};
        bf16 *proj = rand_bf16(N * QW, 1.0f), *qkv = (bf16 *)dmalloc(N * QW * 2), *dqkv = rand_bf16(N * QW, 1.0f);
        bf16 *qn = rand_bf16(hd, 1.0f), *kn = rand_bf16(hd, 1.0f);
        float *cs = rand_f32((size_t)T * hd / 2, 1.0f), *sn = rand_f32((size_t)T * hd / 2, 1.0f);
        float *rstd = (float *)dmalloc(N * (nh + nkv) * 4), *dqn = rand_f32(hd, 1.0f), *dkn = rand_f32(hd, 1.0f);
        void *scratch = dmalloc(rope_backward_scratch_bytes(&rs));
        const double qk = (double)N * (nh + nkv) * hd;
        TIME_MS(ms, rope_forward(qkv, rstd, proj, qn, kn, cs, sn, &rs, 0));
        row("qk-norm + rope forward (out of place)", ms, 11.0 * qk, 2.0 * qk * 2); /* value heads untouched */
        TIME_MS(ms, rope_backward(dqkv, dqn, dkn, scratch, dqkv, proj, qn, kn, rstd, cs, sn, &rs, 0));
        row("qk-norm + rope backward (in place)", ms, 16.0 * qk, 3.0 * qk * 2);
        TIME_MS(ms, rope_forward(qkv, NULL, qkv, NULL, NULL, cs, sn, &rs, 0));
        row("rope forward (in place, no norm)", ms, 6.0 * qk, 2.0 * qk * 2);
        bf16 *gu = rand_bf16(N * 2 * F, 2.0f), *act = (bf16 *)dmalloc(N * F * 2), *dgu = (bf16 *)dmalloc(N * 2 * F * 2);
        TIME_MS(ms, gated_forward(act, gu, N, F, GATED_SILU, 0));
        row("swiglu forward F=3072", ms, 10.0 * N * F, 3.0 * N * F * 2);
        TIME_MS(ms, gated_backward(dgu, NULL, act, gu, N, F, GATED_SILU, 0));
        row("swiglu backward F=3072", ms, 20.0 * N * F, 5.0 * N * F * 2);
        bf16 *prod = (bf16 *)dmalloc(N * F * 2);
        TIME_MS(ms, gated_backward(dgu, prod, act, gu, N, F, GATED_SILU, 0));
        row("swiglu backward + product F=3072", ms, 30.0 * N * F, 6.0 * N * F * 2);
        CUDA_CHECK(cudaFree(proj)); CUDA_CHECK(cudaFree(qkv)); CUDA_CHECK(cudaFree(dqkv)); CUDA_CHECK(cudaFree(qn));
        CUDA_CHECK(cudaFree(kn)); CUDA_CHECK(cudaFree(cs)); CUDA_CHECK(cudaFree(sn)); CUDA_CHECK(cudaFree(rstd));
        CUDA_CHECK(cudaFree(dqn)); CUDA_CHECK(cudaFree(dkn)); CUDA_CHECK(cudaFree(scratch)); CUDA_CHECK(cudaFree(gu));
        CUDA_CHECK(cudaFree(act)); CUDA_CHECK(cudaFree(dgu)); CUDA_CHECK(cudaFree(prod));
    }
    /* Optimizer over 124M parameters as one tensor list of GPT-2 small's sizes (approximate). */
    if (WANT("optimizer")) {
        size_t n = 124439808;
        float *p = rand_f32(n, 0.02f), *g = rand_f32(n, 0.01f), *m = rand_f32(n, 0.001f), *v = rand_f32(n, 1e-6f);
        square_kernel<<<(unsigned)((n + 255) / 256), 256>>>(v, n); /* v >= 0 */
        CUDA_CHECK(cudaGetLastError());
        bf16 *pb = (bf16 *)dmalloc(n * 2);
        double *ss = (double *)dmalloc(8);
        void *scratch = dmalloc(global_sumsq_scratch_bytes());
        size_t off = 0, numel = n;
        int decay = 1;
        AdamWPlan *plan = adamw_plan_create(&off, &numel, &decay, 1);
        TIME_MS(ms, global_sumsq(ss, scratch, g, n, 0));
        row("global_sumsq 124M", ms, 2.0 * n, 4.0 * n);
        int step = 1;
        TIME_MS(ms, adamw_update(plan, p, pb, g, m, v, 6e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, step++, 0));
        row("adamw_update 124M (fp32 master -> bf16)", ms, 15.0 * n, 30.0 * n);
        /* bf16 state: m and v rounded from the fp32 ones, the weights in pb */
        bf16 *mb = (bf16 *)dmalloc(n * 2), *vb = (bf16 *)dmalloc(n * 2);
        convert_fp32_to_bf16(pb, p, n, 0);
        convert_fp32_to_bf16(mb, m, n, 0);
        convert_fp32_to_bf16(vb, v, n, 0);
        TIME_MS(ms, adamw_update_bf16(plan, pb, g, mb, vb, 0, 6e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, step++, 0));
        row("adamw_update_bf16 124M (bf16 state)", ms, 15.0 * n, 16.0 * n);
        CUDA_CHECK(cudaFree(mb)); CUDA_CHECK(cudaFree(vb));
        adamw_plan_free(plan);
        CUDA_CHECK(cudaFree(p)); CUDA_CHECK(cudaFree(g)); CUDA_CHECK(cudaFree(m)); CUDA_CHECK(cudaFree(v));
        CUDA_CHECK(cudaFree(pb)); CUDA_CHECK(cudaFree(ss)); CUDA_CHECK(cudaFree(scratch));
    }
    matmul_free();
    printf("done\n");
    return 0;
}
