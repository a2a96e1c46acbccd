/* The CUDA backend against the CPU reference backend on a small GPT-2, and on tiny Llama, Qwen2,
 * Qwen3 and Gemma 3 models: same init, same batches.
 * bf16 weights and activations make the GPU differ from the fp32 CPU by ~1e-2 relative; the
 * tolerances below say so. Also: bitwise determinism, and a resume from saved state that repeats
 * the uninterrupted run's losses bit for bit. Both output layers. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "kernels/cuda_check.h"
#include "kernels/output_layer.h"
#include "kernels/kernels.h"
#include "model/backend.h"
#include "model/train/eval.h"
#include "tests/test.h"
#include "tests/test_util.h"

typedef struct {
    ParamTable table;
    int B, T;
    int *inputs, *targets; /* steps x B x T */
} Setup;

/* A two-layer GPT-2 of the given width. */
static GPTConfig gpt2_config(int heads, int dim, int vocab) {
    GPTConfig cfg = {};
    cfg.num_layers = 2, cfg.num_heads = heads, cfg.dim = dim, cfg.max_seq_len = 64, cfg.vocab_size = vocab;
    gpt_config_finish(&cfg);
    return cfg;
}

static void setup_config(Setup *s, const GPTConfig *cfg, int B, int T, int steps, uint64_t seed) {
    const int vocab = cfg->vocab_size;
    char err[ERR_LEN];
    if (param_table_build(&s->table, cfg, err) != 0) fprintf(stderr, "%s\n", err);
    s->B = B;
    s->T = T;
    size_t n = (size_t)steps * B * T;
    s->inputs = (int *)malloc(n * sizeof(int));
    s->targets = (int *)malloc(n * sizeof(int));
    Rng rng;
    rng_seed(&rng, seed);
    /* a learnable sequence, so the loss moves during the 10 steps */
    for (size_t i = 0; i < n; i++) {
        s->inputs[i] = (int)((i * 7 + rng_below(&rng, 3)) % vocab);
        /* a model with a pad token sees it now and then, as padded batches have it */
        if (cfg->has_pad_token && i % 13 == 4) s->inputs[i] = cfg->pad_token_id;
        s->targets[i] = (i % 11 == 5) ? -1 : (int)((s->inputs[i] * 5 + 3) % vocab);
    }
}

static void setup(Setup *s, int heads, int dim, int vocab, int B, int T, int steps, uint64_t seed) {
    GPTConfig cfg = gpt2_config(heads, dim, vocab);
    setup_config(s, &cfg, B, T, steps, seed);
}

static void teardown(Setup *s) {
    free(s->inputs);
    free(s->targets);
    param_table_free(&s->table);
}

static float step(Backend *be, Setup *s, int k, int t_step) {
    size_t off = (size_t)k * s->B * s->T;
    be->ops->zero_grad(be);
    float loss = be->ops->train_micro_step(be, s->inputs + off, s->targets + off, NULL, 1.0f, 1);
    if (t_step > 0) {
        AdamWStep a = {1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, t_step};
        be->ops->adamw_update(be, &a);
    }
    return loss;
}

