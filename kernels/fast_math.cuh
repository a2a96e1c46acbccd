/* kernels/fast_math.cuh - the softmax's exponential, shared by attention and the fused output
 * layer: one MUFU instruction (ex2), or ten on the FMA and integer pipes (ex2_fma).
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

/* 2^x for x <= 0 without the MUFU unit, which issues a quarter of a warp's exponentials a clock
 * per SM sub-partition while the FMA pipe takes a whole warp's instruction: where a loop is bound by
 * its exponentials (the attention forward's softmax at head size 64), computing some of them here
 * shares the work between the two pipes. x = n + f with n = rint(x) (1.5·2^23 added, so that n sits
 * in the low bits of t) and f in [-1/2, 1/2]; 2^f by a cubic fitted to relative error (at most
 * 7.5e-5 over [-1/2, 1/2], far below the 2^-9 of the bf16 P it feeds); 2^n added to the exponent
 * bits. x below -126 (-inf included) gives +0, as ex2 does, so masked keys weigh exactly nothing;
 * between -126 and -125.5 the result is a subnormal pattern of at most 2^-126. */
__device__ __forceinline__ float ex2_fma(float x) {
    const float t = x + 12582912.0f;
    const float f = x - (t - 12582912.0f);
    const float p = fmaf(fmaf(fmaf(5.517165119e-2f, f, 2.426111208e-1f), f, 6.932609888e-1f), f, 9.999280737e-1f);
    const float y = __int_as_float(__float_as_int(p) + (__float_as_int(t) << 23));
    return x < -126.0f ? 0.0f : y;
}

#endif
