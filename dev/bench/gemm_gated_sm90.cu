/* dev/bench/gemm_gated_sm90.cu - the gated MLP's two products with the activation in their
 * epilogues, against what the trainer runs today (cuBLASLt's product, then kernels/swiglu.cu's
 * pass), checked and timed side by side. A yardstick for carrying elementwise work inside GEMMs.
 *
 * What the trainer runs per layer (N tokens, model width C, gated width F, GU = [gate | up] [N x 2F]):
 *   forward:  GU = X Wfc^T (cuBLASLt, bf16 out), then gated_forward: H = act(gate) up   [N x F]
 *   backward: D = dY Wproj (cuBLASLt, bf16 out), then gated_backward: dGU = (D u act'(g), D act(g)),
 *             and H again for the down projection's weight gradient
 * The separate passes are memory-bound: forward 6 bytes a value of H, backward 12 (D written by the
 * GEMM and read back, g and u read, dgate, dup and H written). Here the products' epilogues do them:
 *   forward:  a CTA's 128 x 256 tile is 128 gate columns f0.. and the same 128 up columns (two
 *             boxes of Wfc's rows, f0 and F + f0); GU goes out rounded to bf16 as the GEMM's output
 *             is (it stays the backward's input), and H = act(g) u from those bf16 values. Saved:
 *             GU's read.
 *   backward: a tile of D (128 x 256 columns of F) is rounded to bf16 as the stored D was, never
 *             written; g and u are read, dgate, dup and H stored. Saved: D's write and read.
 * SiLU only (the families' SwiGLU). The activation takes ex2.approx and rcp.approx by default
 * (-DGG_FAST_ACT=0: expf and IEEE division, slower here: the epilogue warps' instructions bound it);
 * the products' fp32 sums run in cuBLAS's order (the GU checks come out bitwise equal), so the
 * activation's last bits are the only difference from the trainer's path.
 *
 * Kernel: persistent, warp-specialised, 384 threads: one TMA producer thread, two consumer
 * warpgroups of 64 rows (wgmma m64n256k16 from 128-byte-swizzled shared memory, a 3-stage ring of
 * 48 KiB), and three epilogue warps. A consumer hands its finished tile over as bf16 through a
 * 64 KiB staging tile and goes on to the next tile's products while the epilogue warps store it and
 * apply the activation. Every warp keeps the launch's 168 registers: ptxas compiles the whole
 * kernel at the launch bound's count (setmaxnreg does not raise it), so more epilogue warps would
 * leave the consumers too few for their 128 accumulators. 2-CTA clusters on adjacent row blocks
 * share each B stage by multicast (the forward's CTAs fetch one box each, gate or up; the
 * backward's two of its four 64-column panels). Tiles are rastered in groups of 8 cluster rows so
 * that the units in flight share their panels in L2.
 *
 * On one H200 (2026-11-29, dev/RESULTS.md, Model families): at Qwen3-0.6B's, Llama-3.2-1B's and
 * Gemma-3-270M's MLP shapes (32768 tokens) the forward runs at 0.87-1.03x the trainer's product +
 * pass and the backward at 0.89-0.98x: about 1 % of a step, not wired into the trainer. The mainloop
 * alone runs at cuBLAS's speed; the first version, whose consumers did the epilogue themselves,
 * stalled the tensor cores (1.1-2.6x the trainer's time; git history of this file).
 *
 * Run: ./build/bench_gemm_gated_sm90 [--check-only] [--shape N,C,F]... [--cluster 1|2] [--reps R]
 * It checks both products at awkward sizes (N off the tiles, C off the k blocks, F off the backward's
 * 256 columns) against the trainer's path: every bf16 output within 1/32 of max(|ref|, rms),
 * relative L2 below 4e-3, and a second run bitwise equal; then times ours against the trainer's
 * path (and the GEMM alone) at the families' shapes. */
#include <cuda.h> /* CUtensorMap */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/fast_math.cuh"
#include "kernels/kernel_util.cuh"
#include "kernels/kernels.h"
#include "kernels/tma.cuh"
#include "kernels/wgmma.cuh"

#define GG_BM 128 /* rows per CTA: two consumer warpgroups of 64 */
#define GG_BN 256 /* accumulator columns per tile */
#define GG_BK 64  /* k per stage: one 128-byte swizzle row of bf16 */
#define GG_STAGES 3 /* three of 48 KiB beside the 64 KiB staging tile */
#define GG_PANEL_BYTES (64 * 128)
#define GG_A_BYTES (GG_BM * GG_BK * 2)
#define GG_B_BYTES (GG_BN * GG_BK * 2)
#define GG_STAGE_BYTES (GG_A_BYTES + GG_B_BYTES)
#define GG_STAGING_BYTES (GG_BM * GG_BN * 2) /* a tile in bf16, rows of 512 bytes */
#define GG_CONSUMERS 256
#ifndef GG_INLINE_ISSUE
#define GG_INLINE_ISSUE 1 /* consumer thread 0 issues the copies, so a fourth warp can drain */
#endif
/* ptxas allocates registers for threads in whole warpgroups: 384 threads leave 168 a thread, 512
 * only 128, too few beside 128 accumulators; so one warpgroup besides the consumers */
#define GG_EPILOGUE_WARPS (GG_INLINE_ISSUE ? 4 : 3)
#define GG_THREADS (GG_CONSUMERS + 128)
#define GG_BARRIERS (2 * GG_STAGES + 2)
#define GG_SMEM (GG_STAGES * GG_STAGE_BYTES + GG_STAGING_BYTES + 1024 + 8 * GG_BARRIERS)
#define GG_GROUP 8
#define GG_SPIN_LIMIT (1u << 30) /* a wait that never ends traps instead of hanging the GPU */
#ifndef GG_BATCH
#define GG_BATCH 8 /* the backward's epilogue: items of 8 columns whose loads are in flight together */
#endif

