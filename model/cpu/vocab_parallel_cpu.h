/* model/cpu/vocab_parallel_cpu.h - the vocabulary-parallel output layer on the CPU, fp32, over R
 * simulated ranks in one process: the reference that a multi-GPU version (NCCL between processes)
 * is checked against, and exact against the unsplit layer (model/cpu/output_layer_cpu.h) to fp32
 * rounding.
 *
 * Shapes: R ranks; rank r holds N_r rows of hidden states and targets (any N_r >= 0), N = Σ N_r;
 * C model width; V real vocabulary, Vp >= V the padded one (W's rows).
 *
 * Split. Rank r owns a contiguous slice of W's Vp rows, Vp split as evenly as possible (the first
 * Vp mod R ranks one row more; with Vp a multiple of 128 and R in 1, 2, 4, 8 every slice has the
 * same size, which is what NCCL's equal-count collectives want). The padding rows [V, Vp) fall in
 * the last slices: they are never read, so they never win the max nor take probability mass, and
 * their dW rows are never written (zero gradient). A rank keeps W, dW and the AdamW moments of its
 * slice only.
 *
 * Algorithm (one rank's view; every step is a call below, so a multi-GPU version makes the same
 * calls on its own buffers):
 *   1. all-gather H and the targets: each rank sees all N rows, in rank order.
 *   2. over its slice, for all N rows: running max m_r, sum of exp(z − m_r) s_r, and the target
 *      logit when the target lies in the slice (else 0): model/cpu/output_layer_cpu.h's fused row
 *      statistics, on a slice with the target offset by the slice's first word.
 *   3. all-reduce max of m_r: M. Rescale s_r ← s_r·exp(m_r − M) (a slice's sum is relative to ITS
 *      max; without this step a row whose max lies in another slice gets a wrong lse), then
 *      all-reduce sum of [s_r | target logit]: S and z_y (the owner adds its logit, the others 0,
 *      so z_y is exact). lse = M + log S, loss = lse − z_y, identical on every rank.
 *   4. with that lse, dZ = softmax − onehot over the slice: dW of the slice (all N rows, local, no
 *      communication) and the slice's partial dH for all N rows, reduce-scattered (summed over the
 *      slices) so that each rank gets its own rows' dH.
 * Communication per step and rank: the gathered H (N·C), three floats per row (max, then sum and
 * target logit), and the reduce-scatter of the partial dH (N·C); the logits never travel.
 *
 * Tied or untied W: the layer is the same. dW is ADDED into (as in the unsplit CPU layer), so a
 * tied head passes the slice of the token embedding's gradient and the encoder's backward adds its
 * part there too (for the rows of the slice); an untied head passes its own gradient's slice.
 *
 * W-related memory per rank, with Vs = Vp/R rows per slice (⌈Vp/R⌉ at most):
 *   CPU (fp32 W, dW, AdamW m, v):                   16·Vs·C bytes (unsplit: 16·Vp·C).
 *   CUDA (bf16 W, fp32 master, dW, m, v):           18·Vs·C bytes (unsplit: 18·Vp·C; ZeRO-1 alone:
 *                                                   6·Vp·C + 12·Vp·C/R, since it keeps W and dW whole).
 *   At V = 262144 (Vp = V), C = 768: 3.62 GB unsplit, 1.81 GB per rank at R = 2, 0.45 GB at R = 8.
 * What it costs instead: per rank the gathered H and the partial dH, 2·N·C floats, which grow with
 * R at a fixed rows per rank (plus 6 floats per row of statistics). */
#ifndef FUSEDGPT_VOCAB_PARALLEL_CPU_H
#define FUSEDGPT_VOCAB_PARALLEL_CPU_H

#include <stddef.h>

/* Simulated ranks in one process (tests and the CPU reference); a multi-GPU world is model/dist's. */
#define VOCAB_PARALLEL_MAX_RANKS 64

/* Rank r's rows of the padded vocabulary: [begin, begin + rows), of which the first `real` are
 * words (begin + real <= V) and the rest padding. */
typedef struct {
    int begin, rows, real;
} VocabSlice;

VocabSlice vocab_slice(int V, int Vp, int R, int r);

/* Collectives among R simulated ranks: element [r] of each array is rank r's buffer, and each call
 * leaves the ranks' buffers as the NCCL call of the same name leaves them when all R ranks make it
 * at once. Counts are in elements and may differ between ranks (an all-gather "v" and a
 * reduce-scatter "v"). Reductions run in rank order, so every rank gets bitwise the same result. */
