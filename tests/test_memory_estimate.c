/* The GPU memory estimate of every family, against hand counts at a tiny shape (B = 2, T = 8, so
 * N = 16 tokens; every buffer rounded up to 256 bytes, bf16 = 2 bytes), GPT-2 124M's figures pinned
 * as the CUDA backend has always given them, and the line `./train --device cpu` prints. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "common/host_memory.h"
#include "model/memory_estimate.h"
#include "tests/test.h"
#include "tests/test_util.h"

static size_t r(size_t bytes) {
    return (bytes + 255) / 256 * 256;
}

/* L = 2, NH = 4, C = 16, V = 37 (Vp 128), maxT = 8; for the other families NKV = 2, hd = 6 (so
 * NH·hd = 24 != C), F = 24. */
static ParamTable tiny_table(ModelFamily family) {
    GPTConfig cfg = {.num_layers = 2, .num_heads = 4, .dim = 16, .max_seq_len = 8, .vocab_size = 37};
    gpt_family_defaults(&cfg, family);
    if (family != FAMILY_GPT2) {
        cfg.num_kv_heads = 2;
        cfg.head_dim = 6;
        cfg.ffn_dim = 24;
    }
    ParamTable t;
    char err[ERR_LEN];
    if (param_table_build(&t, &cfg, err) != 0) test_fail(__FILE__, __LINE__, "%s", err);
    return t;
}

static void expect_estimate(const ParamTable *t, int recompute, size_t params, size_t activations, const char *what) {
    const MemoryEstimate e = memory_estimate(t, 2, 8, recompute, OPTIMIZER_STATE_FP32);
    CHECK(t->total == params, "%s: %zu parameters, %zu by hand", what, t->total, params);
    CHECK(e.weights == 2 * params && e.master == 4 * params && e.grads == 4 * params && e.adamw == 8 * params,
          "%s: weights %zu, master %zu, gradients %zu, AdamW %zu bytes for %zu parameters", what, e.weights, e.master,
          e.grads, e.adamw, params);
    CHECK(e.activations == activations, "%s: activations %zu bytes, %zu by hand", what, e.activations, activations);
    CHECK(memory_estimate_total(&e) == 18 * params + activations, "%s: total %zu", what, memory_estimate_total(&e));
}

/* Beside the layers, every family: embedding output, the two projections, the final norm's output,
 * backward gradients of the residual and final norm, inputs, targets and positions, loss (with the
 * objective and mean lse), norm, per-token losses, logits row. */
static size_t tail_common(void) {
    return r(16 * 16 * 2) + 2 * r(16 * 16 * 2) + r(16 * 16 * 2) + 2 * r(16 * 16 * 2) + 3 * r(16 * 4) + r(3 * 4) +
           r(8) + r(16 * 4) + r(128 * 2);
}

TEST(gpt2_memory_estimate_counts_layernorm_statistics_and_a_4c_gelu_mlp) {
    ParamTable t = tiny_table(FAMILY_GPT2);
    /* wte 128·16, wpe 8·16, lnf 2·16; per layer ln1 2·16, c_attn 48·16 + 48, c_proj 16·16 + 16, ln2 2·16,
     * c_fc 64·16 + 64, c_proj 16·64 + 16 */
    const size_t params =
        128 * 16 + 8 * 16 + 32 + 2 * (32 + 48 * 16 + 48 + 16 * 16 + 16 + 32 + 64 * 16 + 64 + 16 * 64 + 16);
    /* per layer: ln1 16·16, qkv 16·48, atty 16·16, residual 16·16, ln2 16·16, fc 16·64, gelu 16·64,
     * residual 16·16 (bf16); two LayerNorms' mean and 1/std, the log-sum-exp of 16 rows x 4 heads */
    const size_t layer = r(512) + r(1536) + r(512) + r(512) + r(512) + r(2048) + r(2048) + r(512) + 4 * r(64) + r(256);
    /* + the final norm's mean and 1/std; backward: fc 16·64, ln 16·16, atty 16·16, qkv 16·48 */
    const size_t rest = tail_common() + 2 * r(64) + r(2048) + r(512) + r(512) + r(1536);
    expect_estimate(&t, 0, params, 2 * layer + rest, "gpt2");
    /* recomputing GELU: no per-layer gelu, one shared 16·64 buffer */
    expect_estimate(&t, 1, params, 2 * (layer - r(2048)) + rest + r(2048), "gpt2, GELU recomputed");
    param_table_free(&t);
}

