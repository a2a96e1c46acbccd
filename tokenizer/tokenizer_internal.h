/* tokenizer/tokenizer_internal.h - what the tokenizer's own files share: the Tokenizer struct, a
 * hash map from token pairs to ids, a hash map from byte strings to values, and the helpers that
 * cut a text into pieces for threads. Nothing outside tokenizer/ (tests aside) includes this. */
#ifndef FUSEDGPT_TOKENIZER_INTERNAL_H
#define FUSEDGPT_TOKENIZER_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "common/err.h"
#include "common/json.h"
#include "tokenizer/tokenizer.h"

/* Writes a one-line message into err (ERR_LEN bytes), truncating if it must. */
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
/* How text is cut into chunks before BPE (pretokenize.c). */
typedef enum {
    SPLIT_CL100K, /* GPT-4's cl100k pattern (ours; Llama 3's is the same split) */
    SPLIT_QWEN2,  /* the same with one digit per number chunk instead of up to three */
    SPLIT_GPT2,   /* GPT-2's ByteLevel pattern */
} SplitKind;

size_t split_chunk_len(SplitKind kind, const uint8_t *s, size_t len);

typedef struct Spm Spm;

struct Tokenizer {
    uint32_t n_merges;
    uint32_t vocab_size;  /* ours: 256 + n_merges + 1; imported: the largest id + 1 */
    uint32_t eot;         /* the document separator; ours: 256 + n_merges, the last token */
    uint32_t *merges;     /* 2 * n_merges: the pair of merge i (rank i: lower ranks merge first) */
    uint32_t *merge_result; /* n_merges: the token merge i makes; ours: 256 + i */
    uint64_t *tok_off;    /* vocab_size + 1 offsets into tok_bytes (specials included, as their text) */
    uint8_t *tok_bytes;
    PairMap merge_map;    /* (left, right) -> merge rank, for encoding */
    uint32_t byte_token[256]; /* the token of each single byte; ours: the byte itself */
    SplitKind split;
    /* Specials: texts that become one token wherever they occur (with allow_special), found before
     * the text is split. Ours: "<|endoftext|>" alone. */
    uint32_t n_specials;
    uint32_t *special_ids;
    uint8_t special_first[256]; /* 1: some special starts with this byte */
    int special_has_newline;    /* a cut for threads could fall inside one: encode on one thread */
    /* ignore_merges: a chunk that is itself a token becomes that token without BPE */
    int ignore_merges;
    BytesMap whole_tokens; /* token bytes -> id, when ignore_merges */
    /* imported from a Hugging Face tokenizer.json: the file as it was, for checkpoints */
    char *hf_json;
    size_t hf_json_len;
    char *hf_config; /* the tokenizer_config.json beside it, if any */
    char *hf_chat_template; /* the chat_template.jinja beside it, if any (transformers' newer place for it) */
    size_t hf_chat_template_len;
    char *load_note; /* what a user should know of how the file was read (tokenizer_load_note), or NULL */
    char unapplied[96]; /* its truncation and padding settings, which encoding a corpus leaves out, or "" */
    int nfc;         /* its normalizer is NFC: text must already be NFC (tokenizer_check_text) */
    int trims_offsets; /* a ByteLevel post-processor with trim_offsets: Hugging Face's offsets leave out
                          a token's spaces at its ends */
    /* its post-processor's tokens before and after each encoded text (post_processor.c) */
    uint32_t prefix[TOKENIZER_MAX_AROUND], suffix[TOKENIZER_MAX_AROUND];
    int n_prefix, n_suffix;
    /* a SentencePiece-style (byte-fallback) BPE: its pipeline (spm.h); NULL for byte-level ones.
     * Its tok_bytes hold each token's string as tokenizer.json writes it ("▁the", "<0x0A>"). */
    Spm *spm;
};

/* Builds a tokenizer from its merges (copied); checks that each merge uses only earlier tokens and
 * that no pair repeats. NULL + message on error. */
Tokenizer *tokenizer_from_merges(const uint32_t *merges, uint32_t n_merges, char *err);

/* Recognises the specials of t (special_ids and their token bytes set): fills special_first and
 * special_has_newline. */
void tokenizer_index_specials(Tokenizer *t);

/* Reads a tokenizer.json's post_processor (pp, NULL or null: none) into t's prefix and suffix, once
 * t's vocabulary is known. -1 + message naming what is not supported. */
int read_post_processor(Tokenizer *t, const JsonValue *pp, const char *path, char *err);

/* Hugging Face's ByteLevel alphabet: the code point that stands for each byte in token strings
 * (printable Latin-1 bytes stand for themselves, the rest for U+0100 onwards in byte order). */
void byte_level_alphabet(uint32_t cp_of_byte[256]);

/* A Hugging Face tokenizer.json (text[0..len), named path in messages) as a Tokenizer; the text is
 * kept (hf_json). NULL + message. */
Tokenizer *tokenizer_from_hf_json(const char *text, size_t len, const char *path, char *err);

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
/* flags: TOKENIZER_SPECIALS, TOKENIZER_MID_START, TOKENIZER_MID_END (tokenizer.h). */
size_t encode_with_ctx(EncodeCtx *c, const uint8_t *text, size_t len, int flags, uint32_t *out, size_t cap);
/* BPE of one chunk without the cache, by either algorithm (tests check they agree):
 * quadratic = 1 rescans the pairs after each merge (fast for short chunks), 0 uses a heap. */
size_t bpe_chunk(const Tokenizer *t, const uint8_t *s, size_t n, uint32_t *out, int quadratic);
/* The same on symbols already made (sym[0..n), merged in place): the token count, or SIZE_MAX
 * when out of memory (sym is then unchanged). */
size_t bpe_symbols(const Tokenizer *t, uint32_t *sym, size_t n);
/* The thread's cache of chunk -> tokens: the cached tokens of s[0..n) (hash h) and their count,
 * or NULL; and storing them (silently skipped when there is no room). */
const uint32_t *encode_cache_get(EncodeCtx *c, const uint8_t *s, size_t n, uint64_t h, size_t *k);
void encode_cache_put(EncodeCtx *c, const uint8_t *s, size_t n, uint64_t h, const uint32_t *toks, size_t k);
const Tokenizer *encode_ctx_tokenizer(const EncodeCtx *c);
/* Marks the context as having run out of memory (the caller reports it). */
void encode_ctx_set_oom(EncodeCtx *c);
/* Scratch buffer number i (0..ENCODE_SCRATCH-1) of at least n bytes, owned by the context (NULL when
 * out of memory). */
#define ENCODE_SCRATCH 12
uint8_t *encode_ctx_scratch(EncodeCtx *c, int i, size_t n);

#endif
