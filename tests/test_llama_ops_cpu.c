/* The CPU reference of the Llama/Qwen/Gemma layers (model/cpu/llama_layers_cpu.h): every backward
 * against central finite differences at sizes that are not powers of two (hd 6, NH 6 over NKV 2,
 * T 7, d 13), then one test per place where an implementation can silently differ from
 * transformers. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/cpu/layers_cpu.h"
#include "model/cpu/llama_layers_cpu.h"
#include "tests/test.h"
#include "tests/test_util.h"

/* ---- finite differences ----
 * An Op is one operation under test: its differentiable arrays (inputs and weights), a forward
 * that fills out (and saved, what the backward needs), and a backward that adds the gradient of
 * the scalar Σ out·r into grad[]. The scalar is summed in fp64, and each difference divides by the
 * step the fp32 argument really took, so what remains is the step's truncation and the forward's rounding. */
#define MAX_ARGS 3

typedef struct Op Op;
struct Op {
    void (*forward)(Op *);
    void (*backward)(Op *);
    int nargs;
    const char *arg_name[MAX_ARGS];
    float *arg[MAX_ARGS], *grad[MAX_ARGS];
    size_t arg_len[MAX_ARGS];
    float *out, *r, *saved;
    size_t out_len;
    /* the shapes and switches of whichever operation this is */
    size_t N;
    int C, F, one_plus_w;
    float eps;
    GluActivation act;
    AttentionParams att;
    float *cos_t, *sin_t;
};

static float *normal_array(size_t n, float std, Rng *rng) {
    float *x = malloc(n * sizeof(float));
    fill_normal(x, n, std, rng);
    return x;
}

static void op_arg(Op *o, const char *name, size_t len, float std, Rng *rng) {
    int k = o->nargs++;
    o->arg_name[k] = name;
    o->arg[k] = normal_array(len, std, rng);
    o->grad[k] = calloc(len, sizeof(float));
    o->arg_len[k] = len;
}

static void op_out(Op *o, size_t out_len, size_t saved_len, Rng *rng) {
    o->out = malloc(out_len * sizeof(float));
    o->r = normal_array(out_len, 1.0f, rng);
    o->saved = malloc(saved_len * sizeof(float));
    o->out_len = out_len;
}

static void op_free(Op *o) {
    for (int k = 0; k < o->nargs; k++) {
        free(o->arg[k]);
        free(o->grad[k]);
    }
    free(o->out);
    free(o->r);
    free(o->saved);
    free(o->cos_t);
    free(o->sin_t);
}

static double op_loss(Op *o) {
    o->forward(o);
    double s = 0.0;
    for (size_t i = 0; i < o->out_len; i++) s += (double)o->out[i] * o->r[i];
    return s;
}

/* Each argument's analytic gradient must match the central differences within FD_TOL relative L2.
 * With a step of 1e-2 every operation here agrees to 2e-5 or better (measured; the step's own
 * truncation error dominates), so a missing term, which costs 1e-2 or more, cannot pass. */
#define FD_STEP 1e-2f
#define FD_TOL 1e-4

static void check_finite_differences(Op *o, const char *what) {
    o->forward(o);
    o->backward(o);
    for (int k = 0; k < o->nargs; k++) {
        double num = 0.0, den = 0.0;
        for (size_t j = 0; j < o->arg_len[k]; j++) {
            float x = o->arg[k][j], up = x + FD_STEP, down = x - FD_STEP;
            o->arg[k][j] = up;
            double l_up = op_loss(o);
            o->arg[k][j] = down;
            double l_down = op_loss(o);
            o->arg[k][j] = x;
            double fd = (l_up - l_down) / ((double)up - (double)down), d = fd - o->grad[k][j];
            num += d * d;
            den += fd * fd;
        }
        double err = sqrt(num), ref = sqrt(den);
        CHECK(ref > 0 && err <= FD_TOL * ref, "%s: d%s |fd - grad| = %.3g, |fd| = %.3g (relative %.3g, allowed %.3g)",
              what, o->arg_name[k], err, ref, err / ref, FD_TOL);
    }
}

