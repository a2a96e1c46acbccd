/* kernels/swiglu.cu - the gated MLP's activation: out = act(gate)·up, act = SiLU (SwiGLU: Llama,
 * Qwen) or GELU-tanh (GeGLU: Gemma), forward and backward.
 *
 * Shapes: inp [N, 2F], the packed gate/up projection (per token gate in columns [0, F), up in
 * [F, 2F): HF's gate_proj rows then up_proj rows as one matrix); out [N, F], down_proj's input.
 *   launch: a thread per 8 adjacent columns of one token (16-byte accesses) when F % 8 == 0, else a
 *   thread per column. FLOPs ~10 per output (forward), ~20 (backward); bytes N·F·2·3 forward,
 *   N·F·2·5 backward, N·F·2·6 when the backward also re-forms the product (memory bound): a
 *   backward that needs the product for down_proj's weight gradient gets it from the pass that
 *   reads gate and up anyway, instead of a forward pass that reads them again.
 * On Hopper the families' gated MLPs run inside the products instead (kernels/gated_mlp.cu, the same
 * activation from kernels/gated_act.cuh); this pass takes the widths those products do not. */
#include "kernels/gated_act.cuh"
#include "kernels/kernel_util.cuh"
#include "kernels/kernels.h"

/* V adjacent columns of one token: V = 8 (F % 8 == 0) or 1. */
template <int V>
__device__ __forceinline__ void load_cols(float (&f)[V], const bf16 *p) {
    if constexpr (V == 8)
        bf16x8_to_float(load_bf16x8(p), f);
    else
        f[0] = __bfloat162float(*p);
}

template <int V>
__device__ __forceinline__ void store_cols(bf16 *p, const float (&f)[V]) {
    if constexpr (V == 8)
        store_bf16x8(p, float_to_bf16x8(f));
    else
        *p = __float2bfloat16(f[0]);
}

template <int V, int ACT>
__global__ void gated_forward_kernel(bf16 *out, const bf16 *inp, size_t N, int F) {
    size_t j = (size_t)blockIdx.x * blockDim.x + threadIdx.x, per_row = (size_t)F / V;
    if (j >= N * per_row) return;
    size_t n = j / per_row, f = (j % per_row) * V;
    const bf16 *gate = inp + n * 2 * F + f;
    float g[V], u[V];
    load_cols<V>(g, gate);
    load_cols<V>(u, gate + F);
#pragma unroll
    for (int i = 0; i < V; i++) g[i] = gated_act<ACT>(g[i]) * u[i];
    store_cols<V>(out + n * F + f, g);
}

template <int V, int ACT>
__global__ void gated_backward_kernel(bf16 *dinp, bf16 *out, const bf16 *dout, const bf16 *inp, size_t N, int F) {
    size_t j = (size_t)blockIdx.x * blockDim.x + threadIdx.x, per_row = (size_t)F / V;
    if (j >= N * per_row) return;
    size_t n = j / per_row, f = (j % per_row) * V;
    const bf16 *gate = inp + n * 2 * F + f;
    float g[V], u[V], d[V], dg[V], du[V], o[V];
    load_cols<V>(g, gate);
    load_cols<V>(u, gate + F);
    load_cols<V>(d, dout + n * F + f);
#pragma unroll
    for (int i = 0; i < V; i++) {
        float a = gated_act<ACT>(g[i]);
        o[i] = a * u[i];
        dg[i] = d[i] * u[i] * gated_act_grad<ACT>(g[i]);
        du[i] = d[i] * a;
    }
    store_cols<V>(dinp + n * 2 * F + f, dg);
    store_cols<V>(dinp + n * 2 * F + F + f, du);
    if (out) store_cols<V>(out + n * F + f, o);
}

/* The launch for V adjacent columns a thread, F % V == 0. */
template <int V, int ACT>
static void launch_forward(bf16 *out, const bf16 *inp, size_t N, int F, cudaStream_t stream) {
    gated_forward_kernel<V, ACT><<<ceil_div(N * (size_t)F / V, 256), 256, 0, stream>>>(out, inp, N, F);
}

template <int V, int ACT>
static void launch_backward(bf16 *dinp, bf16 *out, const bf16 *dout, const bf16 *inp, size_t N, int F,
                            cudaStream_t stream) {
    gated_backward_kernel<V, ACT><<<ceil_div(N * (size_t)F / V, 256), 256, 0, stream>>>(dinp, out, dout, inp, N, F);
}

extern "C" void gated_forward(kbf16 *out, const kbf16 *inp, size_t N, int F, GatedAct act, cudaStream_t stream) {
    if (N * (size_t)F == 0) return;
    const int wide = F % 8 == 0;
    if (act == GATED_SILU)
        (wide ? launch_forward<8, GATED_SILU> : launch_forward<1, GATED_SILU>)(out, inp, N, F, stream);
    else
        (wide ? launch_forward<8, GATED_GELU_TANH> : launch_forward<1, GATED_GELU_TANH>)(out, inp, N, F, stream);
    CUDA_CHECK(cudaGetLastError());
}

extern "C" void gated_backward(kbf16 *dinp, kbf16 *out, const kbf16 *dout, const kbf16 *inp, size_t N, int F,
                               GatedAct act, cudaStream_t stream) {
    if (N * (size_t)F == 0) return;
    const int wide = F % 8 == 0;
    if (act == GATED_SILU)
        (wide ? launch_backward<8, GATED_SILU> : launch_backward<1, GATED_SILU>)(dinp, out, dout, inp, N, F, stream);
    else
        (wide ? launch_backward<8, GATED_GELU_TANH> : launch_backward<1, GATED_GELU_TANH>)(dinp, out, dout, inp, N, F,
                                                                                            stream);
    CUDA_CHECK(cudaGetLastError());
}
