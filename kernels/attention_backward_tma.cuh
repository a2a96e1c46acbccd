/* kernels/attention_backward_tma.cuh - the attention backward at head sizes 64 and 128 on Hopper in
 * one kernel, in FlashAttention-3's manner: a block owns 128 keys of one key/value head as two
 * consumer warpgroups of 64, and a producer warpgroup streams the query tiles of BQ rows that see
 * them (128 at HS 64, 64 at 128: att_bwd_tma_query_rows) by the copy engine (TMA) through a
 * three-stage mbarrier ring, giving its registers to the
 * consumers (setmaxnreg). Math, masks and the qkv-bias partial sums are those of
 * attention_backward.cuh's kernels (attention.cu describes the algorithm): deterministic, no
 * atomics, K and V read from the packed qkv for every query head of their group.
 *
 * Launch: 1-d grid of ⌈T/128⌉·B·NKV blocks of 384 threads (warps 0-7 the consumers, 8-11 the
 * producer warpgroup), 209 KB of shared memory at HS 128 (193 at 64): one block per SM. Blocks go by
 * sections of heads whose streamed tiles fit in a share of L2 together, the first key blocks (the
 * heaviest) first within a section.
 * Per step, a (query tile, head of the group): Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ (wgmma from shared memory,
 *   K and V this warpgroup's 64 rows of the block's), Pᵀ and dSᵀ in registers, then dV += Pᵀ·dO and
 *   dK += dSᵀ·Q with Pᵀ, dSᵀ as register A operands. dSᵀ also goes to shared memory, and once both
 *   warpgroups' rows are there, dQ's share of the block's 128 keys, dS·K, is one more product (dS
 *   MN-major from shared memory; each warpgroup half of the columns at BQ 64, half of the rows at
 *   BQ 128). 5 products a step where a dK,dV kernel beside a dQ kernel needs 7.
 * dQ's shares are summed over key blocks in fp32 in a buffer of the scratch, in the order of the key
 *   blocks, which makes the sum deterministic without atomics: the producer's third warp copies a
 *   step's share out by a bulk copy (the first key block that sees the tile stores, each later one
 *   adds by the L2's reduction), once a per-tile count says the key block before it is in, and
 *   raises the count when its add is done. A block only waits for a block started before it (its
 *   place in the grid is a ticket taken at its start), and walks its query tiles from the last down
 *   to the diagonal, so it meets each tile at the same step as the key block before it, or later.
 *   Each tile's adds are a chain across its key blocks, which holds the consumers (one share buffer)
 *   when a link is slow: the copy-out thread's step is kept short.
 *   A block is the last key block of the two query tiles on its diagonal: once its own adds are in,
 *   it reads their sums back from L2 and writes bf16 dQ with their bias partials.
 * The producer's first warp copies Q and dO, its second the tile's lse and D = rowsum(dO∘O) into
 *   the ring beside them, and with documents each row's first key, which the consumers' masks read
 *   there rather than from memory after their products.
 * Measured against the two kernels it replaced (dev/RESULTS.md, attention): 6-9 % faster at Qwen3's
 *   and 7-9 % at Llama's shapes (T 2048), level to 7 % at GPT-2's (T 1024, a noisy shape); storing
 *   dQ at each diagonal rather than in a kernel after it took 3-4 % more off at Qwen3's shape.
 * FLOPs: 5·2·64·64·HS per 64 × 64 pair of queries and keys, 5/2 of the forward.
 * Bytes: Q and dO cross from L2 once per 128 keys; dQ's fp32 shares once each way per step. */
#ifndef FUSEDGPT_ATTENTION_BACKWARD_TMA_CUH
#define FUSEDGPT_ATTENTION_BACKWARD_TMA_CUH

#include "kernels/attention_forward_tma.cuh"

#define ATT_BWD_TMA_ROWS 128 /* keys of a block */

