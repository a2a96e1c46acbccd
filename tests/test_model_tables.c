/* The lists that the command line and the model read from one table each: presets in --help and
 * in the error for an unknown one, the fused layer's default budget as --logits-mb's default, the
 * output layer's paths named in plain words, and the parameter table of every family: its rows, HF
 * names and packed tensors, the layer ranges, the shapes it refuses, and its initial values. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "kernels/output_kind.h"
#include "model/gpt.h"
#include "tests/test.h"
#include "tests/test_util.h"

/* The help line of one flag (malloc'ed), or NULL. */
static char *help_line(const char *help, const char *flag) {
    const char *at = strstr(help, flag);
    if (!at) return NULL;
    const char *end = strchr(at, '\n');
    size_t n = end ? (size_t)(end - at) : strlen(at);
    char *line = malloc(n + 1);
    memcpy(line, at, n);
    line[n] = '\0';
    return line;
}

TEST(the_preset_help_and_error_list_every_preset_of_the_table) {
    char *help = NULL, *err = NULL;
    CHECK(run_train("--help", &help) == 0, "--help failed");
    CHECK(run_train("-e d99", &err) == 2, "an unknown preset must be a usage error");
    char *line = help ? help_line(help, "--preset") : NULL;
    REQUIRE(line && err, "no --help line for --preset, or no error");
    for (const GPTPreset *p = gpt_presets; p->name; p++) {
        char shown[64];
        if (p->note)
            snprintf(shown, sizeof shown, "%s (%s)", p->name, p->note);
        else
            snprintf(shown, sizeof shown, "%s", p->name);
        CHECK(strstr(line, shown), "--help's preset line lacks '%s': %s", shown, line);
        CHECK(strstr(err, shown), "the unknown-preset error lacks '%s': %s", shown, err);
    }
    CHECK(strstr(line, "tiny, d6, d12 (GPT-2 124M), d24, d36, d48"), "presets out of table order: %s", line);
    free(line);
    free(help);
    free(err);
}

TEST(the_logits_mb_default_is_the_fused_layers_default_budget) {
    char *help = NULL;
    CHECK(run_train("--help", &help) == 0, "--help failed");
    char *line = help ? help_line(help, "--logits-mb") : NULL;
    REQUIRE(line, "no --help line for --logits-mb");
    char shown[32];
    snprintf(shown, sizeof shown, "[%d]", OUTPUT_FUSED_DEFAULT_BUDGET_MIB);
    CHECK(strstr(line, shown), "--logits-mb's default is not %s: %s", shown, line);
    CHECK(OUTPUT_FUSED_DEFAULT_BUDGET == (size_t)OUTPUT_FUSED_DEFAULT_BUDGET_MIB << 20, "budget and MiB differ");
    free(line);
    free(help);
}

TEST(the_help_names_the_fused_layers_paths_chunked_and_streaming_not_by_gemm_counts) {
    char *help = NULL;
    CHECK(run_train("--help", &help) == 0, "--help failed");
    char *line = help ? help_line(help, "--logits-mb") : NULL;
    REQUIRE(line, "no --help line for --logits-mb");
    CHECK(strstr(line, "chunked") && strstr(line, "streaming"), "--logits-mb's help lacks the two paths: %s", line);
    CHECK(!strstr(help, "3G") && !strstr(help, "4G"), "--help speaks of 3G/4G: %s", line);
    free(line);
    free(help);
}

