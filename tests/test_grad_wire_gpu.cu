/* The bf16 gradient wire's kernels (model/dist/grad_sync.h) on one GPU: each rank's fp32 value is
 * rounded once to the nearest bf16, ties to even (convert_fp32_to_bf16), and a rank's part is
 * summed over the ranks in fp32 in rank order (sum_bf16_parts, kernels/wire_sum.cu), bit for bit
 * against a CPU loop, at odd lengths and strides. A world of one cannot run NCCL: the exchange
 * between ranks is dev/check/multigpu_check.sh's wire section; here ./train in a world of one takes
 * --grad-reduce bf16 as the no-op it is and says so. */
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

static float float_of(uint32_t b) {
    float x;
    memcpy(&x, &b, 4);
    return x;
}

/* The bf16 nearest to x, ties to the even one, found by comparing the two candidates (bit patterns
 * order finite floats of one sign by magnitude, so they are the truncation and the next one up). */
static uint16_t nearest_bf16(float x) {
    const uint16_t down = (uint16_t)(bits_of(x) >> 16), up = (uint16_t)(down + 1);
    const double below = fabs((double)x - float_of((uint32_t)down << 16));
    const double above = fabs((double)float_of((uint32_t)up << 16) - x);
    if (below != above) return below < above ? down : up;
    return (down & 1) ? up : down;
}

static float bf16_value(uint16_t h) {
    return float_of((uint32_t)h << 16);
}

/* Values a gradient can hold: normal draws over 2^-140..2^60 (fp32 subnormals among them), zeros of
 * both signs, and exact ties (a bf16 value plus half its ulp) with even and odd last bits. */
static void gradient_like(float *x, size_t n, Rng *rng) {
    fill_normal(x, n, 1.0f, rng);
    for (size_t i = 0; i < n; i++) {
        const int e = (int)rng_below(rng, 200) - 140;
        switch (i % 8) {
        case 0: x[i] = ldexpf(x[i], e); break;
        case 1: x[i] = i % 16 == 1 ? 0.0f : -0.0f; break;
        case 2: x[i] = float_of((bits_of(x[i]) & 0xffff0000u) | 0x8000u); break; /* a tie */
        default: x[i] = ldexpf(x[i], e / 8); break;
        }
    }
}