/* One step's gradients of every tensor, then the loss of each of 10 AdamW steps, GPU against CPU. */
static void compare_config_with_cpu(const GPTConfig *cfg, OutputKind output, int B, int T,
                                    size_t fused_budget = OUTPUT_FUSED_DEFAULT_BUDGET, int recompute_gelu = 0,
                                    OptimizerState state = OPTIMIZER_STATE_FP32) {
    Setup s;
    setup_config(&s, cfg, B, T, 10, 3);
    char err[ERR_LEN];
    Backend *cpu = backend_cpu_create(&s.table, B, T, output, state, 42, NULL, err);
    Backend *gpu = backend_cuda_create(&s.table, B, T, output, fused_budget, recompute_gelu, state, 42, NULL, NULL, err);
    REQUIRE(cpu && gpu, "%s", err);
    if (state == OPTIMIZER_STATE_BF16) {
        /* no master copy: both start from the init rounded to bf16, the same bits */
        size_t P = s.table.total;
        float *wc = (float *)malloc(P * 4), *wg = (float *)malloc(P * 4);
        cpu->ops->read_state(cpu, wc, NULL, NULL);
        gpu->ops->read_state(gpu, wg, NULL, NULL);
        CHECK(memcmp(wc, wg, P * 4) == 0, "bf16 state: the initial weights differ between CPU and GPU");
        free(wc);
        free(wg);
    }
    if (recompute_gelu) {
        MemoryItem items[MAX_MEMORY_ITEMS];
        int n = gpu->ops->memory_items(gpu, items), found = 0, rotated = 0;
        for (int i = 0; i < n; i++) found |= strstr(items[i].what, "recomputed") != NULL;
        for (int i = 0; i < n; i++) rotated |= strstr(items[i].what, "rotated q and k") != NULL;
        CHECK(found, "the backend did not take the recompute path");
        CHECK(rotated == cfg->qk_norm, "the rotated q and k: recomputed %d, QK-norm %d", rotated, cfg->qk_norm);
    }
    float lc = step(cpu, &s, 0, 0), lg = step(gpu, &s, 0, 0);
    CHECK(fabsf(lg - lc) <= 1e-2f * fabsf(lc), "loss GPU %.6f CPU %.6f", lg, lc);
    /* the step line's parts: every part took time, and reading them starts the next count at 0 */
    double part[3], again[3];
    gpu->ops->phase_ms(gpu, part);
    gpu->ops->phase_ms(gpu, again);
    CHECK(part[0] > 0 && part[1] > 0 && part[2] > 0 && part[0] + part[1] + part[2] < 60e3,
          "step parts %.3g %.3g %.3g ms", part[0], part[1], part[2]);
    CHECK(again[0] == 0 && again[1] == 0 && again[2] == 0, "step parts not reset when read");
    size_t P = s.table.total;
    float *gc = (float *)malloc(P * 4), *gg = (float *)malloc(P * 4);
    cpu->ops->read_grads(cpu, gc);
    gpu->ops->read_grads(gpu, gg);
    double worst = 0;
    const char *worst_name = "";
    for (int i = 0; i < s.table.count; i++) {
        const ParamInfo *p = &s.table.params[i];
        double e = rel_l2(gg + p->offset, gc + p->offset, p->numel);
        if (e > worst) worst = e, worst_name = p->name;
        /* bf16 activations: per-tensor gradients within 5e-2 relative L2 (measured ~1e-2) */
        CHECK(e <= 5e-2, "%s: gradient relative L2 error %.3g", p->name, e);
    }
    fprintf(stderr, "[worst gradient error %.3g in %s] ", worst, worst_name);
    /* the two track through 10 AdamW steps */
    for (int k = 1; k < 10; k++) {
        lc = step(cpu, &s, k, k);
        lg = step(gpu, &s, k, k);
        CHECK(fabsf(lg - lc) <= 2e-2f * fabsf(lc), "step %d: loss GPU %.6f CPU %.6f", k, lg, lc);
    }
    CHECK(fabsf(lg - lc) <= 2e-2f * fabsf(lc), "after 10 steps: loss GPU %.6f CPU %.6f", lg, lc);
    free(gc);
    free(gg);
    cpu->ops->destroy(cpu);
    gpu->ops->destroy(gpu);
    teardown(&s);
}

static void compare_with_cpu(OutputKind output, int heads, int dim, int vocab, int B, int T,
                             size_t fused_budget = OUTPUT_FUSED_DEFAULT_BUDGET, int recompute_gelu = 0) {
    GPTConfig cfg = gpt2_config(heads, dim, vocab);
    compare_config_with_cpu(&cfg, output, B, T, fused_budget, recompute_gelu);
}

