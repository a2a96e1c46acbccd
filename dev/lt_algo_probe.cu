/* dev/lt_algo_probe.cu - times every algorithm cuBLASLt's heuristic offers for the fused output
 * layer's backward GEMMs (issue 5), to see how far its first choice is from the best one.
 *
 *   make build/lt_algo_probe
 *   ./build/lt_algo_probe d rows cols [ws_mib (default 1)]
 *
 * The two GEMMs of one (chunk rows x window cols) block, as kernels/output_fused.cu issues them
 * (column-major, fp32 output, alpha from the device, beta = 1):
 *   dH  C[d x rows] += W_window[d x cols] . dZ[cols x rows]
 *   dW  C[d x cols] += H_chunk[d x rows] . dZ[cols x rows]^T
 * Events, 3 warm-ups, median of 15. Prints one line per algorithm with its tile, stages, split-K and
 * cluster attributes; the heuristic's order is kept (index 0 is what the layer uses today). */
#include <stdio.h>
#include <stdlib.h>

#include <algorithm>
#include <vector>

#include <cublasLt.h>
#include <cuda_bf16.h>

#include "kernels/cuda_check.h"

static float median_ms(cublasLtHandle_t lt, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a,
                       cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c, const cublasLtMatmulAlgo_t *algo,
                       const void *A, const void *B, void *C, const float *alpha, const float *beta, void *ws,
                       size_t ws_bytes) {
    cudaEvent_t e0, e1;
    CUDA_CHECK(cudaEventCreate(&e0));
    CUDA_CHECK(cudaEventCreate(&e1));
    std::vector<float> t;
    for (int i = 0; i < 18; i++) {
        CUDA_CHECK(cudaEventRecord(e0));
        cublasStatus_t s = cublasLtMatmul(lt, desc, alpha, A, a, B, b, beta, C, c, C, c, algo, ws, ws_bytes, 0);
        CUDA_CHECK(cudaEventRecord(e1));
        if (s != CUBLAS_STATUS_SUCCESS) return -1.0f;
        CUDA_CHECK(cudaEventSynchronize(e1));
        float ms;
        CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
        if (i >= 3) t.push_back(ms);
    }
    std::sort(t.begin(), t.end());
    CUDA_CHECK(cudaEventDestroy(e0));
    CUDA_CHECK(cudaEventDestroy(e1));
    return t[t.size() / 2];
}

/* every attribute printed is a 32-bit integer */
static int algo_attr(const cublasLtMatmulAlgo_t *algo, cublasLtMatmulAlgoConfigAttributes_t attr) {
    int32_t v = 0;
    size_t written;
    CUBLAS_CHECK(cublasLtMatmulAlgoConfigGetAttribute(algo, attr, &v, sizeof v, &written));
    return v;
}

static void probe(cublasLtHandle_t lt, const char *name, cublasOperation_t opb, int64_t m, int64_t n, int64_t k,
                  const void *A, int64_t lda, const void *B, int64_t ldb, void *C, const float *alpha,
                  const float *beta, void *ws, size_t ws_bytes) {
    cublasLtMatmulDesc_t desc;
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t opa = CUBLAS_OP_N;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
    cublasLtPointerMode_t pm = CUBLASLT_POINTER_MODE_DEVICE;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_POINTER_MODE, &pm, sizeof pm));
    cublasLtMatrixLayout_t a, b, c;
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&a, CUDA_R_16BF, m, k, lda));
    if (opb == CUBLAS_OP_N) CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&b, CUDA_R_16BF, k, n, ldb));
    else CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&b, CUDA_R_16BF, n, k, ldb));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&c, CUDA_R_32F, m, n, m));
    cublasLtMatmulPreference_t pref;
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes,
                                                      sizeof ws_bytes));
    uint32_t schemes = CUBLASLT_REDUCTION_SCHEME_MASK & ~(uint32_t)CUBLASLT_REDUCTION_SCHEME_INPLACE;
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &schemes,
                                                      sizeof schemes));
    cublasLtMatmulHeuristicResult_t res[32];
    int found = 0;
    CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(lt, desc, a, b, c, c, pref, 32, res, &found));
    const double flop = 2.0 * m * n * k;
    printf("%s m=%lld n=%lld k=%lld ws=%zu MiB: %d algorithms\n", name, (long long)m, (long long)n, (long long)k,
           ws_bytes >> 20, found);
    for (int i = 0; i < found; i++) {
        const cublasLtMatmulAlgo_t *al = &res[i].algo;
        const int id = algo_attr(al, CUBLASLT_ALGO_CONFIG_ID), tile = algo_attr(al, CUBLASLT_ALGO_CONFIG_TILE_ID);
        const int stages = algo_attr(al, CUBLASLT_ALGO_CONFIG_STAGES_ID);
        const int splitk = algo_attr(al, CUBLASLT_ALGO_CONFIG_SPLITK_NUM);
        const int red = algo_attr(al, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME);
        const int cluster = algo_attr(al, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID);
        const int swz = algo_attr(al, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING);
        const float ms = median_ms(lt, desc, a, b, c, &res[i].algo, A, B, C, alpha, beta, ws, ws_bytes);
        printf("  #%-2d id %3d tile %3d stages %3d splitk %2d red %d cluster %3d swz %d ws %8zu  %8.4f ms  %6.1f TF/s\n",
               i, id, tile, stages, splitk, red, cluster, swz, res[i].workspaceSize, ms,
               ms > 0 ? flop / (ms * 1e-3) / 1e12 : 0.0);
    }
    CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(pref));
    CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(a));
    CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(b));
    CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(c));
    CUBLAS_CHECK(cublasLtMatmulDescDestroy(desc));
}

__global__ void fill_kernel(__nv_bfloat16 *x, int64_t n, float scale) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        x[i] = __float2bfloat16(scale * (float)((i * 2654435761ull) % 2001 - 1000) / 1000.0f);
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: %s d rows cols [ws_mib]\n", argv[0]);
        return 1;
    }
    const int64_t d = atoll(argv[1]), rows = atoll(argv[2]), cols = atoll(argv[3]);
    const size_t ws_bytes = (size_t)(argc > 4 ? atoll(argv[4]) : 1) << 20;
    cublasLtHandle_t lt;
    CUBLAS_CHECK(cublasLtCreate(&lt));
    __nv_bfloat16 *W, *H, *dz;
    float *C, *scal;
    void *ws;
    CUDA_CHECK(cudaMalloc(&W, d * cols * 2));
    CUDA_CHECK(cudaMalloc(&H, d * rows * 2));
    CUDA_CHECK(cudaMalloc(&dz, rows * cols * 2));
    CUDA_CHECK(cudaMalloc(&C, d * std::max(rows, cols) * 4));
    CUDA_CHECK(cudaMalloc(&scal, 2 * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&ws, ws_bytes));
    fill_kernel<<<1024, 256>>>(W, d * cols, 0.02f);
    fill_kernel<<<1024, 256>>>(H, d * rows, 1.0f);
    fill_kernel<<<1024, 256>>>(dz, rows * cols, 1e-4f);
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaMemset(C, 0, d * std::max(rows, cols) * 4));
    const float hs[2] = {1.0f / 65536, 1.0f};
    CUDA_CHECK(cudaMemcpy(scal, hs, sizeof hs, cudaMemcpyHostToDevice));
    probe(lt, "dH", CUBLAS_OP_N, d, rows, cols, W, d, dz, cols, C, scal, scal + 1, ws, ws_bytes);
    probe(lt, "dW", CUBLAS_OP_T, d, cols, rows, H, d, dz, cols, C, scal, scal + 1, ws, ws_bytes);
    return 0;
}
