/* kernels/output_fused.cu - the fused output layer: loss, dH and dW from H, W and the targets without
 * ever storing the N x V logits.
 *
 * Shapes: H [N x d] bf16, W [V x d] bf16 (rows >= V are never read), targets [N] int32 (-1 ignored),
 * d % 64 == 0. G = 2 N V d FLOPs (one logits-sized GEMM).
 * Work: forward 1G; forward + backward 4G (the backward recomputes the logits). Bytes that must
 * move: H, W once (plus dH, dW once); everything of size N x V stays on chip except the backward's
 * bf16 dZ window (written once, read by two GEMMs: 6 bytes per logit).
 *
 * Tile kernels (two epilogues each, MODE_STATS for the forward, MODE_DZ for the backward):
 *  - tile_kernel_tma<MODE, CL> (Hopper): tile_kernel_wgmma<MODE, 256>'s tiles and
 *    epilogues, its shared memory filled by the TMA unit (4-stage mbarrier ring, one issuing
 *    thread, no __syncthreads in the main loop). CL = 2, the default: 2-CTA clusters take two
 *    row blocks against the same W tiles, each CTA fetching half of every W stage and multicasting
 *    it to both (W read from L2 once per pair): forward 1.04-1.05x one cuBLAS GEMM at d=768 and
 *    d=4096 (CL = 1: 1.0x and 1.35x).
 *  - tile_kernel_wgmma<MODE, 256>: a CTA of two warpgroups owns 128 rows and
 *    computes 128 x 256 logit tiles with wgmma m64n256k16 from shared memory (4-stage cp.async
 *    ring, 128-byte swizzle); the tile (128 fp32 per thread) never leaves registers. The forward's
 *    CTAs are persistent: G windows x P row-block slots, each CTA sweeping its window for one row
 *    block after another, so that the CTAs stream W in step and share it in L2.
 *  - tile_kernel_wgmma<MODE, 128>: 128 x 128 tiles, two CTAs per SM (measured slower, kept for
 *    comparison).
 *  - tile_kernel_mma<MODE> (portable sm_80+): 128 x 128 tiles, 8 warps, ldmatrix + mma.sync
 *    m16n8k16, 3-stage cp.async, one CTA per (window, row block).
 * STATS epilogue: each thread keeps a running max m and sum a of exp(z - m) for its rows over its
 * own columns (no cross-thread traffic per tile) and stores the target logit when its tile holds
 * it; at the end of a window the quad (and, for mma, the two column-warps) merge into (m, a) per
 * row and window; fused_merge_kernel then gives lse = M + log sum_w a_w exp(m_w - M) and
 * loss = lse - z_target. DZ epilogue: dZ = softmax - onehot from the saved lse (p - 1 at the
 * target in fp32), one rounding to bf16, 0 for ignored rows and columns past V.
 *
 * Backward (3G), per chunk of Nc rows and window of w columns (Megatron's scheme, the notes'
 * option 1): the DZ kernel writes the window's dZ to a [Nc x w] workspace; then cuBLASLt adds
 * dH_chunk (fp32 workspace) += scale dZ . W_window and dW_window (fp32, the caller's) +=
 * scale dZ^T . H_chunk, the gradient scale as the GEMMs' fp32 alpha. Every element of dW and dH
 * is summed in a fixed order (windows in order, chunks in order, fixed GEMM algorithms):
 * deterministic, no atomics. dH_chunk is rounded to bf16 once, after its last window.
 * Workspace: Nc x w x 2 B (<= 64 MiB) + Nc x d x 4 B (<= 32 MiB) + per-window statistics
 * (windows x N floats, windows <= about 20): independent of V. The first two are default budgets;
 * FUSEDGPT_OUTL_DZ_MB, _CHUNK_ROWS and _DH_MB override them for tuning (see outl_fused_sizes). */
#include <cuda.h> /* CUtensorMap (the driver entry point is fetched through the runtime) */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels/cuda_check.h"
#include "kernels/fast_math.cuh"
#include "kernels/output_layer_internal.h"
#include "kernels/wgmma.cuh"

typedef __nv_bfloat16 bf16;

#define BM 128      /* rows per CTA */
#define BN 128      /* vocabulary columns per tile */
#define BK 64       /* d per pipeline stage */
#define STAGES 3
#define THREADS 256
#define SMEM_BYTES (STAGES * (BM + BN) * BK * (int)sizeof(bf16)) /* 96 KiB: two CTAs per SM */
#define L2E 1.4426950408889634f

/* Backward workspace defaults (not swept; FUSEDGPT_OUTL_* below override them for tuning) */
#define DZ_BUDGET_ELEMS ((int64_t)32 << 20)  /* dZ window workspace: 64 MiB of bf16 */
#define DH_BUDGET_ELEMS ((int64_t)8 << 20)   /* fp32 dH chunk: 32 MiB */
#define MAX_CHUNK_ROWS 4096
#define SQUARE_WINDOW 8192                   /* rows = columns of the large problems' dZ window */
#define MAX_WINDOW_COLS 32768
#define L2_H_BUDGET ((int64_t)16 << 20)     /* bytes of H blocks re-read at one time (default) */

enum { MODE_STATS = 0, MODE_DZ = 1 };

typedef struct {
    const bf16 *H, *W;
    const int32_t *targets;
    int64_t row_begin, row_end; /* rows of this launch */
    int64_t col_begin, col_end; /* vocabulary columns of this launch, col_end <= V */
    int tiles_per_cta;
    int d;
    /* MODE_STATS */
    float *win_m, *win_a; /* [window][stats_ld] */
    int64_t stats_ld;
    float *zt; /* [N] target logit, written by the one thread whose tile holds it */
    /* MODE_DZ */
    const float *lse;
    bf16 *dz; /* P - Y, unscaled (the GEMMs apply the gradient scale as alpha) */
    int64_t ldz;
} TileArgs;

__device__ __forceinline__ uint32_t smem_u32(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

/* 16-byte global -> shared copy; src_bytes 0 fills zeros (rows past the end). */
__device__ __forceinline__ void cp_async16(uint32_t dst, const void *src, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int n> __device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(n)); }

