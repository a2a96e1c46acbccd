/* kernels/output_fused.cu - the fused output layer: loss, dH and dW from H, W and the targets, the
 * N x V logits never stored. Two exact paths behind it (kernels/output_layer.h says which runs);
 * their work is counted in G = 2 N V d FLOPs, one logits-sized GEMM:
 *
 *  - chunked, through scaled exponentials (3G), per chunk of C rows whose buffer fits the budget:
 *      reference_logit_kernel (once per call): each row's reference s, its target's logit z_t
 *        (fp32 dot product).
 *      tile kernel, MODE_EXP: z = H W^T stays in fp32 registers; E = exp(z - s) is stored in bf16
 *        and the tile's fp32 sum of E goes to a [C x tiles] table; the target logit is picked up in
 *        fp32. E = 1 at the target, so a row's sum S lies in [~1, 2^60] unless some logit exceeds
 *        the target's by ~41 (a loss over 41).
 *      exp_merge_kernel, one CTA per row: S in fp64, lse = s + ln S, loss = lse - z_t; then
 *        1 / S per row, Hs = H / S in bf16, the one-hot coefficient p - 1 = expm1(z_t - lse) in
 *        fp32, and 0 in E at the target. P = E / S is never written: the row scale rides on the
 *        GEMMs' other operand or output.
 *      cuBLASLt: E W (fp32, the chunk's [C x d]), then exp_dh_kernel: dH = scale (E W / S +
 *        (p - 1) W[target]) in bf16; dW (fp32, +=) += scale E^T Hs.
 *      after the last chunk, onehot_dw_kernel: dW[t] += scale sum (p - 1) H over the rows aiming
 *        at t (rows sorted by target, one owner per dW row, fp32).
 *      A row with S > 2^60 (or not finite) flags its chunk, and the chunk is redone with s = lse from
 *        the streaming statistics (MODE_STATS over the chunk's rows), so E = P; those launches read
 *        the flag on the device and return at once when it is clear (no host sync).
 *    Memory: C x V x 2 bytes plus C x V/256 floats, and 6 d bytes per row. Bytes per logit: E
 *    written once, read by the two GEMMs (6 B; the canonical layer's logits take 10).
 *  - streaming (4G: the logits are computed twice), when no chunk fits: MODE_STATS keeps a running max and sum per row over
 *    vocabulary windows (fused_merge_kernel merges the windows into lse); the backward recomputes
 *    the logits per chunk of rows and window of columns, MODE_DZ writing dZ = P - Y (p - 1 at the
 *    target in fp32) into a [Nc x w] workspace that two cuBLASLt GEMMs consume: dH_chunk (fp32
 *    workspace, cast once after its last window) and dW_window. The target's entry, which bf16
 *    rounds alike across the row's d values, leaves its rounding (c - bf16(c), fp32) in tcoef:
 *    stream_dh_kernel adds it to dH with W[target] as it casts, and after the last chunk
 *    onehot_dw_kernel to dW's target rows, as the chunked path adds its one-hot part. Memory O(N)
 *    plus the fixed window; on a chunked layer (options it does not take), the chunk's E and E W.
 *  The forward alone (evaluation) is always MODE_STATS: 1G, nothing of size N x V written.
 *  Loss options (kernels/output_kind.h): every tile caps its logits in registers before its
 *  epilogue. Streaming: MODE_STATS also sums them per row and window (label smoothing's mean), and
 *  MODE_DZ writes the objective's gradient, the cap's slope 1 - (z'/cap)^2 included, and gives back
 *  in fp32 the rounding of each row's peak (its one non-target entry with p > 1/2, which z-loss's
 *  factor on p can lift past 1, where bf16's step doubles) as it does the target's: stream_dh_kernel
 *  and a second onehot_dw_kernel, the rows sorted by peak column (O(N) more). Chunked: the
 *  objective's gradient is p ps - keep [v = t] - uniform (ps = 1 + 2 z_loss lse per row): ps rides
 *  on the row scale (ps / S, Hs = H ps / S), keep on the one-hot coefficient, the cap's slope on E
 *  as the epilogue writes it (S stays the sum of E without it), and label smoothing's uniform term
 *  is rank-1: dH -= scale uniform sum_v W_v per row, dW_v -= scale uniform sum_n H_n (valid rows),
 *  each row's sum of logits H_n . sum_v W_v. With the cap, that term is uniform times the slope,
 *  different for every logit: no longer rank-1, so that pair runs on the streaming path.
 *
 * Shapes: H [N x d] bf16, W [V x d] bf16 (rows >= V are never read), targets [N] int32 (-1 ignored),
 * d % 64 == 0.
 *
 * The tile kernel: a CTA of two warpgroups owns 128 rows and computes 128 x 256 logit tiles with
 * wgmma m64n256k16 from shared memory filled by the TMA unit (4-stage mbarrier ring, one issuing
 * thread), in 2-CTA clusters that multicast each W stage to both CTAs (W read from L2 once per
 * pair). The tile (128 fp32 per thread) never leaves registers; each row belongs to the 4 threads
 * of one quad, so row reductions are two shuffles. CTAs are persistent: G windows x P row-block
 * slots, each CTA sweeping its window for one row block after another, so that the CTAs stream W
 * in step and share it in L2.
 *
 * Every element of dH and dW is summed in a fixed order (tiles, windows and chunks in order, fixed
 * GEMM algorithms): deterministic, no atomics. */
#include <cuda.h> /* CUtensorMap (the driver entry point is fetched through the runtime) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>


#include "kernels/cuda_check.h"
#include "kernels/device_util.cuh"
#include "kernels/fast_math.cuh"
#include "kernels/output_layer_internal.h"
#include "kernels/tma.cuh"
#include "kernels/wgmma.cuh"

#define BM 128      /* rows per CTA */
#define TN 256      /* vocabulary columns per tile; windows are whole tiles */
#define BK 64       /* d per pipeline stage */
#define CLUSTER 2   /* CTAs per cluster along the row blocks, sharing W stages */
#define LN2 0.6931471805599453

/* Streaming backward workspace */
#define DZ_BUDGET_ELEMS ((int64_t)32 << 20)  /* dZ window workspace: 64 MiB of bf16 */
#define DH_BUDGET_ELEMS ((int64_t)8 << 20)   /* fp32 dH chunk: 32 MiB */
#define MAX_CHUNK_ROWS 4096
#define SQUARE_WINDOW 8192                   /* rows = columns of the large problems' dZ window */
#define MAX_WINDOW_COLS 32768
#define L2_H_BUDGET ((int64_t)16 << 20)     /* bytes of H row blocks in flight at once, i.e. in L2 */

#define W_A_BYTES (BM * BK * 2) /* 16 KiB */
#define DZ_SCRATCH_BYTES (8 * 512) /* per warp (8 of them), where the stores regroup columns */
#define T_STAGES 4
#define T_THREADS 256
#define T_STAGE_BYTES (W_A_BYTES + TN * BK * 2)           /* 48 KiB */
#define T_SMEM (T_STAGES * T_STAGE_BYTES + 1024 + 128 + DZ_SCRATCH_BYTES) /* ring, slack, barriers, scratch */

enum { MODE_STATS = 0, MODE_DZ = 1, MODE_EXP = 2 };

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
    float *zt; /* [N] target logit (STATS and EXP), written by the one thread whose tile holds it */
    /* MODE_DZ */
    const float *lse;
    bf16 *dz;   /* MODE_DZ: P - Y, unscaled (the GEMMs apply the gradient scale as alpha) */
    float *tcoef; /* MODE_DZ: [N] what bf16 rounding took from each row's dZ entry at its target */
    unsigned long long *peak; /* MODE_DZ with options: [N] the row's peak entry (pack_peak), 0 if none */
    /* MODE_EXP */
    const float *ref2; /* [N] each row's reference s, in log2 units: E = 2^(z log2(e) - s) */
    bf16 *ex;          /* E */
    int64_t ldz;       /* row stride of dz or ex */
    float *tile_sums;  /* fp32 sum of E per (row - row_begin, tile) */
    int64_t ntiles;
    const int *run_if; /* non-NULL: the launch does nothing unless *run_if (a device flag) is set */
    OutputLossOptions opt; /* the cap in every mode; the objective in MODE_DZ */
    float *win_zs;         /* MODE_STATS, when label smoothing needs it: [window][stats_ld] sum of logits */
    int64_t V;             /* MODE_DZ: the real vocabulary, over which smoothing spreads */
} TileArgs;

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

/* One half (h: rows lane/4 and lane/4 + 8) of a warp's rows of a tile, value(x, col) of each
 * logit x at column col (within the tile) rounded to bf16, written 16 bytes per lane: a warp holds,
 * per group of four column octets, 8 rows x 32 columns whose octets are spread over the quads'
 * lanes; stmatrix puts them in the warp's 512-byte shared scratch as rows of 16 bytes and each lane
 * reads one back (an octet of its own row), so every store fills whole sectors (four 4-byte stores
 * per lane wrote 16 of every 32 bytes per row and cost 4x the instructions). */
