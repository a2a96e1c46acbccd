/* Token shards (round trip at both widths, every header defect, tokens >= vocabulary) and the
 * loader (coverage, rank slices, seeded shuffling, resumable position). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/err.h"
#include "common/hash.h"
#include "data/loader.h"
#include "data/shard.h"
#include "tests/test.h"
#include "tests/test_util.h"

static void path_in_tmp(char *buf, size_t n, const char *name) {
    snprintf(buf, n, "%s/%s", test_tmpdir(), name);
}

static void round_trip(uint32_t vocab, uint32_t expect_width) {
    char path[700], err[ERR_LEN];
    path_in_tmp(path, sizeof path, "rt.bin");
    uint32_t toks[1000];
    Rng rng;
    rng_seed(&rng, vocab);
    for (int i = 0; i < 1000; i++) toks[i] = (uint32_t)rng_below(&rng, vocab);
    toks[7] = vocab - 1;
    REQUIRE(shard_write(path, toks, 1000, vocab, 0, err) == 0, "%s", err);
    uint32_t *back;
    uint64_t n;
    ShardHeader h;
    REQUIRE(shard_read(path, vocab, &back, &n, &h, err) == 0, "%s", err);
    CHECK(n == 1000 && h.vocab_size == vocab && h.bytes_per_token == expect_width, "header n=%llu width=%u",
          (unsigned long long)n, h.bytes_per_token);
    CHECK(memcmp(back, toks, sizeof toks) == 0, "tokens differ after the round trip");
    free(back);
}

TEST(shard_round_trip_uint16) {
    round_trip(50257, 2);
}

TEST(shard_round_trip_uint32_for_vocab_above_65536) {
    round_trip(262144, 4);
}

/* Writes a valid shard, applies a byte patch or truncation, and expects an error containing msg. */
static void expect_defect(const char *what, long patch_at, const void *patch, size_t patch_len, long truncate_to,
                          uint32_t model_vocab, const char *msg) {
    char path[700], err[ERR_LEN] = "";
    path_in_tmp(path, sizeof path, "bad.bin");
    uint32_t toks[100];
    for (int i = 0; i < 100; i++) toks[i] = (uint32_t)(i * 7 % 300);
    REQUIRE(shard_write(path, toks, 100, 300, 0, err) == 0, "%s", err);
    if (patch) {
        FILE *f = fopen(path, "r+b");
        fseek(f, patch_at, SEEK_SET);
        fwrite(patch, 1, patch_len, f);
        fclose(f);
    }
    if (truncate_to >= 0) REQUIRE(truncate(path, truncate_to) == 0, "truncate");
    expect_shard_refused(path, model_vocab, what, msg);
}

TEST(shard_defects_give_clear_errors) {
    uint32_t w3 = 3;
    uint64_t huge = 1000;
    expect_defect("bad magic", 0, "NOTATOKS", 8, -1, 300, "not a token shard");
    uint32_t v4 = 4;
    expect_defect("future version", 8, &v4, 4, -1, 300, "format version 4, this build reads 1 to 3");
    expect_defect("odd width", 12, &w3, 4, -1, 300, "bytes per token");
    expect_defect("count beyond the file", 24, &huge, 8, -1, 300, "truncated or corrupt");
    expect_defect("truncated data", 0, NULL, 0, 64 + 150, 300, "truncated or corrupt");
    expect_defect("truncated header", 0, NULL, 0, 10, 300, "shorter than its 64-byte header");
    /* the fix names the shard's own vocabulary (300), not the first token that did not fit */
    expect_defect("token above the model's vocabulary", 0, NULL, 0, -1, 200, "is >= vocabulary 200 (re-tokenize, or pass -v 300)");
    uint32_t zero = 0;
    uint64_t absurd = ((uint64_t)1 << 63) + 5000;
    expect_defect("vocabulary 0 in the header", 16, &zero, 4, -1, 300, "vocabulary of 0 tokens");
    expect_defect("count no file holds", 24, &absurd, 8, -1, 300, "promises 9223372036854780808 tokens, more than");
    char err[ERR_LEN];
    uint32_t *t;
    uint64_t n;
    ShardHeader h;
    CHECK(shard_read("/nonexistent/x.bin", 10, &t, &n, &h, err) == -1 && strstr(err, "cannot open"),
          "missing file: %s", err);
    CHECK(shard_read(test_tmpdir(), 10, &t, &n, &h, err) == -1 && strstr(err, "is a directory, not a token shard"),
          "a directory: %s", err);
}

