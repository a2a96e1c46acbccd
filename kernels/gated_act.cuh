/* kernels/gated_act.cuh - the gated MLP's activation and its slope, act = SiLU (SwiGLU: Llama, Qwen)
 * or GELU-tanh (GeGLU: Gemma): one definition for the separate pass (kernels/swiglu.cu) and the
 * products that carry it in their epilogues (kernels/gated_mlp.cu), so that both give the same bits.
 *
 * SiLU's sigmoid takes one ex2.approx and one rcp.approx: about 2 ulp of fp32, far inside the bf16
 * its results are stored in, and few enough instructions for the products' four epilogue warps
 * (with expf and an IEEE division their backward ran 1.6x slower; dev/RESULTS.md, 2026-11-29).
 * Saturates cleanly: x = -100 gives 2^144 = inf, sigmoid 0, act -0. */
#ifndef FUSEDGPT_GATED_ACT_CUH
#define FUSEDGPT_GATED_ACT_CUH

#include "kernels/fast_math.cuh"
#include "kernels/kernel_util.cuh" /* gelu_f, gelu_grad_f, GatedAct, LOG2E */

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

__device__ __forceinline__ float gated_act(float x, int act) { return act == GATED_SILU ? silu_f(x) : gelu_f(x); }

__device__ __forceinline__ float gated_act_grad(float x, int act) {
    return act == GATED_SILU ? silu_grad_f(x) : gelu_grad_f(x);
}

#endif
