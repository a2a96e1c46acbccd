/* dev/bench/gemm_sm90.cu - our own Hopper GEMM for the fused output layer's two backward products,
 * checked against cuBLAS and timed beside it. A yardstick, not part of the layer: wired in as the
 * layer's dH and dW products (commits 1da4212-93bd963, reverted by c29dc99) it was correct and
 * slower (dev/RESULTS.md, Output layer).
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
 * accumulators) and the producer warpgroup 40. With --cluster 2 (the default) two CTAs on adjacent
 * 128-row blocks share every B stage: each fetches half and multicasts it to both, so B crosses
 * from L2 once per pair (a stage costs each CTA 32 KiB of L2 reads instead of 48).
 * Scheduler: work units are (cluster tile, k split), split-major, and the cluster tiles within a
 * split are rastered in groups of --group cluster rows (m fastest inside a group, then n), so the
 * units in flight share their A and B panels in L2; unit u goes to cluster u mod clusters.
 * Epilogues, straight from the accumulators (a quad exchange gives each thread 4 adjacent columns,
 * so every access is 16 bytes and a warp's covers whole 32-byte sectors):
 *   dW, --dw-epilogue red (default): red.global.add.v4.f32 of alpha . acc. The reductions are
 *     fire-and-forget, so the consumers start the next tile's mainloop (whose first stages the
 *     producer has already loaded) while L2 performs the read-modify-write. Deterministic: every
 *     element gets exactly one addition per launch, so no order can differ. (The reduction rounds
 *     to nearest and flushes subnormals: alpha . acc is rounded once before the add, unlike an fma.)
 *   dW, --dw-epilogue rmw: load, fma, store, eight 16-byte loads in flight per thread; the
 *     tensor cores wait for it (the yardstick for what red hides).
 *   dH: plain fp32 stores. When the tiles would leave SMs idle (C = 4096, d = 768: 48 cluster tiles
 *     for 66 clusters) K is split in S ranges; each split stores its partial into a workspace and a
 *     second kernel sums the S partials in split order (deterministic; no atomics).
 * Every mbarrier wait is bounded (4 s): a lost copy or arrive traps after writing who waited on
 * what into pinned host memory, which the host prints.
 *
 * Run: ./build/bench_gemm_sm90 [--check-only] [--shape dw:V,d,C | dh:C,d,V]... [--cluster 1|2]
 *        [--group G] [--splits S] [--dw-epilogue red|rmw] [--clusters N] [--reps R]
 * (--clusters N: at most N clusters in the persistent grid, each then walks more work units.)
 * It first checks every variant (cluster 1 and 2; red and rmw; split and unsplit dH) at awkward
 * sizes against cublasGemmEx with the same layouts (every element to 1e-3 relative, the first
 * mismatch printed as row, col, ours, cuBLAS) and against fp64 dot products at sampled elements,
 * and that two runs are bitwise equal; then it times both at the layer's shapes (CUDA events, 3
 * warm-ups, median of 10) and prints TFLOP/s.
 *
 * Compiled (nvcc 13.0, sm_90a): HGMMA.64x256x16 with .tnspA.tnspB (dW) and .tnspB (dH), UTMALDG
 * copies, REDG.E.ADD.F32x4 for red; no spills but 64 bytes in the dH cluster-2 epilogue.
 *
 * On an H100 SXM 80 GB (2026-11-26; `./build/bench_gemm_sm90 --check-only`, then without it) every
 * check passed on the first run, and the six timed shapes ran at 0.91-0.98x cuBLAS's time in one
 * run and 0.89-1.02x in the next: a few per cent ahead on average, with the run-to-run spread
 * about as large. In the layer it lost (0.6-6.5 % on the layer, 3 % on the GPT-2 trainer at
 * V = 262144). The likely causes, not yet measured apart: the next chunk's tile kernel, launched
 * early behind cuBLASLt's dW, cannot start before the persistent GEMM's last CTA ends, and the
 * split dH needs panels and a sum pass where cuBLAS has one launch. To win there it needs the
 * softmax work in its epilogues, so that there are fewer kernels to hand over between. */
#include <cuda.h> /* CUtensorMap */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda_check.h"
#include "kernels/device_util.cuh"
#include "kernels/tma.cuh"
#include "kernels/wgmma.cuh"

#define GM_BM 128 /* output rows per CTA: two consumer warpgroups of 64 */
#define GM_BN 256 /* output columns per tile */
#define GM_BK 64  /* k per stage: one 128-byte swizzle row of bf16 */
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

enum { EPI_STORE = 0, EPI_ACC_RED = 1, EPI_ACC_RMW = 2 };

/* Where a timed-out wait is reported: pinned host memory, readable after the trap kills the
 * context. [0] set last; [1] block, [2] thread, [3] 0 = full / 1 = empty, [4] stage, [5] parity. */
typedef struct {
    volatile uint32_t *hang;
} GemmDebug;

