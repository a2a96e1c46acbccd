/* Finite-difference check of every parameter of a tiny GPT-2 on the CPU backend, with both output
 * layers, an ignored target and a vocabulary that is not a multiple of 128. The forward is fp32,
 * so central differences with a step of 1e-2 agree with the analytic gradient to ~3e-4 relative L2
 * (measured); each tensor's
 * analytic gradient must match within 3e-3 relative L2 (plus a small absolute floor for tensors
 * whose exact gradient is ~0, such as the key biases, which softmax is invariant to). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "model/backend.h"
#include "tests/test.h"
#include "tests/test_util.h"

static void check_gradients(OutputKind output) {
    GPTConfig cfg = {.num_layers = 2, .num_heads = 2, .dim = 16, .max_seq_len = 8, .vocab_size = 37};
    gpt_config_finish(&cfg);
    ParamTable t;
    char err[ERR_LEN];
    REQUIRE(param_table_build(&t, &cfg, err) == 0, "%s", err);
    int B = 2, T = 5;
    Backend *be = backend_cpu_create(&t, B, T, output, 7, err);
    REQUIRE(be, "%s", err);
    /* Perturb the init so LayerNorm weights and biases are not all 1 and 0 (their gradients
     * would then be degenerate and check less). */
    float *p = malloc(t.total * 4), *g = malloc(t.total * 4), *q = malloc(t.total * 4);
    be->ops->read_state(be, p, NULL, NULL);
    Rng rng;
    rng_seed(&rng, 11);
    for (size_t i = 0; i < t.total; i++) p[i] += (float)(0.1 * rng_normal(&rng));
    const ParamInfo *wte = param_whole(&t, ROLE_WTE);
    for (size_t j = (size_t)cfg.vocab_size * cfg.dim; j < wte->numel; j++) p[wte->offset + j] = 0.0f;
    be->ops->write_state(be, p, NULL, NULL);

    int inputs[10], targets[10];
    for (int i = 0; i < B * T; i++) {
        inputs[i] = (int)rng_below(&rng, cfg.vocab_size);
        targets[i] = (int)rng_below(&rng, cfg.vocab_size);
    }
    targets[3] = -1;
    /* the loss is the mean over the 9 targets that count: the sum of the single-target losses / 9
     * (the gradient and eval_loss share the divisor, so the finite differences cannot see it) */
    double sum_single = 0;
    for (int i = 0; i < B * T; i++) {
        if (targets[i] < 0) continue;
        int only[10];
        for (int k = 0; k < B * T; k++) only[k] = k == i ? targets[i] : -1;
        sum_single += be->ops->eval_loss(be, inputs, only);
    }
    const double mean = be->ops->eval_loss(be, inputs, targets);
    CHECK(fabs(mean - sum_single / 9) <= 1e-5 * fabs(mean), "loss %.7g, mean of the 9 counted targets %.7g", mean,
          sum_single / 9);
    be->ops->zero_grad(be);
    be->ops->train_micro_step(be, inputs, targets, 1.0f, 1);
    be->ops->read_grads(be, g);

    const float eps = 1e-2f;
    for (int k = 0; k < t.count; k++) {
        const ParamInfo *pi = &t.params[k];
        size_t n = pi->role == ROLE_WTE ? (size_t)cfg.vocab_size * cfg.dim : pi->numel;
        float *fd = malloc(n * 4);
        for (size_t j = 0; j < n; j++) {
            memcpy(q, p, t.total * 4);
            q[pi->offset + j] = p[pi->offset + j] + eps;
            be->ops->write_state(be, q, NULL, NULL);
            double up = be->ops->eval_loss(be, inputs, targets);
            q[pi->offset + j] = p[pi->offset + j] - eps;
            be->ops->write_state(be, q, NULL, NULL);
            double down = be->ops->eval_loss(be, inputs, targets);
            fd[j] = (float)((up - down) / (2.0 * eps));
        }
        double num = 0, den = 0;
        for (size_t j = 0; j < n; j++) {
            double d = fd[j] - g[pi->offset + j];
            num += d * d;
            den += (double)fd[j] * fd[j];
        }
        double err_l2 = sqrt(num), ref_l2 = sqrt(den);
        CHECK(err_l2 <= 3e-3 * ref_l2 + 1e-5 * sqrt((double)n), "%s (%s output): |fd - grad| = %.3g, |fd| = %.3g",
              pi->name, output == OUTPUT_FUSED ? "fused" : "canonical", err_l2, ref_l2);
        free(fd);
    }
    /* Padded embedding rows are never a target and get no probability mass: zero gradient. */
    for (size_t j = (size_t)cfg.vocab_size * cfg.dim; j < wte->numel; j++)
        if (g[wte->offset + j] != 0.0f) {
            CHECK(0, "padded embedding row %zu received a gradient", j / cfg.dim);
            break;
        }
    free(q);
    free(g);
    free(p);
    be->ops->destroy(be);
    param_table_free(&t);
}

TEST(gradients_match_finite_differences_fused_output) {
    check_gradients(OUTPUT_FUSED);
}

TEST(gradients_match_finite_differences_canonical_output) {
    check_gradients(OUTPUT_CANONICAL);
}
