/* model/train/hf_weights.c - config.json and model.safetensors of a GPT2LMHeadModel into our config and
 * parameter layout (see hf_weights.h).
 *
 * safetensors: an 8-byte little-endian header length N, N bytes of JSON
 * {"name": {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}, then the
 * data; offsets count from the end of the header, and the tensors cover the data exactly. */
#include "model/train/hf_weights.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "common/paths.h"
#include "common/json.h"

#define MAX_HEADER (100u << 20) /* a header larger than this is not a GPT-2's */
/* Offsets and dimensions above this (a petabyte) are corrupt; below 2^53 a double holds them exactly. */
#define MAX_OFFSET (1ll << 50)

/* A whole file, NUL after its bytes (malloc'ed), or NULL with a message. */
static char *read_whole(const char *path, size_t *len, char *err) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, ERR_LEN, "cannot open %s: %s (--init-from needs a Hugging Face GPT-2 directory)", path,
                 strerror(errno));
        return NULL;
    }
    char *buf = NULL;
    long end = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    if (end >= 0 && fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)end + 1)) &&
        fread(buf, 1, (size_t)end, f) == (size_t)end) {
        buf[end] = 0;
        *len = (size_t)end;
    } else {
        free(buf);
        buf = NULL;
        snprintf(err, ERR_LEN, "cannot read %s (I/O error or out of memory)", path);
    }
    fclose(f);
    return buf;
}

/* The JSON type transformers writes for each config.json field read here. */
typedef enum { FIELD_STRING, FIELD_BOOL, FIELD_NUMBER, FIELD_INT, FIELD_INT_OR_NULL } FieldType;

static const struct {
    const char *key;
    FieldType type;
} config_fields[] = {
    {"model_type", FIELD_STRING},          {"activation_function", FIELD_STRING},
    {"n_layer", FIELD_INT},                {"n_head", FIELD_INT},
    {"n_embd", FIELD_INT},                 {"vocab_size", FIELD_INT},
    {"n_positions", FIELD_INT},            {"n_ctx", FIELD_INT},
    {"n_inner", FIELD_INT_OR_NULL},        {"tie_word_embeddings", FIELD_BOOL},
    {"layer_norm_epsilon", FIELD_NUMBER},  {"scale_attn_weights", FIELD_BOOL},
    {"scale_attn_by_inverse_layer_idx", FIELD_BOOL},
};

static int has_type(const JsonValue *v, FieldType want) {
    switch (want) {
    case FIELD_STRING: return v->type == JSON_STRING;
    case FIELD_BOOL: return v->type == JSON_TRUE || v->type == JSON_FALSE;
    case FIELD_NUMBER:
    case FIELD_INT: return v->type == JSON_NUMBER;
    case FIELD_INT_OR_NULL: return v->type == JSON_NUMBER || v->type == JSON_NULL;
    }
    return 0;
}

/* Every field read has the type transformers writes: a value of another type (31 for model_type, 0 for
 * tie_word_embeddings) is a hand-edited or foreign file, and reading around it would be a guess. The
 * range of an integer is checked where it is read. */
static int check_field_types(const JsonValue *root, const char *path, char *err) {
    static const char *expected[] = {"a string", "true or false", "a number", "an integer", "an integer or null"};
    for (size_t i = 0; i < sizeof config_fields / sizeof config_fields[0]; i++) {
        const JsonValue *v = json_get(root, config_fields[i].key);
        if (v && !has_type(v, config_fields[i].type)) {
            snprintf(err, ERR_LEN, "%s: \"%s\" is %s, expected %s (re-save the config with transformers, or fix the field)", path,
                     config_fields[i].key, json_type_name(v->type), expected[config_fields[i].type]);
            return -1;
        }
    }
    return 0;
}

static int get_int(const JsonValue *cfg, const char *key, const char *path, long long *out, char *err) {
    if (!json_int(json_get(cfg, key), 1, 1 << 30, out)) {
        snprintf(err, ERR_LEN, "%s: \"%s\" is missing or not a positive integer", path, key);
        return -1;
    }
    return 0;
}

