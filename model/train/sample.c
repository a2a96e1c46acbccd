/* model/train/sample.c - drawing the next token from logits: all of them, the top k, the top p, or
 * greedily. */
#include "model/train/sample.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* x before y in the order greedy decoding and top-k agree on: the larger logit first, the lower id
 * among equals. Every pair of ids is ordered, so no two compare equal. */
static int likelier(const float *logits, int x, int y) {
    return logits[x] != logits[y] ? logits[x] > logits[y] : x < y;
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

static void swap_entry(int *ids, double *w, int a, int b) {
    const int id = ids[a];
    const double wa = w[a];
    ids[a] = ids[b], w[a] = w[b];
    ids[b] = id, w[b] = wa;
}

/* The candidates ids[0..n) with their weights w[0..n) (moved together): the length of the shortest
 * prefix, likeliest first, whose weight reaches `mass` (> mass when strict, >= otherwise), and in
 * *last the prefix's least likely id. The prefix ends up in ids[0..length), in no particular
 * order, so a second search can run inside it. Selection instead of a sort (a sort of V ids took a
 * 262144-token vocabulary 34 ms a draw where top-p keeps most of it): each round splits the range
 * around the median of three ids and goes on in the side that holds the end, O(n) on average.
 * Returns n with *last = -1 when even all n fall short (rounding). */
static int prefix_reaching(int *ids, double *w, int n, const float *logits, double mass, int strict, int *last) {
    int lo = 0, hi = n; /* ids[0..lo) lie in the prefix and weigh `before`, which falls short; its end is in (lo, hi] */
    double before = 0.0;
    while (hi - lo > 1) {
        int a = lo, b = lo + (hi - lo) / 2, c = hi - 1; /* the median of three goes to lo */
        if (likelier(logits, ids[b], ids[a])) { const int t = a; a = b; b = t; }
        if (likelier(logits, ids[c], ids[b])) { b = c; if (likelier(logits, ids[b], ids[a])) b = a; }
        swap_entry(ids, w, lo, b);
        const int pivot = ids[lo];
        int k = lo; /* ids[lo + 1..k] are likelier than the pivot */
        for (int i = lo + 1; i < hi; i++)
            if (likelier(logits, ids[i], pivot)) swap_entry(ids, w, ++k, i);
        swap_entry(ids, w, lo, k); /* the pivot at k, the likelier ones before it */
        double ahead = before;
        for (int i = lo; i < k; i++) ahead += w[i];
        const double through = ahead + w[k];
        if (strict ? ahead > mass : ahead >= mass) hi = k;
        else if (strict ? through > mass : through >= mass) {
            *last = pivot;
            return k + 1;
        } else before = through, lo = k + 1;
    }
    if (hi > lo) { /* one id left: the end unless even it falls short */
        const double through = before + w[lo];
        if (strict ? through > mass : through >= mass) {
            *last = ids[lo];
            return lo + 1;
        }
    }
    *last = -1;
    return n;
}

/* Logits fall in bands of one temperature (1 / inv_t) below the largest m, the last band holding all
 * the rest. */
#define SAMPLE_BANDS 64
static int band_of(float logit, double m, double inv_t) {
    const double below = (m - logit) * inv_t;
    return below < SAMPLE_BANDS - 1 ? (int)below : SAMPLE_BANDS - 1;
}

/* The least likely of ids[0..n). */
static int least_likely(const int *ids, int n, const float *logits) {
    int worst = ids[0];
    for (int i = 1; i < n; i++)
        if (likelier(logits, worst, ids[i])) worst = ids[i];
    return worst;
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
    int n = 0;
    double sum = 0.0;
    if (by_k) { /* the k likeliest and any equal to the k-th, as in transformers */
        memcpy(copy, logits, (size_t)V * sizeof *copy);
        const float floor = kth_largest(copy, V, s->top_k);
        for (int i = 0; i < V; i++)
            if (logits[i] >= floor) {
                ids[n] = i;
                sum += w[n++] = exp((logits[i] - m) / t);
            }
    } else { /* top_p of all V: the search runs over the likeliest bands that hold it, not all V */
        double band_mass[SAMPLE_BANDS] = {0};
        const double inv_t = 1.0 / t;
        for (int i = 0; i < V; i++) {
            const double e = exp((logits[i] - m) / t);
            sum += e;
            band_mass[band_of(logits[i], m, inv_t)] += e;
        }
        const double p_mass = (double)s->top_p * sum;
        double held = 0.0;
        int bands = 0;
        while (bands < SAMPLE_BANDS && held < p_mass) held += band_mass[bands++];
        bands++; /* and one more: the bands' sums round in another order than the search's */
        for (int i = 0; i < V; i++)
            if (bands >= SAMPLE_BANDS || band_of(logits[i], m, inv_t) < bands) {
                ids[n] = i;
                w[n++] = exp((logits[i] - m) / t);
            }
    }
    int last;
    if (by_p) { /* the fewest likeliest that hold top_p of the candidates' mass */
        const int kept = prefix_reaching(ids, w, n, logits, (double)s->top_p * sum, 0, &last);
        if (kept < n) {
            n = kept;
            sum = 0.0;
            for (int k = 0; k < n; k++) sum += w[k];
        }
    }
    /* one draw: the first of the kept, likeliest first, whose running weight passes r */
    int pick = ids[0];
    if (n > 1) {
        prefix_reaching(ids, w, n, logits, rng_uniform(rng) * sum, 1, &pick);
        if (pick < 0) pick = least_likely(ids, n, logits); /* r fell within rounding of the whole */
    } else
        rng_uniform(rng); /* one number a draw, as the plain definition takes */
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
        for (int k = 0; k < s->n_stops; k++)
            if (tokens[i] == s->stops[k]) return i - n + 1;
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