/* Llama: q, k, v of 4 + 2·2 heads of 6 as the projection wrote them, the attention's output, the
 * two residuals and SwiGLU's gate and up (2F); RMSNorm without bias keeps only 1/rms. The norms'
 * outputs and the gated product are recomputed in the backward. */
static size_t llama_layer_acts_f(size_t F) {
    return r(16 * 48 * 2) + r(16 * 24 * 2) + 2 * r(512) + r(16 * 2 * F * 2) + 2 * r(64) + r(256);
}
static size_t llama_layer_acts(void) {
    return llama_layer_acts_f(24);
}

/* + the final norm's 1/rms; backward: gate/up 16·2F, the gated product 16·F (unless the products
 * carry the activation), norm 16·16, attention output 16·24, q k v 16·48; the shared recompute
 * buffers of one layer's gated product (16·F) and norm output (16·16); cos and sin [8, 3] fp32 */
static size_t llama_rest_f(size_t F, int products) {
    return tail_common() + r(64) + r(16 * 2 * F * 2) + (products ? 0 : r(16 * F * 2)) + r(512) + r(16 * 24 * 2) +
           r(16 * 48 * 2) + r(16 * F * 2) + r(512) + 2 * r(8 * 3 * 4);
}
static size_t llama_rest(void) {
    return llama_rest_f(24, 0);
}

/* embed 128·16, final norm 16; per layer: input norm 16, q k v 48·16, o_proj 16·24, post norm 16,
 * gate and up 2F·16, down 16·F */
#define LLAMA_PARAMS_F(F) (128 * 16 + 16 + 2 * (16 + 48 * 16 + 16 * 24 + 16 + 2 * (F) * 16 + 16 * (F)))
#define LLAMA_PARAMS LLAMA_PARAMS_F(24)

TEST(llama_memory_estimate_counts_gqa_kv_heads_head_dim_and_swiglus_gate_and_up) {
    ParamTable t = tiny_table(FAMILY_LLAMA);
    expect_estimate(&t, 0, LLAMA_PARAMS, 2 * llama_layer_acts() + llama_rest(), "llama");
    /* the gated product is always recomputed: asking for it changes nothing */
    expect_estimate(&t, 1, LLAMA_PARAMS, 2 * llama_layer_acts() + llama_rest(), "llama, MLP recomputed");
    param_table_free(&t);
}

/* F a multiple of 128 and the MLP's weights 16-byte aligned in the flat buffer: the products carry
 * the activation (kernels/gated_mlp_fits.h) and the backward keeps no 16·F buffer for its gradient.
 * A Qwen2 whose q, k, v bias of 30 values puts every weight after it 4 bytes off keeps it. */
