/* kernels/output_layer.h - the output layer (tied projection + softmax cross-entropy) on the GPU,
 * two implementations behind one signature (G = 2 N V d FLOPs: one logits-sized GEMM):
 *   OUTPUT_FUSED      kernels/output_fused.cu: the N x V logits never exist in memory. Two exact
 *                     paths: chunks of rows whose scaled exponentials fit a budget (three GEMMs'
 *                     work, 3G, in the budget's memory), or, when the budget holds no row,
 *                     streaming over vocabulary tiles with the logits recomputed in the backward
 *                     (four GEMMs' work, 4G, in O(N) memory)
 *   OUTPUT_CANONICAL  kernels/output_canonical.cu: llm.c's way, logits [N x Vp] in bf16 (three
 *                     GEMMs' work): the baseline for comparisons
 *
 * Shapes: N rows (B*T tokens), d model width (a multiple of 64), V real vocabulary size. W is the
 * tied token embedding; the model pads it to Vp rows (a multiple of 128) but passes the real V:
 * only rows [0, V) of W are read, rows [0, V) of dW are written, padded columns get no mass.
 *
 *   H        bf16 [N x d] row-major (device)
 *   W        bf16 [V x d] row-major (device; row stride d)
 *   targets  int32 [N] (device), each -1 (ignored: no loss, no gradient, not counted) or in [0, V)
 *   loss     fp32 scalar (device): mean over the valid rows (0 when there are none) or their sum
 *   row_loss fp32 [N] (device, optional): per-row loss, 0 for ignored rows (reduction 'none')
 *   row_lse  fp32 [N] (device, optional): per-row log-sum-exp of the logits
 *   options  z-loss, logit soft-capping, label smoothing (kernels/output_kind.h; zeroed: none, and
 *            then every result is bitwise what it was without them). loss, row_loss and row_lse
 *            are those of the softcapped logits' cross-entropy; the gradients are the objective's
 *   objective    fp32 scalar (device, optional): the objective, reduced as the loss
 *   lse_reduced  fp32 scalar (device, optional): the valid rows' log-sum-exp, reduced as the loss
 *   dH       bf16 [N x d] (device): OVERWRITTEN with grad_scale * d(loss)/dH
 *   dW       fp32 [V x d] (device): grad_scale * d(loss)/dW is ADDED (+=), so micro-batches and the
 *            token-embedding gradient of the encoder accumulate into one buffer
 * "mean" divides by the number of valid targets, counted on the device (no host sync).
 *
 * Both layers, and both fused paths, are deterministic: the same inputs give bitwise the same loss
 * and gradients.
 * Every call is asynchronous on `stream`; nothing allocates after output_layer_create. One layer
 * object per (device, stream): calls on one object must not overlap (they share its workspace).
 *
 * Usage (trainer):
 *   OutputLayer *ol = output_layer_create(OUTPUT_FUSED, B*T, V, C,
 *                                        OUTPUT_FUSED_DEFAULT_BUDGET);      // once; NULL = bad args
 *   OutputLayerArgs a = {.H = lnf_out, .W = wte, .targets = d_targets, .N = B*T,
 *                        .reduction = OUTPUT_REDUCE_MEAN, .grad_scale = 1.0f / grad_accum_steps,
 *                        .loss = d_loss, .dH = d_lnf_out, .dW = d_wte_grad};
 *   output_layer_forward_backward(ol, &a, stream);   // training micro-step
 *   output_layer_forward(ol, &a, stream);            // evaluation: loss (and row_* if set) only
 *   output_layer_destroy(ol);
 * output_layer_workspace_bytes() gives what create allocates (for the memory table); it needs the
 * current CUDA device (it reads its multiprocessor count). */
#ifndef FUSEDGPT_OUTPUT_LAYER_H
#define FUSEDGPT_OUTPUT_LAYER_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/host_device.h"
#include "kernels/output_kind.h" /* OutputKind, OUTPUT_FUSED_DEFAULT_BUDGET */

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { OUTPUT_REDUCE_MEAN = 0, OUTPUT_REDUCE_SUM = 1 } OutputReduction;

typedef struct OutputLayer OutputLayer; /* opaque: cuBLASLt handle, cached plans, workspace */

typedef struct {
    const kbf16 *H;
    const kbf16 *W;
    const int32_t *targets;
    int64_t N;                 /* 1 <= N <= max_N given to create */
    OutputReduction reduction;
    float grad_scale;          /* extra multiplier on the gradients only (not on the loss) */
    float *loss;               /* required */
    float *row_loss, *row_lse; /* optional (NULL) */
    kbf16 *dH;                 /* forward_backward only */
    float *dW;                 /* forward_backward only */
    OutputLossOptions options; /* zeroed: the plain cross-entropy */
    float *objective, *lse_reduced; /* optional (NULL) */
} OutputLayerArgs;

/* Rows per chunk of the fused layer's scaled-exponential path for this budget in bytes: as many as
 * fit, at most max_N; 0 when not one row fits, and then the streaming path runs (budget 0 asks for
 * it). */
