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
    OutputLayerCpu a = {.H = H, .W = W, .targets = y, .N = N, .C = C, .V = V, .grad_scale = scale, .dH = r.dH,
                        .dW = r.dW, .losses = r.losses};
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

/* ---- loss options (kernels/output_kind.h) ---------------------------------------------------- */

typedef struct {
    double ce, objective; /* sums over the valid rows */
    double *lse, *dH, *dW; /* [N], [N·C], [V·C]: gradients of grad_scale·Σ objective */
} Oracle;

/* The options straight from their definitions, fp64: z' = cap·tanh(z/cap), lse over z', and the
 * objective (1 − ε)(lse − z'_y) + ε(lse − mean z') + c·lse², differentiated by hand. */
static Oracle oracle(const float *H, const float *W, const int *y, int N, int C, int V, OutputLossOptions o,
                     double scale) {
    Oracle r = {0, 0, calloc(N, 8), calloc((size_t)N * C, 8), calloc((size_t)V * C, 8)};
    double *z = malloc(V * sizeof(double)), *slope = malloc(V * sizeof(double));
    for (int n = 0; n < N; n++) {
        if (y[n] == -1) continue;
        double m = -INFINITY, zsum = 0;
        for (int v = 0; v < V; v++) {
            double s = 0;
            for (int i = 0; i < C; i++) s += (double)H[n * C + i] * W[(size_t)v * C + i];
            slope[v] = 1;
            if (o.logit_softcap > 0) {
                double t = tanh(s / o.logit_softcap);
                s = o.logit_softcap * t;
                slope[v] = 1 - t * t;
            }
            z[v] = s, zsum += s, m = fmax(m, s);
        }
        double se = 0;
        for (int v = 0; v < V; v++) se += exp(z[v] - m);
        const double lse = m + log(se), eps = o.label_smoothing, c = o.z_loss;
        r.lse[n] = lse;
        r.ce += lse - z[y[n]];
        r.objective += (1 - eps) * (lse - z[y[n]]) + eps * (lse - zsum / V) + c * lse * lse;
        for (int v = 0; v < V; v++) {
            const double g =
                scale * slope[v] * (exp(z[v] - lse) * (1 + 2 * c * lse) - (v == y[n] ? 1 - eps : 0) - eps / V);
            for (int i = 0; i < C; i++) {
                r.dH[(size_t)n * C + i] += g * W[(size_t)v * C + i];
                r.dW[(size_t)v * C + i] += g * H[n * C + i];
            }
        }
    }
    free(slope);
    free(z);
    return r;
}

static void free_oracle(Oracle *r) {
    free(r->lse);
    free(r->dH);
    free(r->dW);
}

static double rel_l2_64(const float *a, const double *b, size_t n) {
    double e = 0, s = 0;
    for (size_t i = 0; i < n; i++) e += (a[i] - b[i]) * (a[i] - b[i]), s += b[i] * b[i];
    return s > 0 ? sqrt(e / s) : sqrt(e);
}

/* Both CPU layers with options o against the oracle: the cross-entropy, objective, lse and both
 * gradients. W has Vp ≥ V rows, the padding filled with large values that must stay unread. */
static void check_options(int N, int C, int V, int Vp, double ignore_frac, float logit_scale, OutputLossOptions o,
                          uint64_t seed) {
    Rng rng;
    rng_seed(&rng, seed);
    float *H = malloc((size_t)N * C * 4), *W = malloc((size_t)Vp * C * 4);
    int *y = malloc((size_t)N * sizeof(int));
    fill_normal(H, (size_t)N * C, 1.0f, &rng);
    fill_normal(W, (size_t)V * C, logit_scale, &rng);
    for (size_t i = (size_t)V * C; i < (size_t)Vp * C; i++) W[i] = 50.0f;
    for (int n = 0; n < N; n++) y[n] = rng_uniform(&rng) < ignore_frac ? -1 : (int)rng_below(&rng, V);
    const int valid = output_layer_count_valid(y, N);
    const float scale = valid ? 1.0f / valid : 0.0f;
    Oracle ref = oracle(H, W, y, N, C, V, o, scale);
    for (int fused = 0; fused < 2; fused++) {
        float *dH = calloc((size_t)N * C, 4), *dW = calloc((size_t)V * C, 4), *losses = calloc(N, 4),
              *objs = calloc(N, 4), *lses = calloc(N, 4);
        OutputLayerCpu a = {H, W, y, N, C, V, scale, dH, dW, losses, o, objs, lses};
        float *ws = malloc((fused ? output_layer_fused_cpu_workspace(N) : output_layer_canonical_cpu_workspace(N, V)) *
                           sizeof(float));
        const double ce = fused ? output_layer_fused_cpu(&a, ws) : output_layer_canonical_cpu(&a, ws);
        double obj = 0, lse_err = 0;
        for (int n = 0; n < N; n++) {
            obj += objs[n];
            lse_err = fmax(lse_err, fabs(lses[n] - ref.lse[n]) / fmax(1.0, fabs(ref.lse[n])));
            if (y[n] == -1) CHECK(losses[n] == 0 && objs[n] == 0 && lses[n] == 0, "ignored row %d has values", n);
        }
        const char *name = fused ? "fused" : "canonical";
        CHECK(fabs(ce - ref.ce) <= 1e-5 * fabs(ref.ce) + 1e-6, "%s: ce %.9g vs fp64 %.9g", name, ce, ref.ce);
        CHECK(fabs(obj - ref.objective) <= 1e-5 * fabs(ref.objective) + 1e-6, "%s: objective %.9g vs fp64 %.9g", name,
              obj, ref.objective);
        CHECK(lse_err <= 1e-6, "%s: lse off by %.3g relative", name, lse_err);
        const double e_dh = rel_l2_64(dH, ref.dH, (size_t)N * C), e_dw = rel_l2_64(dW, ref.dW, (size_t)V * C);
        CHECK(e_dh <= 1e-5, "%s: dH rel err %.3g against fp64", name, e_dh);
        CHECK(e_dw <= 1e-5, "%s: dW rel err %.3g against fp64", name, e_dw);
        free(ws);
        free(lses), free(objs), free(losses), free(dW), free(dH);
    }
    if (valid && V > 1)
        CHECK(o.logit_softcap > 0 || fabs(ref.objective - ref.ce) > 1e-3 * fabs(ref.ce),
              "the objective equals the cross-entropy: the test would not see the options ignored");
    free_oracle(&ref);
    free(y), free(W), free(H);
}

