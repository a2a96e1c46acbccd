/* kernels/lt_plans.cu - the cuBLASLt plan cache of kernels/lt_plans.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda_check.h"
#include "kernels/host_device.h"
#include "kernels/lt_plans.h"

/* How many of the heuristic's offers a timed plan tries, and in how many rounds it times them. */
#define LT_CANDIDATES 8
#define LT_TIMED_ROUNDS 7

struct LtPlan {
    LtShape shape;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t a, b, c; /* c describes D too */
    cublasLtMatmulAlgo_t algo;
    size_t workspace_bytes; /* what algo is given: the cache's workspace, or none when it asks for none */
    int algo_fixed; /* the first call has run: algo is final */
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

/* Up to max of the heuristic's algorithms for p's shape that need at most ws bytes of workspace,
 * best first; returns how many. */
static int heuristic_offers(const LtPlans *c, const LtPlan *p, size_t ws, cublasLtMatmulHeuristicResult_t *res,
                            int max) {
    const LtShape *s = &p->shape;
    cublasLtMatmulPreference_t pref;
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    set_pref(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
    if (s->min_alignment) {
        const cublasLtMatmulPreferenceAttributes_t which[] = {
            CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
            CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
        for (int i = 0; i < 4; i++) set_pref(pref, which[i], &s->min_alignment, sizeof s->min_alignment);
    }
    uint32_t schemes = CUBLASLT_REDUCTION_SCHEME_MASK & ~(uint32_t)CUBLASLT_REDUCTION_SCHEME_INPLACE;
    set_pref(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &schemes, sizeof schemes);
    int found = 0;
    CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(c->handle, p->desc, p->a, p->b, p->c, p->c, pref, max, res, &found));
    CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(pref));
    return found;
}

/* The workspace an offer is given: none when it asks for none. cuBLASLt clears the few bytes of
 * workspace its Hopper kernels with beta = 0 ask for, a memset of about 1 µs with launch gaps around
 * it before each product (126 in a GPT-2 124M step); the same kernels offered under no workspace
 * skip it (dev/RESULTS.md, 2026-11-30). */
static size_t workspace_given(const LtPlans *c, const cublasLtMatmulHeuristicResult_t *offer) {
    return offer->workspaceSize == 0 ? 0 : c->workspace_bytes;
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

    cublasLtMatmulHeuristicResult_t res;
    if (heuristic_offers(c, p, c->workspace_bytes, &res, 1) < 1) {
        free_plan(p);
        return NULL;
    }
    p->algo = res.algo;
    p->workspace_bytes = workspace_given(c, &res);
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

/* h[0] += a hash of the n 8-byte words at x: each word mixed with its index (splitmix64's
 * finalizer), summed in integers, so the value does not depend on the order of the adds. */
static __global__ void hash_words_kernel(const unsigned long long *x, size_t n, unsigned long long *h) {
    unsigned long long sum = 0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        sum += splitmix64_mix(x[i] ^ (i * 0x9e3779b97f4a7c15ull));
    }
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    if ((threadIdx.x & 31) == 0) atomicAdd(h, sum);
}

/* What one timed product needs besides the algorithm: its operands, where it writes (D: C itself
 * or scratch) and the bytes whose hash identifies its result (D, and the aux matrix a GELU
 * epilogue writes). */
typedef struct {
    const void *alpha, *A, *B, *beta, *C;
    void *D;
    const void *aux;
    size_t d_bytes, aux_bytes;
    cudaStream_t stream;
    unsigned long long *hash; /* device, one word */
} TimedProduct;

/* One of a timed plan's candidates: an offer and the workspace it is given. */
typedef struct {
    cublasLtMatmulAlgo_t algo;
    size_t workspace_bytes;
} Candidate;

static cublasStatus_t run_candidate(LtPlans *c, LtPlan *p, const Candidate *k, const TimedProduct *t) {
    return cublasLtMatmul(c->handle, p->desc, t->alpha, t->A, p->a, t->B, p->b, t->beta, t->C, p->c, t->D, p->c,
                          &k->algo, k->workspace_bytes ? c->workspace : NULL, k->workspace_bytes, t->stream);
}

/* Runs algo once and returns the hash of what it wrote; 0 with *ok = 0 when cuBLASLt refused it. */
static unsigned long long candidate_hash(LtPlans *c, LtPlan *p, const Candidate *k, const TimedProduct *t, int *ok) {
    *ok = run_candidate(c, p, k, t) == CUBLAS_STATUS_SUCCESS;
    if (!*ok) return 0;
    CUDA_CHECK(cudaMemsetAsync(t->hash, 0, sizeof *t->hash, t->stream));
    hash_words_kernel<<<264, 256, 0, t->stream>>>((const unsigned long long *)t->D, t->d_bytes / 8, t->hash);
    CUDA_CHECK(cudaGetLastError());
    if (t->aux_bytes) {
        hash_words_kernel<<<264, 256, 0, t->stream>>>((const unsigned long long *)t->aux, t->aux_bytes / 8, t->hash);
        CUDA_CHECK(cudaGetLastError());
    }
    unsigned long long h;
    CUDA_CHECK(cudaMemcpyAsync(&h, t->hash, sizeof h, cudaMemcpyDeviceToHost, t->stream));
    CUDA_CHECK(cudaStreamSynchronize(t->stream));
    return h;
}

/* How many pieces algo splits K into (1: none). */
static int split_k_of(const cublasLtMatmulAlgo_t *algo) {
    int32_t v = 1;
    size_t written = 0;
    if (cublasLtMatmulAlgoConfigGetAttribute(algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &v, sizeof v, &written) !=
        CUBLAS_STATUS_SUCCESS)
        return -1;
    return v;
}

static int cmp_float(const void *x, const void *y) {
    const float a = *(const float *)x, b = *(const float *)y;
    return (a > b) - (a < b);
}

/* The time of one call of a candidate, in ms (with whatever cuBLASLt launches before its kernel). */
static float candidate_ms(LtPlans *c, LtPlan *p, const Candidate *k, const TimedProduct *t, cudaEvent_t start,
                          cudaEvent_t stop) {
    float ms;
    CUDA_CHECK(cudaEventRecord(start, t->stream));
    CUBLAS_CHECK(run_candidate(c, p, k, t));
    CUDA_CHECK(cudaEventRecord(stop, t->stream));
    CUDA_CHECK(cudaEventSynchronize(stop));
    CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    return ms;
}

/* A timed plan's first call: p->algo becomes the fastest offer whose result hashes as the first
 * choice's does, among the heuristic's offers with the cache's workspace and with none. The
 * candidates take turns, one call each a round, so that the clocks' drift while the GPU warms falls
 * on all of them alike, and each is judged by its median round. One must be 1 % faster than the
 * best before it to replace it, so noise alone does not move the choice. */
static void choose_fastest_same_bits(LtPlans *c, LtPlan *p, const void *alpha, const void *A, const void *B,
                                     const void *beta, void *C, const void *aux, cudaStream_t stream) {
    const LtShape *s = &p->shape;
    const size_t c_size = s->ctype == CUDA_R_32F ? 4 : 2;
    const size_t d_bytes = (size_t)s->m * (size_t)s->n * c_size;
    if (s->device_scalars || s->ldc != s->m || d_bytes % 8 || ((uintptr_t)C | (uintptr_t)aux) % 8 ||
        2.0 * s->m * s->n * s->k < c->timed_min_flop)
        return;
    cublasLtMatmulHeuristicResult_t offers[2 * LT_CANDIDATES];
    int found = heuristic_offers(c, p, c->workspace_bytes, offers, LT_CANDIDATES);
    found += heuristic_offers(c, p, 0, offers + found, LT_CANDIDATES);
    if (found < 2) return;
    TimedProduct t = {alpha, A, B, beta, C, C, aux, d_bytes, 0, stream, NULL};
    if (s->epilogue == CUBLASLT_EPILOGUE_GELU_AUX || s->epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS)
        t.aux_bytes = (size_t)s->m * (size_t)s->n * 2;
    /* beta != 0 reads C, so the candidates write elsewhere and leave C as the real call needs it */
    const int into_scratch = *(const float *)beta != 0.0f;
    if (into_scratch && cudaMalloc(&t.D, d_bytes) != cudaSuccess) {
        (void)cudaGetLastError(); /* no room for scratch: the first choice stays */
        return;
    }
    if (cudaMalloc(&t.hash, sizeof *t.hash) != cudaSuccess) {
        (void)cudaGetLastError();
        if (into_scratch) CUDA_CHECK(cudaFree(t.D));
        return;
    }
    cudaEvent_t start, stop;
    CUDA_CHECK(cudaEventCreate(&start));
    CUDA_CHECK(cudaEventCreate(&stop));
    /* the offers that give the first choice's bits, the first choice first; an offer must also split
     * K as the first choice does, so that one input that happens to round alike cannot let another
     * split through */
    Candidate same[2 * LT_CANDIDATES + 1];
    int n_same = 0, ok;
    const int first_split = split_k_of(&p->algo);
    const Candidate first = {p->algo, p->workspace_bytes};
    const unsigned long long first_bits = candidate_hash(c, p, &first, &t, &ok);
    if (ok) {
        same[n_same++] = first;
        for (int i = 0; i < found; i++) {
            const Candidate k = {offers[i].algo, workspace_given(c, &offers[i])};
            if ((memcmp(&k.algo, &first.algo, sizeof k.algo) != 0 || k.workspace_bytes != first.workspace_bytes) &&
                split_k_of(&k.algo) == first_split && candidate_hash(c, p, &k, &t, &ok) == first_bits && ok)
                same[n_same++] = k;
        }
    }
    if (n_same > 1) {
        float ms[2 * LT_CANDIDATES + 1][LT_TIMED_ROUNDS];
        for (int r = 0; r < LT_TIMED_ROUNDS; r++)
            for (int i = 0; i < n_same; i++) ms[i][r] = candidate_ms(c, p, &same[i], &t, start, stop);
        int best = 0;
        for (int i = 0; i < n_same; i++) {
            qsort(ms[i], LT_TIMED_ROUNDS, sizeof ms[i][0], cmp_float);
            if (ms[i][LT_TIMED_ROUNDS / 2] < 0.99f * ms[best][LT_TIMED_ROUNDS / 2]) best = i;
        }
        p->algo = same[best].algo, p->workspace_bytes = same[best].workspace_bytes;
    }
    CUDA_CHECK(cudaEventDestroy(stop));
    CUDA_CHECK(cudaEventDestroy(start));
    CUDA_CHECK(cudaFree(t.hash));
    if (into_scratch) CUDA_CHECK(cudaFree(t.D));
}

void lt_matmul(LtPlans *c, LtPlan *p, const void *alpha, const void *A, const void *B, const void *beta, void *C,
               const void *bias, const void *aux, cudaStream_t stream) {
    /* the descriptor is read when the call is queued, so a later call may set other pointers */
    if (has_bias(p->shape.epilogue)) set_attr(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias);
    if (has_aux(p->shape.epilogue)) set_attr(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux);
    if (!p->algo_fixed) {
        if (c->timed_min_flop > 0) choose_fastest_same_bits(c, p, alpha, A, B, beta, C, aux, stream);
        p->algo_fixed = 1;
    }
    CUBLAS_CHECK(cublasLtMatmul(c->handle, p->desc, alpha, A, p->a, B, p->b, beta, C, p->c, C, p->c, &p->algo,
                                p->workspace_bytes ? c->workspace : NULL, p->workspace_bytes, stream));
}
