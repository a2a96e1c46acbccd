/* kernels/gemm_sm90.cu - our own Hopper GEMM for the fused output layer's two backward products
 * (kernels/gemm_sm90.h has the launch API; dev/bench/gemm_sm90.cu checks it against cuBLAS and fp64
 * and times it; tests/test_gemm_sm90_gpu.cu tests it).
 *
 * What it computes (row-major; E the chunk's scaled exponentials [C x V] bf16 with row stride ld,
 * Hs [C x d] bf16, W [V x d] bf16; M, N, K the GEMM's sizes):
 *   dW: dW [V x d] fp32 += alpha . E^T . Hs    M = V, N = d, K = C; A = E^T and B = Hs both MN-major
 *   dH: out [C x d] fp32  = E . W              M = C, N = d, K = V; A = E K-major, B = W MN-major
 * FLOPs 2 M N K. Fewest bytes: A and B once (2 (M + N) K), the fp32 output written once (4 M N)
 * and, for dW, read once more (8 M N in all): at (262144, 768, 4096) that is 1.65 TFLOP against
 * 2.7 GB, 2.2 ms and 0.9 ms at 750 TFLOP/s and 3 TB/s; the read-modify-write of dW is a third of
 * the GEMM's time unless it overlaps the mainloop.
 *
 * Design: a persistent, warp-specialised kernel, 384 threads, one CTA per SM, 193 KiB of shared
 * memory. Warp 8's lane 0 is the producer: it walks the CTA's work units and issues TMA copies
 * (128-byte swizzle; MN-major operands as boxes of 64 k rows x 64 m/n) into a 4-stage ring of
 * 48 KiB stages, each completing on its "full" mbarrier. Warps 0-7 are two consumer warpgroups
 * sharing each 128 x 256 output tile, 64 rows each: wgmma m64n256k16 from shared memory with the
 * transpose flag of each MN-major operand, one k-block's products in flight while the previous
 * stage is released on its "empty" mbarrier. setmaxnreg gives the consumers 232 registers (128
 * accumulators) and the producer warpgroup 40. Two CTAs of a cluster, on adjacent 128-row blocks,
 * share every B stage: each fetches half and multicasts it to both, so B crosses from L2 once per
 * pair (a stage costs each CTA 32 KiB of L2 reads instead of 48).
 * Scheduler: work units are (cluster tile, k split), split-major, and the cluster tiles within a
 * split are rastered in groups of `group` cluster rows (m fastest inside a group, then n), so the
 * units in flight share their A and B panels in L2; unit u goes to cluster u mod clusters.
 * Epilogues, straight from the accumulators (a quad exchange gives each thread 4 adjacent columns,
 * so every access is 16 bytes and a warp's covers whole 32-byte sectors):
 *   dW: red.global.add.v4.f32 of alpha . acc. The reductions are fire-and-forget, so the consumers
 *     start the next tile's mainloop (whose first stages the producer has already loaded) while L2
 *     performs the read-modify-write. Deterministic: every element gets exactly one addition per
 *     launch, so no order can differ. (The reduction rounds to nearest and flushes subnormals:
 *     alpha . acc is rounded once before the add, unlike an fma.)
 *   dH: plain fp32 stores. When the tiles would leave clusters idle (C = 4096, d = 768: 48 cluster
 *     tiles for 66 clusters) K is split in S ranges; split 0 stores into the output, the others
 *     into a workspace, and a second kernel adds those S - 1 partials onto the output in split
 *     order (deterministic; no atomics). gemm_sm90_dh_plan says when, and how the rows go in
 *     panels when the partials of all of them would not fit the workspace.
 * Every mbarrier wait is bounded (4 s): a lost copy or arrive traps after writing who waited on
 * what into pinned host memory, which gemm_sm90_report_hang prints.
 *
 * Compiled (nvcc 13.0, sm_90a): HGMMA.64x256x16 with .tnspA.tnspB (dW) and .tnspB (dH), UTMALDG
 * copies, REDG.E.ADD.F32x4 for the dW epilogue. Measured on an H100 SXM 80 GB against cublasGemmEx
 * (./build/bench_gemm_sm90, CUDA events, median of 10; ms ours / cuBLAS): dW 128256 x 4096 x 4096
 * 6.561 / 6.689, 262144 x 768 x 4096 2.348 / 2.490, 50304 x 768 x 16384 1.694 / 1.745; dH
 * 4096 x 4096 x 128256 5.861 / 5.981, 4096 x 768 x 262144 (4 splits) 2.107 / 2.143,
 * 16384 x 768 x 50304 1.609 / 1.761. (That run compared cluster 1 with 2 and a load-fma-store dW
 * epilogue with the reduction; both lost and are gone, see the history of dev/bench/gemm_sm90.cu.) */