template <class Value>
__device__ __forceinline__ void store_tile_rows(const float (&acc)[TN / 2], int h, int lane, Value value,
                                                uint32_t scratch, void *out_row, bool row_in) {
    uint16_t *out = static_cast<uint16_t *>(out_row);
    const int q = lane & 3;
    const uint32_t st_addr = scratch + (uint32_t)(((lane & 7) * 4 + ((lane >> 3) ^ ((lane >> 1) & 3))) * 16);
    const uint32_t ld_addr = scratch + (uint32_t)(((lane >> 2) * 4 + ((lane & 3) ^ ((lane >> 3) & 3))) * 16);
#pragma unroll
    for (int g = 0; g < TN / 32; g++) {
        uint32_t w[4];
#pragma unroll
        for (int m = 0; m < 4; m++) {
            const int i = g * 4 + m;
            float v[2];
#pragma unroll
            for (int j = 0; j < 2; j++) v[j] = value(acc[i * 4 + h * 2 + j], i * 8 + q * 2 + j);
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

/* s * 2^(k - kn) for integers k <= kn, exactly (0 for an empty sum, whose k is -inf) */
__device__ __forceinline__ float rescale_sum(float s, float k, float kn) {
    return s == 0.0f ? 0.0f : ldexpf(s, (int)(k - kn));
}

/* The largest of a thread's logits of row half h in the tile, over the columns inside the
 * vocabulary (-inf when none). */
__device__ __forceinline__ float tile_row_max(const float (&acc)[TN / 2], int h, bool full, int64_t cbase,
                                              int64_t col_end) {
    float mx = -INFINITY;
    if (full) {
#pragma unroll
        for (int i = 0; i < TN / 8; i++) mx = fmaxf(mx, fmaxf(acc[i * 4 + h * 2], acc[i * 4 + h * 2 + 1]));
    } else {
#pragma unroll
        for (int i = 0; i < TN / 8; i++)
#pragma unroll
            for (int j = 0; j < 2; j++)
                if (cbase + i * 8 + j < col_end) mx = fmaxf(mx, acc[i * 4 + h * 2 + j]);
    }
    return mx;
}

/* Whether MODE_DZ writes the objective's gradient (loss options set) rather than P - Y. */
__host__ __device__ __forceinline__ bool dz_has_options(const OutputLossOptions &o) {
    return o.logit_softcap > 0.0f || o.z_loss != 0.0f || o.label_smoothing != 0.0f;
}

/* A row's peak entry, the one non-target column whose p exceeds 1/2, packed in 64 bits: column + 1
 * above, the rounding its bf16 dZ entry lost (fp32) below; 0 means none. Should rounding put two
 * columns over 1/2 (a tie at 1/2), atomicMax keeps the higher column whatever the order. */
__device__ __forceinline__ unsigned long long pack_peak(int64_t col, float resid) {
    return ((unsigned long long)(col + 1) << 32) | __float_as_uint(resid);
}
__device__ __forceinline__ int peak_col(unsigned long long pk) { return (int)(pk >> 32) - 1; }
__device__ __forceinline__ float peak_resid(unsigned long long pk) { return __uint_as_float((uint32_t)pk); }

/* Epilogue of one 128 x 256 logit tile held by a warpgroup (acc[i*4 + e]: row rows[e>>1], column
 * tile_col0 + i*8 + (lane&3)*2 + (e&1)): MODE_STATS updates the running max and sum; MODE_DZ writes
 * dZ = softmax - onehot; MODE_EXP writes the scaled exponentials and the tile's (k, sum). STATS and
 * EXP pick up the target logit. */
template <int MODE>
__device__ __forceinline__ void wg_tile_epilogue(const TileArgs &a, const float (&acc)[TN / 2], int64_t tile_col0,
                                                 int lane, const int64_t (&rows)[2], const int (&tgt)[2],
                                                 float (&m_run)[2], float (&a_run)[2], float (&z_run)[2],
                                                 const float (&lse2)[2], uint32_t scratch) {
    const int64_t cbase = tile_col0 + (lane & 3) * 2;
    const bool full = tile_col0 + TN <= a.col_end;
    const int lim = full ? TN : (int)(a.col_end - tile_col0); /* columns of the tile inside the vocabulary */
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int t = tgt[h];
        const bool row_in = rows[h] < a.row_end;
        if (MODE == MODE_STATS) {
            /* the running reference k (m_run) is an integer in log2 units, as in MODE_EXP: the
             * rescaling of the running sum is then exact, and lse comes out as k + log2(sum) with
             * no rounded max * log2(e) in it (at |z| ~ 100 that rounding alone is 4e-6) */
            const float mx = tile_row_max(acc, h, full, cbase, a.col_end);
            const float kn = fmaxf(m_run[h], ceilf(mx * LOG2E));
            float s0 = rescale_sum(a_run[h], m_run[h], kn), s1 = 0.0f;
            if (full) {
#pragma unroll
                for (int i = 0; i < TN / 8; i++) {
                    s0 += ex2(fmaf(acc[i * 4 + h * 2], LOG2E, -kn));
                    s1 += ex2(fmaf(acc[i * 4 + h * 2 + 1], LOG2E, -kn));
                }
            } else { /* the last tile: columns past V add nothing */
#pragma unroll
                for (int i = 0; i < TN / 8; i++) {
                    if (cbase + i * 8 < a.col_end) s0 += ex2(fmaf(acc[i * 4 + h * 2], LOG2E, -kn));
                    if (cbase + i * 8 + 1 < a.col_end) s1 += ex2(fmaf(acc[i * 4 + h * 2 + 1], LOG2E, -kn));
                }
            }
            a_run[h] = s0 + s1;
            m_run[h] = kn;
            if (a.win_zs) {
                float zs = 0.0f;
#pragma unroll
                for (int i = 0; i < TN / 8; i++)
#pragma unroll
                    for (int j = 0; j < 2; j++)
                        if (full || cbase + i * 8 + j < a.col_end) zs += acc[i * 4 + h * 2 + j];
                z_run[h] += zs;
            }
        } else if (MODE == MODE_DZ) {
            /* Ignored rows have lse2 = +inf, so their softmax is 0 without a multiply. */
            const int tl = t >= tile_col0 && t < tile_col0 + TN ? (int)(t - tile_col0) : -1;
            bf16 *out = a.dz + (rows[h] - a.row_begin) * a.ldz + (tile_col0 - a.col_begin);
            const float l2 = lse2[h];
            /* nearly every tile holds none of its 16 rows' targets and lies inside the vocabulary:
             * there each element is one FMA and one exponential (the vote keeps the warp's path
             * uniform, as stmatrix needs) */
            const OutputLossOptions &o = a.opt;
            /* The target's entry is the row's largest and is rounded the same way across the row's
             * d values of dH, so its rounding would not average out (with label smoothing it is
             * about -0.9 in every row, rounded to -0.898 alike); what rounding takes from it goes
             * to tcoef and is added back in fp32. */
            float resid = 0.0f;
            if (dz_has_options(o)) {
                /* the objective's gradient w.r.t. z (x is already capped): (p ps - [v = t] keep -
                 * uniform) times the cap's slope; 0 for ignored rows (their p is 0, the uniform
                 * term is not). z-loss's ps > 1 lifts a non-target entry whose p is near 1 past
                 * 1, where bf16's step doubles to 2^-7, and that one rounding reaches all d values
                 * of the row's dH alike: what it loses goes to the row's peak, added back in fp32
                 * like tcoef (p > 1/2 holds for at most one column of a row). */
                const bool valid = t >= 0;
                const float ps = valid ? outl_p_scale(o, l2 * (float)LN2) : 0.0f;
                const float keep = 1.0f - o.label_smoothing, uniform = valid ? o.label_smoothing / (float)a.V : 0.0f;
                const float cap = o.logit_softcap;
                int pcol = -1;
                float presid = 0.0f;
                store_tile_rows(acc, h, lane, [&](float x, int col) {
                    const float p = ex2(fmaf(x, LOG2E, -l2));
                    const float r = cap > 0.0f ? x / cap : 0.0f;
                    const float g = (p * ps - (col == tl ? keep : 0.0f) - uniform) * (1.0f - r * r);
                    if (col == tl) resid = g - __bfloat162float(__float2bfloat16(g));
                    else if (p > 0.5f && col < lim) pcol = col, presid = g - __bfloat162float(__float2bfloat16(g));
                    return col >= lim ? 0.0f : g;
                }, scratch, out, row_in);
                if (pcol >= 0 && row_in) atomicMax(a.peak + rows[h], pack_peak(tile_col0 + pcol, presid));
            } else if (__all_sync(0xffffffffu, full && tl < 0))
                store_tile_rows(acc, h, lane, [&](float x, int) { return ex2(fmaf(x, LOG2E, -l2)); }, scratch,
                                       out, row_in);
            else
                store_tile_rows(acc, h, lane, [&](float x, int col) {
                    const float p = ex2(fmaf(x, LOG2E, -l2));
                    if (col == tl) resid = (p - 1.0f) - __bfloat162float(__float2bfloat16(p - 1.0f));
                    return col >= lim ? 0.0f : col == tl ? p - 1.0f : p; /* p - 1 in fp32, padding 0 */
                }, scratch, out, row_in);
            /* the quad's lane whose column pairs hold the target */
            if (tl >= 0 && row_in && ((tl >> 1) & 3) == (lane & 3)) a.tcoef[rows[h]] = resid;
        } else { /* MODE_EXP */
            /* E relative to the row's reference (lse2 holds it here): in (0, 2^60] for every row the
             * merge accepts. Past the vocabulary E is 0, so the GEMMs read zeros there. */
            const float ref = lse2[h], cap = a.opt.logit_softcap;
            bf16 *out = a.ex + (rows[h] - a.row_begin) * a.ldz + (tile_col0 - a.col_begin);
            float s = 0.0f;
            if (cap > 0.0f) /* x is capped: the slope rides on E, S stays the sum of E without it */
                store_tile_rows(acc, h, lane, [&](float x, int col) {
                    const float e = col < lim ? ex2(fmaf(x, LOG2E, -ref)) : 0.0f, r = x / cap;
                    s += e;
                    return e * (1.0f - r * r);
                }, scratch, out, row_in);
            else if (__all_sync(0xffffffffu, full))
                store_tile_rows(acc, h, lane, [&](float x, int) {
                    const float e = ex2(fmaf(x, LOG2E, -ref));
                    s += e;
                    return e;
                }, scratch, out, row_in);
            else
                store_tile_rows(acc, h, lane, [&](float x, int col) {
                    const float e = col < lim ? ex2(fmaf(x, LOG2E, -ref)) : 0.0f;
                    s += e;
                    return e;
                }, scratch, out, row_in);
            s += __shfl_xor_sync(0xffffffffu, s, 1);
            s += __shfl_xor_sync(0xffffffffu, s, 2);
            if ((lane & 3) == 0 && row_in)
                a.tile_sums[(rows[h] - a.row_begin) * a.ntiles + (tile_col0 - a.col_begin) / TN] = s;
        }
        if (MODE != MODE_DZ && t >= tile_col0 && t < tile_col0 + TN) { /* rare: the target is in this tile */
#pragma unroll
            for (int i = 0; i < TN / 8; i++)
#pragma unroll
                for (int j = 0; j < 2; j++)
                    if (cbase + i * 8 + j == t) a.zt[rows[h]] = acc[i * 4 + h * 2 + j];
        }
    }
}

/* Start of a row block for one thread's two rows (first_row and first_row + 8): their indices,
 * targets (-1 past the end), empty running statistics and, for dZ, lse in log2 units (+inf for an
 * ignored row, whose dZ is then 0), for the scaled exponentials the rows' references. */
template <int MODE>
__device__ __forceinline__ void wg_row_block_begin(const TileArgs &a, int64_t first_row, int64_t (&rows)[2],
                                                   int (&tgt)[2], float (&m_run)[2], float (&a_run)[2],
                                                   float (&z_run)[2], float (&lse2)[2]) {
#pragma unroll
    for (int h = 0; h < 2; h++) {
        rows[h] = first_row + h * 8;
        bool in = rows[h] < a.row_end;
        tgt[h] = in ? a.targets[rows[h]] : -1;
        m_run[h] = -INFINITY;
        a_run[h] = 0.0f;
        z_run[h] = 0.0f;
        if (MODE == MODE_EXP) lse2[h] = in ? a.ref2[rows[h]] : 0.0f;
        else lse2[h] = (MODE == MODE_DZ && in && tgt[h] >= 0) ? a.lse[rows[h]] * LOG2E : INFINITY;
    }
}

/* End of a window for one row block: merge the quad's statistics and store (k, sum) per row: the
 * window's sum of exp(z ln 2 ... ) relative to 2^k, k an integer. */
template <int MODE>
__device__ __forceinline__ void wg_window_end(const TileArgs &a, int64_t win, int lane, const int64_t (&rows)[2],
                                              const float (&m_run)[2], const float (&a_run)[2],
                                              const float (&z_run)[2]) {
    if (MODE == MODE_STATS) {
#pragma unroll
        for (int h = 0; h < 2; h++) {
            float m = m_run[h], s = a_run[h];
#pragma unroll
            for (int off = 1; off <= 2; off <<= 1) {
                const float m2 = __shfl_xor_sync(0xffffffffu, m, off), s2 = __shfl_xor_sync(0xffffffffu, s, off);
                const float mn = fmaxf(m, m2);
                s = rescale_sum(s, m, mn) + rescale_sum(s2, m2, mn);
                m = mn;
            }
            float zs = z_run[h];
            zs += __shfl_xor_sync(0xffffffffu, zs, 1);
            zs += __shfl_xor_sync(0xffffffffu, zs, 2);
            if ((lane & 3) == 0 && rows[h] < a.row_end) {
                a.win_m[win * a.stats_ld + (rows[h] - a.row_begin)] = m;
                a.win_a[win * a.stats_ld + (rows[h] - a.row_begin)] = s;
                if (a.win_zs) a.win_zs[win * a.stats_ld + (rows[h] - a.row_begin)] = zs;
            }
        }
    }
}

/* ---- the tile kernel: wgmma fed by TMA (sm_90a) ------------------------------------------------ */
/* One thread (thread 0) issues two bulk tensor copies per stage, completing on the stage's "full"
 * mbarrier, T_STAGES - 1 stages ahead; both warpgroups wait on "full", run their wgmma (64 rows
 * each), and release the stage on its "empty" mbarrier once the wgmma completed. No __syncthreads
 * and no address arithmetic for the copies in the main loop; rows and columns past the tensors'
 * ends are zero-filled by the TMA unit; its 128-byte swizzle is the layout the wgmma descriptors
 * describe. (A separate producer warp would cap the consumers at 168 registers, and the
 * accumulator plus the softmax epilogue need more.) */

/* The CTAs of a CL-CTA cluster take the CL row blocks of a unit of CL x 128 rows against the same W
 * tiles: each CTA's copy engine fetches 1/CL of every W stage and multicasts it into all of them,
 * so W is read from L2 once per cluster (a CTA's L2 reads per stage drop from 48 KiB to
 * 16 + 32/CL KiB). A stage is refilled only when the consumers of every CTA released it (each warp
 * arrives on every CTA's "empty" barrier); all CTAs run the same number of iterations (rows past
 * the end are zeros). */
template <int MODE>
__global__ void __launch_bounds__(T_THREADS, 1)
    tile_kernel(const TileArgs a, const __grid_constant__ CUtensorMap tm_h, const __grid_constant__ CUtensorMap tm_w) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    constexpr int CL = CLUSTER, NACC = TN / 2;
    extern __shared__ unsigned char smem_raw[];
    const uint32_t ring = (smem_addr(smem_raw) + 1023) & ~1023u;
    const uint32_t full_bar = ring + T_STAGES * T_STAGE_BYTES, empty_bar = full_bar + 8 * T_STAGES;

    if (a.run_if && !*a.run_if) return; /* every CTA of every cluster alike, before any barrier */
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wg = warp >> 2, wq = warp & 3;
    const int64_t win = MODE == MODE_STATS ? blockIdx.x : blockIdx.y;
    /* row-block slots: the cluster's axis; unit q (CL row blocks) and this CTA's block within it */
    const int64_t slot = MODE == MODE_STATS ? blockIdx.y : blockIdx.x;
    const int64_t nslots = MODE == MODE_STATS ? gridDim.y : gridDim.x;
    const uint32_t rank = cluster_rank();
    const int64_t q_first = slot / CL, q_stride = nslots / CL;
    const int64_t nrb = ceil_div(a.row_end - a.row_begin, BM), nunits = ceil_div(nrb, CL);
    const int64_t my_units = q_first < nunits ? ceil_div(nunits - q_first, q_stride) : 0;
    const int64_t ntiles = ceil_div(a.col_end - a.col_begin, TN);
    const int64_t t0 = win * a.tiles_per_cta;
    const int64_t t1 = min(t0 + (int64_t)a.tiles_per_cta, ntiles);
    const int KT = a.d / BK;
    const int64_t iters = my_units * (t1 - t0) * KT;
    const int64_t wcol0 = a.col_begin + t0 * TN, wcol1 = a.col_begin + t1 * TN;

    if (tid == 0) {
        for (int s = 0; s < T_STAGES; s++) {
            mbar_init(full_bar + 8 * s, 1);       /* the issuing thread's arrive + the copies' bytes */
            mbar_init(empty_bar + 8 * s, 8 * CL); /* every warp of every CTA, after its wgmma on the stage */
        }
        mbar_init_fence();
    }
    cluster_sync_all(); /* the peer's barriers are initialised before any copy or arrive reaches them */

    /* the copy issuer's position in the (unit, tile, k chunk) sequence (used by thread 0) */
    int64_t ld_it = 0, ld_row0 = a.row_begin + (q_first * CL + rank) * BM, ld_col0 = wcol0;
    int ld_kc = 0;
    auto issue = [&]() {
        const int s = (int)(ld_it % T_STAGES);
        if (ld_it >= T_STAGES) mbar_wait(empty_bar + 8 * s, (uint32_t)((ld_it / T_STAGES - 1) & 1));
        const uint32_t base = ring + s * T_STAGE_BYTES;
        mbar_expect_tx(full_bar + 8 * s, T_STAGE_BYTES); /* H + the whole W stage, whoever fetches it */
        tma_load_2d(base, &tm_h, ld_kc * BK, (int)ld_row0, full_bar + 8 * s);
        tma_load_2d_multicast(base + W_A_BYTES + rank * (TN / CL) * BK * 2, &tm_w, ld_kc * BK,
                              (int)(ld_col0 + rank * (TN / CL)), full_bar + 8 * s, (uint16_t)((1u << CL) - 1));
        ld_it++;
        if (++ld_kc == KT) {
            ld_kc = 0, ld_col0 += TN;
            if (ld_col0 == wcol1) ld_col0 = wcol0, ld_row0 += q_stride * CL * BM;
        }
    };
    if (tid == 0)
        while (ld_it < iters && ld_it < T_STAGES - 1) issue();

    float acc[NACC];
#pragma unroll
    for (int i = 0; i < NACC; i++) acc[i] = 0.0f;
    int64_t it = 0;
    for (int64_t u = q_first; u < nunits; u += q_stride) {
        const int64_t row0 = a.row_begin + (u * CL + rank) * BM;
        int tgt[2];
        float m_run[2], a_run[2], z_run[2], lse2[2];
        int64_t rows[2];
        wg_row_block_begin<MODE>(a, row0 + wg * 64 + wq * 16 + (lane >> 2), rows, tgt, m_run, a_run, z_run, lse2);
        for (int64_t tile_col0 = wcol0; tile_col0 < wcol1; tile_col0 += TN) {
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
                if (lane == 31)
#pragma unroll
                    for (int c = 0; c < CL; c++) mbar_arrive_cluster(empty_bar + 8 * s, (uint32_t)c);
            }
            /* launched early (launch_tile_kernel): the previous kernel may still read the buffer
             * this epilogue writes */
            if (MODE != MODE_STATS && it == KT) asm volatile("griddepcontrol.wait;\n" ::: "memory");
            /* soft-capping: the epilogue (and the target's logit) sees the capped logits */
            if (a.opt.logit_softcap > 0.0f) {
                const float cap = a.opt.logit_softcap;
#pragma unroll
                for (int i = 0; i < NACC; i++) acc[i] = outl_cap(acc[i], cap);
            }
            wg_tile_epilogue<MODE>(a, acc, tile_col0, lane, rows, tgt, m_run, a_run, z_run, lse2,
                                        full_bar + 128 + warp * 512);
        }
        wg_window_end<MODE>(a, win, lane, rows, m_run, a_run, z_run);
    }
    cluster_sync_all(); /* no CTA leaves while its peer may still signal its barriers */
#else
    __trap();
#endif
}

