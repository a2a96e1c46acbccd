/* model/train/checkpoint.c - checkpoint writer and reader (see checkpoint.h for the layout). */
#include "common/err.h"
#include "common/host_memory.h"
#include "common/hash.h"
#include "common/parallel_read.h"
#include "common/paths.h"
#include "model/train/checkpoint.h"
#include "model/train/hf_weights.h"

#include <ctype.h>
#include <math.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define STATE_MAGIC "FGPTSTAT"
/* 2: a checksum of the whole file in the header; 3: the training data's fingerprint; 4: the schedule;
 * 5: the model family's switches and shape (StateFamily); 6: Gemma 3's switches and the logit cap;
 * 7: the optimizer's and the objective's settings (StateSettings); 8: the validation shard; 9: the
 * schedule's shape and decay steps; 10: arrays whose every value is a bf16 stored as bf16 */
#define STATE_VERSION 10u
/* The oldest version still read: its files are GPT-2 runs (their family block is all GPT-2's). */
#define STATE_VERSION_V4 4u
#define STATE_VERSION_V5 5u
#define STATE_VERSION_V6 6u
#define STATE_VERSION_V7 7u
#define STATE_VERSION_V8 8u
#define STATE_VERSION_V9 9u

/* Everything of GPTConfig beyond GPT-2's shape, in fixed widths: version 5's fields, then 6's. */
#define STATE_FAMILY_V5_FIELDS                                                                           \
    int32_t family, num_kv_heads, head_dim, ffn_dim;                                                     \
    int32_t norm, positions, mlp, qk_norm, qkv_bias, untied_head;                                        \
    float norm_eps;                                                                                      \
    int32_t rope_scaling;                                                                                \
    double rope_theta, rope_factor, rope_low_freq_factor, rope_high_freq_factor, rope_original_max_position;

typedef struct {
    STATE_FAMILY_V5_FIELDS
} StateFamilyV5;

typedef struct {
    STATE_FAMILY_V5_FIELDS
    int32_t sandwich_norm, embed_scale, sliding_window, has_pad_token, pad_token_id;
    float query_pre_attn_scalar, logit_softcap;
    double rope_local_theta;
    /* bit l: layer l slides, whether config.json listed the layers or gave a pattern (the same model) */
    uint64_t sliding_layers[GPT_MAX_LAYERS / 64];
} StateFamily;

/* TrainSettings in fixed widths. */
typedef struct {
    uint32_t recorded, bf16_state;
    float weight_decay, grad_clip, z_loss, label_smoothing;
} StateSettings;

/* The fields of every version from 4 on, in their order. */
#define STATE_HEADER_FIELDS                                                                         \
    char magic[8];                                                                                  \
    uint32_t version, world; /* world: data-parallel ranks; 0 in files of one-rank runs */         \
    int32_t num_layers, num_heads, dim, max_seq_len, vocab_size, padded_vocab_size;                 \
    int32_t step, B, T, total_batch;                                                                \
    uint64_t seed, loader_epoch, loader_position, rng[4];                                           \
    uint64_t total_params;                                                                          \
    uint64_t data_tokens, data_fingerprint; /* the training shard's (loader.h); 0: not recorded */ \
    float lr, lr_final;                     /* the learning-rate schedule (TrainState) */           \
    int32_t total_steps, warmup;

typedef struct {
    STATE_HEADER_FIELDS
    StateFamily family;
    StateSettings settings;
    uint64_t val_tokens, val_fingerprint; /* the validation shard's (TrainState); 0 0: none */
    int32_t lr_shape, decay_steps;        /* the schedule's (LrSchedule) beyond the fields above */
    /* bit a set: array a (0 weights, 1 m, 2 v) is stored as bf16, its upper 16 bits, because every
     * value of it is a bf16 (--optimizer-state bf16 keeps all three so): 6 bytes a parameter
     * instead of 12, nothing lost */
    uint32_t bf16_arrays, reserved;
    uint64_t checksum; /* state_checksum of the header (this field 0) and the three arrays */
} StateHeader;

/* Version 9's header: runs written before arrays were stored as bf16 (all fp32). */
typedef struct {
    STATE_HEADER_FIELDS
    StateFamily family;
    StateSettings settings;
    uint64_t val_tokens, val_fingerprint;
    int32_t lr_shape, decay_steps;
    uint64_t checksum;
} StateHeaderV9;

/* Version 8's header: runs written before the schedule's shape was kept (all cosine). */
typedef struct {
    STATE_HEADER_FIELDS
    StateFamily family;
    StateSettings settings;
    uint64_t val_tokens, val_fingerprint;
    uint64_t checksum;
} StateHeaderV8;

/* Version 7's header: runs written before the validation shard was kept. */
typedef struct {
    STATE_HEADER_FIELDS
    StateFamily family;
    StateSettings settings;
    uint64_t checksum;
} StateHeaderV7;

/* Version 6's header: runs written before the settings were kept. */
typedef struct {
    STATE_HEADER_FIELDS
    StateFamily family;
    uint64_t checksum;
} StateHeaderV6;

/* Version 5's header: runs of GPT-2, Llama and Qwen written before Gemma's fields. */
typedef struct {
    STATE_HEADER_FIELDS
    StateFamilyV5 family;
    uint64_t checksum;
} StateHeaderV5;

/* Version 4's header: GPT-2 runs written before the family block. */
typedef struct {
    STATE_HEADER_FIELDS
    uint64_t checksum;
} StateHeaderV4;

size_t checkpoint_buffers_bytes(const ParamTable *t) {
    return 3 * t->total * sizeof(float);
}

int checkpoint_buffers_alloc(CheckpointBuffers *b, const ParamTable *t, char *err) {
    size_t n = t->total * sizeof(float);
    /* checked first: the compiler may make the malloc and memset below one calloc, whose pages the
     * first save touches, hours into a run */
    if (host_memory_short((double)checkpoint_buffers_bytes(t), "the checkpoint buffers (a host copy of the weights "
                          "and AdamW moments, which every save writes from)", "free host memory or train a smaller "
                          "model (-e, -v)", err))
        return -1;
    b->params = malloc(n);
    b->m = malloc(n);
    b->v = malloc(n);
    if (!b->params || !b->m || !b->v) {
        checkpoint_buffers_free(b);
        snprintf(err, ERR_LEN, "out of host memory for the checkpoint buffers (%.2f GB: a host copy of the weights and "
                 "AdamW moments, which every save writes from); free memory or train a smaller model (-e, -v)",
                 checkpoint_buffers_bytes(t) / 1e9);
        return -1;
    }
    /* an untouched allocation can still fail later, at the first save, on a system that overcommits */
    memset(b->params, 0, n);
    memset(b->m, 0, n);
    memset(b->v, 0, n);
    return 0;
}

void checkpoint_buffers_free(CheckpointBuffers *b) {
    free(b->v);
    free(b->m);
    free(b->params);
    b->params = b->m = b->v = NULL;
}

/* The file's checksum: the header's bytes (hsize of them, as on disk) with its checksum field, the
 * last 8 bytes, as 0, then the values of params, m, v as fp32 (n bytes each), however the file
 * stores them. */
static uint64_t state_checksum(const void *header, size_t hsize, const float *params, const float *m, const float *v,
                               size_t n) {
    unsigned char z[sizeof(StateHeader)];
    memcpy(z, header, hsize);
    memset(z + hsize - sizeof(uint64_t), 0, sizeof(uint64_t));
    uint64_t c = fgpt_hash64(z, hsize, 0);
    c = fgpt_hash64(params, n, c);
    c = fgpt_hash64(m, n, c);
    return fgpt_hash64(v, n, c);
}

/* cfg (finished) as the state file records it. */
static StateFamily family_block(const GPTConfig *cfg) {
    StateFamily b;
    memset(&b, 0, sizeof b);
    b.family = cfg->family;
    b.num_kv_heads = cfg->num_kv_heads;
    b.head_dim = cfg->head_dim;
    b.ffn_dim = cfg->ffn_dim;
    b.norm = cfg->norm;
    b.positions = cfg->positions;
    b.mlp = cfg->mlp;
    b.qk_norm = cfg->qk_norm;
    b.qkv_bias = cfg->qkv_bias;
    b.untied_head = cfg->untied_head;
    b.norm_eps = cfg->norm_eps;
    b.rope_scaling = cfg->rope.scaling;
    b.rope_theta = cfg->rope.theta;
    b.rope_factor = cfg->rope.factor;
    b.rope_low_freq_factor = cfg->rope.low_freq_factor;
    b.rope_high_freq_factor = cfg->rope.high_freq_factor;
    b.rope_original_max_position = cfg->rope.original_max_position_embeddings;
    b.sandwich_norm = cfg->sandwich_norm;
    b.embed_scale = cfg->embed_scale;
    b.has_pad_token = cfg->has_pad_token;
    b.pad_token_id = cfg->pad_token_id;
    b.query_pre_attn_scalar = cfg->query_pre_attn_scalar;
    b.logit_softcap = cfg->logit_softcap;
    b.rope_local_theta = cfg->rope_local_theta;
    int sliding = 0;
    for (int l = 0; l < cfg->num_layers && l < GPT_MAX_LAYERS; l++)
        if (gpt_layer_is_sliding(cfg, l)) {
            b.sliding_layers[l / 64] |= 1ull << (l % 64);
            sliding = 1;
        }
    b.sliding_window = sliding ? cfg->sliding_window : 0; /* no layer slides: the window is no part of the model */
    return b;
}