TEST(a_gated_mlp_whose_products_carry_the_activation_needs_no_buffer_for_its_gradient) {
    GPTConfig cfg = {.num_layers = 2, .num_heads = 4, .dim = 16, .max_seq_len = 8, .vocab_size = 37};
    gpt_family_defaults(&cfg, FAMILY_LLAMA);
    cfg.num_kv_heads = 2, cfg.head_dim = 6, cfg.ffn_dim = 128;
    ParamTable t;
    char err[ERR_LEN];
    REQUIRE(param_table_build(&t, &cfg, err) == 0, "%s", err);
    CHECK(gated_products_take_every_layer(&t), "a Llama with F = 128 should take the products");
    expect_estimate(&t, 0, LLAMA_PARAMS_F(128), 2 * llama_layer_acts_f(128) + llama_rest_f(128, 1),
                    "llama, F = 128 on the products");
    param_table_free(&t);
    ParamTable narrow = tiny_table(FAMILY_LLAMA);
    CHECK(!gated_products_take_every_layer(&narrow), "F = 24 is off the products' 128-column tiles");
    param_table_free(&narrow);
    GPTConfig q = {.num_layers = 2, .num_heads = 3, .dim = 16, .max_seq_len = 8, .vocab_size = 37};
    gpt_family_defaults(&q, FAMILY_QWEN2);
    q.num_kv_heads = 1, q.head_dim = 6, q.ffn_dim = 128;
    REQUIRE(param_table_build(&t, &q, err) == 0, "%s", err);
    CHECK(!gated_products_take_every_layer(&t), "a weight 4 bytes off 16 must keep the separate path");
    param_table_free(&t);
    q.num_heads = 4, q.num_kv_heads = 2; /* a bias of 48 values: every weight 16-byte aligned */
    REQUIRE(param_table_build(&t, &q, err) == 0, "%s", err);
    CHECK(gated_products_take_every_layer(&t), "a Qwen2 with a bias of 48 should take the products");
    param_table_free(&t);
}

TEST(a_llama_recomputing_its_gate_and_up_rows_keeps_one_layers_of_them) {
    ParamTable t = tiny_table(FAMILY_LLAMA);
    /* no gate/up rows (16·48) per layer; one shared buffer of them */
    expect_estimate(&t, 2, LLAMA_PARAMS, 2 * (llama_layer_acts() - r(16 * 48 * 2)) + llama_rest() + r(16 * 48 * 2),
                    "llama, gate and up recomputed");
    /* GPT-2 has no gate/up GEMM to run again: 2 is 1 */
    ParamTable g = tiny_table(FAMILY_GPT2);
    const MemoryEstimate one = memory_estimate(&g, 2, 8, 1, OPTIMIZER_STATE_FP32), two = memory_estimate(&g, 2, 8, 2, OPTIMIZER_STATE_FP32);
    CHECK(one.activations == two.activations, "gpt2: %zu bytes at 2, %zu at 1", two.activations, one.activations);
    param_table_free(&g);
    param_table_free(&t);
}

TEST(an_untied_head_counts_its_own_matrix_gradient_and_adamw_state) {
    GPTConfig cfg = {.num_layers = 2, .num_heads = 4, .dim = 16, .max_seq_len = 8, .vocab_size = 37};
    gpt_family_defaults(&cfg, FAMILY_LLAMA);
    cfg.num_kv_heads = 2, cfg.head_dim = 6, cfg.ffn_dim = 24, cfg.untied_head = 1;
    ParamTable t;
    char err[ERR_LEN];
    REQUIRE(param_table_build(&t, &cfg, err) == 0, "%s", err);
    expect_estimate(&t, 0, LLAMA_PARAMS + 128 * 16, 2 * llama_layer_acts() + llama_rest(), "llama, untied head");
    param_table_free(&t);
}

TEST(qwen2_memory_estimate_counts_the_qkv_bias) {
    ParamTable t = tiny_table(FAMILY_QWEN2);
    expect_estimate(&t, 0, LLAMA_PARAMS + 2 * 48, 2 * llama_layer_acts() + llama_rest(), "qwen2");
    param_table_free(&t);
}

TEST(qwen3_memory_estimate_counts_qk_norm_statistics_per_head_and_the_rotated_qkv_per_layer) {
    ParamTable t = tiny_table(FAMILY_QWEN3);
    /* + q_norm and k_norm (6 each) per layer; 1/rms per row and head (16 x 6) in fp32 and the rotated
     * q, k, v (16·48) per layer */
    const size_t layer = llama_layer_acts() + r(16 * 6 * 4);
    expect_estimate(&t, 0, LLAMA_PARAMS + 2 * 12, 2 * (layer + r(16 * 48 * 2)) + llama_rest(), "qwen3");
    param_table_free(&t);
}

