/* kernels/lt_plans.h - cuBLASLt matmuls with their descriptors and algorithm cached per shape: the
 * one plan cache of the body's matmuls (kernels/matmul.cu) and the output layers
 * (kernels/output_layer.cu), each of which owns an LtPlans (handle, workspace, plans).
 *
 * A shape's algorithm is fixed on its first call and kept: every later call of that shape runs the
 * same kernel. It is the heuristic's first choice, or, where the cache times candidates, the fastest
 * of the heuristic's offers (with the workspace and without: an offer that needs none is given none,
 * and skips the memset cuBLASLt issues before kernels that need a few bytes) whose result on that
 * first call is the first choice's to the bit.
 * cuBLAS's Hopper kernels without split-K add along K in one order whatever their tile (tested at
 * the families' shapes: every offer without split-K gave the first choice's bits, every split-K
 * offer other bits), so timing picks a kernel but never the rounding: results are the same bits
 * run after run, whichever candidate a run's timings favour. Split-K may not reduce in place in the
 * output (its sum order would follow timing). Not thread-safe: one host thread per cache. */
#ifndef FUSEDGPT_LT_PLANS_H
#define FUSEDGPT_LT_PLANS_H

#include <cublasLt.h>
#include <stddef.h>
#include <stdint.h>

/* One matmul D = alpha op(A) op(B) + beta C (D = C) in cuBLAS's column-major terms; A and B bf16,
 * fp32 accumulation. Everything here picks the descriptors and the algorithm. */
typedef struct {
    cublasOperation_t ta, tb;
    int64_t m, n, k;            /* op(A) is m x k, op(B) k x n, C m x n */
    int64_t lda, ldb, ldc;
    cudaDataType_t ctype;       /* C: CUDA_R_32F or CUDA_R_16BF */
    /* CUBLASLT_EPILOGUE_DEFAULT, or BIAS / GELU_AUX / GELU_AUX_BIAS / DGELU: the bias (bf16, m) and
     * the aux matrix (bf16, shaped like C) are given on every call */
    cublasLtEpilogue_t epilogue;
    int device_scalars;         /* alpha and beta are device pointers (else host) */
    uint32_t min_alignment;     /* bytes every pointer is aligned to (0: cuBLASLt's default, 256) */
} LtShape;

typedef struct LtPlan LtPlan;

typedef struct {
    cublasLtHandle_t handle;
    void *workspace; /* cuBLASLt's scratch, shared by every call: one stream at a time */
    size_t workspace_bytes;
    LtPlan **plans;
    int count, capacity;
    /* 0: every plan keeps the heuristic's first choice. Else products of at least this many FLOPs
     * (2·m·n·k) with host scalars time the heuristic's offers on their first call (see above);
     * smaller ones would spend more on timing than the choice could save. */
    double timed_min_flop;
} LtPlans;

/* A handle and workspace_bytes of device workspace; no plans yet. */
void lt_plans_create(LtPlans *c, size_t workspace_bytes);
/* Frees every plan, the workspace and the handle (the cache is then zero). */
void lt_plans_destroy(LtPlans *c);
/* The plan for shape s, made on first use (bias and aux: the first call's pointers, which the
 * heuristic may look at); NULL when cuBLASLt has no algorithm for it (the caller says why). */
LtPlan *lt_plan(LtPlans *c, const LtShape *s, const void *bias, const void *aux);
/* Queues the matmul on stream. alpha, beta: host or device pointers as the plan's shape says; bias
 * and aux as its epilogue needs (else ignored). A timed plan's first call waits for the stream and
 * runs each candidate a few times first: into C itself when beta is 0 (C is then overwritten), else
 * into a scratch matrix (when that cannot be allocated, the first choice stays). */
void lt_matmul(LtPlans *c, LtPlan *p, const void *alpha, const void *A, const void *B, const void *beta, void *C,
               const void *bias, const void *aux, cudaStream_t stream);

#endif
