/* kernels/rmsnorm.cu - the residual add fused with RMSNorm (Llama, Qwen: x·w; Gemma: x·(1 + w)),
 * forward and backward.
 *
 * Forward:  residual = a + b (bf16); out = residual·rstd·g, rstd = 1/sqrt(mean(residual²) + eps)
 *   fp32 [N], g = w or 1 + w; fp32 math, one bf16 rounding of out.
 *   launch: one warp per row, RMS_WARPS warps a block. C a multiple of 8: 16-byte vectors, and for
 *   C ≤ 8192 the lane keeps its ⌈C/256⌉ vectors of the row in registers between the sum of squares
 *   and the scaling (K a template parameter); wider rows read the row again (their own writes, an
 *   L1/L2 hit). Other C: a lane per column.
 *   FLOPs ~4·N·C; bytes N·C·2·(2 read + 2 written) + 4N (memory bound).
 * Backward: dinp += rstd·(dnorm − norm·mean(dnorm·norm)), norm = x·rstd, dnorm = g·dout;
 *   dweight += Σ_n norm·dout.
 *   launch, C % 8 == 0 and C ≤ 2048 (Llama's and Qwen's widths): one kernel. Block b takes the rows
 *   of slice b of RMS_FUSED_CHUNKS, a warp a row as the forward; a lane keeps its columns' Σ
 *   norm·dout over its warp's rows (in shared memory or registers, by width: the kernel says why)
 *   while it writes dinp, and the block adds its warps' sums in warp order into its partial row,
 *   which add_partial_sums adds in slice order: dweight without reading dout and x a second time. Other C: dinp by the forward's layout (the second pass
 *   re-reads dout and x, which the first just brought into L1), then dweight by a column kernel, a
 *   thread per column over RMS_ROW_CHUNKS fixed slices of rows. Deterministic either way (the
 *   orders are fixed, whatever N or the device), no atomics.
 *   FLOPs ~10·N·C; bytes N·C·2·(3 read + 1 written), and N·C·2·2 more for the column kernel. */
#include "kernels/kernel_util.cuh"
#include "kernels/kernels.h"

#define RMS_WARPS 4
#define RMS_MAX_K 32         /* register-resident rows up to C = 32·256 = 8192 */
#define RMS_ROW_CHUNKS 256   /* fixed: the partial-sum order never depends on N or the device */
#define RMS_FUSED_CHUNKS 1024 /* the one-kernel backward's slices: enough blocks to fill the GPU */
#define RMS_FUSED_MAX_K 8     /* its widest row: 8 lanes' groups of 8 columns, C ≤ 2048 */

__device__ __forceinline__ float norm_gain(float w, int one_plus_w) { return one_plus_w ? 1.0f + w : w; }

/* C % 8 == 0, C ≤ 256·K: lane owns the 8-column groups c = 8·(lane + 32·k), k < K. */
template <int K>
__global__ void __launch_bounds__(RMS_WARPS * 32)
    rmsnorm_forward_reg_kernel(bf16 *residual, bf16 *out, float *rstd, const bf16 *a, const bf16 *b,
                               const bf16 *weight, int N, int C, float eps, int one_plus_w) {
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int row = blockIdx.x * RMS_WARPS + warp;
    if (row >= N) return;
    size_t base = (size_t)row * C;
    bf16x8 x[K];
    float ss = 0.0f;
#pragma unroll
    for (int k = 0; k < K; k++) {
        int c = (k * 32 + lane) * 8;
        if (c >= C) continue;
        x[k] = load_bf16x8(a + base + c);
        float f[8];
        bf16x8_to_float(x[k], f);
        if (b) {
            float fb[8];
            bf16x8_to_float(load_bf16x8(b + base + c), fb);
#pragma unroll
            for (int i = 0; i < 8; i++) f[i] += fb[i];
            x[k] = float_to_bf16x8(f);
            store_bf16x8(residual + base + c, x[k]);
            bf16x8_to_float(x[k], f); /* the norm sees the residual as stored */
        }
#pragma unroll
        for (int i = 0; i < 8; i++) ss += f[i] * f[i];
    }
    float s = rsqrtf(warp_sum(ss) / (float)C + eps);
#pragma unroll
    for (int k = 0; k < K; k++) {
        int c = (k * 32 + lane) * 8;
        if (c >= C) continue;
        float f[8], w[8];
        bf16x8_to_float(x[k], f);
        bf16x8_to_float(load_bf16x8(weight + c), w);
#pragma unroll
        for (int i = 0; i < 8; i++) f[i] = (f[i] * s) * norm_gain(w[i], one_plus_w);
        store_bf16x8(out + base + c, float_to_bf16x8(f));
    }
    if (lane == 0) rstd[row] = s;
}

