/* data/loader.h - batches of (B, T+1) token windows from one shard or several.
 *
 * Each shard is cut into non-overlapping windows of T+1 tokens (stride T, so every token is a
 * target once per epoch); windows never span two shards, and shards follow each other in the
 * order shard_paths gives. Each epoch orders all windows (a permutation drawn from (seed, epoch)
 * when shuffling, file order otherwise) and deals them out in batches of B: batch k goes to rank
 * k mod W. So W ranks with accumulation A see, step for step, exactly the batches one rank sees
 * with accumulation A·W, and an epoch is a whole number of optimizer steps on every rank (the
 * remainder of the windows is skipped). The whole state is (epoch, position), the same on every rank:
 * checkpoints save those two numbers and resume exactly. The shards are mapped, not read into
 * memory: a window's tokens are decoded as its batch is made. Under PACK_BFD a shard's windows are
 * its whole documents packed best fit decreasing instead (data/pack.h), made when the loader opens. */
#ifndef FUSEDGPT_LOADER_H
#define FUSEDGPT_LOADER_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "data/pack.h"
#include "data/shard.h"

typedef struct {
    MappedShard map;
    char *path;
    uint64_t first_window, windows; /* its windows' place in the loader's numbering */
    uint32_t limit;                 /* every token is below it (checked at open, and as batches are made) */
    PackedWindows packed;           /* its windows under PACK_BFD */
} LoaderShard;

typedef struct {
    LoaderShard *shards;
    size_t num_shards;
    uint64_t num_tokens;      /* in all shards */
    uint32_t shard_vocab;     /* the vocabulary the shards' headers record (their tokenizer's) */
    uint64_t shard_tokenizer; /* the fingerprint of the tokenizer that made them (0: not recorded) */
    uint64_t fingerprint;     /* loader_fingerprint's */
    int masked;               /* a shard marks tokens that are no target (SHARD_LOSS_MASK) or documents: batches
                               * hold -1 targets, and a step's loss is the mean over the targets of all its batches */
    int documents;            /* a shard marks where documents start (SHARD_DOCUMENTS): batches have positions */
    uint64_t no_loss_tokens;  /* the tokens so marked, in all shards */
    uint64_t document_starts; /* the tokens marked as a document's first, in all shards */
    PackKind pack;            /* how shards become windows (data/pack.h) */
    uint64_t packed_tokens;   /* under PACK_BFD, the tokens all windows hold (the rest of them is padding) */
    int B, T;
    int rank, world;
    int shuffle;
    uint64_t seed;
    uint64_t total_windows; /* in all shards */
    uint64_t num_batches;   /* this rank's batches per epoch */
    uint32_t *order;        /* every window index, in this epoch's order (at most 2^32 - 1 windows) */
    uint32_t *window;       /* one window's T + 1 stored tokens */
    uint64_t epoch, position;
    /* set by loader_next_batch when a token is no longer below its bound: the shard changed on disk
     * since the loader checked it (the batch then holds 0 there); the caller stops */
    char changed[ERR_LEN];
} Loader;

typedef struct {
    uint64_t epoch, position;
} LoaderState;

/* loader_open's answer for a sound shard that holds less than one step's batches. */
#define LOADER_TOO_SHORT (-2)

/* Maps the shards that spec names (shard_paths: a file or a glob pattern) and checks every token
 * against model_vocab; the shards must share one vocabulary and tokenizer. accum is the number of micro-batches per
 * optimizer step on each rank: an epoch ends on a whole step, so epochs line up whatever the split
 * between ranks and accumulation. pack says how a shard becomes windows: PACK_BFD needs shards that
 * mark documents. Returns 0; LOADER_TOO_SHORT when the shard is sound but too short for one step; -1
 * when it cannot be read or is corrupt, or cannot be packed. Both failures leave a message in err. */
int loader_open(Loader *l, const char *spec, uint32_t model_vocab, int B, int T, int rank, int world, int accum,
                int shuffle, uint64_t seed, PackKind pack, char *err);
void loader_close(Loader *l);

/* A shard cut short while a loader maps it (a file rewritten in place) then ends the process with a
 * line naming it and exit status 1, not a bus error's crash. For the whole process (SIGBUS). */
void loader_catch_cut_shards(void);

/* One window's stored tokens (count of them, at most T + 1, as shard_read gives them, marks kept) as
 * the model takes them: inputs[t], the id of token t (0 past count); targets[t], token t + 1's target,
 * -1 where it has no loss, lies past count or starts a document (no document predicts the next one's
 * first token); positions[t] (unless NULL), token t's place in its document (backend.h): 0 at t = 0
 * and at each SHARD_DOC_START. Returns whether a document starts after t = 0. */
int loader_split_window(const uint32_t *stored, int count, int T, int *inputs, int *targets, int *positions);

/* Fills inputs and targets (int32 [B, T]) with the next B windows, and positions (int32 [B, T]; NULL:
 * not wanted) as loader_split_window; l->changed says whether a shard changed under it. Returns
 * whether a document starts inside a window: else every position is t, and the backend may be given
 * NULL for them. */
int loader_next_batch(Loader *l, int *inputs, int *targets, int *positions);

/* Back to the start of epoch 0 (validation passes start here every time). */
void loader_reset(Loader *l);

LoaderState loader_get_state(const Loader *l);
/* A hash of the tokens of all shards in order, as 32-bit values (taken as loader_open checks them),
 * and of how they become windows: the same data gives the same value, whatever its files or token
 * width. Checkpoints record the training data's, so a resume can tell. */
uint64_t loader_fingerprint(const Loader *l);
/* The fingerprint the same shards give under another packing, to name the --pack a checkpoint's
 * data was cut with. */
uint64_t loader_fingerprint_packed(const Loader *l, PackKind pack);
/* The same data position for a run on another number of ranks (the same global batch). Ranks are
 * dealt the batches of one global order round-robin, so at a step boundary a run on from_world
 * ranks has consumed position x from_world batches of the epoch, and a run on to_world ranks goes
 * on from position x from_world / to_world. Returns 0, or -1 with a message if that is not a whole
 * number of batches. */
int loader_state_for_world(LoaderState *s, int from_world, int to_world, char *err);
/* Each rank's share of `batches` dealt over `world` ranks, rounded up so that every rank evaluates
 * as many (validation counts its batches over all ranks). */
int loader_batches_per_rank(int batches, int world);
/* Returns 0, or -1 with a message if the state does not fit this loader (different data). */
int loader_set_state(Loader *l, LoaderState s, char *err);

#endif