/* A row's lse and loss from its reference K (log2 units: an integer for the streaming statistics,
 * the target's logit for the scaled exponentials) and the sum S of 2^(z log2(e) - K) over its
 * logits; returns lse / ln 2. In fp64, and z_target scaled by the same
 * fp32 log2(e) as the exponents, so that the constant's rounding cancels in the loss: at |z| ~ 100
 * an fp32 lse - z would lose a confident row's loss (~1e-3) to rounding. */
__device__ __forceinline__ double finish_row(float K, double S, int t, float zt, int64_t row, float *lse_out,
                                             float *lse_user, float *row_loss) {
    const double lse2 = (double)K + log2(S);
    row_loss[row] = t == -1 ? 0.0f : (float)((lse2 - (double)zt * (double)LOG2E) * LN2);
    const float lse = (float)(lse2 * LN2);
    lse_out[row] = lse;
    if (lse_user) lse_user[row] = lse;
    return lse2;
}

/* Each row's (k, sum) pairs over the forward's windows merged: lse and loss (0 if ignored). With
 * ref2_out, also lse in log2 units as the row's new reference; with run_if, only if *run_if is set.
 * With row_obj, the row's objective under opt (0 if ignored), from the windows' sums of logits
 * win_zs (NULL: no smoothing, none needed). */
