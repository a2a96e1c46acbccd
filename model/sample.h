/* model/sample.h - drawing the next token from logits. */
#ifndef FUSEDGPT_SAMPLE_H
#define FUSEDGPT_SAMPLE_H

#include "data/rng.h"

/* Softmax of logits[0..V) at the given temperature, then one draw. */
int sample_token(const float *logits, int V, float temperature, Rng *rng);

#endif
