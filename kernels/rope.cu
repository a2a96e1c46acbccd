/* kernels/rope.cu - rotary position embeddings on the packed qkv rows, with QK-norm fused in front
 * (Qwen3, Gemma 3), forward and backward.
 *
 * Shapes: qkv [N = B·T, (NH + 2·NKV)·hd]: per token the NH query heads, the NKV key heads, the NKV
 * value heads, hd contiguous values each; cos, sin [T, hd/2] fp32 (rope_cos_sin of
 * model/cpu/llama_layers_cpu.h, uploaded once), for positions 0..T-1: token t of a sequence at
 * position t, or pos[n] with documents (RopeShape). H = hd/2.
 * Forward, per query or key head x (value heads are not written):
 *   [QK-norm] y = x·rstd·g, rstd = 1/sqrt(mean(x²) + eps) fp32 [N, NH + NKV], g = q_norm or k_norm
 *             (1 + w when one_plus_w);
 *   RoPE, transformers' rotate-half pairs (i, i + H):
 *             out[i] = y[i]·cos − y[i + H]·sin,  out[i + H] = y[i + H]·cos + y[i]·sin.
 *   fp32 throughout, one bf16 rounding of out.
 * Backward: dy = the inverse rotation of dout; with QK-norm dx = rstd·(g·dy − norm·mean(g·dy·norm)),
 *   norm = x·rstd, and dq_norm / dk_norm += Σ norm·dy over the query / key heads of every token.
 * launch: a group of G lanes per (token, query or key head), 32/G heads per warp; a lane owns V
 *   adjacent pairs (i, i + H) per slot, V = 8 (16-byte loads of both halves and 32-byte loads of
 *   cos, sin) when H % 8 == 0, else V = 1; G the power of two ≥ H/V up to 32, so hd ≤ 256. Value
 *   heads are never touched: in place they stay, and out of place the attention reads them from the
 *   input (its v argument), so no copy moves them; the backward out of place copies their gradient
 *   (dinp = dout there). The backward runs a fixed grid (ROPE_BWD_BLOCKS blocks of ROPE_BWD_WARPS
 *   warps, grid-stride), each lane keeping its columns' norm-weight sums in its warp's shared memory
 *   (in registers they left room for two blocks an SM, not four); the groups of a warp add theirs
 *   by shuffles, the block its warps in order, and add_partial_sums the blocks in order:
 *   deterministic, no atomics, one pass over the data.
 * FLOPs ~6 per rotated element (+5 with QK-norm); bytes, with Q = N·(NH + NKV)·hd the query and key
 * values: forward Q·2·2, backward Q·2·2 (+ Q·2 for
 * the norm's input with QK-norm). */
#include <stdio.h>
#include <stdlib.h>

#include "kernels/kernel_util.cuh"
#include "kernels/kernels.h"

#define ROPE_WARPS 8
#define ROPE_BWD_BLOCKS 528 /* fixed grid: partial-sum order never depends on the device */
#define ROPE_BWD_WARPS 8

/* How the lanes split a head: g lanes per head, each with `slots` slots of V pairs, slot p of lane
 * j (j < g, its index in the group) holding the pairs from (j + g·p)·V. */
struct RopeLane {
    int g;     /* lanes per head, a power of two ≤ 32 */
    int shift; /* log2(g) */
    int slots; /* ceil(H / (V·g)) */
};

/* The lanes per head for V pairs a lane: the power of two ≥ H/V, at most 32. */
static int rope_group(int H, int V) {
    int need = (int)ceil_div(H, V), g = 1;
    while (g < need && g < 32) g *= 2;
    return g;
}

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

/* Slots per lane the kernels unroll: V = 8 needs one (H/8 ≤ 16 < 32 lanes), V = 1 up to four. */
template <int V>
struct RopeSlots {
    static constexpr int max = V == 8 ? 1 : 4;
};

/* out may be inp (in place): each lane reads its own pairs before writing them. rstd is written
 * only with QK-norm (q_norm != NULL). */
