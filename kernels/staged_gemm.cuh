/* kernels/staged_gemm.cuh - a persistent Hopper product (sm_90a) whose finished tiles go to drain
 * warps in bf16, so that an epilogue's loads, stores and arithmetic run while the tensor cores do the
 * next tile's products. The epilogue is a policy class; kernels/gated_mlp.cu (the gated MLP's
 * activation) and kernels/qkv_rope.cu (QK-norm and RoPE) are its users.
 *
 *   out tile [128 rows, 256 columns] = A [rows, K] · B^T, A K-major (boxes {64 k, 128 rows}); B either
 *   K-major [columns, K] (boxes {64 k, 128 rows}: Epi::b_row names the two boxes' first rows) or
 *   MN-major [K, columns] (boxes {64 columns, 64 k}, the tile's 256 columns from tn · 256).
 *
 *  - Persistent, 384 threads, one CTA per SM in 2-CTA clusters on adjacent 128-row blocks; two consumer
 *    warpgroups of 64 rows run wgmma m64n256k16 from a 3-stage ring of 48 KiB stages filled by TMA
 *    (128-byte swizzle); the two CTAs of a cluster share every B stage, each fetching half and
 *    multicasting it.
 *  - A finished tile goes to a 64 KiB staging tile in bf16 (rounded as a stored product is), and the
 *    consumers go on to the next tile's products while the drain warps run Epi::drain on it: with
 *    the consumers doing the epilogue themselves the tensor cores idled through it (dev/RESULTS.md,
 *    2026-11-29). The staging tile is why the ring has 3 stages, not 4.
 *  - Copies: a producer warp and three drain warps, or (INLINE) consumer thread 0 issuing them between
 *    its products and four drain warps, for epilogues whose loads and stores bound the kernel. ptxas
 *    gives every thread of the block the launch bound's registers (65536 / 384 = 168; it counts
 *    threads in whole warpgroups and setmaxnreg does not raise it), and the consumers hold 128
 *    accumulators: more drain warps do not fit.
 *  Tiles are rastered in groups of 8 cluster rows (m fastest), so the tiles in flight share their
 *  panels in L2. Deterministic: every output is written once, by one thread, from sums in a fixed
 *  order (k in order, as cuBLAS sums when it does not split k).
 *
 * An Epi class provides: typedef Args (with a StagedShape sh member), B_MN_MAJOR, b_row(args, rank,
 * tn) for a K-major B, and drain(args, staging, m0, tn, t, nt) run by thread t of nt drain threads
 * (nt a multiple of 32; every drain thread calls it) once the tile at rows m0.., columns tn · 256.. is
 * staged. */
#ifndef FUSEDGPT_STAGED_GEMM_CUH
#define FUSEDGPT_STAGED_GEMM_CUH

#include <cuda.h> /* CUtensorMap */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "kernels/cuda_check.h"
#include "kernels/device_util.cuh"
#include "kernels/tma.cuh"
#include "kernels/wgmma.cuh"

#define SG_BM 128 /* rows per CTA: two consumer warpgroups of 64 */
#define SG_BN 256 /* accumulator columns per tile */
#define SG_BK 64  /* k per stage: one 128-byte swizzle row of bf16 */
#define SG_CL 2   /* CTAs per cluster sharing the B stages */
#define SG_STAGES 3
#define SG_PANEL_BYTES (64 * 128)
#define SG_A_BYTES (SG_BM * SG_BK * 2)
#define SG_STAGE_BYTES (SG_A_BYTES + SG_BN * SG_BK * 2)
#define SG_STAGING_BYTES (SG_BM * SG_BN * 2) /* a tile in bf16, rows of 512 bytes */
#define SG_CONSUMERS 256
#define SG_THREADS (SG_CONSUMERS + 128)
#define SG_SMEM (SG_STAGES * SG_STAGE_BYTES + SG_STAGING_BYTES + 1024 + 8 * (2 * SG_STAGES + 2))
#define SG_GROUP 8
#define SG_SPIN_LIMIT (1u << 30)

/* The product's extent: k blocks, tiles, units (one cluster's pair of tiles) */
typedef struct {
    int kbs;
    uint32_t tiles_m, tiles_n, units;
} StagedShape;

/* mbar_wait with a bound: a wait that never ends traps (an error the host reports) */
__device__ __forceinline__ void sg_wait(uint32_t bar, uint32_t parity) {
    for (uint32_t n = 0; !mbar_try_wait(bar, parity); n++)
        if (n == SG_SPIN_LIMIT) __trap();
}