/* ---- the operations as Ops ---- */

static void rmsnorm_fwd(Op *o) {
    rmsnorm_forward_cpu(o->out, o->saved, o->arg[0], o->arg[1], o->N, o->C, o->eps, o->one_plus_w);
}
static void rmsnorm_bwd(Op *o) {
    rmsnorm_backward_cpu(o->grad[0], o->grad[1], o->r, o->arg[0], o->arg[1], o->saved, o->N, o->C, o->one_plus_w);
}

static void qk_norm_fwd(Op *o) {
    qk_norm_forward_cpu(o->out, o->saved, o->arg[0], o->arg[1], o->arg[2], &o->att.qkv, o->eps, o->one_plus_w);
}
static void qk_norm_bwd(Op *o) {
    qk_norm_backward_cpu(o->grad[0], o->grad[1], o->grad[2], o->r, o->arg[0], o->arg[1], o->arg[2], o->saved,
                         &o->att.qkv, o->one_plus_w);
}

static void rope_fwd(Op *o) {
    rope_forward_cpu(o->out, o->arg[0], o->cos_t, o->sin_t, &o->att.qkv);
}
static void rope_bwd(Op *o) {
    rope_backward_cpu(o->grad[0], o->r, o->cos_t, o->sin_t, &o->att.qkv);
}

static void glu_fwd(Op *o) {
    glu_forward_cpu(o->out, o->arg[0], o->N, o->F, o->act);
}
static void glu_bwd(Op *o) {
    glu_backward_cpu(o->grad[0], o->r, o->arg[0], o->N, o->F, o->act);
}

static void attention_fwd(Op *o) {
    gqa_attention_forward_cpu(o->out, o->saved, o->arg[0], &o->att);
}
static void attention_bwd(Op *o) {
    gqa_attention_backward_cpu(o->grad[0], o->r, o->arg[0], o->saved, &o->att);
}

/* B 2, T 7, NH 6 query heads over NKV 2 key/value heads of hd 6 */
static const QkvLayout awkward_heads = {.B = 2, .T = 7, .NH = 6, .NKV = 2, .hd = 6};

static size_t qkv_len(const QkvLayout *s) {
    return (size_t)s->B * s->T * qkv_row_width(s);
}

/* ---- finite-difference tests ---- */

static void check_rmsnorm(int one_plus_w) {
    Rng rng;
    rng_seed(&rng, 31 + one_plus_w);
    Op o = {.forward = rmsnorm_fwd, .backward = rmsnorm_bwd, .N = 14, .C = 13, .eps = 1e-5f, .one_plus_w = one_plus_w};
    op_arg(&o, "x", o.N * o.C, 1.0f, &rng);
    op_arg(&o, "weight", o.C, 1.0f, &rng);
    op_out(&o, o.N * o.C, o.N, &rng);
    check_finite_differences(&o, one_plus_w ? "RMSNorm (1 + w)" : "RMSNorm");
    op_free(&o);
}

TEST(rmsnorm_backward_matches_finite_differences) {
    check_rmsnorm(0);
}

TEST(rmsnorm_one_plus_w_backward_matches_finite_differences) {
    check_rmsnorm(1);
}

static void check_qk_norm(int one_plus_w) {
    Rng rng;
    rng_seed(&rng, 41 + one_plus_w);
    Op o = {.forward = qk_norm_fwd, .backward = qk_norm_bwd, .eps = 1e-6f, .one_plus_w = one_plus_w};
    o.att.qkv = awkward_heads;
    o.att.qkv.hd = 10;
    const QkvLayout *s = &o.att.qkv;
    op_arg(&o, "qkv", qkv_len(s), 1.0f, &rng);
    op_arg(&o, "q_norm", (size_t)s->hd, 1.0f, &rng);
    op_arg(&o, "k_norm", (size_t)s->hd, 1.0f, &rng);
    op_out(&o, qkv_len(s), (size_t)s->B * s->T * (s->NH + s->NKV), &rng);
    check_finite_differences(&o, one_plus_w ? "QK-norm (1 + w)" : "QK-norm");
    op_free(&o);
}

