/* Finite-difference check of every parameter of a tiny model of each family on the CPU backend
 * (GPT-2 with both output layers; Llama, Qwen3 and Qwen2 each with the switches that set them
 * apart), an ignored target and a vocabulary that is not a multiple of 128. The forward is fp32,
 * so central differences with a step of 1e-2 agree with the analytic gradient to ~3e-4 relative L2
 * (measured); each tensor's
 * analytic gradient must match within 3e-3 relative L2 (plus a small absolute floor for tensors
 * whose exact gradient is ~0, such as the key biases, which softmax is invariant to). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "model/backend.h"
#include "tests/test.h"
#include "tests/test_util.h"

/* The rows of the vocabulary ([Vp, C]: the embedding, an untied head) have padded rows past V. */
static int is_vocab_row(const ParamInfo *pi) {
    return pi->role == ROLE_WTE || pi->role == ROLE_LM_HEAD;
}

/* eps: the central differences' step */
static void check_gradients(GPTConfig cfg, OutputKind output, float eps) {
    gpt_config_finish(&cfg);
    ParamTable t;
    char err[ERR_LEN];
    REQUIRE(param_table_build(&t, &cfg, err) == 0, "%s", err);
    int B = 2, T = 5;
    Backend *be = backend_cpu_create(&t, B, T, output, OPTIMIZER_STATE_FP32, 7, NULL, err);
    REQUIRE(be, "%s", err);
    /* Perturb the init so LayerNorm weights and biases are not all 1 and 0 (their gradients
     * would then be degenerate and check less). */
    float *p = malloc(t.total * 4), *g = malloc(t.total * 4), *q = malloc(t.total * 4);
    be->ops->read_state(be, p, NULL, NULL);
    Rng rng;
    rng_seed(&rng, 11);
    for (size_t i = 0; i < t.total; i++) p[i] += (float)(0.1 * rng_normal(&rng));
    for (int k = 0; k < t.count; k++)
        if (is_vocab_row(&t.params[k]))
            for (size_t j = (size_t)cfg.vocab_size * cfg.dim; j < t.params[k].numel; j++) p[t.params[k].offset + j] = 0.0f;
    be->ops->write_state(be, p, NULL, NULL);

    int inputs[10], targets[10];
    for (int i = 0; i < B * T; i++) {
        inputs[i] = (int)rng_below(&rng, cfg.vocab_size);
        targets[i] = (int)rng_below(&rng, cfg.vocab_size);
        /* the loss depends on the pad token's row through its lookups, which by design pass no
         * gradient (nn.Embedding's padding_idx): differences cannot check that row, so no input is it */
        if (cfg.has_pad_token && inputs[i] == cfg.pad_token_id) inputs[i] = (inputs[i] + 1) % cfg.vocab_size;
    }
    targets[3] = -1;
    /* the loss is the mean over the 9 targets that count: the sum of the single-target losses / 9
     * (the gradient and eval_loss share the divisor, so the finite differences cannot see it) */
    double sum_single = 0;
    for (int i = 0; i < B * T; i++) {
        if (targets[i] < 0) continue;
        int only[10];
        for (int k = 0; k < B * T; k++) only[k] = k == i ? targets[i] : -1;
        sum_single += be->ops->eval_loss(be, inputs, only, NULL);
    }
    const double mean = be->ops->eval_loss(be, inputs, targets, NULL);
    CHECK(fabs(mean - sum_single / 9) <= 1e-5 * fabs(mean), "loss %.7g, mean of the 9 counted targets %.7g", mean,
          sum_single / 9);
    be->ops->zero_grad(be);
    be->ops->train_micro_step(be, inputs, targets, NULL, 1.0f, 1);
    be->ops->read_grads(be, g);

        for (int k = 0; k < t.count; k++) {
        const ParamInfo *pi = &t.params[k];
        size_t n = is_vocab_row(pi) ? (size_t)cfg.vocab_size * cfg.dim : pi->numel;
        /* a scaled embedding (Gemma) moves the residual stream by its scale times the step: a step
         * divided by it moves the stream as far as the other tensors' steps do */
        const float h = pi->role == ROLE_WTE ? eps / gpt_embed_scale(&cfg) : eps;
        float *fd = malloc(n * 4);
        for (size_t j = 0; j < n; j++) {
            memcpy(q, p, t.total * 4);
            q[pi->offset + j] = p[pi->offset + j] + h;
            be->ops->write_state(be, q, NULL, NULL);
            double up = be->ops->eval_loss(be, inputs, targets, NULL);
            q[pi->offset + j] = p[pi->offset + j] - h;
            be->ops->write_state(be, q, NULL, NULL);
            double down = be->ops->eval_loss(be, inputs, targets, NULL);
            fd[j] = (float)((up - down) / (2.0 * h));
        }
        double num = 0, den = 0;
        for (size_t j = 0; j < n; j++) {
            double d = fd[j] - g[pi->offset + j];
            num += d * d;
            den += (double)fd[j] * fd[j];
        }
        double err_l2 = sqrt(num), ref_l2 = sqrt(den);
        CHECK(err_l2 <= 3e-3 * ref_l2 + 1e-5 * sqrt((double)n), "%s %s (%s output): |fd - grad| = %.3g, |fd| = %.3g",
              gpt_family_name(cfg.family), pi->name, output == OUTPUT_FUSED ? "fused" : "canonical", err_l2, ref_l2);
        free(fd);
    }
    /* Padded vocabulary rows are never a target and get no probability mass: zero gradient. */
    for (int k = 0; k < t.count; k++) {
        const ParamInfo *pi = &t.params[k];
        for (size_t j = (size_t)cfg.vocab_size * cfg.dim; is_vocab_row(pi) && j < pi->numel; j++)
            if (g[pi->offset + j] != 0.0f) {
                CHECK(0, "padded row %zu of %s received a gradient", j / cfg.dim, pi->name);
                break;
            }
    }
    free(q);
    free(g);
    free(p);
    be->ops->destroy(be);
    param_table_free(&t);
}

