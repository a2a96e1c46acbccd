/* ZeRO-1's reduce-scatter by loads (kernels/rank_sum.cu) on one GPU: buffers of this GPU stand for the
 * ranks' gradients, as the addresses of the other GPUs' memory do on one NVLink host. Each piece's
 * values are summed in fp32 in rank order, bit for bit against a CPU loop, at pieces that start at
 * every alignment in the sources and in the shard, cross chunk edges, or hold one value; nothing
 * outside the pieces is written. The exchange itself needs two GPUs: dev/check/multigpu_check.sh. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/rng.h"
#include "kernels/cuda_check.h"
#include "kernels/kernels.h"
#include "tests/test.h"
#include "tests/test_util.h"

static uint32_t bits_of(float x) {
    uint32_t b;
    memcpy(&b, &x, 4);
    return b;
}

/* Pieces as a ZeRO-1 shard has them: in source order, packed one after another in the shard from
 * shard0 on, each at a source offset apart from the last by gap values. */
static size_t place_pieces(RankSumPiece *p, const size_t *counts, const size_t *gaps, int n, size_t shard0) {
    size_t src = 0, dst = shard0;
    for (int i = 0; i < n; i++) {
        src += gaps[i];
        p[i] = (RankSumPiece){src, dst, counts[i]};
        src += counts[i];
        dst += counts[i];
    }
    return src;
}

TEST(rank_sum_adds_every_ranks_gradients_in_rank_order_into_the_shard) {
    const int worlds[] = {1, 2, 3, 8};
    /* a chunk holds 8192 values: pieces across one and several chunk edges, and short ones */
    const size_t counts[] = {1, 3, 8192 + 5, 4, 2 * 8192 + 7, 13, 8191, 65537};
    const size_t gaps[] = {0, 1, 2, 3, 5, 8192 - 1, 6, 1};
    const int npieces = 8;
    Rng rng;
    rng_seed(&rng, 3611);
    for (int w = 0; w < 4; w++)
        for (size_t shard0 = 0; shard0 < 4; shard0++) {
            const int world = worlds[w];
            RankSumPiece pieces[8];
            const size_t n_src = place_pieces(pieces, counts, gaps, npieces, shard0) + 9;
            const size_t n_dst = pieces[npieces - 1].dst + pieces[npieces - 1].count + 5;
            float *x = (float *)malloc((size_t)world * n_src * sizeof(float));
            float *got = (float *)malloc(n_dst * sizeof(float));
            /* magnitudes apart by up to 2^40, so that the order of the additions shows in the last bits */
            fill_normal(x, (size_t)world * n_src, 1.0f, &rng);
            for (size_t i = 0; i < (size_t)world * n_src; i++) x[i] = ldexpf(x[i], (int)rng_below(&rng, 41) - 20);
            RankSumSources sources = {{NULL}, world};
            for (int r = 0; r < world; r++) {
                CUDA_CHECK(cudaMalloc((void **)&sources.rank[r], n_src * sizeof(float)));
                CUDA_CHECK(cudaMemcpy((void *)sources.rank[r], x + (size_t)r * n_src, n_src * sizeof(float),
                                      cudaMemcpyHostToDevice));
            }
            float *d_dst;
            CUDA_CHECK(cudaMalloc((void **)&d_dst, n_dst * sizeof(float)));
            CUDA_CHECK(cudaMemset(d_dst, 0xff, n_dst * sizeof(float)));
            RankSumPlan *plan = rank_sum_plan_create(&sources, pieces, npieces);
            rank_sum(plan, d_dst, 0);
            CUDA_CHECK(cudaMemcpy(got, d_dst, n_dst * sizeof(float), cudaMemcpyDeviceToHost));
            size_t wrong = 0, summed = 0, order_shows = 0, first = SIZE_MAX;
            for (int i = 0; i < npieces; i++)
                for (size_t k = 0; k < pieces[i].count; k++) {
                    const size_t s = pieces[i].src + k;
                    float sum = x[s], reversed = x[(size_t)(world - 1) * n_src + s];
                    for (int r = 1; r < world; r++) sum += x[(size_t)r * n_src + s];
                    for (int r = world - 2; r >= 0; r--) reversed += x[(size_t)r * n_src + s];
                    const int bad = bits_of(got[pieces[i].dst + k]) != bits_of(sum);
                    if (bad && first == SIZE_MAX) first = pieces[i].dst + k;
                    wrong += bad;
                    order_shows += bits_of(reversed) != bits_of(sum);
                    summed++;
                }
            size_t untouched = 0;
            for (size_t j = 0; j < shard0; j++) untouched += bits_of(got[j]) == 0xffffffffu;
            for (size_t j = n_dst - 5; j < n_dst; j++) untouched += bits_of(got[j]) == 0xffffffffu;
            CHECK(wrong == 0, "world %d, shard from %zu: %zu of %zu sums differ from rank order's bits (first at %zu)",
                  world, shard0, wrong, summed, first);
            CHECK(untouched == shard0 + 5, "world %d, shard from %zu: values outside the pieces were written", world,
                  shard0);
            if (world >= 3) /* the inputs tell one order from another: a sum in another order fails above */
                CHECK(order_shows > summed / 100, "world %d: only %zu of %zu sums depend on the order", world,
                      order_shows, summed);
            rank_sum_plan_free(plan);
            CUDA_CHECK(cudaFree(d_dst));
            for (int r = 0; r < world; r++) CUDA_CHECK(cudaFree((void *)sources.rank[r]));
            free(got);
            free(x);
        }
}
