/* bench_output_layer.cu - times the output layers of kernels/output_layer.h (the same
 * launchers the trainer calls) beside the cuBLAS GEMMs they are built from.
 *
 *   ./build/bench_output_layer                 the grid, most important shapes first
 *   ./build/bench_output_layer --max-seconds S stop starting new shapes after S seconds
 *   ./build/bench_output_layer --shape d,N,V   one shape (repeatable)
 *   ./build/bench_output_layer --no-canonical  skip the canonical layer (and its N x V memory)
 *   ./build/bench_output_layer --no-streaming  skip the fused layer's streaming path
 *   ./build/bench_output_layer --logits-mb MB  the fused layer's chunk budget (default: the layer's default)
 *   ./build/bench_output_layer --reps R        R timed calls (after the 2 warm-ups) instead of 3..20
 *   ./build/bench_output_layer --fb-only       only the fused layer's forward + backward on its default path
 *                                              (for profilers: dev/profile/output_layer_profile.sh)
 *   ./build/bench_output_layer --slices R      also one rank of the vocabulary-parallel layer over R ranks:
 *                                              the slice layer (kernels/output_layer.h) over all R N rows
 *                                              and the rank's V / R words, forward, combine and backward,
 *                                              against the fused layer at (N, V) that each rank of the
 *                                              data-parallel layer runs; the collectives are not timed
 *
 * Columns: one logits-sized GEMM (bf16 out) and the three a 3G layer needs (logits, dH = dZ W in
 * bf16, dW += dZ^T H in fp32), cuBLAS's own algorithm choice: the bound for any 3G layer; the fused
 * layer forward + backward on its default path (scaled exponentials in chunks) and on its streaming
 * path (budget 0, 4G); the canonical layer; the fused forward alone (evaluation) against one GEMM.
 * Inputs: H ~ N(0,1), W ~ N(0, 0.02^2) bf16, uniform targets, mean loss, as in ../shared/anchors.md.
 * Times: CUDA events, 2 warm-up calls, median of 3..20 timed calls. Extra memory:
 * output_layer_workspace_bytes (beyond H, W, targets, dH, dW). Prints a table, then CSV lines
 * starting with "csv,". */
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
    double gemm_ms, gemm3_ms, canon_fb_ms, fused_fwd_ms, fused_fb_ms, stream_fb_ms;
    double canon_mem, fused_mem, stream_mem; /* bytes */
    long long chunk_rows;
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

static size_t g_budget = OUTPUT_FUSED_DEFAULT_BUDGET; /* --logits-mb */

/* median ms of forward + backward (or forward alone) of one layer, NAN when it does not fit */
static double time_layer(OutputKind kind, size_t budget, OutputLayerArgs *a, int backward, int64_t V, int d,
                         double *mem, long long *chunk_rows) {
    size_t free_b, total_b;
    CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    *mem = (double)output_layer_workspace_bytes(kind, a->N, V, d, budget);
    if (*mem + (256 << 20) > (double)free_b) return NAN;
    OutputLayer *L = output_layer_create(kind, a->N, V, d, budget);
    if (!L) exit(1);
    if (chunk_rows) *chunk_rows = (long long)output_layer_fused_chunk_rows(L);
    const double ms = time_ms([&] {
        if ((backward ? output_layer_forward_backward(L, a, 0) : output_layer_forward(L, a, 0)) != 0) exit(1);
    });
    float l;
    CUDA_CHECK(cudaMemcpy(&l, a->loss, 4, cudaMemcpyDeviceToHost));
    if (!(l > 0 && l < 100)) fprintf(stderr, "warning: %s loss %g looks wrong at d=%d N=%lld V=%lld\n",
                                     output_layer_kind_name(kind), l, d, (long long)a->N, (long long)V);
    CUDA_CHECK(cudaDeviceSynchronize());
    output_layer_destroy(L);
    return ms;
}

static int g_with_canonical = 1, g_with_streaming = 1, g_fb_only = 0;
static int g_slices; /* --slices R: 0 for none */

