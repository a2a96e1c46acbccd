/* kernels/matmul_dgelu.cu - the MLP's input gradient through GELU, with the bias gradient of the
 * layer below, in one Hopper (sm_90a) kernel:
 *
 *   dinp[N,C] = (dout[N,K]·weight[K,C]) ∘ gelu'(pre_gelu[N,C])   (=, bf16)
 *   dbias[C] += Σ_n dinp[n,:]                                    (the bf16 values as stored)
 *
 * fcproj's backward in the trainer (K = model width, C = 4·width): dinp is fc's output gradient and
 * dbias fc's bias gradient. cuBLASLt's DGELU epilogue runs on an older kernel family there (0.29-0.30
 * ms at N = 32768, C = 3072, K = 768 on an H100, against 0.19-0.22 ms for the same product without
 * it), its DGELU_BGRAD epilogue takes 0.90 ms (dev/RESULTS.md), and the bias gradient was a pass of
 * its own over dinp (0.08 ms).
 *
 * Layout: the weight is transposed first into the scratch (weight^T [C,K], 4.7 MB at C = 3072,
 * K = 768: a few microseconds), so both operands are K-major and feed wgmma straight from
 * 128-byte-swizzled shared memory, as in the fused output layer's tile kernel: 128 x 256 tiles,
 * two warpgroups (64 rows each), a 4-stage TMA ring filled by one thread. CTAs are persistent and
 * walk the tiles row block by row block (the 132 CTAs in flight share their dout blocks and the
 * whole weight in L2).
 *
 * Epilogue per tile: each thread multiplies its accumulators by gelu'(pre_gelu) (the pre_gelu
 * values loaded a few k steps before the tile ends, so their latency hides under the last MMAs;
 * tanh as one MUFU op: the result is rounded to bf16 at once), stores bf16 16 bytes per lane
 * through wgmma.cuh's regrouping, and sums its columns: over its two rows, then a butterfly over the
 * 8 lanes that share columns (each lane keeps 8 of the 64), then the 8 warps in order through
 * shared memory: one row of fp32 partials per (row block, column), which add_partial_sums adds into
 * dbias. Every sum has a fixed order: deterministic, no atomics. */
#include "kernels/gelu.cuh"
#include "kernels/kernel_util.cuh"
#include "kernels/kernels.h"
#include "kernels/tma.cuh"
#include "kernels/wgmma.cuh"

#define MD_BM 128
#define MD_BN 256
#define MD_BK 64
#define MD_STAGES 4
#define MD_THREADS 256
#define MD_A_BYTES (MD_BM * MD_BK * 2)                   /* 16 KiB */
#define MD_STAGE_BYTES (MD_A_BYTES + MD_BN * MD_BK * 2)   /* 48 KiB */
#define MD_SCRATCH_BYTES (8 * 512)                       /* each warp's regrouping scratch */
#define MD_SUMS_BYTES (8 * MD_BN * 4)                    /* each warp's column sums */
#define MD_SMEM (MD_STAGES * MD_STAGE_BYTES + 1024 + 128 + MD_SCRATCH_BYTES + MD_SUMS_BYTES)
#ifndef MD_AUX_AHEAD
#define MD_AUX_AHEAD 3 /* k steps before a tile's end at which its pre_gelu values are loaded */
#endif
#ifndef MD_EPI_VARIANT
#define MD_EPI_VARIANT 0 /* dev/dgelu_variants.sh: 1 stores the product alone (no pre_gelu, no dGELU) */
#endif

typedef struct {
    bf16 *dinp;
    float *partial; /* [row blocks][C], or NULL: no column sums */
    const bf16 *pre_gelu;
    int64_t N;
    int C, K, col_tiles;
    int64_t tiles;
} DgeluArgs;

