/* kernels/encoder.cu - token + position embedding, forward and deterministic backward.
 *
 * Forward:  out[b,t,:] = wte[inp[b,t],:]·scale + wpe[t,:]     out [B,T,C] bf16, wte [Vp,C], wpe [maxT,C]
 *   (scale: Gemma's sqrt(C), else 1; with documents wpe's row is the token's position pos[b,t])
 *   launch: one thread per 8 channels of one row (16-byte loads), 256 threads a block.
 *   FLOPs N·C; bytes 3·N·C·2 + 4N (memory bound: ~2.4 µs per 1M elements at 3 TB/s).
 * Backward: dwte[tok,:] += scale·Σ_{n: inp[n]=tok} dout[n,:] (no row for the pad token);
 *   dwpe[t,:] += Σ_b dout[b,t,:]   (fp32)
 *   Deterministic without atomics: the rows n are stable-radix-sorted by token (kernels/sort_rows.cu),
 *   so the rows of one token lie together in increasing n; the block that sees a token's first row
 *   sums all of its rows in that order and adds once. dwpe: one thread per (t, 8 channels) loops over b;
 *   with documents, the rows sorted by position and summed as the tokens' are (the same order).
 *   FLOPs 2·N·C; bytes 2·N·C·2 (dout read twice) + (U + T)·C·4·2 (U distinct tokens) + the sort.
 *   A token repeated very often makes one block long (its rows are summed serially); on text the
 *   most common token is a few % of N, which stays far below the dwpe pass.
 * Over a vocabulary slice (the token embedding of a tied head split by vocabulary rows): a rank
 * owning wte's rows [v0, v0 + Vs) looks up, at every rank's positions (the all-gathered tokens),
 * the rows it owns, adds the position's wpe row there, and writes 0 at the others, so that the
 * ranks' outputs summed (a reduce-scatter) are encoder_forward's exactly: one rank adds its row to
 * zeros. With dwte NULL, encoder_backward gives the position table's gradient alone. The backward adds
 * each of the slice's tokens' rows of dout (the all-gathered d(embedding)) into its row of the
 * slice, sorted and summed as above, so the slices' dwte side by side are bitwise the whole one. */
#include <algorithm>

#include "kernels/kernel_util.cuh"
#include "kernels/kernels.h"

/* One position's 8 channels from c: wte_row·scale, plus wpe_row where there is one. The whole
 * lookup and the slice's run this same arithmetic, which is what makes their sums agree bitwise. */
__device__ __forceinline__ void embed_channels8(float (&a)[8], const bf16 *wte_row, const bf16 *wpe_row, float scale) {
    bf16x8_to_float(load_bf16x8(wte_row), a);
#pragma unroll
    for (int i = 0; i < 8; i++) a[i] *= scale;
    if (wpe_row) {
        float p[8];
        bf16x8_to_float(load_bf16x8(wpe_row), p);
#pragma unroll
        for (int i = 0; i < 8; i++) a[i] += p[i];
    }
}

__global__ void encoder_forward_kernel(bf16 *out, const int *inp, const int *pos, const bf16 *wte, const bf16 *wpe,
                                       float scale, int N, int T, int C) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x; /* which 8-channel group */
    int groups = C / 8;
    if (idx >= (size_t)N * groups) return;
    int n = (int)(idx / groups), c = (int)(idx % groups) * 8, t = pos ? pos[n] : n % T;
    float a[8];
    embed_channels8(a, wte + (size_t)inp[n] * C + c, wpe ? wpe + (size_t)t * C + c : NULL, scale);
    store_bf16x8(out + (size_t)n * C + c, float_to_bf16x8(a));
}

extern "C" void encoder_forward(kbf16 *out, const int *inp, const int *pos, const kbf16 *wte, const kbf16 *wpe,
                                float scale, int B, int T, int C, cudaStream_t stream) {
    size_t threads = (size_t)B * T * (C / 8);
    encoder_forward_kernel<<<ceil_div(threads, 256), 256, 0, stream>>>(out, inp, pos, wte, wpe, scale, B * T, T, C);
    CUDA_CHECK(cudaGetLastError());
}