TEST(a_token_beyond_the_shards_own_vocabulary_is_refused_even_when_the_model_is_larger) {
    /* tokens 0..299 of a 300-token shard, then 400 at index 17: a model of 1000 words would take it,
     * but the shard contradicts its own header */
    uint16_t beyond = 400;
    expect_defect("token beyond the header's vocabulary", 64 + 2 * 17, &beyond, 2, -1, 1000,
                  "token 400 at position 17 (byte 98) in shard ");
    expect_defect("token beyond the header's vocabulary", 64 + 2 * 17, &beyond, 2, -1, 1000,
                  "bad.bin is beyond the shard's own vocabulary of 300 (the shard is corrupt: re-create it)");
}

TEST(a_shard_with_nonzero_reserved_header_bytes_is_refused) {
    /* reserved bytes are 0 in every shard this format's version writes: anything else is a newer
     * format or a corrupt header, and reading on would misread it */
    uint8_t one = 1;
    expect_defect("reserved word after the vocabulary", 20, &one, 1, -1, 300,
                  "reserved header byte 20 is 0x01, not 0 (a newer format or a corrupt header; re-create it)");
    expect_defect("reserved bytes after the count", 63, &one, 1, -1, 300, "reserved header byte 63 is 0x01");
    expect_defect("reserved bytes after the fingerprint", 40, &one, 1, -1, 300, "reserved header byte 40 is 0x01");
}

/* Version 2 records the tokenizer's fingerprint at byte 32; version 1 shards (older fusedgpt, the
 * Python fixture writer) still read, as made by no known tokenizer, and there those bytes are
 * reserved. */
TEST(a_shard_records_its_tokenizer_and_a_version_1_shard_still_reads) {
    char path[700], err[ERR_LEN];
    path_in_tmp(path, sizeof path, "fp.bin");
    uint32_t toks[50];
    for (int i = 0; i < 50; i++) toks[i] = (uint32_t)(i * 11 % 300);
    const uint64_t fp = 0x0123456789abcdefull;
    REQUIRE(shard_write(path, toks, 50, 300, fp, err) == 0, "%s", err);
    ShardHeader h;
    CHECK(shard_read_header(path, &h, err) == 0 && h.version == 2 && h.tokenizer == fp, "version %u fingerprint "
          "%016llx: %s", h.version, (unsigned long long)h.tokenizer, err);
    CHECK(shard_check_tokenizer(path, h.tokenizer, "same.json", fp, "FIX", err) == 0, "its own tokenizer refused: %s", err);
    CHECK(shard_check_tokenizer(path, h.tokenizer, "other.json", fp + 1, "FIX", err) == -1 &&
              strstr(err, "fp.bin was made by another tokenizer than other.json (its ids stand for other text): FIX"),
          "another tokenizer: %s", err);
    CHECK(shard_check_tokenizer(path, 0, "any.json", fp, "FIX", err) == 0 &&
              shard_check_tokenizer(path, fp, "", 0, "FIX", err) == 0,
          "an unrecorded fingerprint refused: %s", err);
    /* the same shard as version 1 wrote it: version 1, bytes 32..39 zero */
    FILE *f = fopen(path, "r+b");
    const uint32_t v1 = 1;
    const uint64_t zero = 0;
    REQUIRE(f && fseek(f, 8, SEEK_SET) == 0 && fwrite(&v1, 4, 1, f) == 1 && fseek(f, 32, SEEK_SET) == 0 &&
                fwrite(&zero, 8, 1, f) == 1 && fclose(f) == 0,
            "patching %s", path);
    uint32_t *back;
    uint64_t n;
    REQUIRE(shard_read(path, 300, &back, &n, &h, err) == 0, "%s", err);
    CHECK(h.version == 1 && h.tokenizer == 0 && n == 50 && memcmp(back, toks, sizeof toks) == 0,
          "version 1: version %u fingerprint %016llx, %llu tokens", h.version, (unsigned long long)h.tokenizer,
          (unsigned long long)n);
    free(back);
    /* in version 1, byte 32 is reserved */
    const uint8_t one = 1;
    f = fopen(path, "r+b");
    REQUIRE(f && fseek(f, 32, SEEK_SET) == 0 && fwrite(&one, 1, 1, f) == 1 && fclose(f) == 0, "patching %s", path);
    expect_shard_refused(path, 300, "version 1 with byte 32 set", "reserved header byte 32 is 0x01");
}

/* A masked shard (version 3, SHARD_LOSS_MASK): its marks come back from the reader, the loader makes
 * them -1 targets and plain inputs, and what it cannot hold is refused: the mark in a shard without
 * the flag (there it is a token beyond the vocabulary), the flag with 2-byte tokens, an unknown flag,
 * and a marked token whose id is beyond the vocabulary. */
