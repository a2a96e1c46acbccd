/* model/cpu/output_layer_cpu.h - the two output layers on the CPU, fp32: canonical (materialized
 * logits, softmax-cross-entropy) and fused (streams over vocabulary tiles keeping a running max,
 * running sum and the target logit per row; the backward recomputes each tile from the saved
 * log-sum-exp). Same inputs and meaning as the CUDA layers in kernels/output_layer.h.
 *
 * H [N, C] hidden states, W [V(p), C] output weights (only the first V rows are read: padded rows
 * get no probability mass), targets [N] with -1 = ignored. Per valid row: loss = lse(W·h) − w_y·h.
 * With dH/dW set, the gradient of grad_scale·Σ loss is ADDED into them:
 *   dH += grad_scale·(P − Y)·W,   dW += grad_scale·(P − Y)^T·H.
 * With loss options (kernels/output_kind.h) the loss is the cross-entropy of the softcapped logits
 * and the gradients are the objective's. */
#ifndef FUSEDGPT_OUTPUT_LAYER_CPU_H
#define FUSEDGPT_OUTPUT_LAYER_CPU_H

#include <stddef.h>

#include "kernels/output_kind.h" /* OutputLossOptions */

typedef struct {
    const float *H;
    const float *W;
    const int *targets;
    int N, C, V;
    float grad_scale;
    float *dH, *dW;  /* both NULL: loss only */
    float *losses;   /* [N]: per-row loss, 0 for ignored rows (summed in row order afterwards, so the
                      * total does not depend on the thread count) */
    OutputLossOptions opt; /* zeroed: the plain cross-entropy */
    float *objectives;     /* [N] optional: per-row objective, 0 for ignored rows */
    float *lses;           /* [N] optional: per-row log-sum-exp of the (softcapped) logits, 0 if ignored */
} OutputLayerCpu;

/* Rows whose target is not -1. */
int output_layer_count_valid(const int *targets, int N);

/* Return the sum of the valid rows' losses (cross-entropies). Workspaces: canonical needs N·V floats (the logits
 * it exists to avoid); fused needs 2·N floats (lse and target logit per row). */
double output_layer_canonical_cpu(const OutputLayerCpu *a, float *logits);
double output_layer_fused_cpu(const OutputLayerCpu *a, float *row_stats);

/* The fused layer's two passes, for a layer whose W holds a contiguous range of the vocabulary
 * (a slice of the vocabulary-parallel layer, model/cpu/vocab_parallel_cpu.h): W's rows are the
 * words [vocab_offset, vocab_offset + V), while targets stay whole-vocabulary ids. The whole layer
 * is the range at offset 0.
 * Row stats: for row n (not ignored) over W's rows, the max logit, the sum of exp(logit − max), and
 * the target's logit when the target is one of W's rows (else 0); no rows (V = 0): −∞, 0, 0. Logits
 * are softcapped when a->opt says so.
 * Backward: with every valid row's final log-sum-exp, adds this range's part of dH (all N rows)
 * and its rows of dW; label smoothing's uniform term uses full_V, the whole real vocabulary. */
void output_fused_row_stats_cpu(const OutputLayerCpu *a, int vocab_offset, int n, float *max, double *sum,
                                float *target_logit);
void output_fused_backward_cpu(const OutputLayerCpu *a, int vocab_offset, int full_V, const float *lse);

size_t output_layer_canonical_cpu_workspace(int N, int V);
size_t output_layer_fused_cpu_workspace(int N);

#endif
