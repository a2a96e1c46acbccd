/* model/dist/grad_buckets.h - how data parallelism cuts the flat parameter layout into gradient
 * buckets and, under ZeRO-1, into each rank's shard (the plan only; model/dist/grad_sync.cu runs it).
 *
 * Buckets come in the order the backward of a step's last micro-batch finishes them: ln_f, layer
 * L-1, ..., layer 0, then the embeddings (wte, and wpe where the family has one), which the
 * encoder's backward completes last. An untied lm_head lies after ln_f in the layout and is reduced
 * with it, once: its gradient is final since the output layer.
 * With early_embeddings the embeddings bucket comes first instead, right after the output layer
 * (the encoder's contribution is then added after the reduction; see grad_sync.h).
 * Under ZeRO-1 every bucket must split evenly over the ranks, so its edges are rounded UP to
 * multiples of world: a bucket then holds a few values of the tensor after it in the layout, which
 * the backward finished earlier, and never values it has not finished yet. */
#ifndef FUSEDGPT_GRAD_BUCKETS_H
#define FUSEDGPT_GRAD_BUCKETS_H

#include <stddef.h>

#include "model/gpt.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Where the backward stands when a bucket's values are final. */
typedef enum { SYNC_AFTER_OUTPUT, SYNC_AFTER_LNF, SYNC_AFTER_LAYER, SYNC_AFTER_ENCODER } SyncPoint;

typedef struct {
    size_t begin, count; /* flat layout; count divisible by world under ZeRO-1 */
    SyncPoint point;
    int layer;           /* for SYNC_AFTER_LAYER */
} GradBucket;

/* One contiguous part of a rank's ZeRO-1 shard: elements [begin, begin + count) of the flat layout
 * live at shard_offset in the rank's compact shard buffers. */
typedef struct {
    size_t begin, count, shard_offset;
} ShardPiece;

typedef struct {
    GradBucket *buckets; /* backward order */
    int num_buckets;
    ShardPiece *pieces;  /* ZeRO-1: this rank's part of every bucket, in layout order; else NULL */
    size_t shard_elems;  /* ZeRO-1: their total */
    size_t padded_total; /* the table's total rounded up to the bucket edge unit (padding stays 0) */
} BucketPlan;

/* 0, or -1 with a message in err (ERR_LEN bytes); zero1 excludes early_embeddings. min_bucket: values
 * per bucket at least (layers merge; 0: one bucket per layer and one for ln_f). */
int bucket_plan_build(BucketPlan *p, const ParamTable *t, int world, int rank, int zero1, int early_embeddings,
                      size_t min_bucket, char *err);
void bucket_plan_free(BucketPlan *p);
/* The rank's shard piece of bucket b (ZeRO-1). */
const ShardPiece *bucket_plan_piece(const BucketPlan *p, int b);
/* How many buckets hold a value below `end` of the layout. Under ZeRO-1 the buckets lie downward in
 * the layout, so a forward, which reads the layout upward, needs the last this-many buckets of the
 * array gathered before it reads values [0, end): with edges rounded up, a layer's first values may
 * sit in the bucket before its own. */
int bucket_plan_count_below(const BucketPlan *p, size_t end);

/* How the bf16 wire (model/dist/grad_sync.h) splits one bucket of n values over world ranks: rank j
 * sums part j, values [j·part, j·part + wire_part_len(j)) with part = ceil(n / world) (under ZeRO-1 n
 * splits evenly, and part j is rank j's shard piece). Buffers bound what one round exchanges: round
 * k takes values [k·slice, k·slice + wire_slice_len(j, k)) of every part j. */
typedef struct {
    size_t n, part, slice;
    int world, rounds;
} WireSplit;

/* slice >= 1: the most values of one part that a round takes. */
WireSplit wire_split(size_t n, int world, size_t slice);
size_t wire_part_len(const WireSplit *s, int j);
size_t wire_slice_len(const WireSplit *s, int j, int k);

#ifdef __cplusplus
}
#endif

#endif