__device__ __forceinline__ void ldmatrix_x4(uint32_t r[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

__device__ __forceinline__ void mma_bf16_16816(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* Shared tile layout: [128 rows][64 bf16] = 8 chunks of 16 B per row, chunk c of row r stored at
 * chunk c ^ (r & 7), so the 8 rows an ldmatrix phase reads hit 8 different bank groups. */
__device__ __forceinline__ int swz(int r, int ch) { return r * BK + ((ch ^ (r & 7)) << 3); }

__device__ __forceinline__ void load_stage(const TileArgs &a, bf16 *sA, bf16 *sB, int64_t row0, int64_t col0,
                                           int k0, int tid) {
#pragma unroll
    for (int i = 0; i < (BM * BK / 8) / THREADS; i++) {
        int c = tid + i * THREADS, r = c >> 3, ch = c & 7;
        int64_t gr = row0 + r;
        bool v = gr < a.row_end;
        const bf16 *src = a.H + (v ? gr : a.row_begin) * a.d + k0 + ch * 8;
        cp_async16(smem_u32(sA + swz(r, ch)), src, v ? 16 : 0);
    }
#pragma unroll
    for (int i = 0; i < (BN * BK / 8) / THREADS; i++) {
        int c = tid + i * THREADS, r = c >> 3, ch = c & 7;
        int64_t gc = col0 + r;
        bool v = gc < a.col_end;
        const bf16 *src = a.W + (v ? gc : 0) * a.d + k0 + ch * 8;
        cp_async16(smem_u32(sB + swz(r, ch)), src, v ? 16 : 0);
    }
}

/* acc[mi][ni][e]: row wm*32 + mi*16 + (lane>>2) + 8*(e>>1), column wn*64 + ni*8 + (lane&3)*2 + (e&1) */
template <int MODE>
__global__ void __launch_bounds__(THREADS, 2) tile_kernel_mma(const TileArgs a) {
    extern __shared__ __align__(128) unsigned char smem[];
    bf16 *sA = reinterpret_cast<bf16 *>(smem);
    bf16 *sB = sA + STAGES * BM * BK;
    __shared__ float red_m[2][BM], red_a[2][BM];

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wm = warp >> 1, wn = warp & 1;
    /* the forward walks windows fastest (rows stay in L2 across windows); the backward walks rows
     * fastest (one window's W stays in L2 across rows) */
    const int64_t win = MODE == MODE_STATS ? blockIdx.x : blockIdx.y;
    const int64_t rb = MODE == MODE_STATS ? blockIdx.y : blockIdx.x;
    const int64_t row0 = a.row_begin + rb * BM;
    const int64_t ntiles = (a.col_end - a.col_begin + BN - 1) / BN;
    const int64_t t0 = win * a.tiles_per_cta;
    const int64_t t1 = min(t0 + (int64_t)a.tiles_per_cta, ntiles);
    const int KT = a.d / BK;
    const int iters = (int)(t1 - t0) * KT;

    int tgt[2][2];
    float m_run[2][2], a_run[2][2], lse2[2][2];
#pragma unroll
    for (int mi = 0; mi < 2; mi++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            int64_t row = row0 + wm * 32 + mi * 16 + h * 8 + (lane >> 2);
            bool in = row < a.row_end;
            tgt[mi][h] = in ? a.targets[row] : -1;
            m_run[mi][h] = -INFINITY;
            a_run[mi][h] = 0.0f;
            lse2[mi][h] = (MODE == MODE_DZ && in) ? a.lse[row] * L2E : 0.0f;
        }

    float acc[2][8][4];
#pragma unroll
    for (int mi = 0; mi < 2; mi++)
#pragma unroll
        for (int ni = 0; ni < 8; ni++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[mi][ni][e] = 0.0f;

    /* loader state: the iteration it = tile * KT + kc it will load next */
    int ld_kc = 0, ld_stage = 0;
    int64_t ld_col0 = a.col_begin + t0 * BN;
#pragma unroll
    for (int s = 0; s < STAGES - 1; s++) {
        if (s < iters) {
            load_stage(a, sA + ld_stage * BM * BK, sB + ld_stage * BN * BK, row0, ld_col0, ld_kc * BK, tid);
            if (++ld_kc == KT) ld_kc = 0, ld_col0 += BN;
            ld_stage = ld_stage + 1 == STAGES ? 0 : ld_stage + 1;
        }
        cp_async_commit();
    }

    int kc = 0, stage = 0;
    int64_t tile_col0 = a.col_begin + t0 * BN;
    for (int it = 0; it < iters; it++) {
        /* stage `it` has landed for this thread; the barrier makes it visible to all, and also
         * guarantees every warp finished reading the stage the next load overwrites (it - 1's) */
        cp_async_wait<STAGES - 2>();
        __syncthreads();
        if (it + STAGES - 1 < iters) {
            load_stage(a, sA + ld_stage * BM * BK, sB + ld_stage * BN * BK, row0, ld_col0, ld_kc * BK, tid);
            if (++ld_kc == KT) ld_kc = 0, ld_col0 += BN;
            ld_stage = ld_stage + 1 == STAGES ? 0 : ld_stage + 1;
        }
        cp_async_commit();

        const bf16 *cA = sA + stage * BM * BK, *cB = sB + stage * BN * BK;
#pragma unroll
        for (int kk = 0; kk < BK / 16; kk++) {
            uint32_t af[2][4], bfr[8][2];
#pragma unroll
            for (int mi = 0; mi < 2; mi++) {
                int r = wm * 32 + mi * 16 + (lane & 15);
                ldmatrix_x4(af[mi], smem_u32(cA + swz(r, kk * 2 + (lane >> 4))));
            }
#pragma unroll
            for (int nj = 0; nj < 4; nj++) {
                int r = wn * 64 + nj * 16 + (lane & 7) + ((lane >> 4) << 3);
                uint32_t t[4];
                ldmatrix_x4(t, smem_u32(cB + swz(r, kk * 2 + ((lane >> 3) & 1))));
                bfr[2 * nj][0] = t[0], bfr[2 * nj][1] = t[1], bfr[2 * nj + 1][0] = t[2], bfr[2 * nj + 1][1] = t[3];
            }
#pragma unroll
            for (int mi = 0; mi < 2; mi++)
#pragma unroll
                for (int ni = 0; ni < 8; ni++) mma_bf16_16816(acc[mi][ni], af[mi], bfr[ni][0], bfr[ni][1]);
        }
        stage = stage + 1 == STAGES ? 0 : stage + 1;
        if (++kc < KT) continue;
        kc = 0;

        /* ---- epilogue of one 128 x 128 logit tile, all in registers ---- */
        const int64_t cbase = tile_col0 + wn * 64 + (lane & 3) * 2;
        const bool full = tile_col0 + BN <= a.col_end;
#pragma unroll
        for (int mi = 0; mi < 2; mi++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int64_t row = row0 + wm * 32 + mi * 16 + h * 8 + (lane >> 2);
                const int t = tgt[mi][h];
                if (MODE == MODE_STATS) {
                    float mx = -INFINITY;
#pragma unroll
                    for (int ni = 0; ni < 8; ni++)
#pragma unroll
                        for (int j = 0; j < 2; j++) {
                            float z = acc[mi][ni][h * 2 + j];
                            if (!full && cbase + ni * 8 + j >= a.col_end) z = -INFINITY; /* past V */
                            acc[mi][ni][h * 2 + j] = z;
                            mx = fmaxf(mx, z);
                        }
                    const float mn = fmaxf(m_run[mi][h], mx);
                    const float mu2 = (mn == -INFINITY ? 0.0f : mn) * L2E; /* no inf - inf */
                    float s = a_run[mi][h] * ex2(fmaf(m_run[mi][h], L2E, -mu2));
#pragma unroll
                    for (int ni = 0; ni < 8; ni++)
#pragma unroll
                        for (int j = 0; j < 2; j++) s += ex2(fmaf(acc[mi][ni][h * 2 + j], L2E, -mu2));
                    a_run[mi][h] = s;
                    m_run[mi][h] = mn;
                    if (t >= tile_col0 && t < tile_col0 + BN) { /* rare: the target is in this tile */
#pragma unroll
                        for (int ni = 0; ni < 8; ni++)
#pragma unroll
                            for (int j = 0; j < 2; j++)
                                if (cbase + ni * 8 + j == t) a.zt[row] = acc[mi][ni][h * 2 + j];
                    }
                } else {
                    if (row < a.row_end) {
                        const float sc = t == -1 ? 0.0f : 1.0f; /* ignored rows: no gradient */
                        bf16 *out = a.dz + (row - a.row_begin) * a.ldz + (cbase - a.col_begin);
#pragma unroll
                        for (int ni = 0; ni < 8; ni++) {
                            float g[2];
#pragma unroll
                            for (int j = 0; j < 2; j++) {
                                const int64_t col = cbase + ni * 8 + j;
                                float p = ex2(fmaf(acc[mi][ni][h * 2 + j], L2E, -lse2[mi][h]));
                                g[j] = (p - (col == t ? 1.0f : 0.0f)) * sc;
                                if (!full && col >= a.col_end) g[j] = 0.0f; /* padding of the window */
                            }
                            *reinterpret_cast<__nv_bfloat162 *>(out + ni * 8) = __floats2bfloat162_rn(g[0], g[1]);
                        }
                    }
                }
            }
#pragma unroll
        for (int mi = 0; mi < 2; mi++)
#pragma unroll
            for (int ni = 0; ni < 8; ni++)
#pragma unroll
                for (int e = 0; e < 4; e++) acc[mi][ni][e] = 0.0f;
        tile_col0 += BN;
    }

    if (MODE == MODE_STATS) {
        /* merge the 4 threads of a quad (same rows, different columns), then the two column-warps */
#pragma unroll
        for (int mi = 0; mi < 2; mi++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                float m = m_run[mi][h], s = a_run[mi][h];
#pragma unroll
                for (int off = 1; off <= 2; off <<= 1) {
                    float m2 = __shfl_xor_sync(0xffffffffu, m, off), s2 = __shfl_xor_sync(0xffffffffu, s, off);
                    float mn = fmaxf(m, m2), mu = mn == -INFINITY ? 0.0f : mn;
                    s = s * ex2((m - mu) * L2E) + s2 * ex2((m2 - mu) * L2E);
                    m = mn;
                }
                if ((lane & 3) == 0) {
                    int r = wm * 32 + mi * 16 + h * 8 + (lane >> 2);
                    red_m[wn][r] = m, red_a[wn][r] = s;
                }
            }
        __syncthreads();
        if (tid < BM) {
            const int64_t row = row0 + tid;
            if (row < a.row_end) {
                float m = red_m[0][tid], s = red_a[0][tid], m2 = red_m[1][tid], s2 = red_a[1][tid];
                float mn = fmaxf(m, m2), mu = mn == -INFINITY ? 0.0f : mn;
                s = s * ex2((m - mu) * L2E) + s2 * ex2((m2 - mu) * L2E);
                a.win_m[win * a.stats_ld + (row - a.row_begin)] = mn;
                a.win_a[win * a.stats_ld + (row - a.row_begin)] = s;
            }
        }
    }
}

/* ---- Hopper tile kernel (sm_90a): wgmma ------------------------------------------------------ */
/* Same job, layout and epilogues as tile_kernel_mma, on a 128 x 256 tile: two warpgroups, each
 * issuing wgmma m64n256k16 for 64 of the rows straight from shared memory (the swizzle above is
 * exactly wgmma's 128-byte swizzle when a tile starts on a 1024-byte boundary). A 4-stage cp.async
 * ring, loads issued two stages ahead, one wgmma group in flight while the next stage's copies are
 * issued. The 64 x 256 accumulator is 128 fp32 registers per thread; each row belongs to the 4
 * threads of one quad, so the end-of-window merge is two shuffles. */

#define WBM 128
#define WBN 256 /* the widest tile: windows are multiples of it */
#define W_A_BYTES (WBM * BK * 2) /* 16 KiB */
#define DZ_SCRATCH_BYTES (8 * 512) /* per warp (8 of them), where the dZ epilogue regroups columns */
/* Two shapes: 128 x 256 (4 stages of 48 KiB, one CTA per SM, one wgmma group kept in flight) and
 * 128 x 128 (3 stages of 32 KiB, two CTAs per SM so that one's epilogue overlaps the other's MMA,
 * every wgmma group waited for before the next barrier). */
template <int TBN> struct WShape {
    static constexpr int stages = TBN == 256 ? 4 : 3;
    static constexpr int wait_depth = TBN == 256 ? 1 : 0;      /* wgmma groups left in flight */
    static constexpr int ahead = stages - 1 - wait_depth;        /* stages loaded ahead */
    static constexpr int stage_bytes = W_A_BYTES + TBN * BK * 2;
    static constexpr int smem = stages * stage_bytes + 1024 + DZ_SCRATCH_BYTES; /* + slack to align the ring */
    static constexpr int min_ctas = TBN == 256 ? 1 : 2;
};

/* D[64 x 256] (+)= A[64 x 16] . B[256 x 16]^T, both K-major in 128-byte-swizzled shared memory;
 * accumulate when scale_d != 0, overwrite when 0. d[i*4 + e]: row (warp%4)*16 + lane/4 + 8*(e>>1),
 * column i*8 + (lane%4)*2 + (e&1). */
__device__ __forceinline__ void wgmma_m64n256k16(float (&d)[128], uint64_t desc_a, uint64_t desc_b, int scale_d) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, %128, %129, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
          "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
          "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
          "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
          "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),
          "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
          "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]),
          "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),
          "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
        : "l"(desc_a), "l"(desc_b), "r"(scale_d));
#else
    __trap(); /* only the sm_90a build has wgmma; the host never launches this kernel elsewhere */
#endif
}


/* The same with a 64 x 128 accumulator (64 registers). */
__device__ __forceinline__ void wgmma_m64n128k16(float (&d)[64], uint64_t desc_a, uint64_t desc_b, int scale_d) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "l"(desc_a), "l"(desc_b), "r"(scale_d));
#else
    __trap();
#endif
}

