/* kernels/output_layer.cu - the public side of kernels/output_layer.h: argument checks, the layer
 * object (workspace, cuBLASLt plans), its GEMMs, and the two small reductions both layers
 * share (valid-target count, loss sum). The layers' own kernels are in output_fused.cu and
 * output_canonical.cu.
 *
 * The reductions are single-block and fixed-order: the loss is the same bits on every run, and the
 * count stays on the device (the gradient scale 1/count is read by the backward kernels from device
 * memory, so a training step never waits for the host). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda_check.h"
#include "kernels/device_util.cuh"
#include "kernels/output_layer_internal.h"

#define REDUCE_THREADS 1024

static_assert(OUTPUT_FUSED_DEFAULT_BUDGET == (size_t)4096 * (262144 * 2 + 1024 * 4),
              "the default budget is 4096 rows of scaled exponentials at V = 262144 (kernels/output_kind.h)");

/* ---- reductions --------------------------------------------------------------------------- */

__global__ void count_valid_kernel(const int32_t *targets, int64_t N, int mean, float grad_scale,
                                   float *scalars) {
    __shared__ int64_t part[REDUCE_THREADS];
    int64_t c = 0;
    for (int64_t i = threadIdx.x; i < N; i += blockDim.x) c += targets[i] != -1;
    part[threadIdx.x] = c;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) part[threadIdx.x] += part[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        int64_t count = part[0];
        float inv = 1.0f / (float)(count > 0 ? count : 1);
        scalars[OUTL_COUNT] = (float)count;
        scalars[OUTL_SCALE] = mean ? grad_scale * inv : grad_scale;
        scalars[OUTL_LOSS_SCALE] = mean ? inv : 1.0f;
        scalars[OUTL_ZERO] = 0.0f;
        scalars[OUTL_ONE] = 1.0f;
    }
}

