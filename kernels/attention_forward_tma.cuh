/* kernels/attention_forward_tma.cuh - the attention forward at head sizes 64 and 128 on Hopper, in
 * FlashAttention-3's manner: a block owns 128 query rows as two consumer warpgroups of 64, and one
 * producer thread streams 128-key tiles of K and V into a two-stage ring by the copy engine (TMA),
 * each tile completing on an mbarrier and released by the consumers on another. Math, masks, lse
 * and the order of the softmax are those of attention.cu.
 *
 * Launch: 1-d grid of ⌈T/128⌉·B·NH blocks, 384 threads (warps 0-7 the consumers, 8-11 the
 * producer warpgroup, which gives its registers to the consumers), 160 KB of shared memory at
 * HS 128 (80 at 64): one block per SM. Blocks go by sections of heads whose K and V fit in a share
 * of L2 together; within a section the heaviest query blocks (the most key tiles) start first, so
 * that the grid's tail is light.
 * Consumer warpgroup, per key tile j: S(j) = Q·K(j)ᵀ (wgmma m64n128k16 from shared memory) and
 * O += P(j-1)·V(j-1) (P from registers) are issued together; the softmax of S(j) runs while
 * P(j-1)·V(j-1) is on the tensor cores, and O is rescaled once that product is done. The two
 * warpgroups take turns to issue (ping-pong), so one's softmax also overlaps the other's products:
 * the tensor cores never wait for a softmax, where the one-warpgroup kernel relies on other blocks.
 * Two stages, the turns and 8 MB sections are the measured best (dev/RESULTS.md, attention).
 * FLOPs 2·B·NH·T²·HS (causal); bytes: K and V cross from L2 once per 128 query rows. */
#ifndef FUSEDGPT_ATTENTION_FORWARD_TMA_CUH
#define FUSEDGPT_ATTENTION_FORWARD_TMA_CUH

#include "kernels/attention_mask.cuh"
#include "kernels/attention_mma.cuh"
#include "kernels/attention_store.cuh"
#include "kernels/fast_math.cuh"
#include "kernels/tma.cuh"

#define ATT_TMA_BM 128    /* query rows per block: two consumer warpgroups of 64 */
#define ATT_TMA_BN 128    /* keys per tile */
#define ATT_TMA_STAGES 2  /* K and V tiles in flight */
#define ATT_TMA_CONSUMER_THREADS 256
#define ATT_TMA_THREADS (ATT_TMA_CONSUMER_THREADS + 128) /* + the producer warpgroup */
/* Registers a thread after the split: a warp of each warpgroup shares each of the SM's four register
 * files (16K each), and 240 + 240 + 24 of 512 per lane fit; at entry all get 65536 / 384 = 168. */
#define ATT_TMA_PRODUCER_REGS 24
#define ATT_TMA_CONSUMER_REGS 240
/* A [128][64] box of the 128-byte swizzle: 16 KB; a [128][HS] tile is HS/64 of them. */
#define ATT_TMA_PANEL_BYTES (ATT_TMA_BN * 128)
/* The heads one section of the grid walks together: their K and V within this much L2. */
#define ATT_TMA_SECTION_BYTES (8 << 20)

__host__ __device__ constexpr int att_tma_tile_bytes(int HS) {
    return (HS / 64) * ATT_TMA_PANEL_BYTES;
}
/* Q, then the K ring, then the V ring; + alignment to 1024 bytes. */
__host__ __device__ constexpr int att_tma_smem_bytes(int HS) {
    return (1 + 2 * ATT_TMA_STAGES) * att_tma_tile_bytes(HS) + 1024;
}

/* S [64 x 128] = Q·K(j)ᵀ for a warpgroup's 64 rows (Q at Qw: HS/64 panels of 128 rows, this
 * warpgroup's 64 of them at its offset) against a key tile (HS/64 panels of 128 keys). */
