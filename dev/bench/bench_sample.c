/* bench_sample.c - the host's time to draw one token from V logits (sample_draw) with top-k, top-p
 * and both, at a vocabulary of V (default 262144); logits of a model's shape: most tokens near
 * the bottom, a few hundred within reach of the top (and at temperature 20 nearly flat, as an
 * untrained model's are). Timings live here, never in tests.
 *
 *   make build/bench_sample && ./build/bench_sample [V [draws]] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "common/rng.h"
#include "model/train/sample.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    const int V = argc > 1 ? atoi(argv[1]) : 262144, draws = argc > 2 ? atoi(argv[2]) : 50;
    if (V < 2 || draws < 1) {
        fprintf(stderr, "usage: bench_sample [V >= 2 [draws >= 1]]\n");
        return 2;
    }
    float *logits = malloc((size_t)V * sizeof *logits);
    if (!logits) return 1;
    Rng gen;
    rng_seed(&gen, 7);
    for (int i = 0; i < V; i++) { /* a spread of about 12 nats, and one token in 1000 lifted by 8 */
        const double u = rng_uniform(&gen), v = rng_uniform(&gen);
        logits[i] = (float)(2.0 * sqrt(-2.0 * log(u + 1e-12)) * cos(6.283185307179586 * v) + (i % 1000 == 0 ? 8.0 : 0.0));
    }
    const struct {
        const char *name;
        SampleSettings s;
    } cases[] = {{"temperature 1 (all V)", {.temperature = 1.0f, .top_p = 1.0f}},
                 {"top-k 50", {.temperature = 1.0f, .top_k = 50, .top_p = 1.0f}},
                 {"top-p 0.9", {.temperature = 1.0f, .top_p = 0.9f}},
                 {"top-k 50, top-p 0.9", {.temperature = 1.0f, .top_k = 50, .top_p = 0.9f}},
                 {"temperature 0.7, top-p 0.95", {.temperature = 0.7f, .top_p = 0.95f}},
                 {"temperature 20, top-p 0.9 (flat)", {.temperature = 20.0f, .top_p = 0.9f}}};
    printf("sample_draw, V = %d, %d draws each\n", V, draws);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        Rng r;
        rng_seed(&r, 1);
        long check = 0;
        const double t0 = now();
        for (int d = 0; d < draws; d++) check += sample_draw(logits, V, &cases[c].s, &r);
        const double ms = (now() - t0) * 1e3 / draws;
        printf("  %-30s %8.3f ms a draw   (ids summed: %ld)\n", cases[c].name, ms, check);
    }
    free(logits);
    return 0;
}