__global__ void reduce_loss_kernel(const float *row_loss, const int32_t *targets, int64_t N, const float *scalars,
                                   float *loss) {
    __shared__ double part[REDUCE_THREADS];
    double s = 0.0;
    for (int64_t i = threadIdx.x; i < N; i += blockDim.x)
        if (!targets || targets[i] != -1) s += (double)row_loss[i];
    part[threadIdx.x] = s;
    __syncthreads();
    /* tree in a fixed order: the same bits every run */
    for (int w = blockDim.x / 2; w > 0; w >>= 1) {
        if (threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0) *loss = (float)(part[0] * (double)scalars[OUTL_LOSS_SCALE]);
}

void outl_count_valid(const int32_t *targets, int64_t N, OutputReduction red, float grad_scale, float *scalars,
                      cudaStream_t stream) {
    count_valid_kernel<<<1, REDUCE_THREADS, 0, stream>>>(targets, N, red == OUTPUT_REDUCE_MEAN, grad_scale, scalars);
    CUDA_CHECK(cudaGetLastError());
}

void outl_reduce_loss(const float *row_loss, const int32_t *targets, int64_t N, const float *scalars, float *loss,
                      cudaStream_t stream) {
    reduce_loss_kernel<<<1, REDUCE_THREADS, 0, stream>>>(row_loss, targets, N, scalars, loss);
    CUDA_CHECK(cudaGetLastError());
}

/* ---- GEMMs ---------------------------------------------------------------------------------- */

/* What cuBLASLt may assume of A, B and C: the largest power of two up to its default, 256 bytes, that
 * all three are multiples of (0: the default). An untied lm_head sits after the final norm in the
 * parameter buffer, on 128 bytes where C is an odd multiple of 64; the aligned shapes keep their plans. */
static uint32_t common_alignment(const void *A, const void *B, const void *C) {
    const uintptr_t bits = (uintptr_t)A | (uintptr_t)B | (uintptr_t)C | 256;
    const uintptr_t lowest = bits & (~bits + 1);
    return lowest >= 256 ? 0 : (uint32_t)lowest;
}

void outl_gemm(OutputLayer *L, cublasOperation_t ta, cublasOperation_t tb, int64_t m, int64_t n, int64_t k,
               const void *A, int64_t lda, const void *B, int64_t ldb, void *C, int ctype, int64_t ldc,
               const float *alpha, const float *beta, cudaStream_t stream) {
    LtShape s = {};
    s.min_alignment = common_alignment(A, B, C);
    s.ta = ta, s.tb = tb, s.m = m, s.n = n, s.k = k, s.lda = lda, s.ldb = ldb, s.ldc = ldc;
    s.ctype = (cudaDataType_t)ctype;
    s.epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    s.device_scalars = 1; /* alpha = the gradient scale, on the device */
    LtPlan *p = lt_plan(&L->lt, &s, NULL, NULL);
    if (!p) {
        fprintf(stderr, "error: output layer: cuBLASLt has no algorithm for m=%lld n=%lld k=%lld\n", (long long)m,
                (long long)n, (long long)k);
        exit(1);
    }
    lt_matmul(&L->lt, p, alpha, A, B, beta, C, NULL, NULL, stream);
}

/* ---- the layer object ---------------------------------------------------------------------- */

static int check_shape(int64_t max_N, int64_t V, int d) {
    if (d <= 0 || d % 64 != 0) {
        fprintf(stderr,
                "error: output layer: model width d=%d is not a positive multiple of 64 (the tensor-core tiles "
                "step through d in chunks of 64; choose a width such as 768 or 1024)\n",
                d);
        return -1;
    }
    if (V < 1 || V > INT32_MAX) {
        fprintf(stderr, "error: output layer: vocabulary size V=%lld must be in [1, 2^31)\n", (long long)V);
        return -1;
    }
    if (max_N < 1) {
        fprintf(stderr, "error: output layer: max_N=%lld rows must be at least 1\n", (long long)max_N);
        return -1;
    }
    return 0;
}

/* Every buffer of the object, in creation order, with its size; shared by workspace_bytes and
 * create so that the two always agree. */
typedef struct {
    size_t lse, row_loss, row_obj, scalars, win_m, win_a, win_zs, zt, slice_targets, exp_ref2, ex, exp_sums,
        exp_row_scale, exp_hs, tcoef, peak, peak_cols, exp_zsum, exp_rank1, exp_colsum, target_sort, target_sort_temp,
        exp_overflow, dz,
        dh_acc, logits;
} Sizes;

static Sizes layer_sizes(OutputKind kind, int64_t max_N, int64_t V, int d, int sms, size_t budget,
                         OutlFusedSizes *fs) {
    Sizes s;
    memset(&s, 0, sizeof s);
    memset(fs, 0, sizeof *fs);
    s.lse = s.row_loss = s.row_obj = (size_t)max_N * sizeof(float);
    s.scalars = OUTL_NUM_SCALARS * sizeof(float);
    if (kind == OUTPUT_FUSED) {
        *fs = outl_fused_sizes(max_N, V, d, sms, budget);
        s.win_m = s.win_a = s.win_zs = (size_t)fs->stats_elems * sizeof(float);
        s.zt = (size_t)max_N * sizeof(float);
        s.slice_targets = (size_t)max_N * sizeof(int32_t);
        const size_t exp_rows = (size_t)fs->exp_rows;
        s.exp_ref2 = exp_rows ? (size_t)max_N * sizeof(float) : 0;
        s.ex = exp_rows * (size_t)fs->exp_ld * sizeof(__nv_bfloat16);
        s.exp_sums = exp_rows * (size_t)fs->exp_tiles * sizeof(float);
        s.exp_row_scale = exp_rows * sizeof(float);
        s.exp_hs = exp_rows * (size_t)d * sizeof(__nv_bfloat16);
        s.tcoef = (size_t)max_N * sizeof(float);
        s.peak = (size_t)max_N * sizeof(unsigned long long);
        s.peak_cols = (size_t)max_N * sizeof(int32_t);
        s.exp_zsum = exp_rows ? (size_t)max_N * sizeof(float) : 0;
        s.exp_rank1 = exp_rows ? 2 * (size_t)d * sizeof(float) : 0;
        s.exp_colsum = exp_rows ? COLSUM_SLICES * (size_t)d * sizeof(double) : 0;
        s.target_sort = 3 * (size_t)max_N * sizeof(int32_t);
        s.target_sort_temp = outl_target_sort_bytes(max_N);
        s.exp_overflow = exp_rows ? sizeof(int) : 0;
        /* a chunked layer's streaming backward (loss options may ask for it) runs in E and its E W */
        s.dz = exp_rows ? 0 : (size_t)fs->chunk_rows * (size_t)fs->window_cols * sizeof(__nv_bfloat16);
        s.dh_acc = (size_t)(exp_rows ? exp_rows : fs->chunk_rows) * (size_t)d * sizeof(float);
    } else {
        s.logits = (size_t)max_N * (size_t)round_up(V, 128) * sizeof(__nv_bfloat16);
    }
    return s;
}

static int check_kind(OutputKind kind) {
    if (kind == OUTPUT_FUSED || kind == OUTPUT_CANONICAL) return 0;
    fprintf(stderr, "error: output layer: unknown kind %d\n", (int)kind);
    return -1;
}

size_t output_layer_workspace_bytes(OutputKind kind, int64_t max_N, int64_t V, int d, size_t budget) {
    if (check_kind(kind) || check_shape(max_N, V, d)) return 0;
    OutlFusedSizes fs;
    Sizes s = layer_sizes(kind, max_N, V, d, device_sms(), budget, &fs);
    return OUTL_LT_WORKSPACE + s.lse + s.row_loss + s.row_obj + s.scalars + s.win_m + s.win_a + s.win_zs + s.zt +
           s.slice_targets + s.exp_ref2 + s.ex + s.exp_sums + s.exp_row_scale + s.exp_hs + s.tcoef + s.peak +
           s.peak_cols + s.exp_zsum + s.exp_rank1 + s.exp_colsum + s.target_sort + s.target_sort_temp + s.exp_overflow +
           s.dz + s.dh_acc + s.logits;
}

static void *dev_alloc(size_t bytes) {
    void *p = NULL;
    if (bytes) CUDA_CHECK(cudaMalloc(&p, bytes));
    return p;
}

OutputLayer *output_layer_create(OutputKind kind, int64_t max_N, int64_t V, int d, size_t budget) {
    if (check_kind(kind) || check_shape(max_N, V, d)) return NULL;
    OutputLayer *L = (OutputLayer *)calloc(1, sizeof *L);
    if (!L) {
        fprintf(stderr, "error: output layer: out of host memory\n");
        return NULL;
    }
    L->kind = kind, L->max_N = max_N, L->V = V, L->Vp = round_up(V, 128), L->d = d;
    L->sms = device_sms();
    Sizes s = layer_sizes(kind, max_N, V, d, L->sms, budget, &L->fs);
    lt_plans_create(&L->lt, OUTL_LT_WORKSPACE);
    L->lse = (float *)dev_alloc(s.lse);
    L->row_loss = (float *)dev_alloc(s.row_loss);
    L->row_obj = (float *)dev_alloc(s.row_obj);
    L->scalars = (float *)dev_alloc(s.scalars);
    L->win_m = (float *)dev_alloc(s.win_m);
    L->win_a = (float *)dev_alloc(s.win_a);
    L->win_zs = (float *)dev_alloc(s.win_zs);
    L->zt = (float *)dev_alloc(s.zt);
    L->slice_targets = (int32_t *)dev_alloc(s.slice_targets);
    L->exp_ref2 = (float *)dev_alloc(s.exp_ref2);
    L->ex = dev_alloc(s.ex);
    L->exp_sums = (float *)dev_alloc(s.exp_sums);
    L->exp_row_scale = (float *)dev_alloc(s.exp_row_scale);
    L->exp_hs = (__nv_bfloat16 *)dev_alloc(s.exp_hs);
    L->tcoef = (float *)dev_alloc(s.tcoef);
    L->peak = (unsigned long long *)dev_alloc(s.peak);
    L->peak_cols = (int32_t *)dev_alloc(s.peak_cols);
    L->exp_zsum = (float *)dev_alloc(s.exp_zsum);
    L->exp_rank1 = (float *)dev_alloc(s.exp_rank1);
    L->exp_colsum = (double *)dev_alloc(s.exp_colsum);
    L->target_sort = (int32_t *)dev_alloc(s.target_sort);
    L->target_sort_temp = dev_alloc(s.target_sort_temp);
    L->target_sort_temp_bytes = s.target_sort_temp;
    L->exp_overflow = (int *)dev_alloc(s.exp_overflow);
    L->dz = (__nv_bfloat16 *)dev_alloc(s.dz);
    L->dh_acc = (float *)dev_alloc(s.dh_acc);
    L->logits = (__nv_bfloat16 *)dev_alloc(s.logits);
    return L;
}

void output_layer_destroy(OutputLayer *L) {
    if (!L) return;
    /* reverse order of creation */
    CUDA_CHECK(cudaFree(L->logits));
    CUDA_CHECK(cudaFree(L->dh_acc));
    CUDA_CHECK(cudaFree(L->dz));
    CUDA_CHECK(cudaFree(L->exp_overflow));
    CUDA_CHECK(cudaFree(L->target_sort_temp));
    CUDA_CHECK(cudaFree(L->target_sort));
    CUDA_CHECK(cudaFree(L->exp_colsum));
    CUDA_CHECK(cudaFree(L->exp_rank1));
    CUDA_CHECK(cudaFree(L->exp_zsum));
    CUDA_CHECK(cudaFree(L->peak_cols));
    CUDA_CHECK(cudaFree(L->peak));
    CUDA_CHECK(cudaFree(L->tcoef));
    CUDA_CHECK(cudaFree(L->exp_hs));
    CUDA_CHECK(cudaFree(L->exp_row_scale));
    CUDA_CHECK(cudaFree(L->exp_sums));
    CUDA_CHECK(cudaFree(L->ex));
    CUDA_CHECK(cudaFree(L->exp_ref2));
    CUDA_CHECK(cudaFree(L->slice_targets));
    CUDA_CHECK(cudaFree(L->zt));
    CUDA_CHECK(cudaFree(L->win_zs));
    CUDA_CHECK(cudaFree(L->win_a));
    CUDA_CHECK(cudaFree(L->win_m));
    CUDA_CHECK(cudaFree(L->scalars));
    CUDA_CHECK(cudaFree(L->row_obj));
    CUDA_CHECK(cudaFree(L->row_loss));
    CUDA_CHECK(cudaFree(L->lse));
    lt_plans_destroy(&L->lt);
    free(L);
}

int64_t output_layer_fused_chunk_rows(const OutputLayer *L) {
    return L && L->kind == OUTPUT_FUSED ? L->fs.exp_rows : 0;
}

const char *output_layer_kind_name(OutputKind kind) {
    return kind == OUTPUT_FUSED ? "fused" : kind == OUTPUT_CANONICAL ? "canonical" : "unknown";
}

/* ---- entry points -------------------------------------------------------------------------- */

static int check_args(const OutputLayer *L, const OutputLayerArgs *a, int backward) {
    if (!L || !a) {
        fprintf(stderr, "error: output layer: NULL layer or arguments\n");
        return -1;
    }
    if (a->N < 1 || a->N > L->max_N) {
        fprintf(stderr, "error: output layer: N=%lld rows outside [1, %lld] (the max_N it was created for)\n",
                (long long)a->N, (long long)L->max_N);
        return -1;
    }
    if (!a->H || !a->W || !a->targets || !a->loss) {
        fprintf(stderr, "error: output layer: H, W, targets and loss are required\n");
        return -1;
    }
    if (a->reduction != OUTPUT_REDUCE_MEAN && a->reduction != OUTPUT_REDUCE_SUM) {
        fprintf(stderr, "error: output layer: unknown reduction %d\n", (int)a->reduction);
        return -1;
    }
    if (backward && (!a->dH || !a->dW)) {
        fprintf(stderr, "error: output layer: forward_backward needs dH and dW\n");
        return -1;
    }
    const char *bad = output_loss_options_invalid(&a->options);
    if (bad) {
        fprintf(stderr, "error: output layer: %s (z_loss %g, logit_softcap %g, label_smoothing %g)\n", bad,
                (double)a->options.z_loss, (double)a->options.logit_softcap, (double)a->options.label_smoothing);
        return -1;
    }
    return 0;
}

static int has_options(const OutputLossOptions *o) {
    return output_loss_has_objective(o) || o->logit_softcap != 0.0f;
}

static int run(OutputLayer *L, const OutputLayerArgs *a, int backward, cudaStream_t stream) {
    if (check_args(L, a, backward)) return -1;
    float *row_loss = a->row_loss ? a->row_loss : L->row_loss;
    outl_count_valid(a->targets, a->N, a->reduction, a->grad_scale, L->scalars, stream);
    if (L->kind == OUTPUT_FUSED && backward && L->fs.exp_rows > 0 && outl_exp_path_takes(&a->options)) {
        outl_fused_exp_forward_backward(L, a, row_loss, stream);
        outl_reduce_loss(row_loss, NULL, a->N, L->scalars, a->loss, stream);
    } else if (L->kind == OUTPUT_FUSED) {
        outl_fused_forward(L, a, row_loss, NULL, stream);
        outl_reduce_loss(row_loss, NULL, a->N, L->scalars, a->loss, stream);
        if (backward) outl_fused_backward(L, a, NULL, stream);
    } else {
        outl_canonical_run(L, a, row_loss, backward, stream);
        outl_reduce_loss(row_loss, NULL, a->N, L->scalars, a->loss, stream);
    }
    /* both paths above wrote every row's lse to L->lse, and with options its objective to L->row_obj */
    if (a->objective)
        outl_reduce_loss(has_options(&a->options) ? L->row_obj : row_loss, NULL, a->N, L->scalars, a->objective,
                         stream);
    if (a->lse_reduced) outl_reduce_loss(L->lse, a->targets, a->N, L->scalars, a->lse_reduced, stream);
    return 0;
}

int output_layer_forward(OutputLayer *L, const OutputLayerArgs *a, cudaStream_t stream) {
    return run(L, a, 0, stream);
}

int output_layer_forward_backward(OutputLayer *L, const OutputLayerArgs *a, cudaStream_t stream) {
    return run(L, a, 1, stream);
}

/* ---- over a vocabulary slice ------------------------------------------------------------------ */

/* The targets as the slice's columns: t - v0 inside the slice, -1 kept (ignored), and a column no
 * tile reaches for a counted row whose target another slice holds (no target logit, no one-hot). */
__global__ void slice_targets_kernel(const int32_t *targets, int64_t N, int64_t v0, int64_t Vs, int32_t *out) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;
    const int64_t t = targets[i];
    out[i] = t == -1 ? -1 : t >= v0 && t < v0 + Vs ? (int32_t)(t - v0) : INT32_MAX;
}

