/* model/dist/grad_sync.cu - data-parallel gradient reduction and ZeRO-1 sharding (see grad_sync.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "kernels/cuda_check.h"
#include "model/dist/grad_sync.h"

/* The most values of a bucket that one round of the bf16 wire converts, exchanges and sums: it
 * bounds the wire's two buffers (2 x 32 MB) whatever the largest bucket (the tied embedding of
 * V = 262144 is 201M values, 13 rounds). */
#define WIRE_ROUND_VALUES ((size_t)1 << 24)

struct GradSync {
    const Dist *dist;
    int zero1, overlap, world, rank;
    int early_embeddings; /* grad_sync_encoder runs the embeddings' backward */
    int B, T, C, Vp;
    size_t wte_offset, total;
    const ParamInfo *wpe; /* NULL: the family has no position table */
    float embed_scale;    /* the token embedding's scale, and the token whose row gets no gradient */
    int pad_token;
    BucketPlan plan;
    float *grad_shard; /* ZeRO-1: this rank's reduced gradients, compact */
    /* ZeRO-1 after the backward on two ranks of one NVLink host: the reduce-scatter as loads of
     * both ranks' gradients (kernels/rank_sum.cu) between two barriers (one-value all-reduces);
     * NULL: NCCL's */
    RankSumPlan *rank_sum;
    float *barrier_value;
    cudaStream_t comm;
    cudaEvent_t ready;                    /* reused: record on main, comm waits (ordered use) */
    cudaEvent_t compute_done, comm_done;  /* timing: the wait not hidden by the backward */
    int launched;                         /* collectives enqueued for this step so far */
    /* ZeRO-1's weight gather, on comm in the order the forward reads the layout (gather_order: the
     * buckets by where they begin): gathered[k] is recorded after the k-th. Main has waited for the
     * first weights_waited of them; need[l + 1] is how many the forward needs before it reads layer
     * l (l = -1: the embeddings, L: the tail). */
    cudaEvent_t *gathered;
    int *need, *gather_order;
    int weights_waited;
    /* timing: main's waits for the gather since it was enqueued (wait_begin/end[0..waits)); step_waits
     * of them came before the last reduction */
    cudaEvent_t *wait_begin, *wait_end;
    int waits, step_waits;
    /* all-reduce with overlap: the encoder's backward over every rank's micro-batch */
    kbf16 *dres_all;
    int *inputs_all, *positions_all;
    void *encoder_scratch;
    /* the bf16 wire: one round's slices of every part, world slots of wire_slice values each; send
     * holds this rank's values for each other rank, recv every rank's values of this rank's part
     * (its own included, converted there directly) */
    int bf16_wire;
    size_t wire_slice;
    kbf16 *wire_send, *wire_recv;
    size_t *wire_counts; /* world entries */
};

/* A part's values that one round takes: no bucket exceeds the layout rounded up to world. */
static size_t wire_slice_for(size_t total, int world) {
    size_t padded = (size_t)round_up((int64_t)total, world);
    return (size_t)ceil_div((int64_t)(padded < WIRE_ROUND_VALUES ? padded : WIRE_ROUND_VALUES), world);
}

/* A table without the token embedding (a tied head that --vocab-parallel splits) leaves the
 * embeddings' backward to the backend. */
static int owns_encoder(const ParamTable *t, int zero1, int overlap, int world) {
    return world > 1 && overlap && !zero1 && param_whole(t, ROLE_WTE);
}

/* ZeRO-1: the gather's per-bucket events, the waits' timing events, the gather's order, and what
 * the forward needs before each layer. 0, or -1 with err set. */
