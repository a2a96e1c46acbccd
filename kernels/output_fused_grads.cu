/* kernels/output_fused_grads.cu - dH and dW of the fused layer's scaled-exponential path, read
 * straight from the chunk's E: dZ = P - Y is formed in registers as each tile of E arrives and is
 * never stored.
 *
 * Shapes (one chunk): E [R x V] fp16 (row stride ldE), the chunk's H [R x d] and targets [R], W
 * [V x d] bf16; scale [tiles x R] = 2^(k_t - lse / ln 2) per 256-column tile and row (0 for an
 * ignored row), tval [R] = p - 1 at the row's target, taken from its fp32 logit.
 *   dZ[r][v] = E[r][v] * scale[r][v / 256], or tval[r] at v = target[r]       (fp32, then bf16)
 *   dH[R x d]  = gscale dZ W          grad_kernel<GRAD_DH>: tiles of 128 rows x 256 of d, K = V
 *   dW[V x d] += gscale dZ^T H        grad_kernel<GRAD_DW>: tiles of 128 words x 256 of d, K = R
 * (gscale: the layer's gradient scale, on the device). 2 G FLOPs (G = 2 R V d); bytes: E read once
 * per 256 columns of d (the CTAs that share a tile of E run side by side and meet in L2), W or H
 * likewise, dW read and written once, dH written once.
 *
 * A CTA: thread 0 issues the TMA copies (4-stage mbarrier ring, 48 KiB a stage: E's tile and four
 * 64 x 64 boxes of the B operand), two warpgroups of 64 output rows each load E with ldmatrix
 * (transposed for dW, whose A operand is E^T), scale it in fp32, round once to bf16 and feed it to
 * wgmma from registers (m64n256k16; B = W or H, whose d runs along N: MN-major in shared memory,
 * four 64-column boxes). The rounding of dZ is the only one between
 * E (fp16, 11 bits) and the fp32 accumulators, as in the streaming path.
 *
 * dH's K = V is long and its tiles few (R / 128 x d / 256): V is split into slices whose fp32
 * partial sums a second kernel adds in a fixed order. Every output element has one owner and a
 * fixed summation order: deterministic. */
#include <cuda_fp16.h>
#include <stdio.h>

#include "kernels/cuda_check.h"
#include "kernels/output_layer_internal.h"
#include "kernels/tma.cuh"
#include "kernels/wgmma.cuh"

typedef __nv_bfloat16 bf16;

#define G_M 128 /* output rows per CTA: two warpgroups of 64 */
#define G_N 256 /* output columns per CTA: four wgmma n64 boxes */
#define G_K 64  /* K per stage */
#define G_STAGES 4
#define G_THREADS 256
#define G_BOX_BYTES (64 * 64 * 2)              /* one 64 x 64 box of 2-byte elements: 8 KiB */
#define G_STAGE_BYTES (2 * G_BOX_BYTES + 4 * G_BOX_BYTES) /* E (128 x 64) + B (4 boxes) */
#define G_SMEM (G_STAGES * G_STAGE_BYTES + 1024 + 128)
#define G_TILE 256 /* vocabulary columns per scale (the tile kernel's tile) */

enum { GRAD_DH = 0, GRAD_DW = 1 };

typedef struct {
    int64_t rows;          /* R */
    int64_t V;
    int d;
    const float *scale;    /* [tiles x R] */
    const float *tval;     /* [R] */
    const int32_t *targets; /* [R], the chunk's */
    int64_t slice_cols;    /* GRAD_DH: columns of V per slice (a multiple of G_TILE) */
    float *part;           /* GRAD_DH with several slices: [slices][R][d] */
    bf16 *dH;              /* GRAD_DH with one slice: the chunk's rows */
    float *dW;             /* GRAD_DW: [V x d], added to */
    const float *gscale;   /* the gradient scale (device) */
} GradArgs;

