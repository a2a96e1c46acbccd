/* kernels/tma.cuh - Hopper's tensor memory accelerator (the bulk tensor copy engine) and the
 * shared-memory mbarriers its copies complete on: barrier init, arrive, expect-tx and wait; a 3-d
 * tiled copy into shared memory; and, on the host, the tensor map that describes the global tensor
 * (cuTensorMapEncodeTiled fetched through the runtime's driver entry point, so nothing links
 * libcuda); for 2-CTA clusters, the multicast copy, the remote arrive and the cluster barrier; bulk
 * stores and fp32 adds from shared to global memory, and the acquire/release counters that order
 * them across blocks. Used by the attention forward, the output layer's tile kernel and dev/bench/gemm_sm90.cu. */
#ifndef FUSEDGPT_TMA_CUH
#define FUSEDGPT_TMA_CUH

#include <cuda.h> /* CUtensorMap */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels/cuda_check.h"

__device__ __forceinline__ void mbar_init(uint32_t bar, int count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count));
}
/* Makes the initialised barriers visible to the copy engine (the async proxy); a block barrier
 * after it makes them visible to the block's threads. */
__device__ __forceinline__ void mbar_init_fence() {
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
/* One arrival that also announces `bytes` more to come from copies completing on the barrier. */
__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, int bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
/* One arrival, releasing this thread's earlier shared-memory reads (and their wgmma's, once waited). */
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
/* Whether the phase of the given parity has completed (the hardware may wait a while first). */
__device__ __forceinline__ uint32_t mbar_try_wait(uint32_t bar, uint32_t parity) {
    uint32_t done;
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
    return done;
}
/* Waits until the phase of the given parity has completed. */
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
    while (!mbar_try_wait(bar, parity)) {
    }
}

/* The box at coordinates (c0, c1, c2) of the map's tensor into shared memory at dst, completing on
 * bar; elements past the tensor's ends arrive as zeros and count towards the bytes. */
__device__ __forceinline__ void tma_load_3d(uint32_t dst, const CUtensorMap *map, int c0, int c1, int c2,
                                            uint32_t bar) {
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], "
        "[%5];\n" ::"r"(dst),
        "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(bar)
        : "memory");
}

/* The box at coordinates (c0, c1) of a 2-d map's tensor, as tma_load_3d. */
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const CUtensorMap *map, int c0, int c1, uint32_t bar) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(
            dst),
        "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(bar)
        : "memory");
}

/* arrive on the mbarrier at the same shared-memory offset in CTA `rank` of the cluster (itself
 * included); release at CTA scope, as a local arrive (what it orders are this warp's wgmma reads) */
__device__ __forceinline__ void mbar_arrive_cluster(uint32_t bar, uint32_t rank) {
    asm volatile(
        "{\n.reg .b32 r;\nmapa.shared::cluster.u32 r, %0, %1;\nmbarrier.arrive.shared::cluster.b64 _, [r];\n}\n" ::"r"(
            bar),
        "r"(rank)
        : "memory");
}
__device__ __forceinline__ void cluster_sync_all() {
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
__device__ __forceinline__ uint32_t cluster_rank() {
    uint32_t r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
    return r;
}
/* the box lands at the same offset in every CTA of ctas (a bit mask), completing on each one's
 * mbarrier at the offset of bar */
__device__ __forceinline__ void tma_load_2d_multicast(uint32_t dst, const CUtensorMap *map, int c0, int c1,
                                                      uint32_t bar, uint16_t ctas) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1, {%2, "
        "%3}], [%4], %5;\n" ::"r"(dst),
        "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(bar), "h"(ctas)
        : "memory");
}

/* Bulk copies from shared to global memory, issued by one thread: `bytes` (a multiple of 16, both
 * addresses 16-byte aligned) stored, or added element-wise in fp32 by the L2's reduction units. They
 * join the thread's bulk group at the next commit; wait_read frees the shared source, wait_done
 * also has the global writes performed. */
__device__ __forceinline__ void bulk_store(void *dst, uint32_t src, int bytes) {
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;\n" ::"l"(dst), "r"(src), "r"(bytes)
                 : "memory");
}
__device__ __forceinline__ void bulk_add_f32(float *dst, uint32_t src, int bytes) {
    asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(dst), "r"(src),
                 "r"(bytes)
                 : "memory");
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
__device__ __forceinline__ void bulk_wait_read() { asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory"); }
__device__ __forceinline__ void bulk_wait_done() { asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory"); }
/* Orders this thread's generic-proxy accesses to global memory against its bulk (async-proxy) ones. */
__device__ __forceinline__ void fence_proxy_async_global() {
    asm volatile("fence.proxy.async.global;\n" ::: "memory");
}
/* A counter in global memory read with acquire, and raised by one with release, at GPU scope: what
 * one block wrote before raising it is seen by a block that reads the raised value. */
__device__ __forceinline__ unsigned ld_acquire_gpu(const unsigned *p) {
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
    return v;
}
/* The same counter read with no ordering: for polling, then one acquire read once it has risen. */
__device__ __forceinline__ unsigned ld_relaxed_gpu(const unsigned *p) {
    unsigned v;
    asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ void red_release_gpu_inc(unsigned *p) {
    asm volatile("red.release.gpu.global.add.u32 [%0], 1;\n" ::"l"(p) : "memory");
}

typedef CUresult (*TmaEncodeTiledFn)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *, const cuuint64_t *,
                                     const cuuint64_t *, const cuuint32_t *, const cuuint32_t *,
                                     CUtensorMapInterleave, CUtensorMapSwizzle, CUtensorMapL2promotion,
                                     CUtensorMapFloatOOBfill);

/* A bf16 tensor of `rank` dimensions (dims[0] contiguous; strides in bytes of dimensions 1 ..
 * rank - 1) read in boxes of `box` elements with the 128-byte swizzle, the layout wgmma's
 * descriptors describe (box[0] = 64 bf16 = 128 bytes). `who` names the caller in errors. */
static CUtensorMap tma_tensor_map_bf16(const void *ptr, int rank, const cuuint64_t *dims, const cuuint64_t *strides,
                                       const cuuint32_t *box, const char *who) {
    static TmaEncodeTiledFn encode;
    if (!encode) {
        cudaDriverEntryPointQueryResult q;
        void *fn = NULL;
        CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q));
        if (q != cudaDriverEntryPointSuccess || !fn) {
            fprintf(stderr, "error: %s: the driver has no cuTensorMapEncodeTiled (update the driver)\n", who);
            exit(1);
        }
        encode = (TmaEncodeTiledFn)fn;
    }
    const cuuint32_t elem[3] = {1, 1, 1};
    CUtensorMap m;
    CUresult r = encode(&m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, (cuuint32_t)rank, (void *)ptr, dims, strides, box,
                        elem, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                        CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS) {
        fprintf(stderr, "error: %s: cuTensorMapEncodeTiled failed (CUresult %d; the tensor must be 16-byte aligned)\n",
                who, (int)r);
        exit(1);
    }
    return m;
}

#endif