static int check_slice_args(const OutputLayer *L, const OutputSliceArgs *a, int backward) {
    if (!L || !a) {
        fprintf(stderr, "error: output layer: NULL layer or slice arguments\n");
        return -1;
    }
    if (L->kind != OUTPUT_FUSED) {
        fprintf(stderr, "error: output layer: a vocabulary slice runs on the fused layer only (--output fused)\n");
        return -1;
    }
    if (L->fs.exp_rows > 0) {
        fprintf(stderr, "error: output layer: a vocabulary slice runs the streaming path (create its layer with "
                        "budget 0)\n");
        return -1;
    }
    if (a->N < 1 || a->N > L->max_N) {
        fprintf(stderr, "error: output layer: N=%lld rows outside [1, %lld] (the max_N it was created for)\n",
                (long long)a->N, (long long)L->max_N);
        return -1;
    }
    if (a->v0 < 0 || a->v0 > (int64_t)INT32_MAX - L->V) {
        fprintf(stderr, "error: output layer: slice start v0=%lld is not a vocabulary row\n", (long long)a->v0);
        return -1;
    }
    if (!a->H || !a->W || !a->targets) {
        fprintf(stderr, "error: output layer: H, W and targets are required\n");
        return -1;
    }
    if (a->reduction != OUTPUT_REDUCE_MEAN && a->reduction != OUTPUT_REDUCE_SUM) {
        fprintf(stderr, "error: output layer: unknown reduction %d\n", (int)a->reduction);
        return -1;
    }
    if (backward ? !a->lse || !a->dH || !a->dW : !a->stats) {
        fprintf(stderr, "error: output layer: a slice's %s\n",
                backward ? "backward needs lse, dH and dW" : "forward needs stats");
        return -1;
    }
    return 0;
}

