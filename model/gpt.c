/* model/gpt.c - presets, family switches, the parameter table and initialisation. */
#include "model/gpt.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "kernels/host_device.h"

/* GPT-2's shapes: KV heads, head dim and MLP follow from heads and width */
#define GPT2_PRESET(name, L, NH, C, note) {name, L, NH, C, note, FAMILY_GPT2, 0, 0, 0, {0, ROPE_SCALING_NONE, 0, 0, 0, 0}, 0, 0, 0}

const GPTPreset gpt_presets[] = {
    GPT2_PRESET("tiny", 2, 2, 128, NULL), /* CPU smoke tests and CI; head size 64, as the GPU attention needs */
    GPT2_PRESET("d6", 6, 6, 384, NULL),
    GPT2_PRESET("d12", 12, 12, 768, "GPT-2 124M"),
    GPT2_PRESET("d24", 24, 16, 1024, NULL),
    GPT2_PRESET("d36", 36, 20, 1280, NULL),
    GPT2_PRESET("d48", 48, 25, 1600, NULL),
    /* Llama 3.2 1B and Qwen3 0.6B as their config.json describe them (tied heads both); theta,
     * factor, low and high frequency factors, original context; their tokenizers' vocabularies and
     * their max_position_embeddings */
    {"llama3.2-1b", 16, 32, 2048, NULL, FAMILY_LLAMA, 8, 64, 8192, {5e5, ROPE_SCALING_LLAMA3, 32.0, 1.0, 4.0, 8192.0}, 0, 128256, 131072},
    {"qwen3-0.6b", 28, 16, 1024, NULL, FAMILY_QWEN3, 8, 128, 3072, {1e6, ROPE_SCALING_NONE, 0, 0, 0, 0}, 0, 151936, 40960},
    /* Gemma 3 270M and 1B (tied heads, no rope_scaling); their window of 512 and the family's
     * defaults: every 6th layer global, local base 1e4, query_pre_attn_scalar 256 */
    {"gemma3-270m", 18, 4, 640, NULL, FAMILY_GEMMA3, 1, 256, 2048, {1e6, ROPE_SCALING_NONE, 0, 0, 0, 0}, 512, 262144, 32768},
    {"gemma3-1b", 26, 4, 1152, NULL, FAMILY_GEMMA3, 1, 256, 6912, {1e6, ROPE_SCALING_NONE, 0, 0, 0, 0}, 512, 262144, 32768},
    GPT2_PRESET(NULL, 0, 0, 0, NULL),
};
#undef GPT2_PRESET

const GPTPreset *gpt_find_preset(const char *name) {
    for (const GPTPreset *p = gpt_presets; p->name; p++)
        if (strcmp(p->name, name) == 0) return p;
    return NULL;
}

void gpt_preset_list(char *buf, size_t n) {
    size_t len = 0;
    buf[0] = '\0';
    for (const GPTPreset *p = gpt_presets; p->name && len < n; p++) {
        len += (size_t)snprintf(buf + len, n - len, "%s%s", p == gpt_presets ? "" : ", ", p->name);
        if (p->note && len < n) len += (size_t)snprintf(buf + len, n - len, " (%s)", p->note);
    }
}

int gpt_round_vocab(int vocab_size) {
    return (int)round_up(vocab_size, GPT_VOCAB_ALIGN);
}

void gpt_config_finish(GPTConfig *cfg) {
    cfg->padded_vocab_size = gpt_round_vocab(cfg->vocab_size);
    if (!cfg->num_kv_heads) cfg->num_kv_heads = cfg->num_heads;
    if (!cfg->head_dim && cfg->num_heads > 0) cfg->head_dim = cfg->dim / cfg->num_heads;
    if (!cfg->ffn_dim) cfg->ffn_dim = cfg->dim > GPT_MAX_WIDTH ? cfg->dim : 4 * cfg->dim; /* check_shape refuses the first */
    if (cfg->norm_eps == 0.0f) cfg->norm_eps = 1e-5f;
}

