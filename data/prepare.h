/* data/prepare.h - text -> tokenizer + train/val shards, and the default corpus.
 *
 * `./train prepare ...` calls prepare_main; `./train -v V` with no -i/-j calls
 * prepare_default_corpus, which fetches, cleans and tokenizes the default corpus on first use and
 * caches the result (keyed by corpus and V) so later runs start at once. */
#ifndef FUSEDGPT_PREPARE_H
#define FUSEDGPT_PREPARE_H

#include <stdint.h>

#include "common/err.h"

#define PREPARE_PATH_LEN 1024

typedef struct {
    char train_path[PREPARE_PATH_LEN];     /* train shard */
    char val_path[PREPARE_PATH_LEN];       /* validation shard */
    char tokenizer_path[PREPARE_PATH_LEN]; /* tokenizer file, for decoding samples */
    uint32_t vocab_requested;              /* V asked for */
    uint32_t vocab_reached;                /* tokens the tokenizer actually has (<= requested) */
    char corpus[32];                       /* the default corpus's name (data/corpus.h), "" otherwise */
} PreparedData;

/* Tokens the standard default corpus supports (beyond it no pair of tokens occurs twice); a larger
 * vocabulary takes the extended corpus. */
#define PREPARE_STANDARD_CORPUS_VOCAB 187536u

/* 1 when a vocab_size-token tokenizer needs the extended default corpus. */
int prepare_wants_extended_corpus(uint32_t vocab_size);

/* Makes sure the default corpus is prepared with a vocab_size-token tokenizer under cache_dir:
 * the standard corpus, or the extended one when vocab_size is more than the standard supports.
 * Returns 0 and fills *out, or -1 with a one-line message in err (ERR_LEN bytes). */
int prepare_default_corpus(uint32_t vocab_size, const char *cache_dir, PreparedData *out, char *err);

/* The `./train prepare` sub-command; argv[0] is "prepare". Returns the process exit status. */
int prepare_main(int argc, char **argv);

#endif
