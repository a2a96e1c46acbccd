/* model/train/hf_weights.c - Hugging Face config.json and weights of every family into our config
 * and parameter layout, and config.json back out (see hf_weights.h). */
#include "model/train/hf_weights.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include "common/err.h"
#include "common/json.h"
#include "common/paths.h"
#include "common/safetensors.h"

/* A whole file, NUL after its bytes (malloc'ed), or NULL with a message. */
static char *read_whole(const char *path, size_t *len, char *err) {
    char why[ERR_LEN];
    FILE *f = open_regular(path, why);
    if (!f) {
        if (why[0])
            snprintf(err, ERR_LEN, "%s", why);
        else if (errno == EISDIR)
            snprintf(err, ERR_LEN, "%s is a directory, not a file (pass a Hugging Face checkpoint directory)", path);
        else
            snprintf(err, ERR_LEN, "cannot open %s: %s (pass a Hugging Face checkpoint directory)", path,
                     strerror(errno));
        return NULL;
    }
    char *buf = read_stream_whole(f, len);
    if (!buf)
        snprintf(err, ERR_LEN, "cannot read %s: %s", path, strerror(errno));
    fclose(f);
    return buf;
}

/* A JSON file parsed, or NULL with a message. */
static JsonValue *read_json(const char *path, char *err) {
    size_t len;
    char *text = read_whole(path, &len, err);
    if (!text) return NULL;
    char jerr[ERR_LEN];
    JsonValue *root = json_parse(text, len, path, jerr);
    free(text);
    if (!root) snprintf(err, ERR_LEN, "%s", jerr);
    else if (root->type != JSON_OBJECT)
        snprintf(err, ERR_LEN, "%s is not a JSON object, as a Hugging Face model directory's %s is (copy or "
                 "download it again)", path, strrchr(path, '/') ? strrchr(path, '/') + 1 : path);
    if (root && root->type != JSON_OBJECT) {
        json_free(root);
        return NULL;
    }
    return root;
}

/* ---- config.json ---- */

/* The JSON type transformers writes for each config.json field read here. */
typedef enum {
    FIELD_STRING, FIELD_BOOL, FIELD_NUMBER, FIELD_INT, FIELD_INT_OR_NULL, FIELD_OBJECT_OR_NULL, FIELD_ARRAY_OR_NULL
} FieldType;

static const struct {
    const char *key;
    FieldType type;
} config_fields[] = {
    {"model_type", FIELD_STRING},          {"activation_function", FIELD_STRING},
    {"n_layer", FIELD_INT},                {"n_head", FIELD_INT},
    {"n_embd", FIELD_INT},                 {"vocab_size", FIELD_INT},
    {"n_positions", FIELD_INT},            {"n_ctx", FIELD_INT},
    {"n_inner", FIELD_INT_OR_NULL},        {"tie_word_embeddings", FIELD_BOOL},
    {"resid_pdrop", FIELD_NUMBER},         {"embd_pdrop", FIELD_NUMBER},
    {"attn_pdrop", FIELD_NUMBER},
    {"layer_norm_epsilon", FIELD_NUMBER},  {"scale_attn_weights", FIELD_BOOL},
    {"scale_attn_by_inverse_layer_idx", FIELD_BOOL},
    /* LlamaConfig, Qwen2Config, Qwen3Config */
    {"hidden_size", FIELD_INT},            {"intermediate_size", FIELD_INT},
    {"num_hidden_layers", FIELD_INT},      {"num_attention_heads", FIELD_INT},
    {"num_key_value_heads", FIELD_INT_OR_NULL}, {"head_dim", FIELD_INT_OR_NULL},
    {"rms_norm_eps", FIELD_NUMBER},        {"rope_theta", FIELD_NUMBER},
    {"rope_scaling", FIELD_OBJECT_OR_NULL}, {"rope_parameters", FIELD_OBJECT_OR_NULL},
    {"attention_bias", FIELD_BOOL},        {"mlp_bias", FIELD_BOOL},
    {"hidden_act", FIELD_STRING},          {"max_position_embeddings", FIELD_INT},
    {"use_sliding_window", FIELD_BOOL},    {"attention_dropout", FIELD_NUMBER},
    {"layer_types", FIELD_ARRAY_OR_NULL},  {"max_window_layers", FIELD_INT},
    /* Gemma3TextConfig */
    {"hidden_activation", FIELD_STRING},   {"query_pre_attn_scalar", FIELD_INT},
    {"sliding_window", FIELD_INT_OR_NULL}, {"sliding_window_pattern", FIELD_INT},
    {"rope_local_base_freq", FIELD_NUMBER}, {"pad_token_id", FIELD_INT_OR_NULL},
    {"use_bidirectional_attention", FIELD_BOOL},
};

static int has_type(const JsonValue *v, FieldType want) {
    switch (want) {
    case FIELD_STRING: return v->type == JSON_STRING;
    case FIELD_BOOL: return v->type == JSON_TRUE || v->type == JSON_FALSE;
    case FIELD_NUMBER: return v->type == JSON_NUMBER;
    case FIELD_INT: return v->type == JSON_NUMBER && v->integer;
    case FIELD_INT_OR_NULL: return (v->type == JSON_NUMBER && v->integer) || v->type == JSON_NULL;
    case FIELD_OBJECT_OR_NULL: return v->type == JSON_OBJECT || v->type == JSON_NULL;
    case FIELD_ARRAY_OR_NULL: return v->type == JSON_ARRAY || v->type == JSON_NULL;
    }
    return 0;
}

/* Every field read has the type transformers writes: a value of another type (31 for model_type, 0 for
 * tie_word_embeddings) is a hand-edited or foreign file, and reading around it would be a guess. The
 * range of an integer is checked where it is read. */
static int check_field_types(const JsonValue *root, const char *path, char *err) {
    static const char *expected[] = {"a string", "true or false", "a number", "an integer", "an integer or null",
                                     "an object or null", "an array or null"};
    for (size_t i = 0; i < sizeof config_fields / sizeof config_fields[0]; i++) {
        const JsonValue *v = json_get(root, config_fields[i].key);
        if (v && !has_type(v, config_fields[i].type)) {
            /* transformers' sizes refuse a float: nn.Linear(512.0, ...) is a TypeError */
            const FieldType want = config_fields[i].type;
            if (v->type == JSON_NUMBER && (want == FIELD_INT || want == FIELD_INT_OR_NULL))
                snprintf(err, ERR_LEN, "%s: \"%s\" is %.10g written with a fraction or exponent, expected an integer "
                         "(write it as one, as transformers does)", path, config_fields[i].key, v->number);
            else
                snprintf(err, ERR_LEN, "%s: \"%s\" is %s, expected %s (re-save the config with transformers, or fix the "
                         "field)", path, config_fields[i].key, json_type_name(v->type), expected[want]);
            return -1;
        }
        /* a \u0000 would cut the name short where it is read as text ("gpt2\u0000x" is no gpt2) */
        if (v && v->type == JSON_STRING && strlen(v->string) != v->len) {
            snprintf(err, ERR_LEN, "%s: \"%s\" holds a NUL character (\\u0000), which no value of it does (fix the field)",
                     path, config_fields[i].key);
            return -1;
        }
    }
    return 0;
}

static int get_int(const JsonValue *cfg, const char *key, const char *path, long long *out, char *err) {
    if (!json_int(json_get(cfg, key), 1, 1 << 30, out)) {
        snprintf(err, ERR_LEN, "%s: \"%s\" is missing or not a positive integer up to 2^30", path, key);
        return -1;
    }
    return 0;
}

/* An optional positive integer: its value; absent, the config class's default; null, what the
 * class puts in place of None. */
static int get_int_or(const JsonValue *cfg, const char *key, long long absent, long long null, const char *path,
                      long long *out, char *err) {
    const JsonValue *v = json_get(cfg, key);
    if (!v || v->type == JSON_NULL) {
        *out = v ? null : absent;
        return 0;
    }
    return get_int(cfg, key, path, out, err);
}

/* -1 with a message when `key` is null: a config class that keeps None there builds no model. */
static int not_null(const JsonValue *cfg, const char *key, const char *path, char *err) {
    const JsonValue *v = json_get(cfg, key);
    if (!v || v->type != JSON_NULL) return 0;
    snprintf(err, ERR_LEN, "%s: \"%s\" is null, which transformers cannot build a model from (give the value, or "
             "leave the field out for the config class's default)", path, key);
    return -1;
}

static int is_true(const JsonValue *v) {
    return v && v->type == JSON_TRUE;
}