void gpt_family_defaults(GPTConfig *cfg, ModelFamily family) {
    cfg->family = family;
    /* Gemma3TextConfig's: a window of 4096 on five layers of six, the local base 1e4, scores scaled
     * by 256^-1/2, and pad_token_id 0 as the embedding's padding_idx */
    const int gemma = family == FAMILY_GEMMA3;
    cfg->sandwich_norm = gemma;
    /* the checkpoints written here are float32, which transformers loads as float32 */
    cfg->embed_scale = gemma ? EMBED_SCALE_F32 : EMBED_SCALE_NONE;
    cfg->query_pre_attn_scalar = gemma ? 256.0f : 0.0f;
    cfg->sliding_window = gemma ? 4096 : 0;
    cfg->sliding_window_pattern = gemma ? 6 : 0;
    memset(cfg->layer_sliding, 0, sizeof cfg->layer_sliding);
    cfg->rope_local_theta = gemma ? 1e4 : 0.0;
    cfg->has_pad_token = gemma;
    cfg->pad_token_id = 0;
    if (family == FAMILY_GPT2) {
        cfg->norm = NORM_LAYERNORM;
        cfg->norm_eps = 1e-5f;
        cfg->positions = POS_LEARNED;
        cfg->mlp = MLP_GELU;
        cfg->qk_norm = cfg->qkv_bias = cfg->untied_head = 0;
        return;
    }
    /* LlamaConfig, Qwen2Config, Qwen3Config and Gemma3TextConfig's defaults, with Llama 3's theta */
    cfg->norm = gemma ? NORM_RMSNORM_ONE_PLUS_W : NORM_RMSNORM;
    cfg->positions = POS_ROPE;
    cfg->mlp = gemma ? MLP_GEGLU : MLP_SWIGLU;
    cfg->rope = (RopeParams){.theta = family == FAMILY_LLAMA ? 5e5 : 1e6, .scaling = ROPE_SCALING_NONE};
    cfg->norm_eps = family == FAMILY_LLAMA ? 1e-5f : 1e-6f;
    cfg->qk_norm = family == FAMILY_QWEN3 || gemma;
    cfg->qkv_bias = family == FAMILY_QWEN2;
}

int gpt_layer_is_sliding(const GPTConfig *cfg, int l) {
    if (cfg->sliding_window_pattern > 0) return (l + 1) % cfg->sliding_window_pattern != 0;
    return cfg->layer_sliding[l] != 0;
}

RopeParams gpt_layer_rope(const GPTConfig *cfg, int l) {
    if (cfg->rope_local_theta > 0 && gpt_layer_is_sliding(cfg, l))
        return (RopeParams){.theta = cfg->rope_local_theta, .scaling = ROPE_SCALING_NONE};
    return cfg->rope;
}

int gpt_first_local_rope_layer(const GPTConfig *cfg) {
    for (int l = 0; l < cfg->num_layers; l++)
        if (cfg->positions == POS_ROPE && cfg->rope_local_theta > 0 && gpt_layer_is_sliding(cfg, l)) return l;
    return -1;
}

int gpt_embed_pad_token(const GPTConfig *cfg) {
    return cfg->has_pad_token ? cfg->pad_token_id : -1;
}

/* x rounded to `bits` significant bits, ties to even (x finite and normal in the narrow type):
 * 8 is bf16's precision, 11 fp16's */
static float round_to_bits(float x, int bits) {
    const int drop = 24 - bits;
    const uint32_t half = (1u << (drop - 1)) - 1u;
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    u = (u + half + ((u >> drop) & 1u)) & ~((1u << drop) - 1u);
    memcpy(&x, &u, sizeof x);
    return x;
}

