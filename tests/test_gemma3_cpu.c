/* The CPU backend's Gemma 3 forward against Gemma3ForCausalLM's, written out here in fp64 from
 * modeling_gemma3.py and read through the table's Hugging Face names only (none of the CPU layers,
 * none of the config's helpers): the scaled embedding, the four norms of each layer and where each
 * residual adds, QK-norm before RoPE, each layer's window and RoPE base, the attention scale and the
 * tied head on the unscaled embedding. A model whose names or wiring differ from transformers' has
 * other logits. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "model/backend.h"
#include "tests/test.h"
#include "tests/test_util.h"

/* The tiny model: 3 layers of 20 wide, 4 query heads of 6 over 2 key/value heads, an MLP of 24. */
enum { L = 3, C = 20, NH = 4, NKV = 2, HD = 6, F = 24, V = 37, T = 9, W = 3 };
static const int layer_slides[L] = {1, 0, 1}; /* layer_types: sliding, full, sliding */
static const double theta_global = 100.0, rope_factor = 4.0, theta_local = 10.0, qpas = 5.0, eps = 1e-6;
/* sqrt(20) in fp32: transformers' scale for a float32 model */
static const double embed_scale = (double)4.47213602f;

/* Names the table lacks, counted; they read as zeros so the reference still runs. */
static int missing;
static const float zeros[V * C];

/* The HF tensor `name` in the parameters p: a row of the table, or one part of a packed row. */
static const float *hf_tensor(const ParamTable *t, const float *p, const char *name) {
    for (int i = 0; i < t->count; i++) {
        const ParamInfo *pi = &t->params[i];
        if (strcmp(pi->name, name) == 0) return p + pi->offset;
        size_t row = 0;
        for (int k = 0; k < pi->num_parts; k++) {
            if (strcmp(pi->part[k].name, name) == 0) return p + pi->offset + row * pi->cols;
            row += pi->part[k].rows;
        }
    }
    if (missing++ == 0) fprintf(stderr, "the table has no tensor %s\n", name);
    return zeros;
}

static const float *layer_tensor(const ParamTable *t, const float *p, int l, const char *suffix) {
    char name[96];
    snprintf(name, sizeof name, "model.layers.%d.%s", l, suffix);
    return hf_tensor(t, p, name);
}

/* Gemma3RMSNorm over n values: x / sqrt(mean(x²) + eps) · (1 + w), in place */
static void gemma_norm(double *x, const float *w, int n) {
    double ms = 0;
    for (int i = 0; i < n; i++) ms += x[i] * x[i];
    double s = 1.0 / sqrt(ms / n + eps);
    for (int i = 0; i < n; i++) x[i] = x[i] * s * (1.0 + w[i]);
}

/* y[out] = x[in] · M^T for an nn.Linear weight M [out, in] */
static void linear(double *y, const double *x, const float *m, int out, int in) {
    for (int o = 0; o < out; o++) {
        double s = 0;
        for (int i = 0; i < in; i++) s += x[i] * m[(size_t)o * in + i];
        y[o] = s;
    }
}

/* apply_rotary_pos_emb on one head at position t: rotate_half pairs (i, i + HD/2) */
static void rotate(double *x, int t, double theta, double factor) {
    for (int i = 0; i < HD / 2; i++) {
        double angle = t * pow(theta, -2.0 * i / HD) / factor;
        double x1 = x[i], x2 = x[i + HD / 2];
        x[i] = x1 * cos(angle) - x2 * sin(angle);
        x[i + HD / 2] = x2 * cos(angle) + x1 * sin(angle);
    }
}