/* Any C: a lane per column, the row read twice (the second read of the residual is this lane's own
 * write, so it sees the stored value). */
__global__ void __launch_bounds__(RMS_WARPS * 32)
    rmsnorm_forward_any_kernel(bf16 *residual, bf16 *out, float *rstd, const bf16 *a, const bf16 *b,
                               const bf16 *weight, int N, int C, float eps, int one_plus_w) {
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int row = blockIdx.x * RMS_WARPS + warp;
    if (row >= N) return;
    size_t base = (size_t)row * C;
    const bf16 *x = b ? residual : a;
    float ss = 0.0f;
    for (int c = lane; c < C; c += 32) {
        float f = __bfloat162float(a[base + c]);
        if (b) {
            bf16 r = __float2bfloat16(f + __bfloat162float(b[base + c]));
            residual[base + c] = r;
            f = __bfloat162float(r);
        }
        ss += f * f;
    }
    float s = rsqrtf(warp_sum(ss) / (float)C + eps);
    for (int c = lane; c < C; c += 32)
        out[base + c] = __float2bfloat16((__bfloat162float(x[base + c]) * s) *
                                         norm_gain(__bfloat162float(weight[c]), one_plus_w));
    if (lane == 0) rstd[row] = s;
}

template <int K>
static void launch_rms_fwd_reg(bf16 *residual, bf16 *out, float *rstd, const bf16 *a, const bf16 *b,
                               const bf16 *weight, int N, int C, float eps, int one_plus_w, cudaStream_t stream) {
    rmsnorm_forward_reg_kernel<K><<<ceil_div(N, RMS_WARPS), RMS_WARPS * 32, 0, stream>>>(residual, out, rstd, a, b,
                                                                                          weight, N, C, eps, one_plus_w);
    CUDA_CHECK(cudaGetLastError());
}

extern "C" void residual_rmsnorm_forward(kbf16 *residual, kbf16 *out, float *rstd, const kbf16 *a, const kbf16 *b,
                                         const kbf16 *weight, int N, int C, float eps, int one_plus_w,
                                         cudaStream_t stream) {
    if (N == 0) return;
    int k = (int)ceil_div(C, 256);
    if (C % 8 != 0 || k > RMS_MAX_K) {
        rmsnorm_forward_any_kernel<<<ceil_div(N, RMS_WARPS), RMS_WARPS * 32, 0, stream>>>(residual, out, rstd, a, b,
                                                                                          weight, N, C, eps, one_plus_w);
        CUDA_CHECK(cudaGetLastError());
    } else if (k <= 1) {
        launch_rms_fwd_reg<1>(residual, out, rstd, a, b, weight, N, C, eps, one_plus_w, stream);
    } else if (k <= 2) {
        launch_rms_fwd_reg<2>(residual, out, rstd, a, b, weight, N, C, eps, one_plus_w, stream);
    } else if (k <= 4) {
        launch_rms_fwd_reg<4>(residual, out, rstd, a, b, weight, N, C, eps, one_plus_w, stream);
    } else if (k <= 8) {
        launch_rms_fwd_reg<8>(residual, out, rstd, a, b, weight, N, C, eps, one_plus_w, stream);
    } else if (k <= 16) {
        launch_rms_fwd_reg<16>(residual, out, rstd, a, b, weight, N, C, eps, one_plus_w, stream);
    } else {
        launch_rms_fwd_reg<32>(residual, out, rstd, a, b, weight, N, C, eps, one_plus_w, stream);
    }
}

