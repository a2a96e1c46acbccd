/* model/train/loss_weights.c - a masked step's micro-batch weights (see loss_weights.h). */
#include "model/train/loss_weights.h"

uint64_t count_valid_targets(const int *targets, size_t n) {
    uint64_t valid = 0;
    for (size_t i = 0; i < n; i++) valid += targets[i] >= 0;
    return valid;
}

static uint64_t gcd(uint64_t a, uint64_t b) {
    while (b) {
        const uint64_t t = a % b;
        a = b, b = t;
    }
    return a;
}

float exact_ratio(uint64_t num, uint64_t den) {
    const uint64_t g = gcd(num, den);
    if (g > 1) num /= g, den /= g;
    /* both exact in float: IEEE's division rounds the quotient once */
    if (num < (1u << 24) && den < (1u << 24)) return (float)num / (float)den;
    return (float)((double)num / (double)den);
}

void step_loss_scales(const uint64_t *mine, const uint64_t *every, int accum, int world, int vocab_parallel,
                      float *scales) {
    uint64_t total = 0;
    for (int a = 0; a < accum; a++) total += every[a];
    for (int a = 0; a < accum; a++)
        scales[a] = total == 0 ? 0.0f
                    : vocab_parallel ? exact_ratio(every[a], total)
                                     : exact_ratio((uint64_t)world * mine[a], total);
}
