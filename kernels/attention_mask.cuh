/* kernels/attention_mask.cuh - which keys a query sees, for every attention kernel: causal (key j
 * <= query i); with a sliding window W > 0 also i - W < j; with documents (a sequence of documents
 * packed end to end, pos[i] the query's place in its own) also j >= i - pos[i]. So a query sees the
 * keys from its first one, att_first_key, up to itself. Also the key tiles a block of queries walks
 * (and the query tiles a block of keys walks), so that a windowed layer's work grows with T·W and a
 * document's with its own length; and the mask of a tile in the wgmma accumulator layout.
 * Every bound below is monotone in the query: a later query's first key is never earlier. */
#ifndef FUSEDGPT_ATTENTION_MASK_CUH
#define FUSEDGPT_ATTENTION_MASK_CUH

#include <math.h>

#include "kernels/attention_tiles.cuh"

/* The mask of one call (AttentionShape's window and pos), or, after seq(b), of sequence b's rows. */
struct AttMask {
    int window;     /* W > 0: a sliding window of W keys; 0: none */
    int T;          /* rows per sequence */
    const int *pos; /* [B·T] each row's position in its document, then (seq) the sequence's T; NULL: none */

    __device__ __forceinline__ AttMask seq(int b) const {
        AttMask m = *this;
        if (pos) m.pos = pos + (size_t)b * T;
        return m;
    }
};

/* The first key that query qi sees. Rows past T (a last tile's) read as row T - 1: their results
 * are never stored. */
__device__ __forceinline__ int att_first_key(const AttMask &m, int qi) {
    int first = m.window > 0 && qi - m.window + 1 > 0 ? qi - m.window + 1 : 0;
    if (m.pos) {
        const int row = qi < m.T ? qi : m.T - 1;
        first = max(first, row - m.pos[row]);
    }
    return first;
}

/* Whether query qi does not see key `key`. */
__device__ __forceinline__ bool att_hidden(int key, int qi, const AttMask &m) {
    return key > qi || key < att_first_key(m, qi);
}

/* The first key tile (of KT keys) that query rows from q0 see (tile 0 without a window or documents). */
template <int KT = ATT_TILE>
__device__ __forceinline__ int first_key_tile(int q0, const AttMask &m) {
    return att_first_key(m, q0) / KT;
}

/* One past the last query tile (of BQ rows) that sees a key of the KT keys from k0, at most nqt. With
 * a window the last key's last query is key + W - 1; with documents it is the last row of the last
 * key's document, found by bisection (a document starts where a row's first key passes that key). */
template <int BQ, int KT = ATT_TILE>
__device__ __forceinline__ int query_tile_end(int k0, const AttMask &m, int nqt) {
    int end = nqt;
    if (m.window > 0) end = min(end, (k0 + KT - 2 + m.window) / BQ + 1);
    if (m.pos) {
        const int last = min(k0 + KT - 1, m.T - 1);
        int lo = last + 1, hi = m.T; /* the first row after `last` that does not see it, or T */
        while (lo < hi) {
            const int mid = (lo + hi) / 2;
            if (mid - m.pos[mid] > last) hi = mid;
            else lo = mid + 1;
        }
        end = min(end, (lo - 1) / BQ + 1);
    }
    return end;
}

/* Whether queries q0 .. q0 + qrows - 1 against keys from k0 meet a window's or a document's lower
 * edge: then the tile needs the mask even off the diagonal (a uniform branch). */
__device__ __forceinline__ bool crosses_window(int k0, int q0, int qrows, const AttMask &m) {
    if (m.window > 0 && k0 <= q0 + qrows - 1 - m.window) return true;
    if (!m.pos) return false;
    const int last = min(q0 + qrows - 1, m.T - 1);
    return k0 < last - m.pos[last];
}

/* The mask of a [64 × 64] score tile in the wgmma layout (keys from k0; this thread's rows qrow and
 * qrow + 8). On the diagonal tile it also masks keys >= T, which are > every query. */
__device__ __forceinline__ void mask_tile(float (&s)[32], int k0, int qrow, int tq, const AttMask &m) {
    const int first[2] = {att_first_key(m, qrow), att_first_key(m, qrow + 8)};
#pragma unroll
    for (int nt = 0; nt < 8; nt++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            int key = k0 + nt * 8 + 2 * tq + (e & 1), qi = qrow + 8 * (e >> 1);
            if (key > qi || key < first[e >> 1]) s[nt * 4 + e] = -INFINITY;
        }
}

/* The same for a transposed tile, Sᵀ [64 keys × 64 queries] (the dK,dV kernels): this thread's keys
 * krow and krow + 8, queries from q0. */
__device__ __forceinline__ void mask_tile_t(float (&st)[32], int krow, int q0, int tq, const AttMask &m) {
#pragma unroll
    for (int nt = 0; nt < 8; nt++)
#pragma unroll
        for (int c = 0; c < 2; c++) {
            const int qi = q0 + nt * 8 + 2 * tq + c, first = att_first_key(m, qi);
#pragma unroll
            for (int r = 0; r < 2; r++) {
                const int key = krow + 8 * r;
                if (key > qi || key < first) st[nt * 4 + 2 * r + c] = -INFINITY;
            }
        }
}

/* The running maximum to subtract in the online softmax: a row that has seen no key yet (a window's
 * or a document's first tile can lie wholly before it) still has -inf, and subtracting 0 then gives
 * exp2(-inf) = 0 instead of NaN. Finite maxima pass unchanged. */
__device__ __forceinline__ float safe_max(float m) {
    return m == -INFINITY ? 0.0f : m;
}

#endif
