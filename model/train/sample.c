/* model/train/sample.c - drawing the next token from logits: all of them, the top k, the top p, or
 * greedily. */
#include "model/train/sample.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

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

static int argmax(const float *logits, int V) {
    int best = 0;
    for (int i = 1; i < V; i++)
        if (logits[i] > logits[best]) best = i;
    return best;
}

/* The larger logit first, the lower id among equals: the order greedy decoding and top-k agree on. */
static int by_logit_desc(const void *a, const void *b, void *logits) {
    const float *l = logits;
    int x = *(const int *)a, y = *(const int *)b;
    if (l[x] != l[y]) return l[x] > l[y] ? -1 : 1;
    return (x > y) - (x < y);
}

int sample_draw(const float *logits, int V, const SampleSettings *s, Rng *rng) {
    const float t = s->temperature;
    if (t <= 0 || s->top_k == 1) return argmax(logits, V);
    const int by_k = s->top_k > 0 && s->top_k < V, by_p = s->top_p > 0.0f && s->top_p < 1.0f;
    if (!by_k && !by_p) return sample_token(logits, V, t, rng);
    int *ids = malloc((size_t)V * sizeof *ids);
    double *w = malloc((size_t)V * sizeof *w);
    if (!ids || !w) { /* out of memory: the likeliest token is still a fair answer */
        free(ids);
        free(w);
        return argmax(logits, V);
    }
    for (int i = 0; i < V; i++) ids[i] = i;
    qsort_r(ids, (size_t)V, sizeof *ids, by_logit_desc, (void *)logits);
    int n = by_k ? s->top_k : V;
    while (n < V && logits[ids[n]] == logits[ids[n - 1]]) n++; /* the k-th's equals stay, as in transformers */
    double sum = 0.0, m = logits[ids[0]];
    for (int k = 0; k < n; k++) sum += w[k] = exp((logits[ids[k]] - m) / t);
    if (by_p) { /* a token stays while the likelier ones hold less than top_p of the mass */
        double before = 0.0;
        for (int k = 0; k < n; k++)
            if ((before += w[k]) >= (double)s->top_p * sum) {
                n = k + 1;
                break;
            }
        sum = 0.0;
        for (int k = 0; k < n; k++) sum += w[k];
    }
    double r = rng_uniform(rng) * sum, acc = 0.0;
    int pick = ids[n - 1];
    for (int k = 0; k < n; k++)
        if (r < (acc += w[k])) {
            pick = ids[k];
            break;
        }
    free(w);
    free(ids);
    return pick;
}

static int all_finite(const float *x, int n) {
    for (int i = 0; i < n; i++)
        if (!isfinite(x[i])) return 0;
    return 1;
}

int sample_generate(Backend *be, int *tokens, int n, int gen, const SampleSettings *s, Rng *rng, float *logits,
                    void (*each)(int token, void *ctx), void *ctx) {
    const int T = be->T, V = be->table->cfg.vocab_size, keep = T > 1 ? T / 2 : 1;
    int first = 0; /* the context's first token, at position 0 of the window */
    be->ops->prefill(be, tokens, n, logits);
    for (int i = n; i < n + gen; i++) {
        /* a draw from NaN or Inf logits would be some fixed token, silently */
        if (!all_finite(logits, V)) return i - n;
        tokens[i] = sample_draw(logits, V, s, rng);
        if (each) each(tokens[i], ctx);
        if (i + 1 == n + gen) break;
        if (i - first < T) {
            be->ops->decode_step(be, tokens[i], i - first, logits);
        } else { /* the window is full: its last half, tokens[i] included, starts again at position 0 */
            first = i + 1 - keep;
            be->ops->prefill(be, tokens + first, keep, logits);
        }
    }
    return gen;
}

char *sample_text(const Tokenizer *tok, const int *tokens, int n) {
    if (!tok) { /* "id " each: at most 11 bytes for an int, and the space */
        char *text = malloc(12 * (size_t)n + 1);
        if (!text) return NULL;
        size_t len = 0;
        text[0] = 0;
        for (int i = 0; i < n; i++) len += (size_t)sprintf(text + len, "%d ", tokens[i]);
        return text;
    }
    uint32_t *ids = malloc(((size_t)n + 1) * sizeof *ids);
    if (!ids) return NULL;
    for (int i = 0; i < n; i++) ids[i] = (uint32_t)tokens[i];
    const size_t need = tokenizer_decode(tok, ids, (size_t)n, NULL, 0); /* how long the text is */
    char *text = malloc(need + 1);
    if (text) {
        tokenizer_decode(tok, ids, (size_t)n, text, need);
        text[need] = 0;
    }
    free(ids);
    return text;
}
