/* tests/test_kernels_gpu.cu - every kernel of kernels/kernels.h against the fp32 CPU reference
 * (model/cpu/layers_cpu.h) on fresh random inputs, at sizes that are not multiples of the tiles.
 *
 * The Llama/Qwen/Gemma kernels (RMSNorm, QK-norm + RoPE, the gated MLPs) are checked the same way
 * against model/cpu/llama_layers_cpu.h.
 *
 * Method: inputs are drawn N(0,1) (weights N(0, 0.02..1)), rounded to bf16 once, and the SAME
 * rounded values feed both sides, so the error measured is the kernel's own. Outputs written with
 * = are poisoned first (0xFF bytes: NaN in bf16 and fp32), so an unwritten element fails; outputs
 * that are += start from random values on both sides. Errors are ‖gpu − cpu‖₂ / ‖cpu‖₂.
 *
 * Tolerances (relative L2), from the roundings each path makes:
 *   one bf16 rounding of the result (encoder, residual)          4e-3
 *   bf16 result of fp32 math (LayerNorm, GELU, matmuls)           1e-2
 *   attention forward (P rounded to bf16 for P·V)                 1e-2
 *   attention backward (P and dS rounded to bf16, then products)  2e-2
 *   fp32 accumulations of bf16 products (dweight, dbias, dwte)    1e-3 (1e-5 for plain sums)
 *   AdamW, fp32 vs fp64 reference                                 1e-5
 * Determinism: each kernel with a reduction runs twice on the same inputs; results must be
 * bitwise identical. Every test prints its measured errors, so the margins are visible. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_bf16.h>

#include "kernels/cuda_check.h"
#include "kernels/adamw_bf16.h"
#include "kernels/kernels.h"
#include "kernels/lt_plans.h"
#include "tests/test.h"

extern "C" {
#include "model/cpu/layers_cpu.h"
#include "model/cpu/llama_layers_cpu.h"
#include "model/cpu/vocab_parallel_cpu.h" /* vocab_slice: the split the ranks use */
}

typedef __nv_bfloat16 bf16;

/* ---- host helpers ---------------------------------------------------------------------- */

static uint64_t g_rng_state;
static uint64_t g_seed;

/* A fresh seed per test (printed with every failure), unless FUSEDGPT_TEST_SEED fixes it. */
static void seed_fresh(void) {
    const char *env = getenv("FUSEDGPT_TEST_SEED");
    static uint64_t counter = 0;
    g_seed = env ? strtoull(env, NULL, 10) : ((uint64_t)time(NULL) * 2654435761u) ^ (++counter * 0x9E3779B97F4A7C15ull);
    g_rng_state = g_seed ? g_seed : 1;
}

