/* AdamW against a hand computation, AdamW on bf16 state (kernels/adamw_bf16.h) against the fp32
 * update, and the learning-rate schedule. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "common/rng.h"
#include "kernels/adamw_bf16.h"
#include "model/backend.h"
#include "model/train/schedule.h"
#include "tests/test.h"
#include "tests/test_util.h"

TEST(adamw_two_steps_match_hand_computation) {
    GPTConfig cfg = {.num_layers = 1, .num_heads = 2, .dim = 8, .max_seq_len = 4, .vocab_size = 11};
    gpt_config_finish(&cfg);
    ParamTable t;
    char err[ERR_LEN];
    REQUIRE(param_table_build(&t, &cfg, err) == 0, "%s", err);
    Backend *be = backend_cpu_create(&t, 1, 4, OUTPUT_FUSED, OPTIMIZER_STATE_FP32, 3, NULL, err);
    REQUIRE(be, "%s", err);
    size_t P = t.total;
    float *p0 = malloc(P * 4), *g = malloc(P * 4), *p = malloc(P * 4), *m = malloc(P * 4), *v = malloc(P * 4);
    int in[4] = {1, 2, 3, 4}, tg[4] = {2, 3, 4, 5};
    const float lr = 1e-2f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f, clip = 0.5f;
    float *hm = calloc(P, 4), *hv = calloc(P, 4), *hp = malloc(P * 4);
    be->ops->read_state(be, hp, NULL, NULL);
    for (int step = 1; step <= 2; step++) {
        be->ops->zero_grad(be);
        be->ops->train_micro_step(be, in, tg, NULL, 1.0f, 1);
        be->ops->read_grads(be, g);
        be->ops->read_state(be, p0, NULL, NULL);
        AdamWStep s = {lr, b1, b2, eps, wd, clip, step};
        be->ops->adamw_update(be, &s);
        be->ops->read_state(be, p, m, v);
        /* by hand, in double: m = b1 m + (1-b1) g', v = b2 v + (1-b2) g'^2, g' = clip·g,
         * p -= lr (m̂ / (sqrt(v̂) + eps) + wd·p) with wd only where the table says so */
        double worst = 0;
        for (int k = 0; k < t.count; k++) {
            const ParamInfo *pi = &t.params[k];
            for (size_t j = pi->offset; j < pi->offset + pi->numel; j++) {
                double gr = (double)g[j] * clip;
                hm[j] = (float)(b1 * (double)hm[j] + (1 - b1) * gr);
                hv[j] = (float)(b2 * (double)hv[j] + (1 - b2) * gr * gr);
                double mh = hm[j] / (1 - pow(b1, step)), vh = hv[j] / (1 - pow(b2, step));
                double expect = p0[j] - lr * (mh / (sqrt(vh) + eps) + (pi->weight_decay ? wd : 0) * p0[j]);
                worst = fmax(worst, fabs(expect - p[j]) / (fabs(expect) + 1e-3));
            }
        }
        CHECK(worst < 1e-5, "step %d: worst relative difference from the hand computation %.3g", step, worst);
        double moved = 0;
        for (size_t j = 0; j < P; j++) moved = fmax(moved, fabs(p[j] - p0[j]));
        CHECK(moved > 1e-3, "step %d: parameters barely moved (%.3g); the check would be vacuous", step, moved);
    }
    /* the hand computation reads the same decay flags, so check them: matrices decay (the embeddings
     * included, as GPT-2 recipes do), LayerNorm gains and every bias do not */
    for (int k = 0; k < t.count; k++)
        CHECK(t.params[k].weight_decay == (t.params[k].ndim == 2), "%s: weight decay %d with %d dimensions",
              t.params[k].name, t.params[k].weight_decay, t.params[k].ndim);
    free(hp);
    free(hv);
    free(hm);
    free(v);
    free(m);
    free(p);
    free(g);
    free(p0);
    be->ops->destroy(be);
    param_table_free(&t);
}

