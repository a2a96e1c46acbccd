/* kernels/gated_act.cuh - the gated MLP's activation and its slope, act = SiLU (SwiGLU: Llama, Qwen)
 * or GELU-tanh (GeGLU: Gemma): one definition for the separate pass (kernels/swiglu.cu) and the
 * products that carry it in their epilogues (kernels/gated_mlp.cu), so that both give the same bits.
 *
 * Both are x times a sigmoid: SiLU's of x, GELU-tanh's of 2u, u = sqrt(2/pi) (x + 0.044715 x^3),
 * since 0.5 (1 + tanh u) = sigmoid(2u) (HF's gelu_pytorch_tanh, without tanhf's cost). The sigmoid
 * takes one ex2.approx and one rcp.approx: about 2 ulp of fp32, far inside the bf16 its results are
 * stored in, and few enough instructions for the products' four epilogue warps (with expf and an
 * IEEE division their backward ran 1.6x slower; dev/RESULTS.md, 2026-11-29). Saturates cleanly:
 * a large negative argument gives 2^big = inf, sigmoid 0, act -0 and slope 0. */
#ifndef FUSEDGPT_GATED_ACT_CUH
#define FUSEDGPT_GATED_ACT_CUH

#include "kernels/fast_math.cuh"
#include "kernels/kernel_util.cuh" /* GELU_S, GatedAct, LOG2E */

__device__ __forceinline__ float sigmoid_f(float x) {
    float r;
    asm("rcp.approx.ftz.f32 %0, %1;\n" : "=f"(r) : "f"(1.0f + ex2(-x * LOG2E)));
    return r;
}

__device__ __forceinline__ float silu_f(float x) { return x * sigmoid_f(x); }

__device__ __forceinline__ float silu_grad_f(float x) {
    const float sig = sigmoid_f(x);
    return sig * (1.0f + x * (1.0f - sig));
}

/* GELU-tanh = x sigmoid(2u); its slope sigmoid(2u) + x sigmoid(2u) (1 - sigmoid(2u)) 2u' */
__device__ __forceinline__ float gelu_tanh_f(float x) {
    return x * sigmoid_f(2.0f * GELU_S * fmaf(0.044715f * x, x * x, x));
}

__device__ __forceinline__ float gelu_tanh_grad_f(float x) {
    const float x2 = x * x, sig = sigmoid_f(2.0f * GELU_S * fmaf(0.044715f * x, x2, x));
    return sig + x * sig * (1.0f - sig) * (2.0f * GELU_S) * fmaf(3.0f * 0.044715f, x2, 1.0f);
}

template <int ACT>
__device__ __forceinline__ float gated_act(float x) {
    return ACT == GATED_SILU ? silu_f(x) : gelu_tanh_f(x);
}

template <int ACT>
__device__ __forceinline__ float gated_act_grad(float x) {
    return ACT == GATED_SILU ? silu_grad_f(x) : gelu_tanh_grad_f(x);
}

#endif
