/* kernels/attention_store.cuh - the attention kernels' stores from accumulator registers: the
 * forward's normalised rows and lse, a backward kernel's dQ, dK or dV slice of dqkv, and the qkv bias
 * partial sums taken on the way. */
#ifndef FUSEDGPT_ATTENTION_STORE_CUH
#define FUSEDGPT_ATTENTION_STORE_CUH

#include "kernels/attention_tiles.cuh"

/* Forward. Shared: Q [64][HS+8], K [2][64][HS+8], V [2][64][HS+8]. */
/* The forward's result for a thread's query rows qrow and qrow + 8: O divided by the row's softmax
 * sum (a quad's four partial sums added first) and lse = max + log2(sum), in log2 units.
 * Accumulator element dt·4 + e holds columns dt·8 + 2·tq + (e & 1) of row qrow + 8·(e >> 1), as both
 * the mma.sync and the wgmma layouts place them. lse is [B·NH][T]. */
template <int HS>
__device__ __forceinline__ void store_forward_rows(bf16 *out, float *lse, const float *o, const float (&lrow)[2],
                                                   const float (&mrow)[2], int b, int h, int NH, int qrow, int tq,
                                                   int T, int C) {
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
        if (tq == 0) lse[((size_t)b * NH + h) * T + qi] = mrow[r] + log2f(l);
    }
}

/* One of a backward kernel's gradients (dQ, dK or dV: columns col0 .. col0 + HS - 1 of head h in
 * dqkv) for a thread's rows row0 and row0 + 8, times scale: accumulator element dt·4 + e holds
 * columns dt·8 + 2·tq + (e & 1) of row row0 + 8·(e >> 1), as both the mma.sync and the wgmma
 * layouts place them.
 * With bias_part (the block's row of partial sums, 3C wide; NULL: none), also the column sums of
 * the warpgroup's 64 rows as stored (bf16), at bias_part[col0 + h·HS + c]: that slice of the qkv
 * bias gradient, taken from registers instead of a pass over dqkv. Every thread of a warpgroup calls
 * it (warpgroup wg < NWG of the block, 4 warps of 16 rows, with its own col0 or bias_part), and the
 * warpgroup synchronizes only itself: in a block whose producer warps have left, or whose other
 * warpgroup has no rows to store, nobody waits for them. */
/* The 128 threads of warpgroup wg, on named barrier 8 + wg (barriers 1 and 2 take the consumers'
 * turns in the Hopper kernels). */
__device__ __forceinline__ void att_warpgroup_sync(int wg) {
    asm volatile("bar.sync %0, %1;\n" ::"r"(8 + wg), "n"(ATT_THREADS) : "memory");
}

template <int HS, int NWG = 1>
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
    __shared__ float warp_sums[NWG][ATT_THREADS / 32][HS];
    int wg = threadIdx.x / ATT_THREADS, warp = threadIdx.x % ATT_THREADS / 32, lane = threadIdx.x % 32;
#pragma unroll
    for (int dt = 0; dt < HS / 8; dt++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
            float v = colsum[dt][e]; /* the warp's 8 row groups (lanes tq, tq + 4, ...) in a fixed tree */
            v += __shfl_xor_sync(0xffffffffu, v, 4);
            v += __shfl_xor_sync(0xffffffffu, v, 8);
            v += __shfl_xor_sync(0xffffffffu, v, 16);
            if (lane < 4) warp_sums[wg][warp][dt * 8 + 2 * lane + e] = v;
        }
    /* Every warp's sums are in shared memory before they are added across warps. */
    att_warpgroup_sync(wg);
    for (int c = threadIdx.x % ATT_THREADS; c < HS; c += ATT_THREADS) {
        float v = 0.0f;
#pragma unroll
        for (int w = 0; w < ATT_THREADS / 32; w++) v += warp_sums[wg][w][c];
        bias_part[col0 + h * HS + c] = v;
    }
    /* Read before a second call (dV after dK) overwrites them. */
    att_warpgroup_sync(wg);
}

/* The row of qkv bias partials of 64-row tile `tile` of sequence b (NULL when not asked): row
 * b·tiles + tile of [B·tiles][3C], tiles = ⌈T/64⌉. */
__device__ __forceinline__ float *bias_part_row(float *bias_part, int b, int tile, int tiles, size_t C3) {
    return bias_part ? bias_part + ((size_t)b * tiles + tile) * C3 : NULL;
}

#endif
