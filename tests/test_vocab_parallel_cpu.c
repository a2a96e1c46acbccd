/* The vocabulary-parallel output layer over simulated ranks against the unsplit CPU layer: loss,
 * dH and each slice's dW equal to fp32 rounding, lse equal to an fp64 reference, at sizes that
 * divide nothing (V = 1000 padded to 1024, rows per rank 5, 7, 0, width 24) with logits up to
 * about ±100 and peaked rows.
 *
 * Bounds, u = 2⁻²⁴. The split layer sums in another order: each slice sums its exponentials and
 * its part of dH, then the ranks add those partial results. Both orders are recursive sums, whose
 * error is at most (terms)·u times the sum of the terms' magnitudes, so:
 *   lse: S differs by a few roundings (the slice's sum to fp32, its rescale, R − 1 additions):
 *        (R + 3)·u relative, i.e. absolute in log S; lse = M + log S then rounds at |lse| (M, the
 *        exact max, is the same): |Δlse| ≤ (R + 3)·u + 2·ulp(log S) + 2·ulp(lse), within
 *        4·u·(|lse| + 8). The loss per row is lse minus the same target logit: the same plus the
 *        subtraction's rounding.
 *   dH:  Σ over V words in two orders: (V + R)·u · T, with T = scale·Σ_v (p_v + [v = y])·|w_v|
 *        the magnitude of the terms before they cancel, plus every p_v moved by the lse difference
 *        (relative |Δlse|): |Δlse|·T.
 *   dW:  the same order over the N rows, the g values moved by |Δlse|: (N + 2)·u·T + |Δlse|·T with
 *        T = scale·Σ_n (p_nv + [y_n = v])·|h_n|, plus |dW₀| when the sum starts from a tied
 *        embedding's gradient dW₀.
 *   lse against fp64: plus the fp32 logits' own error, at most C·u·Σ_i |h_i w_i| per logit. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "model/cpu/llama_layers_cpu.h"
#include "model/cpu/output_layer_cpu.h"
#include "model/cpu/vocab_parallel_cpu.h"
#include "tests/test.h"
#include "tests/test_util.h"

#define U 0x1p-24
#define V_REAL 1000
#define V_PAD 1024
#define WIDTH 24

/* Every rank's rows in rank order, and the whole W (padding rows NaN: reading one poisons all). */
typedef struct {
    int R, N, rows[VOCAB_PARALLEL_MAX_RANKS];
    float *H, *W;
    int *y;
} Problem;

/* Rows per rank cycle through 5, 7, 0. Logits N(0, 22²) reach about ±100; every third row is
 * peaked (one logit of 100, the next tens below), its target that word or not; every fourth row
 * is ignored. */
static Problem make_problem(int R, uint64_t seed) {
    static const int pattern[3] = {5, 7, 0};
    Problem p = {.R = R};
    for (int r = 0; r < R; r++) p.N += p.rows[r] = pattern[r % 3];
    Rng rng;
    rng_seed(&rng, seed);
    p.H = malloc((size_t)p.N * WIDTH * sizeof(float));
    p.W = malloc((size_t)V_PAD * WIDTH * sizeof(float));
    p.y = malloc((size_t)p.N * sizeof(int));
    fill_normal(p.H, (size_t)p.N * WIDTH, 1.0f, &rng);
    fill_normal(p.W, (size_t)V_REAL * WIDTH, 4.5f, &rng);
    for (size_t i = (size_t)V_REAL * WIDTH; i < (size_t)V_PAD * WIDTH; i++) p.W[i] = NAN;
    for (int n = 0; n < p.N; n++) {
        p.y[n] = (int)rng_below(&rng, V_REAL);
        if (n % 3 == 0) {
            const float *w = p.W + (size_t)p.y[n] * WIDTH;
            double norm2 = 0;
            for (int i = 0; i < WIDTH; i++) norm2 += (double)w[i] * w[i];
            for (int i = 0; i < WIDTH; i++) p.H[(size_t)n * WIDTH + i] = (float)(100.0 * w[i] / norm2);
            if (n % 2) p.y[n] = (int)rng_below(&rng, V_REAL);
        }
        if (n % 4 == 3) p.y[n] = -1;
    }
    return p;
}

