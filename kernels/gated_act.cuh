/* kernels/gated_act.cuh - the gated MLP's activation and its derivative, act = SiLU (SwiGLU: Llama,
 * Qwen) or GELU-tanh (GeGLU: Gemma), one definition for every kernel that applies it, so that they
 * give the same bits. */
#ifndef FUSEDGPT_GATED_ACT_CUH
#define FUSEDGPT_GATED_ACT_CUH

#include "kernels/kernel_util.cuh" /* gelu_f, gelu_grad_f, GatedAct */

__device__ __forceinline__ float silu_f(float x) { return x / (1.0f + expf(-x)); }

__device__ __forceinline__ float silu_grad_f(float x) {
    float sig = 1.0f / (1.0f + expf(-x));
    return sig * (1.0f + x * (1.0f - sig));
}

__device__ __forceinline__ float gated_act(float x, int act) { return act == GATED_SILU ? silu_f(x) : gelu_f(x); }

__device__ __forceinline__ float gated_act_grad(float x, int act) {
    return act == GATED_SILU ? silu_grad_f(x) : gelu_grad_f(x);
}

#endif