TEST(the_parameter_table_holds_four_whole_model_tensors_and_every_layers_own) {
    GPTConfig cfg = {.num_layers = 3, .num_heads = 2, .dim = 128, .max_seq_len = 64, .vocab_size = 1000};
    gpt_config_finish(&cfg);
    ParamTable t;
    char err[ERR_LEN];
    REQUIRE(param_table_build(&t, &cfg, err) == 0, "%s", err);
    /* GPT-2's rows: wte, wpe, ln_f weight and bias, and 12 per layer */
    CHECK(t.count == 4 + 3 * 12, "table count %d", t.count);
    int whole = 0;
    for (int i = 0; i < t.count; i++) whole += t.params[i].layer < 0;
    CHECK(whole == 4, "%d tensors outside the layers", whole);
    const ParamRole roles[] = {ROLE_WTE, ROLE_WPE, ROLE_LNF_W, ROLE_LNF_B};
    const char *names[] = {"transformer.wte.weight", "transformer.wpe.weight", "transformer.ln_f.weight",
                           "transformer.ln_f.bias"};
    for (int i = 0; i < 4; i++)
        CHECK(strcmp(param_whole(&t, roles[i])->name, names[i]) == 0, "role %d is %s", (int)roles[i],
              param_whole(&t, roles[i])->name);
    param_table_free(&t);
}

/* The initial weights of a table on `threads` threads (malloc'ed). */
static float *init_on(const ParamTable *t, uint64_t seed, int threads) {
    float *p = malloc(t->total * sizeof *p);
    const int before = omp_get_max_threads();
    omp_set_num_threads(threads);
    param_init(t, p, seed);
    omp_set_num_threads(before);
    return p;
}

TEST(param_init_gives_the_same_bits_on_any_number_of_threads_and_each_tensor_its_own_normal_draws) {
    GPTConfig cfg = {.num_layers = 2, .num_heads = 2, .dim = 128, .max_seq_len = 64, .vocab_size = 1000};
    gpt_config_finish(&cfg);
    ParamTable t;
    char err[ERR_LEN];
    REQUIRE(param_table_build(&t, &cfg, err) == 0, "%s", err);
    float *one = init_on(&t, 7, 1), *four = init_on(&t, 7, 4), *other = init_on(&t, 8, 4);
    CHECK(memcmp(one, four, t.total * sizeof *one) == 0, "one thread and four gave different weights");
    size_t same_seed_8 = 0;
    for (size_t j = 0; j < t.total; j++) same_seed_8 += one[j] == other[j] && one[j] != 0.0f && one[j] != 1.0f;
    CHECK(same_seed_8 == 0, "seeds 7 and 8 share %zu drawn values", same_seed_8);
    for (int i = 0; i < t.count; i++) {
        const ParamInfo *p = &t.params[i];
        const float *x = one + p->offset;
        size_t n = p->numel;
        if (p->role == ROLE_WTE) n = (size_t)cfg.vocab_size * p->cols; /* the padded rows are zero */
        if (p->init != INIT_NORMAL) {
            size_t off = 0;
            for (size_t j = 0; j < n; j++) off += x[j] != (p->init == INIT_ONES ? 1.0f : 0.0f);
            CHECK(off == 0, "%s: %zu values are not its constant", p->name, off);
            continue;
        }
        double sum = 0.0, sq = 0.0;
        for (size_t j = 0; j < n; j++) sum += x[j], sq += (double)x[j] * x[j];
        const double mean = sum / (double)n, sd = sqrt(sq / (double)n - mean * mean);
        /* 5 standard errors: a mean of n draws has sd std/sqrt(n), a sample sd about std/sqrt(2n) */
        CHECK(fabs(mean) < 5.0 * p->init_std / sqrt((double)n) && fabs(sd / p->init_std - 1.0) < 5.0 / sqrt(2.0 * n),
              "%s: mean %g, sd %g for N(0, %g) over %zu values", p->name, mean, sd, p->init_std, n);
    }
    const ParamInfo *wte = param_whole(&t, ROLE_WTE);
    size_t padded = 0;
    for (size_t j = (size_t)cfg.vocab_size * wte->cols; j < wte->numel; j++) padded += one[wte->offset + j] != 0.0f;
    CHECK(wte->numel > (size_t)cfg.vocab_size * wte->cols && padded == 0, "%zu padded embedding values are not 0",
          padded);
    /* two layers' matrices of one shape and std are different draws, not one stream read twice */
    const ParamInfo *fc0 = param_of_layer(&t, 0, ROLE_FC_W), *fc1 = param_of_layer(&t, 1, ROLE_FC_W);
    CHECK(memcmp(one + fc0->offset, one + fc1->offset, 64 * sizeof *one) != 0, "layers 0 and 1 begin alike");
    free(one), free(four), free(other);
    param_table_free(&t);
}