__global__ void fused_merge_kernel(const float *win_k, const float *win_a, int nwin, int64_t ld, const float *zt,
                                   const int32_t *targets, int64_t N, float *lse_out, float *lse_user,
                                   float *row_loss, const int *run_if, float *ref2_out, const float *win_zs,
                                   const OutputLossOptions opt, int64_t V, float *row_obj) {
    const int64_t row = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= N || (run_if && !*run_if)) return;
    float K = -INFINITY;
    for (int w = 0; w < nwin; w++) K = fmaxf(K, win_k[w * ld + row]);
    float S = 0.0f;
    for (int w = 0; w < nwin; w++) S += rescale_sum(win_a[w * ld + row], win_k[w * ld + row], K);
    const int t = targets[row];
    const double lse2 = finish_row(K, S, t, zt[row], row, lse_out, lse_user, row_loss);
    if (ref2_out) ref2_out[row] = (float)lse2;
    if (row_obj) {
        double zs = 0.0;
        if (win_zs)
            for (int w = 0; w < nwin; w++) zs += (double)win_zs[w * ld + row];
        row_obj[row] = t == -1 ? 0.0f : outl_objective(opt, (double)row_loss[row], lse2 * LN2, zs, V);
    }
}

/* A vocabulary slice's statistics per row (output_slice_forward): its windows' (k, sum) merged as
 * fused_merge_kernel merges them, and the target logit (0 when the slice does not hold the
 * target: zt was zeroed). */
__global__ void slice_merge_kernel(const float *win_k, const float *win_a, int nwin, int64_t ld, const float *zt,
                                   int64_t N, float *stats) {
    const int64_t row = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= N) return;
    float K = -INFINITY;
    for (int w = 0; w < nwin; w++) K = fmaxf(K, win_k[w * ld + row]);
    float S = 0.0f;
    for (int w = 0; w < nwin; w++) S += rescale_sum(win_a[w * ld + row], win_k[w * ld + row], K);
    stats[row] = K, stats[N + row] = S, stats[2 * N + row] = zt[row];
}

/* R slices' statistics per row combined in rank order: the integer references' max, the sums
 * rescaled to it by powers of two, the one target logit; then lse and loss as the whole layer's
 * merge finishes them. */
__global__ void slices_combine_kernel(const float *g, int R, int64_t N, const int32_t *targets, float *lse,
                                      float *row_loss) {
    const int64_t row = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= N) return;
    float K = -INFINITY;
    for (int r = 0; r < R; r++) K = fmaxf(K, g[(int64_t)r * 3 * N + row]);
    float S = 0.0f, zt = 0.0f;
    for (int r = 0; r < R; r++) {
        const float *st = g + (int64_t)r * 3 * N;
        S += rescale_sum(st[N + row], st[row], K);
        zt += st[2 * N + row];
    }
    finish_row(K, S, targets[row], zt, row, lse, NULL, row_loss);
}

void outl_slices_combine(const float *gathered, int R, int64_t N, const int32_t *targets, float *lse,
                         float *row_loss, cudaStream_t stream) {
    slices_combine_kernel<<<(unsigned)ceil_div(N, 256), 256, 0, stream>>>(gathered, R, N, targets, lse, row_loss);
    CUDA_CHECK(cudaGetLastError());
}

/* Eight floats rounded to bf16, as one 16-byte store. */
__device__ __forceinline__ void store_bf16x8(bf16 *out, const float (&v)[8]) {
    __nv_bfloat162 o[4];
#pragma unroll
    for (int k = 0; k < 4; k++) o[k] = __floats2bfloat162_rn(v[2 * k], v[2 * k + 1]);
    *reinterpret_cast<int4 *>(out) = *reinterpret_cast<int4 *>(o);
}

/* v[k] += c W[col, j + k] for eight consecutive k */
__device__ __forceinline__ void add_row8(float (&v)[8], float c, const bf16 *W, int64_t col, int d, int64_t j) {
    const uint4 wv = *reinterpret_cast<const uint4 *>(W + col * d + j);
    const __nv_bfloat162 *wp = reinterpret_cast<const __nv_bfloat162 *>(&wv);
#pragma unroll
    for (int k = 0; k < 4; k++) {
        const float2 w2 = __bfloat1622float2(wp[k]);
        v[2 * k] = fmaf(c, w2.x, v[2 * k]), v[2 * k + 1] = fmaf(c, w2.y, v[2 * k + 1]);
    }
}

/* dH of a streaming chunk from its fp32 scale dZ W: dH = that + scale tcoef W[target] (what the
 * bf16 dZ lost at the target), + scale resid W[column] for a row's peak (peak non-NULL), in bf16,
 * a thread per 8 values. */
__global__ void stream_dh_kernel(bf16 *dH, const float *acc, const float *tcoef, const unsigned long long *peak,
                                 const int32_t *targets, const bf16 *W, const float *scale, int d, int64_t n8) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n8) return;
    const int64_t r = (i * 8) / d, j = (i * 8) % d;
    const float4 x = reinterpret_cast<const float4 *>(acc)[2 * i], y = reinterpret_cast<const float4 *>(acc)[2 * i + 1];
    float v[8] = {x.x, x.y, x.z, x.w, y.x, y.y, y.z, y.w};
    const int t = targets[r];
    if (t != -1) add_row8(v, tcoef[r] * *scale, W, t, d, j);
    if (peak && peak[r]) add_row8(v, peak_resid(peak[r]) * *scale, W, peak_col(peak[r]), d, j);
    store_bf16x8(dH + 8 * i, v);
}

/* stream_dh_kernel's correction where dH stays fp32 (a vocabulary slice's partial dH): dH +=
 * scale tcoef W[target] in place, only for rows whose target the slice holds (t in [0, V)). */
__global__ void stream_dh_f32_kernel(float *dH, const float *tcoef, const int32_t *targets, const bf16 *W,
                                     const float *scale, int d, int64_t V, int64_t n8) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n8) return;
    const int64_t r = (i * 8) / d, j = (i * 8) % d;
    const int t = targets[r];
    if (t < 0 || t >= V) return;
    const float c = tcoef[r] * *scale;
    const uint4 wv = *reinterpret_cast<const uint4 *>(W + (int64_t)t * d + j);
    const __nv_bfloat162 *wp = reinterpret_cast<const __nv_bfloat162 *>(&wv);
    float4 *out = reinterpret_cast<float4 *>(dH) + 2 * i;
    float4 x = out[0], y = out[1];
    float2 w0 = __bfloat1622float2(wp[0]), w1 = __bfloat1622float2(wp[1]), w2 = __bfloat1622float2(wp[2]),
           w3 = __bfloat1622float2(wp[3]);
    x.x = fmaf(c, w0.x, x.x), x.y = fmaf(c, w0.y, x.y), x.z = fmaf(c, w1.x, x.z), x.w = fmaf(c, w1.y, x.w);
    y.x = fmaf(c, w2.x, y.x), y.y = fmaf(c, w2.y, y.y), y.z = fmaf(c, w3.x, y.z), y.w = fmaf(c, w3.y, y.w);
    out[0] = x, out[1] = y;
}

