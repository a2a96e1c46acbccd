/* A masked step's micro-batch weights (model/train/loss_weights.h): the gradient of micro-batches
 * that hold different numbers of targets, each scaled by its weight, is the gradient of the mean over
 * all of their targets (one batch of them all), as transformers' Trainer normalizes by the step's
 * count of items; the ranks' and the vocabulary-parallel layer's scales; and the plain case's
 * 1 / accum to the bit. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "model/backend.h"
#include "model/train/loss_weights.h"
#include "tests/test.h"
#include "tests/test_util.h"

TEST(masked_micro_batches_weighted_by_their_targets_give_the_gradient_of_one_batch_of_them_all) {
    enum { B = 2, T = 6, BT = B * T, V = 29 };
    GPTConfig cfg = {.num_layers = 1, .num_heads = 2, .dim = 8, .max_seq_len = T, .vocab_size = V};
    gpt_config_finish(&cfg);
    ParamTable t;
    char err[ERR_LEN];
    REQUIRE(param_table_build(&t, &cfg, err) == 0, "%s", err);
    Backend *micro = perturbed_cpu_backend(&t, B, T, OUTPUT_FUSED), *whole = perturbed_cpu_backend(&t, 2 * B, T,
                                                                                                    OUTPUT_FUSED);
    REQUIRE(micro && whole, "backends");
    int in[2 * BT], tg[2 * BT];
    for (int i = 0; i < 2 * BT; i++) in[i] = (i * 5 + 3) % V, tg[i] = (i * 7 + 1) % V;
    /* the first micro-batch keeps 2 targets, the second 11 */
    for (int i = 0; i < BT; i++)
        if (i != 4 && i != 9) tg[i] = -1;
    tg[BT + 3] = -1;
    const uint64_t counts[2] = {count_valid_targets(tg, BT), count_valid_targets(tg + BT, BT)};
    CHECK(counts[0] == 2 && counts[1] == 11, "counted %llu and %llu targets", (unsigned long long)counts[0],
          (unsigned long long)counts[1]);
    float scales[2];
    step_loss_scales(counts, counts, 2, 1, 0, scales);
    micro->ops->zero_grad(micro);
    double loss = 0.0;
    for (int a = 0; a < 2; a++)
        loss += micro->ops->train_micro_step(micro, in + a * BT, tg + a * BT, NULL, scales[a], a == 1) * scales[a];
    whole->ops->zero_grad(whole);
    const double want = whole->ops->train_micro_step(whole, in, tg, NULL, 1.0f, 1);
    CHECK(fabs(loss - want) <= 1e-6 * want, "weighted loss %.8f, one batch's %.8f", loss, want);
    float *g = malloc(t.total * sizeof *g), *gw = malloc(t.total * sizeof *gw);
    micro->ops->read_grads(micro, g);
    whole->ops->read_grads(whole, gw);
    CHECK(rel_l2(g, gw, t.total) < 1e-5, "gradient %.3g off one batch's (relative L2)", rel_l2(g, gw, t.total));
    /* the plain mean of the two means weighs the first batch's 2 targets as much as the 11: not it */
    micro->ops->zero_grad(micro);
    for (int a = 0; a < 2; a++) micro->ops->train_micro_step(micro, in + a * BT, tg + a * BT, NULL, 0.5f, a == 1);
    micro->ops->read_grads(micro, g);
    CHECK(rel_l2(g, gw, t.total) > 1e-2, "the unweighted mean's gradient is as close (%.3g): the test cannot fail",
          rel_l2(g, gw, t.total));
    free(gw);
    free(g);
    whole->ops->destroy(whole);
    micro->ops->destroy(micro);
    param_table_free(&t);
}

TEST(a_steps_scales_follow_its_ranks_and_the_vocabulary_parallel_layer) {
    /* two ranks, three micro-batches: this rank's targets and every rank's */
    const uint64_t mine[3] = {10, 0, 30}, every[3] = {25, 15, 40}; /* 80 in all */
    float s[3];
    step_loss_scales(mine, every, 3, 2, 0, s);
    CHECK(s[0] == 20.0f / 80 && s[1] == 0.0f && s[2] == 60.0f / 80, "data parallel: %g %g %g", s[0], s[1], s[2]);
    step_loss_scales(mine, every, 3, 2, 1, s);
    CHECK(s[0] == 25.0f / 80 && s[1] == 15.0f / 80 && s[2] == 40.0f / 80, "vocabulary parallel: %g %g %g", s[0], s[1],
          s[2]);
    const uint64_t none[3] = {0, 0, 0};
    step_loss_scales(none, none, 3, 2, 0, s);
    CHECK(s[0] == 0.0f && s[1] == 0.0f && s[2] == 0.0f, "no target: %g %g %g", s[0], s[1], s[2]);
    /* every target valid: each micro-batch's scale is 1 / accum to the bit, whatever the ranks */
    for (int accum = 1; accum <= 64; accum++)
        for (int world = 1; world <= 8; world *= 2) {
            const uint64_t bt = 16 * 2048;
            CHECK(exact_ratio(world * bt, (uint64_t)accum * world * bt) == 1.0f / accum, "accum %d world %d", accum,
                  world);
        }
    CHECK(exact_ratio(1, 3) == 1.0f / 3.0f && exact_ratio(123456789, 987654321) == (float)(123456789.0 / 987654321.0),
          "ratios");
}
