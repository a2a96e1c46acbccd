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
 * Plans: each (kind, m, n, k, bias?) gets its descriptors and the heuristic's algorithm once, on
 * first use; later calls only set the data pointers on the cached descriptor (a host-side write)
 * and call cublasLtMatmul. The choice is fixed after that, so results are run-to-run identical.
 * Minimum alignments are declared as 16 bytes, so tensors inside the flat parameter buffer work.
 * Algorithms are not autotuned by timing: a choice that depended on timings could differ between
 * two runs, and with it the rounding (split-K), which would break bitwise-reproducible training;
 * for the same reason split-K may not reduce in place (in whatever order the pieces finish).
 * The bias gradient stays a separate kernel: cuBLASLt's BGRADB epilogue on the dW product was
 * measured slower than dW + bias_backward on an H100 (fc 768->3072 at N=16384: 0.274 vs 0.263 ms;
 * dev/RESULTS.md, 2026-11-22). */
#include <string.h>

#include "kernels/kernel_util.cuh"
#include "kernels/kernels.h"

#define MATMUL_WORKSPACE_BYTES (32u << 20)
#define MATMUL_MAX_PLANS 128

typedef enum { MM_FWD, MM_FWD_GELU, MM_DINP, MM_DINP_DGELU, MM_DW } MatmulKind;

typedef struct {
    MatmulKind kind;
    int m, n, k, has_bias;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t a, b, c, d;
    cublasLtMatmulAlgo_t algo;
} MatmulPlan;

static cublasLtHandle_t g_lt;
static void *g_workspace;
static MatmulPlan g_plans[MATMUL_MAX_PLANS];
static int g_num_plans;

static void matmul_lazy_init(void) {
    if (g_lt) return;
    CUBLAS_CHECK(cublasLtCreate(&g_lt));
    CUDA_CHECK(cudaMalloc(&g_workspace, MATMUL_WORKSPACE_BYTES));
}

static void set_attr(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a, const void *v, size_t n) {
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d, a, v, n));
}

/* Creates the plan; ptr_bias / ptr_aux are the first call's pointers (the heuristic may look at
 * them); they are replaced on every call. */
static MatmulPlan *plan_get(MatmulKind kind, int m, int n, int k, int has_bias, const void *bias, const void *aux) {
    for (int i = 0; i < g_num_plans; i++) {
        MatmulPlan *p = &g_plans[i];
        if (p->kind == kind && p->m == m && p->n == n && p->k == k && p->has_bias == has_bias) return p;
    }
    if (g_num_plans == MATMUL_MAX_PLANS) {
        fprintf(stderr, "error: more than %d matmul shapes; raise MATMUL_MAX_PLANS in kernels/matmul.cu\n",
                MATMUL_MAX_PLANS);
        exit(1);
    }
    MatmulPlan *p = &g_plans[g_num_plans];
    memset(p, 0, sizeof *p);
    p->kind = kind;
    p->m = m;
    p->n = n;
    p->k = k;
    p->has_bias = has_bias;

    int fp32_out = kind == MM_DW;
    cudaDataType_t dt = fp32_out ? CUDA_R_32F : CUDA_R_16BF;
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t ta = kind == MM_FWD || kind == MM_FWD_GELU ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t tb = kind == MM_DW ? CUBLAS_OP_T : CUBLAS_OP_N;
    set_attr(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta);
    set_attr(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb);

    cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_DEFAULT;
    if (kind == MM_FWD) epi = has_bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    if (kind == MM_FWD_GELU) epi = has_bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
    if (kind == MM_DINP_DGELU) epi = CUBLASLT_EPILOGUE_DGELU;
    set_attr(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi);
    if (has_bias) {
        cudaDataType_t bt = CUDA_R_16BF;
        set_attr(p->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt);
        set_attr(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias);
    }
    if (kind == MM_FWD_GELU || kind == MM_DINP_DGELU) {
        int64_t ld = m; /* the aux matrix is shaped like D */
        set_attr(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof ld);
        set_attr(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux);
    }

    /* Stored (column-major) shapes of A and B: op(A) is m×k, op(B) is k×n. */
    int a_rows = ta == CUBLAS_OP_T ? k : m, a_cols = ta == CUBLAS_OP_T ? m : k;
    int b_rows = tb == CUBLAS_OP_T ? n : k, b_cols = tb == CUBLAS_OP_T ? k : n;
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->a, CUDA_R_16BF, a_rows, a_cols, a_rows));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->b, CUDA_R_16BF, b_rows, b_cols, b_rows));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->c, dt, m, n, m));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->d, dt, m, n, m));

    cublasLtMatmulPreference_t pref;
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    size_t ws = MATMUL_WORKSPACE_BYTES;
    uint32_t align = 16;
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align,
                                                      sizeof align));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align,
                                                      sizeof align));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align,
                                                      sizeof align));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align,
                                                      sizeof align));
    /* Split-K summed in place in the output would make the sum order depend on timing; allow only
     * schemes that reduce in a fixed order (the output layer's GEMMs follow the same rule). */
    uint32_t schemes = CUBLASLT_REDUCTION_SCHEME_MASK & ~(uint32_t)CUBLASLT_REDUCTION_SCHEME_INPLACE;
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &schemes,
                                                      sizeof schemes));
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(g_lt, p->desc, p->a, p->b, p->c, p->d, pref, 1, &res, &found));
    CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(pref));
    if (found == 0) {
        fprintf(stderr, "error: cuBLASLt has no algorithm for matmul kind %d, m=%d n=%d k=%d bias=%d "
                        "(C and OC must be multiples of 8)\n", (int)kind, m, n, k, has_bias);
        exit(1);
    }
    p->algo = res.algo;
    g_num_plans++;
    return p;
}

