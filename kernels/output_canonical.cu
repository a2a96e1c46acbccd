/* kernels/output_canonical.cu - the canonical output layer, as llm.c does it: the baseline the fused
 * layer is measured against.
 *
 *   logits[N x V] (bf16, row stride Vp) = H[N x d] . W[V x d]^T      cuBLASLt, fp32 accumulation
 *   per row: lse = log sum_v exp(logit_v) (fp32), loss = lse - logit_target,
 *            dlogits = softmax - onehot written in place of the logits (fp32 math, p - 1 at the
 *            target in fp32, one rounding to bf16); ignored rows (target -1) get 0
 *   dH[N x d] (bf16, =) = scale dlogits . W                           cuBLASLt, alpha = scale
 *   dW[V x d] (fp32, +=) += scale dlogits^T . H                       cuBLASLt, beta = 1
 * (scale = grad_scale / count or grad_scale, applied in fp32 as the GEMMs' alpha; see OUTL_SCALE)
 * Only columns [0, V) are computed or read: the padded columns Vp - V are never touched.
 * Loss options (kernels/output_kind.h) act in the loss kernel alone: each logit is capped as it is
 * read, and dlogits is the objective's gradient, the cap's slope 1 - tanh^2 included.
 *
 * Launch: loss kernel one block of 1024 threads per row, two passes over the row (online max/sum,
 * then the gradient), 16-byte loads.
 * Work: 3G FLOPs for forward+backward, G = 2 N V d; bytes: the logits are written once by the
 * GEMM, read twice and written once by the loss kernel, and read twice more by the two GEMMs:
 * about 12 bytes per logit (N V x 12) on top of the GEMMs' own traffic. Memory: N x Vp x 2 bytes.
 * The bf16 logits cost accuracy as well: a logit near 10 is stored to +-0.03, so the loss and the
 * gradients are good to about 1e-3, not to fp32 rounding (the fused layer keeps logits in fp32). */
#include <math.h>

#include "kernels/cuda_check.h"
#include "kernels/device_util.cuh"
#include "kernels/output_layer_internal.h"

#define LOSS_THREADS 1024

/* Combine two (max, sum of exp(x - max)) pairs; -inf maxima (no elements yet) contribute nothing. */
__device__ __forceinline__ void merge_max_sum(float &m, float &s, float m2, float s2) {
    float mn = fmaxf(m, m2);
    float mu = mn == -INFINITY ? 0.0f : mn;
    s = s * exp2f((m - mu) * LOG2E) + s2 * exp2f((m2 - mu) * LOG2E);
    m = mn;
}

