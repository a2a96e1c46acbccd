/* kernels/tma.cuh - the tensor memory accelerator (TMA) and mbarriers, shared by the Hopper kernels
 * fed by bulk tensor copies: the fused output layer's tile kernels and the dGELU matmul.
 *
 * A copy is described on the host (tma_map_rows: a row-major bf16 matrix read in boxes of 64
 * columns with the 128-byte swizzle, the layout kernels/wgmma.cuh's descriptors describe) and
 * issued by one thread; it completes on an mbarrier that counts its bytes (mbar_expect_tx), so the
 * consumers wait on that barrier instead of a __syncthreads. */
#ifndef FUSEDGPT_TMA_CUH
#define FUSEDGPT_TMA_CUH

#include <cuda.h> /* CUtensorMap (the driver entry point is fetched through the runtime) */
#include <cuda_bf16.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels/cuda_check.h"

#define TMA_BOX_COLS 64 /* 128 bytes of bf16: one row of a 128-byte-swizzled tile */

__device__ __forceinline__ void mbar_init(uint32_t bar, int count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count));
}
__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, int bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
    uint32_t done;
    do {
        asm volatile(
            "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
            : "=r"(done)
            : "r"(bar), "r"(parity)
            : "memory");
    } while (!done);
}
/* box (c0 = first column, c1 = first row) of the map into shared memory at dst */
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const CUtensorMap *map, int c0, int c1, uint32_t bar) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(
            dst),
        "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(bar)
        : "memory");
}

/* cuTensorMapEncodeTiled through the runtime's driver entry point (no link to libcuda) */
typedef CUresult (*TmaEncodeTiledFn)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *, const cuuint64_t *,
                                     const cuuint64_t *, const cuuint32_t *, const cuuint32_t *, CUtensorMapInterleave,
                                     CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

/* A [rows x cols] bf16 row-major matrix read in boxes of box_rows x 64 with the 128-byte swizzle;
 * rows past the end read as zeros. */
static inline CUtensorMap tma_map_rows(const __nv_bfloat16 *ptr, int64_t rows, int64_t cols, int box_rows) {
    static TmaEncodeTiledFn encode;
    if (!encode) {
        cudaDriverEntryPointQueryResult q;
        void *fn = NULL;
        CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q));
        if (q != cudaDriverEntryPointSuccess || !fn) {
            fprintf(stderr, "error: the driver has no cuTensorMapEncodeTiled (update the driver)\n");
            exit(1);
        }
        encode = (TmaEncodeTiledFn)fn;
    }
    CUtensorMap m;
    const cuuint64_t dims[2] = {(cuuint64_t)cols, (cuuint64_t)rows};
    const cuuint64_t strides[1] = {(cuuint64_t)cols * sizeof(__nv_bfloat16)};
    const cuuint32_t box[2] = {TMA_BOX_COLS, (cuuint32_t)box_rows}, elem[2] = {1, 1};
    CUresult r = encode(&m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, (void *)ptr, dims, strides, box, elem,
                        CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                        CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS) {
        fprintf(stderr, "error: cuTensorMapEncodeTiled failed (CUresult %d) for a %lld x %lld matrix at %p\n", (int)r,
                (long long)rows, (long long)cols, (const void *)ptr);
        exit(1);
    }
    return m;
}

#endif
