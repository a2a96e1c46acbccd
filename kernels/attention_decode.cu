/* kernels/attention_decode.cu - one query row of causal attention against the cached keys and
 * values: sampling's decode step, one token at a time.
 *
 * Shapes: qkv [t+1, (NH + 2·NKV)·HS] rows of one sequence (the forward's packed layout: query heads,
 * then key heads, then value heads; query head h reads key/value head h / (NH/NKV)), the keys and
 * values of rows 0..t being the cache (the values read from v's rows when v is given: the same layout);
 * out [NH·HS], row t's output. HS a multiple of 32 up to 256.
 * Math: as attention_forward for its last row: S = scale·q·kᵀ over keys max(0, t − W + 1)..t
 *   (all of 0..t when the window W is 0), P = softmax(S) in fp32 (base 2, as attention.cu),
 *   out = P·v rounded once to bf16.
 * Launch: one block per head, DECODE_WARPS warps; warp w takes keys w, w + DECODE_WARPS, ... with
 *   an online softmax (running max, sum and P·v in registers, HS/32 values per lane), then the
 *   warps' partial states merge in shared memory. No buffer depends on t.
 * FLOPs 4·(t+1)·NH·HS; bytes 2·(t+1)·NKV·HS·2 (K and V of each KV head, read by the blocks of its
 *   group, from L2 after the first) + 2·NH·HS·2 for q and out:
 *   memory bound, and at one block per head the GPU is far from full; the matmuls around it
 *   dominate a decode step. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels/device_util.cuh"
#include "kernels/kernel_util.cuh"
#include "kernels/kernels.h"

#define DECODE_WARPS 8
#define DECODE_MAX_HS 256
#define DECODE_PER_LANE (DECODE_MAX_HS / 32)

__global__ void __launch_bounds__(DECODE_WARPS * 32)
    attention_decode_kernel(bf16 *out, const bf16 *qkv, const bf16 *vsrc, int t, int key0, int NH, int NKV, int HS,
                            float scale2) {
    const int h = blockIdx.x, warp = threadIdx.x / 32, lane = threadIdx.x % 32, per_lane = HS / 32;
    const size_t row = (size_t)(NH + 2 * NKV) * HS;
    const size_t kcol = (size_t)(NH + h / (NH / NKV)) * HS, vcol = kcol + (size_t)NKV * HS;
    const bf16 *q = qkv + (size_t)t * row + (size_t)h * HS;
    float qv[DECODE_PER_LANE], acc[DECODE_PER_LANE];
#pragma unroll
    for (int j = 0; j < DECODE_PER_LANE; j++) {
        qv[j] = j < per_lane ? __bfloat162float(q[lane + 32 * j]) * scale2 : 0.0f;
        acc[j] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f; /* running max of the base-2 logits, and Σ exp2(s2 − m) */
    for (int key = key0 + warp; key <= t; key += DECODE_WARPS) {
        const bf16 *k = qkv + (size_t)key * row + kcol, *v = vsrc + (size_t)key * row + vcol;
        float s2 = 0.0f;
#pragma unroll
        for (int j = 0; j < DECODE_PER_LANE; j++)
            if (j < per_lane) s2 += qv[j] * __bfloat162float(k[lane + 32 * j]);
        s2 = warp_sum(s2);
        const float m_new = fmaxf(m, s2), rescale = exp2f(m - m_new), p = exp2f(s2 - m_new);
        l = l * rescale + p;
#pragma unroll
        for (int j = 0; j < DECODE_PER_LANE; j++)
            if (j < per_lane) acc[j] = acc[j] * rescale + p * __bfloat162float(v[lane + 32 * j]);
        m = m_new;
    }
    __shared__ float warp_max[DECODE_WARPS], warp_sum_p[DECODE_WARPS], warp_acc[DECODE_WARPS][DECODE_MAX_HS];
    if (lane == 0) warp_max[warp] = m, warp_sum_p[warp] = l;
#pragma unroll
    for (int j = 0; j < DECODE_PER_LANE; j++)
        if (j < per_lane) warp_acc[warp][lane + 32 * j] = acc[j];
    /* every warp's partial state is in shared memory before any thread merges them */
    __syncthreads();
    float M = -INFINITY;
    for (int w = 0; w < DECODE_WARPS; w++) M = fmaxf(M, warp_max[w]);
    for (int i = threadIdx.x; i < HS; i += blockDim.x) {
        float L = 0.0f, o = 0.0f;
        for (int w = 0; w < DECODE_WARPS; w++) {
            if (warp_sum_p[w] == 0.0f) continue; /* a warp that had no key (fewer keys than warps) */
            const float c = exp2f(warp_max[w] - M);
            L += warp_sum_p[w] * c;
            o += warp_acc[w][i] * c;
        }
        out[(size_t)h * HS + i] = __float2bfloat16(o / L);
    }
}

extern "C" void attention_decode(kbf16 *out, const kbf16 *qkv, const kbf16 *v, int t, const AttentionShape *s,
                                 cudaStream_t stream) {
    const int NH = s->NH, NKV = s->NKV, HS = s->HS;
    if (NH <= 0 || NKV <= 0 || NH % NKV != 0 || HS <= 0 || HS % 32 != 0 || HS > DECODE_MAX_HS || t < 0 ||
        s->window < 0 || !(s->scale > 0.0f)) {
        fprintf(stderr,
                "error: attention_decode needs NH a multiple of NKV, a head size that is a multiple of 32 up to %d, "
                "t >= 0, window >= 0 and scale > 0, got NH=%d NKV=%d HS=%d t=%d window=%d scale=%g (fix the model's "
                "heads or head size)\n",
                DECODE_MAX_HS, NH, NKV, HS, t, s->window, (double)s->scale);
        exit(1);
    }
    const int key0 = s->window > 0 && t - s->window + 1 > 0 ? t - s->window + 1 : 0;
    attention_decode_kernel<<<NH, DECODE_WARPS * 32, 0, stream>>>(out, qkv, v ? v : qkv, t, key0, NH, NKV, HS, LOG2E * s->scale);
    CUDA_CHECK(cudaGetLastError());
}
