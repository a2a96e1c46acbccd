/* kernels/attention_backward_tma.cuh - the attention backward's dK,dV and dQ kernels at head sizes
 * 64 and 128 on Hopper, in FlashAttention-3's manner: a block owns 128 rows (keys for dK,dV, queries
 * for dQ) as two consumer warpgroups of 64 that share every tile the block streams, and a producer
 * warpgroup streams the other side's tiles of 64 rows by the copy engine (TMA) through a three-stage
 * mbarrier ring, giving its registers to the consumers (setmaxnreg). Math, order, masks and the
 * qkv-bias partial sums are those of attention_backward.cuh's kernels (attention.cu describes the
 * algorithm): deterministic, no atomics, K and V read from the packed qkv for every query head
 * of their group.
 *
 * Launch: 1-d grids of ⌈T/128⌉·B·NKV (dK,dV) and ⌈T/128⌉·B·NH (dQ) blocks of 384 threads (warps 0-7
 * the consumers, 8-11 the producer warpgroup), 161 KB of shared memory at HS 128 (81 at 64): one
 * block per SM. Blocks go by sections of heads whose streamed tiles fit in a share of L2 together,
 * heaviest blocks first within a section (the first key blocks, the last query blocks).
 * dK,dV: per query tile of 64 rows (head after head of the group): Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ (wgmma
 *   from shared memory, K and V this warpgroup's 64 rows of the block's), Pᵀ and dSᵀ in registers,
 *   then dV += Pᵀ·dO and dK += dSᵀ·Q with Pᵀ, dSᵀ as register A operands. The producer's first warp
 *   copies Q and dO, its second the tile's lse and D = rowsum(dO∘O) into the ring beside them.
 * dQ: per key tile of 64: S = Q·Kᵀ and dP = dO·Vᵀ of tile j are issued beside dQ += dS(j-1)·K(j-1),
 *   and dS(j) is formed while that product runs; the two warpgroups take turns to issue, as the
 *   forward's (attention_forward_tma.cuh), so that one's elementwise work overlaps the other's MMAs.
 *   Q and dO stay in registers as A fragments for the whole loop, so S and dP read only K and V
 *   from shared memory. (dK,dV keeps K and V in shared memory: as register fragments over its loop
 *   at HS 64 they gave wrong results from the second query tile on, and reloaded every tile no gain.)
 * Both loops were measured against the 64-row wgmma kernels they replace (dev/RESULTS.md,
 *   attention); a dK,dV loop pipelined as dQ's spilled at HS 128 and ran slower at both sizes.
 * FLOPs: dK,dV 4·2·64·64·HS per (query tile, key tile) pair, dQ 3·; 7/2 of the forward together.
 * Bytes: Q and dO cross from L2 once per 128 keys, K and V once per 128 queries; compute bound. */
#ifndef FUSEDGPT_ATTENTION_BACKWARD_TMA_CUH
#define FUSEDGPT_ATTENTION_BACKWARD_TMA_CUH

#include "kernels/attention_forward_tma.cuh"

#define ATT_BWD_TMA_ROWS 128 /* keys of a dK,dV block, queries of a dQ block */
/* streamed tiles in flight: three, not two, took 6-11 % off the backward at Llama's and Qwen3's
 * shapes (dev/RESULTS.md, attention); four gave no more */
#define ATT_BWD_TMA_STAGES 3

/* A streamed [64][HS] tile: HS/64 panels of 64 rows × 128 bytes (8 KB each). */
__host__ __device__ constexpr int att_bwd_tma_tile_bytes(int HS) {
    return (HS / 64) * ATT_PANEL_BYTES;
}
/* The block's own two [128][HS] tiles (K and V, or Q and dO), then the ring's two streamed tiles
 * a stage; + alignment to 1024 bytes. */
__host__ __device__ constexpr int att_bwd_tma_smem_bytes(int HS) {
    return 2 * att_tma_tile_bytes(HS) + ATT_BWD_TMA_STAGES * 2 * att_bwd_tma_tile_bytes(HS) + 1024;
}

/* The block's (row block, head) of a 1-d grid of nblk row blocks per head: sections of `section`
 * heads, blocks in the order of `rank` (0 first) across the section's heads. */