static int read_gpt2_config(const JsonValue *root, const char *path, GPTConfig *cfg, char *err) {
    long long L, NH, C, T, V, inner_v = 0;
    const char *act = json_string(json_get(root, "activation_function"));
    const JsonValue *inner = json_get(root, "n_inner"), *tie = json_get(root, "tie_word_embeddings");
    const JsonValue *eps = json_get(root, "layer_norm_epsilon"), *by_layer = json_get(root, "scale_attn_by_inverse_layer_idx");
    const JsonValue *scale = json_get(root, "scale_attn_weights");
    if (get_int(root, "n_layer", path, &L, err) || get_int(root, "n_head", path, &NH, err) ||
        get_int(root, "n_embd", path, &C, err) || get_int(root, "vocab_size", path, &V, err) ||
        /* GPT2Config's context is n_positions, 1024 when absent; it never reads n_ctx */
        get_int_or(root, "n_positions", 1024, 1024, path, &T, err))
        return -1;
    if (act && strcmp(act, "gelu_new") != 0 && strcmp(act, "gelu_pytorch_tanh") != 0)
        snprintf(err, ERR_LEN, "%s: activation_function %s is not supported (the tanh GELU, gelu_new, is)", path, act);
    else if (inner && inner->type != JSON_NULL && (!json_int(inner, 1, 1 << 30, &inner_v) || inner_v != 4 * C))
        snprintf(err, ERR_LEN, "%s: n_inner is not 4 x n_embd; only GPT-2's MLP width is supported", path);
    else if (tie && tie->type == JSON_FALSE)
        snprintf(err, ERR_LEN, "%s: tie_word_embeddings is false; GPT-2's output layer here is the token embedding", path);
    else if (eps && fabs(eps->number - 1e-5) > 1e-9)
        snprintf(err, ERR_LEN, "%s: layer_norm_epsilon is not 1e-5, the one this trainer uses", path);
    else if (is_true(by_layer) || (scale && scale->type == JSON_FALSE))
        snprintf(err, ERR_LEN, "%s: attention scaled other than by 1/sqrt(head size) is not supported", path);
    else if (C % NH)
        snprintf(err, ERR_LEN, "%s: n_head %lld does not divide n_embd %lld (not a GPT-2 this trainer can build: "
                 "is config.json damaged?)", path, NH, C);
    else {
        cfg->num_layers = (int)L;
        cfg->num_heads = (int)NH;
        cfg->dim = (int)C;
        cfg->max_seq_len = (int)T;
        cfg->vocab_size = (int)V;
        return 0;
    }
    return -1;
}

/* A config number the model keeps as a float: positive, and a normal float (neither 0, subnormal nor
 * inf once a float: a RoPE factor of 1e-40 would make 1/factor inf, and every angle NaN). */
static int positive_float(const JsonValue *v) {
    return v && v->type == JSON_NUMBER && v->number > 0 && (float)v->number >= FLT_MIN && isfinite((float)v->number);
}

/* A positive number of a rope_scaling object; -1 with a message when it is missing. */
static int rope_number(const JsonValue *rope, const char *field, const char *key, const char *path, double *out,
                       char *err) {
    const JsonValue *v = json_get(rope, key);
    if (!positive_float(v)) { /* 1e-40 would be 0 in the kernels' floats, and every angle NaN */
        snprintf(err, ERR_LEN, "%s: %s.%s is missing or not a positive number that a float holds (transformers needs "
                 "it for this rope_type)", path, field, key);
        return -1;
    }
    *out = v->number;
    return 0;
}

/* The scaling of a rope_scaling or rope_parameters object r (field: its name in messages); RoPE types
 * other than default, linear and llama3 are refused. */
static int read_rope_type(const JsonValue *r, const char *field, const char *path, RopeParams *rope, char *err) {
    const char *type = json_string(json_get(r, "rope_type"));
    if (!type) type = json_string(json_get(r, "type"));
    if (!type || strcmp(type, "default") == 0) return 0;
    if (strcmp(type, "linear") == 0) {
        rope->scaling = ROPE_SCALING_LINEAR;
        return rope_number(r, field, "factor", path, &rope->factor, err);
    }
    if (strcmp(type, "llama3") == 0) {
        rope->scaling = ROPE_SCALING_LLAMA3;
        if (rope_number(r, field, "factor", path, &rope->factor, err) ||
            rope_number(r, field, "low_freq_factor", path, &rope->low_freq_factor, err) ||
            rope_number(r, field, "high_freq_factor", path, &rope->high_freq_factor, err) ||
            rope_number(r, field, "original_max_position_embeddings", path, &rope->original_max_position_embeddings, err))
            return -1;
        if (!(rope->high_freq_factor > rope->low_freq_factor)) {
            snprintf(err, ERR_LEN, "%s: %s.high_freq_factor must be above low_freq_factor", path, field);
            return -1;
        }
        return 0;
    }
    snprintf(err, ERR_LEN, "%s: %s rope_type %s is not computed here (default, linear and llama3 are)", path, field, type);
    return -1;
}

/* A RoPE base: r's rope_theta (`name` in messages), else the config's field `key`, else dflt; a value
 * that is not a positive number is refused naming its field. Both set and different: transformers 4
 * reads `key`, 5 reads r's, so the file means another RoPE to each; refused too. */
static int read_theta(const JsonValue *r, const JsonValue *root, const char *key, double dflt, const char *name,
                      const char *path, double *theta, char *err) {
    const JsonValue *inner = json_get(r, "rope_theta"), *outer = json_get(root, key);
    if (outer && outer->type == JSON_NULL) outer = NULL;
    const JsonValue *v = inner ? inner : outer;
    *theta = dflt;
    if (!v) return 0;
    if (!positive_float(v)) {
        snprintf(err, ERR_LEN, "%s: %s is not a positive number that a float holds", path, inner ? name : key);
        return -1;
    }
    if (inner && outer && !(outer->type == JSON_NUMBER && outer->number == inner->number)) {
        snprintf(err, ERR_LEN, "%s: %s and %s are both set and differ; transformers 4 takes the first and 5 the second "
                 "(keep one)", path, key, name);
        return -1;
    }
    *theta = v->number;
    return 0;
}

/* A config with rope_parameters (as transformers 5 writes it) and a rope_scaling object (as 4 does)
 * besides: 5 takes rope_scaling in place of rope_parameters, bases included (Gemma 3: merged into
 * its full_attention entry), and 4 never reads rope_parameters, so which RoPE the file means depends
 * on the reader; -1 with a message. */
static int both_rope_forms(const JsonValue *root, const char *path, char *err) {
    const JsonValue *params = json_get(root, "rope_parameters"), *scaling = json_get(root, "rope_scaling");
    if (!params || params->type != JSON_OBJECT || !scaling || scaling->type != JSON_OBJECT) return 0;
    snprintf(err, ERR_LEN, "%s: sets both rope_parameters and rope_scaling, which transformers 4 and 5 read as "
             "different RoPE (keep rope_parameters, as transformers 5 writes it, or rope_theta with rope_scaling)", path);
    return -1;
}

/* rope_theta and rope_scaling as transformers 4 writes them, or rope_parameters as transformers 5
 * does (theta inside). */
static int read_rope(const JsonValue *root, const char *path, RopeParams *rope, char *err) {
    const JsonValue *params = json_get(root, "rope_parameters"), *scaling = json_get(root, "rope_scaling");
    if (both_rope_forms(root, path, err)) return -1;
    const char *field = params && params->type == JSON_OBJECT ? "rope_parameters" : "rope_scaling";
    const JsonValue *r = params && params->type == JSON_OBJECT ? params : scaling;
    *rope = (RopeParams){.scaling = ROPE_SCALING_NONE}; /* theta 10000: the config classes' default */
    char name[40];
    snprintf(name, sizeof name, "%s.rope_theta", field);
    if (read_theta(r, root, "rope_theta", 10000.0, name, path, &rope->theta, err) != 0) return -1;
    if (!r || r->type != JSON_OBJECT) return 0;
    return read_rope_type(r, field, path, rope, err);
}

/* pad_token_id, the embedding's padding_idx (its row starts at zero and its lookups give it no
 * gradient), as the family's embedding takes it: absent, the config class's default (Gemma's 0;
 * Llama's and Qwen's None), null none, and a negative one counts from the end of the V rows, as
 * nn.Embedding counts it (converted LLaMA checkpoints carry -1). */
static int read_pad_token(const JsonValue *root, const char *path, ModelFamily family, long long V, GPTConfig *cfg,
                          char *err) {
    const JsonValue *v = json_get(root, "pad_token_id");
    long long pad = 0;
    if (v && v->type != JSON_NULL && !json_int(v, -V, 1 << 30, &pad)) {
        snprintf(err, ERR_LEN, "%s: pad_token_id is not a token id (an integer from -vocab_size, or null)", path);
        return -1;
    }
    if (pad < 0) pad += V;
    cfg->has_pad_token = v ? v->type != JSON_NULL : family == FAMILY_GEMMA3;
    cfg->pad_token_id = cfg->has_pad_token ? (int)pad : 0;
    return 0;
}