/* One rank (rank 0, a slice of V / R words, rounded up to 128) of the vocabulary-parallel layer
 * over R ranks of N rows each: median ms of forward, combine (every rank's statistics stood in for
 * by this one's) and backward; *mem its layer's workspace plus its gathered rows and statistics. */
static double time_slice(int R, int64_t N, int64_t V, int d, double *mem) {
    const int64_t Nt = (int64_t)R * N, Vs = ((V + 127) / 128 * 128) / R;
    size_t free_b, total_b;
    CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    const double gathered = (double)Nt * d * (2 + 4) + (double)Nt * 4 * (1 + 3 * R + 1);
    *mem = (double)output_layer_workspace_bytes(OUTPUT_FUSED, Nt, Vs, d, 0) + gathered;
    if (*mem + (double)Vs * d * 6 + (256 << 20) > (double)free_b) return NAN;
    __nv_bfloat16 *H, *W;
    int32_t *tg;
    float *dH, *dW, *stats, *lse, *loss;
    CUDA_CHECK(cudaMalloc(&H, (size_t)Nt * d * 2));
    CUDA_CHECK(cudaMalloc(&W, (size_t)Vs * d * 2));
    CUDA_CHECK(cudaMalloc(&tg, (size_t)Nt * 4));
    CUDA_CHECK(cudaMalloc(&dH, (size_t)Nt * d * 4));
    CUDA_CHECK(cudaMalloc(&dW, (size_t)Vs * d * 4));
    CUDA_CHECK(cudaMalloc(&stats, (size_t)R * 3 * Nt * 4));
    CUDA_CHECK(cudaMalloc(&lse, (size_t)Nt * 4));
    CUDA_CHECK(cudaMalloc(&loss, 4));
    fill_normal_kernel<<<1024, 256>>>(H, Nt * d, 1.0f, 1234 + Nt);
    CUDA_CHECK(cudaGetLastError());
    fill_normal_kernel<<<1024, 256>>>(W, Vs * d, 0.02f, 5678 + Vs);
    CUDA_CHECK(cudaGetLastError());
    fill_targets_kernel<<<256, 256>>>(tg, Nt, V, 42);
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaMemset(dW, 0, (size_t)Vs * d * 4));
    OutputLayer *L = output_layer_create(OUTPUT_FUSED, Nt, Vs, d, 0);
    if (!L) exit(1);
    OutputSliceArgs a = {};
    a.H = H, a.W = W, a.targets = tg, a.N = Nt, a.v0 = 0, a.reduction = OUTPUT_REDUCE_MEAN, a.grad_scale = 1.0f;
    a.stats = stats, a.lse = lse, a.dH = dH, a.dW = dW;
    const double ms = time_ms([&] {
        if (output_slice_forward(L, &a, 0) != 0) exit(1);
        for (int r = 1; r < R; r++)
            CUDA_CHECK(cudaMemcpyAsync(stats + (size_t)r * 3 * Nt, stats, (size_t)3 * Nt * 4,
                                       cudaMemcpyDeviceToDevice, 0));
        if (output_slices_combine(L, &a, stats, R, lse, loss, 0) != 0 || output_slice_backward(L, &a, 0) != 0)
            exit(1);
    });
    CUDA_CHECK(cudaDeviceSynchronize());
    output_layer_destroy(L);
    CUDA_CHECK(cudaFree(loss));
    CUDA_CHECK(cudaFree(lse));
    CUDA_CHECK(cudaFree(stats));
    CUDA_CHECK(cudaFree(dW));
    CUDA_CHECK(cudaFree(dH));
    CUDA_CHECK(cudaFree(tg));
    CUDA_CHECK(cudaFree(W));
    CUDA_CHECK(cudaFree(H));
    return ms;
}

