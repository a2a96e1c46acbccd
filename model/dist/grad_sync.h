/* model/dist/grad_sync.h - data-parallel gradient reduction (and ZeRO-1 weight sharding) for the CUDA
 * backend.
 *
 * The flat parameter layout (model/gpt.h: wte, wpe, layer 0..L-1, ln_f) is cut into buckets that
 * the backward completes one after another: ln_f, layer L-1, ..., layer 0, and the embeddings. With
 * overlap on, each bucket's collective is enqueued on a communication stream as soon as the
 * backward has written it (an event orders the two streams), so the reduction runs under the
 * backward of the layers below.
 *
 * The tied embedding is the largest tensor (Vp·C: 201M values at V = 262144) and the last to be
 * finished, because the encoder's backward adds to it at the very end. In all-reduce mode it is
 * reduced right after the output layer instead: what the encoder would add is the same on every
 * rank once each rank has every rank's residual-stream gradient, so the ranks all-gather that
 * gradient (N·C bf16 per rank, ~25 MB at B=16, T=1024) and each runs the encoder's backward over
 * all of it. Its 800 MB reduction then hides under the whole transformer backward.
 *
 * Ranks sum their gradients; the backend scales each rank's loss by 1/world, so the sum is the
 * mean. ZeRO-1: each bucket is reduce-scattered instead, every rank keeps 1/world of each bucket
 * (its shard: AdamW's state, fp32 master weights and moments or bf16 moments, and reduced gradients, compact), updates it, and
 * the bf16 weights are all-gathered after the update. Bucket edges are then rounded up to
 * multiples of world so that every bucket splits evenly; a bucket still only ever holds values
 * that are final when it is reduced (model/dist/grad_buckets.h).
 *
 * The ZeRO-1 weight gather runs on the communication stream, bucket by bucket in the order the next
 * forward reads them (embeddings, layer 0..L-1, the tail), and by the GPUs' copy engines, which take
 * no SM from the forward beside them. The forward waits for each bucket just before its first read
 * of it (grad_sync_weights_ready), so the gather of the later layers runs under the forward of the
 * earlier ones. Every other reader or writer of the bf16 weights waits for the whole gather first
 * (grad_sync_weights_wait). The next update cannot overwrite a piece still being sent: it comes
 * after grad_sync_finish, which makes main wait for everything on the communication stream, the
 * gather included; the next step's reductions are enqueued on that stream behind the gather and
 * touch only gradients. A state read or write waits for the whole gather before its own
 * collectives on the other communicator: where NCCL moves the weights with kernels (no copy
 * engines), two communicators' kernels in flight at once could wait on each other.
 *
 * ZeRO-1 after the backward on two ranks of one NVLink host reduce-scatters without NCCL's kernels:
 * the gradients live in an NCCL symmetric window (dist_alloc_exchanged), each rank reads its shard's
 * part of both ranks' gradients through the window's peer addresses and sums them in rank order
 * (kernels/rank_sum.cu), between two one-value all-reduces: no rank reads gradients still being
 * written, and none changes them before the other has read. NCCL's reduce-scatter gives the same
 * bits for two ranks, in 1.2-1.3x the time (grad_sync_wants_exchanged_grads).
 *
 * The bf16 wire (--grad-reduce bf16: grad_sync_create's bf16_wire). Each bucket is cut into world parts
 * (grad_buckets.h WireSplit; under ZeRO-1 the shard pieces). Every rank rounds its fp32 values once
 * to bf16 (to nearest, ties to even) and sends part j to rank j (NCCL send/recv, all to all, in
 * rounds of at most 16M values of a bucket); rank j sums each element's world bf16 values in fp32,
 * in rank order 0..world-1, so an element's sum is the same bits in every mode and whichever rank
 * computes it. Under ZeRO-1 these sums are the rank's reduced gradient shard, and the wire carries
 * 2 + 2 bytes a parameter (bf16 gradients out, bf16 weights back, (world-1)/world of each per rank)
 * instead of the fp32 reduce-scatter's 4 + 2. Without ZeRO-1 the fp32 sums are then all-gathered in
 * place, so every rank holds the same reduced gradients: 2 + 4 bytes a parameter instead of the fp32
 * all-reduce's 4 + 4. With the early embeddings, the embedding bucket crosses the wire holding the
 * output layer's part alone; the encoder's part, computed alike on every rank, is added to the fp32
 * sums as before.
 *
 * Its error against the fp32 wire. Rank r's contribution c_r (already scaled by 1/world) crosses
 * as bf16(c_r) = c_r (1 + d) with |d| <= 2^-8 (8 significant bits: half an ulp is at most 2^-8 of
 * the value; below 2^-126, where bf16 is subnormal, the error is at most 2^-134). With
 * the two wires' own fp32 sums (world - 1 roundings of 2^-24 each), per element
 *   |g_bf16 - g_fp32| <= (2^-8 + 2^-20) sum_r |c_r|                    (world <= 8)
 * and in L2, by Cauchy-Schwarz over the ranks,
 *   ||g_bf16 - g_fp32|| <= (2^-8 + 2^-20) ||sum_r |c_r| || <= (2^-8 + 2^-20) sqrt(world sum_r ||c_r||^2).
 * There is no bound relative to ||g|| = ||sum_r c_r|| alone: where contributions of opposite signs
 * cancel, the sum is small and its rounding errors are not (||sum_r |c_r| || / ||g|| >= 1; about
 * 1-1.3 at a first step, where micro-batches' gradients share a direction). Expected size: a
 * rounding error is uniform within half an ulp, rms 0.42 x 2^-8 ~ 1.7e-3 of the value (mantissas
 * log-uniform), independent across ranks, so ||g_bf16 - g_fp32|| ~ 1.7e-3 sqrt(sum_r ||c_r||^2):
 * 1.7e-3 / sqrt(world) of ||g|| when the ranks' gradients agree, 1.7e-3 when they are unrelated.
 * dev/check/multigpu_check.sh (section wire) asserts the per-element form against each rank's own
 * gradient. */