/* Probes, built with -DGG_PROBE=n to time parts (their outputs are not the product's): 6, the
 * epilogue warps only acknowledge each staged tile; 7, the backward's epilogue takes g = u = 1
 * instead of loading them. */
#ifndef GG_PROBE
#define GG_PROBE 0
#endif

enum { GG_FORWARD = 0, GG_BACKWARD = 1 };

typedef struct {
    int64_t N;       /* tokens: the product's rows */
    int F;           /* gated width */
    int kbs;         /* k blocks of GG_BK over C */
    bf16 *gu;        /* forward: written [N x 2F]; backward: read */
    bf16 *dgu;       /* backward: written [N x 2F] */
    bf16 *h;         /* written [N x F]: act(gate) up */
    int act;         /* GatedAct */
    uint32_t tiles_m, tiles_n, units;
} GatedArgs;

__device__ __forceinline__ void gg_wait(uint32_t bar, uint32_t parity) {
    for (uint32_t n = 0;; n++) {
        uint32_t done;
        asm volatile(
            "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
            : "=r"(done)
            : "r"(bar), "r"(parity)
            : "memory");
        if (done) return;
        if (n == GG_SPIN_LIMIT) __trap();
    }
}

__device__ __forceinline__ uint64_t gg_desc(uint32_t addr, uint32_t lbo) {
    return (uint64_t)((addr & 0x3FFFF) >> 4) | ((uint64_t)(lbo >> 4) << 16) | ((uint64_t)(1024 >> 4) << 32) |
           (1ull << 62);
}

/* unit -> this CTA's first row and the tile's column index, groups of GG_GROUP cluster rows with
 * m fastest (32-bit arithmetic: it runs in the producer's loop) */
__device__ __forceinline__ void gg_unit(const GatedArgs &a, uint32_t u, int CL, uint32_t rank, int64_t *m0,
                                        int *tn) {
    const uint32_t per_group = GG_GROUP * a.tiles_n, g = u / per_group;
    const uint32_t first = g * GG_GROUP, rows = min((uint32_t)GG_GROUP, a.tiles_m - first), idx = u - g * per_group;
    const uint32_t n = idx / rows, cm = first + (idx - n * rows);
    *m0 = ((int64_t)cm * CL + rank) * GG_BM;
    *tn = (int)n;
}

/* SiLU and its derivative for the epilogue warps: with GG_FAST_ACT (default) from one ex2.approx
 * and one rcp.approx (the hardware's units, about 2 ulp), which the few epilogue warps can issue
 * while the products run; without it, kernels/gated_act.cuh's expf and IEEE division. */
#ifndef GG_FAST_ACT
#define GG_FAST_ACT 1
#endif
__device__ __forceinline__ void gg_silu(float x, float *act, float *grad) {
#if GG_FAST_ACT
    float sig;
    asm("rcp.approx.ftz.f32 %0, %1;\n" : "=f"(sig) : "f"(1.0f + ex2(-x * LOG2E)));
#else
    const float sig = 1.0f / (1.0f + expf(-x));
#endif
    *act = x * sig;
    if (grad) *grad = sig * (1.0f + x * (1.0f - sig));
}