static Row bench_shape(Shape s, cublasHandle_t cublas) {
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

    r.gemm_ms = r.gemm3_ms = r.canon_fb_ms = r.stream_fb_ms = NAN;
    size_t free_b, total_b;
    const size_t logits_bytes = (size_t)N * Vp * 2, margin = (size_t)256 << 20;
    CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    if (!g_fb_only && logits_bytes + margin < free_b) {
        /* column-major views as in output_canonical.cu: logits^T [V x N] (ld Vp) = W^T H;
         * dH^T [d x N] = W . logits; dW^T [d x V] += H . logits^T */
        __nv_bfloat16 *z;
        const float one = 1.0f, zero = 0.0f;
        CUDA_CHECK(cudaMalloc(&z, logits_bytes));
        fill_normal_kernel<<<1024, 256>>>(z, N * Vp, 1e-3f, 99); /* the product GEMMs read it: no zeros */
        CUDA_CHECK(cudaGetLastError());
        auto logits = [&] {
            CUBLAS_CHECK(cublasGemmEx(cublas, CUBLAS_OP_T, CUBLAS_OP_N, (int)V, (int)N, d, &one, W, CUDA_R_16BF, d, H,
                                      CUDA_R_16BF, d, &zero, z, CUDA_R_16BF, (int)Vp, CUBLAS_COMPUTE_32F,
                                      CUBLAS_GEMM_DEFAULT));
        };
        r.gemm_ms = time_ms(logits);
        r.gemm3_ms = time_ms([&] {
            logits();
            CUBLAS_CHECK(cublasGemmEx(cublas, CUBLAS_OP_N, CUBLAS_OP_N, d, (int)N, (int)V, &one, W, CUDA_R_16BF, d, z,
                                      CUDA_R_16BF, (int)Vp, &zero, dH, CUDA_R_16BF, d, CUBLAS_COMPUTE_32F,
                                      CUBLAS_GEMM_DEFAULT));
            CUBLAS_CHECK(cublasGemmEx(cublas, CUBLAS_OP_N, CUBLAS_OP_T, d, (int)V, (int)N, &one, H, CUDA_R_16BF, d, z,
                                      CUDA_R_16BF, (int)Vp, &one, dW, CUDA_R_32F, d, CUBLAS_COMPUTE_32F,
                                      CUBLAS_GEMM_DEFAULT));
        });
        CUDA_CHECK(cudaFree(z));
    }
    if (g_with_canonical && !g_fb_only) r.canon_fb_ms = time_layer(OUTPUT_CANONICAL, 0, &a, 1, V, d, &r.canon_mem, NULL);
    if (g_with_streaming && !g_fb_only) r.stream_fb_ms = time_layer(OUTPUT_FUSED, 0, &a, 1, V, d, &r.stream_mem, NULL);
    double unused;
    r.fused_fwd_ms = g_fb_only ? NAN : time_layer(OUTPUT_FUSED, g_budget, &a, 0, V, d, &unused, NULL);
    r.fused_fb_ms = time_layer(OUTPUT_FUSED, g_budget, &a, 1, V, d, &r.fused_mem, &r.chunk_rows);

    CUDA_CHECK(cudaFree(loss));
    CUDA_CHECK(cudaFree(tg));
    CUDA_CHECK(cudaFree(dW));
    CUDA_CHECK(cudaFree(dH));
    CUDA_CHECK(cudaFree(W));
    CUDA_CHECK(cudaFree(H));
    return r;
}

static void print_row(const Row *r) {
    const Shape s = r->s;
    printf("%5d %6lld %7lld | %7.2f %7.2f | %8.2f %5.2fx %7.2f %5lld | %8.2f %5.2fx %6.2f | %8.2f %5.2fx %6.2f |"
           " %7.2f %5.2fx\n",
           s.d, (long long)s.N, (long long)s.V, r->gemm_ms, r->gemm3_ms, r->fused_fb_ms, r->fused_fb_ms / r->gemm3_ms,
           r->fused_mem / 1e9, r->chunk_rows, r->stream_fb_ms, r->stream_fb_ms / r->gemm3_ms, r->stream_mem / 1e9,
           r->canon_fb_ms, r->canon_fb_ms / r->gemm3_ms, r->canon_mem / 1e9, r->fused_fwd_ms,
           r->fused_fwd_ms / r->gemm_ms);
    fflush(stdout);
}