float gpt_embed_scale(const GPTConfig *cfg) {
    /* transformers keeps hidden_size**0.5 as an fp32 buffer and casts it to the weights' dtype in the
     * forward */
    const float scale = (float)sqrt((double)cfg->dim);
    switch (cfg->embed_scale) {
    case EMBED_SCALE_BF16: return round_to_bits(scale, 8);
    case EMBED_SCALE_F16: return round_to_bits(scale, 11);
    case EMBED_SCALE_F32: return scale;
    default: return 1.0f;
    }
}

float gpt_attention_scale(const GPTConfig *cfg) {
    /* self.scaling = query_pre_attn_scalar**-0.5 (or head_dim**-0.5): a double, rounded to fp32 where it
     * multiplies the fp32 scores */
    double base = cfg->query_pre_attn_scalar > 0 ? (double)cfg->query_pre_attn_scalar : (double)cfg->head_dim;
    return (float)pow(base, -0.5);
}

const char *gpt_family_name(ModelFamily family) {
    switch (family) {
    case FAMILY_GPT2: return "gpt2";
    case FAMILY_LLAMA: return "llama";
    case FAMILY_QWEN2: return "qwen2";
    case FAMILY_QWEN3: return "qwen3";
    case FAMILY_GEMMA3: return "gemma3";
    }
    return "?";
}

int gpt_family_parse(const char *name, ModelFamily *family) {
    const ModelFamily all[] = {FAMILY_GPT2, FAMILY_LLAMA, FAMILY_QWEN2, FAMILY_QWEN3, FAMILY_GEMMA3};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (strcmp(name, gpt_family_name(all[i])) == 0) {
            *family = all[i];
            return 0;
        }
    return -1;
}

ParamRole head_role(const GPTConfig *cfg) {
    return cfg->untied_head ? ROLE_LM_HEAD : ROLE_WTE;
}

static ParamInfo *add_param(ParamTable *t, const char *name, ParamRole role, int layer, size_t rows,
                            size_t cols, int ndim, int decay, int hf_transposed, ParamInit init, float std) {
    ParamInfo *p = &t->params[t->count];
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s", name);
    p->role = role;
    p->layer = layer;
    p->ndim = ndim;
    p->rows = rows;
    p->cols = cols;
    p->numel = rows * cols;
    p->offset = t->total;
    p->weight_decay = decay;
    p->hf_transposed = hf_transposed;
    p->init = init;
    p->init_std = std;
    if (layer < 0)
        t->global_index[role] = t->count;
    else
        t->layer_index[layer][role - FIRST_LAYER_ROLE] = t->count;
    t->total += p->numel;
    t->count++;
    return p;
}

/* Makes p a packed row: the HF tensors names[i] of rows[i] rows each, stacked in order. */
static void pack_parts(ParamInfo *p, int n, const char *const *names, const size_t *rows) {
    p->num_parts = n;
    for (int i = 0; i < n; i++) {
        snprintf(p->part[i].name, sizeof p->part[i].name, "%s", names[i]);
        p->part[i].rows = rows[i];
    }
}

/* One layer of Llama, Qwen2, Qwen3 or Gemma 3 (LlamaDecoderLayer's tensors, and Gemma3DecoderLayer's
 * sandwich norms), in the order the forward reads them, input norm first so that the layer's rows
 * start with it as GPT-2's do. */