/* Llama, Qwen2 and Qwen3: the fields their config classes read, with those classes' defaults. */
static int read_rope_family_config(const JsonValue *root, const char *path, ModelFamily family, GPTConfig *cfg,
                                   char *err) {
    long long L, NH, C, F, V, NKV, hd, T;
    const int qwen = family != FAMILY_LLAMA;
    if (get_int(root, "num_hidden_layers", path, &L, err) || get_int(root, "num_attention_heads", path, &NH, err) ||
        get_int(root, "hidden_size", path, &C, err) || get_int(root, "intermediate_size", path, &F, err) ||
        get_int(root, "vocab_size", path, &V, err) ||
        /* LlamaConfig leaves it to the heads; Qwen2Config and Qwen3Config default to 32 */
        get_int_or(root, "num_key_value_heads", qwen ? 32 : NH, NH, path, &NKV, err) ||
        get_int_or(root, "head_dim", family == FAMILY_QWEN3 ? 128 : C / NH, C / NH, path, &hd, err) ||
        /* Qwen2's and Qwen3's attention take a null head_dim as it is: transformers 4 fails, 5 refuses it */
        (family != FAMILY_LLAMA && not_null(root, "head_dim", path, err)) ||
        get_int_or(root, "max_position_embeddings", qwen ? 32768 : 2048, qwen ? 32768 : 2048, path, &T, err))
        return -1;
    const char *act = json_string(json_get(root, "hidden_act"));
    const JsonValue *eps = json_get(root, "rms_norm_eps");
    const JsonValue *layer_types = json_get(root, "layer_types");
    if (act && strcmp(act, "silu") != 0) {
        snprintf(err, ERR_LEN, "%s: hidden_act %s is not computed here (%s's MLP is SwiGLU: silu)", path, act,
                 hf_architecture(family));
        return -1;
    }
    /* Qwen2 has q, k and v biases whatever the field says; Llama's and Qwen3's would bias o_proj too */
    if (family != FAMILY_QWEN2 && is_true(json_get(root, "attention_bias"))) {
        snprintf(err, ERR_LEN, "%s: attention_bias is true; biases on the attention projections are computed for qwen2 "
                 "only (q, k, v)", path);
        return -1;
    }
    if (is_true(json_get(root, "mlp_bias"))) {
        snprintf(err, ERR_LEN, "%s: mlp_bias is true; the MLP here has no biases", path);
        return -1;
    }
    /* Qwen2Config's and Qwen3Config's rule when layer_types is not given: with use_sliding_window and
     * a sliding_window, layers from max_window_layers on slide (none when it is L or more). LlamaConfig
     * has no such field, and transformers passes it over there. */
    long long first_sliding;
    const JsonValue *window = json_get(root, "sliding_window");
    if (qwen && is_true(json_get(root, "use_sliding_window")) && (!window || window->type != JSON_NULL) &&
        (!layer_types || layer_types->type == JSON_NULL)) {
        const JsonValue *from = json_get(root, "max_window_layers");
        first_sliding = 28; /* the classes' default */
        if (from && !json_int(from, -(1LL << 30), 1LL << 30, &first_sliding)) {
            snprintf(err, ERR_LEN, "%s: \"max_window_layers\" is not an integer up to 2^30", path);
            return -1;
        }
        if (first_sliding < L) {
            snprintf(err, ERR_LEN, "%s: use_sliding_window is true and max_window_layers is %lld, so layers %lld to %lld "
                     "would see a sliding window; attention here sees every earlier token (set max_window_layers "
                     "to %lld or use_sliding_window to false)", path, first_sliding,
                     first_sliding < 0 ? 0 : first_sliding, L - 1, L);
            return -1;
        }
    }
    for (size_t i = 0; layer_types && layer_types->type == JSON_ARRAY && i < layer_types->len; i++) {
        const char *kind = json_string(&layer_types->items[i]);
        if (!kind || strcmp(kind, "full_attention") != 0) {
            snprintf(err, ERR_LEN, "%s: layer_types[%zu] is not \"full_attention\", the one attention computed here",
                     path, i);
            return -1;
        }
    }
    if (eps && !positive_float(eps)) {
        snprintf(err, ERR_LEN, "%s: rms_norm_eps is not a positive number that a float holds (1e-6 is usual)", path);
        return -1;
    }
    gpt_family_defaults(cfg, family);
    if (read_rope(root, path, &cfg->rope, err) != 0 || read_pad_token(root, path, family, V, cfg, err) != 0) return -1;
    cfg->num_layers = (int)L;
    cfg->num_heads = (int)NH;
    cfg->dim = (int)C;
    cfg->ffn_dim = (int)F;
    cfg->vocab_size = (int)V;
    cfg->num_kv_heads = (int)NKV;
    cfg->head_dim = (int)hd;
    cfg->max_seq_len = (int)T;
    cfg->norm_eps = eps ? (float)eps->number : 1e-6f;
    cfg->untied_head = !is_true(json_get(root, "tie_word_embeddings")); /* untied unless said */
    return 0;
}

static int is_false(const JsonValue *v) {
    return v && v->type == JSON_FALSE;
}

/* Gemma's RoPE: the global layers' (theta and scaling) and the sliding layers' base, from
 * rope_parameters' full_attention and sliding_attention entries as transformers 5 writes them, or from
 * rope_theta, rope_scaling and rope_local_base_freq as transformers 4 does; Gemma3TextConfig's bases
 * where neither says. The sliding layers' RoPE is never scaled here. */
static int read_gemma3_rope(const JsonValue *root, const char *path, RopeParams *global, double *local_theta,
                            char *err) {
    const JsonValue *params = json_get(root, "rope_parameters");
    *global = (RopeParams){.scaling = ROPE_SCALING_NONE};
    if (both_rope_forms(root, path, err)) return -1;
    if (!params || params->type != JSON_OBJECT) {
        const JsonValue *scaling = json_get(root, "rope_scaling");
        return read_theta(NULL, root, "rope_theta", 1e6, "rope_theta", path, &global->theta, err) ||
               read_theta(NULL, root, "rope_local_base_freq", 1e4, "rope_local_base_freq", path, local_theta, err) ||
               (scaling && scaling->type == JSON_OBJECT && read_rope_type(scaling, "rope_scaling", path, global, err))
                   ? -1 : 0;
    }
    const JsonValue *full = json_get(params, "full_attention"), *sliding = json_get(params, "sliding_attention");
    if ((!full && !sliding) || (full && full->type != JSON_OBJECT) || (sliding && sliding->type != JSON_OBJECT)) {
        snprintf(err, ERR_LEN, "%s: rope_parameters has no full_attention and sliding_attention objects, one per layer "
                 "type as Gemma3TextConfig keeps them (re-save the config with transformers)", path);
        return -1;
    }
    RopeParams local = {.scaling = ROPE_SCALING_NONE};
    if (read_theta(full, root, "rope_theta", 1e6, "rope_parameters.full_attention.rope_theta", path, &global->theta,
                   err) ||
        read_rope_type(full, "rope_parameters.full_attention", path, global, err) ||
        read_theta(sliding, root, "rope_local_base_freq", 1e4, "rope_parameters.sliding_attention.rope_theta", path,
                   local_theta, err) ||
        read_rope_type(sliding, "rope_parameters.sliding_attention", path, &local, err))
        return -1;
    if (local.scaling != ROPE_SCALING_NONE) {
        snprintf(err, ERR_LEN, "%s: rope_parameters.sliding_attention is scaled; the sliding layers' RoPE here is the "
                 "unscaled one (rope_type default)", path);
        return -1;
    }
    return 0;
}

/* Which layers slide: layer_types, one "sliding_attention" or "full_attention" per layer, or else
 * every layer but each sliding_window_pattern-th (transformers' rule for configs without layer_types). */
static int read_gemma3_layers(const JsonValue *root, const char *path, long long L, GPTConfig *cfg, char *err) {
    const JsonValue *types = json_get(root, "layer_types");
    memset(cfg->layer_sliding, 0, sizeof cfg->layer_sliding);
    if (!types || types->type != JSON_ARRAY) {
        long long P;
        if (get_int_or(root, "sliding_window_pattern", 6, 6, path, &P, err) != 0) return -1;
        cfg->sliding_window_pattern = (int)P;
        return 0;
    }
    if (types->len != (size_t)L) {
        snprintf(err, ERR_LEN, "%s: layer_types has %zu entries but num_hidden_layers is %lld (one per layer)", path,
                 types->len, L);
        return -1;
    }
    cfg->sliding_window_pattern = 0;
    for (size_t i = 0; i < types->len; i++) {
        const char *kind = json_string(&types->items[i]);
        if (kind && strcmp(kind, "sliding_attention") == 0) cfg->layer_sliding[i] = 1;
        else if (!kind || strcmp(kind, "full_attention") != 0) {
            snprintf(err, ERR_LEN, "%s: layer_types[%zu] is not \"sliding_attention\" or \"full_attention\", the "
                     "attentions computed here", path, i);
            return -1;
        }
    }
    /* a pattern beside the list that gives the same layers is kept, so that the config writes back as
     * it was read (ours hold both) */
    long long P = 0;
    const JsonValue *pattern = json_get(root, "sliding_window_pattern");
    int same = pattern && json_int(pattern, 1, 1 << 30, &P);
    for (long long l = 0; same && l < L; l++) same = cfg->layer_sliding[l] == ((l + 1) % P != 0);
    if (same) cfg->sliding_window_pattern = (int)P;
    return 0;
}