/* dinp of one row per warp; V = 8 (16-byte vectors, C % 8 == 0) or 1. */
template <int V>
__global__ void __launch_bounds__(RMS_WARPS * 32)
    rmsnorm_backward_dinp_kernel(bf16 *dinp, const bf16 *dout, const bf16 *inp, const bf16 *weight,
                                 const float *rstd, int N, int C, int one_plus_w) {
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int row = blockIdx.x * RMS_WARPS + warp;
    if (row >= N) return;
    size_t base = (size_t)row * C;
    float s = rstd[row];
    float dot = 0.0f;
    for (int c = lane * V; c < C; c += 32 * V) {
        float d[V], x[V], w[V];
        if constexpr (V == 8) {
            bf16x8_to_float(load_bf16x8(dout + base + c), d);
            bf16x8_to_float(load_bf16x8(inp + base + c), x);
            bf16x8_to_float(load_bf16x8(weight + c), w);
        } else {
            d[0] = __bfloat162float(dout[base + c]);
            x[0] = __bfloat162float(inp[base + c]);
            w[0] = __bfloat162float(weight[c]);
        }
#pragma unroll
        for (int i = 0; i < V; i++) dot += norm_gain(w[i], one_plus_w) * d[i] * (x[i] * s);
    }
    float dnorm_norm_mean = warp_sum(dot) / (float)C;
    for (int c = lane * V; c < C; c += 32 * V) {
        float d[V], x[V], w[V], dx[V];
        if constexpr (V == 8) {
            bf16x8_to_float(load_bf16x8(dout + base + c), d);
            bf16x8_to_float(load_bf16x8(inp + base + c), x);
            bf16x8_to_float(load_bf16x8(weight + c), w);
            bf16x8_to_float(load_bf16x8_rw(dinp + base + c), dx);
        } else {
            d[0] = __bfloat162float(dout[base + c]);
            x[0] = __bfloat162float(inp[base + c]);
            w[0] = __bfloat162float(weight[c]);
            dx[0] = __bfloat162float(dinp[base + c]);
        }
#pragma unroll
        for (int i = 0; i < V; i++) dx[i] += s * (norm_gain(w[i], one_plus_w) * d[i] - (x[i] * s) * dnorm_norm_mean);
        if constexpr (V == 8)
            store_bf16x8(dinp + base + c, float_to_bf16x8(dx));
        else
            dinp[base + c] = __float2bfloat16(dx[0]);
    }
}

/* partial[chunk, c] = Σ over the chunk's rows of (x·rstd)·dout, in row order. */
__global__ void __launch_bounds__(256) rmsnorm_dweight_partial_kernel(float *partial, const bf16 *dout,
                                                                      const bf16 *inp, const float *rstd, int N,
                                                                      int C) {
    int c = blockIdx.x * 256 + threadIdx.x;
    if (c >= C) return;
    int rows_per_chunk = (int)ceil_div(N, RMS_ROW_CHUNKS);
    int r0 = blockIdx.y * rows_per_chunk, r1 = min(N, r0 + rows_per_chunk);
    float acc = 0.0f;
    for (int r = r0; r < r1; r++) {
        size_t i = (size_t)r * C + c;
        acc += (__bfloat162float(inp[i]) * rstd[r]) * __bfloat162float(dout[i]);
    }
    partial[(size_t)blockIdx.y * C + c] = acc;
}