TEST(backend_cuda_refuses_a_gpt2_wider_than_its_layernorm_backward_at_creation) {
    /* past layernorm_backward_max_dim the kernel's shared memory would fail at the first backward,
     * after every weight was allocated and the forward had run */
    const int widest = layernorm_backward_max_dim();
    CHECK(widest >= 2048, "the LayerNorm backward takes at most C = %d", widest);
    const int dim = (widest / 64 + 1) * 64;
    GPTConfig cfg = gpt2_config(dim / 64, dim, 1000);
    ParamTable t;
    char err[ERR_LEN] = "";
    REQUIRE(param_table_build(&t, &cfg, err) == 0, "%s", err);
    Backend *gpu = backend_cuda_create(&t, 1, 8, OUTPUT_FUSED, OUTPUT_FUSED_DEFAULT_BUDGET, 0, OPTIMIZER_STATE_FP32, 42, NULL, NULL, err);
    char want[96];
    snprintf(want, sizeof want, "runs up to --dim %d on this GPU", widest);
    CHECK(!gpu && strstr(err, want) && !strchr(err, '\n'), "--dim %d: %s", dim, err);
    if (gpu) gpu->ops->destroy(gpu);
    param_table_free(&t);
}

TEST(backend_cuda_refuses_more_sequences_times_heads_than_its_attention_grid_at_creation) {
    GPTConfig cfg = gpt2_config(4, 256, 1000);
    ParamTable t;
    char err[ERR_LEN] = "";
    REQUIRE(param_table_build(&t, &cfg, err) == 0, "%s", err);
    Backend *gpu = backend_cuda_create(&t, 16384, 1, OUTPUT_FUSED, OUTPUT_FUSED_DEFAULT_BUDGET, 0, OPTIMIZER_STATE_FP32, 42, NULL, NULL, err);
    CHECK(!gpu && strstr(err, "-b 16384 x 4 heads is 65536") && !strchr(err, '\n'), "B 16384 x 4 heads: %s", err);
    if (gpu) gpu->ops->destroy(gpu);
    param_table_free(&t);
}

TEST(backend_cuda_matches_cpu_fused_head64_odd_sizes) {
    compare_with_cpu(OUTPUT_FUSED, 2, 128, 1000, 3, 37);
}

TEST(backend_cuda_matches_cpu_canonical_head64) {
    compare_with_cpu(OUTPUT_CANONICAL, 2, 128, 1000, 3, 37);
}

TEST(backend_cuda_matches_cpu_fused_streaming) {
    /* --logits-mb 0: the fused layer's streaming path */
    compare_with_cpu(OUTPUT_FUSED, 2, 128, 1000, 5, 60, 0);
}

TEST(backend_cuda_matches_cpu_fused_head128) {
    compare_with_cpu(OUTPUT_FUSED, 2, 256, 515, 2, 64);
}

TEST(backend_cuda_matches_cpu_when_gelu_is_recomputed) {
    /* the path large micro-batches take when the saved GELU output would not fit */
    compare_with_cpu(OUTPUT_FUSED, 2, 128, 1000, 3, 37, OUTPUT_FUSED_DEFAULT_BUDGET, 1);
}

/* A two-layer model of a RoPE family: its HF defaults, then the shape. */
static GPTConfig family_config(ModelFamily family, int heads, int kv_heads, int head_dim, int dim, int ffn) {
    GPTConfig cfg = {};
    cfg.num_layers = 2, cfg.num_heads = heads, cfg.dim = dim, cfg.max_seq_len = 64, cfg.vocab_size = 1000;
    gpt_family_defaults(&cfg, family);
    cfg.num_kv_heads = kv_heads, cfg.head_dim = head_dim, cfg.ffn_dim = ffn;
    gpt_config_finish(&cfg);
    return cfg;
}

TEST(backend_cuda_matches_cpu_on_a_tiny_untied_llama_with_llama3_rope_and_gqa) {
    /* NH·hd = 256 != C = 192; 4 query heads share 2 key/value heads; Llama 3.2's rope_scaling */
    GPTConfig cfg = family_config(FAMILY_LLAMA, 4, 2, 64, 192, 328);
    cfg.untied_head = 1;
    cfg.rope.scaling = ROPE_SCALING_LLAMA3;
    cfg.rope.factor = 32.0;
    cfg.rope.low_freq_factor = 1.0;
    cfg.rope.high_freq_factor = 4.0;
    cfg.rope.original_max_position_embeddings = 8192.0;
    compare_config_with_cpu(&cfg, OUTPUT_FUSED, 3, 37);
    compare_config_with_cpu(&cfg, OUTPUT_CANONICAL, 2, 29);
}