/* Over all 2^16 random draws, the stochastic rounding's mean is the value itself: up exactly as
 * often as the fraction of a bf16 step it lies above the value below. */
TEST(bf16_stochastic_rounding_is_unbiased_over_every_draw) {
    const float xs[] = {1.0f + 3e-4f, -2.7182818f, 3.14159e-5f, -1e-30f, 65504.123f, 0.1f};
    for (size_t k = 0; k < sizeof xs / sizeof xs[0]; k++) {
        const float x = xs[k];
        const float lo = bf16_bits_to_float(bf16_bits_stochastic(x, 0));
        double sum = 0;
        int ups = 0;
        for (uint32_t r = 0; r < 65536; r++) {
            const float y = bf16_bits_to_float(bf16_bits_stochastic(x, r));
            sum += y;
            ups += y != lo;
        }
        const double mean = sum / 65536;
        CHECK(fabs(mean - x) <= 1e-12 * fabs(x), "x %.9g: mean of the roundings %.12g", x, mean);
        CHECK(ups > 0 && ups < 65536, "x %.9g: rounded up %d times of 65536", x, ups);
        CHECK(fabsf(lo) <= fabsf(x), "x %.9g: the draw 0 gives %.9g, not the value toward zero", x, lo);
    }
    /* a bf16 value is never moved, infinities stay, and a finite value above the largest bf16
     * stays finite (an infinite v would freeze its weight for good) */
    CHECK(bf16_bits_to_float(bf16_bits_stochastic(1.5f, 65535)) == 1.5f, "a bf16 value rounded away");
    CHECK(isinf(bf16_bits_to_float(bf16_bits_stochastic(INFINITY, 65535))), "infinity lost");
    const float largest = bf16_bits_to_float(0x7f7f);
    CHECK(bf16_bits_to_float(bf16_bits_stochastic(3.395e38f, 65535)) == largest &&
              bf16_bits_to_float(bf16_bits_stochastic(-3.395e38f, 65535)) == -largest,
          "a finite value rounded to infinity");
}

TEST(bf16_nearest_rounding_ties_to_even) {
    /* 1 + 2^-8 lies halfway between 1 and 1 + 2^-7: to even, 1; 1 + 3·2^-8 between 1 + 2^-7 and
     * 1 + 2^-6... halfway: to even, 1 + 2^-6 */
    CHECK(bf16_bits_to_float(bf16_bits_nearest(1.0f + 0x1p-8f)) == 1.0f, "tie below not to even");
    CHECK(bf16_bits_to_float(bf16_bits_nearest(1.0f + 3 * 0x1p-8f)) == 1.0f + 0x1p-6f, "tie above not to even");
    CHECK(bf16_bits_to_float(bf16_bits_nearest(1.0f + 0x1p-8f + 0x1p-20f)) == 1.0f + 0x1p-7f, "above the tie");
    CHECK(isnan(bf16_bits_to_float(bf16_bits_nearest(NAN))), "NaN lost");
}

/* A backend given weights at creation holds them (rounded to nearest bf16 under bf16 state), with
 * AdamW's moments at zero, and not the seed's: how --init-from, eval and sample start. */
