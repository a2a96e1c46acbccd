/* kernels/wire_sum.cu - the bf16 gradient wire's sum (model/dist/grad_sync.h): out[i] = p_0[i] +
 * p_1[i] + ... in fp32, from rank 0's part on, p_r = parts + r·stride (bf16, one part a rank), so
 * that an element's sum is the same bits whichever rank computes it and in every mode.
 *   launch: one thread per element; bytes 2·nparts + 4 per element (memory bound). */
#include "kernels/kernel_util.cuh"
#include "kernels/kernels.h"

__global__ void sum_parts_kernel(float *out, const bf16 *parts, size_t stride, int nparts, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float sum = __bfloat162float(parts[i]);
    for (int r = 1; r < nparts; r++) sum += __bfloat162float(parts[(size_t)r * stride + i]);
    out[i] = sum;
}

extern "C" void sum_bf16_parts(float *out, const kbf16 *parts, size_t stride, int nparts, size_t n,
                               cudaStream_t stream) {
    if (n == 0) return;
    sum_parts_kernel<<<(unsigned)ceil_div((int64_t)n, 256), 256, 0, stream>>>(out, (const bf16 *)parts, stride,
                                                                              nparts, n);
    CUDA_CHECK(cudaGetLastError());
}
