/* kernels/attention.cu - causal multi-head self-attention in the flash-attention manner, forward
 * and backward, on bf16 tensor cores with fp32 accumulation: Hopper's warpgroup MMA (wgmma) for
 * head size 64, mma.sync m16n8k16 for 128 (and for 64 when attention_use_wgmma(0)). Both paths share
 * the blocks, the order of work and the arithmetic below; only how the products are issued differs.
 *
 * Shapes: qkv [B,T,3C] (q, k, v each C wide, head h at columns h·HS..), out [B,T,C],
 * lse [B,NH,T] fp32, dqkv [B,T,3C]; HS = C/NH ∈ {64, 128}; any T >= 1.
 * Math: S = scale·q·kᵀ (scale = 1/√HS), causal (key ≤ query), P = softmax(S), out = P·v.
 *   The kernels work in base 2: s2 = S·log2(e), P = exp2(s2 − lse2), and lse stores
 *   lse2 = max + log2(Σ exp2(s2 − max)) per query row: the one statistic the backward needs.
 *
 * Forward: grid (⌈T/64⌉, B·NH), 4 warps; a block owns 64 query rows (16 per warp, Q fragments in
 *   registers), loops over 64-key tiles up to the diagonal (K, V double-buffered through cp.async),
 *   online softmax in registers; no T×T tensor ever exists. Heaviest (last) query tiles start first.
 * Backward (deterministic, no atomics): D = rowsum(dout ∘ out) first; then
 *   dK,dV kernel: a block owns 64 keys (16 per warp), loops over query tiles from the diagonal on,
 *     recomputes Pᵀ = exp2(K·Qᵀ·c − lse), dV += Pᵀ·dO, dPᵀ = V·dOᵀ, dSᵀ = Pᵀ∘(dPᵀ − D), dK += dSᵀ·Q;
 *   dQ kernel: a block owns 64 queries, loops over key tiles up to the diagonal, recomputes P and dP,
 *     dQ += dS·K. P is recomputed twice (7 products instead of FA2's 5) in exchange for no atomics.
 * FLOPs (causal, ≈ half of T²): forward 2·B·NH·T²·HS (two products over T²/2 pairs); backward
 *   ≈ 7/2 of that. Bytes: forward reads qkv once per query tile (K, V re-read ⌈T/64⌉/2 times from
 *   L2), writes out and lse; compute bound for T ≳ 256.
 *
 * Fragment layouts used below (PTX ISA, mma.m16n8k16 .bf16): with g = lane/4, t = lane%4,
 *   A (16×16, row): a0 (g, 2t..2t+1), a1 (g+8, 2t..), a2 (g, 2t+8..), a3 (g+8, 2t+8..)
 *   B (16×8, col):  b0 (k 2t..2t+1, n g), b1 (k 2t+8.., n g)
 *   C (16×8):       c0,c1 (g, 2t..2t+1), c2,c3 (g+8, 2t..2t+1)
 * ldmatrix.x4 gives lane the row lane/4, columns 2·(lane%4).. of each of its four 8×8 matrices
 * (the transposed element with .trans), so a C fragment pair of adjacent n-tiles is exactly an A
 * fragment: this is how P and dS go from accumulators straight into the next product. */
#include <math.h>

#include "kernels/device_util.cuh"
#include "kernels/fast_math.cuh"
#include "kernels/kernel_util.cuh"
#include "kernels/kernels.h"
#include "kernels/wgmma.cuh"

#define ATT_THREADS 128 /* 4 warps */
#define ATT_TILE 64     /* query rows per forward / dQ block, keys per dK,dV block, key tile */
/* Query rows per tile of the dK,dV kernel at head size 64 (128 uses 32, for registers), and the
 * blocks per SM the kernels are compiled for (register cap): measured choices, dev/RESULTS.md
 * (attention). The wgmma dK,dV kernel issues its two gradient products as one group with one wait:
 * best together with 3 blocks (167 registers; one wait uncapped needs 196 registers, 2 blocks). */
#define ATT_BQ64 64
#define ATT_BWD64_MINB 3    /* 12 warps/SM: 0.54 ms vs 0.62 ms (uncapped, 8 warps) at B=16, T=1024 */
#define ATT_WG_BWD_MINB 3
#define ATT_FWD64_MINB 1    /* capping to 4 blocks (128 regs) spilled and ran slower */

/* ROWS rows of one head (HS bf16 each) starting at token t0 into a shared tile of row stride
 * HS + 8 (the 16-byte pad puts the 8 rows of every ldmatrix in different banks). */
template <int HS, int ROWS>
__device__ __forceinline__ void load_rows(bf16 *dst, const bf16 *src, size_t row_stride, int t0, int T) {
    constexpr int CHUNKS = HS / 8, SROW = HS + 8;
    for (int i = threadIdx.x; i < ROWS * CHUNKS; i += ATT_THREADS) {
        int r = i / CHUNKS, c = (i % CHUNKS) * 8, t = t0 + r;
        bool valid = t < T;
        cp_async16(dst + r * SROW + c, src + (size_t)(valid ? t : 0) * row_stride + c, valid);
    }
}

/* Starts the copies of key/value tile j+1 into the other buffer of Ks, Vs ([2][64][HS+8] each)
 * when there is one, and waits for tile j's; the caller synchronizes before reading. */
template <int HS>
__device__ __forceinline__ void next_kv_tile_or_wait_padded(bf16 *Ks, bf16 *Vs, const bf16 *kbase, const bf16 *vbase,
                                                            size_t row_stride, int j, int nkv, int T) {
    constexpr int TILE_ELEMS = ATT_TILE * (HS + 8);
    if (j + 1 < nkv) {
        int nb = (j + 1) & 1;
        load_rows<HS, ATT_TILE>(Ks + nb * TILE_ELEMS, kbase, row_stride, (j + 1) * ATT_TILE, T);
        load_rows<HS, ATT_TILE>(Vs + nb * TILE_ELEMS, vbase, row_stride, (j + 1) * ATT_TILE, T);
        cp_async_commit();
        cp_async_wait<1>();
    } else {
        cp_async_wait<0>();
    }
}

/* A fragment (16 rows × 16 cols at row0, col0) of a row-major shared tile. */
template <int SROW>
__device__ __forceinline__ void load_a(uint32_t a[4], const bf16 *tile, int row0, int col0, int lane) {
    ldmatrix_x4(a, tile + (row0 + (lane % 8) + ((lane / 8) % 2) * 8) * SROW + col0 + (lane / 16) * 8);
}
/* B fragments of two adjacent n-tiles (n0..n0+15) when the tile is stored [n][k] (k contiguous):
 * r0,r1 = b0,b1 of n-tile n0; r2,r3 = b0,b1 of n-tile n0+8. */
template <int SROW>
__device__ __forceinline__ void load_b_nk(uint32_t r[4], const bf16 *tile, int n0, int k0, int lane) {
    ldmatrix_x4(r, tile + (n0 + (lane % 8) + (lane / 16) * 8) * SROW + k0 + ((lane / 8) % 2) * 8);
}
/* The same when the tile is stored [k][n] (n contiguous): the transposing ldmatrix. */
template <int SROW>
__device__ __forceinline__ void load_b_kn(uint32_t r[4], const bf16 *tile, int k0, int n0, int lane) {
    ldmatrix_x4_trans(r, tile + (k0 + (lane % 8) + ((lane / 8) % 2) * 8) * SROW + n0 + (lane / 16) * 8);
}