/* The rows' peak columns (-1 where none), the keys that group the rows for the peaks' part of dW. */
__global__ void peak_columns_kernel(const unsigned long long *peak, int64_t N, int32_t *cols) {
    const int64_t r = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (r < N) cols[r] = peak_col(peak[r]);
}
/* Each row's reference for its scaled exponentials, in log2 units: its target's logit (its
 * column 0's when the target is ignored), so that E = 1 at the target and the row's sum S is at
 * least about 1; E overflows only where a logit exceeds the target's by ~40 (S > 2^60: a loss over
 * 41), which the merge flags. fp32 dot products, a warp per row, in a fixed order. */
__global__ void reference_logit_kernel(const bf16 *H, const bf16 *W, const int32_t *targets, int64_t N, int d,
                                       float cap, const float *wsum, float *ref2, float *zsum) {
    const int64_t row = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    const int lane = threadIdx.x & 31;
    if (row >= N) return;
    const int t = targets[row];
    const uint4 *h = reinterpret_cast<const uint4 *>(H + row * d);
    const uint4 *w = reinterpret_cast<const uint4 *>(W + (int64_t)(t < 0 ? 0 : t) * d);
    float z = 0.0f, zs = 0.0f;
    for (int i = lane; i < d / 8; i += 32) {
        const uint4 hv = h[i], wv = w[i];
        const __nv_bfloat162 *hp = reinterpret_cast<const __nv_bfloat162 *>(&hv);
        const __nv_bfloat162 *wp = reinterpret_cast<const __nv_bfloat162 *>(&wv);
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const float2 a = __bfloat1622float2(hp[j]), b = __bfloat1622float2(wp[j]);
            z = fmaf(a.x, b.x, fmaf(a.y, b.y, z));
            if (wsum) zs = fmaf(a.x, wsum[i * 8 + 2 * j], fmaf(a.y, wsum[i * 8 + 2 * j + 1], zs));
        }
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
        z += __shfl_xor_sync(0xffffffffu, z, off);
        zs += __shfl_xor_sync(0xffffffffu, zs, off);
    }
    if (lane == 0) {
        ref2[row] = outl_cap(z, cap) * LOG2E;
        if (wsum) zsum[row] = zs;
    }
}

/* Label smoothing's rank-1 terms: out[j] = sum over rows r of X[r][j] (rows whose target is -1
 * left out when targets is given), in fp64 and a fixed order: COLSUM_SLICES slices of rows summed
 * apart (grid y), then in order. */
__global__ void colsum_slices_kernel(const bf16 *X, int64_t rows, int d, const int32_t *targets, double *part) {
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= d) return;
    const int64_t r0 = rows * blockIdx.y / COLSUM_SLICES, r1 = rows * (blockIdx.y + 1) / COLSUM_SLICES;
    double s = 0.0;
    for (int64_t r = r0; r < r1; r++)
        if (!targets || targets[r] != -1) s += (double)__bfloat162float(X[r * d + j]);
    part[(int64_t)blockIdx.y * d + j] = s;
}

__global__ void colsum_finish_kernel(const double *part, int d, float *out) {
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= d) return;
    double s = 0.0;
    for (int k = 0; k < COLSUM_SLICES; k++) s += part[(int64_t)k * d + j];
    out[j] = (float)s;
}

static void column_sums(const bf16 *X, int64_t rows, int d, const int32_t *targets, double *part, float *out,
                        cudaStream_t stream) {
    colsum_slices_kernel<<<dim3((unsigned)ceil_div(d, 128), COLSUM_SLICES), 128, 0, stream>>>(X, rows, d, targets,
                                                                                               part);
    CUDA_CHECK(cudaGetLastError());
    colsum_finish_kernel<<<(unsigned)ceil_div(d, 128), 128, 0, stream>>>(part, d, out);
    CUDA_CHECK(cudaGetLastError());
}

/* dW[v] -= scale uniform hsum for every word v < V: label smoothing's rank-1 part of dW. */
__global__ void smoothing_dw_kernel(float *dW, int64_t n, int d, const float *hsum, const float *scale,
                                    float uniform) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    dW[i] -= *scale * uniform * hsum[i % d];
}

/* A chunk row's scaled exponentials E = 2^(z log2(e) - s) sum to S = 2^(lse2 - s), so P = E / S.
 * Beyond this the merge flags (2^60, a loss over 41) the chunk is redone with s = lse2. */
#define EXP_SUM_LIMIT 1.152921504606846976e18

/* One CTA per row of a chunk, after the tile kernel: the row's lse and loss from its tiles' sums,
 * then what the GEMMs need to read P out of E without a pass over it: row_scale = 1 / S and
 * Hs = H / S (bf16; both 0 if ignored), so that the GEMMs' dH = scale row_scale (E W) and
 * dW += scale E^T Hs hold the softmax's part of the gradient. The one-hot part is kept out of E (its
 * entry at the target is set to 0) and added in fp32 from tcoef = p - 1 = expm1(z_target - lse):
 * (p - 1) S rounded to bf16, and H / S, would each carry 2^-9 of the row's largest gradient term,
 * the same across the row's d values, which no sum averages out.
 * A row whose S exceeds EXP_SUM_LIMIT (or is not finite) sets *overflow. The sum is in fp64 and a
 * fixed order (deterministic). With run_if: only if *run_if is set. */
#define MERGE_THREADS 256
__global__ void __launch_bounds__(MERGE_THREADS)
    exp_merge_kernel(bf16 *E, int64_t ldE, const float *tile_sums, int64_t ntiles, int64_t row0, const bf16 *H,
                     int d, const int32_t *targets, const float *ref2, const float *zt, float *lse_out,
                     float *lse_user, float *row_loss, float *row_scale, float *tcoef, bf16 *Hs, int *overflow,
                     const int *run_if, const OutputLossOptions opt, int64_t V, const float *zsum, float *row_obj) {
    __shared__ double red[MERGE_THREADS];
    __shared__ float inv_s;
    if (run_if && !*run_if) return;
    const int tid = threadIdx.x;
    const int64_t r = blockIdx.x, row = row0 + r;
    const float *ts = tile_sums + r * ntiles;
    double S = 0.0;
    for (int64_t i = tid; i < ntiles; i += MERGE_THREADS) S += (double)ts[i];
    red[tid] = S;
    __syncthreads();
    for (int w = MERGE_THREADS / 2; w > 0; w >>= 1) {
        if (tid < w) red[tid] += red[tid + w];
        __syncthreads();
    }
    const int t = targets[row];
    if (tid == 0) {
        S = red[0];
        const double lse2 = finish_row(ref2[row], S, t, zt[row], row, lse_out, lse_user, row_loss);
        if (!(S <= EXP_SUM_LIMIT)) *overflow = 1;
        const double lse = lse2 * LN2;
        /* the objective's factor on p (1 without options): ps / S is the row's scale */
        const double ps = t == -1 ? 0.0 : (double)outl_p_scale(opt, (float)lse);
        inv_s = t == -1 ? 0.0f : (float)(ps / S);
        row_scale[r] = inv_s;
        /* p_t - 1, or the objective's p_t ps - keep = (p_t - 1) ps + (ps - keep) without p_t's
         * cancellation, times the cap's slope at the target */
        double c = expm1(((double)zt[row] * (double)LOG2E - lse2) * LN2);
        if (opt.z_loss != 0.0f || opt.label_smoothing != 0.0f)
            c = c * ps + (2.0 * opt.z_loss * lse + opt.label_smoothing);
        if (opt.logit_softcap > 0.0f) {
            const double q = (double)zt[row] / opt.logit_softcap;
            c *= 1.0 - q * q;
        }
        tcoef[row] = t == -1 ? 0.0f : (float)c;
        if (row_obj)
            row_obj[row] = t == -1 ? 0.0f
                                   : outl_objective(opt, (double)row_loss[row], lse, zsum ? (double)zsum[row] : 0.0, V);
        if (t != -1) E[r * ldE + t] = __float2bfloat16(0.0f);
    }
    __syncthreads();
    const float f = inv_s;
    for (int j = tid; j < d; j += MERGE_THREADS)
        Hs[r * d + j] = __float2bfloat16(__bfloat162float(H[row * d + j]) * f);
}

/* dH of a chunk from its fp32 product E W: dH = scale (row_scale (E W) + tcoef W[target]) in bf16,
 * a thread per 8 values. */
__global__ void exp_dh_kernel(bf16 *dH, const float *EW, const float *row_scale, const float *tcoef,
                              const int32_t *targets, const bf16 *W, const float *scale, int d, int64_t n8,
                              const float *wsum, float uniform) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n8) return;
    const int64_t r = (i * 8) / d, j = (i * 8) % d;
    const int t = targets[r];
    const float g = *scale, f = row_scale[r] * g, c = tcoef[r] * g;
    const float4 x = reinterpret_cast<const float4 *>(EW)[2 * i], y = reinterpret_cast<const float4 *>(EW)[2 * i + 1];
    float v[8] = {x.x * f, x.y * f, x.z * f, x.w * f, y.x * f, y.y * f, y.z * f, y.w * f};
    if (t != -1) {
        const uint4 wv = *reinterpret_cast<const uint4 *>(W + (int64_t)t * d + j);
        const __nv_bfloat162 *wp = reinterpret_cast<const __nv_bfloat162 *>(&wv);
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const float2 w2 = __bfloat1622float2(wp[k]);
            v[2 * k] = fmaf(c, w2.x, v[2 * k]), v[2 * k + 1] = fmaf(c, w2.y, v[2 * k + 1]);
        }
        /* label smoothing's rank-1 part: - scale uniform sum_v W_v */
        if (wsum)