static void free_problem(Problem *p) {
    free(p->H);
    free(p->W);
    free(p->y);
}

typedef struct {
    double loss;
    float *losses, *lse, *dH, *dW; /* [N], [N], [N x C], [Vp x C] */
} Result;

static void free_result(Result *r) {
    free(r->losses);
    free(r->lse);
    free(r->dH);
    free(r->dW);
}

/* dW starts as dW0 ([Vp x C]) when given, else zeros. */
static Result run_unsplit(const Problem *p, int mean, float grad_scale, const float *dW0) {
    const size_t NC = (size_t)p->N * WIDTH, VC = (size_t)V_PAD * WIDTH;
    Result r = {0, calloc(p->N + 1, 4), NULL, calloc(NC + 1, 4), calloc(VC, 4)};
    if (dW0) memcpy(r.dW, dW0, VC * 4);
    int valid = output_layer_count_valid(p->y, p->N);
    float scale = mean ? (valid ? grad_scale / valid : 0.0f) : grad_scale;
    OutputLayerCpu a = {.H = p->H, .W = p->W, .targets = p->y, .N = p->N, .C = WIDTH, .V = V_REAL,
                        .grad_scale = scale, .dH = r.dH, .dW = r.dW, .losses = r.losses};
    float *ws = malloc((output_layer_fused_cpu_workspace(p->N) + 1) * sizeof(float));
    double sum = output_layer_fused_cpu(&a, ws);
    r.loss = mean ? (valid ? sum / valid : 0.0) : sum;
    free(ws);
    return r;
}

/* The split layer, each rank's outputs laid back into whole arrays; also checks what must hold
 * between the ranks themselves (bitwise the same loss, row losses and lse everywhere). */
static Result run_split(const Problem *p, int mean, float grad_scale, const float *dW0, int with_grads) {
    const int R = p->R;
    const size_t VC = (size_t)V_PAD * WIDTH;
    VocabParallelCpu cfg = {R, V_REAL, V_PAD, WIDTH, mean, grad_scale};
    VocabParallelRank ranks[VOCAB_PARALLEL_MAX_RANKS];
    Result r = {0, calloc(p->N + 1, 4), calloc(p->N + 1, 4), calloc((size_t)p->N * WIDTH + 1, 4), calloc(VC, 4)};
    if (dW0) memcpy(r.dW, dW0, VC * 4);
    char err[ERR_LEN] = "";
    int row0 = 0;
    for (int k = 0; k < R; k++) {
        VocabSlice s = vocab_slice(V_REAL, V_PAD, R, k);
        /* Each rank's own copies, so that no rank can reach another's memory but through the
         * collectives. */
        ranks[k] = (VocabParallelRank){.N = p->rows[k]};
        float *H = malloc(((size_t)p->rows[k] * WIDTH + 1) * 4), *W = malloc((size_t)s.rows * WIDTH * 4);
        int *y = malloc((p->rows[k] + 1) * sizeof(int));
        memcpy(H, p->H + (size_t)row0 * WIDTH, (size_t)p->rows[k] * WIDTH * 4);
        memcpy(y, p->y + row0, p->rows[k] * sizeof(int));
        memcpy(W, p->W + (size_t)s.begin * WIDTH, (size_t)s.rows * WIDTH * 4);
        ranks[k].H = H, ranks[k].targets = y, ranks[k].W = W;
        if (with_grads) {
            ranks[k].dH = calloc((size_t)p->rows[k] * WIDTH + 1, 4);
            ranks[k].dW = malloc((size_t)s.rows * WIDTH * 4);
            memcpy(ranks[k].dW, r.dW + (size_t)s.begin * WIDTH, (size_t)s.rows * WIDTH * 4);
        }
        CHECK(vocab_parallel_work_alloc(&ranks[k].work, p->N, p->rows[k], WIDTH, err) == 0, "%s", err);
        row0 += p->rows[k];
    }
    CHECK(vocab_parallel_cpu(&cfg, ranks, err) == 0, "R=%d refused: %s", R, err);
    r.loss = ranks[0].loss;
    memcpy(r.losses, ranks[0].work.losses, p->N * 4);
    memcpy(r.lse, ranks[0].work.lse, p->N * 4);
    row0 = 0;
    for (int k = 0; k < R; k++) {
        VocabSlice s = vocab_slice(V_REAL, V_PAD, R, k);
        CHECK(memcmp(&ranks[k].loss, &r.loss, sizeof r.loss) == 0, "R=%d: rank %d's loss %.17g, rank 0's %.17g", R, k,
              ranks[k].loss, r.loss);
        CHECK(memcmp(ranks[k].work.losses, r.losses, p->N * 4) == 0 && memcmp(ranks[k].work.lse, r.lse, p->N * 4) == 0,
              "R=%d: rank %d's row losses or lse differ from rank 0's", R, k);
        if (with_grads) {
            memcpy(r.dH + (size_t)row0 * WIDTH, ranks[k].dH, (size_t)p->rows[k] * WIDTH * 4);
            memcpy(r.dW + (size_t)s.begin * WIDTH, ranks[k].dW, (size_t)s.rows * WIDTH * 4);
        }
        row0 += p->rows[k];
        vocab_parallel_work_free(&ranks[k].work);
        free(ranks[k].dW);
        free(ranks[k].dH);
        free((void *)ranks[k].W);
        free((void *)ranks[k].targets);
        free((void *)ranks[k].H);
    }
    return r;
}