/* Gemma3TextConfig: the fields it reads, with its defaults (they describe a model of 26 layers at
 * width 2304: a multimodal checkpoint's text_config leaves out those it shares with them). */
static int read_gemma3_config(const JsonValue *root, const char *path, GPTConfig *cfg, char *err) {
    long long L, NH, C, F, V, NKV, hd, T, W;
    if (get_int_or(root, "num_hidden_layers", 26, 26, path, &L, err) ||
        get_int_or(root, "num_attention_heads", 8, 8, path, &NH, err) ||
        get_int_or(root, "hidden_size", 2304, 2304, path, &C, err) ||
        get_int_or(root, "intermediate_size", 9216, 9216, path, &F, err) ||
        get_int_or(root, "vocab_size", 262208, 262208, path, &V, err) ||
        get_int_or(root, "num_key_value_heads", 4, NH, path, &NKV, err) ||
        get_int_or(root, "head_dim", 256, C / NH, path, &hd, err) ||
        /* Gemma3TextConfig keeps a null as it is: transformers 4 fails on it, 5 refuses it */
        not_null(root, "num_key_value_heads", path, err) || not_null(root, "head_dim", path, err) ||
        get_int_or(root, "max_position_embeddings", 131072, 131072, path, &T, err) ||
        get_int_or(root, "sliding_window", 4096, 0, path, &W, err))
        return -1;
    const char *act = json_string(json_get(root, "hidden_activation"));
    const JsonValue *eps = json_get(root, "rms_norm_eps");
    const JsonValue *scalar = json_get(root, "query_pre_attn_scalar"), *attn_cap = json_get(root, "attn_logit_softcapping");
    if (L > GPT_MAX_LAYERS)
        snprintf(err, ERR_LEN, "%s: num_hidden_layers %lld is above the %d layers a model here has", path, L,
                 GPT_MAX_LAYERS);
    else if (act && strcmp(act, "gelu_pytorch_tanh") != 0)
        snprintf(err, ERR_LEN, "%s: hidden_activation %s is not computed here (Gemma3ForCausalLM's MLP is GeGLU: "
                 "gelu_pytorch_tanh)", path, act);
    else if (is_true(json_get(root, "attention_bias")))
        snprintf(err, ERR_LEN, "%s: attention_bias is true; the attention projections here have no biases", path);
    else if (attn_cap && attn_cap->type != JSON_NULL)
        snprintf(err, ERR_LEN, "%s: attn_logit_softcapping is set; attention scores here are not soft-capped (set it "
                 "to null)", path);
    else if (is_true(json_get(root, "use_bidirectional_attention")))
        snprintf(err, ERR_LEN, "%s: use_bidirectional_attention is true; attention here is causal", path);
    else if (eps && !positive_float(eps))
        snprintf(err, ERR_LEN, "%s: rms_norm_eps is not a positive number that a float holds (1e-6 is usual)", path);
    else if (scalar && !positive_float(scalar))
        snprintf(err, ERR_LEN, "%s: query_pre_attn_scalar is not a positive number that a float holds", path);
    else
        err[0] = 0;
    if (err[0]) return -1;
    gpt_family_defaults(cfg, FAMILY_GEMMA3);
    if (read_gemma3_rope(root, path, &cfg->rope, &cfg->rope_local_theta, err) != 0 ||
        read_pad_token(root, path, FAMILY_GEMMA3, V, cfg, err) != 0 ||
        read_gemma3_layers(root, path, L, cfg, err) != 0)
        return -1;
    cfg->num_layers = (int)L;
    int sliding = 0;
    for (int l = 0; l < cfg->num_layers; l++) sliding |= gpt_layer_is_sliding(cfg, l);
    if (sliding && W == 0) {
        snprintf(err, ERR_LEN, "%s: sliding_window is null but layers slide (give the window)", path);
        return -1;
    }
    cfg->num_heads = (int)NH;
    cfg->dim = (int)C;
    cfg->ffn_dim = (int)F;
    cfg->vocab_size = (int)V;
    cfg->num_kv_heads = (int)NKV;
    cfg->head_dim = (int)hd;
    cfg->max_seq_len = (int)T;
    cfg->sliding_window = (int)W;
    cfg->norm_eps = eps ? (float)eps->number : 1e-6f;
    cfg->query_pre_attn_scalar = scalar ? (float)scalar->number : 256.0f;
    cfg->untied_head = is_false(json_get(root, "tie_word_embeddings")); /* tied unless said */
    return 0;
}

/* The dtype transformers loads a Gemma checkpoint's weights in (dtype, or torch_dtype before
 * transformers 5; a multimodal checkpoint's text_config may leave it to the outer config), which its
 * embedding scale is rounded to; float32 when neither says. Another name (a typo) is refused rather
 * than read as float32: the scale would differ from transformers' in its last bits. */
static int gemma3_embed_scale(const JsonValue *text, const JsonValue *root, const char *path, EmbedScale *scale,
                              char *err) {
    const char *dtype = NULL, *field = NULL;
    for (int i = 0; i < 4 && !dtype; i++)
        dtype = json_string(json_get(i < 2 ? text : root, field = i % 2 ? "torch_dtype" : "dtype"));
    *scale = EMBED_SCALE_F32;
    if (!dtype || strcmp(dtype, "float32") == 0) return 0;
    if (strcmp(dtype, "bfloat16") == 0) *scale = EMBED_SCALE_BF16;
    else if (strcmp(dtype, "float16") == 0) *scale = EMBED_SCALE_F16;
    else {
        snprintf(err, ERR_LEN, "%s: %s %s is not float32, bfloat16 or float16, the dtypes Gemma 3's embedding scale is "
                 "rounded to here (fix the field)", path, field, dtype);
        return -1;
    }
    return 0;
}

/* final_logit_softcapping, a field of any family's config.json (Gemma 2's models set it): the model's
 * logits are capped before the softmax. A positive number, or null or absent for none. */
static int read_logit_cap(const JsonValue *root, const char *path, GPTConfig *cfg, char *err) {
    const JsonValue *cap = json_get(root, "final_logit_softcapping");
    if (cap && cap->type != JSON_NULL && !(positive_float(cap) && cap->number < 1e30)) {
        snprintf(err, ERR_LEN, "%s: final_logit_softcapping is not a positive number or null (fix the field)", path);
        return -1;
    }
    cfg->logit_softcap = cap && cap->type == JSON_NUMBER ? (float)cap->number : 0.0f;
    return 0;
}

/* A multimodal Gemma3ForConditionalGeneration's config (model_type gemma3): its text model's fields
 * are its text_config's, into *text; the two tie_word_embeddings must agree, as transformers 4 reads the
 * text config's and 5 the outer one's. 0, or -1 with a message. */
static int gemma3_text_config(const JsonValue *root, const char *path, const JsonValue **text, char *err) {
    *text = json_get(root, "text_config");
    const char *inner = json_string(json_get(*text, "model_type"));
    if (!*text || (*text)->type != JSON_OBJECT) {
        snprintf(err, ERR_LEN, "%s: model_type gemma3 (Gemma3ForConditionalGeneration) has no text_config object, "
                 "where its text model is described (re-save the config with transformers)", path);
        return -1;
    }
    if (inner && strcmp(inner, "gemma3_text") != 0) {
        snprintf(err, ERR_LEN, "%s: text_config.model_type is %s; a gemma3 model's text model is gemma3_text", path, inner);
        return -1;
    }
    if (is_false(json_get(root, "tie_word_embeddings")) != is_false(json_get(*text, "tie_word_embeddings"))) {
        snprintf(err, ERR_LEN, "%s: tie_word_embeddings and text_config.tie_word_embeddings disagree (set both to the "
                 "same value)", path);
        return -1;
    }
    return check_field_types(*text, path, err);
}

/* The dropout probabilities a family's config class reads: GPT2Config's three, the others'
 * attention_dropout (NULL-terminated). Training here uses none (as transformers' model.eval() does):
 * they are checked as probabilities and noted, not applied. */
static const char *const *dropout_fields(ModelFamily family) {
    static const char *const gpt2[] = {"resid_pdrop", "embd_pdrop", "attn_pdrop", NULL};
    static const char *const others[] = {"attention_dropout", NULL};
    return family == FAMILY_GPT2 ? gpt2 : others;
}

static int check_dropouts(const JsonValue *text, ModelFamily family, const char *path, char *err) {
    for (const char *const *f = dropout_fields(family); *f; f++) {
        const JsonValue *p = json_get(text, *f);
        if (p && !(p->number >= 0 && p->number <= 1)) { /* a number: check_field_types */
            snprintf(err, ERR_LEN, "%s: %s is %g, not a probability from 0 to 1 (fix the field)", path, *f,
                     p->number);
            return -1;
        }
    }
    return 0;
}

