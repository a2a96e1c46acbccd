/* model/backend.h - what the training loop asks of a backend (CPU reference or CUDA).
 *
 * A backend owns the parameters (fp32 master copy), their gradients, the AdamW moments and the
 * activations for micro-batches of B sequences of T tokens. Inputs and targets are int32 [B, T];
 * a target of -1 is ignored. All host-visible arrays below are fp32 in the parameter table's
 * layout (model/gpt.h). */
#ifndef FUSEDGPT_BACKEND_H
#define FUSEDGPT_BACKEND_H

#include <stddef.h>

#include "kernels/output_kind.h" /* OutputKind: the output layer, fused or canonical */
#include "model/gpt.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    float lr;
    float beta1, beta2, eps;
    float weight_decay; /* applied to tensors whose table entry says so */
    float grad_scale;   /* multiplies every gradient first (global-norm clipping) */
    int step;           /* 1-based, for bias correction */
} AdamWStep;

/* Where AdamW keeps its state (--optimizer-state). FP32: fp32 master weights and moments beside the
 * bf16 weights the step reads. BF16: moments in bf16 and no master copy, each of the three rounded
 * stochastically after the update (kernels/adamw_bf16.h): 8 bytes a parameter less. The CPU
 * backend then holds its weights at bf16 values, as the GPU does. */
typedef enum { OPTIMIZER_STATE_FP32, OPTIMIZER_STATE_BF16 } OptimizerState;

/* One line of the start-up memory table. */
typedef struct {
    const char *what;
    size_t bytes;
    int informational; /* shown for comparison, not allocated, not in the total */
} MemoryItem;

#define MAX_MEMORY_ITEMS 16

typedef struct Backend Backend;

typedef struct {
    /* Forward and backward of one micro-batch; gradients are ADDED, scaled so that the gradient of
     * (mean loss over valid targets)·loss_scale results (after reduce_grads: averaged over the
     * data-parallel ranks). last: the step's last micro-batch, whose backward may already start
     * reducing gradients across ranks. Returns the micro-batch's mean loss.
     * positions: NULL, each sequence one document; or int32 [B, T], each token's position in its
     * document, the sequences being documents packed end to end (0 at each document's first token):
     * then every document is its own sequence, as if run alone. Its tokens attend only to each other
     * and take their positions from it (RoPE's rotation, GPT-2's position embedding). */
    float (*train_micro_step)(Backend *be, const int *inputs, const int *targets, const int *positions,
                              float loss_scale, int last);
    /* Forward only; returns the mean loss over valid targets (0 if none). positions as above. */
    float (*eval_loss)(Backend *be, const int *inputs, const int *targets, const int *positions);
    /* The per-token losses of the last eval_loss or train_micro_step, [B·T] in row order: each
     * target's cross-entropy (of the softcapped logits when the model caps them), 0 where the
     * target is ignored. */
    void (*row_losses)(Backend *be, float *out);
    /* Forward of tokens [B, T] and the full-vocabulary logits (V of them) of sequence 0 at
     * position pos: the whole window recomputed, the reference the cached decoding below is
     * tested against. */
    void (*logits_at)(Backend *be, const int *tokens, int pos, float *logits);
    /* Sampling with a key/value cache, in sequence 0's rows of the activations: each layer's qkv
     * rows keep the keys and values of the tokens so far (so the cache costs no memory of its
     * own, and a training or eval step in between overwrites it: prefill again after one).
     * prefill runs tokens[0..n) (1 <= n <= T) through the model and writes the logits of the
     * token after them; decode_step runs one token at position pos (the tokens before it filled
     * positions 0..pos-1, 1 <= pos < T), attending to the cached rows, and writes the logits of
     * the token after it. The logits are those of logits_at over the same tokens, to rounding. */
    void (*prefill)(Backend *be, const int *tokens, int n, float *logits);
    void (*decode_step)(Backend *be, int token, int pos, float *logits);
    void (*zero_grad)(Backend *be);
    /* Averages the parameter gradients across data-parallel ranks (be->dist); a no-op for one. */
    void (*reduce_grads)(Backend *be);
    /* Milliseconds of the last step spent waiting on communication (0 for one rank). */
    double (*comm_wait_ms)(Backend *be);
    /* Sum of squares of all parameter gradients (the caller takes the root and clips). */
    double (*grad_sumsq)(Backend *be);
    void (*adamw_update)(Backend *be, const AdamWStep *s);
    /* Copies of the master weights and moments, in table layout, to/from the host in fp32 (bf16
     * state: its values widened, and written values rounded to nearest). With
     * data parallelism every rank must call both (ZeRO-1 gathers/scatters the shards); read_state
     * may then get NULL pointers on ranks that do not want the values, and both may overwrite the
     * gradients (call them between steps). */
    void (*read_state)(Backend *be, float *params, float *m, float *v);
    void (*write_state)(Backend *be, const float *params, const float *m, const float *v);
    /* Host copy of the parameter gradients (tests). */
    void (*read_grads)(Backend *be, float *grads);
    /* Lines for the start-up memory table; returns how many were written. */
    int (*memory_items)(Backend *be, MemoryItem *items);
    /* Bytes of device memory in use now (0 on the CPU). */
    size_t (*memory_in_use)(Backend *be);
    /* GPU milliseconds of the body's forward, the output layer (forward and backward) and the body's
     * backward since the last call, summed over micro-steps (NULL on the CPU). */
    void (*phase_ms)(Backend *be, double ms[3]);
    void (*destroy)(Backend *be);
} BackendOps;