static double lse_tol(double lse) {
    return 4 * U * (fabs(lse) + 8);
}

/* Row n's logits and softmax in fp64, and the fp32 logits' error bound. */
static double row_softmax(const Problem *p, int n, double *z, double *prob) {
    double m = -INFINITY, s = 0, logit_err = 0;
    for (int v = 0; v < V_REAL; v++) {
        double dot = 0, mag = 0;
        for (int i = 0; i < WIDTH; i++) {
            double t = (double)p->H[(size_t)n * WIDTH + i] * p->W[(size_t)v * WIDTH + i];
            dot += t;
            mag += fabs(t);
        }
        z[v] = dot;
        m = fmax(m, dot);
        logit_err = fmax(logit_err, WIDTH * U * mag);
    }
    for (int v = 0; v < V_REAL; v++) s += exp(z[v] - m);
    for (int v = 0; v < V_REAL; v++) prob[v] = exp(z[v] - m) / s;
    z[V_REAL] = m + log(s); /* lse after the logits */
    return logit_err;
}

/* Everything the split layer must match; the unsplit result u, the split one s, both started from
 * dW0 (NULL: zeros), which joins the magnitudes that dW's sums round against. */
static void check_split_matches_unsplit(const Problem *p, const Result *u, const Result *s, int mean,
                                        float grad_scale, const float *dW0, const char *what) {
    const int N = p->N, R = p->R;
    double *z = malloc((V_REAL + 1) * sizeof(double)), *prob = malloc((size_t)N * V_REAL * sizeof(double));
    double max_dlse = 0, loss_tol = 0;
    int valid = output_layer_count_valid(p->y, N);
    for (int n = 0; n < N; n++) {
        double logit_err = row_softmax(p, n, z, prob + (size_t)n * V_REAL);
        if (p->y[n] == -1) {
            CHECK(s->losses[n] == 0.0f && s->lse[n] == 0.0f, "%s R=%d: ignored row %d has loss %g lse %g", what, R, n,
                  s->losses[n], s->lse[n]);
            continue;
        }
        double lse64 = z[V_REAL], tol = lse_tol(lse64);
        max_dlse = fmax(max_dlse, tol);
        loss_tol += tol + U * fabs(u->losses[n]);
        CHECK(fabs(s->lse[n] - lse64) <= tol + logit_err, "%s R=%d row %d: lse %.9g, fp64 %.12g (bound %.3g)", what, R,
              n, s->lse[n], lse64, tol + logit_err);
        CHECK(fabs(s->losses[n] - u->losses[n]) <= tol + U * fabs(u->losses[n]),
              "%s R=%d row %d: loss %.9g, unsplit %.9g", what, R, n, s->losses[n], u->losses[n]);
    }
    if (mean && valid) loss_tol /= valid;
    CHECK(fabs(s->loss - u->loss) <= loss_tol, "%s R=%d: loss %.12g, unsplit %.12g (bound %.3g)", what, R, s->loss,
          u->loss, loss_tol);

    const double scale = mean ? (valid ? grad_scale / (double)valid : 0.0) : grad_scale;
    int bad_dh = 0, bad_dw = 0;
    for (int n = 0; n < N && !bad_dh; n++)
        for (int i = 0; i < WIDTH; i++) {
            double T = 0;
            if (p->y[n] != -1)
                for (int v = 0; v < V_REAL; v++)
                    T += (prob[(size_t)n * V_REAL + v] + (v == p->y[n])) * fabs(p->W[(size_t)v * WIDTH + i]);
            T *= scale;
            double got = s->dH[(size_t)n * WIDTH + i], want = u->dH[(size_t)n * WIDTH + i];
            if (p->y[n] == -1 ? got != 0.0 : fabs(got - want) > ((V_REAL + R) * U + max_dlse) * T) {
                CHECK(0, "%s R=%d: dH[%d][%d] = %.9g, unsplit %.9g (bound %.3g)", what, R, n, i, got, want,
                      ((V_REAL + R) * U + max_dlse) * T);
                bad_dh = 1;
                break;
            }
        }
    for (int v = 0; v < V_PAD && !bad_dw; v++)
        for (int i = 0; i < WIDTH; i++) {
            double got = s->dW[(size_t)v * WIDTH + i], want = u->dW[(size_t)v * WIDTH + i], T = 0;
            if (v >= V_REAL) {
                /* padding: nothing added to what was there */
                if (memcmp(&s->dW[(size_t)v * WIDTH + i], &u->dW[(size_t)v * WIDTH + i], 4) != 0) {
                    CHECK(0, "%s R=%d: padding row %d of dW changed to %g", what, R, v, got);
                    bad_dw = 1;
                    break;
                }
                continue;
            }
            for (int n = 0; n < N; n++)
                if (p->y[n] != -1)
                    T += (prob[(size_t)n * V_REAL + v] + (v == p->y[n])) * fabs(p->H[(size_t)n * WIDTH + i]);
            T = T * scale + (dW0 ? fabs(dW0[(size_t)v * WIDTH + i]) : 0.0);
            if (fabs(got - want) > ((N + 2) * U + max_dlse) * T) {
                CHECK(0, "%s R=%d: dW[%d][%d] = %.9g, unsplit %.9g (bound %.3g)", what, R, v, i, got, want,
                      ((N + 2) * U + max_dlse) * T);
                bad_dw = 1;
                break;
            }
        }
    free(prob);
    free(z);
}