int hf_dropout_note(const char *dir, ModelFamily family, char *out, size_t n) {
    char path[FGPT_PATH_LEN], err[ERR_LEN];
    int listed = 0;
    out[0] = 0;
    if (path_format(path, "%s/config.json", dir) != 0) return 0;
    JsonValue *root = read_json(path, err);
    if (!root) return 0;
    const JsonValue *text = json_get(root, "text_config");
    if (!text || text->type != JSON_OBJECT) text = root;
    size_t used = 0;
    for (const char *const *f = dropout_fields(family); *f; f++) {
        const JsonValue *p = json_get(text, *f);
        if (!p || p->type != JSON_NUMBER || p->number == 0) continue;
        const int k = snprintf(out + used, n - used, "%s%s %g", listed ? ", " : "", *f, p->number);
        if (k < 0 || (size_t)k >= n - used) break;
        used += (size_t)k;
        listed++;
    }
    json_free(root);
    return listed;
}

int hf_read_eos_token(const char *dir, int vocab_size) {
    char path[FGPT_PATH_LEN], err[ERR_LEN];
    if (path_format(path, "%s/config.json", dir) != 0) return -1;
    JsonValue *root = read_json(path, err);
    if (!root) return -1;
    const JsonValue *eos = json_get(root, "eos_token_id");
    if (eos && eos->type == JSON_ARRAY) eos = eos->len ? &eos->items[0] : NULL; /* Llama 3.1's instruct models list three */
    long long id = -1;
    if (!json_int(eos, 0, vocab_size - 1, &id)) id = -1;
    json_free(root);
    return (int)id;
}

int hf_read_stop_tokens(const char *dir, int vocab_size, int *ids, int max) {
    static const char *const FILES[] = {"generation_config.json", "config.json"};
    int n = 0;
    for (int f = 0; f < 2 && n == 0; f++) {
        char path[FGPT_PATH_LEN], err[ERR_LEN];
        if (path_format(path, "%s/%s", dir, FILES[f]) != 0 || access(path, F_OK) != 0) continue;
        JsonValue *root = read_json(path, err);
        const JsonValue *eos = root ? json_get(root, "eos_token_id") : NULL;
        const size_t count = eos && eos->type == JSON_ARRAY ? eos->len : eos ? 1 : 0;
        for (size_t k = 0; k < count && n < max; k++) {
            long long id;
            if (!json_int(eos->type == JSON_ARRAY ? &eos->items[k] : eos, 0, vocab_size - 1, &id)) continue;
            int seen = 0;
            for (int j = 0; j < n; j++) seen |= ids[j] == (int)id;
            if (!seen) ids[n++] = (int)id;
        }
        json_free(root);
    }
    return n;
}

int hf_read_config(const char *dir, GPTConfig *cfg, char *err) {
    char path[FGPT_PATH_LEN];
    memset(cfg, 0, sizeof *cfg); /* every switch config.json does not set is GPT-2's */
    if (path_format(path, "%s/config.json", dir) != 0) {
        snprintf(err, ERR_LEN, "%.200s...: too long a path for its config.json", dir);
        return -1;
    }
    JsonValue *root = read_json(path, err);
    if (!root) return -1;
    int rc = -1;
    const char *type = json_string(json_get(root, "model_type"));
    const JsonValue *text = root; /* the text model's fields */
    /* Gemma3ForCausalLM's model_type is gemma3_text; gemma3 is the multimodal model around it */
    const int gemma3 = type && (strcmp(type, "gemma3_text") == 0 || strcmp(type, "gemma3") == 0);
    ModelFamily family = gemma3 ? FAMILY_GEMMA3 : FAMILY_GPT2;
    if (check_field_types(root, path, err) != 0) {
        /* err set */
    } else if (type && !gemma3 && gpt_family_parse(type, &family) != 0) {
        snprintf(err, ERR_LEN, "%s: model_type %s is not supported (gpt2, llama, qwen2, qwen3, gemma3_text and gemma3 "
                 "are)", path, type);
    } else if (!type && json_get(root, "hidden_size")) {
        snprintf(err, ERR_LEN, "%s has no model_type (add the one transformers wrote: llama, qwen2, qwen3 or "
                 "gemma3_text)", path);
    } else if (gemma3 && strcmp(type, "gemma3") == 0 && gemma3_text_config(root, path, &text, err) != 0) {
        /* err set */
    } else if (check_dropouts(text, family, path, err) != 0) {
        /* err set */
    } else if ((family == FAMILY_GPT2 ? read_gpt2_config(root, path, cfg, err) == 0
                : family == FAMILY_GEMMA3 ? read_gemma3_config(text, path, cfg, err) == 0
                                          : read_rope_family_config(root, path, family, cfg, err) == 0) &&
               read_logit_cap(text, path, cfg, err) == 0 &&
               (family != FAMILY_GEMMA3 || gemma3_embed_scale(text, root, path, &cfg->embed_scale, err) == 0)) {
        gpt_config_finish(cfg);
        ParamTable t; /* the shape must be one the blocks compute: said now, naming the file */
        char why[ERR_LEN];
        if (param_table_build(&t, cfg, why) != 0)
            snprintf(err, ERR_LEN, "%s: %s", path, why);
        else
            rc = 0;
        param_table_free(&t);
    }
    json_free(root);
    return rc;
}

/* ---- the weights ---- */

const char *hf_architecture(ModelFamily family) {
    switch (family) {
    case FAMILY_GPT2: return "GPT2LMHeadModel";
    case FAMILY_LLAMA: return "LlamaForCausalLM";
    case FAMILY_QWEN2: return "Qwen2ForCausalLM";
    case FAMILY_QWEN3: return "Qwen3ForCausalLM";
    case FAMILY_GEMMA3: return "Gemma3ForCausalLM";
    }
    return "?";
}

/* What the table's names (GPT2LMHeadModel's) put before GPT2Model's, which GPT-2's own files use. */
static const char BODY_PREFIX[] = "transformer.";

/* Where a stored tensor goes: a row of the table, and which of its HF parts (0 for a plain row). */
typedef struct {
    const ParamInfo *p;
    int part;
    size_t first; /* rows of the packed matrix (elements of a packed vector) before this part */
} Target;

/* The table entry a safetensors name stands for (GPT-2's names with or without "transformer.");
 * 0, or -1 for a name the model does not have. */
static int find_target(const ParamTable *t, const char *name, Target *out) {
    const int gpt2 = t->cfg.family == FAMILY_GPT2;
    const size_t k = strlen(BODY_PREFIX);
    const char *bare = gpt2 && strncmp(name, BODY_PREFIX, k) == 0 ? name + k : name;
    for (int i = 0; i < t->count; i++) {
        const ParamInfo *p = &t->params[i];
        if (p->num_parts == 0 && strcmp(gpt2 ? p->name + k : p->name, bare) == 0) {
            *out = (Target){p, 0, 0};
            return 0;
        }
        size_t first = 0;
        for (int j = 0; j < p->num_parts; first += p->part[j].rows, j++)
            if (strcmp(p->part[j].name, name) == 0) {
                *out = (Target){p, j, first};
                return 0;
            }
    }
    return -1;
}

/* Buffers some checkpoints carry besides the weights, which transformers too passes over: GPT-2's
 * causal mask, older Llama files' RoPE frequencies. */
static int is_buffer(const ModelFamily family, const char *name) {
    size_t n = strlen(name);
#define ENDS_WITH(s) (n > sizeof(s) - 1 && strcmp(name + n - (sizeof(s) - 1), s) == 0)
    if (family == FAMILY_GPT2) return ENDS_WITH(".attn.bias") || ENDS_WITH(".attn.masked_bias");
    return ENDS_WITH(".rotary_emb.inv_freq");
#undef ENDS_WITH
}

/* A multimodal Gemma 3 checkpoint's text weights are Gemma3ForCausalLM's under another prefix
 * (transformers 4's language_model.model., 5's model.language_model.); its vision tower and projector
 * are no part of the text model. name as Gemma3ForCausalLM calls it, into buf (n bytes); NULL for a
 * tensor passed over. Other families' names are their own. */
static const char *text_model_name(ModelFamily family, const char *name, char *buf, size_t n) {
    static const char *const skipped[] = {"vision_tower.", "multi_modal_projector.", "model.vision_tower.",
                                          "model.multi_modal_projector."};
    static const struct {
        const char *theirs, *ours;
    } prefixes[] = {{"language_model.model.", "model."}, {"model.language_model.", "model."},
                    {"language_model.lm_head.", "lm_head."}};
    if (family != FAMILY_GEMMA3) return name;
    for (size_t i = 0; i < sizeof skipped / sizeof skipped[0]; i++)
        if (strncmp(name, skipped[i], strlen(skipped[i])) == 0) return NULL;
    for (size_t i = 0; i < sizeof prefixes / sizeof prefixes[0]; i++) {
        const size_t k = strlen(prefixes[i].theirs);
        if (strncmp(name, prefixes[i].theirs, k) == 0) {
            snprintf(buf, n, "%s%s", prefixes[i].ours, name + k);
            return buf;
        }
    }
    return name;
}