__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    uint32_t w;
    memcpy(&w, &h, sizeof w);
    return w;
}
__device__ __forceinline__ float bf16_lo(uint32_t w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float bf16_hi(uint32_t w) { return __uint_as_float(w & 0xFFFF0000u); }

/* Staging: row r's 16-byte chunk k (8 columns) at r * 512 + ((k ^ (r & 7)) << 4). A consumer warp's
 * 4-byte writes (8 rows, 4 lanes a chunk) and an epilogue warp's 16-byte reads (whole rows) then
 * meet every bank once. */
__device__ __forceinline__ uint32_t gg_staged(int r, int k) { return (uint32_t)(r * 512 + ((k ^ (r & 7)) << 4)); }

/* A consumer's 64 x 256 accumulators into the staging tile, rounded to bf16 as a stored product is. */
__device__ __forceinline__ void gg_stage(const float (&acc)[128], unsigned char *stg, int wg, int wq, int lane) {
    const int r0 = wg * 64 + wq * 16 + (lane >> 2), byte = (lane & 3) * 4;
#pragma unroll
    for (int i = 0; i < 32; i++) {
        *reinterpret_cast<uint32_t *>(stg + gg_staged(r0, i) + byte) = pack_bf16x2(acc[i * 4 + 0], acc[i * 4 + 1]);
        *reinterpret_cast<uint32_t *>(stg + gg_staged(r0 + 8, i) + byte) = pack_bf16x2(acc[i * 4 + 2], acc[i * 4 + 3]);
    }
}

/* forward, by the epilogue warps (t in 0 .. 95): staged columns 0-127 are gate f0.., 128-255 the
 * same up columns; GU goes out as staged, H = act(g) u */
__device__ __forceinline__ void gg_drain_forward(const GatedArgs &a, const unsigned char *stg, int64_t m0, int f0,
                                                 int t) {
    for (int item = t; item < GG_BM * 16; item += 32 * GG_EPILOGUE_WARPS) {
        const int r = item >> 4, k = item & 15;
        const int64_t row = m0 + r;
        if (row >= a.N) continue;
        const uint4 g = *reinterpret_cast<const uint4 *>(stg + gg_staged(r, k));
        const uint4 u = *reinterpret_cast<const uint4 *>(stg + gg_staged(r, k + 16));
        const uint32_t gw[4] = {g.x, g.y, g.z, g.w}, uw[4] = {u.x, u.y, u.z, u.w};
        uint32_t hw[4];
#pragma unroll
        for (int e = 0; e < 4; e++) {
            float lo, hi;
            gg_silu(bf16_lo(gw[e]), &lo, NULL), gg_silu(bf16_hi(gw[e]), &hi, NULL);
            hw[e] = pack_bf16x2(lo * bf16_lo(uw[e]), hi * bf16_hi(uw[e]));
        }
        const int64_t c = f0 + 8 * k;
        bf16 *gu = a.gu + row * 2 * (int64_t)a.F;
        *reinterpret_cast<uint4 *>(gu + c) = g;
        *reinterpret_cast<uint4 *>(gu + a.F + c) = u;
        *reinterpret_cast<uint4 *>(a.h + row * (int64_t)a.F + c) = make_uint4(hw[0], hw[1], hw[2], hw[3]);
    }
}

/* backward: the staged tile is D's columns f0 .. f0 + 255; GG_BATCH items' g and u loads in flight */
__device__ __forceinline__ void gg_drain_backward(const GatedArgs &a, const unsigned char *stg, int64_t m0, int f0,
                                                  int t) {
    const int stride = 32 * GG_EPILOGUE_WARPS;
    for (int first = t; first < GG_BM * 32; first += stride * GG_BATCH) {
        uint4 g[GG_BATCH], u[GG_BATCH];
#pragma unroll
        for (int j = 0; j < GG_BATCH; j++) {
            const int item = first + j * stride, r = item >> 5, k = item & 31;
            const int64_t row = m0 + r, c = f0 + 8 * k;
            if (GG_PROBE == 7) { /* probe: the backward's epilogue without its loads */
                g[j] = make_uint4(0x3f803f80u, 0x3f803f80u, 0x3f803f80u, 0x3f803f80u), u[j] = g[j];
            } else if (item < GG_BM * 32 && row < a.N && c < a.F) {
                const bf16 *gu = a.gu + row * 2 * (int64_t)a.F;
                g[j] = __ldg(reinterpret_cast<const uint4 *>(gu + c));
                u[j] = __ldg(reinterpret_cast<const uint4 *>(gu + a.F + c));
            }
        }
#pragma unroll
        for (int j = 0; j < GG_BATCH; j++) {
            const int item = first + j * stride, r = item >> 5, k = item & 31;
            const int64_t row = m0 + r, c = f0 + 8 * k;
            if (!(item < GG_BM * 32 && row < a.N && c < a.F)) continue;
            const uint4 d = *reinterpret_cast<const uint4 *>(stg + gg_staged(r, k));
            const uint32_t dw[4] = {d.x, d.y, d.z, d.w}, gw[4] = {g[j].x, g[j].y, g[j].z, g[j].w},
                           uw[4] = {u[j].x, u[j].y, u[j].z, u[j].w};
            uint32_t dgw[4], duw[4], hw[4];
#pragma unroll
            for (int e = 0; e < 4; e++) {
                float dg[2], du[2], o[2];
#pragma unroll
                for (int half = 0; half < 2; half++) {
                    const float dv = half ? bf16_hi(dw[e]) : bf16_lo(dw[e]);
                    const float gv = half ? bf16_hi(gw[e]) : bf16_lo(gw[e]);
                    const float uv = half ? bf16_hi(uw[e]) : bf16_lo(uw[e]);
                    float act, grad;
                    gg_silu(gv, &act, &grad);
                    o[half] = act * uv;
                    dg[half] = dv * uv * grad;
                    du[half] = dv * act;
                }
                dgw[e] = pack_bf16x2(dg[0], dg[1]), duw[e] = pack_bf16x2(du[0], du[1]), hw[e] = pack_bf16x2(o[0], o[1]);
            }
            bf16 *dgu = a.dgu + row * 2 * (int64_t)a.F;
            *reinterpret_cast<uint4 *>(dgu + c) = make_uint4(dgw[0], dgw[1], dgw[2], dgw[3]);
            *reinterpret_cast<uint4 *>(dgu + a.F + c) = make_uint4(duw[0], duw[1], duw[2], duw[3]);
            *reinterpret_cast<uint4 *>(a.h + row * (int64_t)a.F + c) = make_uint4(hw[0], hw[1], hw[2], hw[3]);
        }
    }
}

/* The copy issuer's place in the CTA's (unit, k block) sequence. */
struct GgIssuer {
    uint32_t u, stage, phase, fills;
    int kb, tn;
    int64_t m0;
};

/* Issues the next stage's copies (after waiting for its slot to be released), or returns false when
 * the CTA's units are all issued. */
template <int MODE, int CL>
__device__ __forceinline__ bool gg_issue(const GatedArgs &a, const CUtensorMap *tm_a, const CUtensorMap *tm_b,
                                         uint32_t ring, uint32_t full_bar, uint32_t empty_bar, uint32_t rank,
                                         uint32_t nclusters, GgIssuer &p) {
    if (p.u >= a.units) return false;
    if (p.kb == 0) gg_unit(a, p.u, CL, rank, &p.m0, &p.tn);
    if (p.fills >= GG_STAGES) gg_wait(empty_bar + 8 * p.stage, p.phase ^ 1);
    const uint32_t fb = full_bar + 8 * p.stage, sa = ring + p.stage * GG_STAGE_BYTES, sb = sa + GG_A_BYTES;
    mbar_expect_tx(fb, GG_STAGE_BYTES);
    const int k0 = p.kb * GG_BK;
    tma_load_2d(sa, tm_a, k0, (int)p.m0, fb);
    if (MODE == GG_FORWARD) {
        /* box 0: gate rows f0.., box 1: up rows F + f0.. */
#pragma unroll
        for (int b = (int)rank * (2 / CL); b < ((int)rank + 1) * (2 / CL); b++) {
            const int wrow = b * a.F + p.tn * 128;
            if (CL > 1) tma_load_2d_multicast(sb + b * 2 * GG_PANEL_BYTES, tm_b, k0, wrow, fb, 3);
            else tma_load_2d(sb + b * 2 * GG_PANEL_BYTES, tm_b, k0, wrow, fb);
        }
    } else {
#pragma unroll
        for (int q = (int)rank * (4 / CL); q < ((int)rank + 1) * (4 / CL); q++) {
            const int c0 = p.tn * GG_BN + 64 * q;
            if (CL > 1) tma_load_2d_multicast(sb + q * GG_PANEL_BYTES, tm_b, c0, k0, fb, 3);
            else tma_load_2d(sb + q * GG_PANEL_BYTES, tm_b, c0, k0, fb);
        }
    }
    p.fills++;
    if (++p.stage == GG_STAGES) p.stage = 0, p.phase ^= 1;
    if (++p.kb == a.kbs) p.kb = 0, p.u += nclusters;
    return true;
}

/* MODE: GG_FORWARD (A = X [N x C], B = Wfc [2F x C], both K-major) or GG_BACKWARD (A = dY [N x C]
 * K-major, B = Wproj [C x F] MN-major). tm_a: boxes {64 k, 128 rows}; tm_b: forward {64 k, 128
 * rows of Wfc}, backward {64 columns of F, 64 k}. Warps 0-7 multiply, warp 8's lane 0 copies,
 * warps 9-11 drain the staged tiles, so that a tile's epilogue runs while the next one's products
 * do. All warps keep the launch's 168 registers (no setmaxnreg). */
template <int MODE, int CL>
__global__ void __launch_bounds__(GG_THREADS, 1)
    gemm_gated_kernel(const GatedArgs a, const __grid_constant__ CUtensorMap tm_a,
                      const __grid_constant__ CUtensorMap tm_b) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ unsigned char gg_smem[];
    const uint32_t ring = (smem_addr(gg_smem) + 1023) & ~1023u;
    const uint32_t staging = ring + GG_STAGES * GG_STAGE_BYTES;
    unsigned char *stg = gg_smem + (staging - smem_addr(gg_smem));
    const uint32_t full_bar = staging + GG_STAGING_BYTES, empty_bar = full_bar + 8 * GG_STAGES;
    const uint32_t staged_bar = empty_bar + 8 * GG_STAGES, drained_bar = staged_bar + 8;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const uint32_t rank = CL > 1 ? cluster_rank() : 0;
    const uint32_t cluster = blockIdx.x / CL, nclusters = gridDim.x / CL;

    if (threadIdx.x == 0) {
        for (int s = 0; s < GG_STAGES; s++) {
            mbar_init(full_bar + 8 * s, 1);
            mbar_init(empty_bar + 8 * s, 8 * CL);
        }
        mbar_init(staged_bar, GG_CONSUMERS / 32);
        mbar_init(drained_bar, GG_EPILOGUE_WARPS);
        mbar_init_fence();
    }
    if (CL > 1) cluster_sync_all();
    else __syncthreads();

    GgIssuer issuer = {cluster, 0, 0, 0, 0, 0, 0};
    const int first_drain_warp = GG_CONSUMERS / 32 + (GG_INLINE_ISSUE ? 0 : 1);
    if (!GG_INLINE_ISSUE && warp == GG_CONSUMERS / 32) {
        if (lane == 0)
            while (gg_issue<MODE, CL>(a, &tm_a, &tm_b, ring, full_bar, empty_bar, rank, nclusters, issuer)) {
            }
        __syncwarp();
    } else if (warp >= first_drain_warp) {
        const int t = threadIdx.x - 32 * first_drain_warp;
        uint32_t j = 0;
        for (uint32_t u = cluster; u < a.units; u += nclusters, j++) {
            int64_t m0;
            int tn;
            gg_unit(a, u, CL, rank, &m0, &tn);
            gg_wait(staged_bar, j & 1);
            if (GG_PROBE == 6) { /* probe: the products and the hand-over alone */
            } else if (MODE == GG_FORWARD) gg_drain_forward(a, stg, m0, tn * 128, t);
            else gg_drain_backward(a, stg, m0, tn * GG_BN, t);
            __syncwarp();
            if (lane == 0) mbar_arrive(drained_bar);
        }
    } else {
        const int wg = warp >> 2, wq = warp & 3;
        uint32_t stage = 0, phase = 0, j = 0;
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
        /* inline: GG_STAGES - 1 stages ahead; each iteration then refills the slot its previous one
         * read, once every warp of the cluster released it */
        if (GG_INLINE_ISSUE && threadIdx.x == 0)
            for (int s = 0; s < GG_STAGES - 1; s++)
                gg_issue<MODE, CL>(a, &tm_a, &tm_b, ring, full_bar, empty_bar, rank, nclusters, issuer);
        float acc[128];
        for (uint32_t u = cluster; u < a.units; u += nclusters, j++) {
            uint32_t prev = 0;
            for (int kb = 0; kb < a.kbs; kb++) {
                gg_wait(full_bar + 8 * stage, phase);
                const uint32_t base = ring + stage * GG_STAGE_BYTES;
                const uint32_t sa = base + wg * GG_PANEL_BYTES, sb = base + GG_A_BYTES;
                __syncwarp();
                wgmma_fence();
#pragma unroll
                for (int kk = 0; kk < GG_BK / 16; kk++) {
                    const uint64_t da = gg_desc(sa + kk * 32, 16);
                    if (MODE == GG_FORWARD)
                        wgmma_m64n256k16_t<0, 0>(acc, da, gg_desc(sb + kk * 32, 16), (kb | kk) != 0);
                    else
                        wgmma_m64n256k16_t<0, 1>(acc, da, gg_desc(sb + kk * 2048, GG_PANEL_BYTES), (kb | kk) != 0);
                }
                wgmma_commit();
                wgmma_wait<1>();
                if (kb > 0) release(prev);
                if (GG_INLINE_ISSUE && threadIdx.x == 0)
                    gg_issue<MODE, CL>(a, &tm_a, &tm_b, ring, full_bar, empty_bar, rank, nclusters, issuer);
                prev = stage;
                if (++stage == GG_STAGES) stage = 0, phase ^= 1;
            }
            wgmma_wait<0>();
            fence_acc(acc);
            release(prev);
            /* the epilogue warps are done with the previous tile */
            if (j > 0) gg_wait(drained_bar, (j - 1) & 1);
            gg_stage(acc, stg, wg, wq, lane);
            __syncwarp();
            if (lane == 0) mbar_arrive(staged_bar);
        }
    }
    if (CL > 1) cluster_sync_all();
#else
    __trap();
#endif
}

