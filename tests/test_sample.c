/* Sampling: greedy, temperature, top-k and top-p draws; `./train sample` from a run's checkpoint on the
 * CPU (repeatable, --step, the checkpoint's own tokenizer, an imported tokenizer.json), and its
 * errors. Checkpoints carry the run's tokenizer in Hugging Face's format. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/err.h"
#include "common/rng.h"
#include "model/backend.h"
#include "model/train/hf_weights.h"
#include "model/train/sample.h"
#include "common/paths.h"
#include "tests/test.h"
#include "tests/test_util.h"

static int draw(const float *l, int V, float temperature, int top_k, float top_p, Rng *r) {
    const SampleSettings s = {.temperature = temperature, .top_k = top_k, .top_p = top_p};
    return sample_draw(l, V, &s, r);
}

/* Binomial: the count of p in n draws within 5 sigma. */
static int near(int count, double p, int n) {
    return fabs(count - p * n) <= 5 * sqrt(n * p * (1 - p)) + 1;
}

/* 100 draws with these settings at temperature 1 are sample_token's, draw for draw. */
static int draws_as_plain(const float *l, int V, int top_k, float top_p, uint64_t seed) {
    Rng a, b;
    rng_seed(&a, seed);
    rng_seed(&b, seed);
    int same = 1;
    for (int i = 0; i < 100; i++) same &= draw(l, V, 1.0f, top_k, top_p, &a) == sample_token(l, V, 1.0f, &b);
    return same;
}

TEST(sample_greedy_takes_the_largest_logit_lowest_id_on_ties) {
    float l[6] = {0.5f, 3.0f, -1.0f, 3.0f, 2.9f, 0.0f};
    Rng r;
    rng_seed(&r, 1);
    CHECK(draw(l, 6, 0.0f, 0, 1.0f, &r) == 1, "temperature 0");
    CHECK(draw(l, 6, 1.0f, 1, 1.0f, &r) == 1, "top-k 1");
    CHECK(draw(l, 6, 1.0f, 0, 1e-6f, &r) == 1, "a top-p below the likeliest token's probability");
}

TEST(sample_top_k_draws_only_among_the_k_likeliest) {
    float l[8] = {1.0f, 0.9f, 5.0f, 0.8f, 4.0f, 4.5f, 0.7f, 0.6f};
    Rng r;
    rng_seed(&r, 2);
    int count[8] = {0};
    for (int i = 0; i < 3000; i++) count[draw(l, 8, 2.0f, 3, 1.0f, &r)]++;
    CHECK(count[2] > 0 && count[4] > 0 && count[5] > 0, "the top three are drawn: %d %d %d", count[2], count[4],
          count[5]);
    CHECK(count[0] + count[1] + count[3] + count[6] + count[7] == 0, "a token outside the top three was drawn");
    /* top-k of V or more is the plain softmax draw */
    CHECK(draws_as_plain(l, 8, 8, 1.0f, 9), "top-k 8 of 8 differs from the full draw");
}

/* transformers keeps every logit equal to the k-th; a zero top_p (a struct left unset) keeps all */
TEST(sample_top_k_keeps_the_ties_of_its_kth_logit) {
    const float l[6] = {3.0f, 1.0f, 3.0f, 2.0f, 3.0f, 0.5f};
    Rng r;
    rng_seed(&r, 6);
    int count[6] = {0};
    for (int i = 0; i < 3000; i++) count[draw(l, 6, 1.0f, 2, 1.0f, &r)]++;
    CHECK(near(count[0], 1 / 3.0, 3000) && near(count[2], 1 / 3.0, 3000) && near(count[4], 1 / 3.0, 3000) &&
              count[1] + count[3] + count[5] == 0,
          "top-k 2 of three equal largest: %d %d %d %d %d %d", count[0], count[1], count[2], count[3], count[4],
          count[5]);
    CHECK(draws_as_plain(l, 6, 0, 0.0f, 7), "top-p 0 differs from the full draw");
}

/* The definition of sample_settings' draw, written the plain way: every id sorted by logit (the
 * larger first, the lower id among equals), the first top_k kept with the k-th's equals, then the
 * fewest of those whose running mass (in that order) reaches top_p of theirs, one draw among them
 * (where neither applies, sample_token's draw over all V). */
