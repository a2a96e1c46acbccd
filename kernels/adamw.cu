/* kernels/adamw.cu - deterministic global gradient norm and fused AdamW, on fp32 master weights or on
 * bf16 state (kernels/adamw_bf16.h).
 *
 * global_sumsq: Σ g² over n fp32 gradients. Pass 1: NORM_BLOCKS blocks (a fixed number, so the
 *   order of additions never depends on the device or on timing) each sum a grid-stride slice
 *   (float4 loads) and tree-reduce in shared memory to one partial; pass 2: one block tree-reduces
 *   the partials in fp64. FLOPs 2n; bytes 4n (memory bound: ~0.17 ms for 124M on an H100).
 * adamw_update: one block per chunk of ≤ ADAMW_CHUNK elements, every chunk inside one tensor, so
 *   the weight-decay flag is per block. Per element: read g, m, v, master (16 B), write m, v,
 *   master, bf16 param (14 B); ~15 FLOPs. Memory bound: 30 B/element (~1.2 ms for 124M). On bf16
 *   state: read g, m, v, param (10 B), write m, v, param (6 B): 16 B/element, and about a hundred
 *   instructions (three rounded divisions, a rounded square root, a 64-bit hash, three stochastic
 *   roundings), near the issue rate's share of the memory time: hence eight values a thread. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "kernels/adamw_bf16.h"
#include "kernels/kernel_util.cuh"
#include "kernels/kernels.h"

#define NORM_BLOCKS 512
#define NORM_THREADS 256
#define ADAMW_CHUNK 16384
#define ADAMW_THREADS 256

__global__ void __launch_bounds__(NORM_THREADS) sumsq_partial_kernel(float *partial, const float *g, size_t n) {
    __shared__ float s[NORM_THREADS];
    size_t n4 = n / 4;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    float acc = 0.0f;
    const float4 *g4 = reinterpret_cast<const float4 *>(g);
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += stride) {
        float4 v = __ldg(g4 + i);
        acc += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
    }
    if (blockIdx.x == 0 && threadIdx.x < n % 4) {
        float v = g[4 * n4 + threadIdx.x];
        acc += v * v;
    }
    s[threadIdx.x] = acc;
    __syncthreads(); /* every thread's value is in s before the tree reads it */
    block_tree_sum(s, NORM_THREADS);
    if (threadIdx.x == 0) partial[blockIdx.x] = s[0];
}

__global__ void __launch_bounds__(NORM_BLOCKS) sumsq_final_kernel(double *out, const float *partial) {
    __shared__ double s[NORM_BLOCKS];
    s[threadIdx.x] = partial[threadIdx.x];
    __syncthreads();
    for (int stride = NORM_BLOCKS / 2; stride > 0; stride >>= 1) {
        if ((int)threadIdx.x < stride) s[threadIdx.x] += s[threadIdx.x + stride];
        __syncthreads();
    }
    if (threadIdx.x == 0) *out = s[0];
}

extern "C" size_t global_sumsq_scratch_bytes(void) {
    return NORM_BLOCKS * sizeof(float);
}

extern "C" void global_sumsq(double *sumsq, void *scratch, const float *grads, size_t n, cudaStream_t stream) {
    if ((uintptr_t)grads % 16 != 0) {
        fprintf(stderr, "error: global_sumsq needs a 16-byte aligned gradient buffer\n");
        exit(1);
    }
    sumsq_partial_kernel<<<NORM_BLOCKS, NORM_THREADS, 0, stream>>>((float *)scratch, grads, n);
    CUDA_CHECK(cudaGetLastError());
    sumsq_final_kernel<<<1, NORM_BLOCKS, 0, stream>>>(sumsq, (const float *)scratch);
    CUDA_CHECK(cudaGetLastError());
}

typedef struct {
    size_t offset;       /* element index of the bf16 weights */
    size_t state_offset; /* element index of master, m, v and the gradients (a shard, or = offset) */
    int count;
    int decay;
} AdamWChunk;

struct AdamWPlan {
    AdamWChunk *chunks; /* device */
    int num_chunks;
};

