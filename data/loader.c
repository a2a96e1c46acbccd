/* data/loader.c - shuffled, rank-sliced, resumable batches of token windows (see loader.h). */
#include "data/loader.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "common/hash.h"
#include "common/rng.h"

static void build_order(Loader *l) {
    for (uint64_t i = 0; i < l->total_windows; i++) l->order[i] = i;
    if (!l->shuffle) return;
    Rng rng;
    rng_seed(&rng, l->seed * 0x9e3779b97f4a7c15ull + l->epoch);
    for (uint64_t i = l->total_windows; i > 1; i--) { /* Fisher-Yates */
        uint64_t j = rng_below(&rng, i);
        uint64_t tmp = l->order[i - 1];
        l->order[i - 1] = l->order[j];
        l->order[j] = tmp;
    }
}

int loader_open(Loader *l, const char *path, uint32_t model_vocab, int B, int T, int rank, int world, int accum,
                int shuffle, uint64_t seed, char *err) {
    memset(l, 0, sizeof *l);
    ShardHeader hdr;
    if (shard_read(path, model_vocab, &l->tokens, &l->num_tokens, &hdr, err) != 0) return -1;
    l->shard_vocab = hdr.vocab_size;
    l->shard_tokenizer = hdr.tokenizer;
    l->B = B;
    l->T = T;
    l->rank = rank;
    l->world = world;
    l->shuffle = shuffle;
    l->seed = seed;
    l->total_windows = l->num_tokens > 0 ? (l->num_tokens - 1) / (uint64_t)T : 0;
    l->num_batches = l->total_windows / (uint64_t)B / ((uint64_t)world * accum) * accum;
    if (l->num_batches == 0) {
        snprintf(err, ERR_LEN,
                 "shard %s has %llu tokens: too few for a batch of %d x %lld on each of %d rank(s) with %d "
                 "micro-batch(es) per step (need %llu; lower -b or -t%s, or use more data)",
                 path, (unsigned long long)l->num_tokens, B, (long long)T + 1, world, accum,
                 (unsigned long long)B * T * world * accum + 1, accum > 1 ? " (or -d)" : "");
        loader_close(l);
        return LOADER_TOO_SHORT;
    }
    l->order = malloc(l->total_windows * sizeof(uint64_t));
    if (!l->order) {
        snprintf(err, ERR_LEN, "out of memory for the batch order of %s", path);
        loader_close(l);
        return -1;
    }
    build_order(l);
    return 0;
}

void loader_close(Loader *l) {
    free(l->order);
    free(l->tokens);
    memset(l, 0, sizeof *l);
}

void loader_next_batch(Loader *l, int *inputs, int *targets) {
    int T = l->T;
    if (l->position == l->num_batches) {
        l->epoch++;
        l->position = 0;
        build_order(l);
    }
    uint64_t batch = l->position * (uint64_t)l->world + (uint64_t)l->rank; /* dealt round-robin */
    l->position++;
    for (int b = 0; b < l->B; b++) {
        const uint32_t *w = l->tokens + l->order[batch * (uint64_t)l->B + (uint64_t)b] * (uint64_t)T;
        for (int t = 0; t < T; t++) {
            inputs[b * T + t] = (int)w[t];
            targets[b * T + t] = (int)w[t + 1];
        }
    }
}

void loader_reset(Loader *l) {
    l->epoch = 0;
    l->position = 0;
    build_order(l);
}

LoaderState loader_get_state(const Loader *l) {
    return (LoaderState){l->epoch, l->position};
}

uint64_t loader_fingerprint(const Loader *l) {
    return fgpt_hash64(l->tokens, l->num_tokens * sizeof(uint32_t), l->num_tokens);
}

int loader_state_for_world(LoaderState *s, int from_world, int to_world, char *err) {
    const uint64_t consumed = s->position * (uint64_t)from_world;
    if (from_world < 1 || to_world < 1 || consumed % (uint64_t)to_world) {
        snprintf(err, ERR_LEN,
                 "the checkpoint's data position (%llu batches on each of %d rank(s)) is not a whole number of "
                 "batches on %d rank(s) (resume with -g %d)",
                 (unsigned long long)s->position, from_world, to_world, from_world);
        return -1;
    }
    s->position = consumed / (uint64_t)to_world;
    return 0;
}

int loader_batches_per_rank(int batches, int world) {
    return batches / world + (batches % world != 0);
}

int loader_set_state(Loader *l, LoaderState s, char *err) {
    if (s.position > l->num_batches) {
        snprintf(err, ERR_LEN,
                 "checkpoint's data position %llu is beyond this shard's %llu batches per rank (resume with the "
                 "same data, -b, -t and -d)",
                 (unsigned long long)s.position, (unsigned long long)l->num_batches);
        return -1;
    }
    l->epoch = s.epoch;
    l->position = s.position;
    build_order(l);
    return 0;
}
