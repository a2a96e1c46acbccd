/* kernels/gemm_sm90.h - our Hopper GEMM (kernels/gemm_sm90.cu) for the fused output layer's two
 * backward products, row-major, bf16 operands, fp32 accumulation and output:
 *   dW: C [M x N] += alpha . E^T . B    E [K x M] (row stride lde), B [K x N] (row stride ldb)
 *   dH: C [M x N]  = E . B              E [M x K] (row stride lde), B [K x N] (row stride ldb)
 * alpha is a device pointer (the layer's gradient scale never leaves the device). Both run on the
 * given stream, build their tensor maps themselves and keep no state between calls: results are
 * the same bits run after run. What they take (else `error: ...` and exit 1): M, N, K in
 * [1, 2^31), N, lde and ldb multiples of 8 (TMA's 16-byte row strides; whole float4s of C), and
 * E, B, C 16-byte aligned. */
#ifndef FUSEDGPT_GEMM_SM90_H
#define FUSEDGPT_GEMM_SM90_H

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

/* the output tile of one CTA (a cluster's tile is two of them along M) */
#define GEMM_SM90_TILE_M 128
#define GEMM_SM90_TILE_N 256

/* What the launches need to know of the device, filled once by gemm_sm90_init. */
typedef struct {
    int clusters;    /* 2-CTA clusters resident at once: the persistent grid at most */
    int max_clusters; /* the grid's clusters at most when > 0 (a test makes few clusters walk many units) */
    int group;       /* cluster rows per raster group of the scheduler (8) */
    /* where a timed-out mbarrier wait records itself (pinned host memory, and its device alias) */
    volatile uint32_t *hang, *hang_dev;
} GemmSm90;

/* The dH product's schedule: K in `splits` ranges, the rows in panels of panel_rows (M: one). */
typedef struct {
    int splits;
    int64_t panel_rows;
} GemmSm90Plan;

/* 0, or -1 after printing why (not an sm_90 GPU, no cluster fits). */
int gemm_sm90_init(GemmSm90 *g);
void gemm_sm90_free(GemmSm90 *g);
/* Prints which wait timed out (after a launch failed), if one did; returns whether it printed. */
int gemm_sm90_report_hang(const GemmSm90 *g);

void gemm_sm90_dw(const GemmSm90 *g, int64_t M, int64_t N, int64_t K, const __nv_bfloat16 *E, int64_t lde,
                  const __nv_bfloat16 *B, int64_t ldb, float *C, const float *alpha, cudaStream_t stream);

/* Bytes of split partials the dH product is given for up to max_M rows of N columns. */
size_t gemm_sm90_dh_workspace_bytes(int64_t max_M, int64_t N);
/* The dH schedule at this shape with parts_bytes of workspace; splits > 0 fixes the split count. */
GemmSm90Plan gemm_sm90_dh_plan(const GemmSm90 *g, int64_t M, int64_t N, int64_t K, size_t parts_bytes,
                               int splits);
/* parts: the workspace for the split partials (parts_bytes). Returns the schedule it ran. */
GemmSm90Plan gemm_sm90_dh(const GemmSm90 *g, int64_t M, int64_t N, int64_t K, const __nv_bfloat16 *E, int64_t lde,
                          const __nv_bfloat16 *B, int64_t ldb, float *C, float *parts, size_t parts_bytes,
                          int splits, cudaStream_t stream);

#endif
