/* The CUDA backend's vocabulary-parallel output layer (model/dist/vocab_parallel.h) in a world of one:
 * the collectives are copies and the one slice is the whole vocabulary, so every step must be the
 * unsplit backend's on the streaming path bit for bit (the slice layer runs the same kernels and
 * GEMMs; its fp32 dH is rounded once, as the whole layer rounds its own; a tied head's slice
 * embedding is encoder_forward's arithmetic and its backward encoder_backward's order), the
 * gradient norm to fp32 rounding (its squares are summed in two parts). What this pins down is the
 * backend's side: the head in its own buffers (a tied head's also the embedding's, the other rows
 * moved down in the flat buffers), its AdamW plan, its share of the gradient norm, and checkpoints
 * gathered and split again. Two ranks need two GPUs: dev/check/multigpu_check.sh vocabpar. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "model/backend.h"
#include "model/dist/dist.h"
#include "tests/test.h"
#include "tests/test_util.h"

enum { VB = 3, VT = 37, VSTEPS = 3 };

/* A two-layer model of a family, of awkward widths, over 1000 words (Vp 1024): its HF defaults,
 * then the shape. */
static GPTConfig family_model(ModelFamily family, int untied) {
    GPTConfig cfg = {};
    cfg.num_layers = 2, cfg.num_heads = 4, cfg.dim = 192, cfg.max_seq_len = 64, cfg.vocab_size = 1000;
    gpt_family_defaults(&cfg, family);
    if (family == FAMILY_GPT2) cfg.num_heads = 3; /* heads of 64, which the CUDA attention has */
    else cfg.num_kv_heads = 2, cfg.head_dim = 64, cfg.ffn_dim = 328;
    cfg.untied_head = untied;
    if (family == FAMILY_GEMMA3) {
        cfg.sliding_window_pattern = 0, cfg.layer_sliding[0] = 1, cfg.sliding_window = 8;
        cfg.pad_token_id = 3;
        cfg.logit_softcap = 0.0f; /* the slice layer's plain cross-entropy */
    }
    gpt_config_finish(&cfg);
    return cfg;
}

/* Inputs and targets of VSTEPS micro-batches, some targets ignored, the pad token (where the model
 * has one) among the inputs. */
static void batches(int *inputs, int *targets, const GPTConfig *cfg, uint64_t seed) {
    Rng rng;
    rng_seed(&rng, seed);
    const int pad = gpt_embed_pad_token(cfg);
    for (size_t i = 0; i < (size_t)VSTEPS * VB * VT; i++) {
        inputs[i] = pad >= 0 && i % 11 == 5 ? pad : (int)rng_below(&rng, (uint32_t)cfg->vocab_size);
        targets[i] = i % 13 == 4 ? -1 : (int)rng_below(&rng, (uint32_t)cfg->vocab_size);
    }
}

static Backend *create(const ParamTable *t, Dist *one, int split, OptimizerState state, char *err) {
    DataParallel dp = {};
    dp.dist = one, dp.vocab_parallel = split;
    /* fused budget 0: the whole layer on the streaming path, which the slice layer runs */
    return backend_cuda_create(t, VB, VT, OUTPUT_FUSED, 0, 0, state, 77, NULL, split ? &dp : NULL, err);
}

static size_t bits_differ(const float *a, const float *b, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += memcmp(&a[i], &b[i], 4) != 0;
    return k;
}

/* bf16 state: the slice's random bits are keyed by the whole table's index, so the split run's
 * state is the unsplit run's bit for bit too. */