/* acc[16 × 8·NT] += A-tile(16 × 16·KS, rows row0 of `a_tile`) · Bᵀ where B is stored [n][k] in b_tile. */
template <int SROW, int KS, int NT>
__device__ __forceinline__ void mma_abt(float acc[NT][4], const bf16 *a_tile, int row0, const bf16 *b_tile,
                                        int lane) {
#pragma unroll
    for (int ks = 0; ks < KS; ks++) {
        uint32_t a[4];
        load_a<SROW>(a, a_tile, row0, ks * 16, lane);
#pragma unroll
        for (int np = 0; np < NT / 2; np++) {
            uint32_t r[4];
            load_b_nk<SROW>(r, b_tile, np * 16, ks * 16, lane);
            mma_bf16(acc[2 * np], a, r[0], r[1]);
            mma_bf16(acc[2 * np + 1], a, r[2], r[3]);
        }
    }
}

/* acc[16 × HS] += P(16 × 16·KT, in C-fragment registers) · V where V is stored [k][n] in v_tile. */
template <int SROW, int KT, int HS>
__device__ __forceinline__ void mma_pv(float acc[HS / 8][4], const float p[2 * KT][4], const bf16 *v_tile,
                                       int lane) {
#pragma unroll
    for (int kk = 0; kk < KT; kk++) {
        uint32_t a[4] = {pack_bf16(p[2 * kk][0], p[2 * kk][1]), pack_bf16(p[2 * kk][2], p[2 * kk][3]),
                         pack_bf16(p[2 * kk + 1][0], p[2 * kk + 1][1]),
                         pack_bf16(p[2 * kk + 1][2], p[2 * kk + 1][3])};
#pragma unroll
        for (int dp = 0; dp < HS / 16; dp++) {
            uint32_t r[4];
            load_b_kn<SROW>(r, v_tile, kk * 16, dp * 16, lane);
            mma_bf16(acc[2 * dp], a, r[0], r[1]);
            mma_bf16(acc[2 * dp + 1], a, r[2], r[3]);
        }
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Forward. Shared: Q [64][HS+8], K [2][64][HS+8], V [2][64][HS+8]. */
/* The forward's result for a thread's query rows qrow and qrow + 8: O divided by the row's softmax
 * sum (a quad's four partial sums added first) and lse = max + log2(sum), in log2 units.
 * Accumulator element dt·4 + e holds columns dt·8 + 2·tq + (e & 1) of row qrow + 8·(e >> 1), as both
 * the mma.sync and the wgmma layouts place them. */
template <int HS>
__device__ __forceinline__ void store_forward_rows(bf16 *out, float *lse, const float *o, const float (&lrow)[2],
                                                   const float (&mrow)[2], int b, int h, int qrow, int tq, int T,
                                                   int C) {
#pragma unroll
    for (int r = 0; r < 2; r++) {
        float l = lrow[r];
        l += __shfl_xor_sync(0xffffffffu, l, 1);
        l += __shfl_xor_sync(0xffffffffu, l, 2);
        int qi = qrow + 8 * r;
        if (qi >= T) continue;
        float inv = 1.0f / l;
        bf16 *orow = out + ((size_t)b * T + qi) * C + h * HS;
#pragma unroll
        for (int dt = 0; dt < HS / 8; dt++)
            *reinterpret_cast<__nv_bfloat162 *>(orow + dt * 8 + 2 * tq) =
                __floats2bfloat162_rn(o[dt * 4 + 2 * r] * inv, o[dt * 4 + 2 * r + 1] * inv);
        if (tq == 0) lse[(size_t)blockIdx.y * T + qi] = mrow[r] + log2f(l);
    }
}

template <int HS>
__global__ void __launch_bounds__(ATT_THREADS, HS == 64 ? ATT_FWD64_MINB : 1)
    attention_forward_kernel(bf16 *out, float *lse, const bf16 *qkv, int T, int NH, float sl2) {
    constexpr int SROW = HS + 8, TILE = ATT_TILE, NT = TILE / 8, DT = HS / 8;
    extern __shared__ __align__(16) unsigned char att_smem[];
    bf16 *Qs = reinterpret_cast<bf16 *>(att_smem);
    bf16 *Ks = Qs + TILE * SROW, *Vs = Ks + 2 * TILE * SROW;

    int C = NH * HS;
    size_t C3 = 3 * (size_t)C;
    int qb = gridDim.x - 1 - blockIdx.x;
    int b = blockIdx.y / NH, h = blockIdx.y % NH;
    const bf16 *qbase = qkv + (size_t)b * T * C3 + h * HS, *kbase = qbase + C, *vbase = qbase + 2 * C;
    int q0 = qb * TILE;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, tq = lane % 4;

    load_rows<HS, TILE>(Qs, qbase, C3, q0, T);
    load_rows<HS, TILE>(Ks, kbase, C3, 0, T);
    load_rows<HS, TILE>(Vs, vbase, C3, 0, T);
    cp_async_commit();

    float o[DT][4];
#pragma unroll
    for (int i = 0; i < DT; i++) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
    float mrow[2] = {-INFINITY, -INFINITY}, lrow[2] = {0.0f, 0.0f};
    uint32_t qf[HS / 16][4];
    int nkv = qb + 1; /* key tiles 0..qb: the query and key tiles are the same size */

    for (int j = 0; j < nkv; j++) {
        next_kv_tile_or_wait_padded<HS>(Ks, Vs, kbase, vbase, C3, j, nkv, T);
        /* Tile j (and Q) landed for every thread's copies before anyone reads them. */
        __syncthreads();
        if (j == 0) {
#pragma unroll
            for (int ks = 0; ks < HS / 16; ks++) load_a<SROW>(qf[ks], Qs, warp * 16, ks * 16, lane);
        }
        const bf16 *Kt = Ks + (j & 1) * TILE * SROW, *Vt = Vs + (j & 1) * TILE * SROW;

        float s[NT][4];
#pragma unroll
        for (int i = 0; i < NT; i++) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.0f;
#pragma unroll
        for (int ks = 0; ks < HS / 16; ks++)
#pragma unroll
            for (int np = 0; np < NT / 2; np++) {
                uint32_t r[4];
                load_b_nk<SROW>(r, Kt, np * 16, ks * 16, lane);
                mma_bf16(s[2 * np], qf[ks], r[0], r[1]);
                mma_bf16(s[2 * np + 1], qf[ks], r[2], r[3]);
            }

        /* Only the diagonal tile needs the mask (a uniform branch); it also masks keys >= T, which
         * are > every query. The max is taken over raw scores and scaled once (sl2 > 0). */
        if (j == nkv - 1) {
            int k0 = j * TILE, qrow = q0 + warp * 16 + g;
#pragma unroll
            for (int nt = 0; nt < NT; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    int key = k0 + nt * 8 + 2 * tq + (e & 1), qi = qrow + (e >= 2 ? 8 : 0);
                    if (key > qi) s[nt][e] = -INFINITY;
                }
        }

#pragma unroll
        for (int r = 0; r < 2; r++) {
            float mx = -INFINITY;
#pragma unroll
            for (int nt = 0; nt < NT; nt++) mx = fmaxf(mx, fmaxf(s[nt][2 * r], s[nt][2 * r + 1]));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            /* Finite: every row sees key 0 in tile 0 and its own key on the diagonal. */
            float mnew = fmaxf(mrow[r], mx * sl2);
            float alpha = ex2(mrow[r] - mnew); /* 0 on the first tile (mrow = -inf) */
            mrow[r] = mnew;
            lrow[r] *= alpha;
#pragma unroll
            for (int dt = 0; dt < DT; dt++) {
                o[dt][2 * r] *= alpha;
                o[dt][2 * r + 1] *= alpha;
            }
#pragma unroll
            for (int nt = 0; nt < NT; nt++) {
                float p0 = ex2(fmaf(s[nt][2 * r], sl2, -mnew)), p1 = ex2(fmaf(s[nt][2 * r + 1], sl2, -mnew));
                s[nt][2 * r] = p0;
                s[nt][2 * r + 1] = p1;
                lrow[r] += p0 + p1;
            }
        }
        mma_pv<SROW, TILE / 16, HS>(o, s, Vt, lane);
        /* Everyone is done with buffer j&1 before iteration j+1 refills it with tile j+2. */
        __syncthreads();
    }

    store_forward_rows<HS>(out, lse, &o[0][0], lrow, mrow, b, h, q0 + warp * 16 + g, tq, T, C);
}

/* ------------------------------------------------------------------------------------------ */
/* Forward on Hopper tensor cores, HS = 64: the blocks, loads and online softmax of
 * attention_forward_kernel, with both products as warpgroup MMAs (the block's 4 warps are one
 * warpgroup; each warp's 16 rows of S and O sit in the same registers as with mma.sync).
 *   S = Q·Kᵀ: wgmma m64n64k16 ×4, Q and K K-major from shared memory;
 *   O += P·V: wgmma m64n64k16 ×4, P from registers (the S accumulators packed to bf16 pairs), V
 *   MN-major from shared memory (its rows are keys: the transposed operand).
 * Shared tiles [64][64] bf16 in wgmma's 128-byte swizzle: Q, K [2], V [2]. */
__device__ __forceinline__ void load_rows_swizzled(uint32_t dst, const bf16 *src, size_t row_stride, int t0, int T) {
    for (int i = threadIdx.x; i < ATT_TILE * 8; i += ATT_THREADS) {
        int r = i / 8, ch = i % 8, t = t0 + r;
        bool valid = t < T;
        cp_async16_to(dst + swz128(r, ch), src + (size_t)(valid ? t : 0) * row_stride + ch * 8, valid);
    }
}

/* The A fragment of k-step kk (columns 16kk..16kk+15) from a 64-column accumulator, as bf16 pairs. */
__device__ __forceinline__ void pack_a_fragment(uint32_t (&a)[4], const float (&acc)[32], int kk) {
    a[0] = pack_bf16(acc[8 * kk + 0], acc[8 * kk + 1]);
    a[1] = pack_bf16(acc[8 * kk + 2], acc[8 * kk + 3]);
    a[2] = pack_bf16(acc[8 * kk + 4], acc[8 * kk + 5]);
    a[3] = pack_bf16(acc[8 * kk + 6], acc[8 * kk + 7]);
}

/* acc[64 x 64] (=, or += when accumulate) = A·Bᵀ, A and B [64][64] K-major swizzled tiles. */
__device__ __forceinline__ void wgmma_abt(float (&acc)[32], uint32_t A, uint32_t B) {
#pragma unroll
    for (int kk = 0; kk < 4; kk++) wgmma_m64n64k16_ss(acc, smem_desc(A + kk * 32), smem_desc(B + kk * 32), kk > 0);
}

/* acc[64 x 64] += X·B, X in accumulator registers (packed to bf16 here), B a [64][64] swizzled tile
 * read MN-major (its rows are X's columns). Waits for completion: the packed registers are free after. */
__device__ __forceinline__ void wgmma_xb(float (&acc)[32], const float (&x)[32], uint32_t B) {
    uint32_t a[4][4];
#pragma unroll
    for (int kk = 0; kk < 4; kk++) pack_a_fragment(a[kk], x, kk);
    fence_acc(acc);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 4; kk++) wgmma_m64n64k16_rs_mn(acc, a[kk], smem_desc(B + kk * 16 * 128), 1);
    wgmma_commit();
    wgmma_wait<0>();
    fence_acc(acc);
}

/* Starts the copies of key/value tile j+1 into the other buffer (when there is one) and waits for
 * tile j's; the caller fences and synchronizes before reading. */
__device__ __forceinline__ void next_kv_tile_or_wait(uint32_t Ks, uint32_t Vs, const bf16 *kbase, const bf16 *vbase,
                                                     size_t row_stride, int j, int nkv, int T) {
    constexpr int TILE_BYTES = ATT_TILE * 64 * 2;
    if (j + 1 < nkv) {
        int nb = (j + 1) & 1;
        load_rows_swizzled(Ks + nb * TILE_BYTES, kbase, row_stride, (j + 1) * ATT_TILE, T);
        load_rows_swizzled(Vs + nb * TILE_BYTES, vbase, row_stride, (j + 1) * ATT_TILE, T);
        cp_async_commit();
        cp_async_wait<1>();
    } else {
        cp_async_wait<0>();
    }
}

/* Causal mask of the diagonal tile (keys from k0; this thread's rows qrow and qrow + 8): also masks
 * keys >= T, which are > every query. Only the diagonal tile needs it (a uniform branch). */
__device__ __forceinline__ void mask_diagonal_tile(float (&s)[32], int k0, int qrow, int tq) {
#pragma unroll
    for (int nt = 0; nt < 8; nt++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            int key = k0 + nt * 8 + 2 * tq + (e & 1), qi = qrow + 8 * (e >> 1);
            if (key > qi) s[nt * 4 + e] = -INFINITY;
        }
}

__global__ void __launch_bounds__(ATT_THREADS)
    attention_forward_wgmma_kernel(bf16 *out, float *lse, const bf16 *qkv, int T, int NH, float sl2) {
    constexpr int HS = 64, TILE = ATT_TILE, TILE_BYTES = TILE * HS * 2;
    extern __shared__ __align__(16) unsigned char att_smem[]; /* aligned to 1024 by hand below */
    const uint32_t Qs = (smem_addr(att_smem) + 1023) & ~1023u, Ks = Qs + TILE_BYTES, Vs = Ks + 2 * TILE_BYTES;

    int C = NH * HS;
    size_t C3 = 3 * (size_t)C;
    int qb = gridDim.x - 1 - blockIdx.x;
    int b = blockIdx.y / NH, h = blockIdx.y % NH;
    const bf16 *qbase = qkv + (size_t)b * T * C3 + h * HS, *kbase = qbase + C, *vbase = qbase + 2 * C;
    int q0 = qb * TILE;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, tq = lane % 4;

    load_rows_swizzled(Qs, qbase, C3, q0, T);
    load_rows_swizzled(Ks, kbase, C3, 0, T);
    load_rows_swizzled(Vs, vbase, C3, 0, T);
    cp_async_commit();

    float o[32];
#pragma unroll
    for (int i = 0; i < 32; i++) o[i] = 0.0f;
    float mrow[2] = {-INFINITY, -INFINITY}, lrow[2] = {0.0f, 0.0f};
    int nkv = qb + 1;

    for (int j = 0; j < nkv; j++) {
        next_kv_tile_or_wait(Ks, Vs, kbase, vbase, C3, j, nkv, T);
        fence_proxy_async(); /* the copies are read by wgmma, through the async proxy */
        __syncthreads();
        const uint32_t Kt = Ks + (j & 1) * TILE_BYTES, Vt = Vs + (j & 1) * TILE_BYTES;

        float s[32];
        wgmma_fence();
        wgmma_abt(s, Qs, Kt);
        wgmma_commit();
        wgmma_wait<0>();
        fence_acc(s);

        if (j == nkv - 1) mask_diagonal_tile(s, j * TILE, q0 + warp * 16 + g, tq);
#pragma unroll
        for (int r = 0; r < 2; r++) {
            float mx = -INFINITY;
#pragma unroll
            for (int nt = 0; nt < 8; nt++) mx = fmaxf(mx, fmaxf(s[nt * 4 + 2 * r], s[nt * 4 + 2 * r + 1]));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            float mnew = fmaxf(mrow[r], mx * sl2);
            float alpha = ex2(mrow[r] - mnew);
            mrow[r] = mnew;
            lrow[r] *= alpha;
#pragma unroll
            for (int dt = 0; dt < 8; dt++) {
                o[dt * 4 + 2 * r] *= alpha;
                o[dt * 4 + 2 * r + 1] *= alpha;
            }
#pragma unroll
            for (int nt = 0; nt < 8; nt++) {
                float p0 = ex2(fmaf(s[nt * 4 + 2 * r], sl2, -mnew)), p1 = ex2(fmaf(s[nt * 4 + 2 * r + 1], sl2, -mnew));
                s[nt * 4 + 2 * r] = p0;
                s[nt * 4 + 2 * r + 1] = p1;
                lrow[r] += p0 + p1;
            }
        }
        wgmma_xb(o, s, Vt); /* O += P·V */
        __syncthreads(); /* buffer j&1 is refilled with tile j+2 by the next iteration */
    }

    store_forward_rows<HS>(out, lse, o, lrow, mrow, b, h, q0 + warp * 16 + g, tq, T, C);
}

/* ------------------------------------------------------------------------------------------ */
/* D[b,h,t] = Σ_d dout[b,t,h·HS+d]·out[b,t,h·HS+d]. A thread takes 8 adjacent values of both (one
 * 16-byte load each) and the HS/8 threads of a (b, t, h) sum by shuffles: with one 4-byte load per
 * lane and tensor (a warp per row) this ran at under half the copy bandwidth. */
template <int HS>
__global__ void attention_backward_dsum_kernel(float *D, const bf16 *dout, const bf16 *out, int T, int NH,
                                               size_t rows) {
    constexpr int LANES = HS / 8; /* per (b, t, h): 8 or 16, a power of two within the warp */
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    size_t row = i / LANES; /* (b·T + t)·NH + h */
    float acc = 0.0f;
    if (row < rows) {
        uint4 x = *reinterpret_cast<const uint4 *>(dout + i * 8);
        uint4 y = *reinterpret_cast<const uint4 *>(out + i * 8);
        const __nv_bfloat162 *xp = reinterpret_cast<const __nv_bfloat162 *>(&x);
        const __nv_bfloat162 *yp = reinterpret_cast<const __nv_bfloat162 *>(&y);
#pragma unroll
        for (int k = 0; k < 4; k++) {
            float2 a = __bfloat1622float2(xp[k]), b = __bfloat1622float2(yp[k]);
            acc += a.x * b.x + a.y * b.y;
        }
    }
#pragma unroll
    for (int o = LANES / 2; o > 0; o /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    if (row < rows && i % LANES == 0) {
        int h = (int)(row % NH);
        size_t bt = row / NH;
        size_t b = bt / T, t = bt % T;
        D[(b * NH + h) * T + t] = acc;
    }
}

/* The log-sum-exp and D = rowsum(dO∘O) of query rows t0 .. t0 + BQ - 1 into shared memory for the
 * dK,dV kernels; queries past T get lse = +inf, so their P = exp2(finite − inf) = 0. */
template <int BQ>
__device__ __forceinline__ void load_query_stats(float *lse_s, float *D_s, const float *lse_h, const float *D_h, int t0,
                                                 int T) {
    for (int i = threadIdx.x; i < BQ; i += ATT_THREADS) {
        int t = t0 + i;
        lse_s[i] = t < T ? lse_h[t] : INFINITY;
        D_s[i] = t < T ? D_h[t] : 0.0f;
    }
}

/* The dQ kernels' statistics of a thread's query rows row0 and row0 + 8 of head blockIdx.y (0 past T). */
__device__ __forceinline__ void load_row_stats(float (&lse_r)[2], float (&D_r)[2], const float *lse, const float *D,
                                               int row0, int T) {
#pragma unroll
    for (int r = 0; r < 2; r++) {
        int qi = row0 + 8 * r;
        lse_r[r] = qi < T ? lse[(size_t)blockIdx.y * T + qi] : 0.0f;
        D_r[r] = qi < T ? D[(size_t)blockIdx.y * T + qi] : 0.0f;
    }
}

/* One of a backward kernel's gradients (dQ, dK or dV: columns col0 .. col0 + HS - 1 of head h in
 * dqkv) for a thread's rows row0 and row0 + 8, times scale: accumulator element dt·4 + e holds
 * columns dt·8 + 2·tq + (e & 1) of row row0 + 8·(e >> 1), as both the mma.sync and the wgmma
 * layouts place them.
 * With bias_part (the block's row of partial sums, 3C wide; NULL: none), also the column sums of
 * the block's 64 rows as stored (bf16), at bias_part[col0 + h·HS + c]: that slice of the qkv bias
 * gradient, taken from registers instead of a pass over dqkv. Every thread of the block calls it
 * (4 warps of 16 rows each). */
template <int HS>
__device__ __forceinline__ void store_head_grad(bf16 *dqkv, float *bias_part, const float *acc, float scale,
                                                size_t col0, int b, int h, int row0, int tq, int T, size_t C3) {
    float colsum[HS / 8][2];
#pragma unroll
    for (int dt = 0; dt < HS / 8; dt++) colsum[dt][0] = colsum[dt][1] = 0.0f;
#pragma unroll
    for (int r = 0; r < 2; r++) {
        int t = row0 + 8 * r;
        if (t >= T) continue;
        bf16 *row = dqkv + ((size_t)b * T + t) * C3 + col0 + h * HS;
#pragma unroll
        for (int dt = 0; dt < HS / 8; dt++) {
            __nv_bfloat162 v = __floats2bfloat162_rn(acc[dt * 4 + 2 * r] * scale, acc[dt * 4 + 2 * r + 1] * scale);
            *reinterpret_cast<__nv_bfloat162 *>(row + dt * 8 + 2 * tq) = v;
            float2 f = __bfloat1622float2(v);
            colsum[dt][0] += f.x;
            colsum[dt][1] += f.y;
        }
    }
    if (!bias_part) return; /* uniform across the block */
    __shared__ float warp_sums[ATT_THREADS / 32][HS];
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
    for (int dt = 0; dt < HS / 8; dt++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
            float v = colsum[dt][e]; /* the warp's 8 row groups (lanes tq, tq + 4, ...) in a fixed tree */
            v += __shfl_xor_sync(0xffffffffu, v, 4);
            v += __shfl_xor_sync(0xffffffffu, v, 8);
            v += __shfl_xor_sync(0xffffffffu, v, 16);
            if (lane < 4) warp_sums[warp][dt * 8 + 2 * lane + e] = v;
        }
    /* Every warp's sums are in shared memory before they are added across warps. */
    __syncthreads();
    for (int c = threadIdx.x; c < HS; c += ATT_THREADS) {
        float v = 0.0f;
#pragma unroll
        for (int w = 0; w < ATT_THREADS / 32; w++) v += warp_sums[w][c];
        bias_part[col0 + h * HS + c] = v;
    }
    /* Read before a second call (dV after dK) overwrites them. */
    __syncthreads();
}

/* The block's row of qkv bias partials (NULL when not asked): row b·tiles + tile of [B·tiles][3C]. */
__device__ __forceinline__ float *bias_part_row(float *bias_part, int b, int tile, size_t C3) {
    return bias_part ? bias_part + ((size_t)b * gridDim.x + tile) * C3 : NULL;
}

/* dQ. Shared: Q, dO [64][HS+8], K, V [2][64][HS+8]. */
template <int HS>
__global__ void __launch_bounds__(ATT_THREADS, HS == 64 ? ATT_BWD64_MINB : 1)
    attention_backward_dq_kernel(bf16 *dqkv, float *bias_part, const bf16 *qkv, const bf16 *dout, const float *lse,
                                 const float *D, int T, int NH, float sl2, float scale) {
    constexpr int SROW = HS + 8, TILE = ATT_TILE, NT = TILE / 8, DT = HS / 8;
    extern __shared__ __align__(16) unsigned char att_smem[];
    bf16 *Qs = reinterpret_cast<bf16 *>(att_smem);
    bf16 *dOs = Qs + TILE * SROW, *Ks = dOs + TILE * SROW, *Vs = Ks + 2 * TILE * SROW;

    int C = NH * HS;
    size_t C3 = 3 * (size_t)C;
    int qb = gridDim.x - 1 - blockIdx.x;
    int b = blockIdx.y / NH, h = blockIdx.y % NH;
    const bf16 *qbase = qkv + (size_t)b * T * C3 + h * HS, *kbase = qbase + C, *vbase = qbase + 2 * C;
    const bf16 *dobase = dout + (size_t)b * T * C + h * HS;
    int q0 = qb * TILE;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, tq = lane % 4;

    load_rows<HS, TILE>(Qs, qbase, C3, q0, T);
    load_rows<HS, TILE>(dOs, dobase, C, q0, T);
    load_rows<HS, TILE>(Ks, kbase, C3, 0, T);
    load_rows<HS, TILE>(Vs, vbase, C3, 0, T);
    cp_async_commit();

    /* Rows past T: zero Q and dO give finite P and dS = P·(0 − 0) = 0; they are never stored. */
    float lse_r[2], D_r[2];
    load_row_stats(lse_r, D_r, lse, D, q0 + warp * 16 + g, T);
    float dq[DT][4];
#pragma unroll
    for (int i = 0; i < DT; i++) dq[i][0] = dq[i][1] = dq[i][2] = dq[i][3] = 0.0f;
    int nkv = qb + 1;

    for (int j = 0; j < nkv; j++) {
        next_kv_tile_or_wait_padded<HS>(Ks, Vs, kbase, vbase, C3, j, nkv, T);
        /* Tile j (and Q, dO) landed for every thread's copies before anyone reads them. */
        __syncthreads();
        const bf16 *Kt = Ks + (j & 1) * TILE * SROW, *Vt = Vs + (j & 1) * TILE * SROW;

        float s[NT][4], dp[NT][4];
#pragma unroll
        for (int i = 0; i < NT; i++) {
            s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.0f;
            dp[i][0] = dp[i][1] = dp[i][2] = dp[i][3] = 0.0f;
        }
        mma_abt<SROW, HS / 16, NT>(s, Qs, warp * 16, Kt, lane);
        mma_abt<SROW, HS / 16, NT>(dp, dOs, warp * 16, Vt, lane);

        /* Only the diagonal tile needs the mask (a uniform branch). */
        if (j == nkv - 1) {
            int k0 = j * TILE, qrow = q0 + warp * 16 + g;
#pragma unroll
            for (int nt = 0; nt < NT; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    int key = k0 + nt * 8 + 2 * tq + (e & 1), qi = qrow + 8 * (e >> 1);
                    if (key > qi) s[nt][e] = -INFINITY;
                }
        }
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int r = e >> 1;
                float p = ex2(fmaf(s[nt][e], sl2, -lse_r[r]));
                s[nt][e] = p * (dp[nt][e] - D_r[r]); /* dS (without the scale) */
            }
        mma_pv<SROW, TILE / 16, HS>(dq, s, Kt, lane);
        /* Everyone is done with buffer j&1 before iteration j+1 refills it. */
        __syncthreads();
    }

    store_head_grad<HS>(dqkv, bias_part_row(bias_part, b, qb, C3), &dq[0][0], scale, 0, b, h, q0 + warp * 16 + g,
                        tq, T, C3);
}

/* dK, dV. Shared: K, V [64][HS+8]; Q, dO [2][BQ][HS+8]; lse, D [2][BQ]. */
template <int HS, int BQ>
__global__ void __launch_bounds__(ATT_THREADS, HS == 64 ? ATT_BWD64_MINB : 1)
    attention_backward_dkdv_kernel(bf16 *dqkv, float *bias_part, const bf16 *qkv, const bf16 *dout, const float *lse,
                                   const float *D, int T, int NH, float sl2, float scale) {
    constexpr int SROW = HS + 8, TILE = ATT_TILE, NT = BQ / 8, DT = HS / 8;
    extern __shared__ __align__(16) unsigned char att_smem[];
    bf16 *Ks = reinterpret_cast<bf16 *>(att_smem);
    bf16 *Vs = Ks + TILE * SROW, *Qs = Vs + TILE * SROW, *dOs = Qs + 2 * BQ * SROW;
    float *lse_s = reinterpret_cast<float *>(dOs + 2 * BQ * SROW), *D_s = lse_s + 2 * BQ;

    int C = NH * HS;
    size_t C3 = 3 * (size_t)C;
    int b = blockIdx.y / NH, h = blockIdx.y % NH;
    const bf16 *qbase = qkv + (size_t)b * T * C3 + h * HS, *kbase = qbase + C, *vbase = qbase + 2 * C;
    const bf16 *dobase = dout + (size_t)b * T * C + h * HS;
    const float *lse_h = lse + (size_t)blockIdx.y * T, *D_h = D + (size_t)blockIdx.y * T;
    int k0 = blockIdx.x * TILE;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, tq = lane % 4;
    int qt0 = k0 / BQ, nqt = ceil_div(T, BQ); /* query tiles that can see these keys */

    load_rows<HS, TILE>(Ks, kbase, C3, k0, T);
    load_rows<HS, TILE>(Vs, vbase, C3, k0, T);
    load_rows<HS, BQ>(Qs, qbase, C3, qt0 * BQ, T);
    load_rows<HS, BQ>(dOs, dobase, C, qt0 * BQ, T);
    cp_async_commit();
    load_query_stats<BQ>(lse_s, D_s, lse_h, D_h, qt0 * BQ, T);

    float dk[DT][4], dv[DT][4];
#pragma unroll
    for (int i = 0; i < DT; i++) {
        dk[i][0] = dk[i][1] = dk[i][2] = dk[i][3] = 0.0f;
        dv[i][0] = dv[i][1] = dv[i][2] = dv[i][3] = 0.0f;
    }
    int krow = k0 + warp * 16 + g;

    for (int qt = qt0; qt < nqt; qt++) {
        int buf = (qt - qt0) & 1;
        if (qt + 1 < nqt) {
            int nb = buf ^ 1, t1 = (qt + 1) * BQ;
            load_rows<HS, BQ>(Qs + nb * BQ * SROW, qbase, C3, t1, T);
            load_rows<HS, BQ>(dOs + nb * BQ * SROW, dobase, C, t1, T);
            cp_async_commit();
            load_query_stats<BQ>(lse_s + nb * BQ, D_s + nb * BQ, lse_h, D_h, t1, T);
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        /* Query tile qt (copies and the lse/D stores) visible to all before use. */
        __syncthreads();
        const bf16 *Qt = Qs + buf * BQ * SROW, *dOt = dOs + buf * BQ * SROW;
        const float *lse_t = lse_s + buf * BQ, *D_t = D_s + buf * BQ;

        float st[NT][4], dpt[NT][4];
#pragma unroll
        for (int i = 0; i < NT; i++) {
            st[i][0] = st[i][1] = st[i][2] = st[i][3] = 0.0f;
            dpt[i][0] = dpt[i][1] = dpt[i][2] = dpt[i][3] = 0.0f;
        }
        mma_abt<SROW, HS / 16, NT>(st, Ks, warp * 16, Qt, lane);  /* Sᵀ = K·Qᵀ */
        mma_abt<SROW, HS / 16, NT>(dpt, Vs, warp * 16, dOt, lane); /* dPᵀ = V·dOᵀ */

        /* Only tiles that reach below the diagonal need the mask (a uniform branch). */
        int q0 = qt * BQ;
        if (q0 < k0 + TILE - 1) {
#pragma unroll
            for (int nt = 0; nt < NT; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    int col = nt * 8 + 2 * tq + (e & 1), key = krow + 8 * (e >> 1);
                    if (key > q0 + col) st[nt][e] = -INFINITY;
                }
        }
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int col = nt * 8 + 2 * tq + (e & 1);
                float p = ex2(fmaf(st[nt][e], sl2, -lse_t[col]));
                st[nt][e] = p;
                dpt[nt][e] = p * (dpt[nt][e] - D_t[col]);
            }
        mma_pv<SROW, BQ / 16, HS>(dv, st, dOt, lane);  /* dV += Pᵀ·dO */
        mma_pv<SROW, BQ / 16, HS>(dk, dpt, Qt, lane);  /* dK += dSᵀ·Q */
        /* Everyone is done with buffer `buf` before the next iteration refills it. */
        __syncthreads();
    }

    float *bias_row = bias_part_row(bias_part, b, blockIdx.x, C3);
    store_head_grad<HS>(dqkv, bias_row, &dk[0][0], scale, C, b, h, krow, tq, T, C3);
    store_head_grad<HS>(dqkv, bias_row, &dv[0][0], 1.0f, 2 * (size_t)C, b, h, krow, tq, T, C3);
}

/* ------------------------------------------------------------------------------------------ */
/* Backward on Hopper tensor cores, HS = 64: attention_backward_dq_kernel and
 * attention_backward_dkdv_kernel (BQ = 64) with every product a warpgroup MMA: the two score-like
 * products (S and dP, or Sᵀ and dPᵀ) from K-major shared tiles, the two gradient products from
 * registers times an MN-major shared tile. Same blocks, order, masking and arithmetic. */
__global__ void __launch_bounds__(ATT_THREADS, ATT_WG_BWD_MINB)
    attention_backward_dq_wgmma_kernel(bf16 *dqkv, float *bias_part, const bf16 *qkv, const bf16 *dout,
                                       const float *lse, const float *D, int T, int NH, float sl2, float scale) {
    constexpr int HS = 64, TILE = ATT_TILE, TILE_BYTES = TILE * HS * 2;
    extern __shared__ __align__(16) unsigned char att_smem[]; /* aligned to 1024 by hand below */
    const uint32_t Qs = (smem_addr(att_smem) + 1023) & ~1023u, dOs = Qs + TILE_BYTES, Ks = dOs + TILE_BYTES,
                   Vs = Ks + 2 * TILE_BYTES;

    int C = NH * HS;
    size_t C3 = 3 * (size_t)C;
    int qb = gridDim.x - 1 - blockIdx.x;
    int b = blockIdx.y / NH, h = blockIdx.y % NH;
    const bf16 *qbase = qkv + (size_t)b * T * C3 + h * HS, *kbase = qbase + C, *vbase = qbase + 2 * C;
    const bf16 *dobase = dout + (size_t)b * T * C + h * HS;
    int q0 = qb * TILE;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, tq = lane % 4;

    load_rows_swizzled(Qs, qbase, C3, q0, T);
    load_rows_swizzled(dOs, dobase, C, q0, T);
    load_rows_swizzled(Ks, kbase, C3, 0, T);
    load_rows_swizzled(Vs, vbase, C3, 0, T);
    cp_async_commit();

    float lse_r[2], D_r[2];
    load_row_stats(lse_r, D_r, lse, D, q0 + warp * 16 + g, T);
    float dq[32];
#pragma unroll
    for (int i = 0; i < 32; i++) dq[i] = 0.0f;
    int nkv = qb + 1;

    for (int j = 0; j < nkv; j++) {
        next_kv_tile_or_wait(Ks, Vs, kbase, vbase, C3, j, nkv, T);
        fence_proxy_async();
        __syncthreads();
        const uint32_t Kt = Ks + (j & 1) * TILE_BYTES, Vt = Vs + (j & 1) * TILE_BYTES;

        float s[32], dp[32];
        wgmma_fence();
        wgmma_abt(s, Qs, Kt);   /* S = Q·Kᵀ */
        wgmma_abt(dp, dOs, Vt); /* dP = dO·Vᵀ */
        wgmma_commit();
        wgmma_wait<0>();
        fence_acc(s);
        fence_acc(dp);

        if (j == nkv - 1) mask_diagonal_tile(s, j * TILE, q0 + warp * 16 + g, tq);
#pragma unroll
        for (int i = 0; i < 32; i++) {
            int r = (i >> 1) & 1;
            float p = ex2(fmaf(s[i], sl2, -lse_r[r]));
            s[i] = p * (dp[i] - D_r[r]); /* dS (without the scale) */
        }
        wgmma_xb(dq, s, Kt); /* dQ += dS·K */
        __syncthreads();
    }

    store_head_grad<HS>(dqkv, bias_part_row(bias_part, b, qb, C3), dq, scale, 0, b, h, q0 + warp * 16 + g, tq, T,
                        C3);
}

__global__ void __launch_bounds__(ATT_THREADS, ATT_WG_BWD_MINB)
    attention_backward_dkdv_wgmma_kernel(bf16 *dqkv, float *bias_part, const bf16 *qkv, const bf16 *dout,
                                         const float *lse, const float *D, int T, int NH, float sl2, float scale) {
    constexpr int HS = 64, TILE = ATT_TILE, BQ = ATT_TILE, TILE_BYTES = TILE * HS * 2;
    extern __shared__ __align__(16) unsigned char att_smem[]; /* aligned to 1024 by hand below */
    const uint32_t Ks = (smem_addr(att_smem) + 1023) & ~1023u, Vs = Ks + TILE_BYTES, Qs = Vs + TILE_BYTES,
                   dOs = Qs + 2 * TILE_BYTES;
    __shared__ float lse_s[2 * BQ], D_s[2 * BQ];

    int C = NH * HS;
    size_t C3 = 3 * (size_t)C;
    int b = blockIdx.y / NH, h = blockIdx.y % NH;
    const bf16 *qbase = qkv + (size_t)b * T * C3 + h * HS, *kbase = qbase + C, *vbase = qbase + 2 * C;
    const bf16 *dobase = dout + (size_t)b * T * C + h * HS;
    const float *lse_h = lse + (size_t)blockIdx.y * T, *D_h = D + (size_t)blockIdx.y * T;
    int k0 = blockIdx.x * TILE;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, tq = lane % 4;
    int qt0 = k0 / BQ, nqt = ceil_div(T, BQ);

    load_rows_swizzled(Ks, kbase, C3, k0, T);
    load_rows_swizzled(Vs, vbase, C3, k0, T);
    load_rows_swizzled(Qs, qbase, C3, qt0 * BQ, T);
    load_rows_swizzled(dOs, dobase, C, qt0 * BQ, T);
    cp_async_commit();
    load_query_stats<BQ>(lse_s, D_s, lse_h, D_h, qt0 * BQ, T);

    float dk[32], dv[32];
#pragma unroll
    for (int i = 0; i < 32; i++) dk[i] = dv[i] = 0.0f;
    int krow = k0 + warp * 16 + g;

    for (int qt = qt0; qt < nqt; qt++) {
        int buf = (qt - qt0) & 1;
        if (qt + 1 < nqt) {
            int nb = buf ^ 1, t1 = (qt + 1) * BQ;
            load_rows_swizzled(Qs + nb * TILE_BYTES, qbase, C3, t1, T);
            load_rows_swizzled(dOs + nb * TILE_BYTES, dobase, C, t1, T);
            cp_async_commit();
            load_query_stats<BQ>(lse_s + nb * BQ, D_s + nb * BQ, lse_h, D_h, t1, T);
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        fence_proxy_async();
        __syncthreads();
        const uint32_t Qt = Qs + buf * TILE_BYTES, dOt = dOs + buf * TILE_BYTES;
        const float *lse_t = lse_s + buf * BQ, *D_t = D_s + buf * BQ;

        float st[32], dpt[32];
        wgmma_fence();
        wgmma_abt(st, Ks, Qt);   /* Sᵀ = K·Qᵀ */
        wgmma_abt(dpt, Vs, dOt); /* dPᵀ = V·dOᵀ */
        wgmma_commit();
        wgmma_wait<0>();
        fence_acc(st);
        fence_acc(dpt);

        int q0 = qt * BQ;
        if (q0 < k0 + TILE - 1) {
#pragma unroll
            for (int nt = 0; nt < 8; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    int col = nt * 8 + 2 * tq + (e & 1), key = krow + 8 * (e >> 1);
                    if (key > q0 + col) st[nt * 4 + e] = -INFINITY;
                }
        }
#pragma unroll
        for (int i = 0; i < 32; i++) {
            int col = (i >> 2) * 8 + 2 * tq + (i & 1);
            float p = ex2(fmaf(st[i], sl2, -lse_t[col]));
            st[i] = p;
            dpt[i] = p * (dpt[i] - D_t[col]);
        }
        { /* both products in one group: dV += Pᵀ·dO, dK += dSᵀ·Q */
            uint32_t ap[4][4], ad[4][4];
#pragma unroll
            for (int kk = 0; kk < 4; kk++) pack_a_fragment(ap[kk], st, kk), pack_a_fragment(ad[kk], dpt, kk);
            fence_acc(dv);
            fence_acc(dk);
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < 4; kk++) wgmma_m64n64k16_rs_mn(dv, ap[kk], smem_desc(dOt + kk * 16 * 128), 1);
#pragma unroll
            for (int kk = 0; kk < 4; kk++) wgmma_m64n64k16_rs_mn(dk, ad[kk], smem_desc(Qt + kk * 16 * 128), 1);
            wgmma_commit();
            wgmma_wait<0>();
            fence_acc(dv);
            fence_acc(dk);
        }
        __syncthreads();
    }

    float *bias_row = bias_part_row(bias_part, b, blockIdx.x, C3);
    store_head_grad<HS>(dqkv, bias_row, dk, scale, C, b, h, krow, tq, T, C3);
    store_head_grad<HS>(dqkv, bias_row, dv, 1.0f, 2 * (size_t)C, b, h, krow, tq, T, C3);
}

/* ------------------------------------------------------------------------------------------ */
void check_attention_shape_mha(const AttentionShape *s) {
    const float want = 1.0f / sqrtf((float)s->HS);
    if (s->NKV != s->NH || s->window != 0 || fabsf(s->scale - want) > 1e-6f * want) {
        fprintf(stderr, "error: the CUDA attention computes NKV = NH heads without a window at scale HS^-1/2; got "
                        "NH=%d NKV=%d window=%d scale=%g (use --device cpu for this model)\n", s->NH, s->NKV,
                s->window, (double)s->scale);
        exit(1);
    }
}

/* The shapes these kernels compute; C = NH·HS. */
static void check_shape(const AttentionShape *s) {
    check_attention_shape_mha(s);
    int B = s->B, T = s->T, NH = s->NH;
    if (s->HS != 64 && s->HS != 128) {
        fprintf(stderr, "error: attention supports head sizes 64 and 128, got %d (choose another head_dim)\n", s->HS);
        exit(1);
    }
    if (B < 1 || T < 1 || (long long)B * NH > 65535) { /* B·NH is the grid's y dimension */
        fprintf(stderr, "error: attention needs B >= 1, T >= 1 and B*NH <= 65535, got B=%d T=%d NH=%d\n", B, T, NH);
        exit(1);
    }
}

template <int HS>
static void launch_forward(bf16 *out, float *lse, const bf16 *qkv, int B, int T, int NH, cudaStream_t stream) {
    size_t smem = (size_t)5 * ATT_TILE * (HS + 8) * sizeof(bf16);
    static bool attr_set = false; /* once per instantiation */
    if (!attr_set) {
        CUDA_CHECK(cudaFuncSetAttribute(attention_forward_kernel<HS>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        (int)smem));
        attr_set = true;
    }
    dim3 grid(ceil_div(T, ATT_TILE), B * NH);
    float sl2 = LOG2E / sqrtf((float)HS);
    attention_forward_kernel<HS><<<grid, ATT_THREADS, smem, stream>>>(out, lse, qkv, T, NH, sl2);
    CUDA_CHECK(cudaGetLastError());
}

static int use_wgmma = 1;
extern "C" void attention_use_wgmma(int on) {
    use_wgmma = on;
}

static void launch_forward_wgmma(bf16 *out, float *lse, const bf16 *qkv, int B, int T, int NH, cudaStream_t stream) {
    const size_t smem = 5 * ATT_TILE * 64 * sizeof(bf16) + 1024; /* + alignment to 1024 bytes */
    static bool attr_set = false;
    if (!attr_set) {
        CUDA_CHECK(cudaFuncSetAttribute(attention_forward_wgmma_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        (int)smem));
        attr_set = true;
    }
    dim3 grid(ceil_div(T, ATT_TILE), B * NH);
    attention_forward_wgmma_kernel<<<grid, ATT_THREADS, smem, stream>>>(out, lse, qkv, T, NH, LOG2E / 8.0f);
    CUDA_CHECK(cudaGetLastError());
}

extern "C" void attention_forward(kbf16 *out, float *lse, const kbf16 *qkv, const AttentionShape *s,
                                  cudaStream_t stream) {
    check_shape(s);
    const int B = s->B, T = s->T, NH = s->NH, C = NH * s->HS;
    if (C / NH == 64 && use_wgmma)
        launch_forward_wgmma(out, lse, qkv, B, T, NH, stream);
    else if (C / NH == 64)
        launch_forward<64>(out, lse, qkv, B, T, NH, stream);
    else
        launch_forward<128>(out, lse, qkv, B, T, NH, stream);
}

/* Scratch: D = rowsum(dout·out) [B·NH·T], then the qkv bias partials [B·tiles][3C]. */
static size_t dsum_floats(int B, int T, int NH) {
    return (size_t)round_up((int64_t)B * NH * T, 64); /* the partials start 256-byte aligned */
}

extern "C" size_t attention_backward_scratch_bytes(const AttentionShape *s) {
    const int B = s->B, T = s->T, NH = s->NH, C = NH * s->HS;
    size_t tiles = ceil_div(T, ATT_TILE);
    return (dsum_floats(B, T, NH) + (size_t)B * tiles * 3 * C) * sizeof(float);
}

template <int HS, int BQ>
static void launch_backward(bf16 *dqkv, float *bias_part, float *D, const bf16 *dout, const bf16 *qkv,
                            const float *lse, int B, int T, int NH, cudaStream_t stream) {
    size_t smem_dq = (size_t)6 * ATT_TILE * (HS + 8) * sizeof(bf16);
    size_t smem_kv = (size_t)(2 * ATT_TILE + 4 * BQ) * (HS + 8) * sizeof(bf16) + 4 * BQ * sizeof(float);
    static bool attr_set = false;
    if (!attr_set) {
        CUDA_CHECK(cudaFuncSetAttribute(attention_backward_dq_kernel<HS>,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem_dq));
        CUDA_CHECK(cudaFuncSetAttribute(attention_backward_dkdv_kernel<HS, BQ>,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem_kv));
        attr_set = true;
    }
    float scale = 1.0f / sqrtf((float)HS), sl2 = LOG2E * scale;
    dim3 grid(ceil_div(T, ATT_TILE), B * NH);
    attention_backward_dkdv_kernel<HS, BQ><<<grid, ATT_THREADS, smem_kv, stream>>>(dqkv, bias_part, qkv, dout, lse,
                                                                                  D, T, NH, sl2, scale);
    CUDA_CHECK(cudaGetLastError());
    attention_backward_dq_kernel<HS><<<grid, ATT_THREADS, smem_dq, stream>>>(dqkv, bias_part, qkv, dout, lse, D, T,
                                                                            NH, sl2, scale);
    CUDA_CHECK(cudaGetLastError());
}

static void launch_backward_wgmma(bf16 *dqkv, float *bias_part, float *D, const bf16 *dout, const bf16 *qkv,
                                  const float *lse, int B, int T, int NH, cudaStream_t stream) {
    const size_t smem = 6 * ATT_TILE * 64 * sizeof(bf16) + 1024; /* + alignment to 1024 bytes */
    static bool attr_set = false;
    if (!attr_set) {
        CUDA_CHECK(cudaFuncSetAttribute(attention_backward_dq_wgmma_kernel,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        CUDA_CHECK(cudaFuncSetAttribute(attention_backward_dkdv_wgmma_kernel,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        attr_set = true;
    }
    const float scale = 0.125f, sl2 = LOG2E * scale; /* 1/sqrt(64) */
    dim3 grid(ceil_div(T, ATT_TILE), B * NH);
    attention_backward_dkdv_wgmma_kernel<<<grid, ATT_THREADS, smem, stream>>>(dqkv, bias_part, qkv, dout, lse, D, T,
                                                                            NH, sl2, scale);
    CUDA_CHECK(cudaGetLastError());
    attention_backward_dq_wgmma_kernel<<<grid, ATT_THREADS, smem, stream>>>(dqkv, bias_part, qkv, dout, lse, D, T,
                                                                          NH, sl2, scale);
    CUDA_CHECK(cudaGetLastError());
}

extern "C" void attention_backward(kbf16 *dqkv, float *dbias_qkv, void *scratch, const kbf16 *dout,
                                   const kbf16 *qkv, const kbf16 *out, const float *lse, const AttentionShape *s,
                                   cudaStream_t stream) {
    check_shape(s);
    const int B = s->B, T = s->T, NH = s->NH, HS = s->HS, C = NH * HS;
    float *D = (float *)scratch;
    float *bias_part = dbias_qkv ? D + dsum_floats(B, T, NH) : NULL;
    size_t rows = (size_t)B * T * NH, threads = rows * (HS / 8);
    if (HS == 64)
        attention_backward_dsum_kernel<64><<<ceil_div(threads, 256), 256, 0, stream>>>(D, dout, out, T, NH, rows);
    else
        attention_backward_dsum_kernel<128><<<ceil_div(threads, 256), 256, 0, stream>>>(D, dout, out, T, NH, rows);
    CUDA_CHECK(cudaGetLastError());
    if (HS == 64 && use_wgmma)
        launch_backward_wgmma(dqkv, bias_part, D, dout, qkv, lse, B, T, NH, stream);
    else if (HS == 64)
        launch_backward<64, ATT_BQ64>(dqkv, bias_part, D, dout, qkv, lse, B, T, NH, stream);
    else
        launch_backward<128, 32>(dqkv, bias_part, D, dout, qkv, lse, B, T, NH, stream);
    if (dbias_qkv) {
        int tiles = ceil_div(T, ATT_TILE);
        add_partial_sums(PartialSumOutputs{{dbias_qkv, NULL, NULL}}, 1, bias_part, B * tiles, 3 * (size_t)C, 3 * C,
                         stream);
    }
}