/* ---- host ------------------------------------------------------------------------------------------ */

typedef void (*GatedKernel)(const GatedArgs, const CUtensorMap, const CUtensorMap);

static GatedKernel gated_kernel_for(int mode, int cl) {
    if (mode == GG_FORWARD) return cl > 1 ? gemm_gated_kernel<GG_FORWARD, 2> : gemm_gated_kernel<GG_FORWARD, 1>;
    return cl > 1 ? gemm_gated_kernel<GG_BACKWARD, 2> : gemm_gated_kernel<GG_BACKWARD, 1>;
}

static int g_clusters[3];

static cudaLaunchConfig_t gg_launch_config(dim3 grid, int cl, cudaLaunchAttribute *at) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid, cfg.blockDim = dim3(GG_THREADS), cfg.dynamicSmemBytes = GG_SMEM, cfg.stream = 0;
    at->id = cudaLaunchAttributeClusterDimension;
    at->val.clusterDim.x = (unsigned)cl, at->val.clusterDim.y = 1, at->val.clusterDim.z = 1;
    cfg.attrs = at, cfg.numAttrs = 1;
    return cfg;
}

static void gg_init(void) {
    int dev = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
    if (prop.major != 9) {
        fprintf(stderr, "error: %s is compute capability %d.%d; this benchmark is built for sm_90a (run it on a Hopper GPU)\n",
                prop.name, prop.major, prop.minor);
        exit(1);
    }
    for (int mode = 0; mode < 2; mode++)
        for (int cl = 1; cl <= 2; cl++)
            CUDA_CHECK(cudaFuncSetAttribute((const void *)gated_kernel_for(mode, cl),
                                            cudaFuncAttributeMaxDynamicSharedMemorySize, GG_SMEM));
    for (int cl = 1; cl <= 2; cl++) {
        cudaLaunchAttribute at;
        const cudaLaunchConfig_t cfg = gg_launch_config(dim3((unsigned)(cl * 64)), cl, &at);
        CUDA_CHECK(cudaOccupancyMaxActiveClusters(&g_clusters[cl], (const void *)gated_kernel_for(0, cl), &cfg));
        if (g_clusters[cl] < 1) {
            fprintf(stderr, "error: no cluster of %d CTAs with %d bytes of shared memory fits this GPU\n", cl, GG_SMEM);
            exit(1);
        }
    }
}