#include <cuda.h> /* CUtensorMap */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda_check.h"
#include "kernels/device_util.cuh"
#include "kernels/gemm_sm90.h"
#include "kernels/host_device.h"
#include "kernels/tma.cuh"
#include "kernels/wgmma.cuh"

#define GM_BM GEMM_SM90_TILE_M /* output rows per CTA: two consumer warpgroups of 64 */
#define GM_BN GEMM_SM90_TILE_N /* output columns per tile */
#define GM_BK 64  /* k per stage: one 128-byte swizzle row of bf16 */
#define GM_CL 2   /* CTAs per cluster, sharing the B stages */
#define GM_STAGES 4
#define GM_PANEL_BYTES (64 * 128) /* a box of 64 rows of 128 bytes */
#define GM_A_BYTES (GM_BM * GM_BK * 2)
#define GM_B_BYTES (GM_BK * GM_BN * 2)
#define GM_STAGE_BYTES (GM_A_BYTES + GM_B_BYTES)
#define GM_CONSUMERS 256
#define GM_THREADS (GM_CONSUMERS + 128)
/* a warp of each warpgroup shares each of the SM's four 16K register files: 2 x 232 + 40 <= 512 */
#define GM_CONSUMER_REGS 232
#define GM_PRODUCER_REGS 40
#define GM_SMEM (GM_STAGES * GM_STAGE_BYTES + 1024 + 16 * GM_STAGES) /* ring, alignment slack, barriers */
#define GM_WAIT_NS 4000000000ull
#define GM_MAX_SPLITS 16

/* Where a timed-out wait is reported: pinned host memory, readable after the trap kills the
 * context. [0] set last; [1] block, [2] thread, [3] 0 = full / 1 = empty, [4] stage, [5] parity. */
typedef struct {
    volatile uint32_t *hang;
} GemmDebug;

typedef struct {
    int64_t M, N, K;
    float *C;             /* [M x N] fp32 row-major, row stride N */
    float *parts;         /* dH with splits > 1: splits 1 .. S - 1's partials, split_stride apart */
    int64_t split_stride;
    const float *alpha;   /* device scalar, dW only */
    int kb_per_split;         /* k-blocks of GM_BK per split; every split holds at least one */
    int kbs;                  /* k-blocks in all: ceil(K / GM_BK) */
    uint32_t tiles_m, tiles_n; /* cluster tiles: GM_CL x 128 rows by 256 columns */
    uint32_t units;           /* tiles_m x tiles_n x splits, below 2^31 */
    uint32_t group;           /* cluster rows per raster group */
    GemmDebug dbg;
} GemmArgs;

/* ---- device: waits, descriptors, wgmma with transposes ------------------------------------------ */

