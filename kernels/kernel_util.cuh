/* kernels/kernel_util.cuh - small device helpers shared by the kernels of kernels.h (those that
 * the output layers use too are in kernels/device_util.cuh): 16-byte bf16 vectors, warp
 * reductions, fixed-order block reductions, and the fixed grid sizes that make the two-pass reductions deterministic.
 *
 * Determinism: every reduction here combines partial sums in an order fixed by the launch shape
 * (never by timing), so two runs on the same device give bit-identical results. No float atomics. */
#ifndef FUSEDGPT_KERNEL_UTIL_CUH
#define FUSEDGPT_KERNEL_UTIL_CUH

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "kernels/cuda_check.h"
#include "kernels/device_util.cuh"
#include "kernels/kernels.h" /* AttentionShape */

/* Eight bf16 in one 16-byte load or store: the width that saturates memory per thread. */
struct __align__(16) bf16x8 {
    __nv_bfloat162 h[4];
};

__device__ __forceinline__ bf16x8 load_bf16x8(const bf16 *p) {
    bf16x8 v;
    *reinterpret_cast<int4 *>(&v) = __ldg(reinterpret_cast<const int4 *>(p));
    return v;
}

/* Plain (not read-only-cache) load, for buffers this kernel also writes. */
__device__ __forceinline__ bf16x8 load_bf16x8_rw(const bf16 *p) {
    bf16x8 v;
    *reinterpret_cast<int4 *>(&v) = *reinterpret_cast<const int4 *>(p);
    return v;
}

__device__ __forceinline__ void store_bf16x8(bf16 *p, const bf16x8 &v) {
    *reinterpret_cast<int4 *>(p) = *reinterpret_cast<const int4 *>(&v);
}

__device__ __forceinline__ void bf16x8_to_float(const bf16x8 &v, float f[8]) {
#pragma unroll
    for (int i = 0; i < 4; i++) {
        float2 t = __bfloat1622float2(v.h[i]);
        f[2 * i] = t.x;
        f[2 * i + 1] = t.y;
    }
}

__device__ __forceinline__ bf16x8 float_to_bf16x8(const float f[8]) {
    bf16x8 v;
#pragma unroll
    for (int i = 0; i < 4; i++) v.h[i] = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);
    return v;
}

__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}

/* Tree sum over a power-of-two number of shared floats; result in s[0]. Fixed order. */
__device__ __forceinline__ void block_tree_sum(float *s, int n) {
    for (int stride = n / 2; stride > 0; stride >>= 1) {
        if ((int)threadIdx.x < stride) s[threadIdx.x] += s[threadIdx.x + stride];
        __syncthreads();
    }
}

/* GELU, tanh approximation (GPT-2's MLP), and its derivative; Gemma's GeGLU takes the same function
 * as x sigmoid(2u) (kernels/gated_act.cuh). */
#define GELU_S 0.7978845608028654f /* sqrt(2/π) */
__device__ __forceinline__ float gelu_f(float x) {
    return 0.5f * x * (1.0f + tanhf(GELU_S * (x + 0.044715f * x * x * x)));
}

__device__ __forceinline__ float gelu_grad_f(float x) {
    float th = tanhf(GELU_S * (x + 0.044715f * x * x * x));
    float sech2 = 1.0f - th * th;
    return 0.5f * (1.0f + th) + 0.5f * x * sech2 * GELU_S * (1.0f + 3.0f * 0.044715f * x * x);
}

/* The second pass of the two-pass column sums (gelu.cu): for each of the `nouts` (≤ 3) outputs y,
 * out[y][c] += Σ_k partial[k·part_stride + y·C + c] over k < nparts, c < C, in a fixed order. */
struct PartialSumOutputs {
    float *out[3];
};
void add_partial_sums(PartialSumOutputs outs, int nouts, const float *partial, int nparts, size_t part_stride, int C,
                      cudaStream_t stream);

#endif