/* A state file's header as read: this version's fields (a version 4 file's family block is the
 * GPT-2 of its shape, a version 5 file's has no Gemma switches and no logit cap, a version 6 file's
 * settings are not recorded, a version 8 file's schedule is cosine), and its bytes as on disk, which
 * the checksum covers. */
typedef struct {
    StateHeader h;
    size_t size;
    unsigned char raw[sizeof(StateHeader)];
} DiskHeader;

/* 0 when f starts with a header of a version read here; -1 when it is no state file; -2 when it is
 * one of another version (that version in d->h.version); -3 when it ends inside its header. */
static int read_header(FILE *f, DiskHeader *d) {
    StateHeaderV4 v4;
    memset(d, 0, sizeof *d);
    const size_t got = fread(&v4, 1, sizeof v4, f);
    if (got < sizeof v4.magic || memcmp(v4.magic, STATE_MAGIC, 8) != 0) return -1;
    if (got < sizeof v4) return -3;
    memcpy(d->raw, &v4, sizeof v4);
    if (v4.version == STATE_VERSION) {
        if (fread(d->raw + sizeof v4, sizeof(StateHeader) - sizeof v4, 1, f) != 1) return -3;
        memcpy(&d->h, d->raw, sizeof d->h);
        d->size = sizeof d->h;
        return d->h.bf16_arrays & ~7u || d->h.reserved ? -1 : 0; /* bits no writer sets: corrupt */
    }
    d->h.version = v4.version;
    if (v4.version == STATE_VERSION_V9) {
        StateHeaderV9 v9;
        if (fread(d->raw + sizeof v4, sizeof v9 - sizeof v4, 1, f) != 1) return -3;
        memcpy(&v9, d->raw, sizeof v9);
        memcpy(&d->h, &v9, offsetof(StateHeaderV9, checksum)); /* every array fp32 */
        d->h.checksum = v9.checksum;
        d->size = sizeof v9;
        return 0;
    }
    if (v4.version == STATE_VERSION_V8) {
        StateHeaderV8 v8;
        if (fread(d->raw + sizeof v4, sizeof v8 - sizeof v4, 1, f) != 1) return -3;
        memcpy(&v8, d->raw, sizeof v8);
        memcpy(&d->h, &v8, offsetof(StateHeaderV8, checksum)); /* the shape stays 0: cosine, all there was */
        d->h.checksum = v8.checksum;
        d->size = sizeof v8;
        return 0;
    }
    if (v4.version == STATE_VERSION_V7) {
        StateHeaderV7 v7;
        if (fread(d->raw + sizeof v4, sizeof v7 - sizeof v4, 1, f) != 1) return -3;
        memcpy(&v7, d->raw, sizeof v7);
        memcpy(&d->h, &v7, offsetof(StateHeaderV7, checksum)); /* all but the validation shard, unrecorded */
        d->h.checksum = v7.checksum;
        d->size = sizeof v7;
        return 0;
    }
    if (v4.version == STATE_VERSION_V6) {
        StateHeaderV6 v6;
        if (fread(d->raw + sizeof v4, sizeof v6 - sizeof v4, 1, f) != 1) return -3;
        memcpy(&v6, d->raw, sizeof v6);
        memcpy(&d->h, &v6, offsetof(StateHeaderV6, checksum)); /* all but the settings, which stay unrecorded */
        d->h.checksum = v6.checksum;
        d->size = sizeof v6;
        return 0;
    }
    if (v4.version == STATE_VERSION_V5) {
        StateHeaderV5 v5;
        if (fread(d->raw + sizeof v4, sizeof v5 - sizeof v4, 1, f) != 1) return -3;
        memcpy(&v5, d->raw, sizeof v5);
        memcpy(&d->h, &v5, offsetof(StateHeaderV5, family)); /* the fields every version has */
        memcpy(&d->h.family, &v5.family, sizeof v5.family);  /* Gemma's fields stay 0, as other families' are */
        d->h.checksum = v5.checksum;
        d->size = sizeof v5;
        return 0;
    }
    if (v4.version != STATE_VERSION_V4) return -2;
    /* its family block is derived from the shape, before the checksum is read: a damaged one is corrupt */
    if (v4.num_layers < 1 || v4.num_layers > GPT_MAX_LAYERS || v4.num_heads < 1 || v4.dim < v4.num_heads ||
        v4.dim > GPT_MAX_WIDTH)
        return -1;
    memcpy(&d->h, &v4, offsetof(StateHeaderV4, checksum)); /* the fields both versions share */
    GPTConfig gpt2 = {.num_layers = v4.num_layers, .num_heads = v4.num_heads, .dim = v4.dim};
    gpt_config_finish(&gpt2);
    d->h.family = family_block(&gpt2);
    d->h.checksum = v4.checksum;
    d->size = sizeof v4;
    return 0;
}

static int write_all(FILE *f, const void *p, size_t bytes) {
    return fwrite(p, 1, bytes, f) == bytes;
}

/* Closes f after flushing it to disk; 1 on success. */
static int close_synced(FILE *f) {
    int ok = fflush(f) == 0 && !ferror(f) && fsync(fileno(f)) == 0;
    return (fclose(f) == 0) && ok;
}

/* More parameters than any state file holds (a trillion): a header claiming so is corrupt, and its
 * sizes would overflow. */
#define MAX_STATE_PARAMS ((uint64_t)1 << 40)

/* Bytes of array a in a state file of header h: 2 a value when stored as bf16, else 4. */
static uint64_t array_bytes(const StateHeader *h, int a) {
    return h->total_params * (h->bf16_arrays >> a & 1 ? sizeof(uint16_t) : sizeof(float));
}

static uint64_t arrays_bytes(const StateHeader *h) {
    return array_bytes(h, 0) + array_bytes(h, 1) + array_bytes(h, 2);
}

/* The low 16 bits of x[at, end) ORed: 0 when every value there is a bf16 (a loop that vectorizes). */
static uint32_t low_bits(const float *x, size_t at, size_t end) {
    uint32_t low = 0;
    for (size_t i = at; i < end; i++) {
        uint32_t bits;
        memcpy(&bits, &x[i], 4);
        low |= bits & 0xffffu;
    }
    return low;
}

/* Whether every one of the n values is a bf16, block by block (a vectorized OR), so that an fp32
 * array shows in its first block. One thread: the writer runs beside training, and OpenMP's teams
 * spin between regions on the cores training needs. */
static int all_bf16(const float *x, size_t n) {
    enum { BLOCK = 1 << 14 };
    for (size_t at = 0; at < n; at += BLOCK)
        if (low_bits(x, at, n - at < BLOCK ? n : at + BLOCK)) return 0;
    return 1;
}

/* Writes the n values of x, as fp32 or (bf16 set: each one a bf16) as their upper 16 bits, a piece at
 * a time, adding each piece's fp32 values to the checksum stream s when it is given: one pass over
 * memory that a piece's write then finds in cache. Nothing is allocated, so a save cannot fail for
 * want of memory after hours of training. */
static int write_values_hashed(FILE *f, const float *x, size_t n, int bf16, FgptHashStream *s) {
    uint16_t piece[1 << 15];
    const size_t per = sizeof piece / sizeof piece[0];
    int ok = 1;
    for (size_t at = 0; ok && at < n; at += per) {
        const size_t k = n - at < per ? n - at : per;
        if (s) fgpt_hash_add(s, x + at, k * sizeof(float));
        if (!bf16) {
            ok = write_all(f, x + at, k * sizeof(float));
            continue;
        }
        for (size_t i = 0; i < k; i++) {
            uint32_t bits;
            memcpy(&bits, &x[at + i], 4);
            piece[i] = (uint16_t)(bits >> 16);
        }
        ok = write_all(f, piece, k * sizeof piece[0]);
    }
    return ok;
}