__device__ __forceinline__ uint64_t global_ns() {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

/* mbar_wait with a bound: after GM_WAIT_NS the waiter records itself and traps (a hang would
 * otherwise hold the device for good). */
__device__ __forceinline__ void gm_wait(uint32_t bar, uint32_t parity, const GemmDebug &dbg, int what, int stage) {
    uint64_t start = 0;
    for (uint32_t n = 0;; n++) {
        uint32_t done;
        asm volatile(
            "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
            : "=r"(done)
            : "r"(bar), "r"(parity)
            : "memory");
        if (done) return;
        if ((n & 255) == 255) {
            const uint64_t now = global_ns();
            if (!start) start = now;
            else if (now - start > GM_WAIT_NS) {
                dbg.hang[1] = blockIdx.x, dbg.hang[2] = threadIdx.x, dbg.hang[3] = (uint32_t)what;
                dbg.hang[4] = (uint32_t)stage, dbg.hang[5] = parity;
                __threadfence_system();
                dbg.hang[0] = 1;
                __threadfence_system();
                __trap();
            }
        }
    }
}

/* A 128-byte-swizzled operand's descriptor with its leading byte offset: for an MN-major operand,
 * the distance between its 64-wide blocks along m or n (the stride byte offset, 1024, steps 8 k
 * rows); for a K-major one the leading offset is unused. */
__device__ __forceinline__ uint64_t gm_desc(uint32_t addr, uint32_t lbo) {
    return (uint64_t)((addr & 0x3FFFF) >> 4) | ((uint64_t)(lbo >> 4) << 16) | ((uint64_t)(1024 >> 4) << 32) |
           (1ull << 62);
}

/* ---- the schedule: work unit -> (rows, columns, k-blocks) --------------------------------------- */

typedef struct {
    int64_t m0;   /* this CTA's first output row */
    int64_t n0;   /* first output column */
    int kb0, nkb; /* first k-block and how many */
    int split;
} Unit;

/* Split-major; inside a split, groups of a.group cluster rows, m fastest, then n. 32-bit unsigned
 * arithmetic (the host keeps units below 2^31): 64-bit division is a subroutine call, whose
 * registers and stack the producer's 40 cannot hold. */
__device__ __forceinline__ Unit unit_of(const GemmArgs &a, uint32_t u, uint32_t rank) {
    const uint32_t tiles = a.tiles_m * a.tiles_n;
    const uint32_t split = u / tiles, t = u - split * tiles;
    const uint32_t per_group = a.group * a.tiles_n, g = t / per_group;
    const uint32_t first = g * a.group, rows = min(a.group, a.tiles_m - first), idx = t - g * per_group;
    const uint32_t n = idx / rows, cm = first + (idx - n * rows);
    Unit w;
    w.m0 = ((int64_t)cm * GM_CL + rank) * GM_BM;
    w.n0 = (int64_t)n * GM_BN;
    w.split = (int)split;
    w.kb0 = (int)split * a.kb_per_split;
    w.nkb = min(a.kb_per_split, a.kbs - w.kb0);
    return w;
}

/* ---- epilogue ------------------------------------------------------------------------------------ */

__device__ __forceinline__ void red_add_v4(float *p, float4 v) {
    asm volatile("red.relaxed.gpu.global.add.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"l"(p), "f"(v.x), "f"(v.y),
                 "f"(v.z), "f"(v.w)
                 : "memory");
}

/* Four adjacent columns of block i (8 columns) for this thread: the quad's lanes 2j and 2j + 1
 * swap halves, so the even lane holds row r, columns 4(q/2) .. + 3 of the block, the odd lane row
 * r + 8 (q = lane % 4; r = the thread's first accumulator row). */
__device__ __forceinline__ float4 quad_v4(const float (&acc)[128], int i, bool odd) {
    const float s0 = odd ? acc[i * 4 + 0] : acc[i * 4 + 2], s1 = odd ? acc[i * 4 + 1] : acc[i * 4 + 3];
    const float r0 = __shfl_xor_sync(0xffffffffu, s0, 1), r1 = __shfl_xor_sync(0xffffffffu, s1, 1);
    return odd ? make_float4(r0, r1, acc[i * 4 + 2], acc[i * 4 + 3]) : make_float4(acc[i * 4 + 0], acc[i * 4 + 1], r0, r1);
}

/* A consumer warpgroup's 64 x 256 accumulators into C (dW: added, times alpha; dH: stored, split 0
 * into C and split s > 0 into partial s - 1). row0: the warpgroup's first row. One epilogue per
 * kernel (a template argument): with both in one body the compiler hoists their common shuffles
 * out of the branches, and the shuffled copy of the tile spills. */
template <int DW>
__device__ __forceinline__ void gm_epilogue(const GemmArgs &a, const float (&acc)[128], int64_t row0, int64_t n0,
                                            int split, int wq, int lane, float alpha) {
    const bool odd = lane & 1;
    const int64_t row = row0 + wq * 16 + (lane >> 2) + (odd ? 8 : 0);
    const int64_t col = n0 + ((lane & 3) >> 1) * 4;
    const bool row_in = row < a.M;
    float *c = (split ? a.parts + (int64_t)(split - 1) * a.split_stride : a.C) + row * a.N + col;
    if (DW) {
#pragma unroll
        for (int i = 0; i < 32; i++) {
            float4 v = quad_v4(acc, i, odd);
            v.x *= alpha, v.y *= alpha, v.z *= alpha, v.w *= alpha;
            if (row_in && col + i * 8 < a.N) red_add_v4(c + i * 8, v);
        }
    } else {
#pragma unroll
        for (int i = 0; i < 32; i++) {
            const float4 v = quad_v4(acc, i, odd);
            if (row_in && col + i * 8 < a.N) *reinterpret_cast<float4 *>(c + i * 8) = v;
        }
    }
}

/* ---- the kernel ---------------------------------------------------------------------------------- */

/* DW = 1: the dW product (A = E^T, MN-major; red epilogue); DW = 0: the dH product (A = E,
 * K-major; stores). tm_a: boxes {64 m, 64 k} (MN-major) or {64 k, 128 m} (K-major); tm_b: boxes
 * {64 n, 64 k}. */
template <int DW>
__global__ void __launch_bounds__(GM_THREADS, 1)
    gemm_sm90_kernel(const GemmArgs a, const __grid_constant__ CUtensorMap tm_a,
                     const __grid_constant__ CUtensorMap tm_b) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ unsigned char gm_smem[];
    const uint32_t ring = (smem_addr(gm_smem) + 1023) & ~1023u;
    const uint32_t full_bar = ring + GM_STAGES * GM_STAGE_BYTES, empty_bar = full_bar + 8 * GM_STAGES;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const uint32_t rank = cluster_rank();
    const uint32_t cluster = blockIdx.x / GM_CL, nclusters = gridDim.x / GM_CL;

    if (threadIdx.x == 0) {
        for (int s = 0; s < GM_STAGES; s++) {
            mbar_init(full_bar + 8 * s, 1);           /* the producer's expect-tx + the bytes */
            mbar_init(empty_bar + 8 * s, 8 * GM_CL);  /* every consumer warp of every CTA */
        }
        mbar_init_fence();
    }
    /* the barriers (the peer's too) are initialised before any copy, arrive or wait reaches them */
    cluster_sync_all();

    if (warp >= GM_CONSUMERS / 32) {
        warpgroup_reg_dealloc<GM_PRODUCER_REGS>();
        if (warp == GM_CONSUMERS / 32 && lane == 0) {
            uint32_t stage = 0, phase = 0, fills = 0;
            for (uint32_t u = cluster; u < a.units; u += nclusters) {
                const Unit w = unit_of(a, u, rank);
                for (int kb = w.kb0; kb < w.kb0 + w.nkb; kb++) {
                    /* the slot's previous fill was released by every consumer warp of the cluster */
                    if (fills >= GM_STAGES) gm_wait(empty_bar + 8 * stage, phase ^ 1, a.dbg, 1, (int)stage);
                    const uint32_t fb = full_bar + 8 * stage, sa = ring + stage * GM_STAGE_BYTES,
                                   sb = sa + GM_A_BYTES;
                    mbar_expect_tx(fb, GM_STAGE_BYTES); /* A + the whole B stage, whoever fetches it */
                    const int k0 = kb * GM_BK;
                    if (DW) {
                        tma_load_2d(sa, &tm_a, (int)w.m0, k0, fb);
                        tma_load_2d(sa + GM_PANEL_BYTES, &tm_a, (int)w.m0 + 64, k0, fb);
                    } else {
                        tma_load_2d(sa, &tm_a, k0, (int)w.m0, fb);
                    }
                    /* this CTA's half of the B stage, multicast to both */
#pragma unroll
                    for (int p = (int)rank * (4 / GM_CL); p < ((int)rank + 1) * (4 / GM_CL); p++)
                        tma_load_2d_multicast(sb + p * GM_PANEL_BYTES, &tm_b, (int)w.n0 + 64 * p, k0, fb,
                                              (uint16_t)((1u << GM_CL) - 1));
                    fills++;
                    if (++stage == GM_STAGES) stage = 0, phase ^= 1;
                }
            }
        }
        __syncwarp();
    } else {
        warpgroup_reg_alloc<GM_CONSUMER_REGS>();
        const int wg = warp >> 2, wq = warp & 3;
        const float alpha = DW ? *a.alpha : 1.0f;
        uint32_t stage = 0, phase = 0;
        /* a warp's release of a slot, once its products have read it: every CTA of the cluster
         * refills that slot (B arrives by multicast), so each must hear from every consumer warp */
        auto release = [&](uint32_t s) {
            __syncwarp();
            if (lane == 0) {
#pragma unroll
                for (int c = 0; c < GM_CL; c++) mbar_arrive_cluster(empty_bar + 8 * s, (uint32_t)c);
            }
        };
        float acc[128];
        for (uint32_t u = cluster; u < a.units; u += nclusters) {
            const Unit w = unit_of(a, u, rank);
            uint32_t prev = 0;
            for (int kb = 0; kb < w.nkb; kb++) {
                gm_wait(full_bar + 8 * stage, phase, a.dbg, 0, (int)stage);
                const uint32_t base = ring + stage * GM_STAGE_BYTES;
                const uint32_t sa = base + wg * GM_PANEL_BYTES, sb = base + GM_A_BYTES; /* this warpgroup's 64 rows */
                __syncwarp(); /* wgmma is .aligned: the warp converges after the wait */
                wgmma_fence();
#pragma unroll
                for (int kk = 0; kk < GM_BK / 16; kk++) {
                    /* K-major A steps 16 k = 32 bytes along its rows; MN-major operands step 16 k
                     * rows of 128 bytes */
                    const uint64_t da = DW ? gm_desc(sa + kk * 2048, GM_PANEL_BYTES) : gm_desc(sa + kk * 32, 16);
                    wgmma_m64n256k16_t<DW, 1>(acc, da, gm_desc(sb + kk * 2048, GM_PANEL_BYTES), (kb | kk) != 0);
                }
                wgmma_commit();
                /* the previous k-block's products are done: its stage goes back to the producer
                 * while this one's run */
                wgmma_wait<1>();
                if (kb > 0) release(prev);
                prev = stage;
                if (++stage == GM_STAGES) stage = 0, phase ^= 1;
            }
            wgmma_wait<0>();
            fence_acc(acc);
            release(prev);
            gm_epilogue<DW>(a, acc, w.m0 + wg * 64, w.n0, w.split, wq, lane, alpha);
        }
    }
    /* no CTA leaves while its peer may still multicast into it or arrive on its barriers */
    cluster_sync_all();
#else
    __trap();
#endif
}