/* d[i*4 + e] as for wgmma_m64n256k16; TBN is the tile width (the accumulator has TBN / 2 floats) */
template <int TBN> __device__ __forceinline__ void wgmma_tile(float (&d)[TBN / 2], uint64_t da, uint64_t db, int sd);
template <> __device__ __forceinline__ void wgmma_tile<256>(float (&d)[128], uint64_t da, uint64_t db, int sd) {
    wgmma_m64n256k16(d, da, db, sd);
}
template <> __device__ __forceinline__ void wgmma_tile<128>(float (&d)[64], uint64_t da, uint64_t db, int sd) {
    wgmma_m64n128k16(d, da, db, sd);
}

__device__ __forceinline__ void stmatrix_x4(uint32_t addr, const uint32_t (&r)[4]) {
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(r[0]), "r"(r[1]),
                 "r"(r[2]), "r"(r[3])
                 : "memory");
}
__device__ __forceinline__ uint4 lds128(uint32_t addr) {
    uint4 v;
    asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(addr) : "memory");
    return v;
}

template <int TBN>
__device__ __forceinline__ void load_stage_w(const TileArgs &a, uint32_t sA, uint32_t sB, int64_t row0,
                                             int64_t col0, int k0, int tid) {
#pragma unroll
    for (int i = 0; i < (WBM * BK / 8) / THREADS; i++) {
        int c = tid + i * THREADS, r = c >> 3, ch = c & 7;
        int64_t gr = row0 + r;
        bool v = gr < a.row_end;
        cp_async16(sA + 2 * swz(r, ch), a.H + (v ? gr : a.row_begin) * a.d + k0 + ch * 8, v ? 16 : 0);
    }
#pragma unroll
    for (int i = 0; i < (TBN * BK / 8) / THREADS; i++) {
        int c = tid + i * THREADS, r = c >> 3, ch = c & 7;
        int64_t gc = col0 + r;
        bool v = gc < a.col_end;
        cp_async16(sB + 2 * swz(r, ch), a.W + (v ? gc : 0) * a.d + k0 + ch * 8, v ? 16 : 0);
    }
}

/* One half (h: rows lane/4 and lane/4 + 8) of a warp's dZ rows of a tile, through the warp's
 * 512-byte shared scratch (see wg_tile_epilogue). PLAIN: no target column (tl < 0) and no padding
 * (lim = TBN) anywhere in the warp's rows. */
template <int TBN, bool PLAIN>
__device__ __forceinline__ void store_dz_rows(const float (&acc)[TBN / 2], int h, int lane, float lse2, int tl,
                                              int lim, uint32_t st_addr, uint32_t ld_addr, bf16 *out, bool row_in) {
    const int q = lane & 3;
#pragma unroll
    for (int g = 0; g < TBN / 32; g++) {
        uint32_t w[4];
#pragma unroll
        for (int m = 0; m < 4; m++) {
            const int i = g * 4 + m;
            float v[2];
#pragma unroll
            for (int j = 0; j < 2; j++) {
                v[j] = ex2(fmaf(acc[i * 4 + h * 2 + j], L2E, -lse2));
                if (!PLAIN) {
                    const int col = i * 8 + q * 2 + j; /* within the tile */
                    if (col == tl) v[j] -= 1.0f;
                    if (col >= lim) v[j] = 0.0f; /* padding of the window */
                }
            }
            __nv_bfloat162 b = __floats2bfloat162_rn(v[0], v[1]);
            w[m] = *reinterpret_cast<uint32_t *>(&b);
        }
        stmatrix_x4(st_addr, w);
        __syncwarp();
        const uint4 o = lds128(ld_addr);
        __syncwarp(); /* the next group's stmatrix overwrites the scratch */
        if (row_in) *reinterpret_cast<uint4 *>(out + (g * 4 + q) * 8) = o;
    }
}

/* Epilogue of one 128 x TBN logit tile held by a warpgroup (acc[i*4 + e]: row rows[e>>1], column
 * tile_col0 + i*8 + (lane&3)*2 + (e&1)): MODE_STATS updates the running max and sum and picks up the
 * target logit; MODE_DZ writes dZ = softmax - onehot. */
template <int MODE, int TBN>
__device__ __forceinline__ void wg_tile_epilogue(const TileArgs &a, const float (&acc)[TBN / 2], int64_t tile_col0,
                                                 int lane, const int64_t (&rows)[2], const int (&tgt)[2],
                                                 float (&m_run)[2], float (&a_run)[2], const float (&lse2)[2],
                                                 uint32_t scratch) {
    const int64_t cbase = tile_col0 + (lane & 3) * 2;
    const bool full = tile_col0 + TBN <= a.col_end;
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int t = tgt[h];
        if (MODE == MODE_STATS) {
            float mx = -INFINITY;
            if (full) {
#pragma unroll
                for (int i = 0; i < TBN / 8; i++) mx = fmaxf(mx, fmaxf(acc[i * 4 + h * 2], acc[i * 4 + h * 2 + 1]));
            } else {
#pragma unroll
                for (int i = 0; i < TBN / 8; i++)
#pragma unroll
                    for (int j = 0; j < 2; j++)
                        if (cbase + i * 8 + j < a.col_end) mx = fmaxf(mx, acc[i * 4 + h * 2 + j]);
            }
            const float mn = fmaxf(m_run[h], mx);
            const float mu2 = (mn == -INFINITY ? 0.0f : mn) * L2E;
            float s0 = a_run[h] * ex2(fmaf(m_run[h], L2E, -mu2)), s1 = 0.0f;
            if (full) {
#pragma unroll
                for (int i = 0; i < TBN / 8; i++) {
                    s0 += ex2(fmaf(acc[i * 4 + h * 2], L2E, -mu2));
                    s1 += ex2(fmaf(acc[i * 4 + h * 2 + 1], L2E, -mu2));
                }
            } else { /* the last tile: columns past V add nothing */
#pragma unroll
                for (int i = 0; i < TBN / 8; i++) {
                    if (cbase + i * 8 < a.col_end) s0 += ex2(fmaf(acc[i * 4 + h * 2], L2E, -mu2));
                    if (cbase + i * 8 + 1 < a.col_end) s1 += ex2(fmaf(acc[i * 4 + h * 2 + 1], L2E, -mu2));
                }
            }
            a_run[h] = s0 + s1;
            m_run[h] = mn;
            if (t >= tile_col0 && t < tile_col0 + TBN) { /* rare: the target is in this tile */
#pragma unroll
                for (int i = 0; i < TBN / 8; i++)
#pragma unroll
                    for (int j = 0; j < 2; j++)
                        if (cbase + i * 8 + j == t) a.zt[rows[h]] = acc[i * 4 + h * 2 + j];
            }
        } else {
            /* dZ = (softmax - onehot) in bf16, written 16 bytes per lane: a warp holds, per group of
             * four column octets, 8 rows x 32 columns whose octets are spread over the quads'
             * lanes; stmatrix puts them in its shared scratch as rows of 16 bytes and each lane reads
             * one back (an octet of its own row), so every store fills whole sectors (four 4-byte
             * stores per lane wrote 16 of every 32 bytes per row and cost 4x the instructions).
             * Ignored rows have lse2 = +inf, so their softmax is 0 without a multiply. */
            const int tl = t >= tile_col0 && t < tile_col0 + TBN ? (int)(t - tile_col0) : -1;
            const uint32_t st_addr = scratch + (uint32_t)(((lane & 7) * 4 + ((lane >> 3) ^ ((lane >> 1) & 3))) * 16);
            const uint32_t ld_addr = scratch + (uint32_t)(((lane >> 2) * 4 + ((lane & 3) ^ ((lane >> 3) & 3))) * 16);
            bf16 *out = a.dz + (rows[h] - a.row_begin) * a.ldz + (tile_col0 - a.col_begin);
            const bool row_in = rows[h] < a.row_end;
            /* nearly every tile holds none of its 16 rows' targets and lies inside the vocabulary:
             * there each element is one FMA and one exponential (the vote keeps the warp's path
             * uniform, as stmatrix needs) */
            if (__all_sync(0xffffffffu, full && tl < 0))
                store_dz_rows<TBN, true>(acc, h, lane, lse2[h], -1, TBN, st_addr, ld_addr, out, row_in);
            else
                store_dz_rows<TBN, false>(acc, h, lane, lse2[h], tl, full ? TBN : (int)(a.col_end - tile_col0),
                                          st_addr, ld_addr, out, row_in);
        }
    }
}