TEST(output_z_loss_adds_c_lse_squared_on_both_cpu_layers) {
    check_options(17, 16, 300, 384, 0.2, 0.5f, (OutputLossOptions){.z_loss = 1e-2f}, 11);
}

TEST(output_logit_softcap_caps_before_the_softmax_on_both_cpu_layers) {
    /* logits of std ~50 against a cap of 30: most of them deep in tanh's flat part */
    check_options(17, 16, 300, 384, 0.2, 12.0f, (OutputLossOptions){.logit_softcap = 30.0f}, 12);
}

TEST(output_label_smoothing_is_pytorchs_over_the_real_vocabulary_not_the_padding) {
    check_options(17, 16, 300, 384, 0.2, 0.5f, (OutputLossOptions){.label_smoothing = 0.1f}, 13);
}

TEST(output_all_loss_options_together_at_extreme_logits) {
    check_options(9, 64, 257, 384, 0.1, 40.0f,
                  (OutputLossOptions){.z_loss = 1e-4f, .logit_softcap = 50.0f, .label_smoothing = 0.3f}, 14);
}

TEST(output_label_smoothing_on_a_vocabulary_of_one_is_the_plain_loss) {
    check_options(5, 8, 1, 128, 0.0, 1.0f, (OutputLossOptions){.label_smoothing = 0.5f, .z_loss = 0.5f}, 15);
}

/* The objective (fp64 oracle) at H and W moved by ±h in one coordinate, against the fused CPU
 * layer's fp32 gradient there: the hand-derived gradient of every option, checked independently. */
TEST(output_loss_options_gradients_match_finite_differences_of_the_objective) {
    const int N = 5, C = 8, V = 37;
    const OutputLossOptions o = {.z_loss = 0.05f, .logit_softcap = 4.0f, .label_smoothing = 0.2f};
    Rng rng;
    rng_seed(&rng, 21);
    float H[5 * 8], W[37 * 8], dH[5 * 8] = {0}, dW[37 * 8] = {0}, losses[5], ws[10];
    int y[5] = {3, -1, 36, 0, 17};
    fill_normal(H, N * C, 1.0f, &rng);
    fill_normal(W, V * C, 1.0f, &rng);
    OutputLayerCpu a = {H, W, y, N, C, V, 1.0f, dH, dW, losses, o, NULL, NULL};
    output_layer_fused_cpu(&a, ws);
    const float h = 1e-2f;
    double worst = 0;
    for (int k = 0; k < 24; k++) {
        const int in_h = k % 2 == 0;
        float *x = in_h ? &H[rng_below(&rng, N * C)] : &W[rng_below(&rng, V * C)];
        const float g = in_h ? dH[x - H] : dW[x - W], x0 = *x;
        *x = x0 + h;
        Oracle up = oracle(H, W, y, N, C, V, o, 1.0);
        *x = x0 - h;
        Oracle down = oracle(H, W, y, N, C, V, o, 1.0);
        *x = x0;
        const double fd = (up.objective - down.objective) / (2.0 * h);
        worst = fmax(worst, fabs(fd - g) / fmax(1e-2, fabs(fd)));
        free_oracle(&up), free_oracle(&down);
    }
    CHECK(worst <= 2e-3, "finite differences disagree with the gradient by %.3g relative", worst);
    CHECK(max_abs(dW, V * C) > 0 && max_abs(dH, N * C) > 0, "no gradient at all");
}
