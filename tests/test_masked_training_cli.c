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
#include "data/pack.h"
#include "data/shard.h"
#include "tests/test.h"
#include "tests/test_util.h"

/* The number after `key` on the first line that has it, or NAN. */
static double number_after(const char *out, const char *key) {
    const char *p = out ? strstr(out, key) : NULL;
    return p ? strtod(p + strlen(key), NULL) : NAN;
}

/* Weights that predict some targets of the pattern shard well and others badly (`steps` steps of
 * `model` on it, into test_tmpdir()/trained, named in ckpt), and the pattern's tokens (malloc'ed);
 * NULL after a failed check. */
static uint32_t *weights_and_pattern(const char *model, int steps, char *ckpt, size_t ckpt_size) {
    char pattern[900], trained[900], args[3000], err[ERR_LEN], *out = NULL;
    snprintf(pattern, sizeof pattern, "%s/pattern.bin", test_tmpdir());
    snprintf(trained, sizeof trained, "%s/trained", test_tmpdir());
    snprintf(ckpt, ckpt_size, "%s/step_%08d", trained, steps);
    if (write_pattern_shard(pattern, 4000, 300, 3) != 0) {
        CHECK(0, "pattern shard");
        return NULL;
    }
    snprintf(args, sizeof args, "-i %s --device cpu -e tiny %s -v 300 -b 4 -t 32 -x %d -l 3e-3 --warmup 1 "
             "--val-every 0 -s 0 -o %s", pattern, model, steps, trained);
    const int rc = run_train(args, &out);
    CHECK(rc == 0, "training the weights: %s", out);
    free(out);
    uint32_t *tokens = NULL;
    uint64_t n;
    ShardHeader h;
    if (rc == 0 && shard_read(pattern, 300, &tokens, &n, &h, err) != 0) CHECK(0, "%s", err);
    return tokens;
}

/* `./train eval` of the checkpoint on the shard in windows of T: its loss line, or NAN after a failed
 * check; its output into *out when out is not NULL (free it). */
static double eval_loss_of(const char *ckpt, const char *shard, int T, char **out) {
    char args[3000], *said = NULL;
    snprintf(args, sizeof args, "eval --init-from %s -i %s -t %d --device cpu", ckpt, shard, T);
    const int rc = run_train(args, &said);
    CHECK(rc == 0, "eval: %s", said);
    const double loss = rc == 0 ? number_after(said, "\nloss ") : NAN;
    if (out) *out = said;
    else free(said);
    return loss;
}

