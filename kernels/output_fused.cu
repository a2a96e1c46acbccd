/* kernels/output_fused.cu - the fused output layer: loss, dH and dW from H, W and the targets without
 * ever storing the N x V logits.
 *
 * Shapes: H [N x d] bf16, W [V x d] bf16 (rows >= V are never read), targets [N] int32 (-1 ignored),
 * d % 64 == 0. G = 2 N V d FLOPs (one logits-sized GEMM).
 *
 * Forward (1G), fused_tile_kernel<MODE_STATS>: a CTA of 256 threads (8 warps as 4 x 2) owns 128
 * rows and sweeps a window of the vocabulary in tiles of 128 columns; per tile the K loop over d
 * runs in 64-wide chunks through a 3-stage cp.async pipeline into swizzled shared memory, ldmatrix
 * and mma.sync m16n8k16 (bf16 in, fp32 accumulate). The 128 x 128 logit tile stays in registers
 * (64 fp32 per thread); each thread keeps a running max and sum of exponentials for its 4 rows over
 * its own columns (no cross-thread traffic per tile) and stores the target logit when its tile
 * holds it. At the end of the window the per-thread statistics are merged (quad shuffles, then the
 * two column-warps through shared memory) into (max, sum) per row and window; fused_merge_kernel
 * combines the windows: lse = M + log sum_w a_w exp(m_w - M), loss = lse - z_target.
 * Windows exist so that small N still fills the GPU, and so that the rows whose H blocks are being
 * re-read at one time (one CTA re-reads its 128 x d block of H for every tile) fit in L2.
 * Bytes: H once per tile from L2; W once per row-block group; no logits. O(N) floats written.
 *
 * Backward (3G), per chunk of Nc rows and window of w columns (Megatron's scheme, the notes'
 * option 1): fused_tile_kernel<MODE_DZ> recomputes the logits of the window and writes
 * dZ = (softmax - onehot) * scale in bf16 (p - 1 at the target in fp32, one rounding) to a
 * [Nc x w] workspace; then cuBLASLt adds dH_chunk (fp32 workspace) += dZ . W_window and
 * dW_window (fp32, the caller's) += dZ^T . H_chunk. Every element of dW and dH is summed in a fixed
 * order (windows in order, chunks in order, fixed GEMM algorithms): deterministic, no atomics.
 * dH_chunk is rounded to bf16 once, after its last window.
 * Bytes beyond the GEMMs' operands: dZ written once (2 B per logit) and read twice (4 B per logit).
 * Workspace: Nc x w x 2 B (<= 64 MiB) + Nc x d x 4 B (<= 32 MiB): independent of V and of N. */
#include <math.h>
#include <stdio.h>

#include "kernels/cuda_check.h"
#include "kernels/output_layer_internal.h"

typedef __nv_bfloat16 bf16;

#define BM 128      /* rows per CTA */
#define BN 128      /* vocabulary columns per tile */
#define BK 64       /* d per pipeline stage */
#define STAGES 3
#define THREADS 256
#define SMEM_BYTES (STAGES * (BM + BN) * BK * (int)sizeof(bf16)) /* 96 KiB: two CTAs per SM */
#define L2E 1.4426950408889634f

#define DZ_BUDGET_ELEMS ((int64_t)32 << 20)  /* dZ window workspace: 64 MiB of bf16 */
#define DH_BUDGET_ELEMS ((int64_t)8 << 20)   /* fp32 dH chunk: 32 MiB */
#define MAX_CHUNK_ROWS 4096
#define MAX_WINDOW_COLS 32768
#define L2_H_BUDGET ((int64_t)16 << 20)     /* bytes of H blocks re-read at one time in the forward */

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
    const float *scalars; /* [1] = gradient scale per valid row */
    bf16 *dz;
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
__global__ void __launch_bounds__(THREADS, 2) fused_tile_kernel(const TileArgs a) {
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
    const float gscale = MODE == MODE_DZ ? a.scalars[1] : 0.0f;

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
                    float s = a_run[mi][h] * exp2f(fmaf(m_run[mi][h], L2E, -mu2));
#pragma unroll
                    for (int ni = 0; ni < 8; ni++)
#pragma unroll
                        for (int j = 0; j < 2; j++) s += exp2f(fmaf(acc[mi][ni][h * 2 + j], L2E, -mu2));
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
                        const float sc = t == -1 ? 0.0f : gscale;
                        bf16 *out = a.dz + (row - a.row_begin) * a.ldz + (cbase - a.col_begin);
#pragma unroll
                        for (int ni = 0; ni < 8; ni++) {
                            float g[2];
#pragma unroll
                            for (int j = 0; j < 2; j++) {
                                const int64_t col = cbase + ni * 8 + j;
                                float p = exp2f(fmaf(acc[mi][ni][h * 2 + j], L2E, -lse2[mi][h]));
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
                    s = s * exp2f((m - mu) * L2E) + s2 * exp2f((m2 - mu) * L2E);
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
                s = s * exp2f((m - mu) * L2E) + s2 * exp2f((m2 - mu) * L2E);
                a.win_m[win * a.stats_ld + (row - a.row_begin)] = mn;
                a.win_a[win * a.stats_ld + (row - a.row_begin)] = s;
            }
        }
    }
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
    for (int w = 0; w < nwin; w++) S += win_a[w * ld + row] * exp2f((win_m[w * ld + row] - M) * L2E);
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

