/* kernels/gated_mlp.cu - the gated MLP's two products with its activation in their epilogues
 * (Hopper, sm_90a), act = SiLU (SwiGLU) or GELU-tanh (GeGLU):
 *
 *   forward:  GU [N, 2F] = X [N, C] · Wfc [2F, C]^T, stored in bf16, and H [N, F] = act(gate)·up
 *   backward: D = dY [N, C] · Wproj [C, F] is never stored: dGU [N, 2F] = (D·up·act'(gate),
 *             D·act(gate)) and H again, for the down projection's weight gradient
 *
 * the same values matmul.cu's product followed by swiglu.cu's pass give (the product's output
 * rounded to bf16 before the activation, kernels/gated_act.cuh's activation), without the pass's
 * traffic: the forward never reads GU back, the backward never writes D nor reads it back (6 of the
 * pass's 12 bytes a value).
 *
 * The products are kernels/staged_gemm.cuh's: a persistent warp-specialised Hopper kernel whose finished
 * tiles drain warps take in bf16 while the tensor cores run the next tile's. The forward's 256
 * columns are 128 gate columns f0.. and the same 128 up columns (boxes of Wfc's rows f0 and F + f0),
 * the backward's 256 columns of D (Wproj MN-major). The backward at C <= 1536 issues its copies
 * inline, from a consumer thread between its products: there the drain's loads and stores bound the
 * kernel, and that frees a fourth drain warp; at C = 2048 the products' two stages ahead instead of
 * three cost more than the warp gives.
 *
 * Takes F % 128 == 0, C % 8 == 0 and 16-byte-aligned tensors (kernels/gated_mlp_fits.h); the
 * trainer runs the separate pass otherwise. FLOPs 4 N C F (forward) and 2 N C F (backward). */
#include <stdint.h>

#include "kernels/gated_act.cuh"
#include "kernels/kernels.h"
#include "kernels/staged_gemm.cuh"

#define GM_LOADS 8           /* the backward's drain: items of 8 columns with g and u in flight */
#define GM_INLINE_MAX_C 1536 /* the backward issues its copies inline up to this C */

typedef struct {
    StagedShape sh;
    int64_t N;  /* tokens: the products' rows */
    int F;      /* gated width */
    bf16 *gu;   /* forward: written [N, 2F]; backward: read */
    bf16 *dgu;  /* backward: written [N, 2F] */
    bf16 *h;    /* written [N, F] */
} GatedMlpArgs;

/* forward drain (t of nt threads): staged columns 0-127 are gate f0.., 128-255 the same up columns */
template <int ACT>
__device__ __forceinline__ void gm_drain_forward(const GatedMlpArgs &a, const unsigned char *stg, int64_t m0, int f0,
                                                 int t, int nt) {
    for (int item = t; item < SG_BM * 16; item += nt) {
        const int r = item >> 4, k = item & 15;
        const int64_t row = m0 + r;
        if (row >= a.N) continue;
        const uint4 g = *reinterpret_cast<const uint4 *>(stg + sg_staged(r, k));
        const uint4 u = *reinterpret_cast<const uint4 *>(stg + sg_staged(r, k + 16));
        const uint32_t gw[4] = {g.x, g.y, g.z, g.w}, uw[4] = {u.x, u.y, u.z, u.w};
        uint32_t hw[4];
#pragma unroll
        for (int e = 0; e < 4; e++)
            hw[e] = pack_bf16x2(gated_act<ACT>(bf16_lo(gw[e])) * bf16_lo(uw[e]),
                                gated_act<ACT>(bf16_hi(gw[e])) * bf16_hi(uw[e]));
        const int64_t c = f0 + 8 * k;
        bf16 *gu = a.gu + row * 2 * (int64_t)a.F;
        *reinterpret_cast<uint4 *>(gu + c) = g;
        *reinterpret_cast<uint4 *>(gu + a.F + c) = u;
        *reinterpret_cast<uint4 *>(a.h + row * (int64_t)a.F + c) = make_uint4(hw[0], hw[1], hw[2], hw[3]);
    }
}