/* Chunks of tensor i ∩ range r, each at most ADAMW_CHUNK long; counts them when out is NULL. */
static int plan_chunks(const size_t *offsets, const size_t *numels, const int *weight_decay, int count,
                       const AdamWRange *ranges, int nranges, AdamWChunk *out) {
    const AdamWRange whole = {0, SIZE_MAX, 0};
    if (!ranges) ranges = &whole, nranges = 1;
    int k = 0;
    for (int r = 0; r < nranges; r++) {
        size_t r_end = ranges[r].count == SIZE_MAX ? SIZE_MAX : ranges[r].begin + ranges[r].count;
        for (int i = 0; i < count; i++) {
            size_t lo = offsets[i] > ranges[r].begin ? offsets[i] : ranges[r].begin;
            size_t hi = offsets[i] + numels[i] < r_end ? offsets[i] + numels[i] : r_end;
            for (size_t j = lo; j < hi; j += ADAMW_CHUNK) {
                size_t left = hi - j;
                if (out)
                    out[k] = (AdamWChunk){j, ranges[r].state_offset + (j - ranges[r].begin),
                                          (int)(left < ADAMW_CHUNK ? left : ADAMW_CHUNK), weight_decay[i] != 0};
                k++;
            }
        }
    }
    return k;
}

extern "C" AdamWPlan *adamw_plan_create_ranges(const size_t *offsets, const size_t *numels, const int *weight_decay,
                                               int count, const AdamWRange *ranges, int nranges) {
    int total = plan_chunks(offsets, numels, weight_decay, count, ranges, nranges, NULL);
    AdamWChunk *host = (AdamWChunk *)malloc((total ? total : 1) * sizeof *host);
    AdamWPlan *plan = (AdamWPlan *)malloc(sizeof *plan);
    if (!host || !plan) {
        fprintf(stderr, "error: out of host memory building the AdamW plan\n");
        exit(1);
    }
    plan->num_chunks = plan_chunks(offsets, numels, weight_decay, count, ranges, nranges, host);
    CUDA_CHECK(cudaMalloc(&plan->chunks, (total ? total : 1) * sizeof *host));
    CUDA_CHECK(cudaMemcpy(plan->chunks, host, total * sizeof *host, cudaMemcpyHostToDevice));
    free(host);
    return plan;
}

extern "C" AdamWPlan *adamw_plan_create(const size_t *offsets, const size_t *numels, const int *weight_decay,
                                        int count) {
    return adamw_plan_create_ranges(offsets, numels, weight_decay, count, NULL, 0);
}

extern "C" void adamw_plan_free(AdamWPlan *plan) {
    if (!plan) return;
    CUDA_CHECK(cudaFree(plan->chunks));
    free(plan);
}

/* A chunk's values in groups of ADAMW_VEC: 16-byte accesses to the state (gradient, m, v, master),
 * whose groups start at a multiple of ADAMW_VEC of the state index, and to the bf16 weights when
 * their index lines up with it too (wvec; a ZeRO-1 shard's pieces start anywhere); the values before
 * the first whole group and after the last one singly; vec: the buffers are 16-byte aligned. One
 * value at a time left each warp a 64-byte request in flight per array and ran at half the memory's
 * speed (Llama-3.2-1B's update on bf16 state: 14.9 ms for 19.8 GB). */
#define ADAMW_VEC 8

struct ChunkSplit {
    int head, groups; /* values [0, head) singly, then groups of ADAMW_VEC, then the rest singly */
    bool wvec;        /* the groups' weights are whole 16-byte words as well */
};

__device__ __forceinline__ ChunkSplit split_chunk(const AdamWChunk &ch, bool vec) {
    ChunkSplit c = {ch.count, 0, false};
    if (vec) {
        c.head = (int)min((size_t)ch.count, (ADAMW_VEC - ch.state_offset % ADAMW_VEC) % ADAMW_VEC);
        c.groups = (ch.count - c.head) / ADAMW_VEC;
        c.wvec = (ch.offset - ch.state_offset) % ADAMW_VEC == 0;
    }
    return c;
}

/* j of the k-th value the chunk updates singly */
__device__ __forceinline__ int single_index(const ChunkSplit &c, int k) {
    return k < c.head ? k : k + c.groups * ADAMW_VEC;
}

union Bf16x8 {
    uint4 raw;
    uint16_t h[ADAMW_VEC];
};
union F32x8 {
    float4 raw[2];
    float f[ADAMW_VEC];
};

/* Spelled with explicitly rounded operations, so that the single and the grouped paths (which the
 * compiler would contract into FMAs differently) give every value the same bits. */
