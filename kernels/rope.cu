/* kernels/rope.cu - rotary position embeddings on the packed qkv rows, with QK-norm fused in front
 * (Qwen3, Gemma 3), forward and backward.
 *
 * Shapes: qkv [N = B·T, (NH + 2·NKV)·hd]: per token the NH query heads, the NKV key heads, the NKV
 * value heads, hd contiguous values each; cos, sin [T, hd/2] fp32 (rope_cos_sin of
 * model/cpu/llama_layers_cpu.h, uploaded once), for positions 0..T-1.
 * Forward, per query or key head x (value heads pass through):
 *   [QK-norm] y = x·rstd·g, rstd = 1/sqrt(mean(x²) + eps) fp32 [N, NH + NKV], g = q_norm or k_norm
 *             (1 + w when one_plus_w);
 *   RoPE, transformers' rotate-half pairs (i, i + hd/2):
 *             out[i] = y[i]·cos − y[i + hd/2]·sin,  out[i + hd/2] = y[i + hd/2]·cos + y[i]·sin.
 *   fp32 throughout, one bf16 rounding of out.
 * Backward: dy = the inverse rotation of dout; with QK-norm dx = rstd·(g·dy − norm·mean(g·dy·norm)),
 *   norm = x·rstd, and dq_norm / dk_norm += Σ norm·dy over the query / key heads of every token.
 * launch: a warp per (token, head); lane owns the pairs i = lane + 32·p, p < ROPE_PAIRS, so hd ≤ 256.
 *   The backward runs a fixed grid (ROPE_BWD_BLOCKS blocks of ROPE_BWD_WARPS warps, grid-stride),
 *   each warp keeping its norm-weight sums in registers; the block adds its warps in order and
 *   add_partial_sums the blocks in order: deterministic, no atomics.
 * FLOPs ~6 per rotated element (+5 with QK-norm); bytes N·(NH + 2·NKV)·hd·2·2 each way (memory
 * bound; in place, the value heads are not moved). */
#include <stdio.h>
#include <stdlib.h>

#include "kernels/kernel_util.cuh"
#include "kernels/kernels.h"

#define ROPE_PAIRS 4 /* pairs per lane: hd/2 ≤ 32·4 */
#define ROPE_WARPS 4
#define ROPE_BWD_BLOCKS 264 /* fixed grid: partial-sum order never depends on the device */
#define ROPE_BWD_WARPS 8

__device__ __forceinline__ float rope_gain(const bf16 *w, int i, int one_plus_w) {
    float g = __bfloat162float(w[i]);
    return one_plus_w ? 1.0f + g : g;
}

/* out may be inp (in place): each lane reads its own pairs before writing them. rstd is written
 * only with QK-norm (q_norm != NULL). */
__global__ void __launch_bounds__(ROPE_WARPS * 32)
    rope_forward_kernel(bf16 *out, float *rstd, const bf16 *inp, const bf16 *q_norm, const bf16 *k_norm,
                        const float *cos_t, const float *sin_t, RopeShape s) {
    int lane = threadIdx.x % 32;
    const int heads = s.NH + 2 * s.NKV, H = s.hd / 2;
    int64_t task = (int64_t)blockIdx.x * ROPE_WARPS + threadIdx.x / 32;
    if (task >= (int64_t)s.B * s.T * heads) return;
    int64_t n = task / heads;
    int h = (int)(task % heads), t = (int)(n % s.T);
    size_t base = (size_t)n * heads * s.hd + (size_t)h * s.hd;
    if (h >= s.NH + s.NKV) { /* a value head */
        if (out != inp)
            for (int i = lane; i < s.hd; i += 32) out[base + i] = inp[base + i];
        return;
    }
    float x1[ROPE_PAIRS], x2[ROPE_PAIRS];
#pragma unroll
    for (int p = 0; p < ROPE_PAIRS; p++) {
        int i = lane + 32 * p;
        x1[p] = i < H ? __bfloat162float(inp[base + i]) : 0.0f;
        x2[p] = i < H ? __bfloat162float(inp[base + i + H]) : 0.0f;
    }
    if (q_norm) {
        const bf16 *w = h < s.NH ? q_norm : k_norm;
        float ss = 0.0f;
#pragma unroll
        for (int p = 0; p < ROPE_PAIRS; p++) ss += x1[p] * x1[p] + x2[p] * x2[p];
        float r = rsqrtf(warp_sum(ss) / (float)s.hd + s.eps);
#pragma unroll
        for (int p = 0; p < ROPE_PAIRS; p++) {
            int i = lane + 32 * p;
            if (i >= H) continue;
            x1[p] = (x1[p] * r) * rope_gain(w, i, s.one_plus_w);
            x2[p] = (x2[p] * r) * rope_gain(w, i + H, s.one_plus_w);
        }
        if (lane == 0) rstd[(size_t)n * (s.NH + s.NKV) + h] = r;
    }
#pragma unroll
    for (int p = 0; p < ROPE_PAIRS; p++) {
        int i = lane + 32 * p;
        if (i >= H) continue;
        float c = cos_t[(size_t)t * H + i], sn = sin_t[(size_t)t * H + i];
        out[base + i] = __float2bfloat16(x1[p] * c - x2[p] * sn);
        out[base + i + H] = __float2bfloat16(x2[p] * c + x1[p] * sn);
    }
}

