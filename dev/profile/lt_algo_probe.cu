/* lt_algo_probe.cu - times every algorithm cuBLASLt's heuristic offers for a GEMM shape, to see
 * how far its first choice is from the best one.
 *
 *   make build/lt_algo_probe
 *   ./build/lt_algo_probe d rows cols [ws_mib (default 1)]     the fused output layer's backward
 *   ./build/lt_algo_probe body C OC N [ws_mib (default 32)]   one linear layer of the model body
 *   ./build/lt_algo_probe linear C OC N [ws_mib (default 32)] one bias-free linear layer of the
 *                                                               families (Llama, Qwen3, Gemma 3)
 *
 * Output layer: the two GEMMs of one (chunk rows x window cols) block, as kernels/output_fused.cu
 * issues them (column-major, fp32 output, alpha from the device, beta = 1):
 *   dH  C[d x rows] += W_window[d x cols] . dZ[cols x rows]
 *   dW  C[d x cols] += H_chunk[d x rows] . dZ[cols x rows]^T
 * Body: the products kernels/matmul.cu issues for a layer with weight [OC, C] at N rows, with the
 * same transposes, types and epilogues (forward with bias or GELU+bias, input gradient with or
 * without dGELU, weight gradient in fp32 with beta = 1), and the input gradient once more with the
 * DGELU_BGRAD epilogue (bias gradient fused; fp32, then bf16), to see what that epilogue costs.
 * Linear: the families' three products of one layer (forward with no epilogue, input gradient, weight
 * gradient in fp32 with beta = 1), with split-K's in-place reduction refused as kernels/lt_plans.cu does.
 * Events, 3 warm-ups, median of 15. Prints one line per algorithm with its tile, stages, split-K and
 * cluster attributes; the heuristic's order is kept (index 0 is what the code uses today). Each
 * algorithm also runs once from the same starting output, and the line says whether its result is
 * the first algorithm's to the bit ("same bits") or not: an algorithm that sums in the same order
 * could replace the first without changing a single gradient. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <vector>

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

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

/* every attribute printed is a 32-bit integer; -1 where this algorithm has no such attribute */
static int algo_attr(const cublasLtMatmulAlgo_t *algo, cublasLtMatmulAlgoConfigAttributes_t attr) {
    int32_t v = 0;
    size_t written;
    if (cublasLtMatmulAlgoConfigGetAttribute(algo, attr, &v, sizeof v, &written) != CUBLAS_STATUS_SUCCESS) return -1;
    return v;
}

/* One GEMM as cuBLASLt sees it (column-major): D[m x n] = op(A)[m x k] . op(B)[k x n] (+ beta D). */
typedef struct {
    const char *name;
    cublasOperation_t opa, opb;
    int64_t m, n, k, lda, ldb;
    const void *A, *B;
    void *D;
    cudaDataType_t dtype;
    const float *alpha, *beta;
    cublasLtPointerMode_t pointer_mode;
    cublasLtEpilogue_t epilogue;
    const void *bias; /* BIAS / BGRAD epilogues: bias[m] (bf16 for BIAS, fp32 or bf16 for BGRAD) */
    cudaDataType_t bias_type;
    const void *aux; /* GELU_AUX / DGELU epilogues: bf16 [m x n] */
} GemmSpec;

static size_t differing_bytes(const std::vector<unsigned char> &x, const std::vector<unsigned char> &y) {
    size_t n = 0;
    for (size_t i = 0; i < x.size(); i++) n += x[i] != y[i];
    return n;
}

