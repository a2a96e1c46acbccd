/* model/cpu/output_layer_cpu.h - the two output layers on the CPU, fp32: canonical (materialized
 * logits, softmax-cross-entropy) and fused (streams over vocabulary tiles keeping a running max,
 * running sum and the target logit per row; the backward recomputes each tile from the saved
 * log-sum-exp). Same inputs and meaning as the CUDA layers in kernels/output_layer.h.
 *
 * H [N, C] hidden states, W [V(p), C] output weights (only the first V rows are read: padded rows
 * get no probability mass), targets [N] with -1 = ignored. Per valid row: loss = lse(W·h) − w_y·h.
 * With dH/dW set, the gradient of grad_scale·Σ loss is ADDED into them:
 *   dH += grad_scale·(P − Y)·W,   dW += grad_scale·(P − Y)^T·H. */
#ifndef FUSEDGPT_OUTPUT_LAYER_CPU_H
#define FUSEDGPT_OUTPUT_LAYER_CPU_H

#include <stddef.h>

typedef struct {
    const float *H;
    const float *W;
    const int *targets;
    int N, C, V;
    float grad_scale;
    float *dH, *dW;  /* both NULL: loss only */
    float *losses;   /* [N]: per-row loss, 0 for ignored rows (summed in row order afterwards, so the
                      * total does not depend on the thread count) */
} OutputLayerCpu;

/* Rows whose target is not -1. */
int output_layer_count_valid(const int *targets, int N);

/* Return the sum of the valid rows' losses. Workspaces: canonical needs N·V floats (the logits
 * it exists to avoid); fused needs 2·N floats (lse and target logit per row). */
double output_layer_canonical_cpu(const OutputLayerCpu *a, float *logits);
double output_layer_fused_cpu(const OutputLayerCpu *a, float *row_stats);

size_t output_layer_canonical_cpu_workspace(int N, int V);
size_t output_layer_fused_cpu_workspace(int N);

#endif
