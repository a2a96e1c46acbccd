/* Documents packed end to end into a window (backend.h's positions) train as each document alone:
 * one window of several documents gives the loss and the gradient of the documents run one by one,
 * each as its own sequence from position 0, for every family (GPT-2's position table, Llama's
 * grouped heads, Qwen3's QK-norm, Gemma 3's sliding window and local RoPE). And the loader's split of
 * a stored window: positions restart at each marked token, and no document predicts the next one's
 * first token. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "data/loader.h"
#include "data/shard.h"
#include "model/backend.h"
#include "tests/test.h"
#include "tests/test_util.h"

enum { V = 41, T = 14, MAX_DOCS = 8 };

/* A tiny model of the family (Gemma's window of 3 is shorter than its documents). */
static GPTConfig tiny(ModelFamily family) {
    GPTConfig cfg = {.num_layers = 2, .num_heads = 4, .dim = 16, .max_seq_len = T, .vocab_size = V};
    if (family != FAMILY_GPT2) {
        gpt_family_defaults(&cfg, family);
        cfg.num_kv_heads = 2;
        cfg.head_dim = 8;
        cfg.ffn_dim = 24;
    }
    if (family == FAMILY_GEMMA3) {
        cfg.sliding_window = 3;
        cfg.sliding_window_pattern = 2;
        cfg.rope_local_theta = 10000.0;
    }
    gpt_config_finish(&cfg);
    return cfg;
}

/* The loss and gradient of two windows of documents (lengths in `docs`, each window's summing to T)
 * against the documents run alone: loss sums and gradients weighted by their targets. */
static void packed_equals_alone(ModelFamily family) {
    static const int docs[2][MAX_DOCS] = {{5, 1, 8}, {3, 4, 7}};
    GPTConfig cfg = tiny(family);
    ParamTable t;
    char err[ERR_LEN];
    REQUIRE(param_table_build(&t, &cfg, err) == 0, "%s", err);
    int in[2 * T], tg[2 * T], pos[2 * T];
    for (int i = 0; i < 2 * T; i++) in[i] = (i * 11 + 5) % V;
    int valid = 0;
    for (int b = 0, at = 0; b < 2; b++)
        for (int d = 0; d < MAX_DOCS && docs[b][d]; d++)
            for (int k = 0; k < docs[b][d]; k++, at++) {
                pos[at] = k;
                /* a document's last token predicts nothing (the next document's first) */
                tg[at] = k + 1 < docs[b][d] ? in[at + 1] : -1;
                valid += tg[at] >= 0;
            }
    Backend *packed = perturbed_cpu_backend(&t, 2, T, OUTPUT_FUSED);
    REQUIRE(packed, "backend");
    packed->ops->zero_grad(packed);
    const double mean = packed->ops->train_micro_step(packed, in, tg, pos, 1.0f, 1);
    float *want = calloc(t.total, sizeof *want), *g = malloc(t.total * sizeof *g);
    packed->ops->read_grads(packed, g);

    double sum = 0.0;
    float *alone = malloc(t.total * sizeof *alone);
    for (int b = 0, at = 0; b < 2; b++)
        for (int d = 0; d < MAX_DOCS && docs[b][d]; at += docs[b][d], d++) {
            const int n = docs[b][d];
            int count = 0;
            for (int k = 0; k < n; k++) count += tg[at + k] >= 0;
            if (!count) continue; /* a document of one token has no target */
            Backend *one = perturbed_cpu_backend(&t, 1, n, OUTPUT_FUSED);
            REQUIRE(one, "backend");
            one->ops->zero_grad(one);
            /* each document's mean weighs its targets' share of the window's */
            sum += one->ops->train_micro_step(one, in + at, tg + at, NULL, (float)count / valid, 1) * count;
            one->ops->read_grads(one, alone);
            for (size_t i = 0; i < t.total; i++) want[i] += alone[i];
            one->ops->destroy(one);
        }
    CHECK(fabs(mean * valid - sum) <= 1e-5 * fabs(sum), "%s: packed loss sum %.8f, the documents alone %.8f",
          gpt_family_name(family), mean * valid, sum);
    CHECK(rel_l2(g, want, t.total) < 1e-5, "%s: packed gradient %.3g off the documents alone (relative L2)",
          gpt_family_name(family), rel_l2(g, want, t.total));
    /* the same window without positions lets documents see each other: not the same, or the test
     * could not fail */
    packed->ops->zero_grad(packed);
    const double crossed = packed->ops->train_micro_step(packed, in, tg, NULL, 1.0f, 1);
    CHECK(fabs(crossed * valid - sum) > 1e-4 * fabs(sum), "%s: attending across documents gives the same loss",
          gpt_family_name(family));
    /* eval_loss takes them the same way */
    CHECK(fabs(packed->ops->eval_loss(packed, in, tg, pos) - mean) <= 1e-6 * fabs(mean), "%s: eval_loss differs",
          gpt_family_name(family));
    free(alone);
    free(g);
    free(want);
    packed->ops->destroy(packed);
    param_table_free(&t);
}

TEST(packed_documents_train_as_each_alone_gpt2) { packed_equals_alone(FAMILY_GPT2); }
TEST(packed_documents_train_as_each_alone_llama) { packed_equals_alone(FAMILY_LLAMA); }
TEST(packed_documents_train_as_each_alone_qwen3) { packed_equals_alone(FAMILY_QWEN3); }
TEST(packed_documents_train_as_each_alone_gemma3) { packed_equals_alone(FAMILY_GEMMA3); }

TEST(a_stored_window_splits_into_inputs_targets_and_positions_by_its_document_marks) {
    enum { W = 6 };
    /* documents start at 0, 2 and 5 (the last one's first token is the window's last, a target
     * only); token 3 is a prompt's (no loss) */
    const uint32_t stored[W + 1] = {SHARD_DOC_START | 7, 8, SHARD_DOC_START | 9, SHARD_NO_LOSS | 10, 11,
                                    SHARD_DOC_START | SHARD_NO_LOSS | 12, 13};
    int in[W], tg[W], pos[W];
    CHECK(loader_split_window(stored, W + 1, W, in, tg, pos) == 1, "a document starts inside the window");
    const int want_in[W] = {7, 8, 9, 10, 11, 12}, want_tg[W] = {8, -1, -1, 11, -1, 13}, want_pos[W] = {0, 1, 0, 1, 2, 0};
    for (int t = 0; t < W; t++)
        CHECK(in[t] == want_in[t] && tg[t] == want_tg[t] && pos[t] == want_pos[t],
              "token %d: input %d target %d position %d, want %d %d %d", t, in[t], tg[t], pos[t], want_in[t],
              want_tg[t], want_pos[t]);
    /* past the stored tokens: input 0, no target, positions running on */
    CHECK(loader_split_window(stored + 3, 2, W, in, tg, pos) == 0, "no document starts after the first token");
    CHECK(in[0] == 10 && in[1] == 11 && in[2] == 0 && tg[0] == 11 && tg[1] == -1 && tg[5] == -1 && pos[0] == 0 &&
              pos[5] == 5,
          "a short window: inputs %d %d %d targets %d %d %d positions %d %d", in[0], in[1], in[2], tg[0], tg[1],
          tg[5], pos[0], pos[5]);
}