TEST(a_masked_shard_gives_no_target_where_it_marks_one_and_refuses_what_it_cannot_hold) {
    enum { T = 8, NT = 4 * T + 1 };
    char path[700], err[ERR_LEN];
    path_in_tmp(path, sizeof path, "masked.bin");
    uint32_t toks[NT];
    uint64_t marked = 0;
    for (int i = 0; i < NT; i++) {
        toks[i] = (uint32_t)(i * 7 % 300) | (i % 3 == 0 ? SHARD_NO_LOSS : 0);
        marked += i % 3 == 0;
    }
    REQUIRE(shard_write_flagged(path, toks, NT, 300, 0, SHARD_LOSS_MASK, err) == 0, "%s", err);
    ShardHeader h;
    uint32_t *back;
    uint64_t n;
    REQUIRE(shard_read(path, 300, &back, &n, &h, err) == 0, "%s", err);
    CHECK(h.version == 3 && h.flags == SHARD_LOSS_MASK && h.bytes_per_token == 4 && n == NT &&
              memcmp(back, toks, sizeof toks) == 0,
          "version %u flags %u width %u: the marks do not come back", h.version, h.flags, h.bytes_per_token);
    free(back);
    Loader l;
    REQUIRE(loader_open(&l, path, 300, 1, T, 0, 1, 1, 0, 42, PACK_WRAPPED, err) == 0, "%s", err);
    CHECK(l.masked && l.no_loss_tokens == marked, "masked %d, %llu marked tokens of %llu", l.masked,
          (unsigned long long)l.no_loss_tokens, (unsigned long long)marked);
    for (int w = 0; w < 4; w++) {
        int in[T], tg[T];
        loader_next_batch(&l, in, tg, NULL);
        for (int t = 0; t < T; t++) {
            const int i = w * T + t;
            CHECK(in[t] == i * 7 % 300, "window %d position %d: input %d, not the id %d", w, t, in[t], i * 7 % 300);
            const int want = (i + 1) % 3 == 0 ? -1 : (i + 1) * 7 % 300;
            CHECK(tg[t] == want, "window %d position %d: target %d, not %d", w, t, tg[t], want);
        }
    }
    loader_close(&l);
    /* the flag off: the marked tokens are beyond any vocabulary */
    const uint32_t no_flags = 0, v2 = 2, flag4 = 4;
    FILE *f = fopen(path, "r+b");
    REQUIRE(f && fseek(f, 20, SEEK_SET) == 0 && fwrite(&no_flags, 4, 1, f) == 1 && fclose(f) == 0, "patch");
    expect_shard_refused(path, 300, "a mark without the flag", "token 2147483648 at position 0");
    f = fopen(path, "r+b");
    REQUIRE(f && fseek(f, 8, SEEK_SET) == 0 && fwrite(&v2, 4, 1, f) == 1 && fseek(f, 20, SEEK_SET) == 0 &&
                fwrite(&flag4, 4, 1, f) == 1 && fclose(f) == 0,
            "patch");
    expect_shard_refused(path, 300, "flags in version 2", "reserved header byte 20 is 0x04");
    const uint32_t v3 = 3;
    f = fopen(path, "r+b");
    REQUIRE(f && fseek(f, 8, SEEK_SET) == 0 && fwrite(&v3, 4, 1, f) == 1 && fclose(f) == 0, "patch");
    expect_shard_refused(path, 300, "an unknown flag", "has flags 0x4, of which this build knows 0x3");
    /* 2-byte tokens cannot hold the mark */
    uint16_t small[3] = {1, 2, 3};
    unsigned char hdr[64] = "FGPTTOK1";
    const uint32_t fields[4] = {3, 2, 300, SHARD_LOSS_MASK};
    const uint64_t count = 3;
    memcpy(hdr + 8, fields, sizeof fields);
    memcpy(hdr + 24, &count, 8);
    f = fopen(path, "wb");
    REQUIRE(f && fwrite(hdr, 1, 64, f) == 64 && fwrite(small, 2, 3, f) == 3 && fclose(f) == 0, "write");
    expect_shard_refused(path, 300, "a mark in 2-byte tokens", "marks tokens (flags 0x1) in 2-byte tokens");
    /* a vocabulary past 2^30 would have ids reach the marks' bits: not written, and refused when read */
    CHECK(shard_write_flagged(path, toks, NT, FGPT_MAX_VOCAB + 1, 0, SHARD_DOCUMENTS, err) != 0 &&
              strstr(err, "leaves no room for the marks"),
          "a flagged shard of 2^30 + 1 tokens was written: %s", err);
    REQUIRE(shard_write_flagged(path, toks, NT, 300, 0, SHARD_LOSS_MASK, err) == 0, "%s", err);
    const uint32_t huge = FGPT_MAX_VOCAB + 1;
    f = fopen(path, "r+b");
    REQUIRE(f && fseek(f, 16, SEEK_SET) == 0 && fwrite(&huge, 4, 1, f) == 1 && fclose(f) == 0, "patch");
    expect_shard_refused(path, 300, "a mark with a vocabulary past 2^30", "whose ids would reach the marks' bits");
    /* the id under the mark is checked */
    toks[5] = 301 | SHARD_NO_LOSS;
    REQUIRE(shard_write_flagged(path, toks, NT, 302, 0, SHARD_LOSS_MASK, err) == 0, "%s", err);
    expect_shard_refused(path, 301, "a marked id beyond the model's vocabulary", "token 301 at position 5");
}

