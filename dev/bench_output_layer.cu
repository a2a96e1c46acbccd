/* dev/bench_output_layer.cu - times the output layers of kernels/output_layer.h (the same
 * launchers the trainer calls) on the grid of issue 5, with one cuBLAS logits-sized GEMM as the
 * yardstick.
 *
 *   ./build/bench_output_layer                 the grid, most important shapes first
 *   ./build/bench_output_layer --max-seconds S stop starting new shapes after S seconds
 *   ./build/bench_output_layer --shape d,N,V   one shape (repeatable)
 *   ./build/bench_output_layer --no-canonical  skip the canonical layer (and its N x V memory)
 *   ./build/bench_output_layer --no-chunked    skip the chunked layer (canonical in blocks of 4 GiB of logits)
 *   ./build/bench_output_layer --no-fused      skip the fused layer
 *   ./build/bench_output_layer --logits-mb MB  the chunked layer's budget for one block of logits
 *   ./build/bench_output_layer --kernel K      the fused layer's tile kernel: 1 mma.sync, 2 wgmma 128x256,
 *                                              3 wgmma 128x128, 4 TMA-fed wgmma (the default on Hopper),
 *                                              5 TMA-fed wgmma in 2-CTA clusters (W multicast)
 *   ./build/bench_output_layer --l2-mb MB      H bytes the persistent kernels keep in L2 (tuning)
 *   ./build/bench_output_layer --fb-only       time only the fused forward+backward (no yardstick GEMM, no
 *                                              canonical, no forward alone): cheap repeated runs of a shape
 *   ./build/bench_output_layer --reps R        R timed calls (after the 2 warm-ups) instead of 3..20
 * The fused backward's chunk and window budgets come from FUSEDGPT_OUTL_DZ_MB, _CHUNK_ROWS, _DH_MB
 * (kernels/output_fused.cu; dev/output_layer_sweep.sh sweeps them).
 *
 * Inputs: H ~ N(0,1), W ~ N(0, 0.02^2) bf16, uniform targets, mean loss, as in ../shared/anchors.md.
 * Times: CUDA events, 2 warm-up calls, median of 3..20 timed calls. TFLOP/s counts G = 2 N V d per
 * logits-sized GEMM: 1G forward, 4G fused forward+backward (the backward recomputes the logits),
 * 3G canonical and chunked forward+backward. Extra memory: output_layer_workspace_bytes (beyond H, W, targets,
 * dH, dW). Prints a table, then CSV lines starting with "csv,". */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <algorithm>
#include <vector>

#include <cublas_v2.h>
#include <cuda_bf16.h>

#include "kernels/cuda_check.h"
#include "kernels/output_layer.h"

typedef struct {
    int d;
    int64_t N, V;
} Shape;

typedef struct {
    Shape s;
    double gemm_ms, canon_fwd_ms, canon_fb_ms, fused_fwd_ms, fused_fb_ms, chunk_fb_ms;
    double canon_mem, fused_mem, chunk_mem; /* bytes */
} Row;

__device__ __forceinline__ uint64_t mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* approximately normal: sum of 4 uniforms, centred and scaled to unit variance */
__global__ void fill_normal_kernel(__nv_bfloat16 *x, int64_t n, float std, uint64_t seed) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        uint64_t h = mix(seed ^ (uint64_t)i * 0x9E3779B97F4A7C15ull);
        float s = 0;
        for (int k = 0; k < 4; k++) s += (float)((h >> (16 * k)) & 0xffff) * (1.0f / 65536.0f);
        x[i] = __float2bfloat16((s - 2.0f) * 1.7320508f * std);
    }
}

__global__ void fill_targets_kernel(int32_t *t, int64_t n, int64_t V, uint64_t seed) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        t[i] = (int32_t)(mix(seed ^ (uint64_t)i * 0xD1B54A32D192ED03ull) % (uint64_t)V);
}

static cudaEvent_t ev0, ev1;
static int g_reps; /* --reps: fixed number of timed calls; 0: 3..20, about 1.5 s */