static void check_ranks(int mean, float grad_scale, int tied, uint64_t seed) {
    for (int R = 1; R <= 4; R++) {
        Problem p = make_problem(R, seed + R);
        float *dW0 = NULL;
        if (tied) {
            /* what the encoder's backward put into the token embedding's gradient; padding too */
            Rng rng;
            rng_seed(&rng, seed);
            dW0 = malloc((size_t)V_PAD * WIDTH * 4);
            fill_normal(dW0, (size_t)V_PAD * WIDTH, 0.01f, &rng);
        }
        Result u = run_unsplit(&p, mean, grad_scale, dW0), s = run_split(&p, mean, grad_scale, dW0, 1);
        check_split_matches_unsplit(&p, &u, &s, mean, grad_scale, dW0, mean ? "mean" : "sum");
        CHECK(max_abs(u.dW, (size_t)V_REAL * WIDTH) > 0.0 && max_abs(u.dH, (size_t)p.N * WIDTH) > 0.0,
              "R=%d: no gradient at all: the test would not notice a missing one", R);
        free_result(&u);
        free_result(&s);
        free(dW0);
        free_problem(&p);
    }
}

TEST(vocab_parallel_mean_matches_the_unsplit_layer_on_one_to_four_ranks_with_uneven_rows) {
    check_ranks(1, 1.0f, 0, 100);
}

TEST(vocab_parallel_sum_matches_the_unsplit_layer_with_a_gradient_scale) {
    check_ranks(0, 0.25f, 0, 200);
}

