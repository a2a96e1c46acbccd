/* kernels/attention_backward.cuh - the backward kernels: D = rowsum(dO∘O), then dK,dV and dQ with
 * mma.sync (HS 64 and 128) or wgmma (HS 256; at 64 and 128 attention_backward_tma.cuh's),
 * deterministic and without atomics (attention.cu describes the algorithm). */
#ifndef FUSEDGPT_ATTENTION_BACKWARD_CUH
#define FUSEDGPT_ATTENTION_BACKWARD_CUH

#include "kernels/attention_mask.cuh"
#include "kernels/attention_mma.cuh"
#include "kernels/attention_store.cuh"
#include "kernels/fast_math.cuh"

/* ------------------------------------------------------------------------------------------ */
/* D[b,h,t] = Σ_d dout[b,t,h·HS+d]·out[b,t,h·HS+d]. A thread takes 8 adjacent values of both (one
 * 16-byte load each) and the HS/8 threads of a (b, t, h) sum by shuffles: with one 4-byte load per
 * lane and tensor (a warp per row) this ran at under half the copy bandwidth. */
template <int HS>
__global__ void attention_backward_dsum_kernel(float *D, const bf16 *dout, const bf16 *out, int T, int NH,
                                               size_t rows) {
    constexpr int LANES = HS / 8; /* per (b, t, h): 8, 16 or 32, a power of two within the warp */
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

/* dQ. Shared: Q, dO [64][HS+8], K, V [2][64][HS+8]. */
template <int HS>
__global__ void __launch_bounds__(ATT_THREADS, HS == 64 ? ATT_BWD64_MINB : 1)
    attention_backward_dq_kernel(bf16 *dqkv, float *bias_part, const bf16 *qkv, const bf16 *vsrc, const bf16 *dout, const float *lse,
                                 const float *D, int T, int NH, int NKV, AttMask masks, float sl2,
                                 float scale) {
    constexpr int SROW = HS + 8, TILE = ATT_TILE, NT = TILE / 8, DT = HS / 8;
    extern __shared__ __align__(16) unsigned char att_smem[];
    bf16 *Qs = reinterpret_cast<bf16 *>(att_smem);
    bf16 *dOs = Qs + TILE * SROW, *Ks = dOs + TILE * SROW, *Vs = Ks + 2 * TILE * SROW;

    int C = NH * HS;
    size_t C3 = packed_qkv_width(NH, NKV, HS);
    int qb = gridDim.x - 1 - blockIdx.x;
    int b = blockIdx.y / NH, h = blockIdx.y % NH;
    const AttMask am = masks.seq(b);
    const bf16 *qbase = qkv + (size_t)b * T * C3 + h * HS;
    const bf16 *kbase = qkv + (size_t)b * T * C3 + key_col(NH, HS, h / (NH / NKV));
    const bf16 *vbase = vsrc + (size_t)b * T * C3 + value_col(NH, NKV, HS, h / (NH / NKV));
    const bf16 *dobase = dout + (size_t)b * T * C + h * HS;
    int q0 = qb * TILE;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, tq = lane % 4;

    int j0 = first_key_tile(q0, am);
    load_rows<HS, TILE>(Qs, qbase, C3, q0, T);
    load_rows<HS, TILE>(dOs, dobase, C, q0, T);
    load_rows<HS, TILE>(Ks + (j0 & 1) * TILE * SROW, kbase, C3, j0 * TILE, T);
    load_rows<HS, TILE>(Vs + (j0 & 1) * TILE * SROW, vbase, C3, j0 * TILE, T);
    cp_async_commit();

    /* Rows past T: zero Q and dO give finite P and dS = P·(0 − 0) = 0; they are never stored. */
    float lse_r[2], D_r[2];
    load_row_stats(lse_r, D_r, lse, D, q0 + warp * 16 + g, T);
    float dq[DT][4];
#pragma unroll
    for (int i = 0; i < DT; i++) dq[i][0] = dq[i][1] = dq[i][2] = dq[i][3] = 0.0f;
    int nkv = qb + 1;

    for (int j = j0; j < nkv; j++) {
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

        /* Only the diagonal tile and those at the window's edge need the mask (a uniform branch). */
        if (j == nkv - 1 || crosses_window(j * TILE, q0, TILE, am)) {
            int k0 = j * TILE, qrow = q0 + warp * 16 + g;
#pragma unroll
            for (int nt = 0; nt < NT; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    int key = k0 + nt * 8 + 2 * tq + (e & 1), qi = qrow + 8 * (e >> 1);
                    if (att_hidden(key, qi, am)) s[nt][e] = -INFINITY;
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

    store_head_grad<HS>(dqkv, bias_part_row(bias_part, b, qb, gridDim.x, C3), &dq[0][0], scale, 0, b, h, q0 + warp * 16 + g,
                        tq, T, C3);
}

/* dK, dV. Shared: K, V [64][HS+8]; Q, dO [2][BQ][HS+8]; lse, D [2][BQ]. */
template <int HS, int BQ>
__global__ void __launch_bounds__(ATT_THREADS, HS == 64 ? ATT_BWD64_MINB : 1)
    attention_backward_dkdv_kernel(bf16 *dqkv, float *bias_part, const bf16 *qkv, const bf16 *vsrc, const bf16 *dout, const float *lse,
                                   const float *D, int T, int NH, int NKV, AttMask masks, float sl2,
                                   float scale) {
    constexpr int SROW = HS + 8, TILE = ATT_TILE, NT = BQ / 8, DT = HS / 8;
    extern __shared__ __align__(16) unsigned char att_smem[];
    bf16 *Ks = reinterpret_cast<bf16 *>(att_smem);
    bf16 *Vs = Ks + TILE * SROW, *Qs = Vs + TILE * SROW, *dOs = Qs + 2 * BQ * SROW;
    float *lse_s = reinterpret_cast<float *>(dOs + 2 * BQ * SROW), *D_s = lse_s + 2 * BQ;

    int C = NH * HS;
    size_t C3 = packed_qkv_width(NH, NKV, HS);
    /* The block's key/value head kvh serves query heads h0 .. h0 + grp - 1: it walks their query
     * tiles head after head, step i being head h0 + i / nper, tile qt0 + i % nper. */
    int b = blockIdx.y / NKV, kvh = blockIdx.y % NKV, grp = NH / NKV, h0 = kvh * grp;
    const AttMask am = masks.seq(b);
    const bf16 *row0 = qkv + (size_t)b * T * C3, *dorow0 = dout + (size_t)b * T * C;
    const bf16 *kbase = row0 + key_col(NH, HS, kvh);
    const bf16 *vbase = vsrc + (size_t)b * T * C3 + value_col(NH, NKV, HS, kvh);
    const float *lse_b = lse + (size_t)b * NH * T, *D_b = D + (size_t)b * NH * T;
    int k0 = blockIdx.x * TILE;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, tq = lane % 4;
    /* the query tiles that see these keys */
    int qt0 = k0 / BQ, nqt = query_tile_end<BQ>(k0, am, ceil_div(T, BQ));
    int nper = nqt - qt0, nsteps = grp * nper;

    load_rows<HS, TILE>(Ks, kbase, C3, k0, T);
    load_rows<HS, TILE>(Vs, vbase, C3, k0, T);
    load_rows<HS, BQ>(Qs, row0 + h0 * HS, C3, qt0 * BQ, T);
    load_rows<HS, BQ>(dOs, dorow0 + h0 * HS, C, qt0 * BQ, T);
    cp_async_commit();
    load_query_stats<BQ>(lse_s, D_s, lse_b + (size_t)h0 * T, D_b + (size_t)h0 * T, qt0 * BQ, T);

    float dk[DT][4], dv[DT][4];
#pragma unroll
    for (int i = 0; i < DT; i++) {
        dk[i][0] = dk[i][1] = dk[i][2] = dk[i][3] = 0.0f;
        dv[i][0] = dv[i][1] = dv[i][2] = dv[i][3] = 0.0f;
    }
    int krow = k0 + warp * 16 + g;

    for (int i = 0; i < nsteps; i++) {
        int buf = i & 1, qt = qt0 + i % nper;
        if (i + 1 < nsteps) {
            int nb = buf ^ 1, h1 = h0 + (i + 1) / nper, t1 = (qt0 + (i + 1) % nper) * BQ;
            load_rows<HS, BQ>(Qs + nb * BQ * SROW, row0 + h1 * HS, C3, t1, T);
            load_rows<HS, BQ>(dOs + nb * BQ * SROW, dorow0 + h1 * HS, C, t1, T);
            cp_async_commit();
            load_query_stats<BQ>(lse_s + nb * BQ, D_s + nb * BQ, lse_b + (size_t)h1 * T, D_b + (size_t)h1 * T, t1, T);
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

        /* Only tiles that reach below the diagonal or past the window's edge need the mask (a
         * uniform branch). */
        int q0 = qt * BQ;
        if (q0 < k0 + TILE - 1 || crosses_window(k0, q0, BQ, am)) {
#pragma unroll
            for (int nt = 0; nt < NT; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    int col = nt * 8 + 2 * tq + (e & 1), key = krow + 8 * (e >> 1);
                    if (att_hidden(key, q0 + col, am)) st[nt][e] = -INFINITY;
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

    float *bias_row = bias_part_row(bias_part, b, blockIdx.x, gridDim.x, C3);
    store_head_grad<HS>(dqkv, bias_row, &dk[0][0], scale, key_col(NH, HS, 0), b, kvh, krow, tq, T, C3);
    store_head_grad<HS>(dqkv, bias_row, &dv[0][0], 1.0f, value_col(NH, NKV, HS, 0), b, kvh, krow, tq, T, C3);
}

/* ------------------------------------------------------------------------------------------ */
/* Backward on Hopper tensor cores at HS 256 (64 and 128: attention_backward_tma.cuh), every product
 * a warpgroup MMA: the two score-like products (S and dP, or Sᵀ and dPᵀ) from K-major shared tiles,
 * the two gradient products from registers times an MN-major shared tile (of HS/64 panels, as in the
 * forward). Same blocks, order, masking and arithmetic as the mma.sync kernels above. One block per
 * SM: six tiles take 192 KB of shared memory, and the accumulators most registers (the dK,dV
 * kernel's two warpgroups 240 each). */
template <int HS>
__global__ void __launch_bounds__(ATT_THREADS, 1)
    attention_backward_dq_wgmma_kernel(bf16 *dqkv, float *bias_part, const bf16 *qkv, const bf16 *vsrc, const bf16 *dout,
                                       const float *lse, const float *D, int T, int NH, int NKV, AttMask masks,
                                       float sl2, float scale) {
    constexpr int TILE = ATT_TILE, TILE_BYTES = TILE * HS * 2, NP = HS / 64;
    extern __shared__ __align__(16) unsigned char att_smem[]; /* aligned to 1024 by hand below */
    const uint32_t Qs = (smem_addr(att_smem) + 1023) & ~1023u, dOs = Qs + TILE_BYTES, Ks = dOs + TILE_BYTES,
                   Vs = Ks + 2 * TILE_BYTES;

    int C = NH * HS;
    size_t C3 = packed_qkv_width(NH, NKV, HS);
    int qb = gridDim.x - 1 - blockIdx.x;
    int b = blockIdx.y / NH, h = blockIdx.y % NH;
    const AttMask am = masks.seq(b);
    const bf16 *qbase = qkv + (size_t)b * T * C3 + h * HS;
    const bf16 *kbase = qkv + (size_t)b * T * C3 + key_col(NH, HS, h / (NH / NKV));
    const bf16 *vbase = vsrc + (size_t)b * T * C3 + value_col(NH, NKV, HS, h / (NH / NKV));
    const bf16 *dobase = dout + (size_t)b * T * C + h * HS;
    int q0 = qb * TILE;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, tq = lane % 4;

    int j0 = first_key_tile(q0, am);
    load_rows_swizzled<HS>(Qs, qbase, C3, q0, T);
    load_rows_swizzled<HS>(dOs, dobase, C, q0, T);
    load_rows_swizzled<HS>(Ks + (j0 & 1) * TILE_BYTES, kbase, C3, j0 * TILE, T);
    load_rows_swizzled<HS>(Vs + (j0 & 1) * TILE_BYTES, vbase, C3, j0 * TILE, T);
    cp_async_commit();

    float lse_r[2], D_r[2];
    load_row_stats(lse_r, D_r, lse, D, q0 + warp * 16 + g, T);
    float dq[NP][32];
#pragma unroll
    for (int p = 0; p < NP; p++)
#pragma unroll
        for (int i = 0; i < 32; i++) dq[p][i] = 0.0f;
    int nkv = qb + 1;

    for (int j = j0; j < nkv; j++) {
        next_kv_tile_or_wait<HS>(Ks, Vs, kbase, vbase, C3, j, nkv, T);
        fence_proxy_async();
        __syncthreads();
        const uint32_t Kt = Ks + (j & 1) * TILE_BYTES, Vt = Vs + (j & 1) * TILE_BYTES;

        float s[32], dp[32];
        wgmma_fence();
        wgmma_abt<HS>(s, Qs, Kt);   /* S = Q·Kᵀ */
        wgmma_abt<HS>(dp, dOs, Vt); /* dP = dO·Vᵀ */
        wgmma_commit();
        wgmma_wait<0>();
        fence_acc(s);
        fence_acc(dp);

        if (j == nkv - 1 || crosses_window(j * TILE, q0, TILE, am))
            mask_tile(s, j * TILE, q0 + warp * 16 + g, tq, am);
#pragma unroll
        for (int i = 0; i < 32; i++) {
            int r = (i >> 1) & 1;
            float p = ex2(fmaf(s[i], sl2, -lse_r[r]));
            s[i] = p * (dp[i] - D_r[r]); /* dS (without the scale) */
        }
        wgmma_xb<HS>(dq, s, Kt); /* dQ += dS·K */
        __syncthreads();
    }

    store_head_grad<HS>(dqkv, bias_part_row(bias_part, b, qb, gridDim.x, C3), &dq[0][0], scale, 0, b, h, q0 + warp * 16 + g, tq, T,
                        C3);
}

/* dK, dV at HS = 256. All 256 columns of dK and dV would take 256
 * accumulator registers a thread, so a block of 64 keys has two warpgroups, each owning 128 of the
 * columns; per query tile warpgroup 0 computes Sᵀ = K·Qᵀ and warpgroup 1 dPᵀ = V·dOᵀ (each of the
 * 256-wide reductions once), warpgroup 1 hands dPᵀ to warpgroup 0 through shared memory, which forms
 * Pᵀ and dSᵀ in fp32 as the kernel above does and hands them back as packed bf16 A fragments; then
 * each warpgroup adds Pᵀ·dO and dSᵀ·Q for its columns. Same order, masking and arithmetic; four
 * products per tile, as at HS 128.
 * Shared: K, V [64][256]; Q, dO [2][64][256]; the hand-over, 32 words per thread as [32][128]:
 * threads t and t + 128 hold the same accumulator positions, so they share slot t (conflict-free). */
#define ATT_BWD256_THREADS (2 * ATT_THREADS)
__global__ void __launch_bounds__(ATT_BWD256_THREADS, 1)
    attention_backward_dkdv_wgmma256_kernel(bf16 *dqkv, float *bias_part, const bf16 *qkv, const bf16 *vsrc,
                                            const bf16 *dout,
                                            const float *lse, const float *D, int T, int NH, int NKV, AttMask masks,
                                            float sl2, float scale) {
    constexpr int HS = 256, HO = HS / 2, NP = HO / 64, NTH = ATT_BWD256_THREADS;
    constexpr int TILE = ATT_TILE, BQ = ATT_TILE, TILE_BYTES = TILE * HS * 2;
    extern __shared__ __align__(16) unsigned char att_smem[]; /* aligned to 1024 by hand below */
    const uint32_t base = smem_addr(att_smem), Ks = (base + 1023) & ~1023u, Vs = Ks + TILE_BYTES,
                   Qs = Vs + TILE_BYTES, dOs = Qs + 2 * TILE_BYTES;
    uint32_t *xch = reinterpret_cast<uint32_t *>(att_smem + (Ks - base) + 6 * TILE_BYTES);
    __shared__ float lse_s[2 * BQ], D_s[2 * BQ];

    int C = NH * HS;
    size_t C3 = packed_qkv_width(NH, NKV, HS);
    int b = blockIdx.y / NKV, kvh = blockIdx.y % NKV, grp = NH / NKV, h0 = kvh * grp;
    const AttMask am = masks.seq(b);
    const bf16 *row0 = qkv + (size_t)b * T * C3, *dorow0 = dout + (size_t)b * T * C;
    const bf16 *kbase = row0 + key_col(NH, HS, kvh);
    const bf16 *vbase = vsrc + (size_t)b * T * C3 + value_col(NH, NKV, HS, kvh);
    const float *lse_b = lse + (size_t)b * NH * T, *D_b = D + (size_t)b * NH * T;
    int k0 = blockIdx.x * TILE;
    const int wg = threadIdx.x / ATT_THREADS, t = threadIdx.x % ATT_THREADS;
    const int warp = t / 32, lane = t % 32, g = lane / 4, tq = lane % 4;
    const uint32_t half_off = wg * NP * ATT_PANEL_BYTES; /* the warpgroup's columns in a tile */
    int qt0 = k0 / BQ, nqt = query_tile_end<BQ>(k0, am, ceil_div(T, BQ));
    int nper = nqt - qt0, nsteps = grp * nper;

    load_rows_swizzled<HS, NTH>(Ks, kbase, C3, k0, T);
    load_rows_swizzled<HS, NTH>(Vs, vbase, C3, k0, T);
    load_rows_swizzled<HS, NTH>(Qs, row0 + h0 * HS, C3, qt0 * BQ, T);
    load_rows_swizzled<HS, NTH>(dOs, dorow0 + h0 * HS, C, qt0 * BQ, T);
    cp_async_commit();
    load_query_stats<BQ>(lse_s, D_s, lse_b + (size_t)h0 * T, D_b + (size_t)h0 * T, qt0 * BQ, T);

    float dk[NP][32], dv[NP][32];
#pragma unroll
    for (int p = 0; p < NP; p++)
#pragma unroll
        for (int i = 0; i < 32; i++) dk[p][i] = dv[p][i] = 0.0f;
    int krow = k0 + warp * 16 + g;

    for (int i = 0; i < nsteps; i++) {
        int buf = i & 1, qt = qt0 + i % nper;
        if (i + 1 < nsteps) {
            int nb = buf ^ 1, h1 = h0 + (i + 1) / nper, t1 = (qt0 + (i + 1) % nper) * BQ;
            load_rows_swizzled<HS, NTH>(Qs + nb * TILE_BYTES, row0 + h1 * HS, C3, t1, T);
            load_rows_swizzled<HS, NTH>(dOs + nb * TILE_BYTES, dorow0 + h1 * HS, C, t1, T);
            cp_async_commit();
            load_query_stats<BQ>(lse_s + nb * BQ, D_s + nb * BQ, lse_b + (size_t)h1 * T, D_b + (size_t)h1 * T, t1, T);
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        fence_proxy_async();
        __syncthreads();
        const uint32_t Qt = Qs + buf * TILE_BYTES, dOt = dOs + buf * TILE_BYTES;
        const float *lse_t = lse_s + buf * BQ, *D_t = D_s + buf * BQ;

        float x[32]; /* warpgroup 0: Sᵀ; 1: dPᵀ */
        wgmma_fence();
        wgmma_abt<HS>(x, wg ? Vs : Ks, wg ? dOt : Qt);
        wgmma_commit();
        wgmma_wait<0>();
        fence_acc(x);
        if (wg == 1)
#pragma unroll
            for (int e = 0; e < 32; e++) xch[e * ATT_THREADS + t] = __float_as_uint(x[e]);
        /* dPᵀ handed over before warpgroup 0 reads it. */
        __syncthreads();
        uint32_t ap[4][4], ad[4][4];
        if (wg == 0) {
            int q0 = qt * BQ;
            if (q0 < k0 + TILE - 1 || crosses_window(k0, q0, BQ, am)) mask_tile_t(x, krow, q0, tq, am);
            float dst[32];
#pragma unroll
            for (int e = 0; e < 32; e++) {
                int col = (e >> 2) * 8 + 2 * tq + (e & 1);
                float p = ex2(fmaf(x[e], sl2, -lse_t[col]));
                x[e] = p;
                dst[e] = p * (__uint_as_float(xch[e * ATT_THREADS + t]) - D_t[col]);
            }
#pragma unroll
            for (int kk = 0; kk < 4; kk++) {
                pack_a_fragment(ap[kk], x, kk);
                pack_a_fragment(ad[kk], dst, kk);
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    xch[(kk * 4 + e) * ATT_THREADS + t] = ap[kk][e];
                    xch[(16 + kk * 4 + e) * ATT_THREADS + t] = ad[kk][e];
                }
            }
        }
        /* Pᵀ and dSᵀ handed over before warpgroup 1 reads them. */
        __syncthreads();
        if (wg == 1)
#pragma unroll
            for (int kk = 0; kk < 4; kk++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    ap[kk][e] = xch[(kk * 4 + e) * ATT_THREADS + t];
                    ad[kk][e] = xch[(16 + kk * 4 + e) * ATT_THREADS + t];
                }
        wgmma_dv_dk<HO>(dv, dk, ap, ad, dOt + half_off, Qt + half_off);
        /* Every warpgroup is done with buffer `buf` and the hand-over before they are refilled. */
        __syncthreads();
    }

    float *bias_row = bias_part_row(bias_part, b, blockIdx.x, gridDim.x, C3);
    const size_t c0 = (size_t)wg * HO; /* head 0 below: the head and the half are in the column */
    store_head_grad<HO, 2>(dqkv, bias_row, &dk[0][0], scale, key_col(NH, HS, kvh) + c0, b, 0, krow, tq, T, C3);
    store_head_grad<HO, 2>(dqkv, bias_row, &dv[0][0], 1.0f, value_col(NH, NKV, HS, kvh) + c0, b, 0, krow, tq, T,
                           C3);
}

#endif