#pragma unroll
            for (int k = 0; k < 8; k++) v[k] = fmaf(-g * uniform, wsum[j + k], v[k]);
    }
    store_bf16x8(dH + 8 * i, v);
}

/* A row's fp32 coefficient on the one-hot part of dW: at its target (tcoef), or at its peak. */
struct TargetCoef {
    const float *tcoef;
    __device__ float operator()(int64_t r) const { return tcoef[r]; }
};
struct PeakCoef {
    const unsigned long long *peak;
    __device__ float operator()(int64_t r) const { return peak_resid(peak[r]); }
};

/* The one-hot part of dW: dW[t] += scale sum of coef(r) H_r over the rows aiming at t (their
 * target, or their peak column), in row order. keys and rows: the columns and row indices sorted
 * by column (stably), a block per position; the first position of each column sums its rows, so
 * every dW row has one owner and no atomics. Columns at or past V are a vocabulary slice's rows
 * whose target another slice holds: no row of this dW, and their coefficient was never written. */
template <class Coef>
__global__ void onehot_dw_kernel(const int32_t *keys, const int32_t *rows, int64_t N, Coef coef, const bf16 *H,
                                 int d, int64_t V, const float *scale, float *dW) {
    const int64_t i = blockIdx.x;
    const int t = keys[i];
    if (t < 0 || t >= V || (i > 0 && keys[i - 1] == t)) return;
    const float g = *scale;
    for (int j = threadIdx.x; j < d; j += blockDim.x) {
        float acc = 0.0f;
        for (int64_t k = i; k < N && keys[k] == t; k++) {
            const int64_t r = rows[k];
            acc = fmaf(coef(r), __bfloat162float(H[r * d + j]), acc);
        }
        dW[(int64_t)t * d + j] += g * acc;
    }
}

/* Bytes of scratch to sort up to max_N rows by target (all 32 bits: -1 marks an ignored row). */
size_t outl_target_sort_bytes(int64_t max_N) { return sort_rows_by_key_temp_bytes((int)max_N, 32); }

/* ---- host side ---------------------------------------------------------------------------- */

typedef void (*TileKernel)(const TileArgs, const CUtensorMap, const CUtensorMap);

/* A launch of the tile kernel in clusters of CLUSTER CTAs along the grid axis of the row blocks (y
 * for the forward's statistics, x for the backward's); *at must outlive the config. */
static cudaLaunchConfig_t cluster_config(dim3 grid, int rows_on_y, cudaLaunchAttribute *at, cudaStream_t stream) {
    *at = cudaLaunchAttribute{};
    at->id = cudaLaunchAttributeClusterDimension;
    at->val.clusterDim.x = rows_on_y ? 1u : (unsigned)CLUSTER;
    at->val.clusterDim.y = rows_on_y ? (unsigned)CLUSTER : 1u;
    at->val.clusterDim.z = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid, cfg.blockDim = dim3((unsigned)T_THREADS), cfg.dynamicSmemBytes = (size_t)T_SMEM;
    cfg.stream = stream, cfg.attrs = at, cfg.numAttrs = 1;
    return cfg;
}

/* How many clusters the GPU holds at once (a cluster's CTAs share a GPC, so an odd SM left in a
 * GPC holds none); sets the kernels' shared-memory limit on first use. */
static int64_t resident_clusters(void) {
    static int clusters;
    if (!clusters) {
        const TileKernel k[3] = {tile_kernel<MODE_STATS>, tile_kernel<MODE_DZ>, tile_kernel<MODE_EXP>};
        for (int i = 0; i < 3; i++)
            CUDA_CHECK(cudaFuncSetAttribute((const void *)k[i], cudaFuncAttributeMaxDynamicSharedMemorySize, T_SMEM));
        cudaLaunchAttribute at;
        const cudaLaunchConfig_t cfg = cluster_config(dim3((unsigned)CLUSTER * 64), 0, &at, 0);
        int n = 0;
        CUDA_CHECK(cudaOccupancyMaxActiveClusters(&n, (const void *)k[0], &cfg));
        clusters = n < 1 ? 1 : n;
    }
    return clusters;
}

/* early: a programmatic dependent launch. Its CTAs may start while the previous kernel on the
 * stream (a backward GEMM) is finishing, and load and multiply their first tile meanwhile; the
 * kernel waits for that kernel's completion (griddepcontrol.wait) before it writes the buffer that
 * GEMM reads. Only where the previous kernel is ours to know: it must not write H, W, lse or
 * targets. */
