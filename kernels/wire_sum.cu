/* kernels/wire_sum.cu - the gradient exchange's sum on the receiving rank (model/dist/grad_sync.h):
 * out[i] = p_0[i] + p_1[i] + ... in fp32, from rank 0's part on, p_r = parts + r·stride (one part a
 * rank: bf16 from the bf16 wire, fp32 from the copy engines' all-to-all), so that an element's sum
 * is the same bits whichever rank computes it and in every mode. add_fp32 adds a share that every
 * rank computes alike (the encoder's, under ZeRO-1) to a rank's reduced piece.
 *   launch: one thread per element; bytes (2 or 4)·nparts + 4 per element (memory bound). */
#include "kernels/kernel_util.cuh"
#include "kernels/kernels.h"

static __device__ __forceinline__ float part_value(bf16 x) { return __bfloat162float(x); }
static __device__ __forceinline__ float part_value(float x) { return x; }

template <typename Part>
__global__ void sum_parts_kernel(float *out, const Part *parts, size_t stride, int nparts, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float sum = part_value(parts[i]);
    for (int r = 1; r < nparts; r++) sum += part_value(parts[(size_t)r * stride + i]);
    out[i] = sum;
}

template <typename Part>
static void launch_sum_parts(float *out, const Part *parts, size_t stride, int nparts, size_t n,
                             cudaStream_t stream) {
    if (n == 0) return;
    sum_parts_kernel<Part><<<(unsigned)ceil_div((int64_t)n, 256), 256, 0, stream>>>(out, parts, stride, nparts, n);
    CUDA_CHECK(cudaGetLastError());
}

extern "C" void sum_bf16_parts(float *out, const kbf16 *parts, size_t stride, int nparts, size_t n,
                               cudaStream_t stream) {
    launch_sum_parts(out, (const bf16 *)parts, stride, nparts, n, stream);
}

extern "C" void sum_fp32_parts(float *out, const float *parts, size_t stride, int nparts, size_t n,
                               cudaStream_t stream) {
    launch_sum_parts(out, parts, stride, nparts, n, stream);
}

__global__ void add_fp32_kernel(float *dst, const float *src, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] += src[i];
}

extern "C" void add_fp32(float *dst, const float *src, size_t n, cudaStream_t stream) {
    if (n == 0) return;
    add_fp32_kernel<<<(unsigned)ceil_div((int64_t)n, 256), 256, 0, stream>>>(dst, src, n);
    CUDA_CHECK(cudaGetLastError());
}