struct Backend {
    const BackendOps *ops;
    const ParamTable *table;
    int B, T;
    OutputKind output;
    OptimizerState optimizer_state;
    double peak_flops;       /* dense bf16 FLOP/s of the device, for MFU (0: not reported) */
    const char *peak_source; /* where peak_flops comes from, for the run header ("published", ...) */
    const struct Dist *dist; /* data-parallel group (model/dist/dist.h); NULL: alone */
    char device_name[128];
    char output_path[192]; /* how the output layer runs, for the run header ("" : just its kind) */
    char grad_reduce_path[96]; /* how the ranks' gradients are summed, for the run header ("": NCCL's collectives) */
    /* The objective's terms beyond the cross-entropy (kernels/output_kind.h), 0 at creation: set
     * them before a step. The logit soft-cap is the model's (table->cfg.logit_softcap). */
    float z_loss, label_smoothing;
    /* What the last eval_loss or train_micro_step measured beside the mean loss it returned, both
     * means over the valid targets: the objective the gradients are of, and the log-sum-exp. */
    float last_objective, last_mean_lse;
};

/* The output layer's options for a backend's model and objective. */
static inline OutputLossOptions backend_loss_options(const Backend *be) {
    OutputLossOptions o = {be->z_loss, be->table->cfg.logit_softcap, be->label_smoothing};
    return o;
}

/* CPU reference backend; params init's values where init is given (fp32 in the table's layout, as
 * write_state takes them: a checkpoint's, or Hugging Face weights), else initialised from seed; at
 * bf16 values under OPTIMIZER_STATE_BF16. AdamW's moments start at zero. NULL + err on failure
 * (allocation). */
Backend *backend_cpu_create(const ParamTable *table, int B, int T, OutputKind output, OptimizerState state,
                            unsigned long long seed, const float *init, char *err);

/* The bytes such a backend touches: the weights, activations, the output layer's workspace, and for
 * training (training = 1) the gradients and AdamW's moments too. Callers compare it with the host's
 * free memory first (host_memory_short), since Linux lets the allocations succeed regardless. */
double backend_cpu_bytes(const ParamTable *table, int B, int T, OutputKind output, int training);

/* How a CUDA backend takes part in data parallelism. */
typedef struct {
    const struct Dist *dist; /* NULL or a world of one: alone */
    int zero1;   /* shard master weights, AdamW moments and reduced gradients across ranks */
    int overlap; /* reduce gradients bucket by bucket during the backward (else after it) */
    size_t bucket_bytes; /* fp32 gradient bytes per bucket at least (layers merge; 0: per layer) */
    int bf16_wire;       /* each rank's gradients cross rounded once to bf16, summed in fp32
                          * (--grad-reduce bf16, model/dist/grad_sync.h); else fp32 collectives */
    int vocab_parallel;  /* split lm_head by vocabulary rows over dist's ranks (model/dist/vocab_parallel.h);
                          * in a world of one the single slice is the whole head */
} DataParallel;

/* CUDA backend on the current device: bf16 weights and activations, fp32 gradients, AdamW's state as
 * `state` says; params init's values where init is given, else initialised from seed exactly as the
 * CPU backend's (AdamW's moments at zero either way). dp NULL: alone.
 * fused_budget: bytes for the fused layer's chunks of scaled exponentials (kernels/output_layer.h;
 * 0: the streaming path). Where the GPU lacks the room, the chunk shrinks to what is free once
 * everything else is allocated, and when that holds fewer than min(B*T, 1024) rows the streaming
 * path runs instead (it is then the faster of the two); output_path says which.
 * recompute_gelu 1: the backward recomputes GELU instead of reading its stored output (4·C fewer
 * values per token; the RoPE families always recompute their gated product), and with QK-norm the
 * normed and rotated q, k (one RoPE pass a layer; (NH + 2·NKV)·hd fewer); 2: the RoPE families also
 * recompute their gate/up rows by the GEMM (2·F fewer, one GEMM per layer more; GPT-2 reads it as
 * 1). Where the activations would not fit, the backend takes the next level, then the one after.
 * NULL + err (one line) when the configuration is unsupported or will not fit in the GPU's free
 * memory (the message then gives the estimate and the largest micro-batch that would fit). */
Backend *backend_cuda_create(const ParamTable *table, int B, int T, OutputKind output, size_t fused_budget,
                             int recompute_gelu, OptimizerState state, unsigned long long seed,
                             const float *init, const DataParallel *dp, char *err);

#ifdef __cplusplus
}
#endif

#endif