/* out += the partials of splits 1 .. S - 1, in split order (float4s; n4 = M N / 4): split 0's
 * partial is already in out, so the sum runs in the order 0, 1, ..., S - 1 every time. */
__global__ void split_sum_kernel(const float4 *parts, int more, int64_t stride4, float4 *out, int64_t n4) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n4) return;
    float4 s = out[i];
    for (int p = 0; p < more; p++) {
        const float4 v = parts[p * stride4 + i];
        s.x += v.x, s.y += v.y, s.z += v.z, s.w += v.w;
    }
    out[i] = s;
}

/* ---- host ---------------------------------------------------------------------------------------- */

typedef void (*GemmKernel)(const GemmArgs, const CUtensorMap, const CUtensorMap);

static GemmKernel kernel_for(int dw) { return dw ? gemm_sm90_kernel<1> : gemm_sm90_kernel<0>; }

static cudaLaunchConfig_t launch_config(dim3 grid, cudaLaunchAttribute *at, cudaStream_t stream) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid, cfg.blockDim = dim3(GM_THREADS), cfg.dynamicSmemBytes = GM_SMEM, cfg.stream = stream;
    *at = cudaLaunchAttribute{};
    at->id = cudaLaunchAttributeClusterDimension;
    at->val.clusterDim.x = GM_CL, at->val.clusterDim.y = 1, at->val.clusterDim.z = 1;
    cfg.attrs = at, cfg.numAttrs = 1;
    return cfg;
}