template <int V>
__global__ void __launch_bounds__(ROPE_WARPS * 32)
    rope_forward_kernel(bf16 *out, float *rstd, const bf16 *inp, const bf16 *q_norm, const bf16 *k_norm,
                        const float *cos_t, const float *sin_t, RopeShape s, RopeLane rl) {
    constexpr int PMAX = RopeSlots<V>::max;
    const int lane = threadIdx.x % 32, lig = lane & (rl.g - 1), qk = s.NH + s.NKV, H = s.hd / 2;
    const size_t R = (size_t)(s.NH + 2 * s.NKV) * s.hd;
    /* 32-bit indices (the launcher checks that they fit): 64-bit divisions cost more instructions than
     * a lane's whole rotation, and on an H200 the pass issued them slower than it moved its bytes */
    const uint32_t task = ((uint32_t)blockIdx.x * ROPE_WARPS + threadIdx.x / 32) * (32u >> rl.shift) + (lane >> rl.shift);
    const bool live = task < (uint32_t)(s.B * s.T) * (uint32_t)qk; /* dead lanes still join the group's shuffles */
    const uint32_t n = live ? task / (uint32_t)qk : 0;
    const int h = live ? (int)(task - n * (uint32_t)qk) : 0, t = s.pos ? s.pos[n] : (int)(n % (uint32_t)s.T);
    const size_t base = (size_t)n * R + (size_t)h * s.hd;
    float x1[PMAX][V], x2[PMAX][V];
#pragma unroll
    for (int p = 0; p < PMAX; p++) {
        const int i = (lig + rl.g * p) * V;
        const bool on = live && p < rl.slots && i < H;
#pragma unroll
        for (int v = 0; v < V; v++) x1[p][v] = x2[p][v] = 0.0f;
        if (on) {
            load_v<V>(x1[p], inp + base + i);
            load_v<V>(x2[p], inp + base + i + H);
        }
    }
    if (q_norm) {
        const bf16 *w = h < s.NH ? q_norm : k_norm;
        float ss = 0.0f;
#pragma unroll
        for (int p = 0; p < PMAX; p++)
#pragma unroll
            for (int v = 0; v < V; v++) ss += x1[p][v] * x1[p][v] + x2[p][v] * x2[p][v];
        const float r = rsqrtf(group_sum(ss, rl.g) / (float)s.hd + s.eps);
#pragma unroll
        for (int p = 0; p < PMAX; p++) {
            const int i = (lig + rl.g * p) * V;
            if (!live || p >= rl.slots || i >= H) continue;
            float w1[V], w2[V];
            load_v<V>(w1, w + i);
            load_v<V>(w2, w + i + H);
#pragma unroll
            for (int v = 0; v < V; v++) {
                x1[p][v] = (x1[p][v] * r) * rope_gain(w1[v], s.one_plus_w);
                x2[p][v] = (x2[p][v] * r) * rope_gain(w2[v], s.one_plus_w);
            }
        }
        if (live && lig == 0) rstd[(size_t)n * qk + h] = r;
    }
#pragma unroll
    for (int p = 0; p < PMAX; p++) {
        const int i = (lig + rl.g * p) * V;
        if (!live || p >= rl.slots || i >= H) continue;
        float c[V], sn[V], o1[V], o2[V];
        load_v<V>(c, cos_t + (size_t)t * H + i);
        load_v<V>(sn, sin_t + (size_t)t * H + i);
#pragma unroll
        for (int v = 0; v < V; v++) {
            o1[v] = x1[p][v] * c[v] - x2[p][v] * sn[v];
            o2[v] = x2[p][v] * c[v] + x1[p][v] * sn[v];
        }
        store_v<V>(out + base + i, o1);
        store_v<V>(out + base + i + H, o2);
    }
}

/* dinp may be dout (in place). Without QK-norm inp, rstd and partial are not read or written.
 * partial: per block, dq_norm sums [hd] then dk_norm sums [hd]. */
/* Four blocks an SM (64 registers a thread): the fixed grid of 528 is then one wave on an H100's
 * 132 SMs. */
