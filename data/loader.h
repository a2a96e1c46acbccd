/* data/loader.h - batches of (B, T+1) token windows from one shard.
 *
 * The shard is cut into non-overlapping windows of T+1 tokens (stride T, so every token is a
 * target once per epoch). Rank r of W takes windows r, r+W, r+2W, ... With shuffling on, the
 * order of the rank's windows is a permutation drawn from (seed, epoch), so the whole state is
 * (epoch, position): checkpoints save those two numbers and resume exactly. */
#ifndef FUSEDGPT_LOADER_H
#define FUSEDGPT_LOADER_H

#include <stdint.h>

#include "data/shard.h"

typedef struct {
    uint32_t *tokens;
    uint64_t num_tokens;
    int B, T;
    int rank, world;
    int shuffle;
    uint64_t seed;
    uint64_t num_windows; /* this rank's windows per epoch */
    uint64_t *order;      /* this rank's window indices, in this epoch's order */
    uint64_t epoch, position;
} Loader;

typedef struct {
    uint64_t epoch, position;
} LoaderState;

/* Reads and validates the shard against model_vocab. Returns 0, or -1 with a message in err. */
int loader_open(Loader *l, const char *path, uint32_t model_vocab, int B, int T, int rank, int world, int shuffle,
                uint64_t seed, char *err);
void loader_close(Loader *l);

/* Fills inputs and targets (int32 [B, T]) with the next B windows. */
void loader_next_batch(Loader *l, int *inputs, int *targets);

/* Back to the start of epoch 0 (validation passes start here every time). */
void loader_reset(Loader *l);

LoaderState loader_get_state(const Loader *l);
/* Returns 0, or -1 with a message if the state does not fit this loader (different data). */
int loader_set_state(Loader *l, LoaderState s, char *err);

#endif