/* A Llama of 2 layers: 4 query heads of 6 in pairs over 2 key/value heads, d 16, F 24. */
static GPTConfig small_family(ModelFamily family) {
    GPTConfig cfg = {.num_layers = 2, .num_heads = 4, .dim = 16, .max_seq_len = 8, .vocab_size = 37};
    gpt_family_defaults(&cfg, family);
    cfg.num_kv_heads = 2;
    cfg.head_dim = 6;
    cfg.ffn_dim = 24;
    return cfg;
}

TEST(a_zero_initialised_config_is_gpt2) {
    GPTConfig cfg = {.num_layers = 2, .num_heads = 4, .dim = 64, .max_seq_len = 16, .vocab_size = 100};
    gpt_config_finish(&cfg);
    CHECK(cfg.family == FAMILY_GPT2 && cfg.norm == NORM_LAYERNORM && cfg.positions == POS_LEARNED &&
              cfg.mlp == MLP_GELU && !cfg.qk_norm && !cfg.untied_head,
          "the switches are not GPT-2's");
    CHECK(cfg.num_kv_heads == 4 && cfg.head_dim == 16 && cfg.ffn_dim == 256 && cfg.norm_eps == 1e-5f,
          "kv heads %d, head dim %d, ffn %d, eps %g", cfg.num_kv_heads, cfg.head_dim, cfg.ffn_dim, cfg.norm_eps);
}