static int open_loader_accum(Loader *l, const char *path, int B, int T, int rank, int world, int accum,
                             int shuffle) {
    char err[ERR_LEN];
    int rc = loader_open(l, path, 1000, B, T, rank, world, accum, shuffle, 42, PACK_WRAPPED, err);
    if (rc) fprintf(stderr, "%s\n", err);
    return rc;
}

static int open_loader(Loader *l, const char *path, int B, int T, int rank, int world, int shuffle) {
    return open_loader_accum(l, path, B, T, rank, world, 1, shuffle);
}

TEST(loader_covers_each_window_once_per_epoch_and_ranks_are_disjoint) {
    char path[700], err[ERR_LEN];
    path_in_tmp(path, sizeof path, "seq.bin");
    /* tokens 0..n-1 (mod 1000), so a window's first input names the window */
    enum { NT = 8 * 10 + 1, T = 8 };
    uint32_t toks[NT];
    for (int i = 0; i < NT; i++) toks[i] = (uint32_t)i;
    REQUIRE(shard_write(path, toks, NT, 1000, 0, err) == 0, "%s", err);
    int seen[10] = {0};
    for (int rank = 0; rank < 2; rank++) {
        Loader l;
        REQUIRE(open_loader(&l, path, 1, T, rank, 2, 1) == 0, "open");
        CHECK(l.num_batches == 5, "rank %d has %llu batches", rank, (unsigned long long)l.num_batches);
        int in[T], tg[T];
        for (int k = 0; k < 5; k++) {
            loader_next_batch(&l, in, tg, NULL);
            seen[in[0] / T]++;
            for (int t = 0; t < T; t++) CHECK(tg[t] == in[t] + 1, "targets are inputs shifted by one");
        }
        loader_close(&l);
    }
    for (int w = 0; w < 10; w++) CHECK(seen[w] == 1, "window %d seen %d times", w, seen[w]);
}

TEST(loader_shuffle_is_seeded_and_state_resumes_exactly) {
    char path[700];
    path_in_tmp(path, sizeof path, "pat.bin");
    REQUIRE(write_pattern_shard(path, 5000, 1000, 1) == 0, "write");
    Loader a, b;
    REQUIRE(open_loader(&a, path, 3, 16, 0, 1, 1) == 0 && open_loader(&b, path, 3, 16, 0, 1, 1) == 0, "open");
    int ia[48], ta[48], ib[48], tb[48];
    for (int k = 0; k < 250; k++) { /* crosses several epochs (104 windows each) */
        loader_next_batch(&a, ia, ta, NULL);
        loader_next_batch(&b, ib, tb, NULL);
    }
    CHECK(a.epoch >= 2, "test should cross epochs (epoch %llu)", (unsigned long long)a.epoch);
    /* 312 windows -> 104 batches of 3 per epoch; 250 batches end at epoch 2, position 42 */
    CHECK(a.epoch == 2 && a.position == 42, "epoch %llu position %llu", (unsigned long long)a.epoch,
          (unsigned long long)a.position);
    LoaderState s = loader_get_state(&a);
    Loader c;
    char err[ERR_LEN];
    REQUIRE(open_loader(&c, path, 3, 16, 0, 1, 1) == 0, "open");
    REQUIRE(loader_set_state(&c, s, err) == 0, "%s", err);
    int ic[48], tc[48], differs_from_unshuffled = 0;
    for (int k = 0; k < 50; k++) {
        loader_next_batch(&a, ia, ta, NULL);
        loader_next_batch(&c, ic, tc, NULL);
        if (memcmp(ia, ic, sizeof ia) || memcmp(ta, tc, sizeof ta)) {
            CHECK(0, "resumed loader diverges at batch %d", k);
            break;
        }
    }
    Loader u;
    REQUIRE(open_loader(&u, path, 3, 16, 0, 1, 0) == 0, "open");
    loader_next_batch(&u, ic, tc, NULL);
    loader_reset(&b);
    loader_next_batch(&b, ib, tb, NULL);
    differs_from_unshuffled = memcmp(ib, ic, sizeof ib) != 0;
    CHECK(differs_from_unshuffled, "shuffled order equals the file order");
    /* another seed, another order */
    Loader other;
    REQUIRE(loader_open(&other, path, 1000, 3, 16, 0, 1, 1, 1, 43, PACK_WRAPPED, err) == 0, "%s", err);
    loader_next_batch(&other, ic, tc, NULL);
    CHECK(memcmp(ib, ic, sizeof ib) != 0, "seeds 42 and 43 give the same first batch");
    loader_close(&other);
    loader_close(&u);
    loader_close(&c);
    loader_close(&b);
    loader_close(&a);
}

