/* kernels/encoder.cu - token + position embedding, forward and deterministic backward.
 *
 * Forward:  out[b,t,:] = wte[inp[b,t],:]·scale + wpe[t,:]     out [B,T,C] bf16, wte [Vp,C], wpe [maxT,C]
 *   (scale: Gemma's bf16(sqrt(C)), else 1)
 *   launch: one thread per 8 channels of one row (16-byte loads), 256 threads a block.
 *   FLOPs N·C; bytes 3·N·C·2 + 4N (memory bound: ~2.4 µs per 1M elements at 3 TB/s).
 * Backward: dwte[tok,:] += scale·Σ_{n: inp[n]=tok} dout[n,:] (no row for the pad token);
 *   dwpe[t,:] += Σ_b dout[b,t,:]   (fp32)
 *   Deterministic without atomics: the rows n are stable-radix-sorted by token (kernels/sort_rows.cu),
 *   so the rows of one token lie together in increasing n; the block that sees a token's first row
 *   sums all of its rows in that order and adds once. dwpe: one thread per (t, 8 channels) loops over b.
 *   FLOPs 2·N·C; bytes 2·N·C·2 (dout read twice) + (U + T)·C·4·2 (U distinct tokens) + the sort.
 *   A token repeated very often makes one block long (its rows are summed serially); on text the
 *   most common token is a few % of N, which stays far below the dwpe pass. */
#include "kernels/kernel_util.cuh"
#include "kernels/kernels.h"

__global__ void encoder_forward_kernel(bf16 *out, const int *inp, const bf16 *wte, const bf16 *wpe, float scale,
                                       int N, int T, int C) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x; /* which 8-channel group */
    int groups = C / 8;
    if (idx >= (size_t)N * groups) return;
    int n = (int)(idx / groups), c = (int)(idx % groups) * 8, t = n % T;
    float a[8], p[8];
    bf16x8_to_float(load_bf16x8(wte + (size_t)inp[n] * C + c), a);
#pragma unroll
    for (int i = 0; i < 8; i++) a[i] *= scale;
    if (wpe) {
        bf16x8_to_float(load_bf16x8(wpe + (size_t)t * C + c), p);
#pragma unroll
        for (int i = 0; i < 8; i++) a[i] += p[i];
    }
    store_bf16x8(out + (size_t)n * C + c, float_to_bf16x8(a));
}

extern "C" void encoder_forward(kbf16 *out, const int *inp, const kbf16 *wte, const kbf16 *wpe, float scale, int B,
                                int T, int C, cudaStream_t stream) {
    size_t threads = (size_t)B * T * (C / 8);
    encoder_forward_kernel<<<ceil_div(threads, 256), 256, 0, stream>>>(out, inp, wte, wpe, scale, B * T, T, C);
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
 * nothing (nn.Embedding's padding_idx; pad < 0: none). */
__global__ void encoder_backward_wte_kernel(float *dwte, const bf16 *dout, const int *sorted_tok,
                                            const int *sorted_n, float scale, int pad, int N, int C) {
    int i = blockIdx.x;
    int tok = sorted_tok[i];
    if (tok == pad || (i > 0 && sorted_tok[i - 1] == tok)) return;
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

/* Scratch layout: rows, sorted tokens, sorted rows (N ints each, 256-byte aligned), then the sort's
 * temporary storage. */
extern "C" size_t encoder_backward_scratch_bytes(int N, int Vp) {
    return 3 * round_up(N * sizeof(int), 256) + round_up(sort_rows_by_key_temp_bytes(N, bits_for(Vp)), 256);
}

extern "C" void encoder_backward(float *dwte, float *dwpe, void *scratch, const kbf16 *dout, const int *inp,
                                 float scale, int pad, int B, int T, int C, int Vp, cudaStream_t stream) {
    int N = B * T;
    size_t ints = round_up(N * sizeof(int), 256);
    char *s = (char *)scratch;
    int *rows = (int *)s, *sorted_tok = (int *)(s + ints), *sorted_rows = (int *)(s + 2 * ints);
    void *temp = s + 3 * ints;
    size_t temp_bytes = sort_rows_by_key_temp_bytes(N, bits_for(Vp));

    if (dwpe) {
        encoder_backward_wpe_kernel<<<ceil_div((size_t)T * (C / 8), 256), 256, 0, stream>>>(dwpe, dout, B, T, C);
        CUDA_CHECK(cudaGetLastError());
    }

    sort_rows_by_key(inp, sorted_tok, rows, sorted_rows, temp, temp_bytes, N, bits_for(Vp), stream);
    int threads = C / 8 < 256 ? (int)round_up(C / 8, 32) : 256;
    encoder_backward_wte_kernel<<<N, threads, 0, stream>>>(dwte, dout, sorted_tok, sorted_rows, scale, pad, N, C);
    CUDA_CHECK(cudaGetLastError());
}