/* median ms of fn() over reps, after 2 warm-up calls */
template <typename F> static double time_ms(F fn) {
    fn();
    fn();
    CUDA_CHECK(cudaEventRecord(ev0));
    fn();
    CUDA_CHECK(cudaEventRecord(ev1));
    CUDA_CHECK(cudaEventSynchronize(ev1));
    float first;
    CUDA_CHECK(cudaEventElapsedTime(&first, ev0, ev1));
    int reps = (int)ceil(1500.0 / (first > 0.01 ? first : 0.01));
    reps = g_reps > 0 ? g_reps : std::max(3, std::min(20, reps));
    std::vector<float> t(reps);
    for (int r = 0; r < reps; r++) {
        CUDA_CHECK(cudaEventRecord(ev0));
        fn();
        CUDA_CHECK(cudaEventRecord(ev1));
        CUDA_CHECK(cudaEventSynchronize(ev1));
        CUDA_CHECK(cudaEventElapsedTime(&t[r], ev0, ev1));
    }
    std::sort(t.begin(), t.end());
    return t[reps / 2];
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static size_t g_logits_budget; /* --logits-mb; 0: the chunked layer's default */

static int g_with_fused = 1; /* --no-fused: 0 */

static Row bench_shape(Shape s, int with_canonical, int with_chunked, int fb_only, cublasHandle_t cublas) {
    Row r = {};
    r.s = s;
    const int64_t N = s.N, V = s.V, Vp = (V + 127) / 128 * 128;
    const int d = s.d;
    __nv_bfloat16 *H, *W, *dH;
    int32_t *tg;
    float *dW, *loss;
    CUDA_CHECK(cudaMalloc(&H, (size_t)N * d * 2));
    CUDA_CHECK(cudaMalloc(&W, (size_t)Vp * d * 2));
    CUDA_CHECK(cudaMalloc(&dH, (size_t)N * d * 2));
    CUDA_CHECK(cudaMalloc(&dW, (size_t)Vp * d * 4));
    CUDA_CHECK(cudaMalloc(&tg, (size_t)N * 4));
    CUDA_CHECK(cudaMalloc(&loss, 4));
    fill_normal_kernel<<<1024, 256>>>(H, N * d, 1.0f, 1234 + N);
    CUDA_CHECK(cudaGetLastError());
    fill_normal_kernel<<<1024, 256>>>(W, Vp * d, 0.02f, 5678 + V);
    CUDA_CHECK(cudaGetLastError());
    fill_targets_kernel<<<256, 256>>>(tg, N, V, 42);
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaMemset(dW, 0, (size_t)Vp * d * 4));

    OutputLayerArgs a = {};
    a.H = H, a.W = W, a.targets = tg, a.N = N, a.reduction = OUTPUT_REDUCE_MEAN, a.grad_scale = 1.0f;
    a.loss = loss, a.dH = dH, a.dW = dW;

    r.gemm_ms = r.canon_fwd_ms = r.canon_fb_ms = r.fused_fwd_ms = r.chunk_fb_ms = NAN;
    size_t free_b, total_b;
    const size_t logits_bytes = (size_t)N * Vp * 2, margin = (size_t)256 << 20;
    CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    if (!fb_only && logits_bytes + margin < free_b) {
        /* yardstick: logits^T [V x N] (ld Vp) = (W stored d x V)^T (H stored d x N), bf16 out, fp32
         * accumulation, cuBLAS's own algorithm choice */
        __nv_bfloat16 *out;
        const float one = 1.0f, zero = 0.0f;
        CUDA_CHECK(cudaMalloc(&out, logits_bytes));
        r.gemm_ms = time_ms([&] {
            CUBLAS_CHECK(cublasGemmEx(cublas, CUBLAS_OP_T, CUBLAS_OP_N, (int)V, (int)N, d, &one, W, CUDA_R_16BF, d, H,
                                      CUDA_R_16BF, d, &zero, out, CUDA_R_16BF, (int)Vp, CUBLAS_COMPUTE_32F,
                                      CUBLAS_GEMM_DEFAULT));
        });
        CUDA_CHECK(cudaFree(out));
    }
    r.canon_mem = (double)output_layer_workspace_bytes(OUTPUT_LAYER_CANONICAL, N, V, d, 0);
    if (with_canonical && !fb_only && (size_t)r.canon_mem + margin < free_b) {
        OutputLayer *L = output_layer_create(OUTPUT_LAYER_CANONICAL, N, V, d, 0);
        if (!L) exit(1);
        r.canon_fwd_ms = time_ms([&] {
            if (output_layer_forward(L, &a, 0)) exit(1);
        });
        r.canon_fb_ms = time_ms([&] {
            if (output_layer_forward_backward(L, &a, 0)) exit(1);
        });
        CUDA_CHECK(cudaDeviceSynchronize());
        output_layer_destroy(L);
    }

    r.chunk_mem = (double)output_layer_workspace_bytes(OUTPUT_LAYER_CHUNKED, N, V, d, g_logits_budget);
    if (with_chunked && !fb_only && (size_t)r.chunk_mem + margin < free_b) {
        OutputLayer *L = output_layer_create(OUTPUT_LAYER_CHUNKED, N, V, d, g_logits_budget);
        if (!L) exit(1);
        r.chunk_fb_ms = time_ms([&] {
            if (output_layer_forward_backward(L, &a, 0)) exit(1);
        });
        CUDA_CHECK(cudaDeviceSynchronize());
        output_layer_destroy(L);
    }

    r.fused_mem = (double)output_layer_workspace_bytes(OUTPUT_LAYER_FUSED, N, V, d, 0);
    r.fused_fb_ms = NAN;
    if (g_with_fused) {
        OutputLayer *F = output_layer_create(OUTPUT_LAYER_FUSED, N, V, d, 0);
        if (!F) exit(1);
        if (!fb_only)
            r.fused_fwd_ms = time_ms([&] {
                if (output_layer_forward(F, &a, 0)) exit(1);
            });
        r.fused_fb_ms = time_ms([&] {
            if (output_layer_forward_backward(F, &a, 0)) exit(1);
        });
        float l;
        CUDA_CHECK(cudaMemcpy(&l, loss, 4, cudaMemcpyDeviceToHost));
        if (!(l > 0 && l < 100)) fprintf(stderr, "warning: fused loss %g looks wrong at d=%d N=%lld V=%lld\n", l, d,
                                         (long long)N, (long long)V);
        output_layer_destroy(F);
    }

    CUDA_CHECK(cudaFree(loss));
    CUDA_CHECK(cudaFree(tg));
    CUDA_CHECK(cudaFree(dW));
    CUDA_CHECK(cudaFree(dH));
    CUDA_CHECK(cudaFree(W));
    CUDA_CHECK(cudaFree(H));
    return r;
}

