/* kernels/attention_mask.cuh - the causal mask of the attention kernels' diagonal tile, in the
 * wgmma accumulator layout (the mma.sync kernels mask their [NT][4] tiles in place). */
#include <math.h>
#ifndef FUSEDGPT_ATTENTION_MASK_CUH
#define FUSEDGPT_ATTENTION_MASK_CUH

/* Causal mask of the diagonal tile (keys from k0; this thread's rows qrow and qrow + 8): also masks
 * keys >= T, which are > every query. Only the diagonal tile needs it (a uniform branch). */
__device__ __forceinline__ void mask_diagonal_tile(float (&s)[32], int k0, int qrow, int tq) {
#pragma unroll
    for (int nt = 0; nt < 8; nt++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            int key = k0 + nt * 8 + 2 * tq + (e & 1), qi = qrow + 8 * (e >> 1);
            if (key > qi) s[nt * 4 + e] = -INFINITY;
        }
}

#endif