typedef struct {
    int64_t M, N, K;
    float *C;             /* [M x N] fp32 row-major, row stride N; STORE with splits > 1: the partials */
    int64_t split_stride; /* elements between two splits' partials */
    const float *alpha;   /* device scalar, the accumulating epilogues only */
    int kb_per_split;         /* k-blocks of GM_BK per split; every split holds at least one */
    int kbs;                  /* k-blocks in all: ceil(K / GM_BK) */
    uint32_t tiles_m, tiles_n; /* cluster tiles: CL x 128 rows by 256 columns */
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

/* mbar_wait with a bound: after GM_WAIT_NS the waiter records itself and traps, so a copy or a
 * release that never comes ends the bench with a report instead of hanging the GPU. */
__device__ __forceinline__ void gm_wait(uint32_t bar, uint32_t parity, const GemmDebug &dbg, int what, int stage) {
    uint64_t start = 0;
    for (uint32_t n = 0;; n++) {
        if (mbar_try_wait(bar, parity)) return;
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
__device__ __forceinline__ Unit unit_of(const GemmArgs &a, uint32_t u, int CL, uint32_t rank) {
    const uint32_t tiles = a.tiles_m * a.tiles_n;
    const uint32_t split = u / tiles, t = u - split * tiles;
    const uint32_t per_group = a.group * a.tiles_n, g = t / per_group;
    const uint32_t first = g * a.group, rows = min(a.group, a.tiles_m - first), idx = t - g * per_group;
    const uint32_t n = idx / rows, cm = first + (idx - n * rows);
    Unit w;
    w.m0 = ((int64_t)cm * CL + rank) * GM_BM;
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

/* A consumer warpgroup's 64 x 256 accumulators into C. row0: the warpgroup's first row. One
 * epilogue per kernel (a template argument): with all three in one body the compiler hoists their
 * common shuffles out of the branches, and the shuffled copy of the tile spills. */
template <int EPI>
__device__ __forceinline__ void gm_epilogue(const GemmArgs &a, const float (&acc)[128], int64_t row0, int64_t n0,
                                            int split, int wq, int lane, float alpha) {
    const bool odd = lane & 1;
    const int64_t row = row0 + wq * 16 + (lane >> 2) + (odd ? 8 : 0);
    const int64_t col = n0 + ((lane & 3) >> 1) * 4;
    const bool row_in = row < a.M;
    float *c = a.C + (EPI == EPI_STORE ? (int64_t)split * a.split_stride : 0) + row * a.N + col;
    if (EPI == EPI_STORE) {
#pragma unroll
        for (int i = 0; i < 32; i++) {
            const float4 v = quad_v4(acc, i, odd);
            if (row_in && col + i * 8 < a.N) *reinterpret_cast<float4 *>(c + i * 8) = v;
        }
    } else if (EPI == EPI_ACC_RED) {
#pragma unroll
        for (int i = 0; i < 32; i++) {
            float4 v = quad_v4(acc, i, odd);
            v.x *= alpha, v.y *= alpha, v.z *= alpha, v.w *= alpha;
            if (row_in && col + i * 8 < a.N) red_add_v4(c + i * 8, v);
        }
    } else {
#pragma unroll
        for (int i0 = 0; i0 < 32; i0 += 8) {
            float4 old[8];
#pragma unroll
            for (int j = 0; j < 8; j++)
                old[j] = row_in && col + (i0 + j) * 8 < a.N ? *reinterpret_cast<const float4 *>(c + (i0 + j) * 8)
                                                             : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
            for (int j = 0; j < 8; j++) {
                const float4 v = quad_v4(acc, i0 + j, odd);
                const float4 o = make_float4(fmaf(alpha, v.x, old[j].x), fmaf(alpha, v.y, old[j].y),
                                             fmaf(alpha, v.z, old[j].z), fmaf(alpha, v.w, old[j].w));
                if (row_in && col + (i0 + j) * 8 < a.N) *reinterpret_cast<float4 *>(c + (i0 + j) * 8) = o;
            }
        }
    }
}

/* ---- the kernel ---------------------------------------------------------------------------------- */

/* TA: A is MN-major (the dW product's E^T) when 1, K-major (the dH product's E) when 0. CL: CTAs
 * per cluster sharing the B stages. tm_a: boxes {64 k, 128 m} (K-major) or {64 m, 64 k}; tm_b:
 * boxes {64 n, 64 k}. */
template <int TA, int CL, int EPI>
__global__ void __launch_bounds__(GM_THREADS, 1)
    gemm_sm90_kernel(const GemmArgs a, const __grid_constant__ CUtensorMap tm_a,
                     const __grid_constant__ CUtensorMap tm_b) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ unsigned char gm_smem[];
    const uint32_t ring = (smem_addr(gm_smem) + 1023) & ~1023u;
    const uint32_t full_bar = ring + GM_STAGES * GM_STAGE_BYTES, empty_bar = full_bar + 8 * GM_STAGES;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const uint32_t rank = CL > 1 ? cluster_rank() : 0;
    const uint32_t cluster = blockIdx.x / CL, nclusters = gridDim.x / CL;

    if (threadIdx.x == 0) {
        for (int s = 0; s < GM_STAGES; s++) {
            mbar_init(full_bar + 8 * s, 1);               /* the producer's expect-tx + the bytes */
            mbar_init(empty_bar + 8 * s, 8 * CL);         /* every consumer warp of every CTA */
        }
        mbar_init_fence();
    }
    /* the barriers (the peer's too) are initialised before any copy, arrive or wait reaches them */
    if (CL > 1) cluster_sync_all();
    else __syncthreads();

    if (warp >= GM_CONSUMERS / 32) {
        warpgroup_reg_dealloc<GM_PRODUCER_REGS>();
        if (warp == GM_CONSUMERS / 32 && lane == 0) {
            uint32_t stage = 0, phase = 0, fills = 0;
            for (uint32_t u = cluster; u < a.units; u += nclusters) {
                const Unit w = unit_of(a, u, CL, rank);
                for (int kb = w.kb0; kb < w.kb0 + w.nkb; kb++) {
                    /* the slot's previous fill was released by every consumer warp of the cluster */
                    if (fills >= GM_STAGES) gm_wait(empty_bar + 8 * stage, phase ^ 1, a.dbg, 1, (int)stage);
                    const uint32_t fb = full_bar + 8 * stage, sa = ring + stage * GM_STAGE_BYTES,
                                   sb = sa + GM_A_BYTES;
                    mbar_expect_tx(fb, GM_STAGE_BYTES); /* A + the whole B stage, whoever fetches it */
                    const int k0 = kb * GM_BK;
                    if (TA) {
                        tma_load_2d(sa, &tm_a, (int)w.m0, k0, fb);
                        tma_load_2d(sa + GM_PANEL_BYTES, &tm_a, (int)w.m0 + 64, k0, fb);
                    } else {
                        tma_load_2d(sa, &tm_a, k0, (int)w.m0, fb);
                    }
#pragma unroll
                    for (int p = (int)rank * (4 / CL); p < ((int)rank + 1) * (4 / CL); p++) {
                        if (CL > 1)
                            tma_load_2d_multicast(sb + p * GM_PANEL_BYTES, &tm_b, (int)w.n0 + 64 * p, k0, fb,
                                                  (uint16_t)((1u << CL) - 1));
                        else
                            tma_load_2d(sb + p * GM_PANEL_BYTES, &tm_b, (int)w.n0 + 64 * p, k0, fb);
                    }
                    fills++;
                    if (++stage == GM_STAGES) stage = 0, phase ^= 1;
                }
            }
        }
        __syncwarp();
    } else {
        warpgroup_reg_alloc<GM_CONSUMER_REGS>();
        const int wg = warp >> 2, wq = warp & 3;
        const float alpha = EPI != EPI_STORE && a.alpha ? *a.alpha : 1.0f;
        uint32_t stage = 0, phase = 0;
        /* a warp's release of a slot, once its products have read it: every CTA of the cluster
         * refills that slot (B arrives by multicast), so each must hear from every consumer warp */
        auto release = [&](uint32_t s) {
            __syncwarp();
            if (lane == 0) {
                if (CL > 1) {
#pragma unroll
                    for (int c = 0; c < CL; c++) mbar_arrive_cluster(empty_bar + 8 * s, (uint32_t)c);
                } else {
                    mbar_arrive(empty_bar + 8 * s);
                }
            }
        };
        float acc[128];
        for (uint32_t u = cluster; u < a.units; u += nclusters) {
            const Unit w = unit_of(a, u, CL, rank);
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
                    const uint64_t da = TA ? smem_desc_lbo(sa + kk * 2048, GM_PANEL_BYTES) : smem_desc(sa + kk * 32);
                    wgmma_m64n256k16_t<TA, 1>(acc, da, smem_desc_lbo(sb + kk * 2048, GM_PANEL_BYTES), (kb | kk) != 0);
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
            gm_epilogue<EPI>(a, acc, w.m0 + wg * 64, w.n0, w.split, wq, lane, alpha);
        }
    }
    /* no CTA leaves while its peer may still multicast into it or arrive on its barriers */
    if (CL > 1) cluster_sync_all();
#else
    __trap();
#endif
}

/* out = the sum of the splits' partials in split order (float4s; n4 = M N / 4). */
__global__ void split_sum_kernel(const float4 *parts, int splits, int64_t stride4, float4 *out, int64_t n4) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n4) return;
    float4 s = parts[i];
    for (int p = 1; p < splits; p++) {
        const float4 v = parts[p * stride4 + i];
        s.x += v.x, s.y += v.y, s.z += v.z, s.w += v.w;
    }
    out[i] = s;
}

/* ---- host: the launcher ---------------------------------------------------------------------------- */

typedef struct {
    int cluster;      /* 1 or 2 */
    int group;        /* cluster rows per raster group */
    int splits;       /* dH: 0 = chosen from the shape */
    int dw_epilogue;  /* EPI_ACC_RED or EPI_ACC_RMW */
    int max_clusters; /* the persistent grid's clusters at most; 0: as many as fit */
} GemmConfig;

typedef struct {
    int num_sms;
    int clusters[3]; /* resident clusters by cluster size (1, 2) */
    volatile uint32_t *hang, *hang_dev;
    float *workspace; /* dH's split partials */
    size_t workspace_bytes;
} GemmContext;

/* The pinned record a timed-out wait leaves (GemmDebug), for the host to print. */
static volatile uint32_t *g_hang;

typedef void (*GemmKernel)(const GemmArgs, const CUtensorMap, const CUtensorMap);

/* The products' instantiations: dW (MN-major A) with either accumulating epilogue, dH (K-major A)
 * storing; each with 1 or 2 CTAs per cluster. */
static GemmKernel kernel_for(int epi, int cl) {
    if (epi == EPI_ACC_RED) return cl > 1 ? gemm_sm90_kernel<1, 2, EPI_ACC_RED> : gemm_sm90_kernel<1, 1, EPI_ACC_RED>;
    if (epi == EPI_ACC_RMW) return cl > 1 ? gemm_sm90_kernel<1, 2, EPI_ACC_RMW> : gemm_sm90_kernel<1, 1, EPI_ACC_RMW>;
    return cl > 1 ? gemm_sm90_kernel<0, 2, EPI_STORE> : gemm_sm90_kernel<0, 1, EPI_STORE>;
}

static cudaLaunchConfig_t launch_config(dim3 grid, int cl, cudaLaunchAttribute *at, cudaStream_t stream) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid, cfg.blockDim = dim3(GM_THREADS), cfg.dynamicSmemBytes = GM_SMEM, cfg.stream = stream;
    at->id = cudaLaunchAttributeClusterDimension;
    at->val.clusterDim.x = (unsigned)cl, at->val.clusterDim.y = 1, at->val.clusterDim.z = 1;
    cfg.attrs = at, cfg.numAttrs = 1;
    return cfg;
}