TEST(a_masked_step_is_the_mean_over_all_of_its_unmarked_targets_with_or_without_accumulation) {
    enum { T = 16, N = 4 * T + 1 };
    char masked[900], ckpt[1000], run[900], args[3000], err[ERR_LEN], *out = NULL;
    snprintf(masked, sizeof masked, "%s/masked.bin", test_tmpdir());
    uint32_t *tokens = weights_and_pattern("", 30, ckpt, sizeof ckpt);
    REQUIRE(tokens, "the weights and the pattern");
    /* one step's four windows of the pattern's tokens: window 0 keeps 1 target, window 1 eight, windows 2
     * and 3 all sixteen */
    for (int i = 1; i < N; i++) {
        const int w = (i - 1) / T, t = (i - 1) % T;
        if ((w == 0 && t != 5) || (w == 1 && t % 2 == 0)) tokens[i] |= SHARD_NO_LOSS;
    }
    REQUIRE(shard_write_flagged(masked, tokens, N, 300, 0, SHARD_LOSS_MASK, err) == 0, "%s", err);
    free(tokens);
    const double want = eval_loss_of(ckpt, masked, T, &out);
    REQUIRE(!isnan(want), "eval");
    CHECK(strstr(out, "tokens 41\n"), "eval counts the 41 unmarked targets: %s", out);
    free(out);
    double norm[2];
    for (int accum = 1; accum <= 2; accum++) {
        snprintf(run, sizeof run, "%s/masked_run_%d", test_tmpdir(), accum);
        snprintf(args, sizeof args, "--init-from %s -i %s --device cpu -b %d -t %d -d %d -x 1 "
                 "--val-every 0 -s 0 -o %s", ckpt, masked, 4 / accum, T, 4 * T, run);
        const int rc = run_train(args, &out);
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
    char documents[900], ckpt[1000], run[900], args[3000], err[ERR_LEN], *out = NULL;
    snprintf(documents, sizeof documents, "%s/documents.bin", test_tmpdir());
    uint32_t *tokens = weights_and_pattern("--family llama", 20, ckpt, sizeof ckpt);
    REQUIRE(tokens, "the weights and the pattern");
    for (int i = 0; i < N; i += 5) tokens[i] |= SHARD_DOC_START; /* 13 documents of 5 tokens */
    REQUIRE(shard_write_flagged(documents, tokens, N, 300, 0, SHARD_DOCUMENTS, err) == 0, "%s", err);
    free(tokens);
    const double want = eval_loss_of(ckpt, documents, T, NULL);
    REQUIRE(!isnan(want), "eval");
    snprintf(run, sizeof run, "%s/documents_run", test_tmpdir());
    snprintf(args, sizeof args, "--init-from %s -i %s --device cpu -b 2 -t %d -d %d -x 1 --val-every 0 "
             "-s 0 -o %s", ckpt, documents, T, 4 * T, run);
    const int rc = run_train(args, &out);
    REQUIRE(rc == 0, "training on the documents shard: %s", out);
    const double loss = number_after(out, "| loss ");
    CHECK(fabs(loss - want) <= 2e-6 * want + 1e-6, "step 1's loss %.6f, eval's %.6f", loss, want);
    CHECK(strstr(out, "data: the shards mark 13 documents (5 tokens each on average)"), "the data line: %s", out);
    CHECK(!strstr(out, "no target"), "a shard of documents alone marks no prompts: %s", out);
    free(out);
}

/* --pack bfd: whole documents packed best fit decreasing (data/pack.h). One step over every packed
 * window has `./train eval --pack bfd`'s loss of the same weights; the data line counts the windows
 * and the padding; a resume without the packing its checkpoint was trained with names it; and a
 * shard that marks no documents is refused by both. */
TEST(a_packed_step_is_evals_packed_loss_and_a_resume_names_the_packing) {
    enum { T = 16, N = 66 };
    /* 66 tokens: enough for 4 consecutive windows of 17 too, so that a resume without --pack gets as
     * far as the checkpoint's fingerprint */
    static const int lengths[] = {9, 8, 10, 7, 12, 5, 11, 4};
    char documents[900], ckpt[1000], run[900], args[3000], err[ERR_LEN], *out = NULL;
    snprintf(documents, sizeof documents, "%s/packed_documents.bin", test_tmpdir());
    uint32_t *tokens = weights_and_pattern("--family llama", 20, ckpt, sizeof ckpt);
    REQUIRE(tokens, "the weights and the pattern");
    for (int d = 0, at = 0; d < 8; at += lengths[d++]) tokens[at] |= SHARD_DOC_START;
    REQUIRE(shard_write_flagged(documents, tokens, N, 300, 0, SHARD_DOCUMENTS, err) == 0, "%s", err);
    PackedWindows packed;
    REQUIRE(pack_shard(tokens, N, T, &packed, err) == 0, "%s", err);
    const int W = (int)packed.windows;
    packed_windows_free(&packed);
    CHECK(W == 4, "%d windows of 17 for 66 tokens in 8 documents", W);
    snprintf(args, sizeof args, "eval --init-from %s -i %s -t %d --device cpu --pack bfd", ckpt, documents, T);
    REQUIRE(run_train(args, &out) == 0, "eval --pack bfd: %s", out);
    const double want = number_after(out, "\nloss ");
    CHECK(strstr(out, "4 window(s) of T=16 packed with whole documents"), "eval's line: %s", out);
    free(out);
    snprintf(run, sizeof run, "%s/packed_run", test_tmpdir());
    snprintf(args, sizeof args, "--init-from %s -i %s --device cpu -b %d -t %d -d %d -x 1 --val-every 0 -s 0 -n 1 "
             "--pack bfd -o %s", ckpt, documents, W, T, W * T, run);
    int rc = run_train(args, &out);
    REQUIRE(rc == 0, "training on packed documents: %s", out);
    const double loss = number_after(out, "| loss ");
    CHECK(fabs(loss - want) <= 2e-6 * want + 1e-6, "step 1's loss %.6f, eval --pack bfd's %.6f", loss, want);
    CHECK(strstr(out, "data: whole documents packed best fit decreasing into 4 windows of 17 tokens, 2.9 % of them "
                      "padding"),
          "the data line: %s", out);
    free(out);
    snprintf(args, sizeof args, "--init-from %s -i %s --device cpu -b %d -t %d -d %d -x 2 --val-every 0 -s 0 -y 1 "
             "-o %s", ckpt, documents, W, T, W * T, run);
    rc = run_train(args, &out);
    CHECK(rc == 1 && strstr(out, "trained on these shards cut into windows by --pack bfd: resume with --pack bfd"),
          "a resume without --pack bfd: (%d) %s", rc, out);
    free(out);
    char plain[900];
    snprintf(plain, sizeof plain, "%s/pattern.bin", test_tmpdir());
    snprintf(args, sizeof args, "-i %s --device cpu -e tiny -v 300 -b 2 -t %d -x 1 --val-every 0 -s 0 --pack bfd -o "
             "%s/plain_run", plain, T, test_tmpdir());
    rc = run_train(args, &out);
    CHECK(rc == 1 && strstr(out, "marks none: prepare it with --documents or --prompt-completion"), "(%d) %s", rc,
          out);
    free(out);
    snprintf(args, sizeof args, "eval --init-from %s -i %s -t %d --device cpu --pack bfd", ckpt, plain, T);
    rc = run_train(args, &out);
    CHECK(rc == 1 && strstr(out, "eval --pack bfd packs whole documents, and") && strstr(out, "marks none"), "(%d) %s",
          rc, out);
    free(out);
    snprintf(args, sizeof args, "-i %s --device cpu -e tiny -v 300 --pack best -o %s/plain_run", plain, test_tmpdir());
    rc = run_train(args, &out);
    CHECK(rc == 2 && strstr(out, "--pack must be wrapped or bfd"), "(%d) %s", rc, out);
    free(out);
    free(tokens);
}