/* Split-K may not reduce in place in the output, as kernels/lt_plans.cu asks. */
static void probe(cublasLtHandle_t lt, const GemmSpec *g, void *ws, size_t ws_bytes) {
    cublasLtMatmulDesc_t desc;
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &g->opa, sizeof g->opa));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &g->opb, sizeof g->opb));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_POINTER_MODE, &g->pointer_mode,
                                                sizeof g->pointer_mode));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &g->epilogue, sizeof g->epilogue));
    if (g->bias) {
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &g->bias_type,
                                                    sizeof g->bias_type));
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g->bias, sizeof g->bias));
    }
    if (g->aux) {
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &g->m, sizeof g->m));
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &g->aux,
                                                    sizeof g->aux));
    }
    cublasLtMatrixLayout_t a, b, c;
    if (g->opa == CUBLAS_OP_N) CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&a, CUDA_R_16BF, g->m, g->k, g->lda));
    else CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&a, CUDA_R_16BF, g->k, g->m, g->lda));
    if (g->opb == CUBLAS_OP_N) CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&b, CUDA_R_16BF, g->k, g->n, g->ldb));
    else CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&b, CUDA_R_16BF, g->n, g->k, g->ldb));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&c, g->dtype, g->m, g->n, g->m));
    cublasLtMatmulPreference_t pref;
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes,
                                                      sizeof ws_bytes));
    uint32_t schemes = CUBLASLT_REDUCTION_SCHEME_MASK & ~(uint32_t)CUBLASLT_REDUCTION_SCHEME_INPLACE;
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &schemes,
                                                      sizeof schemes));
    uint32_t align = 16;
    for (cublasLtMatmulPreferenceAttributes_t at :
         {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
          CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
        CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, at, &align, sizeof align));
    cublasLtMatmulHeuristicResult_t res[32];
    int found = 0;
    cublasStatus_t hs = cublasLtMatmulAlgoGetHeuristic(lt, desc, a, b, c, c, pref, 32, res, &found);
    const double flop = 2.0 * g->m * g->n * g->k;
    const size_t out_bytes = (size_t)g->m * g->n * (g->dtype == CUDA_R_32F ? 4 : 2);
    std::vector<unsigned char> first(out_bytes), mine(out_bytes), start(out_bytes);
    CUDA_CHECK(cudaMemcpy(start.data(), g->D, out_bytes, cudaMemcpyDeviceToHost));
    printf("%s m=%lld n=%lld k=%lld ws=%zu MiB: %d algorithms%s\n", g->name, (long long)g->m, (long long)g->n,
           (long long)g->k, ws_bytes >> 20, found, hs == CUBLAS_STATUS_SUCCESS ? "" : " (heuristic refused)");
    for (int i = 0; i < found; i++) {
        const cublasLtMatmulAlgo_t *al = &res[i].algo;
        const int id = algo_attr(al, CUBLASLT_ALGO_CONFIG_ID), tile = algo_attr(al, CUBLASLT_ALGO_CONFIG_TILE_ID);
        const int stages = algo_attr(al, CUBLASLT_ALGO_CONFIG_STAGES_ID);
        const int splitk = algo_attr(al, CUBLASLT_ALGO_CONFIG_SPLITK_NUM);
        const int red = algo_attr(al, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME);
        const int cluster = algo_attr(al, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID);
        const int swz = algo_attr(al, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING);
        CUDA_CHECK(cudaMemcpy(g->D, start.data(), out_bytes, cudaMemcpyHostToDevice));
        cublasStatus_t once = cublasLtMatmul(lt, desc, g->alpha, g->A, a, g->B, b, g->beta, g->D, c, g->D, c,
                                             &res[i].algo, ws, ws_bytes, 0);
        CUDA_CHECK(cudaDeviceSynchronize());
        CUDA_CHECK(cudaMemcpy((i ? mine : first).data(), g->D, out_bytes, cudaMemcpyDeviceToHost));
        char bits[96];
        if (once != CUBLAS_STATUS_SUCCESS) snprintf(bits, sizeof bits, "failed");
        else if (i == 0)
            snprintf(bits, sizeof bits, "reference (%zu of %zu bytes changed by the product)",
                     differing_bytes(first, start), out_bytes);
        else if (size_t d = differing_bytes(first, mine)) snprintf(bits, sizeof bits, "other bits (%zu bytes)", d);
        else snprintf(bits, sizeof bits, "same bits");
        const float ms = median_ms(lt, desc, a, b, c, &res[i].algo, g->A, g->B, g->D, g->alpha, g->beta, ws, ws_bytes);
        printf("  #%-2d id %3d tile %3d stages %3d splitk %2d red %d cluster %3d swz %d ws %8zu  %8.4f ms  %6.1f TF/s  %s\n",
               i, id, tile, stages, splitk, red, cluster, swz, res[i].workspaceSize, ms,
               ms > 0 ? flop / (ms * 1e-3) / 1e12 : 0.0, bits);
    }
    CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(pref));
    CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(a));
    CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(b));
    CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(c));
    CUBLAS_CHECK(cublasLtMatmulDescDestroy(desc));
}

