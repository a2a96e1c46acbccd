/* model/train/sample.h - drawing the next token from logits, and a sample's text. */
#ifndef FUSEDGPT_SAMPLE_H
#define FUSEDGPT_SAMPLE_H

#include "common/rng.h"
#include "model/backend.h"
#include "tokenizer/tokenizer.h"

/* Softmax of logits[0..V) at the given temperature, then one draw. */
int sample_token(const float *logits, int V, float temperature, Rng *rng);

/* How a token is drawn, in transformers' order: the logits divided by the temperature, the top_k
 * largest kept with any equal to the k-th (top_k <= 0 or >= V: all of them), then the fewest of those,
 * likeliest first, whose probability reaches top_p (top_p <= 0 or >= 1: all; never none). Temperature
 * 0 (or top_k 1) is greedy: the largest logit, the lowest id among equals, with no draw. Equal logits
 * rank by lower id. */
typedef struct {
    float temperature;
    int top_k;
    float top_p;
    const int *stops; /* stops[0..n_stops): generation ends once one of them is drawn */
    int n_stops;
} SampleSettings;

int sample_draw(const float *logits, int V, const SampleSettings *s, Rng *rng);

/* Continues tokens[0..n) (1 <= n <= be->T) with gen tokens, each drawn by sample_draw, into
 * tokens[n..n+gen) (room for n + gen). The context runs through the model once (prefill), then
 * each token costs one row against the backend's key/value cache. The position table ends at the
 * window of be->T positions, so when the context fills it the last be->T/2 tokens are kept and run
 * again from position 0, and generation goes on; until then the tokens are exactly those a full
 * forward per token draws. each(token, ctx) sees every token as it is drawn (each may be NULL).
 * logits: V floats of scratch. Returns the number of tokens drawn: gen; fewer when a stop token
 * was drawn (the last of them); or fewer when the model's logits came out NaN or Inf (damaged or
 * diverged weights), where it stops rather than draw. */
int sample_generate(Backend *be, int *tokens, int n, int gen, const SampleSettings *s, Rng *rng, float *logits,
                    void (*each)(int token, void *ctx), void *ctx);

/* The text of tokens[0..n), all of them: decoded by tok, or the ids separated by spaces where there
 * is no tokenizer. Allocated here (free it); NULL when out of memory. */
char *sample_text(const Tokenizer *tok, const int *tokens, int n);

#endif