int hf_read_config(const char *dir, GPTConfig *cfg, char *err) {
    char path[FGPT_PATH_LEN], jerr[ERR_LEN];
    memset(cfg, 0, sizeof *cfg); /* every switch config.json does not set is GPT-2's */
    if (path_format(path, "%s/config.json", dir) != 0) {
        snprintf(err, ERR_LEN, "%.200s...: too long a path for its config.json", dir);
        return -1;
    }
    size_t len;
    char *text = read_whole(path, &len, err);
    if (!text) return -1;
    JsonValue *root = json_parse(text, len, path, jerr);
    free(text);
    if (!root) {
        snprintf(err, ERR_LEN, "%s", jerr);
        return -1;
    }
    int rc = -1;
    long long L, NH, C, T, V;
    const char *type = json_string(json_get(root, "model_type"));
    const char *act = json_string(json_get(root, "activation_function"));
    const JsonValue *inner = json_get(root, "n_inner"), *tie = json_get(root, "tie_word_embeddings");
    const JsonValue *eps = json_get(root, "layer_norm_epsilon"), *by_layer = json_get(root, "scale_attn_by_inverse_layer_idx");
    const JsonValue *scale = json_get(root, "scale_attn_weights");
    const JsonValue *cap = json_get(root, "final_logit_softcapping"); /* a number, or null: none */
    long long inner_v = 0;
    if (root->type != JSON_OBJECT) {
        snprintf(err, ERR_LEN, "%s is not a JSON object", path);
    } else if (check_field_types(root, path, err) != 0) {
        /* err set */
    } else if (type && strcmp(type, "gpt2") != 0) {
        snprintf(err, ERR_LEN, "%s: model_type %s is not supported (GPT-2's is)", path, type);
    } else if (get_int(root, "n_layer", path, &L, err) || get_int(root, "n_head", path, &NH, err) ||
               get_int(root, "n_embd", path, &C, err) || get_int(root, "vocab_size", path, &V, err) ||
               (json_get(root, "n_positions") ? get_int(root, "n_positions", path, &T, err)
                                              : get_int(root, "n_ctx", path, &T, err))) {
        /* err set */
    } else if (act && strcmp(act, "gelu_new") != 0 && strcmp(act, "gelu_pytorch_tanh") != 0) {
        snprintf(err, ERR_LEN, "%s: activation_function %s is not supported (the tanh GELU, gelu_new, is)", path, act);
    } else if (inner && inner->type != JSON_NULL && (!json_int(inner, 1, 1 << 30, &inner_v) || inner_v != 4 * C)) {
        snprintf(err, ERR_LEN, "%s: n_inner is not 4 x n_embd; only GPT-2's MLP width is supported", path);
    } else if (tie && tie->type == JSON_FALSE) {
        snprintf(err, ERR_LEN, "%s: tie_word_embeddings is false; the output layer here is the token embedding", path);
    } else if (eps && fabs(eps->number - 1e-5) > 1e-9) {
        snprintf(err, ERR_LEN, "%s: layer_norm_epsilon is not 1e-5, the one this trainer uses", path);
    } else if ((by_layer && by_layer->type == JSON_TRUE) || (scale && scale->type == JSON_FALSE)) {
        snprintf(err, ERR_LEN, "%s: attention scaled other than by 1/sqrt(head size) is not supported", path);
    } else if (cap && cap->type != JSON_NULL && !(cap->type == JSON_NUMBER && cap->number > 0 && cap->number < 1e30)) {
        snprintf(err, ERR_LEN, "%s: final_logit_softcapping is not a positive number or null (fix the field)", path);
    } else if (C % NH) {
        snprintf(err, ERR_LEN, "%s: n_head %lld does not divide n_embd %lld", path, NH, C);
    } else {
        cfg->num_layers = (int)L;
        cfg->num_heads = (int)NH;
        cfg->dim = (int)C;
        cfg->max_seq_len = (int)T;
        cfg->vocab_size = (int)V;
        cfg->logit_softcap = cap && cap->type == JSON_NUMBER ? (float)cap->number : 0.0f;
        gpt_config_finish(cfg);
        rc = 0;
    }
    json_free(root);
    return rc;
}

