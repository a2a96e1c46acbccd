/* data/pack.h - whole documents packed into windows, best fit decreasing.
 *
 * Cutting a shard into consecutive windows (data/loader.h) cuts every document that crosses a
 * window's end: its second part starts the next window without its beginning (a fine-tuning example
 * without its prompt). Packing instead places whole documents into windows of T + 1 tokens, each
 * into the window with the least room left that still takes it, longest first (best fit
 * decreasing), and pads the rest of a window with tokens that are no input to any document and no
 * target. A document longer than T + 1 tokens is cut into pieces of T + 1 that overlap by one token,
 * as consecutive windows are, and the last piece is packed like a document: every token but a
 * document's first is still a target exactly once. A piece of one token has no target and is left
 * out. Windows never span two shards. */
#ifndef FUSEDGPT_PACK_H
#define FUSEDGPT_PACK_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

/* How a shard's tokens become windows: consecutive windows of T + 1 (documents cut at their ends, as
 * TRL's "wrapped" packing does), or whole documents packed best fit decreasing (TRL's "bfd"). */
typedef enum { PACK_WRAPPED = 0, PACK_BFD = 1 } PackKind;

/* tokens[start, start + len) of the shard: a document, or a piece of one. */
typedef struct {
    uint64_t start;
    uint32_t len;
} PackSpan;

/* A shard's packed windows: window w holds spans[first[w], first[w + 1]) one after another, the
 * longest first, at most T + 1 tokens in all; windows ordered by where their longest span starts. */
typedef struct {
    PackSpan *spans;
    uint64_t *first; /* windows + 1 entries */
    uint64_t windows, num_spans;
    uint64_t tokens; /* in all spans: windows x (T + 1) less the padding */
} PackedWindows;

/* Where a shard's documents start, gathered as its tokens are read. */
typedef struct {
    uint64_t *at;
    size_t count, cap;
} PackStarts;

/* Notes the documents that tokens[0..k) (as shard_read gives them: marks kept; token `at` of the
 * shard first) start. 0, or -1 with a message in err when memory runs out. */
int pack_note_starts(PackStarts *s, const uint32_t *tokens, size_t k, uint64_t at, char *err);
void pack_starts_free(PackStarts *s);

/* Packs the documents of a shard of n tokens whose documents start at starts[0..count) (ascending;
 * tokens before starts[0] are a document too) into windows of T + 1. 0, or -1 with a message in err
 * when memory runs out. */
int pack_documents(const uint64_t *starts, size_t count, uint64_t n, int T, PackedWindows *out, char *err);
void packed_windows_free(PackedWindows *p);
/* pack_documents over the documents that a whole shard's tokens (as shard_read gives them) mark. */
int pack_shard(const uint32_t *tokens, uint64_t n, int T, PackedWindows *out, char *err);

/* Window w's tokens from a shard's tokens (as shard_read gives them) into out (T + 1 entries): its
 * spans one after another, each first token marked as a document's start (a piece of a long
 * document starts its own). The count, at most T + 1; loader_split_window pads the rest. */
int packed_window_tokens(const PackedWindows *p, uint64_t w, const uint32_t *tokens, uint32_t *out);

/* The name of a PackKind as --pack takes it. */
const char *pack_kind_name(PackKind kind);
/* The PackKind a --pack value names: 0, or -1 when it names none. */
int pack_kind_parse(const char *name, PackKind *kind);

#endif
