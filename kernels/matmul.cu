/* kernels/matmul.cu - the model's matmuls through cuBLASLt, with fused epilogues, plans cached.
 *
 * Row-major shapes (weight [OC, C] as in llm.c):
 *   forward:  out[N,OC] = inp[N,C]·W^T + bias            (epilogue BIAS, or GELU_AUX_BIAS: also
 *             writes pre_gelu and out = gelu(pre_gelu))
 *   backward: dinp[N,C] = dout[N,OC]·W                    (epilogue DGELU: ∘ gelu'(pre_gelu))
 *             dW[OC,C] += dout^T·inp                      (fp32 output, beta = 1)
 *             dbias[OC] += Σ_n dout                       (gelu.cu's deterministic column sum)
 * cuBLASLt is column-major, so each row-major X is used as its transpose: out^T = W·inp^T with W
 * read transposed; dinp^T = W^T·dout^T with nothing transposed; dW^T = inp^T·dout with dout read
 * transposed. FLOPs 2·N·C·OC per product; bf16 operands, fp32 accumulation.
 *
 * Plans: each (kind, m, n, k, bias?) gets its descriptors and its algorithm once, on first use,
 * from the plan cache of kernels/lt_plans.h; later calls only set the data pointers on the cached
 * descriptor and call cublasLtMatmul. Products of 10 GFLOP or more take the fastest of the
 * heuristic's offers that give its first choice's bits (lt_plans.h says why that is safe): at the
 * families' shapes on an H100 the first choice was up to 9 % slower than the best one
 * (dev/RESULTS.md, 2026-11-27).
 * Minimum alignments are declared as 16 bytes, so tensors inside the flat parameter buffer work.
 * The bias gradient stays a separate kernel: cuBLASLt's BGRADB epilogue on the dW product was
 * measured slower than dW + bias_backward on an H100 (fc 768->3072 at N=16384: 0.274 vs 0.263 ms;
 * dev/RESULTS.md, 2026-11-22). */
#include "kernels/kernel_util.cuh"
#include "kernels/kernels.h"
#include "kernels/lt_plans.h"

#define MATMUL_WORKSPACE_BYTES (32u << 20)
/* about 15 µs of tensor-core time: below it, timing the offers would cost more than it saves */
#define MATMUL_TIMED_MIN_FLOP 1e10

typedef enum { MM_FWD, MM_FWD_GELU, MM_DINP, MM_DINP_DGELU, MM_DW } MatmulKind;

static LtPlans g_plans;

/* The plan of one row-major product (see the top of the file for how each maps to column-major). */
static LtPlan *plan_get(MatmulKind kind, int m, int n, int k, int has_bias, const void *bias, const void *aux) {
    if (!g_plans.handle) {
        lt_plans_create(&g_plans, MATMUL_WORKSPACE_BYTES);
        g_plans.timed_min_flop = MATMUL_TIMED_MIN_FLOP;
    }
    LtShape s = {};
    s.ta = kind == MM_FWD || kind == MM_FWD_GELU ? CUBLAS_OP_T : CUBLAS_OP_N;
    s.tb = kind == MM_DW ? CUBLAS_OP_T : CUBLAS_OP_N;
    s.m = m, s.n = n, s.k = k;
    s.lda = s.ta == CUBLAS_OP_T ? k : m; /* packed: the stored rows of op(A) and op(B) */
    s.ldb = s.tb == CUBLAS_OP_T ? n : k;
    s.ldc = m;
    s.ctype = kind == MM_DW ? CUDA_R_32F : CUDA_R_16BF;
    s.epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    if (kind == MM_FWD && has_bias) s.epilogue = CUBLASLT_EPILOGUE_BIAS;
    if (kind == MM_FWD_GELU) s.epilogue = has_bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
    if (kind == MM_DINP_DGELU) s.epilogue = CUBLASLT_EPILOGUE_DGELU;
    s.min_alignment = 16; /* tensors inside the flat parameter buffer are only 16-byte aligned */
    LtPlan *p = lt_plan(&g_plans, &s, bias, aux);
    if (!p) {
        fprintf(stderr, "error: cuBLASLt has no algorithm for matmul kind %d, m=%d n=%d k=%d bias=%d "
                        "(C and OC must be multiples of 8)\n", (int)kind, m, n, k, has_bias);
        exit(1);
    }
    return p;
}

extern "C" void matmul_forward(kbf16 *out, kbf16 *pre_gelu, const kbf16 *inp, const kbf16 *weight,
                               const kbf16 *bias, int N, int C, int OC, cudaStream_t stream) {
    MatmulKind kind = pre_gelu ? MM_FWD_GELU : MM_FWD;
    LtPlan *p = plan_get(kind, OC, N, C, bias != NULL, bias, pre_gelu);
    const float alpha = 1.0f, beta = 0.0f;
    lt_matmul(&g_plans, p, &alpha, weight, inp, &beta, out, bias, pre_gelu, stream);
}

extern "C" void matmul_backward(kbf16 *dinp, float *dweight, float *dbias, void *scratch, const kbf16 *dout,
                                const kbf16 *inp, const kbf16 *weight, const kbf16 *pre_gelu, int N, int C, int OC,
                                cudaStream_t stream) {
    const float one = 1.0f, zero = 0.0f;
    if (dinp) {
        MatmulKind kind = pre_gelu ? MM_DINP_DGELU : MM_DINP;
        LtPlan *p = plan_get(kind, C, N, OC, 0, NULL, pre_gelu);
        lt_matmul(&g_plans, p, &one, weight, dout, &zero, dinp, NULL, pre_gelu, stream);
    }
    if (dweight) {
        LtPlan *p = plan_get(MM_DW, C, OC, N, 0, NULL, NULL);
        lt_matmul(&g_plans, p, &one, inp, dout, &one, dweight, NULL, NULL, stream);
    }
    if (dbias) bias_backward(dbias, scratch, dout, N, OC, stream);
}

extern "C" void matmul_free(void) { lt_plans_destroy(&g_plans); }