#ifndef FUSEDGPT_GRAD_SYNC_H
#define FUSEDGPT_GRAD_SYNC_H

#include <cuda_runtime.h>

#include "kernels/kernels.h"
#include "model/dist/dist.h"
#include "model/gpt.h"
#include "model/dist/grad_buckets.h"

typedef struct GradSync GradSync;

/* NULL + err when d is a world of one (nothing to do) or on failure (err set, non-empty).
 * min_bucket: values per bucket at least (grad_buckets.h). B, T: the micro-batch (for the
 * all-gathered encoder gradient). */
GradSync *grad_sync_create(const ParamTable *t, const Dist *d, int zero1, int overlap, int bf16_wire,
                           size_t min_bucket, int B, int T, char *err);
void grad_sync_free(GradSync *gs);

/* Elements of the parameter and gradient buffers (the table's total rounded up to a multiple of
 * world; the padding stays zero). */
size_t grad_sync_padded_total(const GradSync *gs);
/* ZeRO-1: this rank's shard pieces and their total; without ZeRO-1 returns 0. */
int grad_sync_pieces(const GradSync *gs, const ShardPiece **pieces, size_t *shard_elems);
/* ZeRO-1: this rank's reduced gradients (shard_elems fp32, compact, in piece order); else NULL. */
float *grad_sync_grad_shard(const GradSync *gs);
/* ZeRO-1 on two ranks reducing after the backward on the fp32 wire: the reduce-scatter can read both
 * ranks' gradients itself (kernels/rank_sum.cu), in rank order, where they lie in memory from
 * dist_alloc_exchanged; 1 if the backend should allocate them there. The same on every rank. */
int grad_sync_wants_exchanged_grads(const GradSync *gs);
/* Given those gradients (the buffer grad_sync_finish will get): 1 if every rank now reduces by
 * reading the others' over NVLink, 0 if NCCL's reduce-scatter stays (ranks on several hosts, say).
 * Collective. On two ranks either gives the same bits: a sum of two is the same either way round. */
int grad_sync_read_peers(GradSync *gs, float *grads);
/* Device memory grad_sync itself allocates (bytes). Usable before creating: same arguments. */
size_t grad_sync_bytes(const ParamTable *t, const Dist *d, int zero1, int overlap, int bf16_wire, int B, int T);

/* Backward hooks for the last micro-batch of a step, in this order: AFTER_OUTPUT, AFTER_LNF,
 * AFTER_LAYER for l = L-1..0, then either grad_sync_encoder (when grad_sync_owns_encoder) or the
 * backend's own encoder backward followed by AFTER_ENCODER. */
void grad_sync_ready(GradSync *gs, SyncPoint p, int layer, float *grads, cudaStream_t main);
int grad_sync_owns_encoder(const GradSync *gs);
/* Adds every rank's token- and (where the family has one) position-embedding gradient of this micro-batch (from dres, the
 * residual-stream gradient [N, C], inputs [N] and positions [N] or NULL, backend.h: every rank passes
 * them or none) into grads, after the embedding bucket's reduction. */
void grad_sync_encoder(GradSync *gs, float *grads, const kbf16 *dres, const int *inputs, const int *positions,
                       cudaStream_t main);
/* After the last micro-batch: enqueues whatever was not (overlap off), then makes main wait for
 * the reduced gradients (in grads, or ZeRO-1: in grad_sync_grad_shard). */
void grad_sync_finish(GradSync *gs, float *grads, cudaStream_t main);
/* ZeRO-1, after the update: enqueues every rank's updated bf16 weights to every rank on the
 * communication stream, by the copy engines (dist_allgather_copy: params from dist_alloc_exchanged),
 * one bucket after another in the order the forward reads them; main goes on at once. */
void grad_sync_gather_weights(GradSync *gs, kbf16 *params, cudaStream_t main);
/* ZeRO-1: main waits for the gathered buckets the forward reads next, before layer `layer` (-1: the
 * embeddings; L: the final norm and an untied head): every bucket holding a value of that layer or
 * below. Each bucket is waited for once per gather; a no-op when nothing is pending or without ZeRO-1. */
void grad_sync_weights_ready(GradSync *gs, int layer, cudaStream_t main);
/* ZeRO-1: main waits for the whole gather (for readers and writers of the weights outside the forward). */
void grad_sync_weights_wait(GradSync *gs, cudaStream_t main);
/* ZeRO-1 state transfer: full (Ppad values on the device) <- every rank's shard, or shard <- full. */
void grad_sync_gather_shard(GradSync *gs, const float *shard, float *full, cudaStream_t main);
void grad_sync_scatter_shard(GradSync *gs, const float *full_host, float *shard, cudaStream_t main);
/* Milliseconds of the last step during which the main stream waited on communication: the
 * reduction not hidden by the backward, plus (ZeRO-1) main's waits for the weight gather between
 * the previous update and this reduction, which the forward (or an evaluation before it) paid.
 * Synchronizes with the reduction, not with the gather. */
double grad_sync_wait_ms(GradSync *gs);

#endif