static int write_values(FILE *f, const float *x, size_t n, int bf16) {
    return write_values_hashed(f, x, n, bf16, NULL);
}

/* weights_bf16: whether every weight is a bf16 (all_bf16 of params) */
static int write_state(const char *path, const ParamTable *t, const float *params, const float *m, const float *v,
                       int weights_bf16, const TrainState *st) {
    FILE *f = create_new_file(path);
    if (!f) return 0;
    StateHeader h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, STATE_MAGIC, 8);
    h.version = STATE_VERSION;
    h.world = (uint32_t)(st->world > 1 ? st->world : 1);
    h.num_layers = t->cfg.num_layers;
    h.num_heads = t->cfg.num_heads;
    h.dim = t->cfg.dim;
    h.max_seq_len = t->cfg.max_seq_len;
    h.vocab_size = t->cfg.vocab_size;
    h.padded_vocab_size = t->cfg.padded_vocab_size;
    h.step = st->step;
    h.B = st->B;
    h.T = st->T;
    h.total_batch = st->total_batch;
    h.seed = st->seed;
    h.loader_epoch = st->loader_epoch;
    h.loader_position = st->loader_position;
    memcpy(h.rng, st->rng, sizeof h.rng);
    h.total_params = t->total;
    h.data_tokens = st->data_tokens;
    h.data_fingerprint = st->data_fingerprint;
    h.lr = st->schedule.lr;
    h.lr_final = st->schedule.lr_final;
    h.total_steps = st->schedule.total_steps;
    h.warmup = st->schedule.warmup;
    h.lr_shape = (int32_t)st->schedule.shape;
    h.decay_steps = st->schedule.decay_steps;
    h.family = family_block(&t->cfg);
    h.settings = (StateSettings){.recorded = st->settings.recorded != 0, .bf16_state = (uint32_t)st->settings.bf16_state,
                                 .weight_decay = st->settings.weight_decay, .grad_clip = st->settings.grad_clip,
                                 .z_loss = st->settings.z_loss, .label_smoothing = st->settings.label_smoothing};
    h.val_tokens = st->val_tokens;
    h.val_fingerprint = st->val_fingerprint;
    const float *arrays[3] = {params, m, v};
    h.bf16_arrays = (uint32_t)weights_bf16 | (uint32_t)all_bf16(m, t->total) << 1 | (uint32_t)all_bf16(v, t->total) << 2;
    /* state_checksum as the arrays go out, the header's checksum written last (h.checksum 0 until then,
     * as state_checksum hashes it) */
    uint64_t c = fgpt_hash64(&h, sizeof h, 0);
    int ok = write_all(f, &h, sizeof h);
    for (int a = 0; a < 3 && ok; a++) {
        FgptHashStream s;
        fgpt_hash_begin(&s, c);
        ok = write_values_hashed(f, arrays[a], t->total, h.bf16_arrays >> a & 1, &s);
        c = fgpt_hash_end(&s);
    }
    h.checksum = c;
    ok = ok && fseek(f, (long)offsetof(StateHeader, checksum), SEEK_SET) == 0 && write_all(f, &h.checksum, sizeof c);
    return close_synced(f) && ok;
}

/* Appends s to the growing JSON header; 0 when out of memory (the header is then freed, and the
 * checkpoint's write fails as a write that could not finish does). */
static int append(char **buf, size_t *len, size_t *cap, const char *s) {
    size_t k = strlen(s);
    if (*len + k + 1 > *cap) {
        *cap = (*len + k + 1) * 2;
        char *grown = realloc(*buf, *cap);
        if (!grown) {
            free(*buf);
            *buf = NULL;
            return 0;
        }
        *buf = grown;
    }
    memcpy(*buf + *len, s, k + 1);
    *len += k;
    return 1;
}

static int write_text(const char *path, const char *text, size_t len) {
    FILE *f = create_new_file(path);
    if (!f) return 0;
    int ok = write_all(f, text, len);
    return close_synced(f) && ok;
}

/* One tensor of the HF checkpoint: a table row, or one part of a packed row. */
typedef struct {
    const char *name;
    int ndim;
    size_t d0, d1;     /* HF shape: [d0, d1], or [d0] for a vector */
    const float *data; /* in our layout: [d0, d1] rows, or [d1, d0] of ours for a Conv1D matrix */
    int transposed;
} HfTensor;

/* Part `part` of row p (0 for a plain row) as HF stores it: the vocabulary rows lose their padding. */
static HfTensor hf_tensor(const ParamTable *t, const ParamInfo *p, int part, const float *params) {
    const int vocab = p->role == ROLE_WTE || p->role == ROLE_LM_HEAD;
    size_t first = 0;
    for (int j = 0; j < part; j++) first += p->part[j].rows;
    const size_t rows = p->num_parts ? p->part[part].rows : vocab ? (size_t)t->cfg.vocab_size : p->rows;
    HfTensor h = {p->num_parts ? p->part[part].name : p->name, p->ndim, 0, 0, NULL, p->hf_transposed};
    if (p->ndim == 1) {
        h.d0 = p->num_parts ? rows : p->cols;
        h.data = params + p->offset + first;
    } else {
        h.d0 = p->hf_transposed ? p->cols : rows;
        h.d1 = p->hf_transposed ? rows : p->cols;
        h.data = params + p->offset + first * p->cols;
    }
    return h;
}

static int parts_of(const ParamInfo *p) {
    return p->num_parts ? p->num_parts : 1;
}

/* The weights as F32, or as BF16 when every one of them is a bf16 (bf16; --optimizer-state bf16
 * keeps no other): half the bytes, nothing lost. config.json's dtype stays the run's, so transformers holds
 * them as it would the F32 file's. */
static int write_safetensors(const char *path, const ParamTable *t, const float *params, int bf16) {
    char *hdr = NULL, item[512];
    size_t len = 0, cap = 0, offset = 0;
    const char *dtype = bf16 ? "BF16" : "F32";
    const size_t width = bf16 ? sizeof(uint16_t) : sizeof(float);
    int ok = append(&hdr, &len, &cap, "{\"__metadata__\":{\"format\":\"pt\"}");
    for (int i = 0; i < t->count; i++)
        for (int j = 0; j < parts_of(&t->params[i]); j++) {
            const HfTensor h = hf_tensor(t, &t->params[i], j, params);
            const size_t bytes = h.d0 * (h.ndim == 2 ? h.d1 : 1) * width;
            if (h.ndim == 1)
                snprintf(item, sizeof item, ",\"%s\":{\"dtype\":\"%s\",\"shape\":[%zu],\"data_offsets\":[%zu,%zu]}",
                         h.name, dtype, h.d0, offset, offset + bytes);
            else
                snprintf(item, sizeof item, ",\"%s\":{\"dtype\":\"%s\",\"shape\":[%zu,%zu],\"data_offsets\":[%zu,%zu]}",
                         h.name, dtype, h.d0, h.d1, offset, offset + bytes);
            ok = ok && append(&hdr, &len, &cap, item);
            offset += bytes;
        }
    ok = ok && append(&hdr, &len, &cap, "}");
    while (ok && len % 8) ok = append(&hdr, &len, &cap, " "); /* the format asks for 8-byte aligned data */
    FILE *f = ok ? create_new_file(path) : NULL;
    if (!f) {
        free(hdr);
        return 0;
    }
    uint64_t hlen = len;
    ok = write_all(f, &hlen, 8) && write_all(f, hdr, len);
    free(hdr);
    /* transposed tensors go out through a fixed buffer: a save allocates nothing the size of a
     * tensor, which could fail after hours of training */
    float chunk[4096];
    for (int i = 0; ok && i < t->count; i++)
        for (int j = 0; ok && j < parts_of(&t->params[i]); j++) {
            const HfTensor h = hf_tensor(t, &t->params[i], j, params);
            if (!h.transposed) {
                ok = write_values(f, h.data, h.d0 * (h.ndim == 2 ? h.d1 : 1), bf16);
                continue;
            }
            /* ours is [d1, d0]: HF's [d0, d1] is its transpose */
            size_t k = 0;
            for (size_t c = 0; ok && c < h.d0; c++)
                for (size_t r = 0; ok && r < h.d1; r++) {
                    chunk[k++] = h.data[r * h.d0 + c];
                    if (k == sizeof chunk / sizeof chunk[0]) ok = write_values(f, chunk, k, bf16), k = 0;
                }
            ok = ok && write_values(f, chunk, k, bf16);
        }
    return close_synced(f) && ok;
}

