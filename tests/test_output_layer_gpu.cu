/* tests/test_output_layer_gpu.cu - the two GPU output layers (kernels/output_layer.h) against an fp64
 * CPU reference written here, on fresh random inputs (the seed is printed with each failure).
 *
 * The reference reads the same bf16-rounded H and W as the GPU, so the only differences are the
 * GPU's fp32 arithmetic and the bf16 rounding of dZ and dH. Tolerances (issue 5): loss relative
 * error <= 1e-5, dH and dW relative L2 <= 2e-3 for the fused layer. The canonical layer keeps its
 * logits in bf16 (as llm.c does), which costs up to 2e-3 on a row's loss or log-sum-exp: it gets
 * 5e-3 for both, and the two layers must agree to that. On Hopper the fused layer runs its
 * TMA-fed wgmma kernel; the *_portable_*, *_wgmma_* and *_tma_* tests name each tile kernel. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <thread>
#include <vector>

#include <cuda_bf16.h>

#include "kernels/cuda_check.h"
#include "kernels/output_layer.h"
#include "tests/test.h"

/* ---- random inputs -------------------------------------------------------------------------- */

static uint64_t g_seed;

static uint64_t splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static double uniform01(uint64_t *s) { return ((splitmix(s) >> 11) + 0.5) * (1.0 / 9007199254740992.0); }
static double normal(uint64_t *s) {
    return sqrt(-2.0 * log(uniform01(s))) * cos(6.283185307179586 * uniform01(s));
}

static uint64_t fresh_seed(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t s = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20) ^ (g_seed * 0x9E37ull);
    g_seed = s;
    return s;
}

/* bf16 values and their exact fp64 images */
typedef struct {
    std::vector<__nv_bfloat16> b;
    std::vector<double> f;
} Bf16Tensor;

static void fill_normal(Bf16Tensor *t, size_t n, double std, uint64_t *s) {
    t->b.resize(n);
    t->f.resize(n);
    for (size_t i = 0; i < n; i++) {
        t->b[i] = __float2bfloat16((float)(normal(s) * std));
        t->f[i] = (double)__bfloat162float(t->b[i]);
    }
}

static std::vector<int32_t> random_targets(int64_t N, int64_t V, double ignore_frac, uint64_t *s) {
    std::vector<int32_t> t(N);
    for (int64_t i = 0; i < N; i++)
        t[i] = uniform01(s) < ignore_frac ? -1 : (int32_t)(splitmix(s) % (uint64_t)V);
    return t;
}

/* ---- fp64 reference -------------------------------------------------------------------------- */

template <typename F> static void parallel_for(int64_t n, F fn) {
    int nt = (int)std::thread::hardware_concurrency();
    if (nt < 1) nt = 1;
    if (nt > 64) nt = 64;
    std::vector<std::thread> th;
    for (int i = 0; i < nt; i++)
        th.emplace_back([=] {
            for (int64_t j = n * i / nt; j < n * (i + 1) / nt; j++) fn(j);
        });
    for (auto &t : th) t.join();
}

typedef struct {
    double loss;
    std::vector<double> row_loss, lse, dH, dW; /* dW: the increment, grad_scale included */
} Ref;

static Ref reference(const std::vector<double> &H, const std::vector<double> &W, const std::vector<int32_t> &tg,
                     int64_t N, int64_t V, int d, OutputReduction red, double grad_scale, int grads) {
    Ref r;
    r.row_loss.assign(N, 0.0), r.lse.assign(N, 0.0);
    int64_t count = 0;
    for (int64_t n = 0; n < N; n++) count += tg[n] != -1;
    const double scale = red == OUTPUT_REDUCE_MEAN ? grad_scale / (double)(count > 0 ? count : 1) : grad_scale;
    if (grads) r.dH.assign((size_t)N * d, 0.0), r.dW.assign((size_t)V * d, 0.0);
    /* rows: logits, lse, loss, dH = (P - Y) W scale */
    parallel_for(N, [&](int64_t n) {
        std::vector<double> z(V);
        const double *h = &H[(size_t)n * d];
        double mx = -INFINITY;
        for (int64_t v = 0; v < V; v++) {
            const double *w = &W[(size_t)v * d];
            double s = 0;
            for (int k = 0; k < d; k++) s += h[k] * w[k];
            z[v] = s;
            if (s > mx) mx = s;
        }
        double se = 0;
        for (int64_t v = 0; v < V; v++) se += exp(z[v] - mx);
        const double lse = mx + log(se);
        r.lse[n] = lse;
        const int t = tg[n];
        r.row_loss[n] = t == -1 ? 0.0 : lse - z[t];
        if (grads && t != -1) {
            double *dh = &r.dH[(size_t)n * d];
            for (int64_t v = 0; v < V; v++) {
                const double g = (exp(z[v] - lse) - (v == t ? 1.0 : 0.0)) * scale;
                const double *w = &W[(size_t)v * d];
                for (int k = 0; k < d; k++) dh[k] += g * w[k];
            }
        }
    });
    double sum = 0;
    for (int64_t n = 0; n < N; n++) sum += r.row_loss[n];
    r.loss = red == OUTPUT_REDUCE_MEAN ? sum / (double)(count > 0 ? count : 1) : sum;
    /* columns: dW = (P - Y)^T H scale, recomputing the logits column by column */
    if (grads)
        parallel_for(V, [&](int64_t v) {
            const double *w = &W[(size_t)v * d];
            double *dw = &r.dW[(size_t)v * d];
            for (int64_t n = 0; n < N; n++) {
                const int t = tg[n];
                if (t == -1) continue;
                const double *h = &H[(size_t)n * d];
                double s = 0;
                for (int k = 0; k < d; k++) s += h[k] * w[k];
                const double g = (exp(s - r.lse[n]) - (v == t ? 1.0 : 0.0)) * scale;
                for (int k = 0; k < d; k++) dw[k] += g * h[k];
            }
        });
    return r;
}