TEST(a_qwen3_recomputing_its_rotated_qk_keeps_one_layers_of_them) {
    ParamTable t = tiny_table(FAMILY_QWEN3);
    const size_t layer = llama_layer_acts() + r(16 * 6 * 4);
    /* one layer's rotated q, k, v (16·48) shared by the layers */
    expect_estimate(&t, 1, LLAMA_PARAMS + 2 * 12, 2 * layer + llama_rest() + r(16 * 48 * 2),
                    "qwen3, rotated q and k recomputed");
    /* and the gate/up rows (16·48) too: one shared buffer of them */
    expect_estimate(&t, 2, LLAMA_PARAMS + 2 * 12,
                    2 * (layer - r(16 * 48 * 2)) + llama_rest() + r(16 * 48 * 2) + r(16 * 48 * 2),
                    "qwen3, rotated q and k and the gate/up rows recomputed");
    /* without QK-norm there is nothing rotated to keep: Llama's 0 and 1 are the same */
    ParamTable l = tiny_table(FAMILY_LLAMA);
    const MemoryEstimate zero = memory_estimate(&l, 2, 8, 0, OPTIMIZER_STATE_FP32),
                         one = memory_estimate(&l, 2, 8, 1, OPTIMIZER_STATE_FP32);
    CHECK(zero.activations == one.activations, "llama: %zu bytes at 0, %zu at 1", zero.activations, one.activations);
    param_table_free(&l);
    param_table_free(&t);
}

TEST(gemma3_memory_estimate_counts_the_sandwich_norms_projections_and_the_sliding_layers_rotary_tables) {
    ParamTable t = tiny_table(FAMILY_GEMMA3);
    /* + per layer q_norm, k_norm (6 each) and the two sandwich norms (16 each); per layer the two
     * projections' outputs kept for their norms (16·16 each) with their 1/rms, on Qwen3's QK-norm
     * layer with its rotated q, k, v; beside the layers, both layers sliding with their own base, a
     * second cos and sin [8, 3] */
    const size_t layer = llama_layer_acts() + r(16 * 6 * 4) + r(16 * 48 * 2) + 2 * r(512) + 2 * r(64);
    expect_estimate(&t, 0, LLAMA_PARAMS + 2 * (12 + 32), 2 * layer + llama_rest() + 2 * r(8 * 3 * 4), "gemma3");
    param_table_free(&t);
}

/* GPT-2 124M (d12) at B = 4, T = 1024 as the CUDA backend has always counted it: 124,475,904
 * parameters (Vp = 50304) and its activation arena without the kernels' scratch. */
TEST(gpt2_124m_memory_figures_stay_what_they_were) {
    GPTConfig cfg = {.num_layers = 12, .num_heads = 12, .dim = 768, .max_seq_len = 1024, .vocab_size = 50257};
    gpt_config_finish(&cfg);
    ParamTable t;
    char err[ERR_LEN];
    REQUIRE(param_table_build(&t, &cfg, err) == 0, "%s", err);
    MemoryEstimate e = memory_estimate(&t, 4, 1024, 0, OPTIMIZER_STATE_FP32);
    CHECK(t.total == 124475904u && e.weights == 248951808u && e.adamw == 995807232u, "parameters %zu", t.total);
    CHECK(e.activations == 1305676544u, "activations %zu bytes", e.activations);
    e = memory_estimate(&t, 4, 1024, 1, OPTIMIZER_STATE_FP32);
    CHECK(e.activations == 1028852480u, "activations with GELU recomputed %zu bytes", e.activations);
    param_table_free(&t);
}

/* bf16 optimizer state: no master copy and two bytes a moment, 8 bytes a parameter less; the
 * activations do not change. Llama-3.2-1B's 1.24B parameters at B 16: 9.9 GB less. */
