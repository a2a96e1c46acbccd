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
 * key's document: the first row after it whose first key passes it, less one, found by a search
 * that narrows [lo, hi) eightfold a round. A round's eight loads are independent, so it waits on
 * memory 4-5 times at T = 2048 where a bisection waited 11 times, at every block's start. */
template <int BQ, int KT = ATT_TILE>
__device__ __forceinline__ int query_tile_end(int k0, const AttMask &m, int nqt) {
    int end = nqt;
    if (m.window > 0) end = min(end, (k0 + KT - 2 + m.window) / BQ + 1);
    if (m.pos) {
        const int last = min(k0 + KT - 1, m.T - 1);
        int lo = last + 1, hi = m.T; /* the answer: the first row in [lo, hi) past `last`'s document, or hi */
        while (lo < hi) {
            constexpr int PROBES = 8;
            int probe[PROBES];
            bool past[PROBES];
#pragma unroll
            for (int k = 0; k < PROBES; k++) probe[k] = lo + (int)((long long)(hi - lo) * k / PROBES);
#pragma unroll
            for (int k = 0; k < PROBES; k++) past[k] = probe[k] - m.pos[probe[k]] > last;
            /* past is false up to some probe and true from it on: the answer lies after the last
             * false probe and at or before the first true one */
            int nlo = probe[PROBES - 1] + 1, nhi = hi;
#pragma unroll
            for (int k = PROBES - 1; k >= 0; k--)
                if (past[k]) nhi = probe[k], nlo = k > 0 ? probe[k - 1] + 1 : lo;
            lo = nlo, hi = nhi;
        }
        end = min(end, (lo - 1) / BQ + 1);
    }
    return end;
}

/* The first key that the last of queries q0 .. q0 + qrows - 1 sees: the latest first key of any of
 * them. A tile of keys from k0 meets a window's or a document's lower edge when k0 is before it. */
__device__ __forceinline__ int tile_key_edge(int q0, int qrows, const AttMask &m) {
    return att_first_key(m, q0 + qrows - 1);
}

/* Whether queries q0 .. q0 + qrows - 1 against keys from k0 meet a window's or a document's lower
 * edge: then the tile needs the mask even off the diagonal (a uniform branch). A loop over key tiles
 * of one query tile takes tile_key_edge once instead. */
__device__ __forceinline__ bool crosses_window(int k0, int q0, int qrows, const AttMask &m) {
    return (m.window > 0 || m.pos) && k0 < tile_key_edge(q0, qrows, m);
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
 * krow and krow + 8, queries from q0, each query's first key from first_key(qi). */
template <class FirstKey>
__device__ __forceinline__ void mask_tile_t_by(float (&st)[32], int krow, int q0, int tq, FirstKey first_key) {
#pragma unroll
    for (int nt = 0; nt < 8; nt++)
#pragma unroll
        for (int c = 0; c < 2; c++) {
            const int qi = q0 + nt * 8 + 2 * tq + c, first = first_key(qi);
#pragma unroll
            for (int r = 0; r < 2; r++) {
                const int key = krow + 8 * r;
                if (key > qi || key < first) st[nt * 4 + 2 * r + c] = -INFINITY;
            }
        }
}
__device__ __forceinline__ void mask_tile_t(float (&st)[32], int krow, int q0, int tq, const AttMask &m) {
    mask_tile_t_by(st, krow, q0, tq, [&](int qi) { return att_first_key(m, qi); });
}

/* The running maximum to subtract in the online softmax: a row that has seen no key yet (a window's
 * or a document's first tile can lie wholly before it) still has -inf, and subtracting 0 then gives
 * exp2(-inf) = 0 instead of NaN. Finite maxima pass unchanged. */
__device__ __forceinline__ float safe_max(float m) {
    return m == -INFINITY ? 0.0f : m;
}

#endif
