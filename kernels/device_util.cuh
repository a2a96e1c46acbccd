/* kernels/device_util.cuh - the one home of the small device helpers that more than one kernel file
 * uses: the bf16 type, the SM count, log2(e) for base-2 exponentials, shared-memory addresses, ldmatrix, the
 * m16n8k16 bf16 MMA, cp.async, and the row sort by key of two backward passes. Ceiling division, which host code needs too, is in
 * kernels/host_device.h (included here); Hopper's warpgroup MMA helpers and the 128-byte swizzle
 * are in kernels/wgmma.cuh; vectors and reductions of the body kernels in kernels/kernel_util.cuh. */
#ifndef FUSEDGPT_DEVICE_UTIL_CUH
#define FUSEDGPT_DEVICE_UTIL_CUH

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "kernels/cuda_check.h"
#include "kernels/host_device.h"

typedef __nv_bfloat16 bf16;

/* The current device's SM count, which persistent grids size themselves by. */
static inline int device_sms(void) {
    int dev, sms;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    return sms;
}

#define LOG2E 1.4426950408889634f /* exp(x) = exp2(x·LOG2E): ex2 is the hardware's exponential */

/* The 32-bit shared-state-space address that ldmatrix, cp.async, stmatrix and mbarriers take. */
__device__ __forceinline__ uint32_t smem_addr(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

/* Four 8×8 bf16 matrices from shared memory; lane l gives the address of row l%8 of matrix l/8. */
__device__ __forceinline__ void ldmatrix_x4(uint32_t r[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4(uint32_t r[4], const bf16 *p) { ldmatrix_x4(r, smem_addr(p)); }

/* The same, each matrix transposed. */
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t r[4], const bf16 *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}

/* Stores to a shared-state-space address: one 32-bit word, or four floats (16-byte aligned). */
__device__ __forceinline__ void st_shared_u32(uint32_t addr, uint32_t v) {
    asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(v) : "memory");
}
__device__ __forceinline__ void st_shared_v4(uint32_t addr, float x, float y, float z, float w) {
    asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "f"(x), "f"(y), "f"(z), "f"(w) : "memory");
}

/* c += a·b for one 16×8×16 tile (bf16 operands, fp32 accumulators). */
__device__ __forceinline__ void mma_bf16(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* Two floats as a bf16 pair in one register, lo in the low half (the lower column). */
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
    __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&h);
}

/* 16-byte asynchronous copy to shared address dst; valid == false writes zeros (rows past the end
 * must be zeros, not garbage: a NaN bit pattern times a zero probability would still be NaN). */
__device__ __forceinline__ void cp_async16_to(uint32_t dst, const void *src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async16(void *dst, const void *src, bool valid) {
    cp_async16_to(smem_addr(dst), src, valid);
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
/* Waits until at most N of this thread's committed groups are still in flight. */
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

/* kernels/sort_rows.cu: rows_sorted = the row indices 0..n-1 stably sorted by keys[row] (bits
 * [0, end_bit) of each key), keys_sorted the keys in that order. rows: n indices of scratch; temp:
 * sort_rows_by_key_temp_bytes(n, end_bit) bytes. Asynchronous on stream. */
size_t sort_rows_by_key_temp_bytes(int n, int end_bit);
void sort_rows_by_key(const int32_t *keys, int32_t *keys_sorted, int32_t *rows, int32_t *rows_sorted, void *temp,
                      size_t temp_bytes, int n, int end_bit, cudaStream_t stream);

#endif