TEST(bf16_optimizer_state_counts_no_master_and_bf16_moments) {
    ParamTable t = tiny_table(FAMILY_LLAMA);
    const MemoryEstimate f = memory_estimate(&t, 3, 8, 0, OPTIMIZER_STATE_FP32);
    const MemoryEstimate h = memory_estimate(&t, 3, 8, 0, OPTIMIZER_STATE_BF16);
    CHECK(h.master == 0 && h.adamw == 4 * t.total && h.grads == f.grads && h.weights == f.weights,
          "master %zu, m and v %zu for %zu parameters", h.master, h.adamw, t.total);
    CHECK(memory_estimate_total(&f) - memory_estimate_total(&h) == 8 * t.total && h.activations == f.activations,
          "saves %zu bytes, expected %zu", memory_estimate_total(&f) - memory_estimate_total(&h), 8 * t.total);
    CHECK(memory_estimate_largest_batch(&t, 8, 0, OPTIMIZER_STATE_BF16, 0, memory_estimate_total(&h)) == 3,
          "the largest batch does not count bf16 state");
    param_table_free(&t);
}

TEST(the_largest_micro_batch_is_the_largest_whose_estimate_fits) {
    ParamTable t = tiny_table(FAMILY_QWEN3);
    const MemoryEstimate five = memory_estimate(&t, 5, 8, 0, OPTIMIZER_STATE_FP32);
    const size_t extra = 1000, fits_five = memory_estimate_total(&five) + extra;
    CHECK(memory_estimate_largest_batch(&t, 8, 0, OPTIMIZER_STATE_FP32, extra, fits_five) == 5, "not -b 5 in exactly its estimate");
    CHECK(memory_estimate_largest_batch(&t, 8, 0, OPTIMIZER_STATE_FP32, extra, fits_five - 1) == 4, "not -b 4 one byte short of -b 5");
    const MemoryEstimate one = memory_estimate(&t, 1, 8, 0, OPTIMIZER_STATE_FP32);
    CHECK(memory_estimate_largest_batch(&t, 8, 0, OPTIMIZER_STATE_FP32, extra, memory_estimate_total(&one) + extra - 1) == 0,
          "a sequence fits in less than its estimate");
    param_table_free(&t);
}

/* `./train --device cpu` with a Llama prints the estimate of the same model and batch. */
TEST(a_cpu_run_of_a_llama_prints_its_gpu_memory_estimate_and_largest_micro_batch) {
    char train[600], val[600], args[1600], *out = NULL;
    snprintf(train, sizeof train, "%s/train.bin", test_tmpdir());
    snprintf(val, sizeof val, "%s/val.bin", test_tmpdir());
    REQUIRE(write_pattern_shard(train, 4096, 64, 1) == 0 && write_pattern_shard(val, 4096, 64, 2) == 0,
            "cannot write shards");
    snprintf(args, sizeof args,
             "--device cpu -e tiny -v 64 -b 4 -t 32 --max-seq-len 32 --family llama --kv-heads 1 --head-dim 48 "
             "--ffn-dim 192 -x 1 -i %s -j %s -o %s/run", train, val, test_tmpdir());
    const int rc = run_train(args, &out);
    REQUIRE(rc == 0, "the run failed (%d): %s", rc, out);
    GPTConfig cfg = {.num_layers = 2, .num_heads = 2, .dim = 128, .max_seq_len = 32, .vocab_size = 64};
    gpt_family_defaults(&cfg, FAMILY_LLAMA);
    cfg.num_kv_heads = 1, cfg.head_dim = 48, cfg.ffn_dim = 192;
    ParamTable t;
    char err[ERR_LEN], want[200];
    REQUIRE(param_table_build(&t, &cfg, err) == 0, "%s", err);
    const MemoryEstimate e = memory_estimate(&t, 4, 32, 0, OPTIMIZER_STATE_FP32);
    snprintf(want, sizeof want, "+ %.2f MB activations = %.2f MB", e.activations / 1e6,
             memory_estimate_total(&e) / 1e6);
    CHECK(strstr(out, "on a GPU (estimate)") && strstr(out, want), "no line with '%s': %s", want, out);
    /* the largest at the level the backend would fall back to, not at the level asked */
    snprintf(want, sizeof want, "the largest micro-batch on an 80 GB H100 is -b %d (",
             memory_estimate_largest_batch(&t, 32, 2, OPTIMIZER_STATE_FP32, MEMORY_RUNTIME_RESERVE, (size_t)80e9));
    CHECK(strstr(out, want), "no '%s': %s", want, out);
    free(out);
    param_table_free(&t);
}