TEST(loader_two_ranks_see_the_batches_one_rank_sees_with_accumulation_two) {
    char path[700];
    path_in_tmp(path, sizeof path, "deal.bin");
    REQUIRE(write_pattern_shard(path, 3000, 1000, 4) == 0, "write");
    Loader one, r0, r1;
    REQUIRE(open_loader_accum(&one, path, 2, 16, 0, 1, 2, 1) == 0 && open_loader(&r0, path, 2, 16, 0, 2, 1) == 0 &&
                open_loader(&r1, path, 2, 16, 1, 2, 1) == 0,
            "open");
    int a[32], at[32], b[32], bt[32];
    for (int step = 0; step < 200; step++) { /* several epochs */
        loader_next_batch(&one, a, at, NULL);
        loader_next_batch(&r0, b, bt, NULL);
        CHECK(!memcmp(a, b, sizeof a) && !memcmp(at, bt, sizeof at), "step %d: rank 0 differs from micro-batch 0",
              step);
        loader_next_batch(&one, a, at, NULL);
        loader_next_batch(&r1, b, bt, NULL);
        CHECK(!memcmp(a, b, sizeof a) && !memcmp(at, bt, sizeof at), "step %d: rank 1 differs from micro-batch 1",
              step);
        if (memcmp(a, b, sizeof a)) break;
    }
    loader_close(&r1);
    loader_close(&r0);
    loader_close(&one);
}

TEST(loader_state_moves_between_rank_counts_at_step_boundaries) {
    /* one global batch of 4 micro-batches: 1 rank x 4, 2 ranks x 2, 4 ranks x 1 */
    char path[700], err[ERR_LEN];
    path_in_tmp(path, sizeof path, "regroup.bin");
    REQUIRE(write_pattern_shard(path, 5000, 1000, 4) == 0, "write");
    const int worlds[3] = {1, 2, 4};
    int a[32], at[32], b[32], bt[32];
    /* 312 windows = 156 batches of 2 = 39 steps an epoch: switch at its last step (the rollover still
     * pending) and two steps into the next */
    const int switch_at[2] = {39, 41};
    for (int sw = 0; sw < 2; sw++)
    for (int from = 0; from < 3; from++)
        for (int to = 0; to < 3; to++) {
            const int fw = worlds[from], tw = worlds[to];
            Loader src[4], dst[4], ref;
            for (int r = 0; r < fw; r++) REQUIRE(open_loader_accum(&src[r], path, 2, 16, r, fw, 4 / fw, 1) == 0, "open");
            for (int r = 0; r < tw; r++) REQUIRE(open_loader_accum(&dst[r], path, 2, 16, r, tw, 4 / tw, 1) == 0, "open");
            REQUIRE(open_loader_accum(&ref, path, 2, 16, 0, 1, 4, 1) == 0, "open");
            for (int step = 0; step < switch_at[sw]; step++)
                for (int k = 0; k < 4; k++) {
                    loader_next_batch(&ref, a, at, NULL);
                    loader_next_batch(&src[k % fw], b, bt, NULL);
                }
            for (int r = 0; r < tw; r++) {
                LoaderState s = loader_get_state(&src[0]);
                REQUIRE(loader_state_for_world(&s, fw, tw, err) == 0, "%d -> %d ranks: %s", fw, tw, err);
                REQUIRE(loader_set_state(&dst[r], s, err) == 0, "%s", err);
            }
            /* the next 3 steps on tw ranks are the micro-batches one rank with accumulation 4 sees */
            for (int step = 0; step < 3; step++)
                for (int k = 0; k < 4; k++) {
                    loader_next_batch(&ref, a, at, NULL);
                    loader_next_batch(&dst[k % tw], b, bt, NULL);
                    CHECK(!memcmp(a, b, sizeof a) && !memcmp(at, bt, sizeof at),
                          "%d -> %d ranks after %d steps: step %d micro-batch %d differs", fw, tw, switch_at[sw], step,
                          k);
                }
            loader_close(&ref);
            for (int r = 0; r < tw; r++) loader_close(&dst[r]);
            for (int r = 0; r < fw; r++) loader_close(&src[r]);
        }
    /* a position that no step boundary of the other count reaches is refused with the -g to use */
    LoaderState odd = {0, 3};
    CHECK(loader_state_for_world(&odd, 1, 2, err) == -1 && strstr(err, "resume with -g 1"), "got: %s", err);
}

