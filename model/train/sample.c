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

/* The ids whose logit lies in [floor, above), into ids likeliest first: a band of the order
 * by_logit_desc gives all V, without sorting all V (a 262144-token vocabulary took a sort a token).
 * Their count. */
static int likeliest_band(const float *logits, int V, float floor, float above, int *ids) {
    int n = 0;
    for (int i = 0; i < V; i++)
        if (logits[i] >= floor && logits[i] < above) ids[n++] = i;
    qsort_r(ids, (size_t)n, sizeof *ids, by_logit_desc, (void *)logits);
    return n;
}

/* The k-th largest of x[0..n) (1 <= k <= n), reordering x: Hoare's selection, O(n) on average. */
static float kth_largest(float *x, int n, int k) {
    int lo = 0, hi = n - 1;
    const int want = k - 1; /* its index in descending order */
    while (lo < hi) {
        const float pivot = x[lo + (hi - lo) / 2];
        int i = lo, j = hi;
        while (i <= j) {
            while (x[i] > pivot) i++;
            while (x[j] < pivot) j--;
            if (i <= j) {
                const float swap = x[i];
                x[i++] = x[j];
                x[j--] = swap;
            }
        }
        /* x[lo..j] >= pivot >= x[i..hi], and what lies between equals the pivot */
        if (want <= j) hi = j;
        else if (want >= i) lo = i;
        else return pivot;
    }
    return x[lo];
}

/* How many of w[0..n), likeliest first, top_p keeps: a token stays while the likelier ones hold
 * less than p_mass. 0 when all n hold less. */
static int nucleus(const double *w, int n, double p_mass) {
    double before = 0.0;
    for (int k = 0; k < n; k++)
        if ((before += w[k]) >= p_mass) return k + 1;
    return 0;
}

int sample_draw(const float *logits, int V, const SampleSettings *s, Rng *rng) {
    const float t = s->temperature;
    if (t <= 0 || s->top_k == 1) return argmax(logits, V);
    const int by_k = s->top_k > 0 && s->top_k < V, by_p = s->top_p > 0.0f && s->top_p < 1.0f;
    if (!by_k && !by_p) return sample_token(logits, V, t, rng);
    int *ids = malloc((size_t)V * sizeof *ids);
    double *w = malloc((size_t)V * sizeof *w);
    float *copy = by_k ? malloc((size_t)V * sizeof *copy) : NULL;
    if (!ids || !w || (by_k && !copy)) { /* out of memory: the likeliest token is still a fair answer */
        free(ids);
        free(w);
        free(copy);
        return argmax(logits, V);
    }
    const double m = logits[argmax(logits, V)];
    int n;
    if (by_k) { /* the k likeliest, and any equal to the k-th, as in transformers */
        for (int i = 0; i < V; i++) copy[i] = logits[i];
        n = likeliest_band(logits, V, kth_largest(copy, V, s->top_k), INFINITY, ids);
        double sum = 0.0;
        for (int k = 0; k < n; k++) sum += w[k] = exp((logits[ids[k]] - m) / t);
        const int cut = by_p ? nucleus(w, n, (double)s->top_p * sum) : 0;
        if (cut) n = cut;
    } else { /* top_p of the mass of all V: the likeliest, band by band down from the top, until they hold it */
        double total = 0.0, before = 0.0;
        for (int i = 0; i < V; i++) total += exp((logits[i] - m) / t);
        const double p_mass = (double)s->top_p * total;
        int have = 0;
        n = 0;
        float above = INFINITY; /* the bands so far hold every logit at or above it */
        for (double below = 4.0; !n && have < V; below *= 2.0) {
            const float floor = (float)(m - below * t);
            const int band = have + likeliest_band(logits, V, floor, above, ids + have);
            for (; have < band; have++)
                if ((before += w[have] = exp((logits[ids[have]] - m) / t)) >= p_mass && !n) n = have + 1;
            above = floor;
        }
        if (!n) n = V; /* rounding kept the whole mass below top_p of it: every token */
    }
    double sum = 0.0;
    for (int k = 0; k < n; k++) sum += w[k];
    double r = rng_uniform(rng) * sum, acc = 0.0;
    int pick = ids[n - 1];
    for (int k = 0; k < n; k++)
        if (r < (acc += w[k])) {
            pick = ids[k];
            break;
        }
    free(copy);
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