__device__ __forceinline__ void att_bwd_tma_block(int nblk, int section, int &rank, int &head) {
    const int nheads = gridDim.x / nblk, per = section * nblk, sec = blockIdx.x / per, first = sec * section;
    const int heads = min(section, nheads - first), r = blockIdx.x - sec * per;
    rank = r / heads;
    head = first + r % heads;
}

template <int HS>
__global__ void __launch_bounds__(ATT_TMA_THREADS, 1)
    attention_backward_dkdv_tma_kernel(const __grid_constant__ CUtensorMap tm_kv, const __grid_constant__ CUtensorMap tm_q,
                                       const __grid_constant__ CUtensorMap tm_do, bf16 *dqkv, float *bias_part,
                                       const float *lse, const float *D, int T, int NH, int NKV, int window,
                                       float sl2, float scale, int nkb, int section) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL) /* setmaxnreg and wgmma: sm_90a only */
    constexpr int NP = HS / 64, OWN = att_tma_tile_bytes(HS), TILE = att_bwd_tma_tile_bytes(HS);
    constexpr int ST = ATT_BWD_TMA_STAGES, BQ = ATT_TILE, CONSUMER_WARPS = ATT_TMA_CONSUMER_THREADS / 32;
    extern __shared__ __align__(16) unsigned char att_smem[]; /* aligned to 1024 by hand below */
    /* kv: K and V landed; full: a stage's Q, dO (the copy engine) and lse, D (the stats warp's 32
     * lanes) landed; empty: every consumer warp is done with the stage */
    __shared__ __align__(8) uint64_t bars[1 + 2 * ST];
    __shared__ float stats[ST][2][BQ]; /* lse, D of a stage's query rows */
    const uint32_t Ks = (smem_addr(att_smem) + 1023) & ~1023u, Vs = Ks + OWN, Qs = Vs + OWN, dOs = Qs + ST * TILE;
    const uint32_t kv_full = smem_addr(bars), full = kv_full + 8, empty = full + 8 * ST;

    int kb, bkv;
    att_bwd_tma_block(nkb, section, kb, bkv);
    const int b = bkv / NKV, kvh = bkv % NKV, grp = NH / NKV, h0 = kvh * grp;
    const int k0 = kb * ATT_BWD_TMA_ROWS;
    /* the query tiles that see these keys, walked head after head: step i is head h0 + i / nper,
     * tile qt0 + i % nper */
    const int qt0 = k0 / BQ, nper = query_tile_end<BQ, ATT_BWD_TMA_ROWS>(k0, window, ceil_div(T, BQ)) - qt0;
    const int nsteps = grp * nper;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

    if (threadIdx.x == 0) {
        mbar_init(kv_full, 1);
        for (int s = 0; s < ST; s++) {
            mbar_init(full + 8 * s, 1 + 32);
            mbar_init(empty + 8 * s, CONSUMER_WARPS);
        }
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
                tma_load_3d(Vs + p * ATT_TMA_PANEL_BYTES, &tm_kv, vcol + 64 * p, k0, b, kv_full);
            }
            for (int i = 0; i < nsteps; i++) {
                const int s = i % ST, qcol = (h0 + i / nper) * HS, t0 = (qt0 + i % nper) * BQ;
                if (i >= ST) mbar_wait(empty + 8 * s, (uint32_t)((i / ST - 1) & 1));
                mbar_expect_tx(full + 8 * s, 2 * TILE);
                for (int p = 0; p < NP; p++) {
                    tma_load_3d(Qs + s * TILE + p * ATT_PANEL_BYTES, &tm_q, qcol + 64 * p, t0, b, full + 8 * s);
                    tma_load_3d(dOs + s * TILE + p * ATT_PANEL_BYTES, &tm_do, qcol + 64 * p, t0, b, full + 8 * s);
                }
            }
        } else if (warp == CONSUMER_WARPS + 1) { /* the statistics: each lane two rows, then arrives */
            for (int i = 0; i < nsteps; i++) {
                const int s = i % ST, h = h0 + i / nper, t0 = (qt0 + i % nper) * BQ;
                if (i >= ST) mbar_wait(empty + 8 * s, (uint32_t)((i / ST - 1) & 1));
                const size_t row = ((size_t)b * NH + h) * T;
                for (int c = lane; c < BQ; c += 32) { /* queries past T: P = exp2(finite − inf) = 0 */
                    const int t = t0 + c;
                    stats[s][0][c] = t < T ? lse[row + t] : INFINITY;
                    stats[s][1][c] = t < T ? D[row + t] : 0.0f;
                }
                mbar_arrive(full + 8 * s);
            }
        }
        return;
    }

    warpgroup_reg_alloc<ATT_TMA_CONSUMER_REGS>();
    const int wg = warp / 4, g = lane / 4, tq = lane % 4;
    const int kw0 = k0 + 64 * wg, krow = kw0 + (warp % 4) * 16 + g;
    /* this warpgroup's 64 keys: 64 rows of 128 bytes into each panel of the block's K and V */
    const uint32_t Kw = Ks + wg * (ATT_TMA_PANEL_BYTES / 2), Vw = Vs + wg * (ATT_TMA_PANEL_BYTES / 2);
    float dk[NP][32], dv[NP][32];