static int by_logit_desc_ref(const void *a, const void *b, void *logits) {
    const float *l = logits;
    const int x = *(const int *)a, y = *(const int *)b;
    if (l[x] != l[y]) return l[x] > l[y] ? -1 : 1;
    return (x > y) - (x < y);
}
static int reference_draw(const float *l, int V, const SampleSettings *s, Rng *rng) {
    if ((s->top_k <= 0 || s->top_k >= V) && (s->top_p <= 0.0f || s->top_p >= 1.0f))
        return sample_token(l, V, s->temperature, rng); /* neither applies: the plain draw, in id order */
    int *ids = malloc((size_t)V * sizeof *ids);
    double *w = malloc((size_t)V * sizeof *w);
    for (int i = 0; i < V; i++) ids[i] = i;
    qsort_r(ids, (size_t)V, sizeof *ids, by_logit_desc_ref, (void *)l);
    int n = s->top_k > 0 && s->top_k < V ? s->top_k : V;
    while (n < V && l[ids[n]] == l[ids[n - 1]]) n++;
    double sum = 0.0;
    for (int k = 0; k < n; k++) sum += w[k] = exp(((double)l[ids[k]] - l[ids[0]]) / s->temperature);
    if (s->top_p > 0.0f && s->top_p < 1.0f) {
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

/* sample_draw finds the top-k and top-p tokens without sorting all V: on vocabularies of 1 to 20000,
 * logits spread wide, peaked, flat, and full of ties (rounded to a few values), at temperatures 0.3
 * to 3, with top-k alone, top-p alone and both, every draw is the plain definition's from the same
 * generator state (top-p alone sums all V in another order, which may move a draw only where a
 * random number falls within rounding of a boundary). */
TEST(sample_top_k_and_top_p_draw_as_sorting_every_token_would) {
    Rng gen, a, b;
    rng_seed(&gen, 42);
    const int sizes[] = {1, 2, 3, 7, 64, 1000, 5003, 20000};
    int cases = 0, differ = 0, first_differ = -1;
    for (int si = 0; si < 8; si++)
        for (int shape = 0; shape < 4; shape++)
            for (int set = 0; set < 6; set++) {
                const int V = sizes[si];
                float *l = malloc((size_t)V * sizeof *l);
                for (int i = 0; i < V; i++) {
                    const double u = rng_uniform(&gen);
                    l[i] = shape == 0   ? (float)(40.0 * u - 20.0)                /* wide */
                           : shape == 1 ? (float)(i % 97 == 0 ? 10.0 + u : u)     /* peaked */
                           : shape == 2 ? (float)(0.01 * u)                       /* flat */
                                        : (float)(int)(5.0 * u) * 0.5f;           /* ties */
                }
                const SampleSettings st[6] = {{1.0f, 5, 1.0f, NULL, 0},  {0.3f, 1 + V / 3, 1.0f, NULL, 0},
                                              {1.0f, 0, 0.9f, NULL, 0},  {3.0f, 0, 0.3f, NULL, 0},
                                              {1.0f, 40, 0.8f, NULL, 0}, {0.7f, 0, 0.999f, NULL, 0}};
                rng_seed(&a, 100 + (uint64_t)cases);
                rng_seed(&b, 100 + (uint64_t)cases);
                for (int d = 0; d < 8; d++) {
                    const int got = sample_draw(l, V, &st[set], &a), want = reference_draw(l, V, &st[set], &b);
                    if (got != want && first_differ < 0) first_differ = cases;
                    differ += got != want;
                }
                cases++;
                free(l);
            }
    CHECK(differ == 0, "%d of %d draws differ from the plain definition's (first in case %d)", differ, cases * 8,
          first_differ);
}

/* Probabilities 0.05, 0.5, 0.15, 0.3 at temperature 1: the likeliest first are ids 1, 3, 2, 0, whose
 * running totals are 0.5, 0.8, 0.95, 1. */
static void counts_of(float top_p, int top_k, float temperature, int count[4]) {
    const float l[4] = {logf(0.05f), logf(0.5f), logf(0.15f), logf(0.3f)};
    Rng r;
    rng_seed(&r, 3);
    for (int k = 0; k < 4; k++) count[k] = 0;
    for (int i = 0; i < 6000; i++) count[draw(l, 4, temperature, top_k, top_p, &r)]++;
}

TEST(sample_top_p_draws_among_the_fewest_likeliest_reaching_p) {
    int c[4];
    counts_of(0.7f, 0, 1.0f, c); /* 0.5 < 0.7 <= 0.8: ids 1 and 3, renormalized to 5/8 and 3/8 */
    CHECK(c[0] == 0 && c[2] == 0 && near(c[1], 0.625, 6000) && near(c[3], 0.375, 6000), "top-p 0.7: %d %d %d %d", c[0],
          c[1], c[2], c[3]);
    counts_of(0.9f, 0, 1.0f, c); /* 0.8 < 0.9: id 2 joins; 1, 3, 2 at 0.5, 0.3, 0.15 of 0.95 */
    CHECK(c[0] == 0 && c[2] > 0 && near(c[1], 0.5 / 0.95, 6000) && near(c[2], 0.15 / 0.95, 6000),
          "top-p 0.9: %d %d %d %d", c[0], c[1], c[2], c[3]);
    counts_of(0.45f, 0, 1.0f, c); /* the likeliest alone reaches 0.45 */
    CHECK(c[1] == 6000, "top-p 0.45: %d %d %d %d", c[0], c[1], c[2], c[3]);
    /* after top-k 2 (ids 1 and 3: 5/8 and 3/8), 0.7 keeps both, and 0.6 the first only */
    counts_of(0.7f, 2, 1.0f, c);
    CHECK(c[0] == 0 && c[2] == 0 && near(c[1], 0.625, 6000), "top-k 2, top-p 0.7: %d %d %d %d", c[0], c[1], c[2],
          c[3]);
    counts_of(0.6f, 2, 1.0f, c);
    CHECK(c[1] == 6000, "top-k 2, top-p 0.6: %d %d %d %d", c[0], c[1], c[2], c[3]);
    /* the temperature comes first: at 4 the probabilities, as p^(1/4), are flatter (0.31, 0.28, 0.23, 0.18),
     * and the likeliest alone no longer reaches 0.45 */
    counts_of(0.45f, 0, 4.0f, c);
    CHECK(c[1] > 0 && c[3] > 0 && c[0] == 0 && c[2] == 0, "top-p 0.45 at temperature 4: %d %d %d %d", c[0], c[1], c[2],
          c[3]);
    /* top-p 1 is the plain draw, draw for draw */
    const float l[4] = {0.1f, 2.0f, -1.0f, 1.0f};
    CHECK(draws_as_plain(l, 4, 0, 1.0f, 4), "top-p 1 differs from the full draw");
}

static const SampleSettings PLAIN = {.temperature = 1.0f, .top_p = 1.0f};

/* A tiny GPT-2: 2 layers, 2 heads of 8, a context of 16, 37 tokens. */
static int tiny_table(ParamTable *t) {
    GPTConfig cfg = {.num_layers = 2, .num_heads = 2, .dim = 16, .max_seq_len = 16, .vocab_size = 37};
    gpt_config_finish(&cfg);
    char err[ERR_LEN];
    return param_table_build(t, &cfg, err);
}

static Backend *tiny_model(const ParamTable *t, int B, int T) {
    return perturbed_cpu_backend(t, B, T, OUTPUT_FUSED);
}

/* The cache is sequence 0's rows of a micro-batch of B = 2: every row decoded alone against the
 * cached keys and values has the logits of a whole forward of the window, bit for bit (the same
 * per-row arithmetic in the same order). The whole forwards run on a second backend, because a
 * forward overwrites the cache. */
static void check_cached_decoding(GPTConfig cfg) {
    gpt_config_finish(&cfg);
    ParamTable t;
    char err[ERR_LEN];
    REQUIRE(param_table_build(&t, &cfg, err) == 0, "%s", err);
    enum { B = 2, T = 16, V = 37, PROMPT = 5 };
    Backend *be = tiny_model(&t, B, T), *full_be = tiny_model(&t, B, T);
    REQUIRE(be && full_be, "backends");
    int tokens[B * T];
    Rng rng;
    rng_seed(&rng, 3);
    for (int i = 0; i < B * T; i++) tokens[i] = (int)rng_below(&rng, V);
    float cached[V], full[V];
    be->ops->prefill(be, tokens, PROMPT, cached);
    for (int pos = PROMPT - 1; pos < T; pos++) {
        if (pos >= PROMPT) be->ops->decode_step(be, tokens[pos], pos, cached);
        full_be->ops->logits_at(full_be, tokens, pos, full);
        float worst = 0.0f;
        for (int v = 0; v < V; v++) worst = fmaxf(worst, fabsf(cached[v] - full[v]));
        CHECK(memcmp(cached, full, sizeof cached) == 0, "%s, position %d: cached logits differ by up to %g",
              gpt_family_name(cfg.family), pos, worst);
    }
    full_be->ops->destroy(full_be);
    be->ops->destroy(be);
    param_table_free(&t);
}

TEST(sample_decoding_with_the_cache_gives_the_logits_of_a_full_forward) {
    check_cached_decoding((GPTConfig){.num_layers = 2, .num_heads = 2, .dim = 16, .max_seq_len = 16, .vocab_size = 37});
}

/* RoPE turns each decoded row by its own position; QK-norm and grouped heads read the cache too. */
TEST(sample_decoding_with_the_cache_of_a_qwen3_and_a_llama_gives_the_logits_of_a_full_forward) {
    const ModelFamily families[] = {FAMILY_QWEN3, FAMILY_LLAMA};
    for (int i = 0; i < 2; i++) {
        GPTConfig cfg = {.num_layers = 2, .num_heads = 4, .dim = 16, .max_seq_len = 16, .vocab_size = 37};
        gpt_family_defaults(&cfg, families[i]);
        cfg.num_kv_heads = 2;
        cfg.head_dim = 6;
        cfg.ffn_dim = 24;
        cfg.untied_head = families[i] == FAMILY_LLAMA;
        cfg.rope.theta = 100.0;
        check_cached_decoding(cfg);
    }
}

/* Gemma 3's sliding layers read only the last W cached keys and turn by their own base; the sandwich
 * norms and the scaled embedding work row by row. A window of 3 slides well within the 16 rows. */
TEST(sample_decoding_with_the_cache_of_a_gemma3_with_sliding_layers_gives_the_logits_of_a_full_forward) {
    GPTConfig cfg = {.num_layers = 3, .num_heads = 4, .dim = 20, .max_seq_len = 16, .vocab_size = 37};
    gpt_family_defaults(&cfg, FAMILY_GEMMA3);
    cfg.num_kv_heads = 2;
    cfg.head_dim = 6;
    cfg.ffn_dim = 24;
    cfg.sliding_window = 3;
    cfg.sliding_window_pattern = 2;
    cfg.rope.theta = 100.0;
    cfg.rope_local_theta = 10.0;
    check_cached_decoding(cfg);
}

/* sample_generate against a full forward of the context per token, the window's policy written
 * out: while the context fits the window of T the draws are the same; when it would not, the
 * context is its last T/2 tokens, at positions from 0 again. 3 + 30 tokens slide a window of 8
 * several times. */
TEST(sample_generate_draws_as_a_full_forward_per_token_and_slides_a_full_window_by_half) {
    ParamTable t;
    REQUIRE(tiny_table(&t) == 0, "table");
    enum { T = 8, V = 37, PROMPT = 3, GEN = 30 };
    Backend *be = tiny_model(&t, 1, T), *full_be = tiny_model(&t, 1, T);
    REQUIRE(be && full_be, "backends");
    int got[PROMPT + GEN] = {4, 20, 9}, want[PROMPT + GEN] = {4, 20, 9}, window[T];
    float logits[V];
    Rng a, b;
    rng_seed(&a, 5);
    rng_seed(&b, 5);
    sample_generate(be, got, PROMPT, GEN, &PLAIN, &a, logits, NULL, NULL);
    int first = 0, slides = 0;
    for (int i = PROMPT; i < PROMPT + GEN; i++) {
        if (i - first > T) {
            first = i - T / 2;
            slides++;
        }
        for (int k = 0; k < T; k++) window[k] = first + k < i ? want[first + k] : 0;
        full_be->ops->logits_at(full_be, window, i - 1 - first, logits);
        want[i] = sample_draw(logits, V, &PLAIN, &b);
    }
    CHECK(slides >= 4, "the window slid %d times", slides);
    CHECK(memcmp(got, want, sizeof got) == 0, "the cached draws differ from the full forwards'");
    for (int i = 0; i < PROMPT + GEN && memcmp(got, want, sizeof got); i++)
        if (got[i] != want[i]) CHECK(0, "first difference at token %d: %d, not %d", i, got[i], want[i]);
    full_be->ops->destroy(full_be);
    be->ops->destroy(be);
    param_table_free(&t);
}

/* Weights that make the logits NaN stop the sampler before its first draw, instead of drawing some
 * fixed token from them; finite weights draw every token asked for. */
TEST(sample_generate_stops_at_logits_that_are_not_finite) {
    ParamTable t;
    REQUIRE(tiny_table(&t) == 0, "table");
    enum { T = 8, V = 37, GEN = 5 };
    Backend *be = tiny_model(&t, 1, T);
    float *params = malloc(t.total * sizeof *params), *zero = calloc(t.total, sizeof *zero);
    REQUIRE(be && params && zero, "backend and buffers");
    int tokens[1 + GEN] = {4};
    float logits[V];
    Rng rng;
    rng_seed(&rng, 3);
    CHECK(sample_generate(be, tokens, 1, GEN, &PLAIN, &rng, logits, NULL, NULL) == GEN, "finite weights");
    for (size_t i = 0; i < t.total; i++) params[i] = NAN;
    be->ops->write_state(be, params, zero, zero);
    CHECK(sample_generate(be, tokens, 1, GEN, &PLAIN, &rng, logits, NULL, NULL) == 0, "NaN weights drew tokens");
    CHECK(sample_generate(be, tokens, 1, GEN, &(SampleSettings){.top_k = 1, .top_p = 1.0f}, &rng, logits, NULL, NULL) == 0,
          "greedy drew from NaN");
    free(zero);
    free(params);
    be->ops->destroy(be);
    param_table_free(&t);
}

/* A stop token ends the draws once drawn (it is the last of them); the tokens before it are those
 * drawn without one. */
TEST(sample_generate_ends_at_the_stop_token) {
    ParamTable t;
    REQUIRE(tiny_table(&t) == 0, "table");
    enum { T = 16, V = 37, GEN = 10 };
    Backend *be = tiny_model(&t, 1, T);
    REQUIRE(be, "backend");
    int all[1 + GEN] = {4}, upto[1 + GEN] = {4};
    float logits[V];
    Rng rng;
    rng_seed(&rng, 9);
    const SampleSettings greedy = {.top_k = 1, .top_p = 1.0f};
    REQUIRE(sample_generate(be, all, 1, GEN, &greedy, &rng, logits, NULL, NULL) == GEN, "draws");
    const int stop = all[1 + 3];
    int first = 0;
    while (all[1 + first] != stop) first++;
    SampleSettings stopping = greedy;
    const int stops[2] = {V + 5, stop}; /* one that is never drawn, and the one that ends the draws */
    stopping.stops = stops, stopping.n_stops = 2;
    const int drawn = sample_generate(be, upto, 1, GEN, &stopping, &rng, logits, NULL, NULL);
    CHECK(drawn == first + 1 && memcmp(all, upto, (size_t)(1 + drawn) * sizeof *all) == 0,
          "drew %d tokens, want %d ending with %d", drawn, first + 1, stop);
    be->ops->destroy(be);
    param_table_free(&t);
}

/* The ids that end a --chat reply: generation_config.json's eos_token_id (one or a list) where
 * there is one, else config.json's; ids past the vocabulary and repeats left out. */
TEST(a_replys_stop_tokens_come_from_generation_config_else_config) {
    char dir[800], path[900];
    snprintf(dir, sizeof dir, "%s/stops", test_tmpdir());
    REQUIRE(mkdir(dir, 0755) == 0, "%s", dir);
    int ids[8];
    CHECK(hf_read_stop_tokens(dir, 100, ids, 8) == 0, "no files, no stops");
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    REQUIRE(f && fputs("{\"eos_token_id\": 7}", f) >= 0 && fclose(f) == 0, "%s", path);
    CHECK(hf_read_stop_tokens(dir, 100, ids, 8) == 1 && ids[0] == 7, "config.json's one");
    snprintf(path, sizeof path, "%s/generation_config.json", dir);
    f = fopen(path, "w");
    REQUIRE(f && fputs("{\"eos_token_id\": [1, 106, 1, 5000, 3]}", f) >= 0 && fclose(f) == 0, "%s", path);
    const int n = hf_read_stop_tokens(dir, 200, ids, 8);
    CHECK(n == 3 && ids[0] == 1 && ids[1] == 106 && ids[2] == 3, "generation_config.json's list: %d ids", n);
}

/* A sample's text holds every token of its window, however long (a window of -t 8192 tokens, each
 * of which decodes to two bytes, and the ids where there is no tokenizer). */
TEST(sample_text_decodes_every_token_of_a_long_window) {
    char err[ERR_LEN];
    const char *corpus = "ab ab ab ab ab ab ab ab ab ab ab ab";
    TokenizerTrainOptions o = {.vocab_size = 300, .threads = 1};
    Tokenizer *t = tokenizer_train(corpus, strlen(corpus), &o, err);
    REQUIRE(t, "tokenizer: %s", err);
    uint32_t ab;
    REQUIRE(tokenizer_encode(t, "ab", 2, 0, &ab, 1) == 1, "'ab' is not one token");
    enum { N = 8192 };
    int *tokens = malloc(N * sizeof *tokens);
    REQUIRE(tokens, "memory");
    for (int i = 0; i < N; i++) tokens[i] = (int)ab;
    char *text = sample_text(t, tokens, N);
    CHECK(text && strlen(text) == 2 * N, "decoded %zu bytes of %d", text ? strlen(text) : 0, 2 * N);
    free(text);
    text = sample_text(NULL, tokens, N);
    char want[16];
    snprintf(want, sizeof want, "%d ", (int)ab);
    CHECK(text && strlen(text) == N * strlen(want), "ids: %zu bytes of %zu", text ? strlen(text) : 0,
          N * strlen(want));
    free(text);
    free(tokens);
    tokenizer_free(t);
}

/* A tiny run on the README with our tokenizer (or `tokenizer`, a file): checkpoints at steps 4, 8. */
static void train_tiny_run(const char *run, const char *tokenizer) {
    char args[2400], prep[800];
    snprintf(prep, sizeof prep, "%s/prep", test_tmpdir());
    char *out = NULL;
    if (tokenizer)
        snprintf(args, sizeof args, "prepare --tokenizer %s -o %s README.md train.c", tokenizer, prep);
    else
        snprintf(args, sizeof args, "prepare -v 400 -o %s README.md train.c", prep);
    int rc = run_train(args, &out);
    CHECK(rc == 0, "prepare: %s", out);
    free(out);
    snprintf(args, sizeof args,
             "-i %s/train.bin --tokenizer %s%s -v %d --device cpu -e tiny -b 2 -t 32 --max-seq-len 128 -x 8 -n 4 "
             "--keep-checkpoints 2 -s 0 -o %s",
             prep, tokenizer ? tokenizer : prep, tokenizer ? "" : "/tokenizer.bin", tokenizer ? 700 : 400, run);
    rc = run_train(args, &out);
    CHECK(rc == 0, "train: %s", out);
    free(out);
}

TEST(sample_from_a_checkpoint_is_repeatable_and_decodes_with_its_tokenizer) {
    char run[800], args[1200], path[900];
    snprintf(run, sizeof run, "%s/run", test_tmpdir());
    train_tiny_run(run, NULL);
    /* the checkpoint carries the tokenizer in Hugging Face's format, and config.json names its separator */
    snprintf(path, sizeof path, "%s/step_00000008/tokenizer_config.json", run);
    char *config = read_text(path);
    CHECK(config && strstr(config, "PreTrainedTokenizerFast") && strstr(config, "\"model_max_length\": 128"),
          "tokenizer_config.json: %s", config);
    free(config);
    snprintf(path, sizeof path, "%s/step_00000008/config.json", run);
    config = read_text(path);
    CHECK(config && strstr(config, "\"eos_token_id\": 399"), "config.json names no eos_token_id 399: %s", config);
    free(config);
    char *a = NULL, *b = NULL, *c = NULL;
    snprintf(args, sizeof args, "sample -o %s --device cpu --prompt 'The trainer' -G 24 --temperature 0 --ids", run);
    CHECK(run_train(args, &a) == 0 && run_train(args, &b) == 0, "sample failed: %s", a);
    CHECK(a && b && strcmp(a, b) == 0, "greedy sampling twice differs:\n%s\n%s", a, b);
    CHECK(a && strncmp(a, "The trainer", 11) == 0, "the text does not start with the prompt: %s", a);
    const char *ids = a ? strstr(a, "\nids:") : NULL;
    if (ids) ids++;
    int n = 0;
    for (const char *p = ids; p && *p && *p != '\n'; p++) n += *p == ' ';
    CHECK(n == 24, "%d ids printed, 24 asked for: %s", n, a);
    /* past the model's context of 128 the window slides, and every asked token comes */
    free(b);
    snprintf(args, sizeof args, "sample -o %s --device cpu --prompt 'The trainer' -G 300 --top-k 3 --ids", run);
    CHECK(run_train(args, &b) == 0, "sample -G 300: %s", b);
    ids = b ? strstr(b, "\nids:") : NULL;
    n = 0;
    for (const char *p = ids ? ids + 1 : NULL; p && *p && *p != '\n'; p++) n += *p == ' ';
    CHECK(n == 300, "%d ids printed past the context, 300 asked for", n);
    /* an earlier step's checkpoint, drawn with top-k */
    snprintf(args, sizeof args, "sample -o %s --step 4 --device cpu -G 10 --top-k 5 --seed 3", run);
    CHECK(run_train(args, &c) == 0, "sample --step 4: %s", c);
    /* a top-p below every likeliest token's probability draws what greedy decoding takes */
    free(b);
    b = NULL;
    snprintf(args, sizeof args, "sample -o %s --device cpu --prompt 'The trainer' -G 24 --top-p 1e-6 --ids", run);
    CHECK(run_train(args, &b) == 0 && a && b && !strcmp(a, b), "top-p 1e-6 against greedy:\n%s\n%s", a, b);
    free(a);
    free(b);
    free(c);
    /* a tokenizer of 300 tokens for the model's 400: drawn ids past it are named, not only printed as U+FFFD */
    char small[900], *out = NULL;
    snprintf(small, sizeof small, "%s/small", test_tmpdir());
    snprintf(args, sizeof args, "prepare -v 300 -o %s README.md", small);
    REQUIRE(run_train(args, &out) == 0, "prepare: %s", out);
    free(out);
    snprintf(args, sizeof args, "sample -o %s --device cpu -G 64 --temperature 50 --tokenizer %s/tokenizer.bin --ids", run,
             small);
    CHECK(run_train(args, &out) == 0 && out && strstr(out, "lie past the tokenizer's 300 tokens and have no text: "
                                                          "printed as U+FFFD") && strstr(out, "\xef\xbf\xbd"),
          "a smaller tokenizer: %s", out);
    free(out);
    snprintf(args, sizeof args, "sample -o %s --device cpu -G 64 --temperature 50 --ids", run);
    CHECK(run_train(args, &out) == 0 && out && !strstr(out, "lie past the tokenizer"), "the model's tokenizer: %s", out);
    free(out);
}

/* Without its tokenizer.json a checkpoint's samples start after the same separator, config.json's
 * eos_token_id, and draw the same ids; a config.json whose vocabulary is not the weights' is named
 * as such by sample and eval, not blamed on the tokenizer or the shard. */
TEST(a_checkpoint_without_its_tokenizer_samples_after_config_jsons_separator) {
    char run[800], bare[900], args[2400], cmd[2000], *with = NULL, *without = NULL;
    snprintf(run, sizeof run, "%s/run", test_tmpdir());
    snprintf(bare, sizeof bare, "%s/bare", test_tmpdir());
    train_tiny_run(run, NULL);
    snprintf(cmd, sizeof cmd, "cp -r %s/step_00000008 %s && rm %s/tokenizer.json", run, bare, bare);
    REQUIRE(system(cmd) == 0, "%s", cmd);
    snprintf(args, sizeof args, "sample --checkpoint %s/step_00000008 --device cpu -G 8 --seed 5 --ids", run);
    REQUIRE(run_train(args, &with) == 0, "%s", with);
    snprintf(args, sizeof args, "sample --checkpoint %s --device cpu -G 8 --seed 5", bare);
    REQUIRE(run_train(args, &without) == 0, "%s", without);
    /* --init-from, ./train's and eval's name for it, is the same */
    char *same = NULL;
    snprintf(args, sizeof args, "sample --init-from %s --device cpu -G 8 --seed 5", bare);
    CHECK(run_train(args, &same) == 0 && same && strcmp(same, without) == 0, "--init-from: %s\n--checkpoint: %s", same,
          without);
    free(same);
    const char *ids = with ? strstr(with, "\nids:") : NULL;
    CHECK(ids && strncmp(without, ids + 1, strlen(without) - 1) == 0, "with the tokenizer: %s\nwithout: %s", with,
          without);
    free(with);
    free(without);
    /* a tokenizer.json that cannot be read: the fix names --tokenizer */
    char tok[1000], *out = NULL;
    snprintf(tok, sizeof tok, "%s/tokenizer.json", bare);
    FILE *tf = fopen(tok, "w");
    REQUIRE(tf && fputs("{bad", tf) >= 0 && fclose(tf) == 0, "%s", tok);
    snprintf(args, sizeof args, "sample --checkpoint %s --device cpu -G 4", bare);
    CHECK(run_train(args, &out) == 1 && out && strstr(out, "the checkpoint's tokenizer.json cannot be read (") &&
              strstr(out, "--tokenizer FILE"),
          "%s", out);
    free(out);
    /* config.json's vocabulary 300 against the weights' 400 */
    char cfg[1000];
    snprintf(cfg, sizeof cfg, "%s/config.json", bare);
    char *text = read_text(cfg), *at = text ? strstr(text, "\"vocab_size\": 400") : NULL;
    REQUIRE(at, "no vocab_size 400 in %s", cfg);
    memcpy(at + 14, "300", 3);
    FILE *f = fopen(cfg, "w");
    REQUIRE(f && fputs(text, f) >= 0 && fclose(f) == 0, "%s", cfg);
    free(text);
    snprintf(cmd, sizeof cmd, "cp %s/step_00000008/tokenizer.json %s/", run, bare);
    REQUIRE(system(cmd) == 0, "%s", cmd);
    char shard[900];
    snprintf(shard, sizeof shard, "%s/prep/val.bin", test_tmpdir());
    const char *fmts[2] = {"sample --checkpoint %s --device cpu -G 4", "eval --init-from %s -i %s --device cpu"};
    for (int k = 0; k < 2; k++) {
        snprintf(args, sizeof args, fmts[k], bare, shard);
        const int rc = run_train(args, &out);
        CHECK(rc == 1 && out && strstr(out, "but the model (config.json) needs [300, ") && !strstr(out, "tokenizer"),
              "'%s': (%d) %s", args, rc, out);
        free(out);
    }
}

TEST(sample_with_an_imported_tokenizer_json_and_its_checkpoint_copy) {
    char run[800], args[1200], path[900];
    snprintf(run, sizeof run, "%s/run", test_tmpdir());
    train_tiny_run(run, "tests/fixtures/hf_gpt2_style.json");
    snprintf(path, sizeof path, "%s/step_00000008/tokenizer.json", run);
    char *copy = read_text(path), *orig = read_text("tests/fixtures/hf_gpt2_style.json");
    CHECK(copy && orig && strcmp(copy, orig) == 0, "the checkpoint's tokenizer.json is not the imported file");
    free(copy);
    free(orig);
    char *out = NULL;
    snprintf(args, sizeof args, "sample -o %s --device cpu --prompt 'Hello' -G 8 --temperature 0.7 --ids", run);
    CHECK(run_train(args, &out) == 0 && out && strncmp(out, "Hello", 5) == 0 && strstr(out, "ids:"), "sample: %s", out);
    free(out);
    /* --tokenizer over the checkpoint's own: the same file says nothing, another is named */
    snprintf(args, sizeof args, "sample -o %s --device cpu -G 4 --tokenizer tests/fixtures/hf_gpt2_style.json", run);
    CHECK(run_train(args, &out) == 0 && !strstr(out, "note:"), "the same tokenizer: %s", out);
    free(out);
    snprintf(args, sizeof args, "sample -o %s --device cpu -G 4 --tokenizer tests/fixtures/hf_llama3_style.json", run);
    CHECK(run_train(args, &out) == 0 && strstr(out, "note: --tokenizer tests/fixtures/hf_llama3_style.json is not ") &&
              strstr(out, "the tokenizer the checkpoint carries"),
          "another tokenizer: %s", out);
    free(out);
}

/* A model folder named `name` under the test's directory, with a Llama 3-style tokenizer, its
 * tokenizer_config.json (bos and eos) and the chat template tpl, and a tiny run trained with it into
 * run; tok_path receives its tokenizer.json. */
static void chat_model_run(const char *name, const char *tpl, char *run, size_t run_size, char *tok_path,
                           size_t tok_size) {
    char dir[800], path[900], cmd[1800];
    snprintf(dir, sizeof dir, "%s/%s_model", test_tmpdir(), name);
    snprintf(run, run_size, "%s/%s_run", test_tmpdir(), name);
    REQUIRE(mkdir(dir, 0755) == 0, "%s", dir);
    snprintf(cmd, sizeof cmd, "cp tests/fixtures/hf_llama3_bos.json %s/tokenizer.json", dir);
    REQUIRE(system(cmd) == 0, "%s", cmd);
    const char *config = "{\"bos_token\": \"<|begin_of_text|>\", \"eos_token\": \"<|end_of_text|>\"}";
    const char *files[2][2] = {{"tokenizer_config.json", config}, {"chat_template.jinja", tpl}};
    for (int k = 0; k < 2; k++) {
        snprintf(path, sizeof path, "%s/%s", dir, files[k][0]);
        FILE *f = fopen(path, "w");
        REQUIRE(f && fputs(files[k][1], f) >= 0 && fclose(f) == 0, "%s", path);
    }
    snprintf(tok_path, tok_size, "%s/tokenizer.json", dir);
    train_tiny_run(run, tok_path);
}

/* --chat renders the message as a user's turn with the checkpoint's chat template and the
 * generation prompt, tokenized as apply_chat_template tokenizes it (the template writes the BOS);
 * without a template, or beside --prompt, it is refused naming why. */
TEST(sample_chat_renders_the_message_with_the_checkpoints_chat_template) {
    char path[900], run[800], args[1400], err[ERR_LEN];
    chat_model_run("chat", "{{ bos_token }}{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"
                           "{% if add_generation_prompt %}<assistant>{% endif %}",
                   run, sizeof run, path, sizeof path);
    char *out = NULL;
    snprintf(args, sizeof args, "sample -o %s --device cpu --chat 'Hello there' -G 6 --temperature 0 --ids", run);
    const int rc = run_train(args, &out);
    const char *rendered = "<|begin_of_text|><user>Hello there<assistant>";
    CHECK(rc == 0 && out && !strncmp(out, rendered, strlen(rendered)), "(%d) %s", rc, out ? out : "");
    Tokenizer *tok = tokenizer_load(path, err);
    REQUIRE(tok, "%s", err);
    uint32_t ids[64];
    const size_t n = tokenizer_encode(tok, rendered, strlen(rendered), TOKENIZER_SPECIALS | TOKENIZER_NO_POST, ids, 64);
    char want[600] = "prompt ids:";
    for (size_t k = 0; k < n; k++) snprintf(want + strlen(want), sizeof want - strlen(want), " %u", ids[k]);
    CHECK(out && strstr(out, want) && ids[0] != ids[1], "want '%s' in: %s", want, out ? out : "");
    tokenizer_free(tok);
    free(out);
    snprintf(args, sizeof args, "sample -o %s --device cpu --chat hi --prompt hi", run);
    CHECK(run_train(args, &out) == 2 && out && strstr(out, "--chat is a prompt of its own: give --prompt or --chat"),
          "%s", out ? out : "");
    free(out);
    char plain[800];
    snprintf(plain, sizeof plain, "%s/plain_run", test_tmpdir());
    train_tiny_run(plain, "tests/fixtures/hf_llama3_bos.json");
    snprintf(args, sizeof args, "sample -o %s --device cpu --chat hi", plain);
    CHECK(run_train(args, &out) == 1 && out && strstr(out, "--chat needs the model's chat template"), "%s",
          out ? out : "");
    free(out);
}

/* --system puts a system turn before --chat's; --messages renders a whole conversation from a file
 * (null-valued keys left out, as apply_chat_template leaves them), and the same turns give the same
 * prompt either way. Mixed with --prompt or --chat, or a file that is no list of messages: refused,
 * naming the flag. */
TEST(sample_system_turn_and_messages_file_render_the_whole_conversation) {
    char path[900], run[800], args[1600], msgs[900];
    /* a message's "name" shows only where the key is there: null must drop it */
    chat_model_run("conv", "{{ bos_token }}{% for m in messages %}<{{ m.role }}{% if 'name' in m %} {{ m.name }}"
                           "{% endif %}>{{ m.content }}{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}",
                   run, sizeof run, path, sizeof path);
    FILE *f;
    char *out = NULL, *out2 = NULL;
    snprintf(args, sizeof args, "sample -o %s --device cpu --system 'Be brief.' --chat 'Hello there' -G 4 "
                                "--temperature 0 --ids", run);
    int rc = run_train(args, &out);
    const char *two = "<|begin_of_text|><system>Be brief.<user>Hello there<assistant>";
    CHECK(rc == 0 && out && !strncmp(out, two, strlen(two)), "(%d) %s", rc, out ? out : "");
    snprintf(msgs, sizeof msgs, "%s/two.json", test_tmpdir());
    f = fopen(msgs, "w");
    REQUIRE(f && fputs("[{\"role\": \"system\", \"content\": \"Be brief.\", \"name\": null},\n"
                       " {\"role\": \"user\", \"content\": \"Hello there\"}]\n", f) >= 0 && fclose(f) == 0, "%s", msgs);
    snprintf(args, sizeof args, "sample -o %s --device cpu --messages %s -G 4 --temperature 0 --ids", run, msgs);
    rc = run_train(args, &out2);
    CHECK(rc == 0 && out && out2 && !strcmp(out, out2), "--messages of the same turns: (%d) %s", rc, out2 ? out2 : "");
    free(out), free(out2);
    /* several turns, a name kept */
    snprintf(msgs, sizeof msgs, "%s/four.json", test_tmpdir());
    f = fopen(msgs, "w");
    REQUIRE(f && fputs("[{\"role\": \"user\", \"content\": \"Hi\", \"name\": \"ann\"}, {\"role\": \"assistant\", "
                       "\"content\": \"Hello!\"}, {\"role\": \"user\", \"content\": \"More?\"}]", f) >= 0 &&
                fclose(f) == 0, "%s", msgs);
    snprintf(args, sizeof args, "sample -o %s --device cpu --messages %s -G 4 --temperature 0", run, msgs);
    rc = run_train(args, &out);
    const char *four = "<|begin_of_text|><user ann>Hi<assistant>Hello!<user>More?<assistant>";
    CHECK(rc == 0 && out && !strncmp(out, four, strlen(four)), "(%d) %s", rc, out ? out : "");
    free(out);
    struct {
        const char *flags, *want;
        int rc;
    } refused[] = {
        {"--system hi", "--system goes with --chat", 2},
        {"--chat hi --messages x.json", "--messages holds the whole conversation", 2},
        {"--messages x.json --prompt hi", "--messages is a prompt of its own", 2},
        {"--messages x.json --system hi", "with --messages, put the system turn in the file", 2},
        {"--messages /nonexistent/m.json", "--messages: cannot open /nonexistent/m.json", 1},
    };
    for (size_t k = 0; k < sizeof refused / sizeof refused[0]; k++) {
        snprintf(args, sizeof args, "sample -o %s --device cpu %s", run, refused[k].flags);
        rc = run_train(args, &out);
        CHECK(rc == refused[k].rc && out && strstr(out, refused[k].want), "%s: (%d) %s", refused[k].flags, rc,
              out ? out : "");
        free(out);
    }
    const char *not_lists[] = {"{\"role\": \"user\", \"content\": \"hi\"}", "[]", "[{\"content\": \"hi\"}]", "[1, 2"};
    for (size_t k = 0; k < sizeof not_lists / sizeof not_lists[0]; k++) {
        snprintf(msgs, sizeof msgs, "%s/bad%zu.json", test_tmpdir(), k);
        f = fopen(msgs, "w");
        REQUIRE(f && fputs(not_lists[k], f) >= 0 && fclose(f) == 0, "%s", msgs);
        snprintf(args, sizeof args, "sample -o %s --device cpu --messages %s", run, msgs);
        rc = run_train(args, &out);
        CHECK(rc == 1 && out && strstr(out, "--messages: ") && strstr(out, msgs) &&
                  (k == 3 || strstr(out, "is not a list of {\"role\", \"content\"} messages")),
              "%s: (%d) %s", not_lists[k], rc, out ? out : "");
        free(out);
    }
}

/* A tokenizer whose post-processor opens each text with a token of its own (Llama 3's
 * <|begin_of_text|>) is exported with that token as bos and its separator as eos, as Meta's files
 * name them; transformers then reports the bos its encodings start with. */
TEST(a_checkpoint_names_the_token_its_tokenizer_opens_texts_with_as_bos_and_the_separator_as_eos) {
    char run[800], path[900];
    snprintf(run, sizeof run, "%s/run", test_tmpdir());
    train_tiny_run(run, "tests/fixtures/hf_llama3_bos.json");
    snprintf(path, sizeof path, "%s/step_00000008/config.json", run);
    char *config = read_text(path);
    CHECK(config && strstr(config, "\"bos_token_id\": 0,\n  \"eos_token_id\": 1,"), "config.json: %s", config);
    free(config);
    snprintf(path, sizeof path, "%s/step_00000008/tokenizer_config.json", run);
    char *tok_config = read_text(path);
    CHECK(tok_config && strstr(tok_config, "\"bos_token\": \"<|begin_of_text|>\"") &&
              strstr(tok_config, "\"eos_token\": \"<|end_of_text|>\""),
          "tokenizer_config.json: %s", tok_config);
    free(tok_config);
    /* GPT-2's style has one special token: both */
    snprintf(run, sizeof run, "%s/gpt2_style", test_tmpdir());
    train_tiny_run(run, "tests/fixtures/hf_gpt2_style.json");
    snprintf(path, sizeof path, "%s/step_00000008/tokenizer_config.json", run);
    tok_config = read_text(path);
    CHECK(tok_config && strstr(tok_config, "\"bos_token\": \"<|endoftext|>\"") &&
              strstr(tok_config, "\"eos_token\": \"<|endoftext|>\""),
          "tokenizer_config.json: %s", tok_config);
    free(tok_config);
}

static int one_line(const char *s) {
    const char *nl = strchr(s, '\n');
    return nl && nl[1] == 0;
}

/* A run's directory where a checkpoint's is expected (--checkpoint, --init-from) is named as one,
 * with the path of its latest checkpoint. */
TEST(a_run_directory_given_for_a_checkpoint_names_its_latest) {
    char run[800], path[900], args[2400], *out = NULL;
    snprintf(run, sizeof run, "%s/a_run", test_tmpdir());
    REQUIRE(make_dirs(run) == 0, "mkdir %s", run);
    snprintf(path, sizeof path, "%s/latest", run);
    FILE *f = fopen(path, "w");
    REQUIRE(f && fputs("step_00000004\n", f) >= 0 && fclose(f) == 0, "writing %s", path);
    const char *how[][2] = {{"sample --device cpu --checkpoint", "--checkpoint"},
                            {"eval --device cpu -i x.bin --init-from", "--init-from"},
                            {"--device cpu -e tiny -x 1 -o elsewhere --init-from", "--init-from"}};
    for (int k = 0; k < 3; k++) {
        snprintf(args, sizeof args, "%s %s", how[k][0], run);
        char want[2000];
        snprintf(want, sizeof want, "error: %s %s is a training run's directory, not a checkpoint: pass %s %s/step_00000004",
                 how[k][1], run, how[k][1], run);
        const int rc = run_train(args, &out);
        CHECK(rc == 1 && out && strstr(out, want) && one_line(out), "'%s': (%d) %s", args, rc, out ? out : "");
        free(out);
    }
}


TEST(sample_errors_name_the_problem) {
    char args[1200], *out = NULL;
    /* msg must be in the one line; never names a flag that belongs to another command */
    const struct {
        const char *args, *msg, *never;
        int status;
    } cases[] = {
        {"sample --device cpu", "-o/--out or --checkpoint: give one of them", NULL, 2},
        {"sample -o /nonexistent/run --device cpu", "no run directory /nonexistent/run (pass -o", "-y", 1},
        {"sample -o tests --device cpu", "tests holds no checkpoint (", "-y", 1},
        {"sample -o /nonexistent/run --step 5 --device cpu", "has no checkpoint of step 5", NULL, 1},
        {"sample -o x --temperature -1", "--temperature must be from 0 (greedy) to below 1e6", NULL, 2},
        {"sample -o x --temperature 1e6", "--temperature must be from 0 (greedy) to below 1e6", NULL, 2},
        {"sample -o x --top-k abc", "--top-k must be a whole number from 0 to 2147483647", NULL, 2},
        {"sample -o x --bogus 1", "unknown flag '--bogus'", NULL, 2},
        {"sample -o x --bogus", "unknown flag '--bogus'", NULL, 2},
        {"sample -o x --seed", "--seed needs a value", NULL, 2},
        {"sample -o x --temperature=-1", "--temperature must be from 0 (greedy) to below 1e6", NULL, 2},
        {"sample -o x --ids=1", "--ids takes no value", NULL, 2},
        {"sample -o x --bogus=1", "unknown flag '--bogus=1'", NULL, 2},
        {"sample --checkpoint /nonexistent --device cpu", "--checkpoint /nonexistent: No such file or directory", "--init-from",
         1},
        {"sample --checkpoint tests/fixtures --device cpu", "--checkpoint tests/fixtures has no config.json",
         "--init-from", 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int rc = run_train(cases[i].args, &out);
        CHECK(rc == cases[i].status && out && strncmp(out, "error: ", 7) == 0 && strstr(out, cases[i].msg) &&
                  one_line(out) && !(cases[i].never && strstr(out, cases[i].never)),
              "'%s': (%d) %s", cases[i].args, rc, out);
        free(out);
    }
    /* an -o whose files could not fit the system's paths: a command-line error */
    char long_args[4400];
    int k = snprintf(long_args, sizeof long_args, "sample --device cpu -o /");
    memset(long_args + k, 'r', 4100);
    long_args[k + 4100] = 0;
    int rc = run_train(long_args, &out);
    CHECK(rc == 2 && out && strncmp(out, "error: sample -o/--out is", 25) == 0 && strstr(out, "pass a shorter -o"),
          "a long -o: (%d) %.200s", rc, out);
    free(out);
    /* a run without a tokenizer: ids only, and a prompt is refused */
    char shard[800];
    snprintf(shard, sizeof shard, "%s/d.bin", test_tmpdir());
    REQUIRE(write_pattern_shard(shard, 5000, 300, 1) == 0, "shard");
    snprintf(args, sizeof args, "-i %s --device cpu -e tiny -v 300 -b 2 -t 32 --max-seq-len 64 -x 2 -s 0 -o %s/r", shard,
             test_tmpdir());
    REQUIRE(run_train(args, &out) == 0, "train: %s", out);
    CHECK(strstr(out, "checkpoints will carry no tokenizer.json"), "no note on the missing tokenizer: %s", out);
    free(out);
    snprintf(args, sizeof args, "sample -o %s/r --device cpu -G 5", test_tmpdir());
    CHECK(run_train(args, &out) == 0 && out && strncmp(out, "ids: ", 5) == 0, "ids only: %s", out);
    char *inline_out = NULL; /* the long flags' values written inline draw the same ids */
    snprintf(args, sizeof args, "sample --out=%s/r --device=cpu --gen-tokens=5", test_tmpdir());
    CHECK(run_train(args, &inline_out) == 0 && out && inline_out && !strcmp(out, inline_out), "'%s': %s, not %s", args,
          inline_out, out);
    free(inline_out);
    free(out);
    snprintf(args, sizeof args, "sample -o %s/r --device cpu --prompt hi", test_tmpdir());
    CHECK(run_train(args, &out) == 1 && out && strstr(out, "--prompt needs a tokenizer"), "prompt: %s", out);
    free(out);
}