int64_t output_layer_chunk_rows(int64_t max_N, int64_t V, size_t budget);

/* Bytes of device memory output_layer_create(kind, max_N, V, d, budget) allocates beyond the
 * caller's tensors; 0 with a message on stderr for invalid arguments. Fused: O(max_N) floats, plus
 * the chunk of output_layer_chunk_rows rows (about the budget) or, on the streaming path, a fixed
 * window workspace independent of V; canonical: the bf16 logits [max_N x Vp] dominate. */
size_t output_layer_workspace_bytes(OutputKind kind, int64_t max_N, int64_t V, int d, size_t budget);

/* NULL with a message on stderr when d is not a positive multiple of 64, V < 1 or max_N < 1.
 * budget: the fused layer's chunk of scaled exponentials in bytes (see output_layer_chunk_rows);
 * the canonical layer ignores it. */
OutputLayer *output_layer_create(OutputKind kind, int64_t max_N, int64_t V, int d, size_t budget);
void output_layer_destroy(OutputLayer *layer);

/* Rows per chunk of the fused layer's scaled-exponential path; 0 for the streaming path (and for
 * the canonical layer). */
int64_t output_layer_fused_chunk_rows(const OutputLayer *layer);

/* 0 on success; -1 with a message on stderr for invalid arguments (nothing is launched). The
 * forward alone (evaluation) runs the fused layer's streaming statistics (one GEMM's work) whatever
 * the path. With soft-capping and label smoothing both set, the fused layer's forward_backward
 * runs the streaming path whatever the budget (kernels/output_fused.cu says why). */
int output_layer_forward(OutputLayer *layer, const OutputLayerArgs *args, cudaStream_t stream);
int output_layer_forward_backward(OutputLayer *layer, const OutputLayerArgs *args, cudaStream_t stream);

const char *output_layer_kind_name(OutputKind kind); /* "fused" / "canonical" */

/* ---- over a vocabulary slice (the vocabulary-parallel layer; its CPU reference and the algorithm:
 * model/cpu/vocab_parallel_cpu.h) -----------------------------------------------------------------
 * A fused layer created with V = Vs, the slice's real words, and budget 0 (the streaming path) runs
 * over W's rows [0, Vs), which are the words [v0, v0 + Vs) of the whole vocabulary (the slice's
 * padding rows are never read); the targets stay whole-vocabulary ids, and those outside the slice
 * take no target logit and no one-hot. Every rank passes all N rows (the gathered H and targets),
 * so the valid count, and with it the mean, is the global one. The plain cross-entropy only (no
 * loss options).
 *   1. output_slice_forward: per row, the slice's statistics in stats [3 x N]: k (an integer in
 *      log2 units), s = sum over the slice of 2^(z log2(e) - k), and the target logit when the slice
 *      holds the target, else 0.
 *   2. gather every rank's stats in rank order ([R x 3 x N], an all-gather's result) and
 *      output_slices_combine: per row K = max k_r, S = sum over r in rank order of s_r 2^(k_r - K)
 *      (powers of two: exact), lse = (K + log2 S) ln 2, loss = lse - the target logit (exactly one
 *      slice's, the others add 0). The same bits on every rank, since each combines the same inputs
 *      in the same order.
 *   3. output_slice_backward from every row's lse: dH (fp32 [N x d], OVERWRITTEN) gets this
 *      slice's part of grad_scale d(loss)/dH, to be summed over the ranks (a reduce-scatter); dW
 *      (fp32 [Vs x d]) gets its rows' gradient ADDED. Streaming path (four GEMMs' work over the
 *      slice: the backward recomputes the logits from lse), deterministic. */
typedef struct {
    const kbf16 *H;          /* [N x d] every rank's rows */
    const kbf16 *W;          /* [Vs x d] the slice's rows */
    const int32_t *targets;  /* [N] whole-vocabulary ids, or -1 (ignored) */
    int64_t N;               /* 1 <= N <= max_N */
    int64_t v0;              /* the slice's first word */
    OutputReduction reduction;
    float grad_scale;        /* as in OutputLayerArgs */
    float *stats;            /* forward: [3 x N] */
    const float *lse;        /* backward: [N] every row's log-sum-exp over the whole vocabulary */
    float *dH;               /* backward: fp32 [N x d], overwritten */
    float *dW;               /* backward: fp32 [Vs x d], added to */
} OutputSliceArgs;

/* 0 on success; -1 with a message on stderr for invalid arguments (nothing is launched). */
int output_slice_forward(OutputLayer *layer, const OutputSliceArgs *args, cudaStream_t stream);
/* gathered: [R x 3 x N] the ranks' stats; lse [N] (every row's, as row_lse) and loss (mean or sum
 * as args->reduction) written; args->stats, lse, dH, dW unused */
int output_slices_combine(OutputLayer *layer, const OutputSliceArgs *args, const float *gathered, int R, float *lse,
                          float *loss, cudaStream_t stream);
int output_slice_backward(OutputLayer *layer, const OutputSliceArgs *args, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