TEST(qk_norm_backward_matches_finite_differences) {
    check_qk_norm(0);
}

TEST(qk_norm_one_plus_w_backward_matches_finite_differences) {
    check_qk_norm(1);
}

TEST(rope_backward_matches_finite_differences) {
    Rng rng;
    rng_seed(&rng, 51);
    Op o = {.forward = rope_fwd, .backward = rope_bwd};
    o.att.qkv = awkward_heads;
    const QkvLayout *s = &o.att.qkv;
    RopeParams rp = {.theta = 10000.0, .scaling = ROPE_SCALING_LLAMA3, .factor = 8, .low_freq_factor = 1,
                     .high_freq_factor = 4, .original_max_position_embeddings = 8};
    float inv_freq[3];
    int pos[7] = {0, 1, 2, 3, 4, 5, 6};
    rope_inv_freq(inv_freq, &rp, s->hd);
    o.cos_t = malloc(sizeof(float) * s->T * s->hd / 2);
    o.sin_t = malloc(sizeof(float) * s->T * s->hd / 2);
    rope_cos_sin(o.cos_t, o.sin_t, inv_freq, pos, s->T, s->hd);
    op_arg(&o, "qkv", qkv_len(s), 1.0f, &rng);
    op_out(&o, qkv_len(s), 1, &rng);
    check_finite_differences(&o, "RoPE");
    op_free(&o);
}

static void check_glu(GluActivation act) {
    Rng rng;
    rng_seed(&rng, 61 + act);
    Op o = {.forward = glu_fwd, .backward = glu_bwd, .N = 14, .F = 11, .act = act};
    op_arg(&o, "gate_up", o.N * 2 * o.F, 2.0f, &rng);
    op_out(&o, o.N * o.F, 1, &rng);
    check_finite_differences(&o, act == GLU_SILU ? "SwiGLU" : "GeGLU");
    op_free(&o);
}

TEST(swiglu_backward_matches_finite_differences) {
    check_glu(GLU_SILU);
}

TEST(geglu_backward_matches_finite_differences) {
    check_glu(GLU_GELU_TANH);
}

static void check_attention(int window, float scale) {
    Rng rng;
    rng_seed(&rng, 71 + window);
    Op o = {.forward = attention_fwd, .backward = attention_bwd};
    o.att = (AttentionParams){.qkv = awkward_heads, .scale = scale, .window = window};
    const QkvLayout *s = &o.att.qkv;
    op_arg(&o, "qkv", qkv_len(s), 1.0f, &rng);
    op_out(&o, (size_t)s->B * s->T * s->NH * s->hd, (size_t)s->B * s->NH * s->T * s->T, &rng);
    char what[80];
    snprintf(what, sizeof what, "grouped-query attention (window %d, scale %g)", window, scale);
    check_finite_differences(&o, what);
    op_free(&o);
}

TEST(gqa_attention_backward_matches_finite_differences) {
    check_attention(0, attention_default_scale(awkward_heads.hd));
}

TEST(gqa_attention_with_sliding_window_backward_matches_finite_differences) {
    check_attention(3, 0.25f);
}

/* ---- the semantic traps ---- */

/* transformers pairs x[i] with x[i + hd/2] (rotate_half); Meta's original code and GPT-NeoX's
 * "interleaved" variant pair x[2i] with x[2i + 1], and a checkpoint read with the wrong pairing
 * loses every position. Positions come from pos[], not from the row index. */