/* unit -> this CTA's first row and the tile's column index (32-bit: the issuer's registers) */
__device__ __forceinline__ void sg_unit(const StagedShape &s, uint32_t u, uint32_t rank, int64_t *m0, int *tn) {
    const uint32_t per_group = SG_GROUP * s.tiles_n, g = u / per_group;
    const uint32_t first = g * SG_GROUP, rows = min((uint32_t)SG_GROUP, s.tiles_m - first), idx = u - g * per_group;
    const uint32_t n = idx / rows, cm = first + (idx - n * rows);
    *m0 = ((int64_t)cm * SG_CL + rank) * SG_BM;
    *tn = (int)n;
}

__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    uint32_t w;
    memcpy(&w, &h, sizeof w);
    return w;
}
__device__ __forceinline__ float bf16_lo(uint32_t w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float bf16_hi(uint32_t w) { return __uint_as_float(w & 0xFFFF0000u); }

/* Staging: row r's 16-byte chunk k (8 columns) at r * 512 + ((k ^ (r & 7)) << 4), so that a consumer
 * warp's 4-byte writes (8 rows, 4 lanes a chunk) and a drain warp's 16-byte reads (whole rows) meet
 * every bank once. */
__device__ __forceinline__ uint32_t sg_staged(int r, int k) { return (uint32_t)(r * 512 + ((k ^ (r & 7)) << 4)); }

/* a consumer's 64 x 256 accumulators into the staging tile */
__device__ __forceinline__ void sg_stage(const float (&acc)[128], unsigned char *stg, int wg, int wq, int lane) {
    const int r0 = wg * 64 + wq * 16 + (lane >> 2), byte = (lane & 3) * 4;
#pragma unroll
    for (int i = 0; i < 32; i++) {
        *reinterpret_cast<uint32_t *>(stg + sg_staged(r0, i) + byte) = pack_bf16x2(acc[i * 4 + 0], acc[i * 4 + 1]);
        *reinterpret_cast<uint32_t *>(stg + sg_staged(r0 + 8, i) + byte) = pack_bf16x2(acc[i * 4 + 2], acc[i * 4 + 3]);
    }
}

/* The copy issuer's place in the CTA's (unit, k block) sequence. */
struct SgIssuer {
    uint32_t u, stage, phase, fills;
    int kb, tn;
    int64_t m0;
};

/* Issues the next stage's copies once its slot is free; false when the CTA's units are all issued. */
template <class Epi>
__device__ __forceinline__ bool sg_issue(const typename Epi::Args &a, const CUtensorMap *tm_a,
                                         const CUtensorMap *tm_b, uint32_t ring, uint32_t full_bar,
                                         uint32_t empty_bar, uint32_t rank, uint32_t nclusters, SgIssuer &p) {
    if (p.u >= a.sh.units) return false;
    if (p.kb == 0) sg_unit(a.sh, p.u, rank, &p.m0, &p.tn);
    if (p.fills >= SG_STAGES) sg_wait(empty_bar + 8 * p.stage, p.phase ^ 1);
    const uint32_t fb = full_bar + 8 * p.stage, sa = ring + p.stage * SG_STAGE_BYTES, sb = sa + SG_A_BYTES;
    mbar_expect_tx(fb, SG_STAGE_BYTES); /* A and the whole B stage, whichever CTA fetches each half */
    const int k0 = p.kb * SG_BK;
    tma_load_2d(sa, tm_a, k0, (int)p.m0, fb);
    if (!Epi::B_MN_MAJOR) /* each CTA one box of 128 rows */
        tma_load_2d_multicast(sb + rank * 2 * SG_PANEL_BYTES, tm_b, k0, Epi::b_row(a, rank, p.tn), fb, 3);
    else
#pragma unroll
        for (int q = (int)rank * 2; q < (int)rank * 2 + 2; q++)
            tma_load_2d_multicast(sb + q * SG_PANEL_BYTES, tm_b, p.tn * SG_BN + 64 * q, k0, fb, 3);
    p.fills++;
    if (++p.stage == SG_STAGES) p.stage = 0, p.phase ^= 1;
    if (++p.kb == a.sh.kbs) p.kb = 0, p.u += nclusters;
    return true;
}

/* INLINE: consumer thread 0 issues the copies and warps 8-11 drain; else warp 8 issues, 9-11 drain. */
template <class Epi, int INLINE>
__global__ void __launch_bounds__(SG_THREADS, 1)
    staged_gemm_kernel(const typename Epi::Args a, const __grid_constant__ CUtensorMap tm_a,
                       const __grid_constant__ CUtensorMap tm_b) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    constexpr int first_drain_warp = SG_CONSUMERS / 32 + (INLINE ? 0 : 1), drain_warps = 12 - first_drain_warp;
    extern __shared__ unsigned char sg_smem[];
    const uint32_t ring = (smem_addr(sg_smem) + 1023) & ~1023u;
    const uint32_t staging = ring + SG_STAGES * SG_STAGE_BYTES;
    unsigned char *stg = sg_smem + (staging - smem_addr(sg_smem));
    const uint32_t full_bar = staging + SG_STAGING_BYTES, empty_bar = full_bar + 8 * SG_STAGES;
    const uint32_t staged_bar = empty_bar + 8 * SG_STAGES, drained_bar = staged_bar + 8;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const uint32_t rank = cluster_rank();
    const uint32_t cluster = blockIdx.x / SG_CL, nclusters = gridDim.x / SG_CL;

    if (threadIdx.x == 0) {
        for (int s = 0; s < SG_STAGES; s++) {
            mbar_init(full_bar + 8 * s, 1);             /* the issuer's expect-tx, then the bytes */
            mbar_init(empty_bar + 8 * s, 8 * SG_CL);    /* every consumer warp of both CTAs */
        }
        mbar_init(staged_bar, SG_CONSUMERS / 32);
        mbar_init(drained_bar, drain_warps);
        mbar_init_fence();
    }
    cluster_sync_all(); /* the peer's barriers are initialised before any copy or arrive reaches them */

    SgIssuer issuer = {cluster, 0, 0, 0, 0, 0, 0};
    if (!INLINE && warp == SG_CONSUMERS / 32) {
        if (lane == 0)
            while (sg_issue<Epi>(a, &tm_a, &tm_b, ring, full_bar, empty_bar, rank, nclusters, issuer)) {
            }
        __syncwarp();
    } else if (warp >= first_drain_warp) {
        const int t = threadIdx.x - 32 * first_drain_warp;
        uint32_t j = 0;
        for (uint32_t u = cluster; u < a.sh.units; u += nclusters, j++) {
            int64_t m0;
            int tn;
            sg_unit(a.sh, u, rank, &m0, &tn);
            sg_wait(staged_bar, j & 1);
            Epi::drain(a, stg, m0, tn, t, 32 * drain_warps);
            __syncwarp();
            if (lane == 0) mbar_arrive(drained_bar);
        }
    } else {
        const int wg = warp >> 2, wq = warp & 3;
        uint32_t stage = 0, phase = 0, j = 0;
        /* a warp's release of a slot once its products read it: both CTAs refill every slot (B
         * arrives by multicast), so each hears from every consumer warp */
        auto release = [&](uint32_t s) {
            __syncwarp();
            if (lane == 0)
#pragma unroll
                for (int c = 0; c < SG_CL; c++) mbar_arrive_cluster(empty_bar + 8 * s, (uint32_t)c);
        };
        /* inline: SG_STAGES - 1 stages ahead; each iteration then refills the slot its previous one
         * read, once every consumer warp of the cluster released it */
        if (INLINE && threadIdx.x == 0)
            for (int s = 0; s < SG_STAGES - 1; s++)
                sg_issue<Epi>(a, &tm_a, &tm_b, ring, full_bar, empty_bar, rank, nclusters, issuer);
        float acc[128];
        for (uint32_t u = cluster; u < a.sh.units; u += nclusters, j++) {
            uint32_t prev = 0;
            for (int kb = 0; kb < a.sh.kbs; kb++) {
                sg_wait(full_bar + 8 * stage, phase);
                const uint32_t base = ring + stage * SG_STAGE_BYTES;
                const uint32_t sa = base + wg * SG_PANEL_BYTES, sb = base + SG_A_BYTES;
                __syncwarp(); /* wgmma is .aligned: the warp converges after the wait */
                wgmma_fence();
#pragma unroll
                for (int kk = 0; kk < SG_BK / 16; kk++) {
                    const uint64_t da = smem_desc(sa + kk * 32);
                    if (!Epi::B_MN_MAJOR)
                        wgmma_m64n256k16_t<0, 0>(acc, da, smem_desc(sb + kk * 32), (kb | kk) != 0);
                    else
                        wgmma_m64n256k16_t<0, 1>(acc, da, smem_desc_lbo(sb + kk * 2048, SG_PANEL_BYTES), (kb | kk) != 0);
                }
                wgmma_commit();
                /* the previous k block's products are done: its stage goes back while this one's run */
                wgmma_wait<1>();
                if (kb > 0) release(prev);
                if (INLINE && threadIdx.x == 0)
                    sg_issue<Epi>(a, &tm_a, &tm_b, ring, full_bar, empty_bar, rank, nclusters, issuer);
                __syncwarp(); /* wgmma_wait is .aligned: the warp converges after thread 0's issue */
                prev = stage;
                if (++stage == SG_STAGES) stage = 0, phase ^= 1;
            }
            wgmma_wait<0>();
            fence_acc(acc);
            release(prev);
            if (j > 0) sg_wait(drained_bar, (j - 1) & 1); /* the drain is done with the previous tile */
            sg_stage(acc, stg, wg, wq, lane);
            __syncwarp();
            if (lane == 0) mbar_arrive(staged_bar);
        }
    }
    __syncwarp(); /* the barrier is .aligned: every warp converges after its lane-0 branches */
    cluster_sync_all(); /* no CTA leaves while its peer may still multicast into it or arrive on it */
#else
    __trap(); /* only the sm_90a build has wgmma and clusters */
#endif
}