int gemm_sm90_init(GemmSm90 *g) {
    memset(g, 0, sizeof *g);
    int dev = 0, major = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    if (major != 9) {
        fprintf(stderr, "error: our Hopper GEMM needs compute capability 9.0, this GPU is %d.x (run on an H100 or H200)\n",
                major);
        return -1;
    }
    for (int dw = 0; dw <= 1; dw++) {
        CUDA_CHECK(cudaFuncSetAttribute((const void *)kernel_for(dw), cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        GM_SMEM));
        cudaLaunchAttribute at;
        const cudaLaunchConfig_t cfg = launch_config(dim3(GM_CL * 64), &at, 0);
        int n = 0;
        CUDA_CHECK(cudaOccupancyMaxActiveClusters(&n, (const void *)kernel_for(dw), &cfg));
        if (n < 1) {
            fprintf(stderr, "error: no cluster of %d CTAs with %d bytes of shared memory each fits this GPU (is another "
                            "context holding its shared memory?)\n",
                    GM_CL, GM_SMEM);
            return -1;
        }
        if (g->clusters == 0 || n < g->clusters) g->clusters = n;
    }
    g->group = 8;
    void *h = NULL, *d = NULL;
    CUDA_CHECK(cudaHostAlloc(&h, 8 * sizeof(uint32_t), cudaHostAllocMapped));
    memset(h, 0, 8 * sizeof(uint32_t));
    CUDA_CHECK(cudaHostGetDevicePointer(&d, h, 0));
    g->hang = (volatile uint32_t *)h, g->hang_dev = (volatile uint32_t *)d;
    return 0;
}