/* Query rows a step streams: 128 at HS 64, 64 at HS 128. At HS 64 a step of 64 queries makes Sᵀ and
 * dPᵀ m64n64 products reading both operands from shared memory, whose 4 KB per 32 clocks of tensor
 * work leave no shared-memory bandwidth for the rest of the step; 128 queries (m64n128) read 6 KB
 * per 64 clocks and halve the step's barriers per unit of work. At HS 128 the registers of a
 * 128-query step would not fit. */
__host__ __device__ constexpr int att_bwd_tma_query_rows(int HS) {
    return HS == 64 ? 128 : 64;
}
/* streamed tiles in flight: three, not two, took 6-11 % off the backward at Llama's and Qwen3's
 * shapes (dev/RESULTS.md, attention); four gave no more */
#define ATT_BWD_TMA_STAGES 3

/* A streamed [BQ][HS] tile: HS/64 panels of BQ rows × 128 bytes. */
__host__ __device__ constexpr int att_bwd_tma_tile_bytes(int HS) {
    return (HS / 64) * att_bwd_tma_query_rows(HS) * 128;
}
/* A step's dSᵀ: 128 keys × BQ queries of bf16, as BQ/64 panels of 128 rows of 128 bytes. */
__host__ __device__ constexpr int att_bwd_tma_ds_bytes(int HS) {
    return ATT_BWD_TMA_ROWS * 2 * att_bwd_tma_query_rows(HS);
}
/* A step's dQ share: BQ queries × HS in fp32. */
__host__ __device__ constexpr int att_bwd_tma_dq_bytes(int HS) {
    return att_bwd_tma_query_rows(HS) * HS * 4;
}
/* The block's K and V ([128][HS] each), the ring's Q and dO tiles a stage, a step's dSᵀ and dQ
 * share; + alignment to 1024 bytes. 209 KB at HS 128 (with 7.6 KB of static shared memory: a
 * second dSᵀ slot would not fit the SM's 227), 193 KB at HS 64. */
__host__ __device__ constexpr int att_bwd_tma_smem_bytes(int HS) {
    return 2 * att_tma_tile_bytes(HS) + ATT_BWD_TMA_STAGES * 2 * att_bwd_tma_tile_bytes(HS) +
           att_bwd_tma_ds_bytes(HS) + att_bwd_tma_dq_bytes(HS) + 1024;
}

/* The (row block, head) of place idx in a 1-d grid of nblk row blocks per head: sections of
 * `section` heads, blocks in the order of `rank` (0 first) across the section's heads. With idx the
 * order in which blocks started (a ticket), a head's key block starts after the ones before it, so
 * waiting for their dQ shares never waits for a block that has not started. */
__device__ __forceinline__ void att_bwd_tma_block(int idx, int nblk, int section, int &rank, int &head) {
    const int nheads = gridDim.x / nblk, per = section * nblk, sec = idx / per, first = sec * section;
    const int heads = min(section, nheads - first), r = idx - sec * per;
    rank = r / heads;
    head = first + r % heads;
}

/* The step's query tile and head: tiles from the last that sees the block's keys down to the
 * diagonal, the group's heads within each tile. Every key block of a head meets a query tile at the
 * same step or a later one than the block before it, whose dQ share comes first. */
__device__ __forceinline__ void att_bwd_tma_step(int i, int grp, int nper, int qt0, int h0, int &qt, int &h) {
    qt = qt0 + nper - 1 - i / grp;
    h = h0 + i % grp;
}

/* The first key block (of 128 keys) that sees query tile qt of BQ rows, the inverse of
 * query_tile_end: the block of the tile's first row's first key (its later rows' first keys come no
 * earlier). Every block from there to the diagonal walks the tile: one of its keys is seen by the
 * tile's first row, or (past it) by the row of its first key. */
template <int BQ>
__device__ __forceinline__ int first_key_block(int qt, const AttMask &m) {
    return att_first_key(m, qt * BQ) / ATT_BWD_TMA_ROWS;
}