/* The shape transformers stores target's tensor with, into dims; its rank. */
static int hf_shape(const ParamTable *t, const Target *g, int64_t dims[2]) {
    const ParamInfo *p = g->p;
    const int vocab = p->role == ROLE_WTE || p->role == ROLE_LM_HEAD;
    const size_t rows = p->num_parts ? p->part[g->part].rows : vocab ? (size_t)t->cfg.vocab_size : p->rows;
    if (p->ndim == 1) {
        dims[0] = (int64_t)(p->num_parts ? rows : p->cols);
        return 1;
    }
    dims[0] = (int64_t)(p->hf_transposed ? p->cols : rows);
    dims[1] = (int64_t)(p->hf_transposed ? rows : p->cols);
    return 2;
}

/* The files the weights are in: model.safetensors, or the shards of model.safetensors.index.json,
 * each opened and checked whole. */
typedef struct {
    StFile *files;
    int count;
    JsonValue *index; /* the index's JSON, NULL for one file */
} Sources;

static void close_sources(Sources *s) {
    for (int i = 0; i < s->count; i++) st_close(&s->files[i]);
    free(s->files);
    json_free(s->index);
    memset(s, 0, sizeof *s);
}

static int by_key(const void *a, const void *b) {
    return strcmp((*(const JsonMember *const *)a)->key, (*(const JsonMember *const *)b)->key);
}

/* The weight_map entry of tensor name in sorted (n entries by key), or NULL. */
static const JsonMember *map_entry(const JsonMember *const *sorted, size_t n, const char *name) {
    const JsonMember key = {.key = (char *)name}, *k = &key;
    const JsonMember *const *hit = bsearch(&k, sorted, n, sizeof *sorted, by_key);
    return hit ? *hit : NULL;
}

/* The shards of index_path's weight_map, each holding exactly the tensors the map puts in it. The
 * map is sorted once, so that a checkpoint of many tensors is checked in n log n. */
static int open_sharded(const char *dir, const char *index_path, Sources *s, char *err) {
    if (!(s->index = read_json(index_path, err))) return -1;
    const JsonValue *map = json_get(s->index, "weight_map");
    if (!map || map->type != JSON_OBJECT || map->len == 0) {
        snprintf(err, ERR_LEN, "%s has no weight_map object of tensor names and files (re-save the checkpoint)",
                 index_path);
        return -1;
    }
    const JsonMember **sorted = malloc(map->len * sizeof *sorted);
    unsigned char *held = calloc(map->len, 1);
    if (!(s->files = calloc(map->len, sizeof *s->files)) || !sorted || !held) {
        snprintf(err, ERR_LEN, "out of memory reading %s", index_path);
        free(sorted);
        free(held);
        return -1;
    }
    int rc = 0;
    for (size_t i = 0; i < map->len; i++) {
        sorted[i] = &map->members[i];
        if (rc == 0 && strlen(map->members[i].key) != map->members[i].key_len) {
            snprintf(err, ERR_LEN, "%s: the weight_map's tensor name \"%s\" goes on past a NUL character (re-save "
                     "the checkpoint)", index_path, map->members[i].key);
            rc = -1;
        }
    }
    qsort(sorted, map->len, sizeof *sorted, by_key);
    for (size_t i = 1; rc == 0 && i < map->len; i++)
        if (strcmp(sorted[i - 1]->key, sorted[i]->key) == 0) {
            snprintf(err, ERR_LEN, "%s's weight_map lists tensor %s twice (re-save the checkpoint)", index_path,
                     sorted[i]->key);
            rc = -1;
        }
    for (size_t i = 0; rc == 0 && i < map->len; i++) {
        const char *file = json_string(&map->members[i].value);
        if (!file || !file[0] || strlen(file) != map->members[i].value.len || strchr(file, '/') ||
            strcmp(file, "..") == 0 || strcmp(file, ".") == 0) {
            snprintf(err, ERR_LEN, "%s: weight_map gives tensor %s no file name of this directory", index_path,
                     map->members[i].key);
            rc = -1;
            break;
        }
        int known = 0;
        for (int j = 0; j < s->count && !known; j++) known = strcmp(strrchr(s->files[j].path, '/') + 1, file) == 0;
        if (known) continue;
        char path[FGPT_PATH_LEN];
        if (path_format(path, "%s/%s", dir, file) != 0) {
            snprintf(err, ERR_LEN, "%.200s...: too long a path for shard %.100s", dir, file);
            rc = -1;
            break;
        }
        StFile *f = &s->files[s->count];
        if ((rc = st_open(f, path, err)) != 0) break;
        s->count++;
        for (size_t k = 0; rc == 0 && k < f->count; k++) {
            const JsonMember *entry = map_entry(sorted, map->len, f->tensors[k].name);
            const char *owner = entry ? json_string(&entry->value) : NULL;
            if (!owner || strcmp(owner, file) != 0) {
                snprintf(err, ERR_LEN, "%s holds tensor %s, which %s's weight_map puts %s%s (re-save the checkpoint)",
                         path, f->tensors[k].name, index_path, owner ? "in " : "in no file", owner ? owner : "");
                rc = -1;
            } else {
                held[entry - map->members] = 1;
            }
        }
    }
    for (size_t i = 0; rc == 0 && i < map->len; i++)
        if (!held[i]) {
            snprintf(err, ERR_LEN, "%s's weight_map puts tensor %s in %s, which does not hold it (a shard is "
                     "missing tensors; re-save the checkpoint)", index_path, map->members[i].key,
                     json_string(&map->members[i].value));
            rc = -1;
        }
    free(sorted);
    free(held);
    return rc;
}

/* model.safetensors when there is one (as transformers prefers it), else the sharded index. */
static int open_sources(const char *dir, Sources *s, char *err) {
    char single[FGPT_PATH_LEN], index[FGPT_PATH_LEN];
    struct stat sb;
    memset(s, 0, sizeof *s);
    if (path_format(single, "%s/model.safetensors", dir) != 0 ||
        path_format(index, "%s/model.safetensors.index.json", dir) != 0) {
        snprintf(err, ERR_LEN, "%.200s...: too long a path for its model.safetensors", dir);
        return -1;
    }
    if (stat(single, &sb) != 0 && stat(index, &sb) == 0) {
        if (open_sharded(dir, index, s, err) == 0) return 0;
        close_sources(s);
        return -1;
    }
    if (!(s->files = calloc(1, sizeof *s->files))) {
        snprintf(err, ERR_LEN, "out of memory reading %s", single);
        return -1;
    }
    if (st_open(&s->files[0], single, err) != 0) {
        if (stat(single, &sb) != 0)
            snprintf(err, ERR_LEN, "%s has neither model.safetensors nor model.safetensors.index.json (pass a Hugging "
                     "Face checkpoint directory)", dir);
        close_sources(s);
        return -1;
    }
    s->count = 1;
    return 0;
}

/* A weight must be a number: a NaN or an infinity (a damaged file, or a model saved after it
 * diverged) would train from a loss that is NaN already, or sample one token over and over. */
static int check_finite(const StFile *f, const StTensor *st, const float *x, char *err) {
    size_t n = 1;
    for (int d = 0; d < st->ndim; d++) n *= (size_t)st->shape[d];
    int bad = 0;
#pragma omp parallel for reduction(| : bad)
    for (size_t i = 0; i < n; i++) bad |= !isfinite(x[i]);
    for (size_t i = 0; bad && i < n; i++) /* the first, named */
        if (!isfinite(x[i])) {
            snprintf(err, ERR_LEN, "%s: tensor %s holds %s at element %zu (a damaged file, or a model saved after it "
                     "diverged: take another checkpoint)", f->path, st->name, isnan(x[i]) ? "a NaN" : "an infinity", i);
            return -1;
        }
    return 0;
}

/* Reads stored tensor st of file f into its place in params (g), transposing Conv1D matrices;
 * tmp: scratch of at least the tensor's size. */
static int place(StFile *f, const StTensor *st, const Target *g, float *params, float *tmp, char *err) {
    const ParamInfo *p = g->p;
    float *dst = params + p->offset + g->first * (p->ndim == 2 ? p->cols : 1);
    if (!p->hf_transposed) return st_read_f32(f, st, dst, err) != 0 ? -1 : check_finite(f, st, dst, err);
    if (st_read_f32(f, st, tmp, err) != 0 || check_finite(f, st, tmp, err) != 0) return -1;
    /* stored [in, out] = [cols, rows] of ours */
#pragma omp parallel for
    for (size_t r = 0; r < p->rows; r++)
        for (size_t c = 0; c < p->cols; c++) dst[r * p->cols + c] = tmp[c * p->rows + r];
    return 0;
}

/* A tied model's lm_head.weight must have the token embedding's shape (its values are compared once
 * the embedding is read). */