TEST(vocab_parallel_tied_head_adds_its_slice_into_the_existing_embedding_gradient) {
    check_ranks(1, 1.0f, 1, 300);
}

TEST(vocab_parallel_loss_alone_equals_the_loss_with_gradients) {
    Problem p = make_problem(3, 400);
    Result with = run_split(&p, 1, 1.0f, NULL, 1), alone = run_split(&p, 1, 1.0f, NULL, 0);
    CHECK(with.loss == alone.loss, "loss %.17g alone, %.17g with gradients", alone.loss, with.loss);
    CHECK(max_abs(alone.dW, (size_t)V_PAD * WIDTH) == 0.0, "the loss alone wrote dW");
    free_result(&with);
    free_result(&alone);
    free_problem(&p);
}

TEST(vocab_parallel_ignored_rows_contribute_nothing) {
    /* Ignored rows' hidden states scaled by 1000 (logits near 10⁵, whose exponentials overflow even
     * in fp64): loss, the other rows' dH and dW stay bitwise the same. */
    Problem p = make_problem(4, 700);
    Result a = run_split(&p, 1, 1.0f, NULL, 1);
    int ignored = 0;
    for (int n = 0; n < p.N; n++)
        if (p.y[n] == -1) {
            ignored++;
            for (int i = 0; i < WIDTH; i++) p.H[(size_t)n * WIDTH + i] *= 1000.0f;
        }
    Result b = run_split(&p, 1, 1.0f, NULL, 1);
    CHECK(ignored > 0, "no ignored row: the test tests nothing");
    CHECK(a.loss == b.loss, "loss %.17g, %.17g with the ignored rows changed", a.loss, b.loss);
    CHECK(memcmp(a.dH, b.dH, (size_t)p.N * WIDTH * 4) == 0, "dH changed with the ignored rows");
    CHECK(memcmp(a.dW, b.dW, (size_t)V_PAD * WIDTH * 4) == 0, "dW changed with the ignored rows");
    free_result(&a);
    free_result(&b);
    free_problem(&p);
}

TEST(vocab_parallel_all_rows_ignored_gives_zero_loss_and_gradients) {
    Problem p = make_problem(3, 500);
    for (int n = 0; n < p.N; n++) p.y[n] = -1;
    Result s = run_split(&p, 1, 1.0f, NULL, 1);
    CHECK(s.loss == 0.0, "loss %g", s.loss);
    CHECK(max_abs(s.dH, (size_t)p.N * WIDTH) == 0.0 && max_abs(s.dW, (size_t)V_PAD * WIDTH) == 0.0,
          "gradients where no row counts");
    free_result(&s);
    free_problem(&p);
}

TEST(vocab_parallel_rescales_each_slice_sum_to_the_max_of_a_row_whose_max_lies_in_another_slice) {
    /* Two ranks, slices [0, 512) and [512, 1024). Row 0: every logit of rank 0's slice about 0 and
     * one logit of 60 in rank 1's slice. Rank 0's sum relative to its own max is about 512; unless
     * it is rescaled by exp(0 − 60) before the two are added, lse comes out near 60 + log 513
     * instead of 60 + 512·e⁻⁶⁰. */
    Problem p = {.R = 2, .N = 2, .rows = {1, 1}};
    p.H = calloc(2 * WIDTH, 4);
    p.W = calloc((size_t)V_PAD * WIDTH, 4);
    p.y = malloc(2 * sizeof(int));
    p.H[0] = 1.0f;             /* row 0 reads column 0 of W */
    p.H[WIDTH + 1] = 1.0f;     /* row 1 reads column 1: its max lies in rank 0's slice */
    p.W[(size_t)700 * WIDTH] = 60.0f;
    p.W[(size_t)3 * WIDTH + 1] = 60.0f;
    for (int v = V_REAL; v < V_PAD; v++) p.W[(size_t)v * WIDTH] = NAN;
    p.y[0] = 5, p.y[1] = 900;
    Result u = run_unsplit(&p, 0, 1.0f, NULL), s = run_split(&p, 0, 1.0f, NULL, 1);
    CHECK(fabs(s.lse[0] - 60.0) < 1e-5 && fabs(s.lse[1] - 60.0) < 1e-5, "lse %.9g and %.9g, both should be 60 + ~1e-23",
          s.lse[0], s.lse[1]);
    check_split_matches_unsplit(&p, &u, &s, 0, 1.0f, NULL, "max in another slice");
    free_result(&u);
    free_result(&s);
    free_problem(&p);
}

