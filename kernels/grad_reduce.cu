/* kernels/grad_reduce.cu - data-parallel gradient sums with bf16 on the wire (ZeRO-1).
 *
 * A bucket of world·piece fp32 gradients is cut in world parts; part j is rank j's to reduce. The
 * exchange goes slab by slab: grad_pack_bf16 rounds the slab [offset, offset + len) of every part
 * to bf16 into stage[j·len + k], the ranks swap those slabs (rank j receives every rank's slab of
 * part j), and grad_sum_bf16 adds, in rank order and in fp32, this rank's own unrounded values and
 * the others' bf16 ones. Half the bytes of an fp32 reduce-scatter; each remote term is rounded once
 * (relative 2^-9); the order is fixed, so two runs give the same bits.
 * Bytes: pack reads 4·world·len and writes 2·world·len; sum reads 4·len + 2·(world-1)·len and
 * writes 4·len. Both are a few hundred µs at most for the largest bucket (201M values). */
#include <cuda_bf16.h>

#include "kernels/cuda_check.h"
#include "kernels/kernels.h"

__global__ void grad_pack_bf16_kernel(__nv_bfloat16 *stage, const float *grads, size_t piece, size_t offset,
                                      size_t len, int world) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)world * len) return;
    size_t part = i / len, k = i - part * len;
    stage[i] = __float2bfloat16_rn(grads[part * piece + offset + k]);
}

__global__ void grad_sum_bf16_kernel(float *out, const float *own, const __nv_bfloat16 *recv, size_t len, int world,
                                     int rank) {
    size_t k = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= len) return;
    float sum = 0.0f;
    for (int j = 0; j < world; j++) sum += j == rank ? own[k] : __bfloat162float(recv[(size_t)j * len + k]);
    out[k] = sum;
}

extern "C" void grad_pack_bf16(kbf16 *stage, const float *grads, size_t piece, size_t offset, size_t len, int world,
                               cudaStream_t stream) {
    if (len == 0) return;
    grad_pack_bf16_kernel<<<(unsigned)ceil_div((int64_t)world * (int64_t)len, 256), 256, 0, stream>>>((__nv_bfloat16 *)stage, grads, piece,
                                                                            offset, len, world);
    CUDA_CHECK(cudaGetLastError());
}

extern "C" void grad_sum_bf16(float *out, const float *own, const kbf16 *recv, size_t len, int world, int rank,
                              cudaStream_t stream) {
    if (len == 0) return;
    grad_sum_bf16_kernel<<<(unsigned)ceil_div((int64_t)len, 256), 256, 0, stream>>>(out, own, (const __nv_bfloat16 *)recv,
                                                                                   len, world, rank);
    CUDA_CHECK(cudaGetLastError());
}
