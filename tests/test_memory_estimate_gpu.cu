/* The GPU memory estimate (model/memory_estimate.h) is the CUDA backend's own count: for GPT-2 (GELU
 * kept and recomputed), Llama, Qwen2, Qwen3 and Gemma 3 at awkward sizes, the backend's "activations and
 * scratch" line is the estimate's activations plus the kernels' scratch; its weights, master
 * weights, gradients and AdamW lines are the estimate's. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/err.h"
#include "kernels/kernels.h"
#include "model/backend.h"
#include "model/memory_estimate.h"
#include "tests/test.h"

static size_t largest(size_t a, size_t b) {
    return a > b ? a : b;
}

static size_t item_bytes(const MemoryItem *items, int n, const char *prefix) {
    for (int i = 0; i < n; i++)
        if (strncmp(items[i].what, prefix, strlen(prefix)) == 0) return items[i].bytes;
    return 0;
}

/* The backend's memory lines against the estimate for cfg at B x T; the scratch is the largest of
 * the kernels' needs that the family's step calls. */
static void expect_config_counts_the_estimate(const GPTConfig *cfg, int B, int T, int recompute) {
    ParamTable t;
    char err[ERR_LEN];
    REQUIRE(param_table_build(&t, cfg, err) == 0, "%s", err);
    Backend *be = backend_cuda_create(&t, B, T, OUTPUT_FUSED, OUTPUT_FUSED_DEFAULT_BUDGET, recompute, OPTIMIZER_STATE_FP32, 1, NULL, NULL, err);
    REQUIRE(be, "%s", err);
    MemoryItem items[MAX_MEMORY_ITEMS];
    const int n = be->ops->memory_items(be, items);
    const MemoryEstimate e = memory_estimate(&t, B, T, recompute, OPTIMIZER_STATE_FP32);
    const int N = B * T, C = cfg->dim, hd = cfg->head_dim, rope = cfg->positions == POS_ROPE;
    const AttentionShape att = {B, T, cfg->num_heads, cfg->num_kv_heads, hd, 1.0f / sqrtf((float)hd), 0, NULL};
    size_t scratch = encoder_backward_scratch_bytes(N, cfg->padded_vocab_size);
    scratch = largest(scratch, attention_backward_scratch_bytes(&att));
    scratch = largest(scratch, global_sumsq_scratch_bytes());
    if (rope) {
        const RopeShape rs = {B, T, cfg->num_heads, cfg->num_kv_heads, hd, cfg->norm_eps, 0, NULL};
        scratch = largest(scratch, rmsnorm_backward_scratch_bytes(C));
        scratch = largest(scratch, rope_backward_scratch_bytes(&rs));
        if (cfg->qkv_bias)
            scratch = largest(scratch, bias_backward_scratch_bytes((cfg->num_heads + 2 * cfg->num_kv_heads) * hd));
    } else {
        scratch = largest(scratch, layernorm_backward_scratch_bytes(C));
        scratch = largest(scratch, bias_backward_scratch_bytes(4 * C));
    }
    scratch = (scratch + 255) / 256 * 256;
    const size_t acts = item_bytes(items, n, "activations and scratch");
    CHECK(acts == e.activations + scratch,
          "%s B=%d T=%d C=%d recompute %d: backend %zu bytes, estimate %zu + scratch %zu",
          gpt_family_name(cfg->family), B, T, C, recompute, acts, e.activations, scratch);
    CHECK(item_bytes(items, n, "parameters (bf16)") == e.weights && item_bytes(items, n, "gradients") == e.grads &&
              item_bytes(items, n, "master weights") == e.master && item_bytes(items, n, "AdamW") == e.adamw,
          "the weights and optimizer lines differ from the estimate's");
    be->ops->destroy(be);
    param_table_free(&t);
}

static void expect_backend_counts_the_estimate(int heads, int dim, int vocab, int B, int T, int recompute) {
    GPTConfig cfg = {};
    cfg.num_layers = 3, cfg.num_heads = heads, cfg.dim = dim, cfg.max_seq_len = 128, cfg.vocab_size = vocab;
    gpt_config_finish(&cfg);
    expect_config_counts_the_estimate(&cfg, B, T, recompute);
}

/* Three layers of a RoPE family: its HF defaults, then the shape. */
static GPTConfig family_config(ModelFamily family, int heads, int kv_heads, int head_dim, int dim, int ffn, int vocab) {
    GPTConfig cfg = {};
    cfg.num_layers = 3, cfg.num_heads = heads, cfg.dim = dim, cfg.max_seq_len = 128, cfg.vocab_size = vocab;
    gpt_family_defaults(&cfg, family);
    cfg.num_kv_heads = kv_heads, cfg.head_dim = head_dim, cfg.ffn_dim = ffn;
    gpt_config_finish(&cfg);
    return cfg;
}

TEST(gpu_memory_estimate_is_the_cuda_backends_count_for_gpt2) {
    expect_backend_counts_the_estimate(2, 128, 1000, 3, 37, 0);
    expect_backend_counts_the_estimate(2, 128, 1000, 3, 37, 1);
    expect_backend_counts_the_estimate(6, 384, 50257, 2, 97, 0);
    expect_backend_counts_the_estimate(3, 384, 777, 5, 64, 1);
}

TEST(gpu_memory_estimate_is_the_cuda_backends_count_for_llama_qwen2_and_qwen3) {
    GPTConfig llama = family_config(FAMILY_LLAMA, 4, 2, 64, 192, 328, 1000);
    llama.untied_head = 1;
    expect_config_counts_the_estimate(&llama, 3, 37, 0);
    GPTConfig qwen2 = family_config(FAMILY_QWEN2, 2, 2, 64, 128, 344, 777);
    expect_config_counts_the_estimate(&qwen2, 2, 97, 1);
    /* Qwen3's heads of 128 over a narrower model, 2 query heads per key/value head */
    GPTConfig qwen3 = family_config(FAMILY_QWEN3, 4, 2, 128, 256, 776, 50257);
    expect_config_counts_the_estimate(&qwen3, 5, 64, 0);
    expect_config_counts_the_estimate(&qwen3, 4, 37, 1); /* the rotated q and k recomputed */
    expect_config_counts_the_estimate(&qwen3, 3, 37, 2); /* the gate/up rows recomputed too */
}

TEST(gpu_memory_estimate_is_the_cuda_backends_count_for_gemma3) {
    /* Gemma 3's defaults: sandwich norms, and the sliding layers (all three of three: the sixth
     * layer is the first global one) with their own RoPE base, a second pair of tables */
    GPTConfig gemma = family_config(FAMILY_GEMMA3, 4, 2, 64, 192, 328, 1000);
    expect_config_counts_the_estimate(&gemma, 3, 37, 0);
    expect_config_counts_the_estimate(&gemma, 2, 97, 2);
    gemma.rope_local_theta = 0; /* one pair of tables */
    expect_config_counts_the_estimate(&gemma, 5, 64, 0);
}