TEST(a_cpu_backend_created_with_weights_holds_them_and_zero_moments) {
    GPTConfig cfg = {.num_layers = 2, .num_heads = 2, .dim = 8, .max_seq_len = 4, .vocab_size = 13};
    gpt_config_finish(&cfg);
    ParamTable t;
    char err[ERR_LEN];
    REQUIRE(param_table_build(&t, &cfg, err) == 0, "%s", err);
    const size_t P = t.total;
    float *init = malloc(P * 4), *p = malloc(P * 4), *m = malloc(P * 4), *v = malloc(P * 4), *seeded = malloc(P * 4);
    Rng rng;
    rng_seed(&rng, 0x1417);
    for (size_t i = 0; i < P; i++) init[i] = rng_uniform(&rng) * 2.0f - 1.0f;
    for (int bf16 = 0; bf16 < 2; bf16++) {
        const OptimizerState state = bf16 ? OPTIMIZER_STATE_BF16 : OPTIMIZER_STATE_FP32;
        Backend *given = backend_cpu_create(&t, 1, 4, OUTPUT_FUSED, state, 3, init, err);
        Backend *from_seed = backend_cpu_create(&t, 1, 4, OUTPUT_FUSED, state, 3, NULL, err);
        REQUIRE(given && from_seed, "%s", err);
        given->ops->read_state(given, p, m, v);
        from_seed->ops->read_state(from_seed, seeded, NULL, NULL);
        size_t wrong = 0, moments = 0, as_seeded = 0;
        for (size_t i = 0; i < P; i++) {
            const float want = bf16 ? bf16_bits_to_float(bf16_bits_nearest(init[i])) : init[i];
            wrong += memcmp(&p[i], &want, 4) != 0;
            moments += m[i] != 0.0f || v[i] != 0.0f;
            as_seeded += p[i] == seeded[i];
        }
        CHECK(wrong == 0, "state %d: %zu of %zu weights are not the given ones", bf16, wrong, P);
        CHECK(moments == 0, "state %d: %zu moments are not zero", bf16, moments);
        CHECK(as_seeded < P / 100, "state %d: %zu of %zu weights are the seed's", bf16, as_seeded, P);
        given->ops->destroy(given);
        from_seed->ops->destroy(from_seed);
    }
    free(init), free(p), free(m), free(v), free(seeded);
    param_table_free(&t);
}

/* A tiny model on the CPU backend under both states, from the same bf16 weights and moments and
 * the same gradients: each bf16 value after the update is one of the two bf16 neighbours of the
 * fp32 update's result (and that itself when it is a bf16 value). */
TEST(adamw_on_bf16_state_lands_on_a_bf16_neighbour_of_the_fp32_update) {
    GPTConfig cfg = {.num_layers = 1, .num_heads = 2, .dim = 8, .max_seq_len = 4, .vocab_size = 11};
    gpt_config_finish(&cfg);
    ParamTable t;
    char err[ERR_LEN];
    REQUIRE(param_table_build(&t, &cfg, err) == 0, "%s", err);
    Backend *f = backend_cpu_create(&t, 1, 4, OUTPUT_FUSED, OPTIMIZER_STATE_FP32, 3, NULL, err);
    Backend *h = backend_cpu_create(&t, 1, 4, OUTPUT_FUSED, OPTIMIZER_STATE_BF16, 3, NULL, err);
    REQUIRE(f && h, "%s", err);
    const size_t P = t.total;
    float *st[3], *sf[3];
    for (int i = 0; i < 3; i++) st[i] = malloc(P * 4), sf[i] = malloc(P * 4);
    int in[4] = {1, 2, 3, 4}, tg[4] = {2, 3, 4, 5};
    size_t outside = 0, checked = 0, off_grid = 0;
    for (int step = 1; step <= 3; step++) {
        /* the fp32 backend starts each step from the bf16 backend's state */
        h->ops->read_state(h, st[0], st[1], st[2]);
        f->ops->write_state(f, st[0], st[1], st[2]);
        Backend *both[2] = {f, h};
        for (int j = 0; j < 2; j++) {
            both[j]->ops->zero_grad(both[j]);
            both[j]->ops->train_micro_step(both[j], in, tg, NULL, 1.0f, 1);
            AdamWStep s = {1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, step};
            both[j]->ops->adamw_update(both[j], &s);
        }
        f->ops->read_state(f, sf[0], sf[1], sf[2]);
        h->ops->read_state(h, st[0], st[1], st[2]);
        for (int i = 0; i < 3; i++)
            for (size_t j = 0; j < P; j++) {
                const float exact = sf[i][j], got = st[i][j];
                const float down = bf16_bits_to_float(bf16_bits_stochastic(exact, 0));
                const float up = bf16_bits_to_float(bf16_bits_stochastic(exact, 65535));
                outside += got != down && got != up;
                off_grid += bf16_bits_to_float(bf16_bits_nearest(got)) != got;
                checked++;
            }
    }
    CHECK(outside == 0 && off_grid == 0, "%zu of %zu values not a bf16 neighbour of the fp32 update, %zu not bf16",
          outside, checked, off_grid);
    for (int i = 0; i < 3; i++) free(st[i]), free(sf[i]);
    f->ops->destroy(f);
    h->ops->destroy(h);
    param_table_free(&t);
}

