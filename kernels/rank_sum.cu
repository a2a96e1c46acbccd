/* kernels/rank_sum.cu - ZeRO-1's reduce-scatter on one NVLink host, as loads: each rank reads its
 * shard's part of every rank's gradients through the addresses that map the other GPUs' memory, and
 * sums them in fp32 in rank order (model/dist/grad_sync.h). Each value crosses the link once, read
 * where it lies and summed where it lands: on two H200s 0.76 ms for 496 MB against NCCL's
 * reduce-scatter's 0.99 (dev/RESULTS.md, Multi-GPU). Beside other kernels it costs them more than
 * NCCL's does, so it runs only where nothing runs beside it, after the backward.
 *   launch: one block per chunk of at most RANK_SUM_CHUNK values, a chunk inside one piece, its edges
 *   at multiples of 4 of the source index where the piece allows, so that a thread issues
 *   RANK_SUM_VECS 16-byte loads from one rank before it adds any: a load over NVLink takes
 *   microseconds, and only many in flight fill the link. Bytes 4·world read + 4 written a value. */
#include <stdint.h>
#include <stdlib.h>

#include "kernels/kernel_util.cuh"
#include "kernels/kernels.h"

#define RANK_SUM_THREADS 256
#define RANK_SUM_VECS 8
#define RANK_SUM_CHUNK (RANK_SUM_THREADS * RANK_SUM_VECS * 4)

typedef struct {
    size_t src, dst; /* the chunk's first value in every rank's source, and in dst */
    int count;
} RankSumChunk;

struct RankSumPlan {
    RankSumSources sources;
    RankSumChunk *chunks; /* device */
    int num_chunks;
};

__global__ void __launch_bounds__(RANK_SUM_THREADS)
    rank_sum_kernel(float *dst, const __grid_constant__ RankSumSources sources, const RankSumChunk *chunks) {
    const RankSumChunk ch = chunks[blockIdx.x];
    const int world = sources.world;
    /* the values before the source's first 16-byte word, and the rest after its whole words, singly */
    const int head = (int)min((size_t)ch.count, (4 - ch.src % 4) % 4);
    const int words = (ch.count - head) / 4;
    const bool dst_words = (ch.dst - ch.src) % 4 == 0 && (uintptr_t)dst % 16 == 0;
    for (int k = threadIdx.x; k < ch.count - 4 * words; k += RANK_SUM_THREADS) {
        const size_t j = k < head ? k : k + 4 * words;
        float sum = __ldcg(sources.rank[0] + ch.src + j);
        for (int r = 1; r < world; r++) sum += __ldcg(sources.rank[r] + ch.src + j);
        dst[ch.dst + j] = sum;
    }
    float4 acc[RANK_SUM_VECS], v[RANK_SUM_VECS];
    const size_t first = ch.src + head; /* a multiple of 4 */
#pragma unroll
    for (int u = 0; u < RANK_SUM_VECS; u++) {
        const int w = threadIdx.x + u * RANK_SUM_THREADS;
        if (w < words) acc[u] = __ldcg(reinterpret_cast<const float4 *>(sources.rank[0] + first) + w);
    }
    for (int r = 1; r < world; r++) {
#pragma unroll
        for (int u = 0; u < RANK_SUM_VECS; u++) {
            const int w = threadIdx.x + u * RANK_SUM_THREADS;
            if (w < words) v[u] = __ldcg(reinterpret_cast<const float4 *>(sources.rank[r] + first) + w);
        }
#pragma unroll
        for (int u = 0; u < RANK_SUM_VECS; u++) {
            acc[u].x += v[u].x, acc[u].y += v[u].y, acc[u].z += v[u].z, acc[u].w += v[u].w;
        }
    }
#pragma unroll
    for (int u = 0; u < RANK_SUM_VECS; u++) {
        const int w = threadIdx.x + u * RANK_SUM_THREADS;
        if (w >= words) continue;
        float *out = dst + ch.dst + head + 4 * (size_t)w;
        if (dst_words) {
            *reinterpret_cast<float4 *>(out) = acc[u];
        } else {
            out[0] = acc[u].x, out[1] = acc[u].y, out[2] = acc[u].z, out[3] = acc[u].w;
        }
    }
}

/* The chunks of every piece; counts them when out is NULL. */
static int plan_chunks(const RankSumPiece *pieces, int count, RankSumChunk *out) {
    int k = 0;
    for (int i = 0; i < count; i++) {
        const size_t end = pieces[i].src + pieces[i].count;
        for (size_t j = pieces[i].src; j < end;) {
            /* the first chunk ends where a whole chunk would after the source's next 16-byte word */
            size_t next = (j + 3) / 4 * 4 + RANK_SUM_CHUNK;
            if (next > end) next = end;
            if (out) out[k] = (RankSumChunk){j, pieces[i].dst + (j - pieces[i].src), (int)(next - j)};
            k++;
            j = next;
        }
    }
    return k;
}

extern "C" RankSumPlan *rank_sum_plan_create(const RankSumSources *sources, const RankSumPiece *pieces, int count) {
    if (sources->world < 1 || sources->world > RANK_SUM_MAX_WORLD) {
        fprintf(stderr, "error: internal: a rank sum over %d ranks (1 to %d)\n", sources->world, RANK_SUM_MAX_WORLD);
        exit(1);
    }
    for (int r = 0; r < sources->world; r++)
        if ((uintptr_t)sources->rank[r] % 16 != 0) {
            fprintf(stderr, "error: internal: rank %d's gradients are not 16-byte aligned for the rank sum\n", r);
            exit(1);
        }
    const int total = plan_chunks(pieces, count, NULL);
    RankSumChunk *host = (RankSumChunk *)malloc((total ? total : 1) * sizeof *host);
    RankSumPlan *plan = (RankSumPlan *)calloc(1, sizeof *plan);
    if (!host || !plan) {
        fprintf(stderr, "error: out of host memory building the rank sum's plan\n");
        exit(1);
    }
    plan->sources = *sources;
    plan->num_chunks = plan_chunks(pieces, count, host);
    CUDA_CHECK(cudaMalloc((void **)&plan->chunks, (total ? total : 1) * sizeof *host));
    CUDA_CHECK(cudaMemcpy(plan->chunks, host, total * sizeof *host, cudaMemcpyHostToDevice));
    free(host);
    return plan;
}

extern "C" void rank_sum_plan_free(RankSumPlan *plan) {
    if (!plan) return;
    CUDA_CHECK(cudaFree(plan->chunks));
    free(plan);
}

extern "C" void rank_sum(const RankSumPlan *plan, float *dst, cudaStream_t stream) {
    if (plan->num_chunks == 0) return;
    rank_sum_kernel<<<plan->num_chunks, RANK_SUM_THREADS, 0, stream>>>(dst, plan->sources, plan->chunks);
    CUDA_CHECK(cudaGetLastError());
}
