/* data/shard.h - token shards: the on-disk format, its writer and its validating reader.
 *
 * Layout (little-endian), 64-byte header then the tokens:
 *   0  char[8]  magic "FGPTTOK1"
 *   8  uint32   format version: 2, or 3 for a shard with flags (1 is still read: it has no fingerprint)
 *   12 uint32   bytes per token: 2 (vocabulary <= 65536) or 4
 *   16 uint32   vocabulary size the tokens were produced with
 *   20 uint32   flags (version 3; reserved, 0, before it): SHARD_LOSS_MASK, SHARD_DOCUMENTS
 *   24 uint64   token count
 *   32 uint64   the tokenizer's fingerprint (tokenizer_fingerprint; 0: not recorded)
 *   40 ..63     reserved (0)
 *   64 tokens   uint16 or uint32 each
 * The reader also takes llm.c's .bin files as they are: a 256 x int32 header (magic, version, token
 * count, then zeros) and the tokens; GPT-2 files (magic 20240520, version 1) hold uint16 tokens,
 * Llama 3 files (magic 20240801, version 7) uint32 tokens. The same checks apply to them, but for
 * two that need what only our header records: its reserved bytes must be 0, and every token must be
 * below its vocabulary (as well as below the model's, the one bound of an llm.c file's tokens).
 * All functions return 0 on success; on failure they return -1 and write one line naming the
 * problem and the fix into err (ERR_LEN bytes). */
#ifndef FUSEDGPT_SHARD_H
#define FUSEDGPT_SHARD_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "common/err.h"

/* The largest vocabulary a model takes (./train -v): a shard's fix-it hints never suggest more. Every
 * id is below it, which leaves a 4-byte token's two top bits for the marks below. */