int outl_fused_slots_per_sm(void) {
    static int cached = 0;
    if (!cached) {
        CUDA_CHECK(cudaFuncSetAttribute(fused_tile_kernel<MODE_STATS>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        SMEM_BYTES));
        CUDA_CHECK(cudaFuncSetAttribute(fused_tile_kernel<MODE_DZ>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        SMEM_BYTES));
        CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&cached, fused_tile_kernel<MODE_STATS>, THREADS,
                                                                 SMEM_BYTES));
        if (cached < 1) cached = 1;
    }
    return cached;
}

/* Forward windows: at least two waves of CTAs, few enough rows in flight that their H blocks stay
 * in L2, then the count (within +8) whose last wave is fullest. Returns tiles per CTA. */
static int64_t forward_tiles_per_cta(int64_t N, int64_t V, int d, int slots, int64_t *nwin_out) {
    const int64_t rb = cdiv(N, BM), ntiles = cdiv(V, BN);
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

OutlFusedSizes outl_fused_sizes(int64_t max_N, int64_t V, int d, int slots) {
    OutlFusedSizes s;
    const int64_t rb = cdiv(max_N, BM);
    /* windows x rows <= (2 slots / rb + 1 + 8 + L2 term) x rb x 128 for every N <= max_N */
    const int64_t l2min = cdiv((int64_t)slots * BM * d * 2, L2_H_BUDGET);
    s.stats_elems = (int64_t)BM * (2 * (int64_t)slots + rb * (10 + l2min));
    int64_t rows = DH_BUDGET_ELEMS / d;
    if (rows > MAX_CHUNK_ROWS) rows = MAX_CHUNK_ROWS;
    rows = rows / BM * BM;
    if (rows < BM) rows = BM;
    if (rows > rup(max_N, BM)) rows = rup(max_N, BM);
    s.chunk_rows = rows;
    int64_t cols = DZ_BUDGET_ELEMS / rows;
    if (cols > MAX_WINDOW_COLS) cols = MAX_WINDOW_COLS;
    cols = cols / BN * BN;
    if (cols < BN) cols = BN;
    if (cols > rup(V, BN)) cols = rup(V, BN);
    s.window_cols = cols;
    return s;
}

void outl_fused_forward(OutputLayer *L, const OutputLayerArgs *a, float *row_loss, cudaStream_t stream) {
    const int64_t N = a->N, V = L->V;
    int64_t nwin;
    const int64_t tpc = forward_tiles_per_cta(N, V, L->d, L->fused_slots, &nwin);
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
    dim3 grid((unsigned)nwin, (unsigned)cdiv(N, BM));
    fused_tile_kernel<MODE_STATS><<<grid, THREADS, SMEM_BYTES, stream>>>(t);
    CUDA_CHECK(cudaGetLastError());
    fused_merge_kernel<<<(unsigned)cdiv(N, 256), 256, 0, stream>>>(L->win_m, L->win_a, (int)nwin, N, L->zt,
                                                                   a->targets, N, L->lse, a->row_lse, row_loss);
    CUDA_CHECK(cudaGetLastError());
}

void outl_fused_backward(OutputLayer *L, const OutputLayerArgs *a, cudaStream_t stream) {
    const int64_t N = a->N, V = L->V, d = L->d;
    /* balanced chunks and windows, each no larger than the workspace was sized for */
    const int64_t nchunks = cdiv(N, L->fs.chunk_rows);
    const int64_t rows = rup(cdiv(N, nchunks), BM);
    const int64_t nwins = cdiv(V, L->fs.window_cols);
    const int64_t cols = rup(cdiv(V, nwins), BN);
    const bf16 *H = (const bf16 *)a->H, *W = (const bf16 *)a->W;
    for (int64_t r0 = 0; r0 < N; r0 += rows) {
        const int64_t nr = min(rows, N - r0);
        for (int64_t c0 = 0; c0 < V; c0 += cols) {
            const int64_t nc = min(cols, V - c0);
            TileArgs t = {};
            t.H = H, t.W = W, t.targets = a->targets;
            t.row_begin = r0, t.row_end = r0 + nr, t.col_begin = c0, t.col_end = c0 + nc;
            t.tiles_per_cta = 1, t.d = (int)d;
            t.lse = L->lse, t.scalars = L->scalars, t.dz = L->dz, t.ldz = cols;
            dim3 grid((unsigned)cdiv(nr, BM), (unsigned)cdiv(nc, BN));
            fused_tile_kernel<MODE_DZ><<<grid, THREADS, SMEM_BYTES, stream>>>(t);
            CUDA_CHECK(cudaGetLastError());
            /* dH_chunk^T [d x nr] (=/+=) (W_window stored d x nc) . (dZ stored nc x nr, ld cols) */
            outl_gemm(L, CUBLAS_OP_N, CUBLAS_OP_N, d, nr, nc, W + c0 * d, d, L->dz, cols, L->dh_acc, CUDA_R_32F, d,
                      c0 == 0 ? 0.0f : 1.0f, stream);
            /* dW_window^T [d x nc] += (H_chunk stored d x nr) . (dZ stored nc x nr)^T */
            outl_gemm(L, CUBLAS_OP_N, CUBLAS_OP_T, d, nc, nr, H + r0 * d, d, L->dz, cols, a->dW + c0 * d, CUDA_R_32F,
                      d, 1.0f, stream);
        }
        const int64_t n8 = nr * d / 8;
        cast_rows_kernel<<<(unsigned)cdiv(n8, 256), 256, 0, stream>>>((bf16 *)a->dH + r0 * d, L->dh_acc, n8);
        CUDA_CHECK(cudaGetLastError());
    }
}
