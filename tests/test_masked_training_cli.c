/* Training on a masked shard (prompt tokens marked as no target, SHARD_LOSS_MASK) through ./train:
 * a step's loss is the mean over every unmarked target of its batches, whatever the split into
 * micro-batches: the first step's loss line (before its update) is `./train eval`'s loss of the same weights
 * over the same windows, with and without gradient accumulation, and the two runs' gradient norms
 * agree. The windows hold 1, 8, 16 and 16 targets: a mean of the two micro-batches' means was off by
 * 5.6e-5 of the loss and 0.17 % of the norm here, far beyond the runs' rounding (the bounds below). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "data/shard.h"
#include "tests/test.h"
#include "tests/test_util.h"

/* The number after `key` on the first line that has it, or NAN. */
static double number_after(const char *out, const char *key) {
    const char *p = out ? strstr(out, key) : NULL;
    return p ? strtod(p + strlen(key), NULL) : NAN;
}

TEST(a_masked_step_is_the_mean_over_all_of_its_unmarked_targets_with_or_without_accumulation) {
    enum { T = 16, N = 4 * T + 1 };
    char pattern[900], masked[900], trained[900], run[900], args[3000], *out = NULL;
    snprintf(pattern, sizeof pattern, "%s/pattern.bin", test_tmpdir());
    snprintf(masked, sizeof masked, "%s/masked.bin", test_tmpdir());
    snprintf(trained, sizeof trained, "%s/trained", test_tmpdir());
    REQUIRE(write_pattern_shard(pattern, 4000, 300, 3) == 0, "pattern shard");
    /* weights that predict some targets well and others badly: 30 steps on the pattern */
    snprintf(args, sizeof args, "-i %s --device cpu -e tiny -v 300 -b 4 -t 32 -x 30 -l 3e-3 --warmup 1 --val-every 0 "
             "-s 0 -o %s", pattern, trained);
    int rc = run_train(args, &out);
    REQUIRE(rc == 0, "training the weights: %s", out);
    free(out);
    /* one step's four windows of the pattern's tokens: window 0 keeps 1 target, window 1 eight, windows 2
     * and 3 all sixteen */
    uint32_t *tokens;
    uint64_t n;
    ShardHeader h;
    char err[ERR_LEN];
    REQUIRE(shard_read(pattern, 300, &tokens, &n, &h, err) == 0, "%s", err);
    for (int i = 1; i < N; i++) {
        const int w = (i - 1) / T, t = (i - 1) % T;
        if ((w == 0 && t != 5) || (w == 1 && t % 2 == 0)) tokens[i] |= SHARD_NO_LOSS;
    }
    REQUIRE(shard_write_flagged(masked, tokens, N, 300, 0, SHARD_LOSS_MASK, err) == 0, "%s", err);
    free(tokens);
    snprintf(args, sizeof args, "eval --init-from %s/step_00000030 -i %s -t %d --device cpu", trained, masked, T);
    rc = run_train(args, &out);
    REQUIRE(rc == 0, "eval: %s", out);
    const double want = number_after(out, "\nloss ");
    CHECK(strstr(out, "tokens 41\n"), "eval counts the 41 unmarked targets: %s", out);
    free(out);
    double norm[2];
    for (int accum = 1; accum <= 2; accum++) {
        snprintf(run, sizeof run, "%s/masked_run_%d", test_tmpdir(), accum);
        snprintf(args, sizeof args, "--init-from %s/step_00000030 -i %s --device cpu -b %d -t %d -d %d -x 1 "
                 "--val-every 0 -s 0 -o %s", trained, masked, 4 / accum, T, 4 * T, run);
        rc = run_train(args, &out);
        REQUIRE(rc == 0, "training on the masked shard: %s", out);
        const double loss = number_after(out, "| loss ");
        norm[accum - 1] = number_after(out, "| norm ");
        CHECK(fabs(loss - want) <= 2e-6 * want + 1e-6, "accumulation %d: step 1's loss %.6f, eval's %.6f", accum,
              loss, want);
        CHECK(strstr(out, "data: 35.4 % of the tokens are marked as no target"), "the data line: %s", out);
        free(out);
    }
    CHECK(fabs(norm[0] - norm[1]) <= 1e-4 * norm[0], "gradient norms %.4f and %.4f", norm[0], norm[1]);
}

/* A shard of documents (SHARD_DOCUMENTS, as `prepare --documents` writes) through ./train: the data
 * line counts the documents and names no prompts, and the first step's loss is `./train eval`'s of
 * the same weights over the same windows, each document alone. */
TEST(a_documents_step_is_evals_loss_and_the_data_line_counts_the_documents) {
    enum { T = 16, N = 4 * T + 1 };
    char pattern[900], documents[900], trained[900], run[900], args[3000], err[ERR_LEN], *out = NULL;
    snprintf(pattern, sizeof pattern, "%s/pattern.bin", test_tmpdir());
    snprintf(documents, sizeof documents, "%s/documents.bin", test_tmpdir());
    snprintf(trained, sizeof trained, "%s/trained", test_tmpdir());
    REQUIRE(write_pattern_shard(pattern, 4000, 300, 3) == 0, "pattern shard");
    snprintf(args, sizeof args, "-i %s --device cpu -e tiny --family llama -v 300 -b 4 -t 32 -x 20 -l 3e-3 "
             "--warmup 1 --val-every 0 -s 0 -o %s", pattern, trained);
    int rc = run_train(args, &out);
    REQUIRE(rc == 0, "training the weights: %s", out);
    free(out);
    uint32_t *tokens;
    uint64_t n;
    ShardHeader h;
    REQUIRE(shard_read(pattern, 300, &tokens, &n, &h, err) == 0, "%s", err);
    for (int i = 0; i < N; i += 5) tokens[i] |= SHARD_DOC_START; /* 13 documents of 5 tokens */
    REQUIRE(shard_write_flagged(documents, tokens, N, 300, 0, SHARD_DOCUMENTS, err) == 0, "%s", err);
    free(tokens);
    snprintf(args, sizeof args, "eval --init-from %s/step_00000020 -i %s -t %d --device cpu", trained, documents, T);
    rc = run_train(args, &out);
    REQUIRE(rc == 0, "eval: %s", out);
    const double want = number_after(out, "\nloss ");
    free(out);
    snprintf(run, sizeof run, "%s/documents_run", test_tmpdir());
    snprintf(args, sizeof args, "--init-from %s/step_00000020 -i %s --device cpu -b 2 -t %d -d %d -x 1 --val-every 0 "
             "-s 0 -o %s", trained, documents, T, 4 * T, run);
    rc = run_train(args, &out);
    REQUIRE(rc == 0, "training on the documents shard: %s", out);
    const double loss = number_after(out, "| loss ");
    CHECK(fabs(loss - want) <= 2e-6 * want + 1e-6, "step 1's loss %.6f, eval's %.6f", loss, want);
    CHECK(strstr(out, "data: the shards mark 13 documents (5 tokens each on average)"), "the data line: %s", out);
    CHECK(!strstr(out, "no target"), "a shard of documents alone marks no prompts: %s", out);
    free(out);
}