static const char *HEADER =
    "    d      N       V |  1 GEMM 3 GEMMs | fused f+b /3GEMM     GB  rows | stream f+b /3GEMM     GB |"
    "  canon f+b /3GEMM     GB | fus fwd /GEMM\n";

int main(int argc, char **argv) {
    double max_s = 1e30;
    std::vector<Shape> shapes;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--max-seconds") && i + 1 < argc) max_s = atof(argv[++i]);
        else if (!strcmp(argv[i], "--no-canonical")) g_with_canonical = 0;
        else if (!strcmp(argv[i], "--no-streaming")) g_with_streaming = 0;
        else if (!strcmp(argv[i], "--logits-mb") && i + 1 < argc) g_budget = (size_t)(atof(argv[++i]) * 1048576);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) g_reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--fb-only")) g_fb_only = 1;
        else if (!strcmp(argv[i], "--slices") && i + 1 < argc) {
            g_slices = atoi(argv[++i]);
            if (g_slices < 1 || g_slices > 64) {
                fprintf(stderr, "error: --slices wants a rank count in [1, 64] (e.g. 2)\n");
                return 2;
            }
        }
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
            fprintf(stderr, "usage: %s [--max-seconds S] [--no-canonical] [--no-streaming] [--logits-mb MB] [--reps R] [--fb-only] "
                            "[--slices R] [--shape d,N,V]...\n", argv[0]);
            return 2;
        }
    }
    if (shapes.empty()) {
        /* the shapes the targets name first, then the rest of the paper's grid */
        const Shape first[] = {{768, 16384, 50304},  {768, 16384, 262144}, {768, 65536, 262144},
                               {4096, 8192, 131072}, {4096, 16384, 262144}, {4096, 32768, 262144}};
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
    printf("device: %s, %d SMs; fused layer budget %.0f MiB\n", prop.name, prop.multiProcessorCount,
           g_budget / 1048576.0);
    printf("%s", HEADER);
    std::vector<Row> rows;
    const double t0 = now_s();
    for (const Shape &s : shapes) {
        if (now_s() - t0 > max_s) {
            printf("(stopped: --max-seconds %.0f reached; %zu shapes not run)\n", max_s, shapes.size() - rows.size());
            break;
        }
        rows.push_back(bench_shape(s, cublas));
        print_row(&rows.back());
        if (g_slices > 0) {
            double mem;
            const double ms = time_slice(g_slices, s.N, s.V, s.d, &mem);
            printf("      one rank of %d, vocabulary-parallel: %.2f ms (fused at N=%lld: %.2f ms), %.2f GB beside "
                   "its W slice; csv-slices,%d,%lld,%lld,%d,%.3f,%.3f\n",
                   g_slices, ms, (long long)s.N, rows.back().fused_fb_ms, mem / 1e9, s.d, (long long)s.N,
                   (long long)s.V, g_slices, ms, mem / 1e9);
            fflush(stdout);
        }
    }
    printf("csv,d,N,V,gemm_ms,gemm3_ms,fused_fwdbwd_ms,fused_extra_GB,chunk_rows,streaming_fwdbwd_ms,"
           "streaming_extra_GB,canonical_fwdbwd_ms,canonical_extra_GB,fused_fwd_ms\n");
    for (const Row &r : rows)
        printf("csv,%d,%lld,%lld,%.3f,%.3f,%.3f,%.3f,%lld,%.3f,%.3f,%.3f,%.3f,%.3f\n", r.s.d, (long long)r.s.N,
               (long long)r.s.V, r.gemm_ms, r.gemm3_ms, r.fused_fb_ms, r.fused_mem / 1e9, r.chunk_rows, r.stream_fb_ms,
               r.stream_mem / 1e9, r.canon_fb_ms, r.canon_mem / 1e9, r.fused_fwd_ms);
    printf("\n%s", HEADER);
    for (const Row &r : rows) print_row(&r);
    CUBLAS_CHECK(cublasDestroy(cublas));
    return 0;
}