TEST(rope_rotate_half_not_interleaved) {
    const QkvLayout s = {.B = 1, .T = 2, .NH = 1, .NKV = 1, .hd = 4};
    /* theta 100 and hd 4: inverse frequencies 1 and 100^-1/2 = 0.1 */
    const RopeParams rp = {.theta = 100.0};
    const int pos[2] = {0, 3};
    float inv_freq[2], cos_t[4], sin_t[4];
    rope_inv_freq(inv_freq, &rp, s.hd);
    CHECK(inv_freq[0] == 1.0f && fabsf(inv_freq[1] - 0.1f) <= 1e-7f, "inverse frequencies %g %g, want 1 and 0.1",
          inv_freq[0], inv_freq[1]);
    rope_cos_sin(cos_t, sin_t, inv_freq, pos, s.T, s.hd);
    /* per token: q head, k head, v head */
    const float qkv[24] = {1, 2, 3, 4, -1, 0.5f, 2, -3, 7, 8, 9, 10, 1, 2, 3, 4, -1, 0.5f, 2, -3, 7, 8, 9, 10};
    float out[24], in_place[24];
    rope_forward_cpu(out, qkv, cos_t, sin_t, &s);
    memcpy(in_place, qkv, sizeof qkv);
    rope_forward_cpu(in_place, in_place, cos_t, sin_t, &s);
    for (int i = 0; i < 4; i++) CHECK(out[i] == qkv[i] && out[4 + i] == qkv[4 + i], "position 0 rotates x[%d]", i);
    /* at position 3 the pair (x0, x2) turns by 3 rad and (x1, x3) by 0.3 rad */
    for (int head = 0; head < 2; head++) {
        const float *x = qkv + 12 + 4 * head, *o = out + 12 + 4 * head;
        const double a = 3.0, b = 0.3;
        const double want[4] = {x[0] * cos(a) - x[2] * sin(a), x[1] * cos(b) - x[3] * sin(b),
                                x[2] * cos(a) + x[0] * sin(a), x[3] * cos(b) + x[1] * sin(b)};
        for (int i = 0; i < 4; i++)
            CHECK(fabs(o[i] - want[i]) <= 1e-6, "%s head, element %d: %.7g, rotate-half gives %.7g",
                  head ? "key" : "query", i, o[i], want[i]);
    }
    for (int i = 8; i < 12; i++)
        CHECK(out[i] == qkv[i] && out[12 + i] == qkv[12 + i], "value element %d was rotated", i - 8);
    CHECK(memcmp(in_place, out, sizeof out) == 0, "in place differs from out of place");
}

/* transformers' _compute_llama3_parameters, written out in fp64 from its definition. */
static double llama3_inv_freq(int i, int hd, double theta, double factor, double low, double high, double old_len) {
    double f = pow(theta, -2.0 * i / hd), wavelen = 2 * M_PI / f;
    if (wavelen < old_len / high) return f;
    if (wavelen > old_len / low) return f / factor;
    double smooth = (old_len / wavelen - low) / (high - low);
    return (1 - smooth) * f / factor + smooth * f;
}

/* Llama 3.1 (factor 8, hd 128) and Llama 3.2 (factor 32, hd 64): every inverse frequency, each
 * regime (kept, blended, divided) present, and the factor read from the parameters, never a
 * constant. */
TEST(llama3_rope_scaling_matches_transformers_formula) {
    const struct {
        double factor;
        int hd;
    } cases[2] = {{8, 128}, {32, 64}};
    for (int c = 0; c < 2; c++) {
        const int hd = cases[c].hd;
        const RopeParams rp = {.theta = 500000.0, .scaling = ROPE_SCALING_LLAMA3, .factor = cases[c].factor,
                               .low_freq_factor = 1, .high_freq_factor = 4, .original_max_position_embeddings = 8192};
        float inv_freq[64];
        rope_inv_freq(inv_freq, &rp, hd);
        int kept = 0, blended = 0, divided = 0;
        for (int i = 0; i < hd / 2; i++) {
            double want = llama3_inv_freq(i, hd, rp.theta, rp.factor, 1, 4, 8192), plain = pow(rp.theta, -2.0 * i / hd);
            CHECK(fabs(inv_freq[i] - want) <= 2e-6 * want, "factor %g, hd %d, pair %d: %.9g, formula %.9g",
                  rp.factor, hd, i, inv_freq[i], want);
            double ratio = plain / want;
            kept += fabs(ratio - 1) < 1e-9;
            divided += fabs(ratio - rp.factor) < 1e-9 * rp.factor;
            blended += ratio > 1 + 1e-6 && ratio < rp.factor * (1 - 1e-6);
        }
        CHECK(kept > 0 && blended > 0 && divided > 0 && kept + blended + divided == hd / 2,
              "factor %g, hd %d: %d kept, %d blended, %d divided", rp.factor, hd, kept, blended, divided);
        /* the lowest frequency is theta^-(hd-2)/hd / factor */
        double lowest = pow(rp.theta, -(hd - 2.0) / hd) / rp.factor;
        CHECK(fabs(inv_freq[hd / 2 - 1] - lowest) <= 2e-6 * lowest, "factor %g: lowest frequency %.9g, want %.9g",
              rp.factor, inv_freq[hd / 2 - 1], lowest);
    }
}