/* dinp may be dout (in place). Without QK-norm inp, rstd and partial are not read or written.
 * partial: per block, dq_norm sums [hd] then dk_norm sums [hd]. */
__global__ void __launch_bounds__(ROPE_BWD_WARPS * 32)
    rope_backward_kernel(bf16 *dinp, float *partial, const bf16 *dout, const bf16 *inp, const bf16 *q_norm,
                         const bf16 *k_norm, const float *rstd, const float *cos_t, const float *sin_t,
                         RopeShape s) {
    __shared__ float red[ROPE_BWD_WARPS][2][2 * 32 * ROPE_PAIRS];
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int heads = s.NH + 2 * s.NKV, H = s.hd / 2;
    const int64_t tasks = (int64_t)s.B * s.T * heads;
    float dq1[ROPE_PAIRS] = {0}, dq2[ROPE_PAIRS] = {0}, dk1[ROPE_PAIRS] = {0}, dk2[ROPE_PAIRS] = {0};
    for (int64_t task = (int64_t)blockIdx.x * ROPE_BWD_WARPS + warp; task < tasks;
         task += (int64_t)gridDim.x * ROPE_BWD_WARPS) {
        int64_t n = task / heads;
        int h = (int)(task % heads), t = (int)(n % s.T);
        size_t base = (size_t)n * heads * s.hd + (size_t)h * s.hd;
        if (h >= s.NH + s.NKV) {
            if (dinp != dout)
                for (int i = lane; i < s.hd; i += 32) dinp[base + i] = dout[base + i];
            continue;
        }
        float dy1[ROPE_PAIRS], dy2[ROPE_PAIRS];
#pragma unroll
        for (int p = 0; p < ROPE_PAIRS; p++) {
            int i = lane + 32 * p;
            dy1[p] = dy2[p] = 0.0f;
            if (i >= H) continue;
            float d1 = __bfloat162float(dout[base + i]), d2 = __bfloat162float(dout[base + i + H]);
            float c = cos_t[(size_t)t * H + i], sn = sin_t[(size_t)t * H + i];
            dy1[p] = d1 * c + d2 * sn; /* the transpose of the rotation: rotate by −angle */
            dy2[p] = d2 * c - d1 * sn;
        }
        if (q_norm) {
            const bool is_q = h < s.NH;
            const bf16 *w = is_q ? q_norm : k_norm;
            float r = rstd[(size_t)n * (s.NH + s.NKV) + h];
            float n1[ROPE_PAIRS], n2[ROPE_PAIRS], dot = 0.0f;
#pragma unroll
            for (int p = 0; p < ROPE_PAIRS; p++) {
                int i = lane + 32 * p;
                n1[p] = n2[p] = 0.0f;
                if (i >= H) continue;
                n1[p] = __bfloat162float(inp[base + i]) * r;
                n2[p] = __bfloat162float(inp[base + i + H]) * r;
                dot += rope_gain(w, i, s.one_plus_w) * dy1[p] * n1[p] + rope_gain(w, i + H, s.one_plus_w) * dy2[p] * n2[p];
            }
            float mean = warp_sum(dot) / (float)s.hd;
#pragma unroll
            for (int p = 0; p < ROPE_PAIRS; p++) {
                int i = lane + 32 * p;
                if (i >= H) continue;
                if (is_q) {
                    dq1[p] += n1[p] * dy1[p];
                    dq2[p] += n2[p] * dy2[p];
                } else {
                    dk1[p] += n1[p] * dy1[p];
                    dk2[p] += n2[p] * dy2[p];
                }
                dy1[p] = r * (rope_gain(w, i, s.one_plus_w) * dy1[p] - n1[p] * mean);
                dy2[p] = r * (rope_gain(w, i + H, s.one_plus_w) * dy2[p] - n2[p] * mean);
            }
        }
#pragma unroll
        for (int p = 0; p < ROPE_PAIRS; p++) {
            int i = lane + 32 * p;
            if (i >= H) continue;
            dinp[base + i] = __float2bfloat16(dy1[p]);
            dinp[base + i + H] = __float2bfloat16(dy2[p]);
        }
    }
    if (!q_norm) return;
#pragma unroll
    for (int p = 0; p < ROPE_PAIRS; p++) {
        int i = lane + 32 * p;
        if (i >= H) continue;
        red[warp][0][i] = dq1[p];
        red[warp][0][i + H] = dq2[p];
        red[warp][1][i] = dk1[p];
        red[warp][1][i + H] = dk2[p];
    }
    /* Every warp's sums are in shared memory before any column is summed across warps. */
    __syncthreads();
    for (int c = threadIdx.x; c < 2 * s.hd; c += blockDim.x) {
        int which = c / s.hd, col = c % s.hd;
        float sum = 0.0f;
        for (int w = 0; w < ROPE_BWD_WARPS; w++) sum += red[w][which][col];
        partial[(size_t)blockIdx.x * 2 * s.hd + c] = sum;
    }
}