void vp_all_gather(int R, const void *const *send, const size_t *counts, size_t elem_bytes, void *const *recv);
void vp_all_reduce_max(int R, float *const *buf, size_t count);
void vp_all_reduce_sum(int R, float *const *buf, size_t count);
/* send[r] holds Σ counts elements; rank r receives the sum over ranks of its part (the elements
 * after the parts of ranks 0..r−1). */
void vp_reduce_scatter_sum(int R, const float *const *send, const size_t *counts, float *const *recv);

/* A tied head's token embedding over the slices (the CUDA version is kernels/kernels.h
 * encoder_slice_*, which also adds GPT-2's position rows where the slice holds the token; here the
 * caller adds them; model/dist/vocab_parallel.h runs it): each rank all-gathers the tokens, and for
 * all N of them writes out[n] = W_slice[inp[n] − begin]·scale where its slice holds inp[n], else 0,
 * so that the ranks' parts reduce-scattered (vp_reduce_scatter_sum) are each rank's rows of the
 * whole lookup exactly (one term plus zeros). The backward all-gathers every rank's d(embedding)
 * [N x C] and each rank adds scale·dout[n] into dW_slice[inp[n] − begin] for its slice's tokens
 * but pad (a whole-vocabulary id; < 0: none), n in increasing order: side by side the slices are
 * the whole embedding's gradient bitwise. */
void vocab_parallel_embed_cpu(float *out, const int *inp, const float *W_slice, VocabSlice s, float scale, size_t N,
                              int C);
void vocab_parallel_embed_backward_cpu(float *dW_slice, const float *dout, const int *inp, VocabSlice s, float scale,
                                       int pad, size_t N, int C);

/* What every rank shares. */
typedef struct {
    int R, V, Vp, C;
    int mean;         /* 1: the loss is the mean over every rank's valid rows (0 when there are none)
                       * and the gradients are those of the mean; 0: the sum */
    float grad_scale; /* extra multiplier on the gradients only (not on the loss) */
} VocabParallelCpu;

/* One rank's buffers, each with one meaning (N = all ranks' rows). */
typedef struct {
    float *H;          /* [N x C] every rank's hidden states, in rank order (all-gathered) */
    int *targets;      /* [N] likewise */
    float *slice_max;  /* [N] max logit of this rank's slice per row */
    float *max;        /* [N] max logit of the whole vocabulary per row (all-reduced) */
    float *sums;       /* [2N] sum of exp(z − max) over this slice, then the target logit when this
                        * slice holds it; after the all-reduce, over the whole vocabulary */
    float *lse;        /* [N] log-sum-exp of each row's logits (0 for ignored rows) */
    float *losses;     /* [N] each row's loss (0 for ignored rows) */
    float *dH_partial; /* [N x C] this slice's part of every row's dH */
    float *dH_own;     /* [N_r x C] the reduce-scatter's result: the whole dH of this rank's rows */
} VocabParallelWork;

/* 0, or -1 with one line in err (ERR_LEN bytes, common/err.h) when memory runs out; free releases
 * what alloc made (also after a failed alloc). */
int vocab_parallel_work_alloc(VocabParallelWork *w, int N, int N_rank, int C, char *err);
void vocab_parallel_work_free(VocabParallelWork *w);

typedef struct {
    const float *H;     /* [N_r x C] this rank's rows */
    const int *targets; /* [N_r], each -1 (ignored) or a word in [0, V) */
    int N;              /* N_r */
    const float *W;     /* [slice.rows x C]: W's rows of this rank's slice */
    float *dH;          /* [N_r x C]: the gradient of grad_scale·loss is ADDED; NULL with dW: loss only */
    float *dW;          /* [slice.rows x C] likewise; padding rows get nothing */
    double loss;        /* out: the sum or the mean, bitwise the same on every rank */
    VocabParallelWork work;
} VocabParallelRank;

/* Runs the layer over p->R ranks, ranks[r] being rank r's part (work allocated for N = Σ N_r).
 * 0, or -1 with one line in err for invalid shapes or targets (nothing is written then). */
int vocab_parallel_cpu(const VocabParallelCpu *p, VocabParallelRank *ranks, char *err);

#endif