void gemm_sm90_free(GemmSm90 *g) {
    if (g->hang) CUDA_CHECK(cudaFreeHost((void *)g->hang));
    memset(g, 0, sizeof *g);
}

int gemm_sm90_report_hang(const GemmSm90 *g) {
    if (!g->hang || !g->hang[0]) return 0;
    fprintf(stderr,
            "error: an mbarrier wait of our Hopper GEMM timed out: block %u thread %u waited on the %s barrier of "
            "stage %u, parity %u (a copy that never landed or a release that never came)\n",
            g->hang[1], g->hang[2], g->hang[3] ? "empty" : "full", g->hang[4], g->hang[5]);
    return 1;
}

static void check_operand(const char *product, const char *what, const void *p, int64_t ld) {
    if (((uintptr_t)p & 15) || ld % 8 || ld < 1) {
        fprintf(stderr,
                "error: our Hopper GEMM (%s): %s at %p with row stride %lld: needs a 16-byte aligned pointer and a row "
                "stride that is a multiple of 8 elements (pad the rows)\n",
                product, what, p, (long long)ld);
        exit(1);
    }
}

/* The shape rules of kernels/gemm_sm90.h, and the scheduler's 32-bit unit count. */
static void check_shape(const char *product, int64_t M, int64_t N, int64_t K, const float *C) {
    const int64_t lim = (int64_t)1 << 31;
    if (M < 1 || N < 1 || K < 1 || M >= lim || N >= lim || K >= lim || N % 8 || ((uintptr_t)C & 15)) {
        fprintf(stderr,
                "error: our Hopper GEMM (%s): M=%lld N=%lld K=%lld, C at %p: needs sizes in [1, 2^31), N a multiple of "
                "8 and C 16-byte aligned\n",
                product, (long long)M, (long long)N, (long long)K, (const void *)C);
        exit(1);
    }
}

