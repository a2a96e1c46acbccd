/* kernels/lt_plans.cu - the cuBLASLt plan cache of kernels/lt_plans.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda_check.h"
#include "kernels/lt_plans.h"

struct LtPlan {
    LtShape shape;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t a, b, c; /* c describes D too */
    cublasLtMatmulAlgo_t algo;
};

static int has_bias(cublasLtEpilogue_t e) {
    return e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
}

static int has_aux(cublasLtEpilogue_t e) {
    return e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || e == CUBLASLT_EPILOGUE_DGELU;
}

static int same_shape(const LtShape *x, const LtShape *y) {
    return x->ta == y->ta && x->tb == y->tb && x->m == y->m && x->n == y->n && x->k == y->k && x->lda == y->lda &&
           x->ldb == y->ldb && x->ldc == y->ldc && x->ctype == y->ctype && x->epilogue == y->epilogue &&
           x->device_scalars == y->device_scalars && x->min_alignment == y->min_alignment;
}

static void set_attr(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a, const void *v, size_t n) {
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d, a, v, n));
}

static void set_pref(cublasLtMatmulPreference_t p, cublasLtMatmulPreferenceAttributes_t a, const void *v, size_t n) {
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(p, a, v, n));
}

static void free_plan(LtPlan *p) {
    CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(p->c));
    CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(p->b));
    CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(p->a));
    CUBLAS_CHECK(cublasLtMatmulDescDestroy(p->desc));
    free(p);
}

void lt_plans_create(LtPlans *c, size_t workspace_bytes) {
    memset(c, 0, sizeof *c);
    CUBLAS_CHECK(cublasLtCreate(&c->handle));
    c->workspace_bytes = workspace_bytes;
    CUDA_CHECK(cudaMalloc(&c->workspace, workspace_bytes));
}

void lt_plans_destroy(LtPlans *c) {
    for (int i = c->count - 1; i >= 0; i--) free_plan(c->plans[i]);
    free(c->plans);
    if (c->workspace) CUDA_CHECK(cudaFree(c->workspace));
    if (c->handle) CUBLAS_CHECK(cublasLtDestroy(c->handle));
    memset(c, 0, sizeof *c);
}

/* The descriptors and the heuristic's algorithm for s; NULL when there is none. */
static LtPlan *make_plan(const LtPlans *c, const LtShape *s, const void *bias, const void *aux) {
    LtPlan *p = (LtPlan *)calloc(1, sizeof *p);
    if (!p) {
        fprintf(stderr, "error: out of host memory for a cuBLASLt plan\n");
        exit(1);
    }
    p->shape = *s;
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    set_attr(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &s->ta, sizeof s->ta);
    set_attr(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &s->tb, sizeof s->tb);
    if (s->device_scalars) {
        cublasLtPointerMode_t pm = CUBLASLT_POINTER_MODE_DEVICE;
        set_attr(p->desc, CUBLASLT_MATMUL_DESC_POINTER_MODE, &pm, sizeof pm);
    }
    set_attr(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &s->epilogue, sizeof s->epilogue);
    if (has_bias(s->epilogue)) {
        cudaDataType_t bt = CUDA_R_16BF;
        set_attr(p->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt);
        set_attr(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias);
    }
    if (has_aux(s->epilogue)) {
        int64_t ld = s->ldc; /* the aux matrix is shaped like C */
        set_attr(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof ld);
        set_attr(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux);
    }
    /* stored shapes (column-major): op(A) is m x k, op(B) is k x n */
    const int ta = s->ta != CUBLAS_OP_N, tb = s->tb != CUBLAS_OP_N;
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->a, CUDA_R_16BF, ta ? s->k : s->m, ta ? s->m : s->k, s->lda));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->b, CUDA_R_16BF, tb ? s->n : s->k, tb ? s->k : s->n, s->ldb));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->c, s->ctype, s->m, s->n, s->ldc));

    cublasLtMatmulPreference_t pref;
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    size_t ws = c->workspace_bytes;
    set_pref(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
    if (s->min_alignment) {
        const cublasLtMatmulPreferenceAttributes_t which[] = {
            CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
            CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
        for (int i = 0; i < 4; i++) set_pref(pref, which[i], &s->min_alignment, sizeof s->min_alignment);
    }
    uint32_t schemes = CUBLASLT_REDUCTION_SCHEME_MASK & ~(uint32_t)CUBLASLT_REDUCTION_SCHEME_INPLACE;
    set_pref(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &schemes, sizeof schemes);
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(c->handle, p->desc, p->a, p->b, p->c, p->c, pref, 1, &res, &found));
    CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(pref));
    if (found < 1) {
        free_plan(p);
        return NULL;
    }
    p->algo = res.algo;
    return p;
}

LtPlan *lt_plan(LtPlans *c, const LtShape *s, const void *bias, const void *aux) {
    for (int i = 0; i < c->count; i++)
        if (same_shape(&c->plans[i]->shape, s)) return c->plans[i];
    if (c->count == c->capacity) {
        int cap = c->capacity ? 2 * c->capacity : 16;
        LtPlan **grown = (LtPlan **)realloc(c->plans, (size_t)cap * sizeof *grown);
        if (!grown) {
            fprintf(stderr, "error: out of host memory for cuBLASLt plans\n");
            exit(1);
        }
        c->plans = grown, c->capacity = cap;
    }
    LtPlan *p = make_plan(c, s, bias, aux);
    if (p) c->plans[c->count++] = p;
    return p;
}

void lt_matmul(LtPlans *c, LtPlan *p, const void *alpha, const void *A, const void *B, const void *beta, void *C,
               const void *bias, const void *aux, cudaStream_t stream) {
    /* the descriptor is read when the call is queued, so a later call may set other pointers */
    if (has_bias(p->shape.epilogue)) set_attr(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias);
    if (has_aux(p->shape.epilogue)) set_attr(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux);
    CUBLAS_CHECK(cublasLtMatmul(c->handle, p->desc, alpha, A, p->a, B, p->b, beta, C, p->c, C, p->c, &p->algo,
                                c->workspace, c->workspace_bytes, stream));
}
