/* model/dist/grad_buckets.c - the gradient bucket and ZeRO-1 shard plan (see grad_buckets.h). */
#include "model/dist/grad_buckets.h"
#include "common/err.h"
#include "kernels/host_device.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void add_bucket(BucketPlan *p, size_t begin, size_t end, SyncPoint point, int layer) {
    if (end > begin) p->buckets[p->num_buckets++] = (GradBucket){begin, end - begin, point, layer};
}

int bucket_plan_build(BucketPlan *p, const ParamTable *t, int world, int rank, int zero1, int early_embeddings,
                      size_t min_bucket, char *err) {
    memset(p, 0, sizeof *p);
    const int L = t->cfg.num_layers;
    if (world < 1 || rank < 0 || rank >= world) {
        snprintf(err, ERR_LEN, "bucket plan: rank %d of %d is out of range", rank, world);
        return -1;
    }
    if (zero1 && early_embeddings) {
        /* rounding the embeddings' edge up would take in values of layer 0 that are not final */
        snprintf(err, ERR_LEN, "bucket plan: ZeRO-1 reduces the embeddings last, not early");
        return -1;
    }
    p->buckets = calloc((size_t)L + 3, sizeof *p->buckets);
    p->pieces = zero1 ? calloc((size_t)L + 3, sizeof *p->pieces) : NULL;
    if (!p->buckets || (zero1 && !p->pieces)) {
        snprintf(err, ERR_LEN, "out of host memory for the gradient buckets");
        bucket_plan_free(p);
        return -1;
    }
    const size_t unit = zero1 ? (size_t)world : 1;
    p->padded_total = round_up(t->total, unit);
    /* edge[l]: where layer l's bucket starts; edge[L]: where ln_f's starts */
    size_t *edge = malloc(((size_t)L + 1) * sizeof *edge);
    if (!edge) {
        snprintf(err, ERR_LEN, "out of host memory for the gradient buckets");
        bucket_plan_free(p);
        return -1;
    }
    for (int l = 0; l < L; l++) edge[l] = round_up(t->layer_begin[l], unit);
    edge[L] = round_up(t->layer_begin[L], unit);
    if (early_embeddings) add_bucket(p, 0, edge[0], SYNC_AFTER_OUTPUT, -1);
    /* ln_f, layer L-1, ..., layer 0 lie downward in the layout; consecutive ones merge until a
     * bucket holds min_bucket values, and a bucket is reduced when its lowest part is final */
    size_t hi = p->padded_total;
    for (int l = L; l >= 0; l--) {
        if (hi - edge[l] < min_bucket && l > 0) continue;
        add_bucket(p, edge[l], hi, l == L ? SYNC_AFTER_LNF : SYNC_AFTER_LAYER, l == L ? -1 : l);
        hi = edge[l];
    }
    if (!early_embeddings) add_bucket(p, 0, edge[0], SYNC_AFTER_ENCODER, -1);
    free(edge);
    if (zero1) {
        /* the compact shard keeps layout order, so a checkpoint's pieces are easy to follow */
        for (int i = 0; i < p->num_buckets; i++) {
            const GradBucket *b = &p->buckets[i];
            size_t part = b->count / (size_t)world;
            p->pieces[i] = (ShardPiece){b->begin + (size_t)rank * part, part, 0};
        }
        for (int i = 1; i < p->num_buckets; i++) /* insertion sort by begin: a few dozen pieces */
            for (int j = i; j > 0 && p->pieces[j - 1].begin > p->pieces[j].begin; j--) {
                ShardPiece tmp = p->pieces[j];
                p->pieces[j] = p->pieces[j - 1];
                p->pieces[j - 1] = tmp;
            }
        for (int i = 0; i < p->num_buckets; i++) {
            p->pieces[i].shard_offset = p->shard_elems;
            p->shard_elems += p->pieces[i].count;
        }
    }
    return 0;
}

void bucket_plan_free(BucketPlan *p) {
    free(p->buckets);
    free(p->pieces);
    memset(p, 0, sizeof *p);
}

const ShardPiece *bucket_plan_piece(const BucketPlan *p, int b) {
    size_t begin = p->buckets[b].begin;
    /* the piece that lies inside bucket b */
    for (int i = 0; i < p->num_buckets; i++)
        if (p->pieces[i].begin >= begin && p->pieces[i].begin < begin + p->buckets[b].count) return &p->pieces[i];
    return NULL;
}

int bucket_plan_count_below(const BucketPlan *p, size_t end) {
    int n = 0;
    for (int i = 0; i < p->num_buckets; i++) n += p->buckets[i].begin < end;
    return n;
}

WireSplit wire_split(size_t n, int world, size_t slice) {
    WireSplit s = {n, (size_t)ceil_div((int64_t)n, world), slice, world, 0};
    s.rounds = (int)ceil_div((int64_t)s.part, (int64_t)slice);
    return s;
}

size_t wire_part_len(const WireSplit *s, int j) {
    size_t begin = (size_t)j * s->part;
    return begin >= s->n ? 0 : s->n - begin < s->part ? s->n - begin : s->part;
}

size_t wire_slice_len(const WireSplit *s, int j, int k) {
    size_t len = wire_part_len(s, j), begin = (size_t)k * s->slice;
    return begin >= len ? 0 : len - begin < s->slice ? len - begin : s->slice;
}
