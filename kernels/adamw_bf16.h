/* kernels/adamw_bf16.h - AdamW on bf16 state (--optimizer-state bf16): the update of one value,
 * which the CUDA kernel (kernels/adamw.cu) and the CPU reference (model/cpu/backend_cpu.c) both
 * compute, to the bit.
 *
 * The weight, m and v are stored in bf16 and there is no fp32 master copy: each is read as fp32,
 * updated in fp32, and rounded back stochastically, up with probability equal to the fraction of a
 * bf16 step it lies above the lower neighbour. Round-to-nearest would lose every change below half
 * a bf16 step (2^-9 relative): with beta2 0.95, v moves by 5 % of (g² - v) a step, so a v that
 * nears g² would stop short of it, and a weight whose update is below 2^-9 of itself would never
 * move. Stochastic rounding keeps each stored value's expectation equal to the fp32 result.
 *
 * The random bits are a hash of the step and the value's index in the parameter table's flat
 * layout, so they do not depend on sharding (ZeRO-1, the vocabulary-parallel head) or on the
 * device, and a resumed run draws the same ones. The arithmetic is spelled with explicitly rounded
 * operations on the device, and the host code is built with -ffp-contract=off (Makefile), so that
 * no compiler fuses a multiply and an add on one side only. */
#ifndef FUSEDGPT_ADAMW_BF16_H
#define FUSEDGPT_ADAMW_BF16_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/host_device.h"

#ifdef __CUDA_ARCH__
#define ADAMW_MUL(a, b) __fmul_rn(a, b)
#define ADAMW_ADD(a, b) __fadd_rn(a, b)
#define ADAMW_DIV(a, b) __fdiv_rn(a, b)
#define ADAMW_SQRT(a) __fsqrt_rn(a)
#else
#define ADAMW_MUL(a, b) ((a) * (b))
#define ADAMW_ADD(a, b) ((a) + (b))
#define ADAMW_DIV(a, b) ((a) / (b))
#define ADAMW_SQRT(a) sqrtf(a)
#endif

static HOST_DEVICE uint32_t adamw_float_bits(float x) {
#ifdef __CUDA_ARCH__
    return __float_as_uint(x);
#else
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
#endif
}

static HOST_DEVICE float adamw_bits_float(uint32_t u) {
#ifdef __CUDA_ARCH__
    return __uint_as_float(u);
#else
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
#endif
}

/* The bf16 value (as its 16 bits) of x, rounded to nearest even: how fp32 values enter bf16 state. */
static HOST_DEVICE uint16_t bf16_bits_nearest(float x) {
    uint32_t u = adamw_float_bits(x);
    if ((u & 0x7f800000u) == 0x7f800000u) return (uint16_t)((u >> 16) | ((u & 0xffffu) ? 0x40u : 0u));
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* The bf16 value of x rounded up in magnitude when r16 (uniform in [0, 2^16)) is below the 16 bits
 * truncation drops: up with probability equal to the dropped fraction. Infinities and NaNs pass; a
 * finite value above the largest bf16 stays at it (an infinite v would freeze its weight). */
static HOST_DEVICE uint16_t bf16_bits_stochastic(float x, uint32_t r16) {
    uint32_t u = adamw_float_bits(x);
    if ((u & 0x7f800000u) == 0x7f800000u) return bf16_bits_nearest(x);
    const uint16_t b = (uint16_t)((u + (r16 & 0xffffu)) >> 16);
    return (b & 0x7f80u) == 0x7f80u ? (uint16_t)(b - 1) : b; /* rounded up to infinity: the largest finite */
}

static HOST_DEVICE float bf16_bits_to_float(uint16_t b) {
    return adamw_bits_float((uint32_t)b << 16);
}

/* 48 random bits for the value at flat index i in the given step: a splitmix64 finalizer of both. */
static HOST_DEVICE uint64_t adamw_random_bits(uint64_t i, int step) {
    return splitmix64_mix(i * 0x9e3779b97f4a7c15ull + (uint64_t)(uint32_t)step * 0xd1b54a32d192ed03ull +
                          0x2545f4914f6cdd1dull);
}

typedef struct {
    float lr, beta1, beta2, eps;
    float decay;      /* the weight decay of this value's tensor (0: none) */
    float grad_scale; /* multiplies the gradient first (clipping) */
    float c1, c2;     /* the bias corrections 1 - beta^step */
    int step;
} AdamWBf16Step;

/* One value's update: the gradient g (fp32) and the stored bf16 weight, m and v in, the three new
 * bf16 values out (in place). i: the value's flat index in the parameter table. */
static HOST_DEVICE void adamw_bf16_value(const AdamWBf16Step *s, uint64_t i, float g, uint16_t *w, uint16_t *m,
                                         uint16_t *v) {
    const float grad = ADAMW_MUL(g, s->grad_scale);
    const float mi = ADAMW_ADD(ADAMW_MUL(s->beta1, bf16_bits_to_float(*m)), ADAMW_MUL(1.0f - s->beta1, grad));
    const float vi = ADAMW_ADD(ADAMW_MUL(s->beta2, bf16_bits_to_float(*v)),
                               ADAMW_MUL(ADAMW_MUL(1.0f - s->beta2, grad), grad));
    const float p = bf16_bits_to_float(*w);
    const float mhat = ADAMW_DIV(mi, s->c1), vhat = ADAMW_DIV(vi, s->c2);
    const float dir = ADAMW_ADD(ADAMW_DIV(mhat, ADAMW_ADD(ADAMW_SQRT(vhat), s->eps)), ADAMW_MUL(s->decay, p));
    const float pi = ADAMW_ADD(p, -ADAMW_MUL(s->lr, dir));
    const uint64_t r = adamw_random_bits(i, s->step);
    *w = bf16_bits_stochastic(pi, (uint32_t)r);
    *m = bf16_bits_stochastic(mi, (uint32_t)(r >> 16));
    *v = bf16_bits_stochastic(vi, (uint32_t)(r >> 32));
}

#endif
