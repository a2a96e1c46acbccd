/* kernels/attention_tiles.cuh - the attention kernels' block constants and their loads into shared
 * memory: padded tiles for mma.sync (row stride HS + 8), 128-byte swizzled [64][64] panels for wgmma,
 * the double-buffered key/value tile pipeline of both, and the per-query softmax statistics (lse, D)
 * the backward kernels read. */
#ifndef FUSEDGPT_ATTENTION_TILES_CUH
#define FUSEDGPT_ATTENTION_TILES_CUH

#include "kernels/device_util.cuh"
#include "kernels/kernel_util.cuh"
#include "kernels/wgmma.cuh"

#define ATT_THREADS 128 /* 4 warps */
#define ATT_TILE 64     /* query rows per forward / dQ block, keys per dK,dV block, key tile */
/* Query rows per tile of the dK,dV kernel at head size 64 (the mma.sync one at 128 uses 32, for
 * registers), and the blocks per SM the kernels are compiled for (register cap): measured choices,
 * dev/RESULTS.md (attention). */
#define ATT_BQ64 64
#define ATT_BWD64_MINB 3    /* 12 warps/SM: 0.54 ms vs 0.62 ms (uncapped, 8 warps) at B=16, T=1024 */
#define ATT_FWD64_MINB 1    /* capping to 4 blocks (128 regs) spilled and ran slower */
#define ATT_FWD256_MINB 2   /* wgmma forward, head size 256: with one V buffer (96 KB) */

/* A token's packed qkv row: NH query heads, then NKV key heads, then NKV value heads, HS columns
 * each; query head h reads key/value head h / (NH / NKV). Offsets in elements. */
__host__ __device__ __forceinline__ size_t packed_qkv_width(int NH, int NKV, int HS) {
    return (size_t)(NH + 2 * NKV) * HS;
}
__device__ __forceinline__ size_t key_col(int NH, int HS, int kvh) {
    return (size_t)(NH + kvh) * HS;
}
__device__ __forceinline__ size_t value_col(int NH, int NKV, int HS, int kvh) {
    return (size_t)(NH + NKV + kvh) * HS;
}

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

/* Swizzled tiles for the wgmma paths: [64][HS] bf16 as HS/64 panels of [64][64] (8 KB each, 1024-byte
 * aligned) in wgmma's 128-byte swizzle, a row's columns 64p .. 64p + 63 in panel p. */
#define ATT_PANEL_BYTES (ATT_TILE * 64 * 2)
template <int HS, int NTHREADS = ATT_THREADS> /* the block's threads, which share the copies */
__device__ __forceinline__ void load_rows_swizzled(uint32_t dst, const bf16 *src, size_t row_stride, int t0, int T) {
    constexpr int CHUNKS = HS / 8;
    for (int i = threadIdx.x; i < ATT_TILE * CHUNKS; i += NTHREADS) {
        int r = i / CHUNKS, c = i % CHUNKS, t = t0 + r;
        bool valid = t < T;
        cp_async16_to(dst + (c / 8) * ATT_PANEL_BYTES + swz128(r, c % 8), src + (size_t)(valid ? t : 0) * row_stride + c * 8,
                      valid);
    }
}

/* Starts the copies of key/value tile j+1 into the other buffer (when there is one) and waits for
 * tile j's; the caller fences and synchronizes before reading. */
template <int HS>
__device__ __forceinline__ void next_kv_tile_or_wait(uint32_t Ks, uint32_t Vs, const bf16 *kbase, const bf16 *vbase,
                                                     size_t row_stride, int j, int nkv, int T) {
    constexpr int TILE_BYTES = ATT_TILE * HS * 2;
    if (j + 1 < nkv) {
        int nb = (j + 1) & 1;
        load_rows_swizzled<HS>(Ks + nb * TILE_BYTES, kbase, row_stride, (j + 1) * ATT_TILE, T);
        load_rows_swizzled<HS>(Vs + nb * TILE_BYTES, vbase, row_stride, (j + 1) * ATT_TILE, T);
        cp_async_commit();
        cp_async_wait<1>();
    } else {
        cp_async_wait<0>();
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

#endif