/* rope_type "linear" (Gemma 3's global layers): positions divided by factor, i.e. every
 * frequency. */
TEST(linear_rope_scaling_divides_every_frequency_by_the_factor) {
    const RopeParams plain = {.theta = 1e6}, linear = {.theta = 1e6, .scaling = ROPE_SCALING_LINEAR, .factor = 8};
    float a[5], b[5];
    rope_inv_freq(a, &plain, 10);
    rope_inv_freq(b, &linear, 10);
    for (int i = 0; i < 5; i++) {
        double want = pow(1e6, -2.0 * i / 10);
        CHECK(fabs(a[i] - want) <= 1e-6 * want, "pair %d: %.9g, theta^(-2i/hd) = %.9g", i, a[i], want);
        CHECK(b[i] == a[i] / 8, "pair %d: linear %.9g, plain / 8 = %.9g", i, b[i], a[i] / 8);
    }
}

/* Query head h reads key/value head h / (NH / NKV): grouped-query attention must equal
 * multi-head attention over K and V heads repeated that way (transformers' repeat_kv), and each
 * key/value head's gradient is the sum over its group's query heads. */
TEST(gqa_shares_kv_between_the_query_heads_of_a_group) {
    const QkvLayout g = awkward_heads, m = {.B = g.B, .T = g.T, .NH = g.NH, .NKV = g.NH, .hd = g.hd};
    const int group = g.NH / g.NKV, hd = g.hd;
    const size_t N = (size_t)g.B * g.T, Rg = qkv_row_width(&g), Rm = qkv_row_width(&m);
    const size_t out_len = N * g.NH * hd, att_len = (size_t)g.B * g.NH * g.T * g.T;
    Rng rng;
    rng_seed(&rng, 81);
    float *qkv_g = normal_array(N * Rg, 1.0f, &rng), *dout = normal_array(out_len, 1.0f, &rng);
    float *qkv_m = malloc(N * Rm * sizeof(float));
    for (size_t n = 0; n < N; n++) {
        const float *src = qkv_g + n * Rg;
        float *dst = qkv_m + n * Rm;
        memcpy(dst, src, (size_t)g.NH * hd * sizeof(float));
        for (int h = 0; h < g.NH; h++) {
            int kv = h / group;
            memcpy(dst + (size_t)(g.NH + h) * hd, src + (size_t)(g.NH + kv) * hd, hd * sizeof(float));
            memcpy(dst + (size_t)(2 * g.NH + h) * hd, src + (size_t)(g.NH + g.NKV + kv) * hd, hd * sizeof(float));
        }
    }
    float scale = attention_default_scale(hd);
    AttentionParams pg = {.qkv = g, .scale = scale}, pm = {.qkv = m, .scale = scale};
    float *out_g = malloc(out_len * sizeof(float)), *out_m = malloc(out_len * sizeof(float));
    float *att_g = malloc(att_len * sizeof(float)), *att_m = malloc(att_len * sizeof(float));
    float *d_g = calloc(N * Rg, sizeof(float)), *d_m = calloc(N * Rm, sizeof(float));
    gqa_attention_forward_cpu(out_g, att_g, qkv_g, &pg);
    gqa_attention_forward_cpu(out_m, att_m, qkv_m, &pm);
    CHECK(memcmp(out_g, out_m, out_len * sizeof(float)) == 0, "outputs differ: max |diff| relative %.3g",
          rel_l2(out_g, out_m, out_len));
    gqa_attention_backward_cpu(d_g, dout, qkv_g, att_g, &pg);
    gqa_attention_backward_cpu(d_m, dout, qkv_m, att_m, &pm);
    double worst = 0;
    for (size_t n = 0; n < N; n++) {
        const float *dg = d_g + n * Rg, *dm = d_m + n * Rm;
        for (int i = 0; i < g.NH * hd; i++) worst = fmax(worst, fabs(dg[i] - dm[i]));
        for (int kv = 0; kv < g.NKV; kv++)
            for (int i = 0; i < hd; i++) {
                double dk = 0, dv = 0;
                for (int h = kv * group; h < (kv + 1) * group; h++) {
                    dk += dm[(size_t)(g.NH + h) * hd + i];
                    dv += dm[(size_t)(2 * g.NH + h) * hd + i];
                }
                worst = fmax(worst, fabs(dg[(size_t)(g.NH + kv) * hd + i] - dk));
                worst = fmax(worst, fabs(dg[(size_t)(g.NH + g.NKV + kv) * hd + i] - dv));
            }
    }
    CHECK(worst <= 1e-6, "dq, dk, dv differ from multi-head attention's (group sums) by up to %.3g", worst);
    free(d_m);
    free(d_g);
    free(att_m);
    free(att_g);
    free(out_m);
    free(out_g);
    free(qkv_m);
    free(dout);
    free(qkv_g);
}

