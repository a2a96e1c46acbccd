/* kernels/gated_mlp.cu - the gated MLP's two products with its activation in their epilogues
 * (Hopper, sm_90a), act = SiLU (SwiGLU) or GELU-tanh (GeGLU):
 *
 *   forward:  GU [N, 2F] = X [N, C] · Wfc [2F, C]^T, stored in bf16, and H [N, F] = act(gate)·up
 *   backward: D = dY [N, C] · Wproj [C, F] is never stored: dGU [N, 2F] = (D·up·act'(gate),
 *             D·act(gate)) and H again, for the down projection's weight gradient
 *
 * the same values matmul.cu's product followed by swiglu.cu's pass give (the product's output
 * rounded to bf16 before the activation, kernels/gated_act.cuh's activation), without the pass's
 * traffic: the forward never reads GU back, the backward never writes D nor reads it back (6 of the
 * pass's 12 bytes a value).
 *
 * Kernel: persistent, 384 threads, one CTA per SM in 2-CTA clusters on adjacent 128-row blocks.
 *  - Two consumer warpgroups of 64 rows run wgmma m64n256k16 from a 3-stage ring of 48 KiB
 *    stages filled by TMA (128-byte swizzle); the two CTAs of a cluster share every B stage, each
 *    fetching half and multicasting it. The forward's 256 columns are 128 gate columns f0.. and the
 *    same 128 up columns (boxes of Wfc's rows f0 and F + f0), the backward's 256 columns of D.
 *  - A finished tile goes to a 64 KiB staging tile in bf16 (rounded as a stored product is), and
 *    the consumers go on to the next tile's products while the drain warps store it and apply the
 *    activation: with the consumers doing the epilogue themselves the tensor cores idled through it
 *    and the products ran 1.1-2.6x slower than product + pass (dev/RESULTS.md, 2026-11-29). The
 *    staging tile is why the ring has 3 stages, not 4.
 *  - Copies: a producer warp (forward), or consumer thread 0 between its products (backward at
 *    C <= 1536, where the drain's loads and stores bound the kernel: that frees a fourth drain warp;
 *    at C = 2048 the products' two stages ahead instead of three cost more than the warp gives).
 *    ptxas gives every thread of the block the launch bound's registers (65536 / 384 = 168; it
 *    counts threads in whole warpgroups and setmaxnreg does not raise it), and the consumers hold
 *    128 accumulators: more drain warps do not fit.
 *  Tiles are rastered in groups of 8 cluster rows (m fastest), so the tiles in flight share their
 *  panels in L2. Deterministic: every output is written once, by one thread, from sums in a fixed
 *  order (k in order, as cuBLAS sums when it does not split k: at the families' shapes the stored GU
 *  came out bitwise equal to its).
 *
 * Takes F % 128 == 0, C % 8 == 0 and 16-byte-aligned tensors (kernels/gated_mlp_fits.h); the
 * trainer runs the separate pass otherwise. FLOPs 4 N C F (forward) and 2 N C F (backward). */
#include <cuda.h> /* CUtensorMap */
#include <stdint.h>
#include <string.h>

#include "kernels/cuda_check.h"
#include "kernels/device_util.cuh"
#include "kernels/gated_act.cuh"
#include "kernels/kernels.h"
#include "kernels/tma.cuh"
#include "kernels/wgmma.cuh"

#define GM_BM 128  /* rows per CTA: two consumer warpgroups of 64 */
#define GM_BN 256  /* accumulator columns per tile */
#define GM_BK 64   /* k per stage: one 128-byte swizzle row of bf16 */
#define GM_CL 2    /* CTAs per cluster sharing the B stages */
#define GM_STAGES 3
#define GM_PANEL_BYTES (64 * 128)
#define GM_A_BYTES (GM_BM * GM_BK * 2)
#define GM_STAGE_BYTES (GM_A_BYTES + GM_BN * GM_BK * 2)
#define GM_STAGING_BYTES (GM_BM * GM_BN * 2) /* a tile in bf16, rows of 512 bytes */
#define GM_CONSUMERS 256
#define GM_THREADS (GM_CONSUMERS + 128)
#define GM_SMEM (GM_STAGES * GM_STAGE_BYTES + GM_STAGING_BYTES + 1024 + 8 * (2 * GM_STAGES + 2))
#define GM_GROUP 8
#define GM_LOADS 8                /* the backward's drain: items of 8 columns with g and u in flight */
#define GM_SPIN_LIMIT (1u << 30)
#define GM_INLINE_MAX_C 1536      /* the backward issues its copies inline up to this C */