static int create_gather_events(GradSync *gs, const ParamTable *t, char *err) {
    const int nb = gs->plan.num_buckets, L = t->cfg.num_layers;
    gs->gathered = (cudaEvent_t *)calloc((size_t)nb, sizeof(cudaEvent_t));
    gs->wait_begin = (cudaEvent_t *)calloc((size_t)nb, sizeof(cudaEvent_t));
    gs->wait_end = (cudaEvent_t *)calloc((size_t)nb, sizeof(cudaEvent_t));
    gs->need = (int *)calloc((size_t)L + 2, sizeof(int));
    gs->gather_order = (int *)calloc((size_t)nb, sizeof(int));
    if (!gs->gathered || !gs->wait_begin || !gs->wait_end || !gs->need || !gs->gather_order) {
        snprintf(err, ERR_LEN, "out of host memory for the gradient buckets");
        return -1;
    }
    for (int k = 0; k < nb; k++) {
        CUDA_CHECK(cudaEventCreateWithFlags(&gs->gathered[k], cudaEventDisableTiming));
        CUDA_CHECK(cudaEventCreate(&gs->wait_begin[k]));
        CUDA_CHECK(cudaEventCreate(&gs->wait_end[k]));
    }
    /* the forward reads the layout upward: the buckets by begin (insertion sort, a few dozen), so
     * that the first need[l + 1] of them are exactly those holding a value below layer l + 1 */
    for (int k = 0; k < nb; k++) {
        int j = k;
        for (; j > 0 && gs->plan.buckets[gs->gather_order[j - 1]].begin > gs->plan.buckets[k].begin; j--)
            gs->gather_order[j] = gs->gather_order[j - 1];
        gs->gather_order[j] = k;
    }
    /* layer l (-1: the embeddings) ends where layer l + 1 begins; the tail (the final norm and an
     * untied head) at the layout's end, which every bucket lies below */
    for (int l = -1; l < L; l++) gs->need[l + 1] = bucket_plan_count_below(&gs->plan, t->layer_begin[l + 1]);
    gs->need[L + 1] = nb;
    gs->weights_waited = nb; /* nothing gathered yet: nothing to wait for */
    return 0;
}

size_t grad_sync_bytes(const ParamTable *t, const Dist *d, int zero1, int overlap, int bf16_wire, int B, int T) {
    if (!d || d->world < 2) return 0;
    size_t bytes = zero1 ? (t->total / (size_t)d->world + (size_t)t->cfg.num_layers + 3) * sizeof(float) : 0;
    if (owns_encoder(t, zero1, overlap, d->world)) {
        size_t n_all = (size_t)d->world * B * T;
        bytes += n_all * t->cfg.dim * sizeof(kbf16) + 2 * n_all * sizeof(int) +
                 encoder_backward_scratch_bytes((int)n_all, t->cfg.padded_vocab_size);
    }
    if (bf16_wire)
        bytes += 2 * (size_t)d->world * wire_slice_for(t->total, d->world) * sizeof(kbf16);
    return bytes;
}