static CUtensorMap gg_map(const bf16 *p, int64_t rows, int64_t cols, int box_cols, int box_rows) {
    const cuuint64_t dims[2] = {(cuuint64_t)cols, (cuuint64_t)rows};
    const cuuint64_t strides[1] = {(cuuint64_t)cols * sizeof(bf16)};
    const cuuint32_t box[2] = {(cuuint32_t)box_cols, (cuuint32_t)box_rows};
    return tma_tensor_map_bf16(p, 2, dims, strides, box, "gemm_gated_sm90");
}

/* forward: gu, h from x [N x C] and wfc [2F x C]; backward: dgu, h from dy [N x C], wproj [C x F]
 * and gu. F % 128 == 0, C % 8 == 0. */
static void gemm_gated(int mode, int cl, int64_t N, int C, int F, const bf16 *x, const bf16 *w, bf16 *gu, bf16 *dgu,
                       bf16 *h, GatedAct act) {
    GatedArgs a = {};
    a.N = N, a.F = F, a.kbs = (int)ceil_div(C, GG_BK), a.gu = gu, a.dgu = dgu, a.h = h, a.act = (int)act;
    a.tiles_m = (uint32_t)ceil_div(N, (int64_t)cl * GG_BM);
    a.tiles_n = (uint32_t)(mode == GG_FORWARD ? F / 128 : ceil_div(F, GG_BN));
    a.units = a.tiles_m * a.tiles_n;
    const CUtensorMap tm_a = gg_map(x, N, C, 64, GG_BM);
    const CUtensorMap tm_b = mode == GG_FORWARD ? gg_map(w, 2 * (int64_t)F, C, 64, 128) : gg_map(w, C, F, 64, 64);
    const int64_t nclusters = (int64_t)a.units < g_clusters[cl] ? (int64_t)a.units : g_clusters[cl];
    cudaLaunchAttribute at;
    const cudaLaunchConfig_t lc = gg_launch_config(dim3((unsigned)(nclusters * cl)), cl, &at);
    CUDA_CHECK(cudaLaunchKernelEx(&lc, gated_kernel_for(mode, cl), a, tm_a, tm_b));
    CUDA_CHECK(cudaGetLastError());
}

/* the trainer's path */
static void trainer_forward(int64_t N, int C, int F, const bf16 *x, const bf16 *wfc, bf16 *gu, bf16 *h) {
    matmul_forward(gu, NULL, x, wfc, NULL, (int)N, C, 2 * F, 0);
    gated_forward(h, gu, (size_t)N, F, GATED_SILU, 0);
}
static void trainer_backward(int64_t N, int C, int F, const bf16 *dy, const bf16 *wproj, const bf16 *gu, bf16 *d,
                             bf16 *dgu, bf16 *h) {
    matmul_backward(d, NULL, NULL, NULL, dy, NULL, wproj, NULL, (int)N, F, C, 0);
    gated_backward(dgu, h, d, gu, (size_t)N, F, GATED_SILU, 0);
}