static float half_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h >> 15) << 31, exp = h >> 10 & 0x1f, man = h & 0x3ff, bits;
    if (exp == 0) {
        if (man == 0) {
            bits = sign;
        } else { /* subnormal: normalise */
            int e = -1;
            do {
                e++;
                man <<= 1;
            } while (!(man & 0x400));
            bits = sign | (uint32_t)(127 - 15 - e) << 23 | (man & 0x3ff) << 13;
        }
    } else if (exp == 31) {
        bits = sign | 0x7f800000u | man << 13;
    } else {
        bits = sign | (exp + 127 - 15) << 23 | man << 13;
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* What the table's names (GPT2LMHeadModel's) put before GPT2Model's, which GPT-2's own files use. */
static const char BODY_PREFIX[] = "transformer.";

/* The table entry a safetensors name stands for: ours ("transformer.h.0...") or GPT-2's own
 * ("h.0..."); NULL for any other name. */
static const ParamInfo *param_named(const ParamTable *t, const char *name) {
    const size_t k = strlen(BODY_PREFIX);
    const char *bare = strncmp(name, BODY_PREFIX, k) == 0 ? name + k : name;
    for (int i = 0; i < t->count; i++)
        if (strcmp(t->params[i].name + k, bare) == 0) return &t->params[i];
    return NULL;
}

/* Buffers some GPT-2 files carry besides the weights (the causal mask). */
static int is_buffer(const char *name) {
    size_t n = strlen(name);
    return (n > 10 && strcmp(name + n - 10, ".attn.bias") == 0) ||
           (n > 17 && strcmp(name + n - 17, ".attn.masked_bias") == 0);
}

/* safetensors' dtypes and their bytes per element. */
static const struct {
    const char *name;
    uint64_t width;
} dtypes[] = {{"BOOL", 1}, {"U8", 1},  {"I8", 1},   {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"I16", 2}, {"U16", 2}, {"F16", 2},
              {"BF16", 2}, {"I32", 4}, {"U32", 4}, {"F32", 4},     {"I64", 8},     {"U64", 8}, {"F64", 8}};

/* Bytes per element of a dtype, 0 for a name safetensors does not define. */
static uint64_t dtype_width(const char *dtype) {
    for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++)
        if (strcmp(dtypes[i].name, dtype) == 0) return dtypes[i].width;
    return 0;
}

/* a * b, or UINT64_MAX where that does not fit: a byte count no file holds, refused as such */
static uint64_t mul_saturating(uint64_t a, uint64_t b) {
    return b && a > UINT64_MAX / b ? UINT64_MAX : a * b;
}

typedef struct {
    const char *name;
    uint64_t begin, end;
} Span;

static int by_offset(const void *a, const void *b) {
    const Span *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return (x->end > y->end) - (x->end < y->end);
}

/* One entry of the header: a known dtype, a shape, and data_offsets within the data that hold exactly
 * the bytes the shape takes in that dtype. Its span goes into *span. */