#define FGPT_MAX_VOCAB 1073741824u
/* Formats one error line into err (ERR_LEN bytes), the data layer's error convention. */
void fgpt_set_err(char *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#define SHARD_MAGIC "FGPTTOK1"
#define SHARD_VERSION 2u
#define SHARD_VERSION_FLAGS 3u
/* Flag: the shard marks tokens that are no target (a fine-tuning prompt's): such a token keeps its
 * id in the low bits and SHARD_NO_LOSS on top. Predicting it costs nothing and teaches nothing; it is
 * still an input. Only in 4-byte tokens (ids stay below 2^30: FGPT_MAX_VOCAB). */
#define SHARD_LOSS_MASK 1u
#define SHARD_NO_LOSS 0x80000000u
/* Flag: the shard marks the first token of each document (a fine-tuning example) with
 * SHARD_DOC_START. Training packs documents end to end into windows and runs each as if alone: its
 * tokens attend only to each other and take positions from its first token on (data/loader.h). Only in
 * 4-byte tokens. */
#define SHARD_DOCUMENTS 2u
#define SHARD_DOC_START 0x40000000u
#define SHARD_KNOWN_FLAGS (SHARD_LOSS_MASK | SHARD_DOCUMENTS)
#define SHARD_HEADER_BYTES 64
#define LLMC_HEADER_BYTES 1024
#define LLMC_MAGIC_GPT2 20240520
#define LLMC_VERSION_GPT2 1
#define LLMC_MAGIC_LLAMA3 20240801
#define LLMC_VERSION_LLAMA3 7
/* llm.c's headers record no vocabulary; these are the tokenizers its scripts use for each magic. */
#define LLMC_VOCAB_GPT2 50257u
#define LLMC_VOCAB_LLAMA3 128256u

typedef struct {
    uint32_t version;
    uint32_t bytes_per_token;
    uint32_t vocab_size;
    uint64_t num_tokens;
    uint32_t header_bytes; /* where the tokens start: 64, or 1024 in an llm.c file */
    uint64_t tokenizer;    /* the fingerprint of the tokenizer that made the tokens; 0: not recorded
                            * (version 1, llm.c's files, shards of synthetic tokens) */
    uint32_t flags;        /* SHARD_LOSS_MASK, SHARD_DOCUMENTS, or 0 */
} ShardHeader;

/* A token as a shard stores it: its id (the input it is), the target it is (-1: no loss), and whether
 * a document starts at it. A shard without the flags never holds the marks (its ids are checked below
 * the vocabulary, which is below both). */
static inline uint32_t shard_token_id(uint32_t tok) { return tok & ~(SHARD_NO_LOSS | SHARD_DOC_START); }
static inline int shard_token_target(uint32_t tok) { return tok & SHARD_NO_LOSS ? -1 : (int)shard_token_id(tok); }
static inline int shard_token_starts_document(uint32_t tok) { return (tok & SHARD_DOC_START) != 0; }

/* Streaming writer: tokens go to "<path>.tmp"; close patches the count, flushes and renames, so a
 * crash never leaves a half-written shard under the final name. */
typedef struct ShardWriter ShardWriter;
ShardWriter *shard_writer_open(const char *path, uint32_t vocab_size, uint64_t tokenizer, char *err);
/* The same for a shard with flags (SHARD_LOSS_MASK, SHARD_DOCUMENTS; version 3, 4-byte tokens), whose
 * tokens may carry the marks the flags allow. */
ShardWriter *shard_writer_open_flagged(const char *path, uint32_t vocab_size, uint64_t tokenizer, uint32_t flags,
                                       char *err);
int shard_writer_append(ShardWriter *w, const uint32_t *tokens, size_t n, char *err);
int shard_writer_close(ShardWriter *w, char *err);
/* Drops the temporary file without touching a shard of the same name. */
void shard_writer_abort(ShardWriter *w);

/* Writes a whole shard in one call (tests, small corpora). tokenizer: the fingerprint of the
 * tokenizer that made the tokens, or 0 for tokens that no tokenizer made. */
int shard_write(const char *path, const uint32_t *tokens, uint64_t n, uint32_t vocab_size, uint64_t tokenizer,
                char *err);

/* shard_write for a shard with flags (shard_writer_open_flagged). */
int shard_write_flagged(const char *path, const uint32_t *tokens, uint64_t n, uint32_t vocab_size, uint64_t tokenizer,
                        uint32_t flags, char *err);

/* Reads the header only, validating magic, version, width and the file length. */
int shard_read_header(const char *path, ShardHeader *hdr, char *err);

/* Reads and validates a whole shard; every token's id must be < model_vocab (the model's unpadded
 * vocabulary) and, in our format, < the header's. On success *tokens is malloc'ed (caller frees) and
 * *n holds the count; a flagged shard's tokens keep their marks (shard_token_id, _target, ...). */
int shard_read(const char *path, uint32_t model_vocab, uint32_t **tokens, uint64_t *n, ShardHeader *hdr,
               char *err);

/* What every token of the shard is below: the model's vocabulary, or the smaller one our header
 * records (llm.c's files record none; their tokens stay below the largest vocabulary a model takes). */
uint32_t shard_token_limit(const ShardHeader *hdr, uint32_t model_vocab);

/* What a shard's ids are checked against: the whole stored value less the marks its flags allow. */
static inline uint32_t shard_id_bits(const ShardHeader *hdr) {
    return ~((hdr->flags & SHARD_LOSS_MASK ? SHARD_NO_LOSS : 0u) | (hdr->flags & SHARD_DOCUMENTS ? SHARD_DOC_START : 0u));
}

/* Token i of a shard's tokens as the file stores them, bytes_per_token (2 or 4) bytes each. Inline:
 * the loader calls it for every token of every batch. */
static inline uint32_t shard_token_at(const unsigned char *tokens, uint32_t bytes_per_token, uint64_t i) {
    if (bytes_per_token == 2) {
        uint16_t t16;
        memcpy(&t16, tokens + 2 * i, 2);
        return t16;
    }
    uint32_t t32;
    memcpy(&t32, tokens + 4 * i, 4);
    return t32;
}

/* Decodes count tokens of a shard, the first of them its token number `first`, from src (as the
 * file stores them: hdr->bytes_per_token bytes each) into out, with shard_read's checks (a flagged
 * shard's marks kept). 0, or -1 with the message that names the first bad token, its
 * position and the fix. */
int shard_decode_checked(const ShardHeader *hdr, const char *path, const void *src, uint64_t first, size_t count,
                         uint32_t model_vocab, uint32_t *out, char *err);

/* A shard mapped read-only, its header checked against the file's length: tokens points at the
 * first token as the file stores it. The pages come from the file as they are read, and processes
 * mapping one file share them, so a corpus larger than memory trains. */
typedef struct {
    ShardHeader hdr;
    const unsigned char *tokens;
    void *map;
    size_t map_bytes;
    uint64_t device, inode; /* which file it is, however it was named */
} MappedShard;

int shard_map(const char *path, MappedShard *m, char *err);
void shard_unmap(MappedShard *m);

/* The shards that -i or -j names: the file itself, or, for a glob pattern (* ? [), every file it
 * matches, in the byte order of their paths (the same on every host). */
typedef struct {
    const char **paths;
    size_t n;
    void *glob;        /* the matches' storage, or NULL */
    char *paths_owned; /* the one path's copy, or NULL */
} ShardPaths;

int shard_paths(const char *spec, ShardPaths *out, char *err);
void shard_paths_free(ShardPaths *p);

/* Whether a shard joins a set of shards (one pattern's) that share their tokenizer: the set's first
 * shard (first, at first_path) gives the vocabulary, and the first that records a fingerprint (named,
 * at named_path; NULL while none has) gives the tokenizer. 0, or -1 + a message naming both shards. */
int shard_joins_set(const ShardHeader *h, const char *path, const ShardHeader *first, const char *first_path,
                    const ShardHeader *named, const char *named_path, char *err);

/* 0 when the shard at path records no tokenizer (made_by, its header's fingerprint, is 0) or the
 * one given: the file tok_path of fingerprint `tokenizer`. -1 + a message naming both, then `fix`
 * (what to do: it depends on where the tokenizer came from), when another tokenizer made its tokens. */
int shard_check_tokenizer(const char *path, uint64_t made_by, const char *tok_path, uint64_t tokenizer,
                          const char *fix, char *err);

#endif