__device__ __forceinline__ uint32_t smem_addr_u32(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

/* weight [K, C] -> weight^T [C, K]; K and C multiples of 64 */
__global__ void transpose_bf16_kernel(bf16 *out, const bf16 *in, int K, int C) {
    __shared__ bf16 tile[64][66];
    const int k0 = blockIdx.y * 64, c0 = blockIdx.x * 64;
    for (int i = threadIdx.x; i < 64 * 32; i += blockDim.x) {
        const int r = i / 32, c2 = (i % 32) * 2;
        const __nv_bfloat162 v = *reinterpret_cast<const __nv_bfloat162 *>(in + (size_t)(k0 + r) * C + c0 + c2);
        tile[r][c2] = v.x;
        tile[r][c2 + 1] = v.y;
    }
    __syncthreads();
    for (int i = threadIdx.x; i < 64 * 32; i += blockDim.x) {
        const int c = i / 32, r2 = (i % 32) * 2;
        __nv_bfloat162 v;
        v.x = tile[r2][c];
        v.y = tile[r2 + 1][c];
        *reinterpret_cast<__nv_bfloat162 *>(out + (size_t)(c0 + c) * K + k0 + r2) = v;
    }
}

template <bool SUMS>
__global__ void __launch_bounds__(MD_THREADS, 1)
    dgelu_matmul_kernel(const DgeluArgs a, const __grid_constant__ CUtensorMap tm_a, const __grid_constant__ CUtensorMap tm_b) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ unsigned char smem_raw[];
    const uint32_t base_addr = smem_addr_u32(smem_raw);
    const uint32_t ring = (base_addr + 1023) & ~1023u;
    const uint32_t full_bar = ring + MD_STAGES * MD_STAGE_BYTES, empty_bar = full_bar + 8 * MD_STAGES;
    const uint32_t scratch0 = full_bar + 128, sums_addr = scratch0 + MD_SCRATCH_BYTES;
    float *sums = reinterpret_cast<float *>(smem_raw + (sums_addr - base_addr));

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, q = lane & 3;
    const int wg = warp >> 2, wq = warp & 3;
    const int KT = a.K / MD_BK;
    const int64_t my_tiles = blockIdx.x < a.tiles ? (a.tiles - blockIdx.x + gridDim.x - 1) / gridDim.x : 0;
    const int64_t iters = my_tiles * KT;

    if (tid == 0) {
        for (int s = 0; s < MD_STAGES; s++) {
            mbar_init(full_bar + 8 * s, 1);  /* the issuing thread's arrive + the copies' bytes */
            mbar_init(empty_bar + 8 * s, 8); /* every warp, after its wgmma on the stage */
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();

    /* the copy issuer's position in the (tile, k chunk) sequence (thread 0) */
    int64_t ld_it = 0, ld_tile = blockIdx.x;
    int ld_kc = 0;
    auto issue = [&]() {
        const int s = (int)(ld_it % MD_STAGES);
        if (ld_it >= MD_STAGES) mbar_wait(empty_bar + 8 * s, (uint32_t)((ld_it / MD_STAGES - 1) & 1));
        const uint32_t base = ring + s * MD_STAGE_BYTES;
        const int row0 = (int)(ld_tile / a.col_tiles) * MD_BM, col0 = (int)(ld_tile % a.col_tiles) * MD_BN;
        mbar_expect_tx(full_bar + 8 * s, MD_STAGE_BYTES);
        tma_load_2d(base, &tm_a, ld_kc * MD_BK, row0, full_bar + 8 * s);
        tma_load_2d(base + MD_A_BYTES, &tm_b, ld_kc * MD_BK, col0, full_bar + 8 * s);
        ld_it++;
        if (++ld_kc == KT) ld_kc = 0, ld_tile += gridDim.x;
    };
    if (tid == 0)
        while (ld_it < iters && ld_it < MD_STAGES - 1) issue();

    const uint32_t st_addr = regroup_store_addr(scratch0 + warp * 512, lane);
    const uint32_t ld_addr = regroup_load_addr(scratch0 + warp * 512, lane);
    const int aux_at = KT > MD_AUX_AHEAD ? KT - MD_AUX_AHEAD : 0;
    float acc[128];
    uint32_t aux[64]; /* pre_gelu pairs: [h * 32 + i] = row h, columns i*8 + q*2, +1 */
    int64_t it = 0;
    for (int64_t tile = blockIdx.x; tile < a.tiles; tile += gridDim.x) {
        const int64_t rb = tile / a.col_tiles;
        const int col0 = (int)(tile % a.col_tiles) * MD_BN;
        int64_t rows[2];
        rows[0] = rb * MD_BM + wg * 64 + wq * 16 + (lane >> 2);
        rows[1] = rows[0] + 8;
        for (int kc = 0; kc < KT; kc++, it++) {
            const int s = (int)(it % MD_STAGES);
            mbar_wait(full_bar + 8 * s, (uint32_t)((it / MD_STAGES) & 1));
            const uint32_t sA = ring + s * MD_STAGE_BYTES + wg * (64 * MD_BK * 2);
            const uint32_t sB = ring + s * MD_STAGE_BYTES + MD_A_BYTES;
            __syncwarp(); /* wgmma is .aligned: the warp must be converged after the waits */
            fence_acc(acc);
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < MD_BK / 16; kk++)
                wgmma_m64n256k16(acc, smem_desc(sA + kk * 32), smem_desc(sB + kk * 32), (kc | kk) != 0);
            wgmma_commit();
            if (tid == 0 && ld_it < iters) issue();
            if (MD_EPI_VARIANT == 0 && kc == aux_at) {
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const bool in = rows[h] < a.N;
                    const bf16 *src = a.pre_gelu + (in ? rows[h] : 0) * a.C + col0 + q * 2;
#pragma unroll
                    for (int i = 0; i < 32; i++) aux[h * 32 + i] = in ? __ldg(reinterpret_cast<const unsigned int *>(src + i * 8)) : 0u;
                }
            }
            __syncwarp();
            wgmma_wait<0>();
            fence_acc(acc);
            __syncwarp();
            if (lane == 31) mbar_arrive(empty_bar + 8 * s); /* not thread 0, which may wait in issue() */
        }

        bf16 *out[2];
#pragma unroll
        for (int h = 0; h < 2; h++) out[h] = a.dinp + (rows[h] < a.N ? rows[h] : 0) * a.C + col0;
#pragma unroll
        for (int g = 0; g < MD_BN / 32; g++) {
            float cs[8]; /* this group's column sums over the thread's two rows: [m * 2 + j] */
#pragma unroll
            for (int h = 0; h < 2; h++) {
                uint32_t w[4];
#pragma unroll
                for (int m = 0; m < 4; m++) {
                    const int i = g * 4 + m;
                    float v0 = acc[i * 4 + h * 2], v1 = acc[i * 4 + h * 2 + 1];
                    if (MD_EPI_VARIANT == 0) {
                        const uint32_t xb = aux[h * 32 + i];
                        const float2 x = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(&xb));
                        v0 *= gelu_grad_from_tanh(x.x, tanh_approx(gelu_arg(x.x)));
                        v1 *= gelu_grad_from_tanh(x.y, tanh_approx(gelu_arg(x.y)));
                    }
                    const __nv_bfloat162 b = __floats2bfloat162_rn(v0, v1);
                    w[m] = *reinterpret_cast<const uint32_t *>(&b);
                    const float2 r = __bfloat1622float2(b);
                    cs[m * 2] = h == 0 ? r.x : cs[m * 2] + r.x;
                    cs[m * 2 + 1] = h == 0 ? r.y : cs[m * 2 + 1] + r.y;
                }
                const uint4 o = regroup_octets(st_addr, ld_addr, w);
                if (rows[h] < a.N) *reinterpret_cast<uint4 *>(out[h] + (g * 4 + q) * 8) = o;
            }
            if (SUMS) {
                /* the 8 lanes of a column set (same q) halve their 8 sums three times: lane bit b
                 * keeps the half that b selects and adds its partner's copy of it; lane ends with
                 * index lane / 4, i.e. column octet g * 4 + lane / 8, column 2q + (lane / 4) % 2 */
#pragma unroll
                for (int step = 0; step < 3; step++) {
                    const int bit = 16 >> step, half = 4 >> step;
                    const bool up = lane & bit;
#pragma unroll
                    for (int k = 0; k < half; k++) {
                        const float keep = up ? cs[half + k] : cs[k], give = up ? cs[k] : cs[half + k];
                        cs[k] = keep + __shfl_xor_sync(0xffffffffu, give, bit);
                    }
                }
                sums[warp * MD_BN + (g * 4 + (lane >> 3)) * 8 + 2 * q + ((lane >> 2) & 1)] = cs[0];
            }
        }
        if (SUMS) {
            __syncthreads();
            float total = 0.0f;
#pragma unroll
            for (int w8 = 0; w8 < 8; w8++) total += sums[w8 * MD_BN + tid];
            a.partial[rb * a.C + col0 + tid] = total;
            __syncthreads(); /* the next tile's sums overwrite these */
        }
    }