/* ---- host ------------------------------------------------------------------------------------------ */

/* The shape of rows x K by columns, in tiles of SG_BM x SG_BN. */
static inline StagedShape staged_shape(int64_t rows, int64_t K, int64_t columns) {
    StagedShape s;
    s.kbs = (int)ceil_div(K, SG_BK);
    s.tiles_m = (uint32_t)ceil_div(rows, (int64_t)SG_CL * SG_BM);
    s.tiles_n = (uint32_t)ceil_div(columns, SG_BN);
    s.units = s.tiles_m * s.tiles_n;
    return s;
}

/* a row-major bf16 matrix [rows, cols] in boxes of box_rows x box_cols */
static inline CUtensorMap staged_map(const kbf16 *p, int64_t rows, int64_t cols, int box_cols, int box_rows,
                                     const char *what) {
    const cuuint64_t dims[2] = {(cuuint64_t)cols, (cuuint64_t)rows};
    const cuuint64_t strides[1] = {(cuuint64_t)cols * sizeof(bf16)};
    const cuuint32_t box[2] = {(cuuint32_t)box_cols, (cuuint32_t)box_rows};
    return tma_tensor_map_bf16(p, 2, dims, strides, box, what);
}

/* Clusters of every staged kernel resident at once (they share their block size and shared memory),
 * found once per device. */