/* dwpe[t, c..c+8] += Σ_b dout[b,t,c..c+8], b in increasing order. */
__global__ void encoder_backward_wpe_kernel(float *dwpe, const bf16 *dout, int B, int T, int C) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    int groups = C / 8;
    if (idx >= (size_t)T * groups) return;
    int t = (int)(idx / groups), c = (int)(idx % groups) * 8;
    float acc[8] = {0};
    for (int b = 0; b < B; b++) {
        float d[8];
        bf16x8_to_float(load_bf16x8(dout + ((size_t)b * T + t) * C + c), d);
#pragma unroll
        for (int i = 0; i < 8; i++) acc[i] += d[i];
    }
    float4 *dst = reinterpret_cast<float4 *>(dwpe + (size_t)t * C + c);
    float4 lo = dst[0], hi = dst[1];
    lo.x += acc[0]; lo.y += acc[1]; lo.z += acc[2]; lo.w += acc[3];
    hi.x += acc[4]; hi.y += acc[5]; hi.z += acc[6]; hi.w += acc[7];
    dst[0] = lo;
    dst[1] = hi;
}

/* One block per sorted position i; only the block at the first row of a token's run works. Its
 * threads split the channels (8 per thread, looping if C/8 > blockDim). The pad token's row gets
 * nothing (nn.Embedding's padding_idx; pad < 0: none), nor do tokens at or past rows (a slice's mark
 * for a token another rank owns). */
__global__ void encoder_backward_wte_kernel(float *dwte, const bf16 *dout, const int *sorted_tok,
                                            const int *sorted_n, float scale, int pad, int N, int C, int rows) {
    int i = blockIdx.x;
    int tok = sorted_tok[i];
    if (tok >= rows || tok == pad || (i > 0 && sorted_tok[i - 1] == tok)) return;
    int end = i + 1;
    while (end < N && sorted_tok[end] == tok) end++;
    for (int c = threadIdx.x * 8; c < C; c += blockDim.x * 8) {
        float acc[8] = {0};
        for (int j = i; j < end; j++) {
            float d[8];
            bf16x8_to_float(load_bf16x8(dout + (size_t)sorted_n[j] * C + c), d);
#pragma unroll
            for (int k = 0; k < 8; k++) acc[k] += d[k];
        }
#pragma unroll
        for (int k = 0; k < 8; k++) acc[k] *= scale;
        float4 *dst = reinterpret_cast<float4 *>(dwte + (size_t)tok * C + c);
        float4 lo = dst[0], hi = dst[1];
        lo.x += acc[0]; lo.y += acc[1]; lo.z += acc[2]; lo.w += acc[3];
        hi.x += acc[4]; hi.y += acc[5]; hi.z += acc[6]; hi.w += acc[7];
        dst[0] = lo;
        dst[1] = hi;
    }
}

static int bits_for(int Vp) {
    int bits = 1;
    while (bits < 31 && (1 << bits) < Vp) bits++;
    return bits;
}

/* Scratch layout: rows, sorted keys (tokens or positions), sorted rows (N ints each, 256-byte
 * aligned), then the sort's temporary storage, for keys below Vp or below N (positions). */
extern "C" size_t encoder_backward_scratch_bytes(int N, int Vp) {
    const size_t temp =
        std::max(sort_rows_by_key_temp_bytes(N, bits_for(Vp)), sort_rows_by_key_temp_bytes(N, bits_for(N)));
    return 3 * round_up(N * sizeof(int), 256) + round_up(temp, 256);
}

extern "C" void encoder_backward(float *dwte, float *dwpe, void *scratch, const kbf16 *dout, const int *inp,
                                 const int *pos, float scale, int pad, int B, int T, int C, int Vp, cudaStream_t stream) {
    int N = B * T;
    size_t ints = round_up(N * sizeof(int), 256);
    char *s = (char *)scratch;
    int *rows = (int *)s, *sorted_tok = (int *)(s + ints), *sorted_rows = (int *)(s + 2 * ints);
    void *temp = s + 3 * ints;
    size_t temp_bytes = sort_rows_by_key_temp_bytes(N, bits_for(Vp));
    int threads = C / 8 < 256 ? (int)round_up(C / 8, 32) : 256;

    if (dwpe && pos) { /* positions < T, each one's rows summed in row order as a token's are */
        const int bits = bits_for(T);
        sort_rows_by_key(pos, sorted_tok, rows, sorted_rows, temp, sort_rows_by_key_temp_bytes(N, bits), N, bits,
                         stream);
        encoder_backward_wte_kernel<<<N, threads, 0, stream>>>(dwpe, dout, sorted_tok, sorted_rows, 1.0f, -1, N, C, T);
        CUDA_CHECK(cudaGetLastError());
    } else if (dwpe) {
        encoder_backward_wpe_kernel<<<ceil_div((size_t)T * (C / 8), 256), 256, 0, stream>>>(dwpe, dout, B, T, C);
        CUDA_CHECK(cudaGetLastError());
    }
    if (!dwte) return; /* the token embedding is a vocabulary-parallel slice's */

    sort_rows_by_key(inp, sorted_tok, rows, sorted_rows, temp, temp_bytes, N, bits_for(Vp), stream);
    encoder_backward_wte_kernel<<<N, threads, 0, stream>>>(dwte, dout, sorted_tok, sorted_rows, scale, pad, N, C, Vp);
    CUDA_CHECK(cudaGetLastError());
}

