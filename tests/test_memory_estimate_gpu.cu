/* The GPU memory estimate (model/memory_estimate.h) is the CUDA backend's own count: for GPT-2 at
 * awkward sizes, the backend's "activations and scratch" line is the estimate's activations plus
 * the kernels' scratch, with GELU kept and recomputed; its weights, master weights, gradients and
 * AdamW lines are the estimate's. */
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

static void expect_backend_counts_the_estimate(int heads, int dim, int vocab, int B, int T, int recompute) {
    GPTConfig cfg = {};
    cfg.num_layers = 3, cfg.num_heads = heads, cfg.dim = dim, cfg.max_seq_len = 128, cfg.vocab_size = vocab;
    gpt_config_finish(&cfg);
    ParamTable t;
    char err[ERR_LEN];
    REQUIRE(param_table_build(&t, &cfg, err) == 0, "%s", err);
    Backend *be = backend_cuda_create(&t, B, T, OUTPUT_FUSED, OUTPUT_FUSED_DEFAULT_BUDGET, recompute, 1, NULL, err);
    REQUIRE(be, "%s", err);
    MemoryItem items[MAX_MEMORY_ITEMS];
    const int n = be->ops->memory_items(be, items);
    const MemoryEstimate e = memory_estimate(&t, B, T, recompute);
    const int N = B * T;
    size_t scratch = encoder_backward_scratch_bytes(N, cfg.padded_vocab_size);
    scratch = largest(scratch, layernorm_backward_scratch_bytes(dim));
    const AttentionShape att = {B, T, heads, heads, dim / heads, 1.0f / sqrtf((float)(dim / heads)), 0};
    scratch = largest(scratch, attention_backward_scratch_bytes(&att));
    scratch = largest(scratch, bias_backward_scratch_bytes(4 * dim));
    scratch = largest(scratch, global_sumsq_scratch_bytes());
    scratch = (scratch + 255) / 256 * 256;
    const size_t acts = item_bytes(items, n, "activations and scratch");
    CHECK(acts == e.activations + scratch, "B=%d T=%d C=%d recompute %d: backend %zu bytes, estimate %zu + scratch %zu",
          B, T, dim, recompute, acts, e.activations, scratch);
    CHECK(item_bytes(items, n, "parameters (bf16)") == e.weights && item_bytes(items, n, "gradients") == e.grads &&
              item_bytes(items, n, "master weights") == e.master && item_bytes(items, n, "AdamW") == e.adamw,
          "the weights and optimizer lines differ from the estimate's");
    be->ops->destroy(be);
    param_table_free(&t);
}

TEST(gpu_memory_estimate_is_the_cuda_backends_count_for_gpt2) {
    expect_backend_counts_the_estimate(2, 128, 1000, 3, 37, 0);
    expect_backend_counts_the_estimate(2, 128, 1000, 3, 37, 1);
    expect_backend_counts_the_estimate(6, 384, 50257, 2, 97, 0);
    expect_backend_counts_the_estimate(3, 384, 777, 5, 64, 1);
}
