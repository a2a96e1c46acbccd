/* model/train/sample.h - drawing the next token from logits, and a sample's text. */
#ifndef FUSEDGPT_SAMPLE_H
#define FUSEDGPT_SAMPLE_H

#include "data/rng.h"
#include "tokenizer/tokenizer.h"

/* Softmax of logits[0..V) at the given temperature, then one draw. */
int sample_token(const float *logits, int V, float temperature, Rng *rng);

/* The same over the top_k largest logits only (top_k <= 0 or >= V: all of them); temperature 0
 * (or top_k 1) is greedy: the largest logit, the lowest id among equals, with no draw. */
int sample_token_top_k(const float *logits, int V, float temperature, int top_k, Rng *rng);

/* The text of tokens[0..n), all of them: decoded by tok, or the ids separated by spaces where there
 * is no tokenizer. Allocated here (free it); NULL when out of memory. */
char *sample_text(const Tokenizer *tok, const int *tokens, int n);

#endif
