/* tokenizer/spm.h - SentencePiece-style BPE with byte fallback (Gemma 3, Llama 2, Mistral), as
 * tokenizers' tokenizer.json describes it: the pipeline read from the file (spm_import.c) and run
 * (spm_encode.c), exactly as Hugging Face's tokenizers runs it:
 *
 *   text -> split at added tokens that are not normalized (longest first, leftmost)
 *        -> each piece normalized (Replace, Prepend; NFC checked, never applied)
 *        -> split at added tokens that are normalized (matched in normalized text)
 *        -> pre-tokenizer steps (Metaspace, Split on a literal)
 *        -> the model on each word: characters of the vocabulary, the rest as <0xNN> byte tokens
 *           (or unk), then merges by rank
 *        -> the post-processor's tokens around the text (TemplateProcessing: Gemma's <bos>)
 *
 * Without a pre-tokenizer a whole document is one word. Its merges still run in O(n log n) (the
 * heap of bpe_encode.c), and a word is cut before each "▁" that no merge can join to the character
 * before it (spm_import.c finds those characters from the merges), so ordinary text runs through
 * the short-word cache like a pre-tokenized one. */
#ifndef FUSEDGPT_SPM_H
#define FUSEDGPT_SPM_H

#include "common/json.h"
#include "tokenizer/tokenizer_internal.h"

#define SPM_MAX_STEPS 8
#define SPM_META 0x2581u /* "▁", SentencePiece's space */

/* A literal rewrite (normalizer Replace, decoder Replace) or a normalizer Prepend (from empty). */
typedef struct {
    int prepend;
    char *from, *to;
    size_t from_len, to_len;
} SpmRewrite;

typedef enum { SPM_SPLIT_REMOVED, SPM_SPLIT_ISOLATED, SPM_SPLIT_MERGED_PREVIOUS, SPM_SPLIT_MERGED_NEXT,
               SPM_SPLIT_CONTIGUOUS } SpmBehavior;
enum { SPM_PREPEND_NEVER, SPM_PREPEND_FIRST, SPM_PREPEND_ALWAYS };

typedef struct {
    int metaspace;            /* 1: Metaspace, 0: Split on a literal */
    char *text;               /* Metaspace: the replacement; Split: the pattern */
    size_t text_len;
    int prepend, split;       /* Metaspace */
    SpmBehavior behavior;     /* Split */
    int invert;
} SpmPreStep;

/* Added tokens matched in text through a byte trie: node -> (byte -> child) in a pair map. */
typedef struct {
    PairMap edges;      /* (node, byte) -> child node */
    uint32_t *added;    /* node -> index into Spm.added + 1 where a token ends there, else 0 */
    uint32_t n_nodes, cap_nodes;
    uint8_t first[256]; /* 1: some token starts with this byte */
} SpmTrie;

typedef struct {
    uint32_t id;
    uint8_t special, lstrip, rstrip, single_word;
} SpmAdded;

struct Spm {
    SpmRewrite norm[SPM_MAX_STEPS];
    int n_norm;
    SpmPreStep pre[SPM_MAX_STEPS];
    int n_pre;
    /* the model */
    PairMap char_token;     /* code point -> the token of that one character */
    uint32_t byte_token[256]; /* <0xNN>, UINT32_MAX where the vocabulary lacks it */
    int byte_fallback;
    uint32_t unk;           /* UINT32_MAX: none (an unknown character is dropped, as tokenizers does) */
    int fuse_unk;
    uint32_t meta;          /* the token of "▁", UINT32_MAX when none */
    PairMap joins_meta;     /* code points that some merge joins to a following "▁" */
    /* added tokens */
    SpmAdded *added;
    uint32_t n_added;
    SpmTrie raw, normalized;
    /* cutting a text for threads is safe (spm_cut_text) */
    int can_cut;
    /* the decoder */
    SpmRewrite dec_replace[SPM_MAX_STEPS];
    int n_dec_replace;
    int dec_byte_fallback;
    int dec_metaspace;       /* Metaspace decoder: its replacement becomes a space... */
    int dec_metaspace_first; /* ...and is dropped from the first token */
    uint32_t dec_strip_char;
    int dec_strip_start, dec_strip_stop;
};

/* Reads the SentencePiece-style parts of a tokenizer.json (root) into t->spm, once t's ids, token
 * strings, merges and specials are built (hf_import.c). -1 + message naming the component. */
int spm_import(Tokenizer *t, const JsonValue *root, const uint32_t *added_ids, const char *path, char *err);
void spm_free(Spm *s);
/* 1 when the tokenizer.json (root) is SentencePiece-style: its BPE model has byte_fallback. */
int spm_wanted(const JsonValue *root);

/* s[0..n) through the normalizer (may_prepend = 0: no Prepend, the text goes on from a piece
 * before it). The result lies in one of two buffers that room(ctx, i, size) gives (i = 0, 1);
 * NULL when out of memory. */
typedef uint8_t *(*SpmRoom)(void *ctx, int i, size_t size);
const uint8_t *spm_normalize(const Spm *spm, const uint8_t *s, size_t n, int may_prepend, SpmRoom room, void *ctx,
                             size_t *out_n);
/* Decodes one UTF-8 character at s[*i] (i < n) and moves past it; UINT32_MAX for a byte that is not
 * valid UTF-8 (one byte, then). */
uint32_t spm_next_char(const uint8_t *s, size_t n, size_t *i);

size_t spm_encode(EncodeCtx *c, const uint8_t *text, size_t len, int flags, uint32_t *out, size_t cap);
/* Cuts for threads where encoding the parts alone gives the ids of the whole (see spm_encode.c);
 * returns the number of parts (1 when the tokenizer allows no cut). */
int spm_cut_text(const Tokenizer *t, const char *text, size_t len, int parts, size_t *cuts);
/* 1 when text may be cut before s[i]. */
int spm_is_cut_point(const Spm *spm, const uint8_t *s, size_t len, size_t i);
size_t spm_decode(const Tokenizer *t, const uint32_t *ids, size_t n, char *out, size_t cap);

#endif