static void context_init(GemmContext *g) {
    memset(g, 0, sizeof *g);
    int dev = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
    if (prop.major != 9) {
        fprintf(stderr, "error: %s is compute capability %d.%d; this benchmark is built for sm_90a (run it on a Hopper GPU)\n",
                prop.name, prop.major, prop.minor);
        exit(1);
    }
    g->num_sms = prop.multiProcessorCount;
    for (int epi = 0; epi < 3; epi++)
        for (int cl = 1; cl <= 2; cl++)
            CUDA_CHECK(cudaFuncSetAttribute((const void *)kernel_for(epi, cl),
                                            cudaFuncAttributeMaxDynamicSharedMemorySize, GM_SMEM));
    for (int cl = 1; cl <= 2; cl++) {
        cudaLaunchAttribute at;
        const cudaLaunchConfig_t cfg = launch_config(dim3((unsigned)(cl * 64)), cl, &at, 0);
        int n = 0;
        CUDA_CHECK(cudaOccupancyMaxActiveClusters(&n, (const void *)kernel_for(EPI_STORE, cl), &cfg));
        if (n < 1) {
            fprintf(stderr, "error: no cluster of %d CTAs with %d bytes of shared memory fits this GPU (try --cluster 1)\n",
                    cl, GM_SMEM);
            exit(1);
        }
        g->clusters[cl] = n;
    }
    void *h = NULL, *d = NULL;
    CUDA_CHECK(cudaHostAlloc(&h, 8 * sizeof(uint32_t), cudaHostAllocMapped));
    memset(h, 0, 8 * sizeof(uint32_t));
    CUDA_CHECK(cudaHostGetDevicePointer(&d, h, 0));
    g->hang = (volatile uint32_t *)h, g->hang_dev = (volatile uint32_t *)d;
    g_hang = g->hang;
}

static void context_free(GemmContext *g) {
    if (g->workspace) CUDA_CHECK(cudaFree(g->workspace));
    CUDA_CHECK(cudaFreeHost((void *)g->hang));
}

/* cudaDeviceSynchronize; on failure, what failed and the wait that timed out, if one did. */
static void sync_or_report(const char *what) {
    const cudaError_t e = cudaDeviceSynchronize();
    if (e == cudaSuccess) return;
    fprintf(stderr, "error: %s failed: %s\n", what, cudaGetErrorString(e));
    if (g_hang && g_hang[0])
        fprintf(stderr,
                "error: an mbarrier wait timed out: block %u thread %u waited on the %s barrier of stage %u, parity %u "
                "(a copy that never landed or a release that never came)\n",
                g_hang[1], g_hang[2], g_hang[3] ? "empty" : "full", g_hang[4], g_hang[5]);
    exit(1);
}

/* A bf16 matrix of `rows` rows of `cols` elements (row stride ld) read in boxes of box_cols x
 * box_rows. */
static CUtensorMap gm_map(const bf16 *p, int64_t rows, int64_t cols, int64_t ld, int box_cols, int box_rows) {
    const cuuint64_t dims[2] = {(cuuint64_t)cols, (cuuint64_t)rows};
    const cuuint64_t strides[1] = {(cuuint64_t)ld * sizeof(bf16)};
    const cuuint32_t box[2] = {(cuuint32_t)box_cols, (cuuint32_t)box_rows};
    return tma_tensor_map_bf16(p, 2, dims, strides, box, "gemm_sm90");
}

