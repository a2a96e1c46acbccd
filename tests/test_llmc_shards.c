/* llm.c's .bin token files read as they are (fixtures written by
 * tests/fixtures/gen/make_llmc_shards.py the way llm.c's dev/data scripts write them): both formats
 * read back every token, and their defects get the same errors as our own shards'. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/err.h"
#include "data/shard.h"
#include "tests/test.h"
#include "tests/test_util.h"

#define GPT2_FIXTURE "tests/fixtures/llmc_gpt2.bin"
#define LLAMA3_FIXTURE "tests/fixtures/llmc_llama3.bin"

/* The tokens tests/fixtures/gen/make_llmc_shards.py writes. */
static uint32_t fixture_token(uint64_t i, uint32_t vocab, uint64_t seed) {
    return i % 50 ? (uint32_t)((i * seed * 7919 + i * i) % vocab) : vocab - 1;
}

static void expect_fixture(const char *path, uint32_t width, uint32_t vocab, uint64_t seed) {
    uint32_t *t = NULL;
    uint64_t n = 0;
    ShardHeader h;
    char err[ERR_LEN];
    REQUIRE(shard_read(path, vocab, &t, &n, &h, err) == 0, "%s", err);
    CHECK(n == 2000 && h.num_tokens == 2000, "%s: %llu tokens, expected 2000", path, (unsigned long long)n);
    CHECK(h.bytes_per_token == width && h.vocab_size == vocab && h.header_bytes == LLMC_HEADER_BYTES,
          "%s: width %u vocab %u header %u", path, h.bytes_per_token, h.vocab_size, h.header_bytes);
    uint64_t bad = n;
    for (uint64_t i = 0; i < n && bad == n; i++)
        if (t[i] != fixture_token(i, vocab, seed)) bad = i;
    CHECK(bad == n, "%s: token %llu is %u, expected %u", path, (unsigned long long)bad, bad < n ? t[bad] : 0,
          bad < n ? fixture_token(bad, vocab, seed) : 0);
    free(t);
}

TEST(llmc_gpt2_shard_reads_every_uint16_token) {
    expect_fixture(GPT2_FIXTURE, 2, LLMC_VOCAB_GPT2, 3);
}

TEST(llmc_llama3_shard_reads_every_uint32_token) {
    expect_fixture(LLAMA3_FIXTURE, 4, LLMC_VOCAB_LLAMA3, 5);
}

/* Copies a fixture into the test's folder, patches or truncates it, expects msg. */
static void expect_llmc_defect(const char *fixture, const char *what, long patch_at, int32_t patch, long truncate_to,
                               uint32_t model_vocab, const char *msg) {
    char path[700];
    snprintf(path, sizeof path, "%s/bad.bin", test_tmpdir());
    size_t len;
    char *bytes = read_file(fixture, &len);
    REQUIRE(bytes, "cannot read %s", fixture);
    if (patch_at >= 0) memcpy(bytes + patch_at, &patch, 4);
    FILE *f = fopen(path, "wb");
    REQUIRE(f && fwrite(bytes, 1, len, f) == len, "cannot write %s", path);
    fclose(f);
    free(bytes);
    if (truncate_to >= 0) REQUIRE(truncate(path, truncate_to) == 0, "truncate");
    expect_shard_refused(path, model_vocab, what, msg);
}

TEST(llmc_shard_defects_give_the_same_errors_as_ours) {
    expect_llmc_defect(GPT2_FIXTURE, "GPT-2 magic, Llama 3 version", 4, 7, -1, 50257, "goes with version 1");
    expect_llmc_defect(LLAMA3_FIXTURE, "Llama 3 magic, GPT-2 version", 4, 1, -1, 128256, "goes with version 7");
    expect_llmc_defect(GPT2_FIXTURE, "count beyond the file", 8, 2001, -1, 50257, "truncated or corrupt");
    expect_llmc_defect(GPT2_FIXTURE, "negative count", 8, -4, -1, 50257, "records -4 tokens");
    expect_llmc_defect(LLAMA3_FIXTURE, "truncated tokens", -1, 0, 1024 + 4 * 1999 + 2, 128256,
                       "truncated or corrupt");
    expect_llmc_defect(GPT2_FIXTURE, "truncated header", -1, 0, 600, 50257, "truncated or corrupt");
    /* the fix names the vocabulary llm.c's GPT-2 files are made with */
    expect_llmc_defect(GPT2_FIXTURE, "token above the model's vocabulary", -1, 0, -1, 1000,
                       "is >= vocabulary 1000 (re-tokenize, or pass -v 50257)");
    expect_llmc_defect(LLAMA3_FIXTURE, "token above the model's vocabulary", -1, 0, -1, 50257,
                       "is >= vocabulary 50257 (re-tokenize, or pass -v 128256)");
    /* a token beyond what the magic suggests: that guess is off, and no corruption is claimed (the
     * header records no vocabulary); the fix is a -v above the token. 55340 as the first token. */
    expect_llmc_defect(GPT2_FIXTURE, "token above the magic's vocabulary", 1024, 55340, -1, 1000,
                       "is >= vocabulary 1000 (pass the -v of the tokenizer that made it, above 55340");
    /* a token no vocabulary holds (as eval reads shards, bounded by no model): no -v is offered */
    expect_llmc_defect(LLAMA3_FIXTURE, "token 0xFFFFFFFF", 1024, -1, -1, UINT32_MAX,
                       "is above the largest vocabulary a model takes, 1073741824 (the shard is corrupt");
    expect_llmc_defect(LLAMA3_FIXTURE, "token 0xFFFFFFFF under a model", 1024, -1, -1, 128256,
                       "is above the largest vocabulary a model takes");
    expect_llmc_defect(LLAMA3_FIXTURE, "token 0xFFFFFFFE", 1024, -2, -1, UINT32_MAX,
                       "is above the largest vocabulary a model takes");
    expect_llmc_defect(LLAMA3_FIXTURE, "token 2^31", 1024, INT32_MIN, -1, UINT32_MAX,
                       "is above the largest vocabulary a model takes");
    /* a file cut inside llm.c's own header is named by that header's size */
    expect_llmc_defect(GPT2_FIXTURE, "cut at 12 bytes", -1, 0, 12, 50257, "shorter than its 1024-byte llm.c header");
}

TEST(train_runs_on_llmc_shards_and_names_their_vocabulary) {
    char *out = NULL, args[1024];
    snprintf(args, sizeof args,
             "-i " GPT2_FIXTURE " -j " GPT2_FIXTURE " --device cpu -e tiny -b 2 -t 32 -x 2 -v 50257 --val-every 1 "
             "--val-batches 1 -s 0 -o %s/run", test_tmpdir());
    int rc = run_train(args, &out);
    CHECK(rc == 0 && out && strstr(out, "step     2/2"), "training on an llm.c GPT-2 shard failed (%d): %s", rc, out);
    CHECK(out && strstr(out, "is the training shard itself: the validation loss is measured on the training data"),
          "-j naming -i's file passed without a note: %s", out);
    free(out);
    snprintf(args, sizeof args, "-i " LLAMA3_FIXTURE " --device cpu -e tiny -b 2 -t 32 -x 1 -v 50257 -o %s/run2",
             test_tmpdir());
    rc = run_train(args, &out);
    CHECK(rc == 1 && out && strstr(out, "pass -v 128256"), "a Llama 3 shard under -v 50257: (%d) %s", rc, out);
    free(out);
}