/* The trap round-to-nearest falls into: an update below half a bf16 step. Here every weight is 1
 * (a bf16 step of 2^-7) and the update a tenth of a step; nearest rounding would keep every weight
 * at 1, stochastic rounding moves about a tenth of them a step down, the fp32 update on average. */
TEST(adamw_on_bf16_state_keeps_updates_below_half_a_step) {
    const int n = 1 << 16;
    const float lr = 0.1f * 0x1p-7f; /* the first step's normalized update is 1 (g / |g|) */
    const float c1 = 1.0f - 0.9f, c2 = 1.0f - 0.95f;
    const AdamWBf16Step s = {lr, 0.9f, 0.95f, 0.0f, 0.0f, 1.0f, c1, c2, 1};
    double sum = 0;
    int moved = 0;
    for (int i = 0; i < n; i++) {
        uint16_t w = bf16_bits_nearest(1.0f), m = 0, v = 0;
        adamw_bf16_value(&s, (uint64_t)i, 0.25f, &w, &m, &v);
        const float x = bf16_bits_to_float(w);
        sum += x;
        moved += x != 1.0f;
        if (x != 1.0f && x != 1.0f - 0x1p-8f) { /* below 1 the bf16 step halves */
            CHECK(0, "weight %d became %.9g", i, x);
            break;
        }
    }
    /* 1 - lr is 1 - 0.1 of 2^-7 = 1 - 0.2 of the step 2^-8 below 1: moved with probability 0.2 */
    const double p = 0.2, sigma = sqrt(p * (1 - p) / n);
    CHECK(fabs((double)moved / n - p) < 5 * sigma, "%d of %d weights moved (expected about %.0f)", moved, n, p * n);
    CHECK(fabs(sum / n - (1.0 - lr)) < 5 * sigma * 0x1p-8, "mean weight %.9g, the fp32 update gives %.9g", sum / n,
          1.0 - lr);
}

/* The random bits follow the step: one value (one index) given the same sub-half-step update at
 * every step moves on about the expected fraction of steps, not on all or none of them. */
TEST(adamw_on_bf16_state_draws_new_bits_each_step_for_the_same_value) {
    const int steps = 1 << 14;
    const float lr = 0.1f * 0x1p-7f;
    int moved = 0;
    for (int step = 1; step <= steps; step++) {
        const AdamWBf16Step s = {lr, 0.9f, 0.95f, 0.0f, 0.0f, 1.0f, 1.0f - 0.9f, 1.0f - 0.95f, step};
        uint16_t w = bf16_bits_nearest(1.0f), m = 0, v = 0;
        adamw_bf16_value(&s, 12345, 0.25f, &w, &m, &v);
        moved += w != bf16_bits_nearest(1.0f);
    }
    const double p = 0.2, sigma = sqrt(p * (1 - p) / steps);
    CHECK(fabs((double)moved / steps - p) < 5 * sigma, "value 12345 moved on %d of %d steps (expected about %.0f)",
          moved, steps, p * steps);
}

/* The first step after s's warmup whose rate rises above the one before (-1: none). */
static int first_rise(const LrSchedule *s) {
    for (int step = s->warmup + 1; step < s->total_steps; step++)
        if (lr_at_step(s, step) > lr_at_step(s, step - 1)) return step;
    return -1;
}

