/* kernels/fast_math.cuh - the softmax's exponential as one MUFU instruction, shared by attention
 * and the fused output layer.
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

#endif