__device__ __forceinline__ void adamw_value(float &master, float &m, float &v, float g, float lr, float beta1,
                                            float beta2, float eps, float wd, float grad_scale, float c1, float c2) {
    g = __fmul_rn(g, grad_scale);
    m = __fmaf_rn(beta1, m, __fmul_rn(1.0f - beta1, g));
    v = __fmaf_rn(beta2, v, __fmul_rn(__fmul_rn(1.0f - beta2, g), g));
    const float step = __fdiv_rn(__fdiv_rn(m, c1), __fadd_rn(__fsqrt_rn(__fdiv_rn(v, c2)), eps));
    master = __fmaf_rn(-lr, __fmaf_rn(wd, master, step), master);
}

__global__ void __launch_bounds__(ADAMW_THREADS)
    adamw_kernel(const AdamWChunk *chunks, float *master, bf16 *params, const float *grads, float *m, float *v,
                 float lr, float beta1, float beta2, float eps, float weight_decay, float grad_scale, float c1,
                 float c2, bool vec) {
    const AdamWChunk ch = chunks[blockIdx.x];
    const float wd = ch.decay ? weight_decay : 0.0f;
    const ChunkSplit c = split_chunk(ch, vec);
    for (int k = threadIdx.x; k < ch.count - c.groups * ADAMW_VEC; k += ADAMW_THREADS) {
        const int j = single_index(c, k);
        const size_t i = ch.state_offset + j;
        float p = master[i], mi = m[i], vi = v[i];
        adamw_value(p, mi, vi, grads[i], lr, beta1, beta2, eps, wd, grad_scale, c1, c2);
        m[i] = mi, v[i] = vi, master[i] = p;
        if (params) params[ch.offset + j] = __float2bfloat16_rn(p);
    }
    for (int q = threadIdx.x; q < c.groups; q += ADAMW_THREADS) {
        const int j = c.head + q * ADAMW_VEC;
        const size_t i = ch.state_offset + j;
        F32x8 p, mi, vi, g;
        for (int h = 0; h < 2; h++) {
            p.raw[h] = reinterpret_cast<const float4 *>(master + i)[h];
            mi.raw[h] = reinterpret_cast<const float4 *>(m + i)[h];
            vi.raw[h] = reinterpret_cast<const float4 *>(v + i)[h];
            g.raw[h] = reinterpret_cast<const float4 *>(grads + i)[h];
        }
        Bf16x8 out;
#pragma unroll
        for (int e = 0; e < ADAMW_VEC; e++) {
            adamw_value(p.f[e], mi.f[e], vi.f[e], g.f[e], lr, beta1, beta2, eps, wd, grad_scale, c1, c2);
            out.h[e] = __bfloat16_as_ushort(__float2bfloat16_rn(p.f[e]));
        }
        for (int h = 0; h < 2; h++) {
            reinterpret_cast<float4 *>(m + i)[h] = mi.raw[h];
            reinterpret_cast<float4 *>(v + i)[h] = vi.raw[h];
            reinterpret_cast<float4 *>(master + i)[h] = p.raw[h];
        }
        if (params && c.wvec) *reinterpret_cast<uint4 *>(params + ch.offset + j) = out.raw;
        else if (params)
#pragma unroll
            for (int e = 0; e < ADAMW_VEC; e++) params[ch.offset + j + e] = __ushort_as_bfloat16(out.h[e]);
    }
}

static bool aligned16(const void *p) {
    return (uintptr_t)p % 16 == 0;
}

extern "C" void adamw_update(const AdamWPlan *plan, float *master, kbf16 *params_bf16, const float *grads,
                             float *m, float *v, float lr, float beta1, float beta2, float eps, float weight_decay,
                             float grad_scale, int step, cudaStream_t stream) {
    if (plan->num_chunks == 0) return;
    /* Same bias corrections as the CPU reference (model/cpu/backend_cpu.c). */
    float c1 = 1.0f - powf(beta1, (float)step), c2 = 1.0f - powf(beta2, (float)step);
    const bool vec = aligned16(master) && aligned16(params_bf16) && aligned16(grads) && aligned16(m) && aligned16(v);
    adamw_kernel<<<plan->num_chunks, ADAMW_THREADS, 0, stream>>>(plan->chunks, master, params_bf16, grads, m, v,
                                                                 lr, beta1, beta2, eps, weight_decay, grad_scale,
                                                                 c1, c2, vec);
    CUDA_CHECK(cudaGetLastError());
}

