/* kernels/attention_forward_tma.cuh - the attention forward at head sizes 64 and 128 on Hopper, in
 * FlashAttention-3's manner: a block owns 128 query rows as two consumer warpgroups of 64, and one
 * producer thread streams 128-key tiles of K and V into a two-stage ring by the copy engine (TMA),
 * each tile completing on an mbarrier and released by the consumers on another. Math, masks, lse
 * and the order of the softmax are those of attention.cu.
 *
 * Launch: a persistent grid of one block per SM (at most the ⌈T/128⌉·B·NH work items), 384
 * threads (warps 0-7 the consumers, 8-11 the producer warpgroup, which gives its registers to the
 * consumers), 193 KB of shared memory at HS 128 (97 at 64). The work items go by sections of heads
 * whose K and V fit in a share of L2 together; within a section the heaviest query blocks (the
 * most key tiles) go first, so that the grid's tail is light; blocks take them from a queue.
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
/* The persistent forward's producer walks the queue too (its item, the next, the ring's count) and
 * spills at 24: 32 + 232 + 232 of 512. setmaxnreg.inc waits for registers the others gave back, so
 * the split must fit the 168 a thread the block was launched with, or the consumers never start. */
#define ATT_TMA_FWD_PRODUCER_REGS 32
#define ATT_TMA_FWD_CONSUMER_REGS 232
static_assert(ATT_TMA_FWD_PRODUCER_REGS * 128 + ATT_TMA_FWD_CONSUMER_REGS * ATT_TMA_CONSUMER_THREADS <=
                  ((65536 / ATT_TMA_THREADS) & ~7) * ATT_TMA_THREADS,
              "the forward's register split exceeds the block's registers");
static_assert(ATT_TMA_PRODUCER_REGS * 128 + ATT_TMA_CONSUMER_REGS * ATT_TMA_CONSUMER_THREADS <=
                  ((65536 / ATT_TMA_THREADS) & ~7) * ATT_TMA_THREADS,
              "the backward's register split exceeds the block's registers");
/* A [128][64] box of the 128-byte swizzle: 16 KB; a [128][HS] tile is HS/64 of them. */
#define ATT_TMA_PANEL_BYTES (ATT_TMA_BN * 128)
/* The heads one section of the grid walks together: their K and V within this much L2. */
#define ATT_TMA_SECTION_BYTES (8 << 20)