template <int V>
__global__ void __launch_bounds__(ROPE_BWD_WARPS * 32, 4)
    rope_backward_kernel(bf16 *dinp, float *partial, const bf16 *dout, const bf16 *inp, const bf16 *q_norm,
                         const bf16 *k_norm, const float *rstd, const float *cos_t, const float *sin_t, RopeShape s,
                         RopeLane rl) {
    constexpr int PMAX = RopeSlots<V>::max;
    __shared__ float red[ROPE_BWD_WARPS][2][256];
    /* the lane's sums (dq's 2·PMAX·V, then dk's) at [warp][sum][lane]: in registers they took 119 a
     * thread and two blocks an SM. With red, 48 KB at V = 8: all the static shared memory a block
     * may have, and four blocks (with their reserved 1 KB each) fit an SM's 228 KB. */
    constexpr int NSUM = 4 * PMAX * V;
    __shared__ float sums[ROPE_BWD_WARPS][NSUM][32];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, lig = lane & (rl.g - 1), qk = s.NH + s.NKV;
    const int H = s.hd / 2;
    const size_t R = (size_t)(s.NH + 2 * s.NKV) * s.hd;
    const uint32_t per_warp = 32u >> rl.shift, tasks = (uint32_t)(s.B * s.T) * (uint32_t)qk; /* 32-bit: as the forward */
    /* this lane's sums of norm·dy for its columns, dq's at sum p·2V + v and dk's 2·PMAX·V further:
     * v in [0, V) the first half, [V, 2V) the second */
    float(*acc)[32] = sums[warp];
#pragma unroll
    for (int i = 0; i < NSUM; i++) acc[i][lane] = 0.0f;
    for (uint32_t first = ((uint32_t)blockIdx.x * ROPE_BWD_WARPS + warp) * per_warp; first < tasks;
         first += gridDim.x * ROPE_BWD_WARPS * per_warp) {
        const uint32_t task = first + (lane >> rl.shift);
        const bool live = task < tasks; /* dead lanes still join the group's shuffles */
        const uint32_t n = live ? task / (uint32_t)qk : 0;
        const int h = live ? (int)(task - n * (uint32_t)qk) : 0, t = s.pos ? s.pos[n] : (int)(n % (uint32_t)s.T);
        const size_t base = (size_t)n * R + (size_t)h * s.hd;
        float dy1[PMAX][V], dy2[PMAX][V], n1[PMAX][V], n2[PMAX][V];
#pragma unroll
        for (int p = 0; p < PMAX; p++) {
            const int i = (lig + rl.g * p) * V;
#pragma unroll
            for (int v = 0; v < V; v++) dy1[p][v] = dy2[p][v] = n1[p][v] = n2[p][v] = 0.0f;
            if (!live || p >= rl.slots || i >= H) continue;
            float d1[V], d2[V], c[V], sn[V];
            load_v<V>(d1, dout + base + i);
            load_v<V>(d2, dout + base + i + H);
            if (q_norm) {
                load_v<V>(n1[p], inp + base + i);
                load_v<V>(n2[p], inp + base + i + H);
            }
            load_v<V>(c, cos_t + (size_t)t * H + i);
            load_v<V>(sn, sin_t + (size_t)t * H + i);
#pragma unroll
            for (int v = 0; v < V; v++) { /* the transpose of the rotation: rotate by −angle */
                dy1[p][v] = d1[v] * c[v] + d2[v] * sn[v];
                dy2[p][v] = d2[v] * c[v] - d1[v] * sn[v];
            }
        }
        if (q_norm) {
            const bool is_q = h < s.NH;
            const bf16 *w = is_q ? q_norm : k_norm;
            const float r = live ? rstd[(size_t)n * qk + h] : 0.0f;
            float g1[PMAX][V], g2[PMAX][V], dot = 0.0f;
#pragma unroll
            for (int p = 0; p < PMAX; p++) {
                const int i = (lig + rl.g * p) * V;
#pragma unroll
                for (int v = 0; v < V; v++) g1[p][v] = g2[p][v] = 0.0f;
                if (!live || p >= rl.slots || i >= H) continue;
                load_v<V>(g1[p], w + i);
                load_v<V>(g2[p], w + i + H);
#pragma unroll
                for (int v = 0; v < V; v++) {
                    g1[p][v] = rope_gain(g1[p][v], s.one_plus_w);
                    g2[p][v] = rope_gain(g2[p][v], s.one_plus_w);
                    n1[p][v] *= r;
                    n2[p][v] *= r;
                    dot += g1[p][v] * dy1[p][v] * n1[p][v] + g2[p][v] * dy2[p][v] * n2[p][v];
                }
            }
            const float mean = group_sum(dot, rl.g) / (float)s.hd;
#pragma unroll
            for (int p = 0; p < PMAX; p++) {
#pragma unroll
                for (int v = 0; v < V; v++) { /* zeros where the lane holds no column */
                    const int at = (is_q ? 0 : 2 * PMAX * V) + p * 2 * V + v;
                    acc[at][lane] += n1[p][v] * dy1[p][v];
                    acc[at + V][lane] += n2[p][v] * dy2[p][v];
                    dy1[p][v] = r * (g1[p][v] * dy1[p][v] - n1[p][v] * mean);
                    dy2[p][v] = r * (g2[p][v] * dy2[p][v] - n2[p][v] * mean);
                }
            }
        }
#pragma unroll
        for (int p = 0; p < PMAX; p++) {
            const int i = (lig + rl.g * p) * V;
            if (!live || p >= rl.slots || i >= H) continue;
            store_v<V>(dinp + base + i, dy1[p]);
            store_v<V>(dinp + base + i + H, dy2[p]);
        }
    }
    if (!q_norm) return;
    float dq[PMAX][2 * V], dk[PMAX][2 * V];
#pragma unroll
    for (int p = 0; p < PMAX; p++)
#pragma unroll
        for (int v = 0; v < 2 * V; v++) {
            dq[p][v] = acc[p * 2 * V + v][lane];
            dk[p][v] = acc[2 * PMAX * V + p * 2 * V + v][lane];
        }
    /* the groups of the warp hold the same columns: add them by shuffles, lower groups first */
#pragma unroll
    for (int p = 0; p < PMAX; p++)
#pragma unroll
        for (int v = 0; v < 2 * V; v++)
            for (int o = rl.g; o < 32; o <<= 1) {
                dq[p][v] += __shfl_xor_sync(0xffffffffu, dq[p][v], o);
                dk[p][v] += __shfl_xor_sync(0xffffffffu, dk[p][v], o);
            }
    if (lane < rl.g) {
#pragma unroll
        for (int p = 0; p < PMAX; p++) {
            const int i = (lig + rl.g * p) * V;
            if (p >= rl.slots || i >= H) continue;
#pragma unroll
            for (int v = 0; v < V; v++) {
                red[warp][0][i + v] = dq[p][v];
                red[warp][0][i + H + v] = dq[p][V + v];
                red[warp][1][i + v] = dk[p][v];
                red[warp][1][i + H + v] = dk[p][V + v];
            }
        }
    }
    /* Every warp's sums are in shared memory before any column is summed across warps. */
    __syncthreads();
    for (int c = threadIdx.x; c < 2 * s.hd; c += blockDim.x) {
        const int which = c / s.hd, col = c % s.hd;
        float sum = 0.0f;
        for (int w = 0; w < ROPE_BWD_WARPS; w++) sum += red[w][which][col];
        partial[(size_t)blockIdx.x * 2 * s.hd + c] = sum;
    }
}