/* Start of a row block for one thread's two rows (first_row and first_row + 8): their indices,
 * targets (-1 past the end), empty running statistics and, for dZ, lse in log2 units (+inf for an
 * ignored row, whose dZ is then 0). */
template <int MODE>
__device__ __forceinline__ void wg_row_block_begin(const TileArgs &a, int64_t first_row, int64_t (&rows)[2],
                                                   int (&tgt)[2], float (&m_run)[2], float (&a_run)[2],
                                                   float (&lse2)[2]) {
#pragma unroll
    for (int h = 0; h < 2; h++) {
        rows[h] = first_row + h * 8;
        bool in = rows[h] < a.row_end;
        tgt[h] = in ? a.targets[rows[h]] : -1;
        m_run[h] = -INFINITY;
        a_run[h] = 0.0f;
        lse2[h] = (MODE == MODE_DZ && in && tgt[h] >= 0) ? a.lse[rows[h]] * L2E : INFINITY;
    }
}

/* End of a window for one row block: merge the quad's statistics and store (max, sum) per row. */
template <int MODE>
__device__ __forceinline__ void wg_window_end(const TileArgs &a, int64_t win, int lane, const int64_t (&rows)[2],
                                              const float (&m_run)[2], const float (&a_run)[2]) {
    if (MODE == MODE_STATS) {
#pragma unroll
        for (int h = 0; h < 2; h++) {
            float m = m_run[h], s = a_run[h];
#pragma unroll
            for (int off = 1; off <= 2; off <<= 1) {
                float m2 = __shfl_xor_sync(0xffffffffu, m, off), s2 = __shfl_xor_sync(0xffffffffu, s, off);
                float mn = fmaxf(m, m2), mu = mn == -INFINITY ? 0.0f : mn;
                s = s * ex2((m - mu) * L2E) + s2 * ex2((m2 - mu) * L2E);
                m = mn;
            }
            if ((lane & 3) == 0 && rows[h] < a.row_end) {
                a.win_m[win * a.stats_ld + (rows[h] - a.row_begin)] = m;
                a.win_a[win * a.stats_ld + (rows[h] - a.row_begin)] = s;
            }
        }
    }
}

template <int MODE, int TBN>
__global__ void __launch_bounds__(THREADS, WShape<TBN>::min_ctas) tile_kernel_wgmma(const TileArgs a) {
    typedef WShape<TBN> S;
    constexpr int NACC = TBN / 2;
    extern __shared__ unsigned char smem_raw[];
    const uint32_t ring = (smem_u32(smem_raw) + 1023) & ~1023u;

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wg = warp >> 2, wq = warp & 3; /* warpgroup (64 rows each), warp within it (16 rows) */
    const int64_t win = MODE == MODE_STATS ? blockIdx.x : blockIdx.y;
    /* row blocks of this CTA: rb_first, rb_first + rb_stride, ... (the forward's CTAs are
     * persistent and sweep their window for one row block after another in lockstep, so the W
     * tiles they stream are shared in L2; the backward's CTAs take one row block each) */
    const int64_t rb_first = MODE == MODE_STATS ? blockIdx.y : blockIdx.x;
    const int64_t rb_stride = MODE == MODE_STATS ? gridDim.y : gridDim.x;
    const int64_t nrb = (a.row_end - a.row_begin + WBM - 1) / WBM;
    const int64_t my_rbs = rb_first < nrb ? (nrb - rb_first + rb_stride - 1) / rb_stride : 0;
    const int64_t ntiles = (a.col_end - a.col_begin + TBN - 1) / TBN;
    const int64_t t0 = win * a.tiles_per_cta;
    const int64_t t1 = min(t0 + (int64_t)a.tiles_per_cta, ntiles);
    const int KT = a.d / BK;
    const int64_t iters = my_rbs * (t1 - t0) * KT;
    const int64_t wcol0 = a.col_begin + t0 * TBN, wcol1 = a.col_begin + t1 * TBN;

    float acc[NACC];
#pragma unroll
    for (int i = 0; i < NACC; i++) acc[i] = 0.0f;

    /* loader state: the (row block, tile, k chunk) it loads next, in the order they are consumed */
    int ld_kc = 0, ld_stage = 0;
    int64_t ld_col0 = wcol0, ld_row0 = a.row_begin + rb_first * WBM;
#pragma unroll
    for (int s = 0; s < S::ahead; s++) {
        if (s < iters) {
            const uint32_t base = ring + ld_stage * S::stage_bytes;
            load_stage_w<TBN>(a, base, base + W_A_BYTES, ld_row0, ld_col0, ld_kc * BK, tid);
            if (++ld_kc == KT) {
                ld_kc = 0, ld_col0 += TBN;
                if (ld_col0 == wcol1) ld_col0 = wcol0, ld_row0 += rb_stride * WBM;
            }
            ld_stage++;
        }
        cp_async_commit();
    }

    int stage = 0;
    int64_t it = 0;
    for (int64_t rbi = rb_first; rbi < nrb; rbi += rb_stride) {
        const int64_t row0 = a.row_begin + rbi * WBM;
        int tgt[2];
        float m_run[2], a_run[2], lse2[2];
        int64_t rows[2];
        wg_row_block_begin<MODE>(a, row0 + wg * 64 + wq * 16 + (lane >> 2), rows, tgt, m_run, a_run, lse2);

        for (int64_t tile_col0 = wcol0; tile_col0 < wcol1; tile_col0 += TBN) {
            /* a plain inner K loop (not one flattened loop with a conditional epilogue): ptxas then
             * sees the accumulators stay in flight only along the chain of wgmma and inserts no waits */
            for (int kc = 0; kc < KT; kc++, it++) {
                /* Stage `it` has landed (this thread's copies), is made visible to the async proxy
                 * and, by the barrier, to every thread. Before the barrier every thread waited until
                 * at most wait_depth wgmma groups were in flight, so the stage loaded below (it+ahead's,
                 * which held it + ahead - stages = it - 1 - wait_depth) is no longer read. */
                cp_async_wait<S::ahead - 1>();
                fence_proxy_async();
                __syncthreads();
                if (it + S::ahead < iters) {
                    const uint32_t base = ring + ld_stage * S::stage_bytes;
                    load_stage_w<TBN>(a, base, base + W_A_BYTES, ld_row0, ld_col0, ld_kc * BK, tid);
                    if (++ld_kc == KT) {
                        ld_kc = 0, ld_col0 += TBN;
                        if (ld_col0 == wcol1) ld_col0 = wcol0, ld_row0 += rb_stride * WBM;
                    }
                    ld_stage = ld_stage + 1 == S::stages ? 0 : ld_stage + 1;
                }
                cp_async_commit();

                const uint32_t sA = ring + stage * S::stage_bytes + wg * (64 * BK * 2);
                const uint32_t sB = ring + stage * S::stage_bytes + W_A_BYTES;
                fence_acc(acc);
                wgmma_fence();
#pragma unroll
                for (int kk = 0; kk < BK / 16; kk++)
                    wgmma_tile<TBN>(acc, smem_desc(sA + kk * 32), smem_desc(sB + kk * 32), (kc | kk) != 0);
                wgmma_commit();
                stage = stage + 1 == S::stages ? 0 : stage + 1;
                wgmma_wait<S::wait_depth>();
                fence_acc(acc);
            }
            wgmma_wait<0>();
            fence_acc(acc);

            /* the next tile starts with scale_d = 0 */
            wg_tile_epilogue<MODE, TBN>(a, acc, tile_col0, lane, rows, tgt, m_run, a_run, lse2,
                                        ring + S::stages * S::stage_bytes + warp * 512);
        }
        wg_window_end<MODE>(a, win, lane, rows, m_run, a_run);
    } /* row blocks */
}