static void launch_tile_kernel(TileKernel f, dim3 grid, int rows_on_y, int early, const TileArgs &t,
                               const CUtensorMap &tm_h, const CUtensorMap &tm_w, cudaStream_t stream) {
    resident_clusters();
    cudaLaunchAttribute at[2];
    cudaLaunchConfig_t cfg = cluster_config(grid, rows_on_y, &at[0], stream);
    if (early) {
        at[1] = cudaLaunchAttribute{};
        at[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        at[1].val.programmaticStreamSerializationAllowed = 1;
        cfg.numAttrs = 2;
    }
    CUDA_CHECK(cudaLaunchKernelEx(&cfg, f, t, tm_h, tm_w));
}

int64_t output_layer_chunk_rows(int64_t max_N, int64_t V, size_t budget) {
    if (max_N < 1 || V < 1) return 0;
    const size_t per_row = (size_t)round_up(V, TN) * sizeof(bf16) + (size_t)ceil_div(V, TN) * sizeof(float);
    const int64_t rows = (int64_t)(budget / per_row);
    return rows < max_N ? rows : max_N;
}

OutlFusedSizes outl_fused_sizes(int64_t max_N, int64_t V, int d, int sms, size_t budget) {
    OutlFusedSizes s = {};
    const int64_t rb = ceil_div(max_N, BM);
    /* windows x rows <= (2 sms / rb + 1 + 8 + L2 term) x rb x 128 for every N <= max_N */
    const int64_t l2min = ceil_div((int64_t)sms * BM * d * 2, L2_H_BUDGET);
    s.stats_elems = (int64_t)BM * (2 * (int64_t)sms + rb * (10 + l2min));
    s.exp_rows = output_layer_chunk_rows(max_N, V, budget);
    if (s.exp_rows > 0) {
        s.exp_ld = round_up(V, TN);
        s.exp_tiles = ceil_div(V, TN);
        /* options the chunks do not take run the streaming backward here, in the chunk's buffers:
         * chunks of its rows, one window of the whole vocabulary */
        s.chunk_rows = s.exp_rows;
        s.window_cols = s.exp_ld;
        return s;
    }
    /* The streaming backward's chunk x window. Large problems at narrow widths get square windows
     * of 8192 x 8192 (128 MiB): faster at d = 768 than 4096 x 8192 (dev/RESULTS.md: 1-2 % at
     * N = 65536, 5 % at 768/16384/50304; cuBLAS runs the window's dW product at 722 instead of
     * 604 TFLOP/s), the fp32 dH chunk of 8192 rows still fits its 32 MiB. */
    const bool square = (int64_t)SQUARE_WINDOW * d <= DH_BUDGET_ELEMS && max_N * V * 2 >= ((int64_t)3 << 29);
    const int64_t max_rows = square ? SQUARE_WINDOW : MAX_CHUNK_ROWS;
    const int64_t dz_elems = square ? (int64_t)SQUARE_WINDOW * SQUARE_WINDOW : DZ_BUDGET_ELEMS;
    int64_t rows = DH_BUDGET_ELEMS / d;
    if (rows > max_rows) rows = max_rows;
    rows = rows / BM * BM;
    if (rows < BM) rows = BM;
    if (rows > round_up(max_N, BM)) rows = round_up(max_N, BM);
    s.chunk_rows = rows;
    int64_t cols = dz_elems / rows;
    if (cols > MAX_WINDOW_COLS) cols = MAX_WINDOW_COLS;
    cols = cols / TN * TN;
    if (cols < TN) cols = TN;
    if (cols > round_up(V, TN)) cols = round_up(V, TN);
    s.window_cols = cols;
    return s;
}

/* A [rows x d] bf16 row-major tensor read in boxes of box_rows x BK with the 128-byte swizzle;
 * rows past the end read as zeros. */
static CUtensorMap tensor_map(const bf16 *ptr, int64_t rows, int d, int box_rows) {
    const cuuint64_t dims[2] = {(cuuint64_t)d, (cuuint64_t)rows};
    const cuuint64_t strides[1] = {(cuuint64_t)d * sizeof(bf16)};
    const cuuint32_t box[2] = {BK, (cuuint32_t)box_rows};
    return tma_tensor_map_bf16(ptr, 2, dims, strides, box, "output layer");
}


/* Persistent forward: G windows x P row-block units = at most one cluster per resident slot; each
 * CTA sweeps its window for units p, p + P, ... Every CTA does the same work per row block, so they
 * stay in step: the P units of a window stream the same W tiles (read from DRAM about once per
 * pass) and the G CTAs of a row block share its H block. G is at least what keeps the P units' H in
 * L2, then chosen (within +8) to waste the fewest slots. */
static void persistent_plan(int64_t N, int64_t V, int d, int64_t slots, int64_t max_windows, int64_t *G_out,
                            int64_t *P_out, int64_t *tpc_out) {
    const int64_t urows = BM * CLUSTER, rb = ceil_div(N, urows), ntiles = ceil_div(V, TN);
    int64_t gmin = ceil_div(slots * urows * d * 2, L2_H_BUDGET);
    if (gmin > max_windows - 8) gmin = max_windows - 8 > 1 ? max_windows - 8 : 1; /* the statistics workspace */
    /* few row blocks: more windows to fill the GPU, but no more than fit beside all row blocks at
     * once (rounding up would leave one block for a second pass: N = 1024 ran at 1.3x a GEMM) */
    const int64_t g_fill = slots / rb > 1 ? slots / rb : 1;
    if (g_fill > gmin) gmin = g_fill;
    if (gmin > ntiles) gmin = ntiles;
    *G_out = 1, *P_out = 1, *tpc_out = ntiles;
    double best = -1.0;
    for (int64_t g = gmin; g <= gmin + 8 && g <= ntiles && g <= max_windows; g++) {
        const int64_t tpc = ceil_div(ntiles, g), ge = ceil_div(ntiles, tpc);
        int64_t P = slots / ge;
        if (P < 1) P = 1;
        if (P > rb) P = rb;
        /* busy fraction: slots used x row-block passes filled x tiles per window filled */
        const double eff = (double)(ge * P) / slots * ((double)rb / (double)(ceil_div(rb, P) * P)) *
                           ((double)ntiles / (double)(ge * tpc));
        if (eff > best + 1e-3) best = eff, *G_out = ge, *P_out = P, *tpc_out = tpc;
    }
}

/* The backward-style launch over rows [r0, r0 + nr) and columns [c0, c0 + nc): P row-block units at
 * a time (their H blocks stay in L2), the columns' tiles split among the remaining slots; each CTA
 * sweeps its tiles unit after unit. P is chosen by the products a CTA runs, passes x tiles per CTA,
 * not by the most units L2 holds: Qwen3-0.6B's chunk (26 units of 256 rows, 594 tiles) in one pass
 * leaves 66 / 26 = 2 groups, 52 of 66 clusters busy and 297 products each; two passes of 13 units
 * take 5 groups, 65 busy and 2 x 119 = 238 products each. A tie keeps the fewer passes (each pass
 * streams W from DRAM again). Which CTA runs a tile changes nothing in its results. Returns the grid
 * (x: units' CTAs, y: tile groups). */
static dim3 row_sweep_grid(int64_t nr, int64_t nc, int64_t d, TileArgs *t) {
    const int64_t ur = BM * CLUSTER, nrb = ceil_div(nr, ur), nt = ceil_div(nc, TN), slots = resident_clusters();
    int64_t pmax = L2_H_BUDGET / (ur * d * 2);
    pmax = pmax < 1 ? 1 : pmax > nrb ? nrb : pmax;
    const int64_t fewest = ceil_div(nrb, pmax);
    int64_t best_P = 1, best_tpc = nt, best_cost = -1;
    for (int64_t passes = fewest; passes <= fewest + 8 && passes <= nrb; passes++) {
        /* equal passes: 128 blocks with room for 85 run as 64 + 64, not 85 + 43 */
        const int64_t P = ceil_div(nrb, passes);
        int64_t G = slots / P;
        G = G < 1 ? 1 : G > nt ? nt : G;
        const int64_t tpc = ceil_div(nt, G), cost = ceil_div(nrb, P) * tpc;
        if (best_cost < 0 || cost < best_cost) best_cost = cost, best_P = P, best_tpc = tpc;
    }
    t->tiles_per_cta = (int)best_tpc;
    return dim3((unsigned)(best_P * CLUSTER), (unsigned)ceil_div(nt, best_tpc));
}

void outl_fused_forward(OutputLayer *L, const OutputLayerArgs *a, float *row_loss, float *slice_stats,
                        cudaStream_t stream) {
    const int64_t N = a->N, V = L->V;
    int64_t nwin = 1, tpc = 1, P = 1;
    persistent_plan(N, V, L->d, resident_clusters(), L->fs.stats_elems / N, &nwin, &P, &tpc);
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
    t.opt = a->options;
    if (a->options.label_smoothing != 0.0f) t.win_zs = L->win_zs;
    launch_tile_kernel(tile_kernel<MODE_STATS>, dim3((unsigned)nwin, (unsigned)(P * CLUSTER)), 1, 0, t,
                       tensor_map(t.H, N, L->d, BM), tensor_map(t.W, V, L->d, TN / CLUSTER), stream);
    CUDA_CHECK(cudaGetLastError());
    if (slice_stats) {
        slice_merge_kernel<<<(unsigned)ceil_div(N, 256), 256, 0, stream>>>(L->win_m, L->win_a, (int)nwin, N, L->zt,
                                                                           N, slice_stats);
        CUDA_CHECK(cudaGetLastError());
        return;
    }
    const int objective = a->options.logit_softcap != 0.0f || output_loss_has_objective(&a->options);
    fused_merge_kernel<<<(unsigned)ceil_div(N, 256), 256, 0, stream>>>(
        L->win_m, L->win_a, (int)nwin, N, L->zt, a->targets, N, L->lse, a->row_lse, row_loss, NULL, NULL, t.win_zs,
        a->options, V, objective ? L->row_obj : NULL);
    CUDA_CHECK(cudaGetLastError());
}

void outl_fused_backward(OutputLayer *L, const OutputLayerArgs *a, float *dH_f32, cudaStream_t stream) {
    const int64_t N = a->N, V = L->V, d = L->d;
    if (L->fs.chunk_rows < 1 || L->fs.window_cols < TN) {
        fprintf(stderr, "error: output layer: internal: no streaming backward workspace (%lld rows x %lld columns)\n",
                (long long)L->fs.chunk_rows, (long long)L->fs.window_cols);
        exit(1);
    }
    /* balanced chunks and windows, each no larger than the workspace was sized for (whole row
     * blocks where the chunk holds one; a chunked layer's may be fewer rows) */
    const int64_t nchunks = ceil_div(N, L->fs.chunk_rows);
    const int64_t rows = min(round_up(ceil_div(N, nchunks), BM), L->fs.chunk_rows);
    const int64_t nwins = ceil_div(V, L->fs.window_cols);
    const int64_t cols = round_up(ceil_div(V, nwins), TN);
    bf16 *dz = L->fs.exp_rows ? (bf16 *)L->ex : L->dz;
    const bf16 *H = (const bf16 *)a->H, *W = (const bf16 *)a->W;
    const float *sc = L->scalars;
    const CUtensorMap tm_h = tensor_map(H, N, (int)d, BM), tm_w = tensor_map(W, V, (int)d, TN / CLUSTER);
    /* the rows grouped by target, for what dZ's rounding took from dW's target rows */
    int32_t *keys = L->target_sort, *rows_in = keys + L->max_N, *rows_by_target = rows_in + L->max_N;
    sort_rows_by_key(a->targets, keys, rows_in, rows_by_target, L->target_sort_temp, L->target_sort_temp_bytes, (int)N,
                     32, stream);
    unsigned long long *peak = dz_has_options(a->options) ? L->peak : NULL;
    if (peak) CUDA_CHECK(cudaMemsetAsync(peak, 0, (size_t)N * sizeof *peak, stream));
    for (int64_t r0 = 0; r0 < N; r0 += rows) {
        const int64_t nr = min(rows, N - r0);
        float *dh = dH_f32 ? dH_f32 + r0 * d : L->dh_acc;
        for (int64_t c0 = 0; c0 < V; c0 += cols) {
            const int64_t nc = min(cols, V - c0);
            TileArgs t = {};
            t.H = H, t.W = W, t.targets = a->targets;
            t.row_begin = r0, t.row_end = r0 + nr, t.col_begin = c0, t.col_end = c0 + nc;
            t.d = (int)d;
            t.lse = L->lse, t.dz = dz, t.ldz = cols, t.tcoef = L->tcoef, t.peak = peak;
            t.opt = a->options, t.V = V;
            const dim3 grid = row_sweep_grid(nr, nc, d, &t);
            launch_tile_kernel(tile_kernel<MODE_DZ>, grid, 0, r0 > 0 || c0 > 0, t, tm_h, tm_w, stream);
            CUDA_CHECK(cudaGetLastError());
            /* dH_chunk^T [d x nr] (=/+=) (W_window stored d x nc) . (dZ stored nc x nr, ld cols) */
            outl_gemm(L, CUBLAS_OP_N, CUBLAS_OP_N, d, nr, nc, W + c0 * d, d, dz, cols, dh, CUDA_R_32F, d,
                      sc + OUTL_SCALE, sc + (c0 == 0 ? OUTL_ZERO : OUTL_ONE), stream);
            /* dW_window^T [d x nc] += (H_chunk stored d x nr) . (dZ stored nc x nr)^T */
            outl_gemm(L, CUBLAS_OP_N, CUBLAS_OP_T, d, nc, nr, H + r0 * d, d, dz, cols, a->dW + c0 * d, CUDA_R_32F,
                      d, sc + OUTL_SCALE, sc + OUTL_ONE, stream);
        }
        const int64_t n8 = nr * d / 8;
        if (dH_f32) {
            stream_dh_f32_kernel<<<(unsigned)ceil_div(n8, 256), 256, 0, stream>>>(
                dh, L->tcoef + r0, a->targets + r0, W, sc + OUTL_SCALE, (int)d, V, n8);
            CUDA_CHECK(cudaGetLastError());
            continue;
        }
        stream_dh_kernel<<<(unsigned)ceil_div(n8, 256), 256, 0, stream>>>(
            (bf16 *)a->dH + r0 * d, L->dh_acc, L->tcoef + r0, peak ? peak + r0 : NULL, a->targets + r0, W,
            sc + OUTL_SCALE, (int)d, n8);
        CUDA_CHECK(cudaGetLastError());
    }
    onehot_dw_kernel<<<(unsigned)N, 128, 0, stream>>>(keys, rows_by_target, N, TargetCoef{L->tcoef}, H, (int)d, V,
                                                      sc + OUTL_SCALE, a->dW);
    CUDA_CHECK(cudaGetLastError());
    if (peak) { /* the same for the peaks, the rows now grouped by peak column */
        peak_columns_kernel<<<(unsigned)ceil_div(N, 256), 256, 0, stream>>>(peak, N, L->peak_cols);
        CUDA_CHECK(cudaGetLastError());
        sort_rows_by_key(L->peak_cols, keys, rows_in, rows_by_target, L->target_sort_temp, L->target_sort_temp_bytes,
                         (int)N, 32, stream);
        onehot_dw_kernel<<<(unsigned)N, 128, 0, stream>>>(keys, rows_by_target, N, PeakCoef{peak}, H, (int)d, V,
                                                          sc + OUTL_SCALE, a->dW);
        CUDA_CHECK(cudaGetLastError());
    }
}

/* The scaled-exponential path over rows [r0, r0 + nr) again, with each row's reference s = lse2
 * from the streaming statistics, so that E = P <= 1: the launches do nothing unless the merge
 * flagged a row (L->exp_overflow), as happens only where a loss exceeds 41. */
static void exp_chunk_redo(OutputLayer *L, const OutputLayerArgs *a, float *row_loss, int64_t r0, int64_t nr,
                           const TileArgs &exp_args, dim3 exp_grid, const CUtensorMap &tm_h, const CUtensorMap &tm_w,
                           cudaStream_t stream) {
    const int64_t V = L->V, d = L->d;
    int64_t nwin = 1, tpc = 1, P = 1;
    persistent_plan(nr, V, (int)d, resident_clusters(), L->fs.stats_elems / nr, &nwin, &P, &tpc);
    TileArgs t = {};
    t.H = exp_args.H, t.W = exp_args.W, t.targets = a->targets;
    t.row_begin = r0, t.row_end = r0 + nr, t.col_begin = 0, t.col_end = V;
    t.tiles_per_cta = (int)tpc, t.d = (int)d;
    t.win_m = L->win_m, t.win_a = L->win_a, t.stats_ld = nr, t.zt = L->zt;
    t.run_if = L->exp_overflow;
    t.opt = a->options; /* the cap; the objective is the chunk's merge's */
    launch_tile_kernel(tile_kernel<MODE_STATS>, dim3((unsigned)nwin, (unsigned)(P * CLUSTER)), 1, 0, t, tm_h, tm_w,
                       stream);
    CUDA_CHECK(cudaGetLastError());
    fused_merge_kernel<<<(unsigned)ceil_div(nr, 256), 256, 0, stream>>>(
        L->win_m, L->win_a, (int)nwin, nr, L->zt + r0, a->targets + r0, nr, L->lse + r0,
        a->row_lse ? a->row_lse + r0 : NULL, row_loss + r0, L->exp_overflow, L->exp_ref2 + r0, NULL,
        OutputLossOptions{}, V, NULL);
    CUDA_CHECK(cudaGetLastError());
    launch_tile_kernel(tile_kernel<MODE_EXP>, exp_grid, 0, 0, exp_args, tm_h, tm_w, stream);
    CUDA_CHECK(cudaGetLastError());
}

void outl_fused_exp_forward_backward(OutputLayer *L, const OutputLayerArgs *a, float *row_loss, cudaStream_t stream) {
    const int64_t N = a->N, V = L->V, d = L->d, ld = L->fs.exp_ld, nt = L->fs.exp_tiles;
    const int64_t nchunks = ceil_div(N, L->fs.exp_rows), rows = ceil_div(N, nchunks); /* balanced chunks */
    const bf16 *H = (const bf16 *)a->H, *W = (const bf16 *)a->W;
    const float *sc = L->scalars;
    const CUtensorMap tm_h = tensor_map(H, N, (int)d, BM), tm_w = tensor_map(W, V, (int)d, TN / CLUSTER);
    /* label smoothing's rank-1 terms: W summed over the vocabulary, H over the valid rows */
    const OutputLossOptions &o = a->options;
    const float *wsum = NULL, *hsum = NULL;
    const float uniform = o.label_smoothing / (float)V;
    if (o.label_smoothing != 0.0f) {
        column_sums(W, V, (int)d, NULL, L->exp_colsum, L->exp_rank1, stream);
        column_sums(H, N, (int)d, a->targets, L->exp_colsum, L->exp_rank1 + d, stream);
        wsum = L->exp_rank1, hsum = L->exp_rank1 + d;
    }
    reference_logit_kernel<<<(unsigned)ceil_div(N, 8), 256, 0, stream>>>(H, W, a->targets, N, (int)d,
                                                                         o.logit_softcap, wsum, L->exp_ref2,
                                                                         L->exp_zsum);
    CUDA_CHECK(cudaGetLastError());
    const int objective = o.logit_softcap != 0.0f || output_loss_has_objective(&o);
    /* the rows grouped by target, for the one-hot part of dW */
    int32_t *keys = L->target_sort, *rows_in = keys + L->max_N, *rows_by_target = rows_in + L->max_N;
    sort_rows_by_key(a->targets, keys, rows_in, rows_by_target, L->target_sort_temp, L->target_sort_temp_bytes, (int)N, 32,
                     stream);
    for (int64_t r0 = 0; r0 < N; r0 += rows) {
        const int64_t nr = min(rows, N - r0);
        TileArgs t = {};
        t.H = H, t.W = W, t.targets = a->targets;
        t.row_begin = r0, t.row_end = r0 + nr, t.col_begin = 0, t.col_end = V;
        t.d = (int)d;
        t.zt = L->zt, t.ref2 = L->exp_ref2, t.ex = (bf16 *)L->ex, t.ldz = ld, t.tile_sums = L->exp_sums, t.ntiles = nt;
        t.opt = o;
        const dim3 grid = row_sweep_grid(nr, V, d, &t);
        /* the kernel before it (the previous chunk's dW GEMM) reads E, which this one overwrites */
        launch_tile_kernel(tile_kernel<MODE_EXP>, grid, 0, r0 > 0, t, tm_h, tm_w, stream);
        CUDA_CHECK(cudaGetLastError());
        CUDA_CHECK(cudaMemsetAsync(L->exp_overflow, 0, sizeof(int), stream));
        auto merge = [&](const int *run_if) {
            exp_merge_kernel<<<(unsigned)nr, MERGE_THREADS, 0, stream>>>(
                (bf16 *)L->ex, ld, L->exp_sums, nt, r0, H, (int)d, a->targets, L->exp_ref2, L->zt, L->lse, a->row_lse,
                row_loss, L->exp_row_scale, L->tcoef, L->exp_hs, L->exp_overflow, run_if, o, V,
                wsum ? L->exp_zsum : NULL, objective ? L->row_obj : NULL);
            CUDA_CHECK(cudaGetLastError());
        };
        merge(NULL);
        /* only if the merge flagged a row: the chunk again from the exact lse, and its merge */
        TileArgs redo = t;
        redo.run_if = L->exp_overflow;
        exp_chunk_redo(L, a, row_loss, r0, nr, redo, grid, tm_h, tm_w, stream);
        merge(L->exp_overflow);
        /* (E W)^T [d x nr] = (W stored d x V) . (E stored V x nr, ld)                      (fp32) */
        outl_gemm(L, CUBLAS_OP_N, CUBLAS_OP_N, d, nr, V, W, d, L->ex, ld, L->dh_acc, CUDA_R_32F, d, sc + OUTL_ONE,
                  sc + OUTL_ZERO, stream);
        const int64_t n8 = nr * d / 8;
        exp_dh_kernel<<<(unsigned)ceil_div(n8, 256), 256, 0, stream>>>(a->dH + r0 * d, L->dh_acc, L->exp_row_scale,
                                                                 L->tcoef + r0, a->targets + r0, W,
                                                                 sc + OUTL_SCALE, (int)d, n8, wsum, uniform);
        CUDA_CHECK(cudaGetLastError());
        /* dW^T [d x V] += (Hs stored d x nr) . (E stored V x nr)^T                       (+=, fp32) */
        outl_gemm(L, CUBLAS_OP_N, CUBLAS_OP_T, d, V, nr, L->exp_hs, d, L->ex, ld, a->dW, CUDA_R_32F, d,
                  sc + OUTL_SCALE, sc + OUTL_ONE, stream);
    }
    onehot_dw_kernel<<<(unsigned)N, 128, 0, stream>>>(keys, rows_by_target, N, TargetCoef{L->tcoef}, H, (int)d, V,
                                                          sc + OUTL_SCALE, a->dW);
    CUDA_CHECK(cudaGetLastError());
    if (hsum) {
        smoothing_dw_kernel<<<(unsigned)ceil_div(V * d, 256), 256, 0, stream>>>(a->dW, V * d, (int)d, hsum,
                                                                             sc + OUTL_SCALE, uniform);
        CUDA_CHECK(cudaGetLastError());
    }
}