TEST(a_llama_table_has_a_row_per_hugging_face_tensor_with_q_k_v_and_gate_up_packed) {
    GPTConfig cfg = small_family(FAMILY_LLAMA);
    cfg.untied_head = 1;
    gpt_config_finish(&cfg);
    ParamTable t;
    char err[ERR_LEN];
    REQUIRE(param_table_build(&t, &cfg, err) == 0, "%s", err);
    const struct {
        const char *name;
        size_t rows, cols;
    } want[] = {
        {"model.embed_tokens.weight", 128, 16},
        {"model.layers.0.input_layernorm.weight", 1, 16},
        {"model.layers.0.self_attn.{q,k,v}_proj.weight", (4 + 2 * 2) * 6, 16},
        {"model.layers.0.self_attn.o_proj.weight", 16, 24},
        {"model.layers.0.post_attention_layernorm.weight", 1, 16},
        {"model.layers.0.mlp.{gate,up}_proj.weight", 48, 16},
        {"model.layers.0.mlp.down_proj.weight", 16, 24},
        {"model.layers.1.input_layernorm.weight", 1, 16},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        CHECK(strcmp(t.params[i].name, want[i].name) == 0 && t.params[i].rows == want[i].rows &&
                  t.params[i].cols == want[i].cols && !t.params[i].hf_transposed,
              "row %zu: %s [%zu, %zu], expected %s [%zu, %zu]", i, t.params[i].name, t.params[i].rows,
              t.params[i].cols, want[i].name, want[i].rows, want[i].cols);
    REQUIRE(t.count == 1 + 2 * 6 + 2, "%d rows", t.count);
    CHECK(strcmp(t.params[t.count - 2].name, "model.norm.weight") == 0 &&
              strcmp(t.params[t.count - 1].name, "lm_head.weight") == 0 && t.params[t.count - 1].rows == 128,
          "the tail is %s, %s", t.params[t.count - 2].name, t.params[t.count - 1].name);
    const ParamInfo *qkv = param_of_layer(&t, 1, ROLE_QKV_W), *glu = param_of_layer(&t, 1, ROLE_FC_W);
    CHECK(qkv->num_parts == 3 && strcmp(qkv->part[0].name, "model.layers.1.self_attn.q_proj.weight") == 0 &&
              strcmp(qkv->part[2].name, "model.layers.1.self_attn.v_proj.weight") == 0 && qkv->part[0].rows == 24 &&
              qkv->part[1].rows == 12 && qkv->part[2].rows == 12,
          "the packed q, k, v: %d parts, %s", qkv->num_parts, qkv->part[0].name);
    CHECK(glu->num_parts == 2 && strcmp(glu->part[1].name, "model.layers.1.mlp.up_proj.weight") == 0 &&
              glu->part[0].rows == 24 && glu->part[1].rows == 24,
          "the packed gate, up: %d parts, %s", glu->num_parts, glu->part[1].name);
    CHECK(!param_whole(&t, ROLE_WPE) && !param_of_layer(&t, 0, ROLE_QKV_B) && !param_of_layer(&t, 0, ROLE_QNORM_W),
          "Llama has no position table, qkv bias or QK-norm");
    CHECK(t.layer_begin[0] == param_of_layer(&t, 0, ROLE_LN1_W)->offset &&
              t.layer_begin[1] == param_of_layer(&t, 1, ROLE_LN1_W)->offset &&
              t.layer_begin[2] == param_whole(&t, ROLE_LNF_W)->offset,
          "the layer ranges are not the rows'");
    param_table_free(&t);
}

TEST(qwen3_has_per_head_qk_norms_and_qwen2_a_packed_qkv_bias) {
    char err[ERR_LEN];
    ParamTable t;
    GPTConfig cfg = small_family(FAMILY_QWEN3);
    REQUIRE(param_table_build(&t, &cfg, err) == 0, "%s", err);
    const ParamInfo *q = param_of_layer(&t, 1, ROLE_QNORM_W), *k = param_of_layer(&t, 1, ROLE_KNORM_W);
    REQUIRE(q && k, "no QK-norm rows");
    CHECK(strcmp(q->name, "model.layers.1.self_attn.q_norm.weight") == 0 && q->cols == 6 &&
              strcmp(k->name, "model.layers.1.self_attn.k_norm.weight") == 0 && k->cols == 6,
          "%s [%zu], %s [%zu]", q->name, q->cols, k->name, k->cols);
    CHECK(!param_whole(&t, ROLE_LM_HEAD) && !param_of_layer(&t, 0, ROLE_QKV_B), "Qwen3 is tied and has no qkv bias");
    param_table_free(&t);
    cfg = small_family(FAMILY_QWEN2);
    REQUIRE(param_table_build(&t, &cfg, err) == 0, "%s", err);
    const ParamInfo *b = param_of_layer(&t, 0, ROLE_QKV_B);
    REQUIRE(b, "no qkv bias");
    CHECK(b->ndim == 1 && b->cols == 48 && b->num_parts == 3 &&
              strcmp(b->part[1].name, "model.layers.0.self_attn.k_proj.bias") == 0 && b->part[1].rows == 12,
          "%s [%zu], %d parts", b->name, b->cols, b->num_parts);
    CHECK(!param_of_layer(&t, 0, ROLE_QNORM_W), "Qwen2 has no QK-norm");
    param_table_free(&t);
}

TEST(a_family_shape_the_blocks_cannot_compute_is_refused_naming_it) {
    const struct {
        ModelFamily family;
        int heads, kv_heads, head_dim;
        const char *msg;
    } bad[] = {
        {FAMILY_LLAMA, 4, 3, 6, "do not split into groups of 3 kv heads"},
        {FAMILY_QWEN3, 4, 2, 5, "even head dim and theta > 0 (head dim 5, theta 1e+06): pass an even --head-dim"},
        {FAMILY_GPT2, 4, 2, 0, "GPT-2 has kv heads = heads"},
    };
    GPTConfig mixed = small_family(FAMILY_LLAMA);
    mixed.mlp = MLP_GELU; /* a GELU MLP would need rows a Llama table does not have */
    ParamTable t;
    char err[ERR_LEN] = "";
    CHECK(param_table_build(&t, &mixed, err) != 0 && strstr(err, "no rows for this mix"), "a GELU Llama: '%s'", err);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        GPTConfig cfg = small_family(bad[i].family);
        cfg.num_heads = bad[i].heads;
        cfg.num_kv_heads = bad[i].kv_heads;
        cfg.head_dim = bad[i].head_dim;
        CHECK(param_table_build(&t, &cfg, err) != 0 && strstr(err, bad[i].msg), "case %zu: '%s' lacks '%s'", i, err,
              bad[i].msg);
    }
}