/* F a multiple of 128: the MLP takes kernels/gated_mlp.cu's products (a partial tile of 256 columns
 * in the backward); at recompute level 2 the backward re-forms the gate/up rows with the same
 * products, so both levels track the CPU alike. */
TEST(backend_cuda_matches_cpu_on_a_tiny_llama_whose_mlp_carries_swiglu_in_its_products) {
    GPTConfig cfg = family_config(FAMILY_LLAMA, 4, 2, 64, 192, 384);
    compare_config_with_cpu(&cfg, OUTPUT_FUSED, 3, 37);
    compare_config_with_cpu(&cfg, OUTPUT_FUSED, 2, 33, OUTPUT_FUSED_DEFAULT_BUDGET, 2);
}

/* bf16 optimizer state on both backends: the CPU holds its weights at bf16 values and updates them
 * with the GPU's rounding, so the two track as closely as with fp32 state. */
TEST(backend_cuda_matches_cpu_on_a_tiny_llama_with_bf16_optimizer_state) {
    GPTConfig cfg = family_config(FAMILY_LLAMA, 4, 2, 64, 192, 328);
    cfg.untied_head = 1;
    compare_config_with_cpu(&cfg, OUTPUT_FUSED, 3, 37, OUTPUT_FUSED_DEFAULT_BUDGET, 0, OPTIMIZER_STATE_BF16);
}

/* Weights given at creation (--init-from, eval, sample): the GPU holds the CPU backend's bits of
 * them under either state, AdamW's moments at zero, and one step later the two still agree. */
TEST(backend_cuda_created_with_weights_holds_the_cpus_bits_of_them_and_zero_moments) {
    GPTConfig cfg = family_config(FAMILY_LLAMA, 4, 2, 64, 192, 328);
    Setup s;
    setup_config(&s, &cfg, 3, 37, 1, 11);
    const size_t P = s.table.total;
    float *init = (float *)malloc(P * 4), *wc = (float *)malloc(P * 4), *wg = (float *)malloc(P * 4);
    float *m = (float *)malloc(P * 4), *v = (float *)malloc(P * 4);
    Rng rng;
    rng_seed(&rng, 0x1417);
    for (size_t i = 0; i < P; i++) init[i] = (float)(rng_uniform(&rng) * 0.1 - 0.05);
    for (int bf16 = 0; bf16 < 2; bf16++) {
        const OptimizerState state = bf16 ? OPTIMIZER_STATE_BF16 : OPTIMIZER_STATE_FP32;
        char err[ERR_LEN];
        Backend *cpu = backend_cpu_create(&s.table, 3, 37, OUTPUT_FUSED, state, 42, init, err);
        Backend *gpu = backend_cuda_create(&s.table, 3, 37, OUTPUT_FUSED, OUTPUT_FUSED_DEFAULT_BUDGET, 0, state, 42,
                                           init, NULL, err);
        REQUIRE(cpu && gpu, "%s", err);
        cpu->ops->read_state(cpu, wc, NULL, NULL);
        gpu->ops->read_state(gpu, wg, m, v);
        size_t differ = 0, moments = 0, given = 0;
        for (size_t i = 0; i < P; i++) {
            differ += memcmp(&wc[i], &wg[i], 4) != 0;
            moments += m[i] != 0.0f || v[i] != 0.0f;
            given += fabsf(wg[i] - init[i]) <= 0x1p-8f * fabsf(init[i]);
        }
        CHECK(differ == 0, "state %d: %zu of %zu weights differ from the CPU's", bf16, differ, P);
        CHECK(moments == 0, "state %d: %zu moments are not zero", bf16, moments);
        CHECK(given == P, "state %d: %zu of %zu weights are the given ones", bf16, given, P);
        const float lc = step(cpu, &s, 0, 0), lg = step(gpu, &s, 0, 0);
        CHECK(fabsf(lg - lc) <= 1e-2f * fabsf(lc), "state %d: first loss GPU %.6f CPU %.6f", bf16, lg, lc);
        cpu->ops->destroy(cpu);
        gpu->ops->destroy(gpu);
    }
    free(init), free(wc), free(wg), free(m), free(v);
    teardown(&s);
}

