/* tokenizer/tokenizer.h - byte-level BPE: train, encode, decode, save, load.
 *
 * Tokens 0..255 are the bytes, so any byte sequence (invalid UTF-8 included) round-trips. Tokens
 * 256.. are merges, in the order they were learned. The last token is the special document
 * separator "<|endoftext|>" (the EOT token). Before merging, text is split into chunks the way
 * GPT-4's cl100k pattern does (contractions, letter runs, 1-3 digit numbers, punctuation runs,
 * newlines, white space); merges never cross a chunk boundary.
 *
 * tokenizer_load also reads a Hugging Face tokenizer.json of a byte-level BPE (hf_import.c) or of a
 * SentencePiece-style BPE with byte fallback (Gemma 3, Llama 2, Mistral: spm_import.c): its ids,
 * merge ranks, added tokens, normalizer, pre-tokenizer, post-processor and decoder are its own,
 * and everything below works the same on it.
 *
 * Functions that can fail take err (ERR_LEN bytes) and write one line naming the problem
 * and the fix. This module knows nothing else of the project. */
#ifndef FUSEDGPT_TOKENIZER_H
#define FUSEDGPT_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

#define TOKENIZER_EOT_TEXT "<|endoftext|>"
/* 256 byte tokens + the EOT token: the smallest vocabulary there is. */
#define TOKENIZER_MIN_VOCAB 257u
/* The longest a token may be, in bytes. Real byte-level vocabularies stay far below it (their
 * longest tokens are runs of spaces or punctuation, tens of bytes to a hundred-odd), while a
 * merge list that doubles a token 30 times asks for gigabytes: every loader refuses a longer
 * token, and training never makes one (a long repetitive line would otherwise grow tokens as long
 * as the line). It also bounds a file's token bytes to 1 KiB a token. */
#define TOKENIZER_MAX_TOKEN_BYTES 1024u

typedef struct Tokenizer Tokenizer;

/* ---- training ---- */
typedef struct {
    uint32_t vocab_size; /* tokens wanted, EOT included */
    int threads;         /* threads for counting chunks; 0 = all cores */
    int verbose;         /* 1: a progress line on stderr */
} TokenizerTrainOptions;

/* Learns merges from text until the vocabulary has opt->vocab_size tokens, or until no pair occurs
 * twice that would make a token of at most TOKENIZER_MAX_TOKEN_BYTES (then the vocabulary is
 * smaller: check tokenizer_vocab_size). "<|endoftext|>" in the text
 * separates documents and is never merged into. Returns NULL + message on error (empty corpus,
 * vocabulary below TOKENIZER_MIN_VOCAB, out of memory). Deterministic: the same text and options
 * give the same tokenizer, whatever the thread count. */
Tokenizer *tokenizer_train(const char *text, size_t len, const TokenizerTrainOptions *opt, char *err);

/* ---- files ---- */
/* One versioned binary file (see tokenizer/tokenizer_file.c for the layout), written to a
 * temporary name and renamed. Returns 0, or -1 + message. */
int tokenizer_save(const Tokenizer *t, const char *path, char *err);
/* Reads our file, or a Hugging Face tokenizer.json of a byte-level BPE model (told apart by their
 * content; hf_import.c says what of tokenizer.json is honoured and what is refused). NULL +
 * message on error: missing, truncated or corrupt file, unknown version, unsupported tokenizer. */
Tokenizer *tokenizer_load(const char *path, char *err);
void tokenizer_free(Tokenizer *t);
/* Hugging Face's format (hf_export.c). tokenizer.json's text (malloc'ed, *len bytes, NUL after):
 * an imported tokenizer's file as it was, or ours exported; NULL + message when ours has two
 * tokens of the same bytes (the format cannot hold them). */
char *tokenizer_hf_json(const Tokenizer *t, size_t *len, char *err);
/* tokenizer_config.json's text (malloc'ed): the one beside an imported tokenizer.json, else one
 * naming PreTrainedTokenizerFast, the separator as BOS and EOS, and model_max_length. */
char *tokenizer_hf_config_json(const Tokenizer *t, int model_max_length, char *err);
/* 1 when a tokenizer_config.json sat beside the imported tokenizer.json (the one above is then it). */
int tokenizer_has_hf_config(const Tokenizer *t);
/* The chat_template.jinja that sat beside the imported tokenizer.json (*len bytes, NUL after), or
 * NULL: where transformers now saves a chat template, instead of in tokenizer_config.json. */