TEST(vocab_slices_split_the_padded_vocabulary_as_evenly_as_possible_and_cover_it) {
    for (int R = 1; R <= 8; R++) {
        int next = 0, real = 0;
        for (int r = 0; r < R; r++) {
            VocabSlice s = vocab_slice(V_REAL, V_PAD, R, r);
            CHECK(s.begin == next, "R=%d: slice %d begins at %d, not %d", R, r, s.begin, next);
            CHECK(s.rows == V_PAD / R || s.rows == V_PAD / R + 1, "R=%d: slice %d has %d rows", R, r, s.rows);
            CHECK(s.real == (s.begin + s.rows <= V_REAL ? s.rows : s.begin < V_REAL ? V_REAL - s.begin : 0),
                  "R=%d: slice %d has %d real rows", R, r, s.real);
            next += s.rows;
            real += s.real;
        }
        CHECK(next == V_PAD && real == V_REAL, "R=%d: slices cover %d rows, %d real", R, next, real);
        if (V_PAD % R == 0) CHECK(vocab_slice(V_REAL, V_PAD, R, R - 1).rows == V_PAD / R, "R=%d: uneven", R);
    }
}

/* The split layer on problem p with one rank's target replaced, expecting a refusal naming msg. */
static void expect_refused(VocabParallelCpu cfg, int target, const char *msg) {
    Problem p = make_problem(2, 600);
    VocabParallelRank ranks[2];
    char err[ERR_LEN] = "";
    int row0 = 0;
    p.y[6] = target;
    for (int k = 0; k < 2; k++) {
        VocabSlice s = vocab_slice(V_REAL, V_PAD, 2, k);
        ranks[k] = (VocabParallelRank){.H = p.H + (size_t)row0 * WIDTH, .targets = p.y + row0, .N = p.rows[k],
                                       .W = p.W + (size_t)s.begin * WIDTH};
        CHECK(vocab_parallel_work_alloc(&ranks[k].work, p.N, p.rows[k], WIDTH, err) == 0, "%s", err);
        row0 += p.rows[k];
    }
    CHECK(vocab_parallel_cpu(&cfg, ranks, err) == -1, "accepted: %s", msg);
    CHECK(strstr(err, msg) && !strchr(err, '\n'), "message '%s' lacks '%s' or is not one line", err, msg);
    for (int k = 0; k < 2; k++) vocab_parallel_work_free(&ranks[k].work);
    free_problem(&p);
}

TEST(vocab_parallel_refuses_a_target_outside_the_vocabulary_and_impossible_shapes) {
    VocabParallelCpu good = {2, V_REAL, V_PAD, WIDTH, 1, 1.0f}, cfg;
    expect_refused(good, V_REAL, "target 1000 of row 1 on rank 1 is outside the vocabulary of 1000");
    expect_refused(good, -2, "target -2 of row 1 on rank 1");
    cfg = good, cfg.Vp = V_REAL - 1;
    expect_refused(cfg, 0, "padded vocabulary at least the vocabulary");
    cfg = good, cfg.R = 0;
    expect_refused(cfg, 0, "over 0 ranks");
}

/* A tied head's token embedding over simulated ranks of 5, 7, 0, 5 rows: the tokens all-gathered,
 * each slice's part for all rows (its tokens' rows, zeros elsewhere), reduce-scattered, is each
 * rank's rows of the whole (scaled, as Gemma's) lookup bitwise; each slice's gradient from the
 * all-gathered d(embedding), added to a random one, is the whole embedding's rows bitwise, and
 * the pad token's row keeps its value. Tokens sit at both edges of every slice. */