static int check_entry(const char *name, const JsonValue *v, uint64_t data_len, const char *path, Span *span,
                       char *err) {
    const JsonValue *shape = json_get(v, "shape"), *off = json_get(v, "data_offsets");
    const char *dtype = json_string(json_get(v, "dtype"));
    long long b, e, d;
    int ok = dtype && shape && shape->type == JSON_ARRAY && off && off->type == JSON_ARRAY && off->len == 2 &&
             json_int(&off->items[0], 0, MAX_OFFSET, &b) && json_int(&off->items[1], 0, MAX_OFFSET, &e) && b <= e;
    uint64_t elems = 1;
    char dims[160] = "[";
    for (size_t i = 0; ok && i < shape->len; i++) {
        ok = json_int(&shape->items[i], 0, MAX_OFFSET, &d);
        elems = mul_saturating(elems, (uint64_t)d);
        size_t k = strlen(dims);
        snprintf(dims + k, sizeof dims - k, "%s%lld", i ? ", " : "", d);
    }
    if (!ok) {
        snprintf(err, ERR_LEN, "%s: tensor %s has no valid dtype, shape or data_offsets (corrupt header)", path, name);
        return -1;
    }
    size_t k = strlen(dims);
    snprintf(dims + k, sizeof dims - k, "]");
    const uint64_t width = dtype_width(dtype), bytes = mul_saturating(elems, width);
    if (!width) {
        snprintf(err, ERR_LEN, "%s: tensor %s has dtype %s, which safetensors does not define (corrupt header)", path,
                 name, dtype);
        return -1;
    }
    if ((uint64_t)e > data_len) {
        snprintf(err, ERR_LEN, "%s: tensor %s ends at byte %lld of the data, past its end at %llu (truncated?)", path,
                 name, e, (unsigned long long)data_len);
        return -1;
    }
    if ((uint64_t)(e - b) != bytes) {
        snprintf(err, ERR_LEN, "%s: tensor %s holds %lld bytes but %s %s takes %llu (corrupt header)", path, name, e - b,
                 dtype, dims, (unsigned long long)bytes);
        return -1;
    }
    *span = (Span){name, (uint64_t)b, (uint64_t)e};
    return 0;
}

/* Every entry valid, and the tensors cover the data exactly, as the safetensors format requires: no
 * overlap (two tensors read from the same bytes), no hole and no bytes after the last tensor (data
 * that is no tensor's: a corrupt, concatenated or crafted file). */
static int check_layout(const JsonValue *root, uint64_t data_len, const char *path, char *err) {
    Span *spans = malloc((root->len ? root->len : 1) * sizeof *spans);
    if (!spans) {
        snprintf(err, ERR_LEN, "out of memory reading %s", path);
        return -1;
    }
    size_t n = 0;
    for (size_t i = 0; i < root->len; i++) {
        if (strcmp(root->members[i].key, "__metadata__") == 0) continue;
        if (check_entry(root->members[i].key, &root->members[i].value, data_len, path, &spans[n++], err) != 0) {
            free(spans);
            return -1;
        }
    }
    qsort(spans, n, sizeof *spans, by_offset);
    int rc = 0;
    uint64_t covered = 0; /* the data before it is some tensor's */
    for (size_t i = 0; rc == 0 && i < n; i++) {
        if (spans[i].begin < covered) {
            snprintf(err, ERR_LEN, "%s: tensors %s and %s overlap in the data (corrupt file; re-export it)", path,
                     spans[i - 1].name, spans[i].name);
            rc = -1;
        } else if (spans[i].begin > covered) {
            snprintf(err, ERR_LEN, "%s: bytes %llu to %llu of the data belong to no tensor (corrupt file; re-export it)",
                     path, (unsigned long long)covered, (unsigned long long)spans[i].begin);
            rc = -1;
        }
        covered = spans[i].end;
    }
    if (rc == 0 && covered != data_len) {
        snprintf(err, ERR_LEN, "%s has %llu bytes after its last tensor (a corrupt or concatenated file; re-export it)",
                 path, (unsigned long long)(data_len - covered));
        rc = -1;
    }
    free(spans);
    return rc;
}

typedef struct {
    const char *dtype;
    size_t rows, cols; /* as stored: [rows, cols] or [cols] with rows 1 */
    uint64_t begin, end;
} StoredTensor;

/* The entry of a tensor of the table, already through check_layout: only its rank is left to check. */
static int describe(const JsonValue *v, const char *path, const char *name, StoredTensor *s, char *err) {
    const JsonValue *shape = json_get(v, "shape"), *off = json_get(v, "data_offsets");
    if (shape->len < 1 || shape->len > 2) {
        snprintf(err, ERR_LEN, "%s: tensor %s has %zu dimensions; GPT-2's have 1 or 2", path, name, shape->len);
        return -1;
    }
    s->dtype = json_string(json_get(v, "dtype"));
    s->rows = shape->len == 2 ? (size_t)shape->items[0].number : 1;
    s->cols = (size_t)shape->items[shape->len - 1].number;
    s->begin = (uint64_t)off->items[0].number;
    s->end = (uint64_t)off->items[1].number;
    return 0;
}