/* 6 FLOPs per matmul weight of the table (the head's V rows, not Vp) and 12·NH·hd·T per layer for
 * attention: grouped-query attention saves k and v weights, not attention work. */
TEST(the_flops_per_token_count_the_tables_matrices_and_attention_by_head_dim) {
    GPTConfig cfg = small_family(FAMILY_LLAMA);
    cfg.untied_head = 1;
    ParamTable t;
    char err[ERR_LEN];
    REQUIRE(param_table_build(&t, &cfg, err) == 0, "%s", err);
    double matmul = 37.0 * 16; /* the head; the embedding is a lookup */
    for (int i = 0; i < t.count; i++)
        if (t.params[i].layer >= 0 && t.params[i].ndim == 2) matmul += (double)t.params[i].numel;
    const double want = 6.0 * matmul + 12.0 * 2 * 4 * 6 * 8;
    CHECK(gpt_flops_per_token(&t.cfg, 8) == want, "%.0f FLOPs, expected %.0f", gpt_flops_per_token(&t.cfg, 8), want);
    param_table_free(&t);
}

/* A sliding layer's attention is charged by the (query, key) pairs its window leaves: at T = 8 and
 * W = 3, 1 + 2 + 3·6 = 21 of a causal layer's 36, so 21/36 of a global layer's 12·NH·hd·T; a window
 * of T or more charges what a global layer does. */
TEST(the_flops_per_token_charge_a_sliding_layers_attention_by_the_pairs_its_window_leaves) {
    GPTConfig cfg = small_family(FAMILY_GEMMA3);
    cfg.num_layers = 3;
    cfg.sliding_window_pattern = 0;
    cfg.layer_sliding[0] = cfg.layer_sliding[2] = 1;
    cfg.sliding_window = 3;
    ParamTable t;
    char err[ERR_LEN];
    REQUIRE(param_table_build(&t, &cfg, err) == 0, "%s", err);
    double matmul = 37.0 * 16; /* the tied head */
    for (int i = 0; i < t.count; i++)
        if (t.params[i].layer >= 0 && t.params[i].ndim == 2) matmul += (double)t.params[i].numel;
    const double global = 12.0 * 4 * 6 * 8; /* 12·NH·hd·T */
    double want = 6.0 * matmul + global * (1.0 + 2.0 * 21.0 / 36.0);
    CHECK(fabs(gpt_flops_per_token(&t.cfg, 8) - want) <= 1e-9 * want, "%.3f FLOPs, expected %.3f",
          gpt_flops_per_token(&t.cfg, 8), want);
    t.cfg.sliding_window = 8;
    want = 6.0 * matmul + 3.0 * global;
    CHECK(fabs(gpt_flops_per_token(&t.cfg, 8) - want) <= 1e-9 * want, "window T: %.3f FLOPs, expected %.3f",
          gpt_flops_per_token(&t.cfg, 8), want);
    param_table_free(&t);
}

/* Gemma3DecoderLayer's tensors in the order the forward reads them: the attention's input norm,
 * the packed q, k, v, the per-head norms, o_proj, the attention output's norm
 * (post_attention_layernorm), the MLP's input norm (pre_feedforward_layernorm), the packed gate and
 * up, down_proj, the MLP output's norm; every norm starts at 0 (it multiplies by 1 + w) and decays
 * not; the head is the embedding. */