/* The smallest split count (at most GM_MAX_SPLITS, at most the k-blocks) whose units fill at
 * least 90 % of the last wave of clusters. */
static int choose_splits(int64_t tiles, int64_t clusters, int kbs) {
    for (int s = 1; s <= GM_MAX_SPLITS && s <= kbs; s++) {
        const int64_t units = tiles * s, waves = ceil_div(units, clusters);
        if ((double)units >= 0.9 * (double)(waves * clusters)) return s;
    }
    return 1;
}

/* dW (dw = 1): C [M x N] += alpha E^T B with cfg's epilogue, E [K x M]; dH (dw = 0): C = E B, E
 * [M x K]; E's row stride lde, B [K x N] (row stride N). Returns the split count used. */
static int gemm_sm90(GemmContext *g, const GemmConfig *cfg, int dw, int64_t M, int64_t N, int64_t K, const bf16 *E,
                     int64_t lde, const bf16 *B, float *C, const float *alpha, cudaStream_t stream) {
    const int cl = cfg->cluster;
    GemmArgs a = {};
    a.M = M, a.N = N, a.K = K, a.C = C, a.alpha = alpha;
    a.dbg.hang = g->hang_dev;
    const int64_t tiles_m = ceil_div(M, (int64_t)cl * GM_BM), tiles_n = ceil_div(N, GM_BN), tiles = tiles_m * tiles_n;
    const int kbs = (int)ceil_div(K, GM_BK);
    int splits = 1;
    if (!dw) splits = cfg->splits > 0 ? cfg->splits : choose_splits(tiles, g->clusters[cl], kbs);
    if (splits > kbs) splits = kbs;
    a.kb_per_split = (int)ceil_div(kbs, splits);
    splits = (int)ceil_div(kbs, a.kb_per_split); /* so that no split is empty */
    if (tiles * splits >= (1ll << 31)) {
        fprintf(stderr, "error: %lld x %lld output needs %lld work units, more than the scheduler's 2^31 (split the product)\n",
                (long long)M, (long long)N, (long long)(tiles * splits));
        exit(1);
    }
    a.tiles_m = (uint32_t)tiles_m, a.tiles_n = (uint32_t)tiles_n, a.kbs = kbs;
    a.group = (uint32_t)(cfg->group < tiles_m ? cfg->group : tiles_m);
    a.units = (uint32_t)(tiles * splits);
    if (splits > 1) {
        const size_t need = (size_t)splits * (size_t)M * (size_t)N * sizeof(float);
        if (need > g->workspace_bytes) {
            if (g->workspace) CUDA_CHECK(cudaFree(g->workspace));
            CUDA_CHECK(cudaMalloc(&g->workspace, need));
            g->workspace_bytes = need;
        }
        a.C = g->workspace, a.split_stride = M * N;
    }
    const CUtensorMap tm_a = dw ? gm_map(E, K, M, lde, 64, 64) : gm_map(E, M, K, lde, 64, GM_BM);
    const CUtensorMap tm_b = gm_map(B, K, N, N, 64, 64);
    int64_t nclusters = (int64_t)a.units < g->clusters[cl] ? (int64_t)a.units : g->clusters[cl];
    if (cfg->max_clusters > 0 && nclusters > cfg->max_clusters) nclusters = cfg->max_clusters;
    cudaLaunchAttribute at;
    const cudaLaunchConfig_t lc = launch_config(dim3((unsigned)(nclusters * cl)), cl, &at, stream);
    CUDA_CHECK(cudaLaunchKernelEx(&lc, kernel_for(dw ? cfg->dw_epilogue : EPI_STORE, cl), a, tm_a, tm_b));
    CUDA_CHECK(cudaGetLastError());
    if (splits > 1) {
        const int64_t n4 = M * N / 4;
        split_sum_kernel<<<(unsigned)ceil_div(n4, 256), 256, 0, stream>>>((const float4 *)g->workspace, splits,
                                                                          M * N / 4, (float4 *)C, n4);
        CUDA_CHECK(cudaGetLastError());
    }
    return splits;
}

/* ---- host: inputs, references, comparisons ------------------------------------------------------- */

__device__ __forceinline__ float hash_uniform(uint64_t i, uint32_t seed) {
    uint32_t h = (uint32_t)i * 2654435761u ^ (uint32_t)(i >> 32) * 0x9e3779b9u ^ seed;
    h ^= h >> 16, h *= 0x7feb352du, h ^= h >> 15, h *= 0x846ca68bu, h ^= h >> 16;
    return (float)(h & 0xFFFFFF) / 16777216.0f; /* [0, 1) */
}

/* x[r ld + c] uniform in [lo, hi) for c < cols; the row padding (cols <= c < ld) is NaN, so that a
 * read past the matrix shows in the result. */
__global__ void fill_bf16_kernel(bf16 *x, int64_t rows, int64_t cols, int64_t ld, float lo, float hi, uint32_t seed) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < rows * ld; i += (int64_t)gridDim.x * blockDim.x)
        x[i] = i % ld < cols ? __float2bfloat16(lo + (hi - lo) * hash_uniform((uint64_t)i, seed)) : __float2bfloat16(NAN);
}
__global__ void fill_f32_kernel(float *x, int64_t n, float lo, float hi, uint32_t seed) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        x[i] = lo + (hi - lo) * hash_uniform((uint64_t)i, seed);
}

/* sums[0] += sum of r^2; with o: sums[1] += sum of (o - r)^2, bad[1] counts the elements with
 * |o - r| > tol max(|r|, rms) (NaN included), bad[0] the least such index (initialised to ~0). */
__global__ void compare_kernel(const float *o, const float *r, int64_t n, float tol, float rms, double *sums,
                               unsigned long long *bad) {
    double s_r = 0.0, s_d = 0.0;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const float rv = r[i];
        s_r += (double)rv * rv;
        if (o) {
            const float d = o[i] - rv;
            s_d += (double)d * d;
            if (!(fabsf(d) <= tol * fmaxf(fabsf(rv), rms))) {
                atomicMin(&bad[0], (unsigned long long)i);
                atomicAdd(&bad[1], 1ull);
            }
        }
    }
    for (int off = 16; off > 0; off >>= 1) {
        s_r += __shfl_xor_sync(0xffffffffu, s_r, off);
        s_d += __shfl_xor_sync(0xffffffffu, s_d, off);
    }
    if ((threadIdx.x & 31) == 0) {
        atomicAdd(&sums[0], s_r);
        if (o) atomicAdd(&sums[1], s_d);
    }
}