static void rope_check_shape(const RopeShape *s) {
    if (s->hd % 2 != 0 || s->hd > 256 || s->hd < 2) {
        fprintf(stderr, "error: RoPE needs an even head_dim from 2 to 256, got %d (choose another head_dim)\n", s->hd);
        exit(1);
    }
    /* the kernels' 32-bit task indices, with a grid stride of room above them */
    if ((int64_t)s->B * s->T * (s->NH + s->NKV) >= ((int64_t)1 << 31)) {
        fprintf(stderr, "error: RoPE over %lld rows of %d query and key heads: more than 2^31 heads in one call (use "
                        "a smaller batch)\n", (long long)s->B * s->T, s->NH + s->NKV);
        exit(1);
    }
}

static RopeLane rope_lane(const RopeShape *s, int V) {
    const int H = s->hd / 2, g = rope_group(H, V);
    int shift = 0;
    while ((1 << shift) < g) shift++;
    return RopeLane{g, shift, (int)ceil_div(H, (int64_t)V * g)};
}

/* The value heads (the last NKV·hd columns of each of the N rows) from src to dst, one strided copy:
 * their gradient passes through the backward unchanged. */
static void copy_value_heads(kbf16 *dst, const kbf16 *src, const RopeShape *s, cudaStream_t stream) {
    const size_t R = (size_t)(s->NH + 2 * s->NKV) * s->hd, skip = (size_t)(s->NH + s->NKV) * s->hd;
    CUDA_CHECK(cudaMemcpy2DAsync(dst + skip, R * sizeof(kbf16), src + skip, R * sizeof(kbf16),
                                 (size_t)s->NKV * s->hd * sizeof(kbf16), (size_t)s->B * s->T,
                                 cudaMemcpyDeviceToDevice, stream));
}

