/* kernels/layernorm.cu - the residual add fused with LayerNorm, forward and backward.
 *
 * Forward:  residual = a + b (bf16); ln = (residual − mean)·rstd·weight + bias; mean, rstd fp32 [N].
 *   launch: one warp per row, 4 warps a block; the row's bf16 values are kept in shared memory
 *   (C·2 bytes per warp) so the variance is a second pass over exact values, not E[x²]−E[x]².
 *   FLOPs ~8·N·C; bytes N·C·2·(2 read + 2 written) + 8N (memory bound).
 * Backward: dinp += rstd·(dnorm − mean(dnorm) − norm·mean(dnorm·norm)), dnorm = weight·dout;
 *   dweight += Σ_n norm·dout, dbias += Σ_n dout.
 *   launch: LN_BWD_BLOCKS blocks (fixed, for determinism) of 8 warps, a warp per row (grid-stride);
 *   lane owns the fixed 8-column groups c = 8·(lane + 32·k), k < K = ⌈C/256⌉, and keeps their
 *   dweight/dbias sums in registers (K is a template parameter, C ≤ 2048; larger C takes a slower
 *   kernel that keeps them in shared memory); the row's dout and inp stay in registers as bf16
 *   between the two passes. The block sums its 8 warps in order into scratch, and a second kernel
 *   (add_partial_sums) sums the LN_BWD_BLOCKS partials in a fixed order into dweight/dbias (and
 *   dinp_sum): no atomics anywhere.
 *   Optionally also dinp_sum += Σ_n dinp (the updated values, as stored): the residual stream's
 *   gradient here is the dout of the projection that fed it, so that sum is the projection's bias
 *   gradient, taken while dinp is in registers instead of by bias_backward's own pass over it
 *   (C ≤ 768; wider rows leave it to bias_backward).
 *   FLOPs ~12·N·C; bytes N·C·2·(3 read + 1 written). */
#include "kernels/kernel_util.cuh"
#include "kernels/kernels.h"

#define LN_EPS 1e-5f /* = LAYERNORM_EPS of model/cpu/layers_cpu.h */
#define LN_WARPS 4
#define LN_BWD_BLOCKS 264 /* fixed grid: partial-sum order never depends on the device */
#define LN_BWD_WARPS 8
#define LN_BWD_MAX_K 8    /* register-accumulator kernel for C <= 8·256 */
/* Up to C = 3·256 the kernel keeps two blocks per SM (128 registers) with the dinp sums too; wider,
 * they would spill, and bias_backward's own pass takes them. */
#define LN_BWD_SUM_MAX_K 3

/* Each lane handles 8-channel groups c = 8·(lane + 32·k). */
__global__ void __launch_bounds__(LN_WARPS * 32)
    residual_layernorm_forward_kernel(bf16 *residual, bf16 *ln, float *mean, float *rstd, const bf16 *a,
                                      const bf16 *b, const bf16 *weight, const bf16 *bias, int N, int C) {
    extern __shared__ __align__(16) unsigned char ln_smem[];
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    bf16 *row_s = reinterpret_cast<bf16 *>(ln_smem) + (size_t)warp * C;
    int row = blockIdx.x * LN_WARPS + warp;
    if (row >= N) return;
    size_t base = (size_t)row * C;

    float sum = 0.0f;
    for (int c = lane * 8; c < C; c += 256) {
        bf16x8 x = load_bf16x8(a + base + c);
        if (b) {
            float fa[8], fb[8];
            bf16x8_to_float(x, fa);
            bf16x8_to_float(load_bf16x8(b + base + c), fb);
#pragma unroll
            for (int i = 0; i < 8; i++) fa[i] += fb[i];
            x = float_to_bf16x8(fa);
            store_bf16x8(residual + base + c, x);
        }
        store_bf16x8(row_s + c, x);
        float f[8];
        bf16x8_to_float(x, f);
#pragma unroll
        for (int i = 0; i < 8; i++) sum += f[i];
    }
    float m = warp_sum(sum) / C;
    float var = 0.0f;
    for (int c = lane * 8; c < C; c += 256) {
        float f[8];
        bf16x8_to_float(*reinterpret_cast<const bf16x8 *>(row_s + c), f);
#pragma unroll
        for (int i = 0; i < 8; i++) var += (f[i] - m) * (f[i] - m);
    }
    float s = rsqrtf(warp_sum(var) / C + LN_EPS);
    for (int c = lane * 8; c < C; c += 256) {
        float f[8], w[8], bi[8];
        bf16x8_to_float(*reinterpret_cast<const bf16x8 *>(row_s + c), f);
        bf16x8_to_float(load_bf16x8(weight + c), w);
        bf16x8_to_float(load_bf16x8(bias + c), bi);
#pragma unroll
        for (int i = 0; i < 8; i++) f[i] = (f[i] - m) * s * w[i] + bi[i];
        store_bf16x8(ln + base + c, float_to_bf16x8(f));
    }
    if (lane == 0) {
        mean[row] = m;
        rstd[row] = s;
    }
}

