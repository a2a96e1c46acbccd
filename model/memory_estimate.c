/* model/memory_estimate.c - GPU memory of training a model, from its table and config (see the
 * header). Shapes: B, T, N = B·T, C, NH, NKV, hd, F (the MLP's width), Q = (NH + 2·NKV)·hd (the
 * packed q, k, v), Vp.
 *
 * GPT-2's layer keeps, in bf16 per token: the attention's norm (C), q, k, v (Q), the attention's
 * output (NH·hd), the residual after it (C), the MLP's norm (C), the MLP's input (F), its GELU (F,
 * unless recomputed) and the residual after it (C). A RoPE family's layer keeps q, k, v as the
 * projection wrote them (Q: before QK-norm and RoPE), the attention's output, the two residuals
 * and the gate/up rows (2F, unless recomputed by their GEMM); its norms and its gated product are
 * recomputed in the backward into one buffer each that the layers share. With QK-norm a layer also
 * keeps its normed and rotated q, k, v (Q), unless they are recomputed too (recompute 1 and 2),
 * into one more shared buffer. With sandwich norms (Gemma) a layer also keeps its two projections' outputs before
 * their norms (2·C) and the norms' 1/rms. In fp32: each norm's
 * statistics (LayerNorm's mean and 1/std, RMSNorm's 1/rms alone), QK-norm's 1/rms per head, and
 * the attention's log-sum-exp per head. Beside the layers: the embedding's output, the two
 * projections that feed the residual stream (one buffer each), the final norm, the backward's
 * gradients of one layer's activations (with a gated MLP whose products do not carry the activation,
 * its product's too), RoPE's cos and sin
 * tables [T, hd/2] (a second pair when the sliding layers have their own base), the batch's inputs, targets and positions, the loss (with the objective and mean lse) and
 * its per-token values, and one row of logits for sampling. This is the CUDA backend's activation
 * arena without its scratch. */
#include "model/memory_estimate.h"

#include <stdint.h>

#include "kernels/gated_mlp_fits.h"

static size_t take(size_t bytes) {
    return (bytes + 255) / 256 * 256;
}

/* A norm's fp32 statistics over N rows. */
static size_t norm_stats(const GPTConfig *cfg, size_t N) {
    return cfg->norm == NORM_LAYERNORM ? 2 * take(N * sizeof(float)) : take(N * sizeof(float));
}

int gated_products_take_every_layer(const ParamTable *t) {
    const GPTConfig *cfg = &t->cfg;
    if (cfg->mlp == MLP_GELU) return 0;
    for (int l = 0; l < cfg->num_layers; l++) {
        const ParamInfo *fc = param_of_layer(t, l, ROLE_FC_W), *proj = param_of_layer(t, l, ROLE_FCPROJ_W);
        if (!gated_mlp_fits(cfg->dim, cfg->ffn_dim, fc->offset * 2) ||
            !gated_mlp_fits(cfg->dim, cfg->ffn_dim, proj->offset * 2))
            return 0;
    }
    return 1;
}

MemoryEstimate memory_estimate(const ParamTable *t, int B, int T, int recompute_mlp, OptimizerState state) {
    const GPTConfig *cfg = &t->cfg;
    const size_t N = (size_t)B * (size_t)T, C = (size_t)cfg->dim, NH = (size_t)cfg->num_heads;
    const size_t NKV = (size_t)cfg->num_kv_heads, hd = (size_t)cfg->head_dim, F = (size_t)cfg->ffn_dim;
    const size_t Q = (NH + 2 * NKV) * hd, A = NH * hd, MLP_IN = cfg->mlp == MLP_GELU ? F : 2 * F;
    const size_t bf = 2, P = t->total;
    const int rope = cfg->positions == POS_ROPE;
    recompute_mlp = recompute_mlp < 0 ? 0 : recompute_mlp > 2 ? 2 : recompute_mlp;
    if (!rope) recompute_mlp = recompute_mlp != 0;
    const int recompute_act = rope || recompute_mlp; /* the RoPE families always recompute their gated product */
    const int keep_rotated = cfg->qk_norm && recompute_mlp == 0;
    const int bf16_state = state == OPTIMIZER_STATE_BF16;
    MemoryEstimate e = {P * bf, bf16_state ? 0 : P * sizeof(float), P * sizeof(float),
                        2 * P * (bf16_state ? bf : sizeof(float)), 0};
    size_t layer = take(N * Q * bf) + take(N * A * bf) + 2 * take(N * C * bf) +
                   (recompute_mlp == 2 ? 0 : take(N * MLP_IN * bf)) +
                   (recompute_act ? 0 : take(N * F * bf)) + 2 * norm_stats(cfg, N) + take(N * NH * sizeof(float));
    if (!rope) layer += 2 * take(N * C * bf); /* the two norms' outputs */
    if (cfg->qk_norm) layer += take(N * (NH + NKV) * sizeof(float));
    if (keep_rotated) layer += take(N * Q * bf);
    if (cfg->sandwich_norm) layer += 2 * take(N * C * bf) + 2 * take(N * sizeof(float));
    size_t a = take(N * C * bf) + (size_t)cfg->num_layers * layer;
    a += 2 * take(N * C * bf);                         /* the attention's and the MLP's projections */
    if (recompute_act) a += take(N * F * bf);          /* one layer's activation at a time */
    if (recompute_mlp == 2) a += take(N * MLP_IN * bf); /* one layer's gate/up rows at a time */
    if (rope) a += take(N * C * bf);                   /* one layer's norm output at a time */
    if (cfg->qk_norm && !keep_rotated) a += take(N * Q * bf); /* one layer's rotated q, k, v at a time */
    a += take(N * C * bf) + norm_stats(cfg, N);        /* final norm */
    a += 2 * take(N * C * bf) + take(N * MLP_IN * bf); /* backward: residual, final norm, MLP input */
    if (cfg->mlp != MLP_GELU && !gated_products_take_every_layer(t))
        a += take(N * F * bf); /* the gated product's gradient, unless the products carry the activation */
    a += take(N * C * bf) + take(N * A * bf) + take(N * Q * bf); /* norm, attention output, q k v */
    if (rope) a += 2 * take((size_t)T * (hd / 2) * sizeof(float)); /* cos, sin */
    if (gpt_first_local_rope_layer(cfg) >= 0) a += 2 * take((size_t)T * (hd / 2) * sizeof(float));
    a += 3 * take(N * sizeof(int32_t)) + take(3 * sizeof(float)) + take(sizeof(double)); /* batch, loss, norm */
    a += take(N * sizeof(float));                     /* per-token losses */
    a += take((size_t)cfg->padded_vocab_size * bf);   /* one row of logits */
    e.activations = a;
    return e;
}

size_t memory_estimate_total(const MemoryEstimate *e) {
    return e->weights + e->master + e->grads + e->adamw + e->activations;
}

int memory_estimate_largest_batch(const ParamTable *t, int T, int recompute_mlp, OptimizerState state, size_t extra,
                                  size_t bytes) {
    int lo = 0, hi = 1 << 20; /* the estimate grows with B: the largest that fits, by bisection */
    while (lo < hi) {
        const int mid = lo + (hi - lo + 1) / 2;
        const MemoryEstimate e = memory_estimate(t, mid, T, recompute_mlp, state);
        if (memory_estimate_total(&e) + extra <= bytes) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}