/* Reads one stored tensor as floats (rows * cols of them) into out; its bytes are where check_layout
 * found them. */
static int read_tensor(FILE *f, uint64_t data_start, const StoredTensor *s, const char *path, const char *name,
                       float *out, char *err) {
    size_t n = s->rows * s->cols, width = (size_t)dtype_width(s->dtype);
    if (strcmp(s->dtype, "F32") && strcmp(s->dtype, "F16") && strcmp(s->dtype, "BF16")) {
        snprintf(err, ERR_LEN, "%s: tensor %s is %s; F32, F16 and BF16 are supported", path, name, s->dtype);
        return -1;
    }
    if (fseek(f, (long)(data_start + s->begin), SEEK_SET) != 0) {
        snprintf(err, ERR_LEN, "cannot read %s: %s", path, strerror(errno));
        return -1;
    }
    if (width == 4) {
        if (fread(out, 4, n, f) != n) goto io;
        return 0;
    }
    uint16_t *h = malloc(n * 2 + 2);
    if (!h) {
        snprintf(err, ERR_LEN, "out of memory reading %s", path);
        return -1;
    }
    if (fread(h, 2, n, f) != n) {
        free(h);
        goto io;
    }
    int bf16 = strcmp(s->dtype, "BF16") == 0;
    for (size_t i = 0; i < n; i++) {
        if (bf16) {
            uint32_t bits = (uint32_t)h[i] << 16;
            memcpy(&out[i], &bits, 4);
        } else {
            out[i] = half_to_float(h[i]);
        }
    }
    free(h);
    return 0;
io:
    snprintf(err, ERR_LEN, "cannot read tensor %s from %s (truncated?)", name, path);
    return -1;
}

