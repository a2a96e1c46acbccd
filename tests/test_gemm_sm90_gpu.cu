/* tests/test_gemm_sm90_gpu.cu - our Hopper GEMM (kernels/gemm_sm90.h), the fused output layer's dW
 * and dH products, against cublasGemmEx with the same layouts (every element within 1e-3 of
 * max(|cuBLAS|, rms)) and fp64 dot products at sampled elements, on fresh random inputs at sizes off
 * its tiles (M, N off 128/256, K off 64), E's row padding NaN so that a read past the matrix shows;
 * and two runs bitwise equal. The seed is printed with each failure. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <vector>

#include <cublas_v2.h>
#include <cuda_bf16.h>

#include "common/rng.h"
#include "kernels/cuda_check.h"
#include "kernels/gemm_sm90.h"
#include "tests/test.h"

#define ELEM_TOL 1e-3
#define SPOTS 64

/* One product's inputs and outputs: dW (dw = 1): C [M x N] += alpha E^T B, E [K x M]; dH: C = E B,
 * E [M x K]; E's row stride lde (its padding NaN), B [K x N]. */
typedef struct {
    int dw;
    int64_t M, N, K, lde;
    uint64_t seed;
    std::vector<__nv_bfloat16> E, B;
    std::vector<float> C0; /* dW's starting values */
    float alpha;
    __nv_bfloat16 *dE, *dB;
    float *dalpha;
} Product;

static uint64_t fresh_seed(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20);
}