static inline int staged_resident_clusters(const void *kernel, const char *what) {
    static int per_device[64];
    int device = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    int *clusters = device < 64 ? &per_device[device] : NULL;
    if (clusters && *clusters) return *clusters;
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute at;
    cfg.gridDim = dim3(2 * SG_CL), cfg.blockDim = dim3(SG_THREADS), cfg.dynamicSmemBytes = SG_SMEM;
    at.id = cudaLaunchAttributeClusterDimension;
    at.val.clusterDim.x = SG_CL, at.val.clusterDim.y = 1, at.val.clusterDim.z = 1;
    cfg.attrs = &at, cfg.numAttrs = 1;
    int n = 0;
    CUDA_CHECK(cudaOccupancyMaxActiveClusters(&n, kernel, &cfg));
    if (n < 1) {
        fprintf(stderr, "error: %s: no cluster of %d CTAs with %d bytes of shared memory fits this GPU (they need a "
                        "Hopper GPU)\n", what, SG_CL, SG_SMEM);
        exit(1);
    }
    if (clusters) *clusters = n;
    return n;
}

/* Launches staged_gemm_kernel<Epi, INLINE> over a.sh's units, one cluster per resident slot. */
template <class Epi, int INLINE>
static void staged_gemm_launch(const typename Epi::Args &a, const CUtensorMap &tm_a, const CUtensorMap &tm_b,
                               const char *what, cudaStream_t stream) {
    static int attribute_set[64]; /* per instantiation and device */
    int device = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    const void *kernel = (const void *)staged_gemm_kernel<Epi, INLINE>;
    if (device >= 64 || !attribute_set[device]) {
        CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, SG_SMEM));
        if (device < 64) attribute_set[device] = 1;
    }
    const int clusters = staged_resident_clusters(kernel, what);
    const int64_t grid = (int64_t)a.sh.units < clusters ? (int64_t)a.sh.units : clusters;
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute at;
    cfg.gridDim = dim3((unsigned)(grid * SG_CL)), cfg.blockDim = dim3(SG_THREADS), cfg.dynamicSmemBytes = SG_SMEM;
    cfg.stream = stream;
    at.id = cudaLaunchAttributeClusterDimension;
    at.val.clusterDim.x = SG_CL, at.val.clusterDim.y = 1, at.val.clusterDim.z = 1;
    cfg.attrs = &at, cfg.numAttrs = 1;
    CUDA_CHECK(cudaLaunchKernelEx(&cfg, staged_gemm_kernel<Epi, INLINE>, a, tm_a, tm_b));
    CUDA_CHECK(cudaGetLastError());
}

#endif