TEST(a_gemma3_table_has_four_one_plus_w_norms_per_layer_named_as_hugging_face_does) {
    GPTConfig cfg = small_family(FAMILY_GEMMA3);
    gpt_config_finish(&cfg);
    ParamTable t;
    char err[ERR_LEN];
    REQUIRE(param_table_build(&t, &cfg, err) == 0, "%s", err);
    const struct {
        const char *name;
        ParamRole role;
        size_t rows, cols;
    } want[] = {
        {"model.embed_tokens.weight", ROLE_WTE, 128, 16},
        {"model.layers.0.input_layernorm.weight", ROLE_LN1_W, 1, 16},
        {"model.layers.0.self_attn.{q,k,v}_proj.weight", ROLE_QKV_W, (4 + 2 * 2) * 6, 16},
        {"model.layers.0.self_attn.q_norm.weight", ROLE_QNORM_W, 1, 6},
        {"model.layers.0.self_attn.k_norm.weight", ROLE_KNORM_W, 1, 6},
        {"model.layers.0.self_attn.o_proj.weight", ROLE_ATTPROJ_W, 16, 24},
        {"model.layers.0.post_attention_layernorm.weight", ROLE_ATTPOST_W, 1, 16},
        {"model.layers.0.pre_feedforward_layernorm.weight", ROLE_LN2_W, 1, 16},
        {"model.layers.0.mlp.{gate,up}_proj.weight", ROLE_FC_W, 48, 16},
        {"model.layers.0.mlp.down_proj.weight", ROLE_FCPROJ_W, 16, 24},
        {"model.layers.0.post_feedforward_layernorm.weight", ROLE_MLPPOST_W, 1, 16},
        {"model.layers.1.input_layernorm.weight", ROLE_LN1_W, 1, 16},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        CHECK(strcmp(t.params[i].name, want[i].name) == 0 && t.params[i].role == want[i].role &&
                  t.params[i].rows == want[i].rows && t.params[i].cols == want[i].cols,
              "row %zu: %s [%zu, %zu], expected %s [%zu, %zu]", i, t.params[i].name, t.params[i].rows,
              t.params[i].cols, want[i].name, want[i].rows, want[i].cols);
    REQUIRE(t.count == 1 + 2 * 10 + 1, "%d rows", t.count);
    CHECK(strcmp(t.params[t.count - 1].name, "model.norm.weight") == 0 && !param_whole(&t, ROLE_LM_HEAD),
          "the tail is %s", t.params[t.count - 1].name);
    const ParamInfo *glu = param_of_layer(&t, 1, ROLE_FC_W);
    CHECK(glu->num_parts == 2 && strcmp(glu->part[0].name, "model.layers.1.mlp.gate_proj.weight") == 0,
          "the packed gate, up: %d parts, %s", glu->num_parts, glu->part[0].name);
    for (int i = 0; i < t.count; i++) {
        const ParamInfo *p = &t.params[i];
        if (p->ndim == 1)
            CHECK(p->init == INIT_ZEROS && !p->weight_decay, "%s: a 1 + w norm must start at 0 and not decay", p->name);
        else
            CHECK(p->init == INIT_NORMAL && p->init_std == 0.02f && p->weight_decay, "%s: not N(0, 0.02) with decay",
                  p->name);
    }
    param_table_free(&t);
}

/* Gemma3TextConfig's defaults: RMSNorm (1 + w) at eps 1e-6, GeGLU, QK-norm, sandwich norms, the
 * embedding scale, query_pre_attn_scalar 256, a window of 4096 on all but every 6th layer, RoPE
 * theta 1e6 on global layers and 1e4 on sliding ones, pad_token_id 0 as the embedding's padding_idx;
 * switching to another family clears them. */
TEST(gemma3_family_defaults_are_gemma3_text_configs) {
    GPTConfig cfg = {.num_layers = 13, .num_heads = 4, .dim = 16, .max_seq_len = 8, .vocab_size = 37};
    gpt_family_defaults(&cfg, FAMILY_GEMMA3);
    gpt_config_finish(&cfg);
    CHECK(cfg.norm == NORM_RMSNORM_ONE_PLUS_W && cfg.norm_eps == 1e-6f && cfg.mlp == MLP_GEGLU && cfg.qk_norm &&
              cfg.sandwich_norm && cfg.embed_scale && !cfg.qkv_bias && !cfg.untied_head && cfg.positions == POS_ROPE &&
              cfg.has_pad_token && cfg.pad_token_id == 0,
          "the switches are not Gemma 3's");
    CHECK(cfg.query_pre_attn_scalar == 256.0f && cfg.sliding_window == 4096 && cfg.rope.theta == 1e6 &&
              cfg.rope.scaling == ROPE_SCALING_NONE && cfg.rope_local_theta == 1e4,
          "query_pre_attn_scalar %g, window %d, theta %g, local theta %g", cfg.query_pre_attn_scalar,
          cfg.sliding_window, cfg.rope.theta, cfg.rope_local_theta);
    /* transformers: "sliding_attention" if (i + 1) % 6 else "full_attention" */
    for (int l = 0; l < 13; l++) {
        const int global = l == 5 || l == 11;
        CHECK(gpt_layer_is_sliding(&cfg, l) == !global, "layer %d should be %s", l, global ? "global" : "sliding");
        RopeParams r = gpt_layer_rope(&cfg, l);
        CHECK(r.theta == (global ? 1e6 : 1e4), "layer %d turns by theta %g", l, r.theta);
    }
    gpt_family_defaults(&cfg, FAMILY_QWEN3);
    CHECK(!cfg.sandwich_norm && !cfg.embed_scale && cfg.query_pre_attn_scalar == 0.0f && !gpt_layer_is_sliding(&cfg, 0) &&
              cfg.rope_local_theta == 0.0 && !cfg.has_pad_token,
          "Qwen3 kept Gemma 3's switches");
}

/* config.json's layer_types, when it has them, say which layers slide; the sliding layers take
 * the local base unscaled and the global ones the scaled rope_theta (linear factor 8, as the
 * larger Gemma 3 sizes carry). */
TEST(gemma3_layer_types_choose_the_sliding_layers_and_their_rope_base) {
    GPTConfig cfg = small_family(FAMILY_GEMMA3);
    cfg.num_layers = 3;
    cfg.sliding_window_pattern = 0;
    cfg.layer_sliding[0] = cfg.layer_sliding[2] = 1;
    cfg.rope = (RopeParams){.theta = 1e6, .scaling = ROPE_SCALING_LINEAR, .factor = 8.0};
    for (int l = 0; l < 3; l++) {
        RopeParams r = gpt_layer_rope(&cfg, l);
        CHECK(gpt_layer_is_sliding(&cfg, l) == (l != 1), "layer %d", l);
        CHECK(l == 1 ? r.theta == 1e6 && r.scaling == ROPE_SCALING_LINEAR && r.factor == 8.0
                     : r.theta == 1e4 && r.scaling == ROPE_SCALING_NONE,
              "layer %d: theta %g, scaling %d", l, r.theta, (int)r.scaling);
    }
}

/* transformers keeps sqrt(hidden_size) in fp32 and casts it to the weights' dtype: in bf16 25.25 at
 * C = 640 (sqrt = 25.298), 34.0 at 1152 (sqrt = 33.941), 4.46875 at 20; in fp16 25.296875 at 640;
 * in fp32 itself, the default of a model made here (its checkpoints are float32); families without
 * the switch use 1. */
TEST(gemma3_embedding_scale_is_sqrt_dim_rounded_to_the_weights_dtype) {
    const struct {
        int dim;
        float bf16, f16;
    } want[] = {{640, 25.25f, 25.296875f}, {1152, 34.0f, 33.9375f}, {20, 4.46875f, 4.47265625f}, {16, 4.0f, 4.0f}};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        GPTConfig cfg = {.dim = want[i].dim};
        gpt_family_defaults(&cfg, FAMILY_GEMMA3);
        CHECK(gpt_embed_scale(&cfg) == sqrtf((float)want[i].dim), "C = %d: float32 scale %.9g", want[i].dim,
              gpt_embed_scale(&cfg));
        cfg.embed_scale = EMBED_SCALE_BF16;
        CHECK(gpt_embed_scale(&cfg) == want[i].bf16, "C = %d: bf16 scale %.9g, expected %.9g", want[i].dim,
              gpt_embed_scale(&cfg), want[i].bf16);
        cfg.embed_scale = EMBED_SCALE_F16;
        CHECK(gpt_embed_scale(&cfg) == want[i].f16, "C = %d: fp16 scale %.9g, expected %.9g", want[i].dim,
              gpt_embed_scale(&cfg), want[i].f16);
        gpt_family_defaults(&cfg, FAMILY_LLAMA);
        CHECK(gpt_embed_scale(&cfg) == 1.0f, "Llama scales its embedding by %g", gpt_embed_scale(&cfg));
    }
}

