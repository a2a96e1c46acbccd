/* kernels/output_layer_internal.h - what output_layer.cu (the public entry points, the layer object,
 * its GEMMs and the small reductions) shares with output_fused.cu and
 * output_canonical.cu. Not for use outside kernels/output_*. */
#ifndef FUSEDGPT_OUTPUT_LAYER_INTERNAL_H
#define FUSEDGPT_OUTPUT_LAYER_INTERNAL_H

#include <cublasLt.h>
#include <cuda_bf16.h>

#include "kernels/lt_plans.h"
#include "kernels/output_layer.h"

/* cuBLASLt's own scratch: cuBLAS recommends 32 MiB on Hopper, but 8, 4, 2 and 1 MiB measured as
 * fast for every GEMM of both layers at the benchmark's shapes (dev/RESULTS.md, output layer); the
 * algorithms the heuristic picks for the fused backward use none of it
 * (dev/profile/lt_algo_probe.cu) */
#define OUTL_LT_WORKSPACE (1u << 20)

/* Sizes of the fused layer's workspace for up to max_N rows (one function so that
 * output_layer_workspace_bytes and create agree). */
typedef struct {
    int64_t stats_elems;  /* forward: per-window running max and sum, [windows][rows] each */
    /* scaled-exponential path (exp_rows > 0): chunks of at most exp_rows rows */
    int64_t exp_rows;     /* rows per chunk; 0: the streaming path runs the backward */
    int64_t exp_ld;       /* row stride of E: V rounded up to a whole tile (256) */
    int64_t exp_tiles;    /* vocabulary tiles per row: partial sums per row */
    /* streaming backward: its own dZ window (exp_rows == 0), or, when the loss options send a
     * chunked layer down the streaming path, the chunk's buffers: dZ in E, dH in its fp32 E W */
    int64_t chunk_rows;   /* rows per chunk (Nc) */
    int64_t window_cols;  /* vocabulary columns per window (w), a multiple of 256 */
} OutlFusedSizes;

struct OutputLayer {
    OutputKind kind;
    int64_t max_N, V, Vp;
    int d;
    int sms;        /* multiprocessors of the device */
    LtPlans lt;     /* cuBLASLt handle, workspace (OUTL_LT_WORKSPACE) and the GEMMs' plans */
    /* shared: */
    float *lse;      /* [max_N] log-sum-exp per row (the backward reads it) */
    float *row_loss; /* [max_N] per-row loss when the caller passes none */
    float *row_obj;  /* [max_N] per-row objective (0 if ignored), read only when options are set */
    float *scalars;  /* [OUTL_COUNT..OUTL_ONE], written on the device by outl_count_valid */
    /* fused: */
    OutlFusedSizes fs;
    float *win_m, *win_a; /* [stats_elems] */
    float *win_zs;        /* [stats_elems] per-window sum of the (capped) logits, for label smoothing */
    float *zt;            /* [max_N] target logit */
    int32_t *slice_targets; /* [max_N] over a vocabulary slice: the targets as the slice's columns */
    float *exp_ref2;      /* [max_N] each row's reference for E, log2 units */
    void *ex;             /* [exp_rows x exp_ld] E = exp(z - reference) in bf16, 0 at the target */
    float *exp_sums;      /* [exp_rows x exp_tiles] sum of E per row and tile */
    float *exp_row_scale; /* [exp_rows] 1 / S per row (0 if ignored) */
    __nv_bfloat16 *exp_hs; /* [exp_rows x d] H / S */
    /* [max_N] what of each row's gradient coefficient at its target the bf16 operand of the GEMMs
     * lacks, added to dH and dW in fp32: chunks, all of it (p - 1, or the objective's; E holds 0
     * there); streaming, the rounding dZ's bf16 entry leaves (c - bf16(c)) */
    float *tcoef;
    /* streaming with loss options: [max_N] each row's peak, the one non-target entry of dZ with
     * p > 1/2 (its column and what bf16 rounding took from it, packed; 0 if none), given back in
     * fp32 like tcoef; and [max_N] the peaks' columns, to sort the rows by */
    unsigned long long *peak;
    int32_t *peak_cols;
    float *exp_zsum;      /* [max_N] label smoothing: each row's sum of logits, H W-sum */
    float *exp_rank1;     /* [2 d] label smoothing: W's rows summed over V, H's over the valid rows */
    double *exp_colsum;   /* [COLSUM_SLICES x d] their partial sums */
    int32_t *target_sort;    /* [3 x max_N] targets sorted, row indices, row indices by target */
    void *target_sort_temp;  /* cub's scratch for sorting them */
    size_t target_sort_temp_bytes;
    int *exp_overflow;    /* set when a chunk's row has S beyond the limit (the chunk is redone) */
    __nv_bfloat16 *dz;    /* [chunk_rows x window_cols] P - Y (unscaled) of one window; NULL on a
                             chunked layer, whose streaming backward writes dZ into ex */
    float *dh_acc;        /* [exp_rows or chunk_rows x d] fp32 E W (or dH) of one chunk */
    /* canonical: */
    __nv_bfloat16 *logits; /* [max_N x Vp] */
};

/* Slices of rows a column sum (output_fused.cu) splits its rows into, each summed apart and then in
 * order: deterministic, and enough blocks to fill the GPU. */