/* The slice as the whole-layer paths see it: W's rows are the columns, the targets remapped. */
static OutputLayerArgs slice_layer_args(OutputLayer *L, const OutputSliceArgs *a, cudaStream_t stream) {
    slice_targets_kernel<<<(unsigned)ceil_div(a->N, 256), 256, 0, stream>>>(a->targets, a->N, a->v0, L->V,
                                                                            L->slice_targets);
    CUDA_CHECK(cudaGetLastError());
    OutputLayerArgs b = {};
    b.H = a->H, b.W = a->W, b.targets = L->slice_targets, b.N = a->N;
    b.reduction = a->reduction, b.grad_scale = a->grad_scale;
    b.dW = a->dW;
    return b;
}

int output_slice_forward(OutputLayer *L, const OutputSliceArgs *a, cudaStream_t stream) {
    if (check_slice_args(L, a, 0)) return -1;
    const OutputLayerArgs b = slice_layer_args(L, a, stream);
    CUDA_CHECK(cudaMemsetAsync(L->zt, 0, (size_t)a->N * sizeof(float), stream));
    outl_fused_forward(L, &b, L->row_loss, a->stats, stream);
    return 0;
}

int output_slices_combine(OutputLayer *L, const OutputSliceArgs *a, const float *gathered, int R, float *lse,
                          float *loss, cudaStream_t stream) {
    if (!L || !a || !gathered || !lse || !loss || R < 1 || a->N < 1 || a->N > L->max_N || !a->targets) {
        fprintf(stderr, "error: output layer: combining slices needs the layer, R >= 1 ranks' statistics, "
                        "targets, lse and loss for 1 to max_N rows\n");
        return -1;
    }
    outl_count_valid(a->targets, a->N, a->reduction, a->grad_scale, L->scalars, stream);
    outl_slices_combine(gathered, R, a->N, a->targets, lse, L->row_loss, stream);
    outl_reduce_loss(L->row_loss, NULL, a->N, L->scalars, loss, stream);
    return 0;
}

int output_slice_backward(OutputLayer *L, const OutputSliceArgs *a, cudaStream_t stream) {
    if (check_slice_args(L, a, 1)) return -1;
    /* the whole targets: every rank holds all rows, so this is the global count */
    outl_count_valid(a->targets, a->N, a->reduction, a->grad_scale, L->scalars, stream);
    const OutputLayerArgs b = slice_layer_args(L, a, stream);
    CUDA_CHECK(cudaMemcpyAsync(L->lse, a->lse, (size_t)a->N * sizeof(float), cudaMemcpyDeviceToDevice, stream));
    outl_fused_backward(L, &b, a->dH, stream);
    return 0;
}