__global__ void __launch_bounds__(ADAMW_THREADS)
    adamw_bf16_kernel(const AdamWChunk *chunks, bf16 *params, const float *grads, bf16 *m, bf16 *v,
                      uint64_t index0, AdamWBf16Step s, float weight_decay, bool vec) {
    const AdamWChunk ch = chunks[blockIdx.x];
    s.decay = ch.decay ? weight_decay : 0.0f;
    const ChunkSplit c = split_chunk(ch, vec);
    uint16_t *w16 = reinterpret_cast<uint16_t *>(params), *m16 = reinterpret_cast<uint16_t *>(m),
             *v16 = reinterpret_cast<uint16_t *>(v);
    for (int k = threadIdx.x; k < ch.count - c.groups * ADAMW_VEC; k += ADAMW_THREADS) {
        const int j = single_index(c, k);
        const size_t i = ch.state_offset + j;
        adamw_bf16_value(&s, index0 + ch.offset + j, grads[i], &w16[ch.offset + j], &m16[i], &v16[i]);
    }
    for (int q = threadIdx.x; q < c.groups; q += ADAMW_THREADS) {
        const int j = c.head + q * ADAMW_VEC;
        const size_t i = ch.state_offset + j;
        Bf16x8 w, mi, vi;
        F32x8 g;
        if (c.wvec) w.raw = *reinterpret_cast<const uint4 *>(w16 + ch.offset + j);
        else
#pragma unroll
            for (int e = 0; e < ADAMW_VEC; e++) w.h[e] = w16[ch.offset + j + e];
        mi.raw = *reinterpret_cast<const uint4 *>(m16 + i);
        vi.raw = *reinterpret_cast<const uint4 *>(v16 + i);
        g.raw[0] = reinterpret_cast<const float4 *>(grads + i)[0];
        g.raw[1] = reinterpret_cast<const float4 *>(grads + i)[1];
#pragma unroll
        for (int e = 0; e < ADAMW_VEC; e++)
            adamw_bf16_value(&s, index0 + ch.offset + j + e, g.f[e], &w.h[e], &mi.h[e], &vi.h[e]);
        if (c.wvec) *reinterpret_cast<uint4 *>(w16 + ch.offset + j) = w.raw;
        else
#pragma unroll
            for (int e = 0; e < ADAMW_VEC; e++) w16[ch.offset + j + e] = w.h[e];
        *reinterpret_cast<uint4 *>(m16 + i) = mi.raw;
        *reinterpret_cast<uint4 *>(v16 + i) = vi.raw;
    }
}

extern "C" void adamw_update_bf16(const AdamWPlan *plan, kbf16 *params_bf16, const float *grads, kbf16 *m,
                                  kbf16 *v, uint64_t index0, float lr, float beta1, float beta2, float eps,
                                  float weight_decay, float grad_scale, int step, cudaStream_t stream) {
    if (plan->num_chunks == 0) return;
    /* the bias corrections as adamw_update's, computed on the host for both */
    AdamWBf16Step s = {lr, beta1, beta2, eps, 0.0f, grad_scale, 1.0f - powf(beta1, (float)step),
                       1.0f - powf(beta2, (float)step), step};
    const bool vec = aligned16(params_bf16) && aligned16(grads) && aligned16(m) && aligned16(v);
    adamw_bf16_kernel<<<plan->num_chunks, ADAMW_THREADS, 0, stream>>>(plan->chunks, params_bf16, grads, m, v, index0,
                                                                      s, weight_decay, vec);
    CUDA_CHECK(cudaGetLastError());
}

__global__ void convert_kernel(bf16 *out, const float *in, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = __float2bfloat16_rn(in[i]);
}

extern "C" void convert_fp32_to_bf16(kbf16 *out, const float *in, size_t n, cudaStream_t stream) {
    if (n == 0) return;
    convert_kernel<<<ceil_div(n, 256), 256, 0, stream>>>(out, in, n);
    CUDA_CHECK(cudaGetLastError());
}

__global__ void widen_kernel(float *out, const bf16 *in, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = __bfloat162float(in[i]);
}

extern "C" void convert_bf16_to_fp32(float *out, const kbf16 *in, size_t n, cudaStream_t stream) {
    if (n == 0) return;
    widen_kernel<<<ceil_div(n, 256), 256, 0, stream>>>(out, in, n);
    CUDA_CHECK(cudaGetLastError());
}