TEST(vocab_parallel_tied_embedding_over_slices_is_the_whole_lookup_and_gradient_bitwise) {
    enum { R = 4 };
    const int rows[R] = {5, 7, 0, 5}, C = WIDTH, pad = 7;
    const float scale = 4.875f;
    size_t N = 0, counts[R], counts_c[R];
    for (int r = 0; r < R; r++) N += (size_t)rows[r], counts[r] = (size_t)rows[r], counts_c[r] = (size_t)rows[r] * C;
    int *inp = malloc(N * sizeof(int)), *gathered[R];
    float *W = malloc((size_t)V_PAD * C * 4), *dW0 = malloc((size_t)V_PAD * C * 4), *dW_whole = malloc((size_t)V_PAD * C * 4),
          *dW_split = malloc((size_t)V_PAD * C * 4), *dout = malloc(N * C * 4), *whole = malloc(N * C * 4);
    float *part[R], *own[R], *dout_all[R];
    Rng rng;
    rng_seed(&rng, 700);
    for (size_t i = 0; i < (size_t)V_PAD * C; i++) W[i] = (float)rng_normal(&rng), dW0[i] = (float)rng_normal(&rng);
    for (size_t i = 0; i < N * C; i++) dout[i] = (float)rng_normal(&rng);
    for (size_t n = 0; n < N; n++) inp[n] = n % 5 == 3 ? pad : (int)rng_below(&rng, V_REAL);
    for (int r = 0; r < R; r++) {
        const VocabSlice s = vocab_slice(V_REAL, V_PAD, R, r);
        inp[2 * r] = s.begin, inp[2 * r + 1] = s.begin + s.real - 1;
    }
    embedding_forward_cpu(whole, inp, W, scale, N, C);
    memcpy(dW_whole, dW0, (size_t)V_PAD * C * 4);
    embedding_backward_cpu(dW_whole, dout, inp, scale, pad, N, C);

    const void *inp_send[R], *dout_send[R];
    const float *part_send[R];
    size_t row0 = 0;
    for (int r = 0; r < R; r++) {
        gathered[r] = malloc(N * sizeof(int));
        part[r] = malloc(N * C * 4), dout_all[r] = malloc(N * C * 4), own[r] = malloc((rows[r] ? rows[r] : 1) * C * 4);
        inp_send[r] = inp + row0, dout_send[r] = dout + row0 * C, part_send[r] = part[r];
        row0 += (size_t)rows[r];
    }
    vp_all_gather(R, inp_send, counts, sizeof(int), (void *const *)gathered);
    vp_all_gather(R, dout_send, counts_c, sizeof(float), (void *const *)dout_all);
    memcpy(dW_split, dW0, (size_t)V_PAD * C * 4);
    for (int r = 0; r < R; r++) {
        const VocabSlice s = vocab_slice(V_REAL, V_PAD, R, r);
        vocab_parallel_embed_cpu(part[r], gathered[r], W + (size_t)s.begin * C, s, scale, N, C);
        vocab_parallel_embed_backward_cpu(dW_split + (size_t)s.begin * C, dout_all[r], gathered[r], s, scale, pad, N, C);
    }
    vp_reduce_scatter_sum(R, part_send, counts_c, own);
    int same = 1;
    row0 = 0;
    for (int r = 0; r < R; r++) {
        same &= !rows[r] || !memcmp(own[r], whole + row0 * C, (size_t)rows[r] * C * 4);
        row0 += (size_t)rows[r];
    }
    CHECK(same, "the slices' lookups reduce-scattered are not the whole lookup bitwise");
    CHECK(!memcmp(dW_split, dW_whole, (size_t)V_PAD * C * 4), "the slices' gradients are not the whole embedding's");
    CHECK(!memcmp(dW_split + (size_t)pad * C, dW0 + (size_t)pad * C, (size_t)C * 4), "the pad token's row got a gradient");
    CHECK(memcmp(dW_split, dW0, (size_t)V_PAD * C * 4), "no gradient at all: the test would not notice a missing one");
    for (int r = 0; r < R; r++) free(gathered[r]), free(part[r]), free(dout_all[r]), free(own[r]);
    free(inp), free(W), free(dW0), free(dW_whole), free(dW_split), free(dout), free(whole);
}