/* How many 32-bit words of x and y differ. */
__global__ void count_diff_kernel(const uint32_t *x, const uint32_t *y, int64_t n, unsigned long long *count) {
    unsigned long long c = 0;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        c += x[i] != y[i];
    for (int off = 16; off > 0; off >>= 1) c += __shfl_xor_sync(0xffffffffu, c, off);
    if ((threadIdx.x & 31) == 0 && c) atomicAdd(count, c);
}

/* fp64 reference at sampled elements (row, col): sum over k of A(row, k) B(k, col), from E as the
 * product reads it (ta: E [K x M]; else E [M x K]), B [K x N]; plus alpha times that onto c0 when
 * accumulating. One thread per sample. */
__global__ void spot_ref_kernel(const bf16 *E, int64_t lde, const bf16 *B, int64_t N, int64_t K, int ta,
                                const float *c0, double alpha, const int64_t *rows, const int64_t *cols, int n,
                                double *out) {
    const int s = blockIdx.x * blockDim.x + threadIdx.x;
    if (s >= n) return;
    const int64_t m = rows[s], c = cols[s];
    double acc = 0.0;
    for (int64_t k = 0; k < K; k++) {
        const double a = __bfloat162float(ta ? E[k * lde + m] : E[m * lde + k]);
        acc += a * (double)__bfloat162float(B[k * N + c]);
    }
    out[s] = c0 ? (double)c0[m * N + c] + alpha * acc : acc;
}

static unsigned grid_for(int64_t n) {
    const int64_t b = ceil_div(n, 256);
    return (unsigned)(b < 4096 ? b : 4096);
}

static void fill_bf16(bf16 *x, int64_t rows, int64_t cols, int64_t ld, float lo, float hi, uint32_t seed) {
    fill_bf16_kernel<<<grid_for(rows * ld), 256>>>(x, rows, cols, ld, lo, hi, seed);
    CUDA_CHECK(cudaGetLastError());
}
static void fill_f32(float *x, int64_t n, float lo, float hi, uint32_t seed) {
    fill_f32_kernel<<<grid_for(n), 256>>>(x, n, lo, hi, seed);
    CUDA_CHECK(cudaGetLastError());
}

/* cuBLAS with the layer's layouts (column-major views of the row-major matrices):
 *   dW: dW^T [d x V] += alpha . Hs^T [d x C] . (E^T [V x C])^T      (OP_N, OP_T)
 *   dH: out^T [d x C] = W^T [d x V] . E^T [V x C]                    (OP_N, OP_N) */