/* dinp of each row of slice blockIdx.x (a warp a row), and the slice's Σ norm·dout into partial:
 * C % 8 == 0, C ≤ 256·K; lane owns the 8-column groups c = 8·(lane + 32·k), k < K. Where the
 * lane keeps its columns' sums of norm·dout sets how many blocks an SM holds, and the grid's 1024
 * slices run best in about one or two full waves. At K ≤ 4 (C ≤ 1024) they go into the warp's row
 * of shared memory: 64 registers a thread, eight blocks an SM, one wave (in 95 registers, five
 * blocks an SM took 1.6 waves: 0.146 against 0.120 ms at N = 32768, C = 1024). At K = 8 the 64
 * sums stay in registers: four blocks an SM, two full waves (in shared memory, 32 KB a block and
 * the 1 KB each block reserves allow six, 1.3 waves, and it ran 0.295 against 0.273 ms at C = 2048). Either way the warp's
 * sums land in shared memory with column c = 8·(lane + 32·k) + i at (8·k + i)·32 + lane, so a
 * warp's accesses touch 32 banks at once, and the block adds its warps in order. */
template <int K>
__global__ void __launch_bounds__(RMS_WARPS * 32, K <= 4 ? 8 : 4)
    rmsnorm_backward_fused_kernel(bf16 *dinp, float *partial, const bf16 *dout, const bf16 *inp, const bf16 *weight,
                                  const float *rstd, int N, int C, int one_plus_w) {
    __shared__ float warp_sums[RMS_WARPS][256 * K];
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int rows_per_chunk = (int)ceil_div(N, RMS_FUSED_CHUNKS);
    int r0 = blockIdx.x * rows_per_chunk, r1 = min(N, r0 + rows_per_chunk);
    constexpr bool sums_in_smem = K <= 4;
    float *acc = warp_sums[warp];
    float racc[sums_in_smem ? 1 : K][8];
#pragma unroll
    for (int k = 0; k < K; k++)
#pragma unroll
        for (int i = 0; i < 8; i++) {
            if constexpr (sums_in_smem)
                acc[(k * 8 + i) * 32 + lane] = 0.0f;
            else
                racc[k][i] = 0.0f;
        }
    for (int row = r0 + warp; row < r1; row += RMS_WARPS) {
        size_t base = (size_t)row * C;
        float s = rstd[row];
        float dot = 0.0f;
#pragma unroll
        for (int k = 0; k < K; k++) {
            int c = (k * 32 + lane) * 8;
            if (c >= C) continue;
            float d[8], x[8], w[8];
            bf16x8_to_float(load_bf16x8(dout + base + c), d);
            bf16x8_to_float(load_bf16x8(inp + base + c), x);
            bf16x8_to_float(load_bf16x8(weight + c), w);
#pragma unroll
            for (int i = 0; i < 8; i++) dot += norm_gain(w[i], one_plus_w) * d[i] * (x[i] * s);
        }
        float dnorm_norm_mean = warp_sum(dot) / (float)C;
#pragma unroll
        for (int k = 0; k < K; k++) {
            int c = (k * 32 + lane) * 8;
            if (c >= C) continue;
            float d[8], x[8], w[8], dx[8];
            bf16x8_to_float(load_bf16x8(dout + base + c), d);
            bf16x8_to_float(load_bf16x8(inp + base + c), x);
            bf16x8_to_float(load_bf16x8(weight + c), w);
            bf16x8_to_float(load_bf16x8_rw(dinp + base + c), dx);
#pragma unroll
            for (int i = 0; i < 8; i++) {
                dx[i] += s * (norm_gain(w[i], one_plus_w) * d[i] - (x[i] * s) * dnorm_norm_mean);
                if constexpr (sums_in_smem)
                    acc[(k * 8 + i) * 32 + lane] += (x[i] * s) * d[i];
                else
                    racc[k][i] += (x[i] * s) * d[i];
            }
            store_bf16x8(dinp + base + c, float_to_bf16x8(dx));
        }
    }
    if constexpr (!sums_in_smem) {
#pragma unroll
        for (int k = 0; k < K; k++)
#pragma unroll
            for (int i = 0; i < 8; i++) acc[(k * 8 + i) * 32 + lane] = racc[k][i];
    }
    __syncthreads(); /* every warp's sums are in shared memory before the block adds them */
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        const int at = (c / 256 * 8 + c % 8) * 32 + c / 8 % 32;
        float sum = warp_sums[0][at];
#pragma unroll
        for (int w = 1; w < RMS_WARPS; w++) sum += warp_sums[w][at];
        partial[(size_t)blockIdx.x * C + c] = sum;
    }
}