/* backward drain: the staged tile is D's columns f0 .. f0 + 255 (those past F unused); GM_LOADS
 * items' g and u loads in flight at once */
template <int ACT>
__device__ __forceinline__ void gm_drain_backward(const GatedMlpArgs &a, const unsigned char *stg, int64_t m0, int f0,
                                                  int t, int nt) {
    for (int first = t; first < SG_BM * 32; first += nt * GM_LOADS) {
        uint4 g[GM_LOADS], u[GM_LOADS];
#pragma unroll
        for (int j = 0; j < GM_LOADS; j++) {
            const int item = first + j * nt, r = item >> 5, k = item & 31;
            const int64_t row = m0 + r, c = f0 + 8 * k;
            if (item < SG_BM * 32 && row < a.N && c < a.F) {
                const bf16 *gu = a.gu + row * 2 * (int64_t)a.F;
                g[j] = __ldg(reinterpret_cast<const uint4 *>(gu + c));
                u[j] = __ldg(reinterpret_cast<const uint4 *>(gu + a.F + c));
            }
        }
#pragma unroll
        for (int j = 0; j < GM_LOADS; j++) {
            const int item = first + j * nt, r = item >> 5, k = item & 31;
            const int64_t row = m0 + r, c = f0 + 8 * k;
            if (!(item < SG_BM * 32 && row < a.N && c < a.F)) continue;
            const uint4 d = *reinterpret_cast<const uint4 *>(stg + sg_staged(r, k));
            const uint32_t dw[4] = {d.x, d.y, d.z, d.w}, gw[4] = {g[j].x, g[j].y, g[j].z, g[j].w},
                           uw[4] = {u[j].x, u[j].y, u[j].z, u[j].w};
            uint32_t dgw[4], duw[4], hw[4];
#pragma unroll
            for (int e = 0; e < 4; e++) {
                float dg[2], du[2], o[2];
#pragma unroll
                for (int half = 0; half < 2; half++) {
                    const float dv = half ? bf16_hi(dw[e]) : bf16_lo(dw[e]);
                    const float gv = half ? bf16_hi(gw[e]) : bf16_lo(gw[e]);
                    const float uv = half ? bf16_hi(uw[e]) : bf16_lo(uw[e]);
                    const float act = gated_act<ACT>(gv);
                    o[half] = act * uv;
                    dg[half] = dv * uv * gated_act_grad<ACT>(gv);
                    du[half] = dv * act;
                }
                dgw[e] = pack_bf16x2(dg[0], dg[1]), duw[e] = pack_bf16x2(du[0], du[1]), hw[e] = pack_bf16x2(o[0], o[1]);
            }
            bf16 *dgu = a.dgu + row * 2 * (int64_t)a.F;
            *reinterpret_cast<uint4 *>(dgu + c) = make_uint4(dgw[0], dgw[1], dgw[2], dgw[3]);
            *reinterpret_cast<uint4 *>(dgu + a.F + c) = make_uint4(duw[0], duw[1], duw[2], duw[3]);
            *reinterpret_cast<uint4 *>(a.h + row * (int64_t)a.F + c) = make_uint4(hw[0], hw[1], hw[2], hw[3]);
        }
    }
}

/* The epilogues of kernels/staged_gemm.cuh's products: the forward's B is Wfc K-major, rank 0 of a
 * cluster fetching the gate box (rows f0..), rank 1 the up box (F + f0..); the backward's is Wproj
 * MN-major. */
template <int ACT>
struct GatedForwardEpi {
    typedef GatedMlpArgs Args;
    static constexpr int B_MN_MAJOR = 0;
    __device__ static int b_row(const Args &a, uint32_t rank, int tn) { return (int)rank * a.F + tn * 128; }
    __device__ static void drain(const Args &a, const unsigned char *stg, int64_t m0, int tn, int t, int nt) {
        gm_drain_forward<ACT>(a, stg, m0, tn * 128, t, nt);
    }
};