static uint64_t rng_u64(void) { /* splitmix64 */
    uint64_t z = (g_rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
/* In (0, 1) strictly: 23 bits and a half, all exact in float (with 24, the largest rounded to 1.0,
 * and fill_normal's log of it made an exact ±0 about once in 2^25 values) */
static float rng_uniform(void) { return (float)((rng_u64() >> 41) + 0.5) / (float)(1 << 23); }

/* Documents packed end to end: each sequence's rows cut at random into documents, with documents of
 * one row, of a tile (64) and of a tile and a row at the start, so that boundaries fall inside tiles,
 * on their edges and a row past them; each query sees only its own document's keys (and within its
 * window). Rows past a sequence's last document belong to a last one. */
static void document_positions(int *pos, int B, int T) {
    const int fixed[3] = {1, 64, 65};
    for (int b = 0; b < B; b++) {
        int at = 0, left = 0, k = b; /* each sequence starts on another of the fixed lengths */
        for (int t = 0; t < T; t++) {
            if (left == 0) {
                left = k < 3 ? fixed[k] : 1 + (int)(rng_u64() % 150);
                k++;
                at = 0;
            }
            pos[(size_t)b * T + t] = at++;
            left--;
        }
    }
}
static void fill_normal(float *x, size_t n, float std) {
    for (size_t i = 0; i < n; i++) {
        float u1 = rng_uniform(), u2 = rng_uniform();
        x[i] = std * sqrtf(-2.0f * logf(u1)) * cosf(6.2831853f * u2);
    }
}

static uint16_t f2bf_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7FFFu + ((u >> 16) & 1u); /* round to nearest even (inputs are finite) */
    return (uint16_t)(u >> 16);
}
static float bf_bits2f(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static void round_bf16(float *x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = bf_bits2f(f2bf_bits(x[i]));
}

static double rel_l2(const float *a, const float *ref, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - ref[i];
        num += d * d;
        den += (double)ref[i] * ref[i];
    }
    if (num != num) return INFINITY; /* NaN: an unwritten (poisoned) or broken element */
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* Device buffers of one test, freed together at its end. */
#define MAX_BUFS 64
static void *g_bufs[MAX_BUFS];
static int g_nbufs;
static void *dalloc(size_t bytes) {
    void *p;
    CUDA_CHECK(cudaMalloc(&p, bytes ? bytes : 16));
    if (g_nbufs == MAX_BUFS) {
        fprintf(stderr, "error: raise MAX_BUFS in tests/test_kernels_gpu.cu\n");
        exit(2);
    }
    g_bufs[g_nbufs++] = p;
    return p;
}
static void dfree_all(void) {
    while (g_nbufs) CUDA_CHECK(cudaFree(g_bufs[--g_nbufs]));
}
static float *hmalloc(size_t n) {
    float *p = (float *)malloc((n ? n : 1) * sizeof(float));
    if (!p) {
        fprintf(stderr, "error: out of host memory\n");
        exit(2);
    }
    return p;
}

static bf16 *up_bf16(const float *h, size_t n) {
    uint16_t *tmp = (uint16_t *)malloc((n ? n : 1) * 2);
    for (size_t i = 0; i < n; i++) tmp[i] = f2bf_bits(h[i]);
    bf16 *d = (bf16 *)dalloc(n * 2);
    CUDA_CHECK(cudaMemcpy(d, tmp, n * 2, cudaMemcpyHostToDevice));
    free(tmp);
    return d;
}
static float *up_f32(const float *h, size_t n) {
    float *d = (float *)dalloc(n * 4);
    CUDA_CHECK(cudaMemcpy(d, h, n * 4, cudaMemcpyHostToDevice));
    return d;
}
static void down_bf16(float *h, const bf16 *d, size_t n) {
    uint16_t *tmp = (uint16_t *)malloc((n ? n : 1) * 2);
    CUDA_CHECK(cudaMemcpy(tmp, d, n * 2, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; i++) h[i] = bf_bits2f(tmp[i]);
    free(tmp);
}
static void down_f32(float *h, const float *d, size_t n) {
    CUDA_CHECK(cudaMemcpy(h, d, n * 4, cudaMemcpyDeviceToHost));
}
static void poison(void *d, size_t bytes) { CUDA_CHECK(cudaMemset(d, 0xFF, bytes)); }
static int same_bytes(const void *a, const void *b, size_t bytes) { return memcmp(a, b, bytes) == 0; }
static void dsync(void) { CUDA_CHECK(cudaDeviceSynchronize()); }

#define NOTE(...)                              \
    do {                                       \
        fprintf(stderr, "\n      ");           \
        fprintf(stderr, __VA_ARGS__);          \
    } while (0)
#define CHECK_REL(err, tol, what)                                                                    \
    do {                                                                                          \
        double e_ = (err);                                                                        \
        NOTE("%-44s rel L2 %.2e (tol %.0e)", what, e_, (double)(tol));                            \
        CHECK(e_ <= (tol), "%s: rel L2 %.3e > %.1e (seed %llu)", what, e_, (double)(tol),          \
              (unsigned long long)g_seed);                                                        \
    } while (0)

/* ---- encoder ----------------------------------------------------------------------------- */

static void encoder_case(int B, int T, int C, int Vp, int skewed, int docs = 0) {
    int N = B * T;
    char what[96];
    int *inp = (int *)malloc(N * sizeof(int));
    /* skewed: half the positions are one token, so one run of the sorted tokens is long. */
    for (int i = 0; i < N; i++) inp[i] = (skewed && (rng_u64() & 1)) ? 3 % Vp : (int)(rng_u64() % Vp);
    float *wte = hmalloc((size_t)Vp * C), *wpe = hmalloc((size_t)T * C), *out = hmalloc((size_t)N * C),
          *ref = hmalloc((size_t)N * C);
    fill_normal(wte, (size_t)Vp * C, 1.0f);
    fill_normal(wpe, (size_t)T * C, 1.0f);
    round_bf16(wte, (size_t)Vp * C);
    round_bf16(wpe, (size_t)T * C);
    int *d_inp = (int *)dalloc(N * sizeof(int)), *pos = NULL, *d_pos = NULL;
    CUDA_CHECK(cudaMemcpy(d_inp, inp, N * sizeof(int), cudaMemcpyHostToDevice));
    if (docs) { /* positions in documents: the position table's rows by them */
        pos = (int *)malloc(N * sizeof(int));
        document_positions(pos, B, T);
        d_pos = (int *)dalloc(N * sizeof(int));
        CUDA_CHECK(cudaMemcpy(d_pos, pos, N * sizeof(int), cudaMemcpyHostToDevice));
    }
    bf16 *d_wte = up_bf16(wte, (size_t)Vp * C), *d_wpe = up_bf16(wpe, (size_t)T * C);
    bf16 *d_out = (bf16 *)dalloc((size_t)N * C * 2);
    poison(d_out, (size_t)N * C * 2);
    encoder_forward(d_out, d_inp, d_pos, d_wte, d_wpe, 1.0f, B, T, C, 0);
    dsync();
    down_bf16(out, d_out, (size_t)N * C);
    encoder_forward_cpu(ref, inp, pos, wte, wpe, B, T, C);
    snprintf(what, sizeof what, "encoder fwd B=%d T=%d C=%d Vp=%d%s", B, T, C, Vp, docs ? " documents" : "");
    CHECK_REL(rel_l2(out, ref, (size_t)N * C), 4e-3, what);

    /* Backward: += into random fp32 gradients, twice from the same start for determinism. */
    float *dout = hmalloc((size_t)N * C), *dwte0 = hmalloc((size_t)Vp * C), *dwpe0 = hmalloc((size_t)T * C);
    float *dwte_ref = hmalloc((size_t)Vp * C), *dwpe_ref = hmalloc((size_t)T * C);
    float *dwte1 = hmalloc((size_t)Vp * C), *dwpe1 = hmalloc((size_t)T * C);
    float *dwte2 = hmalloc((size_t)Vp * C), *dwpe2 = hmalloc((size_t)T * C);
    fill_normal(dout, (size_t)N * C, 1.0f);
    round_bf16(dout, (size_t)N * C);
    fill_normal(dwte0, (size_t)Vp * C, 1.0f);
    fill_normal(dwpe0, (size_t)T * C, 1.0f);
    memcpy(dwte_ref, dwte0, (size_t)Vp * C * 4);
    memcpy(dwpe_ref, dwpe0, (size_t)T * C * 4);
    encoder_backward_cpu(dwte_ref, dwpe_ref, dout, inp, pos, B, T, C);
    bf16 *d_dout = up_bf16(dout, (size_t)N * C);
    void *scratch = dalloc(encoder_backward_scratch_bytes(N, Vp));
    for (int run = 0; run < 2; run++) {
        poison(scratch, encoder_backward_scratch_bytes(N, Vp)); /* scratch contents must not matter */
        float *d_dwte = up_f32(dwte0, (size_t)Vp * C), *d_dwpe = up_f32(dwpe0, (size_t)T * C);
        encoder_backward(d_dwte, d_dwpe, scratch, d_dout, d_inp, d_pos, 1.0f, -1, B, T, C, Vp, 0);
        dsync();
        down_f32(run ? dwte2 : dwte1, d_dwte, (size_t)Vp * C);
        down_f32(run ? dwpe2 : dwpe1, d_dwpe, (size_t)T * C);
    }
    snprintf(what, sizeof what, "encoder bwd dwte%s", skewed ? " (skewed tokens)" : "");
    CHECK_REL(rel_l2(dwte1, dwte_ref, (size_t)Vp * C), 1e-5, what);
    CHECK_REL(rel_l2(dwpe1, dwpe_ref, (size_t)T * C), 1e-5, "encoder bwd dwpe");
    CHECK(same_bytes(dwte1, dwte2, (size_t)Vp * C * 4) && same_bytes(dwpe1, dwpe2, (size_t)T * C * 4),
          "encoder backward is not bitwise deterministic (B=%d T=%d)", B, T);
    free(pos); free(inp); free(wte); free(wpe); free(out); free(ref); free(dout); free(dwte0); free(dwpe0);
    free(dwte_ref); free(dwpe_ref); free(dwte1); free(dwpe1); free(dwte2); free(dwpe2);
    dfree_all();
}

TEST(kernels_encoder_matches_cpu_and_backward_is_deterministic) {
    seed_fresh();
    encoder_case(1, 1, 64, 128, 0);
    encoder_case(3, 7, 72, 136, 0);
    encoder_case(5, 127, 64, 64, 1);
    encoder_case(2, 1024, 768, 50304, 0);
}

TEST(kernels_encoder_takes_position_rows_by_document) {
    seed_fresh();
    encoder_case(3, 7, 72, 136, 0, 1);
    encoder_case(5, 300, 64, 64, 1, 1);
    encoder_case(2, 1024, 768, 50304, 0, 1);
}

/* R simulated ranks of the vocabulary-parallel token embedding (vocab_slice's split of Vp rows),
 * each over all N positions: every rank's output holds its own rows' embeddings and exact zeros
 * elsewhere, so their sum is the whole lookup bitwise; each slice's dwte (+=, from random values)
 * is bitwise encoder_backward's rows of the slice and matches the CPU reference. Tokens sit at both
 * edges of every slice, and half of them are one token when skewed (a long sorted run). With T > 0
 * (N a multiple of T) the owner adds the position table's row, and the sum is encoder_forward's
 * with wpe bitwise; encoder_backward without dwte then gives its dwpe alone, bitwise. */
static void encoder_slices_case(int R, int N, int C, int Vp, int skewed, int T) {
    char what[112];
    int *inp = (int *)malloc(N * sizeof(int));
    for (int i = 0; i < N; i++) inp[i] = (skewed && (rng_u64() & 1)) ? 3 % Vp : (int)(rng_u64() % Vp);
    for (int r = 0, n = 0; r < R && n + 1 < N; r++, n += 2) {
        const VocabSlice sl = vocab_slice(Vp, Vp, R, r);
        inp[n] = sl.begin, inp[n + 1] = sl.begin + sl.rows - 1;
    }
    const size_t nc = (size_t)N * C, vc = (size_t)Vp * C;
    float *wte = hmalloc(vc), *ref = hmalloc(nc), *sum = hmalloc(nc), *out = hmalloc(nc);
    float *dout = hmalloc(nc), *dwte0 = hmalloc(vc), *dwte_ref = hmalloc(vc), *dwte_whole = hmalloc(vc),
          *dwte_slices = hmalloc(vc);
    fill_normal(wte, vc, 1.0f);
    round_bf16(wte, vc);
    fill_normal(dout, nc, 1.0f);
    round_bf16(dout, nc);
    fill_normal(dwte0, vc, 1.0f);
    /* the reference: the token embedding alone (a RoPE family's), and its gradient in fp32 */
    memcpy(dwte_ref, dwte0, vc * 4);
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++) {
            ref[(size_t)n * C + c] = 0.0f + wte[(size_t)inp[n] * C + c]; /* a sum over ranks: -0 comes out +0 */
            dwte_ref[(size_t)inp[n] * C + c] += dout[(size_t)n * C + c];
        }

    int *d_inp = (int *)dalloc(N * sizeof(int));
    CUDA_CHECK(cudaMemcpy(d_inp, inp, N * sizeof(int), cudaMemcpyHostToDevice));
    bf16 *d_wte = up_bf16(wte, vc), *d_dout = up_bf16(dout, nc), *d_out = (bf16 *)dalloc(nc * 2);
    float *d_dwte = up_f32(dwte0, vc);
    void *scratch = dalloc(encoder_backward_scratch_bytes(N, Vp));
    encoder_backward(d_dwte, NULL, scratch, d_dout, d_inp, NULL, 1.0f, -1, 1, N, C, Vp, 0);
    dsync();
    down_f32(dwte_whole, d_dwte, vc);

    /* GPT-2's learned positions: the whole lookup with wpe is encoder_forward's, on the GPU */
    bf16 *d_wpe = NULL;
    if (T) {
        float *wpe = hmalloc((size_t)T * C), *dwpe0 = hmalloc((size_t)T * C), *dwpe_whole = hmalloc((size_t)T * C),
              *dwpe_alone = hmalloc((size_t)T * C);
        fill_normal(wpe, (size_t)T * C, 1.0f);
        round_bf16(wpe, (size_t)T * C);
        fill_normal(dwpe0, (size_t)T * C, 1.0f);
        d_wpe = up_bf16(wpe, (size_t)T * C);
        bf16 *d_ref = (bf16 *)dalloc(nc * 2);
        encoder_forward(d_ref, d_inp, NULL, d_wte, d_wpe, 1.0f, N / T, T, C, 0);
        float *d_dwpe = up_f32(dwpe0, (size_t)T * C), *d_dwte2 = up_f32(dwte0, vc);
        encoder_backward(d_dwte2, d_dwpe, scratch, d_dout, d_inp, NULL, 1.0f, -1, N / T, T, C, Vp, 0);
        dsync();
        down_bf16(ref, d_ref, nc);
        down_f32(dwpe_whole, d_dwpe, (size_t)T * C);
        CUDA_CHECK(cudaMemcpy(d_dwpe, dwpe0, (size_t)T * C * 4, cudaMemcpyHostToDevice));
        encoder_backward(NULL, d_dwpe, scratch, d_dout, d_inp, NULL, 1.0f, -1, N / T, T, C, Vp, 0);
        dsync();
        down_f32(dwpe_alone, d_dwpe, (size_t)T * C);
        CHECK(same_bytes(dwpe_alone, dwpe_whole, (size_t)T * C * 4),
              "encoder_backward without dwte: dwpe differs from the whole backward's (seed %llu)",
              (unsigned long long)g_seed);
        free(wpe), free(dwpe0), free(dwpe_whole), free(dwpe_alone);
    }

    int zeros_kept = 1;
    memset(sum, 0, nc * 4);
    for (int r = 0; r < R; r++) {
        const VocabSlice sl = vocab_slice(Vp, Vp, R, r);
        const size_t off = (size_t)sl.begin * C;
        void *slice_scratch = dalloc(encoder_slice_backward_scratch_bytes(N, sl.rows));
        poison(slice_scratch, encoder_slice_backward_scratch_bytes(N, sl.rows)); /* its contents must not matter */
        poison(d_out, nc * 2);
        encoder_slice_forward(d_out, d_inp, d_wte + off, d_wpe, 1.0f, sl.begin, sl.rows, N, T ? T : N, C, 0);
        float *d_dwte_slice = up_f32(dwte0 + off, (size_t)sl.rows * C);
        encoder_slice_backward(d_dwte_slice, slice_scratch, d_dout, d_inp, 1.0f, -1, sl.begin, sl.rows, N, C, 0);
        dsync();
        down_bf16(out, d_out, nc);
        down_f32(dwte_slices + off, d_dwte_slice, (size_t)sl.rows * C);
        for (int n = 0; n < N; n++) {
            const int mine = inp[n] >= sl.begin && inp[n] < sl.begin + sl.rows;
            for (int c = 0; c < C; c++) {
                const float v = out[(size_t)n * C + c];
                if (!mine && v != 0.0f) zeros_kept = 0;
                sum[(size_t)n * C + c] += v;
            }
        }
    }
    snprintf(what, sizeof what, "encoder over %d slices N=%d C=%d Vp=%d%s%s", R, N, C, Vp, skewed ? " (skewed)" : "",
             T ? " with wpe" : "");
    CHECK(zeros_kept, "%s: a slice wrote a nonzero row for a token it does not own (seed %llu)", what,
          (unsigned long long)g_seed);
    CHECK(same_bytes(sum, ref, nc * 4), "%s: the slices' outputs summed are not the whole lookup (seed %llu)", what,
          (unsigned long long)g_seed);
    CHECK(same_bytes(dwte_slices, dwte_whole, vc * 4),
          "%s: the slices' dwte side by side are not encoder_backward's bitwise (seed %llu)", what,
          (unsigned long long)g_seed);
    CHECK_REL(rel_l2(dwte_slices, dwte_ref, vc), 1e-5, what);
    free(inp); free(wte); free(ref); free(sum); free(out);
    free(dout); free(dwte0); free(dwte_ref); free(dwte_whole); free(dwte_slices);
    dfree_all();
}

TEST(kernels_encoder_over_vocabulary_slices_sums_to_the_whole_lookup_and_gradient) {
    seed_fresh();
    encoder_slices_case(2, 1, 64, 128, 0, 0);
    encoder_slices_case(3, 777, 72, 1000, 0, 0);
    encoder_slices_case(8, 515, 64, 5003, 1, 0);
    encoder_slices_case(2, 4096, 768, 50304, 0, 0);
    encoder_slices_case(3, 777, 72, 1000, 0, 37);
    encoder_slices_case(4, 2048, 768, 50304, 1, 1024);
}

/* Gemma's token embedding alone: scaled by bf16(sqrt(C)) (exact in bf16, so the forward is the
 * CPU's rounded once), its backward scaled too, and the pad token, present in the batch, leaves its
 * row's gradient exactly as it was. */
static void scaled_embedding_case(int B, int T, int C, int Vp, int pad) {
    const int N = B * T;
    GPTConfig cfg = {};
    cfg.dim = C, cfg.embed_scale = EMBED_SCALE_BF16;
    const float scale = gpt_embed_scale(&cfg);
    char what[96];
    int *inp = (int *)malloc(N * sizeof(int));
    for (int i = 0; i < N; i++) { /* pad at every fifth row from the first, never elsewhere */
        const int tok = (int)(rng_u64() % (Vp - 1));
        inp[i] = i % 5 == 0 ? pad : tok + (tok >= pad);
    }
    float *wte = hmalloc((size_t)Vp * C), *out = hmalloc((size_t)N * C), *ref = hmalloc((size_t)N * C);
    fill_normal(wte, (size_t)Vp * C, 1.0f);
    round_bf16(wte, (size_t)Vp * C);
    int *d_inp = (int *)dalloc(N * sizeof(int));
    CUDA_CHECK(cudaMemcpy(d_inp, inp, N * sizeof(int), cudaMemcpyHostToDevice));
    bf16 *d_wte = up_bf16(wte, (size_t)Vp * C), *d_out = (bf16 *)dalloc((size_t)N * C * 2);
    poison(d_out, (size_t)N * C * 2);
    encoder_forward(d_out, d_inp, NULL, d_wte, NULL, scale, B, T, C, 0);
    dsync();
    down_bf16(out, d_out, (size_t)N * C);
    embedding_forward_cpu(ref, inp, wte, scale, (size_t)N, C);
    snprintf(what, sizeof what, "scaled embedding fwd B=%d T=%d C=%d scale %g", B, T, C, (double)scale);
    CHECK_REL(rel_l2(out, ref, (size_t)N * C), 4e-3, what);

    float *dout = hmalloc((size_t)N * C), *dwte0 = hmalloc((size_t)Vp * C), *dwte_ref = hmalloc((size_t)Vp * C),
          *dwte = hmalloc((size_t)Vp * C);
    fill_normal(dout, (size_t)N * C, 1.0f);
    round_bf16(dout, (size_t)N * C);
    fill_normal(dwte0, (size_t)Vp * C, 1.0f);
    memcpy(dwte_ref, dwte0, (size_t)Vp * C * 4);
    embedding_backward_cpu(dwte_ref, dout, inp, scale, pad, (size_t)N, C);
    bf16 *d_dout = up_bf16(dout, (size_t)N * C);
    void *scratch = dalloc(encoder_backward_scratch_bytes(N, Vp));
    poison(scratch, encoder_backward_scratch_bytes(N, Vp));
    float *d_dwte = up_f32(dwte0, (size_t)Vp * C);
    encoder_backward(d_dwte, NULL, scratch, d_dout, d_inp, NULL, scale, pad, B, T, C, Vp, 0);
    dsync();
    down_f32(dwte, d_dwte, (size_t)Vp * C);
    snprintf(what, sizeof what, "scaled embedding bwd dwte, pad %d", pad);
    CHECK_REL(rel_l2(dwte, dwte_ref, (size_t)Vp * C), 1e-5, what);
    CHECK(same_bytes(dwte + (size_t)pad * C, dwte0 + (size_t)pad * C, (size_t)C * 4),
          "the pad token's row %d got a gradient", pad);
    /* a token other than pad that the batch holds did get one */
    const int other = inp[1];
    CHECK(!same_bytes(dwte + (size_t)other * C, dwte0 + (size_t)other * C, (size_t)C * 4),
          "token %d's row got no gradient", other);
    free(inp); free(wte); free(out); free(ref); free(dout); free(dwte0); free(dwte_ref); free(dwte);
    dfree_all();
}

TEST(kernels_gemma_embedding_is_scaled_both_ways_and_the_pad_row_gets_no_gradient) {
    seed_fresh();
    scaled_embedding_case(2, 37, 640, 1000, 0);  /* Gemma's pad_token_id 0 */
    scaled_embedding_case(3, 19, 136, 264, 263); /* the last row, an awkward width */
    scaled_embedding_case(1, 3, 1152, 128, 5);   /* Gemma-3-1B's width */
}

/* A kernel that also sums the columns of what it stored (a bias gradient, +=): sums must be start
 * plus the fp64 column sums of values [rows × cols] (the stored values, as read back), within what
 * fp32 sums of those terms may lose (2e-6·Σ|v| + 1e-6). Returns the worst error as a share of that
 * allowance; INFINITY for a NaN (an unwritten partial reads as the poison's NaN). */
static double column_sums_error(const float *sums, const float *start, const float *values, int rows, int cols) {
    double worst = 0.0;
    for (int c = 0; c < cols; c++) {
        double sum = 0.0, sum_abs = 0.0;
        for (int n = 0; n < rows; n++) {
            sum += values[(size_t)n * cols + c];
            sum_abs += fabs(values[(size_t)n * cols + c]);
        }
        double share = fabs(sums[c] - (start[c] + sum)) / (2e-6 * sum_abs + 1e-6);
        if (!(share <= worst)) worst = isnan(share) ? INFINITY : share;
    }
    return worst;
}

/* ---- layernorm --------------------------------------------------------------------------- */

static void layernorm_case(int N, int C, int with_residual) {
    char what[96];
    size_t nc = (size_t)N * C;
    float *a = hmalloc(nc), *bb = hmalloc(nc), *w = hmalloc(C), *bias = hmalloc(C);
    fill_normal(a, nc, 1.0f);
    fill_normal(bb, nc, 1.0f);
    fill_normal(w, C, 1.0f);
    fill_normal(bias, C, 1.0f);
    round_bf16(a, nc); round_bf16(bb, nc); round_bf16(w, C); round_bf16(bias, C);
    /* CPU: the residual rounded to bf16 (as the GPU stores it), then LN of that. */
    float *res = hmalloc(nc), *ln_ref = hmalloc(nc), *mean_ref = hmalloc(N), *rstd_ref = hmalloc(N);
    if (with_residual) {
        residual_forward_cpu(res, a, bb, nc);
        round_bf16(res, nc);
    } else {
        memcpy(res, a, nc * 4);
    }
    layernorm_forward_cpu(ln_ref, mean_ref, rstd_ref, res, w, bias, 1, N, C);

    bf16 *d_a = up_bf16(a, nc), *d_b = up_bf16(bb, nc), *d_w = up_bf16(w, C), *d_bias = up_bf16(bias, C);
    bf16 *d_res = (bf16 *)dalloc(nc * 2), *d_ln = (bf16 *)dalloc(nc * 2);
    float *d_mean = (float *)dalloc(N * 4), *d_rstd = (float *)dalloc(N * 4);
    poison(d_res, nc * 2); poison(d_ln, nc * 2); poison(d_mean, N * 4); poison(d_rstd, N * 4);
    residual_layernorm_forward(with_residual ? d_res : NULL, d_ln, d_mean, d_rstd, d_a, with_residual ? d_b : NULL,
                               d_w, d_bias, N, C, 0);
    dsync();
    float *res_g = hmalloc(nc), *ln_g = hmalloc(nc), *mean_g = hmalloc(N), *rstd_g = hmalloc(N);
    down_bf16(res_g, d_res, nc);
    down_bf16(ln_g, d_ln, nc);
    down_f32(mean_g, d_mean, N);
    down_f32(rstd_g, d_rstd, N);
    snprintf(what, sizeof what, "layernorm fwd N=%d C=%d%s: ln", N, C, with_residual ? " +res" : "");
    CHECK_REL(rel_l2(ln_g, ln_ref, nc), 1e-2, what);
    if (with_residual) CHECK_REL(rel_l2(res_g, res, nc), 1e-6, "  residual (exact up to rounding mode)");
    CHECK_REL(rel_l2(mean_g, mean_ref, N), 1e-4, "  mean");
    CHECK_REL(rel_l2(rstd_g, rstd_ref, N), 1e-4, "  rstd");

    /* Backward from the CPU statistics (so both sides see the same mean/rstd). */
    float *dout = hmalloc(nc), *dinp0 = hmalloc(nc), *dw0 = hmalloc(C), *db0 = hmalloc(C);
    fill_normal(dout, nc, 1.0f);
    fill_normal(dinp0, nc, 1.0f);
    fill_normal(dw0, C, 1.0f);
    fill_normal(db0, C, 1.0f);
    round_bf16(dout, nc);
    round_bf16(dinp0, nc);
    float *dinp_ref = hmalloc(nc), *dw_ref = hmalloc(C), *db_ref = hmalloc(C);
    memcpy(dinp_ref, dinp0, nc * 4);
    memcpy(dw_ref, dw0, C * 4);
    memcpy(db_ref, db0, C * 4);
    layernorm_backward_cpu(dinp_ref, dw_ref, db_ref, dout, res, w, mean_ref, rstd_ref, 1, N, C);
    bf16 *d_dout = up_bf16(dout, nc), *d_inp = up_bf16(res, nc);
    float *d_meanr = up_f32(mean_ref, N), *d_rstdr = up_f32(rstd_ref, N);
    void *scratch = dalloc(layernorm_backward_scratch_bytes(C));
    /* The += is checked on the increments (the random start would hide small errors). */
    for (size_t i = 0; i < nc; i++) dinp_ref[i] -= dinp0[i];
    for (int i = 0; i < C; i++) { dw_ref[i] -= dw0[i]; db_ref[i] -= db0[i]; }
    float *ds0 = hmalloc(C);
    fill_normal(ds0, C, 1.0f);
    /* Without, then with the sum of the updated dinp (a projection's bias gradient): every case runs
     * both kernels (C <= 768 has one with the sums in registers; wider ones add bias_backward). */
    for (int with_sum = 0; with_sum < 2; with_sum++) {
        float *dinp_g[2], *dw_g[2], *db_g[2], *ds_g[2];
        for (int run = 0; run < 2; run++) {
            poison(scratch, layernorm_backward_scratch_bytes(C));
            bf16 *d_dinp = up_bf16(dinp0, nc);
            float *d_dw = up_f32(dw0, C), *d_db = up_f32(db0, C), *d_ds = up_f32(ds0, C);
            layernorm_backward(d_dinp, d_dw, d_db, with_sum ? d_ds : NULL, scratch, d_dout, d_inp, d_w, d_meanr,
                               d_rstdr, N, C, 0);
            dsync();
            dinp_g[run] = hmalloc(nc); dw_g[run] = hmalloc(C); db_g[run] = hmalloc(C); ds_g[run] = hmalloc(C);
            down_bf16(dinp_g[run], d_dinp, nc);
            down_f32(dw_g[run], d_dw, C);
            down_f32(db_g[run], d_db, C);
            down_f32(ds_g[run], d_ds, C);
        }
        CHECK(same_bytes(dinp_g[0], dinp_g[1], nc * 4) && same_bytes(dw_g[0], dw_g[1], C * 4) &&
                  same_bytes(db_g[0], db_g[1], C * 4) && same_bytes(ds_g[0], ds_g[1], C * 4),
              "layernorm backward is not bitwise deterministic (N=%d C=%d, sums %d)", N, C, with_sum);
        if (with_sum) { /* exactly the column sums of what the GPU stored */
            double worst = column_sums_error(ds_g[0], ds0, dinp_g[0], N, C);
            CHECK(worst <= 1.0, "layernorm backward dinp sum (N=%d C=%d): error %.3g of the allowed", N, C, worst);
        }
        for (size_t i = 0; i < nc; i++) dinp_g[0][i] -= dinp0[i];
        for (int i = 0; i < C; i++) { dw_g[0][i] -= dw0[i]; db_g[0][i] -= db0[i]; }
        CHECK_REL(rel_l2(dinp_g[0], dinp_ref, nc), 2e-2, with_sum ? "  bwd dinp increment (with the sums)"
                                                                  : "  bwd dinp increment (bf16 += rounding)");
        CHECK_REL(rel_l2(dw_g[0], dw_ref, C), 1e-4, "  bwd dweight increment");
        CHECK_REL(rel_l2(db_g[0], db_ref, C), 1e-4, "  bwd dbias increment");
        for (int r = 0; r < 2; r++) { free(dinp_g[r]); free(dw_g[r]); free(db_g[r]); free(ds_g[r]); }
    }
    free(ds0);
    free(a); free(bb); free(w); free(bias); free(res); free(ln_ref); free(mean_ref); free(rstd_ref);
    free(res_g); free(ln_g); free(mean_g); free(rstd_g); free(dout); free(dinp0); free(dw0); free(db0);
    free(dinp_ref); free(dw_ref); free(db_ref);
    dfree_all();
}

TEST(kernels_residual_layernorm_matches_cpu_and_backward_is_deterministic) {
    seed_fresh();
    layernorm_case(1, 768, 1);
    layernorm_case(3 * 127, 768, 1);
    layernorm_case(7, 1000, 0);
    layernorm_case(5 * 7, 1600, 1);
    layernorm_case(2048, 264, 1);
    layernorm_case(67, 128, 1);  /* K = 1: the tiny preset's width */
    layernorm_case(33, 2304, 1); /* C > 2048: the shared-memory backward */
}

/* ---- GELU and bias gradient ------------------------------------------------------------- */

TEST(kernels_gelu_and_bias_backward_match_cpu) {
    seed_fresh();
    size_t n = 8 * 1001;
    float *x = hmalloc(n), *d = hmalloc(n), *ref = hmalloc(n), *got = hmalloc(n), *dref = hmalloc(n);
    fill_normal(x, n, 2.0f);
    fill_normal(d, n, 1.0f);
    round_bf16(x, n);
    round_bf16(d, n);
    bf16 *d_x = up_bf16(x, n), *d_d = up_bf16(d, n), *d_o = (bf16 *)dalloc(n * 2);
    poison(d_o, n * 2);
    gelu_forward(d_o, d_x, n, 0);
    dsync();
    down_bf16(got, d_o, n);
    gelu_forward_cpu(ref, x, n);
    /* bf16 output rounding alone is ~1.7e-3; x*sigmoid(1.702x) in place of tanh-GELU would be 7.7e-3 */
    CHECK_REL(rel_l2(got, ref, n), 5e-3, "gelu forward");
    poison(d_o, n * 2);
    gelu_backward(d_o, d_x, d_d, n, 0);
    dsync();
    down_bf16(got, d_o, n);
    memset(dref, 0, n * 4);
    gelu_backward_cpu(dref, x, d, n);
    CHECK_REL(rel_l2(got, dref, n), 1e-2, "gelu backward");
    gelu_backward(d_d, d_x, d_d, n, 0); /* in place, as documented */
    dsync();
    down_bf16(got, d_d, n);
    CHECK_REL(rel_l2(got, dref, n), 1e-2, "gelu backward in place");
    free(x); free(d); free(ref); free(got); free(dref);
    dfree_all();

    int shapes[][2] = {{1, 8}, {381, 776}, {4099, 2304}};
    for (int s = 0; s < 3; s++) {
        int N = shapes[s][0], OC = shapes[s][1];
        size_t nn = (size_t)N * OC;
        float *dout = hmalloc(nn), *db0 = hmalloc(OC), *dbr = hmalloc(OC), *g1 = hmalloc(OC), *g2 = hmalloc(OC);
        fill_normal(dout, nn, 1.0f);
        round_bf16(dout, nn);
        fill_normal(db0, OC, 1.0f);
        for (int o = 0; o < OC; o++) {
            double acc = 0;
            for (int i = 0; i < N; i++) acc += dout[(size_t)i * OC + o];
            dbr[o] = (float)acc;
        }
        bf16 *d_dout = up_bf16(dout, nn);
        void *scratch = dalloc(bias_backward_scratch_bytes(OC));
        for (int run = 0; run < 2; run++) {
            poison(scratch, bias_backward_scratch_bytes(OC));
            float *d_db = up_f32(db0, OC);
            bias_backward(d_db, scratch, d_dout, N, OC, 0);
            dsync();
            down_f32(run ? g2 : g1, d_db, OC);
        }
        CHECK(same_bytes(g1, g2, OC * 4), "bias_backward is not bitwise deterministic (N=%d OC=%d)", N, OC);
        for (int o = 0; o < OC; o++) g1[o] -= db0[o];
        char what[64];
        snprintf(what, sizeof what, "bias backward N=%d OC=%d (increment)", N, OC);
        CHECK_REL(rel_l2(g1, dbr, OC), 1e-5, what);
        free(dout); free(db0); free(dbr); free(g1); free(g2);
        dfree_all();
    }
}

/* ---- matmul ------------------------------------------------------------------------------ */

static void matmul_case(int N, int C, int OC, int with_bias, int gelu) {
    char what[128];
    size_t nc = (size_t)N * C, no = (size_t)N * OC, oc_c = (size_t)OC * C;
    float *inp = hmalloc(nc), *w = hmalloc(oc_c), *bias = hmalloc(OC);
    fill_normal(inp, nc, 1.0f);
    fill_normal(w, oc_c, 1.0f / sqrtf((float)C));
    fill_normal(bias, OC, 0.5f);
    round_bf16(inp, nc); round_bf16(w, oc_c); round_bf16(bias, OC);
    float *pre_ref = hmalloc(no), *out_ref = hmalloc(no);
    matmul_forward_cpu(pre_ref, inp, w, with_bias ? bias : NULL, N, C, OC);
    if (gelu) gelu_forward_cpu(out_ref, pre_ref, no); else memcpy(out_ref, pre_ref, no * 4);

    bf16 *d_inp = up_bf16(inp, nc), *d_w = up_bf16(w, oc_c), *d_bias = up_bf16(bias, OC);
    bf16 *d_out = (bf16 *)dalloc(no * 2), *d_pre = gelu ? (bf16 *)dalloc(no * 2) : NULL;
    float *got = hmalloc(no);
    /* Twice, the second time into a fresh output buffer: the cached plan must follow the pointers. */
    for (int run = 0; run < 2; run++) {
        if (run) {
            d_out = (bf16 *)dalloc(no * 2);
            if (gelu) d_pre = (bf16 *)dalloc(no * 2);
        }
        poison(d_out, no * 2);
        if (gelu) poison(d_pre, no * 2);
        matmul_forward(d_out, d_pre, d_inp, d_w, with_bias ? d_bias : NULL, N, C, OC, 0);
        dsync();
        down_bf16(got, d_out, no);
        snprintf(what, sizeof what, "matmul fwd N=%d C=%d OC=%d bias=%d gelu=%d run %d", N, C, OC, with_bias, gelu,
                 run);
        CHECK_REL(rel_l2(got, out_ref, no), 1e-2, what);
        if (gelu) {
            down_bf16(got, d_pre, no);
            CHECK_REL(rel_l2(got, pre_ref, no), 1e-2, "  pre_gelu (aux output)");
        }
    }

    /* Backward. With gelu: this matmul's input is gelu(pre_in) and dinp must come out as the
     * gradient of pre_in (dGELU epilogue). */
    float *dout = hmalloc(no), *dw0 = hmalloc(oc_c), *db0 = hmalloc(OC), *pre_in = hmalloc(nc), *x = hmalloc(nc);
    fill_normal(dout, no, 1.0f);
    round_bf16(dout, no);
    fill_normal(dw0, oc_c, 1.0f);
    fill_normal(db0, OC, 1.0f);
    fill_normal(pre_in, nc, 1.5f);
    round_bf16(pre_in, nc);
    const float *xin = inp;
    if (gelu) { /* the forward input is gelu(pre_in), as the GPU would have stored it (bf16) */
        gelu_forward_cpu(x, pre_in, nc);
        round_bf16(x, nc);
        xin = x;
    }
    float *dx_ref = hmalloc(nc), *dw_ref = hmalloc(oc_c), *db_ref = hmalloc(OC);
    memset(dx_ref, 0, nc * 4);
    memcpy(dw_ref, dw0, oc_c * 4);
    memcpy(db_ref, db0, OC * 4);
    matmul_backward_cpu(dx_ref, dw_ref, db_ref, dout, xin, w, N, C, OC);
    if (gelu) {
        float *tmp = hmalloc(nc);
        memset(tmp, 0, nc * 4);
        gelu_backward_cpu(tmp, pre_in, dx_ref, nc);
        memcpy(dx_ref, tmp, nc * 4);
        free(tmp);
    }
    bf16 *d_dout = up_bf16(dout, no), *d_x = up_bf16(xin, nc), *d_pre_in = up_bf16(pre_in, nc);
    void *scratch = dalloc(bias_backward_scratch_bytes(OC));
    float *dx_g = hmalloc(nc), *dw_g[2], *db_g[2];
    for (int run = 0; run < 2; run++) {
        /* Run 1 skips dinp (NULL): dweight and dbias must not depend on it. */
        bf16 *d_dx = run == 0 ? (bf16 *)dalloc(nc * 2) : NULL;
        if (d_dx) poison(d_dx, nc * 2);
        poison(scratch, bias_backward_scratch_bytes(OC));
        float *d_dw = up_f32(dw0, oc_c), *d_db = up_f32(db0, OC);
        matmul_backward(d_dx, d_dw, with_bias ? d_db : NULL, scratch, d_dout, d_x, d_w, gelu ? d_pre_in : NULL, N, C,
                        OC, 0);
        dsync();
        if (run == 0) down_bf16(dx_g, d_dx, nc);
        dw_g[run] = hmalloc(oc_c);
        db_g[run] = hmalloc(OC);
        down_f32(dw_g[run], d_dw, oc_c);
        down_f32(db_g[run], d_db, OC);
    }
    CHECK(same_bytes(dw_g[0], dw_g[1], oc_c * 4) && same_bytes(db_g[0], db_g[1], OC * 4),
          "matmul backward is not bitwise deterministic (N=%d C=%d OC=%d)", N, C, OC);
    CHECK_REL(rel_l2(dx_g, dx_ref, nc), 1e-2, gelu ? "  bwd dinp (dGELU epilogue)" : "  bwd dinp");
    for (size_t i = 0; i < oc_c; i++) { dw_g[0][i] -= dw0[i]; dw_ref[i] -= dw0[i]; }
    CHECK_REL(rel_l2(dw_g[0], dw_ref, oc_c), 1e-3, "  bwd dweight increment (fp32 +=)");
    if (with_bias) {
        for (int i = 0; i < OC; i++) { db_g[0][i] -= db0[i]; db_ref[i] -= db0[i]; }
        CHECK_REL(rel_l2(db_g[0], db_ref, OC), 1e-4, "  bwd dbias increment");
    } else {
        CHECK(same_bytes(db_g[0], db0, OC * 4), "dbias touched although NULL was passed");
    }
    for (int r = 0; r < 2; r++) { free(dw_g[r]); free(db_g[r]); }
    free(inp); free(w); free(bias); free(pre_ref); free(out_ref); free(got); free(dout); free(dw0); free(db0);
    free(pre_in); free(x); free(dx_ref); free(dw_ref); free(db_ref); free(dx_g);
    dfree_all();
}

TEST(kernels_matmul_with_epilogues_matches_cpu) {
    seed_fresh();
    matmul_case(1, 64, 64, 1, 0);
    matmul_case(7 * 3, 264, 200, 1, 0);
    matmul_case(381, 256, 1024, 1, 1);  /* fc: bias + GELU */
    matmul_case(381, 1024, 256, 1, 1);  /* fc_proj backward with dGELU (C = 4·OC) */
    matmul_case(77, 384, 128, 1, 1);    /* the same, widths not multiples of 256 */
    matmul_case(300, 3072, 768, 0, 1);  /* GPT-2's fc_proj with dGELU, no bias */
    matmul_case(127, 128, 384, 0, 0);
    matmul_case(1024, 768, 2304, 1, 0); /* GPT-2 qkv */
}

/* One body GEMM, forward and backward, run twice on the same inputs: every output the same bits.
 * fwd_gelu: the forward's GELU epilogue (fc); bwd_dgelu: the backward's dGELU epilogue (fc_proj). */
static void matmul_twice_case(int N, int C, int OC, int fwd_gelu, int bwd_dgelu) {
    size_t nc = (size_t)N * C, no = (size_t)N * OC, oc_c = (size_t)OC * C;
    float *h = hmalloc(no > oc_c ? (no > nc ? no : nc) : (oc_c > nc ? oc_c : nc));
    fill_normal(h, nc, 1.0f);
    bf16 *d_inp = up_bf16(h, nc), *d_pre_in = up_bf16(h, nc);
    fill_normal(h, oc_c, 1.0f / sqrtf((float)C));
    bf16 *d_w = up_bf16(h, oc_c);
    fill_normal(h, OC, 0.5f);
    bf16 *d_bias = up_bf16(h, OC);
    fill_normal(h, no, 1.0f);
    bf16 *d_dout = up_bf16(h, no);
    void *scratch = dalloc(bias_backward_scratch_bytes(OC));
    unsigned char *got[2][5];
    const size_t bytes[5] = {no * 2, no * 2, nc * 2, oc_c * 4, (size_t)OC * 4};
    for (int run = 0; run < 2; run++) {
        bf16 *d_out = (bf16 *)dalloc(bytes[0]), *d_pre = (bf16 *)dalloc(bytes[1]), *d_dx = (bf16 *)dalloc(bytes[2]);
        float *d_dw = (float *)dalloc(bytes[3]), *d_db = (float *)dalloc(bytes[4]);
        CUDA_CHECK(cudaMemset(d_pre, 0, bytes[1]));
        CUDA_CHECK(cudaMemset(d_dw, 0, bytes[3]));
        CUDA_CHECK(cudaMemset(d_db, 0, bytes[4]));
        matmul_forward(d_out, fwd_gelu ? d_pre : NULL, d_inp, d_w, d_bias, N, C, OC, 0);
        matmul_backward(d_dx, d_dw, d_db, scratch, d_dout, d_inp, d_w, bwd_dgelu ? d_pre_in : NULL, N, C, OC, 0);
        dsync();
        const void *dev[5] = {d_out, d_pre, d_dx, d_dw, d_db};
        for (int k = 0; k < 5; k++) {
            got[run][k] = (unsigned char *)malloc(bytes[k]);
            REQUIRE(got[run][k], "host memory");
            CUDA_CHECK(cudaMemcpy(got[run][k], dev[k], bytes[k], cudaMemcpyDeviceToHost));
        }
    }
    const char *names[5] = {"out", "pre_gelu", "dinp", "dweight", "dbias"};
    for (int k = 0; k < 5; k++) {
        CHECK(same_bytes(got[0][k], got[1][k], bytes[k]), "N=%d C=%d OC=%d: %s differs between two runs", N, C, OC,
              names[k]);
        free(got[0][k]);
        free(got[1][k]);
    }
    free(h);
    dfree_all();
}

/* Every GEMM of GPT-2 124M's body (C = 768, T = 1024) at two batch sizes: two runs give the same
 * bits, so no algorithm cuBLASLt picks may sum split-K pieces in the order they finish. */
TEST(kernels_body_gemms_of_gpt2_124m_are_bitwise_repeatable) {
    seed_fresh();
    const int C = 768, T = 1024, batches[2] = {4, 16};
    for (int i = 0; i < 2; i++) {
        const int N = batches[i] * T;
        matmul_twice_case(N, C, 3 * C, 0, 0); /* qkv */
        matmul_twice_case(N, C, C, 0, 0);     /* attention projection */
        matmul_twice_case(N, C, 4 * C, 1, 0); /* fc, GELU epilogue */
        matmul_twice_case(N, 4 * C, C, 0, 1); /* fc_proj, dGELU epilogue in the backward */
    }
}

/* One product through a plan cache that times the heuristic's offers and through one that does not,
 * on the same operands: the outputs (and a GELU epilogue's aux matrix) must be the same bits, and
 * an accumulating product (beta = 1) must add to its random start exactly once, so the timed
 * candidates wrote elsewhere. weight_gradient: m x n += A[m x k] . B[n x k]^T in fp32 (the dW
 * product); else a bf16 forward out[m x n] = A[k x m]^T . B[k x n] with epilogue ep. */
static void timed_plan_case(LtPlans *timed, LtPlans *first, int m, int n, int k, int weight_gradient,
                            cublasLtEpilogue_t ep) {
    LtShape s = {};
    s.ta = weight_gradient ? CUBLAS_OP_N : CUBLAS_OP_T;
    s.tb = weight_gradient ? CUBLAS_OP_T : CUBLAS_OP_N;
    s.m = m, s.n = n, s.k = k;
    s.lda = s.ta == CUBLAS_OP_T ? k : m;
    s.ldb = s.tb == CUBLAS_OP_T ? n : k;
    s.ldc = m;
    s.ctype = weight_gradient ? CUDA_R_32F : CUDA_R_16BF;
    s.epilogue = ep;
    s.min_alignment = 16;
    const size_t na = (size_t)m * k, nb = (size_t)n * k, nc = (size_t)m * n, c_bytes = nc * (weight_gradient ? 4 : 2);
    float *h = hmalloc(na > nb ? (na > nc ? na : nc) : (nb > nc ? nb : nc));
    fill_normal(h, na, 1.0f);
    bf16 *A = up_bf16(h, na);
    fill_normal(h, nb, 1.0f / sqrtf((float)k));
    bf16 *B = up_bf16(h, nb);
    fill_normal(h, m, 0.5f);
    bf16 *bias = up_bf16(h, m);
    fill_normal(h, nc, 1.0f);
    const float one = 1.0f, zero = 0.0f;
    unsigned char *got[2][2];
    LtPlans *caches[2] = {timed, first};
    for (int i = 0; i < 2; i++) {
        void *C = dalloc(c_bytes), *aux = dalloc(nc * 2);
        if (weight_gradient) CUDA_CHECK(cudaMemcpy(C, h, c_bytes, cudaMemcpyHostToDevice));
        else poison(C, c_bytes);
        poison(aux, nc * 2);
        LtPlan *p = lt_plan(caches[i], &s, bias, aux);
        REQUIRE(p, "cuBLASLt has no algorithm for m=%d n=%d k=%d", m, n, k);
        lt_matmul(caches[i], p, &one, A, B, weight_gradient ? &one : &zero, C, bias, aux, 0);
        dsync();
        got[i][0] = (unsigned char *)malloc(c_bytes);
        got[i][1] = (unsigned char *)malloc(nc * 2);
        REQUIRE(got[i][0] && got[i][1], "host memory");
        CUDA_CHECK(cudaMemcpy(got[i][0], C, c_bytes, cudaMemcpyDeviceToHost));
        CUDA_CHECK(cudaMemcpy(got[i][1], aux, nc * 2, cudaMemcpyDeviceToHost));
    }
    CHECK(same_bytes(got[0][0], got[1][0], c_bytes), "m=%d n=%d k=%d %s: the timed plan's output differs from the "
          "first choice's", m, n, k, weight_gradient ? "weight gradient" : "forward");
    if (ep == CUBLASLT_EPILOGUE_GELU_AUX_BIAS)
        CHECK(same_bytes(got[0][1], got[1][1], nc * 2), "m=%d n=%d k=%d: the timed plan's pre-GELU values differ",
              m, n, k);
    for (int i = 0; i < 2; i++) free(got[i][0]), free(got[i][1]);
    free(h);
    dfree_all();
}

/* Timing picks among kernels, never among roundings: at every product the timed cache gives the
 * heuristic's first choice's bits. The last shape is one where the heuristic also offers split-K
 * (other bits), which the hash must turn away. */
TEST(kernels_timed_matmul_plans_give_the_heuristics_first_choice_bits) {
    seed_fresh();
    LtPlans timed, first;
    lt_plans_create(&timed, 32u << 20);
    lt_plans_create(&first, 32u << 20);
    timed.timed_min_flop = 1.0;
    timed_plan_case(&timed, &first, 1032, 2056, 776, 0, CUBLASLT_EPILOGUE_DEFAULT);
    timed_plan_case(&timed, &first, 1032, 2056, 776, 0, CUBLASLT_EPILOGUE_GELU_AUX_BIAS);
    timed_plan_case(&timed, &first, 776, 1032, 2056, 1, CUBLASLT_EPILOGUE_DEFAULT);
    timed_plan_case(&timed, &first, 2048, 1024, 32768, 1, CUBLASLT_EPILOGUE_DEFAULT);
    lt_plans_destroy(&timed);
    lt_plans_destroy(&first);
}

/* ---- attention --------------------------------------------------------------------------- */

/* The attention's shape and the CPU reference's parameters for the same call. */
static AttentionShape att_shape(int B, int T, int NH, int NKV, int HS, float scale, int window) {
    AttentionShape s = {B, T, NH, NKV, HS, scale, window, NULL};
    return s;
}
/* pos: the rows' positions in their documents on the host (the shape's are on the device), or NULL. */
static AttentionParams att_params(const AttentionShape *s, const int *pos) {
    AttentionParams p = {{s->B, s->T, s->NH, s->NKV, s->HS, pos}, s->scale, s->window};
    return p;
}

/* Columns c0 .. c0 + w - 1 of the rows of x [rows, width], packed. */
static float *columns(const float *x, size_t rows, size_t width, size_t c0, size_t w) {
    float *y = hmalloc(rows * w);
    for (size_t r = 0; r < rows; r++) memcpy(y + r * w, x + r * width + c0, w * sizeof(float));
    return y;
}

/* Forward out and lse, and backward dqkv (each of the q, k and v parts on its own) and the qkv bias
 * sums, against the fp32 CPU reference on the same bf16 inputs; the backward twice, bitwise; and both
 * again with the value heads read from another buffer (v), bitwise the same. pos: documents (the
 * rows' positions in them, host memory), or NULL. */
static void attention_case_docs(const AttentionShape *shape, const int *pos) {
    char what[160];
    AttentionShape shape_docs = *shape;
    const AttentionShape *sh = &shape_docs;
    const int B = sh->B, T = sh->T, NH = sh->NH, NKV = sh->NKV, HS = sh->HS;
    const size_t W = (size_t)(NH + 2 * NKV) * HS, C = (size_t)NH * HS, N = (size_t)B * T;
    const size_t nqkv = N * W, nout = N * C, natt = (size_t)B * NH * T * T, nlse = (size_t)B * NH * T;
    const AttentionParams prm = att_params(sh, pos);
    if (pos) {
        int *d_pos = (int *)dalloc(N * sizeof(int));
        CUDA_CHECK(cudaMemcpy(d_pos, pos, N * sizeof(int), cudaMemcpyHostToDevice));
        shape_docs.pos = d_pos;
    }
    int docs = 0;
    for (size_t n = 0; pos && n < N; n++) docs += pos[n] == 0;
    snprintf(what, sizeof what, "attention B=%d T=%d NH=%d NKV=%d HS=%d scale=%g window=%d documents=%d", B, T, NH,
             NKV, HS, (double)sh->scale, sh->window, docs);
    float *qkv = hmalloc(nqkv), *out_ref = hmalloc(nout), *att = hmalloc(natt), *out_g = hmalloc(nout);
    fill_normal(qkv, nqkv, 1.0f);
    round_bf16(qkv, nqkv);
    gqa_attention_forward_cpu(out_ref, att, qkv, &prm);

    bf16 *d_qkv = up_bf16(qkv, nqkv);
    bf16 *d_out = (bf16 *)dalloc(nout * 2);
    float *d_lse = (float *)dalloc(nlse * 4);
    poison(d_out, nout * 2);
    poison(d_lse, nlse * 4);
    attention_forward(d_out, d_lse, d_qkv, NULL, sh, 0);
    dsync();
    down_bf16(out_g, d_out, nout);
    CHECK_REL(rel_l2(out_g, out_ref, nout), 1e-2, what);
    /* lse in log2 units: each row's probabilities are exp2(scale·q·k·log2(e) − lse), so the reference
     * gives lse = scale·q·k·log2(e) − log2(p) at the row's most likely key. */
    float *lse = hmalloc(nlse);
    down_f32(lse, d_lse, nlse);
    double lse_err = 0;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const float *a = att + (((size_t)b * NH + h) * T + t) * T;
                int jmax = 0;
                for (int j = 1; j <= t; j++)
                    if (a[j] > a[jmax]) jmax = j;
                const float *q = qkv + ((size_t)b * T + t) * W + (size_t)h * HS;
                const float *k = qkv + ((size_t)b * T + jmax) * W + (size_t)(NH + h / (NH / NKV)) * HS;
                double dot = 0;
                for (int d = 0; d < HS; d++) dot += (double)q[d] * k[d];
                double ref = dot * sh->scale / log(2.0) - log2((double)a[jmax]);
                double got = lse[((size_t)b * NH + h) * T + t];
                double e = isfinite(got) ? fabs(got - ref) / (1.0 + fabs(ref)) : INFINITY;
                lse_err = e > lse_err ? e : lse_err;
            }
    CHECK(lse_err <= 1e-3, "%s: lse off by %.3g relative (seed %llu)", what, lse_err, (unsigned long long)g_seed);

    /* Backward: the GPU gets its own out and lse (what the trainer saves); the CPU its att. */
    float *dout = hmalloc(nout), *dqkv_ref = hmalloc(nqkv), *dqkv_g = hmalloc(nqkv), *dqkv_g2 = hmalloc(nqkv);
    fill_normal(dout, nout, 1.0f);
    round_bf16(dout, nout);
    memset(dqkv_ref, 0, nqkv * 4);
    gqa_attention_backward_cpu(dqkv_ref, dout, qkv, att, &prm);
    bf16 *d_dout = up_bf16(dout, nout), *d_dqkv = (bf16 *)dalloc(nqkv * 2);
    size_t scratch_bytes = attention_backward_scratch_bytes(sh);
    void *scratch = dalloc(scratch_bytes);
    /* The qkv bias gradient summed as dqkv is stored: += onto a random start. */
    float *db0 = hmalloc(W), *db_g[2] = {hmalloc(W), hmalloc(W)};
    fill_normal(db0, W, 1.0f);
    float *d_db = (float *)dalloc(W * 4);
    for (int run = 0; run < 2; run++) {
        poison(d_dqkv, nqkv * 2);
        poison(scratch, scratch_bytes);
        CUDA_CHECK(cudaMemcpy(d_db, db0, W * 4, cudaMemcpyHostToDevice));
        attention_backward(d_dqkv, d_db, scratch, d_dout, d_qkv, NULL, d_out, d_lse, sh, 0);
        dsync();
        down_bf16(run ? dqkv_g2 : dqkv_g, d_dqkv, nqkv);
        down_f32(db_g[run], d_db, W);
    }
    CHECK(same_bytes(dqkv_g, dqkv_g2, nqkv * 4) && same_bytes(db_g[0], db_g[1], W * 4),
          "%s: backward is not bitwise deterministic", what);
    double worst = column_sums_error(db_g[0], db0, dqkv_g, (int)N, (int)W);
    CHECK(worst <= 1.0, "%s: qkv bias sums error %.3g of the allowed", what, worst);
    /* Without the sums, the same dqkv. */
    poison(d_dqkv, nqkv * 2);
    attention_backward(d_dqkv, NULL, scratch, d_dout, d_qkv, NULL, d_out, d_lse, sh, 0);
    dsync();
    down_bf16(dqkv_g2, d_dqkv, nqkv);
    CHECK(same_bytes(dqkv_g, dqkv_g2, nqkv * 4), "%s: backward without the bias sums differs from with them", what);
    /* The value heads from another buffer of the same layout: its query and key columns, and qkv's
     * value columns, are NaN, so reading a wrong column cannot go unseen. */
    {
        const size_t kv_end = (size_t)(NH + NKV) * HS;
        bf16 *d_qk = up_bf16(qkv, nqkv), *d_v = up_bf16(qkv, nqkv);
        CUDA_CHECK(cudaMemset2D(d_qk + kv_end, W * 2, 0xFF, (W - kv_end) * 2, N));
        CUDA_CHECK(cudaMemset2D(d_v, W * 2, 0xFF, kv_end * 2, N));
        bf16 *d_out2 = (bf16 *)dalloc(nout * 2);
        float *d_lse2 = (float *)dalloc(nlse * 4), *out_v = hmalloc(nout), *lse_v = hmalloc(nlse);
        poison(d_out2, nout * 2);
        attention_forward(d_out2, d_lse2, d_qk, d_v, sh, 0);
        dsync();
        down_bf16(out_v, d_out2, nout);
        down_f32(lse_v, d_lse2, nlse);
        CHECK(same_bytes(out_v, out_g, nout * 4) && same_bytes(lse_v, lse, nlse * 4),
              "%s: forward with the values from another buffer differs", what);
        poison(d_dqkv, nqkv * 2);
        poison(scratch, scratch_bytes);
        attention_backward(d_dqkv, NULL, scratch, d_dout, d_qk, d_v, d_out, d_lse, sh, 0);
        dsync();
        down_bf16(dqkv_g2, d_dqkv, nqkv);
        CHECK(same_bytes(dqkv_g, dqkv_g2, nqkv * 4), "%s: backward with the values from another buffer differs",
              what);
        free(out_v); free(lse_v);
    }
    free(db0); free(db_g[0]); free(db_g[1]);
    /* Per part, so a wrong dK cannot hide behind a right dQ. */
    const char *names[3] = {"  bwd dq", "  bwd dk", "  bwd dv"};
    const size_t c0[3] = {0, C, C + (size_t)NKV * HS}, w[3] = {C, (size_t)NKV * HS, (size_t)NKV * HS};
    for (int part = 0; part < 3; part++) {
        float *g = columns(dqkv_g, N, W, c0[part], w[part]), *r = columns(dqkv_ref, N, W, c0[part], w[part]);
        CHECK_REL(rel_l2(g, r, N * w[part]), 2e-2, names[part]);
        free(g);
        free(r);
    }
    /* The forward too must be deterministic (it has no reductions across blocks; cheap to check). */
    float *out_g2 = hmalloc(nout);
    attention_forward(d_out, d_lse, d_qkv, NULL, sh, 0);
    dsync();
    down_bf16(out_g2, d_out, nout);
    CHECK(same_bytes(out_g, out_g2, nout * 4), "%s: forward is not bitwise deterministic", what);
    free(qkv); free(out_ref); free(att); free(out_g); free(out_g2); free(lse); free(dout); free(dqkv_ref);
    free(dqkv_g); free(dqkv_g2);
    dfree_all();
}

static void attention_case_shape(const AttentionShape *sh) {
    attention_case_docs(sh, NULL);
}

/* GPT-2's attention: multi-head, scale 1/sqrt(HS), full causal. */
static void attention_case(int B, int T, int NH, int HS) {
    AttentionShape s = att_shape(B, T, NH, NH, HS, 1.0f / sqrtf((float)HS), 0);
    attention_case_shape(&s);
}

TEST(kernels_attention_matches_cpu_head64) {
    seed_fresh();
    for (int wgmma = 1; wgmma >= 0; wgmma--) { /* the Hopper kernels (default) and the mma.sync ones */
        attention_use_wgmma(wgmma);
        attention_case(1, 1, 2, 64);
        attention_case(3, 7, 2, 64);
        attention_case(2, 127, 3, 64);
        attention_case(1, 1024, 2, 64);
        attention_case(3, 65, 1, 64);
        attention_case(2, 200, 2, 64);
    }
    attention_use_wgmma(1);
}

TEST(kernels_attention_matches_cpu_head128) {
    seed_fresh();
    for (int wgmma = 1; wgmma >= 0; wgmma--) { /* the Hopper kernels (default) and the mma.sync ones */
        attention_use_wgmma(wgmma);
        attention_case(1, 1, 1, 128);
        attention_case(3, 7, 2, 128);
        attention_case(2, 127, 3, 128);
        attention_case(1, 1024, 1, 128);
        attention_case(1, 200, 2, 128);
        attention_case(3, 65, 2, 128);
    }
    attention_use_wgmma(1);
}

/* Grouped-query attention: query head h reads key/value head h / (NH/NKV), and each key/value
 * head's gradient sums its group's query heads. Groups of 4 (NH 8, NKV 2; NH 4, NKV 1), of 2, of 1
 * (NH = NKV) and one key/value head for six query heads, at lengths that are not multiples of the
 * 64-row tiles. */
static void grouped_query_cases(int HS) {
    const int T[3] = {1, 77, 200};
    const int heads[4][2] = {{8, 2}, {4, 1}, {4, 2}, {3, 3}}; /* NH, NKV: groups of 4, 4, 2, 1 */
    for (int ti = 0; ti < 3; ti++)
        for (int hi = 0; hi < 4; hi++) {
            AttentionShape s = att_shape(2, T[ti], heads[hi][0], heads[hi][1], HS, 1.0f / sqrtf((float)HS), 0);
            attention_case_shape(&s);
        }
    AttentionShape one = att_shape(1, 130, 6, 1, HS, 1.0f / sqrtf((float)HS), 0); /* one KV head for all */
    attention_case_shape(&one);
}

TEST(kernels_grouped_query_attention_shares_kv_heads_head64) {
    seed_fresh();
    for (int wgmma = 1; wgmma >= 0; wgmma--) {
        attention_use_wgmma(wgmma);
        grouped_query_cases(64);
    }
    attention_use_wgmma(1);
}

TEST(kernels_grouped_query_attention_shares_kv_heads_head128) {
    seed_fresh();
    for (int wgmma = 1; wgmma >= 0; wgmma--) {
        attention_use_wgmma(wgmma);
        grouped_query_cases(128);
    }
    attention_use_wgmma(1);
}

/* The Hopper forward's blocks of 128 query rows (two warpgroups of 64) against key tiles of 128, at
 * head sizes 64 and 128: lengths of one row, of less than a warpgroup, of a ragged second
 * warpgroup, of several blocks with a ragged end; windows shorter than a tile, of exactly a tile and
 * of a tile and a key (the first key tile partly or wholly before one warpgroup's rows); groups of
 * 4, 2 and 1 at odd B·NH. Then one row past a power of two at Qwen3-0.6B's heads (20 at 64),
 * where the grid's sections of heads (as many as share L2) do not divide B·NH. */
static void block_tail_cases(int HS) {
    const int T[5] = {1, 37, 100, 200, 515}, windows[4] = {0, 5, 128, 129};
    const int heads[3][2] = {{4, 1}, {6, 3}, {3, 3}}; /* NH, NKV */
    const float scale = 1.0f / sqrtf((float)HS);
    for (int ti = 0; ti < 5; ti++)
        for (int wi = 0; wi < 4; wi++)
            for (int hi = 0; hi < 3; hi++) {
                int B = T[ti] > 200 ? 1 : 3;
                AttentionShape s = att_shape(B, T[ti], heads[hi][0], heads[hi][1], HS, scale, windows[wi]);
                attention_case_shape(&s);
            }
    for (int w = 0; w <= 300; w += 300) {
        AttentionShape big = HS == 128 ? att_shape(1, 2049, 16, 8, 128, scale, w)
                                       : att_shape(1, 2049, 20, 20, 64, scale, w);
        attention_case_shape(&big);
    }
}
TEST(kernels_attention_128_row_blocks_match_cpu_at_tails_windows_and_groups) {
    seed_fresh();
    block_tail_cases(64);
    block_tail_cases(128);
}
/* The Hopper backward's blocks of 128 keys (query tiles of 64 streamed from the last down, the heads
 * of the group within each; dQ's shares added over the key blocks in their order) at Llama-3.2-1B's
 * heads (32 over 8 at HS 64) and Qwen3-0.6B's (16 over 8 at 128): lengths where the last block's
 * second warpgroup has one row or none, windows of a tile and of more than two (a query tile's
 * first key block is not the first), B·NKV not a multiple of a section of heads, and long chains
 * of key blocks. */
TEST(kernels_attention_backward_128_row_blocks_match_cpu_at_llama_and_qwen_heads) {
    seed_fresh();
    const int cases[][6] = {
        /* B, T, NH, NKV, HS, window */
        {2, 129, 32, 8, 64, 0},   {1, 515, 32, 8, 64, 300}, {1, 2049, 32, 8, 64, 0}, {3, 65, 16, 8, 128, 0},
        {2, 193, 16, 8, 128, 64}, {1, 2049, 16, 8, 128, 129},
        /* 33 key blocks: the last query tiles' dQ sums a chain of 33 shares, or of 4 from a key block
         * past the first with the window */
        {1, 4097, 2, 1, 64, 0},   {1, 4097, 4, 2, 64, 300},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const int *c = cases[i];
        AttentionShape s = att_shape(c[0], c[1], c[2], c[3], c[4], 1.0f / sqrtf((float)c[4]), c[5]);
        attention_case_shape(&s);
    }
}

/* The persistent forward's grids take work items from a queue per stream: launched on two streams at
 * once (interleaved, three times each, at Llama-3.2-1B's and Qwen3-0.6B's heads), every output and
 * lse is the one-stream result's bits. Sharing one queue, two grids would steal each other's items. */
TEST(kernels_attention_forward_on_two_streams_at_once_matches_one_stream) {
    seed_fresh();
    for (int HS = 64; HS <= 128; HS *= 2) {
        const AttentionShape s = att_shape(4, 2048, HS == 64 ? 32 : 16, 8, HS, 1.0f / sqrtf((float)HS), 0);
        const size_t N = (size_t)s.B * s.T, W = (size_t)(s.NH + 2 * s.NKV) * HS, nout = N * s.NH * HS;
        const size_t nlse = (size_t)s.B * s.NH * s.T;
        float *h = hmalloc(N * W), *ref_out[2], *ref_lse[2], *got = hmalloc(nout), *got_lse = hmalloc(nlse);
        bf16 *d_qkv[2], *d_out[2][3];
        float *d_lse[2][3];
        for (int k = 0; k < 2; k++) {
            fill_normal(h, N * W, 1.0f);
            d_qkv[k] = up_bf16(h, N * W);
            ref_out[k] = hmalloc(nout), ref_lse[k] = hmalloc(nlse);
            for (int r = 0; r < 3; r++) {
                d_out[k][r] = (bf16 *)dalloc(nout * 2), d_lse[k][r] = (float *)dalloc(nlse * 4);
                poison(d_out[k][r], nout * 2);
                poison(d_lse[k][r], nlse * 4);
            }
            attention_forward(d_out[k][0], d_lse[k][0], d_qkv[k], NULL, &s, 0);
            dsync();
            down_bf16(ref_out[k], d_out[k][0], nout);
            down_f32(ref_lse[k], d_lse[k][0], nlse);
            poison(d_out[k][0], nout * 2);
            poison(d_lse[k][0], nlse * 4);
        }
        dsync(); /* the non-blocking streams below do not wait for the legacy stream's memsets */
        cudaStream_t st[2];
        for (int k = 0; k < 2; k++) CUDA_CHECK(cudaStreamCreateWithFlags(&st[k], cudaStreamNonBlocking));
        for (int r = 0; r < 3; r++)
            for (int k = 0; k < 2; k++) attention_forward(d_out[k][r], d_lse[k][r], d_qkv[k], NULL, &s, st[k]);
        dsync();
        int wrong = 0;
        for (int k = 0; k < 2; k++)
            for (int r = 0; r < 3; r++) {
                down_bf16(got, d_out[k][r], nout);
                down_f32(got_lse, d_lse[k][r], nlse);
                wrong += !same_bytes(got, ref_out[k], nout * 4) || !same_bytes(got_lse, ref_lse[k], nlse * 4);
            }
        CHECK(wrong == 0, "head size %d: %d of 6 forwards on two streams differ from one stream's (seed %llu)", HS,
              wrong, (unsigned long long)g_seed);
        for (int k = 0; k < 2; k++) {
            CUDA_CHECK(cudaStreamDestroy(st[k]));
            free(ref_out[k]), free(ref_lse[k]);
        }
        free(h), free(got), free(got_lse);
        dfree_all();
    }
}

/* A scale other than 1/sqrt(HS) (Gemma's query_pre_attn_scalar^-1/2) reaches the softmax of both
 * passes: with the default it would fail the reference by far more than the tolerance. */
TEST(kernels_attention_uses_the_given_softmax_scale) {
    seed_fresh();
    for (int wgmma = 1; wgmma >= 0; wgmma--) {
        attention_use_wgmma(wgmma);
        AttentionShape s64 = att_shape(2, 77, 8, 2, 64, 0.3f, 0);
        attention_case_shape(&s64);
    }
    for (int wgmma = 1; wgmma >= 0; wgmma--) {
        attention_use_wgmma(wgmma);
        AttentionShape s128 = att_shape(2, 77, 4, 4, 128, 0.05f, 0);
        attention_case_shape(&s128);
    }
    attention_use_wgmma(1);
    AttentionShape s256 = att_shape(2, 77, 4, 1, 256, 0.2f, 0); /* wgmma only */
    attention_case_shape(&s256);
    AttentionShape s256w = att_shape(1, 150, 8, 2, 256, 0.02f, 37);
    attention_case_shape(&s256w);
}

/* A sliding window W lets query i see keys i - W < j <= i: windows shorter than a tile, of exactly
 * a tile, longer than several tiles, of one key (each query sees only itself) and longer than T (the
 * full causal attention), with grouped heads and a scale of its own, as Gemma's local layers. */
static void sliding_window_cases(int HS) {
    const float scale = 1.0f / sqrtf(256.0f); /* query_pre_attn_scalar 256 */
    const int cases[][5] = {
        /* T, NH, NKV, window, B */
        {200, 8, 2, 33, 2}, {77, 4, 1, 33, 1}, {1, 2, 1, 33, 1}, {130, 4, 2, 64, 2},
        {300, 2, 1, 100, 1}, {100, 3, 3, 1, 1}, {200, 4, 2, 500, 1}, {257, 4, 4, 65, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        AttentionShape s = att_shape(cases[i][4], cases[i][0], cases[i][1], cases[i][2], HS, scale, cases[i][3]);
        attention_case_shape(&s);
    }
}

TEST(kernels_sliding_window_attention_sees_exactly_w_keys_head64) {
    seed_fresh();
    for (int wgmma = 1; wgmma >= 0; wgmma--) {
        attention_use_wgmma(wgmma);
        sliding_window_cases(64);
    }
    attention_use_wgmma(1);
}

TEST(kernels_sliding_window_attention_sees_exactly_w_keys_head128) {
    seed_fresh();
    for (int wgmma = 1; wgmma >= 0; wgmma--) {
        attention_use_wgmma(wgmma);
        sliding_window_cases(128);
    }
    attention_use_wgmma(1);
}

/* Head size 256 (Gemma 3: four query heads on one key/value head, a window on most layers), on the
 * wgmma kernels alone, their dK,dV in two halves of 128 columns: lengths of one row, of less than a
 * tile and of several tiles with a ragged end, each with no window and with windows shorter than a
 * tile, of exactly a tile and of two tiles and a key, at groups of 4 over one and over two key/value
 * heads. */
TEST(kernels_attention_head256_matches_cpu_with_grouped_heads_and_windows) {
    seed_fresh();
    const int T[4] = {1, 37, 200, 515}, windows[4] = {0, 5, 64, 129};
    const int heads[2][2] = {{4, 1}, {8, 2}}; /* NH, NKV */
    for (int ti = 0; ti < 4; ti++)
        for (int wi = 0; wi < 4; wi++)
            for (int hi = 0; hi < 2; hi++) {
                int B = T[ti] > 200 ? 1 : 2;
                AttentionShape s =
                    att_shape(B, T[ti], heads[hi][0], heads[hi][1], 256, 1.0f / sqrtf(256.0f), windows[wi]);
                attention_case_shape(&s);
            }
}

TEST(kernels_sliding_window_attention_sees_exactly_w_keys_head256) {
    seed_fresh();
    sliding_window_cases(256);
}

static void document_cases(int HS, const int *T, int nT, const int *windows, int nw) {
    const int heads[2][2] = {{4, 1}, {3, 3}}; /* NH, NKV */
    for (int ti = 0; ti < nT; ti++)
        for (int wi = 0; wi < nw; wi++)
            for (int hi = 0; hi < 2; hi++) {
                const int B = 2;
                int *pos = (int *)malloc((size_t)B * T[ti] * sizeof(int));
                document_positions(pos, B, T[ti]);
                AttentionShape s =
                    att_shape(B, T[ti], heads[hi][0], heads[hi][1], HS, 1.0f / sqrtf((float)HS), windows[wi]);
                attention_case_docs(&s, pos);
                free(pos);
            }
}

TEST(kernels_attention_keeps_each_document_to_itself_head64_and_128) {
    seed_fresh();
    const int T[3] = {77, 300, 515}, windows[2] = {0, 100};
    for (int wgmma = 1; wgmma >= 0; wgmma--) { /* the Hopper kernels (default) and the mma.sync ones */
        attention_use_wgmma(wgmma);
        document_cases(64, T, 3, windows, 2);
        document_cases(128, T, 3, windows, 2);
    }
    attention_use_wgmma(1);
}

TEST(kernels_attention_keeps_each_document_to_itself_head256) {
    seed_fresh();
    const int T[2] = {130, 515}, windows[2] = {0, 129};
    document_cases(256, T, 2, windows, 2);
}

/* ---- decode attention: one query row against the cache ---------------------------------- */

/* Row ctx-1 of a sequence of ctx rows (its keys and values the cache), against the last row of the
 * fp32 CPU forward on the same bf16 inputs; the whole of out is checked, so a head left unwritten
 * fails. Run 2 reads the values from another buffer (qkv's value columns NaN there): the same bits. */
static void attention_decode_case_shape(int ctx, int NH, int NKV, int HS, float scale, int window) {
    char what[160];
    const int t = ctx - 1;
    const size_t C = (size_t)NH * HS, nqkv = (size_t)ctx * (NH + 2 * NKV) * HS;
    AttentionShape sh = att_shape(1, ctx, NH, NKV, HS, scale, window);
    AttentionParams prm = att_params(&sh, NULL);
    float *qkv = hmalloc(nqkv), *ref = hmalloc((size_t)ctx * C), *att = hmalloc((size_t)NH * ctx * ctx),
          *got = hmalloc(C), *again = hmalloc(C);
    fill_normal(qkv, nqkv, 1.0f);
    round_bf16(qkv, nqkv);
    gqa_attention_forward_cpu(ref, att, qkv, &prm);
    bf16 *d_qkv = up_bf16(qkv, nqkv), *d_out = (bf16 *)dalloc(C * 2);
    const size_t W = (size_t)(NH + 2 * NKV) * HS, kv_end = (size_t)(NH + NKV) * HS;
    bf16 *d_qk = up_bf16(qkv, nqkv), *d_v = up_bf16(qkv, nqkv);
    CUDA_CHECK(cudaMemset2D(d_qk + kv_end, W * 2, 0xFF, (W - kv_end) * 2, ctx));
    CUDA_CHECK(cudaMemset2D(d_v, W * 2, 0xFF, kv_end * 2, ctx));
    for (int run = 0; run < 3; run++) {
        poison(d_out, C * 2);
        if (run < 2)
            attention_decode(d_out, d_qkv, NULL, t, &sh, 0);
        else
            attention_decode(d_out, d_qk, d_v, t, &sh, 0);
        dsync();
        down_bf16(run ? again : got, d_out, C);
        CHECK(run == 0 || same_bytes(got, again, C * 4), "attention decode run %d differs from run 0 (ctx %d)", run,
              ctx);
    }
    snprintf(what, sizeof what, "attention decode ctx=%d NH=%d NKV=%d HS=%d window=%d", ctx, NH, NKV, HS, window);
    CHECK_REL(rel_l2(got, ref + (size_t)t * C, C), 4e-3, what);
    free(qkv); free(ref); free(att); free(got); free(again);
    dfree_all();
}

static void attention_decode_case(int ctx, int NH, int HS) {
    attention_decode_case_shape(ctx, NH, NH, HS, 1.0f / sqrtf((float)HS), 0);
}

TEST(kernels_attention_decode_matches_the_cpu_row_at_any_context_length) {
    seed_fresh();
    attention_decode_case(1, 12, 64);
    attention_decode_case(7, 12, 64); /* fewer keys than the block's warps */
    attention_decode_case(37, 12, 64);
    attention_decode_case(1023, 12, 64);
    attention_decode_case(1024, 2, 128);
    attention_decode_case(300, 3, 96);
}

/* Grouped-query heads, a scale of its own and a sliding window (query t sees keys t-W < j <= t). */
TEST(kernels_attention_decode_reads_the_group_kv_head_and_its_window) {
    seed_fresh();
    attention_decode_case_shape(77, 8, 2, 64, 0.3f, 0);
    attention_decode_case_shape(200, 4, 1, 128, 1.0f / sqrtf(128.0f), 33);
    attention_decode_case_shape(20, 4, 4, 256, 0.0625f, 33); /* a window longer than the context */
    attention_decode_case_shape(512, 6, 2, 96, 0.1f, 64);
}

/* ---- AdamW and the global norm ---------------------------------------------------------- */

TEST(kernels_global_sumsq_is_exact_and_deterministic) {
    seed_fresh();
    size_t sizes[] = {1, 7, 1000003, 5u << 20};
    for (int s = 0; s < 4; s++) {
        size_t n = sizes[s];
        float *g = hmalloc(n);
        fill_normal(g, n, 1e-2f);
        double ref = 0;
        for (size_t i = 0; i < n; i++) ref += (double)g[i] * g[i];
        float *d_g = up_f32(g, n);
        double *d_out = (double *)dalloc(8);
        void *scratch = dalloc(global_sumsq_scratch_bytes());
        double got[2];
        for (int run = 0; run < 2; run++) {
            poison(d_out, 8);
            poison(scratch, global_sumsq_scratch_bytes());
            global_sumsq(d_out, scratch, d_g, n, 0);
            dsync();
            CUDA_CHECK(cudaMemcpy(&got[run], d_out, 8, cudaMemcpyDeviceToHost));
        }
        double rel = fabs(got[0] - ref) / ref;
        char what[64];
        snprintf(what, sizeof what, "global sumsq n=%zu", n);
        CHECK_REL(rel, 1e-5, what);
        CHECK(same_bytes(&got[0], &got[1], 8), "global_sumsq is not bitwise deterministic (n=%zu)", n);
        free(g);
        dfree_all();
    }
}

TEST(kernels_adamw_matches_reference) {
    seed_fresh();
    /* Three tensors of awkward sizes, the middle one not decayed, the first one spanning chunks. */
    size_t numels[3] = {16384 * 2 + 5, 777, 100003};
    int decay[3] = {1, 0, 1};
    size_t offsets[3] = {0, numels[0], numels[0] + numels[1]};
    size_t n = numels[0] + numels[1] + numels[2];
    float *p = hmalloc(n), *m = hmalloc(n), *v = hmalloc(n), *g = hmalloc(n);
    fill_normal(p, n, 0.02f);
    fill_normal(m, n, 1e-3f);
    for (size_t i = 0; i < n; i++) v[i] = 1e-6f * rng_uniform();
    float *d_p = up_f32(p, n), *d_m = up_f32(m, n), *d_v = up_f32(v, n);
    bf16 *d_pb = (bf16 *)dalloc(n * 2);
    AdamWPlan *plan = adamw_plan_create(offsets, numels, decay, 3);
    double *rp = (double *)malloc(n * 8), *rm = (double *)malloc(n * 8), *rv = (double *)malloc(n * 8);
    for (size_t i = 0; i < n; i++) { rp[i] = p[i]; rm[i] = m[i]; rv[i] = v[i]; }
    float lr = 6e-4f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f, gs = 0.7f;
    for (int step = 1; step <= 3; step++) {
        fill_normal(g, n, 1e-2f);
        float *d_g = up_f32(g, n);
        poison(d_pb, n * 2);
        adamw_update(plan, d_p, d_pb, d_g, d_m, d_v, lr, b1, b2, eps, wd, gs, step, 0);
        dsync();
        double c1 = 1.0 - pow(b1, step), c2 = 1.0 - pow(b2, step);
        for (int t = 0; t < 3; t++)
            for (size_t j = 0; j < numels[t]; j++) {
                size_t i = offsets[t] + j;
                double gg = (double)g[i] * gs;
                rm[i] = b1 * rm[i] + (1 - b1) * gg;
                rv[i] = b2 * rv[i] + (1 - b2) * gg * gg;
                rp[i] -= lr * ((rm[i] / c1) / (sqrt(rv[i] / c2) + eps) + (decay[t] ? wd : 0.0) * rp[i]);
            }
    }
    float *gp = hmalloc(n), *gm = hmalloc(n), *gv = hmalloc(n), *gpb = hmalloc(n);
    down_f32(gp, d_p, n);
    down_f32(gm, d_m, n);
    down_f32(gv, d_v, n);
    down_bf16(gpb, d_pb, n);
    for (size_t i = 0; i < n; i++) { p[i] = (float)rp[i]; m[i] = (float)rm[i]; v[i] = (float)rv[i]; }
    CHECK_REL(rel_l2(gp, p, n), 1e-5, "adamw master weights after 3 steps");
    CHECK_REL(rel_l2(gm, m, n), 1e-5, "adamw m");
    CHECK_REL(rel_l2(gv, v, n), 1e-5, "adamw v");
    int bf_ok = 1;
    for (size_t i = 0; i < n; i++) bf_ok &= bf_bits2f(f2bf_bits(gp[i])) == gpb[i];
    CHECK(bf_ok, "adamw bf16 weights are not round-to-nearest of the master weights");
    /* The start-up conversion must agree with the optimizer's own bf16 write. */
    float *tmp = hmalloc(n);
    convert_fp32_to_bf16(d_pb, d_p, n, 0);
    dsync();
    down_bf16(tmp, d_pb, n);
    CHECK(same_bytes(tmp, gpb, n * 4), "convert_fp32_to_bf16 differs from the AdamW bf16 write");
    adamw_plan_free(plan);
    free(p); free(m); free(v); free(g); free(rp); free(rm); free(rv); free(gp); free(gm); free(gv); free(gpb);
    free(tmp);
    dfree_all();
}

TEST(kernels_adamw_on_shard_ranges_matches_the_whole_update) {
    seed_fresh();
    /* A ZeRO-1 shard: two ranges cutting through tensors, state kept compact; every covered weight
     * must get exactly what the whole update gives it, and no other weight may be written. */
    size_t numels[3] = {16384 * 2 + 5, 777, 100003};
    int decay[3] = {1, 0, 1};
    size_t offsets[3] = {0, numels[0], numels[0] + numels[1]};
    size_t n = numels[0] + numels[1] + numels[2];
    AdamWRange ranges[2] = {{5, 33000, 0}, {60001, n - 60001 - 3, 33000}};
    size_t shard = ranges[0].count + ranges[1].count;
    float *p = hmalloc(n), *m = hmalloc(n), *v = hmalloc(n), *g = hmalloc(n);
    fill_normal(p, n, 0.02f);
    fill_normal(m, n, 1e-3f);
    fill_normal(g, n, 1e-2f);
    for (size_t i = 0; i < n; i++) v[i] = 1e-6f * rng_uniform();
    float *sp = hmalloc(shard), *sm = hmalloc(shard), *sv = hmalloc(shard), *sg = hmalloc(shard);
    for (int r = 0; r < 2; r++)
        for (size_t j = 0; j < ranges[r].count; j++) {
            size_t i = ranges[r].begin + j, s = ranges[r].state_offset + j;
            sp[s] = p[i], sm[s] = m[i], sv[s] = v[i], sg[s] = g[i];
        }
    AdamWPlan *whole = adamw_plan_create(offsets, numels, decay, 3);
    AdamWPlan *part = adamw_plan_create_ranges(offsets, numels, decay, 3, ranges, 2);
    float *d_p = up_f32(p, n), *d_m = up_f32(m, n), *d_v = up_f32(v, n), *d_g = up_f32(g, n);
    float *d_sp = up_f32(sp, shard), *d_sm = up_f32(sm, shard), *d_sv = up_f32(sv, shard), *d_sg = up_f32(sg, shard);
    bf16 *d_pb = (bf16 *)dalloc(n * 2), *d_spb = (bf16 *)dalloc(n * 2);
    poison(d_pb, n * 2);
    poison(d_spb, n * 2);
    adamw_update(whole, d_p, d_pb, d_g, d_m, d_v, 6e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.7f, 2, 0);
    adamw_update(part, d_sp, d_spb, d_sg, d_sm, d_sv, 6e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.7f, 2, 0);
    dsync();
    down_f32(p, d_p, n);
    down_f32(m, d_m, n);
    down_f32(sp, d_sp, shard);
    down_f32(sm, d_sm, shard);
    uint16_t *pb = (uint16_t *)malloc(n * 2), *spb = (uint16_t *)malloc(n * 2), *poisoned = (uint16_t *)malloc(n * 2);
    CUDA_CHECK(cudaMemcpy(pb, d_pb, n * 2, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(spb, d_spb, n * 2, cudaMemcpyDeviceToHost));
    poison(d_pb, n * 2);
    dsync();
    CUDA_CHECK(cudaMemcpy(poisoned, d_pb, n * 2, cudaMemcpyDeviceToHost));
    size_t wrong = 0, touched = 0;
    for (int r = 0; r < 2; r++)
        for (size_t j = 0; j < ranges[r].count; j++) {
            size_t i = ranges[r].begin + j, s = ranges[r].state_offset + j;
            wrong += !same_bytes(&p[i], &sp[s], 4) || !same_bytes(&m[i], &sm[s], 4) || pb[i] != spb[i];
        }
    for (size_t i = 0; i < n; i++) {
        int inside = (i >= ranges[0].begin && i < ranges[0].begin + ranges[0].count) ||
                     (i >= ranges[1].begin && i < ranges[1].begin + ranges[1].count);
        touched += !inside && spb[i] != poisoned[i];
    }
    CHECK(wrong == 0, "%zu shard elements differ from the whole update", wrong);
    CHECK(touched == 0, "%zu weights outside the shard were written", touched);
    adamw_plan_free(whole);
    adamw_plan_free(part);
    free(p); free(m); free(v); free(g); free(sp); free(sm); free(sv); free(sg); free(pb); free(spb); free(poisoned);
    dfree_all();
}

/* AdamW on bf16 state: the kernel against the CPU reference's per-value function (kernels/adamw_bf16.h),
 * bit for bit, on a ZeRO-1-like plan of two ranges whose random bits are keyed by the whole table's
 * index (index0 + i); three steps, so the stored m and v feed back. Two layouts of the state: compact,
 * where weight and state indices never line up (groups of eight state values, their weights one by
 * one), and with gaps that line them up (16-byte weight accesses too); single heads and tails in both. */
static void adamw_bf16_state_against_the_cpu_reference(int grouped) {
    seed_fresh();
    size_t numels[3] = {16384 * 2 + 5, 777, 100003};
    int decay[3] = {1, 0, 1};
    size_t offsets[3] = {0, numels[0], numels[0] + numels[1]};
    size_t n = numels[0] + numels[1] + numels[2];
    AdamWRange compact[2] = {{5, 33000, 0}, {60001, n - 60001 - 3, 33000}};
    AdamWRange gapped[2] = {{5, 33000, 13}, {60001, n - 60001 - 3, 33017}}; /* begin ≡ state_offset mod 8 */
    const AdamWRange *ranges = grouped ? gapped : compact;
    const size_t shard = ranges[1].state_offset + ranges[1].count;
    const uint64_t index0 = 123457; /* where these rows start in a larger table */
    float *tmp = hmalloc(n);
    uint16_t *w = (uint16_t *)malloc(n * 2), *sm = (uint16_t *)malloc(shard * 2), *sv = (uint16_t *)malloc(shard * 2);
    fill_normal(tmp, n, 0.02f);
    for (size_t i = 0; i < n; i++) w[i] = bf16_bits_nearest(tmp[i]);
    fill_normal(tmp, shard, 1e-3f);
    for (size_t s = 0; s < shard; s++) sm[s] = bf16_bits_nearest(tmp[s]), sv[s] = bf16_bits_nearest(1e-6f * rng_uniform());
    AdamWPlan *plan = adamw_plan_create_ranges(offsets, numels, decay, 3, ranges, 2);
    bf16 *d_w = (bf16 *)dalloc(n * 2), *d_m = (bf16 *)dalloc(shard * 2), *d_v = (bf16 *)dalloc(shard * 2);
    CUDA_CHECK(cudaMemcpy(d_w, w, n * 2, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(d_m, sm, shard * 2, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(d_v, sv, shard * 2, cudaMemcpyHostToDevice));
    const float lr = 6e-4f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f, gs = 0.7f;
    float *g = hmalloc(shard);
    size_t moved = 0;
    for (int step = 1; step <= 3; step++) {
        fill_normal(g, shard, 1e-2f);
        float *d_g = up_f32(g, shard);
        adamw_update_bf16(plan, d_w, d_g, d_m, d_v, index0, lr, b1, b2, eps, wd, gs, step, 0);
        const float c1 = 1.0f - powf(b1, (float)step), c2 = 1.0f - powf(b2, (float)step);
        for (int r = 0; r < 2; r++)
            for (size_t j = 0; j < ranges[r].count; j++) {
                const size_t i = ranges[r].begin + j, s = ranges[r].state_offset + j;
                const int t = i < offsets[1] ? 0 : i < offsets[2] ? 1 : 2;
                const AdamWBf16Step st = {lr, b1, b2, eps, decay[t] ? wd : 0.0f, gs, c1, c2, step};
                const uint16_t before = w[i];
                adamw_bf16_value(&st, index0 + i, g[s], &w[i], &sm[s], &sv[s]);
                moved += w[i] != before;
            }
    }
    dsync();
    uint16_t *gw = (uint16_t *)malloc(n * 2), *gm = (uint16_t *)malloc(shard * 2), *gv = (uint16_t *)malloc(shard * 2);
    CUDA_CHECK(cudaMemcpy(gw, d_w, n * 2, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(gm, d_m, shard * 2, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(gv, d_v, shard * 2, cudaMemcpyDeviceToHost));
    size_t wrong_w = 0, wrong_m = 0, wrong_v = 0;
    for (size_t i = 0; i < n; i++) wrong_w += gw[i] != w[i]; /* also: weights outside the ranges untouched */
    for (size_t s = 0; s < shard; s++) wrong_m += gm[s] != sm[s], wrong_v += gv[s] != sv[s];
    CHECK(wrong_w == 0 && wrong_m == 0 && wrong_v == 0,
          "differ from the CPU reference (%s state): %zu weights, %zu m, %zu v of %zu", grouped ? "gapped" : "compact",
          wrong_w, wrong_m, wrong_v, shard);
    CHECK(moved > shard / 2, "only %zu of %zu weight updates moved a bf16 weight", moved, 3 * shard);
    /* the widening used to read bf16 state into checkpoints is exact */
    float *d_wide = (float *)dalloc(n * 4), *wide = hmalloc(n);
    convert_bf16_to_fp32(d_wide, d_w, n, 0);
    down_f32(wide, d_wide, n);
    size_t inexact = 0;
    for (size_t i = 0; i < n; i++) inexact += wide[i] != bf16_bits_to_float(w[i]);
    CHECK(inexact == 0, "%zu values widened wrongly", inexact);
    adamw_plan_free(plan);
    free(tmp); free(w); free(sm); free(sv); free(g); free(gw); free(gm); free(gv); free(wide);
    dfree_all();
}

TEST(kernels_adamw_bf16_state_matches_the_cpu_reference_bit_for_bit) {
    adamw_bf16_state_against_the_cpu_reference(0);
    adamw_bf16_state_against_the_cpu_reference(1);
}

/* A slice of the flat layout updated on its own (a vocabulary-parallel rank's head rows: its own
 * buffers, offsets from 0) with index0 = where it starts gets the whole update's bits there. */
TEST(kernels_adamw_bf16_state_of_a_slice_keyed_by_its_start_matches_the_whole_update) {
    seed_fresh();
    const size_t n = 70001, begin = 30011, count = 20007;
    const int decay = 1;
    float *tmp = hmalloc(n), *g = hmalloc(n);
    uint16_t *w = (uint16_t *)malloc(n * 2), *m = (uint16_t *)malloc(n * 2), *v = (uint16_t *)malloc(n * 2);
    fill_normal(tmp, n, 0.02f);
    fill_normal(g, n, 1e-2f);
    for (size_t i = 0; i < n; i++)
        w[i] = bf16_bits_nearest(tmp[i]), m[i] = bf16_bits_nearest(1e-3f * tmp[i]), v[i] = bf16_bits_nearest(1e-6f);
    const size_t zero = 0;
    AdamWPlan *whole = adamw_plan_create(&zero, &n, &decay, 1), *part = adamw_plan_create(&zero, &count, &decay, 1);
    bf16 *d_w = (bf16 *)dalloc(n * 2), *d_m = (bf16 *)dalloc(n * 2), *d_v = (bf16 *)dalloc(n * 2);
    bf16 *s_w = (bf16 *)dalloc(count * 2), *s_m = (bf16 *)dalloc(count * 2), *s_v = (bf16 *)dalloc(count * 2);
    CUDA_CHECK(cudaMemcpy(d_w, w, n * 2, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(d_m, m, n * 2, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(d_v, v, n * 2, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(s_w, w + begin, count * 2, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(s_m, m + begin, count * 2, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(s_v, v + begin, count * 2, cudaMemcpyHostToDevice));
    float *d_g = up_f32(g, n), *s_g = up_f32(g + begin, count);
    adamw_update_bf16(whole, d_w, d_g, d_m, d_v, 0, 6e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 4, 0);
    adamw_update_bf16(part, s_w, s_g, s_m, s_v, begin, 6e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 4, 0);
    dsync();
    uint16_t *a = (uint16_t *)malloc(count * 2), *b = (uint16_t *)malloc(count * 2);
    size_t wrong = 0;
    bf16 *pairs[3][2] = {{d_w, s_w}, {d_m, s_m}, {d_v, s_v}};
    for (int k = 0; k < 3; k++) {
        CUDA_CHECK(cudaMemcpy(a, pairs[k][0] + begin, count * 2, cudaMemcpyDeviceToHost));
        CUDA_CHECK(cudaMemcpy(b, pairs[k][1], count * 2, cudaMemcpyDeviceToHost));
        for (size_t i = 0; i < count; i++) wrong += a[i] != b[i];
    }
    CHECK(wrong == 0, "%zu of %zu values of the slice differ from the whole update", wrong, 3 * count);
    /* and keyed by the wrong start, the rounding differs (the check above could not pass by chance) */
    adamw_update_bf16(part, s_w, s_g, s_m, s_v, 0, 6e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 5, 0);
    adamw_update_bf16(whole, d_w, d_g, d_m, d_v, 0, 6e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 5, 0);
    dsync();
    CUDA_CHECK(cudaMemcpy(a, d_w + begin, count * 2, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(b, s_w, count * 2, cudaMemcpyDeviceToHost));
    size_t differ = 0;
    for (size_t i = 0; i < count; i++) differ += a[i] != b[i];
    CHECK(differ > count / 100, "keyed by 0 instead of its start, only %zu of %zu weights differ", differ, count);
    adamw_plan_free(whole);
    adamw_plan_free(part);
    free(tmp); free(g); free(w); free(m); free(v); free(a); free(b);
    dfree_all();
}

/* ---- RMSNorm ----------------------------------------------------------------------------- */

static void rmsnorm_case(int N, int C, int with_residual, float eps, int one_plus_w) {
    char what[128];
    size_t nc = (size_t)N * C;
    float *a = hmalloc(nc), *bb = hmalloc(nc), *w = hmalloc(C);
    fill_normal(a, nc, 1.0f);
    fill_normal(bb, nc, 1.0f);
    fill_normal(w, C, one_plus_w ? 0.3f : 1.0f);
    round_bf16(a, nc); round_bf16(bb, nc); round_bf16(w, C);
    float *res = hmalloc(nc), *out_ref = hmalloc(nc), *rstd_ref = hmalloc(N);
    if (with_residual) {
        residual_forward_cpu(res, a, bb, nc);
        round_bf16(res, nc);
    } else {
        memcpy(res, a, nc * 4);
    }
    rmsnorm_forward_cpu(out_ref, rstd_ref, res, w, N, C, eps, one_plus_w);

    bf16 *d_a = up_bf16(a, nc), *d_b = up_bf16(bb, nc), *d_w = up_bf16(w, C);
    bf16 *d_res = (bf16 *)dalloc(nc * 2), *d_out = (bf16 *)dalloc(nc * 2);
    float *d_rstd = (float *)dalloc(N * 4);
    poison(d_res, nc * 2); poison(d_out, nc * 2); poison(d_rstd, N * 4);
    residual_rmsnorm_forward(with_residual ? d_res : NULL, d_out, d_rstd, d_a, with_residual ? d_b : NULL, d_w, N, C,
                             eps, one_plus_w, 0);
    dsync();
    float *res_g = hmalloc(nc), *out_g = hmalloc(nc), *rstd_g = hmalloc(N);
    down_bf16(res_g, d_res, nc);
    down_bf16(out_g, d_out, nc);
    down_f32(rstd_g, d_rstd, N);
    snprintf(what, sizeof what, "rmsnorm fwd N=%d C=%d%s%s: out", N, C, with_residual ? " +res" : "",
             one_plus_w ? " (1+w)" : "");
    CHECK_REL(rel_l2(out_g, out_ref, nc), 1e-2, what);
    if (with_residual) CHECK_REL(rel_l2(res_g, res, nc), 1e-6, "  residual (exact up to rounding mode)");
    CHECK_REL(rel_l2(rstd_g, rstd_ref, N), 1e-5, "  rstd");

    /* Backward from the CPU statistics, += checked on the increments (as layernorm_case). */
    float *dout = hmalloc(nc), *dinp0 = hmalloc(nc), *dw0 = hmalloc(C);
    fill_normal(dout, nc, 1.0f);
    /* a start smaller than the increments (which are small at width 1), so the bf16 rounding of
     * the sum does not hide them */
    fill_normal(dinp0, nc, 0.25f);
    fill_normal(dw0, C, 1.0f);
    round_bf16(dout, nc);
    round_bf16(dinp0, nc);
    float *dinp_ref = hmalloc(nc), *dw_ref = hmalloc(C);
    memset(dinp_ref, 0, nc * 4);
    memset(dw_ref, 0, C * 4);
    rmsnorm_backward_cpu(dinp_ref, dw_ref, dout, res, w, rstd_ref, N, C, one_plus_w);
    bf16 *d_dout = up_bf16(dout, nc), *d_inp = up_bf16(res, nc);
    float *d_rstdr = up_f32(rstd_ref, N);
    size_t scratch_bytes = rmsnorm_backward_scratch_bytes(C);
    void *scratch = dalloc(scratch_bytes);
    float *dinp_g[2], *dw_g[2];
    for (int run = 0; run < 2; run++) {
        poison(scratch, scratch_bytes);
        bf16 *d_dinp = up_bf16(dinp0, nc);
        float *d_dw = up_f32(dw0, C);
        rmsnorm_backward(d_dinp, d_dw, scratch, d_dout, d_inp, d_w, d_rstdr, N, C, one_plus_w, 0);
        dsync();
        dinp_g[run] = hmalloc(nc); dw_g[run] = hmalloc(C);
        down_bf16(dinp_g[run], d_dinp, nc);
        down_f32(dw_g[run], d_dw, C);
    }
    CHECK(same_bytes(dinp_g[0], dinp_g[1], nc * 4) && same_bytes(dw_g[0], dw_g[1], C * 4),
          "rmsnorm backward is not bitwise deterministic (N=%d C=%d)", N, C);
    if (C == 1) {
        /* x / rms(x) is +-1 at width 1 whatever x, so the input gradient is all cancellation (eps
         * keeps it alive) and may come out far smaller than the start it is added to; the
         * increment's relative error then measures the start's bf16 rounding, not the kernel. What
         * is meaningful is the sum the kernel stores, start + increment rounded once to bf16: off
         * by at most 2^-8 of itself (8 significant bits), so by at most 2^-8 = 3.9e-3 in relative
         * L2, and a wrong increment by about its own size. */
        float *total_ref = hmalloc(nc);
        for (size_t i = 0; i < nc; i++) total_ref[i] = dinp0[i] + dinp_ref[i];
        CHECK_REL(rel_l2(dinp_g[0], total_ref, nc), 4e-3, "  bwd dinp, start + increment (one bf16 rounding)");
        free(total_ref);
    }
    for (size_t i = 0; i < nc; i++) dinp_g[0][i] -= dinp0[i];
    for (int i = 0; i < C; i++) dw_g[0][i] -= dw0[i];
    if (C > 1) CHECK_REL(rel_l2(dinp_g[0], dinp_ref, nc), 2e-2, "  bwd dinp increment (bf16 += rounding)");
    CHECK_REL(rel_l2(dw_g[0], dw_ref, C), 1e-4, "  bwd dweight increment");
    for (int r = 0; r < 2; r++) { free(dinp_g[r]); free(dw_g[r]); }
    free(a); free(bb); free(w); free(res); free(out_ref); free(rstd_ref); free(res_g); free(out_g); free(rstd_g);
    free(dout); free(dinp0); free(dw0); free(dinp_ref); free(dw_ref);
    dfree_all();
}

TEST(kernels_residual_rmsnorm_matches_cpu_at_any_width_and_backward_is_deterministic) {
    seed_fresh();
    /* width 1: the row is one value and norm² ≈ 1, so the gradient is all cancellation unless eps
     * is of the order of x²; it checks the indexing, not the rounding */
    rmsnorm_case(37, 1, 1, 1.0f, 0);
    rmsnorm_case(131, 7, 1, 1e-6f, 0);   /* a lane per column */
    rmsnorm_case(5, 96, 0, 1e-5f, 0);    /* the plain norm (first block, final norm) */
    rmsnorm_case(257, 2048, 1, 1e-5f, 0);
    rmsnorm_case(1031, 264, 1, 1e-6f, 0); /* K = 2, lane 0 alone with a second group; slices of one and two rows */
    rmsnorm_case(5003, 1024, 1, 1e-6f, 0); /* Qwen3-0.6B's width, five rows a slice */
    rmsnorm_case(67, 3000, 1, 1e-6f, 0); /* 3000 % 256 != 0: the last register group is partial */
    rmsnorm_case(129, 8192, 1, 1e-5f, 0); /* the widest register-resident row */
    rmsnorm_case(9, 8200, 1, 1e-5f, 0);   /* wider: the lane-per-column kernel */
    rmsnorm_case(3, 1, 0, 1.0f, 0);
}

TEST(kernels_gemma_rmsnorm_multiplies_one_plus_w) {
    seed_fresh();
    rmsnorm_case(41, 640, 1, 1e-6f, 1);
    rmsnorm_case(13, 7, 0, 1e-6f, 1);
}

/* ---- QK-norm and RoPE ----------------------------------------------------------------------- */

static void rope_case(int B, int T, int NH, int NKV, int hd, int qk_norm, RopeParams rp, int in_place,
                      int one_plus_w = 0, int docs = 0) {
    char what[160];
    int *doc_pos = NULL, *d_doc_pos = NULL; /* documents: each row rotated by its place in its own */
    if (docs) {
        doc_pos = (int *)malloc((size_t)B * T * sizeof(int));
        document_positions(doc_pos, B, T);
        d_doc_pos = (int *)dalloc((size_t)B * T * sizeof(int));
        CUDA_CHECK(cudaMemcpy(d_doc_pos, doc_pos, (size_t)B * T * sizeof(int), cudaMemcpyHostToDevice));
    }
    QkvLayout L = {B, T, NH, NKV, hd, doc_pos};
    const int N = B * T, H = hd / 2, nheads = NH + NKV;
    const size_t R = qkv_row_width(&L), n = (size_t)N * R;
    const float eps = 1e-6f;
    float *qkv = hmalloc(n), *qn = hmalloc(hd), *kn = hmalloc(hd);
    fill_normal(qkv, n, 1.0f);
    fill_normal(qn, hd, 1.0f);
    fill_normal(kn, hd, 1.0f);
    round_bf16(qkv, n); round_bf16(qn, hd); round_bf16(kn, hd);
    /* the tables as the backend builds them: the CPU reference's functions, uploaded */
    float *inv_freq = hmalloc(H), *cos_t = hmalloc((size_t)T * H), *sin_t = hmalloc((size_t)T * H);
    int *pos = (int *)malloc((size_t)T * sizeof(int));
    for (int t = 0; t < T; t++) pos[t] = t;
    rope_inv_freq(inv_freq, &rp, hd);
    rope_cos_sin(cos_t, sin_t, inv_freq, pos, T, hd);

    float *normed = hmalloc(n), *out_ref = hmalloc(n), *rstd_ref = hmalloc((size_t)N * nheads);
    memset(rstd_ref, 0, (size_t)N * nheads * sizeof(float)); /* uploaded even when QK-norm is off */
    if (qk_norm)
        qk_norm_forward_cpu(normed, rstd_ref, qkv, qn, kn, &L, eps, one_plus_w);
    else
        memcpy(normed, qkv, n * 4);
    rope_forward_cpu(out_ref, normed, cos_t, sin_t, &L);

    RopeShape s = {B, T, NH, NKV, hd, eps, one_plus_w, d_doc_pos};
    bf16 *d_inp = up_bf16(qkv, n), *d_qn = up_bf16(qn, hd), *d_kn = up_bf16(kn, hd);
    float *d_cos = up_f32(cos_t, (size_t)T * H), *d_sin = up_f32(sin_t, (size_t)T * H);
    bf16 *d_out = in_place ? d_inp : (bf16 *)dalloc(n * 2);
    float *d_rstd = (float *)dalloc((size_t)N * nheads * 4);
    if (!in_place) poison(d_out, n * 2);
    poison(d_rstd, (size_t)N * nheads * 4);
    rope_forward(d_out, d_rstd, d_inp, qk_norm ? d_qn : NULL, qk_norm ? d_kn : NULL, d_cos, d_sin, &s, 0);
    dsync();
    float *out_g = hmalloc(n), *rstd_g = hmalloc((size_t)N * nheads);
    down_bf16(out_g, d_out, n);
    down_f32(rstd_g, d_rstd, (size_t)N * nheads);
    snprintf(what, sizeof what, "rope fwd B=%d T=%d NH=%d NKV=%d hd=%d%s%s scaling %d%s", B, T, NH, NKV, hd,
             qk_norm ? (one_plus_w ? " +qk-norm (1+w)" : " +qk-norm") : "", in_place ? " in place" : "",
             (int)rp.scaling, docs ? " documents" : "");
    /* value heads are never written: in place they stay the input's, else out's (poisoned) bytes; the
     * attention reads them from the input */
    size_t v_wrong = 0;
    for (int r = 0; r < N; r++)
        for (size_t i = (size_t)nheads * hd; i < R; i++) {
            float *o = &out_g[(size_t)r * R + i];
            v_wrong += in_place ? *o != qkv[(size_t)r * R + i] : !isnan(*o);
            *o = qkv[(size_t)r * R + i]; /* so that the comparison below sees the rotated heads only */
        }
    CHECK(v_wrong == 0, "rope forward wrote %zu value-head elements", v_wrong);
    CHECK_REL(rel_l2(out_g, out_ref, n), 1e-2, what);
    if (qk_norm) CHECK_REL(rel_l2(rstd_g, rstd_ref, (size_t)N * nheads), 1e-5, "  qk-norm rstd");

    /* Backward: the CPU chain (RoPE's transpose, then QK-norm's backward) from zero; the GPU writes
     * dinp (=) and adds into the norm weights' gradients, checked on the increments. */
    float *dout = hmalloc(n), *drot = hmalloc(n), *dinp_ref = hmalloc(n), *dqn_ref = hmalloc(hd), *dkn_ref = hmalloc(hd);
    fill_normal(dout, n, 1.0f);
    round_bf16(dout, n);
    memset(drot, 0, n * 4);
    memset(dqn_ref, 0, hd * 4);
    memset(dkn_ref, 0, hd * 4);
    rope_backward_cpu(drot, dout, cos_t, sin_t, &L);
    if (qk_norm) {
        memset(dinp_ref, 0, n * 4);
        qk_norm_backward_cpu(dinp_ref, dqn_ref, dkn_ref, drot, qkv, qn, kn, rstd_ref, &L, one_plus_w);
    } else {
        memcpy(dinp_ref, drot, n * 4);
    }
    float *dqn0 = hmalloc(hd), *dkn0 = hmalloc(hd);
    fill_normal(dqn0, hd, 1.0f);
    fill_normal(dkn0, hd, 1.0f);
    bf16 *d_x = up_bf16(qkv, n); /* the forward's input (d_inp may have been rotated in place) */
    float *d_rstdr = up_f32(rstd_ref, (size_t)N * nheads);
    size_t scratch_bytes = rope_backward_scratch_bytes(&s);
    void *scratch = dalloc(scratch_bytes);
    float *dinp_g[2], *dqn_g[2], *dkn_g[2];
    /* run 0 writes a separate dinp, run 1 overwrites dout in place: both must give the same bits */
    for (int run = 0; run < 2; run++) {
        poison(scratch, scratch_bytes);
        bf16 *d_dout = up_bf16(dout, n);
        bf16 *d_dinp = run == 0 ? (bf16 *)dalloc(n * 2) : d_dout;
        if (run == 0) poison(d_dinp, n * 2);
        float *d_dqn = up_f32(dqn0, hd), *d_dkn = up_f32(dkn0, hd);
        rope_backward(d_dinp, d_dqn, d_dkn, scratch, d_dout, d_x, qk_norm ? d_qn : NULL, qk_norm ? d_kn : NULL,
                      d_rstdr, d_cos, d_sin, &s, 0);
        dsync();
        dinp_g[run] = hmalloc(n); dqn_g[run] = hmalloc(hd); dkn_g[run] = hmalloc(hd);
        down_bf16(dinp_g[run], d_dinp, n);
        down_f32(dqn_g[run], d_dqn, hd);
        down_f32(dkn_g[run], d_dkn, hd);
    }
    CHECK(same_bytes(dinp_g[0], dinp_g[1], n * 4) && same_bytes(dqn_g[0], dqn_g[1], hd * 4) &&
              same_bytes(dkn_g[0], dkn_g[1], hd * 4),
          "rope backward in place differs from out of place, or is not deterministic (hd=%d)", hd);
    CHECK_REL(rel_l2(dinp_g[0], dinp_ref, n), 1e-2, "  bwd dinp");
    if (qk_norm) {
        for (int i = 0; i < hd; i++) { dqn_g[0][i] -= dqn0[i]; dkn_g[0][i] -= dkn0[i]; }
        CHECK_REL(rel_l2(dqn_g[0], dqn_ref, hd), 1e-4, "  bwd dq_norm increment");
        CHECK_REL(rel_l2(dkn_g[0], dkn_ref, hd), 1e-4, "  bwd dk_norm increment");
    } else {
        CHECK(same_bytes(dqn_g[0], dqn0, hd * 4) && same_bytes(dkn_g[0], dkn0, hd * 4),
              "rope backward without QK-norm touched the norm weights' gradients");
    }
    for (int r = 0; r < 2; r++) { free(dinp_g[r]); free(dqn_g[r]); free(dkn_g[r]); }
    free(qkv); free(qn); free(kn); free(inv_freq); free(cos_t); free(sin_t); free(pos); free(normed); free(out_ref);
    free(rstd_ref); free(out_g); free(rstd_g); free(dout); free(drot); free(dinp_ref); free(dqn_ref); free(dkn_ref);
    free(dqn0); free(dkn0); free(doc_pos);
    dfree_all();
}

static RopeParams rope_plain(double theta) {
    RopeParams p = {};
    p.theta = theta;
    p.scaling = ROPE_SCALING_NONE;
    return p;
}

/* Llama 3.2's rope_scaling: factor 32, low 1, high 4, original context 8192. */
static RopeParams rope_llama32(void) {
    RopeParams p = {};
    p.theta = 500000.0;
    p.scaling = ROPE_SCALING_LLAMA3;
    p.factor = 32.0;
    p.low_freq_factor = 1.0;
    p.high_freq_factor = 4.0;
    p.original_max_position_embeddings = 8192.0;
    return p;
}

TEST(kernels_rope_rotates_half_pairs_with_llama3_scaling_as_the_cpu) {
    seed_fresh();
    rope_case(2, 37, 8, 2, 64, 0, rope_llama32(), 1);
    rope_case(3, 29, 8, 2, 128, 0, rope_llama32(), 0);
    rope_case(1, 301, 8, 2, 256, 0, rope_plain(10000.0), 1);
    rope_case(2, 5, 3, 3, 6, 0, rope_plain(10000.0), 0); /* hd/2 = 3 pairs: most lanes idle */
    RopeParams linear = rope_plain(10000.0);
    linear.scaling = ROPE_SCALING_LINEAR;
    linear.factor = 4.0;
    rope_case(1, 67, 4, 1, 96, 0, linear, 1);
}

TEST(kernels_rope_rotates_each_row_by_its_place_in_its_document) {
    seed_fresh();
    rope_case(2, 137, 8, 2, 64, 0, rope_llama32(), 1, 0, 1);
    rope_case(3, 200, 16, 8, 128, 1, rope_plain(1e6), 0, 0, 1); /* Qwen3: QK-norm */
    rope_case(1, 301, 4, 1, 256, 1, rope_plain(10000.0), 1, 1, 1); /* Gemma 3 */
}

TEST(kernels_qk_norm_runs_per_head_before_rope_with_deterministic_weight_gradients) {
    seed_fresh();
    rope_case(2, 37, 8, 2, 128, 1, rope_plain(1000000.0), 0); /* Qwen3's shape of heads */
    rope_case(3, 19, 8, 2, 64, 1, rope_llama32(), 1);
    rope_case(1, 45, 8, 2, 256, 1, rope_plain(10000.0), 0);
    rope_case(5, 131, 16, 8, 128, 1, rope_plain(1000000.0), 1); /* more tasks than the fixed grid's warps */
    rope_case(2, 23, 4, 1, 256, 1, rope_plain(10000.0), 0, 1); /* Gemma 3's QK-norm multiplies by 1 + w */
}

/* ---- gated MLPs --------------------------------------------------------------------------- */

static void gated_case(int N, int F, int gelu) {
    char what[96];
    size_t nin = (size_t)N * 2 * F, nout = (size_t)N * F;
    float *inp = hmalloc(nin), *out_ref = hmalloc(nout), *dout = hmalloc(nout), *dinp_ref = hmalloc(nin);
    fill_normal(inp, nin, 2.0f);
    fill_normal(dout, nout, 1.0f);
    round_bf16(inp, nin);
    round_bf16(dout, nout);
    GluActivation cpu_act = gelu ? GLU_GELU_TANH : GLU_SILU;
    GatedAct act = gelu ? GATED_GELU_TANH : GATED_SILU;
    glu_forward_cpu(out_ref, inp, N, F, cpu_act);
    memset(dinp_ref, 0, nin * 4);
    glu_backward_cpu(dinp_ref, dout, inp, N, F, cpu_act);

    bf16 *d_inp = up_bf16(inp, nin), *d_dout = up_bf16(dout, nout);
    bf16 *d_out = (bf16 *)dalloc(nout * 2), *d_dinp = (bf16 *)dalloc(nin * 2);
    bf16 *d_out_again = (bf16 *)dalloc(nout * 2), *d_dinp_alone = (bf16 *)dalloc(nin * 2);
    poison(d_out, nout * 2);
    poison(d_dinp, nin * 2);
    poison(d_out_again, nout * 2);
    poison(d_dinp_alone, nin * 2);
    gated_forward(d_out, d_inp, N, F, act, 0);
    gated_backward(d_dinp, d_out_again, d_dout, d_inp, N, F, act, 0);
    gated_backward(d_dinp_alone, NULL, d_dout, d_inp, N, F, act, 0);
    dsync();
    float *out_g = hmalloc(nout), *dinp_g = hmalloc(nin);
    down_bf16(out_g, d_out, nout);
    down_bf16(dinp_g, d_dinp, nin);
    snprintf(what, sizeof what, "%s N=%d F=%d: out", gelu ? "geglu" : "swiglu", N, F);
    CHECK_REL(rel_l2(out_g, out_ref, nout), 1e-2, what);
    CHECK_REL(rel_l2(dinp_g, dinp_ref, nin), 1e-2, "  bwd d(gate|up)");
    /* the backward's re-formed product is what down_proj's input was in the forward, bit for bit,
     * and asking for it leaves the gradients unchanged */
    float *out_again = hmalloc(nout), *dinp_alone = hmalloc(nin);
    down_bf16(out_again, d_out_again, nout);
    down_bf16(dinp_alone, d_dinp_alone, nin);
    CHECK(same_bytes(out_again, out_g, nout * 4), "%s: the backward's product differs from the forward's", what);
    CHECK(same_bytes(dinp_alone, dinp_g, nin * 4), "%s: the gradient depends on whether the product is kept", what);
    /* gate is the first half of each row: swapping the halves must not pass */
    double swapped = 0, den = 0;
    for (int n = 0; n < N; n++)
        for (int i = 0; i < F; i++) {
            float g = inp[(size_t)n * 2 * F + F + i], u = inp[(size_t)n * 2 * F + i];
            float o = (gelu ? gelu_tanh(g) : g / (1.0f + expf(-g))) * u, r = out_ref[(size_t)n * F + i];
            swapped += (double)(o - r) * (o - r);
            den += (double)r * r;
        }
    if (nout >= 64) /* too few values may swap to nearly the same */
        CHECK(sqrt(swapped / den) > 0.1, "gate and up are indistinguishable in this case (rel %.2e)",
              sqrt(swapped / den));
    free(inp); free(out_ref); free(dout); free(dinp_ref); free(out_g); free(dinp_g); free(out_again); free(dinp_alone);
    dfree_all();
}

/* The gated MLP's products with the activation in their epilogues (kernels/gated_mlp.cu) against
 * the CPU reference: the product rounded to bf16, then glu_forward_cpu / glu_backward_cpu on it, as
 * the separate path computes them; against that path on the GPU (the same activation: only a cuBLAS
 * product summed in another order may differ); reruns bitwise equal. gelu: GeGLU, else SwiGLU. */
static void gated_mlp_case(int N, int C, int F, int gelu) {
    const GatedAct act = gelu ? GATED_GELU_TANH : GATED_SILU;
    const GluActivation cpu_act = gelu ? GLU_GELU_TANH : GLU_SILU;
    char what[128];
    const size_t nc = (size_t)N * C, nf = (size_t)N * F, ngu = 2 * nf, nw = (size_t)C * F;
    float *x = hmalloc(nc), *wfc = hmalloc(2 * nw), *dy = hmalloc(nc), *wproj = hmalloc(nw), *gu_in = hmalloc(ngu);
    fill_normal(x, nc, 1.0f);
    fill_normal(wfc, 2 * nw, 1.5f / sqrtf((float)C));
    fill_normal(dy, nc, 1.0f);
    fill_normal(wproj, nw, 1.0f / sqrtf((float)C));
    fill_normal(gu_in, ngu, 2.0f);
    round_bf16(x, nc), round_bf16(wfc, 2 * nw), round_bf16(dy, nc), round_bf16(wproj, nw), round_bf16(gu_in, ngu);

    /* forward: GU = x wfc^T in bf16, H from it */
    float *gu_ref = hmalloc(ngu), *h_ref = hmalloc(nf);
    matmul_forward_cpu(gu_ref, x, wfc, NULL, N, C, 2 * F);
    round_bf16(gu_ref, ngu);
    glu_forward_cpu(h_ref, gu_ref, N, F, cpu_act);
    /* backward: D = dy wproj in bf16 (wproj [C, F]: the product's weight of OC = C rows), then the
     * activation's gradient and product from gu_in */
    float *d_ref = hmalloc(nf), *dgu_ref = hmalloc(ngu), *hb_ref = hmalloc(nf), *dw_unused = hmalloc(nw),
          *db_unused = hmalloc(C);
    memset(d_ref, 0, nf * 4), memset(dw_unused, 0, nw * 4), memset(db_unused, 0, (size_t)C * 4);
    memset(dgu_ref, 0, ngu * 4);
    matmul_backward_cpu(d_ref, dw_unused, db_unused, dy, gu_in /* its weight gradient reads any N x F */, wproj, N, F,
                        C);
    round_bf16(d_ref, nf);
    glu_backward_cpu(dgu_ref, d_ref, gu_in, N, F, cpu_act);
    glu_forward_cpu(hb_ref, gu_in, N, F, cpu_act);

    bf16 *d_x = up_bf16(x, nc), *d_wfc = up_bf16(wfc, 2 * nw), *d_dy = up_bf16(dy, nc), *d_wproj = up_bf16(wproj, nw),
         *d_gu_in = up_bf16(gu_in, ngu);
    bf16 *d_gu[2], *d_h[2], *d_dgu[2], *d_hb[2];
    for (int run = 0; run < 2; run++) {
        d_gu[run] = (bf16 *)dalloc(ngu * 2), d_h[run] = (bf16 *)dalloc(nf * 2);
        d_dgu[run] = (bf16 *)dalloc(ngu * 2), d_hb[run] = (bf16 *)dalloc(nf * 2);
        poison(d_gu[run], ngu * 2), poison(d_h[run], nf * 2), poison(d_dgu[run], ngu * 2), poison(d_hb[run], nf * 2);
        gated_mlp_forward(d_gu[run], d_h[run], d_x, d_wfc, N, C, F, act, 0);
        gated_mlp_backward(d_dgu[run], d_hb[run], d_dy, d_wproj, d_gu_in, N, C, F, act, 0);
    }
    /* the separate path */
    bf16 *s_gu = (bf16 *)dalloc(ngu * 2), *s_h = (bf16 *)dalloc(nf * 2), *s_d = (bf16 *)dalloc(nf * 2),
         *s_dgu = (bf16 *)dalloc(ngu * 2), *s_hb = (bf16 *)dalloc(nf * 2);
    matmul_forward(s_gu, NULL, d_x, d_wfc, NULL, N, C, 2 * F, 0);
    gated_forward(s_h, s_gu, N, F, act, 0);
    matmul_backward(s_d, NULL, NULL, NULL, d_dy, NULL, d_wproj, NULL, N, F, C, 0);
    gated_backward(s_dgu, s_hb, s_d, d_gu_in, N, F, act, 0);
    dsync();

    struct {
        const char *name;
        bf16 *const *got;
        bf16 *sep;
        const float *ref;
        size_t n;
    } outs[] = {{"GU", d_gu, s_gu, gu_ref, ngu}, {"H", d_h, s_h, h_ref, nf},
                {"dGU", d_dgu, s_dgu, dgu_ref, ngu}, {"backward H", d_hb, s_hb, hb_ref, nf}};
    for (size_t o = 0; o < sizeof outs / sizeof outs[0]; o++) {
        float *g0 = hmalloc(outs[o].n), *g1 = hmalloc(outs[o].n), *sep = hmalloc(outs[o].n);
        down_bf16(g0, outs[o].got[0], outs[o].n);
        down_bf16(g1, outs[o].got[1], outs[o].n);
        down_bf16(sep, outs[o].sep, outs[o].n);
        snprintf(what, sizeof what, "gated MLP products (%s) N=%d C=%d F=%d: %s", gelu ? "GeGLU" : "SwiGLU", N, C, F,
                 outs[o].name);
        CHECK_REL(rel_l2(g0, outs[o].ref, outs[o].n), 1e-2, what);
        /* a product summed in another order moves a value by at most a bf16 step */
        CHECK(rel_l2(g0, sep, outs[o].n) < 4e-3, "%s: %.2e from the separate path", what, rel_l2(g0, sep, outs[o].n));
        CHECK(same_bytes(g0, g1, outs[o].n * 4), "%s: a second run differs", what);
        free(g0), free(g1), free(sep);
    }
    free(x), free(wfc), free(dy), free(wproj), free(gu_in), free(gu_ref), free(h_ref), free(d_ref), free(dgu_ref);
    free(hb_ref), free(dw_unused), free(db_unused);
    dfree_all();
}

TEST(kernels_gated_mlp_products_carry_swiglu_and_geglu_and_match_cpu_and_the_separate_path) {
    seed_fresh();
    CHECK(gated_mlp_fits(1024, 3072, 256) && gated_mlp_fits(640, 2048, 16),
          "Qwen3-0.6B's and Gemma-3-270M's MLPs should take the products");
    CHECK(!gated_mlp_fits(1024, 3000, 256) && !gated_mlp_fits(1020, 3072, 256) && !gated_mlp_fits(1024, 3072, 264),
          "F off 128, C off 8 or a weight off 16 bytes must take the separate path");
    for (int gelu = 0; gelu < 2; gelu++) {
        gated_mlp_case(1, 64, 128, gelu);      /* one row: one cluster, its second CTA's rows all past N */
        gated_mlp_case(37, 200, 384, gelu);    /* C off the k blocks; F off the backward's 256 columns */
        gated_mlp_case(300, 1024, 256, gelu);  /* the ring wraps within a tile */
        gated_mlp_case(129, 2056, 640, gelu);  /* C past 1536: the backward's producer warp */
        gated_mlp_case(1000, 640, 2048, gelu); /* Gemma-3-270M's widths, over a thousand rows */
        /* more tiles than clusters (66 on 132 SMs): each CTA stages tile after tile, the drain one
         * behind, and the issuer walks on to its next unit; with the inline issuer and the producer warp */
        gated_mlp_case(4100, 136, 2048, gelu);
        gated_mlp_case(2100, 1544, 2048, gelu);
    }
}

/* Both activations at gates far into their tails (a diverging run's), against the CPU reference
 * value by value: the sigmoid's 2^big saturates to inf and gives act -0 and slope 0, never a NaN. */
TEST(kernels_gated_activations_saturate_at_extreme_gates_as_the_cpu_reference) {
    const float gates[] = {-1e4f, -300.0f, -100.0f, -30.0f, -10.0f, -3.0f, -0.5f, 0.0f,
                           0.5f,  3.0f,    10.0f,   30.0f,  100.0f, 300.0f, 1e4f, -1.5f};
    const int F = (int)(sizeof gates / sizeof gates[0]);
    float inp[2 * F], dout[F], out_ref[F], dinp_ref[2 * F], out_g[F], dinp_g[2 * F];
    for (int i = 0; i < F; i++) inp[i] = gates[i], inp[F + i] = 1.0f, dout[i] = 1.0f;
    round_bf16(inp, 2 * F);
    for (int gelu = 0; gelu < 2; gelu++) {
        const GluActivation cpu_act = gelu ? GLU_GELU_TANH : GLU_SILU;
        const GatedAct act = gelu ? GATED_GELU_TANH : GATED_SILU;
        glu_forward_cpu(out_ref, inp, 1, F, cpu_act);
        memset(dinp_ref, 0, sizeof dinp_ref);
        glu_backward_cpu(dinp_ref, dout, inp, 1, F, cpu_act);
        bf16 *d_inp = up_bf16(inp, 2 * F), *d_dout = up_bf16(dout, F);
        bf16 *d_out = (bf16 *)dalloc(F * 2), *d_dinp = (bf16 *)dalloc(2 * F * 2);
        gated_forward(d_out, d_inp, 1, F, act, 0);
        gated_backward(d_dinp, NULL, d_dout, d_inp, 1, F, act, 0);
        dsync();
        down_bf16(out_g, d_out, F);
        down_bf16(dinp_g, d_dinp, 2 * F);
        for (int i = 0; i < 2 * F; i++) {
            const float got = i < F ? out_g[i] : dinp_g[i - F], ref = i < F ? out_ref[i] : dinp_ref[i - F];
            CHECK(isfinite(got) && fabsf(got - ref) <= 1e-2f * fmaxf(1.0f, fabsf(ref)),
                  "%s at gate %g: %s %g, the CPU %g", gelu ? "GeGLU" : "SwiGLU", (double)gates[i % F],
                  i < F ? "act" : "slope", (double)got, (double)ref);
        }
        dfree_all();
    }
}

TEST(kernels_swiglu_and_geglu_take_gate_then_up_match_cpu_and_the_backward_reforms_the_forwards_product) {
    seed_fresh();
    gated_case(1, 1, 0);
    gated_case(37, 7, 0);     /* a thread per column */
    gated_case(131, 96, 0);
    gated_case(67, 3000, 0);
    gated_case(9, 8192, 0);
    gated_case(33, 7, 1);
    gated_case(129, 2048, 1);
}