#define COLSUM_SLICES 64

/* The layer's device scalars (indices into L->scalars). The gradient scale stays on the device
 * (it needs the valid count) and reaches the GEMMs as their alpha, in fp32: dZ (or E) itself is
 * stored unscaled, whose bf16 rounding is then independent from row to row (a scale folded in
 * before rounding, say 1/900, would round the same way in every row and bias the whole gradient
 * by up to 2^-9). */
#define OUTL_COUNT 0 /* number of valid targets */
#define OUTL_SCALE 1 /* gradient scale per valid row: grad_scale / max(count, 1) (mean) or grad_scale */
#define OUTL_LOSS_SCALE 2 /* 1 / max(count, 1) (mean) or 1 */
#define OUTL_ZERO 3  /* 0.0f and 1.0f, for alpha and beta in device pointer mode */
#define OUTL_ONE 4
#define OUTL_NUM_SCALARS 8

/* C = alpha op(A) op(B) + beta C in cuBLAS's column-major terms; A and B bf16, fp32 accumulation,
 * C fp32 or bf16 (ctype CUDA_R_32F / CUDA_R_16BF); alpha and beta are device pointers. Plans are
 * cached per shape in L->lt. */
void outl_gemm(OutputLayer *L, cublasOperation_t ta, cublasOperation_t tb, int64_t m, int64_t n, int64_t k,
               const void *A, int64_t lda, const void *B, int64_t ldb, void *C, int ctype, int64_t ldc,
               const float *alpha, const float *beta, cudaStream_t stream);

/* Fills L->scalars (see OUTL_COUNT...). One block, fixed order. */
void outl_count_valid(const int32_t *targets, int64_t N, OutputReduction red, float grad_scale, float *scalars,
                      cudaStream_t stream);
/* loss = scalars[OUTL_LOSS_SCALE] * sum(row_loss) summed in a fixed order (fp64); with targets,
 * only over the rows whose target is not -1. */
void outl_reduce_loss(const float *row_loss, const int32_t *targets, int64_t N, const float *scalars, float *loss,
                      cudaStream_t stream);

/* The per-row coefficients of the options' gradient w.r.t. the capped logits (kernels/output_kind.h):
 * dz'_v = p_v p_scale - [v = t] keep - uniform. */
__host__ __device__ __forceinline__ float outl_p_scale(const OutputLossOptions &o, float lse) {
    return 1.0f + 2.0f * o.z_loss * lse;
}
/* The row's objective from its cross-entropy, lse and sum of capped logits over V words. */
__host__ __device__ __forceinline__ float outl_objective(const OutputLossOptions &o, double ce, double lse,
                                                         double zsum, int64_t V) {
    return (float)((1.0 - o.label_smoothing) * ce + o.label_smoothing * (lse - zsum / (double)V) +
                   (double)o.z_loss * lse * lse);
}
__device__ __forceinline__ float outl_cap(float z, float cap) { return cap > 0.0f ? cap * tanhf(z / cap) : z; }

/* output_fused.cu. budget: bytes for the scaled-exponential chunks (0: the streaming path). */
OutlFusedSizes outl_fused_sizes(int64_t max_N, int64_t V, int d, int sms, size_t budget);
/* bytes of scratch for sorting up to max_N rows by target */
size_t outl_target_sort_bytes(int64_t max_N);
/* forward only (the streaming statistics, one logits-sized GEMM's work): loss, row_loss, lse; with
 * slice_stats, instead each row's merged (k, sum) and target logit (output_slice_forward; L->zt
 * must be zeroed first, as targets outside the slice write none) */
void outl_fused_forward(OutputLayer *L, const OutputLayerArgs *a, float *row_loss, float *slice_stats,
                        cudaStream_t stream);
/* options set: outl_fused_forward also writes L->row_obj */
/* after outl_fused_forward: the streaming backward (three GEMMs' work more) */
/* dH_f32 non-NULL: dH goes there in fp32 instead of a->dH in bf16 */
void outl_fused_backward(OutputLayer *L, const OutputLayerArgs *a, float *dH_f32, cudaStream_t stream);
/* output_slices_combine's kernel: lse and row_loss from R ranks' [3 x N] slice statistics */
void outl_slices_combine(const float *gathered, int R, int64_t N, const int32_t *targets, float *lse,
                         float *row_loss, cudaStream_t stream);
/* Whether the chunks of scaled exponentials compute these options exactly: all but soft-capping
 * together with label smoothing, whose uniform term times the cap's slope differs per element (a
 * fourth GEMM, which the streaming path already is). */
static inline int outl_exp_path_takes(const OutputLossOptions *o) {
    return !(o->logit_softcap != 0.0f && o->label_smoothing != 0.0f);
}
/* loss, row_loss, lse, dH and dW through the chunks of scaled exponentials (three GEMMs' work in all) */
void outl_fused_exp_forward_backward(OutputLayer *L, const OutputLayerArgs *a, float *row_loss, cudaStream_t stream);

/* output_canonical.cu: logits, the loss kernel, and with backward (P - Y) written in place and the
 * dH and dW GEMMs. */
void outl_canonical_run(OutputLayer *L, const OutputLayerArgs *a, float *row_loss, int backward, cudaStream_t stream);

#endif