/* ---- Hopper tile kernel fed by TMA (sm_90a) ------------------------------------------------- */
/* The 128 x 256 wgmma tile of tile_kernel_wgmma, fed by the tensor memory accelerator: one thread
 * (thread 0) issues two bulk tensor copies per stage, completing on the stage's "full" mbarrier,
 * STAGES - 1 stages ahead; both warpgroups wait on "full", run their wgmma (64 rows each), and
 * release the stage on its "empty" mbarrier once the wgmma completed. No __syncthreads and no
 * address arithmetic for the copies in the main loop; rows and columns past the tensors' ends are
 * zero-filled by the TMA unit; its 128-byte swizzle is the layout the wgmma descriptors describe.
 * (A separate producer warp would cap the consumers at 168 registers, and the accumulator plus
 * the softmax epilogue need more.) */

#define T_STAGES 4
#define T_THREADS 256
#define T_STAGE_BYTES (W_A_BYTES + 256 * BK * 2)           /* 48 KiB */
#define T_SMEM (T_STAGES * T_STAGE_BYTES + 1024 + 128 + DZ_SCRATCH_BYTES) /* ring, slack, barriers, scratch */

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
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const CUtensorMap *map, int c0, int c1, uint32_t bar) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(
            dst),
        "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(bar)
        : "memory");
}

/* CL > 1: the CTAs of a CL-CTA cluster take the CL row blocks of a unit of CL x 128 rows against
 * the same W tiles: each CTA's copy engine fetches 1/CL of every W stage and multicasts it into all
 * of them, so W is read from L2 once per cluster (a CTA's L2 reads per stage drop from 48 KiB to
 * 16 + 32/CL KiB). A stage is refilled only when the consumers of every CTA released it (each warp
 * arrives on every CTA's "empty" barrier); all CTAs run the same number of iterations (rows past
 * the end are zeros). */
template <int MODE, int CL>
__global__ void __launch_bounds__(T_THREADS, 1)
    tile_kernel_tma(const TileArgs a, const __grid_constant__ CUtensorMap tm_h, const __grid_constant__ CUtensorMap tm_w) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    constexpr int TBN = 256, NACC = 128;
    extern __shared__ unsigned char smem_raw[];
    const uint32_t ring = (smem_u32(smem_raw) + 1023) & ~1023u;
    const uint32_t full_bar = ring + T_STAGES * T_STAGE_BYTES, empty_bar = full_bar + 8 * T_STAGES;

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wg = warp >> 2, wq = warp & 3;
    const int64_t win = MODE == MODE_STATS ? blockIdx.x : blockIdx.y;
    /* row-block slots: the cluster's axis; unit q (CL row blocks) and this CTA's block within it */
    const int64_t slot = MODE == MODE_STATS ? blockIdx.y : blockIdx.x;
    const int64_t nslots = MODE == MODE_STATS ? gridDim.y : gridDim.x;
    const uint32_t rank = CL > 1 ? cluster_rank() : 0;
    const int64_t q_first = slot / CL, q_stride = nslots / CL;
    const int64_t nrb = (a.row_end - a.row_begin + WBM - 1) / WBM, nunits = (nrb + CL - 1) / CL;
    const int64_t my_units = q_first < nunits ? (nunits - q_first + q_stride - 1) / q_stride : 0;
    const int64_t ntiles = (a.col_end - a.col_begin + TBN - 1) / TBN;
    const int64_t t0 = win * a.tiles_per_cta;
    const int64_t t1 = min(t0 + (int64_t)a.tiles_per_cta, ntiles);
    const int KT = a.d / BK;
    const int64_t iters = my_units * (t1 - t0) * KT;
    const int64_t wcol0 = a.col_begin + t0 * TBN, wcol1 = a.col_begin + t1 * TBN;

    if (tid == 0) {
        for (int s = 0; s < T_STAGES; s++) {
            mbar_init(full_bar + 8 * s, 1);       /* the issuing thread's arrive + the copies' bytes */
            mbar_init(empty_bar + 8 * s, 8 * CL); /* every warp of every CTA, after its wgmma on the stage */
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    if (CL > 1)
        cluster_sync_all(); /* the peer's barriers are initialised before any copy or arrive reaches them */
    else
        __syncthreads();

    /* the copy issuer's position in the (unit, tile, k chunk) sequence (used by thread 0) */
    int64_t ld_it = 0, ld_row0 = a.row_begin + (q_first * CL + rank) * WBM, ld_col0 = wcol0;
    int ld_kc = 0;
    auto issue = [&]() {
        const int s = (int)(ld_it % T_STAGES);
        if (ld_it >= T_STAGES) mbar_wait(empty_bar + 8 * s, (uint32_t)((ld_it / T_STAGES - 1) & 1));
        const uint32_t base = ring + s * T_STAGE_BYTES;
        mbar_expect_tx(full_bar + 8 * s, T_STAGE_BYTES); /* H + the whole W stage, whoever fetches it */
        tma_load_2d(base, &tm_h, ld_kc * BK, (int)ld_row0, full_bar + 8 * s);
        if (CL > 1)
            tma_load_2d_multicast(base + W_A_BYTES + rank * (TBN / CL) * BK * 2, &tm_w, ld_kc * BK,
                                  (int)(ld_col0 + rank * (TBN / CL)), full_bar + 8 * s, (uint16_t)((1u << CL) - 1));
        else
            tma_load_2d(base + W_A_BYTES, &tm_w, ld_kc * BK, (int)ld_col0, full_bar + 8 * s);
        ld_it++;
        if (++ld_kc == KT) {
            ld_kc = 0, ld_col0 += TBN;
            if (ld_col0 == wcol1) ld_col0 = wcol0, ld_row0 += q_stride * CL * WBM;
        }
    };
    if (tid == 0)
        while (ld_it < iters && ld_it < T_STAGES - 1) issue();

    float acc[NACC];
#pragma unroll
    for (int i = 0; i < NACC; i++) acc[i] = 0.0f;
    int64_t it = 0;
    for (int64_t u = q_first; u < nunits; u += q_stride) {
        const int64_t row0 = a.row_begin + (u * CL + rank) * WBM;
        int tgt[2];
        float m_run[2], a_run[2], lse2[2];
        int64_t rows[2];
        wg_row_block_begin<MODE>(a, row0 + wg * 64 + wq * 16 + (lane >> 2), rows, tgt, m_run, a_run, lse2);
        for (int64_t tile_col0 = wcol0; tile_col0 < wcol1; tile_col0 += TBN) {
            for (int kc = 0; kc < KT; kc++, it++) {
                const int s = (int)(it % T_STAGES);
                mbar_wait(full_bar + 8 * s, (uint32_t)((it / T_STAGES) & 1));
                const uint32_t sA = ring + s * T_STAGE_BYTES + wg * (64 * BK * 2);
                const uint32_t sB = ring + s * T_STAGE_BYTES + W_A_BYTES;
                __syncwarp(); /* wgmma is .aligned: the warp must be converged after the waits */
                fence_acc(acc);
                wgmma_fence();
#pragma unroll
                for (int kk = 0; kk < BK / 16; kk++)
                    wgmma_m64n256k16(acc, smem_desc(sA + kk * 32), smem_desc(sB + kk * 32), (kc | kk) != 0);
                wgmma_commit();
                /* keep STAGES - 1 stages in flight: the stage refilled here is released once every
                 * warp (of both CTAs) finished iteration it - 1. Thread 0 waits for that while its
                 * own wgmma runs, so a late peer (a remote arrive takes a while) stalls no MMA. */
                if (tid == 0 && ld_it < iters) issue();
                __syncwarp();
                /* the other warpgroup's wgmma keeps the tensor cores busy while this one waits */
                wgmma_wait<0>();
                fence_acc(acc);
                __syncwarp();
                /* the last lane: thread 0, the copy issuer, would first wait for its own copies */
                if (lane == 31) {
                    if (CL > 1)
#pragma unroll
                        for (int c = 0; c < CL; c++) mbar_arrive_cluster(empty_bar + 8 * s, (uint32_t)c);
                    else
                        mbar_arrive(empty_bar + 8 * s);
                }
            }
            /* launched early (launch_tma): the previous kernel may still read the dZ buffer */
            if (MODE == MODE_DZ && it == KT) asm volatile("griddepcontrol.wait;\n" ::: "memory");
            wg_tile_epilogue<MODE, TBN>(a, acc, tile_col0, lane, rows, tgt, m_run, a_run, lse2,
                                        full_bar + 128 + warp * 512);
        }
        wg_window_end<MODE>(a, win, lane, rows, m_run, a_run);
    }
    if (CL > 1) cluster_sync_all(); /* no CTA leaves while its peer may still signal its barriers */
#else
    __trap();
#endif
}

/* lse = M + log sum_w a_w exp(m_w - M) over the windows, loss = lse - z_target (0 if ignored). */
__global__ void fused_merge_kernel(const float *win_m, const float *win_a, int nwin, int64_t ld, const float *zt,
                                   const int32_t *targets, int64_t N, float *lse_out, float *lse_user,
                                   float *row_loss) {
    const int64_t row = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= N) return;
    float M = -INFINITY;
    for (int w = 0; w < nwin; w++) M = fmaxf(M, win_m[w * ld + row]);
    float S = 0.0f;
    for (int w = 0; w < nwin; w++) S += win_a[w * ld + row] * ex2((win_m[w * ld + row] - M) * L2E);
    const float lse = M + logf(S);
    const int t = targets[row];
    row_loss[row] = t == -1 ? 0.0f : lse - zt[row];
    lse_out[row] = lse;
    if (lse_user) lse_user[row] = lse;
}

