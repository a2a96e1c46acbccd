/* kernels/qkv_rope.cu - the attention's QKV projection with QK-norm and RoPE in its epilogue (Hopper,
 * sm_90a):
 *
 *   qkv [N, QW] = X [N, C] · Wqkv [QW, C]^T, stored in bf16 (QW = (NH + 2·NKV)·hd: query heads, key
 *   heads, value heads), and out's query and key heads = RoPE(QK-norm(qkv)) with rstd [N, NH + NKV]
 *   when q_norm != NULL: the values matmul_forward followed by rope_forward give, without the pass
 *   that reads qkv back (its 4 bytes a rotated value). Value heads are left out of out, as
 *   rope_forward leaves them.
 *
 * The product is kernels/staged_gemm.cuh's, its 256 columns those of Wqkv's rows tn · 256.. (two
 * boxes of 128 rows, one from each CTA of a cluster), so a tile holds 256 / hd whole heads of 128 rows.
 * Its drain runs kernels/rope_lane.cuh on each head's staged bf16 values as rope_forward does on the
 * stored ones: groups of hd/16 lanes a head, 8 pairs (i, i + hd/2) a lane, the same bits.
 *
 * Takes hd a multiple of 16 dividing 256, C % 8 == 0, no bias, 16-byte-aligned tensors
 * (qkv_rope_fits); the trainer runs the product and the pass otherwise. FLOPs 2 N C QW. */
#include <stdint.h>

#include "kernels/kernels.h"
#include "kernels/rope_lane.cuh"
#include "kernels/staged_gemm.cuh"

#define QR_ROWS 2 /* rows a drain thread has in flight */

typedef struct {
    StagedShape sh;
    int64_t N;        /* tokens: the product's rows */
    int QW;           /* the product's columns */
    RopeShape rs;     /* hd, heads, positions, QK-norm's eps and gain */
    bf16 *qkv;        /* written [N, QW] */
    bf16 *out;        /* query and key heads written [N, QW] */
    float *rstd;      /* with QK-norm: written [N, NH + NKV] */
    const bf16 *q_norm, *k_norm;
    const float *cos_t, *sin_t; /* [positions, hd/2] */
} QkvRopeArgs;

struct QkvRopeEpi {
    typedef QkvRopeArgs Args;
    static constexpr int B_MN_MAJOR = 0;
    __device__ static int b_row(const Args &, uint32_t rank, int tn) { return tn * SG_BN + (int)rank * 128; }