static void plan_run(MatmulPlan *p, const void *A, const void *Bm, void *D, float beta, const void *bias,
                     const void *aux, cudaStream_t stream) {
    if (p->has_bias) set_attr(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias);
    if (p->kind == MM_FWD_GELU || p->kind == MM_DINP_DGELU)
        set_attr(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux);
    const float alpha = 1.0f;
    CUBLAS_CHECK(cublasLtMatmul(g_lt, p->desc, &alpha, A, p->a, Bm, p->b, &beta, D, p->c, D, p->d, &p->algo,
                                g_workspace, MATMUL_WORKSPACE_BYTES, stream));
}

extern "C" void matmul_forward(kbf16 *out, kbf16 *pre_gelu, const kbf16 *inp, const kbf16 *weight,
                               const kbf16 *bias, int N, int C, int OC, cudaStream_t stream) {
    matmul_lazy_init();
    MatmulKind kind = pre_gelu ? MM_FWD_GELU : MM_FWD;
    MatmulPlan *p = plan_get(kind, OC, N, C, bias != NULL, bias, pre_gelu);
    plan_run(p, weight, inp, out, 0.0f, bias, pre_gelu, stream);
}

extern "C" void matmul_backward(kbf16 *dinp, float *dweight, float *dbias, void *scratch, const kbf16 *dout,
                                const kbf16 *inp, const kbf16 *weight, const kbf16 *pre_gelu, int N, int C, int OC,
                                cudaStream_t stream) {
    matmul_lazy_init();
    if (dinp) {
        MatmulKind kind = pre_gelu ? MM_DINP_DGELU : MM_DINP;
        MatmulPlan *p = plan_get(kind, C, N, OC, 0, NULL, pre_gelu);
        plan_run(p, weight, dout, dinp, 0.0f, NULL, pre_gelu, stream);
    }
    if (dweight) {
        MatmulPlan *p = plan_get(MM_DW, C, OC, N, 0, NULL, NULL);
        plan_run(p, inp, dout, dweight, 1.0f, NULL, NULL, stream);
    }
    if (dbias) bias_backward(dbias, scratch, dout, N, OC, stream);
}

extern "C" void matmul_free(void) {
    for (int i = g_num_plans - 1; i >= 0; i--) {
        MatmulPlan *p = &g_plans[i];
        CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(p->d));
        CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(p->c));
        CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(p->b));
        CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(p->a));
        CUBLAS_CHECK(cublasLtMatmulDescDestroy(p->desc));
    }
    g_num_plans = 0;
    if (g_workspace) CUDA_CHECK(cudaFree(g_workspace));
    g_workspace = NULL;
    if (g_lt) CUBLAS_CHECK(cublasLtDestroy(g_lt));
    g_lt = NULL;
}