/* bos, eos: the tokenizer's (-1: no tokenizer) */
static int write_config_json(const char *path, const GPTConfig *cfg, int bos, int eos) {
    char buf[16384]; /* Gemma's layer_types: a line per layer */
    int len = hf_config_json(cfg, bos, eos, buf, sizeof buf);
    return len > 0 && write_text(path, buf, (size_t)len);
}

static void remove_checkpoint_dir(const char *dir) {
    static const char *files[] = {"model.safetensors", "config.json", "state.bin", "tokenizer.json",
                                  "tokenizer_config.json", "chat_template.jinja"};
    char p[FGPT_PATH_LEN];
    struct stat sb;
    if (lstat(dir, &sb) != 0) return;
    /* a link at a checkpoint's name (one kept on another disk) goes as a link: the files it leads to
     * may be another run's */
    if (S_ISLNK(sb.st_mode)) {
        unlink(dir);
        return;
    }
    if (!S_ISDIR(sb.st_mode)) return;
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++)
        if (path_format(p, "%s/%s", dir, files[i]) == 0) unlink(p);
    rmdir(dir);
}

/* Whether a run directory's entry is the name a checkpoint is written under (step_*.tmp). */
static int is_unfinished_name(const char *name) {
    const size_t len = strlen(name);
    return strncmp(name, "step_", 5) == 0 && len > 4 && strcmp(name + len - 4, ".tmp") == 0;
}

/* The name of an unfinished checkpoint in run_dir into name, or "". */
static void unfinished_checkpoint(const char *run_dir, char *name, size_t size) {
    DIR *d = opendir(run_dir);
    name[0] = 0;
    for (struct dirent *e; d && !name[0] && (e = readdir(d));)
        if (is_unfinished_name(e->d_name)) snprintf(name, size, "%s", e->d_name);
    if (d) closedir(d);
}

int checkpoint_clear_leftovers(const char *run_dir, char *err) {
    DIR *d = opendir(run_dir);
    if (!d) return 0; /* no run directory yet: nothing left over */
    struct dirent *e;
    int rc = 0;
    while (rc == 0 && (e = readdir(d))) {
        if (!is_unfinished_name(e->d_name)) continue;
        char p[FGPT_PATH_LEN];
        struct stat sb;
        if (path_format(p, "%s/%s", run_dir, e->d_name) != 0 || lstat(p, &sb) != 0 || !S_ISDIR(sb.st_mode)) continue;
        remove_checkpoint_dir(p);
        if (lstat(p, &sb) == 0) {
            snprintf(err, ERR_LEN, "%s, the unfinished checkpoint of a stopped run, holds files a checkpoint does not "
                     "write, so the next save could not use its name: move or remove it, and run again", p);
            rc = -1;
        }
    }
    closedir(d);
    return rc;
}

static int compare_steps(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

int checkpoint_dir_step(const char *name) {
    int step;
    char tail;
    return sscanf(name, "step_%d%c", &step, &tail) == 1 && step >= 0 ? step : -1;
}

/* Keeps the checkpoint just written (step `current`) and the newest keep - 1 older ones; removes the
 * rest of the older ones. Checkpoints of later steps (a future the user rolled back from by editing
 * `latest`) are left alone, so `latest` never names a removed checkpoint. An earlier run's
 * checkpoints are not here to prune: a new run sets them aside first (checkpoint_set_aside_run). */
static void prune_checkpoints(const char *run_dir, int current, int keep) {
    DIR *d = opendir(run_dir);
    if (!d) return;
    int steps[4096];
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < 4096) {
        int step = checkpoint_dir_step(e->d_name);
        if (step >= 0 && step < current) steps[n++] = step;
    }
    closedir(d);
    qsort(steps, n, sizeof steps[0], compare_steps);
    char p[FGPT_PATH_LEN];
    for (int i = 0; i < n - (keep - 1); i++)
        if (path_format(p, "%s/step_%08d", run_dir, steps[i]) == 0) remove_checkpoint_dir(p);
}

int checkpoint_run_dir_ok(const char *run_dir, char *err) {
    size_t len = strlen(run_dir);
    if (len <= CHECKPOINT_RUN_DIR_MAX) return 0;
    snprintf(err, ERR_LEN, "-o/--out is %zu bytes long; the files of a run directory must fit the system's limit of "
             "%d bytes per path, so -o may be at most %d bytes: pass a shorter -o", len, FGPT_PATH_LEN - 1,
             CHECKPOINT_RUN_DIR_MAX);
    return -1;
}

void checkpoint_what_is_left(const char *run_dir, char *buf, size_t size) {
    char name[256], ignored[ERR_LEN];
    if (checkpoint_latest_name(run_dir, name, sizeof name, ignored) >= 0)
        snprintf(buf, size, "the last checkpoint (%s) is intact", name);
    else
        snprintf(buf, size, "this run has no checkpoint yet");
}

/* What a failed save leaves the run, said truthfully: a crash-safe save only keeps what was there. */
static void save_failed(char *err, const char *what, const char *path, int errnum, const char *run_dir) {
    char left[ERR_LEN];
    checkpoint_what_is_left(run_dir, left, sizeof left);
    snprintf(err, ERR_LEN, "%s %s: %s (%s); %s", what, path, strerror(errnum), write_error_hint(errnum), left);
}

int checkpoint_save(const char *run_dir, const ParamTable *t, const float *params, const float *m, const float *v,
                    const TrainState *st, int keep, char *err) {
    return checkpoint_save_with(run_dir, t, params, m, v, st, NULL, keep, err);
}

int checkpoint_save_with(const char *run_dir, const ParamTable *t, const float *params, const float *m,
                         const float *v, const TrainState *st, const CheckpointTokenizer *tok, int keep, char *err) {
    char final_dir[FGPT_PATH_LEN], tmp_dir[FGPT_PATH_LEN], replaced[FGPT_PATH_LEN], p[FGPT_PATH_LEN];
    char latest[FGPT_PATH_LEN], latest_tmp[FGPT_PATH_LEN];
    if (path_format(final_dir, "%s/step_%08d", run_dir, st->step) != 0 ||
        path_format(tmp_dir, "%s.tmp", final_dir) != 0 || path_format(replaced, "%s.replaced", final_dir) != 0 ||
        path_format(p, "%s/tokenizer_config.json", replaced) != 0 || path_format(latest, "%s/latest", run_dir) != 0 ||
        path_format(latest_tmp, "%s.tmp", latest) != 0) {
        snprintf(err, ERR_LEN, "the checkpoint paths in %s are longer than %d bytes: pass a shorter -o", run_dir,
                 FGPT_PATH_LEN - 1);
        return -1;
    }
    remove_checkpoint_dir(tmp_dir); /* leftovers of a crash */
    if (make_dirs(run_dir) != 0) {
        snprintf(err, ERR_LEN, "cannot create run directory %s: %s (check -o)", run_dir, strerror(errno));
        return -1;
    }
    if (mkdir(tmp_dir, 0755) != 0) {
        save_failed(err, "cannot create checkpoint directory", tmp_dir, errno, run_dir);
        return -1;
    }
    int ok = 1;
    const int weights_bf16 = all_bf16(params, t->total);
    path_format(p, "%s/state.bin", tmp_dir);
    ok = ok && write_state(p, t, params, m, v, weights_bf16, st);
    if (ok) path_format(p, "%s/model.safetensors", tmp_dir);
    ok = ok && write_safetensors(p, t, params, weights_bf16);
    if (ok) path_format(p, "%s/config.json", tmp_dir);
    ok = ok && write_config_json(p, &t->cfg, tok ? tok->bos_token_id : -1, tok ? tok->eos_token_id : -1);
    if (ok && tok) {
        path_format(p, "%s/tokenizer.json", tmp_dir);
        ok = write_text(p, tok->tokenizer_json, tok->tokenizer_json_len);
    }
    if (ok && tok) {
        path_format(p, "%s/tokenizer_config.json", tmp_dir);
        ok = write_text(p, tok->tokenizer_config_json, strlen(tok->tokenizer_config_json));
    }
    if (ok && tok && tok->chat_template) { /* where transformers looks for it when the config has none */
        path_format(p, "%s/chat_template.jinja", tmp_dir);
        ok = write_text(p, tok->chat_template, tok->chat_template_len);
    }
    if (!ok) {
        int e = errno;
        remove_checkpoint_dir(tmp_dir);
        save_failed(err, "cannot write checkpoint file", p, e, run_dir);
        return -1;
    }
    /* A checkpoint of the same step (a future the user rolled back from) is replaced, and only
     * removed once the new one is in its place. */
    remove_checkpoint_dir(replaced);
    const int moved_aside = rename(final_dir, replaced) == 0;
    if (!moved_aside && errno != ENOENT) {
        snprintf(err, ERR_LEN, "cannot move %s aside: %s", final_dir, strerror(errno));
        remove_checkpoint_dir(tmp_dir);
        return -1;
    }
    if (rename(tmp_dir, final_dir) != 0) {
        const int e = errno;
        if (moved_aside) rename(replaced, final_dir); /* the checkpoint it was to replace keeps its name */
        remove_checkpoint_dir(tmp_dir);
        save_failed(err, "cannot rename the new checkpoint to", final_dir, e, run_dir);
        return -1;
    }
    remove_checkpoint_dir(replaced);
    if (!sync_dir(run_dir)) {
        const int e = errno;
        snprintf(err, ERR_LEN, "cannot sync run directory %s after writing %s: %s (%s); latest still names the "
                 "checkpoint before it", run_dir, final_dir, strerror(e), write_error_hint(e));
        return -1;
    }
    char line[32];
    int len = snprintf(line, sizeof line, "step_%08d\n", st->step);
    if (!write_text(latest_tmp, line, (size_t)len) || rename(latest_tmp, latest) != 0) {
        int e = errno;
        /* a latest naming an older checkpoint would have -y 1 pass this complete one by; without
         * latest, a resume takes the newest complete checkpoint */
        unlink(latest_tmp);
        unlink(latest);
        sync_dir(run_dir);
        snprintf(err, ERR_LEN, "cannot update %s: %s (%s); checkpoint step_%08d is complete and -y 1 resumes from it",
                 latest, strerror(e), write_error_hint(e), st->step);
        return -1;
    }
    if (!sync_dir(run_dir)) {
        snprintf(err, ERR_LEN, "cannot sync run directory %s: %s", run_dir, strerror(errno));
        return -1;
    }
    prune_checkpoints(run_dir, st->step, keep);
    return 0;
}