__host__ __device__ constexpr int att_tma_tile_bytes(int HS) {
    return (HS / 64) * ATT_TMA_PANEL_BYTES;
}
/* Two Q buffers, then the K ring, then the V ring; + alignment to 1024 bytes. */
__host__ __device__ constexpr int att_tma_smem_bytes(int HS) {
    return (2 + 2 * ATT_TMA_STAGES) * att_tma_tile_bytes(HS) + 1024;
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

/* The persistent grid's queue of work items (a query block of one head): the next item to hand
 * out past the grid's first, and how many blocks found the queue empty. The last of them resets
 * both for the next launch. One queue per stream (attention.cu), so that no two running grids share
 * one. */
struct AttTmaQueue {
    unsigned next, drained;
};

/* Which query block and head work item `item` is: sections of `section` heads, heaviest query
 * blocks first across the section's heads. */
struct AttTmaItem {
    int b, h, kvh, q0, j0, nkv;
};
__device__ __forceinline__ AttTmaItem att_tma_item(int item, int nbh, int nqb, int section, int NH, int NKV,
                                                   const AttMask &masks) {
    const int per = section * nqb, sec = item / per, first = sec * section;
    const int heads = min(section, nbh - first), r = item - sec * per;
    const int qb = nqb - 1 - r / heads, bh = first + r % heads;
    AttTmaItem w;
    w.b = bh / NH, w.h = bh % NH, w.kvh = w.h / (NH / NKV);
    w.q0 = qb * ATT_TMA_BM, w.j0 = first_key_tile<ATT_TMA_BN>(w.q0, masks.seq(w.b)), w.nkv = qb + 1;
    return w;
}

/* Persistent: one block per SM walks work items from the queue until it is empty, so that a block's
 * start (barriers, Q's copy, the first key tile's wait) and end (the last P·V, the stores) overlap
 * its neighbours' products instead of leaving the SM idle: one block fills an SM, and the average
 * item at T = 2048 is 8.5 key tiles. The producer fetches the next item while it streams the current
 * one's tiles, and Q is double-buffered, so the consumers find the next item's Q and first key tile
 * loaded. The ring and the consumers' turns run on across items. */
template <int HS>
__global__ void __launch_bounds__(ATT_TMA_THREADS, 1)
    attention_forward_tma_kernel(const __grid_constant__ CUtensorMap tm_qkv, const __grid_constant__ CUtensorMap tm_v,
                                 bf16 *out, float *lse, int T, int NH, int NKV, AttMask masks, float sl2, int nqb,
                                 int section, int nitems, AttTmaQueue *queue) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL) /* setmaxnreg and wgmma: sm_90a only */
    constexpr int NP = HS / 64, TILE = att_tma_tile_bytes(HS), ST = ATT_TMA_STAGES, BN = ATT_TMA_BN;
    extern __shared__ __align__(16) unsigned char att_smem[]; /* aligned to 1024 by hand below */
    /* q_full / q_empty per Q buffer; full: the copies landed (the producer's arrive + the bytes);
     * empty: every consumer warp is done with the slot */
    __shared__ __align__(8) uint64_t bars[4 + 4 * ST];
    __shared__ int items[2]; /* the work item in each Q buffer; -1: the queue is empty */
    const uint32_t Qs = (smem_addr(att_smem) + 1023) & ~1023u, Ks = Qs + 2 * TILE, Vs = Ks + ST * TILE;
    const uint32_t q_full = smem_addr(bars), q_empty = q_full + 16, k_full = q_empty + 16, v_full = k_full + 8 * ST,
                   k_empty = v_full + 8 * ST, v_empty = k_empty + 8 * ST;
    const int nbh = nitems / nqb;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

    if (threadIdx.x == 0) {
        for (int q = 0; q < 2; q++) {
            mbar_init(q_full + 8 * q, 1);
            mbar_init(q_empty + 8 * q, ATT_TMA_CONSUMER_THREADS / 32);
        }
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
        warpgroup_reg_dealloc<ATT_TMA_FWD_PRODUCER_REGS>();
        if (warp == ATT_TMA_CONSUMER_THREADS / 32 && lane == 0) {
            uint32_t t = 0; /* the ring's running tile count */
            int item = blockIdx.x;
            for (int n = 0;; n++) {
                const int qb = n & 1;
                if (n >= 2) mbar_wait(q_empty + 8 * qb, (uint32_t)((n / 2 - 1) & 1));
                if (item >= nitems) {
                    items[qb] = -1; /* published by the arrive (release), read after the wait (acquire) */
                    mbar_arrive(q_full + 8 * qb);
                    break;
                }
                items[qb] = item;
                const int next = (int)gridDim.x + (int)atomicAdd(&queue->next, 1u); /* used once this item's tiles are issued */
                const AttTmaItem w = att_tma_item(item, nbh, nqb, section, NH, NKV, masks);
                const int qcol = w.h * HS, kcol = (NH + w.kvh) * HS, vcol = (NH + NKV + w.kvh) * HS;
                mbar_expect_tx(q_full + 8 * qb, TILE);
                for (int p = 0; p < NP; p++)
                    tma_load_3d(Qs + qb * TILE + p * ATT_TMA_PANEL_BYTES, &tm_qkv, qcol + 64 * p, w.q0, w.b,
                                q_full + 8 * qb);
                for (int j = w.j0; j < w.nkv; j++, t++) {
                    const int s = (int)(t % ST);
                    const uint32_t again = (t / ST - 1) & 1; /* the phase that freed slot s */
                    const uint32_t kt = Ks + s * TILE, vt = Vs + s * TILE, kb = k_full + 8 * s, vb = v_full + 8 * s;
                    if (t >= ST) mbar_wait(k_empty + 8 * s, again);
                    mbar_expect_tx(kb, TILE);
                    for (int p = 0; p < NP; p++)
                        tma_load_3d(kt + p * ATT_TMA_PANEL_BYTES, &tm_qkv, kcol + 64 * p, j * BN, w.b, kb);
                    if (t >= ST) mbar_wait(v_empty + 8 * s, again);
                    mbar_expect_tx(vb, TILE);
                    for (int p = 0; p < NP; p++)
                        tma_load_3d(vt + p * ATT_TMA_PANEL_BYTES, &tm_v, vcol + 64 * p, j * BN, w.b, vb);
                }
                item = next;
            }
            /* every fetch of this block is done before it counts itself out */
            __threadfence();
            if (atomicAdd(&queue->drained, 1u) == gridDim.x - 1) {
                __threadfence(); /* every block's fetches, counted out before their drained, come first */
                atomicExch(&queue->next, 0u);
                atomicExch(&queue->drained, 0u);
            }
        }
        return;
    }

    warpgroup_reg_alloc<ATT_TMA_FWD_CONSUMER_REGS>();
    const int wg = warp / 4, g = lane / 4, tq = lane % 4;
    float o[NP][32];
    float mrow[2], lrow[2], alpha[2];
    float s[2][32];
    uint32_t a[8][4];
    auto pack = [&]() {
#pragma unroll
        for (int kk = 0; kk < 8; kk++) pack_a_fragment(a[kk], s[kk / 4], kk % 4);
    };

    /* Warpgroup 0 goes first. Each issues nkv - j0 + 1 times per item and passes the turn after each;
     * warpgroup 1's first pass opens the kernel, and warpgroup 0 takes its last one after the
     * queue ran dry: every barrier phase completes, none is left half-arrived. */
    if (wg == 1) att_tma_turn_pass(wg);
    uint32_t t0 = 0; /* the ring's running tile count at the item's first key tile */
    for (int n = 0;; n++) {
        const int qb = n & 1;
        mbar_wait(q_full + 8 * qb, (uint32_t)((n / 2) & 1));
        const int item = *(volatile int *)&items[qb];
        if (item < 0) break;
        const AttTmaItem w = att_tma_item(item, nbh, nqb, section, NH, NKV, masks);
        const int row0 = w.q0 + 64 * wg, qrow = row0 + (warp % 4) * 16 + g, j0 = w.j0, nkv = w.nkv;
        const AttMask am = masks.seq(w.b);
        const uint32_t Qw = Qs + qb * TILE + wg * (ATT_TMA_PANEL_BYTES / 2); /* 64 rows of 128 bytes into each Q panel */
#pragma unroll
        for (int p = 0; p < NP; p++)
#pragma unroll
            for (int i = 0; i < 32; i++) o[p][i] = 0.0f;
        mrow[0] = mrow[1] = -INFINITY;
        lrow[0] = lrow[1] = 0.0f;
        /* Only the diagonal tile and those at the window's or the document's edge need the mask (a
         * uniform branch); the diagonal's also masks keys >= T, which are > every query. */
        const int edge = am.window > 0 || am.pos ? tile_key_edge(row0, 64, am) : 0;
        auto mask = [&](int j) {
            if (j == nkv - 1 || j * BN < edge) {
                mask_tile(s[0], j * BN, qrow, tq, am);
                mask_tile(s[1], j * BN + 64, qrow, tq, am);
            }
        };

        mbar_wait(k_full + 8 * (t0 % ST), (t0 / ST) & 1);
        att_tma_turn_wait(wg);
        wgmma_fence();
        att_tma_issue_qk<HS>(s, Qw, Ks + (t0 % ST) * TILE);
        wgmma_commit();
        att_tma_turn_pass(wg);
        wgmma_wait<0>();
        fence_acc(s[0]);
        fence_acc(s[1]);
        att_tma_release(k_empty + 8 * (t0 % ST), lane);
        mask(j0);
        att_tma_softmax(s, mrow, lrow, alpha, sl2);
        pack();

        /* Iteration j holds P(j-1) packed on entry. */
        for (int j = j0 + 1; j < nkv; j++) {
            const uint32_t tk = t0 + (uint32_t)(j - j0), tv = tk - 1;
            const int sk = (int)(tk % ST), sv = (int)(tv % ST);
            mbar_wait(k_full + 8 * sk, (tk / ST) & 1);
            mbar_wait(v_full + 8 * sv, (tv / ST) & 1);
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
        /* Q's last reader (the last S) is done: the producer may load the item after next into it */
        att_tma_release(q_empty + 8 * qb, lane);
        const uint32_t tl = t0 + (uint32_t)(nkv - 1 - j0);
        mbar_wait(v_full + 8 * (tl % ST), (tl / ST) & 1);
#pragma unroll
        for (int p = 0; p < NP; p++) fence_acc(o[p]);
        att_tma_turn_wait(wg);
        wgmma_fence();
        wgmma_issue_xb<HS, 8, ATT_TMA_PANEL_BYTES>(o, a, Vs + (tl % ST) * TILE);
        wgmma_commit();
        att_tma_turn_pass(wg);
        wgmma_wait<0>();
        fence_regs(a);
#pragma unroll
        for (int p = 0; p < NP; p++) fence_acc(o[p]);
        att_tma_release(v_empty + 8 * (tl % ST), lane);

        store_forward_rows<HS>(out, lse, &o[0][0], lrow, mrow, w.b, w.h, NH, qrow, tq, T, NH * HS);
        t0 = tl + 1;
    }
    if (wg == 0) att_tma_turn_wait(wg);
#else
    __trap();
#endif
}

#endif
