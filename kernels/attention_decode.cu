/* kernels/attention_decode.cu - one query row of causal attention against the cached keys and
 * values: sampling's decode step, one token at a time.
 *
 * Shapes: qkv [t+1, 3C] rows of one sequence (q, k, v each C wide, head h at columns h·HS..), the
 * keys and values of rows 0..t being the cache; out [C], row t's output. HS = C/NH, a multiple of 32
 * up to 256.
 * Math: as attention_forward for its last row: S = scale·q·kᵀ (scale = 1/√HS) over keys 0..t,
 *   P = softmax(S) in fp32 (base 2, as attention.cu), out = P·v rounded once to bf16.
 * Launch: one block per head, DECODE_WARPS warps; warp w takes keys w, w + DECODE_WARPS, ... with
 *   an online softmax (running max, sum and P·v in registers, HS/32 values per lane), then the
 *   warps' partial states merge in shared memory. No buffer depends on t.
 * FLOPs 4·(t+1)·C; bytes 2·(t+1)·C·2 (K and V of the row's head read once) + 2·C·2 for q and out:
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
    attention_decode_kernel(bf16 *out, const bf16 *qkv, int t, int C, int HS, float scale2) {
    const int h = blockIdx.x, warp = threadIdx.x / 32, lane = threadIdx.x % 32, per_lane = HS / 32;
    const size_t row = 3 * (size_t)C;
    const bf16 *q = qkv + (size_t)t * row + (size_t)h * HS;
    float qv[DECODE_PER_LANE], acc[DECODE_PER_LANE];
#pragma unroll
    for (int j = 0; j < DECODE_PER_LANE; j++) {
        qv[j] = j < per_lane ? __bfloat162float(q[lane + 32 * j]) * scale2 : 0.0f;
        acc[j] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f; /* running max of the base-2 logits, and Σ exp2(s2 − m) */
    for (int key = warp; key <= t; key += DECODE_WARPS) {
        const bf16 *k = qkv + (size_t)key * row + C + (size_t)h * HS, *v = k + C;
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
            if (warp_sum_p[w] == 0.0f) continue; /* a warp that had no key (t + 1 < DECODE_WARPS) */
            const float c = exp2f(warp_max[w] - M);
            L += warp_sum_p[w] * c;
            o += warp_acc[w][i] * c;
        }
        out[(size_t)h * HS + i] = __float2bfloat16(o / L);
    }
}

extern "C" void attention_decode(kbf16 *out, const kbf16 *qkv, int t, const AttentionShape *s,
                                 cudaStream_t stream) {
    check_attention_shape_mha(s);
    const int NH = s->NH, C = NH * s->HS;
    if (NH <= 0 || C % NH != 0 || (C / NH) % 32 != 0 || C / NH > DECODE_MAX_HS || t < 0) {
        fprintf(stderr, "error: attention_decode supports head sizes that are multiples of 32 up to %d and t >= 0, "
                        "got C=%d NH=%d t=%d\n", DECODE_MAX_HS, C, NH, t);
        exit(1);
    }
    const int HS = C / NH;
    attention_decode_kernel<<<NH, DECODE_WARPS * 32, 0, stream>>>(out, qkv, t, C, HS, LOG2E / sqrtf((float)HS));
    CUDA_CHECK(cudaGetLastError());
}