    /* Thread t of nt (nt % 16 == 0) owns one lane of every row it takes: lane li = t % 16 of the
     * row's 16 (256 columns, 16 values a lane: 8 pairs (i, i + hd/2)), rows t / 16 + k · nt / 16. A
     * head's g = hd/16 lanes are adjacent threads, so a group never straddles a warp. The lane's
     * columns, head and norm gains are the tile's; QR_ROWS rows' loads are in flight at once (one at
     * a time, the drain waited on each row's cos, sin and bound the kernel). Rows past N and heads
     * past QW are dead but join their warp's shuffles. */
    __device__ static void drain(const Args &a, const unsigned char *stg, int64_t m0, int tn, int t, int nt) {
        const int hd = a.rs.hd, H = hd / 2, g = hd / 16, qk = a.rs.NH + a.rs.NKV;
        const int li = t & 15, j = li / g, lig = li % g, i = lig * 8;
        const int c0 = tn * SG_BN + j * hd, h = c0 / hd; /* the lane's head: first column, index */
        const bool head_live = c0 < a.QW, rotated = head_live && h < qk, normed = a.q_norm != NULL;
        const int k1 = (j * hd) / 8 + lig, k2 = k1 + g; /* staged chunks of columns i.. and i + H.. */
        float g1[8], g2[8];
        if (normed && rotated) rope_load_gains<8>(g1, g2, h < a.rs.NH ? a.q_norm : a.k_norm, i, H, a.rs.one_plus_w);
        const int step = nt / 16;
        for (int r0 = t >> 4; r0 < SG_BM; r0 += QR_ROWS * step) {
            uint4 w1[QR_ROWS], w2[QR_ROWS];
            float c[QR_ROWS][8], sn[QR_ROWS][8];
            bool live[QR_ROWS];
#pragma unroll
            for (int q = 0; q < QR_ROWS; q++) {
                const int r = r0 + q * step;
                const int64_t n = m0 + r;
                live[q] = r < SG_BM && n < a.N && head_live;
                w1[q] = *reinterpret_cast<const uint4 *>(stg + sg_staged(r & (SG_BM - 1), k1));
                w2[q] = *reinterpret_cast<const uint4 *>(stg + sg_staged(r & (SG_BM - 1), k2));
                if (live[q] && rotated) {
                    const int pos = a.rs.pos ? a.rs.pos[n] : (int)((uint32_t)n % (uint32_t)a.rs.T);
                    load_v<8>(c[q], a.cos_t + (size_t)pos * H + i);
                    load_v<8>(sn[q], a.sin_t + (size_t)pos * H + i);
                }
            }
#pragma unroll
            for (int q = 0; q < QR_ROWS; q++) {
                const int64_t n = m0 + r0 + q * step;
                if (live[q]) {
                    bf16 *row = a.qkv + n * a.QW + c0;
                    *reinterpret_cast<uint4 *>(row + i) = w1[q];
                    *reinterpret_cast<uint4 *>(row + i + H) = w2[q];
                }
                const bool rot = live[q] && rotated;
                float x1[1][8], x2[1][8];
                const uint32_t u1[4] = {w1[q].x, w1[q].y, w1[q].z, w1[q].w}, u2[4] = {w2[q].x, w2[q].y, w2[q].z, w2[q].w};
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    x1[0][2 * e] = rot ? bf16_lo(u1[e]) : 0.0f, x1[0][2 * e + 1] = rot ? bf16_hi(u1[e]) : 0.0f;
                    x2[0][2 * e] = rot ? bf16_lo(u2[e]) : 0.0f, x2[0][2 * e + 1] = rot ? bf16_hi(u2[e]) : 0.0f;
                }
                if (normed) {
                    const float rs = rope_group_rstd<8, 1>(x1, x2, g, hd, a.rs.eps);
                    if (rot) {
                        rope_scale_pairs<8>(x1[0], x2[0], rs, g1, g2);
                        if (lig == 0) a.rstd[n * qk + h] = rs;
                    }
                }
                if (rot) rope_rotate_store_cs<8>(a.out + n * a.QW + c0, x1[0], x2[0], c[q], sn[q], i, H);
            }
        }
    }
};

extern "C" int qkv_rope_fits(const RopeShape *s, int C, int has_bias, uintptr_t weight_at) {
    return !has_bias && s->hd >= 16 && s->hd % 16 == 0 && 256 % s->hd == 0 && C >= 8 && C % 8 == 0 &&
           weight_at % 16 == 0;
}

extern "C" void qkv_rope_forward(kbf16 *qkv, kbf16 *out, float *rstd, const kbf16 *x, const kbf16 *wqkv,
                                 const kbf16 *q_norm, const kbf16 *k_norm, const float *cos_t, const float *sin_t,
                                 const RopeShape *s, int C, cudaStream_t stream) {
    const void *ptrs[] = {qkv, out, x, wqkv};
    int aligned = 1;
    for (int i = 0; i < 4; i++) aligned &= ((uintptr_t)ptrs[i] & 15) == 0;
    if (!qkv_rope_fits(s, C, 0, (uintptr_t)wqkv) || !aligned) {
        fprintf(stderr, "error: QKV product with RoPE: head_dim %d, C = %d or a tensor's address does not fit it (the "
                        "caller checks qkv_rope_fits first)\n", s->hd, C);
        exit(1);
    }
    const int64_t N = (int64_t)s->B * s->T;
    if (N <= 0) return;
    QkvRopeArgs a = {};
    a.QW = (s->NH + 2 * s->NKV) * s->hd;
    a.sh = staged_shape(N, C, a.QW);
    a.N = N, a.rs = *s, a.qkv = qkv, a.out = out, a.rstd = rstd, a.q_norm = q_norm, a.k_norm = k_norm;
    a.cos_t = cos_t, a.sin_t = sin_t;
    const char *what = "QKV product with RoPE";
    const CUtensorMap tm_a = staged_map(x, N, C, 64, SG_BM, what);
    const CUtensorMap tm_b = staged_map(wqkv, a.QW, C, 64, 128, what);
    staged_gemm_launch<QkvRopeEpi, 0>(a, tm_a, tm_b, what, stream);
}