static void sync_or_die(const char *what) {
    const cudaError_t e = cudaDeviceSynchronize();
    if (e != cudaSuccess) {
        fprintf(stderr, "error: %s failed: %s\n", what, cudaGetErrorString(e));
        exit(1);
    }
}

__global__ void gg_fill_kernel(bf16 *x, int64_t n, float lo, float hi, uint32_t seed) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        uint32_t s = (uint32_t)i * 2654435761u ^ (uint32_t)(i >> 32) * 0x9e3779b9u ^ seed;
        s ^= s >> 16, s *= 0x7feb352du, s ^= s >> 15, s *= 0x846ca68bu, s ^= s >> 16;
        x[i] = __float2bfloat16(lo + (hi - lo) * (float)(s & 0xFFFFFF) / 16777216.0f);
    }
}
static void gg_fill(bf16 *x, int64_t n, float a, uint32_t seed) {
    gg_fill_kernel<<<(unsigned)(ceil_div(n, 256) < 4096 ? ceil_div(n, 256) : 4096), 256>>>(x, n, -a, a, seed);
    CUDA_CHECK(cudaGetLastError());
}

/* sums[0] += r^2, sums[1] += (o - r)^2; bad[1] counts |o - r| > tol max(|r|, rms) (NaN too), bad[0]
 * the least such index; bad[2] counts bitwise differences between o and o2 when given */
__global__ void gg_compare_kernel(const bf16 *o, const bf16 *r, const bf16 *o2, int64_t n, float tol, float rms,
                                  double *sums, unsigned long long *bad) {
    double s_r = 0.0, s_d = 0.0;
    unsigned long long diff = 0;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const float rv = __bfloat162float(r[i]), ov = __bfloat162float(o[i]);
        const float d = ov - rv;
        s_r += (double)rv * rv, s_d += (double)d * d;
        if (!(fabsf(d) <= tol * fmaxf(fabsf(rv), rms))) {
            atomicMin(&bad[0], (unsigned long long)i);
            atomicAdd(&bad[1], 1ull);
        }
        if (o2) diff += __bfloat16_as_ushort(o[i]) != __bfloat16_as_ushort(o2[i]);
    }
    for (int off = 16; off > 0; off >>= 1) {
        s_r += __shfl_xor_sync(0xffffffffu, s_r, off);
        s_d += __shfl_xor_sync(0xffffffffu, s_d, off);
        diff += __shfl_xor_sync(0xffffffffu, diff, off);
    }
    if ((threadIdx.x & 31) == 0) {
        atomicAdd(&sums[0], s_r), atomicAdd(&sums[1], s_d);
        if (diff) atomicAdd(&bad[2], diff);
    }
}

#define CHECK_TOL (1.0f / 32)
#define CHECK_REL_L2 4e-3

/* ours (o, and o2 from a second run) against the trainer's r; prints one line; 1 when it passes */
static int compare(const char *what, const bf16 *o, const bf16 *o2, const bf16 *r, int64_t rows, int64_t cols) {
    const int64_t n = rows * cols;
    double *sums;
    unsigned long long *bad;
    CUDA_CHECK(cudaMalloc(&sums, 2 * sizeof(double)));
    CUDA_CHECK(cudaMalloc(&bad, 3 * sizeof(unsigned long long)));
    CUDA_CHECK(cudaMemset(sums, 0, 2 * sizeof(double)));
    CUDA_CHECK(cudaMemset(bad, 0xFF, sizeof(unsigned long long)));
    CUDA_CHECK(cudaMemset(bad + 1, 0, 2 * sizeof(unsigned long long)));
    const unsigned grid = (unsigned)(ceil_div(n, 256) < 4096 ? ceil_div(n, 256) : 4096);
    gg_compare_kernel<<<grid, 256>>>(r, r, NULL, n, 1.0f, 0.0f, sums, bad); /* the reference's rms */
    double hs[2];
    CUDA_CHECK(cudaMemcpy(hs, sums, sizeof hs, cudaMemcpyDeviceToHost));
    const float rms = (float)sqrt(hs[0] / (double)n);
    CUDA_CHECK(cudaMemset(sums, 0, 2 * sizeof(double)));
    gg_compare_kernel<<<grid, 256>>>(o, r, o2, n, CHECK_TOL, rms, sums, bad);
    CUDA_CHECK(cudaGetLastError());
    unsigned long long hb[3];
    CUDA_CHECK(cudaMemcpy(hs, sums, sizeof hs, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(hb, bad, sizeof hb, cudaMemcpyDeviceToHost));
    const double rel = hs[0] > 0 ? sqrt(hs[1] / hs[0]) : 0.0;
    const int pass = hb[1] == 0 && rel <= CHECK_REL_L2 && hb[2] == 0;
    printf("  %-4s rel-L2 %.2e, outside 1/32: %llu, rerun differs in %llu%s", what, rel, hb[1], hb[2],
           pass ? "\n" : "  FAIL");
    if (hb[1]) {
        bf16 ov, rv;
        const int64_t i = (int64_t)hb[0];
        CUDA_CHECK(cudaMemcpy(&ov, o + i, sizeof ov, cudaMemcpyDeviceToHost));
        CUDA_CHECK(cudaMemcpy(&rv, r + i, sizeof rv, cudaMemcpyDeviceToHost));
        printf(" (first at row %lld col %lld: ours %g, trainer %g)", (long long)(i / cols), (long long)(i % cols),
               (double)__bfloat162float(ov), (double)__bfloat162float(rv));
    }
    if (!pass) printf("\n");
    CUDA_CHECK(cudaFree(bad));
    CUDA_CHECK(cudaFree(sums));
    return pass;
}

typedef struct {
    int64_t N;
    int C, F;
    bf16 *x, *wfc, *wproj, *dy, *gu_in;             /* inputs */
    bf16 *gu, *h, *d, *dgu;                         /* the trainer's outputs */
    bf16 *gu_o, *h_o, *dgu_o, *gu_o2, *h_o2, *dgu_o2; /* ours, twice */
} Problem;

static bf16 *alloc_bf16(int64_t n) {
    bf16 *p;
    CUDA_CHECK(cudaMalloc(&p, (size_t)n * sizeof(bf16)));
    return p;
}

static void problem_init(Problem *p, int64_t N, int C, int F, uint32_t seed) {
    memset(p, 0, sizeof *p);
    p->N = N, p->C = C, p->F = F;
    const int64_t NC = N * C, NF = N * F, W = (int64_t)C * F;
    p->x = alloc_bf16(NC), p->dy = alloc_bf16(NC), p->wfc = alloc_bf16(2 * W), p->wproj = alloc_bf16(W);
    p->gu_in = alloc_bf16(2 * NF);
    p->gu = alloc_bf16(2 * NF), p->h = alloc_bf16(NF), p->d = alloc_bf16(NF), p->dgu = alloc_bf16(2 * NF);
    p->gu_o = alloc_bf16(2 * NF), p->h_o = alloc_bf16(NF), p->dgu_o = alloc_bf16(2 * NF);
    p->gu_o2 = alloc_bf16(2 * NF), p->h_o2 = alloc_bf16(NF), p->dgu_o2 = alloc_bf16(2 * NF);
    /* weights of a trained model's scale: products of order 1, some activations saturated */
    gg_fill(p->x, NC, 1.0f, seed), gg_fill(p->dy, NC, 1.0f, seed + 1);
    gg_fill(p->wfc, 2 * W, 3.0f / sqrtf((float)C), seed + 2), gg_fill(p->wproj, W, 3.0f / sqrtf((float)F), seed + 3);
    gg_fill(p->gu_in, 2 * NF, 4.0f, seed + 4);
}

static void problem_free(Problem *p) {
    bf16 *all[] = {p->x, p->dy, p->wfc, p->wproj, p->gu_in, p->gu, p->h, p->d, p->dgu,
                   p->gu_o, p->h_o, p->dgu_o, p->gu_o2, p->h_o2, p->dgu_o2};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) CUDA_CHECK(cudaFree(all[i]));
}