#pragma unroll
    for (int p = 0; p < NP; p++)
#pragma unroll
        for (int i = 0; i < 32; i++) dk[p][i] = dv[p][i] = 0.0f;
    mbar_wait(kv_full, 0);

    for (int i = 0; i < nsteps; i++) {
        const int s = i % ST, q0 = (qt0 + i % nper) * BQ;
        mbar_wait(full + 8 * s, (uint32_t)((i / ST) & 1));
        const uint32_t Qt = Qs + s * TILE, dOt = dOs + s * TILE;
        const float *lse_t = stats[s][0], *D_t = stats[s][1];

        float st[32], dpt[32];
        wgmma_fence();
        wgmma_abt<HS, ATT_TMA_PANEL_BYTES>(st, Kw, Qt);   /* Sᵀ = K·Qᵀ */
        wgmma_abt<HS, ATT_TMA_PANEL_BYTES>(dpt, Vw, dOt); /* dPᵀ = V·dOᵀ */
        wgmma_commit();
        wgmma_wait<0>();
        fence_acc(st);
        fence_acc(dpt);

        /* Tiles that reach below this warpgroup's diagonal or past the window's edge need the mask (a
         * uniform branch); the block's first tile lies wholly below warpgroup 1's keys. */
        if (q0 < kw0 + 63 || crosses_window(kw0, q0, BQ, window)) mask_tile_t(st, krow, q0, tq, window);
#pragma unroll
        for (int e = 0; e < 32; e++) {
            int col = (e >> 2) * 8 + 2 * tq + (e & 1);
            float p = ex2(fmaf(st[e], sl2, -lse_t[col]));
            st[e] = p;
            dpt[e] = p * (dpt[e] - D_t[col]);
        }
        uint32_t ap[4][4], ad[4][4];
#pragma unroll
        for (int kk = 0; kk < 4; kk++) pack_a_fragment(ap[kk], st, kk), pack_a_fragment(ad[kk], dpt, kk);
        wgmma_dv_dk<HS>(dv, dk, ap, ad, dOt, Qt);
        att_tma_release(empty + 8 * s, lane);
    }

    if (kw0 >= T) return; /* a last block's second warpgroup may have no keys */
    const size_t C3 = packed_qkv_width(NH, NKV, HS);
    float *bias_row = bias_part_row(bias_part, b, 2 * kb + wg, ceil_div(T, 64), C3);
    store_head_grad<HS, 2>(dqkv, bias_row, &dk[0][0], scale, key_col(NH, HS, 0), b, kvh, krow, tq, T, C3);
    store_head_grad<HS, 2>(dqkv, bias_row, &dv[0][0], 1.0f, value_col(NH, NKV, HS, 0), b, kvh, krow, tq, T, C3);
#else
    __trap();
#endif
}