static void product_init(Product *p, int dw, int64_t M, int64_t N, int64_t K) {
    p->dw = dw, p->M = M, p->N = N, p->K = K, p->seed = fresh_seed();
    const int64_t erows = dw ? K : M, ecols = dw ? M : K;
    p->lde = (ecols + 255) / 256 * 256;
    Rng r;
    rng_seed(&r, p->seed);
    p->E.resize((size_t)(erows * p->lde));
    for (int64_t i = 0; i < erows * p->lde; i++) /* like scaled exponentials: in [0, 1) */
        p->E[(size_t)i] = __float2bfloat16(i % p->lde < ecols ? (float)rng_uniform(&r) : NAN);
    p->B.resize((size_t)(K * N));
    for (auto &b : p->B) b = __float2bfloat16((float)(2.0 * rng_uniform(&r) - 1.0));
    p->alpha = dw ? 0.75f : 1.0f;
    if (dw) {
        p->C0.resize((size_t)(M * N));
        for (auto &c : p->C0) c = (float)(2.0 * rng_uniform(&r) - 1.0);
    }
    CUDA_CHECK(cudaMalloc(&p->dE, p->E.size() * sizeof(__nv_bfloat16)));
    CUDA_CHECK(cudaMalloc(&p->dB, p->B.size() * sizeof(__nv_bfloat16)));
    CUDA_CHECK(cudaMalloc(&p->dalpha, sizeof(float)));
    CUDA_CHECK(cudaMemcpy(p->dE, p->E.data(), p->E.size() * sizeof(__nv_bfloat16), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(p->dB, p->B.data(), p->B.size() * sizeof(__nv_bfloat16), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(p->dalpha, &p->alpha, sizeof(float), cudaMemcpyHostToDevice));
}

static void product_free(Product *p) {
    CUDA_CHECK(cudaFree(p->dalpha));
    CUDA_CHECK(cudaFree(p->dB));
    CUDA_CHECK(cudaFree(p->dE));
}

/* A device output holding the product's starting state: dW's C0, or NaN for dH (every element must
 * be written). */
static float *fresh_output(const Product *p) {
    float *c;
    const size_t bytes = (size_t)(p->M * p->N) * sizeof(float);
    CUDA_CHECK(cudaMalloc(&c, bytes));
    if (p->dw) CUDA_CHECK(cudaMemcpy(c, p->C0.data(), bytes, cudaMemcpyHostToDevice));
    else CUDA_CHECK(cudaMemset(c, 0xFF, bytes));
    return c;
}

static std::vector<float> download(const float *c, int64_t n) {
    std::vector<float> h((size_t)n);
    CUDA_CHECK(cudaMemcpy(h.data(), c, (size_t)n * sizeof(float), cudaMemcpyDeviceToHost));
    return h;
}

/* Ours: dW, or dH with `splits` (0: the launcher's rule) and parts_bytes of workspace. */
static std::vector<float> run_ours(const GemmSm90 *g, const Product *p, int splits, size_t parts_bytes,
                                   GemmSm90Plan *plan) {
    float *c = fresh_output(p), *parts = NULL;
    if (parts_bytes) CUDA_CHECK(cudaMalloc(&parts, parts_bytes));
    if (p->dw) gemm_sm90_dw(g, p->M, p->N, p->K, p->dE, p->lde, p->dB, p->N, c, p->dalpha, 0);
    else *plan = gemm_sm90_dh(g, p->M, p->N, p->K, p->dE, p->lde, p->dB, p->N, c, parts, parts_bytes, splits, 0);
    const cudaError_t e = cudaDeviceSynchronize();
    if (e != cudaSuccess) {
        gemm_sm90_report_hang(g);
        fprintf(stderr, "error: our GEMM failed: %s\n", cudaGetErrorString(e));
        exit(1);
    }
    std::vector<float> h = download(c, p->M * p->N);
    if (parts) CUDA_CHECK(cudaFree(parts));
    CUDA_CHECK(cudaFree(c));
    return h;
}

/* cuBLAS on the column-major views of the row-major matrices:
 *   dW: C^T [N x M] += alpha . B^T [N x K] . (E^T [M x K])^T      (OP_N, OP_T)
 *   dH: C^T [N x M]  = B^T [N x K] . E^T [K x M]                   (OP_N, OP_N) */
static std::vector<float> run_cublas(const Product *p) {
    cublasHandle_t h;
    CUBLAS_CHECK(cublasCreate(&h));
    float *c = fresh_output(p);
    const float beta = p->dw ? 1.0f : 0.0f;
    CUBLAS_CHECK(cublasGemmEx(h, CUBLAS_OP_N, p->dw ? CUBLAS_OP_T : CUBLAS_OP_N, (int)p->N, (int)p->M, (int)p->K,
                              &p->alpha, p->dB, CUDA_R_16BF, (int)p->N, p->dE, CUDA_R_16BF, (int)p->lde, &beta, c,
                              CUDA_R_32F, (int)p->N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<float> out = download(c, p->M * p->N);
    CUDA_CHECK(cudaFree(c));
    CUBLAS_CHECK(cublasDestroy(h));
    return out;
}

/* C[m][n] in fp64 from the bf16 inputs. */
static double fp64_element(const Product *p, int64_t m, int64_t n) {
    double acc = 0.0;
    for (int64_t k = 0; k < p->K; k++) {
        const double a = __bfloat162float(p->dw ? p->E[(size_t)(k * p->lde + m)] : p->E[(size_t)(m * p->lde + k)]);
        acc += a * (double)__bfloat162float(p->B[(size_t)(k * p->N + n)]);
    }
    return p->dw ? (double)p->C0[(size_t)(m * p->N + n)] + (double)p->alpha * acc : acc;
}

/* ours against cuBLAS at every element and fp64 at the corners and sampled elements */
static void expect_matches(const Product *p, const std::vector<float> &ours, const std::vector<float> &ref,
                           const char *what) {
    const size_t n = ref.size();
    double ss = 0.0;
    for (float r : ref) ss += (double)r * r;
    const double rms = sqrt(ss / (double)n);
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < n; i++)
        if (!(fabs((double)ours[i] - ref[i]) <= ELEM_TOL * fmax(fabs((double)ref[i]), rms)) && bad++ == 0) first = i;
    CHECK(bad == 0, "%s M=%lld N=%lld K=%lld: %zu elements off cuBLAS, first row %zu col %zu: ours %.7g cuBLAS %.7g (seed %llu)",
          what, (long long)p->M, (long long)p->N, (long long)p->K, bad, first / (size_t)p->N, first % (size_t)p->N,
          ours[first], ref[first], (unsigned long long)p->seed);
    Rng r;
    rng_seed(&r, p->seed ^ 0x5157);
    double worst = 0.0;
    for (int s = 0; s < SPOTS; s++) {
        const int64_t m = s == 0 ? 0 : s == 1 ? p->M - 1 : (int64_t)(rng_uniform(&r) * (double)p->M);
        const int64_t c = s == 0 ? 0 : s == 1 ? p->N - 1 : (int64_t)(rng_uniform(&r) * (double)p->N);
        const double x = fp64_element(p, m, c);
        const double e = fabs((double)ours[(size_t)(m * p->N + c)] - x) / fmax(fabs(x), rms);
        worst = isnan(e) || e > worst ? e : worst;
    }
    CHECK(worst <= ELEM_TOL, "%s: fp64 spots off by %.3g (seed %llu)", what, worst, (unsigned long long)p->seed);
}

static void expect_bitwise(const std::vector<float> &a, const std::vector<float> &b, const char *what) {
    CHECK(memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0, "%s: a second run differs", what);
}

static void init_or_fail(GemmSm90 *g) { REQUIRE(gemm_sm90_init(g) == 0, "gemm_sm90_init failed"); }

TEST(sm90_gemm_dw_adds_alpha_from_the_device_into_a_nonzero_dw_at_awkward_sizes) {
    GemmSm90 g;
    init_or_fail(&g);
    Product p = {};
    product_init(&p, 1, 1000, 832, 300); /* V off the tiles, d off 256, C off 64 */
    GemmSm90Plan none;
    const std::vector<float> ours = run_ours(&g, &p, 0, 0, &none), ref = run_cublas(&p);
    expect_matches(&p, ours, ref, "dW");
    expect_bitwise(ours, run_ours(&g, &p, 0, 0, &none), "dW");
    g.max_clusters = 1; /* one cluster walks every unit */
    expect_matches(&p, run_ours(&g, &p, 0, 0, &none), ref, "dW by one cluster");
    product_free(&p);
    gemm_sm90_free(&g);
}

TEST(sm90_gemm_dh_split_and_unsplit_match_cublas_and_fp64_at_awkward_sizes) {
    GemmSm90 g;
    init_or_fail(&g);
    Product p = {};
    product_init(&p, 0, 300, 832, 1000); /* C off the rows, d off 256, V off 64 */
    const std::vector<float> ref = run_cublas(&p);
    const size_t ws = gemm_sm90_dh_workspace_bytes(p.M, p.N);
    for (int splits = 1; splits <= 3; splits += 2) {
        GemmSm90Plan plan;
        const std::vector<float> ours = run_ours(&g, &p, splits, ws, &plan);
        CHECK(plan.splits == splits && plan.panel_rows == p.M, "asked %d splits, ran %d in panels of %lld", splits,
              plan.splits, (long long)plan.panel_rows);
        expect_matches(&p, ours, ref, splits > 1 ? "dH split" : "dH unsplit");
        expect_bitwise(ours, run_ours(&g, &p, splits, ws, &plan), "dH");
    }
    product_free(&p);
    gemm_sm90_free(&g);
}

TEST(sm90_gemm_dh_runs_in_row_panels_when_the_partials_do_not_fit) {
    GemmSm90 g;
    init_or_fail(&g);
    Product p = {};
    product_init(&p, 0, 4100, 768, 3000);
    /* 3 splits of all 4100 rows need 2 partials of them; the workspace holds 2 of 2048 rows: panels
     * of 1536 rows, the last one ragged */
    const size_t ws = 2 * (size_t)2048 * 768 * sizeof(float);
    GemmSm90Plan plan;
    const std::vector<float> ours = run_ours(&g, &p, 3, ws, &plan), ref = run_cublas(&p);
    CHECK(plan.splits == 3 && plan.panel_rows == 1536, "ran %d splits in panels of %lld rows", plan.splits,
          (long long)plan.panel_rows);
    expect_matches(&p, ours, ref, "dH in panels");
    expect_bitwise(ours, run_ours(&g, &p, 3, ws, &plan), "dH in panels");
    /* the launcher's own rule at this shape, with the layer's workspace */
    const size_t layer_ws = gemm_sm90_dh_workspace_bytes(p.M, p.N);
    expect_matches(&p, run_ours(&g, &p, 0, layer_ws, &plan), ref, "dH by the rule");
    product_free(&p);
    gemm_sm90_free(&g);
}

/* The rule: K splits only when the cluster tiles would leave clusters idle, and the partials always
 * fit the workspace. */
TEST(sm90_gemm_dh_splits_only_when_its_tiles_leave_clusters_idle) {
    GemmSm90 g;
    init_or_fail(&g);
    const struct {
        int64_t M, N, K;
    } shapes[] = {{4096, 4096, 128256}, {4096, 768, 262144}, {16384, 768, 50304}, {300, 832, 1000}};
    for (const auto &s : shapes) {
        const size_t ws = gemm_sm90_dh_workspace_bytes(s.M, s.N);
        const GemmSm90Plan p = gemm_sm90_dh_plan(&g, s.M, s.N, s.K, ws, 0);
        const int64_t tiles = (s.M + 255) / 256 * ((s.N + 255) / 256);
        const int64_t waves = (tiles + g.clusters - 1) / g.clusters;
        const int full = (double)tiles >= 0.9 * (double)(waves * g.clusters);
        fprintf(stderr, "[%lldx%lldx%lld: %d splits, panels of %lld] ", (long long)s.M, (long long)s.N, (long long)s.K,
                p.splits, (long long)p.panel_rows);
        if (full) CHECK(p.splits == 1 && p.panel_rows == s.M, "%lld x %lld fills the GPU yet ran %d splits",
                        (long long)s.M, (long long)s.N, p.splits);
        CHECK(p.splits == 1 || (size_t)(p.splits - 1) * (size_t)p.panel_rows * (size_t)s.N * 4 <= ws,
              "%d splits of %lld rows overflow the workspace", p.splits, (long long)p.panel_rows);
    }
    /* 48 cluster tiles on an H100 or H200 (66 clusters): split */
    const GemmSm90Plan p = gemm_sm90_dh_plan(&g, 4096, 768, 262144, gemm_sm90_dh_workspace_bytes(4096, 768), 0);
    if (g.clusters >= 60) CHECK(p.splits > 1, "4096 x 768 x 262144 ran unsplit on %d clusters", g.clusters);
    gemm_sm90_free(&g);
}