/* Creates <run_dir>/earlier_run_N, the first free N, into dest (FGPT_PATH_LEN bytes). 0, or -1 with a
 * message in err. */
static int create_earlier_dir(const char *run_dir, char *dest, char *err) {
    for (int k = 1; k <= 100000; k++) {
        if (path_format(dest, "%s/earlier_run_%d", run_dir, k) != 0) break;
        if (mkdir(dest, 0755) == 0) return 0;
        if (errno != EEXIST) break;
    }
    snprintf(err, ERR_LEN, "cannot create %s/earlier_run_N: %s (check -o)", run_dir, strerror(errno));
    dest[0] = 0;
    return -1;
}

static int by_name(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Moves the entries of run_dir that take(name, after) selects into a new <run_dir>/earlier_run_N,
 * whose path goes to dest (FGPT_PATH_LEN bytes), in the order of their names. How many moved (0:
 * none, and no directory made), or -1 with a message in err; then what had moved is moved back, so
 * that neither folder is left holding half a run that neither can resume. */
static int move_aside(const char *run_dir, int (*take)(const char *name, int after), int after, char *dest,
                      char *err) {
    dest[0] = 0;
    DIR *d = opendir(run_dir);
    if (!d) {
        if (errno == ENOENT) return 0;
        snprintf(err, ERR_LEN, "cannot read run directory %s: %s (check -o)", run_dir, strerror(errno));
        return -1;
    }
    char **names = NULL;
    int count = 0, failed = 0;
    struct dirent *e;
    while (!failed && (e = readdir(d))) {
        if (!take(e->d_name, after)) continue;
        char **grown = realloc(names, (size_t)(count + 1) * sizeof *names);
        if (grown) names = grown;
        if (!grown || !(names[count] = strdup(e->d_name))) {
            snprintf(err, ERR_LEN, "out of memory setting the earlier run in %s aside", run_dir);
            failed = 1;
        } else {
            count++;
        }
    }
    closedir(d);
    if (count) qsort(names, (size_t)count, sizeof *names, by_name);
    char from[FGPT_PATH_LEN], to[FGPT_PATH_LEN];
    int moved = 0;
    if (!failed && count && create_earlier_dir(run_dir, dest, err) != 0) failed = 1;
    for (; !failed && moved < count; moved++) {
        if (path_format(from, "%s/%s", run_dir, names[moved]) != 0 ||
            path_format(to, "%s/%s", dest, names[moved]) != 0 || rename(from, to) != 0) {
            const int name_too_long = errno == ENAMETOOLONG;
            snprintf(err, ERR_LEN, "cannot move %s/%s to %s: %s (%s)", run_dir, names[moved], dest, strerror(errno),
                     name_too_long ? "pass a shorter -o" : "check its permissions, or -o");
            failed = 1;
            break;
        }
    }
    int stuck = 0; /* entries that could not move back */
    for (int i = moved - 1; failed && i >= 0; i--)
        if (path_format(from, "%s/%s", dest, names[i]) != 0 || path_format(to, "%s/%s", run_dir, names[i]) != 0 ||
            rename(from, to) != 0)
            stuck++;
    if (failed && dest[0] && !stuck) rmdir(dest);
    if (stuck) { /* the message says where the run's files are now */
        const size_t n = strlen(err);
        snprintf(err + n, ERR_LEN - n, "; %d of them stayed in %s: move them back by hand", stuck, dest);
    }
    for (int i = 0; i < count; i++) free(names[i]);
    free(names);
    if (failed) return -1;
    if (moved > 0 && !sync_dir(run_dir)) {
        snprintf(err, ERR_LEN, "cannot sync run directory %s: %s", run_dir, strerror(errno));
        return -1;
    }
    return moved;
}

/* What a run leaves in its directory, besides .lock: latest, the log, the checkpoints (also
 * step_*.tmp and .replaced leftovers of a crash). */
static int is_run_file(const char *name, int unused) {
    (void)unused;
    return strcmp(name, "latest") == 0 || strcmp(name, "latest.tmp") == 0 || strcmp(name, "log.jsonl") == 0 ||
           strcmp(name, "log.jsonl.tmp") == 0 || strcmp(name, "log.jsonl.prev") == 0 || strncmp(name, "step_", 5) == 0;
}

int checkpoint_set_aside_run(const char *run_dir, char *moved_to, size_t size, char *err) {
    char dest[FGPT_PATH_LEN];
    int moved = move_aside(run_dir, is_run_file, 0, dest, err);
    if (moved <= 0) return moved;
    snprintf(moved_to, size, "%s", dest);
    return 1;
}

static int is_checkpoint_after(const char *name, int step) {
    return checkpoint_dir_step(name) > step;
}

/* The newest step_NNNNNNNN in dir of a step below `below`, or -1. */
static int newest_checkpoint(const char *dir, int below) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    int newest = -1;
    struct dirent *e;
    while ((e = readdir(d))) {
        int step = checkpoint_dir_step(e->d_name);
        if (step > newest && step < below) newest = step;
    }
    closedir(d);
    return newest;
}

/* Opens a state file (mode "rb" or "r+b") whose header is of a version read here and whose size is
 * the one its header gives, with that header in d; NULL when it is not such a file. */
static FILE *open_whole_state(const char *path, const char *mode, DiskHeader *d) {
    struct stat sb;
    if (stat(path, &sb) != 0 || !S_ISREG(sb.st_mode)) return NULL; /* a FIFO would block the open */
    FILE *f = fopen(path, mode);
    if (f && read_header(f, d) == 0 && d->h.total_params <= MAX_STATE_PARAMS && fstat(fileno(f), &sb) == 0 &&
        (uint64_t)sb.st_size == d->size + arrays_bytes(&d->h))
        return f;
    if (f) fclose(f);
    return NULL;
}

/* The newest checkpoint in run_dir of a step below `below` whose state.bin is whole, its name into
 * name (size bytes): its step, or -1 when there is none. A step directory is renamed into place only
 * once complete, so this passes over only what was damaged afterwards; loading checks the rest. */
static int newest_whole_checkpoint(const char *run_dir, int below, char *name, size_t size) {
    char path[FGPT_PATH_LEN];
    DiskHeader h;
    for (int step = newest_checkpoint(run_dir, below); step >= 0; step = newest_checkpoint(run_dir, step)) {
        FILE *f = path_format(path, "%s/step_%08d/state.bin", run_dir, step) == 0 ? open_whole_state(path, "rb", &h)
                                                                                  : NULL;
        if (!f) continue;
        fclose(f);
        snprintf(name, size, "step_%08d", step);
        return step;
    }
    return -1;
}