template <int HS>
__global__ void __launch_bounds__(ATT_TMA_THREADS, 1)
    attention_backward_tma_kernel(const __grid_constant__ CUtensorMap tm_kv, const __grid_constant__ CUtensorMap tm_v,
                                  const __grid_constant__ CUtensorMap tm_q,
                                  const __grid_constant__ CUtensorMap tm_do, bf16 *dqkv, float *bias_part,
                                  float *dq_acc, unsigned *dq_count, unsigned *started, const float *lse,
                                  const float *D, int T, int NH, int NKV, AttMask masks, float sl2, float scale,
                                  int nkb, int section) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL) /* setmaxnreg and wgmma: sm_90a only */
    constexpr int NP = HS / 64, OWN = att_tma_tile_bytes(HS), TILE = att_bwd_tma_tile_bytes(HS);
    constexpr int ST = ATT_BWD_TMA_STAGES, BQ = att_bwd_tma_query_rows(HS), QT = BQ / 64;
    constexpr int CONSUMER_WARPS = ATT_TMA_CONSUMER_THREADS / 32;
    /* DQV: a thread's values of the step's dQ share (a warpgroup's 64 × 64 either way: at QT 1
     * half the columns of the 64 rows, at QT 2 its own 64 of the 128 rows) */
    constexpr int DS = att_bwd_tma_ds_bytes(HS), DQ = att_bwd_tma_dq_bytes(HS), DQV = BQ * HS / 256;
    static_assert(DQV == 32, "dQ's product is one m64n64 per warpgroup");
    extern __shared__ __align__(16) unsigned char att_smem[]; /* aligned to 1024 by hand below */
    /* kv: K and V landed; full: a stage's Q, dO (the copy engine) and lse, D (the stats warp's 32
     * lanes) landed; empty: every consumer warp is done with the stage; ds_full: the step's dSᵀ
     * written by every consumer warp; ds_empty: read by both warpgroups' products; dq_full: the
     * step's dQ share in shared memory; dq_empty: its copy out has read it; dq_done: every add of
     * this block is in dq_acc */
    __shared__ __align__(8) uint64_t bars[1 + 2 * ST + 5];
    __shared__ float stats[ST][2][BQ]; /* lse, D of a stage's query rows */
    __shared__ int firsts[ST][BQ];     /* with documents, each of a stage's query rows' first key */
    const uint32_t Ks = (smem_addr(att_smem) + 1023) & ~1023u, Vs = Ks + OWN, Qs = Vs + OWN, dOs = Qs + ST * TILE;
    const uint32_t dSs = dOs + ST * TILE, dQs = dSs + DS;
    const uint32_t kv_full = smem_addr(bars), full = kv_full + 8, empty = full + 8 * ST, ds_full = empty + 8 * ST;
    const uint32_t ds_empty = ds_full + 8, dq_full = ds_empty + 8, dq_empty = dq_full + 8, dq_done = dq_empty + 8;

    __shared__ int ticket;
    if (threadIdx.x == 0) ticket = (int)atomicAdd(started, 1u);
    __syncthreads();
    int kb, bkv;
    att_bwd_tma_block(ticket, nkb, section, kb, bkv);
    const int b = bkv / NKV, kvh = bkv % NKV, grp = NH / NKV, h0 = kvh * grp;
    const AttMask am = masks.seq(b);
    const int k0 = kb * ATT_BWD_TMA_ROWS, nqt = ceil_div(T, BQ), ntiles64 = ceil_div(T, ATT_TILE);
    /* the query tiles that see these keys: qt0 (the diagonal) to qt0 + nper - 1 */
    const int qt0 = k0 / BQ, nper = query_tile_end<BQ, ATT_BWD_TMA_ROWS>(k0, am, nqt) - qt0;
    const int nsteps = grp * nper;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

    if (threadIdx.x == 0) {
        mbar_init(kv_full, 1);
        for (int s = 0; s < ST; s++) {
            mbar_init(full + 8 * s, 1 + 32);
            mbar_init(empty + 8 * s, CONSUMER_WARPS);
        }
        mbar_init(ds_full, CONSUMER_WARPS);
        mbar_init(ds_empty, CONSUMER_WARPS);
        mbar_init(dq_full, CONSUMER_WARPS);
        mbar_init(dq_empty, 1);
        mbar_init(dq_done, 1);
        mbar_init_fence();
    }
    /* The barriers are initialised before anyone waits on them or copies complete on them. */
    __syncthreads();

    if (warp >= CONSUMER_WARPS) {
        warpgroup_reg_dealloc<ATT_TMA_PRODUCER_REGS>();
        if (warp == CONSUMER_WARPS && lane == 0) { /* the copies: one lane issues them all */
            const int kcol = (NH + kvh) * HS, vcol = (NH + NKV + kvh) * HS;
            mbar_expect_tx(kv_full, 2 * OWN);
            for (int p = 0; p < NP; p++) {
                tma_load_3d(Ks + p * ATT_TMA_PANEL_BYTES, &tm_kv, kcol + 64 * p, k0, b, kv_full);
                tma_load_3d(Vs + p * ATT_TMA_PANEL_BYTES, &tm_v, vcol + 64 * p, k0, b, kv_full);
            }
            for (int i = 0; i < nsteps; i++) {
                int qt, h;
                att_bwd_tma_step(i, grp, nper, qt0, h0, qt, h);
                const int s = i % ST, qcol = h * HS, t0 = qt * BQ;
                if (i >= ST) mbar_wait(empty + 8 * s, (uint32_t)((i / ST - 1) & 1));
                mbar_expect_tx(full + 8 * s, 2 * TILE);
                for (int p = 0; p < NP; p++)
                    for (int r = 0; r < QT; r++) { /* boxes of 64 rows, one after the other in the panel */
                        const uint32_t at = s * TILE + p * QT * ATT_PANEL_BYTES + r * ATT_PANEL_BYTES;
                        tma_load_3d(Qs + at, &tm_q, qcol + 64 * p, t0 + 64 * r, b, full + 8 * s);
                        tma_load_3d(dOs + at, &tm_do, qcol + 64 * p, t0 + 64 * r, b, full + 8 * s);
                    }
            }
        } else if (warp == CONSUMER_WARPS + 1) { /* the statistics: each lane two rows, then arrives */
            for (int i = 0; i < nsteps; i++) {
                int qt, h;
                att_bwd_tma_step(i, grp, nper, qt0, h0, qt, h);
                const int s = i % ST, t0 = qt * BQ;
                if (i >= ST) mbar_wait(empty + 8 * s, (uint32_t)((i / ST - 1) & 1));
                const size_t row = ((size_t)b * NH + h) * T;
                for (int c = lane; c < BQ; c += 32) { /* queries past T: P = exp2(finite − inf) = 0 */
                    const int t = t0 + c;
                    stats[s][0][c] = t < T ? lse[row + t] : INFINITY;
                    stats[s][1][c] = t < T ? D[row + t] : 0.0f;
                    if (am.pos) firsts[s][c] = att_first_key(am, t);
                }
                mbar_arrive(full + 8 * s);
            }
        } else if (warp == CONSUMER_WARPS + 2 && lane == 0) {
            /* dQ's shares, in key-block order: a tile's first key block stores its share, each later
             * one adds its own once the count says the one before it is in; the count rises only
             * after the add is done. Waits only for blocks started before this one. This thread is
             * a link in a chain across the key blocks of a tile, so its step is kept short: the
             * tile walked as att_bwd_tma_step without divisions, the count polled without acquire
             * (which would invalidate L1 on every poll) before the share is waited for. */
            int qt = qt0 + nper - 1, h = h0;
            unsigned before = nsteps ? (unsigned)(kb - first_key_block<BQ>(qt, am)) : 0u;
            for (int i = 0; i < nsteps; i++) {
                const size_t tile = ((size_t)b * NH + h) * nqt + qt;
                /* the next step's count, loaded now so that its latency (documents: a row's position)
                 * passes beside this step's waits, not on the chain */
                const bool tile_done = h + 1 == h0 + grp;
                const unsigned before_next = !tile_done ? before
                                             : qt > qt0 ? (unsigned)(kb - first_key_block<BQ>(qt - 1, am)) : 0u;
                if (before) {
                    while (ld_relaxed_gpu(dq_count + tile) < before) {
                    }
                    (void)ld_acquire_gpu(dq_count + tile);
                }
                mbar_wait(dq_full, (uint32_t)(i & 1));
                fence_proxy_async_global();
                if (before == 0)
                    bulk_store(dq_acc + tile * BQ * HS, dQs, DQ);
                else
                    bulk_add_f32(dq_acc + tile * BQ * HS, dQs, DQ);
                bulk_commit();
                bulk_wait_read();
                mbar_arrive(dq_empty);
                bulk_wait_done();
                fence_proxy_async_global();
                red_release_gpu_inc(dq_count + tile);
                before = before_next;
                if (++h == h0 + grp) h = h0, qt--;
            }
            mbar_arrive(dq_done);
        }
        return;
    }

    warpgroup_reg_alloc<ATT_TMA_CONSUMER_REGS>();
    const int wg = warp / 4, g = lane / 4, tq = lane % 4;
    const int kw0 = k0 + 64 * wg, krow = kw0 + (warp % 4) * 16 + g;
    /* this warpgroup's 64 keys: 64 rows of 128 bytes into each panel of the block's K and V */
    const uint32_t Kw = Ks + wg * (ATT_TMA_PANEL_BYTES / 2), Vw = Vs + wg * (ATT_TMA_PANEL_BYTES / 2);
    const int dsrow = 64 * wg + 16 * (warp % 4) + g; /* this thread's first key row of a dSᵀ slot */
    constexpr int PANEL = QT * ATT_PANEL_BYTES;           /* a streamed tile's panel: BQ rows of 128 bytes */
    float dk[NP][32], dv[NP][32], dq[DQV];