static void add_llama_layer(ParamTable *t, int l, const GPTConfig *cfg, float std) {
    const size_t C = (size_t)cfg->dim, hd = (size_t)cfg->head_dim, F = (size_t)cfg->ffn_dim;
    const size_t q = (size_t)cfg->num_heads * hd, kv = (size_t)cfg->num_kv_heads * hd;
    const size_t qkv_rows[3] = {q, kv, kv}, glu_rows[2] = {F, F};
    const ParamInit norm_init = cfg->norm == NORM_RMSNORM_ONE_PLUS_W ? INIT_ZEROS : INIT_ONES;
    char name[64], n0[64], n1[64], n2[64];
    const char *part_names[3] = {n0, n1, n2};
#define NAME(buf, suffix) snprintf(buf, sizeof buf, "model.layers.%d.%s", l, suffix)
    NAME(name, "input_layernorm.weight");
    add_param(t, name, ROLE_LN1_W, l, 1, C, 1, 0, 0, norm_init, 0);
    NAME(name, "self_attn.{q,k,v}_proj.weight");
    NAME(n0, "self_attn.q_proj.weight");
    NAME(n1, "self_attn.k_proj.weight");
    NAME(n2, "self_attn.v_proj.weight");
    pack_parts(add_param(t, name, ROLE_QKV_W, l, q + 2 * kv, C, 2, 1, 0, INIT_NORMAL, std), 3, part_names, qkv_rows);
    if (cfg->qkv_bias) {
        NAME(name, "self_attn.{q,k,v}_proj.bias");
        NAME(n0, "self_attn.q_proj.bias");
        NAME(n1, "self_attn.k_proj.bias");
        NAME(n2, "self_attn.v_proj.bias");
        /* a vector: its parts split its columns (rows of the HF matrices) */
        pack_parts(add_param(t, name, ROLE_QKV_B, l, 1, q + 2 * kv, 1, 0, 0, INIT_ZEROS, 0), 3, part_names, qkv_rows);
    }
    if (cfg->qk_norm) {
        NAME(name, "self_attn.q_norm.weight");
        add_param(t, name, ROLE_QNORM_W, l, 1, hd, 1, 0, 0, norm_init, 0);
        NAME(name, "self_attn.k_norm.weight");
        add_param(t, name, ROLE_KNORM_W, l, 1, hd, 1, 0, 0, norm_init, 0);
    }
    NAME(name, "self_attn.o_proj.weight");
    add_param(t, name, ROLE_ATTPROJ_W, l, C, q, 2, 1, 0, INIT_NORMAL, std);
    /* HF's post_attention_layernorm is the MLP's input norm in Llama, the attention output's in Gemma */
    NAME(name, "post_attention_layernorm.weight");
    if (cfg->sandwich_norm) {
        add_param(t, name, ROLE_ATTPOST_W, l, 1, C, 1, 0, 0, norm_init, 0);
        NAME(name, "pre_feedforward_layernorm.weight");
    }
    add_param(t, name, ROLE_LN2_W, l, 1, C, 1, 0, 0, norm_init, 0);
    NAME(name, "mlp.{gate,up}_proj.weight");
    NAME(n0, "mlp.gate_proj.weight");
    NAME(n1, "mlp.up_proj.weight");
    pack_parts(add_param(t, name, ROLE_FC_W, l, 2 * F, C, 2, 1, 0, INIT_NORMAL, std), 2, part_names, glu_rows);
    NAME(name, "mlp.down_proj.weight");
    add_param(t, name, ROLE_FCPROJ_W, l, C, F, 2, 1, 0, INIT_NORMAL, std);
    if (cfg->sandwich_norm) {
        NAME(name, "post_feedforward_layernorm.weight");
        add_param(t, name, ROLE_MLPPOST_W, l, 1, C, 1, 0, 0, norm_init, 0);
    }
#undef NAME
}