int checkpoint_set_aside_after(const char *run_dir, int step, int damaged, char *moved_to, size_t size,
                               int *resumable, char *err) {
    char dest[FGPT_PATH_LEN], latest[FGPT_PATH_LEN], name[64];
    *resumable = 0;
    int moved = move_aside(run_dir, is_checkpoint_after, step, dest, err);
    if (moved <= 0) return moved;
    snprintf(moved_to, size, "%s", dest);
    /* the set-aside future resumes from its newest whole checkpoint, as an earlier run does; a
     * latest naming a damaged one would only fail there */
    int newest = newest_whole_checkpoint(dest, INT_MAX, name, sizeof name);
    if (newest >= 0 && newest == damaged) newest = newest_whole_checkpoint(dest, newest, name, sizeof name);
    if (newest < 0) return moved;
    FILE *f = path_format(latest, "%s/latest", dest) == 0 ? create_new_file(latest) : NULL;
    const int written = f && fprintf(f, "%s\n", name) >= 0;
    if (!f || !close_synced(f) || !written || !sync_dir(dest)) {
        snprintf(err, ERR_LEN, "cannot write %s/latest: %s", dest, strerror(errno));
        return -1;
    }
    *resumable = 1;
    return moved;
}

int checkpoint_newest_step(const char *run_dir) {
    return newest_checkpoint(run_dir, INT_MAX);
}

#define OLDER_CHECKPOINT_HINT \
    "to resume from an older checkpoint, write its directory name (step_NNNNNNNN) into the run's latest file"

#define CHECK_FIELD(field, what, ours, flag)                                                             \
    if ((h.field) != (ours)) {                                                                           \
        snprintf(err, ERR_LEN, "checkpoint %s has " what " %d but this run has %d (pass %s %d, or start a "  \
                 "new run with another -o)", path, (int)(h.field), (int)(ours), flag, (int)(h.field));      \
        goto disagrees;                                                                                  \
    }

/* Reads the arrays of a state file of header d from fd into params, m, v, as fp32 (bf16 ones widened).
 * 1, or 0 with errno set. */
static int read_arrays(int fd, const DiskHeader *d, float *params, float *m, float *v) {
    float *const arrays[3] = {params, m, v};
    off_t at = (off_t)d->size;
    for (int a = 0; a < 3; a++) {
        const size_t count = (size_t)d->h.total_params;
        const int ok = d->h.bf16_arrays >> a & 1 ? read_widened_on_every_core(fd, arrays[a], count, at, 1)
                                                 : read_on_every_core(fd, arrays[a], count * sizeof(float), at);
        if (!ok) return 0;
        at += (off_t)array_bytes(&d->h, a);
    }
    return 1;
}

/* What reading a state file's three arrays found (read_state_arrays). */
typedef enum { STATE_WHOLE, STATE_DAMAGED, STATE_WRONG_SIZE, STATE_UNREADABLE, STATE_TOO_LARGE } StateRead;

/* Reads the arrays of state file f (header d, read; f at its arrays) into the caller's buffers of cap
 * values each and checks them against the checksum. A header that disagrees with the run is so also
 * told apart from one damaged on disk, whose fields would ask for flags that fix nothing. */
static StateRead read_state_arrays(FILE *f, const DiskHeader *d, float *params, float *m, float *v, size_t cap) {
    struct stat sb;
    const uint64_t count = d->h.total_params;
    if (count > cap) return STATE_TOO_LARGE;
    const size_t n = (size_t)count * sizeof(float);
    if (fstat(fileno(f), &sb) != 0 || (uint64_t)sb.st_size != d->size + arrays_bytes(&d->h)) return STATE_WRONG_SIZE;
    if (!read_arrays(fileno(f), d, params, m, v)) return STATE_UNREADABLE;
    return state_checksum(d->raw, d->size, params, m, v, n) == d->h.checksum ? STATE_WHOLE : STATE_DAMAGED;
}

/* The model's shape differs: the flags that give the checkpoint's, its preset when it has one. */
static void model_shape_mismatch(char *err, const char *path, const StateHeader *h, const GPTConfig *ours) {
    const GPTPreset *p = gpt_presets;
    while (p->name && !(p->num_layers == h->num_layers && p->num_heads == h->num_heads && p->dim == h->dim)) p++;
    char fix[160];
    int k = p->name ? snprintf(fix, sizeof fix, "-e %s, or ", p->name) : 0;
    snprintf(fix + k, sizeof fix - k, "--layers %d --heads %d --dim %d", h->num_layers, h->num_heads, h->dim);
    snprintf(err, ERR_LEN, "checkpoint %s is a model of %d layers, %d heads and width %d but this run's is %d, %d and %d "
             "(pass %s; or start a new run with another -o)", path, h->num_layers, h->num_heads, h->dim,
             ours->num_layers, ours->num_heads, ours->dim, fix);
}

/* A trainer never saves a NaN or an Inf (the step that makes one stops the run before its checkpoint),
 * so one in a state file whose checksum holds was put there by a tool: named with its tensor, rather
 * than found as a diverged loss a step later. -1 after the message, else 0. */
static int first_non_finite(const ParamTable *t, const float *params, const float *m, const float *v, const char *path,
                            char *err) {
    const float *arrays[3] = {params, m, v};
    static const char *const what[3] = {"weight", "first moment (AdamW's m)", "second moment (AdamW's v)"};
    for (int a = 0; a < 3; a++) {
        const float *x = arrays[a];
        int bad = 0;
#pragma omp parallel for reduction(| : bad)
        for (size_t i = 0; i < t->total; i++) bad |= !isfinite(x[i]);
        if (!bad) continue;
        for (int k = 0; k < t->count; k++) {
            const ParamInfo *p = &t->params[k];
            for (size_t i = p->offset; i < p->offset + p->numel; i++) {
                if (isfinite(x[i])) continue;
                snprintf(err, ERR_LEN, "%s holds a %s of %s that is %g, which training never saves (a state file "
                         "edited and resealed?); %s", path, what[a], p->name, (double)x[i], OLDER_CHECKPOINT_HINT);
                return -1;
            }
        }
        snprintf(err, ERR_LEN, "%s holds a %s that is not finite, which training never saves; %s", path, what[a],
                 OLDER_CHECKPOINT_HINT);
        return -1;
    }
    return 0;
}

int checkpoint_latest_name(const char *run_dir, char *name, size_t size, char *err) {
    char latest[FGPT_PATH_LEN], why[ERR_LEN] = "";
    FILE *lf = path_format(latest, "%s/latest", run_dir) == 0 ? open_regular(latest, why) : NULL;
    if (!lf && why[0]) { /* a FIFO, a device: named, never waited on */
        snprintf(err, ERR_LEN, "%s", why);
        return -1;
    }
    if (!lf) {
        const int e = errno, missing = e == ENOENT; /* the search below opens files of its own */
        struct stat ds, ls;
        /* there but unreadable (a folder that can be searched holds it): what it names is not known */
        if (!missing && stat(run_dir, &ds) == 0 && S_ISDIR(ds.st_mode) && lstat(latest, &ls) == 0) {
            snprintf(err, ERR_LEN, "cannot read %s: %s (make it readable, or remove it and the newest whole "
                     "checkpoint there is taken)", latest, strerror(e));
            return -1;
        }
        if (missing && newest_whole_checkpoint(run_dir, INT_MAX, name, size) >= 0) return 1;
        if (missing && newest_checkpoint(run_dir, INT_MAX) >= 0)
            snprintf(err, ERR_LEN, "no checkpoint to resume in %s: %s is missing and every step_* checkpoint there is "
                     "incomplete or damaged (start a new run with another -o, or --init-from one's weights)", run_dir,
                     latest);
        else {
            char cut[256];
            unfinished_checkpoint(run_dir, cut, sizeof cut);
            if (missing && cut[0])
                snprintf(err, ERR_LEN, "no checkpoint to resume in %s: %s is a checkpoint whose write was cut off (the "
                         "run ended during its first save) and holds nothing to resume; drop -y to start anew (the "
                         "earlier run's files move aside)", run_dir, cut);
            else
                snprintf(err, ERR_LEN, "no checkpoint to resume in %s (%s missing; drop -y or check -o)", run_dir,
                         latest);
        }
        return -1;
    }
    char buf[256] = {0};
    int word_at = 0, word_end = 0;
    int got = fscanf(lf, " %n%255s%n", &word_at, buf, &word_end);
    /* a NUL inside the name ends the string early: the count of bytes read says so */
    const int cut_by_nul = got == 1 && strlen(buf) != (size_t)(word_end - word_at);
    const int after = fgetc(lf); /* a name longer than the buffer must not pass cut short */
    /* and nothing but white space after it: "step_00000006 step_00000004" names no one checkpoint */
    int rest = after;
    while (rest != EOF && isspace(rest)) rest = fgetc(lf);
    fclose(lf);
    /* a name written by hand may end in the slash a shell's completion adds */
    for (size_t k = strlen(buf); k > 5 && buf[k - 1] == '/'; k--) buf[k - 1] = 0;
    if (got != 1 || (after != EOF && !isspace(after)) || rest != EOF || strncmp(buf, "step_", 5) != 0 || strchr(buf, '/') ||
        strlen(buf) >= size || cut_by_nul) {
        snprintf(err, ERR_LEN, "%s is corrupt (expected a name like step_00000100): write the name of a checkpoint "
                 "there into it, or remove it and the newest whole checkpoint there is taken", latest);
        return -1;
    }
    memcpy(name, buf, strlen(buf) + 1);
    return 0;
}