__global__ void cast_rows_kernel(bf16 *out, const float *in, int64_t n8) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n8) return;
    const float4 x = reinterpret_cast<const float4 *>(in)[2 * i], y = reinterpret_cast<const float4 *>(in)[2 * i + 1];
    __nv_bfloat162 o[4] = {__floats2bfloat162_rn(x.x, x.y), __floats2bfloat162_rn(x.z, x.w),
                           __floats2bfloat162_rn(y.x, y.y), __floats2bfloat162_rn(y.z, y.w)};
    reinterpret_cast<int4 *>(out)[i] = *reinterpret_cast<int4 *>(o);
}

/* ---- host side ---------------------------------------------------------------------------- */

static int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
static int64_t rup(int64_t a, int64_t b) { return cdiv(a, b) * b; }

/* The tile kernels: TMA-fed wgmma on Hopper (the default there), mma.sync everywhere else. The
 * others are selectable with output_layer_select_tile_kernel, for tests and benchmarks. */
typedef void (*TmaKernel)(const TileArgs, const CUtensorMap, const CUtensorMap);
typedef struct {
    const char *name;
    int bn, smem, slots_per_sm;
    int persistent; /* forward CTAs loop over row blocks (wgmma kernels) */
    int threads;
    int cluster; /* CTAs per cluster along the row blocks (TMA multicast of W), 1 otherwise */
    void (*stats)(TileArgs); /* cp.async kernels */
    void (*dz)(TileArgs);
    TmaKernel stats_tma, dz_tma; /* TMA kernels (then stats and dz are NULL) */
    int clusters_resident;       /* cluster kernels: how many clusters the GPU holds at once */
} Variant;

enum { K_MMA = 0, K_WGMMA_256 = 1, K_WGMMA_128 = 2, K_TMA = 3, K_TMA_CLUSTER = 4, K_COUNT };
static int g_kernel_choice; /* OUTPUT_TILE_KERNEL_* */

void output_layer_select_tile_kernel(int kernel) { g_kernel_choice = kernel; }

/* A launch of a TMA tile kernel in clusters of k->cluster CTAs along the grid axis of the row
 * blocks (y for the forward's statistics, x for the backward's dZ); *at must outlive the config. */
static cudaLaunchConfig_t cluster_config(const Variant *k, dim3 grid, int rows_on_y, cudaLaunchAttribute *at,
                                         cudaStream_t stream) {
    *at = cudaLaunchAttribute{};
    at->id = cudaLaunchAttributeClusterDimension;
    at->val.clusterDim.x = rows_on_y ? 1u : (unsigned)k->cluster;
    at->val.clusterDim.y = rows_on_y ? (unsigned)k->cluster : 1u;
    at->val.clusterDim.z = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid, cfg.blockDim = dim3((unsigned)k->threads), cfg.dynamicSmemBytes = (size_t)k->smem;
    cfg.stream = stream, cfg.attrs = at, cfg.numAttrs = 1;
    return cfg;
}

static Variant *variants(int *major_out) {
    static Variant v[K_COUNT];
    static int ready, major;
    if (!ready) {
        int dev;
        CUDA_CHECK(cudaGetDevice(&dev));
        CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
        v[K_MMA] = (Variant){"mma.sync 128x128", BN, SMEM_BYTES, 0, 0, THREADS, 1, tile_kernel_mma<MODE_STATS>,
                             tile_kernel_mma<MODE_DZ>, NULL, NULL};
        v[K_WGMMA_256] = (Variant){"wgmma 128x256", 256, WShape<256>::smem, 0, 1, THREADS, 1,
                                   tile_kernel_wgmma<MODE_STATS, 256>, tile_kernel_wgmma<MODE_DZ, 256>, NULL, NULL};
        v[K_WGMMA_128] = (Variant){"wgmma 128x128", 128, WShape<128>::smem, 0, 1, THREADS, 1,
                                   tile_kernel_wgmma<MODE_STATS, 128>, tile_kernel_wgmma<MODE_DZ, 128>, NULL, NULL};
        v[K_TMA] = (Variant){"wgmma 128x256 + TMA", 256, T_SMEM, 0, 1, T_THREADS, 1, NULL, NULL,
                             tile_kernel_tma<MODE_STATS, 1>, tile_kernel_tma<MODE_DZ, 1>};
        v[K_TMA_CLUSTER] = (Variant){"wgmma 128x256 + TMA, 2-CTA clusters sharing W", 256, T_SMEM, 0, 1, T_THREADS, 2,
                                     NULL, NULL, tile_kernel_tma<MODE_STATS, 2>, tile_kernel_tma<MODE_DZ, 2>};
        for (int k = 0; k < (major == 9 ? K_COUNT : 1); k++) {
            const void *fs = v[k].stats ? (const void *)v[k].stats : (const void *)v[k].stats_tma;
            const void *fd = v[k].dz ? (const void *)v[k].dz : (const void *)v[k].dz_tma;
            CUDA_CHECK(cudaFuncSetAttribute(fs, cudaFuncAttributeMaxDynamicSharedMemorySize, v[k].smem));
            CUDA_CHECK(cudaFuncSetAttribute(fd, cudaFuncAttributeMaxDynamicSharedMemorySize, v[k].smem));
            CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&v[k].slots_per_sm, fs, v[k].threads, v[k].smem));
            if (v[k].slots_per_sm < 1) v[k].slots_per_sm = 1;
            if (v[k].cluster > 1) {
                /* a cluster's CTAs share a GPC, so an odd SM left in a GPC holds none */
                cudaLaunchAttribute at;
                const cudaLaunchConfig_t cfg = cluster_config(&v[k], dim3((unsigned)v[k].cluster * 64), 0, &at, 0);
                CUDA_CHECK(cudaOccupancyMaxActiveClusters(&v[k].clusters_resident, fs, &cfg));
                if (v[k].clusters_resident < 1) v[k].clusters_resident = 1;
            }
        }
        ready = 1;
    }
    *major_out = major;
    return v;
}

static int64_t env_int(const char *name, int64_t lo, int64_t hi, int64_t multiple, int64_t dflt, int *set);

static const Variant *variant(void) {
    int major;
    Variant *v = variants(&major);
    if (major != 9) return &v[K_MMA]; /* wgmma exists on sm_90a only */
    /* FUSEDGPT_OUTL_KERNEL (an OUTPUT_TILE_KERNEL_* number) picks the kernel where no call did: for
     * comparing kernels inside the trainer */
    static int env_choice = -1;
    if (env_choice < 0) {
        int set = 0;
        env_choice = (int)env_int("FUSEDGPT_OUTL_KERNEL", 0, OUTPUT_TILE_KERNEL_TMA_CLUSTER, 1, 0, &set);
    }
    switch (g_kernel_choice ? g_kernel_choice : env_choice) {
    case OUTPUT_TILE_KERNEL_MMA: return &v[K_MMA];
    case OUTPUT_TILE_KERNEL_WGMMA_128x256: return &v[K_WGMMA_256];
    case OUTPUT_TILE_KERNEL_WGMMA_128x128: return &v[K_WGMMA_128];
    case OUTPUT_TILE_KERNEL_TMA: return &v[K_TMA];
    case OUTPUT_TILE_KERNEL_TMA_CLUSTER: return &v[K_TMA_CLUSTER];
    default: return &v[K_TMA_CLUSTER]; /* measured fastest on the H100 (dev/RESULTS.md) */
    }
}

const char *output_layer_tile_kernel_name(void) {
    static char buf[160];
    const Variant *k = variant();
    if (k->cluster == 1) return k->name;
    snprintf(buf, sizeof buf, "%s (%d clusters resident)", k->name, k->clusters_resident);
    return buf;
}

/* the most resident CTAs of any kernel, for bounds that must hold whichever kernel runs */
int outl_fused_slots_per_sm(void) {
    int major, m = 1;
    Variant *v = variants(&major);
    for (int k = 0; k < (major == 9 ? K_COUNT : 1); k++) m = v[k].slots_per_sm > m ? v[k].slots_per_sm : m;
    return m;
}

/* Row blocks a kernel's CTAs work on together (a cluster's), and how many such units are resident */
static int unit_rows(const Variant *k) { return BM * k->cluster; }
static int64_t resident_units(const Variant *k, int sms) {
    return k->cluster > 1 ? k->clusters_resident : (int64_t)sms * k->slots_per_sm;
}