static int check_tied_head_shape(const StFile *f, const StTensor *st, const ParamTable *t, char *err) {
    const ParamInfo *wte = param_whole(t, ROLE_WTE);
    char dims[64];
    st_shape_string(st, dims, sizeof dims);
    if (st->ndim != 2 || st->shape[0] != t->cfg.vocab_size || st->shape[1] != (int64_t)wte->cols) {
        snprintf(err, ERR_LEN, "%s: lm_head.weight is %s but the token embedding is [%d, %zu]", f->path, dims,
                 t->cfg.vocab_size, wte->cols);
        return -1;
    }
    return 0;
}

/* A tied model's lm_head.weight: accepted only as the token embedding itself. */
static int check_tied_head(StFile *f, const StTensor *st, const ParamTable *t, const float *params, char *err) {
    const ParamInfo *wte = param_whole(t, ROLE_WTE);
    const size_t n = (size_t)t->cfg.vocab_size * wte->cols;
    float *w = malloc(n * sizeof *w);
    if (!w) {
        snprintf(err, ERR_LEN, "out of memory reading %s", f->path);
        return -1;
    }
    int rc = st_read_f32(f, st, w, err);
    if (rc == 0 && memcmp(w, params + wte->offset, n * sizeof *w) != 0) {
        snprintf(err, ERR_LEN, "%s: lm_head.weight is not the token embedding but config.json ties them (set "
                 "tie_word_embeddings to false for an untied output layer)", f->path);
        rc = -1;
    }
    free(w);
    return rc;
}

/* Every stored tensor matched to its place in t: a name the family has, its HF shape, once each,
 * and none of the table's missing. With params, each is also read into its place (tmp: scratch for
 * a transpose, GPT-2 only) and a tied lm_head.weight compared with the embedding; without, only the
 * headers are read, so that a config.json of other sizes is named before memory is taken for it. */
static int match_tensors(const char *dir, Sources *src, const ParamTable *t, float *params, float *tmp,
                         char *err) {
    unsigned char *seen = calloc((size_t)t->count * MAX_HF_PARTS, 1);
    StFile *head_file = NULL;
    const StTensor *head = NULL;
    int rc = seen ? 0 : -1;
    if (rc) snprintf(err, ERR_LEN, "out of host memory reading %s", dir);
    for (int fi = 0; rc == 0 && fi < src->count; fi++) {
        StFile *f = &src->files[fi];
        for (size_t k = 0; rc == 0 && k < f->count; k++) {
            const StTensor *st = &f->tensors[k];
            Target g;
            char buf[512];
            const char *name = text_model_name(t->cfg.family, st->name, buf, sizeof buf);
            if (!name || is_buffer(t->cfg.family, name)) continue;
            if (find_target(t, name, &g) != 0) {
                if (strcmp(name, "lm_head.weight") == 0) { /* tied: checked once the embedding is in */
                    head_file = f, head = st;
                    continue;
                }
                snprintf(err, ERR_LEN, "%s has a tensor %s that %s does not (another architecture or config.json?)",
                         f->path, st->name, hf_architecture(t->cfg.family));
                rc = -1;
                break;
            }
            int64_t want[2];
            const int ndim = hf_shape(t, &g, want);
            if (st->ndim != ndim || st->shape[0] != want[0] || (ndim == 2 && st->shape[1] != want[1])) {
                char found[160];
                st_shape_string(st, found, sizeof found);
                if (ndim == 2)
                    snprintf(err, ERR_LEN, "%s: tensor %s is %s but the model (config.json) needs [%lld, %lld]", f->path,
                             st->name, found, (long long)want[0], (long long)want[1]);
                else
                    snprintf(err, ERR_LEN, "%s: tensor %s is %s but the model (config.json) needs [%lld]", f->path,
                             st->name, found, (long long)want[0]);
                rc = -1;
                break;
            }
            if (seen[(g.p - t->params) * MAX_HF_PARTS + g.part]++) {
                snprintf(err, ERR_LEN, "%s holds tensor %s more than once", dir, st->name);
                rc = -1;
                break;
            }
            if (params) rc = place(f, st, &g, params, tmp, err);
        }
    }
    for (int i = 0; rc == 0 && i < t->count; i++) {
        const ParamInfo *p = &t->params[i];
        for (int j = 0; rc == 0 && j < (p->num_parts ? p->num_parts : 1); j++)
            if (!seen[i * MAX_HF_PARTS + j]) {
                snprintf(err, ERR_LEN, "%s has no tensor %s (config.json's model needs it)", dir,
                         p->num_parts ? p->part[j].name : p->name);
                rc = -1;
            }
    }
    if (rc == 0 && head) rc = check_tied_head_shape(head_file, head, t, err);
    if (rc == 0 && head && params) rc = check_tied_head(head_file, head, t, params, err);
    free(seen);
    return rc;
}

/* The weights of src, whose tensors match_tensors has matched to t, into params. */
static int read_matched(const char *dir, Sources *src, const ParamTable *t, float *params, char *err) {
    size_t largest = 0; /* the largest table row: scratch for a transpose */
    for (int i = 0; i < t->count; i++) largest = t->params[i].numel > largest ? t->params[i].numel : largest;
    float *tmp = t->cfg.family == FAMILY_GPT2 ? malloc(largest * sizeof *tmp) : NULL;
    if (t->cfg.family == FAMILY_GPT2 && !tmp) {
        snprintf(err, ERR_LEN, "out of host memory reading %s", dir);
        return -1;
    }
    /* the padded vocabulary rows stay 0; every core zeroes (and so maps) pages of its own */
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < t->total; i++) params[i] = 0.0f;
    const int rc = match_tensors(dir, src, t, params, tmp, err);
    free(tmp);
    return rc;
}

int hf_read_weights(const char *dir, const ParamTable *t, float *params, char *err) {
    err[0] = 0;
    Sources src;
    if (open_sources(dir, &src, err) != 0) return -1;
    int rc = match_tensors(dir, &src, t, NULL, NULL, err);
    if (rc == 0) rc = read_matched(dir, &src, t, params, err);
    close_sources(&src);
    return rc;
}

float *hf_load_weights(const char *dir, const ParamTable *t, char *err) {
    err[0] = 0;
    Sources src;
    if (open_sources(dir, &src, err) != 0) return NULL;
    float *params = NULL;
    if (match_tensors(dir, &src, t, NULL, NULL, err) == 0) {
        if (!(params = malloc(t->total * sizeof *params)))
            snprintf(err, ERR_LEN, "out of host memory for the model of %s (%.1f GB of float32 weights)", dir,
                     (double)t->total * sizeof *params / 1e9);
        else if (read_matched(dir, &src, t, params, err) != 0) {
            free(params);
            params = NULL;
        }
    }
    close_sources(&src);
    return params;
}

/* ---- config.json out ---- */

/* A number as Python's repr writes a float: the shortest digits that read back as x (as a float32
 * when it is one), positional from 1e-4 to 1e16 with ".0" after an integer (500000.0), else with
 * an exponent (1e-05). */
static void py_float(double x, int as_float32, char *buf, size_t n) {
    int prec = 1;
    for (; prec < 17; prec++) {
        snprintf(buf, n, "%.*e", prec - 1, x);
        const double back = strtod(buf, NULL);
        if (as_float32 ? (float)back == (float)x : back == x) break;
    }
    const int e = x == 0.0 ? 0 : (int)floor(log10(fabs(strtod(buf, NULL))));
    if (e < -4 || e >= 16) {
        snprintf(buf, n, "%.*e", prec - 1, x);
        return;
    }
    snprintf(buf, n, "%.*f", prec - 1 - e > 0 ? prec - 1 - e : 0, x);
    if (!strchr(buf, '.')) strncat(buf, ".0", n - strlen(buf) - 1);
}

/* The bos_token_id and eos_token_id lines (null for -1: no tokenizer). */
static void token_ids_json(int bos, int eos, char *out, size_t n) {
    char b[16] = "null", e[16] = "null";
    if (bos >= 0) snprintf(b, sizeof b, "%d", bos);
    if (eos >= 0) snprintf(e, sizeof e, "%d", eos);
    snprintf(out, n, "  \"bos_token_id\": %s,\n  \"eos_token_id\": %s,\n", b, e);
}

/* final_logit_softcapping as a float (30.0: transformers' config classes check that it is one), or
 * null. */
static void softcap_json(const GPTConfig *cfg, char *out, size_t n) {
    if (cfg->logit_softcap > 0.0f) py_float(cfg->logit_softcap, 1, out, n);
    else snprintf(out, n, "null");
}

/* Appends to buf (n bytes, len used); the caller returns -1 when it does not fit. */
#define PUT(...)                                                                   \
    do {                                                                           \
        int k_ = snprintf(buf + len, len < n ? n - len : 0, __VA_ARGS__);          \
        if (k_ < 0 || (len += (size_t)k_) >= n) return -1;                         \
    } while (0)