static void run_ours_forward(const Problem *p, int cl, bf16 *gu, bf16 *h) {
    gemm_gated(GG_FORWARD, cl, p->N, p->C, p->F, p->x, p->wfc, gu, NULL, h, GATED_SILU);
}
static void run_ours_backward(const Problem *p, int cl, bf16 *dgu, bf16 *h) {
    gemm_gated(GG_BACKWARD, cl, p->N, p->C, p->F, p->dy, p->wproj, p->gu_in, dgu, h, GATED_SILU);
}

static int check_problem(const Problem *p, int cl) {
    const int64_t NF = p->N * p->F;
    CUDA_CHECK(cudaMemset(p->gu_o, 0xFF, (size_t)(2 * NF) * sizeof(bf16))); /* NaN: every element written */
    CUDA_CHECK(cudaMemset(p->h_o, 0xFF, (size_t)NF * sizeof(bf16)));
    CUDA_CHECK(cudaMemset(p->dgu_o, 0xFF, (size_t)(2 * NF) * sizeof(bf16)));
    trainer_forward(p->N, p->C, p->F, p->x, p->wfc, p->gu, p->h);
    run_ours_forward(p, cl, p->gu_o, p->h_o);
    run_ours_forward(p, cl, p->gu_o2, p->h_o2);
    sync_or_die("the forward products");
    printf("check forward  N=%lld C=%d F=%d cluster=%d\n", (long long)p->N, p->C, p->F, cl);
    int ok = compare("GU", p->gu_o, p->gu_o2, p->gu, p->N, 2 * (int64_t)p->F);
    ok &= compare("H", p->h_o, p->h_o2, p->h, p->N, p->F);
    trainer_backward(p->N, p->C, p->F, p->dy, p->wproj, p->gu_in, p->d, p->dgu, p->h);
    CUDA_CHECK(cudaMemset(p->h_o, 0xFF, (size_t)NF * sizeof(bf16)));
    run_ours_backward(p, cl, p->dgu_o, p->h_o);
    run_ours_backward(p, cl, p->dgu_o2, p->h_o2);
    sync_or_die("the backward products");
    printf("check backward N=%lld C=%d F=%d cluster=%d\n", (long long)p->N, p->C, p->F, cl);
    ok &= compare("dGU", p->dgu_o, p->dgu_o2, p->dgu, p->N, 2 * (int64_t)p->F);
    ok &= compare("H", p->h_o, p->h_o2, p->h, p->N, p->F);
    return ok;
}

static int cmp_float(const void *x, const void *y) {
    const float a = *(const float *)x, b = *(const float *)y;
    return (a > b) - (a < b);
}

template <class Fn> static float median_ms(Fn run, int reps) {
    cudaEvent_t e0, e1;
    CUDA_CHECK(cudaEventCreate(&e0));
    CUDA_CHECK(cudaEventCreate(&e1));
    for (int i = 0; i < 3; i++) run();
    sync_or_die("warm-up");
    float t[64];
    for (int i = 0; i < reps; i++) {
        CUDA_CHECK(cudaEventRecord(e0));
        run();
        CUDA_CHECK(cudaEventRecord(e1));
        CUDA_CHECK(cudaEventSynchronize(e1));
        CUDA_CHECK(cudaEventElapsedTime(&t[i], e0, e1));
    }
    CUDA_CHECK(cudaEventDestroy(e1));
    CUDA_CHECK(cudaEventDestroy(e0));
    qsort(t, (size_t)reps, sizeof t[0], cmp_float);
    return t[reps / 2];
}