/* A bf16 matrix of `rows` rows of `cols` elements (row stride ld) read in boxes of box_cols x
 * box_rows; what lies past its ends reads as zeros. */
static CUtensorMap gm_map(const bf16 *p, int64_t rows, int64_t cols, int64_t ld, int box_cols, int box_rows) {
    const cuuint64_t dims[2] = {(cuuint64_t)cols, (cuuint64_t)rows};
    const cuuint64_t strides[1] = {(cuuint64_t)ld * sizeof(bf16)};
    const cuuint32_t box[2] = {(cuuint32_t)box_cols, (cuuint32_t)box_rows};
    return tma_tensor_map_bf16(p, 2, dims, strides, box, "our Hopper GEMM");
}

static int64_t cluster_tiles(int64_t M, int64_t N) { return ceil_div(M, GM_CL * GM_BM) * ceil_div(N, GM_BN); }

/* One launch over all of M (and its split sum): dW (dw = 1) or dH with `splits` k ranges. */
static void launch(const GemmSm90 *g, int dw, int64_t M, int64_t N, int64_t K, const bf16 *E, int64_t lde,
                   const bf16 *B, int64_t ldb, float *C, float *parts, const float *alpha, int splits,
                   cudaStream_t stream) {
    GemmArgs a = {};
    a.M = M, a.N = N, a.K = K, a.C = C, a.parts = parts, a.split_stride = M * N, a.alpha = alpha;
    a.dbg.hang = g->hang_dev;
    const int64_t tiles_m = ceil_div(M, GM_CL * GM_BM), tiles_n = ceil_div(N, GM_BN), tiles = tiles_m * tiles_n;
    a.kbs = (int)ceil_div(K, GM_BK);
    a.kb_per_split = (int)ceil_div(a.kbs, splits);
    if (tiles * splits >= ((int64_t)1 << 31)) {
        fprintf(stderr, "error: our Hopper GEMM: %lld x %lld output needs %lld work units, more than the scheduler's "
                        "2^31 (split the product)\n",
                (long long)M, (long long)N, (long long)(tiles * splits));
        exit(1);
    }
    a.tiles_m = (uint32_t)tiles_m, a.tiles_n = (uint32_t)tiles_n;
    a.group = (uint32_t)(g->group < tiles_m ? g->group : tiles_m);
    a.units = (uint32_t)(tiles * splits);
    const CUtensorMap tm_a = dw ? gm_map(E, K, M, lde, 64, 64) : gm_map(E, M, K, lde, 64, GM_BM);
    const CUtensorMap tm_b = gm_map(B, K, N, ldb, 64, 64);
    int64_t nclusters = (int64_t)a.units < g->clusters ? (int64_t)a.units : g->clusters;
    if (g->max_clusters > 0 && nclusters > g->max_clusters) nclusters = g->max_clusters;
    cudaLaunchAttribute at;
    const cudaLaunchConfig_t lc = launch_config(dim3((unsigned)(nclusters * GM_CL)), &at, stream);
    CUDA_CHECK(cudaLaunchKernelEx(&lc, kernel_for(dw), a, tm_a, tm_b));
    if (splits > 1) {
        const int64_t n4 = M * N / 4;
        split_sum_kernel<<<(unsigned)ceil_div(n4, 256), 256, 0, stream>>>((const float4 *)parts, splits - 1, n4,
                                                                          (float4 *)C, n4);
        CUDA_CHECK(cudaGetLastError());
    }
}

void gemm_sm90_dw(const GemmSm90 *g, int64_t M, int64_t N, int64_t K, const bf16 *E, int64_t lde, const bf16 *B,
                  int64_t ldb, float *C, const float *alpha, cudaStream_t stream) {
    check_shape("dW", M, N, K, C);
    check_operand("dW", "E", E, lde);
    check_operand("dW", "B", B, ldb);
    if (!alpha) {
        fprintf(stderr, "error: our Hopper GEMM (dW): alpha is NULL (pass a device pointer to the scale)\n");
        exit(1);
    }
    launch(g, 1, M, N, K, E, lde, B, ldb, C, NULL, alpha, 1, stream);
}