template <int HS>
__global__ void __launch_bounds__(ATT_TMA_THREADS, 1)
    attention_backward_dq_tma_kernel(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_do,
                                     const __grid_constant__ CUtensorMap tm_kv, bf16 *dqkv, float *bias_part,
                                     const float *lse, const float *D, int T, int NH, int NKV, int window, float sl2,
                                     float scale, int nqb, int section) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    constexpr int NP = HS / 64, OWN = att_tma_tile_bytes(HS), TILE = att_bwd_tma_tile_bytes(HS);
    constexpr int ST = ATT_BWD_TMA_STAGES, BN = ATT_TILE, CONSUMER_WARPS = ATT_TMA_CONSUMER_THREADS / 32;
    extern __shared__ __align__(16) unsigned char att_smem[]; /* aligned to 1024 by hand below */
    /* qd: Q and dO landed; k_full, v_full: a stage's key or value tile landed; empty: every
     * consumer warp is done with the stage */
    __shared__ __align__(8) uint64_t bars[1 + 3 * ST];
    const uint32_t Qs = (smem_addr(att_smem) + 1023) & ~1023u, dOs = Qs + OWN, Ks = dOs + OWN, Vs = Ks + ST * TILE;
    const uint32_t qd_full = smem_addr(bars), k_full = qd_full + 8, v_full = k_full + 8 * ST, empty = v_full + 8 * ST;

    int r, bh;
    att_bwd_tma_block(nqb, section, r, bh);
    const int qb = nqb - 1 - r, b = bh / NH, h = bh % NH, kvh = h / (NH / NKV);
    const int q0 = qb * ATT_BWD_TMA_ROWS, j0 = first_key_tile<BN>(q0, window);
    const int nkv = min(2 * qb + 2, (int)ceil_div(T, BN)); /* key tiles up to the block's last row or T */
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

    if (threadIdx.x == 0) {
        mbar_init(qd_full, 1);
        for (int s = 0; s < ST; s++) {
            mbar_init(k_full + 8 * s, 1);
            mbar_init(v_full + 8 * s, 1);
            mbar_init(empty + 8 * s, CONSUMER_WARPS);
        }
        mbar_init_fence();
    }
    /* The barriers are initialised before anyone waits on them or copies complete on them. */
    __syncthreads();

    if (warp >= CONSUMER_WARPS) { /* the producer: one lane issues every copy */
        warpgroup_reg_dealloc<ATT_TMA_PRODUCER_REGS>();
        if (warp == CONSUMER_WARPS && lane == 0) {
            const int qcol = h * HS, kcol = (NH + kvh) * HS, vcol = (NH + NKV + kvh) * HS;
            mbar_expect_tx(qd_full, 2 * OWN);
            for (int p = 0; p < NP; p++) {
                tma_load_3d(Qs + p * ATT_TMA_PANEL_BYTES, &tm_q, qcol + 64 * p, q0, b, qd_full);
                tma_load_3d(dOs + p * ATT_TMA_PANEL_BYTES, &tm_do, qcol + 64 * p, q0, b, qd_full);
            }
            for (int j = j0; j < nkv; j++) {
                const int it = j - j0, s = it % ST;
                if (it >= ST) mbar_wait(empty + 8 * s, (uint32_t)((it / ST - 1) & 1));
                mbar_expect_tx(k_full + 8 * s, TILE);
                for (int p = 0; p < NP; p++)
                    tma_load_3d(Ks + s * TILE + p * ATT_PANEL_BYTES, &tm_kv, kcol + 64 * p, j * BN, b, k_full + 8 * s);
                mbar_expect_tx(v_full + 8 * s, TILE);
                for (int p = 0; p < NP; p++)
                    tma_load_3d(Vs + s * TILE + p * ATT_PANEL_BYTES, &tm_kv, vcol + 64 * p, j * BN, b, v_full + 8 * s);
            }
        }
        return;
    }

    warpgroup_reg_alloc<ATT_TMA_CONSUMER_REGS>();
    const int wg = warp / 4, g = lane / 4, tq = lane % 4;
    const int row0 = q0 + 64 * wg, qrow = row0 + (warp % 4) * 16 + g;
    const uint32_t Qw = Qs + wg * (ATT_TMA_PANEL_BYTES / 2), dOw = dOs + wg * (ATT_TMA_PANEL_BYTES / 2);
    /* Rows past T: zero Q and dO (the copy engine's fill) give finite P and dS = P·(0 − 0) = 0. */
    float lse_r[2], D_r[2];
#pragma unroll
    for (int e = 0; e < 2; e++) {
        const int qi = qrow + 8 * e;
        lse_r[e] = qi < T ? lse[(size_t)bh * T + qi] : 0.0f;
        D_r[e] = qi < T ? D[(size_t)bh * T + qi] : 0.0f;
    }
    float dq[NP][32];
#pragma unroll
    for (int p = 0; p < NP; p++)