template <int V>
static void launch_rope_forward(kbf16 *out, float *rstd, const kbf16 *inp, const kbf16 *q_norm, const kbf16 *k_norm,
                                const float *cos_t, const float *sin_t, const RopeShape *s, cudaStream_t stream) {
    const RopeLane rl = rope_lane(s, V);
    const int64_t tasks = (int64_t)s->B * s->T * (s->NH + s->NKV), per_block = (int64_t)ROPE_WARPS * (32 / rl.g);
    rope_forward_kernel<V><<<ceil_div(tasks, per_block), ROPE_WARPS * 32, 0, stream>>>(out, rstd, inp, q_norm,
                                                                                      k_norm, cos_t, sin_t, *s, rl);
    CUDA_CHECK(cudaGetLastError());
}

extern "C" void rope_forward(kbf16 *out, float *rstd, const kbf16 *inp, const kbf16 *q_norm, const kbf16 *k_norm,
                             const float *cos_t, const float *sin_t, const RopeShape *s, cudaStream_t stream) {
    rope_check_shape(s);
    if ((int64_t)s->B * s->T == 0) return;
    if (s->hd % 16 == 0)
        launch_rope_forward<8>(out, rstd, inp, q_norm, k_norm, cos_t, sin_t, s, stream);
    else
        launch_rope_forward<1>(out, rstd, inp, q_norm, k_norm, cos_t, sin_t, s, stream);
}

extern "C" size_t rope_backward_scratch_bytes(const RopeShape *s) {
    return (size_t)ROPE_BWD_BLOCKS * 2 * s->hd * sizeof(float);
}

template <int V>
static void launch_rope_backward(kbf16 *dinp, float *partial, const kbf16 *dout, const kbf16 *inp,
                                 const kbf16 *q_norm, const kbf16 *k_norm, const float *rstd, const float *cos_t,
                                 const float *sin_t, const RopeShape *s, cudaStream_t stream) {
    rope_backward_kernel<V><<<ROPE_BWD_BLOCKS, ROPE_BWD_WARPS * 32, 0, stream>>>(
        dinp, partial, dout, inp, q_norm, k_norm, rstd, cos_t, sin_t, *s, rope_lane(s, V));
    CUDA_CHECK(cudaGetLastError());
}

extern "C" void rope_backward(kbf16 *dinp, float *dq_norm, float *dk_norm, void *scratch, const kbf16 *dout,
                              const kbf16 *inp, const kbf16 *q_norm, const kbf16 *k_norm, const float *rstd,
                              const float *cos_t, const float *sin_t, const RopeShape *s, cudaStream_t stream) {
    rope_check_shape(s);
    float *partial = (float *)scratch;
    if (s->hd % 16 == 0)
        launch_rope_backward<8>(dinp, partial, dout, inp, q_norm, k_norm, rstd, cos_t, sin_t, s, stream);
    else
        launch_rope_backward<1>(dinp, partial, dout, inp, q_norm, k_norm, rstd, cos_t, sin_t, s, stream);
    if (dinp != dout && s->NKV > 0 && (int64_t)s->B * s->T > 0) copy_value_heads(dinp, dout, s, stream);
    if (q_norm)
        add_partial_sums(PartialSumOutputs{{dq_norm, dk_norm, NULL}}, 2, partial, ROPE_BWD_BLOCKS, (size_t)2 * s->hd,
                         s->hd, stream);
}
