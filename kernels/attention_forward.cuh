/* kernels/attention_forward.cuh - the forward kernels of 64-row blocks: mma.sync (HS 64 and 128) and
 * wgmma (HS 256; on Hopper HS 64 and 128 have attention_forward_tma.cuh), with the same blocks, loads
 * and online softmax (attention.cu describes the algorithm). */
#ifndef FUSEDGPT_ATTENTION_FORWARD_CUH
#define FUSEDGPT_ATTENTION_FORWARD_CUH

#include "kernels/attention_mask.cuh"
#include "kernels/attention_mma.cuh"
#include "kernels/attention_store.cuh"
#include "kernels/fast_math.cuh"

template <int HS>
__global__ void __launch_bounds__(ATT_THREADS, HS == 64 ? ATT_FWD64_MINB : 1)
    attention_forward_kernel(bf16 *out, float *lse, const bf16 *qkv, const bf16 *vsrc, int T, int NH, int NKV, AttMask masks,
                             float sl2) {
    constexpr int SROW = HS + 8, TILE = ATT_TILE, NT = TILE / 8, DT = HS / 8;
    extern __shared__ __align__(16) unsigned char att_smem[];
    bf16 *Qs = reinterpret_cast<bf16 *>(att_smem);
    bf16 *Ks = Qs + TILE * SROW, *Vs = Ks + 2 * TILE * SROW;

    int C = NH * HS;
    size_t C3 = packed_qkv_width(NH, NKV, HS);
    int qb = gridDim.x - 1 - blockIdx.x;
    int b = blockIdx.y / NH, h = blockIdx.y % NH;
    const AttMask am = masks.seq(b);
    const bf16 *qbase = qkv + (size_t)b * T * C3 + h * HS;
    const bf16 *kbase = qkv + (size_t)b * T * C3 + key_col(NH, HS, h / (NH / NKV));
    const bf16 *vbase = vsrc + (size_t)b * T * C3 + value_col(NH, NKV, HS, h / (NH / NKV));
    int q0 = qb * TILE;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, tq = lane % 4;

    int j0 = first_key_tile(q0, am); /* key tiles j0..qb: the query and key tiles are the same size */
    load_rows<HS, TILE>(Qs, qbase, C3, q0, T);
    load_rows<HS, TILE>(Ks + (j0 & 1) * TILE * SROW, kbase, C3, j0 * TILE, T);
    load_rows<HS, TILE>(Vs + (j0 & 1) * TILE * SROW, vbase, C3, j0 * TILE, T);
    cp_async_commit();

    float o[DT][4];
#pragma unroll
    for (int i = 0; i < DT; i++) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
    float mrow[2] = {-INFINITY, -INFINITY}, lrow[2] = {0.0f, 0.0f};
    uint32_t qf[HS / 16][4];
    int nkv = qb + 1;

    for (int j = j0; j < nkv; j++) {
        next_kv_tile_or_wait_padded<HS>(Ks, Vs, kbase, vbase, C3, j, nkv, T);
        /* Tile j (and Q) landed for every thread's copies before anyone reads them. */
        __syncthreads();
        if (j == j0) {
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

        /* Only the diagonal tile and those at the window's edge need the mask (a uniform branch); the
         * diagonal's also masks keys >= T, which are > every query. The max is taken over raw scores
         * and scaled once (sl2 > 0). */
        if (j == nkv - 1 || crosses_window(j * TILE, q0, TILE, am)) {
            int k0 = j * TILE, qrow = q0 + warp * 16 + g;
#pragma unroll
            for (int nt = 0; nt < NT; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    int key = k0 + nt * 8 + 2 * tq + (e & 1), qi = qrow + (e >= 2 ? 8 : 0);
                    if (att_hidden(key, qi, am)) s[nt][e] = -INFINITY;
                }
        }

#pragma unroll
        for (int r = 0; r < 2; r++) {
            float mx = -INFINITY;
#pragma unroll
            for (int nt = 0; nt < NT; nt++) mx = fmaxf(mx, fmaxf(s[nt][2 * r], s[nt][2 * r + 1]));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            float mnew = fmaxf(mrow[r], mx * sl2), msub = safe_max(mnew);
            float alpha = ex2(mrow[r] - msub); /* 0 until the row's first key (mrow = -inf) */
            mrow[r] = mnew;
            lrow[r] *= alpha;
#pragma unroll
            for (int dt = 0; dt < DT; dt++) {
                o[dt][2 * r] *= alpha;
                o[dt][2 * r + 1] *= alpha;
            }
#pragma unroll
            for (int nt = 0; nt < NT; nt++) {
                float p0 = ex2(fmaf(s[nt][2 * r], sl2, -msub)), p1 = ex2(fmaf(s[nt][2 * r + 1], sl2, -msub));
                s[nt][2 * r] = p0;
                s[nt][2 * r + 1] = p1;
                lrow[r] += p0 + p1;
            }
        }
        mma_pv<SROW, TILE / 16, HS>(o, s, Vt, lane);
        /* Everyone is done with buffer j&1 before iteration j+1 refills it with tile j+2. */
        __syncthreads();
    }

    store_forward_rows<HS>(out, lse, &o[0][0], lrow, mrow, b, h, NH, q0 + warp * 16 + g, tq, T, C);
}

/* ------------------------------------------------------------------------------------------ */
/* Forward on Hopper tensor cores, HS = 256: the blocks, loads and online softmax of
 * attention_forward_kernel, with both products as warpgroup MMAs (the block's 4 warps are one
 * warpgroup; each warp's 16 rows of S and O sit in the same registers as with mma.sync).
 *   S = Q·Kᵀ: wgmma m64n64k16 ×HS/16, Q and K K-major from shared memory;
 *   O += P·V: wgmma m64n64k16 ×4 per 64 output columns, P from registers (the S accumulators
 *   packed to bf16 pairs), V MN-major from shared memory (its rows are keys: the transposed operand).
 * S(j+1) is issued right behind P(j)·V(j), one wait for both, so the tensor cores go from one to the
 * other without the block's round trip in between.
 * Shared tiles [64][HS] bf16 as [64][64] panels in wgmma's 128-byte swizzle: Q, K, V, one buffer
 * each (96 KB: two blocks per SM instead of one; the kernel is bound by latency, which resident
 * warps hide). K(j+2) is copied in once S(j+1) is done and V(j+1) once P(j)·V(j) is, behind the
 * next softmax. */
template <int HS>
__global__ void __launch_bounds__(ATT_THREADS, ATT_FWD256_MINB)
    attention_forward_wgmma_kernel(bf16 *out, float *lse, const bf16 *qkv, const bf16 *vsrc, int T, int NH, int NKV, AttMask masks,
                                   float sl2) {
    constexpr int TILE = ATT_TILE, TILE_BYTES = TILE * HS * 2, NP = HS / 64;
    extern __shared__ __align__(16) unsigned char att_smem[]; /* aligned to 1024 by hand below */
    const uint32_t Qs = (smem_addr(att_smem) + 1023) & ~1023u, Ks = Qs + TILE_BYTES, Vs = Ks + TILE_BYTES;

    int C = NH * HS;
    size_t C3 = packed_qkv_width(NH, NKV, HS);
    int qb = gridDim.x - 1 - blockIdx.x;
    int b = blockIdx.y / NH, h = blockIdx.y % NH;
    const AttMask am = masks.seq(b);
    const bf16 *qbase = qkv + (size_t)b * T * C3 + h * HS;
    const bf16 *kbase = qkv + (size_t)b * T * C3 + key_col(NH, HS, h / (NH / NKV));
    const bf16 *vbase = vsrc + (size_t)b * T * C3 + value_col(NH, NKV, HS, h / (NH / NKV));
    int q0 = qb * TILE;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, tq = lane % 4;

    int j0 = first_key_tile(q0, am), nkv = qb + 1;
    load_rows_swizzled<HS>(Qs, qbase, C3, q0, T);
    load_rows_swizzled<HS>(Ks, kbase, C3, j0 * TILE, T);
    load_rows_swizzled<HS>(Vs, vbase, C3, j0 * TILE, T);
    cp_async_commit();
    cp_async_wait<0>();
    fence_proxy_async(); /* the copies are read by wgmma, through the async proxy */
    __syncthreads();
    float s[32];
    wgmma_fence();
    wgmma_abt<HS>(s, Qs, Ks);
    wgmma_commit();
    wgmma_wait<0>();
    fence_acc(s);
    if (j0 + 1 < nkv) {
        __syncthreads(); /* every warp's part of S has read K before the next tile overwrites it */
        load_rows_swizzled<HS>(Ks, kbase, C3, (j0 + 1) * TILE, T);
        cp_async_commit();
    }

    float o[NP][32];
#pragma unroll
    for (int p = 0; p < NP; p++)
#pragma unroll
        for (int i = 0; i < 32; i++) o[p][i] = 0.0f;
    float mrow[2] = {-INFINITY, -INFINITY}, lrow[2] = {0.0f, 0.0f};

    /* Iteration j holds S(j) on entry; it issues O += P(j)·V(j) and, behind it on the tensor cores,
     * S(j+1) = Q·K(j+1)ᵀ, then copies V(j+1) and K(j+2) in behind the next softmax. */
    for (int j = j0; j < nkv; j++) {
        if (j == nkv - 1 || crosses_window(j * TILE, q0, TILE, am))
            mask_tile(s, j * TILE, q0 + warp * 16 + g, tq, am);
#pragma unroll
        for (int r = 0; r < 2; r++) {
            float mx = -INFINITY;
#pragma unroll
            for (int nt = 0; nt < 8; nt++) mx = fmaxf(mx, fmaxf(s[nt * 4 + 2 * r], s[nt * 4 + 2 * r + 1]));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            float mnew = fmaxf(mrow[r], mx * sl2), msub = safe_max(mnew);
            float alpha = ex2(mrow[r] - msub);
            mrow[r] = mnew;
            lrow[r] *= alpha;
#pragma unroll
            for (int p = 0; p < NP; p++)
#pragma unroll
                for (int dt = 0; dt < 8; dt++) {
                    o[p][dt * 4 + 2 * r] *= alpha;
                    o[p][dt * 4 + 2 * r + 1] *= alpha;
                }
#pragma unroll
            for (int nt = 0; nt < 8; nt++) {
                float p0 = ex2(fmaf(s[nt * 4 + 2 * r], sl2, -msub)), p1 = ex2(fmaf(s[nt * 4 + 2 * r + 1], sl2, -msub));
                s[nt * 4 + 2 * r] = p0;
                s[nt * 4 + 2 * r + 1] = p1;
                lrow[r] += p0 + p1;
            }
        }
        uint32_t a[4][4];
#pragma unroll
        for (int kk = 0; kk < 4; kk++) pack_a_fragment(a[kk], s, kk);
        if (j > j0) { /* V(j), copied behind this softmax; K(j+1) may stay in flight */
            if (j + 1 < nkv)
                cp_async_wait<1>();
            else
                cp_async_wait<0>();
            fence_proxy_async();
            __syncthreads();
        }
#pragma unroll
        for (int p = 0; p < NP; p++) fence_acc(o[p]);
        wgmma_fence();
        wgmma_issue_xb<HS>(o, a, Vs); /* O += P·V */
        wgmma_commit();
        if (j + 1 < nkv) {
            cp_async_wait<0>(); /* K(j+1) */
            fence_proxy_async();
            __syncthreads();
            wgmma_fence();
            wgmma_abt<HS>(s, Qs, Ks);
            wgmma_commit();
        }
        wgmma_wait<0>();
        fence_regs(a); /* read by P·V until the wait: no other value may take their registers */
#pragma unroll
        for (int p = 0; p < NP; p++) fence_acc(o[p]);
        fence_acc(s);
        /* Every warp is done with V(j)'s buffer and with K(j+1) before they are refilled. */
        __syncthreads();
        if (j + 1 < nkv) { /* two groups: V(j+1) is waited for first */
            load_rows_swizzled<HS>(Vs, vbase, C3, (j + 1) * TILE, T);
            cp_async_commit();
            if (j + 2 < nkv) {
                load_rows_swizzled<HS>(Ks, kbase, C3, (j + 2) * TILE, T);
                cp_async_commit();
            }
        }
    }

    store_forward_rows<HS>(out, lse, &o[0][0], lrow, mrow, b, h, NH, q0 + warp * 16 + g, tq, T, C);
}

#endif