extern "C" void residual_layernorm_forward(kbf16 *residual, kbf16 *ln, float *mean, float *rstd, const kbf16 *a,
                                           const kbf16 *b, const kbf16 *weight, const kbf16 *bias, int N, int C,
                                           cudaStream_t stream) {
    size_t smem = (size_t)LN_WARPS * C * sizeof(bf16);
    if (smem > 48 * 1024)
        CUDA_CHECK(cudaFuncSetAttribute(residual_layernorm_forward_kernel,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    residual_layernorm_forward_kernel<<<ceil_div(N, LN_WARPS), LN_WARPS * 32, smem, stream>>>(
        residual, ln, mean, rstd, a, b, weight, bias, N, C);
    CUDA_CHECK(cudaGetLastError());
}

/* The backward's arithmetic on 8 adjacent columns of one row (mean m, rstd s), shared by both
 * kernels below. First pass: the row sums of dnorm = w·d and of dnorm·norm. */
__device__ __forceinline__ void accumulate_dnorm(const float (&d)[8], const float (&x)[8], const float (&w)[8],
                                                 float m, float s, float &dnorm_sum, float &dnorm_norm_sum) {
#pragma unroll
    for (int i = 0; i < 8; i++) {
        float dn = w[i] * d[i];
        dnorm_sum += dn;
        dnorm_norm_sum += dn * (x[i] - m) * s;
    }
}

/* Second pass: dweight and dbias partial sums (registers or shared memory), dinp += the input gradient. */
__device__ __forceinline__ void accumulate_grads(const float (&d)[8], const float (&x)[8], const float (&w)[8],
                                                 float m, float s, float dnorm_mean, float dnorm_norm_mean,
                                                 float *dw, float *db, float (&dx)[8]) {
#pragma unroll
    for (int i = 0; i < 8; i++) {
        float norm = (x[i] - m) * s;
        dw[i] += norm * d[i];
        db[i] += d[i];
        dx[i] += s * (w[i] * d[i] - dnorm_mean - norm * dnorm_norm_mean);
    }
}

/* Register-accumulator backward for C <= 256·K. Shared: LN_BWD_WARPS·C floats (dweight sums of every
 * warp, then dbias sums, then with DINP_SUM the dinp sums), for the in-order sum over the block's
 * warps. Scratch: per block, 2 (3 with DINP_SUM) rows of C partial sums. */
template <int K, bool DINP_SUM>
__global__ void __launch_bounds__(LN_BWD_WARPS * 32, K <= LN_BWD_SUM_MAX_K ? 2 : 1)
    layernorm_backward_reg_kernel(bf16 *dinp, float *partial, const bf16 *dout, const bf16 *inp,
                                  const bf16 *weight, const float *mean, const float *rstd, int N, int C) {
    extern __shared__ __align__(16) unsigned char ln_smem[];
    constexpr int ROUNDS = DINP_SUM ? 3 : 2;
    float *red = reinterpret_cast<float *>(ln_smem);
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    float dw[K][8], db[K][8], ds[DINP_SUM ? K : 1][8];
#pragma unroll
    for (int k = 0; k < K; k++)
#pragma unroll
        for (int i = 0; i < 8; i++) dw[k][i] = db[k][i] = ds[DINP_SUM ? k : 0][i] = 0.0f;

    for (int row = blockIdx.x * LN_BWD_WARPS + warp; row < N; row += gridDim.x * LN_BWD_WARPS) {
        size_t base = (size_t)row * C;
        float m = mean[row], s = rstd[row];
        /* dinp is loaded with dout and inp, so the second pass waits on no memory. */
        bf16x8 draw[K], xraw[K], dxraw[K];
        float dnorm_sum = 0.0f, dnorm_norm_sum = 0.0f;
#pragma unroll
        for (int k = 0; k < K; k++) {
            int c = (k * 32 + lane) * 8;
            if (c >= C) continue;
            draw[k] = load_bf16x8(dout + base + c);
            xraw[k] = load_bf16x8(inp + base + c);
            dxraw[k] = load_bf16x8_rw(dinp + base + c);
            float d[8], x[8], w[8];
            bf16x8_to_float(draw[k], d);
            bf16x8_to_float(xraw[k], x);
            bf16x8_to_float(load_bf16x8(weight + c), w);
            accumulate_dnorm(d, x, w, m, s, dnorm_sum, dnorm_norm_sum);
        }
        float dnorm_mean = warp_sum(dnorm_sum) / C, dnorm_norm_mean = warp_sum(dnorm_norm_sum) / C;
#pragma unroll
        for (int k = 0; k < K; k++) {
            int c = (k * 32 + lane) * 8;
            if (c >= C) continue;
            float d[8], x[8], w[8], dx[8];
            bf16x8_to_float(draw[k], d);
            bf16x8_to_float(xraw[k], x);
            bf16x8_to_float(load_bf16x8(weight + c), w);
            bf16x8_to_float(dxraw[k], dx);
            accumulate_grads(d, x, w, m, s, dnorm_mean, dnorm_norm_mean, dw[k], db[k], dx);
            bf16x8 stored = float_to_bf16x8(dx);
            store_bf16x8(dinp + base + c, stored);
            if constexpr (DINP_SUM) {
                float v[8];
                bf16x8_to_float(stored, v);
#pragma unroll
                for (int i = 0; i < 8; i++) ds[k][i] += v[i];
            }
        }
    }
    /* Rounds through one shared buffer: dweight, dbias, then the dinp sums. */
#pragma unroll
    for (int round = 0; round < ROUNDS; round++) {
#pragma unroll
        for (int k = 0; k < K; k++) {
            int c = (k * 32 + lane) * 8;
            if (c >= C) continue;
            float4 *dst = reinterpret_cast<float4 *>(red + (size_t)warp * C + c);
            const float *v = round == 0 ? dw[k] : round == 1 ? db[k] : ds[DINP_SUM ? k : 0];
            dst[0] = make_float4(v[0], v[1], v[2], v[3]);
            dst[1] = make_float4(v[4], v[5], v[6], v[7]);
        }
        /* Every warp's sums are in shared memory before any column is summed across warps. */
        __syncthreads();
        for (int c = threadIdx.x; c < C; c += blockDim.x) {
            float sum = 0.0f;
            for (int w = 0; w < LN_BWD_WARPS; w++) sum += red[(size_t)w * C + c];
            partial[(size_t)blockIdx.x * ROUNDS * C + round * C + c] = sum;
        }
        /* The sums are read before the next round overwrites the buffer. */
        __syncthreads();
    }
}

template <int K, bool DINP_SUM>
static void launch_ln_bwd_reg_as(bf16 *dinp, float *partial, const bf16 *dout, const bf16 *inp, const bf16 *weight,
                                 const float *mean, const float *rstd, int N, int C, cudaStream_t stream) {
    size_t smem = (size_t)LN_BWD_WARPS * C * sizeof(float);
    if (smem > 48 * 1024)
        CUDA_CHECK(cudaFuncSetAttribute(layernorm_backward_reg_kernel<K, DINP_SUM>,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    layernorm_backward_reg_kernel<K, DINP_SUM>
        <<<LN_BWD_BLOCKS, LN_BWD_WARPS * 32, smem, stream>>>(dinp, partial, dout, inp, weight, mean, rstd, N, C);
    CUDA_CHECK(cudaGetLastError());
}

template <int K>
static void launch_ln_bwd_reg(bool dinp_sum, bf16 *dinp, float *partial, const bf16 *dout, const bf16 *inp,
                              const bf16 *weight, const float *mean, const float *rstd, int N, int C,
                              cudaStream_t stream) {
    if constexpr (K <= LN_BWD_SUM_MAX_K) {
        if (dinp_sum) {
            launch_ln_bwd_reg_as<K, true>(dinp, partial, dout, inp, weight, mean, rstd, N, C, stream);
            return;
        }
    }
    launch_ln_bwd_reg_as<K, false>(dinp, partial, dout, inp, weight, mean, rstd, N, C, stream);
}

/* Shared memory: per warp, dweight then dbias partials (2·C floats). For C > 2048. */
__global__ void __launch_bounds__(LN_WARPS * 32)
    layernorm_backward_kernel(bf16 *dinp, float *partial, const bf16 *dout, const bf16 *inp, const bf16 *weight,
                              const float *mean, const float *rstd, int N, int C) {
    extern __shared__ __align__(16) unsigned char ln_smem[];
    float *acc_all = reinterpret_cast<float *>(ln_smem);
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    float *dw_s = acc_all + (size_t)warp * 2 * C, *db_s = dw_s + C;
    for (int c = lane; c < C; c += 32) {
        dw_s[c] = 0.0f;
        db_s[c] = 0.0f;
    }
    __syncwarp(); /* the zeroing above is strided across lanes; the updates below are by owner */
    /* Each lane touches only its own columns of its own warp's slice until the barrier below. */
    for (int row = blockIdx.x * LN_WARPS + warp; row < N; row += gridDim.x * LN_WARPS) {
        size_t base = (size_t)row * C;
        float m = mean[row], s = rstd[row];
        float dnorm_sum = 0.0f, dnorm_norm_sum = 0.0f;
        for (int c = lane * 8; c < C; c += 256) {
            float d[8], x[8], w[8];
            bf16x8_to_float(load_bf16x8(dout + base + c), d);
            bf16x8_to_float(load_bf16x8(inp + base + c), x);
            bf16x8_to_float(load_bf16x8(weight + c), w);
            accumulate_dnorm(d, x, w, m, s, dnorm_sum, dnorm_norm_sum);
        }
        float dnorm_mean = warp_sum(dnorm_sum) / C, dnorm_norm_mean = warp_sum(dnorm_norm_sum) / C;
        for (int c = lane * 8; c < C; c += 256) {
            float d[8], x[8], w[8], dx[8];
            bf16x8_to_float(load_bf16x8(dout + base + c), d);
            bf16x8_to_float(load_bf16x8(inp + base + c), x);
            bf16x8_to_float(load_bf16x8(weight + c), w);
            bf16x8_to_float(load_bf16x8_rw(dinp + base + c), dx);
            accumulate_grads(d, x, w, m, s, dnorm_mean, dnorm_norm_mean, dw_s + c, db_s + c, dx);
            store_bf16x8(dinp + base + c, float_to_bf16x8(dx));
        }
    }
    /* All warps' slices complete before any thread sums across them. */
    __syncthreads();
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float dw = 0.0f, db = 0.0f;
        for (int w = 0; w < LN_WARPS; w++) {
            dw += acc_all[(size_t)w * 2 * C + c];
            db += acc_all[(size_t)w * 2 * C + C + c];
        }
        partial[(size_t)blockIdx.x * 2 * C + c] = dw;
        partial[(size_t)blockIdx.x * 2 * C + C + c] = db;
    }
}

extern "C" int layernorm_backward_max_dim(void) {
    int device = 0, optin = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    const int widest = optin / (int)(LN_WARPS * 2 * sizeof(float));
    return widest > 8 * 256 ? widest : 8 * 256; /* up to 8·256 the registers hold the rows */
}

extern "C" size_t layernorm_backward_scratch_bytes(int C) {
    /* three rows of partials per block (dweight, dbias, dinp sums); bias_backward's (128 rows), which
     * takes the dinp sums for C > 768, fits in that too */
    return (size_t)LN_BWD_BLOCKS * 3 * C * sizeof(float);
}

extern "C" void layernorm_backward(kbf16 *dinp, float *dweight, float *dbias, float *dinp_sum, void *scratch,
                                   const kbf16 *dout, const kbf16 *inp, const kbf16 *weight, const float *mean,
                                   const float *rstd, int N, int C, cudaStream_t stream) {
    float *partial = (float *)scratch;
    bool fused_sum = dinp_sum != NULL && C <= LN_BWD_SUM_MAX_K * 256;
    /* The grid is fixed (not sized by N) so the summation order is the same for every N; blocks
     * beyond the rows simply contribute zeros. */
    switch ((C + 255) / 256) {
    case 1: launch_ln_bwd_reg<1>(fused_sum, dinp, partial, dout, inp, weight, mean, rstd, N, C, stream); break;
    case 2: launch_ln_bwd_reg<2>(fused_sum, dinp, partial, dout, inp, weight, mean, rstd, N, C, stream); break;
    case 3: launch_ln_bwd_reg<3>(fused_sum, dinp, partial, dout, inp, weight, mean, rstd, N, C, stream); break;
    case 4: launch_ln_bwd_reg<4>(fused_sum, dinp, partial, dout, inp, weight, mean, rstd, N, C, stream); break;
    case 5: launch_ln_bwd_reg<5>(fused_sum, dinp, partial, dout, inp, weight, mean, rstd, N, C, stream); break;
    case 6: launch_ln_bwd_reg<6>(fused_sum, dinp, partial, dout, inp, weight, mean, rstd, N, C, stream); break;
    case 7: launch_ln_bwd_reg<7>(fused_sum, dinp, partial, dout, inp, weight, mean, rstd, N, C, stream); break;
    case 8: launch_ln_bwd_reg<8>(fused_sum, dinp, partial, dout, inp, weight, mean, rstd, N, C, stream); break;
    default: {
        size_t smem = (size_t)LN_WARPS * 2 * C * sizeof(float);
        if (smem > 48 * 1024)
            CUDA_CHECK(cudaFuncSetAttribute(layernorm_backward_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            (int)smem));
        layernorm_backward_kernel<<<LN_BWD_BLOCKS, LN_WARPS * 32, smem, stream>>>(dinp, partial, dout, inp, weight,
                                                                                 mean, rstd, N, C);
        CUDA_CHECK(cudaGetLastError());
    }
    }
    int rows = fused_sum ? 3 : 2;
    add_partial_sums(PartialSumOutputs{{dweight, dbias, dinp_sum}}, rows, partial, LN_BWD_BLOCKS, (size_t)rows * C, C,
                     stream);
    if (dinp_sum && !fused_sum) bias_backward(dinp_sum, scratch, dinp, N, C, stream);
}