TEST(backend_cuda_matches_cpu_on_a_tiny_tied_qwen3_with_qk_norm) {
    /* Qwen3's head of 128 over a narrower model: NH·hd = 256 != C = 128; 2 query heads per kv head */
    GPTConfig cfg = family_config(FAMILY_QWEN3, 2, 1, 128, 128, 200);
    compare_config_with_cpu(&cfg, OUTPUT_FUSED, 3, 37);
    /* the rotated q and k recomputed in the backward into one buffer the layers share */
    compare_config_with_cpu(&cfg, OUTPUT_FUSED, 2, 33, OUTPUT_FUSED_DEFAULT_BUDGET, 1);
}

TEST(backend_cuda_matches_cpu_on_a_tiny_qwen2_with_qkv_bias) {
    /* as many key/value heads as query heads */
    GPTConfig cfg = family_config(FAMILY_QWEN2, 2, 2, 64, 128, 344);
    compare_config_with_cpu(&cfg, OUTPUT_FUSED, 3, 37);
    /* the gate/up rows recomputed by their GEMM in the backward, as micro-batches run that would not
     * fit otherwise */
    compare_config_with_cpu(&cfg, OUTPUT_FUSED, 2, 33, OUTPUT_FUSED_DEFAULT_BUDGET, 2);
}

/* A tiny Gemma 3 with every switch its block has: three layers, sliding, global, sliding (layer_types),
 * a window of 8 shorter than the sequence, the sliding layers' own RoPE base and linear rope_scaling
 * on the global one, QK-norm and the four norms by 1 + w, GeGLU, NH·hd != C with 2 query heads per
 * key/value head, query_pre_attn_scalar 48 (not hd), the embedding scaled by sqrt(C) with a
 * pad token inside the vocabulary that the inputs hold, and the logits soft-capped. */
static GPTConfig tiny_gemma3(int head_dim) {
    GPTConfig cfg = family_config(FAMILY_GEMMA3, 4, 2, head_dim, 192, 328);
    cfg.num_layers = 3;
    cfg.sliding_window_pattern = 0;
    cfg.layer_sliding[0] = cfg.layer_sliding[2] = 1;
    cfg.sliding_window = 8;
    cfg.rope.theta = 1e6;
    cfg.rope.scaling = ROPE_SCALING_LINEAR;
    cfg.rope.factor = 4.0;
    cfg.rope_local_theta = 1e4;
    cfg.query_pre_attn_scalar = 48.0f;
    cfg.pad_token_id = 3;
    cfg.logit_softcap = 3.0f;
    return cfg;
}

TEST(backend_cuda_matches_cpu_on_a_tiny_gemma3_with_sliding_and_global_layers_and_sandwich_norms) {
    GPTConfig cfg = tiny_gemma3(64);
    compare_config_with_cpu(&cfg, OUTPUT_FUSED, 3, 37);
    compare_config_with_cpu(&cfg, OUTPUT_CANONICAL, 2, 29);
    /* the gate/up rows recomputed by their GEMM */
    compare_config_with_cpu(&cfg, OUTPUT_FUSED, 2, 33, OUTPUT_FUSED_DEFAULT_BUDGET, 2);
}

/* F a multiple of 128: GeGLU inside kernels/gated_mlp.cu's products, at recompute levels 0 and 2 */
TEST(backend_cuda_matches_cpu_on_a_tiny_gemma3_whose_mlp_carries_geglu_in_its_products) {
    GPTConfig cfg = tiny_gemma3(64);
    cfg.ffn_dim = 384;
    compare_config_with_cpu(&cfg, OUTPUT_FUSED, 3, 37);
    compare_config_with_cpu(&cfg, OUTPUT_FUSED, 2, 33, OUTPUT_FUSED_DEFAULT_BUDGET, 2);
}