__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4_trans(uint32_t (&r)[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

/* two E values (fp16) times their scales, the target's value where it falls, rounded to bf16 */
__device__ __forceinline__ uint32_t dz_pair(uint32_t e2, float s0, float s1, bool t0, bool t1, float tv0, float tv1) {
    const float2 x = __half22float2(*reinterpret_cast<const __half2 *>(&e2));
    __nv_bfloat162 b = __floats2bfloat162_rn(t0 ? tv0 : x.x * s0, t1 ? tv1 : x.y * s1);
    return *reinterpret_cast<uint32_t *>(&b);
}

/* MODE GRAD_DH: blockIdx = (256-column block of d, 128-row block of R, slice of V).
 * MODE GRAD_DW: blockIdx = (256-column block of d, 128-word block of V). The column block varies
 * fastest, so the CTAs that share a tile of E are launched together. */
template <int MODE>
__global__ void __launch_bounds__(G_THREADS, 1)
    grad_kernel(const GradArgs a, const __grid_constant__ CUtensorMap tm_e, const __grid_constant__ CUtensorMap tm_b) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ unsigned char smem_raw[];
    const uint32_t ring = (smem_u32(smem_raw) + 1023) & ~1023u;
    const uint32_t full_bar = ring + G_STAGES * G_STAGE_BYTES, empty_bar = full_bar + 8 * G_STAGES;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, wg = warp >> 2, wq = warp & 3;
    const int g = lane >> 2, t4 = lane & 3;
    const int n0 = blockIdx.x * G_N;
    const int64_t m0 = (int64_t)blockIdx.y * G_M; /* rows of R (dH) or words of V (dW) */
    int64_t k_begin, k_end;                       /* K: words of V (dH) or rows of R (dW) */
    if (MODE == GRAD_DH) {
        k_begin = (int64_t)blockIdx.z * a.slice_cols;
        k_end = min(a.V, k_begin + a.slice_cols);
    } else {
        k_begin = 0, k_end = a.rows;
    }
    const int iters = (int)((k_end - k_begin + G_K - 1) / G_K);

    if (tid == 0) {
        for (int s = 0; s < G_STAGES; s++) {
            mbar_init(full_bar + 8 * s, 1);
            mbar_init(empty_bar + 8 * s, 8); /* every warp, after its wgmma on the stage completed */
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();

    int ld_it = 0;
    auto issue = [&]() {
        const int s = ld_it % G_STAGES;
        if (ld_it >= G_STAGES) mbar_wait(empty_bar + 8 * s, (uint32_t)((ld_it / G_STAGES - 1) & 1));
        const uint32_t base = ring + s * G_STAGE_BYTES, bar = full_bar + 8 * s;
        const int k0 = (int)(k_begin + (int64_t)ld_it * G_K);
        mbar_expect_tx(bar, G_STAGE_BYTES);
        if (MODE == GRAD_DH) {
            tma_load_2d(base, &tm_e, k0, (int)m0, bar); /* E [128 rows x 64 words], K-major */
        } else {
            tma_load_2d(base, &tm_e, (int)m0, k0, bar); /* E [64 rows x 64 words] twice: E^T, MN-major */
            tma_load_2d(base + G_BOX_BYTES, &tm_e, (int)m0 + 64, k0, bar);
        }
#pragma unroll
        for (int b = 0; b < 4; b++) /* W [64 words x 64 of d] or H [64 rows x 64 of d] */
            tma_load_2d(base + (2 + b) * G_BOX_BYTES, &tm_b, n0 + 64 * b, k0, bar);
        ld_it++;
    };
    if (tid == 0)
        while (ld_it < iters && ld_it < G_STAGES - 1) issue();

    /* this thread's two output rows (dH: rows of R; dW: words of V) */
    const int64_t my_m[2] = {m0 + 64 * wg + 16 * wq + g, m0 + 64 * wg + 16 * wq + g + 8};
    int tgt[2] = {-1, -1};
    float tv[2] = {0.0f, 0.0f}, sc[2] = {0.0f, 0.0f};
    if (MODE == GRAD_DH)
#pragma unroll
        for (int h = 0; h < 2; h++)
            if (my_m[h] < a.rows) tgt[h] = a.targets[my_m[h]], tv[h] = a.tval[my_m[h]];
    const int64_t dw_tile = m0 / G_TILE; /* GRAD_DW: the 128 words lie in one scale tile */

    float acc[128];
#pragma unroll
    for (int i = 0; i < 128; i++) acc[i] = 0.0f;

    /* dZ fragments of iteration it (its stage waited for): four k16 steps of 4 registers */
    auto fragments = [&](int it, uint32_t (&af)[4][4]) {
        const int s = it % G_STAGES;
        const int64_t k0 = k_begin + (int64_t)it * G_K;
        mbar_wait(full_bar + 8 * s, (uint32_t)((it / G_STAGES) & 1));
        const uint32_t sE = ring + s * G_STAGE_BYTES;
        if (MODE == GRAD_DH && (it == 0 || k0 % G_TILE == 0)) /* a new tile of V: its scales */
#pragma unroll
            for (int h = 0; h < 2; h++) sc[h] = my_m[h] < a.rows ? a.scale[(k0 / G_TILE) * a.rows + my_m[h]] : 0.0f;
#pragma unroll
        for (int kk = 0; kk < 4; kk++) {
            uint32_t e[4];
            const int q = lane >> 3, r8 = lane & 7;
            if (MODE == GRAD_DH) {
                /* matrices: rows 0-7 / 8-15 of the warp x k 0-7 / 8-15 of the step */
                const int row = 64 * wg + 16 * wq + (q & 1) * 8 + r8, ch = kk * 2 + (q >> 1);
                ldsm_x4(e, sE + row * 128 + ((ch ^ (row & 7)) << 4));
                const int64_t kc = k0 + kk * 16 + 2 * t4; /* this thread's first column */
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    const int h = i & 1;
                    const int64_t c = kc + (i >> 1) * 8;
                    af[kk][i] = dz_pair(e[i], sc[h], sc[h], tgt[h] == c, tgt[h] == c + 1, tv[h], tv[h]);
                }
            } else {
                /* E^T: smem rows are k (rows of R), 64 words per box; transposed loads give the
                 * A fragment of words 0-7 / 8-15 of the warp x k 0-7 / 8-15 of the step */
                const int krow = kk * 16 + (q >> 1) * 8 + r8, ch = 2 * wq + (q & 1);
                ldsm_x4_trans(e, sE + wg * G_BOX_BYTES + krow * 128 + ((ch ^ (krow & 7)) << 4));
                float ks[4], kv[4];
                int kt[4];
#pragma unroll
                for (int u = 0; u < 4; u++) { /* this thread's k: 2 t4, 2 t4 + 1, 2 t4 + 8, 2 t4 + 9 */
                    const int64_t r = k0 + kk * 16 + 2 * t4 + (u >> 1) * 8 + (u & 1);
                    const bool in = r < a.rows;
                    ks[u] = in ? a.scale[dw_tile * a.rows + r] : 0.0f;
                    kt[u] = in ? a.targets[r] : -1;
                    kv[u] = in ? a.tval[r] : 0.0f;
                }
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    const int64_t word = my_m[i & 1];
                    const int u = (i >> 1) * 2;
                    af[kk][i] = dz_pair(e[i], ks[u], ks[u + 1], kt[u] == word, kt[u + 1] == word, kv[u], kv[u + 1]);
                }
            }
        }
    };
    /* Iteration it: its products (fragments made the iteration before) go to the tensor cores, and
     * while they run this warpgroup makes the next iteration's fragments; the stage is released
     * once the products completed. Two fragment buffers, named, so no register array is indexed
     * at run time. */
    auto step = [&](int it, uint32_t (&cur)[4][4], uint32_t (&next)[4][4]) {
        const int s = it % G_STAGES;
        const uint32_t sB = ring + s * G_STAGE_BYTES + 2 * G_BOX_BYTES;
        fence_acc(acc);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < 4; kk++)
            wgmma_m64n256k16_rs_mn(acc, cur[kk], smem_desc_mn(sB + kk * 16 * 128, G_BOX_BYTES), (it | kk) != 0);
        wgmma_commit();
        /* refill the stage every warp released last iteration; thread 0 waits for the slowest warp
         * while its own products run */
        if (tid == 0 && ld_it < iters) issue();
        __syncwarp();
        if (it + 1 < iters) fragments(it + 1, next);
        wgmma_wait<0>();
        fence_acc(acc);
        __syncwarp();
        if (lane == 0) mbar_arrive(empty_bar + 8 * s);
    };
    uint32_t af0[4][4], af1[4][4];
    if (iters > 0) fragments(0, af0);
    for (int it = 0; it < iters; it += 2) {
        step(it, af0, af1);
        if (it + 1 < iters) step(it + 1, af1, af0);
    }

    /* acc[i*4 + e]: output row my_m[e >> 1], column n0 + 8 i + 2 t4 + (e & 1) */
    const float gs = *a.gscale;
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int64_t m = my_m[h];
        if (MODE == GRAD_DH ? m >= a.rows : m >= a.V) continue;
#pragma unroll
        for (int i = 0; i < 32; i++) {
                const int64_t n = n0 + 8 * i + 2 * t4;
                if (n >= a.d) continue; /* d need only be a multiple of 64 */
                const float x = acc[i * 4 + h * 2], y = acc[i * 4 + h * 2 + 1];
                if (MODE == GRAD_DW) {
                    float2 *p = reinterpret_cast<float2 *>(a.dW + m * a.d + n);
                    const float2 o = *p;
                    *p = make_float2(fmaf(gs, x, o.x), fmaf(gs, y, o.y));
                } else if (a.part) {
                    *reinterpret_cast<float2 *>(a.part + ((int64_t)blockIdx.z * a.rows + m) * a.d + n) =
                        make_float2(x, y);
                } else {
                    *reinterpret_cast<__nv_bfloat162 *>(a.dH + m * a.d + n) = __floats2bfloat162_rn(gs * x, gs * y);
                }
            }
    }