__global__ void fill_kernel(__nv_bfloat16 *x, int64_t n, float scale) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    {
        uint64_t z = (uint64_t)i + 0x9e3779b97f4a7c15ull; /* splitmix64: no period a GEMM could line up with */
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        z ^= z >> 31;
        x[i] = __float2bfloat16(scale * ((float)(z >> 40) / 8388608.0f - 1.0f));
    }
}

static __nv_bfloat16 *random_bf16(int64_t n, float scale) {
    __nv_bfloat16 *x;
    CUDA_CHECK(cudaMalloc(&x, n * 2));
    fill_kernel<<<1024, 256>>>(x, n, scale);
    CUDA_CHECK(cudaGetLastError());
    return x;
}

/* The fused output layer's backward GEMMs for one (rows x cols) block. */
static void probe_output_layer(cublasLtHandle_t lt, int64_t d, int64_t rows, int64_t cols, void *ws, size_t ws_bytes) {
    __nv_bfloat16 *W = random_bf16(d * cols, 0.02f), *H = random_bf16(d * rows, 1.0f);
    __nv_bfloat16 *dz = random_bf16(rows * cols, 1e-4f);
    float *C, *scal;
    CUDA_CHECK(cudaMalloc(&C, d * std::max(rows, cols) * 4));
    CUDA_CHECK(cudaMemset(C, 0, d * std::max(rows, cols) * 4));
    CUDA_CHECK(cudaMalloc(&scal, 2 * sizeof(float)));
    const float hs[2] = {1.0f / 65536, 1.0f};
    CUDA_CHECK(cudaMemcpy(scal, hs, sizeof hs, cudaMemcpyHostToDevice));
    GemmSpec dh = {"dH", CUBLAS_OP_N, CUBLAS_OP_N, d, rows, cols, d, cols, W, dz, C, CUDA_R_32F, scal, scal + 1,
                   CUBLASLT_POINTER_MODE_DEVICE, CUBLASLT_EPILOGUE_DEFAULT, NULL, CUDA_R_32F, NULL};
    GemmSpec dw = {"dW", CUBLAS_OP_N, CUBLAS_OP_T, d, cols, rows, d, cols, H, dz, C, CUDA_R_32F, scal, scal + 1,
                   CUBLASLT_POINTER_MODE_DEVICE, CUBLASLT_EPILOGUE_DEFAULT, NULL, CUDA_R_32F, NULL};
    probe(lt, &dh, ws, ws_bytes);
    probe(lt, &dw, ws, ws_bytes);
}

/* g again under another name and epilogue, reading or writing aux. */
static void probe_with_epilogue(cublasLtHandle_t lt, GemmSpec *g, const char *name, cublasLtEpilogue_t epilogue,
                                const void *aux, void *ws, size_t ws_bytes) {
    g->name = name, g->epilogue = epilogue, g->aux = aux;
    probe(lt, g, ws, ws_bytes);
}

/* kernels/matmul.cu's products for weight [OC, C] at N rows (row-major there, so each matrix is its
 * transpose here). gpt2: with
 * GPT-2's epilogues (the forward with bias, then GELU + bias as fc; the input gradient plain, with
 * dGELU as fcproj, and with DGELU_BGRAD to see what that epilogue costs); else the families'
 * bias-free forward, input gradient and weight gradient. */