/* Why the blocks cannot compute cfg, into err; 0 when they can. */
static int check_shape(const GPTConfig *cfg, char *err) {
    if (cfg->num_heads < 1 || cfg->dim < 1 || cfg->num_kv_heads < 1 || cfg->head_dim < 1 || cfg->ffn_dim < 1) {
        snprintf(err, ERR_LEN, "the model shape has a size below 1 (heads %d, kv heads %d, dim %d, head dim %d, ffn dim %d)",
                 cfg->num_heads, cfg->num_kv_heads, cfg->dim, cfg->head_dim, cfg->ffn_dim);
        return -1;
    }
    const int64_t q_width = (int64_t)cfg->num_heads * cfg->head_dim, kv_width = (int64_t)cfg->num_kv_heads * cfg->head_dim;
    if (cfg->dim > GPT_MAX_WIDTH || cfg->ffn_dim > GPT_MAX_WIDTH || q_width > GPT_MAX_WIDTH || kv_width > GPT_MAX_WIDTH) {
        snprintf(err, ERR_LEN, "the model is wider than %d (dim %d, ffn dim %d, heads x head dim %lld); the widest released "
                 "models take about 53k (check --dim, --ffn-dim, --heads and --head-dim, or config.json)", GPT_MAX_WIDTH,
                 cfg->dim, cfg->ffn_dim, (long long)(q_width > kv_width ? q_width : kv_width));
        return -1;
    }
    /* the rows each family's table holds are those of these switches: another mix has no rows */
    int sliding = 0;
    for (int l = 0; l < cfg->num_layers; l++) sliding |= gpt_layer_is_sliding(cfg, l);
    const int gpt2_switches = cfg->norm == NORM_LAYERNORM && cfg->positions == POS_LEARNED && cfg->mlp == MLP_GELU &&
                              !cfg->qk_norm && !cfg->qkv_bias && !cfg->untied_head && !cfg->sandwich_norm &&
                              !cfg->embed_scale && !sliding && cfg->query_pre_attn_scalar == 0.0f && !cfg->has_pad_token;
    const int rope_switches = cfg->norm != NORM_LAYERNORM && cfg->positions == POS_ROPE && cfg->mlp != MLP_GELU;
    if (cfg->family == FAMILY_GPT2 ? !gpt2_switches : !rope_switches) {
        snprintf(err, ERR_LEN, "the %s family has no rows for this mix of switches (set them with gpt_family_defaults)",
                 gpt_family_name(cfg->family));
        return -1;
    }
    if ((sliding && cfg->sliding_window < 1) || cfg->sliding_window < 0 || cfg->query_pre_attn_scalar < 0.0f ||
        cfg->rope_local_theta < 0.0) {
        snprintf(err, ERR_LEN, "sliding layers need a window of 1 or more, and query_pre_attn_scalar and the local RoPE "
                 "base cannot be negative (window %d, query_pre_attn_scalar %g, local theta %g)",
                 cfg->sliding_window, cfg->query_pre_attn_scalar, cfg->rope_local_theta);
        return -1;
    }
    if (cfg->has_pad_token && (cfg->pad_token_id < 0 || cfg->pad_token_id >= cfg->vocab_size)) {
        snprintf(err, ERR_LEN, "pad token %d is not one of the %d tokens of the vocabulary (pad_token_id must be below vocab_size)",
                 cfg->pad_token_id, cfg->vocab_size);
        return -1;
    }
    if (cfg->family == FAMILY_GPT2) {
        if (cfg->num_kv_heads != cfg->num_heads || cfg->head_dim * cfg->num_heads != cfg->dim ||
            cfg->ffn_dim != 4 * cfg->dim) {
            snprintf(err, ERR_LEN, "GPT-2 has kv heads = heads, head dim = dim / heads and ffn dim = 4 dim (use another --family for other shapes)");
            return -1;
        }
        return 0;
    }
    if (cfg->num_heads % cfg->num_kv_heads != 0) {
        snprintf(err, ERR_LEN, "%d heads do not split into groups of %d kv heads (pass --kv-heads dividing --heads)",
                 cfg->num_heads, cfg->num_kv_heads);
        return -1;
    }
    if (cfg->head_dim % 2 != 0 || !(cfg->rope.theta > 0.0)) {
        snprintf(err, ERR_LEN, "rotary positions need an even head dim and theta > 0 (head dim %d, theta %g): pass an "
                 "even --head-dim, or --dim and --heads whose quotient is even (config.json: head_dim, rope_theta)",
                 cfg->head_dim, cfg->rope.theta);
        return -1;
    }
    return 0;
}