/* early: a programmatic dependent launch. Its CTAs may start while the previous kernel on the
 * stream (a backward GEMM) is finishing, and load and multiply their first tile meanwhile; the
 * kernel waits for that kernel's completion (griddepcontrol.wait) before it writes the dZ buffer
 * that GEMM reads. Only where the previous kernel is ours to know: it must not write H, W, lse or
 * targets. */
static void launch_tma(const Variant *k, TmaKernel f, dim3 grid, int rows_on_y, int early, const TileArgs &t,
                       const CUtensorMap &tm_h, const CUtensorMap &tm_w, cudaStream_t stream) {
    cudaLaunchAttribute at[2];
    cudaLaunchConfig_t cfg = cluster_config(k, grid, rows_on_y, &at[0], stream);
    if (early) {
        at[1] = cudaLaunchAttribute{};
        at[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        at[1].val.programmaticStreamSerializationAllowed = 1;
        cfg.numAttrs = 2;
    }
    CUDA_CHECK(cudaLaunchKernelEx(&cfg, f, t, tm_h, tm_w));
}

/* Forward windows: at least two waves of CTAs, few enough rows in flight that their H blocks stay
 * in L2, then the count (within +8) whose last wave is fullest. Returns tiles per CTA. */
static int64_t forward_tiles_per_cta(int64_t N, int64_t V, int d, int slots, int bn, int64_t *nwin_out) {
    const int64_t rb = cdiv(N, BM), ntiles = cdiv(V, bn);
    int64_t nmin = cdiv(2 * (int64_t)slots, rb);
    int64_t l2min = cdiv((int64_t)slots * BM * d * 2, L2_H_BUDGET);
    if (l2min > nmin) nmin = l2min;
    if (nmin > ntiles) nmin = ntiles;
    int64_t best_tpc = cdiv(ntiles, nmin), best_n = cdiv(ntiles, best_tpc);
    double best_eff = 0.0;
    for (int64_t n = nmin; n <= nmin + 8 && n <= ntiles; n++) {
        int64_t tpc = cdiv(ntiles, n), ne = cdiv(ntiles, tpc), ctas = rb * ne;
        double eff = (double)ctas / (double)(cdiv(ctas, slots) * slots);
        if (eff > best_eff + 1e-3) best_eff = eff, best_tpc = tpc, best_n = ne;
    }
    *nwin_out = best_n;
    return best_tpc;
}

/* Backward workspace budgets, from the environment for tuning (dev/output_layer_sweep.sh), read
 * once per process so that workspace_bytes and create always agree:
 *   FUSEDGPT_OUTL_DZ_MB       dZ window budget in MiB (default 64, or 128 for the square windows of
 *                             outl_fused_sizes): window columns = budget / rows
 *                             (2 B each), rounded down to 256 and capped at MAX_WINDOW_COLS
 *   FUSEDGPT_OUTL_CHUNK_ROWS  most rows per chunk, a multiple of 128 (default 4096); also lifts the
 *                             dH budget to exactly that many rows (dh_acc = rows x d x 4 B) unless
 *   FUSEDGPT_OUTL_DH_MB       fp32 dH chunk budget in MiB (default 32) is set too (rows = the smaller)
 *   FUSEDGPT_OUTL_LT_MB       cuBLASLt's scratch in MiB (default 1; both layers)
 *   FUSEDGPT_OUTL_KERNEL      the tile kernel, an OUTPUT_TILE_KERNEL_* number (see variant())
 * An invalid value is a one-line error (exit 1), never silently the default. */
typedef struct {
    int64_t dz_elems, dh_elems, max_rows; /* dh_elems 0: max_rows x d when rows_set, else the default */
    int64_t lt_bytes;
    int dz_set, rows_set, dh_set, overridden;
} Budgets;

static int64_t env_int(const char *name, int64_t lo, int64_t hi, int64_t multiple, int64_t dflt, int *set) {
    const char *v = getenv(name);
    if (!v || !*v) return dflt;
    char *end;
    errno = 0;
    const long long x = strtoll(v, &end, 10);
    if (errno || *end || x < lo || x > hi || x % multiple) {
        fprintf(stderr, "error: output layer: %s=%s is not an integer in [%lld, %lld]%s\n", name, v, (long long)lo,
                (long long)hi, multiple > 1 ? ", multiple of 128" : "");
        exit(1);
    }
    *set = 1;
    return x;
}

static const Budgets *budgets(void) {
    static Budgets b;
    static int done; /* any thread that races here computes the same values */
    if (!done) {
        int dz = 0, rows = 0, dh = 0, lt = 0;
        b.dz_elems = env_int("FUSEDGPT_OUTL_DZ_MB", 1, 16384, 1, DZ_BUDGET_ELEMS >> 19, &dz) << 19;
        b.max_rows = env_int("FUSEDGPT_OUTL_CHUNK_ROWS", BM, (int64_t)1 << 22, BM, MAX_CHUNK_ROWS, &rows);
        b.dh_elems = env_int("FUSEDGPT_OUTL_DH_MB", 1, 65536, 1, 0, &dh) << 18;
        b.lt_bytes = env_int("FUSEDGPT_OUTL_LT_MB", 1, 1024, 1, OUTL_LT_WORKSPACE_DEFAULT >> 20, &lt) << 20;
        b.dz_set = dz, b.rows_set = rows, b.dh_set = dh;
        b.overridden = dz || rows || dh || lt;
        done = 1;
    }
    return &b;
}

int outl_fused_sizes_overridden(void) { return budgets()->overridden; }
size_t outl_lt_workspace_bytes(void) { return (size_t)budgets()->lt_bytes; }

OutlFusedSizes outl_fused_sizes(int64_t max_N, int64_t V, int d, int slots) {
    OutlFusedSizes s;
    const Budgets *b = budgets();
    const int64_t rb = cdiv(max_N, BM);
    /* windows x rows <= (2 slots / rb + 1 + 8 + L2 term) x rb x 128 for every N <= max_N */
    const int64_t l2min = cdiv((int64_t)slots * BM * d * 2, L2_H_BUDGET);
    s.stats_elems = (int64_t)BM * (2 * (int64_t)slots + rb * (10 + l2min));
    /* Large problems at narrow widths get square windows of 8192 x 8192 (128 MiB): faster at d = 768
     * than 4096 x 8192 (dev/RESULTS.md, 2026-11-23: 1-2 % at N = 65536, 5 % at 768/16384/50304;
     * cuBLAS runs the window's dW product at 722 instead of 604 TFLOP/s), the fp32 dH chunk of 8192
     * rows still fits its 32 MiB, and 128 MiB is at most a twelfth of the logits it stands in for
     * (>= 1.5 GiB: GPT-2 at V = 50304 from B = 16 on). */
    const bool square = !b->dz_set && !b->rows_set && !b->dh_set && (int64_t)SQUARE_WINDOW * d <= DH_BUDGET_ELEMS &&
                        max_N * V * 2 >= ((int64_t)3 << 29);
    const int64_t max_rows = square ? SQUARE_WINDOW : b->max_rows;
    const int64_t dz_elems = square ? (int64_t)SQUARE_WINDOW * SQUARE_WINDOW : b->dz_elems;
    const int64_t dh_elems = b->dh_elems ? b->dh_elems : b->rows_set ? b->max_rows * d : DH_BUDGET_ELEMS;
    int64_t rows = dh_elems / d;
    if (rows > max_rows) rows = max_rows;
    rows = rows / BM * BM;
    if (rows < BM) rows = BM;
    if (rows > rup(max_N, BM)) rows = rup(max_N, BM);
    s.chunk_rows = rows;
    /* windows are whole tiles of either kernel (256 columns) */
    int64_t cols = dz_elems / rows;
    if (cols > MAX_WINDOW_COLS) cols = MAX_WINDOW_COLS;
    cols = cols / WBN * WBN;
    if (cols < WBN) cols = WBN;
    if (cols > rup(V, WBN)) cols = rup(V, WBN);
    s.window_cols = cols;
    return s;
}

/* Persistent forward (wgmma kernels): G windows x P row-block slots = at most one CTA per
 * resident slot; each CTA sweeps its window for row blocks p, p + P, ... Every CTA does the same
 * work per row block, so they stay in step: the P CTAs of a window stream the same W tiles (read
 * from DRAM about once per pass) and the G CTAs of a row block share its H block. G is at least
 * what keeps the P row blocks' H in L2, then chosen (within +8) to waste the fewest slots. */
/* cuTensorMapEncodeTiled through the runtime's driver entry point (no link to libcuda) */
typedef CUresult (*EncodeTiledFn)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *, const cuuint64_t *,
                                  const cuuint64_t *, const cuuint32_t *, const cuuint32_t *, CUtensorMapInterleave,
                                  CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

/* A [rows x d] bf16 row-major tensor read in boxes of box_rows x 64 with the 128-byte swizzle;
 * rows past the end read as zeros. */
static CUtensorMap tensor_map(const bf16 *ptr, int64_t rows, int d, int box_rows) {
    static EncodeTiledFn encode;
    if (!encode) {
        cudaDriverEntryPointQueryResult q;
        void *fn = NULL;
        CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q));
        if (q != cudaDriverEntryPointSuccess || !fn) {
            fprintf(stderr, "error: output layer: the driver has no cuTensorMapEncodeTiled (update the driver)\n");
            exit(1);
        }
        encode = (EncodeTiledFn)fn;
    }
    CUtensorMap m;
    const cuuint64_t dims[2] = {(cuuint64_t)d, (cuuint64_t)rows};
    const cuuint64_t strides[1] = {(cuuint64_t)d * sizeof(bf16)};
    const cuuint32_t box[2] = {BK, (cuuint32_t)box_rows}, elem[2] = {1, 1};
    CUresult r = encode(&m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, (void *)ptr, dims, strides, box, elem,
                        CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                        CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS) {
        fprintf(stderr, "error: output layer: cuTensorMapEncodeTiled failed (CUresult %d)\n", (int)r);
        exit(1);
    }
    return m;
}

