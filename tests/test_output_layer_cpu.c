/* CPU output layers: fused == canonical to rounding, both == an fp64 direct computation, ignored
 * targets drop out, vocabularies that are not multiples of the tile or of 128. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/cpu/output_layer_cpu.h"
#include "tests/test.h"
#include "tests/test_util.h"

typedef struct {
    float loss_sum;
    float *dH, *dW, *losses;
} LayerResult;

static LayerResult run_layer(int fused, const float *H, const float *W, const int *y, int N, int C, int V,
                             float scale) {
    LayerResult r = {0, calloc((size_t)N * C, 4), calloc((size_t)V * C, 4), calloc((size_t)N, 4)};
    OutputLayerCpu a = {H, W, y, N, C, V, scale, r.dH, r.dW, r.losses};
    float *ws = malloc((fused ? output_layer_fused_cpu_workspace(N) : output_layer_canonical_cpu_workspace(N, V)) *
                       sizeof(float));
    r.loss_sum = (float)(fused ? output_layer_fused_cpu(&a, ws) : output_layer_canonical_cpu(&a, ws));
    free(ws);
    return r;
}

static void free_result(LayerResult *r) {
    free(r->dH);
    free(r->dW);
    free(r->losses);
}

/* loss_n = lse(W h_n) − w_y·h_n in fp64, straight from the definition. */
static double reference_loss_sum(const float *H, const float *W, const int *y, int N, int C, int V) {
    double total = 0.0;
    for (int n = 0; n < N; n++) {
        if (y[n] == -1) continue;
        double m = -INFINITY, *z = malloc(V * sizeof(double));
        for (int v = 0; v < V; v++) {
            double s = 0;
            for (int i = 0; i < C; i++) s += (double)H[n * C + i] * W[(size_t)v * C + i];
            z[v] = s;
            m = fmax(m, s);
        }
        double se = 0;
        for (int v = 0; v < V; v++) se += exp(z[v] - m);
        total += m + log(se) - z[y[n]];
        free(z);
    }
    return total;
}

static void check_fused_vs_canonical(int N, int C, int V, double ignore_frac, float logit_scale, uint64_t seed) {
    Rng rng;
    rng_seed(&rng, seed);
    float *H = malloc((size_t)N * C * 4), *W = malloc((size_t)V * C * 4);
    int *y = malloc((size_t)N * sizeof(int));
    fill_normal(H, (size_t)N * C, 1.0f, &rng);
    fill_normal(W, (size_t)V * C, logit_scale, &rng);
    for (int n = 0; n < N; n++) y[n] = rng_uniform(&rng) < ignore_frac ? -1 : (int)rng_below(&rng, V);
    int valid = output_layer_count_valid(y, N);
    float scale = valid ? 1.0f / valid : 0.0f;
    LayerResult c = run_layer(0, H, W, y, N, C, V, scale), f = run_layer(1, H, W, y, N, C, V, scale);
    double ref = reference_loss_sum(H, W, y, N, C, V);
    CHECK(fabs(f.loss_sum - c.loss_sum) <= 1e-6 * fabs(c.loss_sum) + 1e-6, "N=%d V=%d loss fused %.9g canonical %.9g",
          N, V, f.loss_sum, c.loss_sum);
    CHECK(fabs(c.loss_sum - ref) <= 1e-5 * fabs(ref) + 1e-6, "N=%d V=%d loss canonical %.9g vs fp64 %.9g", N, V,
          c.loss_sum, ref);
    double e_dh = rel_l2(f.dH, c.dH, (size_t)N * C), e_dw = rel_l2(f.dW, c.dW, (size_t)V * C);
    CHECK(e_dh <= 1e-6, "N=%d V=%d dH fused vs canonical rel err %.3g", N, V, e_dh);
    CHECK(e_dw <= 1e-6, "N=%d V=%d dW fused vs canonical rel err %.3g", N, V, e_dw);
    for (int n = 0; n < N; n++) {
        if (y[n] != -1) continue;
        CHECK(f.losses[n] == 0.0f && c.losses[n] == 0.0f, "ignored row %d has a loss", n);
        for (int i = 0; i < C; i++)
            if (f.dH[(size_t)n * C + i] != 0.0f || c.dH[(size_t)n * C + i] != 0.0f) {
                CHECK(0, "ignored row %d received a gradient", n);
                break;
            }
    }
    if (valid && V > 1) CHECK(max_abs(c.dW, (size_t)V * C) > 0.0, "dW is all zero: the test would not notice a missing dW");
    free_result(&c);
    free_result(&f);
    free(H);
    free(W);
    free(y);
}

TEST(output_fused_matches_canonical_small_vocab_not_multiple_of_128) {
    check_fused_vs_canonical(13, 16, 300, 0.0, 0.5f, 1);
}

TEST(output_fused_matches_canonical_with_ignored_targets) {
    check_fused_vs_canonical(33, 32, 1000, 0.3, 0.3f, 2);
}

TEST(output_fused_matches_canonical_vocab_of_one) {
    check_fused_vs_canonical(5, 8, 1, 0.2, 1.0f, 3);
}

TEST(output_fused_matches_canonical_extreme_logits) {
    /* logits of std ~320, up to ~1000: exp overflows even in fp64 (above ~710), so only a running
     * max that rescales the sum keeps the loss finite */
    check_fused_vs_canonical(9, 64, 257, 0.0, 40.0f, 4);
}

TEST(output_all_targets_ignored_gives_zero_loss_and_gradients) {
    check_fused_vs_canonical(4, 8, 50, 1.0, 0.5f, 5);
}

TEST(output_gradient_matches_softmax_minus_onehot) {
    /* One row, identity-like W: dH must be Σ_v (p_v − [v=y]) w_v. Computed here in fp64. */
    int C = 4, V = 6, y = 2;
    float H[4] = {0.3f, -1.2f, 0.7f, 2.0f}, W[24];
    Rng rng;
    rng_seed(&rng, 9);
    fill_normal(W, 24, 1.0f, &rng);
    LayerResult f = run_layer(1, H, W, &y, 1, C, V, 1.0f);
    double z[6], m = -INFINITY, s = 0;
    for (int v = 0; v < V; v++) {
        z[v] = 0;
        for (int i = 0; i < C; i++) z[v] += (double)H[i] * W[v * C + i];
        m = fmax(m, z[v]);
    }
    for (int v = 0; v < V; v++) s += exp(z[v] - m);
    for (int i = 0; i < C; i++) {
        double g = 0;
        for (int v = 0; v < V; v++) g += (exp(z[v] - m) / s - (v == y)) * W[v * C + i];
        CHECK(fabs(f.dH[i] - g) < 1e-5, "dH[%d] = %g, expected %g", i, f.dH[i], g);
    }
    free_result(&f);
}
