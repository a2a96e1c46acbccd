/* kernels/gelu.cuh - GPT-2's GELU (tanh approximation) and its derivative, shared by gelu.cu's
 * elementwise kernels and the dGELU matmul's epilogue.
 *
 * gelu(x) = 0.5·x·(1 + tanh(s·(x + 0.044715·x³))), s = sqrt(2/π);
 * gelu'(x) = 0.5·(1 + t) + 0.5·x·(1 − t²)·s·(1 + 3·0.044715·x²), t = that tanh. */
#ifndef FUSEDGPT_GELU_CUH
#define FUSEDGPT_GELU_CUH

#define GELU_S 0.7978845608028654f

/* the tanh's argument */
__device__ __forceinline__ float gelu_arg(float x) { return GELU_S * x * fmaf(0.044715f, x * x, 1.0f); }

__device__ __forceinline__ float gelu_f(float x) { return 0.5f * x * (1.0f + tanhf(gelu_arg(x))); }

/* gelu'(x) given t = tanh(gelu_arg(x)), however that tanh was computed */
__device__ __forceinline__ float gelu_grad_from_tanh(float x, float t) {
    return fmaf(0.5f, t, 0.5f) + (0.5f * GELU_S) * x * fmaf(-t, t, 1.0f) * fmaf(3.0f * 0.044715f, x * x, 1.0f);
}

__device__ __forceinline__ float gelu_grad_f(float x) { return gelu_grad_from_tanh(x, tanhf(gelu_arg(x))); }

/* tanh in one MUFU instruction (absolute error ~2^-11 near 0, relative ~2^-11 elsewhere): for an
 * epilogue whose result is rounded to bf16 (2^-9) at once */
__device__ __forceinline__ float tanh_approx(float x) {
    float y;
    asm("tanh.approx.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

#endif