/* Two output-sized partials: the fused layer's memory beside its chunk then stays within 64 MiB at
 * 65536 x 768 x 262144, and its 4096 x 768 chunks (132 SMs) run in two panels of 2048 rows in 5
 * splits each (4 splits of all the rows would need three partials). */
size_t gemm_sm90_dh_workspace_bytes(int64_t max_M, int64_t N) { return 2 * (size_t)max_M * (size_t)N * sizeof(float); }

/* The smallest split count (at most GM_MAX_SPLITS and the k-blocks) whose units fill at least 90 %
 * of the last wave of clusters; 1 when none does. */
static int choose_splits(int64_t tiles, int64_t clusters, int64_t kbs) {
    for (int s = 1; s <= GM_MAX_SPLITS && s <= kbs; s++) {
        const int64_t units = tiles * s, waves = ceil_div(units, clusters);
        if ((double)units >= 0.9 * (double)(waves * clusters)) return s;
    }
    return 1;
}

/* K splits only when the cluster tiles leave clusters idle (choose_splits), and then the rows run
 * in the fewest panels of whole cluster tiles whose S - 1 extra partials fit the workspace; a
 * split count is normalised so that no split is empty. */
GemmSm90Plan gemm_sm90_dh_plan(const GemmSm90 *g, int64_t M, int64_t N, int64_t K, size_t parts_bytes, int splits) {
    const int64_t kbs = ceil_div(K, GM_BK);
    GemmSm90Plan p = {1, M};
    for (int64_t panels = 1;; panels++) {
        p.panel_rows = panels == 1 ? M : round_up(ceil_div(M, panels), GM_CL * GM_BM);
        int s = splits > 0 ? splits : choose_splits(cluster_tiles(p.panel_rows, N), g->clusters, kbs);
        if (s > kbs) s = (int)kbs;
        s = (int)ceil_div(kbs, ceil_div(kbs, s));
        p.splits = s;
        if (s == 1) { /* panels without splits would only add launches */
            p.panel_rows = M;
            return p;
        }
        if ((size_t)(s - 1) * (size_t)p.panel_rows * (size_t)N * sizeof(float) <= parts_bytes) return p;
        if (p.panel_rows <= GM_CL * GM_BM) {
            if (splits > 0) {
                fprintf(stderr, "error: our Hopper GEMM (dH): %d splits of %lld x %lld need %zu bytes of partials, "
                                "the workspace has %zu (give it more, or fewer splits)\n",
                        splits, (long long)p.panel_rows, (long long)N,
                        (size_t)(s - 1) * (size_t)p.panel_rows * (size_t)N * sizeof(float), parts_bytes);
                exit(1);
            }
            p.splits = 1, p.panel_rows = M;
            return p;
        }
    }
}

GemmSm90Plan gemm_sm90_dh(const GemmSm90 *g, int64_t M, int64_t N, int64_t K, const bf16 *E, int64_t lde,
                          const bf16 *B, int64_t ldb, float *C, float *parts, size_t parts_bytes, int splits,
                          cudaStream_t stream) {
    check_shape("dH", M, N, K, C);
    check_operand("dH", "E", E, lde);
    check_operand("dH", "B", B, ldb);
    const GemmSm90Plan p = gemm_sm90_dh_plan(g, M, N, K, parts_bytes, splits);
    if (p.splits > 1 && ((uintptr_t)parts & 15)) {
        fprintf(stderr, "error: our Hopper GEMM (dH): the split workspace at %p is not 16-byte aligned\n", (void *)parts);
        exit(1);
    }
    for (int64_t m0 = 0; m0 < M; m0 += p.panel_rows) {
        const int64_t rows = M - m0 < p.panel_rows ? M - m0 : p.panel_rows;
        launch(g, 0, rows, N, K, E + m0 * lde, lde, B, ldb, C + m0 * N, parts, NULL, p.splits, stream);
    }
    return p;
}
