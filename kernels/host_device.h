/* kernels/host_device.h - what C host code and CUDA code both spell: the bf16 type of the launcher
 * headers (kernels.h, output_layer.h), integer ceiling division and splitmix64's bit mixer. Plain C without CUDA headers
 * when not compiled by nvcc, so the CPU build and the trainer include it too. */
#ifndef FUSEDGPT_HOST_DEVICE_H
#define FUSEDGPT_HOST_DEVICE_H

#include <stdint.h>

#ifdef __CUDACC__
#include <cuda_bf16.h>
typedef __nv_bfloat16 kbf16;
#define HOST_DEVICE __host__ __device__ __forceinline__
#else
typedef uint16_t kbf16; /* a bf16 as stored: C code only moves pointers and converts on the host */
#define HOST_DEVICE inline
#endif

/* ⌈a / b⌉ for a >= 0, b > 0: blocks to cover a items, tiles to cover a columns. */
static HOST_DEVICE int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* a rounded up to a multiple of b (a >= 0, b > 0). */
static HOST_DEVICE int64_t round_up(int64_t a, int64_t b) { return ceil_div(a, b) * b; }

/* splitmix64's finalizer: 64 well-mixed bits from any 64 (AdamW's stochastic rounding, the matmul
 * plans' result hashes). */
static HOST_DEVICE uint64_t splitmix64_mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

#endif