static void usage_error(const char *what) {
    fprintf(stderr, "error: %s (usage: bench_gemm_gated_sm90 [--check-only] [--shape N,C,F]... [--cluster 1|2] [--reps R])\n",
            what);
    exit(1);
}

int main(int argc, char **argv) {
    int check_only = 0, reps = 10, cluster = 2, nshapes = 0;
    int64_t shapes[16][3];
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        if (!strcmp(o, "--check-only")) check_only = 1;
        else if (!strcmp(o, "--shape") && i + 1 < argc) {
            long long n, c, f;
            int used = 0;
            if (nshapes == 16) usage_error("at most 16 --shape options");
            if (sscanf(argv[++i], "%lld,%lld,%lld%n", &n, &c, &f, &used) != 3 || argv[i][used] || n < 1 || c < 8 ||
                c % 8 || f < 128 || f % 128 || n >= (1ll << 31))
                usage_error("--shape takes N,C,F with C a multiple of 8 and F of 128");
            shapes[nshapes][0] = n, shapes[nshapes][1] = c, shapes[nshapes][2] = f, nshapes++;
        } else if (!strcmp(o, "--cluster") && i + 1 < argc) {
            cluster = atoi(argv[++i]);
            if (cluster != 1 && cluster != 2) usage_error("--cluster takes 1 or 2");
        } else if (!strcmp(o, "--reps") && i + 1 < argc) {
            reps = atoi(argv[++i]);
            if (reps < 1 || reps > 64) usage_error("--reps takes 1 to 64");
        } else {
            usage_error("unknown option or missing value");
        }
    }
    gg_init();
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    printf("device %s, %d SMs; resident clusters of 1: %d, of 2: %d\n", prop.name, prop.multiProcessorCount,
           g_clusters[1], g_clusters[2]);

    /* N off the 128- and 256-row blocks, C off the k blocks, F off the backward's 256 columns */
    const int64_t checks[][3] = {{128, 64, 128}, {1000, 200, 384}, {4100, 1024, 3072}, {777, 640, 2048}};
    int failed = 0, total = 0;
    uint32_t seed = 11;
    for (size_t c = 0; c < (GG_PROBE ? 0 : sizeof checks / sizeof checks[0]); c++) {
        Problem p;
        problem_init(&p, checks[c][0], (int)checks[c][1], (int)checks[c][2], seed += 7);
        for (int cl = 1; cl <= 2; cl++) failed += !check_problem(&p, cl), total++;
        problem_free(&p);
    }
    printf("%d of %d checks passed\n", total - failed, total);
    if (check_only || failed) return failed ? 1 : 0;

    /* Qwen3-0.6B, Llama-3.2-1B and Gemma-3-270M at 32768 tokens (B 16, T 2048) */
    const int64_t families[][3] = {{32768, 1024, 3072}, {32768, 2048, 8192}, {32768, 640, 2048}};
    const int64_t(*list)[3] = nshapes ? shapes : families;
    const int nlist = nshapes ? nshapes : 3;
    static char rows[16][320];
    for (int s = 0; s < nlist; s++) {
        Problem p;
        problem_init(&p, list[s][0], (int)list[s][1], (int)list[s][2], seed += 7);
        if (!GG_PROBE && !check_problem(&p, cluster)) failed++;
        const int64_t N = p.N;
        const int C = p.C, F = p.F;
        const float tf = median_ms([&] { trainer_forward(N, C, F, p.x, p.wfc, p.gu, p.h); }, reps);
        const float tf_gemm = median_ms([&] { matmul_forward(p.gu, NULL, p.x, p.wfc, NULL, (int)N, C, 2 * F, 0); }, reps);
        const float of = median_ms([&] { run_ours_forward(&p, cluster, p.gu_o, p.h_o); }, reps);
        const float tb = median_ms([&] { trainer_backward(N, C, F, p.dy, p.wproj, p.gu_in, p.d, p.dgu, p.h); }, reps);
        const float tb_gemm =
            median_ms([&] { matmul_backward(p.d, NULL, NULL, NULL, p.dy, NULL, p.wproj, NULL, (int)N, F, C, 0); }, reps);
        const float ob = median_ms([&] { run_ours_backward(&p, cluster, p.dgu_o, p.h_o); }, reps);
        const double ff = 2.0 * N * C * 2.0 * F, fb = 2.0 * N * C * (double)F;
        snprintf(rows[s], sizeof rows[s],
                 "| %lld, %d, %d | %.3f (GEMM %.3f, %.0f TF/s) | %.3f (%.0f TF/s) | %.3f | %.3f (GEMM %.3f, %.0f TF/s) | %.3f (%.0f TF/s) | %.3f |",
                 (long long)N, C, F, tf, tf_gemm, ff / tf_gemm * 1e-9, of, ff / of * 1e-9, of / tf, tb, tb_gemm,
                 fb / tb_gemm * 1e-9, ob, fb / ob * 1e-9, ob / tb);
        problem_free(&p);
    }
    printf("\n%s, CUDA events, 3 warm-ups, median of %d; ours in clusters of %d; ms\n", prop.name, reps, cluster);
    printf("| N, C, F | forward: trainer | ours | ours / trainer | backward: trainer | ours | ours / trainer |\n");
    printf("|---|---|---|---|---|---|---|\n");
    for (int s = 0; s < nlist; s++) printf("%s\n", rows[s]);
    matmul_free();
    return failed ? 1 : 0;
}