/* rope_scaling of the global layers as transformers writes it ("null" for none), into out. */
static void rope_scaling_json(const RopeParams *r, char *out, size_t n) {
    snprintf(out, n, "null");
    if (r->scaling == ROPE_SCALING_LINEAR) {
        char f[32];
        py_float(r->factor, 0, f, sizeof f);
        snprintf(out, n, "{\n    \"factor\": %s,\n    \"rope_type\": \"linear\"\n  }", f);
    } else if (r->scaling == ROPE_SCALING_LLAMA3) {
        char f[32], lo[32], hi[32];
        py_float(r->factor, 0, f, sizeof f);
        py_float(r->low_freq_factor, 0, lo, sizeof lo);
        py_float(r->high_freq_factor, 0, hi, sizeof hi);
        snprintf(out, n, "{\n    \"factor\": %s,\n    \"high_freq_factor\": %s,\n    \"low_freq_factor\": %s,\n"
                 "    \"original_max_position_embeddings\": %.0f,\n    \"rope_type\": \"llama3\"\n  }",
                 f, hi, lo, r->original_max_position_embeddings);
    }
}

/* Gemma3TextConfig as transformers 4 writes it (its fields sorted by name): layer_types, one per layer,
 * which transformers 4.53 on and 5 read, and sliding_window_pattern besides when the config has one,
 * for the releases before; rope_theta, rope_scaling and rope_local_base_freq, which 5 turns into its
 * rope_parameters. */
static int gemma3_config_json(const GPTConfig *cfg, int bos, int eos, char *buf, size_t n) {
    size_t len = 0;
    char eps[32], theta[32], local[32], rope[512], scalar[32], cap[32], ids[96];
    token_ids_json(bos, eos, ids, sizeof ids);
    softcap_json(cfg, cap, sizeof cap);
    py_float(cfg->norm_eps, 1, eps, sizeof eps);
    py_float(cfg->rope.theta, 0, theta, sizeof theta);
    py_float(cfg->rope_local_theta, 0, local, sizeof local);
    rope_scaling_json(&cfg->rope, rope, sizeof rope);
    /* an integer as transformers keeps it (256), else as Python writes a float */
    if (cfg->query_pre_attn_scalar == floorf(cfg->query_pre_attn_scalar))
        snprintf(scalar, sizeof scalar, "%.0f", (double)cfg->query_pre_attn_scalar);
    else
        py_float(cfg->query_pre_attn_scalar, 1, scalar, sizeof scalar);
    PUT("{\n  \"architectures\": [\"%s\"],\n  \"attention_bias\": false,\n  \"attention_dropout\": 0.0,\n"
        "  \"attn_logit_softcapping\": null,\n", hf_architecture(cfg->family));
    PUT("%s  \"final_logit_softcapping\": %s,\n", ids, cap);
    PUT("  \"head_dim\": %d,\n  \"hidden_activation\": \"gelu_pytorch_tanh\",\n  \"hidden_size\": %d,\n"
        "  \"initializer_range\": 0.02,\n  \"intermediate_size\": %d,\n  \"layer_types\": [",
        cfg->head_dim, cfg->dim, cfg->ffn_dim);
    for (int l = 0; l < cfg->num_layers; l++)
        PUT("%s\n    \"%s\"", l ? "," : "", gpt_layer_is_sliding(cfg, l) ? "sliding_attention" : "full_attention");
    PUT("\n  ],\n  \"max_position_embeddings\": %d,\n  \"model_type\": \"gemma3_text\",\n"
        "  \"num_attention_heads\": %d,\n  \"num_hidden_layers\": %d,\n  \"num_key_value_heads\": %d,\n",
        cfg->max_seq_len, cfg->num_heads, cfg->num_layers, cfg->num_kv_heads);
    if (cfg->has_pad_token) PUT("  \"pad_token_id\": %d,\n", cfg->pad_token_id);
    else PUT("  \"pad_token_id\": null,\n");
    PUT("  \"query_pre_attn_scalar\": %s,\n  \"rms_norm_eps\": %s,\n  \"rope_local_base_freq\": %s,\n"
        "  \"rope_scaling\": %s,\n  \"rope_theta\": %s,\n  \"sliding_window\": %d,\n",
        scalar, eps, local, rope, theta, cfg->sliding_window);
    if (cfg->sliding_window_pattern > 0) PUT("  \"sliding_window_pattern\": %d,\n", cfg->sliding_window_pattern);
    /* the dtype transformers holds the weights in (the tensors here are float32): the embedding scale's */
    const char *dtype = cfg->embed_scale == EMBED_SCALE_BF16  ? "bfloat16"
                        : cfg->embed_scale == EMBED_SCALE_F16 ? "float16"
                                                              : "float32";
    PUT("  \"tie_word_embeddings\": %s,\n  \"torch_dtype\": \"%s\",\n  \"use_bidirectional_attention\": false,\n"
        "  \"use_cache\": true,\n  \"vocab_size\": %d\n}\n", cfg->untied_head ? "false" : "true", dtype, cfg->vocab_size);
    return (int)len;
}

int hf_config_json(const GPTConfig *cfg, int bos, int eos, char *buf, size_t n) {
    if (cfg->family == FAMILY_GEMMA3) return gemma3_config_json(cfg, bos, eos, buf, n);
    size_t len = 0;
    char cap[32], ids[96];
    token_ids_json(bos, eos, ids, sizeof ids);
    softcap_json(cfg, cap, sizeof cap);
    PUT("{\n  \"architectures\": [\"%s\"],\n", hf_architecture(cfg->family));
    if (cfg->family == FAMILY_GPT2) {
        PUT("%s", ids);
        if (cfg->logit_softcap > 0.0f) PUT("  \"final_logit_softcapping\": %s,\n", cap);
        PUT("  \"model_type\": \"gpt2\",\n  \"vocab_size\": %d,\n  \"n_positions\": %d,\n  \"n_ctx\": %d,\n"
            "  \"n_embd\": %d,\n  \"n_layer\": %d,\n  \"n_head\": %d,\n  \"n_inner\": null,\n"
            "  \"activation_function\": \"gelu_new\",\n  \"layer_norm_epsilon\": 1e-05,\n"
            "  \"initializer_range\": 0.02,\n  \"resid_pdrop\": 0.0,\n  \"embd_pdrop\": 0.0,\n"
            "  \"attn_pdrop\": 0.0,\n  \"tie_word_embeddings\": true,\n  \"torch_dtype\": \"float32\"\n}\n",
            cfg->vocab_size, cfg->max_seq_len, cfg->max_seq_len, cfg->dim, cfg->num_layers, cfg->num_heads);
        return (int)len;
    }
    char eps[32], theta[32], rope[512];
    py_float(cfg->norm_eps, 1, eps, sizeof eps);
    py_float(cfg->rope.theta, 0, theta, sizeof theta);
    rope_scaling_json(&cfg->rope, rope, sizeof rope);
    /* the fields in the order transformers writes them: sorted by name */
    const int llama = cfg->family == FAMILY_LLAMA, qwen3 = cfg->family == FAMILY_QWEN3;
    if (llama || qwen3) PUT("  \"attention_bias\": false,\n");
    PUT("  \"attention_dropout\": 0.0,\n");
    PUT("%s", ids);
    if (cfg->logit_softcap > 0.0f) PUT("  \"final_logit_softcapping\": %s,\n", cap);
    /* Qwen2Config has no head_dim (its attention takes one when the config has it, else C / NH) */
    if (cfg->family != FAMILY_QWEN2 || cfg->head_dim * cfg->num_heads != cfg->dim)
        PUT("  \"head_dim\": %d,\n", cfg->head_dim);
    PUT("  \"hidden_act\": \"silu\",\n  \"hidden_size\": %d,\n  \"initializer_range\": 0.02,\n"
        "  \"intermediate_size\": %d,\n  \"max_position_embeddings\": %d,\n",
        cfg->dim, cfg->ffn_dim, cfg->max_seq_len);
    if (!llama) PUT("  \"max_window_layers\": %d,\n", cfg->num_layers);
    if (llama) PUT("  \"mlp_bias\": false,\n");
    PUT("  \"model_type\": \"%s\",\n  \"num_attention_heads\": %d,\n  \"num_hidden_layers\": %d,\n"
        "  \"num_key_value_heads\": %d,\n", gpt_family_name(cfg->family), cfg->num_heads, cfg->num_layers,
        cfg->num_kv_heads);
    if (cfg->has_pad_token) PUT("  \"pad_token_id\": %d,\n", cfg->pad_token_id);
    if (llama) PUT("  \"pretraining_tp\": 1,\n");
    PUT("  \"rms_norm_eps\": %s,\n  \"rope_scaling\": %s,\n  \"rope_theta\": %s,\n", eps, rope, theta);
    if (!llama) PUT("  \"sliding_window\": null,\n");
    PUT("  \"tie_word_embeddings\": %s,\n  \"torch_dtype\": \"float32\",\n  \"use_cache\": true,\n",
        cfg->untied_head ? "false" : "true");
    if (!llama) PUT("  \"use_sliding_window\": false,\n");
    PUT("  \"vocab_size\": %d\n}\n", cfg->vocab_size);
    return (int)len;
}
#undef PUT
