/* kernels/attention_mma.cuh - the attention kernels' tensor-core products: fragments of padded
 * shared tiles and the mma.sync m16n8k16 products (A·Bᵀ and P·V), and the warpgroup (wgmma) products
 * of [64][HS] tiles of swizzled [64][64] panels, with the A operand from accumulator registers where P or dS feed the
 * next product. */
#ifndef FUSEDGPT_ATTENTION_MMA_CUH
#define FUSEDGPT_ATTENTION_MMA_CUH

#include "kernels/attention_tiles.cuh"

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

/* The A fragment of k-step kk (columns 16kk..16kk+15) from a 64-column accumulator, as bf16 pairs. */
__device__ __forceinline__ void pack_a_fragment(uint32_t (&a)[4], const float (&acc)[32], int kk) {
    a[0] = pack_bf16(acc[8 * kk + 0], acc[8 * kk + 1]);
    a[1] = pack_bf16(acc[8 * kk + 2], acc[8 * kk + 3]);
    a[2] = pack_bf16(acc[8 * kk + 4], acc[8 * kk + 5]);
    a[3] = pack_bf16(acc[8 * kk + 6], acc[8 * kk + 7]);
}

/* Keeps packed A fragments in their registers up to this point (after the wait of the wgmma that
 * reads them). */
template <int KS>
__device__ __forceinline__ void fence_regs(uint32_t (&a)[KS][4]) {
#pragma unroll
    for (int kk = 0; kk < KS; kk++)
#pragma unroll
        for (int i = 0; i < 4; i++) asm volatile("" : "+r"(a[kk][i])::"memory");
}

/* acc[64 x 64] = A·Bᵀ, A and B [64][HS] K-major tiles of HS/64 swizzled panels (k = the head's
 * columns). A's panels lie A_PANEL bytes apart: 64 rows of a 128-row tile's 16 KB panels also
 * serve. */
template <int HS, int A_PANEL = ATT_PANEL_BYTES>
__device__ __forceinline__ void wgmma_abt(float (&acc)[32], uint32_t A, uint32_t B) {
#pragma unroll
    for (int p = 0; p < HS / 64; p++)
#pragma unroll
        for (int kk = 0; kk < 4; kk++)
            wgmma_m64n64k16_ss(acc, smem_desc(A + p * A_PANEL + kk * 32),
                               smem_desc(B + p * ATT_PANEL_BYTES + kk * 32), p > 0 || kk > 0);
}

/* The A fragments (k-step ks in a[ks]) of this warpgroup's 64 rows of a [64][HS] K-major tile of
 * swizzled panels A_PANEL bytes apart, from A: for register-sourced products whose left factor stays
 * the same over a loop, which then read only their right factor from shared memory. */
template <int HS, int A_PANEL>
__device__ __forceinline__ void load_a_fragments(uint32_t (&a)[HS / 16][4], uint32_t A) {
    const int lane = threadIdx.x % 32, r = (threadIdx.x / 32 % 4) * 16 + lane % 8 + (lane / 8 % 2) * 8;
#pragma unroll
    for (int ks = 0; ks < HS / 16; ks++)
        ldmatrix_x4(a[ks], A + (ks / 4) * A_PANEL + swz128(r, (ks % 4) * 2 + lane / 16));
}

/* acc[64 x 64] = A·Bᵀ as wgmma_abt, A as fragments from load_a_fragments. */
template <int HS>
__device__ __forceinline__ void wgmma_abt_rs(float (&acc)[32], const uint32_t (&a)[HS / 16][4], uint32_t B) {
#pragma unroll
    for (int p = 0; p < HS / 64; p++)
#pragma unroll
        for (int kk = 0; kk < 4; kk++)
            wgmma_m64n64k16_rs(acc, a[p * 4 + kk], smem_desc(B + p * ATT_PANEL_BYTES + kk * 32), p > 0 || kk > 0);
}

/* Issues acc[64 x HS] += X·B (no commit or wait): X [64 x 16·KK] as packed A fragments a[kk], B a
 * [16·KK][HS] tile of swizzled panels PANEL bytes apart, read MN-major (its rows are X's columns),
 * output panel p into acc[p]. */
template <int HS, int KK = 4, int PANEL = ATT_PANEL_BYTES>
__device__ __forceinline__ void wgmma_issue_xb(float (&acc)[HS / 64][32], const uint32_t (&a)[KK][4], uint32_t B) {
#pragma unroll
    for (int p = 0; p < HS / 64; p++)
#pragma unroll
        for (int kk = 0; kk < KK; kk++)
            wgmma_m64n64k16_rs_mn(acc[p], a[kk], smem_desc(B + p * PANEL + kk * 16 * 128), 1);
}

/* acc[64 x HS] += X·B, X in accumulator registers (packed to bf16 here), B as in wgmma_issue_xb.
 * Waits for completion: the packed registers are free after. */
template <int HS>
__device__ __forceinline__ void wgmma_xb(float (&acc)[HS / 64][32], const float (&x)[32], uint32_t B) {
    uint32_t a[4][4];
#pragma unroll
    for (int kk = 0; kk < 4; kk++) pack_a_fragment(a[kk], x, kk);
#pragma unroll
    for (int p = 0; p < HS / 64; p++) fence_acc(acc[p]);
    wgmma_fence();
    wgmma_issue_xb<HS>(acc, a, B);
    wgmma_commit();
    wgmma_wait<0>();
#pragma unroll
    for (int p = 0; p < HS / 64; p++) fence_acc(acc[p]);
}

/* dV += Pᵀ·dO and dK += dSᵀ·Q in one wgmma batch: Pᵀ and dSᵀ as A fragments (ap, ad), dOᵀ and Qᵀ as
 * in wgmma_issue_xb. Waits for completion: the fragments are free after. */
template <int HS>
__device__ __forceinline__ void wgmma_dv_dk(float (&dv)[HS / 64][32], float (&dk)[HS / 64][32],
                                            uint32_t (&ap)[4][4], uint32_t (&ad)[4][4], uint32_t dOt, uint32_t Qt) {
#pragma unroll
    for (int p = 0; p < HS / 64; p++) fence_acc(dv[p]), fence_acc(dk[p]);
    wgmma_fence();
    wgmma_issue_xb<HS>(dv, ap, dOt);
    wgmma_issue_xb<HS>(dk, ad, Qt);
    wgmma_commit();
    wgmma_wait<0>();
    fence_regs(ap);
    fence_regs(ad);
#pragma unroll
    for (int p = 0; p < HS / 64; p++) fence_acc(dv[p]), fence_acc(dk[p]);
}

#endif