TEST(loader_rejects_a_shard_too_small_for_one_batch) {
    char path[700], err[ERR_LEN];
    path_in_tmp(path, sizeof path, "small.bin");
    REQUIRE(write_pattern_shard(path, 100, 1000, 1) == 0, "write");
    Loader l;
    CHECK(loader_open(&l, path, 1000, 4, 64, 0, 1, 1, 1, 1, PACK_WRAPPED, err) == LOADER_TOO_SHORT && strstr(err, "too few for a batch"), "%s",
          err);
}

/* The window order takes 4 bytes a window, so a corpus of 2^32 windows or more is refused, before the
 * pass over its tokens. The shard here holds 2^32 + 2 tokens of 2 bytes (8 GB), windows of T = 1 each:
 * a sparse file, which takes no disk. */
TEST(loader_refuses_more_windows_than_its_order_holds_before_reading_the_tokens) {
    char path[700], err[ERR_LEN];
    path_in_tmp(path, sizeof path, "huge.bin");
    REQUIRE(write_pattern_shard(path, 10, 1000, 1) == 0, "write");
    const uint64_t n = (1ull << 32) + 2;
    FILE *f = fopen(path, "r+b");
    REQUIRE(f && fseek(f, 24, SEEK_SET) == 0 && fwrite(&n, sizeof n, 1, f) == 1 && fclose(f) == 0, "patching %s", path);
    REQUIRE(truncate(path, (off_t)(SHARD_HEADER_BYTES + 2 * n)) == 0, "growing %s", path);
    struct stat sb;
    REQUIRE(stat(path, &sb) == 0 && (uint64_t)sb.st_blocks * 512 < (1u << 20), "%s is not sparse here", path);
    Loader l;
    CHECK(loader_open(&l, path, 1000, 1, 1, 0, 1, 1, 1, 1, PACK_WRAPPED, err) == -1 &&
              strstr(err, "holds 4294967297 windows of 2 tokens, more than one run orders (4294967295): raise -t"),
          "%s", err);
    remove(path);
}

TEST(the_hash_over_pieces_is_the_hash_of_their_concatenation_and_keeps_its_values) {
    unsigned char b[1000];
    for (int i = 0; i < 1000; i++) b[i] = (unsigned char)(i * 37 + 11);
    /* values of the one-call hash before it took pieces: checkpoints sealed with it must still load */
    const size_t ns[8] = {0, 1, 31, 32, 33, 100, 999, 1000};
    const uint64_t want[8] = {0x7b1d64eab02729bbull, 0xe3df558d3b8adce2ull, 0xb8ad8e4d8e3c65f4ull,
                              0xdd7c5a54a93b87d0ull, 0x26a7ed27714842cfull, 0x2940bebf1e396996ull,
                              0x7c4ef4e8473a2981ull, 0xea9cead9dac2e851ull};
    for (int k = 0; k < 8; k++)
        CHECK(fgpt_hash64(b, ns[k], ns[k] * 7 + 3) == want[k], "%zu bytes: %016llx", ns[k],
              (unsigned long long)fgpt_hash64(b, ns[k], ns[k] * 7 + 3));
    Rng rng;
    rng_seed(&rng, 5);
    for (int trial = 0; trial < 200; trial++) {
        const size_t n = (size_t)rng_below(&rng, 1001);
        FgptHashStream s;
        fgpt_hash_begin(&s, 99);
        for (size_t at = 0; at < n;) {
            size_t k = (size_t)rng_below(&rng, 70);
            if (k > n - at) k = n - at;
            fgpt_hash_add(&s, b + at, k);
            at += k;
        }
        CHECK(fgpt_hash_end(&s) == fgpt_hash64(b, n, 99), "%zu bytes in random pieces", n);
    }
}

/* Shard k of a set holds tokens 100 k + i (i = 0..n-1): a window's first input names its shard and place. */
static void write_numbered_shard(const char *name, int k, int n, uint32_t vocab, uint64_t tokenizer) {
    char path[700], err[ERR_LEN];
    path_in_tmp(path, sizeof path, name);
    uint32_t toks[100];
    for (int i = 0; i < n; i++) toks[i] = (uint32_t)(100 * k + i);
    REQUIRE(shard_write(path, toks, (uint64_t)n, vocab, tokenizer, err) == 0, "%s", err);
}

