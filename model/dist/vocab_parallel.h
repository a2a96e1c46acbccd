/* model/dist/vocab_parallel.h - the vocabulary-parallel output layer of the CUDA backend
 * (`--vocab-parallel`): each of R ranks keeps a contiguous slice of the head's Vp rows (bf16 weights,
 * fp32 master, gradient and AdamW m, v: W-related memory divided by R), outside the data-parallel
 * gradient buckets. The head is lm_head (untied) or the token embedding (tied: GPT-2, Qwen3, Llama
 * 3.2, Gemma 3), whose slice is then both the layer's W and the embedding's rows, and no rank keeps
 * the whole table. The algorithm, its split and its reference over simulated ranks are
 * model/cpu/vocab_parallel_cpu.h; the slice layer is kernels/output_layer.h's output_slice_*.
 *
 * Shapes: N rows per rank (B·T), NT = R·N rows in all, C model width, Vs = Vp/R rows per slice.
 * One step, every rank in lockstep: all-gather H (bf16 [N, C]) and the targets, the slice's
 * statistics of all NT rows, all-gather them, combine them in rank order (the same bits on every
 * rank), the slice's backward from the combined lse (dW of the slice local, no reduction), and the
 * fp32 partial dH [NT, C] reduce-scattered back to each rank's rows, then rounded once to bf16.
 * The loss is the mean over the valid targets of all NT rows; with as many valid targets on every
 * rank (every batch from token shards) that is data parallelism's mean of the ranks' means, and so
 * are the gradients: dH and dW come at loss_scale, not loss_scale/R.
 *
 * Tied head, the embedding (kernels/kernels.h encoder_slice_*): the tokens are all-gathered as the
 * targets are, each rank writes for all NT rows its slice's rows (scaled, plus the position's wpe
 * row for GPT-2) and zeros at the others' tokens, and the [NT, C] bf16 rows are reduce-scattered
 * back to each rank's N: one rank's row plus zeros, the whole table's lookup bitwise. Its backward
 * all-gathers every rank's d(embedding) [N, C] -> [NT, C] and adds each of the slice's tokens' rows
 * into the slice's gradient (sorted, deterministic; Gemma's scale, and no gradient to the pad
 * row), the gradient the output layer's dW adds into too. The position table (GPT-2's wpe) stays
 * data parallel. What it costs: two more [NT, C] bf16 collectives a micro-batch (the embeddings'
 * reduce-scatter, the d(embedding) all-gather) and NT tokens, where data parallelism all-reduces
 * the whole table's fp32 gradient (Vp·C values) once a step. Untied, the embedding stays data
 * parallel and only lm_head is split.
 * Plain cross-entropy only: the slice layer takes no loss options.
 * In a world of one (d->world 1, no communicator) the collectives are copies: one slice, the whole
 * vocabulary, which the GPU tests hold against the unsplit layer. */
#ifndef FUSEDGPT_VOCAB_PARALLEL_H
#define FUSEDGPT_VOCAB_PARALLEL_H

#include <cuda_runtime.h>

#include "kernels/kernels.h"
#include "model/backend.h"
#include "model/dist/dist.h"
#include "model/dist/vocab_parallel_plan.h"
#include "model/gpt.h"

typedef struct VocabParallel VocabParallel;

/* NULL with a one-line reason in err when vocab_parallel_check refuses, or on allocation failure.
 * state: the slice's AdamW state, as the backend's (fp32 master and moments, or bf16 moments). */
VocabParallel *vocab_parallel_create(const ParamTable *t, const Dist *d, int N, OptimizerState state, char *err);
void vocab_parallel_free(VocabParallel *vp);
/* Device bytes vocab_parallel_create allocates (the fit check, the memory table); 0 when it would
 * refuse. */
size_t vocab_parallel_bytes(const ParamTable *t, int world, int N, OptimizerState state);

/* The output layer over the slice. H [N, C] and targets [N] are this rank's rows; loss (device, =)
 * the mean over every rank's valid targets. dH NULL: forward only (evaluation); else dH (bf16
 * [N, C], =) and the slice's gradient (+=) at loss_scale. Exits with a message when the layer
 * rejects its arguments. */
void vocab_parallel_output(VocabParallel *vp, const kbf16 *H, const int *targets, float loss_scale, kbf16 *dH,
                           float *loss, cudaStream_t s);
/* 1 when the slice is a tied head's, the token embedding's rows too. */
int vocab_parallel_tied(const VocabParallel *vp);
/* Tied head: out (bf16 [N, C], =) the embedding of this rank's N tokens (inputs [N], sequences of
 * T), wte·scale (+ wpe[t] unless wpe NULL), bitwise encoder_forward's. Every rank calls it. */
void vocab_parallel_embed(VocabParallel *vp, kbf16 *out, const int *inputs, const kbf16 *wpe, int T, cudaStream_t s);
/* Its backward, after the output layer's in the same micro-step: dout (bf16 [N, C], this rank's
 * d(embedding)) of every rank into the slice's gradient (+=). */
void vocab_parallel_embed_backward(VocabParallel *vp, const kbf16 *dout, cudaStream_t s);

/* Mean log-sum-exp over the valid targets of the last vocab_parallel_output (synchronizes). */
float vocab_parallel_mean_lse(VocabParallel *vp, cudaStream_t s);

void vocab_parallel_zero_grad(VocabParallel *vp, cudaStream_t s);
/* Σ over every rank's slice of its gradient's squares (the slices are disjoint: each summed once);
 * sumsq: one device double, scratch: global_sumsq_scratch_bytes(). Synchronizes. */
double vocab_parallel_grad_sumsq(VocabParallel *vp, double *sumsq, void *scratch, cudaStream_t s);
void vocab_parallel_adamw(VocabParallel *vp, const AdamWStep *st, cudaStream_t s);

/* Host copies of the whole head [Vp, C] (the table's row, fp32, in the whole table's layout): read
 * gathers every rank's slice (every rank calls it; NULLs skip a copy, for ranks that do not want
 * it), write takes this rank's slice (the bf16 weights from params) and zeroes its gradient.
 * read_grads gathers the gradient. */
void vocab_parallel_read(VocabParallel *vp, float *params, float *m, float *v, cudaStream_t s);
void vocab_parallel_write(VocabParallel *vp, const float *params, const float *m, const float *v, cudaStream_t s);
void vocab_parallel_read_grads(VocabParallel *vp, float *grads, cudaStream_t s);

/* The memory table's lines; returns how many (2). */
int vocab_parallel_memory_items(const VocabParallel *vp, MemoryItem *items);
/* "rows [a, b) of Vp on each of R ranks", for the run header. */
void vocab_parallel_describe(const VocabParallel *vp, char *out, size_t n);

#endif