#pragma unroll
    for (int p = 0; p < NP; p++)
#pragma unroll
        for (int i = 0; i < 32; i++) dk[p][i] = dv[p][i] = 0.0f;
    mbar_wait(kv_full, 0);

    for (int i = 0; i < nsteps; i++) {
        int qt, h;
        att_bwd_tma_step(i, grp, nper, qt0, h0, qt, h);
        const int s = i % ST, q0 = qt * BQ;
        mbar_wait(full + 8 * s, (uint32_t)((i / ST) & 1));
        const uint32_t Qt = Qs + s * TILE, dOt = dOs + s * TILE;
        const float *lse_t = stats[s][0], *D_t = stats[s][1];
        const int *first_t = firsts[s];

        /* Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ, [64 keys × BQ queries] as QT halves of 64 columns */
        float st[QT][32], dpt[QT][32];
        wgmma_fence();
        if constexpr (QT == 1) {
            wgmma_abt<HS, ATT_TMA_PANEL_BYTES>(st[0], Kw, Qt);
            wgmma_abt<HS, ATT_TMA_PANEL_BYTES>(dpt[0], Vw, dOt);
        } else {
#pragma unroll
            for (int kk = 0; kk < 4; kk++)
                wgmma_m64n128k16_ss(st, smem_desc(Kw + kk * 32), smem_desc(Qt + kk * 32), kk > 0);
#pragma unroll
            for (int kk = 0; kk < 4; kk++)
                wgmma_m64n128k16_ss(dpt, smem_desc(Vw + kk * 32), smem_desc(dOt + kk * 32), kk > 0);
        }
        wgmma_commit();
        wgmma_wait<0>();
#pragma unroll
        for (int c = 0; c < QT; c++) fence_acc(st[c]), fence_acc(dpt[c]);

        /* Tiles that reach below this warpgroup's diagonal or past the window's edge need the mask (a
         * uniform branch); at QT 1 the block's first tile lies wholly below warpgroup 1's keys. With
         * documents the rows' first keys come from the stage (the statistics warp's), not memory. */
        if (am.pos) {
            if (q0 < kw0 + 63 || kw0 < first_t[BQ - 1])
#pragma unroll
                for (int c = 0; c < QT; c++)
                    mask_tile_t_by(st[c], krow, q0 + 64 * c, tq, [&](int qi) { return first_t[qi - q0]; });
        } else if (q0 < kw0 + 63 || crosses_window(kw0, q0, BQ, am)) {
#pragma unroll
            for (int c = 0; c < QT; c++) mask_tile_t(st[c], krow, q0 + 64 * c, tq, am);
        }
#pragma unroll
        for (int c = 0; c < QT; c++)
#pragma unroll
            for (int e = 0; e < 32; e++) {
                int col = 64 * c + (e >> 2) * 8 + 2 * tq + (e & 1);
                float p = ex2(fmaf(st[c][e], sl2, -lse_t[col]));
                st[c][e] = p;
                dpt[c][e] = p * (dpt[c][e] - D_t[col]);
            }
        uint32_t ap[4 * QT][4], ad[4 * QT][4];
#pragma unroll
        for (int c = 0; c < QT; c++)
#pragma unroll
            for (int kk = 0; kk < 4; kk++)
                pack_a_fragment(ap[4 * c + kk], st[c], kk), pack_a_fragment(ad[4 * c + kk], dpt[c], kk);
        /* dSᵀ to shared memory, once both warpgroups' products have read the last step's: row = key
         * of the block, 64 queries of 128 bytes (swizzled) a panel, which dQ's product reads as an
         * MN-major left factor */
        if (i > 0) mbar_wait(ds_empty, (uint32_t)((i - 1) & 1));
#pragma unroll
        for (int c = 0; c < QT; c++)
#pragma unroll
            for (int kk = 0; kk < 4; kk++) {
                const uint32_t panel = dSs + c * ATT_BWD_TMA_ROWS * 128;
                st_shared_u32(panel + swz128(dsrow, 2 * kk) + 4 * tq, ad[4 * c + kk][0]);
                st_shared_u32(panel + swz128(dsrow + 8, 2 * kk) + 4 * tq, ad[4 * c + kk][1]);
                st_shared_u32(panel + swz128(dsrow, 2 * kk + 1) + 4 * tq, ad[4 * c + kk][2]);
                st_shared_u32(panel + swz128(dsrow + 8, 2 * kk + 1) + 4 * tq, ad[4 * c + kk][3]);
            }
        fence_proxy_async();
        att_tma_release(ds_full, lane);

#pragma unroll
        for (int p = 0; p < NP; p++) fence_acc(dv[p]), fence_acc(dk[p]);
        wgmma_fence();
        wgmma_issue_xb<HS, 4 * QT, PANEL>(dv, ap, dOt); /* dV += Pᵀ·dO */
        wgmma_issue_xb<HS, 4 * QT, PANEL>(dk, ad, Qt);  /* dK += dSᵀ·Q */
        wgmma_commit();
        /* dQ's share of these 128 keys, dS·K, once both warpgroups' dSᵀ rows are in the slot: at QT 1
         * this warpgroup's half of the columns, at QT 2 its own 64 of the queries (dSᵀ's panel wg) */
        mbar_wait(ds_full, (uint32_t)(i & 1));
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < ATT_BWD_TMA_ROWS / 16; kk++) {
            if constexpr (QT == 1)
                wgmma_m64n64k16_ss_t<1, 1>(dq, smem_desc(dSs + kk * 2048),
                                           smem_desc(Ks + wg * ATT_TMA_PANEL_BYTES + kk * 2048), kk > 0);
            else
                wgmma_m64n64k16_ss_t<1, 1>(dq, smem_desc(dSs + wg * ATT_BWD_TMA_ROWS * 128 + kk * 2048),
                                           smem_desc(Ks + kk * 2048), kk > 0);
        }
        wgmma_commit();
        wgmma_wait<0>();
        fence_regs(ap);
        fence_regs(ad);
        fence_acc(dq);