int param_table_build(ParamTable *t, const GPTConfig *cfg, char *err) {
    memset(t, 0, sizeof *t);
    memset(t->global_index, -1, sizeof t->global_index);
    memset(t->layer_index, -1, sizeof t->layer_index);
    t->cfg = *cfg;
    gpt_config_finish(&t->cfg);
    cfg = &t->cfg;
    int L = cfg->num_layers;
    size_t C = (size_t)cfg->dim;
    if (L < 1 || L > GPT_MAX_LAYERS) {
        snprintf(err, ERR_LEN, "--layers %d is out of range (1..%d)", L, GPT_MAX_LAYERS);
        return -1;
    }
    if (check_shape(cfg, err) != 0) return -1;
    t->params = calloc(NUM_WHOLE_ROLES + (size_t)L * NUM_LAYER_ROLES, sizeof(ParamInfo));
    if (!t->params) {
        snprintf(err, ERR_LEN, "out of host memory for the parameter table");
        return -1;
    }
    const float std = 0.02f;
    if (cfg->family != FAMILY_GPT2) {
        add_param(t, "model.embed_tokens.weight", ROLE_WTE, -1, cfg->padded_vocab_size, C, 2, 1, 0, INIT_NORMAL, std);
        for (int l = 0; l < L; l++) {
            t->layer_begin[l] = t->total;
            add_llama_layer(t, l, cfg, std);
        }
        t->layer_begin[L] = t->total;
        add_param(t, "model.norm.weight", ROLE_LNF_W, -1, 1, C, 1, 0, 0,
                  cfg->norm == NORM_RMSNORM_ONE_PLUS_W ? INIT_ZEROS : INIT_ONES, 0);
        if (cfg->untied_head)
            add_param(t, "lm_head.weight", ROLE_LM_HEAD, -1, cfg->padded_vocab_size, C, 2, 1, 0, INIT_NORMAL, std);
        return 0;
    }
    /* Projections that write into the residual stream are scaled so the stream's variance does not
     * grow with depth (GPT-2 paper, section 2.3). */
    const float residual_std = std / sqrtf(2.0f * (float)L);
    char name[64];
    add_param(t, "transformer.wte.weight", ROLE_WTE, -1, cfg->padded_vocab_size, C, 2, 1, 0, INIT_NORMAL, std);
    add_param(t, "transformer.wpe.weight", ROLE_WPE, -1, cfg->max_seq_len, C, 2, 1, 0, INIT_NORMAL, std);
    for (int l = 0; l < L; l++) {
        t->layer_begin[l] = t->total;
#define LAYER_PARAM(suffix, role, rows, cols, ndim, decay, tr, init, sd)              \
    snprintf(name, sizeof name, "transformer.h.%d.%s", l, suffix);                  \
    add_param(t, name, role, l, rows, cols, ndim, decay, tr, init, sd)
        LAYER_PARAM("ln_1.weight", ROLE_LN1_W, 1, C, 1, 0, 0, INIT_ONES, 0);
        LAYER_PARAM("ln_1.bias", ROLE_LN1_B, 1, C, 1, 0, 0, INIT_ZEROS, 0);
        LAYER_PARAM("attn.c_attn.weight", ROLE_QKV_W, 3 * C, C, 2, 1, 1, INIT_NORMAL, std);
        LAYER_PARAM("attn.c_attn.bias", ROLE_QKV_B, 1, 3 * C, 1, 0, 0, INIT_ZEROS, 0);
        LAYER_PARAM("attn.c_proj.weight", ROLE_ATTPROJ_W, C, C, 2, 1, 1, INIT_NORMAL, residual_std);
        LAYER_PARAM("attn.c_proj.bias", ROLE_ATTPROJ_B, 1, C, 1, 0, 0, INIT_ZEROS, 0);
        LAYER_PARAM("ln_2.weight", ROLE_LN2_W, 1, C, 1, 0, 0, INIT_ONES, 0);
        LAYER_PARAM("ln_2.bias", ROLE_LN2_B, 1, C, 1, 0, 0, INIT_ZEROS, 0);
        LAYER_PARAM("mlp.c_fc.weight", ROLE_FC_W, 4 * C, C, 2, 1, 1, INIT_NORMAL, std);
        LAYER_PARAM("mlp.c_fc.bias", ROLE_FC_B, 1, 4 * C, 1, 0, 0, INIT_ZEROS, 0);
        LAYER_PARAM("mlp.c_proj.weight", ROLE_FCPROJ_W, C, 4 * C, 2, 1, 1, INIT_NORMAL, residual_std);
        LAYER_PARAM("mlp.c_proj.bias", ROLE_FCPROJ_B, 1, C, 1, 0, 0, INIT_ZEROS, 0);
#undef LAYER_PARAM
    }
    t->layer_begin[L] = t->total;
    add_param(t, "transformer.ln_f.weight", ROLE_LNF_W, -1, 1, C, 1, 0, 0, INIT_ONES, 0);
    add_param(t, "transformer.ln_f.bias", ROLE_LNF_B, -1, 1, C, 1, 0, 0, INIT_ZEROS, 0);
    return 0;
}