enum { GM_FORWARD = 0, GM_BACKWARD = 1 };

typedef struct {
    int64_t N;  /* tokens: the products' rows */
    int F;      /* gated width */
    int kbs;    /* k blocks of GM_BK over C */
    bf16 *gu;   /* forward: written [N, 2F]; backward: read */
    bf16 *dgu;  /* backward: written [N, 2F] */
    bf16 *h;    /* written [N, F] */
    uint32_t tiles_m, tiles_n, units;
} GatedMlpArgs;

/* mbar_wait with a bound: a wait that never ends traps (an error the host reports) */
__device__ __forceinline__ void gm_wait(uint32_t bar, uint32_t parity) {
    for (uint32_t n = 0; !mbar_try_wait(bar, parity); n++)
        if (n == GM_SPIN_LIMIT) __trap();
}

/* unit -> this CTA's first row and the tile's column index (32-bit: the issuer's registers) */
__device__ __forceinline__ void gm_unit(const GatedMlpArgs &a, uint32_t u, uint32_t rank, int64_t *m0, int *tn) {
    const uint32_t per_group = GM_GROUP * a.tiles_n, g = u / per_group;
    const uint32_t first = g * GM_GROUP, rows = min((uint32_t)GM_GROUP, a.tiles_m - first), idx = u - g * per_group;
    const uint32_t n = idx / rows, cm = first + (idx - n * rows);
    *m0 = ((int64_t)cm * GM_CL + rank) * GM_BM;
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
__device__ __forceinline__ uint32_t gm_staged(int r, int k) { return (uint32_t)(r * 512 + ((k ^ (r & 7)) << 4)); }

/* a consumer's 64 x 256 accumulators into the staging tile */
__device__ __forceinline__ void gm_stage(const float (&acc)[128], unsigned char *stg, int wg, int wq, int lane) {
    const int r0 = wg * 64 + wq * 16 + (lane >> 2), byte = (lane & 3) * 4;
#pragma unroll
    for (int i = 0; i < 32; i++) {
        *reinterpret_cast<uint32_t *>(stg + gm_staged(r0, i) + byte) = pack_bf16x2(acc[i * 4 + 0], acc[i * 4 + 1]);
        *reinterpret_cast<uint32_t *>(stg + gm_staged(r0 + 8, i) + byte) = pack_bf16x2(acc[i * 4 + 2], acc[i * 4 + 3]);
    }
}

/* forward drain (t of nt threads): staged columns 0-127 are gate f0.., 128-255 the same up columns */
template <int ACT>
__device__ __forceinline__ void gm_drain_forward(const GatedMlpArgs &a, const unsigned char *stg, int64_t m0, int f0,
                                                 int t, int nt) {
    for (int item = t; item < GM_BM * 16; item += nt) {
        const int r = item >> 4, k = item & 15;
        const int64_t row = m0 + r;
        if (row >= a.N) continue;
        const uint4 g = *reinterpret_cast<const uint4 *>(stg + gm_staged(r, k));
        const uint4 u = *reinterpret_cast<const uint4 *>(stg + gm_staged(r, k + 16));
        const uint32_t gw[4] = {g.x, g.y, g.z, g.w}, uw[4] = {u.x, u.y, u.z, u.w};
        uint32_t hw[4];
#pragma unroll
        for (int e = 0; e < 4; e++)
            hw[e] = pack_bf16x2(gated_act<ACT>(bf16_lo(gw[e])) * bf16_lo(uw[e]),
                                gated_act<ACT>(bf16_hi(gw[e])) * bf16_hi(uw[e]));
        const int64_t c = f0 + 8 * k;
        bf16 *gu = a.gu + row * 2 * (int64_t)a.F;
        *reinterpret_cast<uint4 *>(gu + c) = g;
        *reinterpret_cast<uint4 *>(gu + a.F + c) = u;
        *reinterpret_cast<uint4 *>(a.h + row * (int64_t)a.F + c) = make_uint4(hw[0], hw[1], hw[2], hw[3]);
    }
}

/* backward drain: the staged tile is D's columns f0 .. f0 + 255 (those past F unused); GM_LOADS
 * items' g and u loads in flight at once */
template <int ACT>
__device__ __forceinline__ void gm_drain_backward(const GatedMlpArgs &a, const unsigned char *stg, int64_t m0, int f0,
                                                  int t, int nt) {
    for (int first = t; first < GM_BM * 32; first += nt * GM_LOADS) {
        uint4 g[GM_LOADS], u[GM_LOADS];
#pragma unroll
        for (int j = 0; j < GM_LOADS; j++) {
            const int item = first + j * nt, r = item >> 5, k = item & 31;
            const int64_t row = m0 + r, c = f0 + 8 * k;
            if (item < GM_BM * 32 && row < a.N && c < a.F) {
                const bf16 *gu = a.gu + row * 2 * (int64_t)a.F;
                g[j] = __ldg(reinterpret_cast<const uint4 *>(gu + c));
                u[j] = __ldg(reinterpret_cast<const uint4 *>(gu + a.F + c));
            }
        }
#pragma unroll
        for (int j = 0; j < GM_LOADS; j++) {
            const int item = first + j * nt, r = item >> 5, k = item & 31;
            const int64_t row = m0 + r, c = f0 + 8 * k;
            if (!(item < GM_BM * 32 && row < a.N && c < a.F)) continue;
            const uint4 d = *reinterpret_cast<const uint4 *>(stg + gm_staged(r, k));
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
                    const float act = gated_act<ACT>(gv);
                    o[half] = act * uv;
                    dg[half] = dv * uv * gated_act_grad<ACT>(gv);
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
struct GmIssuer {
    uint32_t u, stage, phase, fills;
    int kb, tn;
    int64_t m0;
};

/* Issues the next stage's copies once its slot is free; false when the CTA's units are all issued. */
template <int MODE>
__device__ __forceinline__ bool gm_issue(const GatedMlpArgs &a, const CUtensorMap *tm_a, const CUtensorMap *tm_b,
                                         uint32_t ring, uint32_t full_bar, uint32_t empty_bar, uint32_t rank,
                                         uint32_t nclusters, GmIssuer &p) {
    if (p.u >= a.units) return false;
    if (p.kb == 0) gm_unit(a, p.u, rank, &p.m0, &p.tn);
    if (p.fills >= GM_STAGES) gm_wait(empty_bar + 8 * p.stage, p.phase ^ 1);
    const uint32_t fb = full_bar + 8 * p.stage, sa = ring + p.stage * GM_STAGE_BYTES, sb = sa + GM_A_BYTES;
    mbar_expect_tx(fb, GM_STAGE_BYTES); /* A and the whole B stage, whichever CTA fetches each half */
    const int k0 = p.kb * GM_BK;
    tma_load_2d(sa, tm_a, k0, (int)p.m0, fb);
    if (MODE == GM_FORWARD) /* rank 0 the gate box (Wfc rows f0..), rank 1 the up box (F + f0..) */
        tma_load_2d_multicast(sb + rank * 2 * GM_PANEL_BYTES, tm_b, k0, (int)rank * a.F + p.tn * 128, fb, 3);
    else
#pragma unroll
        for (int q = (int)rank * 2; q < (int)rank * 2 + 2; q++)
            tma_load_2d_multicast(sb + q * GM_PANEL_BYTES, tm_b, p.tn * GM_BN + 64 * q, k0, fb, 3);
    p.fills++;
    if (++p.stage == GM_STAGES) p.stage = 0, p.phase ^= 1;
    if (++p.kb == a.kbs) p.kb = 0, p.u += nclusters;
    return true;
}

/* MODE: GM_FORWARD (A = X, B = Wfc, both K-major: tm_b boxes {64 k, 128 rows}) or GM_BACKWARD (A =
 * dY K-major, B = Wproj MN-major: boxes {64 columns of F, 64 k}); tm_a boxes {64 k, 128 rows}.
 * INLINE: consumer thread 0 issues the copies and warps 8-11 drain; else warp 8 issues, 9-11 drain.
 * ACT: a GatedAct. */
template <int MODE, int INLINE, int ACT>
__global__ void __launch_bounds__(GM_THREADS, 1)
    gated_mlp_kernel(const GatedMlpArgs a, const __grid_constant__ CUtensorMap tm_a,
                     const __grid_constant__ CUtensorMap tm_b) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    constexpr int first_drain_warp = GM_CONSUMERS / 32 + (INLINE ? 0 : 1), drain_warps = 12 - first_drain_warp;
    extern __shared__ unsigned char gm_smem[];
    const uint32_t ring = (smem_addr(gm_smem) + 1023) & ~1023u;
    const uint32_t staging = ring + GM_STAGES * GM_STAGE_BYTES;
    unsigned char *stg = gm_smem + (staging - smem_addr(gm_smem));
    const uint32_t full_bar = staging + GM_STAGING_BYTES, empty_bar = full_bar + 8 * GM_STAGES;
    const uint32_t staged_bar = empty_bar + 8 * GM_STAGES, drained_bar = staged_bar + 8;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const uint32_t rank = cluster_rank();
    const uint32_t cluster = blockIdx.x / GM_CL, nclusters = gridDim.x / GM_CL;

    if (threadIdx.x == 0) {
        for (int s = 0; s < GM_STAGES; s++) {
            mbar_init(full_bar + 8 * s, 1);             /* the issuer's expect-tx, then the bytes */
            mbar_init(empty_bar + 8 * s, 8 * GM_CL);    /* every consumer warp of both CTAs */
        }
        mbar_init(staged_bar, GM_CONSUMERS / 32);
        mbar_init(drained_bar, drain_warps);
        mbar_init_fence();
    }
    cluster_sync_all(); /* the peer's barriers are initialised before any copy or arrive reaches them */

    GmIssuer issuer = {cluster, 0, 0, 0, 0, 0, 0};
    if (!INLINE && warp == GM_CONSUMERS / 32) {
        if (lane == 0)
            while (gm_issue<MODE>(a, &tm_a, &tm_b, ring, full_bar, empty_bar, rank, nclusters, issuer)) {
            }
        __syncwarp();
    } else if (warp >= first_drain_warp) {
        const int t = threadIdx.x - 32 * first_drain_warp;
        uint32_t j = 0;
        for (uint32_t u = cluster; u < a.units; u += nclusters, j++) {
            int64_t m0;
            int tn;
            gm_unit(a, u, rank, &m0, &tn);
            gm_wait(staged_bar, j & 1);
            if (MODE == GM_FORWARD) gm_drain_forward<ACT>(a, stg, m0, tn * 128, t, 32 * drain_warps);
            else gm_drain_backward<ACT>(a, stg, m0, tn * GM_BN, t, 32 * drain_warps);
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
                for (int c = 0; c < GM_CL; c++) mbar_arrive_cluster(empty_bar + 8 * s, (uint32_t)c);
        };
        /* inline: GM_STAGES - 1 stages ahead; each iteration then refills the slot its previous one
         * read, once every consumer warp of the cluster released it */
        if (INLINE && threadIdx.x == 0)
            for (int s = 0; s < GM_STAGES - 1; s++)
                gm_issue<MODE>(a, &tm_a, &tm_b, ring, full_bar, empty_bar, rank, nclusters, issuer);
        float acc[128];
        for (uint32_t u = cluster; u < a.units; u += nclusters, j++) {
            uint32_t prev = 0;
            for (int kb = 0; kb < a.kbs; kb++) {
                gm_wait(full_bar + 8 * stage, phase);
                const uint32_t base = ring + stage * GM_STAGE_BYTES;
                const uint32_t sa = base + wg * GM_PANEL_BYTES, sb = base + GM_A_BYTES;
                __syncwarp(); /* wgmma is .aligned: the warp converges after the wait */
                wgmma_fence();
#pragma unroll
                for (int kk = 0; kk < GM_BK / 16; kk++) {
                    const uint64_t da = smem_desc(sa + kk * 32);
                    if (MODE == GM_FORWARD)
                        wgmma_m64n256k16_t<0, 0>(acc, da, smem_desc(sb + kk * 32), (kb | kk) != 0);
                    else
                        wgmma_m64n256k16_t<0, 1>(acc, da, smem_desc_lbo(sb + kk * 2048, GM_PANEL_BYTES), (kb | kk) != 0);
                }
                wgmma_commit();
                /* the previous k block's products are done: its stage goes back while this one's run */
                wgmma_wait<1>();
                if (kb > 0) release(prev);
                if (INLINE && threadIdx.x == 0)
                    gm_issue<MODE>(a, &tm_a, &tm_b, ring, full_bar, empty_bar, rank, nclusters, issuer);
                __syncwarp(); /* wgmma_wait is .aligned: the warp converges after thread 0's issue */
                prev = stage;
                if (++stage == GM_STAGES) stage = 0, phase ^= 1;
            }
            wgmma_wait<0>();
            fence_acc(acc);
            release(prev);
            if (j > 0) gm_wait(drained_bar, (j - 1) & 1); /* the drain is done with the previous tile */
            gm_stage(acc, stg, wg, wq, lane);
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

typedef void (*GatedMlpKernel)(const GatedMlpArgs, const CUtensorMap, const CUtensorMap);

template <int ACT>
static GatedMlpKernel kernel_for_act(int mode, int inline_issue) {
    if (mode == GM_FORWARD)
        return inline_issue ? gated_mlp_kernel<GM_FORWARD, 1, ACT> : gated_mlp_kernel<GM_FORWARD, 0, ACT>;
    return inline_issue ? gated_mlp_kernel<GM_BACKWARD, 1, ACT> : gated_mlp_kernel<GM_BACKWARD, 0, ACT>;
}

static GatedMlpKernel kernel_for(int mode, int inline_issue, GatedAct act) {
    return act == GATED_SILU ? kernel_for_act<GATED_SILU>(mode, inline_issue)
                             : kernel_for_act<GATED_GELU_TANH>(mode, inline_issue);
}

static cudaLaunchConfig_t launch_config(dim3 grid, cudaLaunchAttribute *at, cudaStream_t stream) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid, cfg.blockDim = dim3(GM_THREADS), cfg.dynamicSmemBytes = GM_SMEM, cfg.stream = stream;
    at->id = cudaLaunchAttributeClusterDimension;
    at->val.clusterDim.x = GM_CL, at->val.clusterDim.y = 1, at->val.clusterDim.z = 1;
    cfg.attrs = at, cfg.numAttrs = 1;
    return cfg;
}

/* Clusters resident at once (the persistent grid), found once per device (the shared-memory
 * attribute is set per device too). */
static int resident_clusters(void) {
    static int per_device[64];
    int device = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    int *clusters = device < 64 ? &per_device[device] : NULL;
    if (clusters && *clusters) return *clusters;
    for (int mode = 0; mode < 2; mode++)
        for (int in = 0; in < 2; in++)
            for (int act = 0; act < 2; act++)
                CUDA_CHECK(cudaFuncSetAttribute((const void *)kernel_for(mode, in, (GatedAct)act),
                                                cudaFuncAttributeMaxDynamicSharedMemorySize, GM_SMEM));
    cudaLaunchAttribute at;
    const cudaLaunchConfig_t cfg = launch_config(dim3(2 * GM_CL), &at, 0);
    int n = 0;
    CUDA_CHECK(cudaOccupancyMaxActiveClusters(&n, (const void *)kernel_for(0, 0, GATED_SILU), &cfg));
    if (n < 1) {
        fprintf(stderr, "error: gated MLP products: no cluster of %d CTAs with %d bytes of shared memory fits this "
                        "GPU (they need a Hopper GPU)\n", GM_CL, GM_SMEM);
        exit(1);
    }
    if (clusters) *clusters = n;
    return n;
}

static CUtensorMap map_of(const kbf16 *p, int64_t rows, int64_t cols, int box_cols, int box_rows) {
    const cuuint64_t dims[2] = {(cuuint64_t)cols, (cuuint64_t)rows};
    const cuuint64_t strides[1] = {(cuuint64_t)cols * sizeof(bf16)};
    const cuuint32_t box[2] = {(cuuint32_t)box_cols, (cuuint32_t)box_rows};
    return tma_tensor_map_bf16(p, 2, dims, strides, box, "gated MLP products");
}

static void launch(int mode, int64_t N, int C, int F, GatedAct act, const kbf16 *a_mat, const kbf16 *b_mat, kbf16 *gu,
                   kbf16 *dgu, kbf16 *h, cudaStream_t stream) {
    const void *ptrs[] = {a_mat, b_mat, gu, dgu, h};
    int aligned = 1;
    for (int i = 0; i < 5; i++) aligned &= ((uintptr_t)ptrs[i] & 15) == 0;
    if (!gated_mlp_fits(C, F, (uintptr_t)b_mat) || !aligned || (act != GATED_SILU && act != GATED_GELU_TANH)) {
        fprintf(stderr, "error: gated MLP products: C = %d, F = %d, activation %d or a tensor's address does not fit "
                        "them (the caller checks gated_mlp_fits first)\n", C, F, (int)act);
        exit(1);
    }
    if (N <= 0) return;
    GatedMlpArgs a = {};
    a.N = N, a.F = F, a.kbs = (int)ceil_div(C, GM_BK), a.gu = gu, a.dgu = dgu, a.h = h;
    a.tiles_m = (uint32_t)ceil_div(N, (int64_t)GM_CL * GM_BM);
    a.tiles_n = (uint32_t)(mode == GM_FORWARD ? F / 128 : ceil_div(F, GM_BN));
    a.units = a.tiles_m * a.tiles_n;
    const CUtensorMap tm_a = map_of(a_mat, N, C, 64, GM_BM);
    const CUtensorMap tm_b = mode == GM_FORWARD ? map_of(b_mat, 2 * (int64_t)F, C, 64, 128) : map_of(b_mat, C, F, 64, 64);
    const int clusters = resident_clusters();
    const int64_t grid = (int64_t)a.units < clusters ? (int64_t)a.units : clusters;
    cudaLaunchAttribute at;
    const cudaLaunchConfig_t lc = launch_config(dim3((unsigned)(grid * GM_CL)), &at, stream);
    const int inline_issue = mode == GM_BACKWARD && C <= GM_INLINE_MAX_C;
    CUDA_CHECK(cudaLaunchKernelEx(&lc, kernel_for(mode, inline_issue, act), a, tm_a, tm_b));
    CUDA_CHECK(cudaGetLastError());
}

extern "C" void gated_mlp_forward(kbf16 *gu, kbf16 *out, const kbf16 *x, const kbf16 *wfc, size_t N, int C, int F,
                                  GatedAct act, cudaStream_t stream) {
    launch(GM_FORWARD, (int64_t)N, C, F, act, x, wfc, gu, NULL, out, stream);
}

extern "C" void gated_mlp_backward(kbf16 *dgu, kbf16 *out, const kbf16 *dout, const kbf16 *wproj, const kbf16 *gu,
                                   size_t N, int C, int F, GatedAct act, cudaStream_t stream) {
    launch(GM_BACKWARD, (int64_t)N, C, F, act, dout, wproj, const_cast<kbf16 *>(gu), dgu, out, stream);
}