/* ---- over a vocabulary slice ---------------------------------------------------------------- */

/* encoder_forward_kernel's arithmetic (embed_channels8) on the rows the slice owns, zeros elsewhere. */
__global__ void encoder_slice_forward_kernel(bf16 *out, const int *inp, const bf16 *wte_slice, const bf16 *wpe,
                                             float scale, int v0, int Vs, int N, int T, int C) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    int groups = C / 8;
    if (idx >= (size_t)N * groups) return;
    int n = (int)(idx / groups), c = (int)(idx % groups) * 8, t = n % T;
    int tok = inp[n] - v0;
    float a[8] = {0};
    if (tok >= 0 && tok < Vs)
        embed_channels8(a, wte_slice + (size_t)tok * C + c, wpe ? wpe + (size_t)t * C + c : NULL, scale);
    store_bf16x8(out + (size_t)n * C + c, float_to_bf16x8(a));
}

extern "C" void encoder_slice_forward(kbf16 *out, const int *inp, const kbf16 *wte_slice, const kbf16 *wpe,
                                      float scale, int v0, int Vs, int N, int T, int C, cudaStream_t stream) {
    size_t threads = (size_t)N * (C / 8);
    encoder_slice_forward_kernel<<<ceil_div(threads, 256), 256, 0, stream>>>(out, inp, wte_slice, wpe, scale, v0, Vs,
                                                                             N, T, C);
    CUDA_CHECK(cudaGetLastError());
}

/* A token as the slice's row, Vs (past its rows) for a token another rank owns. */
__global__ void encoder_slice_keys_kernel(int *keys, const int *inp, int v0, int Vs, int N) {
    int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= N) return;
    int tok = inp[n] - v0;
    keys[n] = tok >= 0 && tok < Vs ? tok : Vs;
}

/* Scratch layout: encoder_backward's (for keys up to Vs) after the slice's keys. */
extern "C" size_t encoder_slice_backward_scratch_bytes(int N, int Vs) {
    return round_up(N * sizeof(int), 256) + encoder_backward_scratch_bytes(N, Vs + 1);
}

extern "C" void encoder_slice_backward(float *dwte_slice, void *scratch, const kbf16 *dout, const int *inp,
                                       float scale, int pad, int v0, int Vs, int N, int C, cudaStream_t stream) {
    size_t ints = round_up(N * sizeof(int), 256);
    char *s = (char *)scratch;
    int *keys = (int *)s, *rows = (int *)(s + ints), *sorted_tok = (int *)(s + 2 * ints),
        *sorted_rows = (int *)(s + 3 * ints);
    void *temp = s + 4 * ints;
    encoder_slice_keys_kernel<<<ceil_div((size_t)N, 256), 256, 0, stream>>>(keys, inp, v0, Vs, N);
    CUDA_CHECK(cudaGetLastError());
    sort_rows_by_key(keys, sorted_tok, rows, sorted_rows, temp, sort_rows_by_key_temp_bytes(N, bits_for(Vs + 1)), N,
                     bits_for(Vs + 1), stream);
    int threads = C / 8 < 256 ? (int)round_up(C / 8, 32) : 256;
    const int slice_pad = pad >= v0 && pad < v0 + Vs ? pad - v0 : -1;
    encoder_backward_wte_kernel<<<N, threads, 0, stream>>>(dwte_slice, dout, sorted_tok, sorted_rows, scale, slice_pad,
                                                           N, C, Vs);
    CUDA_CHECK(cudaGetLastError());
}