void param_table_free(ParamTable *t) {
    free(t->params);
    t->params = NULL;
    t->count = 0;
}

const ParamInfo *param_whole(const ParamTable *t, ParamRole role) {
    int i = t->global_index[role];
    return i < 0 ? NULL : &t->params[i];
}

const ParamInfo *param_of_layer(const ParamTable *t, int layer, ParamRole role) {
    int i = t->layer_index[layer][role - FIRST_LAYER_ROLE];
    return i < 0 ? NULL : &t->params[i];
}

static float *at_row(float *base, const ParamInfo *p) {
    return p ? base + p->offset : NULL;
}

LayerTensors layer_tensors(const ParamTable *t, float *base, int l) {
#define AT(role) at_row(base, param_of_layer(t, l, role))
    LayerTensors lt = {
        AT(ROLE_LN1_W), AT(ROLE_LN1_B), AT(ROLE_QKV_W),  AT(ROLE_QKV_B), AT(ROLE_QNORM_W), AT(ROLE_KNORM_W),
        AT(ROLE_ATTPROJ_W), AT(ROLE_ATTPROJ_B), AT(ROLE_ATTPOST_W), AT(ROLE_LN2_W), AT(ROLE_LN2_B),
        AT(ROLE_FC_W), AT(ROLE_FC_B), AT(ROLE_FCPROJ_W), AT(ROLE_FCPROJ_B), AT(ROLE_MLPPOST_W),
    };
#undef AT
    return lt;
}

float *whole_tensor(const ParamTable *t, float *base, ParamRole role) {
    return at_row(base, param_whole(t, role));
}

/* The n-th uniform in (0, 1] of the stream `key`: splitmix64's n-th output, read at any place. */
static double init_uniform(uint64_t key, uint64_t n) {
    return (double)((splitmix64_mix(key + (n + 1) * 0x9e3779b97f4a7c15ull) >> 11) + 1) * 0x1.0p-53;
}

/* Each tensor's values depend on the seed, the tensor's place in the table and their own place only
 * (pairs by Box-Muller from the tensor's own uniform stream, cos then sin), so threads fill them in
 * any order and any number with the same bits. One thread drawing a single sequence spent 20-45 s
 * of Qwen3-0.6B's and Llama-3.2-1B's start-up here, with the GPU idle. */