TEST(backend_cuda_matches_cpu_on_a_tiny_gemma3_at_head_dim_128) {
    GPTConfig cfg = tiny_gemma3(128);
    compare_config_with_cpu(&cfg, OUTPUT_FUSED, 3, 37);
}

/* Gemma 3's own head_dim, with its released models' query_pre_attn_scalar = hd (the tests above
 * cover another scalar). With 48 at hd 256 the scores spread 2.3 times as wide as with hd^-1/2, and
 * the QK-norm weights' gradients (sums over every token and head) measured 5.5e-2 from the CPU's. */
TEST(backend_cuda_matches_cpu_on_a_tiny_gemma3_at_head_dim_256) {
    GPTConfig cfg = tiny_gemma3(256);
    cfg.query_pre_attn_scalar = 256.0f;
    compare_config_with_cpu(&cfg, OUTPUT_FUSED, 3, 37);
}

/* `./train eval`'s loop on the GPU: 3 windows of 37 and a last of 10 targets (122 tokens) in
 * batches of 3, so the second batch holds one short window and two rows whose targets are all
 * ignored; the mean within bf16's rounding of the CPU's, through both output layers. */
static void eval_matches_cpu(OutputKind output) {
    Setup s;
    setup(&s, 2, 128, 1000, 3, 37, 2, 5); /* inputs for 2 batches: room for the N tokens */
    enum { N = 3 * 37 + 11 };
    uint32_t tokens[N];
    for (int i = 0; i < N; i++) tokens[i] = (uint32_t)s.inputs[i];
    char err[ERR_LEN];
    Backend *cpu = backend_cpu_create(&s.table, 3, 37, output, OPTIMIZER_STATE_FP32, 42, NULL, err);
    Backend *gpu = backend_cuda_create(&s.table, 3, 37, output, OUTPUT_FUSED_DEFAULT_BUDGET, 0, OPTIMIZER_STATE_FP32, 42, NULL, NULL, err);
    REQUIRE(cpu && gpu, "%s", err);
    double lc = 0, lg = 0;
    CHECK(eval_mean_loss(cpu, tokens, N, &lc, err) == 0 && eval_mean_loss(gpu, tokens, N, &lg, err) == 0, "%s", err);
    CHECK(isfinite(lg) && fabs(lg - lc) <= 1e-2 * fabs(lc), "eval loss GPU %.6f CPU %.6f", lg, lc);
    cpu->ops->destroy(cpu);
    gpu->ops->destroy(gpu);
    teardown(&s);
}

TEST(backend_cuda_eval_over_windows_matches_cpu_with_a_short_last_window_fused) {
    eval_matches_cpu(OUTPUT_FUSED);
}

TEST(backend_cuda_eval_over_windows_matches_cpu_with_a_short_last_window_canonical) {
    eval_matches_cpu(OUTPUT_CANONICAL);
}

/* Sampling's cache on the GPU: the prompt's prefill and each decoded row against a whole forward
 * of the window (logits_at, on a second backend: a forward overwrites the cache), within bf16's
 * rounding (the GEMMs of one row and of the window may round differently), and against the CPU's
 * cached logits within the backends' usual gap. Sequence 0 of a micro-batch of two. */
