/* model/memory_estimate.h - what training a model takes in GPU memory, from its parameter table and
 * config alone (no GPU needed), counted as the CUDA backend lays out each family: bf16 weights, fp32
 * gradients, fp32 master weights and AdamW m, v (or bf16 m, v and no master: --optimizer-state
 * bf16) for every row of the table, and the activations a
 * micro-batch of B sequences of T tokens keeps for the backward plus the backward's buffers, each
 * rounded up to 256 bytes. The output layer's workspace, the kernels' scratch and the runtime's
 * reserve come on top (the CUDA backend counts the first two with its kernels;
 * MEMORY_RUNTIME_RESERVE is the third). */
#ifndef FUSEDGPT_MEMORY_ESTIMATE_H
#define FUSEDGPT_MEMORY_ESTIMATE_H

#include <stddef.h>

#include "model/backend.h" /* OptimizerState */
#include "model/gpt.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What cuBLAS, NCCL and the CUDA context take beside the model's buffers. */
#define MEMORY_RUNTIME_RESERVE ((size_t)1 << 30)

typedef struct {
    size_t weights;     /* bf16 */
    size_t master;      /* fp32 master weights (0 under bf16 state) */
    size_t grads;       /* fp32 */
    size_t adamw;       /* m and v, fp32 or bf16 */
    size_t activations; /* the micro-batch's activations and backward buffers, without kernel scratch */
} MemoryEstimate;

/* The estimate for micro-batches of B sequences of T tokens; recompute_mlp 1: GPT-2's GELU is
 * recomputed in the backward, not kept per layer, and with QK-norm (Qwen3, Gemma 3) the normed and
 * rotated q and k (the RoPE families always recompute their gated product); 2: the RoPE families'
 * gate/up rows too, by their GEMM (GPT-2 reads it as 1). */
MemoryEstimate memory_estimate(const ParamTable *t, int B, int T, int recompute_mlp, OptimizerState state);
/* Whether every layer's gated MLP runs on the products that carry its activation (kernels/gated_mlp_fits.h:
 * the weights' offsets into the flat buffer, which starts 256-byte aligned, give their alignment); 0 for
 * GPT-2's MLP. */
int gated_products_take_every_layer(const ParamTable *t);
/* All of it, in bytes (without the runtime's reserve). */
size_t memory_estimate_total(const MemoryEstimate *e);
/* The largest B whose estimate, plus `extra` bytes, fits in `bytes`; 0 when not even one sequence
 * does. */
int memory_estimate_largest_batch(const ParamTable *t, int T, int recompute_mlp, OptimizerState state, size_t extra,
                                  size_t bytes);

#ifdef __cplusplus
}
#endif

#endif