__global__ void __launch_bounds__(LOSS_THREADS) canonical_loss_kernel(bf16 *logits, int64_t ld, int64_t V,
                                                                      const int32_t *targets, const float *scalars,
                                                                      float *row_loss, float *lse_out,
                                                                      float *lse_user, int write_dlogits,
                                                                      const OutputLossOptions opt, float *row_obj) {
    const int64_t row = blockIdx.x;
    bf16 *z = logits + row * ld;
    const int64_t nvec = V / 8; /* full 16-byte vectors; the row start is 256-byte aligned (ld % 128 == 0) */

    /* pass 1: per-thread online max and sum of exponentials, fp32 */
    const float cap = opt.logit_softcap;
    float m = -INFINITY, s = 0.0f, zs = 0.0f; /* zs: the sum of the (capped) logits, for smoothing */
    for (int64_t i = threadIdx.x; i < nvec; i += blockDim.x) {
        int4 raw = *reinterpret_cast<const int4 *>(z + i * 8);
        const bf16 *v = reinterpret_cast<const bf16 *>(&raw);
        float x[8], vmax = -INFINITY;
#pragma unroll
        for (int j = 0; j < 8; j++) x[j] = outl_cap(__bfloat162float(v[j]), cap), vmax = fmaxf(vmax, x[j]), zs += x[j];
        float mn = fmaxf(m, vmax);
        float acc = s * exp2f((m - mn) * LOG2E);
#pragma unroll
        for (int j = 0; j < 8; j++) acc += exp2f((x[j] - mn) * LOG2E);
        m = mn, s = acc;
    }
    for (int64_t i = nvec * 8 + threadIdx.x; i < V; i += blockDim.x) {
        const float x = outl_cap(__bfloat162float(z[i]), cap);
        merge_max_sum(m, s, x, 1.0f);
        zs += x;
    }

    /* block reduction in a fixed order: warp butterflies, then warp 0 over the warps */
    __shared__ float sm[32], ss[32], szs[32];
    __shared__ float row_lse;
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
        float m2 = __shfl_xor_sync(0xffffffffu, m, off), s2 = __shfl_xor_sync(0xffffffffu, s, off);
        merge_max_sum(m, s, m2, s2);
        zs += __shfl_xor_sync(0xffffffffu, zs, off);
    }
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (lane == 0) sm[warp] = m, ss[warp] = s, szs[warp] = zs;
    __syncthreads();
    if (warp == 0) {
        const int nw = blockDim.x >> 5;
        m = lane < nw ? sm[lane] : -INFINITY;
        s = lane < nw ? ss[lane] : 0.0f;
        zs = lane < nw ? szs[lane] : 0.0f;
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) {
            float m2 = __shfl_xor_sync(0xffffffffu, m, off), s2 = __shfl_xor_sync(0xffffffffu, s, off);
            merge_max_sum(m, s, m2, s2);
            zs += __shfl_xor_sync(0xffffffffu, zs, off);
        }
        if (lane == 0) {
            float lse = m + logf(s);
            int t = targets[row];
            const float ce = t == -1 ? 0.0f : lse - outl_cap(__bfloat162float(z[t]), cap);
            row_loss[row] = ce;
            row_obj[row] = t == -1 ? 0.0f : outl_objective(opt, ce, lse, zs, V);
            lse_out[row] = lse;
            if (lse_user) lse_user[row] = lse;
            row_lse = lse;
        }
    }
    if (!write_dlogits) return;
    /* every thread must read z[t] (lane 0 above) before any thread overwrites it below */
    __syncthreads();

    /* pass 2: dlogits = p - onehot in place; p - 1 at the target before rounding */
    const int t = targets[row];
    const float scale = t == -1 ? 0.0f : 1.0f;
    const float lse2 = row_lse * LOG2E;
    if (cap > 0.0f || opt.z_loss != 0.0f || opt.label_smoothing != 0.0f) {
        /* the objective's gradient, (p ps - [v = t] keep - uniform) times the cap's slope, in fp32 */
        const float ps = outl_p_scale(opt, row_lse), keep = 1.0f - opt.label_smoothing;
        const float uniform = opt.label_smoothing / (float)V;
        for (int64_t i = threadIdx.x; i < V; i += blockDim.x) {
            const float x = __bfloat162float(z[i]);
            float slope = 1.0f;
            if (cap > 0.0f) {
                const float c = coshf(x / cap);
                slope = 1.0f / (c * c);
            }
            const float p = exp2f(fmaf(outl_cap(x, cap), LOG2E, -lse2));
            z[i] = __float2bfloat16((p * ps - (i == t ? keep : 0.0f) - uniform) * slope * scale);
        }
        return;
    }
    for (int64_t i = threadIdx.x; i < nvec; i += blockDim.x) {
        int4 raw = *reinterpret_cast<const int4 *>(z + i * 8);
        bf16 *v = reinterpret_cast<bf16 *>(&raw);
#pragma unroll
        for (int j = 0; j < 8; j++) {
            float p = exp2f(fmaf(__bfloat162float(v[j]), LOG2E, -lse2));
            v[j] = __float2bfloat16((p - (i * 8 + j == t ? 1.0f : 0.0f)) * scale);
        }
        *reinterpret_cast<int4 *>(z + i * 8) = raw;
    }
    for (int64_t i = nvec * 8 + threadIdx.x; i < V; i += blockDim.x) {
        float p = exp2f(fmaf(__bfloat162float(z[i]), LOG2E, -lse2));
        z[i] = __float2bfloat16((p - (i == t ? 1.0f : 0.0f)) * scale);
    }
}

void outl_canonical_run(OutputLayer *L, const OutputLayerArgs *a, float *row_loss, int backward, cudaStream_t stream) {
    const int64_t n = a->N, V = L->V, Vp = L->Vp, d = L->d;
    const float *s = L->scalars;
    /* column-major view: logits^T [V x n] (ld Vp) = (W stored d x V)^T . (H stored d x n) */
    outl_gemm(L, CUBLAS_OP_T, CUBLAS_OP_N, V, n, d, a->W, d, a->H, d, L->logits, CUDA_R_16BF, Vp, s + OUTL_ONE,
              s + OUTL_ZERO, stream);
    canonical_loss_kernel<<<(unsigned)n, LOSS_THREADS, 0, stream>>>(L->logits, Vp, V, a->targets, s, row_loss, L->lse,
                                                                     a->row_lse, backward, a->options, L->row_obj);
    CUDA_CHECK(cudaGetLastError());
    if (!backward) return;
    /* dH^T [d x n] = (W stored d x V) . (dlogits stored V x n, ld Vp)       (=, bf16 out) */
    outl_gemm(L, CUBLAS_OP_N, CUBLAS_OP_N, d, n, V, a->W, d, L->logits, Vp, a->dH, CUDA_R_16BF, d, s + OUTL_SCALE,
              s + OUTL_ZERO, stream);
    /* dW^T [d x V] += (H stored d x n) . (dlogits stored V x n)^T           (+=, fp32) */
    outl_gemm(L, CUBLAS_OP_N, CUBLAS_OP_T, d, V, n, a->H, d, L->logits, Vp, a->dW, CUDA_R_32F, d, s + OUTL_SCALE,
              s + OUTL_ONE, stream);
}
