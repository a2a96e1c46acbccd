/* kernels/gelu.cu - GELU (GPT-2's tanh approximation) forward and backward, and bias gradients.
 *
 * gelu(x) = 0.5·x·(1 + tanh(s·(x + 0.044715·x³))), s = sqrt(2/π).
 *   launch: one thread per 8 elements (16-byte accesses). FLOPs ~20 per element;
 *   bytes 2·n·2 forward, 3·n·2 backward (memory bound).
 *   The trainer normally uses the cuBLASLt GELU / dGELU epilogues (matmul.cu) instead; these are
 *   for callers without a matmul next to the GELU, and the reference the epilogues are tested by.
 * Bias gradient: dbias[oc] += Σ_n dout[n,oc].
 *   launch: grid (ceil(OC/256), BIAS_ROW_CHUNKS) of 256 threads = 32 column groups of 8 × 8 row
 *   lanes; each block sums a fixed slice of rows into scratch, a second kernel (add_partial_sums,
 *   which layernorm.cu's backward shares) sums the BIAS_ROW_CHUNKS partials of a column in a fixed
 *   order: deterministic, no atomics.
 *   FLOPs N·OC; bytes N·OC·2 + 2·BIAS_ROW_CHUNKS·OC·4. */
#include "kernels/kernel_util.cuh"
#include "kernels/kernels.h"

#define BIAS_ROW_CHUNKS 128

__global__ void gelu_forward_kernel(bf16 *out, const bf16 *inp, size_t n8) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n8) return;
    float x[8];
    bf16x8_to_float(load_bf16x8(inp + 8 * i), x);
#pragma unroll
    for (int k = 0; k < 8; k++) x[k] = gelu_f(x[k]);
    store_bf16x8(out + 8 * i, float_to_bf16x8(x));
}

/* dinp may alias dout: each thread reads its 8 values before writing them. */
__global__ void gelu_backward_kernel(bf16 *dinp, const bf16 *inp, const bf16 *dout, size_t n8) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n8) return;
    float x[8], d[8];
    bf16x8_to_float(load_bf16x8(inp + 8 * i), x);
    bf16x8_to_float(load_bf16x8_rw(dout + 8 * i), d);
#pragma unroll
    for (int k = 0; k < 8; k++) d[k] *= gelu_grad_f(x[k]);
    store_bf16x8(dinp + 8 * i, float_to_bf16x8(d));
}

extern "C" void gelu_forward(kbf16 *out, const kbf16 *inp, size_t n, cudaStream_t stream) {
    gelu_forward_kernel<<<ceil_div(n / 8, 256), 256, 0, stream>>>(out, inp, n / 8);
    CUDA_CHECK(cudaGetLastError());
}

extern "C" void gelu_backward(kbf16 *dinp, const kbf16 *inp, const kbf16 *dout, size_t n, cudaStream_t stream) {
    gelu_backward_kernel<<<ceil_div(n / 8, 256), 256, 0, stream>>>(dinp, inp, dout, n / 8);
    CUDA_CHECK(cudaGetLastError());
}

__global__ void __launch_bounds__(256) bias_partial_kernel(float *partial, const bf16 *dout, int N, int OC) {
    __shared__ float s[8][256 + 8]; /* +8: the 8 row lanes' rows start in different banks */
    int tx = threadIdx.x % 32, ty = threadIdx.x / 32;
    int c = blockIdx.x * 256 + tx * 8;
    int rows_per_chunk = (int)ceil_div(N, BIAS_ROW_CHUNKS);
    int r0 = blockIdx.y * rows_per_chunk, r1 = min(N, r0 + rows_per_chunk);
    float acc[8] = {0};
    if (c < OC) {
        int r = r0 + ty;
        /* Four loads in flight per thread (one alone leaves HBM idle at OC = 768), summed in the
         * same row order as the tail loop, so the result does not depend on the unrolling. */
        for (; r + 24 < r1; r += 32) {
            bf16x8 v[4];
#pragma unroll
            for (int u = 0; u < 4; u++) v[u] = load_bf16x8(dout + (size_t)(r + 8 * u) * OC + c);
#pragma unroll
            for (int u = 0; u < 4; u++) {
                float d[8];
                bf16x8_to_float(v[u], d);
#pragma unroll
                for (int k = 0; k < 8; k++) acc[k] += d[k];
            }
        }
        for (; r < r1; r += 8) {
            float d[8];
            bf16x8_to_float(load_bf16x8(dout + (size_t)r * OC + c), d);
#pragma unroll
            for (int k = 0; k < 8; k++) acc[k] += d[k];
        }
    }
#pragma unroll
    for (int k = 0; k < 8; k++) s[ty][tx * 8 + k] = acc[k];
    /* All row lanes have stored before any column is summed across them. */
    __syncthreads();
    int col = blockIdx.x * 256 + threadIdx.x;
    if (col < OC) {
        float sum = 0.0f;
        for (int y = 0; y < 8; y++) sum += s[y][threadIdx.x];
        partial[(size_t)blockIdx.y * OC + col] = sum;
    }
}

/* A block owns 32 columns of one output: its 8 warps take the parts k ≡ warp (mod 8) with a lane
 * per column (128-byte rows), then warp 0 adds the 8 warp sums in warp order. */
__global__ void __launch_bounds__(256) partial_sums_kernel(PartialSumOutputs outs, const float *partial, int nparts,
                                                           size_t part_stride, int C) {
    __shared__ float s[8][32];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, y = blockIdx.y;
    int c = blockIdx.x * 32 + lane;
    const float *p = partial + (size_t)y * C + c;
    float acc = 0.0f;
    if (c < C)
#pragma unroll 4
        for (int k = warp; k < nparts; k += 8) acc += p[(size_t)k * part_stride];
    s[warp][lane] = acc;
    /* Every warp's sums are stored before warp 0 adds them. */
    __syncthreads();
    if (warp == 0 && c < C) {
        float sum = 0.0f;
        for (int w = 0; w < 8; w++) sum += s[w][lane];
        float *out = y == 0 ? outs.out[0] : y == 1 ? outs.out[1] : outs.out[2]; /* no local-memory index */
        out[c] += sum;
    }
}

void add_partial_sums(PartialSumOutputs outs, int nouts, const float *partial, int nparts, size_t part_stride, int C,
                      cudaStream_t stream) {
    partial_sums_kernel<<<dim3(ceil_div(C, 32), nouts), 256, 0, stream>>>(outs, partial, nparts, part_stride, C);
    CUDA_CHECK(cudaGetLastError());
}

extern "C" size_t bias_backward_scratch_bytes(int OC) {
    return (size_t)BIAS_ROW_CHUNKS * OC * sizeof(float);
}

extern "C" void bias_backward(float *dbias, void *scratch, const kbf16 *dout, int N, int OC, cudaStream_t stream) {
    dim3 grid(ceil_div(OC, 256), BIAS_ROW_CHUNKS);
    bias_partial_kernel<<<grid, 256, 0, stream>>>((float *)scratch, dout, N, OC);
    CUDA_CHECK(cudaGetLastError());
    add_partial_sums(PartialSumOutputs{{dbias, NULL, NULL}}, 1, (const float *)scratch, BIAS_ROW_CHUNKS, OC, OC,
                     stream);
}