#else
    __trap(); /* only the sm_90a build has wgmma; matmul_dgelu_applies() keeps the host from launching it elsewhere */
#endif
}

static size_t align256(size_t x) { return (x + 255) & ~(size_t)255; }

static int g_enabled = 1;
extern "C" void matmul_use_dgelu_kernel(int on) { g_enabled = on; }

extern "C" int matmul_dgelu_applies(int N, int C, int K) {
    static int sm90 = -1;
    if (sm90 < 0) {
        int dev = 0, major = 0, minor = 0;
        CUDA_CHECK(cudaGetDevice(&dev));
        CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
        CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
        sm90 = major == 9 && minor == 0;
    }
    return g_enabled && sm90 && N > 0 && C % MD_BN == 0 && K % MD_BK == 0 && K >= MD_BK;
}

extern "C" size_t matmul_dgelu_scratch_bytes(int N, int C, int K) {
    return align256((size_t)C * K * sizeof(bf16)) + (size_t)((N + MD_BM - 1) / MD_BM) * C * sizeof(float);
}

extern "C" void matmul_dgelu(kbf16 *dinp, float *dbias, void *scratch, const kbf16 *dout, const kbf16 *weight,
                             const kbf16 *pre_gelu, int N, int C, int K, cudaStream_t stream) {
    static int configured, sms;
    if (!configured) {
        int dev = 0;
        CUDA_CHECK(cudaGetDevice(&dev));
        CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
        CUDA_CHECK(cudaFuncSetAttribute(dgelu_matmul_kernel<true>, cudaFuncAttributeMaxDynamicSharedMemorySize, MD_SMEM));
        CUDA_CHECK(cudaFuncSetAttribute(dgelu_matmul_kernel<false>, cudaFuncAttributeMaxDynamicSharedMemorySize, MD_SMEM));
        configured = 1;
    }
    bf16 *weight_t = (bf16 *)scratch;
    transpose_bf16_kernel<<<dim3(C / 64, K / 64), 256, 0, stream>>>(weight_t, weight, K, C);
    CUDA_CHECK(cudaGetLastError());

    DgeluArgs a;
    a.dinp = dinp;
    a.partial = dbias ? (float *)((char *)scratch + align256((size_t)C * K * sizeof(bf16))) : NULL;
    a.pre_gelu = pre_gelu;
    a.N = N;
    a.C = C;
    a.K = K;
    a.col_tiles = C / MD_BN;
    const int64_t row_blocks = ((int64_t)N + MD_BM - 1) / MD_BM;
    a.tiles = row_blocks * a.col_tiles;
    const CUtensorMap tm_a = tma_map_rows(dout, N, K, MD_BM), tm_b = tma_map_rows(weight_t, C, K, MD_BN);
    const unsigned grid = (unsigned)(a.tiles < sms ? a.tiles : sms);
    if (dbias)
        dgelu_matmul_kernel<true><<<grid, MD_THREADS, MD_SMEM, stream>>>(a, tm_a, tm_b);
    else
        dgelu_matmul_kernel<false><<<grid, MD_THREADS, MD_SMEM, stream>>>(a, tm_a, tm_b);
    CUDA_CHECK(cudaGetLastError());
    if (dbias) {
        PartialSumOutputs outs = {{dbias, NULL, NULL}};
        add_partial_sums(outs, 1, a.partial, (int)row_blocks, (size_t)C, C, stream);
    }
}
