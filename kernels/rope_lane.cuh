/* kernels/rope_lane.cuh - one lane's share of QK-norm and RoPE's rotate-half pairs (i, i + H), H =
 * hd/2: the lane holds V adjacent pairs a slot, a group of g lanes (a power of two, within a warp) a
 * head. kernels/rope.cu's pass and kernels/qkv_rope.cu's epilogue both run them, so that the two
 * give the same bits. */
#ifndef FUSEDGPT_ROPE_LANE_CUH
#define FUSEDGPT_ROPE_LANE_CUH

#include "kernels/kernel_util.cuh"

__device__ __forceinline__ float rope_gain(float w, int one_plus_w) { return one_plus_w ? 1.0f + w : w; }

/* V adjacent bf16 / fp32 values as floats. */
template <int V>
__device__ __forceinline__ void load_v(float (&f)[V], const bf16 *p) {
    if constexpr (V == 8)
        bf16x8_to_float(load_bf16x8(p), f);
    else
        f[0] = __bfloat162float(*p);
}

template <int V>
__device__ __forceinline__ void load_v(float (&f)[V], const float *p) {
    if constexpr (V == 8) {
        float4 a = __ldg(reinterpret_cast<const float4 *>(p)), b = __ldg(reinterpret_cast<const float4 *>(p) + 1);
        f[0] = a.x, f[1] = a.y, f[2] = a.z, f[3] = a.w, f[4] = b.x, f[5] = b.y, f[6] = b.z, f[7] = b.w;
    } else {
        f[0] = __ldg(p);
    }
}

template <int V>
__device__ __forceinline__ void store_v(bf16 *p, const float (&f)[V]) {
    if constexpr (V == 8)
        store_bf16x8(p, float_to_bf16x8(f));
    else
        *p = __float2bfloat16(f[0]);
}

/* Sum over the g lanes of a group (g a power of two): every lane of the warp must call it. */
__device__ __forceinline__ float group_sum(float x, int g) {
    for (int o = g / 2; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}

/* QK-norm's 1/sqrt(mean(x²) + eps) of a head of hd values held by a group of g lanes, from each
 * lane's slots (zeros where it holds none); every lane of the warp must call it. */
template <int V, int PMAX>
__device__ __forceinline__ float rope_group_rstd(const float (&x1)[PMAX][V], const float (&x2)[PMAX][V], int g, int hd,
                                                 float eps) {
    float ss = 0.0f;
#pragma unroll
    for (int p = 0; p < PMAX; p++)
#pragma unroll
        for (int v = 0; v < V; v++) ss += x1[p][v] * x1[p][v] + x2[p][v] * x2[p][v];
    return rsqrtf(group_sum(ss, g) / (float)hd + eps);
}

/* a slot's pairs times rstd r and the norm's gains g1, g2 (columns i.. and i + H..) */
template <int V>
__device__ __forceinline__ void rope_scale_pairs(float (&x1)[V], float (&x2)[V], float r, const float (&g1)[V],
                                                 const float (&g2)[V]) {
#pragma unroll
    for (int v = 0; v < V; v++) {
        x1[v] = (x1[v] * r) * g1[v];
        x2[v] = (x2[v] * r) * g2[v];
    }
}

/* the norm's gains w (1 + w when one_plus_w) of columns i.. and i + H.. */
template <int V>
__device__ __forceinline__ void rope_load_gains(float (&g1)[V], float (&g2)[V], const bf16 *w, int i, int H,
                                                int one_plus_w) {
    load_v<V>(g1, w + i);
    load_v<V>(g2, w + i + H);
#pragma unroll
    for (int v = 0; v < V; v++) g1[v] = rope_gain(g1[v], one_plus_w), g2[v] = rope_gain(g2[v], one_plus_w);
}

/* a slot's pairs (columns i.. and i + H..) times rstd r and the norm's gain w */
template <int V>
__device__ __forceinline__ void rope_norm_pairs(float (&x1)[V], float (&x2)[V], float r, const bf16 *w, int i, int H,
                                                int one_plus_w) {
    float g1[V], g2[V];
    rope_load_gains<V>(g1, g2, w, i, H, one_plus_w);
    rope_scale_pairs<V>(x1, x2, r, g1, g2);
}

/* a slot's pairs rotated by their position's angles c, sn (columns i..) into out's columns i.. and
 * i + H.. */
template <int V>
__device__ __forceinline__ void rope_rotate_store_cs(bf16 *out, const float (&x1)[V], const float (&x2)[V],
                                                     const float (&c)[V], const float (&sn)[V], int i, int H) {
    float o1[V], o2[V];
#pragma unroll
    for (int v = 0; v < V; v++) {
        o1[v] = x1[v] * c[v] - x2[v] * sn[v];
        o2[v] = x2[v] * c[v] + x1[v] * sn[v];
    }
    store_v<V>(out + i, o1);
    store_v<V>(out + i + H, o2);
}

/* the same, the angles read from a position's rows cos_row, sin_row [H] */
template <int V>
__device__ __forceinline__ void rope_rotate_store(bf16 *out, const float (&x1)[V], const float (&x2)[V],
                                                  const float *cos_row, const float *sin_row, int i, int H) {
    float c[V], sn[V];
    load_v<V>(c, cos_row + i);
    load_v<V>(sn, sin_row + i);
    rope_rotate_store_cs<V>(out, x1, x2, c, sn, i, H);
}

#endif