#else
    __trap(); /* only the sm_90a build has wgmma */
#endif
}

/* dH = gscale * sum over the slices of the partial sums, in slice order; 8 values per thread */
__global__ void dh_slices_kernel(bf16 *dH, const float *part, int slices, int64_t n8, const float *gscale) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n8) return;
    float s[8] = {};
    for (int z = 0; z < slices; z++) {
        const float4 x = reinterpret_cast<const float4 *>(part + (int64_t)z * n8 * 8)[2 * i];
        const float4 y = reinterpret_cast<const float4 *>(part + (int64_t)z * n8 * 8)[2 * i + 1];
        s[0] += x.x, s[1] += x.y, s[2] += x.z, s[3] += x.w, s[4] += y.x, s[5] += y.y, s[6] += y.z, s[7] += y.w;
    }
    const float gs = *gscale;
    __nv_bfloat162 o[4];
#pragma unroll
    for (int k = 0; k < 4; k++) o[k] = __floats2bfloat162_rn(gs * s[2 * k], gs * s[2 * k + 1]);
    reinterpret_cast<int4 *>(dH)[i] = *reinterpret_cast<int4 *>(o);
}

/* ---- host side ---------------------------------------------------------------------------- */

static int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

static void set_smem_limits(void) {
    static int done;
    if (done) return;
    CUDA_CHECK(cudaFuncSetAttribute(grad_kernel<GRAD_DH>, cudaFuncAttributeMaxDynamicSharedMemorySize, G_SMEM));
    CUDA_CHECK(cudaFuncSetAttribute(grad_kernel<GRAD_DW>, cudaFuncAttributeMaxDynamicSharedMemorySize, G_SMEM));
    done = 1;
}