static double tflops(double g_count, Shape s, double ms) {
    return g_count * 2.0 * (double)s.N * (double)s.V * s.d / (ms * 1e-3) / 1e12;
}

static void print_row(const Row *r) {
    const Shape s = r->s;
    printf("%5d %6lld %7lld | %7.2f | %8.2f %8.2f %7.0f | %8.2f %8.2f %7.0f | %5.0f %5.0f | %9.1f %8.1f | %8.2f %8.1f\n",
           s.d, (long long)s.N, (long long)s.V, r->gemm_ms, r->canon_fwd_ms, r->canon_fb_ms,
           tflops(3, s, r->canon_fb_ms), r->fused_fwd_ms, r->fused_fb_ms, tflops(4, s, r->fused_fb_ms),
           tflops(1, s, r->fused_fwd_ms), tflops(1, s, r->gemm_ms), r->canon_mem / 1e6, r->fused_mem / 1e6,
           r->chunk_fb_ms, r->chunk_mem / 1e6);
    fflush(stdout);
}

static const char *HEADER =
    "    d      N       V | gemm ms | can fwd  can f+b  TF(3G) | fus fwd  fus f+b  TF(4G) | TFfwd TFgem | can MB    fus MB"
    " | chk f+b   chk MB\n";

int main(int argc, char **argv) {
    double max_s = 1e30;
    int with_canonical = 1, with_chunked = 1, fb_only = 0;
    std::vector<Shape> shapes;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--max-seconds") && i + 1 < argc) max_s = atof(argv[++i]);
        else if (!strcmp(argv[i], "--no-canonical")) with_canonical = 0;
        else if (!strcmp(argv[i], "--no-chunked")) with_chunked = 0;
        else if (!strcmp(argv[i], "--no-fused")) g_with_fused = 0;
        else if (!strcmp(argv[i], "--logits-mb") && i + 1 < argc) g_logits_budget = (size_t)(atof(argv[++i]) * 1048576);
        else if (!strcmp(argv[i], "--fb-only")) fb_only = 1;
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) g_reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--kernel") && i + 1 < argc) output_layer_select_tile_kernel(atoi(argv[++i]));
        else if (!strcmp(argv[i], "--l2-mb") && i + 1 < argc) output_layer_set_l2_budget((size_t)(atof(argv[++i]) * 1048576));
        else if (!strcmp(argv[i], "--shape") && i + 1 < argc) {
            Shape s;
            long long n, v;
            if (sscanf(argv[++i], "%d,%lld,%lld", &s.d, &n, &v) != 3) {
                fprintf(stderr, "error: --shape wants d,N,V (e.g. 768,16384,50304)\n");
                return 2;
            }
            s.N = n, s.V = v;
            shapes.push_back(s);
        } else {
            fprintf(stderr, "usage: %s [--max-seconds S] [--no-canonical] [--no-chunked] [--no-fused] [--logits-mb MB] [--fb-only] [--reps R] [--kernel K] [--l2-mb MB] "
                            "[--shape d,N,V]...\n", argv[0]);
            return 2;
        }
    }
    if (shapes.empty()) {
        /* the shapes the targets name first, then the rest of the paper's grid */
        const Shape first[] = {{768, 16384, 50304},  {768, 16384, 262144}, {768, 65536, 50304},
                               {768, 65536, 262144}, {4096, 16384, 262144}, {4096, 32768, 262144}};
        for (const Shape &s : first) shapes.push_back(s);
        const int64_t Ns[] = {1024, 4096, 8192, 16384, 32768}, Vs[] = {32768, 65536, 131072, 262144};
        for (int64_t n : Ns)
            for (int64_t v : Vs)
                if (!(v == 262144 && (n == 16384 || n == 32768))) shapes.push_back({4096, n, v});
    }
    CUDA_CHECK(cudaEventCreate(&ev0));
    CUDA_CHECK(cudaEventCreate(&ev1));
    cublasHandle_t cublas;
    CUBLAS_CHECK(cublasCreate(&cublas));
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    printf("device: %s, %d SMs; fused tile kernel: %s\n", prop.name, prop.multiProcessorCount,
           output_layer_tile_kernel_name());
    printf("%s", HEADER);
    std::vector<Row> rows;
    const double t0 = now_s();
    for (const Shape &s : shapes) {
        if (now_s() - t0 > max_s) {
            printf("(stopped: --max-seconds %.0f reached; %zu shapes not run)\n", max_s, shapes.size() - rows.size());
            break;
        }
        rows.push_back(bench_shape(s, with_canonical, with_chunked, fb_only, cublas));
        print_row(&rows.back());
    }
    printf("csv,d,N,V,gemm_ms,canonical_fwd_ms,canonical_fwdbwd_ms,fused_fwd_ms,fused_fwdbwd_ms,canonical_tflops_3G,"
           "fused_tflops_4G,fused_fwd_tflops,gemm_tflops,canonical_extra_MB,fused_extra_MB,chunked_fwdbwd_ms,chunked_extra_MB\n");
    for (const Row &r : rows)
        printf("csv,%d,%lld,%lld,%.3f,%.3f,%.3f,%.3f,%.3f,%.1f,%.1f,%.1f,%.1f,%.1f,%.1f,%.3f,%.1f\n", r.s.d,
               (long long)r.s.N, (long long)r.s.V, r.gemm_ms, r.canon_fwd_ms, r.canon_fb_ms, r.fused_fwd_ms,
               r.fused_fb_ms, tflops(3, r.s, r.canon_fb_ms), tflops(4, r.s, r.fused_fb_ms),
               tflops(1, r.s, r.fused_fwd_ms), tflops(1, r.s, r.gemm_ms), r.canon_mem / 1e6, r.fused_mem / 1e6,
               r.chunk_fb_ms, r.chunk_mem / 1e6);
    printf("\n%s", HEADER);
    for (const Row &r : rows) print_row(&r);
    CUBLAS_CHECK(cublasDestroy(cublas));
    return 0;
}