const char *tokenizer_hf_chat_template(const Tokenizer *t, size_t *len);

/* ---- queries ---- */
uint32_t tokenizer_vocab_size(const Tokenizer *t); /* includes the EOT token */
/* The document separator: ours "<|endoftext|>"; an imported tokenizer's special token of that
 * text, else "<|end_of_text|>", else its first special token. */
uint32_t tokenizer_eot_token(const Tokenizer *t);
/* The token that opens a text: the post-processor's first token before each text (Llama 3's
 * <|begin_of_text|>), else the separator (GPT-2 names its one special token both). */
uint32_t tokenizer_bos_token(const Tokenizer *t);
/* Its text (not NUL-terminated), what `./train prepare` puts between documents. */
const char *tokenizer_eot_text(const Tokenizer *t, size_t *len);
/* The tokens an imported tokenizer's post-processor puts before (after = 0) or after (after = 1)
 * each text encoded with TOKENIZER_SPECIALS, into *ids; returns their count (0 for ours). */
#define TOKENIZER_MAX_AROUND 4
int tokenizer_post_tokens(const Tokenizer *t, int after, const uint32_t **ids);
/* 1 for a tokenizer read from a Hugging Face tokenizer.json. */
int tokenizer_is_imported(const Tokenizer *t);
/* One line a user should see when the tokenizer is first given (a tokenizer.json whose added tokens
 * take other ids than it lists, as tokenizers numbers them), or NULL. */
const char *tokenizer_load_note(const Tokenizer *t);
/* What a tokenizer.json sets that encoding a corpus does not apply ("truncation to 512 tokens",
 * "padding", both), or NULL: documents are tokenized whole, as pretraining wants them. */
const char *tokenizer_unapplied_settings(const Tokenizer *t);
uint32_t tokenizer_num_merges(const Tokenizer *t);
/* Bytes of token id (not NUL-terminated) and their count in *len; NULL if id is out of range. */
const uint8_t *tokenizer_token_bytes(const Tokenizer *t, uint32_t id, size_t *len);
/* A 64-bit fingerprint of what the ids stand for: the vocabulary size and each id's bytes, in id
 * order. Two tokenizers with the same fingerprint decode every id alike (a tokenizer and its
 * tokenizer.json export agree), so a shard records its tokenizer's and the trainer refuses another.
 * Never 0 (a shard's 0 means "not recorded"). */
uint64_t tokenizer_fingerprint(const Tokenizer *t);
/* The pair merged into token id (>= 256, not the EOT token) of one of our tokenizers; -1 otherwise
 * (and for an imported one). */
int tokenizer_merge_pair(const Tokenizer *t, uint32_t id, uint32_t *left, uint32_t *right);

/* ---- encode / decode ---- */
/* What tokenizer_encode's flags ask for (0: plain text, no document structure):
 * TOKENIZER_SPECIALS: special tokens in the text are recognised ("<|endoftext|>" becomes the EOT
 *   token), and an imported tokenizer's post-processor adds its tokens around the text (Llama 3's
 *   <|begin_of_text|>, Gemma's <bos> before it), as Hugging Face's encode(text) does.
 * TOKENIZER_MID_START: the text goes on from text before it (no BOS, no prefix space), as the
 *   second part of a text cut at tokenizer_cut_near does.
 * TOKENIZER_MID_END: the text stops before its end (no end-of-text token).
 * TOKENIZER_DOCUMENTS: with TOKENIZER_SPECIALS, the separator (tokenizer_eot_token) ends a document
 *   and the text after it starts one, as Hugging Face encodes each document alone: a SentencePiece
 *   Metaspace whose prepend_scheme is "first" puts its "▁" at each document's start, not only the
 *   text's (`./train prepare`, whose files are documents).
 * TOKENIZER_NO_POST: with TOKENIZER_SPECIALS, the post-processor adds nothing, as Hugging Face's
 *   encode(text, add_special_tokens=False) does; apply_chat_template tokenizes a rendered chat so,
 *   since the template writes the BOS itself. The text is still whole (a prefix space stays). */
#define TOKENIZER_SPECIALS 1
#define TOKENIZER_MID_START 2
#define TOKENIZER_MID_END 4
#define TOKENIZER_DOCUMENTS 8
#define TOKENIZER_NO_POST 16

