#include "model/sample.h"

#include <math.h>

int sample_token(const float *logits, int V, float temperature, Rng *rng) {
    float m = -INFINITY;
    for (int i = 0; i < V; i++) m = fmaxf(m, logits[i]);
    double sum = 0.0;
    for (int i = 0; i < V; i++) sum += exp((logits[i] - m) / temperature);
    double r = rng_uniform(rng) * sum, acc = 0.0;
    for (int i = 0; i < V; i++) {
        acc += exp((logits[i] - m) / temperature);
        if (r < acc) return i;
    }
    return V - 1;
}