template <int K>
static void launch_rms_bwd_fused(bf16 *dinp, float *partial, const bf16 *dout, const bf16 *inp, const bf16 *weight,
                                 const float *rstd, int N, int C, int one_plus_w, cudaStream_t stream) {
    rmsnorm_backward_fused_kernel<K><<<RMS_FUSED_CHUNKS, RMS_WARPS * 32, 0, stream>>>(dinp, partial, dout, inp, weight,
                                                                                   rstd, N, C, one_plus_w);
    CUDA_CHECK(cudaGetLastError());
}

extern "C" size_t rmsnorm_backward_scratch_bytes(int C) {
    const size_t chunks = C % 8 == 0 && C <= 256 * RMS_FUSED_MAX_K ? RMS_FUSED_CHUNKS : RMS_ROW_CHUNKS;
    return chunks * C * sizeof(float);
}

extern "C" void rmsnorm_backward(kbf16 *dinp, float *dweight, void *scratch, const kbf16 *dout, const kbf16 *inp,
                                 const kbf16 *weight, const float *rstd, int N, int C, int one_plus_w,
                                 cudaStream_t stream) {
    if (N == 0) return;
    float *partial = (float *)scratch;
    if (C % 8 == 0 && C <= 256 * RMS_FUSED_MAX_K) {
        if (C <= 256)
            launch_rms_bwd_fused<1>(dinp, partial, dout, inp, weight, rstd, N, C, one_plus_w, stream);
        else if (C <= 512)
            launch_rms_bwd_fused<2>(dinp, partial, dout, inp, weight, rstd, N, C, one_plus_w, stream);
        else if (C <= 1024)
            launch_rms_bwd_fused<4>(dinp, partial, dout, inp, weight, rstd, N, C, one_plus_w, stream);
        else
            launch_rms_bwd_fused<8>(dinp, partial, dout, inp, weight, rstd, N, C, one_plus_w, stream);
        add_partial_sums(PartialSumOutputs{{dweight, NULL, NULL}}, 1, partial, RMS_FUSED_CHUNKS, C, C, stream);
        return;
    }
    unsigned grid = (unsigned)ceil_div(N, RMS_WARPS);
    if (C % 8 == 0)
        rmsnorm_backward_dinp_kernel<8><<<grid, RMS_WARPS * 32, 0, stream>>>(dinp, dout, inp, weight, rstd, N, C,
                                                                              one_plus_w);
    else
        rmsnorm_backward_dinp_kernel<1><<<grid, RMS_WARPS * 32, 0, stream>>>(dinp, dout, inp, weight, rstd, N, C,
                                                                              one_plus_w);
    CUDA_CHECK(cudaGetLastError());
    rmsnorm_dweight_partial_kernel<<<dim3(ceil_div(C, 256), RMS_ROW_CHUNKS), 256, 0, stream>>>(partial, dout, inp,
                                                                                              rstd, N, C);
    CUDA_CHECK(cudaGetLastError());
    add_partial_sums(PartialSumOutputs{{dweight, NULL, NULL}}, 1, partial, RMS_ROW_CHUNKS, C, C, stream);
}