static void check_world_of_one(const GPTConfig *model, OptimizerState state = OPTIMIZER_STATE_FP32) {
    GPTConfig cfg = *model;
    ParamTable t;
    char err[ERR_LEN];
    REQUIRE(param_table_build(&t, &cfg, err) == 0, "%s", err);
    const size_t P = t.total, n = (size_t)VB * VT;
    int *inputs = (int *)malloc(VSTEPS * n * sizeof(int)), *targets = (int *)malloc(VSTEPS * n * sizeof(int));
    float *ga = (float *)malloc(P * 4), *gb = (float *)malloc(P * 4);
    float *sa[3], *sb[3];
    for (int i = 0; i < 3; i++) sa[i] = (float *)malloc(P * 4), sb[i] = (float *)malloc(P * 4);
    batches(inputs, targets, &cfg, 31);
    Dist one = {};
    one.world = 1;
    Backend *a = create(&t, &one, 0, state, err);
    REQUIRE(a, "unsplit backend: %s", err);
    Backend *b = create(&t, &one, 1, state, err);
    REQUIRE(b, "vocabulary-parallel backend: %s", err);
    const ParamInfo *head = param_whole(&t, head_role(&cfg));
    for (int k = 0; k < VSTEPS; k++) {
        Backend *be[2] = {a, b};
        float loss[2];
        double sumsq[2];
        for (int j = 0; j < 2; j++) {
            be[j]->ops->zero_grad(be[j]);
            loss[j] = be[j]->ops->train_micro_step(be[j], inputs + k * n, targets + k * n, NULL, 1.0f, 1);
            be[j]->ops->reduce_grads(be[j]);
            sumsq[j] = be[j]->ops->grad_sumsq(be[j]);
        }
        CHECK(memcmp(&loss[0], &loss[1], 4) == 0, "step %d: loss %.9g, unsplit %.9g", k + 1, loss[1], loss[0]);
        /* the split layer averages the rows' lse on the host in double */
        CHECK(fabsf(a->last_mean_lse - b->last_mean_lse) <= 1e-6f * fabsf(a->last_mean_lse) && a->last_mean_lse > 0,
              "step %d: mean lse %.9g, unsplit %.9g", k + 1, b->last_mean_lse, a->last_mean_lse);
        /* the same squares summed in two parts (body, head): global_sumsq accumulates each thread's
         * and each block's partial in fp32, so regrouping them moves the total by fp32 rounding
         * (2.2e-9 relative measured on the H100); a head left out or counted twice moves it by its share */
        CHECK(sumsq[0] > 0 && fabs(sumsq[0] - sumsq[1]) <= 1e-6 * sumsq[0], "step %d: grad sumsq %.17g, unsplit %.17g",
              k + 1, sumsq[1], sumsq[0]);
        a->ops->read_grads(a, ga);
        b->ops->read_grads(b, gb);
        size_t head_differ = bits_differ(ga + head->offset, gb + head->offset, head->numel);
        size_t all_differ = bits_differ(ga, gb, P);
        CHECK(all_differ == 0, "step %d: %zu of %zu %s and %zu of %zu other gradients differ", k + 1, head_differ,
              head->numel, head->name, all_differ - head_differ, P - head->numel);
        CHECK(max_abs(gb + head->offset, head->numel) > 0, "step %d: the head's gradient is all zero", k + 1);
        AdamWStep st = {1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, k + 1};
        a->ops->adamw_update(a, &st);
        b->ops->adamw_update(b, &st);
    }
    a->ops->read_state(a, sa[0], sa[1], sa[2]);
    b->ops->read_state(b, sb[0], sb[1], sb[2]);
    const char *what[3] = {"master weights", "AdamW m", "AdamW v"};
    for (int i = 0; i < 3; i++)
        CHECK(bits_differ(sa[i], sb[i], P) == 0, "%s: %zu of %zu differ after %d steps", what[i],
              bits_differ(sa[i], sb[i], P), P, VSTEPS);
    CHECK(max_abs(sb[1] + head->offset, head->numel) > 0, "the head's AdamW m is all zero");
    /* the memory table names the slice: the whole head here, bf16 weights and four fp32 copies (bf16
     * state: the fp32 gradient and two bf16 moments); a tied head's replica is gone from the flat buffers */
    const size_t value_bytes = state == OPTIMIZER_STATE_BF16 ? 10 : 18;
    MemoryItem items[MAX_MEMORY_ITEMS];
    const int count = b->ops->memory_items(b, items);
    size_t slice_bytes = 0, params_bytes = 0;
    for (int i = 0; i < count; i++) {
        if (strstr(items[i].what, "head slice")) slice_bytes = items[i].bytes;
        if (strstr(items[i].what, "parameters (bf16)")) params_bytes = items[i].bytes;
    }
    CHECK(slice_bytes == head->numel * value_bytes, "memory table: head slice %zu bytes, expected %zu", slice_bytes,
          head->numel * value_bytes);
    CHECK(params_bytes == (P - head->numel) * 2, "memory table: parameters %zu bytes, expected %zu without the head",
          params_bytes, (P - head->numel) * 2);
    /* the state written into a fresh split backend is the one read: the next step matches */
    Backend *c = create(&t, &one, 1, state, err);
    REQUIRE(c, "vocabulary-parallel backend: %s", err);
    c->ops->write_state(c, sb[0], sb[1], sb[2]);
    float eb = b->ops->eval_loss(b, inputs, targets, NULL), ec = c->ops->eval_loss(c, inputs, targets, NULL),
          ea = a->ops->eval_loss(a, inputs, targets, NULL);
    CHECK(memcmp(&ea, &eb, 4) == 0 && memcmp(&eb, &ec, 4) == 0, "eval loss: split %.9g, resumed %.9g, unsplit %.9g",
          eb, ec, ea);
    c->ops->destroy(c);
    b->ops->destroy(b);
    a->ops->destroy(a);
    for (int i = 0; i < 3; i++) free(sa[i]), free(sb[i]);
    free(gb), free(ga), free(targets), free(inputs);
    param_table_free(&t);
}

TEST(a_world_of_one_vocab_parallel_run_is_the_unsplit_streaming_run_bitwise) {
    GPTConfig cfg = family_model(FAMILY_LLAMA, 1);
    check_world_of_one(&cfg);
}

/* The tied heads: GPT-2 (learned positions added by the slice's owner, wpe's gradient data
 * parallel), Qwen3, and Gemma 3 (the embedding scaled, the pad token's row without gradient). */
TEST(a_world_of_one_vocab_parallel_run_with_a_tied_gpt2_head_is_the_unsplit_run_bitwise) {
    GPTConfig cfg = family_model(FAMILY_GPT2, 0);
    check_world_of_one(&cfg);
}

TEST(a_world_of_one_vocab_parallel_run_with_a_tied_qwen3_head_is_the_unsplit_run_bitwise) {
    GPTConfig cfg = family_model(FAMILY_QWEN3, 0);
    check_world_of_one(&cfg);
}

TEST(a_world_of_one_vocab_parallel_run_with_a_tied_gemma3_head_is_the_unsplit_run_bitwise) {
    GPTConfig cfg = family_model(FAMILY_GEMMA3, 0);
    check_world_of_one(&cfg);
}

TEST(a_world_of_one_vocab_parallel_run_with_bf16_optimizer_state_is_the_unsplit_run_bitwise) {
    GPTConfig untied = family_model(FAMILY_LLAMA, 1), tied = family_model(FAMILY_QWEN3, 0);
    check_world_of_one(&untied, OPTIMIZER_STATE_BF16);
    check_world_of_one(&tied, OPTIMIZER_STATE_BF16);
}
