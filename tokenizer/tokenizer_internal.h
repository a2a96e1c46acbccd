/* tokenizer/tokenizer_internal.h - what the tokenizer's own files share: the Tokenizer struct, a
 * hash map from token pairs to ids, a hash map from byte strings to values, and the helpers that
 * cut a text into pieces for threads. Nothing outside tokenizer/ (tests aside) includes this. */
#ifndef FUSEDGPT_TOKENIZER_INTERNAL_H
#define FUSEDGPT_TOKENIZER_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "tokenizer/tokenizer.h"

/* Writes a one-line message into err (TOKENIZER_ERR_LEN bytes), truncating if it must. */
void tok_error(char *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- pair map: (left, right) -> uint32 value, open addressing, linear probing ---- */
#define PAIR_MAP_EMPTY UINT64_MAX

typedef struct {
    uint64_t *keys;   /* (left << 32) | right, PAIR_MAP_EMPTY when free */
    uint32_t *values;
    size_t mask;      /* capacity - 1 (capacity a power of two) */
    size_t count;
} PairMap;

static inline uint64_t pair_key(uint32_t left, uint32_t right) {
    return ((uint64_t)left << 32) | right;
}

static inline size_t pair_hash(uint64_t key) {
    key ^= key >> 29;
    key *= 0xbf58476d1ce4e5b9ull;
    key ^= key >> 32;
    return (size_t)key;
}

int pair_map_init(PairMap *m, size_t expected);
void pair_map_free(PairMap *m);
/* Value stored for key, or UINT32_MAX when absent. */
static inline uint32_t pair_map_get(const PairMap *m, uint64_t key) {
    size_t i = pair_hash(key) & m->mask;
    for (;;) {
        uint64_t k = m->keys[i];
        if (k == key) return m->values[i];
        if (k == PAIR_MAP_EMPTY) return UINT32_MAX;
        i = (i + 1) & m->mask;
    }
}
/* Slot of key, inserting it with value `fresh` when absent (*inserted = 1). -1 on out of memory. */
int64_t pair_map_upsert(PairMap *m, uint64_t key, uint32_t fresh, int *inserted);

/* ---- bytes map: byte string -> uint64 value; keys are copied into an arena ---- */
typedef struct {
    uint64_t hash;
    uint64_t key_off; /* into arena */
    uint32_t key_len;
    uint32_t used;
    uint64_t value;
} BytesSlot;

typedef struct {
    BytesSlot *slots;
    size_t mask, count;
    uint8_t *arena;
    size_t arena_len, arena_cap;
} BytesMap;

uint64_t bytes_hash(const uint8_t *s, size_t n);
int bytes_map_init(BytesMap *m, size_t expected);
void bytes_map_free(BytesMap *m);
void bytes_map_clear(BytesMap *m);
/* Slot for the key (hash h = bytes_hash(s, n)), inserted with value 0 when absent; NULL on out of
 * memory. The pointer stays valid until the next insert. */
BytesSlot *bytes_map_upsert(BytesMap *m, const uint8_t *s, size_t n, uint64_t h, int *inserted);
/* NULL when absent. */
BytesSlot *bytes_map_find(const BytesMap *m, const uint8_t *s, size_t n, uint64_t h);

/* ---- the tokenizer ---- */
struct Tokenizer {
    uint32_t n_merges;
    uint32_t vocab_size;  /* 256 + n_merges + 1 */
    uint32_t eot;         /* 256 + n_merges */
    uint32_t *merges;     /* 2 * n_merges: the pair that makes token 256 + i */
    uint64_t *tok_off;    /* vocab_size + 1 offsets into tok_bytes (EOT included, as its text) */
    uint8_t *tok_bytes;
    PairMap merge_map;    /* (left, right) -> merged token id, for encoding */
};

/* Builds a tokenizer from its merges (copied); checks that each merge uses only earlier tokens and
 * that no pair repeats. NULL + message on error. */
Tokenizer *tokenizer_from_merges(const uint32_t *merges, uint32_t n_merges, char *err);

/* ---- cutting a text for threads ---- */
/* Splits [0, len) into at most `parts` pieces at positions where the pre-tokenizer is certain to
 * start a chunk (after a '\n' followed by printable ASCII), so chunking each piece alone gives the
 * chunks of the whole. cuts[0] = 0, cuts[k] = len; returns k, the number of pieces. */
int tokenizer_cut_text(const char *text, size_t len, int parts, size_t *cuts);
int tokenizer_default_threads(void);

/* Encoding with a cache of chunk -> tokens that one thread owns. */
typedef struct EncodeCtx EncodeCtx;
EncodeCtx *encode_ctx_new(const Tokenizer *t);
void encode_ctx_free(EncodeCtx *c);
size_t encode_with_ctx(EncodeCtx *c, const uint8_t *text, size_t len, int allow_special, uint32_t *out,
                       size_t cap);
/* BPE of one chunk without the cache, by either algorithm (tests check they agree):
 * quadratic = 1 rescans the pairs after each merge (fast for short chunks), 0 uses a heap. */
size_t bpe_chunk(const Tokenizer *t, const uint8_t *s, size_t n, uint32_t *out, int quadratic);

#endif