void param_init(const ParamTable *t, float *params, uint64_t seed) {
    for (int i = 0; i < t->count; i++) {
        const ParamInfo *p = &t->params[i];
        float *x = params + p->offset;
        const int64_t n = (int64_t)p->numel;
        if (p->init != INIT_NORMAL) {
            const float v = p->init == INIT_ONES ? 1.0f : 0.0f;
            for (int64_t j = 0; j < n; j++) x[j] = v;
            continue;
        }
        const uint64_t key = splitmix64_mix(seed ^ splitmix64_mix((uint64_t)i + 0x632be59bd9b4e019ull));
        const double std = p->init_std;
#pragma omp parallel for schedule(static)
        for (int64_t pair = 0; pair < (n + 1) / 2; pair++) {
            const double r = sqrt(-2.0 * log(init_uniform(key, 2 * (uint64_t)pair))) * std;
            const double angle = 6.283185307179586 * init_uniform(key, 2 * (uint64_t)pair + 1);
            x[2 * pair] = (float)(r * cos(angle));
            if (2 * pair + 1 < n) x[2 * pair + 1] = (float)(r * sin(angle));
        }
    }
    /* Padded embedding rows stay zero: they are never a target and get no probability mass, so
     * they never receive gradient either; zero keeps exported checkpoints clean. */
    const ParamRole vocab_rows[2] = {ROLE_WTE, ROLE_LM_HEAD};
    for (int r = 0; r < 2; r++) {
        const ParamInfo *p = param_whole(t, vocab_rows[r]);
        if (!p) continue;
        for (size_t j = (size_t)t->cfg.vocab_size * p->cols; j < p->numel; j++) params[p->offset + j] = 0.0f;
    }
    /* transformers' _init_weights zeroes an nn.Embedding's padding_idx row */
    if (t->cfg.has_pad_token) {
        const ParamInfo *p = param_whole(t, ROLE_WTE);
        memset(params + p->offset + (size_t)t->cfg.pad_token_id * p->cols, 0, p->cols * sizeof(float));
    }
}

BlockWidths gpt_block_widths(const GPTConfig *cfg) {
    BlockWidths w = {(size_t)cfg->dim, (size_t)(cfg->num_heads + 2 * cfg->num_kv_heads) * cfg->head_dim,
                     (size_t)cfg->num_heads * cfg->head_dim, (size_t)cfg->ffn_dim, (size_t)cfg->ffn_dim};
    if (cfg->mlp != MLP_GELU) w.FW = 2 * w.F;
    return w;
}

/* The (query, key) pairs a causal layer computes over T positions when a query sees at most W keys
 * (W >= T: all before it). */
static double causal_pairs(double T, double W) {
    if (W >= T) return T * (T + 1) / 2;
    return W * (W + 1) / 2 + (T - W) * W;
}

double gpt_flops_per_token(const GPTConfig *cfg, int T) {
    /* PaLM's count (appendix B), as llm.c and the peers' MFU figures use it: 6 FLOPs per matmul
     * parameter per token for forward + backward (the output projection counts, the position
     * embedding does not), plus 12·NH·hd·T per layer for attention's QK^T and AV (causal masking not
     * credited; grouped-query attention shares K and V but every query head still does its own). A
     * sliding layer is charged that times the share of a causal layer's pairs its window leaves
     * (T·W-ish, not T²), so a window of T or more costs what a global layer does. */
    GPTConfig c = *cfg;
    gpt_config_finish(&c);
    double C = c.dim, L = c.num_layers, attn = (double)c.num_heads * c.head_dim;
    double qkv = (double)(c.num_heads + 2 * c.num_kv_heads) * c.head_dim;
    double mlp_in = c.mlp == MLP_GELU ? c.ffn_dim : 2.0 * c.ffn_dim;
    double matmul_params = L * (C * qkv + attn * C + C * mlp_in + (double)c.ffn_dim * C) + (double)c.vocab_size * C;
    double layers = 0.0; /* global-layer equivalents */
    for (int l = 0; l < c.num_layers; l++)
        layers += gpt_layer_is_sliding(&c, l) ? causal_pairs(T, c.sliding_window) / causal_pairs(T, T) : 1.0;
    return 6.0 * matmul_params + 12.0 * layers * attn * T;
}

void gpt_cap_logits(const GPTConfig *cfg, float *logits, int n) {
    const float cap = cfg->logit_softcap;
    if (cap > 0.0f)
        for (int i = 0; i < n; i++) logits[i] = cap * tanhf(logits[i] / cap);
}