/* Loads checkpoint <run_dir>/<name> (see checkpoint_load_latest). */
static int load_checkpoint(const char *run_dir, const char *name, const ParamTable *t, float *params, float *m,
                           float *v, TrainState *st, char *err) {
    char path[FGPT_PATH_LEN], why[ERR_LEN] = "";
    FILE *f = path_format(path, "%s/%s/state.bin", run_dir, name) == 0 ? open_regular(path, why) : NULL;
    if (!f && errno == EISDIR) {
        snprintf(err, ERR_LEN, "%s is a folder, not a state file; %s", path, OLDER_CHECKPOINT_HINT);
        return -1;
    }
    if (!f && why[0]) {
        snprintf(err, ERR_LEN, "%s; %s", why, OLDER_CHECKPOINT_HINT);
        return -1;
    }
    char dir[FGPT_PATH_LEN];
    struct stat sb;
    if (!f && errno == ENOENT && path_format(dir, "%s/%s", run_dir, name) == 0 && stat(dir, &sb) != 0) {
        const int newest = newest_whole_checkpoint(run_dir, INT_MAX, NULL, 0);
        if (newest >= 0)
            snprintf(err, ERR_LEN, "%s/latest names %s, which is not in %s: write the name of a checkpoint there "
                     "into it (step_%08d is the newest whole one), or remove it and that one is taken", run_dir, name,
                     run_dir, newest);
        else
            snprintf(err, ERR_LEN, "%s/latest names %s, which is not in %s, and no whole checkpoint is there", run_dir,
                     name, run_dir);
        return -1;
    }
    if (!f) {
        const int e = errno;
        snprintf(err, ERR_LEN, "cannot open %s: %s (%s); %s", path, strerror(e),
                 e == EACCES || e == EPERM ? "not readable: fix its permissions" : "checkpoint incomplete?",
                 OLDER_CHECKPOINT_HINT);
        return -1;
    }
    DiskHeader d;
    const int got = read_header(f, &d);
    StateHeader h = d.h;
    if (got == -1) {
        snprintf(err, ERR_LEN, "%s is not a fusedgpt state file (corrupt); %s", path, OLDER_CHECKPOINT_HINT);
        fclose(f);
        return -1;
    }
    if (got == -3) {
        snprintf(err, ERR_LEN, "%s is truncated (it ends inside its header); %s", path, OLDER_CHECKPOINT_HINT);
        fclose(f);
        return -1;
    }
    if (got == -2) {
        snprintf(err, ERR_LEN, "%s is a state file of version %u, this fusedgpt reads versions %u to %u: resume it "
                 "with the fusedgpt that wrote it, or start a new run with another -o", path, h.version,
                 STATE_VERSION_V4, STATE_VERSION);
        fclose(f);
        return -1;
    }
    if (h.family.family != (int32_t)t->cfg.family) {
        snprintf(err, ERR_LEN, "checkpoint %s is a %s model but this run's is %s (pass --family %s, or the --init-from "
                 "it started from; or start a new run with another -o)", path, gpt_family_name(h.family.family),
                 gpt_family_name(t->cfg.family), gpt_family_name(h.family.family));
        goto disagrees;
    }
    if (h.num_layers != t->cfg.num_layers || h.num_heads != t->cfg.num_heads || h.dim != t->cfg.dim) {
        model_shape_mismatch(err, path, &h, &t->cfg);
        goto disagrees;
    }
    CHECK_FIELD(family.num_kv_heads, "kv heads", t->cfg.num_kv_heads, "--kv-heads");
    CHECK_FIELD(family.head_dim, "head dim", t->cfg.head_dim, "--head-dim");
    CHECK_FIELD(family.ffn_dim, "ffn dim", t->cfg.ffn_dim, "--ffn-dim");
    const StateFamily ours = family_block(&t->cfg);
    CHECK_FIELD(family.sliding_window, "sliding window", ours.sliding_window, "--sliding-window");
    if (h.version < STATE_VERSION_V6) h.family.logit_softcap = ours.logit_softcap; /* not recorded before 6 */
    if (h.family.logit_softcap != ours.logit_softcap) {
        snprintf(err, ERR_LEN, "checkpoint %s has logit softcap %g but this run has %g (pass --logit-softcap %g, or the "
                 "--init-from it started from; or start a new run with another -o)", path, (double)h.family.logit_softcap,
                 (double)ours.logit_softcap, (double)h.family.logit_softcap);
        goto disagrees;
    }
    if (h.family.untied_head != ours.untied_head) {
        snprintf(err, ERR_LEN, "checkpoint %s has %s output head but this run's is %s (%s, or the --init-from it started "
                 "from; or start a new run with another -o)", path, h.family.untied_head ? "an untied" : "a tied",
                 ours.untied_head ? "untied" : "tied", h.family.untied_head ? "pass --untied-head" : "leave out --untied-head");
        goto disagrees;
    }
    if (memcmp(&ours, &h.family, sizeof ours) != 0) { /* what no shape flag sets: config.json's switches */
        snprintf(err, ERR_LEN, "checkpoint %s has other norm, RoPE, bias, head-tying or sliding-window settings than "
                 "this run's model (pass the --init-from or --family it started with, or start a new run with another -o)", path);
        goto disagrees;
    }
    CHECK_FIELD(max_seq_len, "max_seq_len", t->cfg.max_seq_len, "--max-seq-len");
    CHECK_FIELD(vocab_size, "vocab_size", t->cfg.vocab_size, "-v");
    /* no flag sets it: it follows from -v, and it decides where every tensor after wte lies */
    if (h.padded_vocab_size != t->cfg.padded_vocab_size) {
        snprintf(err, ERR_LEN, "checkpoint %s pads its vocabulary of %d to %d rows but this model pads it to %d (a "
                 "state file of another build, or corrupt; start a new run with another -o)", path, (int)h.vocab_size,
                 (int)h.padded_vocab_size, t->cfg.padded_vocab_size);
        goto disagrees;
    }
    const StateRead got_arrays =
        h.total_params == t->total ? read_state_arrays(f, &d, params, m, v, t->total) : STATE_WRONG_SIZE;
    StateHeader as_ours = d.h; /* this model's arrays, stored as the file says */
    as_ours.total_params = t->total;
    if (got_arrays == STATE_WRONG_SIZE)
        snprintf(err, ERR_LEN, "%s is truncated or corrupt (expected %llu bytes); %s", path,
                 (unsigned long long)(d.size + arrays_bytes(&as_ours)), OLDER_CHECKPOINT_HINT);
    else if (got_arrays == STATE_UNREADABLE)
        snprintf(err, ERR_LEN, "read error in %s: %s", path, strerror(errno));
    else if (got_arrays == STATE_DAMAGED)
        snprintf(err, ERR_LEN, "%s does not match its checksum (corrupt on disk); %s", path, OLDER_CHECKPOINT_HINT);
    fclose(f);
    if (got_arrays != STATE_WHOLE || first_non_finite(t, params, m, v, path, err) != 0) return -1;
    int named_step;
    char tail;
    if (sscanf(name, "step_%d%c", &named_step, &tail) != 1 || named_step != h.step || h.step < 0) {
        snprintf(err, ERR_LEN, "%s says step %d but its directory is %s (a checkpoint moved by hand?); %s", path, h.step,
                 name, OLDER_CHECKPOINT_HINT);
        return -1;
    }
    /* values no run writes, in a file whose checksum holds: edited and resealed by hand (the schedule
     * would overflow its arithmetic; a batch of 0, which tests write, is named by the resume) */
    if (h.total_steps < 0 || h.warmup < 0 || h.decay_steps < 0 || h.lr_shape < LR_COSINE || h.lr_shape > LR_WSD ||
        h.world > 1u << 20) {
        snprintf(err, ERR_LEN, "%s holds a schedule or rank count no run writes (-x %d --warmup %d, shape %d, "
                 "--decay-steps %d, %u ranks; a state file edited and resealed?); %s", path, (int)h.total_steps,
                 (int)h.warmup, (int)h.lr_shape, (int)h.decay_steps, (unsigned)h.world, OLDER_CHECKPOINT_HINT);
        return -1;
    }
    st->step = h.step;
    st->B = h.B;
    st->T = h.T;
    st->total_batch = h.total_batch;
    st->world = h.world ? (int)h.world : 1;
    st->seed = h.seed;
    st->loader_epoch = h.loader_epoch;
    st->loader_position = h.loader_position;
    memcpy(st->rng, h.rng, sizeof st->rng);
    st->data_tokens = h.data_tokens;
    st->data_fingerprint = h.data_fingerprint;
    st->val_tokens = h.val_tokens;
    st->val_fingerprint = h.val_fingerprint;
    st->schedule = (LrSchedule){.shape = (LrShape)h.lr_shape, .total_steps = h.total_steps, .warmup = h.warmup,
                                .decay_steps = h.decay_steps, .lr = h.lr, .lr_final = h.lr_final};
    st->settings = (TrainSettings){.recorded = h.settings.recorded != 0, .bf16_state = h.settings.bf16_state != 0,
                                   .weight_decay = h.settings.weight_decay, .grad_clip = h.settings.grad_clip,
                                   .z_loss = h.settings.z_loss, .label_smoothing = h.settings.label_smoothing};
    st->checksum = h.checksum;
    return 0;
disagrees:;
    const StateRead found = read_state_arrays(f, &d, params, m, v, t->total);
    if (found != STATE_WHOLE && found != STATE_TOO_LARGE)
        snprintf(err, ERR_LEN, "%s does not match its checksum (corrupt on disk); %s", path, OLDER_CHECKPOINT_HINT);
    fclose(f);
    return -1;
}