TEST(schedule_warmup_is_linear_then_cosine_reaches_final) {
    const float lr = 1e-3f, fin = 1e-4f;
    CHECK(fabsf(cosine_lr(0, 100, 10, lr, fin) - 1e-4f) < 1e-9f, "first warmup step is lr/warmup");
    CHECK(fabsf(cosine_lr(4, 100, 10, lr, fin) - 5e-4f) < 1e-9f, "warmup is linear");
    CHECK(fabsf(cosine_lr(9, 100, 10, lr, fin) - lr) < 1e-9f, "warmup ends at the peak");
    CHECK(fabsf(cosine_lr(10, 100, 10, lr, fin) - lr) < 1e-9f, "decay starts at the peak");
    float mid = cosine_lr(10 + 89 / 2, 100, 10, lr, fin);
    CHECK(fabsf(mid - 0.5f * (lr + fin)) < 2e-5f, "halfway through the decay is the midpoint (%g)", mid);
    CHECK(fabsf(cosine_lr(99, 100, 10, lr, fin) - fin) < 1e-9f, "last step runs at lr_final");
    /* a quarter of the way the cosine is still near the peak, where a linear decay is not:
     * 0.854 against 0.75 of the way from lr_final to lr */
    float quarter = cosine_lr(10 + 89 / 4, 100, 10, lr, fin);
    double cosine = fin + 0.5 * (lr - fin) * (1 + cos(3.14159265358979 * (89 / 4) / 89.0));
    CHECK(fabs(quarter - cosine) < 1e-8, "a quarter through the decay: %g, cosine gives %g", quarter, cosine);
    float prev = lr;
    for (int s = 10; s < 100; s++) {
        float x = cosine_lr(s, 100, 10, lr, fin);
        if (x > prev + 1e-12f) {
            CHECK(0, "cosine decay increases at step %d", s);
            break;
        }
        prev = x;
    }
    CHECK(cosine_lr(0, 1, 0, lr, fin) == lr, "a one-step run uses the peak");
}

TEST(schedule_linear_falls_by_equal_steps_to_final) {
    const float lr = 1e-3f, fin = 1e-4f;
    const LrSchedule s = {.shape = LR_LINEAR, .total_steps = 100, .warmup = 10, .lr = lr, .lr_final = fin};
    CHECK(lr_at_step(&s, 4) == cosine_lr(4, 100, 10, lr, fin), "the warmup is the cosine's");
    CHECK(lr_at_step(&s, 10) == lr, "the decay starts at the peak: %g", lr_at_step(&s, 10));
    CHECK(lr_at_step(&s, 99) == fin, "the last step runs at lr_final: %g", lr_at_step(&s, 99));
    /* 89 equal falls of (lr - fin) / 89 between steps 10 and 99 */
    for (int step = 10; step < 99; step++) {
        const double fall = (double)lr_at_step(&s, step) - lr_at_step(&s, step + 1);
        if (fabs(fall - (lr - fin) / 89.0) > 5e-10) {
            CHECK(0, "step %d falls by %g, not %g", step + 1, fall, (lr - fin) / 89.0);
            break;
        }
    }
    /* a quarter of the way: 0.75 of the way from lr_final to lr, where the cosine is at 0.854 */
    const double quarter = lr_at_step(&s, 10 + 89 / 4), want = fin + (lr - fin) * (1 - (89 / 4) / 89.0);
    CHECK(fabs(quarter - want) < 1e-9 && cosine_lr(10 + 89 / 4, 100, 10, lr, fin) > quarter + 1e-5f,
          "a quarter through the decay: %g, a straight line gives %g", quarter, want);
    CHECK(first_rise(&s) == -1, "the rate rises at step %d", first_rise(&s));
}