static void probe_layer(cublasLtHandle_t lt, int64_t C, int64_t OC, int64_t N, void *ws, size_t ws_bytes, int gpt2) {
    __nv_bfloat16 *Wt = random_bf16(OC * C, 0.02f), *inp = random_bf16(N * C, 1.0f);
    __nv_bfloat16 *out = random_bf16(N * OC, 1.0f), *aux = random_bf16(N * std::max(C, OC), 1.0f);
    __nv_bfloat16 *bias = random_bf16(OC, 0.1f), *dinp = random_bf16(N * C, 1.0f);
    float *dW, *dbias;
    CUDA_CHECK(cudaMalloc(&dW, C * OC * 4));
    CUDA_CHECK(cudaMemset(dW, 0, C * OC * 4));
    CUDA_CHECK(cudaMalloc(&dbias, std::max(C, OC) * 4));
    static const float one = 1.0f, zero = 0.0f;
    const cublasLtPointerMode_t host = CUBLASLT_POINTER_MODE_HOST;
    const cublasLtEpilogue_t none = CUBLASLT_EPILOGUE_DEFAULT;
    GemmSpec fwd = {"forward", CUBLAS_OP_T, CUBLAS_OP_N, OC, N, C, C, C, Wt, inp, out, CUDA_R_16BF, &one, &zero,
                    host, none, NULL, CUDA_R_16BF, NULL};
    if (gpt2) fwd.name = "forward, bias", fwd.epilogue = CUBLASLT_EPILOGUE_BIAS, fwd.bias = bias;
    probe(lt, &fwd, ws, ws_bytes);
    if (gpt2) probe_with_epilogue(lt, &fwd, "forward, GELU + bias (as fc)", CUBLASLT_EPILOGUE_GELU_AUX_BIAS, aux, ws,
                                  ws_bytes);
    GemmSpec din = {"input gradient", CUBLAS_OP_N, CUBLAS_OP_N, C, N, OC, C, OC, Wt, out, dinp, CUDA_R_16BF, &one,
                    &zero, host, none, NULL, CUDA_R_32F, NULL};
    probe(lt, &din, ws, ws_bytes);
    if (gpt2) {
        probe_with_epilogue(lt, &din, "input gradient, dGELU (as fcproj)", CUBLASLT_EPILOGUE_DGELU, aux, ws, ws_bytes);
        din.bias = dbias;
        probe_with_epilogue(lt, &din, "input gradient, dGELU + bias gradient (DGELU_BGRAD)",
                            CUBLASLT_EPILOGUE_DGELU_BGRAD, aux, ws, ws_bytes);
        din.bias_type = CUDA_R_16BF;
        probe_with_epilogue(lt, &din, "input gradient, dGELU + bf16 bias gradient (DGELU_BGRAD)",
                            CUBLASLT_EPILOGUE_DGELU_BGRAD, aux, ws, ws_bytes);
    }
    GemmSpec dw = {"weight gradient", CUBLAS_OP_N, CUBLAS_OP_T, C, OC, N, C, OC, inp, out, dW, CUDA_R_32F, &one, &one,
                   host, none, NULL, CUDA_R_32F, NULL};
    probe(lt, &dw, ws, ws_bytes);
    for (void *x : {(void *)dbias, (void *)dW, (void *)dinp, (void *)bias, (void *)aux, (void *)out, (void *)inp,
                    (void *)Wt})
        CUDA_CHECK(cudaFree(x));
}

int main(int argc, char **argv) {
    const int linear = argc > 1 && strcmp(argv[1], "linear") == 0;
    const int body = linear || (argc > 1 && strcmp(argv[1], "body") == 0);
    if (argc < 4 + body) {
        fprintf(stderr, "usage: %s d rows cols [ws_mib]\n       %s body|linear C OC N [ws_mib]\n", argv[0],
                argv[0]);
        return 1;
    }
    const int64_t x = atoll(argv[1 + body]), y = atoll(argv[2 + body]), z = atoll(argv[3 + body]);
    const size_t ws_bytes = (size_t)(argc > 4 + body ? atoll(argv[4 + body]) : body ? 32 : 1) << 20;
    cublasLtHandle_t lt;
    CUBLAS_CHECK(cublasLtCreate(&lt));
    void *ws;
    CUDA_CHECK(cudaMalloc(&ws, ws_bytes));
    if (body) probe_layer(lt, x, y, z, ws, ws_bytes, !linear);
    else probe_output_layer(lt, x, y, z, ws, ws_bytes);
    return 0;
}