/* Writes text to root/rel, creating its folders. */
static void put_file(const char *root, const char *rel, const char *text) {
    char path[1200], cmd[2600];
    snprintf(path, sizeof path, "%s/%s", root, rel);
    snprintf(cmd, sizeof cmd, "mkdir -p \"$(dirname '%s')\"", path);
    if (system(cmd) != 0) fprintf(stderr, "put_file: cannot create the folder of %s\n", path);
    FILE *f = fopen(path, "w");
    if (!f || fputs(text, f) < 0 || fclose(f) != 0) fprintf(stderr, "put_file: cannot write %s\n", path);
}

/* A cgroup's room: the tightest limit on this process's cgroup or a folder above it, less what it
 * holds that is not page cache the kernel can drop; v1 found by the memory controller's line. */
TEST(the_cgroup_room_is_the_tightest_limit_above_this_process_less_what_cannot_be_reclaimed) {
    char root[900], self[900];
    snprintf(root, sizeof root, "%s/cg2", test_tmpdir());
    snprintf(self, sizeof self, "%s/self_cgroup_v2", test_tmpdir());
    put_file(test_tmpdir(), "self_cgroup_v2", "0::/pod/job\n");
    put_file(root, "pod/memory.max", "1000000\n");
    put_file(root, "pod/memory.current", "700000\n");
    put_file(root, "pod/memory.stat", "anon 400000\nfile 300000\ninactive_file 250000\nactive_file 50000\n");
    put_file(root, "pod/job/memory.max", "max\n");
    put_file(root, "pod/job/memory.current", "650000\n");
    unsigned long long room = host_memory_cgroup_room(root, self);
    CHECK(room == 550000, "v2, limit on the parent: room %llu, not 1000000 - (700000 - 250000)", room);
    /* a tighter limit on the process's own cgroup wins */
    put_file(root, "pod/job/memory.max", "800000\n");
    room = host_memory_cgroup_room(root, self);
    CHECK(room == 150000, "v2, tighter own limit: room %llu, not 800000 - 650000", room);
    /* no limit anywhere */
    put_file(root, "pod/job/memory.max", "max\n");
    put_file(root, "pod/memory.max", "max\n");
    room = host_memory_cgroup_room(root, self);
    CHECK(room == 0, "v2 without a limit: room %llu", room);

    snprintf(root, sizeof root, "%s/cg1", test_tmpdir());
    snprintf(self, sizeof self, "%s/self_cgroup_v1", test_tmpdir());
    put_file(test_tmpdir(), "self_cgroup_v1", "5:cpu,cpuacct:/elsewhere\n4:memory:/batch/7\n0::/\n");
    put_file(root, "memory/memory.limit_in_bytes", "9223372036854771712\n");
    put_file(root, "memory/batch/7/memory.limit_in_bytes", "2000000\n");
    put_file(root, "memory/batch/7/memory.usage_in_bytes", "1500000\n");
    put_file(root, "memory/batch/7/memory.stat", "inactive_file 10\ntotal_inactive_file 900000\n");
    room = host_memory_cgroup_room(root, self);
    CHECK(room == 1400000, "v1: room %llu, not 2000000 - (1500000 - 900000)", room);
}