static void cublas_product(cublasHandle_t h, int ta, int64_t M, int64_t N, int64_t K, const bf16 *E, int64_t lde,
                           const bf16 *B, float *C, float alpha, float beta) {
    CUBLAS_CHECK(cublasGemmEx(h, CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, (int)N, (int)M, (int)K, &alpha, B,
                              CUDA_R_16BF, (int)N, E, CUDA_R_16BF, (int)lde, &beta, C, CUDA_R_32F, (int)N,
                              CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

/* One product of the layer at its sizes, with its buffers. */
typedef struct {
    int dw;          /* 1: dW (ta = 1, accumulate), 0: dH */
    int64_t M, N, K; /* GEMM sizes */
    int64_t lde;     /* E's row stride */
    bf16 *E, *B;
    float *c0, *ours, *ref, *alpha_dev;
    float alpha;
} Problem;

static const char *product_name(const Problem *p) { return p->dw ? "dW" : "dH"; }

/* The layer's sizes: dW (V, d, C) is M = V, N = d, K = C; dH (C, d, V) is M = C, N = d, K = V. E is
 * [C x V] with the layer's row stride (V rounded up to 256). */
static void problem_init(Problem *p, int dw, int64_t s0, int64_t d, int64_t s2, uint32_t seed) {
    memset(p, 0, sizeof *p);
    p->dw = dw, p->M = s0, p->N = d, p->K = s2;
    const int64_t C = dw ? s2 : s0, V = dw ? s0 : s2;
    p->lde = round_up(V, 256);
    p->alpha = dw ? 0.75f : 1.0f;
    const size_t out_bytes = (size_t)p->M * (size_t)p->N * sizeof(float);
    CUDA_CHECK(cudaMalloc(&p->E, (size_t)C * (size_t)p->lde * sizeof(bf16)));
    CUDA_CHECK(cudaMalloc(&p->B, (size_t)p->K * (size_t)p->N * sizeof(bf16)));
    CUDA_CHECK(cudaMalloc(&p->ours, out_bytes));
    CUDA_CHECK(cudaMalloc(&p->ref, out_bytes));
    CUDA_CHECK(cudaMalloc(&p->alpha_dev, sizeof(float)));
    CUDA_CHECK(cudaMemcpy(p->alpha_dev, &p->alpha, sizeof(float), cudaMemcpyHostToDevice));
    fill_bf16(p->E, C, V, p->lde, 0.0f, 1.0f, seed); /* like exponentials: positive, at most 1 */
    fill_bf16(p->B, p->K, p->N, p->N, -1.0f, 1.0f, seed + 1);
    if (dw) {
        CUDA_CHECK(cudaMalloc(&p->c0, out_bytes));
        fill_f32(p->c0, p->M * p->N, -1.0f, 1.0f, seed + 2);
    }
}

static void problem_free(Problem *p) {
    CUDA_CHECK(cudaFree(p->alpha_dev));
    if (p->c0) CUDA_CHECK(cudaFree(p->c0));
    CUDA_CHECK(cudaFree(p->ref));
    CUDA_CHECK(cudaFree(p->ours));
    CUDA_CHECK(cudaFree(p->B));
    CUDA_CHECK(cudaFree(p->E));
}

/* The output's starting state: dW's c0, or NaN for dH (every element must be written). */
static void reset_output(const Problem *p, float *out) {
    const size_t bytes = (size_t)p->M * (size_t)p->N * sizeof(float);
    if (p->dw) CUDA_CHECK(cudaMemcpy(out, p->c0, bytes, cudaMemcpyDeviceToDevice));
    else CUDA_CHECK(cudaMemset(out, 0xFF, bytes)); /* all-ones bits: a NaN */
}

static int run_ours(GemmContext *g, const GemmConfig *cfg, const Problem *p, float *out) {
    return gemm_sm90(g, cfg, p->dw, p->M, p->N, p->K, p->E, p->lde, p->B, out, p->alpha_dev, 0);
}
static void run_cublas(cublasHandle_t h, const Problem *p, float *out) {
    cublas_product(h, p->dw, p->M, p->N, p->K, p->E, p->lde, p->B, out, p->alpha, p->dw ? 1.0f : 0.0f);
}

#define CHECK_TOL 1e-3f

/* The output tile (128 x 256) holding element `first`, as a map of 16-row x 32-column blocks, 'x'
 * where some element misses cuBLAS, '.' where all match, ' ' outside the matrix: a wrong
 * descriptor, swizzle or epilogue index leaves a pattern (every other band, one warpgroup's half,
 * whole columns of panels). */
static void print_mismatch_map(const Problem *p, int64_t first, float rms) {
    const int64_t r0 = first / p->N / GM_BM * GM_BM, c0 = first % p->N / GM_BN * GM_BN;
    const int64_t rows = p->M - r0 < GM_BM ? p->M - r0 : GM_BM, cols = p->N - c0 < GM_BN ? p->N - c0 : GM_BN;
    float *o = (float *)malloc((size_t)(rows * cols) * sizeof(float)), *r = (float *)malloc((size_t)(rows * cols) * sizeof(float));
    if (!o || !r) {
        fprintf(stderr, "error: out of host memory for the mismatch map\n");
        exit(1);
    }
    CUDA_CHECK(cudaMemcpy2D(o, (size_t)cols * sizeof(float), p->ours + r0 * p->N + c0, (size_t)p->N * sizeof(float),
                            (size_t)cols * sizeof(float), (size_t)rows, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy2D(r, (size_t)cols * sizeof(float), p->ref + r0 * p->N + c0, (size_t)p->N * sizeof(float),
                            (size_t)cols * sizeof(float), (size_t)rows, cudaMemcpyDeviceToHost));
    printf("  tile at row %lld, col %lld (rows of 16 x columns of 32; x: a mismatch):\n", (long long)r0, (long long)c0);
    for (int br = 0; br < GM_BM / 16; br++) {
        char line[GM_BN / 32 + 1];
        for (int bc = 0; bc < GM_BN / 32; bc++) {
            char ch = ' ';
            for (int64_t i = br * 16; i < br * 16 + 16 && i < rows; i++)
                for (int64_t j = bc * 32; j < bc * 32 + 32 && j < cols; j++) {
                    const float d = fabsf(o[i * cols + j] - r[i * cols + j]);
                    if (ch == ' ') ch = '.';
                    if (!(d <= CHECK_TOL * fmaxf(fabsf(r[i * cols + j]), rms))) ch = 'x';
                }
            line[bc] = ch;
        }
        line[GM_BN / 32] = 0;
        printf("    rows %3d-%3d |%s|\n", br * 16, br * 16 + 15, line);
    }
    free(r);
    free(o);
}
#define SPOT_SAMPLES 64

/* ours against cuBLAS at every element, both against fp64 at sampled ones, and a second run of ours
 * bitwise equal to the first. Prints one line (and the first mismatch); returns 1 when it passes. */
static int check_problem(GemmContext *g, cublasHandle_t h, const GemmConfig *cfg, const Problem *p) {
    const int64_t n = p->M * p->N;
    reset_output(p, p->ours);
    reset_output(p, p->ref);
    const int splits = run_ours(g, cfg, p, p->ours);
    sync_or_report("our GEMM");
    run_cublas(h, p, p->ref);
    sync_or_report("cuBLAS");

    double *sums;
    unsigned long long *bad;
    CUDA_CHECK(cudaMalloc(&sums, 2 * sizeof(double)));
    CUDA_CHECK(cudaMalloc(&bad, 3 * sizeof(unsigned long long)));
    CUDA_CHECK(cudaMemset(sums, 0, 2 * sizeof(double)));
    CUDA_CHECK(cudaMemset(bad, 0xFF, sizeof(unsigned long long)));
    CUDA_CHECK(cudaMemset(bad + 1, 0, 2 * sizeof(unsigned long long)));
    compare_kernel<<<grid_for(n), 256>>>(NULL, p->ref, n, 0.0f, 0.0f, sums, bad);
    CUDA_CHECK(cudaGetLastError());
    double hs[2];
    CUDA_CHECK(cudaMemcpy(hs, sums, sizeof hs, cudaMemcpyDeviceToHost));
    const float rms = (float)sqrt(hs[0] / (double)n);
    /* from zero again: every call adds the sum of r^2 into sums[0], so the ratio below needs both
     * sums from this one */
    CUDA_CHECK(cudaMemset(sums, 0, 2 * sizeof(double)));
    compare_kernel<<<grid_for(n), 256>>>(p->ours, p->ref, n, CHECK_TOL, rms, sums, bad);
    CUDA_CHECK(cudaGetLastError());
    unsigned long long hb[2];
    CUDA_CHECK(cudaMemcpy(hs, sums, sizeof hs, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(hb, bad, sizeof hb, cudaMemcpyDeviceToHost));
    const double rel = sqrt(hs[1] / hs[0]);

    /* fp64 at sampled elements: the corners, then pseudo-random ones */
    int64_t hr[SPOT_SAMPLES], hc[SPOT_SAMPLES];
    uint64_t st = 0x9e3779b97f4a7c15ull ^ (uint64_t)n;
    for (int s = 0; s < SPOT_SAMPLES; s++) {
        st = st * 6364136223846793005ull + 1442695040888963407ull;
        hr[s] = s == 0 ? 0 : s == 1 ? p->M - 1 : (int64_t)((st >> 33) % (uint64_t)p->M);
        hc[s] = s == 0 ? 0 : s == 1 ? p->N - 1 : (int64_t)((st >> 11) % (uint64_t)p->N);
    }
    int64_t *drc;
    double *dref;
    CUDA_CHECK(cudaMalloc(&drc, 2 * SPOT_SAMPLES * sizeof(int64_t)));
    CUDA_CHECK(cudaMalloc(&dref, SPOT_SAMPLES * sizeof(double)));
    CUDA_CHECK(cudaMemcpy(drc, hr, sizeof hr, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(drc + SPOT_SAMPLES, hc, sizeof hc, cudaMemcpyHostToDevice));
    spot_ref_kernel<<<1, SPOT_SAMPLES>>>(p->E, p->lde, p->B, p->N, p->K, p->dw, p->c0, p->alpha, drc,
                                         drc + SPOT_SAMPLES, SPOT_SAMPLES, dref);
    CUDA_CHECK(cudaGetLastError());
    double r64[SPOT_SAMPLES];
    CUDA_CHECK(cudaMemcpy(r64, dref, sizeof r64, cudaMemcpyDeviceToHost));
    double spot_ours = 0.0, spot_cublas = 0.0;
    for (int s = 0; s < SPOT_SAMPLES; s++) {
        float o, r;
        CUDA_CHECK(cudaMemcpy(&o, p->ours + hr[s] * p->N + hc[s], sizeof o, cudaMemcpyDeviceToHost));
        CUDA_CHECK(cudaMemcpy(&r, p->ref + hr[s] * p->N + hc[s], sizeof r, cudaMemcpyDeviceToHost));
        const double scale = fmax(fabs(r64[s]), (double)rms);
        const double eo = fabs((double)o - r64[s]) / scale, er = fabs((double)r - r64[s]) / scale;
        spot_ours = isnan(eo) || eo > spot_ours ? eo : spot_ours;
        spot_cublas = er > spot_cublas ? er : spot_cublas;
    }

    /* the same inputs again: bitwise the same output */
    float *again;
    CUDA_CHECK(cudaMalloc(&again, (size_t)n * sizeof(float)));
    reset_output(p, again);
    run_ours(g, cfg, p, again);
    sync_or_report("our GEMM (second run)");
    CUDA_CHECK(cudaMemset(bad + 2, 0, sizeof(unsigned long long)));
    count_diff_kernel<<<grid_for(n), 256>>>((const uint32_t *)p->ours, (const uint32_t *)again, n, bad + 2);
    CUDA_CHECK(cudaGetLastError());
    unsigned long long ndiff;
    CUDA_CHECK(cudaMemcpy(&ndiff, bad + 2, sizeof ndiff, cudaMemcpyDeviceToHost));

    const int pass = hb[1] == 0 && spot_ours <= 10 * CHECK_TOL && ndiff == 0; /* a NaN spot fails */
    char grid[32] = "";
    if (cfg->max_clusters) snprintf(grid, sizeof grid, " clusters<=%d", cfg->max_clusters);
    printf("check %s M=%lld N=%lld K=%lld cluster=%d%s splits=%d%s: %s  rel-L2 %.2e, mismatches %llu, fp64 spots: ours "
           "%.1e cuBLAS %.1e, rerun differs in %llu\n",
           product_name(p), (long long)p->M, (long long)p->N, (long long)p->K, cfg->cluster, grid, splits,
           p->dw ? (cfg->dw_epilogue == EPI_ACC_RED ? " epilogue=red" : " epilogue=rmw") : "", pass ? "ok" : "FAIL",
           rel, hb[1], spot_ours, spot_cublas, ndiff);
    if (hb[1]) {
        const int64_t i = (int64_t)hb[0];
        float o, r;
        CUDA_CHECK(cudaMemcpy(&o, p->ours + i, sizeof o, cudaMemcpyDeviceToHost));
        CUDA_CHECK(cudaMemcpy(&r, p->ref + i, sizeof r, cudaMemcpyDeviceToHost));
        printf("  first mismatch: row %lld col %lld (tile row %lld, col %lld): ours %.7g cuBLAS %.7g\n",
               (long long)(i / p->N), (long long)(i % p->N), (long long)(i / p->N / GM_BM),
               (long long)(i % p->N / GM_BN), o, r);
    }
    if (hb[1]) print_mismatch_map(p, (int64_t)hb[0], rms);
    CUDA_CHECK(cudaFree(again));
    CUDA_CHECK(cudaFree(dref));
    CUDA_CHECK(cudaFree(drc));
    CUDA_CHECK(cudaFree(bad));
    CUDA_CHECK(cudaFree(sums));
    return pass;
}

/* ---- host: timing --------------------------------------------------------------------------------- */

#define WARMUPS 3

static int cmp_float(const void *x, const void *y) {
    const float a = *(const float *)x, b = *(const float *)y;
    return (a > b) - (a < b);
}

/* Median of reps timed runs after WARMUPS, CUDA events around each. */
template <class F> static float median_ms(F run, int reps) {
    cudaEvent_t e0, e1;
    CUDA_CHECK(cudaEventCreate(&e0));
    CUDA_CHECK(cudaEventCreate(&e1));
    for (int i = 0; i < WARMUPS; i++) run();
    sync_or_report("warm-up");
    float t[64];
    for (int i = 0; i < reps; i++) {
        CUDA_CHECK(cudaEventRecord(e0));
        run();
        CUDA_CHECK(cudaEventRecord(e1));
        CUDA_CHECK(cudaEventSynchronize(e1));
        CUDA_CHECK(cudaEventElapsedTime(&t[i], e0, e1));
    }
    sync_or_report("timed runs");
    CUDA_CHECK(cudaEventDestroy(e1));
    CUDA_CHECK(cudaEventDestroy(e0));
    qsort(t, (size_t)reps, sizeof t[0], cmp_float);
    return t[reps / 2];
}

/* Times ours and cuBLAS on p; writes one markdown row into line. */
static void bench_problem(GemmContext *g, cublasHandle_t h, const GemmConfig *cfg, const Problem *p, int reps,
                          char *line, size_t size) {
    int splits = 1;
    const float ours = median_ms([&] { splits = run_ours(g, cfg, p, p->ours); }, reps);
    const float ref = median_ms([&] { run_cublas(h, p, p->ref); }, reps);
    const double flop = 2.0 * (double)p->M * (double)p->N * (double)p->K;
    snprintf(line, size, "| %s | %lld x %lld x %lld | %.3f | %.0f | %.3f | %.0f | %.3f | cluster %d, splits %d%s |",
             product_name(p), (long long)p->M, (long long)p->N, (long long)p->K, ours, flop / ours * 1e-9, ref,
             flop / ref * 1e-9, ours / ref, cfg->cluster, splits,
             p->dw ? (cfg->dw_epilogue == EPI_ACC_RED ? ", red" : ", rmw") : "");
}

/* ---- command line --------------------------------------------------------------------------------- */

typedef struct {
    int dw;
    int64_t s0, d, s2; /* dw: V, d, C; dh: C, d, V */
} ShapeArg;

#define MAX_SHAPES 32

static void usage_error(const char *what) {
    fprintf(stderr,
            "error: %s (usage: bench_gemm_sm90 [--check-only] [--shape dw:V,d,C | dh:C,d,V]... [--cluster 1|2] "
            "[--group G] [--splits S] [--dw-epilogue red|rmw] [--clusters N] [--reps R])\n",
            what);
    exit(1);
}

static long long parse_int(const char *s, const char *opt, long long lo, long long hi) {
    char *end;
    const long long v = strtoll(s, &end, 10);
    if (end == s || *end || v < lo || v > hi) {
        char msg[256];
        snprintf(msg, sizeof msg, "%s takes an integer in [%lld, %lld], got '%s'", opt, lo, hi, s);
        usage_error(msg);
    }
    return v;
}

static ShapeArg parse_shape(const char *s) {
    ShapeArg a = {};
    long long x, y, z;
    char product[3] = {0};
    int used = 0;
    if (sscanf(s, "%2[dwh]:%lld,%lld,%lld%n", product, &x, &y, &z, &used) != 4 || s[used] ||
        (strcmp(product, "dw") && strcmp(product, "dh"))) {
        char msg[256];
        snprintf(msg, sizeof msg, "--shape takes dw:V,d,C or dh:C,d,V, got '%s'", s);
        usage_error(msg);
    }
    /* TMA: 16-byte row strides (d % 8) and 32-bit coordinates */
    if (x < 1 || y < 8 || z < 1 || y % 8 || x >= (1ll << 31) || y >= (1ll << 31) || z >= (1ll << 31)) {
        char msg[256];
        snprintf(msg, sizeof msg, "--shape %s: sizes must be positive, below 2^31, and d a multiple of 8", s);
        usage_error(msg);
    }
    a.dw = product[1] == 'w', a.s0 = x, a.d = y, a.s2 = z;
    return a;
}

int main(int argc, char **argv) {
    GemmConfig cfg = {2, 8, 0, EPI_ACC_RED, 0};
    int check_only = 0, reps = 10;
    ShapeArg shapes[MAX_SHAPES];
    int nshapes = 0;
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        const int has = i + 1 < argc;
        if (!strcmp(o, "--check-only")) check_only = 1;
        else if (!strcmp(o, "--shape") && has) {
            if (nshapes == MAX_SHAPES) usage_error("at most 32 --shape options");
            shapes[nshapes++] = parse_shape(argv[++i]);
        } else if (!strcmp(o, "--cluster") && has) cfg.cluster = (int)parse_int(argv[++i], o, 1, 2);
        else if (!strcmp(o, "--group") && has) cfg.group = (int)parse_int(argv[++i], o, 1, 1 << 20);
        else if (!strcmp(o, "--splits") && has) cfg.splits = (int)parse_int(argv[++i], o, 1, GM_MAX_SPLITS);
        else if (!strcmp(o, "--reps") && has) reps = (int)parse_int(argv[++i], o, 1, 64);
        else if (!strcmp(o, "--clusters") && has) cfg.max_clusters = (int)parse_int(argv[++i], o, 1, 1 << 16);
        else if (!strcmp(o, "--dw-epilogue") && has) {
            const char *v = argv[++i];
            if (!strcmp(v, "red")) cfg.dw_epilogue = EPI_ACC_RED;
            else if (!strcmp(v, "rmw")) cfg.dw_epilogue = EPI_ACC_RMW;
            else usage_error("--dw-epilogue takes red or rmw");
        } else {
            char msg[256];
            snprintf(msg, sizeof msg, "unknown option or missing value: '%s'", o);
            usage_error(msg);
        }
    }

    GemmContext g;
    context_init(&g);
    cublasHandle_t h;
    CUBLAS_CHECK(cublasCreate(&h));
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    printf("device %s, %d SMs; resident clusters of 1: %d, of 2: %d\n", prop.name, g.num_sms, g.clusters[1],
           g.clusters[2]);

    /* Awkward sizes: M, N and K off the tiles, E's padding NaN, every variant. */
    const ShapeArg checks[] = {
        {1, 256, 256, 64},     /* one tile, one k-block: the operand layouts alone */
        {0, 256, 256, 64},
        {1, 384, 512, 200},    /* a few tiles and k-blocks, K off the blocks (the ring wraps) */
        {0, 384, 512, 200},
        {1, 50257, 768, 4100}, /* dW: V off the 128/256 rows, C off the 64-k blocks */
        {1, 1000, 832, 300},   /* dW: d off the 256 columns, a partial last column tile */
        {0, 4100, 768, 50257}, /* dH: C off the rows, V off the k blocks; splits chosen from the shape */
        {0, 300, 832, 1000},   /* dH: d off the columns; few tiles, so several splits */
    };
    int failed = 0, total = 0;
    uint32_t seed = 1;
    for (size_t c = 0; c < sizeof checks / sizeof checks[0]; c++) {
        Problem p;
        problem_init(&p, checks[c].dw, checks[c].s0, checks[c].d, checks[c].s2, seed += 7);
        for (int cl = 1; cl <= 2; cl++)
            for (int e = 0; e < (p.dw ? 2 : 1); e++) {
                GemmConfig v = cfg;
                v.cluster = cl, v.dw_epilogue = e ? EPI_ACC_RMW : EPI_ACC_RED;
                failed += !check_problem(&g, h, &v, &p), total++;
                if (!p.dw && cfg.splits == 0) { /* and once unsplit */
                    v.splits = 1;
                    failed += !check_problem(&g, h, &v, &p), total++;
                }
                if (p.M * p.N <= 512 * 512 && cfg.max_clusters == 0) { /* and by one cluster, all units */
                    v.max_clusters = 1;
                    failed += !check_problem(&g, h, &v, &p), total++;
                }
            }
        problem_free(&p);
    }
    printf("%d of %d checks passed\n", total - failed, total);
    if (check_only || failed) {
        CUBLAS_CHECK(cublasDestroy(h));
        context_free(&g);
        return failed ? 1 : 0;
    }

    /* The layer's shapes at the three grid points: dW (V, d, C) and dH (C, d, V). */
    const ShapeArg layer_shapes[] = {
        {1, 128256, 4096, 4096}, {1, 262144, 768, 4096}, {1, 50304, 768, 16384},
        {0, 4096, 4096, 128256}, {0, 4096, 768, 262144}, {0, 16384, 768, 50304},
    };
    const ShapeArg *list = nshapes ? shapes : layer_shapes;
    const int nlist = nshapes ? nshapes : (int)(sizeof layer_shapes / sizeof layer_shapes[0]);
    static char rows[MAX_SHAPES][256];
    for (int s = 0; s < nlist; s++) {
        Problem p;
        problem_init(&p, list[s].dw, list[s].s0, list[s].d, list[s].s2, seed += 7);
        if (!check_problem(&g, h, &cfg, &p)) failed++;
        bench_problem(&g, h, &cfg, &p, reps, rows[s], sizeof rows[s]);
        problem_free(&p);
    }
    printf("\n%s, CUDA events, %d warm-ups, median of %d\n", prop.name, WARMUPS, reps);
    printf("| product | M x N x K | ours ms | TFLOP/s | cuBLAS ms | TFLOP/s | ours / cuBLAS | config |\n");
    printf("|---|---|---|---|---|---|---|---|\n");
    for (int s = 0; s < nlist; s++) printf("%s\n", rows[s]);
    CUBLAS_CHECK(cublasDestroy(h));
    context_free(&g);
    return failed ? 1 : 0;
}
