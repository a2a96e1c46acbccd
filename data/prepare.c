/* data/prepare.c - placeholder until the tokenizer issue lands: reports that the default corpus
 * is not available yet, so users pass their own shards with -i/-j. */
#include "data/prepare.h"

#include <stdio.h>

#include "data/shard.h"

int prepare_default_corpus(uint32_t vocab_size, const char *cache_dir, PreparedData *out, char *err) {
    (void)cache_dir;
    (void)out;
    snprintf(err, FGPT_ERR_LEN,
             "no default corpus for -v %u yet (tokenizer not built); pass token shards with -i and -j",
             vocab_size);
    return -1;
}

int prepare_main(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "error: `train prepare` is not available yet\n");
    return 2;
}