static void decoding_matches_a_full_forward(const GPTConfig *cfg, int recompute = 0) {
    Setup s;
    const int B = 2, T = 61, prompt = 9;
    setup_config(&s, cfg, B, T, 1, 17);
    const int V = s.table.cfg.vocab_size;
    char err[ERR_LEN];
    Backend *gpu = backend_cuda_create(&s.table, B, T, OUTPUT_FUSED, 0, recompute, OPTIMIZER_STATE_FP32, 5, NULL, NULL, err);
    Backend *full = backend_cuda_create(&s.table, B, T, OUTPUT_FUSED, 0, 0, OPTIMIZER_STATE_FP32, 5, NULL, NULL, err);
    Backend *cpu = backend_cpu_create(&s.table, B, T, OUTPUT_FUSED, OPTIMIZER_STATE_FP32, 5, NULL, err);
    REQUIRE(gpu && full && cpu, "%s", err);
    float *cached = (float *)malloc(V * sizeof(float)), *whole = (float *)malloc(V * sizeof(float)),
          *ref = (float *)malloc(V * sizeof(float));
    double worst_full = 0, worst_cpu = 0;
    gpu->ops->prefill(gpu, s.inputs, prompt, cached);
    cpu->ops->prefill(cpu, s.inputs, prompt, ref);
    for (int pos = prompt - 1; pos < T; pos++) {
        if (pos >= prompt) {
            gpu->ops->decode_step(gpu, s.inputs[pos], pos, cached);
            cpu->ops->decode_step(cpu, s.inputs[pos], pos, ref);
        }
        full->ops->logits_at(full, s.inputs, pos, whole);
        worst_full = fmax(worst_full, rel_l2(cached, whole, V));
        worst_cpu = fmax(worst_cpu, rel_l2(cached, ref, V));
    }
    fprintf(stderr, "[%s: cached vs a whole forward: rel L2 %.2e; vs the CPU: %.2e] ", gpt_family_name(cfg->family),
            worst_full, worst_cpu);
    CHECK(worst_full <= 2e-2, "cached logits differ from a whole forward's: rel L2 %.3e", worst_full);
    CHECK(worst_cpu <= 5e-2, "cached logits differ from the CPU's: rel L2 %.3e", worst_cpu);
    free(cached);
    free(whole);
    free(ref);
    cpu->ops->destroy(cpu);
    full->ops->destroy(full);
    gpu->ops->destroy(gpu);
    teardown(&s);
}

TEST(backend_cuda_decoding_with_the_cache_gives_the_logits_of_a_full_forward) {
    GPTConfig cfg = gpt2_config(2, 128, 300);
    decoding_matches_a_full_forward(&cfg);
}

/* Qwen3 keeps each layer's rotated q, k beside its projected q, k, v (before QK-norm and RoPE), so a
 * decoded row rotates only itself; when the rotated rows are recomputed into one buffer the layers
 * share, a decoded row's layer rotates its cached projections again. */
TEST(backend_cuda_decoding_a_qwen3_rotates_its_cached_projections_as_a_full_forward) {
    GPTConfig cfg = family_config(FAMILY_QWEN3, 2, 1, 128, 128, 200);
    decoding_matches_a_full_forward(&cfg);
    decoding_matches_a_full_forward(&cfg, 1);
}

/* Gemma 3's decoded rows attend within their sliding layers' window and rotate by each layer's own
 * tables, as a full forward does. */
TEST(backend_cuda_decoding_a_gemma3_keeps_each_layers_window_and_rotation_as_a_full_forward) {
    GPTConfig cfg = tiny_gemma3(64);
    decoding_matches_a_full_forward(&cfg);
}

static void deterministic_and_resumes_bit_exact(OptimizerState state) {
    Setup s;
    setup(&s, 2, 128, 1000, 3, 37, 10, 5);
    char err[ERR_LEN];
    Backend *a = backend_cuda_create(&s.table, s.B, s.T, OUTPUT_FUSED, OUTPUT_FUSED_DEFAULT_BUDGET, 0, state, 9, NULL, NULL, err);
    REQUIRE(a, "%s", err);
    float la[10];
    size_t P = s.table.total;
    float *p = (float *)malloc(P * 4), *m = (float *)malloc(P * 4), *v = (float *)malloc(P * 4);
    for (int k = 0; k < 10; k++) {
        la[k] = step(a, &s, k, k + 1);
        if (k == 4) a->ops->read_state(a, p, m, v);
    }
    a->ops->destroy(a);
    Backend *b = backend_cuda_create(&s.table, s.B, s.T, OUTPUT_FUSED, OUTPUT_FUSED_DEFAULT_BUDGET, 0, state, 9, NULL, NULL, err);
    REQUIRE(b, "%s", err);
    for (int k = 0; k < 10; k++) {
        float lb = step(b, &s, k, k + 1);
        CHECK(memcmp(&lb, &la[k], 4) == 0, "run 2 step %d loss %.9g vs %.9g (not deterministic)", k, lb, la[k]);
    }
    b->ops->destroy(b);
    Backend *c = backend_cuda_create(&s.table, s.B, s.T, OUTPUT_FUSED, OUTPUT_FUSED_DEFAULT_BUDGET, 0, state, 1234, NULL, NULL, err);
    REQUIRE(c, "%s", err);
    c->ops->write_state(c, p, m, v);
    for (int k = 5; k < 10; k++) {
        float lc = step(c, &s, k, k + 1);
        CHECK(memcmp(&lc, &la[k], 4) == 0, "resumed step %d loss %.9g vs %.9g", k, lc, la[k]);
    }
    c->ops->destroy(c);
    free(p);
    free(m);
    free(v);
    teardown(&s);
}