GradSync *grad_sync_create(const ParamTable *t, const Dist *d, int zero1, int overlap, int bf16_wire,
                           size_t min_bucket, int B, int T, char *err) {
    err[0] = 0;
    if (!d || d->world < 2) return NULL;
    GradSync *gs = (GradSync *)calloc(1, sizeof *gs);
    if (!gs) {
        snprintf(err, ERR_LEN, "out of host memory for the gradient buckets");
        return NULL;
    }
    const int early_embeddings = owns_encoder(t, zero1, overlap, d->world);
    if (bucket_plan_build(&gs->plan, t, d->world, d->rank, zero1, early_embeddings, min_bucket, err) != 0) {
        free(gs);
        return NULL;
    }
    gs->dist = d;
    gs->zero1 = zero1;
    gs->overlap = overlap;
    gs->world = d->world;
    gs->rank = d->rank;
    gs->B = B, gs->T = T, gs->C = t->cfg.dim, gs->Vp = t->cfg.padded_vocab_size;
    gs->early_embeddings = early_embeddings;
    gs->wte_offset = early_embeddings ? param_whole(t, ROLE_WTE)->offset : 0;
    gs->wpe = param_whole(t, ROLE_WPE);
    gs->embed_scale = gpt_embed_scale(&t->cfg);
    gs->pad_token = gpt_embed_pad_token(&t->cfg);
    gs->total = t->total;
    /* the highest priority: a reduction starts as soon as SMs free up, not after the next kernels */
    int least = 0, greatest = 0;
    CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    CUDA_CHECK(cudaStreamCreateWithPriority(&gs->comm, cudaStreamNonBlocking, greatest));
    CUDA_CHECK(cudaEventCreateWithFlags(&gs->ready, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreate(&gs->compute_done));
    CUDA_CHECK(cudaEventCreate(&gs->comm_done));
    if (zero1 && create_gather_events(gs, t, err) != 0) {
        grad_sync_free(gs);
        return NULL;
    }
    if (zero1) CUDA_CHECK(cudaMalloc((void **)&gs->grad_shard, gs->plan.shard_elems * sizeof(float)));
    if (early_embeddings) {
        size_t n_all = (size_t)gs->world * B * T;
        CUDA_CHECK(cudaMalloc((void **)&gs->dres_all, n_all * gs->C * sizeof(kbf16)));
        CUDA_CHECK(cudaMalloc((void **)&gs->inputs_all, n_all * sizeof(int)));
        CUDA_CHECK(cudaMalloc((void **)&gs->positions_all, n_all * sizeof(int)));
        CUDA_CHECK(cudaMalloc(&gs->encoder_scratch, encoder_backward_scratch_bytes((int)n_all, gs->Vp)));
    }
    gs->bf16_wire = bf16_wire;
    if (gs->bf16_wire) {
        gs->wire_slice = wire_slice_for(t->total, gs->world);
        gs->wire_counts = (size_t *)calloc((size_t)gs->world, sizeof(size_t));
        if (!gs->wire_counts) {
            snprintf(err, ERR_LEN, "out of host memory for the gradient buckets");
            grad_sync_free(gs);
            return NULL;
        }
        CUDA_CHECK(cudaMalloc((void **)&gs->wire_send, (size_t)gs->world * gs->wire_slice * sizeof(kbf16)));
        CUDA_CHECK(cudaMalloc((void **)&gs->wire_recv, (size_t)gs->world * gs->wire_slice * sizeof(kbf16)));
    }
    return gs;
}

void grad_sync_free(GradSync *gs) {
    if (!gs) return;
    CUDA_CHECK(cudaStreamSynchronize(gs->comm));
    rank_sum_plan_free(gs->rank_sum);
    CUDA_CHECK(cudaFree(gs->barrier_value));
    CUDA_CHECK(cudaFree(gs->wire_recv));
    CUDA_CHECK(cudaFree(gs->wire_send));
    free(gs->wire_counts);
    CUDA_CHECK(cudaFree(gs->encoder_scratch));
    CUDA_CHECK(cudaFree(gs->grad_shard));
    CUDA_CHECK(cudaFree(gs->inputs_all));
    CUDA_CHECK(cudaFree(gs->positions_all));
    CUDA_CHECK(cudaFree(gs->dres_all));
    for (int k = 0; k < gs->plan.num_buckets; k++) {
        if (gs->wait_end && gs->wait_end[k]) CUDA_CHECK(cudaEventDestroy(gs->wait_end[k]));
        if (gs->wait_begin && gs->wait_begin[k]) CUDA_CHECK(cudaEventDestroy(gs->wait_begin[k]));
        if (gs->gathered && gs->gathered[k]) CUDA_CHECK(cudaEventDestroy(gs->gathered[k]));
    }
    free(gs->gather_order);
    free(gs->need);
    free(gs->wait_end);
    free(gs->wait_begin);
    free(gs->gathered);
    CUDA_CHECK(cudaEventDestroy(gs->comm_done));
    CUDA_CHECK(cudaEventDestroy(gs->compute_done));
    CUDA_CHECK(cudaEventDestroy(gs->ready));
    CUDA_CHECK(cudaStreamDestroy(gs->comm));
    bucket_plan_free(&gs->plan);
    free(gs);
}

size_t grad_sync_padded_total(const GradSync *gs) {
    return gs->plan.padded_total;
}

int grad_sync_pieces(const GradSync *gs, const ShardPiece **pieces, size_t *shard_elems) {
    if (!gs || !gs->zero1) return 0;
    *pieces = gs->plan.pieces;
    *shard_elems = gs->plan.shard_elems;
    return gs->plan.num_buckets;
}

float *grad_sync_grad_shard(const GradSync *gs) {
    return gs && gs->zero1 ? gs->grad_shard : NULL;
}

int grad_sync_owns_encoder(const GradSync *gs) {
    return gs && gs->early_embeddings;
}

/* Two ranks: where the rank sum was measured against NCCL's reduce-scatter (faster by 14-23 %, the
 * same bits; dev/RESULTS.md, Multi-GPU). Four and eight read from three and seven peers through the
 * NVLink switches, not measured yet: NCCL's stays there. */
int grad_sync_wants_exchanged_grads(const GradSync *gs) {
    return gs && gs->zero1 && !gs->overlap && !gs->bf16_wire && gs->world == 2;
}

int grad_sync_read_peers(GradSync *gs, float *grads) {
    if (!grad_sync_wants_exchanged_grads(gs)) return 0;
    RankSumSources sources = {{NULL}, gs->world};
    if (dist_peer_addresses(gs->dist, grads, (void **)sources.rank, gs->world) != 0) return 0;
    RankSumPiece *pieces = (RankSumPiece *)malloc((size_t)gs->plan.num_buckets * sizeof *pieces);
    if (!pieces) {
        fprintf(stderr, "error: out of host memory for the gradient buckets\n");
        exit(1);
    }
    for (int i = 0; i < gs->plan.num_buckets; i++) {
        const ShardPiece *p = &gs->plan.pieces[i];
        pieces[i] = (RankSumPiece){p->begin, p->shard_offset, p->count};
    }
    gs->rank_sum = rank_sum_plan_create(&sources, pieces, gs->plan.num_buckets);
    free(pieces);
    CUDA_CHECK(cudaMalloc((void **)&gs->barrier_value, sizeof(float)));
    CUDA_CHECK(cudaMemset(gs->barrier_value, 0, sizeof(float)));
    return 1;
}

/* Every rank's comm stream reaches this point before any goes on: a one-value all-reduce. */
static void barrier(GradSync *gs) {
    dist_allreduce_sum(gs->dist, gs->barrier_value, 1, DIST_FLOAT32, gs->comm);
}

/* Values [0, n) of bucket over the bf16 wire: every part rounded to bf16 and sent to the rank that
 * sums it, round by round; this rank's part summed into out. */
static void wire_reduce_scatter(GradSync *gs, const float *bucket, const WireSplit *s, float *out) {
    for (int k = 0; k < s->rounds; k++) {
        for (int j = 0; j < gs->world; j++) {
            size_t len = gs->wire_counts[j] = wire_slice_len(s, j, k);
            if (!len) continue;
            kbf16 *slot = (j == gs->rank ? gs->wire_recv : gs->wire_send) + (size_t)j * gs->wire_slice;
            convert_fp32_to_bf16(slot, bucket + (size_t)j * s->part + (size_t)k * s->slice, len, gs->comm);
        }
        const size_t mine = gs->wire_counts[gs->rank];
        dist_alltoall(gs->dist, gs->wire_send, gs->wire_counts, gs->wire_recv, mine, gs->wire_slice, DIST_BFLOAT16,
                      gs->comm);
        sum_bf16_parts(out + (size_t)k * s->slice, gs->wire_recv, gs->wire_slice, gs->world, mine, gs->comm);
    }
}

/* Values [begin, begin + n) of grads over the bf16 wire. ZeRO-1: this rank's sums go to its shard
 * piece (shard); else to its own part of grads, and every rank's part then to every rank in fp32.
 * Never inside an NCCL group: its rounding and summing kernels must run before and after the
 * exchange, which a group would launch at its end. */
static void wire_reduce(GradSync *gs, float *grads, size_t begin, size_t n, float *shard) {
    const WireSplit s = wire_split(n, gs->world, gs->wire_slice);
    float *bucket = grads + begin;
    if (shard) {
        wire_reduce_scatter(gs, bucket, &s, shard);
        return;
    }
    wire_reduce_scatter(gs, bucket, &s, bucket + (size_t)gs->rank * s.part);
    for (int j = 0; j < gs->world; j++) gs->wire_counts[j] = wire_part_len(&s, j);
    dist_allgather_parts(gs->dist, bucket, gs->wire_counts, s.part, DIST_FLOAT32, gs->comm);
}

static void reduce_bucket(GradSync *gs, int i, float *grads) {
    const GradBucket *b = &gs->plan.buckets[i];
    if (gs->bf16_wire)
        wire_reduce(gs, grads, b->begin, b->count,
                    gs->zero1 ? gs->grad_shard + bucket_plan_piece(&gs->plan, i)->shard_offset : NULL);
    else if (gs->zero1)
        dist_reduce_scatter_sum(gs->dist, grads + b->begin, gs->grad_shard + bucket_plan_piece(&gs->plan, i)->shard_offset,
                                b->count / (size_t)gs->world, DIST_FLOAT32, gs->comm);
    else
        dist_allreduce_sum(gs->dist, grads + b->begin, b->count, DIST_FLOAT32, gs->comm);
}

void grad_sync_ready(GradSync *gs, SyncPoint p, int layer, float *grads, cudaStream_t main) {
    if (!gs || !gs->overlap) return;
    int any = 0;
    for (int i = 0; i < gs->plan.num_buckets; i++) {
        const GradBucket *b = &gs->plan.buckets[i];
        if (b->point != p || (p == SYNC_AFTER_LAYER && b->layer != layer)) continue;
        if (!any) {
            CUDA_CHECK(cudaEventRecord(gs->ready, main));
            CUDA_CHECK(cudaStreamWaitEvent(gs->comm, gs->ready, 0));
            any = 1;
        }
        reduce_bucket(gs, i, grads);
        gs->launched++;
    }
}

void grad_sync_encoder(GradSync *gs, float *grads, const kbf16 *dres, const int *inputs, const int *positions,
                       cudaStream_t main) {
    const size_t N = (size_t)gs->B * gs->T;
    CUDA_CHECK(cudaEventRecord(gs->ready, main));
    CUDA_CHECK(cudaStreamWaitEvent(gs->comm, gs->ready, 0));
    dist_group_begin(gs->dist);
    dist_allgather(gs->dist, dres, gs->dres_all, N * gs->C, DIST_BFLOAT16, gs->comm);
    dist_allgather(gs->dist, inputs, gs->inputs_all, N, DIST_INT32, gs->comm);
    /* the position table's rows (every rank has documents, or none: the same data) */
    if (positions && gs->wpe) dist_allgather(gs->dist, positions, gs->positions_all, N, DIST_INT32, gs->comm);
    dist_group_end(gs->dist);
    /* after the embedding bucket's all-reduce (same stream): every rank adds the same values */
    encoder_backward(grads + gs->wte_offset, gs->wpe ? grads + gs->wpe->offset : NULL, gs->encoder_scratch,
                     gs->dres_all, gs->inputs_all, positions && gs->wpe ? gs->positions_all : NULL, gs->embed_scale, gs->pad_token, gs->world * gs->B, gs->T, gs->C,
                     gs->Vp, gs->comm);
}

void grad_sync_finish(GradSync *gs, float *grads, cudaStream_t main) {
    if (!gs) return;
    CUDA_CHECK(cudaEventRecord(gs->compute_done, main));
    if (!gs->overlap) {
        CUDA_CHECK(cudaStreamWaitEvent(gs->comm, gs->compute_done, 0));
        if (gs->bf16_wire && gs->zero1) {
            /* one bucket after another: each round reuses the wire's buffers */
            for (int i = 0; i < gs->plan.num_buckets; i++) reduce_bucket(gs, i, grads);
        } else if (gs->bf16_wire) {
            wire_reduce(gs, grads, 0, gs->plan.padded_total, NULL);
        } else if (gs->rank_sum) {
            /* every rank's gradients are final before any is read, and stay until all are read */
            barrier(gs);
            rank_sum(gs->rank_sum, gs->grad_shard, gs->comm);
            barrier(gs);
        } else if (gs->zero1) {
            dist_group_begin(gs->dist);
            for (int i = 0; i < gs->plan.num_buckets; i++) reduce_bucket(gs, i, grads);
            dist_group_end(gs->dist);
        } else {
            dist_allreduce_sum(gs->dist, grads, gs->plan.padded_total, DIST_FLOAT32, gs->comm);
        }
    } else if (gs->launched != gs->plan.num_buckets) {
        fprintf(stderr, "error: internal: %d of %d gradient buckets were reduced during the backward\n",
                gs->launched, gs->plan.num_buckets);
        exit(1);
    }
    gs->launched = 0;
    gs->step_waits = gs->waits;
    CUDA_CHECK(cudaEventRecord(gs->comm_done, gs->comm));
    CUDA_CHECK(cudaStreamWaitEvent(main, gs->comm_done, 0));
}

void grad_sync_gather_weights(GradSync *gs, kbf16 *params, cudaStream_t main) {
    if (!gs || !gs->zero1) return;
    const int nb = gs->plan.num_buckets;
    /* every piece this rank sends is updated */
    CUDA_CHECK(cudaEventRecord(gs->ready, main));
    CUDA_CHECK(cudaStreamWaitEvent(gs->comm, gs->ready, 0));
    /* one all-gather per bucket, in the order the forward reads them, each with its event: the
     * forward's first layers need not wait for the last ones' */
    for (int k = 0; k < nb; k++) {
        const int i = gs->gather_order[k];
        const ShardPiece *piece = bucket_plan_piece(&gs->plan, i);
        dist_allgather_copy(gs->dist, params + piece->begin, params + gs->plan.buckets[i].begin, piece->count,
                            DIST_BFLOAT16, gs->comm);
        CUDA_CHECK(cudaEventRecord(gs->gathered[k], gs->comm));
    }
    gs->weights_waited = 0;
    gs->waits = 0;
}

/* Main waits for the first `count` buckets of the gather; the comm stream runs them in that order,
 * so waiting for the last of them is enough. Timed: the wait is main's idle time between the two
 * events. */
static void wait_for_gathered(GradSync *gs, int count, cudaStream_t main) {
    if (count <= gs->weights_waited) return;
    CUDA_CHECK(cudaEventRecord(gs->wait_begin[gs->waits], main));
    CUDA_CHECK(cudaStreamWaitEvent(main, gs->gathered[count - 1], 0));
    CUDA_CHECK(cudaEventRecord(gs->wait_end[gs->waits], main));
    gs->waits++;
    gs->weights_waited = count;
}

void grad_sync_weights_ready(GradSync *gs, int layer, cudaStream_t main) {
    if (!gs || !gs->zero1) return;
    wait_for_gathered(gs, gs->need[layer + 1], main);
}

void grad_sync_weights_wait(GradSync *gs, cudaStream_t main) {
    if (!gs || !gs->zero1) return;
    wait_for_gathered(gs, gs->plan.num_buckets, main);
}

void grad_sync_gather_shard(GradSync *gs, const float *shard, float *full, cudaStream_t main) {
    dist_group_begin(gs->dist);
    for (int i = 0; i < gs->plan.num_buckets; i++) {
        const ShardPiece *piece = bucket_plan_piece(&gs->plan, i);
        dist_allgather(gs->dist, shard + piece->shard_offset, full + gs->plan.buckets[i].begin, piece->count,
                       DIST_FLOAT32, main);
    }
    dist_group_end(gs->dist);
}

void grad_sync_scatter_shard(GradSync *gs, const float *full_host, float *shard, cudaStream_t main) {
    for (int i = 0; i < gs->plan.num_buckets; i++) {
        const ShardPiece *p = &gs->plan.pieces[i];
        /* the host copy has the table's total; the padding past it stays zero */
        size_t count = p->begin >= gs->total ? 0 : p->begin + p->count > gs->total ? gs->total - p->begin : p->count;
        if (count < p->count)
            CUDA_CHECK(cudaMemsetAsync(shard + p->shard_offset + count, 0, (p->count - count) * sizeof(float), main));
        if (count)
            CUDA_CHECK(cudaMemcpyAsync(shard + p->shard_offset, full_host + p->begin, count * sizeof(float),
                                       cudaMemcpyHostToDevice, main));
    }
}

double grad_sync_wait_ms(GradSync *gs) {
    if (!gs) return 0.0;
    float reduce = 0.0f;
    CUDA_CHECK(cudaEventSynchronize(gs->comm_done));
    /* negative when the reduction finished before the backward did: nothing was waited for */
    CUDA_CHECK(cudaEventElapsedTime(&reduce, gs->compute_done, gs->comm_done));
    double ms = reduce > 0.0f ? reduce : 0.0f;
    /* the forward's waits for the weights: done, since main passed them before its reduction */
    for (int w = 0; w < gs->step_waits; w++) {
        float waited = 0.0f;
        CUDA_CHECK(cudaEventSynchronize(gs->wait_end[w]));
        CUDA_CHECK(cudaEventElapsedTime(&waited, gs->wait_begin[w], gs->wait_end[w]));
        ms += waited;
    }
    return ms;
}