int hf_read_weights(const char *dir, const ParamTable *t, float *params, char *err) {
    char path[FGPT_PATH_LEN], jerr[ERR_LEN];
    err[0] = 0;
    if (t->cfg.family != FAMILY_GPT2) {
        snprintf(err, ERR_LEN, "reading %s weights is not supported yet (--init-from takes GPT-2 checkpoints)",
                 gpt_family_name(t->cfg.family));
        return -1;
    }
    if (path_format(path, "%s/model.safetensors", dir) != 0) {
        snprintf(err, ERR_LEN, "%.200s...: too long a path for its model.safetensors", dir);
        return -1;
    }
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, ERR_LEN, "cannot open %s: %s (--init-from needs a Hugging Face GPT-2 directory)", path,
                 strerror(errno));
        return -1;
    }
    uint64_t hlen = 0, file_len = 0;
    uint8_t b8[8];
    if (fseek(f, 0, SEEK_END) == 0) file_len = (uint64_t)ftell(f);
    rewind(f);
    if (fread(b8, 1, 8, f) != 8) {
        fclose(f);
        snprintf(err, ERR_LEN, "%s is shorter than a safetensors header", path);
        return -1;
    }
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | b8[i];
    char *header = hlen <= MAX_HEADER && 8 + hlen <= file_len ? malloc(hlen + 1) : NULL;
    if (!header || fread(header, 1, hlen, f) != hlen) {
        fclose(f);
        free(header);
        snprintf(err, ERR_LEN, "%s has a header of %llu bytes in a %llu-byte file (not a safetensors file?)", path,
                 (unsigned long long)hlen, (unsigned long long)file_len);
        return -1;
    }
    JsonValue *root = json_parse(header, hlen, path, jerr);
    free(header);
    if (!root || root->type != JSON_OBJECT) {
        snprintf(err, ERR_LEN, "%s", root ? "the safetensors header is not a JSON object" : jerr);
        json_free(root);
        fclose(f);
        return -1;
    }
    const uint64_t data_start = 8 + hlen;
    if (check_layout(root, file_len - data_start, path, err) != 0) {
        json_free(root);
        fclose(f);
        return -1;
    }
    memset(params, 0, t->total * sizeof(float)); /* the padded vocabulary rows stay 0 */
    unsigned char *seen = calloc((size_t)t->count, 1);
    float *tmp = NULL;
    size_t tmp_cap = 0;
    const JsonValue *lm_head = NULL;
    int rc = seen ? 0 : -1;
    if (!seen) snprintf(err, ERR_LEN, "out of memory reading %s", path);
    for (size_t i = 0; rc == 0 && i < root->len; i++) {
        const char *name = root->members[i].key;
        const JsonValue *v = &root->members[i].value;
        if (strcmp(name, "__metadata__") == 0 || is_buffer(name)) continue;
        if (strcmp(name, "lm_head.weight") == 0) {
            lm_head = v;
            continue;
        }
        const ParamInfo *p = param_named(t, name);
        if (!p) {
            snprintf(err, ERR_LEN, "%s has a tensor %s that GPT2LMHeadModel does not (another architecture?)", path, name);
            rc = -1;
            break;
        }
        StoredTensor s;
        if (describe(v, path, name, &s, err) != 0) {
            rc = -1;
            break;
        }
        const size_t hf_rows = p->role == ROLE_WTE ? (size_t)t->cfg.vocab_size : p->rows;
        size_t want_rows = p->ndim == 1 ? 1 : p->hf_transposed ? p->cols : hf_rows;
        size_t want_cols = p->ndim == 1 ? p->cols : p->hf_transposed ? hf_rows : p->cols;
        if (s.rows != want_rows || s.cols != want_cols) {
            snprintf(err, ERR_LEN, "%s: tensor %s is [%zu, %zu] but the model needs [%zu, %zu]", path, name, s.rows,
                     s.cols, want_rows, want_cols);
            rc = -1;
            break;
        }
        float *dst = params + p->offset;
        if (p->hf_transposed) {
            if (s.rows * s.cols > tmp_cap) {
                free(tmp);
                tmp_cap = s.rows * s.cols;
                tmp = malloc(tmp_cap * sizeof *tmp);
            }
            if (!tmp) {
                snprintf(err, ERR_LEN, "out of memory reading %s", path);
                rc = -1;
                break;
            }
            rc = read_tensor(f, data_start, &s, path, name, tmp, err);
            /* stored [in, out] = [cols, rows] of ours */
            for (size_t r = 0; rc == 0 && r < p->rows; r++)
                for (size_t c = 0; c < p->cols; c++) dst[r * p->cols + c] = tmp[c * p->rows + r];
        } else {
            rc = read_tensor(f, data_start, &s, path, name, dst, err);
        }
        seen[p - t->params]++;
    }
    for (int i = 0; rc == 0 && i < t->count; i++) {
        if (seen[i] != 1) {
            snprintf(err, ERR_LEN, "%s %s tensor %s", path, seen[i] ? "holds more than one" : "has no", t->params[i].name);
            rc = -1;
        }
    }
    if (rc == 0 && lm_head) { /* tied: it must be the token embedding itself */
        StoredTensor s;
        const ParamInfo *wte = param_whole(t, ROLE_WTE);
        size_t n = (size_t)t->cfg.vocab_size * wte->cols;
        float *w = malloc(n * sizeof *w);
        rc = !w ? -1 : describe(lm_head, path, "lm_head.weight", &s, err);
        if (rc == 0 && (s.rows != (size_t)t->cfg.vocab_size || s.cols != wte->cols)) rc = -1;
        if (rc == 0) rc = read_tensor(f, data_start, &s, path, "lm_head.weight", w, err);
        if (rc == 0 && memcmp(w, params + wte->offset, n * sizeof *w) != 0) rc = -1;
        if (rc != 0 && !strstr(err, "lm_head"))
            snprintf(err, ERR_LEN, "%s: lm_head.weight is not the token embedding; an untied output layer is not supported",
                     path);
        free(w);
    }
    free(tmp);
    free(seen);
    json_free(root);
    fclose(f);
    return rc;
}