template <int ACT>
struct GatedBackwardEpi {
    typedef GatedMlpArgs Args;
    static constexpr int B_MN_MAJOR = 1;
    __device__ static int b_row(const Args &, uint32_t, int) { return 0; }
    __device__ static void drain(const Args &a, const unsigned char *stg, int64_t m0, int tn, int t, int nt) {
        gm_drain_backward<ACT>(a, stg, m0, tn * SG_BN, t, nt);
    }
};

/* ---- host ------------------------------------------------------------------------------------------ */

static const char *const gm_what = "gated MLP products";

template <int ACT>
static void launch_act(int backward, int inline_issue, const GatedMlpArgs &a, const CUtensorMap &tm_a,
                       const CUtensorMap &tm_b, cudaStream_t stream) {
    if (!backward)
        staged_gemm_launch<GatedForwardEpi<ACT>, 0>(a, tm_a, tm_b, gm_what, stream);
    else if (inline_issue)
        staged_gemm_launch<GatedBackwardEpi<ACT>, 1>(a, tm_a, tm_b, gm_what, stream);
    else
        staged_gemm_launch<GatedBackwardEpi<ACT>, 0>(a, tm_a, tm_b, gm_what, stream);
}

static void launch(int backward, int64_t N, int C, int F, GatedAct act, const kbf16 *a_mat, const kbf16 *b_mat,
                   kbf16 *gu, kbf16 *dgu, kbf16 *h, cudaStream_t stream) {
    const void *ptrs[] = {a_mat, b_mat, gu, dgu, h};
    int aligned = 1;
    for (int i = 0; i < 5; i++) aligned &= ((uintptr_t)ptrs[i] & 15) == 0;
    if (!gated_mlp_fits(C, F, (uintptr_t)b_mat) || !aligned || (act != GATED_SILU && act != GATED_GELU_TANH)) {
        fprintf(stderr, "error: gated MLP products: C = %d, F = %d, activation %d or a tensor's address does not fit "
                        "them (the caller checks gated_mlp_fits first)\n", C, F, (int)act);
        exit(1);
    }
    if (N <= 0) return;
    GatedMlpArgs a = {};
    a.sh = staged_shape(N, C, backward ? F : 2 * (int64_t)F); /* forward: F / 128 tiles of gate and up */
    a.N = N, a.F = F, a.gu = gu, a.dgu = dgu, a.h = h;
    const CUtensorMap tm_a = staged_map(a_mat, N, C, 64, SG_BM, gm_what);
    const CUtensorMap tm_b = backward ? staged_map(b_mat, C, F, 64, 64, gm_what)
                                      : staged_map(b_mat, 2 * (int64_t)F, C, 64, 128, gm_what);
    const int inline_issue = backward && C <= GM_INLINE_MAX_C;
    if (act == GATED_SILU) launch_act<GATED_SILU>(backward, inline_issue, a, tm_a, tm_b, stream);
    else launch_act<GATED_GELU_TANH>(backward, inline_issue, a, tm_a, tm_b, stream);
}

extern "C" void gated_mlp_forward(kbf16 *gu, kbf16 *out, const kbf16 *x, const kbf16 *wfc, size_t N, int C, int F,
                                  GatedAct act, cudaStream_t stream) {
    launch(0, (int64_t)N, C, F, act, x, wfc, gu, NULL, out, stream);
}

extern "C" void gated_mlp_backward(kbf16 *dgu, kbf16 *out, const kbf16 *dout, const kbf16 *wproj, const kbf16 *gu,
                                   size_t N, int C, int F, GatedAct act, cudaStream_t stream) {
    launch(1, (int64_t)N, C, F, act, dout, wproj, const_cast<kbf16 *>(gu), dgu, out, stream);
}