static double gelu_pytorch_tanh(double x) {
    return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

/* logits [T, V] of one sequence */
static void reference_logits(const ParamTable *t, const float *p, const int *tokens, double *logits) {
    static double x[T][C], h[T][C], q[T][NH * HD], k[T][NKV * HD], v[T][NKV * HD], att[T][NH * HD], o[C];
    static double gate[F], up[F];
    const float *wte = hf_tensor(t, p, "model.embed_tokens.weight");
    for (int s = 0; s < T; s++)
        for (int i = 0; i < C; i++) x[s][i] = wte[(size_t)tokens[s] * C + i] * embed_scale;
    for (int l = 0; l < L; l++) {
        const double theta = layer_slides[l] ? theta_local : theta_global;
        const double factor = layer_slides[l] ? 1.0 : rope_factor;
        for (int s = 0; s < T; s++) {
            memcpy(h[s], x[s], sizeof h[s]);
            gemma_norm(h[s], layer_tensor(t, p, l, "input_layernorm.weight"), C);
            linear(q[s], h[s], layer_tensor(t, p, l, "self_attn.q_proj.weight"), NH * HD, C);
            linear(k[s], h[s], layer_tensor(t, p, l, "self_attn.k_proj.weight"), NKV * HD, C);
            linear(v[s], h[s], layer_tensor(t, p, l, "self_attn.v_proj.weight"), NKV * HD, C);
            for (int hh = 0; hh < NH; hh++) {
                gemma_norm(q[s] + hh * HD, layer_tensor(t, p, l, "self_attn.q_norm.weight"), HD);
                rotate(q[s] + hh * HD, s, theta, factor);
            }
            for (int hh = 0; hh < NKV; hh++) {
                gemma_norm(k[s] + hh * HD, layer_tensor(t, p, l, "self_attn.k_norm.weight"), HD);
                rotate(k[s] + hh * HD, s, theta, factor);
            }
        }
        for (int s = 0; s < T; s++)
            for (int hh = 0; hh < NH; hh++) {
                const int kv = hh / (NH / NKV);
                double score[T], maxv = -INFINITY, sum = 0;
                for (int j = 0; j <= s; j++) {
                    score[j] = -INFINITY;
                    if (layer_slides[l] && s - j >= W) continue; /* the sliding window's mask */
                    double d = 0;
                    for (int i = 0; i < HD; i++) d += q[s][hh * HD + i] * k[j][kv * HD + i];
                    score[j] = d * pow(qpas, -0.5);
                    maxv = fmax(maxv, score[j]);
                }
                for (int j = 0; j <= s; j++) sum += score[j] = exp(score[j] - maxv);
                for (int i = 0; i < HD; i++) {
                    double a = 0;
                    for (int j = 0; j <= s; j++) a += score[j] / sum * v[j][kv * HD + i];
                    att[s][hh * HD + i] = a;
                }
            }
        for (int s = 0; s < T; s++) {
            linear(o, att[s], layer_tensor(t, p, l, "self_attn.o_proj.weight"), C, NH * HD);
            gemma_norm(o, layer_tensor(t, p, l, "post_attention_layernorm.weight"), C);
            for (int i = 0; i < C; i++) x[s][i] += o[i];
            memcpy(h[s], x[s], sizeof h[s]);
            gemma_norm(h[s], layer_tensor(t, p, l, "pre_feedforward_layernorm.weight"), C);
            linear(gate, h[s], layer_tensor(t, p, l, "mlp.gate_proj.weight"), F, C);
            linear(up, h[s], layer_tensor(t, p, l, "mlp.up_proj.weight"), F, C);
            for (int i = 0; i < F; i++) gate[i] = gelu_pytorch_tanh(gate[i]) * up[i];
            linear(o, gate, layer_tensor(t, p, l, "mlp.down_proj.weight"), C, F);
            gemma_norm(o, layer_tensor(t, p, l, "post_feedforward_layernorm.weight"), C);
            for (int i = 0; i < C; i++) x[s][i] += o[i];
        }
    }
    for (int s = 0; s < T; s++) {
        gemma_norm(x[s], hf_tensor(t, p, "model.norm.weight"), C);
        linear(logits + (size_t)s * V, x[s], wte, V, C); /* the tied head: the embedding as stored */
    }
}

TEST(a_gemma3_forward_matches_gemma3_for_causal_lm_written_out) {
    GPTConfig cfg = {.num_layers = L, .num_heads = NH, .dim = C, .max_seq_len = 16, .vocab_size = V};
    gpt_family_defaults(&cfg, FAMILY_GEMMA3);
    cfg.num_kv_heads = NKV;
    cfg.head_dim = HD;
    cfg.ffn_dim = F;
    cfg.sliding_window = W;
    cfg.sliding_window_pattern = 0;
    for (int l = 0; l < L; l++) cfg.layer_sliding[l] = (unsigned char)layer_slides[l];
    cfg.rope = (RopeParams){.theta = theta_global, .scaling = ROPE_SCALING_LINEAR, .factor = rope_factor};
    cfg.rope_local_theta = theta_local;
    cfg.query_pre_attn_scalar = (float)qpas;
    gpt_config_finish(&cfg);
    ParamTable t;
    char err[ERR_LEN];
    REQUIRE(param_table_build(&t, &cfg, err) == 0, "%s", err);
    /* every weight, the norms' too, moved away from its init so each one shows */
    Backend *be = perturbed_cpu_backend(&t, 1, T, OUTPUT_FUSED);
    REQUIRE(be, "backend");
    float *p = malloc(t.total * sizeof *p);
    be->ops->read_state(be, p, NULL, NULL);
    int tokens[T];
    Rng rng;
    rng_seed(&rng, 5);
    for (int s = 0; s < T; s++) tokens[s] = (int)rng_below(&rng, V);
    static double want[T * V];
    reference_logits(&t, p, tokens, want);
    double worst = 0, scale = 0;
    for (int s = 0; s < T; s++) {
        float got[V];
        be->ops->logits_at(be, tokens, s, got);
        for (int c = 0; c < V; c++) {
            worst = fmax(worst, fabs(got[c] - want[s * V + c]));
            scale = fmax(scale, fabs(want[s * V + c]));
        }
    }
    /* fp32 against fp64 through 3 layers: 3e-7 of the largest logit (measured) */
    CHECK(missing == 0, "%d Hugging Face names are not in the table", missing);
    CHECK(scale > 1.0 && worst <= 1e-5 * scale, "logits differ by up to %.3g (largest %.3g)", worst, scale);
    free(p);
    be->ops->destroy(be);
    param_table_free(&t);
}

/* Gemma3TextScaledWordEmbedding is an nn.Embedding with padding_idx = pad_token_id (0): transformers'
 * init zeroes that row, and its lookups add nothing to its gradient. With an untied head the row's
 * only gradient would come from the lookups, so it stays exactly 0 while another input's row moves. */
TEST(gemma3_pad_token_row_starts_at_zero_and_its_lookups_pass_no_gradient) {
    GPTConfig cfg = {.num_layers = 2, .num_heads = NH, .dim = C, .max_seq_len = 16, .vocab_size = V};
    gpt_family_defaults(&cfg, FAMILY_GEMMA3);
    cfg.num_kv_heads = NKV;
    cfg.head_dim = HD;
    cfg.ffn_dim = F;
    cfg.untied_head = 1;
    gpt_config_finish(&cfg);
    ParamTable t;
    char err[ERR_LEN];
    REQUIRE(param_table_build(&t, &cfg, err) == 0, "%s", err);
    float *p = malloc(t.total * sizeof *p), *g = malloc(t.total * sizeof *g);
    param_init(&t, p, 3);
    const float *wte = p + param_whole(&t, ROLE_WTE)->offset;
    CHECK(max_abs(wte, C) == 0.0 && max_abs(wte + C, C) > 0.0, "row 0 (pad) max %g, row 1 max %g", max_abs(wte, C),
          max_abs(wte + C, C));
    Backend *be = perturbed_cpu_backend(&t, 1, T, OUTPUT_FUSED);
    REQUIRE(be, "backend");
    int inputs[T] = {0, 5, 0, 7, 0, 5, 9, 0, 2}, targets[T] = {5, 0, 7, 0, 5, 9, 0, 2, 1};
    be->ops->zero_grad(be);
    be->ops->train_micro_step(be, inputs, targets, NULL, 1.0f, 1);
    be->ops->read_grads(be, g);
    const float *dwte = g + param_whole(&t, ROLE_WTE)->offset;
    CHECK(max_abs(dwte, C) == 0.0, "the pad row got a gradient of up to %g", max_abs(dwte, C));
    CHECK(max_abs(dwte + 5 * C, C) > 0.0, "token 5's row got no gradient");
    cfg.pad_token_id = V;
    ParamTable refused;
    CHECK(param_table_build(&refused, &cfg, err) != 0 && strstr(err, "pad token 37 is not one of the 37 tokens"),
          "'%s'", err);
    free(g);
    free(p);
    be->ops->destroy(be);
    param_table_free(&t);
}
