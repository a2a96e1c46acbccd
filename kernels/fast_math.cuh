/* kernels/fast_math.cuh - the softmax's exponential as one MUFU instruction, shared by attention
 * and the fused output layer, and on the FMA pipes for a share of the elements.
 *
 * exp2f(x) compiles to ex2.approx.f32, which ptxas wraps in a compare and two predicated multiplies
 * so that results below 2^-126 come out subnormal; a softmax term that small is zero to every sum
 * and every bf16 gradient it feeds, so the flush-to-zero form drops those three instructions per
 * element. Same approximation otherwise (relative error <= 2^-22); ex2(-inf) = +0, which masking
 * and the first tile's running max rely on. */
#ifndef FUSEDGPT_FAST_MATH_CUH
#define FUSEDGPT_FAST_MATH_CUH

__device__ __forceinline__ float ex2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

/* 2^x without the MUFU unit (16 results per clock per SM, the softmax epilogue's limit): x rounded
 * to the nearest integer n by adding 1.5·2^23 (n lands in the low mantissa bits), 2^(x - n) by a
 * cubic fitted on [-0.5, 0.5] (relative error <= 1.01e-4, 1/39 of bf16's half step), n added into
 * the exponent field. Nine FMA-pipe and integer instructions: worth it for the part of a tile's
 * exponentials that would otherwise queue behind MUFU. x below -125 gives 2^-125, not 0: callers
 * that need an exact 0 (masked or ignored) use ex2. */
__device__ __forceinline__ float ex2_fma(float x) {
    x = fmaxf(x, -125.0f);
    const float t = x + 12582912.0f;
    const float f = x - (t - 12582912.0f);
    const float p = fmaf(fmaf(fmaf(0.05500893f, f, 0.24221098f), f, 0.69328293f), f, 1.0f);
    return __int_as_float(__float_as_int(p) + (__float_as_int(t) << 23));
}

#endif