/* ||a - b|| / ||b||; the absolute norm of a when b is all zero */
template <typename T> static double rel_l2(const T *a, const double *b, size_t n) {
    double e = 0, s = 0;
    for (size_t i = 0; i < n; i++) {
        double x = (double)a[i];
        if (x != x) return INFINITY; /* NaN: never passes */
        e += (x - b[i]) * (x - b[i]);
        s += b[i] * b[i];
    }
    return s > 0 ? sqrt(e / s) : sqrt(e);
}

/* ---- running a layer ------------------------------------------------------------------------- */

typedef struct {
    float loss;
    std::vector<float> row_loss, lse, dH, dW;
    std::vector<uint16_t> dH_bits;
} GpuOut;

static const uint16_t BF16_NAN = 0x7fc1;
static const uint32_t F32_NAN = 0x7fc00001u;

template <typename T> static T *upload(const std::vector<T> &v) {
    T *p;
    CUDA_CHECK(cudaMalloc(&p, v.size() * sizeof(T)));
    CUDA_CHECK(cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
    return p;
}

/* Runs one layer (forward_backward when dW0 is given, else forward) with every output poisoned
 * with NaN first; dW starts from dW0 (the += is part of the contract). */
/* The chunked layer runs in the smallest blocks (128 rows) unless a test asks for more room, so
 * that every case of more than 128 rows crosses block boundaries. */
static size_t g_logits_budget = 1;

static int run_layer(OutputLayerKind kind, const Bf16Tensor &H, const Bf16Tensor &W, const std::vector<int32_t> &tg,
                     int64_t N, int64_t V, int d, OutputReduction red, float grad_scale, const std::vector<float> *dW0,
                     GpuOut *out) {
    OutputLayer *L = output_layer_create(kind, N, V, d, g_logits_budget);
    if (!L) return -1;
    const int grads = dW0 != NULL;
    __nv_bfloat16 *dHd = upload(H.b), *dWt = upload(W.b);
    int32_t *dtg = upload(tg);
    float *dloss, *drl, *dlse, *ddW = NULL;
    __nv_bfloat16 *ddH = NULL;
    CUDA_CHECK(cudaMalloc(&dloss, sizeof(float)));
    CUDA_CHECK(cudaMalloc(&drl, N * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&dlse, N * sizeof(float)));
    std::vector<uint32_t> fpoison(N, F32_NAN);
    CUDA_CHECK(cudaMemcpy(dloss, fpoison.data(), sizeof(float), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(drl, fpoison.data(), N * sizeof(float), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(dlse, fpoison.data(), N * sizeof(float), cudaMemcpyHostToDevice));
    if (grads) {
        std::vector<uint16_t> hp((size_t)N * d, BF16_NAN);
        ddH = (__nv_bfloat16 *)upload(hp);
        ddW = upload(*dW0);
    }
    OutputLayerArgs a = {};
    a.H = dHd, a.W = dWt, a.targets = dtg, a.N = N, a.reduction = red, a.grad_scale = grad_scale;
    a.loss = dloss, a.row_loss = drl, a.row_lse = dlse, a.dH = ddH, a.dW = ddW;
    int rc = grads ? output_layer_forward_backward(L, &a, 0) : output_layer_forward(L, &a, 0);
    CUDA_CHECK(cudaDeviceSynchronize());
    if (rc == 0) {
        CUDA_CHECK(cudaMemcpy(&out->loss, dloss, sizeof(float), cudaMemcpyDeviceToHost));
        out->row_loss.resize(N), out->lse.resize(N);
        CUDA_CHECK(cudaMemcpy(out->row_loss.data(), drl, N * sizeof(float), cudaMemcpyDeviceToHost));
        CUDA_CHECK(cudaMemcpy(out->lse.data(), dlse, N * sizeof(float), cudaMemcpyDeviceToHost));
        if (grads) {
            out->dH_bits.resize((size_t)N * d), out->dH.resize((size_t)N * d), out->dW.resize((size_t)V * d);
            CUDA_CHECK(cudaMemcpy(out->dH_bits.data(), ddH, (size_t)N * d * 2, cudaMemcpyDeviceToHost));
            for (size_t i = 0; i < out->dH.size(); i++) {
                uint32_t u = (uint32_t)out->dH_bits[i] << 16;
                memcpy(&out->dH[i], &u, 4);
            }
            CUDA_CHECK(cudaMemcpy(out->dW.data(), ddW, (size_t)V * d * 4, cudaMemcpyDeviceToHost));
        }
    }
    if (grads) CUDA_CHECK(cudaFree(ddW)), CUDA_CHECK(cudaFree(ddH));
    CUDA_CHECK(cudaFree(dlse));
    CUDA_CHECK(cudaFree(drl));
    CUDA_CHECK(cudaFree(dloss));
    CUDA_CHECK(cudaFree(dtg));
    CUDA_CHECK(cudaFree(dWt));
    CUDA_CHECK(cudaFree(dHd));
    output_layer_destroy(L);
    return rc;
}

typedef struct {
    int64_t N, V;
    int d;
    double logit_std, ignore_frac;
    OutputReduction red;
    float grad_scale;
} Case;

/* Checks one layer on one case against the fp64 reference; tol_loss for loss/row_loss/lse,
 * tol_grad for dH and dW. */
static void check_case(OutputLayerKind kind, Case c, double tol_loss, double tol_grad) {
    uint64_t seed = fresh_seed(), s = seed;
    Bf16Tensor H, W;
    fill_normal(&H, (size_t)c.N * c.d, 1.0, &s);
    fill_normal(&W, (size_t)c.V * c.d, c.logit_std / sqrt((double)c.d), &s);
    std::vector<int32_t> tg = random_targets(c.N, c.V, c.ignore_frac, &s);
    Ref r = reference(H.f, W.f, tg, c.N, c.V, c.d, c.red, c.grad_scale, 1);
    std::vector<float> dW0((size_t)c.V * c.d, 0.0f);
    GpuOut g;
    REQUIRE(run_layer(kind, H, W, tg, c.N, c.V, c.d, c.red, c.grad_scale, &dW0, &g) == 0, "layer call failed");
    double el = fabs(g.loss - r.loss) / (fabs(r.loss) > 0 ? fabs(r.loss) : 1.0);
    double erl = rel_l2(g.row_loss.data(), r.row_loss.data(), c.N);
    double ese = rel_l2(g.lse.data(), r.lse.data(), c.N);
    double edh = rel_l2(g.dH.data(), r.dH.data(), g.dH.size());
    double edw = rel_l2(g.dW.data(), r.dW.data(), g.dW.size());
    fprintf(stderr, "[%s N=%lld V=%lld d=%d: loss %.1e rows %.1e lse %.1e dH %.1e dW %.1e] ",
            output_layer_kind_name(kind), (long long)c.N, (long long)c.V, c.d, el, erl, ese, edh, edw);
    CHECK(el <= tol_loss, "loss %.9g vs reference %.9g: rel err %.3g > %.1g (seed %llu)", g.loss, r.loss, el, tol_loss,
          (unsigned long long)seed);
    CHECK(erl <= tol_loss, "row losses rel L2 %.3g > %.1g (seed %llu)", erl, tol_loss, (unsigned long long)seed);
    CHECK(ese <= tol_loss, "row lse rel L2 %.3g > %.1g (seed %llu)", ese, tol_loss, (unsigned long long)seed);
    CHECK(edh <= tol_grad, "dH rel L2 %.3g > %.1g (seed %llu)", edh, tol_grad, (unsigned long long)seed);
    CHECK(edw <= tol_grad, "dW rel L2 %.3g > %.1g (seed %llu)", edw, tol_grad, (unsigned long long)seed);
}

#define FUSED_LOSS_TOL 1e-5
#define FUSED_GRAD_TOL 2e-3
#define CANON_LOSS_TOL 5e-3 /* a bf16 logit is off by up to 2^-9 of itself, and so is one row's loss */
#define CANON_GRAD_TOL 5e-3
/* With a handful of counted rows the gradient error is not an average: dZ reaches the GEMMs in
 * bf16 (8 significant bits, so off by up to 2^-8 of itself), and each row's target entry p - 1,
 * the row's largest, carries an error that is the same across the row's d values; dH itself is
 * rounded to bf16 too. At N = 7 (about 5 counted rows) a correct layer exceeds 2e-3 in about 1 draw
 * of 20 (dev/rounding_error_sim.c: 711 of 16000 draws, largest 2.81e-3; the canonical layer has the
 * same term), most likely the one failure of this file's tests in 16 GPU runs (2026-11-23); from
 * 1000 rows on the errors average out and 2e-3 holds with a wide margin. The few-row bound is
 * about 2^-8, one bf16 rounding's largest relative error; the largest of 64000 simulated draws was
 * 2.97e-3. */
#define FEW_ROWS_GRAD_TOL 4e-3
/* The canonical layer's bf16 logits add an error of up to |z| 2^-9 to every softmax exponent (1.6 %
 * of p at z = 8), which few rows do not average out either: its 7-row case exceeded 5e-3 in 6 of
 * 6000 draws of dev/rounding_error_sim.c (the largest of 30000: 6.2e-3). */
#define FEW_ROWS_CANON_GRAD_TOL 1e-2

/* ---- the fused layer against fp64 ---------------------------------------------------------- */

TEST(fused_output_one_row_one_word) {
    check_case(OUTPUT_LAYER_FUSED, Case{1, 1, 64, 2.0, 0.0, OUTPUT_REDUCE_MEAN, 1.0f}, FUSED_LOSS_TOL, FUSED_GRAD_TOL);
}

TEST(fused_output_7_rows_1000_words_with_ignored) {
    check_case(OUTPUT_LAYER_FUSED, Case{7, 1000, 128, 2.0, 0.3, OUTPUT_REDUCE_MEAN, 1.0f}, FUSED_LOSS_TOL,
               FEW_ROWS_GRAD_TOL);
}

TEST(fused_output_1000_rows_50257_words_with_ignored) {
    check_case(OUTPUT_LAYER_FUSED, Case{1000, 50257, 128, 2.0, 0.1, OUTPUT_REDUCE_MEAN, 1.0f}, FUSED_LOSS_TOL,
               FUSED_GRAD_TOL);
}

TEST(fused_output_4097_rows_131073_words_many_chunks_and_windows) {
    check_case(OUTPUT_LAYER_FUSED, Case{4097, 131073, 64, 2.0, 0.05, OUTPUT_REDUCE_MEAN, 1.0f}, FUSED_LOSS_TOL,
               FUSED_GRAD_TOL);
}

TEST(fused_output_one_row_wide_model_many_windows) {
    check_case(OUTPUT_LAYER_FUSED, Case{1, 50257, 768, 2.0, 0.0, OUTPUT_REDUCE_MEAN, 1.0f}, FUSED_LOSS_TOL,
               FUSED_GRAD_TOL);
}

TEST(fused_output_extreme_logits_beyond_80) {
    /* logits with standard deviation 40: rows span +-120, the online max must rescale correctly */
    check_case(OUTPUT_LAYER_FUSED, Case{1000, 1000, 128, 40.0, 0.1, OUTPUT_REDUCE_MEAN, 1.0f}, FUSED_LOSS_TOL,
               FUSED_GRAD_TOL);
}

TEST(fused_output_sum_reduction_with_grad_scale) {
    check_case(OUTPUT_LAYER_FUSED, Case{300, 5000, 192, 3.0, 0.2, OUTPUT_REDUCE_SUM, 0.25f}, FUSED_LOSS_TOL,
               FUSED_GRAD_TOL);
}

/* the portable (mma.sync) tile kernel on the same checks */
TEST(fused_output_portable_kernel_1000_rows_50257_words_with_ignored) {
    output_layer_select_tile_kernel(OUTPUT_TILE_KERNEL_MMA);
    check_case(OUTPUT_LAYER_FUSED, Case{1000, 50257, 128, 2.0, 0.1, OUTPUT_REDUCE_MEAN, 1.0f}, FUSED_LOSS_TOL,
               FUSED_GRAD_TOL);
    output_layer_select_tile_kernel(OUTPUT_TILE_KERNEL_AUTO);
}

TEST(fused_output_portable_kernel_extreme_logits_and_tiny_shapes) {
    output_layer_select_tile_kernel(OUTPUT_TILE_KERNEL_MMA);
    check_case(OUTPUT_LAYER_FUSED, Case{1000, 1000, 128, 40.0, 0.1, OUTPUT_REDUCE_MEAN, 1.0f}, FUSED_LOSS_TOL,
               FUSED_GRAD_TOL);
    check_case(OUTPUT_LAYER_FUSED, Case{7, 1, 64, 2.0, 0.3, OUTPUT_REDUCE_SUM, 2.0f}, FUSED_LOSS_TOL, FUSED_GRAD_TOL);
    output_layer_select_tile_kernel(OUTPUT_TILE_KERNEL_AUTO);
}

static void check_deterministic(OutputLayerKind kind);

/* the cp.async-fed Hopper tile kernels (128 x 256 one CTA per SM; 128 x 128 two per SM) */
static void check_cp_async_wgmma(int kernel) {
    output_layer_select_tile_kernel(kernel);
    check_case(OUTPUT_LAYER_FUSED, Case{1000, 50257, 128, 2.0, 0.1, OUTPUT_REDUCE_MEAN, 1.0f}, FUSED_LOSS_TOL,
               FUSED_GRAD_TOL);
    check_case(OUTPUT_LAYER_FUSED, Case{1000, 1000, 128, 40.0, 0.1, OUTPUT_REDUCE_MEAN, 1.0f}, FUSED_LOSS_TOL,
               FUSED_GRAD_TOL);
    check_case(OUTPUT_LAYER_FUSED, Case{7, 1, 64, 2.0, 0.3, OUTPUT_REDUCE_SUM, 2.0f}, FUSED_LOSS_TOL, FUSED_GRAD_TOL);
    check_deterministic(OUTPUT_LAYER_FUSED);
    output_layer_select_tile_kernel(OUTPUT_TILE_KERNEL_AUTO);
}
TEST(fused_output_wgmma_128x256_kernel_against_fp64) { check_cp_async_wgmma(OUTPUT_TILE_KERNEL_WGMMA_128x256); }
TEST(fused_output_wgmma_128x128_kernel_against_fp64) { check_cp_async_wgmma(OUTPUT_TILE_KERNEL_WGMMA_128x128); }

/* the Hopper tile kernels fed by TMA (the default on Hopper; spelled out so they stay tested): one
 * CTA alone, and 2-CTA clusters that multicast W (odd row-block counts leave a CTA all padding) */
static void check_tma_kernel(int kernel) {
    output_layer_select_tile_kernel(kernel);
    check_case(OUTPUT_LAYER_FUSED, Case{1000, 50257, 128, 2.0, 0.1, OUTPUT_REDUCE_MEAN, 1.0f}, FUSED_LOSS_TOL,
               FUSED_GRAD_TOL);
    check_case(OUTPUT_LAYER_FUSED, Case{4097, 131073, 64, 2.0, 0.05, OUTPUT_REDUCE_MEAN, 1.0f}, FUSED_LOSS_TOL,
               FUSED_GRAD_TOL);
    check_case(OUTPUT_LAYER_FUSED, Case{1000, 1000, 128, 40.0, 0.1, OUTPUT_REDUCE_MEAN, 1.0f}, FUSED_LOSS_TOL,
               FUSED_GRAD_TOL);
    check_case(OUTPUT_LAYER_FUSED, Case{7, 1, 64, 2.0, 0.3, OUTPUT_REDUCE_SUM, 2.0f}, FUSED_LOSS_TOL, FUSED_GRAD_TOL);
    check_case(OUTPUT_LAYER_FUSED, Case{1, 50257, 768, 2.0, 0.0, OUTPUT_REDUCE_MEAN, 1.0f}, FUSED_LOSS_TOL,
               FUSED_GRAD_TOL);
    check_deterministic(OUTPUT_LAYER_FUSED);
    output_layer_select_tile_kernel(OUTPUT_TILE_KERNEL_AUTO);
}
TEST(fused_output_tma_kernel_against_fp64) { check_tma_kernel(OUTPUT_TILE_KERNEL_TMA); }
TEST(fused_output_tma_cluster_kernel_against_fp64) { check_tma_kernel(OUTPUT_TILE_KERNEL_TMA_CLUSTER); }

/* ---- the canonical layer against fp64 ------------------------------------------------------ */

TEST(canonical_output_7_rows_1000_words_with_ignored) {
    check_case(OUTPUT_LAYER_CANONICAL, Case{7, 1000, 128, 2.0, 0.3, OUTPUT_REDUCE_MEAN, 1.0f}, CANON_LOSS_TOL,
               FEW_ROWS_CANON_GRAD_TOL);
}

TEST(canonical_output_1000_rows_50257_words_with_ignored) {
    check_case(OUTPUT_LAYER_CANONICAL, Case{1000, 50257, 128, 2.0, 0.1, OUTPUT_REDUCE_MEAN, 1.0f}, CANON_LOSS_TOL,
               CANON_GRAD_TOL);
}

TEST(canonical_output_one_row_one_word_and_sum) {
    check_case(OUTPUT_LAYER_CANONICAL, Case{1, 1, 64, 2.0, 0.0, OUTPUT_REDUCE_SUM, 0.5f}, CANON_LOSS_TOL,
               CANON_GRAD_TOL);
}

/* Chunked: blocks of 128 rows (g_logits_budget), so 1000 rows are 7 full blocks and a ragged one. */
TEST(chunked_output_1000_rows_50257_words_in_8_blocks_with_ignored) {
    check_case(OUTPUT_LAYER_CHUNKED, Case{1000, 50257, 128, 2.0, 0.1, OUTPUT_REDUCE_MEAN, 1.0f}, CANON_LOSS_TOL,
               CANON_GRAD_TOL);
}

TEST(chunked_output_sum_reduction_with_grad_scale_in_3_blocks) {
    check_case(OUTPUT_LAYER_CHUNKED, Case{300, 5000, 192, 3.0, 0.2, OUTPUT_REDUCE_SUM, 0.25f}, CANON_LOSS_TOL,
               CANON_GRAD_TOL);
}

TEST(chunked_output_blocks_of_384_rows_7_rows_and_one_word) {
    g_logits_budget = (size_t)384 * 1024 * 2; /* V = 1000 -> Vp = 1024: 384 rows per block */
    check_case(OUTPUT_LAYER_CHUNKED, Case{1001, 1000, 64, 2.0, 0.1, OUTPUT_REDUCE_MEAN, 1.0f}, CANON_LOSS_TOL,
               CANON_GRAD_TOL);
    check_case(OUTPUT_LAYER_CHUNKED, Case{7, 1000, 128, 2.0, 0.3, OUTPUT_REDUCE_MEAN, 1.0f}, CANON_LOSS_TOL,
               FEW_ROWS_CANON_GRAD_TOL);
    check_case(OUTPUT_LAYER_CHUNKED, Case{1, 1, 64, 2.0, 0.0, OUTPUT_REDUCE_SUM, 0.5f}, CANON_LOSS_TOL,
               CANON_GRAD_TOL);
    g_logits_budget = 1;
}

TEST(chunked_output_workspace_follows_the_budget) {
    CHECK(output_layer_chunk_rows(65536, 262144, 0) == 8192, "default blocks at V=262144: %lld rows",
          (long long)output_layer_chunk_rows(65536, 262144, 0));
    CHECK(output_layer_chunk_rows(32768, 50304, 0) == 32768, "V=50304, 32768 rows should be one block: %lld",
          (long long)output_layer_chunk_rows(32768, 50304, 0));
    CHECK(output_layer_chunk_rows(65536, 50304, 0) == 42624, "V=50304 default: %lld rows, expected 42624",
          (long long)output_layer_chunk_rows(65536, 50304, 0));
    CHECK(output_layer_chunk_rows(1000, 1000, 1) == 128, "a tiny budget gives %lld rows, expected 128",
          (long long)output_layer_chunk_rows(1000, 1000, 1));
    CHECK(output_layer_chunk_rows(100, 1000, 1) == 100, "fewer rows than a block: %lld",
          (long long)output_layer_chunk_rows(100, 1000, 1));
    size_t k = output_layer_workspace_bytes(OUTPUT_LAYER_CHUNKED, 65536, 262144, 768, 0);
    size_t c = output_layer_workspace_bytes(OUTPUT_LAYER_CANONICAL, 65536, 262144, 768, 0);
    size_t k1 = output_layer_workspace_bytes(OUTPUT_LAYER_CHUNKED, 65536, 262144, 768, (size_t)1 << 30);
    fprintf(stderr, "[chunked %.2f GB, 1 GiB budget %.2f GB, canonical %.1f GB] ", k / 1e9, k1 / 1e9, c / 1e9);
    CHECK(k >= OUTPUT_CHUNKED_DEFAULT_BYTES && k < OUTPUT_CHUNKED_DEFAULT_BYTES + ((size_t)64 << 20),
          "chunked workspace %zu bytes for a %zu-byte budget", k, (size_t)OUTPUT_CHUNKED_DEFAULT_BYTES);
    CHECK(k1 >= ((size_t)1 << 30) && k1 < ((size_t)1 << 30) + ((size_t)64 << 20), "1 GiB budget gave %zu bytes", k1);
}

/* ---- behaviour ------------------------------------------------------------------------------ */

/* Another layer against the canonical one on the GPU, same bf16 inputs, within tol_loss (relative) and
 * tol_grad (relative L2). */
/* last_targets > 0: rows 0.. aim at the last last_targets columns, so that the vocabulary's ragged
 * last window carries gradient (with random targets it rarely holds one, and a skipped window
 * would hardly move dW's relative error); those columns' dW rows are then compared alone too. */
static void check_against_canonical(OutputLayerKind kind, int64_t N, int64_t V, int d, double tol_loss, double tol_grad,
                                    int last_targets = 0) {
    uint64_t seed = fresh_seed(), s = seed;
    Bf16Tensor H, W;
    fill_normal(&H, (size_t)N * d, 1.0, &s);
    fill_normal(&W, (size_t)V * d, 2.0 / sqrt((double)d), &s);
    std::vector<int32_t> tg = random_targets(N, V, 0.15, &s);
    for (int k = 0; k < last_targets && k < N; k++) tg[(size_t)k] = (int32_t)(V - 1 - k % last_targets);
    std::vector<float> dW0((size_t)V * d, 0.0f);
    GpuOut f, c;
    REQUIRE(run_layer(kind, H, W, tg, N, V, d, OUTPUT_REDUCE_MEAN, 1.0f, &dW0, &f) == 0, "%s failed",
            output_layer_kind_name(kind));
    REQUIRE(run_layer(OUTPUT_LAYER_CANONICAL, H, W, tg, N, V, d, OUTPUT_REDUCE_MEAN, 1.0f, &dW0, &c) == 0,
            "canonical failed");
    std::vector<double> cdH(c.dH.begin(), c.dH.end()), cdW(c.dW.begin(), c.dW.end());
    double el = fabs(f.loss - c.loss) / fabs(c.loss);
    double edh = rel_l2(f.dH.data(), cdH.data(), cdH.size()), edw = rel_l2(f.dW.data(), cdW.data(), cdW.size());
    fprintf(stderr, "[loss %.1e dH %.1e dW %.1e] ", el, edh, edw);
    CHECK(el <= tol_loss, "loss %s %.9g canonical %.9g (seed %llu)", output_layer_kind_name(kind), f.loss, c.loss,
          (unsigned long long)seed);
    CHECK(edh <= tol_grad, "dH differ by %.3g (seed %llu)", edh, (unsigned long long)seed);
    CHECK(edw <= tol_grad, "dW differ by %.3g (seed %llu)", edw, (unsigned long long)seed);
    if (last_targets > 0) {
        const size_t first = (size_t)(V - last_targets) * d, n = (size_t)last_targets * d;
        double etail = rel_l2(f.dW.data() + first, cdW.data() + first, n);
        fprintf(stderr, "[dW of the last %d columns %.1e] ", last_targets, etail);
        CHECK(etail <= tol_grad, "dW of the last %d columns differ by %.3g (seed %llu)", last_targets, etail,
              (unsigned long long)seed);
    }
}

/* the fused layer keeps fp32 logits, the canonical one rounds them to bf16: bf16 noise apart */
TEST(fused_output_matches_canonical_with_ignored_targets) {
    check_against_canonical(OUTPUT_LAYER_FUSED, 777, 20011, 256, CANON_LOSS_TOL, CANON_GRAD_TOL);
}

/* The chunked layer is the canonical one in blocks (here 12 of 128 rows): the same logits, rows and
 * scale, so it agrees far below bf16 noise (the GEMMs may pick other algorithms for the block
 * shapes, and dW sums the blocks in another order). */
TEST(chunked_output_matches_canonical_closely) {
    check_against_canonical(OUTPUT_LAYER_CHUNKED, 1500, 20011, 256, 1e-5, 1e-3);
}

TEST(fused_output_matches_canonical_with_square_windows) {
    /* logits of >= 1.5 GiB at a narrow width: the default backward switches to 8192 x 8192 windows
     * (too large for the fp64 reference); 8448 rows = two chunks, V odd = a ragged last window */
    const int64_t N = 8448, V = 262147;
    const int d = 128;
    /* (dev/output_layer_sweep.sh reruns the tests with FUSEDGPT_OUTL_* structures instead) */
    const bool structure_set = getenv("FUSEDGPT_OUTL_DZ_MB") || getenv("FUSEDGPT_OUTL_CHUNK_ROWS") ||
                               getenv("FUSEDGPT_OUTL_DH_MB");
    REQUIRE(structure_set || output_layer_workspace_bytes(OUTPUT_LAYER_FUSED, N, V, d, 0) >= ((size_t)128 << 20),
            "this shape no longer selects the square windows: pick one that does");
    check_against_canonical(OUTPUT_LAYER_FUSED, N, V, d, CANON_LOSS_TOL, CANON_GRAD_TOL, (int)(V % 8192));
}

static const OutputLayerKind ALL_KINDS[] = {OUTPUT_LAYER_FUSED, OUTPUT_LAYER_CANONICAL, OUTPUT_LAYER_CHUNKED};

static void check_deterministic(OutputLayerKind kind) {
    uint64_t seed = fresh_seed(), s = seed;
    const int64_t N = 2000, V = 30000;
    const int d = 128;
    Bf16Tensor H, W;
    fill_normal(&H, (size_t)N * d, 1.0, &s);
    fill_normal(&W, (size_t)V * d, 2.0 / sqrt((double)d), &s);
    std::vector<int32_t> tg = random_targets(N, V, 0.1, &s);
    std::vector<float> dW0((size_t)V * d);
    for (auto &x : dW0) x = (float)normal(&s) * 1e-3f;
    GpuOut a, b;
    REQUIRE(run_layer(kind, H, W, tg, N, V, d, OUTPUT_REDUCE_MEAN, 1.0f, &dW0, &a) == 0, "first run failed");
    REQUIRE(run_layer(kind, H, W, tg, N, V, d, OUTPUT_REDUCE_MEAN, 1.0f, &dW0, &b) == 0, "second run failed");
    CHECK(memcmp(&a.loss, &b.loss, 4) == 0, "loss differs between runs: %.9g %.9g", a.loss, b.loss);
    CHECK(memcmp(a.lse.data(), b.lse.data(), N * 4) == 0, "lse differs between runs");
    CHECK(memcmp(a.dH_bits.data(), b.dH_bits.data(), a.dH_bits.size() * 2) == 0, "dH differs between runs");
    CHECK(memcmp(a.dW.data(), b.dW.data(), a.dW.size() * 4) == 0, "dW differs between runs");
}

TEST(fused_output_is_bitwise_deterministic) { check_deterministic(OUTPUT_LAYER_FUSED); }
TEST(fused_output_portable_kernel_is_bitwise_deterministic) {
    output_layer_select_tile_kernel(OUTPUT_TILE_KERNEL_MMA);
    check_deterministic(OUTPUT_LAYER_FUSED);
    output_layer_select_tile_kernel(OUTPUT_TILE_KERNEL_AUTO);
}
TEST(canonical_output_is_bitwise_deterministic) { check_deterministic(OUTPUT_LAYER_CANONICAL); }
TEST(chunked_output_is_bitwise_deterministic) { check_deterministic(OUTPUT_LAYER_CHUNKED); }

TEST(output_dW_is_added_to_not_overwritten) {
    for (OutputLayerKind kind : ALL_KINDS) {
        uint64_t seed = fresh_seed(), s = seed;
        const int64_t N = 300, V = 3000;
        const int d = 64;
        Bf16Tensor H, W;
        fill_normal(&H, (size_t)N * d, 1.0, &s);
        fill_normal(&W, (size_t)V * d, 2.0 / sqrt((double)d), &s);
        std::vector<int32_t> tg = random_targets(N, V, 0.1, &s);
        std::vector<float> zero((size_t)V * d, 0.0f), x((size_t)V * d);
        for (auto &v : x) v = (float)normal(&s) * 1e-3f;
        GpuOut a, b;
        REQUIRE(run_layer(kind, H, W, tg, N, V, d, OUTPUT_REDUCE_MEAN, 1.0f, &zero, &a) == 0, "run failed");
        REQUIRE(run_layer(kind, H, W, tg, N, V, d, OUTPUT_REDUCE_MEAN, 1.0f, &x, &b) == 0, "run failed");
        std::vector<double> expect(x.size());
        for (size_t i = 0; i < x.size(); i++) expect[i] = (double)a.dW[i] + (double)x[i];
        double e = rel_l2(b.dW.data(), expect.data(), expect.size());
        CHECK(e <= 1e-6, "%s: dW0 + grad differs from the accumulated dW by %.3g (seed %llu)",
              output_layer_kind_name(kind), e, (unsigned long long)seed);
    }
}

TEST(output_all_targets_ignored_gives_zero_loss_and_gradients) {
    for (OutputLayerKind kind : ALL_KINDS) {
        uint64_t s = fresh_seed();
        const int64_t N = 130, V = 700;
        const int d = 64;
        Bf16Tensor H, W;
        fill_normal(&H, (size_t)N * d, 1.0, &s);
        fill_normal(&W, (size_t)V * d, 0.3, &s);
        std::vector<int32_t> tg(N, -1);
        std::vector<float> dW0((size_t)V * d, 0.0f);
        GpuOut g;
        REQUIRE(run_layer(kind, H, W, tg, N, V, d, OUTPUT_REDUCE_MEAN, 1.0f, &dW0, &g) == 0, "run failed");
        CHECK(g.loss == 0.0f, "%s: loss %g, expected 0", output_layer_kind_name(kind), g.loss);
        int bad = 0;
        for (float v : g.dH) bad += v != 0.0f;
        for (float v : g.dW) bad += v != 0.0f;
        for (float v : g.row_loss) bad += v != 0.0f;
        CHECK(bad == 0, "%s: %d gradient or row-loss elements are not zero", output_layer_kind_name(kind), bad);
    }
}

TEST(output_forward_only_matches_forward_backward_and_writes_everything) {
    for (OutputLayerKind kind : ALL_KINDS) {
        uint64_t seed = fresh_seed(), s = seed;
        const int64_t N = 1031, V = 4099;
        const int d = 128;
        Bf16Tensor H, W;
        fill_normal(&H, (size_t)N * d, 1.0, &s);
        fill_normal(&W, (size_t)V * d, 2.0 / sqrt((double)d), &s);
        std::vector<int32_t> tg = random_targets(N, V, 0.1, &s);
        std::vector<float> dW0((size_t)V * d, 0.0f);
        GpuOut fb, f;
        REQUIRE(run_layer(kind, H, W, tg, N, V, d, OUTPUT_REDUCE_MEAN, 1.0f, &dW0, &fb) == 0, "run failed");
        REQUIRE(run_layer(kind, H, W, tg, N, V, d, OUTPUT_REDUCE_MEAN, 1.0f, NULL, &f) == 0, "run failed");
        CHECK(memcmp(&fb.loss, &f.loss, 4) == 0, "%s: forward loss %.9g != forward_backward loss %.9g",
              output_layer_kind_name(kind), f.loss, fb.loss);
        int nan_rows = 0, nan_dh = 0;
        for (int64_t i = 0; i < N; i++) nan_rows += isnan(f.row_loss[i]) || isnan(f.lse[i]);
        for (float v : fb.dH) nan_dh += isnan(v);
        CHECK(nan_rows == 0, "%s: %d rows of row_loss/lse left unwritten (poison seen)", output_layer_kind_name(kind),
              nan_rows);
        CHECK(nan_dh == 0, "%s: %d elements of dH left unwritten (poison seen)", output_layer_kind_name(kind), nan_dh);
    }
}

TEST(output_width_not_multiple_of_64_is_an_error) {
    fprintf(stderr, "(expect four error lines) ");
    CHECK(output_layer_create(OUTPUT_LAYER_FUSED, 16, 1000, 100, 0) == NULL, "d=100 accepted by the fused layer");
    CHECK(output_layer_create(OUTPUT_LAYER_CANONICAL, 16, 1000, 96, 0) == NULL, "d=96 accepted by the canonical layer");
    CHECK(output_layer_create(OUTPUT_LAYER_CHUNKED, 16, 1000, 32, 0) == NULL, "d=32 accepted by the chunked layer");
    CHECK(output_layer_workspace_bytes(OUTPUT_LAYER_FUSED, 16, 1000, 0, 0) == 0, "d=0 gave a workspace size");
}

TEST(output_more_rows_than_created_for_is_an_error) {
    OutputLayer *L = output_layer_create(OUTPUT_LAYER_FUSED, 16, 1000, 64, 0);
    REQUIRE(L != NULL, "create failed");
    OutputLayerArgs a = {};
    a.N = 17; /* checked before any pointer is used */
    a.H = (const kbf16 *)1, a.W = (const kbf16 *)1, a.targets = (const int32_t *)1, a.loss = (float *)1;
    fprintf(stderr, "(expect an error line) ");
    CHECK(output_layer_forward(L, &a, 0) == -1, "N=17 > max_N=16 accepted");
    output_layer_destroy(L);
}

TEST(fused_workspace_is_independent_of_vocabulary) {
    size_t a = output_layer_workspace_bytes(OUTPUT_LAYER_FUSED, 65536, 262144, 768, 0);
    size_t b = output_layer_workspace_bytes(OUTPUT_LAYER_FUSED, 65536, 4 * 262144, 768, 0);
    size_t c = output_layer_workspace_bytes(OUTPUT_LAYER_CANONICAL, 65536, 262144, 768, 0);
    fprintf(stderr, "[fused %.1f MB, canonical %.1f MB] ", a / 1e6, c / 1e6);
    CHECK(a == b, "fused workspace grows with V: %zu -> %zu bytes", a, b);
    CHECK(a < (size_t)200 << 20, "fused workspace %zu bytes at N=65536, d=768", a);
}