int checkpoint_load_latest(const char *run_dir, const ParamTable *t, float *params, float *m, float *v,
                           TrainState *st, char *err) {
    char name[256], first_err[ERR_LEN] = "";
    int found = checkpoint_latest_name(run_dir, name, sizeof name, err);
    st->passed_over_step = -1;
    st->passed_over_why[0] = 0;
    if (found <= 0) return found < 0 ? -1 : load_checkpoint(run_dir, name, t, params, m, v, st, err);
    /* latest is missing: the newest checkpoint that loads whole; when none does, the newest one's error */
    const int newest = checkpoint_dir_step(name);
    for (int step = newest; step >= 0; step = newest_whole_checkpoint(run_dir, step, name, sizeof name))
        if (load_checkpoint(run_dir, name, t, params, m, v, st, first_err[0] ? err : first_err) == 0) {
            if (step != newest) {
                st->passed_over_step = newest;
                snprintf(st->passed_over_why, sizeof st->passed_over_why, "%s", first_err);
            } else {
                st->passed_over_step = -1;
                st->passed_over_why[0] = 0;
            }
            return 0;
        }
    snprintf(err, ERR_LEN, "%s", first_err);
    return -1;
}

int checkpoint_state_reseal(const char *path, char *err) {
    DiskHeader d;
    FILE *f = open_whole_state(path, "r+b", &d);
    if (!f) {
        snprintf(err, ERR_LEN, "%s is not a complete fusedgpt state file of a version from %u to %u", path,
                 STATE_VERSION_V4, STATE_VERSION);
        return -1;
    }
    const size_t total = d.h.total_params, n = total * sizeof(float);
    float *x = malloc(3 * n);
    int ok = x && read_arrays(fileno(f), &d, x, x + total, x + 2 * total);
    if (ok) {
        const uint64_t c = state_checksum(d.raw, d.size, x, x + total, x + 2 * total, n);
        ok = fseek(f, (long)(d.size - sizeof c), SEEK_SET) == 0 && write_all(f, &c, sizeof c);
    }
    free(x);
    if (!close_synced(f) || !ok) {
        snprintf(err, ERR_LEN, "cannot reseal %s: %s", path, strerror(errno));
        return -1;
    }
    return 0;
}

int checkpoint_is_run_dir(const char *dir, char *path) {
    char latest[FGPT_PATH_LEN], name[256], why[ERR_LEN];
    struct stat st;
    if (path_format(latest, "%s/latest", dir) != 0 || stat(latest, &st) != 0 || !S_ISREG(st.st_mode)) return 0;
    if (checkpoint_latest_name(dir, name, sizeof name, why) < 0) snprintf(name, sizeof name, "step_NNNNNNNN");
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/') n--; /* a completion's slash: one between the two names */
    if (path_format(path, "%.*s/%s", (int)n, dir, name) != 0) path_format(path, "%s", dir);
    return 1;
}

int checkpoint_is_checkpoint_dir(const char *dir) {
    char config[FGPT_PATH_LEN], weights[FGPT_PATH_LEN], index[FGPT_PATH_LEN];
    struct stat st;
    return path_format(config, "%s/config.json", dir) == 0 && stat(config, &st) == 0 &&
           path_format(weights, "%s/model.safetensors", dir) == 0 &&
           path_format(index, "%s/model.safetensors.index.json", dir) == 0 &&
           (stat(weights, &st) == 0 || stat(index, &st) == 0);
}

int checkpoint_dir_to_read(const char *run_dir, int step, const char *hf_dir, const char *hf_flag, char *dir,
                           char *err) {
    char name[256], why[ERR_LEN];
    struct stat st;
    if (hf_dir) {
        path_format(dir, "%s", hf_dir);
    } else if (step >= 0) {
        path_format(dir, "%s/step_%08d", run_dir, step);
        if (stat(dir, &st) != 0) {
            snprintf(err, ERR_LEN, "run %s has no checkpoint of step %d (%s missing; see its step_* directories)",
                     run_dir, step, dir);
            return -1;
        }
    } else if (checkpoint_latest_name(run_dir, name, sizeof name, why) < 0) {
        /* the loader's words are a resume's; a command that reads a checkpoint has other ways out */
        char latest[FGPT_PATH_LEN];
        path_format(latest, "%s/latest", run_dir);
        if (stat(run_dir, &st) != 0 || !S_ISDIR(st.st_mode))
            snprintf(err, ERR_LEN, "no run directory %s (pass -o with the directory a training run wrote, or %s DIR "
                                   "for a Hugging Face one)", run_dir, hf_flag);
        else if (stat(latest, &st) != 0)
            snprintf(err, ERR_LEN, "%s holds no checkpoint (%s missing; pass -o with the directory a training run "
                                   "wrote, or %s DIR for a Hugging Face one)", run_dir, latest, hf_flag);
        else
            snprintf(err, ERR_LEN, "%s", why);
        return -1;
    } else {
        path_format(dir, "%s/%s", run_dir, name);
    }
    /* the weights are one file, or shards that an index lists (hf_read_weights checks those) */
    static const char *const files[] = {"config.json", "model.safetensors"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char path[FGPT_PATH_LEN], index[FGPT_PATH_LEN];
        if (path_format(path, "%s/%s", dir, files[i]) == 0 && stat(path, &st) == 0) continue;
        if (i == 1 && path_format(index, "%s/model.safetensors.index.json", dir) == 0 && stat(index, &st) == 0) continue;
        char latest[FGPT_PATH_LEN];
        if (hf_dir && checkpoint_is_run_dir(dir, latest)) /* where one of its checkpoints was meant */
            snprintf(err, ERR_LEN, "%s %s is a training run's directory, not a checkpoint: pass %s %s, its latest "
                                   "(or -o %s)", hf_flag, dir, hf_flag, latest, dir);
        else if (hf_dir && stat(dir, &st) != 0)
            snprintf(err, ERR_LEN, "%s %s: %s (pass a Hugging Face checkpoint directory: config.json and "
                                   "model.safetensors, or its shards and model.safetensors.index.json)", hf_flag, dir,
                     strerror(errno));
        else if (hf_dir)
            snprintf(err, ERR_LEN, "%s %s has no %s (pass a Hugging Face checkpoint directory: config.json and "
                                   "model.safetensors, or its shards and model.safetensors.index.json)", hf_flag, dir,
                     files[i]);
        else
            snprintf(err, ERR_LEN, "checkpoint %s has no %s (it is incomplete; pass --step with another of the run's "
                                   "step_* directories)", dir, files[i]);
        return -1;
    }
    return 0;
}