/* With window W, query t sees keys t − W < t2 <= t: W keys once t >= W − 1, all earlier ones
 * before. Keys outside change nothing, and a window as long as the sequence is no window. */
TEST(sliding_window_sees_exactly_w_keys) {
    const QkvLayout s = {.B = 1, .T = 9, .NH = 2, .NKV = 1, .hd = 4};
    const int W = 3;
    const size_t R = qkv_row_width(&s), out_len = (size_t)s.T * s.NH * s.hd, att_len = (size_t)s.NH * s.T * s.T;
    Rng rng;
    rng_seed(&rng, 91);
    float *qkv = normal_array(s.T * R, 1.0f, &rng);
    float *out = malloc(out_len * sizeof(float)), *att = malloc(att_len * sizeof(float));
    float *out2 = malloc(out_len * sizeof(float)), *att2 = malloc(att_len * sizeof(float));
    AttentionParams p = {.qkv = s, .scale = attention_default_scale(s.hd), .window = W};
    gqa_attention_forward_cpu(out, att, qkv, &p);
    for (int h = 0; h < s.NH; h++)
        for (int t = 0; t < s.T; t++) {
            const float *a = att + ((size_t)h * s.T + t) * s.T;
            int seen = 0, outside = 0;
            double sum = 0;
            for (int t2 = 0; t2 < s.T; t2++) {
                int inside = t2 > t - W && t2 <= t;
                seen += inside && a[t2] > 0;
                outside += !inside && a[t2] != 0;
                sum += a[t2];
            }
            int want = t + 1 < W ? t + 1 : W;
            CHECK(seen == want && outside == 0, "head %d, query %d sees %d keys (want %d) and %d outside the window",
                  h, t, seen, want, outside);
            CHECK(fabs(sum - 1) <= 1e-6, "head %d, query %d: probabilities sum to %.9g", h, t, sum);
        }
    /* the key and value of position 2 fall out of the window from query 5 on */
    float *changed = malloc(s.T * R * sizeof(float));
    memcpy(changed, qkv, s.T * R * sizeof(float));
    for (size_t i = 2 * R + (size_t)s.NH * s.hd; i < 3 * R; i++) changed[i] += 5.0f;
    gqa_attention_forward_cpu(out2, att2, changed, &p);
    size_t from5 = (size_t)5 * s.NH * s.hd;
    CHECK(memcmp(out + from5, out2 + from5, (out_len - from5) * sizeof(float)) == 0,
          "a key and value outside the window changed the output");
    CHECK(memcmp(out + (size_t)4 * s.NH * s.hd, out2 + (size_t)4 * s.NH * s.hd, s.NH * s.hd * sizeof(float)) != 0,
          "a key and value inside the window left query 4 unchanged");
    AttentionParams whole = p, none = p;
    whole.window = s.T;
    none.window = 0;
    gqa_attention_forward_cpu(out, att, qkv, &whole);
    gqa_attention_forward_cpu(out2, att2, qkv, &none);
    CHECK(memcmp(out, out2, out_len * sizeof(float)) == 0, "a window of T differs from no window");
    free(changed);
    free(att2);
    free(out2);
    free(att);
    free(out);
    free(qkv);
}