TEST(grad_wire_rounds_each_value_once_to_the_nearest_bf16_ties_to_even) {
    const size_t n = 100003;
    Rng rng;
    rng_seed(&rng, 3601);
    float *x = (float *)malloc(n * sizeof(float));
    uint16_t *got = (uint16_t *)malloc((n + 5) * sizeof(uint16_t));
    gradient_like(x, n, &rng);
    float *d_x;
    kbf16 *d_out;
    CUDA_CHECK(cudaMalloc((void **)&d_x, n * sizeof(float)));
    CUDA_CHECK(cudaMalloc((void **)&d_out, (n + 5) * sizeof(kbf16)));
    CUDA_CHECK(cudaMemcpy(d_x, x, n * sizeof(float), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemset(d_out, 0x7f, (n + 5) * sizeof(kbf16)));
    convert_fp32_to_bf16(d_out, d_x, n, 0);
    CUDA_CHECK(cudaMemcpy(got, d_out, (n + 5) * sizeof(kbf16), cudaMemcpyDeviceToHost));
    size_t wrong = 0, ties = 0, ties_up = 0, first = n;
    for (size_t i = 0; i < n; i++) {
        const uint16_t want = nearest_bf16(x[i]);
        if (got[i] != want && first == n) first = i;
        wrong += got[i] != want;
        const int tie = (bits_of(x[i]) & 0xffffu) == 0x8000u;
        ties += tie;
        ties_up += tie && got[i] != (uint16_t)(bits_of(x[i]) >> 16);
    }
    CHECK(wrong == 0, "%zu of %zu values rounded wrongly; the first, %.9g, to %.9g, not %.9g", wrong, n,
          first < n ? x[first] : 0.0, first < n ? bf16_value(got[first]) : 0.0,
          first < n ? bf16_value(nearest_bf16(x[first])) : 0.0);
    /* ties go to even: half of them away from zero, so neither truncation nor rounding half up passes */
    CHECK(ties > 1000 && ties_up > ties / 4 && ties_up < 3 * ties / 4, "%zu ties, %zu rounded up", ties, ties_up);
    CHECK(got[n] == 0x7f7f && got[n + 4] == 0x7f7f, "values past the end were written");
    printf("    %zu values (%zu exact ties, %zu of them rounded up), all to the nearest bf16\n", n, ties, ties_up);
    CUDA_CHECK(cudaFree(d_out));
    CUDA_CHECK(cudaFree(d_x));
    free(got);
    free(x);
}

TEST(grad_wire_sums_every_ranks_part_in_fp32_in_rank_order) {
    const int worlds[] = {1, 2, 3, 4, 7, 8};
    const size_t lengths[] = {1, 7, 1001, 65537};
    Rng rng;
    rng_seed(&rng, 3602);
    for (int w = 0; w < 6; w++)
        for (int l = 0; l < 4; l++) {
            const int world = worlds[w];
            const size_t n = lengths[l], stride = n + 13, total = (size_t)world * stride;
            float *x = (float *)malloc(total * sizeof(float)), *got = (float *)malloc((n + 3) * sizeof(float));
            uint16_t *parts = (uint16_t *)malloc(total * sizeof(uint16_t));
            /* magnitudes apart by up to 2^32: a bf16's 8 bits then reach past fp32's 24 in a sum, so
             * its roundings, and with them the order of the additions, show in the last bits (within
             * 2^16 of each other, 8-bit values sum exactly in fp32, in any order) */
            fill_normal(x, total, 1.0f, &rng);
            for (size_t i = 0; i < total; i++) parts[i] = nearest_bf16(ldexpf(x[i], (int)rng_below(&rng, 33) - 16));
            kbf16 *d_parts;
            float *d_out;
            CUDA_CHECK(cudaMalloc((void **)&d_parts, total * sizeof(kbf16)));
            CUDA_CHECK(cudaMalloc((void **)&d_out, (n + 3) * sizeof(float)));
            CUDA_CHECK(cudaMemcpy(d_parts, parts, total * sizeof(kbf16), cudaMemcpyHostToDevice));
            CUDA_CHECK(cudaMemset(d_out, 0xff, (n + 3) * sizeof(float)));
            sum_bf16_parts(d_out, d_parts, stride, world, n, 0);
            CUDA_CHECK(cudaMemcpy(got, d_out, (n + 3) * sizeof(float), cudaMemcpyDeviceToHost));
            size_t wrong = 0, order_shows = 0;
            for (size_t i = 0; i < n; i++) {
                float sum = bf16_value(parts[i]), reversed = bf16_value(parts[(size_t)(world - 1) * stride + i]);
                for (int r = 1; r < world; r++) sum += bf16_value(parts[(size_t)r * stride + i]);
                for (int r = world - 2; r >= 0; r--) reversed += bf16_value(parts[(size_t)r * stride + i]);
                wrong += bits_of(got[i]) != bits_of(sum);
                order_shows += bits_of(reversed) != bits_of(sum);
            }
            CHECK(wrong == 0, "world %d, %zu values: %zu sums differ from rank order's bits", world, n, wrong);
            CHECK(bits_of(got[n]) == 0xffffffffu && bits_of(got[n + 2]) == 0xffffffffu,
                  "world %d, %zu values: sums written past the end", world, n);
            /* the inputs can tell one order from another: a sum in another order would fail above */
            if (world >= 3 && n >= 1001)
                CHECK(order_shows > n / 100, "world %d: only %zu of %zu sums depend on the order", world,
                      order_shows, n);
            CUDA_CHECK(cudaFree(d_out));
            CUDA_CHECK(cudaFree(d_parts));
            free(parts);
            free(got);
            free(x);
        }
}

TEST(grad_reduce_bf16_in_a_world_of_one_is_accepted_named_and_changes_nothing) {
    char shard[600], args[2000];
    snprintf(shard, sizeof shard, "%s/train.bin", test_tmpdir());
    REQUIRE(write_pattern_shard(shard, 20000, 1000, 5) == 0, "writing %s", shard);
    float losses[2][8];
    int steps[2];
    const char *wire[2] = {"fp32", "bf16"};
    for (int k = 0; k < 2; k++) {
        char *out = NULL;
        snprintf(args, sizeof args, "-e tiny -v 1000 -b 8 -t 128 -x 4 -l 2e-3 --warmup 1 -s 0 --val-every 0 "
                                    "--grad-reduce %s -i %s -o %s/%s", wire[k], shard, test_tmpdir(), wire[k]);
        int rc = run_train(args, &out);
        REQUIRE(out, "could not run ./train %s", args);
        CHECK(rc == 0, "./train %s: exit %d: %s", args, rc, out);
        steps[k] = parse_losses(out, losses[k], 8);
        if (k == 1)
            CHECK(strstr(out, "--grad-reduce bf16 does nothing in a world of one") != NULL,
                  "the header does not say the flag does nothing alone: %s", out);
        free(out);
    }
    CHECK(steps[0] == 4 && steps[1] == 4 && memcmp(losses[0], losses[1], 4 * sizeof(float)) == 0,
          "fp32 and bf16 in a world of one differ: %d and %d steps, last losses %.6f %.6f", steps[0], steps[1],
          steps[0] ? losses[0][steps[0] - 1] : 0.0, steps[1] ? losses[1][steps[1] - 1] : 0.0);
}
