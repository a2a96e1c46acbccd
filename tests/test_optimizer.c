/* AdamW against a hand computation, and the learning-rate schedule. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
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
    Backend *be = backend_cpu_create(&t, 1, 4, OUTPUT_FUSED, 3, err);
    REQUIRE(be, "%s", err);
    size_t P = t.total;
    float *p0 = malloc(P * 4), *g = malloc(P * 4), *p = malloc(P * 4), *m = malloc(P * 4), *v = malloc(P * 4);
    int in[4] = {1, 2, 3, 4}, tg[4] = {2, 3, 4, 5};
    const float lr = 1e-2f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f, clip = 0.5f;
    float *hm = calloc(P, 4), *hv = calloc(P, 4), *hp = malloc(P * 4);
    be->ops->read_state(be, hp, NULL, NULL);
    for (int step = 1; step <= 2; step++) {
        be->ops->zero_grad(be);
        be->ops->train_micro_step(be, in, tg, 1.0f, 1);
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

TEST(schedule_warmup_is_linear_then_cosine_reaches_final) {
    const float lr = 1e-3f, fin = 1e-4f;
    CHECK(fabsf(lr_at_step(0, 100, 10, lr, fin) - 1e-4f) < 1e-9f, "first warmup step is lr/warmup");
    CHECK(fabsf(lr_at_step(4, 100, 10, lr, fin) - 5e-4f) < 1e-9f, "warmup is linear");
    CHECK(fabsf(lr_at_step(9, 100, 10, lr, fin) - lr) < 1e-9f, "warmup ends at the peak");
    CHECK(fabsf(lr_at_step(10, 100, 10, lr, fin) - lr) < 1e-9f, "decay starts at the peak");
    float mid = lr_at_step(10 + 89 / 2, 100, 10, lr, fin);
    CHECK(fabsf(mid - 0.5f * (lr + fin)) < 2e-5f, "halfway through the decay is the midpoint (%g)", mid);
    CHECK(fabsf(lr_at_step(99, 100, 10, lr, fin) - fin) < 1e-9f, "last step runs at lr_final");
    /* a quarter of the way the cosine is still near the peak, where a linear decay is not:
     * 0.854 against 0.75 of the way from lr_final to lr */
    float quarter = lr_at_step(10 + 89 / 4, 100, 10, lr, fin);
    double cosine = fin + 0.5 * (lr - fin) * (1 + cos(3.14159265358979 * (89 / 4) / 89.0));
    CHECK(fabs(quarter - cosine) < 1e-8, "a quarter through the decay: %g, cosine gives %g", quarter, cosine);
    float prev = lr;
    for (int s = 10; s < 100; s++) {
        float x = lr_at_step(s, 100, 10, lr, fin);
        if (x > prev + 1e-12f) {
            CHECK(0, "cosine decay increases at step %d", s);
            break;
        }
        prev = x;
    }
    CHECK(lr_at_step(0, 1, 0, lr, fin) == lr, "a one-step run uses the peak");
}