static void rope_check_shape(const RopeShape *s) {
    if (s->hd % 2 != 0 || s->hd > 64 * ROPE_PAIRS || s->hd < 2) {
        fprintf(stderr, "error: RoPE needs an even head_dim from 2 to %d, got %d (choose another head_dim)\n",
                64 * ROPE_PAIRS, s->hd);
        exit(1);
    }
}

extern "C" void rope_forward(kbf16 *out, float *rstd, const kbf16 *inp, const kbf16 *q_norm, const kbf16 *k_norm,
                             const float *cos_t, const float *sin_t, const RopeShape *s, cudaStream_t stream) {
    rope_check_shape(s);
    int64_t tasks = (int64_t)s->B * s->T * (s->NH + 2 * s->NKV);
    if (tasks == 0) return;
    rope_forward_kernel<<<ceil_div(tasks, ROPE_WARPS), ROPE_WARPS * 32, 0, stream>>>(out, rstd, inp, q_norm, k_norm,
                                                                                      cos_t, sin_t, *s);
    CUDA_CHECK(cudaGetLastError());
}

extern "C" size_t rope_backward_scratch_bytes(const RopeShape *s) {
    return (size_t)ROPE_BWD_BLOCKS * 2 * s->hd * sizeof(float);
}

extern "C" void rope_backward(kbf16 *dinp, float *dq_norm, float *dk_norm, void *scratch, const kbf16 *dout,
                              const kbf16 *inp, const kbf16 *q_norm, const kbf16 *k_norm, const float *rstd,
                              const float *cos_t, const float *sin_t, const RopeShape *s, cudaStream_t stream) {
    rope_check_shape(s);
    float *partial = (float *)scratch;
    rope_backward_kernel<<<ROPE_BWD_BLOCKS, ROPE_BWD_WARPS * 32, 0, stream>>>(dinp, partial, dout, inp, q_norm,
                                                                             k_norm, rstd, cos_t, sin_t, *s);
    CUDA_CHECK(cudaGetLastError());
    if (q_norm)
        add_partial_sums(PartialSumOutputs{{dq_norm, dk_norm, NULL}}, 2, partial, ROPE_BWD_BLOCKS, (size_t)2 * s->hd,
                         s->hd, stream);
}