int outl_grad_slices(int64_t rows, int d, int sms, int max_slices) {
    /* the slice count whose last wave of CTAs (one per SM) is fullest, fewest slices on ties */
    const int64_t tiles = cdiv(rows, G_M) * cdiv(d, G_N);
    int best = 1;
    double best_eff = 0.0;
    for (int s = 1; s <= max_slices; s++) {
        const int64_t ctas = tiles * s;
        const double eff = (double)ctas / (double)(cdiv(ctas, sms) * sms);
        if (eff > best_eff + 0.02) best_eff = eff, best = s;
    }
    return best;
}

void outl_fused_exp_grads(OutputLayer *L, const OutputLayerArgs *a, int64_t r0, int64_t nr, cudaStream_t stream) {
    const int64_t V = L->V, ld = L->fs.exp_ld;
    const int d = L->d;
    set_smem_limits();
    GradArgs g = {};
    g.rows = nr, g.V = V, g.d = d;
    g.scale = L->ex_scale, g.tval = L->ex_tval, g.targets = a->targets + r0;
    g.gscale = L->scalars + OUTL_SCALE;
    const bf16 *H = (const bf16 *)a->H + r0 * d;
    const int slices = outl_grad_slices(nr, d, L->sms, L->fs.exp_slices);
    g.slice_cols = cdiv(cdiv(V, slices), G_TILE) * G_TILE;
    g.part = slices > 1 ? L->dh_part : NULL;
    g.dH = (bf16 *)a->dH + r0 * d;
    g.dW = a->dW;
    const CUtensorMap e_dh = outl_tensor_map(L->ex, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, V, nr, ld * 2, 64, G_M);
    const CUtensorMap e_dw = outl_tensor_map(L->ex, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, V, nr, ld * 2, 64, 64);
    const CUtensorMap w = outl_tensor_map(a->W, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, d, V, (int64_t)d * 2, 64, 64);
    const CUtensorMap h = outl_tensor_map(H, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, d, nr, (int64_t)d * 2, 64, 64);
    const dim3 dh_grid((unsigned)cdiv(d, G_N), (unsigned)cdiv(nr, G_M), (unsigned)cdiv(V, g.slice_cols));
    grad_kernel<GRAD_DH><<<dh_grid, G_THREADS, G_SMEM, stream>>>(g, e_dh, w);
    CUDA_CHECK(cudaGetLastError());
    if (g.part) {
        const int64_t n8 = nr * d / 8;
        dh_slices_kernel<<<(unsigned)cdiv(n8, 256), 256, 0, stream>>>(g.dH, g.part, (int)dh_grid.z, n8, g.gscale);
        CUDA_CHECK(cudaGetLastError());
    }
    const dim3 dw_grid((unsigned)cdiv(d, G_N), (unsigned)cdiv(V, G_M));
    grad_kernel<GRAD_DW><<<dw_grid, G_THREADS, G_SMEM, stream>>>(g, e_dw, h);
    CUDA_CHECK(cudaGetLastError());
}