/* Qwen3 normalises each head on its own (over hd, not over all NH·hd values of q), the query heads
 * with q_norm and the key heads with k_norm, then rotates: out = rotate(x / rms(x) · w). Heads of
 * very different sizes catch a norm over the whole q; distinct q_norm and k_norm catch a swap;
 * non-uniform weights catch rotating first (a rotation moves values between weights). */
TEST(qk_norm_runs_per_head_before_rope) {
    const QkvLayout s = {.B = 1, .T = 3, .NH = 2, .NKV = 1, .hd = 6};
    const int hd = s.hd, H = hd / 2;
    const size_t R = qkv_row_width(&s);
    const float eps = 1e-6f;
    Rng rng;
    rng_seed(&rng, 101);
    float qkv[3 * 24], q_norm[6], k_norm[6], rstd[3 * 3], out[3 * 24];
    fill_normal(qkv, sizeof qkv / sizeof(float), 1.0f, &rng);
    for (int t = 0; t < s.T; t++)
        for (int i = 0; i < hd; i++) {
            qkv[t * R + i] *= 10.0f;
            qkv[t * R + hd + i] *= 0.1f;
        }
    for (int i = 0; i < hd; i++) {
        q_norm[i] = 0.5f + 0.25f * i;
        k_norm[i] = 2.0f - 0.3f * i;
    }
    const RopeParams rp = {.theta = 10000.0};
    const int pos[3] = {0, 1, 2};
    float inv_freq[3], cos_t[9], sin_t[9];
    rope_inv_freq(inv_freq, &rp, hd);
    rope_cos_sin(cos_t, sin_t, inv_freq, pos, s.T, hd);
    qk_norm_forward_cpu(out, rstd, qkv, q_norm, k_norm, &s, eps, 0);
    rope_forward_cpu(out, out, cos_t, sin_t, &s);
    double worst = 0;
    for (int t = 0; t < s.T; t++)
        for (int head = 0; head < s.NH + s.NKV; head++) {
            const float *x = qkv + t * R + head * hd, *w = head < s.NH ? q_norm : k_norm;
            double ms = 0, y[6];
            for (int i = 0; i < hd; i++) ms += (double)x[i] * x[i] / hd;
            for (int i = 0; i < hd; i++) y[i] = x[i] / sqrt(ms + eps) * w[i];
            for (int i = 0; i < H; i++) {
                double c = cos(pos[t] * (double)inv_freq[i]), sn = sin(pos[t] * (double)inv_freq[i]);
                worst = fmax(worst, fabs(out[t * R + head * hd + i] - (y[i] * c - y[i + H] * sn)));
                worst = fmax(worst, fabs(out[t * R + head * hd + i + H] - (y[i + H] * c + y[i] * sn)));
            }
        }
    CHECK(worst <= 1e-5, "rotate(x / rms(x) · w) per head differs by up to %.3g", worst);
    for (int t = 0; t < s.T; t++)
        for (int i = (s.NH + s.NKV) * hd; i < (int)R; i++)
            CHECK(out[t * R + i] == qkv[t * R + i], "token %d: value element %d changed", t, i - (s.NH + s.NKV) * hd);
}