TEST(backend_cuda_is_deterministic_and_resumes_bit_exact) {
    deterministic_and_resumes_bit_exact(OPTIMIZER_STATE_FP32);
}

/* bf16 state crosses a checkpoint's fp32 exactly, and its random bits follow the step */
TEST(backend_cuda_with_bf16_optimizer_state_is_deterministic_and_resumes_bit_exact) {
    deterministic_and_resumes_bit_exact(OPTIMIZER_STATE_BF16);
}

/* The fused layer's chunk gives way to the memory the GPU has free: with a little more than the
 * streaming path needs it runs a smaller chunk or streams (the run header says which), and the
 * step's loss is the unconstrained one's. */
TEST(backend_cuda_fused_chunk_gives_way_to_free_memory) {
    Setup s;
    setup(&s, 2, 128, 262144, 32, 64, 1, 7); /* N = 2048: a full chunk is 1.1 GB */
    char err[ERR_LEN];
    Backend *a = backend_cuda_create(&s.table, s.B, s.T, OUTPUT_FUSED, OUTPUT_FUSED_DEFAULT_BUDGET, 0, OPTIMIZER_STATE_FP32, 9, NULL, NULL, err);
    REQUIRE(a, "%s", err);
    CHECK(strstr(a->output_path, "chunk") && !strstr(a->output_path, "reduced"), "with room: %s", a->output_path);
    const float la = step(a, &s, 0, 0);
    a->ops->destroy(a);

    size_t free0, free1, total;
    CUDA_CHECK(cudaMemGetInfo(&free0, &total));
    Backend *b = backend_cuda_create(&s.table, s.B, s.T, OUTPUT_FUSED, 0, 0, OPTIMIZER_STATE_FP32, 9, NULL, NULL, err);
    REQUIRE(b, "%s", err);
    CUDA_CHECK(cudaMemGetInfo(&free1, &total));
    b->ops->destroy(b);
    const size_t streaming_uses = free0 - free1;
    /* leave what the streaming backend took, the backend's 1 GB allowance for libraries, and 300 MB */
    const size_t leave = streaming_uses + ((size_t)1 << 30) + ((size_t)300 << 20);
    CUDA_CHECK(cudaMemGetInfo(&free0, &total));
    REQUIRE(free0 > leave + ((size_t)256 << 20), "too little GPU memory for this test");
    void *filler = NULL;
    CUDA_CHECK(cudaMalloc(&filler, free0 - leave));
    Backend *c = backend_cuda_create(&s.table, s.B, s.T, OUTPUT_FUSED, OUTPUT_FUSED_DEFAULT_BUDGET, 0, OPTIMIZER_STATE_FP32, 9, NULL, NULL, err);
    REQUIRE(c, "with %zu MB free: %s", leave >> 20, err);
    fprintf(stderr, "[%zu MB free: %s] ", leave >> 20, c->output_path);
    CHECK(strstr(c->output_path, "streaming") || strstr(c->output_path, "reduced"), "without room: %s",
          c->output_path);
    const float lc = step(c, &s, 0, 0);
    CHECK(fabsf(lc - la) <= 1e-4f * fabsf(la), "loss %.7f with little memory, %.7f with room", lc, la);
    c->ops->destroy(c);
    CUDA_CHECK(cudaFree(filler));
    teardown(&s);
}
