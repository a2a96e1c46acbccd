/* kernels/gated_mlp_fits.h - which gated MLPs the products with the activation in their epilogues
 * (kernels/gated_mlp.cu) take: F a multiple of their 128-column tiles, C of the copies' 16 bytes, and
 * a weight at a 16-byte address. Plain C, so that the memory estimate counts the path the CUDA
 * backend runs: an MLP they take needs no [N, F] buffer for the activation's input gradient. */
#ifndef FUSEDGPT_GATED_MLP_FITS_H
#define FUSEDGPT_GATED_MLP_FITS_H

#include <stdint.h>

/* weight_at: the weight's address, or its byte offset into a buffer that starts 16-byte aligned */
static inline int gated_mlp_fits(int64_t C, int64_t F, uintptr_t weight_at) {
    return F >= 128 && F % 128 == 0 && C >= 8 && C % 8 == 0 && weight_at % 16 == 0;
}

#endif
