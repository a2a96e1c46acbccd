/* kernels/attention_mask.cuh - which keys a query sees, for every attention kernel: causal (key j
 * <= query i) and, with a sliding window W > 0, also i - W < j; the key tiles a block of queries
 * walks (and the query tiles a block of keys walks), so that a windowed layer's work grows with
 * T·W rather than T²; and the mask of a tile in the wgmma accumulator layout. */
#ifndef FUSEDGPT_ATTENTION_MASK_CUH
#define FUSEDGPT_ATTENTION_MASK_CUH

#include <math.h>

#include "kernels/attention_tiles.cuh"

/* Whether query qi does not see key `key`. */
__device__ __forceinline__ bool att_hidden(int key, int qi, int window) {
    return key > qi || (window > 0 && key <= qi - window);
}

/* The first key tile (of KT keys) that query rows from q0 see (tile 0 without a window). */
template <int KT = ATT_TILE>
__device__ __forceinline__ int first_key_tile(int q0, int window) {
    return window > 0 && q0 - window + 1 > 0 ? (q0 - window + 1) / KT : 0;
}

/* One past the last query tile (of BQ rows) that sees a key of the KT keys from k0, at most nqt. */
template <int BQ, int KT = ATT_TILE>
__device__ __forceinline__ int query_tile_end(int k0, int window, int nqt) {
    if (window <= 0) return nqt;
    int end = (k0 + KT - 2 + window) / BQ + 1; /* the last key's last query is key + W - 1 */
    return end < nqt ? end : nqt;
}

/* Whether queries q0 .. q0 + qrows - 1 against keys from k0 meet the window's lower edge: then the
 * tile needs the mask even off the diagonal (a uniform branch). */
__device__ __forceinline__ bool crosses_window(int k0, int q0, int qrows, int window) {
    return window > 0 && k0 <= q0 + qrows - 1 - window;
}

/* The mask of a [64 × 64] score tile in the wgmma layout (keys from k0; this thread's rows qrow and
 * qrow + 8). On the diagonal tile it also masks keys >= T, which are > every query. */
__device__ __forceinline__ void mask_tile(float (&s)[32], int k0, int qrow, int tq, int window) {
#pragma unroll
    for (int nt = 0; nt < 8; nt++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            int key = k0 + nt * 8 + 2 * tq + (e & 1), qi = qrow + 8 * (e >> 1);
            if (att_hidden(key, qi, window)) s[nt * 4 + e] = -INFINITY;
        }
}

/* The same for a transposed tile, Sᵀ [64 keys × 64 queries] (the dK,dV kernels): this thread's keys
 * krow and krow + 8, queries from q0. */
__device__ __forceinline__ void mask_tile_t(float (&st)[32], int krow, int q0, int tq, int window) {
#pragma unroll
    for (int nt = 0; nt < 8; nt++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            int col = nt * 8 + 2 * tq + (e & 1), key = krow + 8 * (e >> 1);
            if (att_hidden(key, q0 + col, window)) st[nt * 4 + e] = -INFINITY;
        }
}

/* The running maximum to subtract in the online softmax: a row that has seen no key yet (a window's
 * first tile can lie wholly before it) still has -inf, and subtracting 0 then gives exp2(-inf) = 0
 * instead of NaN. Finite maxima pass unchanged. */
__device__ __forceinline__ float safe_max(float m) {
    return m == -INFINITY ? 0.0f : m;
}

#endif