TEST(loader_over_a_pattern_of_shards_covers_each_shards_windows_once_and_never_spans_two) {
    char pattern[700], err[ERR_LEN];
    /* 8-token windows: part_a 3 windows (25 tokens), part_b 0 (5), part_c 5 (43: 2 left over);
     * written out of name order, read in it */
    write_numbered_shard("part_c.bin", 2, 43, 1000, 7);
    write_numbered_shard("part_a.bin", 0, 25, 1000, 7);
    write_numbered_shard("part_b.bin", 1, 5, 1000, 7);
    path_in_tmp(pattern, sizeof pattern, "part_*.bin");
    Loader l;
    REQUIRE(loader_open(&l, pattern, 1000, 1, 8, 0, 1, 1, 0, 42, PACK_WRAPPED, err) == 0, "%s", err);
    CHECK(l.num_shards == 3 && l.total_windows == 8 && l.num_tokens == 73 && l.shard_vocab == 1000 &&
              l.shard_tokenizer == 7,
          "%zu shards, %llu windows, %llu tokens", l.num_shards, (unsigned long long)l.total_windows,
          (unsigned long long)l.num_tokens);
    const int first_inputs[8] = {0, 8, 16, 200, 208, 216, 224, 232}; /* file order, unshuffled */
    int in[8], tg[8];
    for (int w = 0; w < 8; w++) {
        loader_next_batch(&l, in, tg, NULL);
        CHECK(in[0] == first_inputs[w], "window %d starts at %d, not %d", w, in[0], first_inputs[w]);
        for (int t = 0; t < 8; t++)
            CHECK(in[t] == in[0] + t && tg[t] == in[t] + 1, "window %d crosses a shard's end at %d", w, t);
    }
    /* the fingerprint is the one of all tokens in order, as 32-bit values, */
    uint32_t all[73];
    int at = 0;
    for (int i = 0; i < 25; i++) all[at++] = (uint32_t)i;
    for (int i = 0; i < 5; i++) all[at++] = (uint32_t)(100 + i);
    for (int i = 0; i < 43; i++) all[at++] = (uint32_t)(200 + i);
    /* then the shards' lengths: the same tokens cut into other shards make other windows */
    FgptHashStream h;
    fgpt_hash_begin(&h, 73);
    fgpt_hash_add(&h, all, sizeof all);
    const uint64_t lengths[3] = {25, 5, 43};
    fgpt_hash_add(&h, lengths, sizeof lengths);
    CHECK(loader_fingerprint(&l) == fgpt_hash_end(&h), "fingerprint of the set");
    loader_close(&l);
    /* shuffled, two ranks: every window once an epoch between them */
    int seen[8] = {0};
    for (int rank = 0; rank < 2; rank++) {
        REQUIRE(loader_open(&l, pattern, 1000, 1, 8, rank, 2, 1, 1, 42, PACK_WRAPPED, err) == 0, "%s", err);
        for (int k = 0; k < 4; k++) {
            loader_next_batch(&l, in, tg, NULL);
            for (int w = 0; w < 8; w++) seen[w] += in[0] == first_inputs[w];
        }
        loader_close(&l);
    }
    for (int w = 0; w < 8; w++) CHECK(seen[w] == 1, "window %d seen %d times in an epoch", w, seen[w]);
    /* one shard's fingerprint is what it was when the loader read the shard into memory */
    char one[700];
    path_in_tmp(one, sizeof one, "part_a.bin");
    REQUIRE(loader_open(&l, one, 1000, 1, 8, 0, 1, 1, 1, 42, PACK_WRAPPED, err) == 0, "%s", err);
    CHECK(loader_fingerprint(&l) == fgpt_hash64(all, 25 * sizeof(uint32_t), 25), "fingerprint of one shard");
    loader_close(&l);
}

/* loader_open of the shards pattern_name (in the test folder) fails with a message holding both needles. */
static void expect_pattern_refused(const char *pattern_name, uint32_t model_vocab, const char *needle,
                                   const char *also) {
    char pattern[700], err[ERR_LEN] = "";
    path_in_tmp(pattern, sizeof pattern, pattern_name);
    Loader l;
    CHECK(loader_open(&l, pattern, model_vocab, 1, 8, 0, 1, 1, 1, 1, PACK_WRAPPED, err) == -1 && strstr(err, needle) &&
              strstr(err, also),
          "%s: %s", pattern_name, err);
}