/* query_pre_attn_scalar^-1/2, not hd^-1/2: Gemma 3 with hd 6 scales by 256^-1/2 = 1/16 */
TEST(gemma3_attention_scale_is_query_pre_attn_scalar_to_the_minus_half) {
    GPTConfig cfg = small_family(FAMILY_GEMMA3);
    CHECK(gpt_attention_scale(&cfg) == 0.0625f, "scale %g", gpt_attention_scale(&cfg));
    cfg.query_pre_attn_scalar = 5.0f;
    CHECK(gpt_attention_scale(&cfg) == (float)pow(5.0, -0.5), "scale %g", gpt_attention_scale(&cfg));
    cfg = small_family(FAMILY_QWEN3);
    CHECK(gpt_attention_scale(&cfg) == (float)pow(6.0, -0.5), "Qwen3: scale %g", gpt_attention_scale(&cfg));
}

/* Each released model's preset carries its config.json's max_position_embeddings as its context;
 * GPT-2's leave it to --max-seq-len. */
TEST(the_released_presets_carry_their_max_position_embeddings) {
    const struct {
        const char *name;
        int max_seq_len;
    } want[] = {{"llama3.2-1b", 131072}, {"qwen3-0.6b", 40960}, {"gemma3-270m", 32768}, {"gemma3-1b", 32768},
                {"d12", 0}};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const GPTPreset *p = gpt_find_preset(want[i].name);
        REQUIRE(p, "no preset %s", want[i].name);
        CHECK(p->max_seq_len == want[i].max_seq_len, "%s: context %d, want %d", want[i].name, p->max_seq_len,
              want[i].max_seq_len);
    }
}

/* Gemma-3-270M and 1B as their config.json describe them. */
TEST(the_gemma3_presets_are_their_config_json) {
    const struct {
        const char *name;
        int layers, dim, ffn;
    } want[] = {{"gemma3-270m", 18, 640, 2048}, {"gemma3-1b", 26, 1152, 6912}};
    for (size_t i = 0; i < 2; i++) {
        const GPTPreset *p = gpt_find_preset(want[i].name);
        REQUIRE(p, "no preset %s", want[i].name);
        CHECK(p->family == FAMILY_GEMMA3 && p->num_layers == want[i].layers && p->dim == want[i].dim &&
                  p->ffn_dim == want[i].ffn && p->num_heads == 4 && p->num_kv_heads == 1 && p->head_dim == 256 &&
                  p->sliding_window == 512 && p->rope.theta == 1e6 && p->rope.scaling == ROPE_SCALING_NONE,
              "%s is not its config.json", want[i].name);
    }
}