/* Gemma stores its norm weights as offsets from 1: out = x / rms(x) · (1 + w), so w = 0 is the
 * identity scale, where Llama's x / rms(x) · w would give 0. */
TEST(gemma_norm_multiplies_one_plus_w) {
    const float x[4] = {1, -2, 3, 4}, w[4] = {0, 0.5f, -1, 2}, eps = 1e-6f;
    const double rms = sqrt((1 + 4 + 9 + 16) / 4.0 + eps);
    float gemma[4], llama[4], rstd;
    rmsnorm_forward_cpu(gemma, &rstd, x, w, 1, 4, eps, 1);
    for (int i = 0; i < 4; i++)
        CHECK(fabs(gemma[i] - x[i] / rms * (1 + w[i])) <= 1e-6,
              "one_plus_w: element %d is %.7g, x / rms · (1 + w) = %.7g", i, gemma[i], x[i] / rms * (1 + w[i]));
    CHECK(fabs(rstd - 1 / rms) <= 1e-7, "rstd %.9g, 1 / rms = %.9g", rstd, 1 / rms);
    rmsnorm_forward_cpu(llama, &rstd, x, w, 1, 4, eps, 0);
    for (int i = 0; i < 4; i++)
        CHECK(fabs(llama[i] - x[i] / rms * w[i]) <= 1e-6, "plain: element %d is %.7g, x / rms · w = %.7g", i, llama[i],
              x[i] / rms * w[i]);
}

/* Qwen2's q_proj, k_proj and v_proj carry biases; stacked like their weights they are the packed
 * projection's bias, so one matmul gives the three projections, and the bias gradient lands in
 * the same packed order. */
TEST(packed_qkv_bias_matches_separate_q_k_v_projections) {
    const QkvLayout s = awkward_heads;
    const int C = 13, N = s.B * s.T, rows[3] = {s.NH * s.hd, s.NKV * s.hd, s.NKV * s.hd};
    const int OC = (int)qkv_row_width(&s);
    Rng rng;
    rng_seed(&rng, 111);
    float *x = normal_array((size_t)N * C, 1.0f, &rng), *w = normal_array((size_t)OC * C, 0.3f, &rng);
    float *bias = normal_array((size_t)OC, 1.0f, &rng), *dout = normal_array((size_t)N * OC, 1.0f, &rng);
    float *packed = malloc((size_t)N * OC * sizeof(float)), *part = malloc((size_t)N * OC * sizeof(float));
    float *dx = calloc((size_t)N * C, sizeof(float)), *dw = calloc((size_t)OC * C, sizeof(float));
    float *dbias = calloc((size_t)OC, sizeof(float));
    matmul_forward_cpu(packed, x, w, bias, N, C, OC);
    matmul_backward_cpu(dx, dw, dbias, dout, x, w, N, C, OC);
    int first = 0;
    for (int p = 0; p < 3; p++) {
        matmul_forward_cpu(part, x, w + (size_t)first * C, bias + first, N, C, rows[p]);
        for (int n = 0; n < N; n++)
            for (int j = 0; j < rows[p]; j++) {
                float got = packed[(size_t)n * OC + first + j], want = part[(size_t)n * rows[p] + j];
                if (got != want) {
                    CHECK(0, "%c projection, token %d, row %d: packed %.7g, separate %.7g", "qkv"[p], n, j, got, want);
                    n = N;
                    break;
                }
            }
        for (int j = 0; j < rows[p]; j++) {
            double sum = 0;
            for (int n = 0; n < N; n++) sum += dout[(size_t)n * OC + first + j];
            CHECK(fabs(dbias[first + j] - sum) <= 1e-5, "%c bias row %d: gradient %.7g, column sum %.7g", "qkv"[p], j,
                  dbias[first + j], sum);
        }
        first += rows[p];
    }
    free(dbias);
    free(dw);
    free(dx);
    free(part);
    free(packed);
    free(dout);
    free(bias);
    free(w);
    free(x);
}