TEST(a_pattern_of_shards_that_matches_nothing_or_mixes_tokenizers_or_holds_a_bad_token_is_named) {
    char pattern[700], err[ERR_LEN];
    Loader l;
    expect_pattern_refused("none_*.bin", 1000, "no file matches the shard pattern", "none_*.bin");
    write_numbered_shard("mix_a.bin", 0, 40, 1000, 7);
    write_numbered_shard("mix_b.bin", 1, 40, 1000, 8);
    expect_pattern_refused("mix_*.bin", 1000, "mix_b.bin was made by another tokenizer than",
                           "mix_a.bin (the same vocabulary of 1000, other ids)");
    /* a first shard that records no tokenizer does not let two others differ */
    write_numbered_shard("mix_0.bin", 0, 40, 1000, 0);
    expect_pattern_refused("mix_*.bin", 1000, "mix_b.bin was made by another tokenizer than", "mix_a.bin (the same");
    write_numbered_shard("mix_b.bin", 1, 40, 2000, 7);
    expect_pattern_refused("mix_*.bin", 1000, "(a vocabulary of 2000 against 1000)", "mix_b.bin");
    /* a token beyond the model's vocabulary in the second shard: that shard and place are named */
    write_numbered_shard("mix_b.bin", 1, 40, 1000, 7);
    expect_pattern_refused("mix_*.bin", 120, "token 120 at position 20", "mix_b.bin");
    /* a file whose name holds a pattern's characters is read as itself */
    write_numbered_shard("odd[1].bin", 0, 40, 1000, 7);
    path_in_tmp(pattern, sizeof pattern, "odd[1].bin");
    REQUIRE(loader_open(&l, pattern, 1000, 1, 8, 0, 1, 1, 1, 1, PACK_WRAPPED, err) == 0, "%s", err);
    CHECK(l.num_shards == 1 && l.num_tokens == 40, "%zu shards", l.num_shards);
    loader_close(&l);
}

/* A shard cut short while the loader maps it (rewritten in place) ends the process with a line that
 * names it and exit status 1, where its pages would otherwise crash it with a bus error. */
TEST(a_shard_cut_short_under_the_loader_is_named_and_ends_the_process_cleanly) {
    char path[700], err[ERR_LEN], log[800];
    path_in_tmp(path, sizeof path, "cut.bin");
    path_in_tmp(log, sizeof log, "cut.log");
    REQUIRE(write_pattern_shard(path, 200000, 1000, 1) == 0, "write");
    fflush(NULL);
    const pid_t child = fork();
    REQUIRE(child >= 0, "fork");
    if (child == 0) {
        if (!freopen(log, "w", stderr)) _exit(3);
        loader_catch_cut_shards();
        Loader l;
        if (loader_open(&l, path, 1000, 4, 64, 0, 1, 1, 1, 1, PACK_WRAPPED, err) != 0) _exit(4);
        if (truncate(path, 64) != 0) _exit(5);
        int in[256], tg[256];
        for (int k = 0; k < 1000; k++) loader_next_batch(&l, in, tg, NULL);
        _exit(0); /* every page still readable: the test would not test anything */
    }
    int status = 0;
    REQUIRE(waitpid(child, &status, 0) == child, "waitpid");
    char *text = read_text(log);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 1, "child %s %d", WIFEXITED(status) ? "exited" : "was killed by",
          WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
    CHECK(text && strstr(text, "cut.bin was cut short while the run read it") && strstr(text, "resume with -y 1"), "%s",
          text ? text : "(no log)");
    free(text);
}

/* A shard written over in place while the loader maps it shows through: a token no longer below
 * its bound is named (the batch holds 0 there), for the trainer to stop. */
TEST(a_shard_written_over_under_the_loader_is_named_as_changed) {
    char path[700], err[ERR_LEN];
    path_in_tmp(path, sizeof path, "over.bin");
    REQUIRE(write_pattern_shard(path, 4000, 1000, 1) == 0, "write");
    Loader l;
    REQUIRE(loader_open(&l, path, 1000, 2, 16, 0, 1, 1, 0, 1, PACK_WRAPPED, err) == 0, "%s", err);
    int in[32], tg[32];
    loader_next_batch(&l, in, tg, NULL);
    CHECK(!l.changed[0], "an untouched shard called changed: %s", l.changed);
    FILE *f = fopen(path, "r+b");
    const uint16_t big = 65535;
    /* the second batch's windows (file order): tokens 32..64; position 40 */
    REQUIRE(f && fseek(f, 64 + 2 * 40, SEEK_SET) == 0 && fwrite(&big, 2, 1, f) == 1 && fclose(f) == 0, "patching");
    loader_next_batch(&l, in, tg, NULL);
    CHECK(strstr(l.changed, "over.bin changed while the run read it: token 65535 at position 40 is not below 1000") &&
              strstr(l.changed, "resume with -y 1"),
          "got: '%s'", l.changed);
    CHECK(in[8] == 0 && tg[7] == 0, "the changed token went into the batch: %d %d", in[8], tg[7]);
    loader_close(&l);
}