TEST(schedule_wsd_holds_the_peak_then_falls_as_one_minus_sqrt_over_its_last_steps) {
    const float lr = 1e-3f, fin = 1e-4f;
    LrSchedule s = {.shape = LR_WSD, .total_steps = 100, .warmup = 10, .decay_steps = 20, .lr = lr, .lr_final = fin};
    CHECK(lr_at_step(&s, 0) == cosine_lr(0, 100, 10, lr, fin) && lr_at_step(&s, 9) == lr, "the warmup is the cosine's");
    int held = 1;
    for (int step = 10; step < 80; step++) held &= lr_at_step(&s, step) == lr;
    CHECK(held, "steps 11 to 80 run at the peak");
    for (int k = 1; k <= 20; k++) { /* step 79 + k: k/20 of the decay done */
        const double want = fin + (lr - fin) * (1.0 - sqrt(k / 20.0)), got = lr_at_step(&s, 79 + k);
        if (fabs(got - want) > 1e-9) {
            CHECK(0, "decay step %d of 20: %g, 1 - sqrt gives %g", k, got, want);
            break;
        }
    }
    CHECK(lr_at_step(&s, 99) == fin, "the last step runs at lr_final: %g", lr_at_step(&s, 99));
    CHECK(first_rise(&s) == -1, "the rate rises at step %d", first_rise(&s));
    /* decay_steps 0: a fifth of the run */
    s.decay_steps = 0;
    CHECK(lr_wsd_decay_steps(&s) == 20 && lr_at_step(&s, 79) == lr && lr_at_step(&s, 80) < lr,
          "the default decay: %d steps", lr_wsd_decay_steps(&s));
    s.total_steps = 3, s.warmup = 0;
    CHECK(lr_wsd_decay_steps(&s) == 1 && lr_at_step(&s, 1) == lr && lr_at_step(&s, 2) == fin,
          "a run shorter than five steps still decays at its last: %d steps", lr_wsd_decay_steps(&s));
    /* a decay longer than what the warmup leaves starts right after it */
    s = (LrSchedule){.shape = LR_WSD, .total_steps = 30, .warmup = 10, .decay_steps = 50, .lr = lr, .lr_final = fin};
    CHECK(lr_wsd_decay_steps(&s) == 20 && lr_at_step(&s, 9) == lr && lr_at_step(&s, 10) < lr &&
              lr_at_step(&s, 29) == fin,
          "a decay of 50 in 20 steps: %d steps, step 11 at %g", lr_wsd_decay_steps(&s), lr_at_step(&s, 10));
    /* a warmup as long as the run leaves no decay */
    s.warmup = 30;
    CHECK(lr_wsd_decay_steps(&s) == 0 && lr_at_step(&s, 29) == lr, "a run of warmup: %d decay steps, last %g",
          lr_wsd_decay_steps(&s), lr_at_step(&s, 29));
    /* a longer run resumed in the stable part decays at its new end */
    const LrSchedule longer = {.shape = LR_WSD, .total_steps = 200, .warmup = 10, .decay_steps = 20, .lr = lr,
                               .lr_final = fin};
    CHECK(lr_at_step(&longer, 150) == lr && lr_at_step(&longer, 199) == fin, "the longer run: %g at 151, %g at 200",
          lr_at_step(&longer, 150), lr_at_step(&longer, 199));
}

TEST(schedule_shapes_parse_by_name) {
    LrShape shape = LR_COSINE;
    CHECK(lr_shape_parse("wsd", &shape) == 0 && shape == LR_WSD, "wsd");
    CHECK(lr_shape_parse("linear", &shape) == 0 && shape == LR_LINEAR, "linear");
    CHECK(lr_shape_parse("cosine", &shape) == 0 && shape == LR_COSINE, "cosine");
    CHECK(lr_shape_parse("Cosine", &shape) != 0 && lr_shape_parse("", &shape) != 0 && shape == LR_COSINE,
          "other names are refused and leave the shape");
    CHECK(!strcmp(lr_shape_name(LR_WSD), "wsd") && !strcmp(lr_shape_name(LR_LINEAR), "linear"), "names");
}