#pragma unroll
        for (int i = 0; i < 32; i++) dq[p][i] = 0.0f;
    float s[32], dp[32];
    uint32_t a[4][4], qa[HS / 16][4], da[HS / 16][4]; /* dS(j-1); Q and dO, for the whole loop */
    /* S and dP of key tile j issued (the caller commits); then dS = P·(dP − D) in s, once they are done. */
    auto issue_sdp = [&](int it) {
        const uint32_t Kt = Ks + (it % ST) * TILE, Vt = Vs + (it % ST) * TILE;
        wgmma_abt_rs<HS>(s, qa, Kt);  /* S = Q·Kᵀ */
        wgmma_abt_rs<HS>(dp, da, Vt); /* dP = dO·Vᵀ */
    };
    /* Tiles that reach past this warpgroup's first row or the window's edge need the mask (a uniform
     * branch); a block's last tile may lie wholly past warpgroup 0's rows. */
    auto form_ds = [&](int j) {
        if (j * BN + BN - 1 > row0 || crosses_window(j * BN, row0, 64, window))
            mask_tile(s, j * BN, qrow, tq, window);
#pragma unroll
        for (int i = 0; i < 32; i++) {
            const int e = (i >> 1) & 1;
            const float p = ex2(fmaf(s[i], sl2, -lse_r[e]));
            s[i] = p * (dp[i] - D_r[e]); /* dS (without the scale) */
        }
    };
    auto wait_kv = [&](int it) {
        mbar_wait(k_full + 8 * (it % ST), (uint32_t)((it / ST) & 1));
        mbar_wait(v_full + 8 * (it % ST), (uint32_t)((it / ST) & 1));
    };

    /* Warpgroup 0 goes first. Each issues nkv - j0 + 1 times and passes the turn after each but
     * warpgroup 1's last: every barrier phase completes, none is left half-arrived. */
    if (wg == 1) att_tma_turn_pass(wg);
    mbar_wait(qd_full, 0);
    load_a_fragments<HS, ATT_TMA_PANEL_BYTES>(qa, Qw);
    load_a_fragments<HS, ATT_TMA_PANEL_BYTES>(da, dOw);
    wait_kv(0);
    att_tma_turn_wait(wg);
    wgmma_fence();
    issue_sdp(0);
    wgmma_commit();
    att_tma_turn_pass(wg);
    wgmma_wait<0>();
    fence_acc(s);
    fence_acc(dp);
    form_ds(j0);
#pragma unroll
    for (int kk = 0; kk < 4; kk++) pack_a_fragment(a[kk], s, kk);

    /* Iteration j holds dS(j-1) packed on entry. */
    for (int j = j0 + 1; j < nkv; j++) {
        const int it = j - j0, sp = (it - 1) % ST;
        wait_kv(it);
#pragma unroll
        for (int p = 0; p < NP; p++) fence_acc(dq[p]);
        att_tma_turn_wait(wg);
        wgmma_fence();
        issue_sdp(it);
        wgmma_commit();
        wgmma_issue_xb<HS>(dq, a, Ks + sp * TILE); /* dQ += dS(j-1)·K(j-1) */
        wgmma_commit();
        att_tma_turn_pass(wg);
        wgmma_wait<1>(); /* S(j), dP(j); dS(j-1)·K(j-1) may still run */
        fence_acc(s);
        fence_acc(dp);
        form_ds(j);
        wgmma_wait<0>();
        fence_regs(a); /* read by dS·K until the wait: no other value may take their registers */
#pragma unroll
        for (int p = 0; p < NP; p++) fence_acc(dq[p]);
        att_tma_release(empty + 8 * sp, lane);
#pragma unroll
        for (int kk = 0; kk < 4; kk++) pack_a_fragment(a[kk], s, kk);
    }
    const int last = nkv - 1 - j0;
#pragma unroll
    for (int p = 0; p < NP; p++) fence_acc(dq[p]);
    att_tma_turn_wait(wg);
    wgmma_fence();
    wgmma_issue_xb<HS>(dq, a, Ks + (last % ST) * TILE);
    wgmma_commit();
    if (wg == 0) att_tma_turn_pass(wg);
    wgmma_wait<0>();
    fence_regs(a);
#pragma unroll
    for (int p = 0; p < NP; p++) fence_acc(dq[p]);

    if (row0 >= T) return; /* a last block's second warpgroup may have no rows */
    const size_t C3 = packed_qkv_width(NH, NKV, HS);
    float *bias_row = bias_part_row(bias_part, b, 2 * qb + wg, ceil_div(T, 64), C3);
    store_head_grad<HS, 2>(dqkv, bias_row, &dq[0][0], scale, 0, b, h, qrow, tq, T, C3);
#else
    __trap();
#endif
}

#endif