template <int HS>
__device__ __forceinline__ void att_tma_issue_qk(float (&s)[2][32], uint32_t Qw, uint32_t Kt) {
#pragma unroll
    for (int p = 0; p < HS / 64; p++)
#pragma unroll
        for (int kk = 0; kk < 4; kk++)
            wgmma_m64n128k16_ss(s, smem_desc(Qw + p * ATT_TMA_PANEL_BYTES + kk * 32),
                                smem_desc(Kt + p * ATT_TMA_PANEL_BYTES + kk * 32), p > 0 || kk > 0);
}

/* The online softmax of one score tile in place: the rows' new maxima (mrow, log2 units), the factor
 * alpha by which their earlier sums and outputs shrink, P = exp2(S·sl2 − max) and the sums. O is
 * not touched: it may still be in a product. */
__device__ __forceinline__ void att_tma_softmax(float (&s)[2][32], float (&mrow)[2], float (&lrow)[2],
                                                float (&alpha)[2], float sl2) {
#pragma unroll
    for (int r = 0; r < 2; r++) {
        float mx = -INFINITY;
#pragma unroll
        for (int hf = 0; hf < 2; hf++)
#pragma unroll
            for (int nt = 0; nt < 8; nt++) mx = fmaxf(mx, fmaxf(s[hf][nt * 4 + 2 * r], s[hf][nt * 4 + 2 * r + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        float mnew = fmaxf(mrow[r], mx * sl2), msub = safe_max(mnew);
        alpha[r] = ex2(mrow[r] - msub); /* 0 until the row's first key (mrow = -inf) */
        mrow[r] = mnew;
        float l = 0.0f;
#pragma unroll
        for (int hf = 0; hf < 2; hf++)
#pragma unroll
            for (int nt = 0; nt < 8; nt++) {
                float p0 = ex2(fmaf(s[hf][nt * 4 + 2 * r], sl2, -msub));
                float p1 = ex2(fmaf(s[hf][nt * 4 + 2 * r + 1], sl2, -msub));
                s[hf][nt * 4 + 2 * r] = p0;
                s[hf][nt * 4 + 2 * r + 1] = p1;
                l += p0 + p1;
            }
        lrow[r] = lrow[r] * alpha[r] + l;
    }
}

/* Ping-pong between the two consumer warpgroups: warpgroup w issues its products only on its turn
 * (named barrier 1 + w, which the other warpgroup's 128 threads arrive on once they issued theirs),
 * so that one's softmax runs while the other's products hold the tensor cores. */
__device__ __forceinline__ void att_tma_turn_wait(int wg) {
    asm volatile("bar.sync %0, %1;\n" ::"r"(1 + wg), "n"(ATT_TMA_CONSUMER_THREADS) : "memory");
}
__device__ __forceinline__ void att_tma_turn_pass(int wg) {
    asm volatile("bar.arrive %0, %1;\n" ::"r"(2 - wg), "n"(ATT_TMA_CONSUMER_THREADS) : "memory");
}

/* A warp's release of a ring slot once its products read it (every lane has waited for them). */
__device__ __forceinline__ void att_tma_release(uint32_t bar, int lane) {
    __syncwarp();
    if (lane == 0) mbar_arrive(bar);
}

template <int HS>
__global__ void __launch_bounds__(ATT_TMA_THREADS, 1)
    attention_forward_tma_kernel(const __grid_constant__ CUtensorMap tm_qkv, const __grid_constant__ CUtensorMap tm_v,
                                 bf16 *out, float *lse, int T, int NH,
                                 int NKV, int window, float sl2, int nqb, int section) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL) /* setmaxnreg and wgmma: sm_90a only */
    constexpr int NP = HS / 64, TILE = att_tma_tile_bytes(HS), ST = ATT_TMA_STAGES, BN = ATT_TMA_BN;
    extern __shared__ __align__(16) unsigned char att_smem[]; /* aligned to 1024 by hand below */
    /* full: the copies landed (the producer's arrive + the bytes); empty: every consumer warp is
     * done with the slot */
    __shared__ __align__(8) uint64_t bars[1 + 4 * ST];
    const uint32_t Qs = (smem_addr(att_smem) + 1023) & ~1023u, Ks = Qs + TILE, Vs = Ks + ST * TILE;
    const uint32_t q_full = smem_addr(bars), k_full = q_full + 8, v_full = k_full + 8 * ST,
                   k_empty = v_full + 8 * ST, v_empty = k_empty + 8 * ST;

    /* The block's (query block, batch·head): sections of `section` heads, heaviest query blocks
     * first across the section's heads. */
    const int nbh = gridDim.x / nqb, per = section * nqb, sec = blockIdx.x / per, first = sec * section;
    const int heads = min(section, nbh - first), r = blockIdx.x - sec * per;
    const int qb = nqb - 1 - r / heads, bh = first + r % heads;
    const int b = bh / NH, h = bh % NH, kvh = h / (NH / NKV);
    const int q0 = qb * ATT_TMA_BM, j0 = first_key_tile<BN>(q0, window), nkv = qb + 1;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

    if (threadIdx.x == 0) {
        mbar_init(q_full, 1);
        for (int s = 0; s < ST; s++) {
            mbar_init(k_full + 8 * s, 1);
            mbar_init(v_full + 8 * s, 1);
            mbar_init(k_empty + 8 * s, ATT_TMA_CONSUMER_THREADS / 32);
            mbar_init(v_empty + 8 * s, ATT_TMA_CONSUMER_THREADS / 32);
        }
        mbar_init_fence();
    }
    /* The barriers are initialised before anyone waits on them or copies complete on them. */
    __syncthreads();

    if (warp >= ATT_TMA_CONSUMER_THREADS / 32) { /* the producer: one lane issues every copy */
        warpgroup_reg_dealloc<ATT_TMA_PRODUCER_REGS>();
        if (warp == ATT_TMA_CONSUMER_THREADS / 32 && lane == 0) {
            const int qcol = h * HS, kcol = (NH + kvh) * HS, vcol = (NH + NKV + kvh) * HS;
            mbar_expect_tx(q_full, TILE);
            for (int p = 0; p < NP; p++)
                tma_load_3d(Qs + p * ATT_TMA_PANEL_BYTES, &tm_qkv, qcol + 64 * p, q0, b, q_full);
            for (int j = j0; j < nkv; j++) {
                const int it = j - j0, s = it % ST;
                const uint32_t again = (uint32_t)((it / ST - 1) & 1); /* the phase that freed slot s */
                const uint32_t kt = Ks + s * TILE, vt = Vs + s * TILE, kb = k_full + 8 * s, vb = v_full + 8 * s;
                if (it >= ST) mbar_wait(k_empty + 8 * s, again);
                mbar_expect_tx(kb, TILE);
                for (int p = 0; p < NP; p++)
                    tma_load_3d(kt + p * ATT_TMA_PANEL_BYTES, &tm_qkv, kcol + 64 * p, j * BN, b, kb);
                if (it >= ST) mbar_wait(v_empty + 8 * s, again);
                mbar_expect_tx(vb, TILE);
                for (int p = 0; p < NP; p++)
                    tma_load_3d(vt + p * ATT_TMA_PANEL_BYTES, &tm_v, vcol + 64 * p, j * BN, b, vb);
            }
        }
        return;
    }

    warpgroup_reg_alloc<ATT_TMA_CONSUMER_REGS>();
    const int wg = warp / 4, g = lane / 4, tq = lane % 4;
    const int row0 = q0 + 64 * wg, qrow = row0 + (warp % 4) * 16 + g;
    const uint32_t Qw = Qs + wg * (ATT_TMA_PANEL_BYTES / 2); /* 64 rows of 128 bytes into each Q panel */
    float o[NP][32];
#pragma unroll
    for (int p = 0; p < NP; p++)
#pragma unroll
        for (int i = 0; i < 32; i++) o[p][i] = 0.0f;
    float mrow[2] = {-INFINITY, -INFINITY}, lrow[2] = {0.0f, 0.0f}, alpha[2];
    float s[2][32];
    uint32_t a[8][4];
    /* Only the diagonal tile and those at the window's edge need the mask (a uniform branch); the
     * diagonal's also masks keys >= T, which are > every query. */
    auto mask = [&](int j) {
        if (j == nkv - 1 || crosses_window(j * BN, row0, 64, window)) {
            mask_tile(s[0], j * BN, qrow, tq, window);
            mask_tile(s[1], j * BN + 64, qrow, tq, window);
        }
    };
    auto pack = [&]() {
#pragma unroll
        for (int kk = 0; kk < 8; kk++) pack_a_fragment(a[kk], s[kk / 4], kk % 4);
    };

    /* Warpgroup 0 goes first. Each issues nkv - j0 + 1 times and passes the turn after each but
     * warpgroup 1's last: every barrier phase completes, none is left half-arrived. */
    if (wg == 1) att_tma_turn_pass(wg);
    mbar_wait(q_full, 0);
    mbar_wait(k_full, 0);
    att_tma_turn_wait(wg);
    wgmma_fence();
    att_tma_issue_qk<HS>(s, Qw, Ks);
    wgmma_commit();
    att_tma_turn_pass(wg);
    wgmma_wait<0>();
    fence_acc(s[0]);
    fence_acc(s[1]);
    att_tma_release(k_empty, lane);
    mask(j0);
    att_tma_softmax(s, mrow, lrow, alpha, sl2);
    pack();

    /* Iteration j holds P(j-1) packed on entry. */
    for (int j = j0 + 1; j < nkv; j++) {
        const int it = j - j0, sk = it % ST, sv = (it - 1) % ST;
        mbar_wait(k_full + 8 * sk, (uint32_t)((it / ST) & 1));
        mbar_wait(v_full + 8 * sv, (uint32_t)(((it - 1) / ST) & 1));
#pragma unroll
        for (int p = 0; p < NP; p++) fence_acc(o[p]);
        att_tma_turn_wait(wg);
        wgmma_fence();
        att_tma_issue_qk<HS>(s, Qw, Ks + sk * TILE);
        wgmma_commit();
        wgmma_issue_xb<HS, 8, ATT_TMA_PANEL_BYTES>(o, a, Vs + sv * TILE); /* O += P·V */
        wgmma_commit();
        att_tma_turn_pass(wg);
        wgmma_wait<1>(); /* S(j); P(j-1)·V(j-1) may still run */
        fence_acc(s[0]);
        fence_acc(s[1]);
        att_tma_release(k_empty + 8 * sk, lane);
        mask(j);
        att_tma_softmax(s, mrow, lrow, alpha, sl2);
        wgmma_wait<0>();
        fence_regs(a); /* read by P·V until the wait: no other value may take their registers */
#pragma unroll
        for (int p = 0; p < NP; p++) fence_acc(o[p]);
        att_tma_release(v_empty + 8 * sv, lane);
#pragma unroll
        for (int p = 0; p < NP; p++)
#pragma unroll
            for (int i = 0; i < 32; i++) o[p][i] *= alpha[(i >> 1) & 1];
        pack();
    }
    const int last = nkv - 1 - j0;
    mbar_wait(v_full + 8 * (last % ST), (uint32_t)((last / ST) & 1));
#pragma unroll
    for (int p = 0; p < NP; p++) fence_acc(o[p]);
    att_tma_turn_wait(wg);
    wgmma_fence();
    wgmma_issue_xb<HS, 8, ATT_TMA_PANEL_BYTES>(o, a, Vs + (last % ST) * TILE);
    wgmma_commit();
    if (wg == 0) att_tma_turn_pass(wg);
    wgmma_wait<0>();
    fence_regs(a);
#pragma unroll
    for (int p = 0; p < NP; p++) fence_acc(o[p]);

    store_forward_rows<HS>(out, lse, &o[0][0], lrow, mrow, b, h, NH, qrow, tq, T, NH * HS);
#else
    __trap();
#endif
}

#endif