static int64_t g_l2_budget = L2_H_BUDGET;
void output_layer_set_l2_budget(size_t bytes) { g_l2_budget = bytes ? (int64_t)bytes : L2_H_BUDGET; }

static void persistent_plan(int64_t N, int64_t V, int d, int64_t slots, int urows, int bn, int64_t max_windows,
                            int64_t *G_out, int64_t *P_out, int64_t *tpc_out) {
    const int64_t rb = cdiv(N, urows), ntiles = cdiv(V, bn);
    int64_t gmin = cdiv(slots * urows * d * 2, g_l2_budget);
    if (gmin > max_windows - 8) gmin = max_windows - 8 > 1 ? max_windows - 8 : 1; /* the statistics workspace */
    /* few row blocks: more windows to fill the GPU, but no more than fit beside all row blocks at
     * once (rounding up would leave one block for a second pass: N = 1024 ran at 1.3x a GEMM) */
    const int64_t g_fill = slots / rb > 1 ? slots / rb : 1;
    if (g_fill > gmin) gmin = g_fill;
    if (gmin > ntiles) gmin = ntiles;
    *G_out = 1, *P_out = 1, *tpc_out = ntiles;
    double best = -1.0;
    for (int64_t g = gmin; g <= gmin + 8 && g <= ntiles && g <= max_windows; g++) {
        const int64_t tpc = cdiv(ntiles, g), ge = cdiv(ntiles, tpc);
        int64_t P = slots / ge;
        if (P < 1) P = 1;
        if (P > rb) P = rb;
        /* busy fraction: slots used x row-block passes filled x tiles per window filled */
        const double eff = (double)(ge * P) / slots * ((double)rb / (double)(cdiv(rb, P) * P)) *
                           ((double)ntiles / (double)(ge * tpc));
        if (eff > best + 1e-3) best = eff, *G_out = ge, *P_out = P, *tpc_out = tpc;
    }
}

void outl_fused_forward(OutputLayer *L, const OutputLayerArgs *a, float *row_loss, cudaStream_t stream) {
    const int64_t N = a->N, V = L->V;
    const Variant *k = variant();
    int64_t nwin = 1, tpc = 1, P = 1;
    if (k->persistent) {
        /* P counts units (clusters): the grid has P x cluster row-block slots */
        persistent_plan(N, V, L->d, resident_units(k, L->sms), unit_rows(k), k->bn, L->fs.stats_elems / N, &nwin,
                        &P, &tpc);
        P *= k->cluster;
    } else {
        tpc = forward_tiles_per_cta(N, V, L->d, L->sms * k->slots_per_sm, k->bn, &nwin);
        P = cdiv(N, BM);
    }
    if (nwin * N > L->fs.stats_elems) {
        fprintf(stderr, "error: output layer: internal: %lld windows x %lld rows exceed the statistics workspace\n",
                (long long)nwin, (long long)N);
        exit(1);
    }
    TileArgs t = {};
    t.H = (const bf16 *)a->H, t.W = (const bf16 *)a->W, t.targets = a->targets;
    t.row_begin = 0, t.row_end = N, t.col_begin = 0, t.col_end = V;
    t.tiles_per_cta = (int)tpc, t.d = L->d;
    t.win_m = L->win_m, t.win_a = L->win_a, t.stats_ld = N, t.zt = L->zt;
    dim3 grid((unsigned)nwin, (unsigned)P);
    if (k->stats_tma)
        launch_tma(k, k->stats_tma, grid, 1, 0, t, tensor_map(t.H, N, L->d, WBM),
                   tensor_map(t.W, V, L->d, 256 / k->cluster), stream);
    else
        k->stats<<<grid, k->threads, k->smem, stream>>>(t);
    CUDA_CHECK(cudaGetLastError());
    fused_merge_kernel<<<(unsigned)cdiv(N, 256), 256, 0, stream>>>(L->win_m, L->win_a, (int)nwin, N, L->zt,
                                                                   a->targets, N, L->lse, a->row_lse, row_loss);
    CUDA_CHECK(cudaGetLastError());
}

void outl_fused_backward(OutputLayer *L, const OutputLayerArgs *a, cudaStream_t stream) {
    const int64_t N = a->N, V = L->V, d = L->d;
    const Variant *k = variant();
    /* balanced chunks and windows, each no larger than the workspace was sized for */
    const int64_t nchunks = cdiv(N, L->fs.chunk_rows);
    const int64_t rows = rup(cdiv(N, nchunks), BM);
    const int64_t nwins = cdiv(V, L->fs.window_cols);
    const int64_t cols = rup(cdiv(V, nwins), WBN);
    const bf16 *H = (const bf16 *)a->H, *W = (const bf16 *)a->W;
    const float *sc = L->scalars;
    CUtensorMap tm_h, tm_w;
    if (k->dz_tma) tm_h = tensor_map(H, N, (int)d, WBM), tm_w = tensor_map(W, V, (int)d, 256 / k->cluster);
    for (int64_t r0 = 0; r0 < N; r0 += rows) {
        const int64_t nr = min(rows, N - r0);
        for (int64_t c0 = 0; c0 < V; c0 += cols) {
            const int64_t nc = min(cols, V - c0);
            TileArgs t = {};
            t.H = H, t.W = W, t.targets = a->targets;
            t.row_begin = r0, t.row_end = r0 + nr, t.col_begin = c0, t.col_end = c0 + nc;
            t.tiles_per_cta = 1, t.d = (int)d;
            t.lse = L->lse, t.dz = L->dz, t.ldz = cols;
            dim3 grid((unsigned)cdiv(nr, BM), (unsigned)cdiv(nc, k->bn));
            if (k->persistent) {
                /* P row-block units at a time (their H blocks stay in L2), the window's tiles split
                 * among the remaining slots; each CTA sweeps its tiles unit after unit */
                const int64_t ur = unit_rows(k), nrb = cdiv(nr, ur), nt = cdiv(nc, k->bn);
                const int64_t slots = resident_units(k, L->sms);
                int64_t P = g_l2_budget / (ur * d * 2);
                P = P < 1 ? 1 : P > nrb ? nrb : P;
                /* equal passes over the row blocks: a chunk of more row blocks than fit (only with
                 * FUSEDGPT_OUTL_CHUNK_ROWS; the default budgets give nrb <= P) would otherwise run
                 * e.g. 128 blocks as 85 + 43 with G = 1: 85 CTAs, half of them idle half the time */
                P = cdiv(nrb, cdiv(nrb, P));
                int64_t G = slots / P;
                G = G < 1 ? 1 : G > nt ? nt : G;
                const int64_t tpc = cdiv(nt, G);
                t.tiles_per_cta = (int)tpc;
                grid = dim3((unsigned)(P * k->cluster), (unsigned)cdiv(nt, tpc));
            }
            if (k->dz_tma)
                launch_tma(k, k->dz_tma, grid, 0, r0 > 0 || c0 > 0, t, tm_h, tm_w, stream);
            else
                k->dz<<<grid, k->threads, k->smem, stream>>>(t);
            CUDA_CHECK(cudaGetLastError());
            /* dH_chunk^T [d x nr] (=/+=) (W_window stored d x nc) . (dZ stored nc x nr, ld cols) */
            outl_gemm(L, CUBLAS_OP_N, CUBLAS_OP_N, d, nr, nc, W + c0 * d, d, L->dz, cols, L->dh_acc, CUDA_R_32F, d,
                      sc + OUTL_SCALE, sc + (c0 == 0 ? OUTL_ZERO : OUTL_ONE), stream);
            /* dW_window^T [d x nc] += (H_chunk stored d x nr) . (dZ stored nc x nr)^T */
            outl_gemm(L, CUBLAS_OP_N, CUBLAS_OP_T, d, nc, nr, H + r0 * d, d, L->dz, cols, a->dW + c0 * d, CUDA_R_32F,
                      d, sc + OUTL_SCALE, sc + OUTL_ONE, stream);
        }
        const int64_t n8 = nr * d / 8;
        cast_rows_kernel<<<(unsigned)cdiv(n8, 256), 256, 0, stream>>>((bf16 *)a->dH + r0 * d, L->dh_acc, n8);
        CUDA_CHECK(cudaGetLastError());
    }
}