static const GPTConfig tiny_gpt2 = {.num_layers = 2, .num_heads = 2, .dim = 16, .max_seq_len = 8, .vocab_size = 37};

TEST(gradients_match_finite_differences_fused_output) {
    check_gradients(tiny_gpt2, OUTPUT_FUSED, 1e-2f);
}

TEST(gradients_match_finite_differences_canonical_output) {
    check_gradients(tiny_gpt2, OUTPUT_CANONICAL, 1e-2f);
}

/* QK-norm over heads of 6 small values curves the loss more than GPT-2's norms over 16: a step of
 * 1e-2 leaves 6e-3 of truncation error in the embedding's differences (measured), 3e-3 leaves less
 * than the tolerance. */
#define FAMILY_STEP 3e-3f

/* Two layers of 16 wide with 4 query heads of 6 sharing 2 key/value heads (NH·hd = 24 != C), an
 * MLP of 24; theta 100 makes the rotations turn within 5 positions. */
static GPTConfig tiny_family(ModelFamily family) {
    GPTConfig cfg = {.num_layers = 2, .num_heads = 4, .dim = 16, .max_seq_len = 8, .vocab_size = 37};
    gpt_family_defaults(&cfg, family);
    cfg.num_kv_heads = 2;
    cfg.head_dim = 6;
    cfg.ffn_dim = 24;
    cfg.rope.theta = 100.0;
    return cfg;
}

TEST(a_llama_with_grouped_query_attention_llama3_rope_scaling_and_an_untied_head_matches_finite_differences) {
    GPTConfig cfg = tiny_family(FAMILY_LLAMA);
    /* with hd 6 and theta 100 the wavelengths are 6.3, 29 and 135: one kept (< 32/4), one blended,
     * one divided by the factor (> 32/1) */
    cfg.rope = (RopeParams){.theta = 100.0, .scaling = ROPE_SCALING_LLAMA3, .factor = 8.0, .low_freq_factor = 1.0,
                            .high_freq_factor = 4.0, .original_max_position_embeddings = 32.0};
    cfg.untied_head = 1;
    check_gradients(cfg, OUTPUT_FUSED, FAMILY_STEP);
    check_gradients(cfg, OUTPUT_CANONICAL, FAMILY_STEP);
}

TEST(a_qwen3_with_qk_norm_and_a_tied_head_matches_finite_differences) {
    check_gradients(tiny_family(FAMILY_QWEN3), OUTPUT_FUSED, FAMILY_STEP);
}

TEST(a_qwen2_with_qkv_bias_matches_finite_differences) {
    check_gradients(tiny_family(FAMILY_QWEN2), OUTPUT_FUSED, FAMILY_STEP);
}

/* Three layers of 20 wide (NH·hd = 24 != C; bf16(sqrt 20) = 4.46875 scales the embedding): layers 0
 * and 2 slide with a window of 2 over T = 5 and turn by the local base 10, layer 1 is global with
 * theta 100 under linear scaling by 4; QK-norm and the four sandwich norms multiply by 1 + w;
 * scores are scaled by query_pre_attn_scalar 5, not hd. Its per-head norms have gradients of ~1e-2,
 * where steps below 4e-3 leave the fp32 loss's rounding above the tolerance (measured); at 5e-3
 * the worst tensor is at half of it. */
TEST(a_gemma3_with_sliding_and_global_layers_sandwich_norms_and_a_scaled_embedding_matches_finite_differences) {
    GPTConfig cfg = tiny_family(FAMILY_GEMMA3);
    cfg.num_layers = 3;
    cfg.dim = 20;
    cfg.sliding_window = 2;
    cfg.sliding_window_pattern = 0;
    cfg.layer_sliding[0] = cfg.layer_sliding[2] = 1;
    cfg.rope_local_theta = 10.0;
    cfg.rope = (RopeParams){.theta = 100.0, .scaling = ROPE_SCALING_LINEAR, .factor = 4.0};
    cfg.query_pre_attn_scalar = 5.0f;
    check_gradients(cfg, OUTPUT_FUSED, 5e-3f);
}