/* Encodes len bytes of text into out (capacity cap) on the calling thread. Returns the number of
 * tokens the text needs; only the first cap are written. That number never exceeds len + 1 for
 * ours and for byte-level imports that add at most one token around a text; others can need more
 * (the post-processor's tokens; for a SentencePiece-style one, a prefix space before a one-byte
 * text, three byte tokens for a character outside its vocabulary): call again with a larger out
 * when the count exceeds cap (tokenizer_encode_alloc does). */
size_t tokenizer_encode(const Tokenizer *t, const char *text, size_t len, int flags, uint32_t *out, size_t cap);
/* The same into a malloc'ed array (*n tokens); NULL when out of memory. */
uint32_t *tokenizer_encode_alloc(const Tokenizer *t, const char *text, size_t len, int flags, size_t *n);

/* The same result as tokenizer_encode, computed by `threads` threads (0 = all cores) over pieces of
 * the text cut where a chunk boundary is certain. *out is malloc'ed (caller frees). Returns 0, or
 * -1 + message (out of memory). */
int tokenizer_encode_parallel(const Tokenizer *t, const char *text, size_t len, int flags, int threads,
                              uint32_t **out, size_t *n_out, char *err);

/* The place in [lo, hi] nearest `at` (the later of two as near) where text may be cut so that its
 * two parts, encoded alone (the first with TOKENIZER_MID_END, the second with TOKENIZER_MID_START),
 * give the ids of the whole; len when there is none. */
size_t tokenizer_cut_near(const Tokenizer *t, const char *text, size_t len, size_t at, size_t lo, size_t hi);

/* Writes the bytes of ids[0..n) into out (capacity cap, no terminating NUL) and returns the number
 * of bytes needed, which may exceed cap. The EOT token decodes as "<|endoftext|>"; an id outside the
 * vocabulary decodes as U+FFFD (the replacement character) so a bad id is visible, never a crash.
 * An imported SentencePiece-style tokenizer decodes through its decoder as Hugging Face's
 * decode(ids, skip_special_tokens=False) does ("▁" becomes a space, byte tokens their bytes). */
size_t tokenizer_decode(const Tokenizer *t, const uint32_t *ids, size_t n, char *out, size_t cap);

/* 1 when text is one special token of t: one id with special tokens recognised, and not the same
 * id as plain text (a word of the vocabulary is no end token). */
int tokenizer_is_special_text(const Tokenizer *t, const char *text);

/* 1 when id is one of an imported tokenizer's added tokens (its tokenizer.json's added_tokens,
 * special or not: transformers' get_added_vocab()), or our separator. */
int tokenizer_is_added(const Tokenizer *t, uint32_t id);

/* Where each of ids' tokens starts in text[0..len), which they encode (no post-processor tokens):
 * offsets[i] for ids[i] and offsets[n] = len, as Hugging Face's offsets place them. 0, or -1 with a
 * message when the tokens decoded one by one do not spell the text byte for byte (a normalizer that
 * rewrites it, a space put before it) or the tokenizer trims its offsets (a ByteLevel
 * post-processor's trim_offsets), where these places would not be Hugging Face's. */
int tokenizer_token_offsets(const Tokenizer *t, const uint32_t *ids, size_t n, const char *text, size_t len,
                            size_t *offsets, char *err);

/* 0 when encoding gives what the tokenizer's own pipeline would; -1 with a message naming the
 * byte (counted from `base`: text's place in its file) and code point when an imported
 * tokenizer's NFC normalizer could rewrite the text there (we do not normalize: normalize such
 * text to NFC first). */
int tokenizer_check_text(const Tokenizer *t, const char *text, size_t len, size_t base, char *err);

/* ---- the pre-tokenizer, for tests and tools ---- */
/* Length in bytes of the chunk that starts at text[0] (len > 0): GPT-4 cl100k's split pattern
 *   '(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+
 * A byte that is not part of valid UTF-8 counts as one character of its own, neither letter,
 * number nor space. */
size_t tokenizer_chunk_len(const char *text, size_t len);
/* The same for the other splits an imported tokenizer may use: split "cl100k" (the above, also
 * Llama 3's), "qwen2" (one digit per number) or "gpt2" (GPT-2's ByteLevel pattern
 *   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ ). */
size_t tokenizer_split_len(const char *split, const char *text, size_t len);

#endif