#pragma unroll
        for (int p = 0; p < NP; p++) fence_acc(dv[p]), fence_acc(dk[p]);
        att_tma_release(empty + 8 * s, lane);
        att_tma_release(ds_empty, lane);

        /* The share to shared memory for the copy out, float4 j of thread t at [j][t]: conflict-free,
         * and the dQ store at the end reads the sums back in the same order. */
        if (i > 0) mbar_wait(dq_empty, (uint32_t)((i - 1) & 1));
#pragma unroll
        for (int j = 0; j < DQV / 4; j++)
            st_shared_v4(dQs + (j * ATT_TMA_CONSUMER_THREADS + threadIdx.x) * 16, dq[4 * j], dq[4 * j + 1],
                         dq[4 * j + 2], dq[4 * j + 3]);
        fence_proxy_async();
        att_tma_release(dq_full, lane);
    }

    const size_t C3 = packed_qkv_width(NH, NKV, HS);
    if (kw0 < T) { /* a last block's second warpgroup may have no keys */
        float *bias_row = bias_part_row(bias_part, b, 2 * kb + wg, ntiles64, C3);
        store_head_grad<HS, 2>(dqkv, bias_row, &dk[0][0], scale, key_col(NH, HS, 0), b, kvh, krow, tq, T, C3);
        store_head_grad<HS, 2>(dqkv, bias_row, &dv[0][0], 1.0f, value_col(NH, NKV, HS, 0), b, kvh, krow, tq, T, C3);
    }
    /* No later key block sees the 128 queries from k0 (causal: this block holds their diagonal; query
     * tiles qt0 and qt0 + 1 at QT 1, qt0 at QT 2), so once this block's own adds are in, their sums
     * are whole: dQ of the group's heads, scaled, to bf16 with the tiles' bias partials, each thread
     * the values its own share held. The copy out's completed bulk adds, its proxy fence and the
     * barrier order them before these reads. */
    mbar_wait(dq_done, 0);
    for (int qt = qt0; qt < min(qt0 + 2 / QT, nqt); qt++)
        for (int h = h0; h < h0 + grp; h++) {
            const float4 *src =
                reinterpret_cast<const float4 *>(dq_acc + (((size_t)b * NH + h) * nqt + qt) * BQ * HS);
            float acc[DQV];
#pragma unroll
            for (int j = 0; j < DQV / 4; j++) {
                const float4 v = __ldcg(src + j * ATT_TMA_CONSUMER_THREADS + threadIdx.x);
                acc[4 * j] = v.x, acc[4 * j + 1] = v.y, acc[4 * j + 2] = v.z, acc[4 * j + 3] = v.w;
            }
            if constexpr (QT == 1)
                store_head_grad<HS / 2, 2>(dqkv, bias_part_row(bias_part, b, qt, ntiles64, C3), acc, scale,
                                           (size_t)h * HS + wg * (HS / 2), b, 0, qt * BQ + (warp % 4) * 16 + g, tq,
                                           T, C3);
            else if (qt * BQ + 64 * wg < T) /* a last tile's second half may lie past T (uniform per warpgroup) */
                store_head_grad<HS, 2>(dqkv, bias_part_row(bias_part, b, QT * qt + wg, ntiles64, C3), acc, scale,
                                       (size_t)h * HS, b, 0, qt * BQ + 64 * wg + (warp % 4) * 16 + g, tq, T, C3);
        }
#else
    __trap();
#endif
}

#endif
