/* tests/test_prepare.c - the default corpus cleaners (on small hand-made samples of each source,
 * so nothing is downloaded) and `./train prepare` on generated text files: shards that decode back
 * to the input, the validation tail, and every bad argument's error. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "data/corpus.h"
#include "common/err.h"
#include "common/json.h"
#include "common/paths.h"
#include "data/prepare.h"
#include "data/shard.h"
#include "tests/test.h"
#include "tests/test_util.h"
#include "tokenizer/tokenizer.h"

TEST(corpus_gcide_entry_loses_pronunciation_tags_and_braces) {
    const char *entry =
        "Affect \\Af*fect\"\\, v. t. [imp. & p. p. {Affected}; p. pr. & vb.\n"
        "   n. {Affecting}.] [L. affectus, p. p. of afficere. See {Fact}.]\n"
        "   1. To act upon; to produce an effect or change upon.\n"
        "      [1913 Webster]\n"
        "\n"
        "            As might affect the earth with cold heat. --Milton.\n"
        "      [1913 Webster]\n"
        "\n"
        "   2. AS. [=a]f?ran. [Obs.] [PJC]\n";
    TextBuf out = {0};
    corpus_clean_gcide_entry(entry, strlen(entry), &out);
    const char *want =
        "Affect, v. t. [imp. & p. p. Affected; p. pr. & vb. n. Affecting.] [L. affectus, p. p. of afficere. See Fact.] "
        "1. To act upon; to produce an effect or change upon.\n"
        "As might affect the earth with cold heat. --Milton.\n"
        "2. AS. af?ran. [Obs.] \n";
    CHECK(out.data && strcmp(out.data, want) == 0, "cleaned entry is:\n%s\nexpected:\n%s", out.data ? out.data : "",
          want);
    textbuf_free(&out);
}

TEST(corpus_bible_strips_references_one_chapter_per_document) {
    const char *raw = "Ge1:1 In the beginning God created the heaven and the earth.\n"
                      "Ge1:2 And the earth was without form.\n"
                      "Ge2:1 Thus the heavens and the earth were finished.\n";
    TextBuf out = {0};
    corpus_clean_bible(raw, strlen(raw), &out);
    const char *want = "In the beginning God created the heaven and the earth.\n"
                       "And the earth was without form.\n"
                       "<|endoftext|>Thus the heavens and the earth were finished.\n";
    CHECK(out.data && strcmp(out.data, want) == 0, "cleaned bible is:\n%s", out.data ? out.data : "");
    textbuf_free(&out);
}

TEST(corpus_fortunes_drop_percent_lines) {
    const char *raw = "A fortune.\n\t\t-- Someone\n%\nSecond\nfortune.\n\n%\n%\nLast one.\n";
    TextBuf out = {0};
    corpus_clean_fortunes(raw, strlen(raw), &out);
    const char *want = "A fortune.\n\t\t-- Someone\n<|endoftext|>Second\nfortune.\n<|endoftext|>Last one.\n";
    CHECK(out.data && strcmp(out.data, want) == 0, "cleaned fortunes are:\n%s", out.data ? out.data : "");
    textbuf_free(&out);
}

TEST(corpus_synthetic_is_deterministic_and_varied) {
    TextBuf a = {0}, b = {0}, c = {0};
    corpus_synthetic(1, 200000, &a);
    corpus_synthetic(1, 200000, &b);
    corpus_synthetic(2, 200000, &c);
    REQUIRE(a.len >= 200000 && b.len == a.len, "sizes %zu and %zu", a.len, b.len);
    CHECK(memcmp(a.data, b.data, a.len) == 0, "same seed, different text");
    CHECK(c.len != a.len || memcmp(a.data, c.data, a.len) != 0, "different seeds, same text");
    CHECK(strstr(a.data, "<|endoftext|>") != NULL, "documents are separated");
    /* Enough distinct pseudo-words that a tokenizer finds over 2000 merges in 200 kB (the full
     * 36 MiB synthetic corpus reaches 262144 tokens: see dev/RESULTS.md). */
    char err[ERR_LEN];
    TokenizerTrainOptions opt = {8000, 1, 0};
    Tokenizer *t = tokenizer_train(a.data, a.len, &opt, err);
    REQUIRE(t, "%s", err);
    CHECK(tokenizer_vocab_size(t) > 2000, "only %u tokens reachable", tokenizer_vocab_size(t));
    tokenizer_free(t);
    textbuf_free(&a);
    textbuf_free(&b);
    textbuf_free(&c);
}

static void write_text_file(const char *path, const char *s, size_t n) {
    FILE *f = fopen(path, "wb");
    if (f) {
        fwrite(s, 1, n, f);
        fclose(f);
    }
}

/* Runs prepare_main with its stdout and stderr sent to a log in the test folder, so the test
 * output stays one line per test; the descriptors are restored after. */
static int run_prepare(int argc, const char **argv) {
    char log[1100];
    snprintf(log, sizeof log, "%s/prepare.log", test_tmpdir());
    fflush(stdout);
    fflush(stderr);
    int saved_out = dup(1), saved_err = dup(2);
    int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
        dup2(fd, 1);
        dup2(fd, 2);
        close(fd);
    }
    int rc = prepare_main(argc, (char **)argv);
    fflush(stdout);
    fflush(stderr);
    dup2(saved_out, 1);
    dup2(saved_err, 2);
    close(saved_out);
    close(saved_err);
    return rc;
}

TEST(prepare_text_files_into_shards_that_decode_back) {
    char f1[1100], f2[1100], out[1100];
    snprintf(f1, sizeof f1, "%s/a.txt", test_tmpdir());
    snprintf(f2, sizeof f2, "%s/b.txt", test_tmpdir());
    snprintf(out, sizeof out, "%s/prepared", test_tmpdir());
    TextBuf a = {0}, b = {0};
    corpus_synthetic(5, 150000, &a);
    corpus_synthetic(6, 50000, &b);
    write_text_file(f1, a.data, a.len);
    write_text_file(f2, b.data, b.len);
    const char *argv[] = {"prepare", "-v", "3000", "-o", out, "--threads", "2", f1, f2};
    REQUIRE(run_prepare(9, argv) == 0, "prepare failed");

    char tok_path[1200], train_path[1200], val_path[1200], err[ERR_LEN];
    snprintf(tok_path, sizeof tok_path, "%s/tokenizer.bin", out);
    snprintf(train_path, sizeof train_path, "%s/train.bin", out);
    snprintf(val_path, sizeof val_path, "%s/val.bin", out);
    Tokenizer *t = tokenizer_load(tok_path, err);
    REQUIRE(t, "%s", err);
    uint32_t V = tokenizer_vocab_size(t);
    uint32_t *tr = NULL, *va = NULL;
    uint64_t ntr = 0, nva = 0;
    ShardHeader h1, h2;
    REQUIRE(shard_read(train_path, V, &tr, &ntr, &h1, err) == 0, "%s", err);
    REQUIRE(shard_read(val_path, V, &va, &nva, &h2, err) == 0, "%s", err);
    CHECK(h1.vocab_size == V && h2.vocab_size == V, "shards record the tokenizer's %u tokens (%u, %u)", V,
          h1.vocab_size, h2.vocab_size);
    CHECK(h1.tokenizer == tokenizer_fingerprint(t) && h2.tokenizer == h1.tokenizer,
          "shards record the tokenizer's fingerprint %016llx (%016llx, %016llx)",
          (unsigned long long)tokenizer_fingerprint(t), (unsigned long long)h1.tokenizer,
          (unsigned long long)h2.tokenizer);
    CHECK(nva > 0 && nva * 50 < ntr, "validation is a small tail: %llu of %llu tokens", (unsigned long long)nva,
          (unsigned long long)ntr);
    /* train + val decode to the files joined by one separator. */
    size_t total = a.len + 13 + b.len;
    char *back = malloc(total + 64);
    size_t n1 = tokenizer_decode(t, tr, ntr, back, total + 64);
    size_t n2 = n1 <= total ? tokenizer_decode(t, va, nva, back + n1, total + 64 - n1) : 0;
    CHECK(n1 + n2 == total && memcmp(back, a.data, a.len) == 0 && memcmp(back + a.len, "<|endoftext|>", 13) == 0 &&
              memcmp(back + a.len + 13, b.data, b.len) == 0,
          "decoded shards (%zu bytes) differ from the input (%zu bytes)", n1 + n2, total);
    CHECK(n1 >= 13 && memcmp(back + n1 - 13, "<|endoftext|>", 13) == 0, "validation starts at a document boundary");

    /* --tokenizer reuses the file instead of training. */
    char out2[1200];
    snprintf(out2, sizeof out2, "%s/again", test_tmpdir());
    const char *argv2[] = {"prepare", "--tokenizer", tok_path, "-o", out2, f2};
    CHECK(run_prepare(6, argv2) == 0, "prepare with --tokenizer failed");
    char tok2[1300], train2[1300], val2[1300];
    snprintf(tok2, sizeof tok2, "%s/tokenizer.bin", out2);
    snprintf(train2, sizeof train2, "%s/train.bin", out2);
    snprintf(val2, sizeof val2, "%s/val.bin", out2);
    size_t len1 = 0, len2 = 0;
    char *bytes1 = read_file(tok_path, &len1), *bytes2 = read_file(tok2, &len2);
    CHECK(bytes1 && bytes2 && len1 == len2 && memcmp(bytes1, bytes2, len1) == 0,
          "the tokenizer beside the new shards is not the one given (%zu vs %zu bytes)", len2, len1);
    free(bytes1);
    free(bytes2);
    /* and the given tokenizer, not another, encoded them: they decode back to the text */
    uint32_t *tr2 = NULL, *va2 = NULL;
    uint64_t ntr2 = 0, nva2 = 0;
    REQUIRE(shard_read(train2, V, &tr2, &ntr2, &h1, err) == 0 && shard_read(val2, V, &va2, &nva2, &h2, err) == 0, "%s",
            err);
    CHECK(h1.tokenizer == tokenizer_fingerprint(t) && h2.tokenizer == h1.tokenizer,
          "shards of --tokenizer record its fingerprint");
    n1 = tokenizer_decode(t, tr2, ntr2, back, total + 64);
    n2 = n1 <= total ? tokenizer_decode(t, va2, nva2, back + n1, total + 64 - n1) : 0;
    CHECK(n1 + n2 == b.len && memcmp(back, b.data, b.len) == 0, "shards of --tokenizer decode to %zu bytes, not the "
          "%zu of the text", n1 + n2, b.len);
    /* the long flags' values written inline make the same shard */
    char out3[1200], tok_flag[1300], out_flag[1300], train3[1300];
    snprintf(out3, sizeof out3, "%s/inline", test_tmpdir());
    snprintf(tok_flag, sizeof tok_flag, "--tokenizer=%s", tok_path);
    snprintf(out_flag, sizeof out_flag, "--out=%s", out3);
    snprintf(train3, sizeof train3, "%s/train.bin", out3);
    const char *argv3[] = {"prepare", tok_flag, out_flag, "--threads=2", f2};
    CHECK(run_prepare(5, argv3) == 0, "prepare with inline values failed");
    size_t len_spaced = 0, len_inline = 0;
    char *spaced = read_file(train2, &len_spaced), *inlined = read_file(train3, &len_inline);
    CHECK(spaced && inlined && len_spaced == len_inline && memcmp(spaced, inlined, len_spaced) == 0,
          "the shard of inline values differs (%zu vs %zu bytes)", len_inline, len_spaced);
    free(spaced);
    free(inlined);
    free(tr2);
    free(va2);
    free(back);
    free(tr);
    free(va);
    tokenizer_free(t);
    textbuf_free(&a);
    textbuf_free(&b);
}

TEST(prepare_rejects_bad_arguments) {
    char missing[1100], out[1100];
    snprintf(missing, sizeof missing, "%s/missing.txt", test_tmpdir());
    snprintf(out, sizeof out, "%s/o", test_tmpdir());
    const char *no_files[] = {"prepare", "-o", out};
    CHECK(run_prepare(3, no_files) == 2, "no files is a command-line error");
    const char *bad_v[] = {"prepare", "-v", "100", missing};
    CHECK(run_prepare(4, bad_v) == 2, "-v below 257 is a command-line error");
    const char *word_v[] = {"prepare", "-v", "lots", missing};
    CHECK(run_prepare(4, word_v) == 2, "-v must be a number");
    char log[1200];
    snprintf(log, sizeof log, "%s/prepare.log", test_tmpdir());
    unlink(log);
    const char *huge_v[] = {"prepare", "-v", "99999999999", missing};
    CHECK(run_prepare(4, huge_v) == 2, "-v beyond 32 bits is a command-line error");
    char *said = read_text(log);
    CHECK(said && strstr(said, "error: prepare -v: is too large: at most 4294967295"), "prepare said: %s",
          said ? said : "");
    free(said);
    const char *bad_frac[] = {"prepare", "--val-fraction", "0.9", missing};
    CHECK(run_prepare(4, bad_frac) == 2, "--val-fraction above 0.5 is a command-line error");
    const char *corpus_kind[] = {"prepare", "--default-corpus", "--corpus", "huge"};
    CHECK(run_prepare(4, corpus_kind) == 2, "--corpus takes standard or extended");
    const char *corpus_files[] = {"prepare", "--corpus", "extended", missing};
    CHECK(run_prepare(4, corpus_files) == 2, "--corpus without --default-corpus is a command-line error");
    /* the default corpus has its own folder (the cache) and split: -o, --val-fraction and --threads
     * would be passed over, and --cache-dir over FILE... */
    const char *corpus_out[] = {"prepare", "--default-corpus", "-o", out};
    CHECK(run_prepare(4, corpus_out) == 2, "-o with --default-corpus is a command-line error");
    const char *corpus_val[] = {"prepare", "--default-corpus", "--val-fraction", "0.3"};
    CHECK(run_prepare(4, corpus_val) == 2, "--val-fraction with --default-corpus is a command-line error");
    const char *corpus_threads[] = {"prepare", "--threads", "1", "--default-corpus"};
    CHECK(run_prepare(4, corpus_threads) == 2, "--threads with --default-corpus is a command-line error");
    const char *files_cache[] = {"prepare", "--cache-dir", out, missing};
    CHECK(run_prepare(4, files_cache) == 2, "--cache-dir with FILE... is a command-line error");
    const char *unknown[] = {"prepare", "--frobnicate", missing};
    CHECK(run_prepare(3, unknown) == 2, "an unknown flag is a command-line error");
    const char *inline_frac[] = {"prepare", "--val-fraction=0.9", missing};
    CHECK(run_prepare(3, inline_frac) == 2, "--val-fraction=0.9 is a command-line error");
    const char *inline_unknown[] = {"prepare", "--frobnicate=1", missing};
    CHECK(run_prepare(3, inline_unknown) == 2, "an unknown flag with a value is a command-line error");
    unlink(log);
    const char *inline_switch[] = {"prepare", "--default-corpus=1"};
    CHECK(run_prepare(2, inline_switch) == 2, "--default-corpus takes no value");
    said = read_text(log);
    CHECK(said && strstr(said, "error: prepare --default-corpus: takes no value"), "prepare said: %s", said ? said : "");
    free(said);
    const char *inline_documents[] = {"prepare", "--documents=1", missing};
    CHECK(run_prepare(3, inline_documents) == 2, "--documents takes no value");
    const char *corpus_documents[] = {"prepare", "--default-corpus", "--documents"};
    CHECK(run_prepare(3, corpus_documents) == 2, "--documents with --default-corpus is a command-line error");
    const char *miss[] = {"prepare", "-o", out, missing};
    CHECK(run_prepare(4, miss) == 1, "a missing file is a runtime error");
    char empty[1100];
    snprintf(empty, sizeof empty, "%s/empty.txt", test_tmpdir());
    write_text_file(empty, "", 0);
    const char *emp[] = {"prepare", "-o", out, empty};
    CHECK(run_prepare(4, emp) == 1, "an empty corpus is a runtime error");
}

/* Bytes outside UTF-8 are counted one by one (a stray byte, a sequence cut short, an overlong form,
 * a surrogate), valid text of 1 to 4 bytes a character not at all; prepare names them in a note and
 * goes on, since they train as bytes. */
TEST(corpus_invalid_utf8_counts_each_stray_byte_and_prepare_names_them) {
    size_t first = 99;
    const char *valid = "caf\xc3\xa9 \xe2\x80\x94 \xf0\x9f\x98\x80";
    CHECK(corpus_invalid_utf8(valid, strlen(valid), &first) == 0 && first == 99, "valid text counted");
    const char *bad = "ok\xff \xc3\x28 \xc0\xaf \xed\xa0\x80 \xe4\xb8";
    /* ff; c3 before '('; c0 af (overlong); ed a0 80 (a surrogate); e4 b8 (cut short) */
    CHECK(corpus_invalid_utf8(bad, strlen(bad), &first) == 9 && first == 2, "counted %zu, first at %zu",
          corpus_invalid_utf8(bad, strlen(bad), &first), first);
    char text[1100], out[1100], log[1200];
    snprintf(text, sizeof text, "%s/stray.txt", test_tmpdir());
    snprintf(out, sizeof out, "%s/stray_out", test_tmpdir());
    snprintf(log, sizeof log, "%s/prepare.log", test_tmpdir());
    const char *words = "the cat sat on the mat \x92 and the dog sat on the log\n";
    write_text_file(text, words, strlen(words));
    unlink(log);
    const char *argv[] = {"prepare", "-v", "300", "--val-fraction", "0.5", "-o", out, text};
    CHECK(run_prepare(8, argv) == 0, "a stray byte is no error");
    char *said = read_text(log);
    CHECK(said && strstr(said, "stray.txt holds 1 byte(s) outside UTF-8 (the first at byte 23)"), "prepare said: %s",
          said ? said : "");
    free(said);
}

TEST(corpus_fix_utf8_repairs_stray_windows_1252_bytes) {
    TextBuf b = {0};
    const char *raw = "market\x92s fa\xe7" "ade \xe2\x80\x94 ok \x81x \xe4\xb8";
    textbuf_append(&b, raw, strlen(raw));
    corpus_fix_utf8(&b);
    const char *want = "market\xe2\x80\x99s fa\xc3\xa7" "ade \xe2\x80\x94 ok x \xc3\xa4\xc2\xb8"; /* 0x81 dropped; e4 b8 cut short read as Latin-1 */
    CHECK(!b.oom && b.len == strlen(want) && memcmp(b.data, want, b.len) == 0, "repaired text is \"%s\"", b.data);
    TextBuf clean = {0};
    textbuf_append(&clean, "caf\xc3\xa9", 5);
    char *before = clean.data;
    corpus_fix_utf8(&clean);
    CHECK(clean.data == before && clean.len == 5, "valid UTF-8 is left alone");
    textbuf_free(&b);
    textbuf_free(&clean);
}

TEST(corpus_falls_back_to_synthetic_when_packages_cannot_be_fetched) {
    /* With no apt-get on PATH the fetch fails; the recipe must fall back, not fail. */
    const char *old = getenv("PATH");
    char *saved = old ? strdup(old) : NULL;
    char empty_bin[1100], cache[1100], path[PREPARE_PATH_LEN], name[32], err[ERR_LEN] = "";
    snprintf(empty_bin, sizeof empty_bin, "%s/no-tools", test_tmpdir());
    snprintf(cache, sizeof cache, "%s/cache", test_tmpdir());
    mkdir(empty_bin, 0755);
    setenv("PATH", empty_bin, 1);
    int saved_err = dup(2);
    int fd = open("/dev/null", O_WRONLY);
    dup2(fd, 2); /* the fallback's one-line notice */
    close(fd);
    int rc = corpus_default(cache, 0, path, sizeof path, name, err);
    dup2(saved_err, 2);
    close(saved_err);
    if (saved) setenv("PATH", saved, 1);
    free(saved);
    REQUIRE(rc == 0, "fallback failed: %s", err);
    CHECK(strcmp(name, "synthetic-v1") == 0, "corpus name is %s", name);
    struct stat st;
    CHECK(stat(path, &st) == 0 && (size_t)st.st_size >= CORPUS_SYNTHETIC_BYTES, "synthetic corpus %s is missing or short",
          path);
}

TEST(prepare_takes_the_extended_corpus_for_a_vocabulary_the_standard_one_cannot_reach) {
    CHECK(!prepare_wants_extended_corpus(50257) && !prepare_wants_extended_corpus(PREPARE_STANDARD_CORPUS_VOCAB),
          "the standard corpus reaches these");
    CHECK(prepare_wants_extended_corpus(PREPARE_STANDARD_CORPUS_VOCAB + 1) && prepare_wants_extended_corpus(262144),
          "262144 needs the extended corpus");
}

/* Lines of plain text, no document separator inside: n bytes. */
static void write_lines(const char *path, size_t n, unsigned seed) {
    FILE *f = fopen(path, "wb");
    static const char *words[] = {"alpha", "beta", "gamma", "delta", "sigma", "omega", "river", "stone"};
    size_t written = 0;
    while (f && written < n) {
        seed = seed * 1103515245u + 12345u;
        int k = fprintf(f, "%s %s %s.\n", words[seed >> 16 & 7], words[seed >> 20 & 7], words[seed >> 24 & 7]);
        written += (size_t)k;
    }
    if (f) fclose(f);
}

TEST(prepare_keeps_the_validation_share_near_the_one_asked_for_with_a_long_last_file) {
    /* two files, the last 37% of the text: its start is the only document boundary */
    char f1[1100], f2[1100], out[1100];
    snprintf(f1, sizeof f1, "%s/a.txt", test_tmpdir());
    snprintf(f2, sizeof f2, "%s/b.txt", test_tmpdir());
    snprintf(out, sizeof out, "%s/prepared", test_tmpdir());
    write_lines(f1, 63000, 1);
    write_lines(f2, 37000, 2);
    const char *argv[] = {"prepare", "-v", "300", "--val-fraction", "0.01", "-o", out, "--threads", "1", f1, f2};
    REQUIRE(run_prepare(11, argv) == 0, "prepare failed");
    char train_path[1200], val_path[1200], err[ERR_LEN];
    snprintf(train_path, sizeof train_path, "%s/train.bin", out);
    snprintf(val_path, sizeof val_path, "%s/val.bin", out);
    ShardHeader h1, h2;
    REQUIRE(shard_read_header(train_path, &h1, err) == 0 && shard_read_header(val_path, &h2, err) == 0, "%s", err);
    double share = (double)h2.num_tokens / (double)(h1.num_tokens + h2.num_tokens);
    CHECK(share > 0.005 && share <= 0.02, "validation holds %.1f%% of the tokens, asked for 1%%", 100 * share);
    char log[1200];
    snprintf(log, sizeof log, "%s/prepare.log", test_tmpdir());
    char *said = read_text(log);
    CHECK(said && strstr(said, "no document boundary near the last 0.01 of the text"), "prepare did not say where "
          "validation starts: %s", said ? said : "");
    free(said);
}

/* With no document boundary and no line end near the asked-for share, validation starts on a
 * character's first byte, never inside one: its tokens decode to text that starts whole. */
TEST(prepare_cuts_a_text_without_line_ends_between_characters) {
    char path[1100], out[1100];
    snprintf(path, sizeof path, "%s/cjk.txt", test_tmpdir());
    snprintf(out, sizeof out, "%s/prepared", test_tmpdir());
    FILE *f = fopen(path, "w");
    /* 31 bytes a repeat: 'a', then 3-byte CJK and Hangul characters */
    for (int i = 0; i < 2001; i++) REQUIRE(f && fputs("a\xe4\xb8\xad\xe6\x96\x87\xe5\xad\x97\xe7\xac\xa6\xe6\x97"
                                                  "\xa5\xe6\x9c\xac\xe8\xaa\x9e\xed\x95\x9c\xea\xb5\xad\xec\x96\xb4",
                                                  f) >= 0, "%s", path);
    REQUIRE(fclose(f) == 0, "%s", path);
    const char *argv[] = {"prepare", "-v", "300", "-o", out, "--threads", "1", path};
    REQUIRE(run_prepare(8, argv) == 0, "prepare failed");
    char val_path[1200], tok_path[1200], err[ERR_LEN];
    snprintf(val_path, sizeof val_path, "%s/val.bin", out);
    snprintf(tok_path, sizeof tok_path, "%s/tokenizer.bin", out);
    uint32_t *ids = NULL;
    uint64_t n = 0;
    ShardHeader h;
    REQUIRE(shard_read(val_path, 1024, &ids, &n, &h, err) == 0 && n > 0, "%s", err);
    Tokenizer *t = tokenizer_load(tok_path, err);
    REQUIRE(t, "%s", err);
    char first[64];
    const size_t got = tokenizer_decode(t, ids, n < 4 ? n : 4, first, sizeof first);
    CHECK(got > 0 && ((unsigned char)first[0] & 0xC0) != 0x80, "validation starts with byte %#x, inside a character",
          got ? (unsigned char)first[0] : 0);
    tokenizer_free(t);
    free(ids);
}

/* Two prepares into one folder would rename each other's staged files into a mixed set: the second
 * is refused while the first holds the folder's lock (held here by the test), and goes once it is
 * released. */
TEST(a_prepare_into_a_folder_another_is_writing_is_refused) {
    char text[1100], out[1100], lock_path[1200], args[3000], *said = NULL;
    snprintf(text, sizeof text, "%s/a.txt", test_tmpdir());
    snprintf(out, sizeof out, "%s/prepared", test_tmpdir());
    snprintf(lock_path, sizeof lock_path, "%s/.lock", out);
    write_lines(text, 20000, 1);
    REQUIRE(mkdir(out, 0755) == 0, "%s", out);
    const int fd = open(lock_path, O_RDWR | O_CREAT, 0644);
    REQUIRE(fd >= 0 && flock(fd, LOCK_EX) == 0, "locking %s", lock_path);
    snprintf(args, sizeof args, "prepare -v 300 --threads 1 -o %s %s", out, text);
    int rc = run_train(args, &said);
    char train_bin[1200];
    snprintf(train_bin, sizeof train_bin, "%s/train.bin", out);
    CHECK(rc == 1 && said && strstr(said, "another prepare is writing into ") && access(train_bin, F_OK) != 0,
          "(%d) %s", rc, said ? said : "");
    free(said);
    close(fd);
    rc = run_train(args, &said);
    CHECK(rc == 0 && access(train_bin, F_OK) == 0, "after the lock went: (%d) %s", rc, said ? said : "");
    free(said);
}

TEST(prepare_names_a_folder_given_as_text_and_a_vocabulary_its_tokenizer_decides) {
    char dir[1100], out[1100], log[1200], tok[1100];
    snprintf(dir, sizeof dir, "%s/texts", test_tmpdir());
    snprintf(out, sizeof out, "%s/o", test_tmpdir());
    snprintf(log, sizeof log, "%s/prepare.log", test_tmpdir());
    snprintf(tok, sizeof tok, "%s/tok.bin", test_tmpdir());
    mkdir(dir, 0755);
    const char *folder[] = {"prepare", "-o", out, dir};
    CHECK(run_prepare(4, folder) == 1, "a folder as input is a runtime error");
    char *said = read_text(log);
    CHECK(said && strstr(said, "texts is a folder, not a text file: pass the files in it") && !strstr(said, "I/O error"),
          "prepare said: %s", said ? said : "");
    free(said);
    unlink(log);
    /* a file with a zero byte (a binary, or UTF-16 text) is no UTF-8 text */
    char bin[1200];
    snprintf(bin, sizeof bin, "%s/utf16.txt", test_tmpdir());
    FILE *f = fopen(bin, "wb");
    REQUIRE(f && fwrite("h\0i\0\n\0", 1, 6, f) == 6 && fclose(f) == 0, "%s", bin);
    const char *binary[] = {"prepare", "-o", out, bin};
    CHECK(run_prepare(4, binary) == 1, "a text with a zero byte is a runtime error");
    said = read_text(log);
    CHECK(said && strstr(said, "utf16.txt holds a zero byte (at byte 1): it is not UTF-8 text"), "prepare said: %s",
          said ? said : "");
    free(said);
    unlink(log);
    /* -v sizes a tokenizer prepare trains: with --tokenizer it would be ignored */
    const char *both[] = {"prepare", "-v", "5000", "--tokenizer", tok, "-o", out, dir};
    CHECK(run_prepare(8, both) == 2, "-v with --tokenizer is a command-line error");
    said = read_text(log);
    CHECK(said && strstr(said, "error: prepare -v:") && strstr(said, "--tokenizer FILE brings its own vocabulary"),
          "prepare said: %s", said ? said : "");
    free(said);
}

TEST(prepare_of_an_empty_text_creates_nothing) {
    char empty[1100], out[1100];
    snprintf(empty, sizeof empty, "%s/empty.txt", test_tmpdir());
    snprintf(out, sizeof out, "%s/out", test_tmpdir());
    write_text_file(empty, "", 0);
    const char *argv[] = {"prepare", "-o", out, empty};
    CHECK(run_prepare(4, argv) == 1, "an empty corpus is a runtime error");
    struct stat sb;
    CHECK(stat(out, &sb) != 0, "the failed prepare left %s behind", out);
}

/* One byte of text gives a validation token and no training one: refused, and the tokenizer, which
 * is written last, is not there; an absurd -v on a small text gives the vocabulary the text holds
 * (its tables sized by the text, not by -v). */
TEST(prepare_of_a_text_with_no_training_token_writes_no_tokenizer_and_a_huge_v_is_bounded_by_the_text) {
    char one[1100], out[1100], tok[1200], text[1100], out2[1100];
    snprintf(one, sizeof one, "%s/one.txt", test_tmpdir());
    snprintf(out, sizeof out, "%s/out1", test_tmpdir());
    snprintf(tok, sizeof tok, "%s/tokenizer.bin", out);
    write_text_file(one, "a", 1);
    const char *argv[] = {"prepare", "-v", "300", "-o", out, one};
    CHECK(run_prepare(6, argv) == 1, "a text without a training token is a runtime error");
    struct stat sb;
    CHECK(stat(tok, &sb) != 0 && stat(out, &sb) != 0, "the failed prepare wrote %s or left its folder", tok);
    snprintf(text, sizeof text, "%s/text.txt", test_tmpdir());
    snprintf(out2, sizeof out2, "%s/out2", test_tmpdir());
    const char *words = "the cat sat on the mat and the dog sat on the log\n";
    write_text_file(text, words, strlen(words));
    const char *argv2[] = {"prepare", "-v", "4294967295", "--val-fraction", "0.5", "-o", out2, text};
    CHECK(run_prepare(8, argv2) == 0, "-v 4294967295 on a small text");
    /* a validation part too small to hold a target is refused, not written as a shard nothing can read */
    char log[1200], out3[1100];
    snprintf(log, sizeof log, "%s/prepare.log", test_tmpdir());
    snprintf(out3, sizeof out3, "%s/out3", test_tmpdir());
    unlink(log);
    const char *argv3[] = {"prepare", "-v", "300", "--val-fraction", "1e-9", "-o", out3, text};
    CHECK(run_prepare(8, argv3) == 1, "a validation part without a target is a runtime error");
    char *said = read_text(log);
    CHECK(said && strstr(said, "the validation part of the text holds ") && strstr(said, "a target needs 2"),
          "prepare said: %s", said ? said : "");
    free(said);
}

TEST(prepare_refuses_an_output_path_that_is_a_file_before_training) {
    char text[1100], file[1100], log[1200];
    snprintf(text, sizeof text, "%s/a.txt", test_tmpdir());
    snprintf(file, sizeof file, "%s/not-a-folder", test_tmpdir());
    snprintf(log, sizeof log, "%s/prepare.log", test_tmpdir());
    write_lines(text, 20000, 3);
    write_text_file(file, "keep me", 7);
    const char *argv[] = {"prepare", "-v", "300", "-o", file, text};
    CHECK(run_prepare(6, argv) == 1, "an output path that is a file is a runtime error");
    char *said = read_text(log);
    CHECK(said && strstr(said, "error: prepare -o") && strstr(said, "is a file, not a folder") &&
              !strstr(said, "training a"),
          "prepare should refuse the output path before training: %s", said ? said : "");
    free(said);
    char *kept = read_text(file);
    CHECK(kept && strcmp(kept, "keep me") == 0, "the file given as -o was changed");
    free(kept);
    /* the same one level down: a folder cannot be made under a file */
    unlink(log);
    char below[1200];
    snprintf(below, sizeof below, "%s/sub", file);
    const char *under[] = {"prepare", "-v", "300", "-o", below, text};
    CHECK(run_prepare(6, under) == 1, "an output path under a file is a runtime error");
    said = read_text(log);
    CHECK(said && strstr(said, "is a file, not a folder") && !strstr(said, "training a"),
          "prepare should refuse the output path before training: %s", said ? said : "");
    free(said);
}

TEST(prepare_with_a_quote_in_the_cache_dir_creates_nothing) {
    char cache[1100], log[1200];
    snprintf(cache, sizeof cache, "%s/a'b", test_tmpdir());
    snprintf(log, sizeof log, "%s/prepare.log", test_tmpdir());
    const char *argv[] = {"prepare", "--default-corpus", "--cache-dir", cache};
    CHECK(run_prepare(4, argv) == 1, "a cache folder the corpus fetch cannot quote is a runtime error");
    char *said = read_text(log);
    CHECK(said && strstr(said, "contains a quote"), "prepare said: %s", said ? said : "");
    free(said);
    struct stat sb;
    CHECK(stat(cache, &sb) != 0, "the refused cache folder %s was created", cache);
}

TEST(prepare_with_an_empty_path_is_a_usage_error) {
    char text[1100];
    snprintf(text, sizeof text, "%s/a.txt", test_tmpdir());
    write_lines(text, 2000, 4);
    const char *out[] = {"prepare", "-o", "", text};
    CHECK(run_prepare(4, out) == 2, "-o '' is a command-line error");
    const char *tok[] = {"prepare", "--tokenizer", "", text};
    CHECK(run_prepare(4, tok) == 2, "--tokenizer '' is a command-line error");
    const char *cache[] = {"prepare", "--default-corpus", "--cache-dir", ""};
    CHECK(run_prepare(4, cache) == 2, "--cache-dir '' is a command-line error");
}

/* What prepare and the corpus cache write (tokenizers, tokenizer.json, cleaned text) is whole or not
 * there at all: a write that fails leaves the file a path held before, and no temporary beside it. */
TEST(a_whole_file_write_that_fails_leaves_what_the_path_held_and_no_temporary) {
    char path[800], tmp[820], dir[800], inside[820];
    snprintf(path, sizeof path, "%s/whole.txt", test_tmpdir());
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    size_t n = 0;
    char *got = NULL;
    REQUIRE(write_file_whole(path, "old text", 8) == 0, "first write: %s", strerror(errno));
    REQUIRE(write_file_whole(path, "new", 3) == 0, "second write: %s", strerror(errno));
    got = read_file(path, &n);
    CHECK(got && n == 3 && memcmp(got, "new", 3) == 0, "the file holds %zu bytes, not the new 3", n);
    free(got);
    CHECK(access(tmp, F_OK) != 0, "%s was left behind", tmp);

    /* a full disk (a file size limit of 1000 bytes, in a child process) stops a 4000-byte write
     * part way: the path still holds its 3 bytes, where a write in place would have cut them */
    pid_t pid = fork();
    REQUIRE(pid >= 0, "fork: %s", strerror(errno));
    if (pid == 0) {
        static char big[4000];
        struct rlimit lim = {1000, 1000};
        signal(SIGXFSZ, SIG_IGN);
        _exit(setrlimit(RLIMIT_FSIZE, &lim) == 0 && write_file_whole(path, big, sizeof big) == -1 && errno == EFBIG
                  ? 0 : 1);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "a write past the size limit did not fail with EFBIG");
    got = read_file(path, &n);
    CHECK(got && n == 3 && memcmp(got, "new", 3) == 0, "a failed write changed the file (%zu bytes)", n);
    free(got);
    CHECK(access(tmp, F_OK) != 0, "%s was left behind after the failed write", tmp);

    /* a folder that does not exist: nothing written, errno says why */
    snprintf(dir, sizeof dir, "%s/no/such/folder/file", test_tmpdir());
    errno = 0;
    CHECK(write_file_whole(dir, "x", 1) == -1 && errno == ENOENT, "a write into a missing folder: errno %d", errno);

    /* the rename fails (the path is a folder that holds a file): the folder and its file stay, the
     * temporary goes */
    snprintf(dir, sizeof dir, "%s/a_folder", test_tmpdir());
    snprintf(inside, sizeof inside, "%s/kept", dir);
    REQUIRE(mkdir(dir, 0755) == 0 && write_file_whole(inside, "kept", 4) == 0, "setup: %s", strerror(errno));
    errno = 0;
    CHECK(write_file_whole(dir, "over a folder", 13) == -1 && errno != 0, "a write over a folder did not fail");
    struct stat st;
    CHECK(stat(dir, &st) == 0 && S_ISDIR(st.st_mode), "the folder is gone");
    got = read_file(inside, &n);
    CHECK(got && n == 4 && memcmp(got, "kept", 4) == 0, "the folder's file changed");
    free(got);
    snprintf(tmp, sizeof tmp, "%s.tmp", dir);
    CHECK(access(tmp, F_OK) != 0, "%s was left behind", tmp);
}

/* The earlier set in -o is replaced only when the new one is whole: a prepare that fails after
 * encoding leaves the old shards and tokenizer byte for byte, and no staged file behind. */
TEST(a_failed_prepare_leaves_the_folders_earlier_set_as_it_was) {
    char text[1100], out[1100], log[1200];
    snprintf(text, sizeof text, "%s/words.txt", test_tmpdir());
    snprintf(out, sizeof out, "%s/set", test_tmpdir());
    snprintf(log, sizeof log, "%s/prepare.log", test_tmpdir());
    write_lines(text, 4000, 5);
    const char *argv[] = {"prepare", "-v", "300", "-o", out, text};
    REQUIRE(run_prepare(6, argv) == 0, "the first prepare");
    static const char *const names[] = {"train.bin", "val.bin", "tokenizer.bin"};
    char *before[3];
    size_t len[3];
    for (int k = 0; k < 3; k++) {
        char path[1200];
        snprintf(path, sizeof path, "%s/%s", out, names[k]);
        before[k] = read_file(path, &len[k]);
        REQUIRE(before[k], "the first prepare wrote no %s", names[k]);
    }
    /* another text whose validation part holds no target: encoded, then refused */
    char small[1100];
    snprintf(small, sizeof small, "%s/small.txt", test_tmpdir());
    const char *words = "the cat sat on the mat and the dog sat on the log\n";
    write_text_file(small, words, strlen(words));
    const char *argv2[] = {"prepare", "-v", "280", "--val-fraction", "1e-9", "-o", out, small};
    unlink(log);
    CHECK(run_prepare(8, argv2) == 1, "a validation part without a target is a runtime error");
    char *said = read_text(log);
    CHECK(said && strstr(said, "a target needs 2"), "prepare said: %s", said ? said : "");
    free(said);
    for (int k = 0; k < 3; k++) {
        char path[1200], staged[1300];
        snprintf(path, sizeof path, "%s/%s", out, names[k]);
        size_t n;
        char *now = read_file(path, &n);
        CHECK(now && n == len[k] && memcmp(now, before[k], n) == 0, "%s changed under a failed prepare", names[k]);
        free(now);
        free(before[k]);
        snprintf(staged, sizeof staged, "%s.new", path);
        CHECK(access(staged, F_OK) != 0, "%s was left behind", staged);
    }
}

/* prepare (argv, six words, logging to `log`) fails at once, before training a tokenizer, and says
 * `refusal`. */
static void expect_refused_before_work(const char **argv, const char *log, const char *refusal, const char *what) {
    unlink(log);
    CHECK(run_prepare(6, argv) == 1, "%s is a runtime error", what);
    char *said = read_text(log);
    CHECK(said && strstr(said, refusal) && !strstr(said, "training a"), "%s: prepare said: %s", what, said ? said : "");
    free(said);
}

/* train.bin or val.bin in -o that is not one of our shards is another tool's data: refused before
 * any work, and left as it was. */
TEST(prepare_refuses_to_replace_a_file_in_its_folder_that_is_not_its_shard) {
    char text[1100], out[1100], log[1200], path[1200];
    snprintf(text, sizeof text, "%s/words.txt", test_tmpdir());
    snprintf(out, sizeof out, "%s/theirs", test_tmpdir());
    snprintf(log, sizeof log, "%s/prepare.log", test_tmpdir());
    write_lines(text, 4000, 6);
    REQUIRE(make_dirs(out) == 0, "mkdir %s", out);
    snprintf(path, sizeof path, "%s/train.bin", out);
    write_text_file(path, "raw uint16 tokens", 17);
    const char *argv[] = {"prepare", "-v", "300", "-o", out, text};
    expect_refused_before_work(argv, log,
                               "train.bin holds no token shard of fusedgpt's, which prepare's set would replace (move "
                               "it, or pass another -o)",
                               "a foreign train.bin");
    char *said;
    size_t n;
    char *kept = read_file(path, &n);
    CHECK(kept && n == 17 && memcmp(kept, "raw uint16 tokens", 17) == 0, "the foreign train.bin was changed");
    free(kept);
    /* an llm.c shard as val.bin is named as one */
    unlink(path);
    snprintf(path, sizeof path, "%s/val.bin", out);
    int32_t llmc[256] = {LLMC_MAGIC_GPT2, LLMC_VERSION_GPT2, 0};
    write_text_file(path, (const char *)llmc, sizeof llmc);
    unlink(log);
    CHECK(run_prepare(6, argv) == 1, "an llm.c val.bin is a runtime error");
    said = read_text(log);
    CHECK(said && strstr(said, "val.bin holds an llm.c shard"), "prepare said: %s", said ? said : "");
    free(said);
    /* an empty one holds nothing to keep */
    write_text_file(path, "", 0);
    CHECK(run_prepare(6, argv) == 0, "an empty val.bin is replaced");
    /* a folder under the tokenizer's name is found before any work, not at the renames with the new
     * shards already in place */
    char tok[1200];
    snprintf(tok, sizeof tok, "%s/tokenizer.bin", out);
    unlink(tok);
    REQUIRE(make_dirs(tok) == 0, "mkdir %s", tok);
    size_t before_n;
    char *before = read_file(path, &before_n);
    expect_refused_before_work(argv, log, "tokenizer.bin is a folder, where prepare writes its tokenizer",
                               "a folder named tokenizer.bin");
    size_t after_n;
    char *after = read_file(path, &after_n);
    CHECK(before && after && before_n == after_n && memcmp(before, after, after_n) == 0,
          "val.bin changed under a prepare refused for its tokenizer's folder");
    free(before);
    free(after);
    /* a tokenizer file with no shard of ours beside it is someone's (a model folder's own tokenizer):
     * kept; beside our set it is the earlier prepare's, and replaced */
    rmdir(tok);
    snprintf(path, sizeof path, "%s/train.bin", out);
    unlink(path);
    snprintf(path, sizeof path, "%s/val.bin", out);
    unlink(path);
    write_text_file(tok, "their tokenizer", 15);
    expect_refused_before_work(argv, log, "tokenizer.bin is not the tokenizer of an earlier prepare there",
                               "a foreign tokenizer.bin");
    char *theirs = read_file(tok, &n);
    CHECK(theirs && n == 15 && memcmp(theirs, "their tokenizer", 15) == 0, "the foreign tokenizer.bin was changed");
    free(theirs);
    unlink(tok);
    CHECK(run_prepare(6, argv) == 0, "a fresh set");
    CHECK(run_prepare(6, argv) == 0, "the earlier prepare's set is replaced, its tokenizer with it");
    snprintf(path, sizeof path, "%s/train.bin", out);
    CHECK(unlink(path) == 0 && run_prepare(6, argv) == 0, "our val.bin beside the tokenizer makes it ours too");
}

/* A set prepared with the other kind of tokenizer replaces the earlier one whole: the earlier
 * tokenizer file of the other kind goes, so no stale tokenizer sits beside the new shards. */
TEST(a_prepare_with_the_other_kind_of_tokenizer_removes_the_earlier_sets_tokenizer) {
    char text[1100], out[1100], bin[1200], json[1200], log[1200];
    snprintf(text, sizeof text, "%s/words.txt", test_tmpdir());
    snprintf(out, sizeof out, "%s/set", test_tmpdir());
    snprintf(bin, sizeof bin, "%s/tokenizer.bin", out);
    snprintf(json, sizeof json, "%s/tokenizer.json", out);
    snprintf(log, sizeof log, "%s/prepare.log", test_tmpdir());
    write_lines(text, 4000, 5);
    const char *ours[] = {"prepare", "-v", "300", "-o", out, text};
    const char *imported[] = {"prepare", "--tokenizer", "tests/fixtures/hf_gpt2_style.json", "-o", out, text};
    REQUIRE(run_prepare(6, ours) == 0 && access(bin, F_OK) == 0, "our tokenizer's set");
    unlink(log);
    REQUIRE(run_prepare(6, imported) == 0, "the imported tokenizer's set");
    char *said = read_text(log);
    CHECK(access(json, F_OK) == 0 && access(bin, F_OK) != 0 && said && strstr(said, "the earlier set's tokenizer"),
          "tokenizer.bin stayed beside the imported set: %s", said ? said : "");
    free(said);
    REQUIRE(run_prepare(6, ours) == 0, "our tokenizer's set again");
    CHECK(access(bin, F_OK) == 0 && access(json, F_OK) != 0, "tokenizer.json stayed beside our set");
    /* a folder's own tokenizer of the other kind, with no shard of ours beside it (a checkpoint's or a
     * model's tokenizer.json), is refused before any work and kept */
    char model[1100], model_json[1200], model_bin[1200];
    snprintf(model, sizeof model, "%s/model", test_tmpdir());
    snprintf(model_json, sizeof model_json, "%s/tokenizer.json", model);
    snprintf(model_bin, sizeof model_bin, "%s/tokenizer.bin", model);
    REQUIRE(mkdir(model, 0755) == 0 && write_edited_copy("tests/fixtures/hf_gpt2_style.json", model_json, NULL, 0) == 0,
            "%s", model_json);
    const char *into_model[] = {"prepare", "-v", "300", "-o", model, text};
    unlink(log);
    CHECK(run_prepare(6, into_model) != 0 && access(model_json, F_OK) == 0 && access(model_bin, F_OK) != 0, "%s",
          model_json);
    said = read_text(log);
    CHECK(said && strstr(said, "tokenizer.json is not the tokenizer of an earlier prepare there (no shard of "
                               "fusedgpt's beside it), and prepare's set would sit beside it with tokenizer.bin"),
          "a model folder's tokenizer.json: %s", said ? said : "");
    free(said);
    REQUIRE(unlink(model_json) == 0 && rename(bin, model_bin) == 0, "a lone tokenizer.bin");
    const char *imported_into_model[] = {"prepare", "--tokenizer", "tests/fixtures/hf_gpt2_style.json", "-o", model, text};
    CHECK(run_prepare(6, imported_into_model) != 0 && access(model_bin, F_OK) == 0 && access(model_json, F_OK) != 0,
          "a lone tokenizer.bin was replaced");
}

/* An imported tokenizer's tokenizer_config.json and chat_template.jinja travel with the set, so that
 * training with --tokenizer DIR/tokenizer.json (the command prepare prints) sees the model's
 * eos_token and chat template and writes them into its checkpoints, not a generated config. A later
 * set whose tokenizer has none takes the earlier set's away; a foreign config in -o is refused and
 * kept; -o as the tokenizer's own folder writes its files back unchanged. */
TEST(a_prepared_set_carries_the_tokenizers_config_and_chat_template_into_training) {
    char model[1100], set[1100], text[1100], path[1300], a[1300], b[1300], log[1200], args[4000];
    snprintf(model, sizeof model, "%s/carried_model", test_tmpdir());
    snprintf(set, sizeof set, "%s/carried_set", test_tmpdir());
    snprintf(text, sizeof text, "%s/carried.txt", test_tmpdir());
    snprintf(log, sizeof log, "%s/prepare.log", test_tmpdir());
    write_lines(text, 4000, 7);
    REQUIRE(mkdir(model, 0755) == 0, "%s", model);
    snprintf(path, sizeof path, "%s/tokenizer.json", model);
    REQUIRE(write_edited_copy("tests/fixtures/hf_gpt2_style.json", path, NULL, 0) == 0, "%s", path);
    const char *config = "{\"eos_token\": \"<|endoftext|>\", \"model_max_length\": 777, \"tokenizer_class\": "
                         "\"GPT2Tokenizer\", \"clean_up_tokenization_spaces\": false}\n";
    const char *tpl = "{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}";
    snprintf(path, sizeof path, "%s/tokenizer_config.json", model);
    write_text_file(path, config, strlen(config));
    snprintf(path, sizeof path, "%s/chat_template.jinja", model);
    write_text_file(path, tpl, strlen(tpl));
    char tok[1200];
    snprintf(tok, sizeof tok, "%s/tokenizer.json", model);
    const char *from_model[] = {"prepare", "--tokenizer", tok, "-o", set, text};
    REQUIRE(run_prepare(6, from_model) == 0, "prepare with the model's tokenizer");
    for (int k = 0; k < 2; k++) {
        const char *name = k ? "chat_template.jinja" : "tokenizer_config.json";
        snprintf(a, sizeof a, "%s/%s", model, name);
        snprintf(b, sizeof b, "%s/%s", set, name);
        CHECK(same_bytes(a, b), "the set's %s is not the model's", name);
    }
    /* and a set in numbered shards */
    char sharded[1100];
    snprintf(sharded, sizeof sharded, "%s/carried_shards", test_tmpdir());
    const char *in_shards[] = {"prepare", "--tokenizer", tok, "--shard-tokens", "2000", "-o", sharded, text};
    REQUIRE(run_prepare(8, in_shards) == 0, "prepare in shards with the model's tokenizer");
    for (int k = 0; k < 2; k++) {
        const char *name = k ? "chat_template.jinja" : "tokenizer_config.json";
        snprintf(a, sizeof a, "%s/%s", model, name);
        snprintf(b, sizeof b, "%s/%s", sharded, name);
        CHECK(same_bytes(a, b), "the sharded set's %s is not the model's", name);
    }
    /* training from the set hands the model's files on, byte for byte */
    snprintf(args, sizeof args, "--device cpu -e tiny -b 2 -t 32 -x 1 -n 1 -s 0 --val-every 0 -i %s/train.bin "
             "--tokenizer %s/tokenizer.json -o %s/run", set, set, set);
    char *out = NULL;
    const int rc = run_train(args, &out);
    REQUIRE(rc == 0, "(%d) %.400s", rc, out ? out : "");
    free(out);
    for (int k = 0; k < 2; k++) {
        const char *name = k ? "chat_template.jinja" : "tokenizer_config.json";
        snprintf(a, sizeof a, "%s/%s", model, name);
        snprintf(b, sizeof b, "%s/run/step_00000001/%s", set, name);
        CHECK(same_bytes(a, b), "the checkpoint's %s is not the model's", name);
    }
    /* a set whose tokenizer has neither takes the earlier set's away */
    const char *bare[] = {"prepare", "--tokenizer", "tests/fixtures/hf_gpt2_style.json", "-o", set, text};
    unlink(log);
    REQUIRE(run_prepare(6, bare) == 0, "prepare with a tokenizer alone");
    char *said = read_text(log);
    snprintf(a, sizeof a, "%s/tokenizer_config.json", set);
    snprintf(b, sizeof b, "%s/chat_template.jinja", set);
    CHECK(access(a, F_OK) != 0 && access(b, F_OK) != 0, "the earlier set's config or chat template stayed");
    CHECK(said && strstr(said, "the earlier set's tokenizer's config (the new tokenizer has none)") &&
              strstr(said, "the earlier set's chat template"), "%s", said ? said : "");
    free(said);
    /* a config in a folder without a set of ours is another's: refused before any work, and kept */
    char foreign[1100];
    snprintf(foreign, sizeof foreign, "%s/foreign", test_tmpdir());
    REQUIRE(mkdir(foreign, 0755) == 0, "%s", foreign);
    snprintf(path, sizeof path, "%s/tokenizer_config.json", foreign);
    write_text_file(path, "{}", 2);
    const char *into_foreign[] = {"prepare", "--tokenizer", tok, "-o", foreign, text};
    unlink(log);
    CHECK(run_prepare(6, into_foreign) != 0, "a foreign tokenizer_config.json was replaced");
    said = read_text(log);
    CHECK(said && strstr(said, "tokenizer_config.json is not the tokenizer's config of an earlier prepare there"),
          "%s", said ? said : "");
    free(said);
    said = read_text(path);
    CHECK(said && !strcmp(said, "{}"), "the foreign config changed: %s", said ? said : "(gone)");
    free(said);
    snprintf(path, sizeof path, "%s/train.bin", foreign);
    CHECK(access(path, F_OK) != 0, "shards were written beside the foreign config");
    /* -o as the model's own folder: its files stay as they were */
    const char *into_model[] = {"prepare", "--tokenizer", tok, "-o", model, text};
    REQUIRE(run_prepare(6, into_model) == 0, "prepare into the tokenizer's own folder");
    snprintf(path, sizeof path, "%s/tokenizer_config.json", model);
    said = read_text(path);
    CHECK(said && !strcmp(said, config), "the model's config changed: %s", said ? said : "(gone)");
    free(said);
}

/* Smaller refusals and notes: an empty tokenizer file is named empty; a folder under a staging name
 * is refused before any work; a file given twice is noted (its copy may land in validation). */
TEST(prepare_names_an_empty_tokenizer_a_folder_at_a_staging_name_and_a_file_given_twice) {
    char text[1100], empty[1100], out[1100], staged[1200], args[4000], *said = NULL;
    snprintf(text, sizeof text, "%s/words.txt", test_tmpdir());
    snprintf(empty, sizeof empty, "%s/empty.bin", test_tmpdir());
    snprintf(out, sizeof out, "%s/set", test_tmpdir());
    write_lines(text, 4000, 5);
    write_text_file(empty, "", 0);
    snprintf(args, sizeof args, "prepare --tokenizer %s -o %s %s", empty, out, text);
    int rc = run_train(args, &said);
    CHECK(rc == 1 && said && strstr(said, "is empty (0 bytes"), "(%d) %s", rc, said ? said : "");
    free(said);
    snprintf(staged, sizeof staged, "%s/val.bin.new", out);
    REQUIRE(mkdir(out, 0755) == 0 && mkdir(staged, 0755) == 0, "%s", staged);
    snprintf(args, sizeof args, "prepare -v 300 -o %s %s", out, text);
    rc = run_train(args, &said);
    CHECK(rc == 1 && said && strstr(said, "val.bin.new is a folder, where prepare stages its shard") &&
              !strstr(said, "training a"),
          "(%d) %s", rc, said ? said : "");
    free(said);
    REQUIRE(rmdir(staged) == 0, "%s", staged);
    snprintf(args, sizeof args, "prepare -v 300 -o %s %s %s", out, text, text);
    rc = run_train(args, &said);
    CHECK(rc == 0 && said && strstr(said, "is given more than once"), "(%d) %s", rc, said ? said : "");
    free(said);
}

/* A link at a name prepare writes its shards and tokenizer under (left there by someone else) is
 * replaced, not written through: the file it leads to, outside -o, keeps its bytes. */
TEST(prepare_replaces_a_link_at_a_staging_name_without_writing_through_it) {
    char text[1100], out[1100], victim[1100], link[1200], args[4000], *said = NULL;
    snprintf(text, sizeof text, "%s/words.txt", test_tmpdir());
    snprintf(out, sizeof out, "%s/set", test_tmpdir());
    snprintf(victim, sizeof victim, "%s/precious.txt", test_tmpdir());
    write_lines(text, 4000, 5);
    write_text_file(victim, "precious", 8);
    REQUIRE(mkdir(out, 0755) == 0, "%s", out);
    const char *staging[] = {"train.bin.new.tmp", "val.bin.new.tmp", "tokenizer.json.new.tmp", "tokenizer.json.tmp"};
    for (int i = 0; i < 4; i++) {
        snprintf(link, sizeof link, "%s/%s", out, staging[i]);
        REQUIRE(symlink(victim, link) == 0, "%s", link);
    }
    snprintf(args, sizeof args, "prepare -v 300 -o %s %s", out, text);
    int rc = run_train(args, &said);
    CHECK(rc == 0, "(%d) %s", rc, said ? said : "");
    free(said);
    size_t n = 0;
    char *got = read_file(victim, &n);
    CHECK(got && n == 8 && !memcmp(got, "precious", 8), "the link's target was written through (%zu bytes)", n);
    free(got);
    snprintf(link, sizeof link, "%s/train.bin", out);
    struct stat sb;
    CHECK(lstat(link, &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_size > 0, "%s was not written", link);
}

/* --files-from: the files a list names, one a line (blank lines and CRLF ends taken), in the list's
 * place among the command line's files; "-" reads the list from stdin. The shards are those of the
 * same files given on the command line. */
TEST(prepare_takes_the_files_a_list_names_as_if_given_on_the_command_line) {
    char f[3][1100], list[1100], a[1100], b[1100], c[1100], args[4000], *out = NULL;
    for (int k = 0; k < 3; k++) {
        snprintf(f[k], sizeof f[k], "%s/doc%d.txt", test_tmpdir(), k);
        write_lines(f[k], 300, (unsigned)(7 + k));
    }
    snprintf(list, sizeof list, "%s/list.txt", test_tmpdir());
    FILE *lf = fopen(list, "w");
    REQUIRE(lf && fprintf(lf, "%s\r\n\n \t\n%s\n", f[0], f[1]) > 0 && fclose(lf) == 0, "%s", list);
    snprintf(a, sizeof a, "%s/a", test_tmpdir());
    snprintf(b, sizeof b, "%s/b", test_tmpdir());
    snprintf(c, sizeof c, "%s/c", test_tmpdir());
    const char *given[] = {"prepare", "-v", "300", "-o", a, f[0], f[1], f[2]};
    const char *listed[] = {"prepare", "-v", "300", "-o", b, "--files-from", list, f[2]};
    REQUIRE(run_prepare(8, given) == 0 && run_prepare(8, listed) == 0, "prepare");
    snprintf(args, sizeof args, "prepare -v 300 -o %s %s --files-from - < %s", c, f[0], list);
    REQUIRE(run_train(args, &out) == 0, "%s", out);
    free(out);
    char pa[1200], pb[1200];
    for (int k = 0; k < 2; k++) {
        snprintf(pa, sizeof pa, "%s/%s", a, k ? "val.bin" : "train.bin");
        snprintf(pb, sizeof pb, "%s/%s", b, k ? "val.bin" : "train.bin");
        CHECK(same_bytes(pa, pb), "%s and %s differ", pa, pb);
    }
    /* from stdin, after a file of the command line: doc0 twice (noted), then doc1 */
    snprintf(pa, sizeof pa, "%s/train.bin", c);
    CHECK(access(pa, F_OK) == 0, "no %s", pa);
    const char *missing_list[] = {"prepare", "-o", a, "--files-from", "/nonexistent/list"};
    CHECK(run_prepare(5, missing_list) == 1, "a missing list is an error");
    snprintf(list, sizeof list, "%s/missing_file_list.txt", test_tmpdir());
    REQUIRE((lf = fopen(list, "w")) && fputs("/nonexistent/doc.txt\n", lf) >= 0 && fclose(lf) == 0, "%s", list);
    const char *listing_missing[] = {"prepare", "-o", a, "--files-from", list};
    CHECK(run_prepare(5, listing_missing) == 1, "a list naming a missing file is an error");
    /* after --, a file named like a flag is a file: the set of the same text under another name */
    char dashed[1100], d[1100];
    snprintf(dashed, sizeof dashed, "%s/-v", test_tmpdir());
    snprintf(d, sizeof d, "%s/d", test_tmpdir());
    snprintf(args, sizeof args, "cp %s '%s'", f[2], dashed);
    REQUIRE(system(args) == 0, "%s", args);
    snprintf(args, sizeof args, "cd %s && %s/train prepare -v 300 -o %s -- %s %s -v >/dev/null 2>&1", test_tmpdir(),
             getcwd(pb, sizeof pb), d, f[0], f[1]);
    REQUIRE(system(args) == 0, "%s", args);
    for (int k = 0; k < 2; k++) {
        snprintf(pa, sizeof pa, "%s/%s", a, k ? "val.bin" : "train.bin");
        snprintf(pb, sizeof pb, "%s/%s", d, k ? "val.bin" : "train.bin");
        CHECK(same_bytes(pa, pb), "%s and %s differ", pa, pb);
    }
}

/* The command prepare prints to train with pastes into a shell as it is: a path with a space or a
 * quote is quoted, and -o's trailing slash gives no doubled one. */
TEST(prepare_prints_a_train_command_a_shell_takes_as_it_is) {
    char text[1100], args[4000], want[4000], *out = NULL;
    snprintf(text, sizeof text, "%s/words.txt", test_tmpdir());
    write_lines(text, 400, 3);
    snprintf(args, sizeof args, "prepare -v 300 -o \"%s/it's a set/\" %s", test_tmpdir(), text);
    REQUIRE(run_train(args, &out) == 0, "%s", out);
    snprintf(want, sizeof want, "train with: ./train -i '%s/it'\\''s a set/train.bin' -j '%s/it'\\''s a set/val.bin' "
             "--tokenizer '%s/it'\\''s a set/tokenizer.bin' -v", test_tmpdir(), test_tmpdir(), test_tmpdir());
    CHECK(out && strstr(out, want), "wanted %s in: %s", want, out);
    /* and the shell reads the quoted paths back as the files */
    const char *line = out ? strstr(out, "train with: ./train -i ") : NULL;
    if (line) {
        char cmd[4000];
        const char *end = strchr(line, '\n');
        snprintf(cmd, sizeof cmd, "set -- %.*s; test -f \"$3\" && test -f \"$5\" && test -f \"$7\"",
                 (int)((end ? end : line + strlen(line)) - (line + 12)), line + 12);
        CHECK(system(cmd) == 0, "the shell did not find the files of: %s", cmd);
    }
    free(out);
}

/* ---- --shard-tokens: the text streamed into numbered shards ---- */

/* The tokens of dir's numbered shards of a kind ("train", "val") in order (malloc'ed, *n of them),
 * and how many shards (*count); checks every shard but the last holds per_shard tokens and the
 * last 2 to per_shard + 1, each made by `fingerprint`. NULL when a shard cannot be read. */
static uint32_t *read_numbered(const char *dir, const char *kind, uint64_t per_shard, uint64_t fingerprint,
                               uint32_t V, uint64_t *n, int *count) {
    uint32_t *all = NULL;
    *n = 0;
    *count = 0;
    for (;; (*count)++) {
        char path[1300], err[ERR_LEN];
        snprintf(path, sizeof path, "%s/%s_%06d.bin", dir, kind, *count);
        if (access(path, F_OK) != 0) break;
        uint32_t *ids = NULL;
        uint64_t k = 0;
        ShardHeader h;
        if (shard_read(path, V, &ids, &k, &h, err) != 0) {
            CHECK(0, "%s", err);
            free(all);
            return NULL;
        }
        char next[1300];
        snprintf(next, sizeof next, "%s/%s_%06d.bin", dir, kind, *count + 1);
        const int last = access(next, F_OK) != 0;
        CHECK(last ? k >= 2 && k <= per_shard + 1 : k == per_shard, "%s holds %llu tokens (shards of %llu%s)", path,
              (unsigned long long)k, (unsigned long long)per_shard, last ? ", the last" : "");
        CHECK(h.tokenizer == fingerprint, "%s records another tokenizer", path);
        all = realloc(all, (*n + k) * sizeof *all);
        memcpy(all + *n, ids, k * sizeof *ids);
        *n += k;
        free(ids);
    }
    return all;
}

/* Several documents: files with the separator inside, a short one, and one longer than a block
 * (64 KiB) with line ends but no separator, so blocks end at boundaries and at cut places both. */
static int write_documents(char files[][1100], const char *sep) {
    static const size_t sizes[] = {30000, 150000, 5000, 90000, 300, 12000};
    for (int k = 0; k < 6; k++) {
        snprintf(files[k], 1100, "%s/doc%d.txt", test_tmpdir(), k);
        FILE *f = fopen(files[k], "wb");
        unsigned seed = 17u + (unsigned)k;
        static const char *words[] = {"alpha", "beta", "gamma", "delta", "sigma", "omega", "river", "stone"};
        for (size_t written = 0; f && written < sizes[k];) {
            seed = seed * 1103515245u + 12345u;
            int w = fprintf(f, "%s %s, %s.%s\n", words[seed >> 16 & 7], words[seed >> 20 & 7], words[seed >> 24 & 7],
                            k == 1 && (seed >> 8 & 31) == 0 ? sep : "");
            written += (size_t)w;
        }
        if (!f || fclose(f) != 0) return -1;
    }
    return 6;
}

/* Prepares files[0..n) whole and in shards of 1024 (into dir/whole and dir/streamed) with the
 * tokenizer tok_path and the flags extra[0..n_extra), and checks the shards joined hold train.bin's
 * and val.bin's ids (and marks), kind by kind. */
static void expect_shards_as_whole(const char *tok_path, const char *const *files, int n, const char *const *extra,
                                   int n_extra, const char *dir, const char *what) {
    char whole[1200], streamed[1200], err[ERR_LEN];
    snprintf(whole, sizeof whole, "%s/whole", dir);
    snprintf(streamed, sizeof streamed, "%s/streamed", dir);
    const char *w_argv[24] = {"prepare", "--tokenizer", tok_path, "-o", whole};
    const char *s_argv[28] = {"prepare", "--tokenizer", tok_path, "--shard-tokens", "1024", "--threads", "2", "-o",
                              streamed};
    for (int k = 0; k < n_extra; k++) w_argv[5 + k] = s_argv[9 + k] = extra[k];
    for (int k = 0; k < n; k++) w_argv[5 + n_extra + k] = s_argv[9 + n_extra + k] = files[k];
    REQUIRE(run_prepare(5 + n_extra + n, w_argv) == 0, "%s: the text whole", what);
    REQUIRE(run_prepare(9 + n_extra + n, s_argv) == 0, "%s: streamed", what);
    Tokenizer *tok = tokenizer_load(tok_path, err);
    REQUIRE(tok, "%s", err);
    const uint32_t V = tokenizer_vocab_size(tok);
    for (int kind = 0; kind < 2; kind++) {
        char path[1300];
        snprintf(path, sizeof path, "%s/%s.bin", whole, kind ? "val" : "train");
        uint32_t *want = NULL;
        uint64_t n_want = 0, n_got = 0;
        ShardHeader h;
        REQUIRE(shard_read(path, V, &want, &n_want, &h, err) == 0, "%s", err);
        int shards = 0;
        uint32_t *got = read_numbered(streamed, kind ? "val" : "train", 1024, tokenizer_fingerprint(tok), V, &n_got,
                                      &shards);
        CHECK(got && n_got == n_want && memcmp(got, want, n_want * sizeof *got) == 0,
              "%s: the %s shards hold %llu tokens, not the %llu of the text whole (or other ids)", what,
              kind ? "validation" : "training", (unsigned long long)n_got, (unsigned long long)n_want);
        CHECK(shards == (int)((n_want - 2) / 1024 + 1) || (n_want % 1024 == 1 && shards == (int)(n_want / 1024)),
              "%s: %llu tokens in %d shards of 1024", what, (unsigned long long)n_want, shards);
        free(want);
        free(got);
    }
    tokenizer_free(tok);
}

/* Our own 300-token tokenizer, prepared from `bytes` of generated lines (seed) written to text
 * (1100 bytes) into the folder test_tmpdir()/name; its path into tok_path (1200 bytes). 0, or
 * prepare's exit status. */
static int prepare_our_tokenizer(const char *name, size_t bytes, unsigned seed, char *text, char *tok_path) {
    char dir[1100];
    snprintf(text, 1100, "%s/%s.txt", test_tmpdir(), name);
    snprintf(dir, sizeof dir, "%s/%s", test_tmpdir(), name);
    write_lines(text, bytes, seed);
    const char *argv[] = {"prepare", "-v", "300", "-o", dir, text};
    snprintf(tok_path, 1200, "%s/tokenizer.bin", dir);
    return run_prepare(6, argv);
}

/* The numbered shards hold exactly the ids prepare gives the text whole, cut into shards of N: for
 * our tokenizer, for byte-level BPE with a BOS post-processor and for SentencePiece with Gemma's. */
TEST(prepare_in_shards_of_n_tokens_gives_the_ids_of_the_text_whole) {
    char dir[1100], words[1100], ours[1200];
    REQUIRE(prepare_our_tokenizer("ours", 20000, 3, words, ours) == 0, "the tokenizer of our own kind");
    const char *tokenizers[] = {ours, "tests/fixtures/hf_llama3_bos.json", "tests/fixtures/spm_gemma3.json"};
    const char *separators[] = {"<|endoftext|>", "<|end_of_text|>", "<bos>"};
    for (int t = 0; t < 3; t++) {
        char files[6][1100], err[ERR_LEN];
        REQUIRE(write_documents(files, separators[t]) == 6, "writing the documents");
        snprintf(dir, sizeof dir, "%s/t%d", test_tmpdir(), t);
        const char *paths[6] = {files[0], files[1], files[2], files[3], files[4], files[5]};
        expect_shards_as_whole(tokenizers[t], paths, 6, NULL, 0, dir, tokenizers[t]);
        /* the tokenizer goes beside the shards, as it was given */
        char beside[1300];
        snprintf(beside, sizeof beside, "%s/streamed/%s", dir, t ? "tokenizer.json" : "tokenizer.bin");
        Tokenizer *tok = tokenizer_load(tokenizers[t], err), *back = tokenizer_load(beside, err);
        CHECK(tok && back && tokenizer_fingerprint(back) == tokenizer_fingerprint(tok), "%s: %s", beside, err);
        tokenizer_free(back);
        tokenizer_free(tok);
    }
}

/* Occurrences of `sep` in the file at path. */
static int count_in_file(const char *path, const char *sep) {
    char *text = read_text(path);
    int n = 0;
    for (const char *p = text; p && (p = strstr(p, sep)); p += strlen(sep)) n++;
    free(text);
    return n;
}

/* --documents marks each document's first token: the first of the post-processor's tokens before a
 * document where the tokenizer has them (Llama 3's <|begin_of_text|>, Gemma's <bos>, which is also
 * its separator), else the token after the separator, and the first token of a part that starts a
 * document. The ids are those without --documents, the streamed shards hold the same marks, and
 * validation (cut at a document boundary here) starts a document of its own. */
TEST(prepare_documents_marks_where_each_document_starts_whole_and_in_shards) {
    char words[1100], ours[1200];
    REQUIRE(prepare_our_tokenizer("ours_documents", 20000, 5, words, ours) == 0, "the tokenizer of our own kind");
    const char *tokenizers[] = {ours, "tests/fixtures/hf_llama3_bos.json", "tests/fixtures/spm_gemma3.json"};
    const char *separators[] = {"<|endoftext|>", "<|end_of_text|>", "<bos>"};
    const char *documents[] = {"--documents", "--val-fraction", "0.05"}, *plain[] = {"--val-fraction", "0.05"};
    for (int t = 0; t < 3; t++) {
        char files[6][1100], dir[1100], plain_dir[1100], err[ERR_LEN];
        REQUIRE(write_documents(files, separators[t]) == 6, "writing the documents");
        const char *paths[6] = {files[0], files[1], files[2], files[3], files[4], files[5]};
        const int n_documents = 6 + count_in_file(files[1], separators[t]);
        snprintf(dir, sizeof dir, "%s/documents%d", test_tmpdir(), t);
        snprintf(plain_dir, sizeof plain_dir, "%s/plain%d", test_tmpdir(), t);
        expect_shards_as_whole(tokenizers[t], paths, 6, documents, 3, dir, tokenizers[t]);
        expect_shards_as_whole(tokenizers[t], paths, 6, plain, 2, plain_dir, tokenizers[t]);
        Tokenizer *tok = tokenizer_load(tokenizers[t], err);
        REQUIRE(tok, "%s", err);
        const uint32_t V = tokenizer_vocab_size(tok), eot = tokenizer_eot_token(tok);
        const uint32_t *before;
        const int n_before = tokenizer_post_tokens(tok, 0, &before);
        int marked = 0;
        for (int kind = 0; kind < 2; kind++) {
            char path[1300], plain_path[1300];
            snprintf(path, sizeof path, "%s/whole/%s.bin", dir, kind ? "val" : "train");
            snprintf(plain_path, sizeof plain_path, "%s/whole/%s.bin", plain_dir, kind ? "val" : "train");
            uint32_t *got = NULL, *want = NULL;
            uint64_t n_got = 0, n_want = 0;
            ShardHeader h, h_plain;
            REQUIRE(shard_read(path, V, &got, &n_got, &h, err) == 0, "%s", err);
            REQUIRE(shard_read(plain_path, V, &want, &n_want, &h_plain, err) == 0, "%s", err);
            CHECK(h.flags == SHARD_DOCUMENTS && h.bytes_per_token == 4 && h_plain.flags == 0,
                  "%s: flags %u in %u-byte tokens (without --documents: flags %u)", path, h.flags, h.bytes_per_token,
                  h_plain.flags);
            REQUIRE(n_got == n_want, "%s: %llu tokens, %llu without --documents", path, (unsigned long long)n_got,
                    (unsigned long long)n_want);
            int wrong = -1;
            for (uint64_t i = 0; i < n_got; i++) {
                const uint32_t id = shard_token_id(got[i]);
                const int starts = n_before ? id == before[0] : i == 0 || shard_token_id(got[i - 1]) == eot;
                if (id != want[i] || shard_token_starts_document(got[i]) != starts || got[i] & SHARD_NO_LOSS) {
                    wrong = (int)i;
                    break;
                }
                marked += starts;
            }
            CHECK(wrong < 0, "%s: token %d is %u (without --documents %u), its mark not where a document starts",
                  path, wrong, wrong < 0 ? 0 : got[wrong], wrong < 0 ? 0 : want[wrong]);
            CHECK(shard_token_starts_document(got[0]) || kind == 0 || n_before,
                  "%s: validation starts a document, and its first token is not marked", path);
            free(got);
            free(want);
        }
        CHECK(marked == n_documents, "%s: %d tokens marked, for %d documents", tokenizers[t], marked, n_documents);
        tokenizer_free(tok);
    }
}

/* --documents with a template of a token after the text only ("$A <|im_end|>", a separator of its
 * own, <|endoftext|>) and a first document that is empty, so that the text starts with the
 * separator: the ids are those without --documents, and one mark stands at each document's first
 * id (the part's first, then the id after each <|im_end|> <|endoftext|>). The part's first mark
 * once hid that separator from the wrapping, which then left the part's first ids unwritten. */
TEST(prepare_documents_marks_a_template_of_a_token_after_the_text_and_an_empty_first_document) {
    const char *edits[] = {
        "\"post_processor\": null",
        "\"post_processor\": {\"type\": \"TemplateProcessing\", \"single\": [{\"Sequence\": {\"id\": \"A\", "
        "\"type_id\": 0}}, {\"SpecialToken\": {\"id\": \"<|im_end|>\", \"type_id\": 0}}], \"pair\": [{\"Sequence\": "
        "{\"id\": \"A\", \"type_id\": 0}}, {\"Sequence\": {\"id\": \"B\", \"type_id\": 0}}], \"special_tokens\": "
        "{\"<|im_end|>\": {\"id\": \"<|im_end|>\", \"ids\": [2], \"tokens\": [\"<|im_end|>\"]}}}"};
    char json[800], files[3][800], err[ERR_LEN];
    snprintf(json, sizeof json, "%s/after_only.json", test_tmpdir());
    REQUIRE(write_edited_copy("tests/fixtures/hf_qwen2_style.json", json, edits, 1) == 0, "the $A <|im_end|> template");
    const char *docs[] = {"", "The quick brown fox jumps over the lazy dog, again and again and again.\n",
                          "A second document, of some length, to encode here; and a third clause.\n"};
    for (int d = 0; d < 3; d++) {
        snprintf(files[d], sizeof files[d], "%s/after%d.txt", test_tmpdir(), d);
        FILE *f = fopen(files[d], "w");
        REQUIRE(f && fputs(docs[d], f) >= 0 && fclose(f) == 0, "%s", files[d]);
    }
    uint32_t *ids[2] = {NULL, NULL};
    uint64_t n[2] = {0, 0};
    for (int with = 0; with < 2; with++) {
        char args[4000], path[900], *out = NULL;
        snprintf(args, sizeof args, "prepare --tokenizer %s %s--val-fraction 0.01 -o %s/after_%d %s %s %s", json,
                 with ? "--documents " : "", test_tmpdir(), with, files[0], files[1], files[2]);
        REQUIRE(run_train(args, &out) == 0, "%s", out);
        free(out);
        ShardHeader h;
        snprintf(path, sizeof path, "%s/after_%d/train.bin", test_tmpdir(), with);
        REQUIRE(shard_read(path, 1 << 20, &ids[with], &n[with], &h, err) == 0, "%s", err);
    }
    int marks = 0, same = n[0] == n[1];
    for (uint64_t i = 0; same && i < n[1]; i++) {
        same &= shard_token_id(ids[1][i]) == ids[0][i];
        marks += shard_token_starts_document(ids[1][i]);
    }
    CHECK(n[0] > 3 && ids[0][0] == 2 && ids[0][1] == 0, "the empty document's ids: %u %u (<|im_end|> <|endoftext|>)",
          n[0] ? ids[0][0] : 0, n[0] > 1 ? ids[0][1] : 0);
    CHECK(same, "%llu ids with --documents, %llu without, or other ids", (unsigned long long)n[1],
          (unsigned long long)n[0]);
    CHECK(marks == 3 && shard_token_starts_document(ids[1][0]) && shard_token_starts_document(ids[1][2]),
          "%d marks for 3 documents", marks);
    free(ids[0]);
    free(ids[1]);
}

/* Files of `n` bytes of short lines each (0: empty). */
static void write_sized(char paths[][1100], const size_t *sizes, int n, const char *tag) {
    for (int k = 0; k < n; k++) {
        snprintf(paths[k], 1100, "%s/%s%d.txt", test_tmpdir(), tag, k);
        FILE *f = fopen(paths[k], "wb");
        for (size_t i = 0; f && i < sizes[k]; i++) fputc(i % 13 == 12 ? '\n' : "riverstone"[i % 10], f);
        if (f) fclose(f);
    }
}

/* Validation starts where the whole-text prepare starts it, in the layouts where a streamed pass
 * could see it otherwise: a last document longer than validation's share whose start the stream
 * has passed (the boundary before the target), a boundary exactly at twice the share from the end,
 * an empty last file (a separator that ends the text starts no validation), and a text whose end
 * falls on a block's end. */
TEST(prepare_in_shards_starts_validation_where_the_text_whole_does) {
    char words[1100], ours[1200], dir[1100];
    REQUIRE(prepare_our_tokenizer("ours", 20000, 3, words, ours) == 0, "the tokenizer of our own kind");
    static const struct {
        size_t sizes[3];
        int n;
        const char *what;
    } cases[] = {
        {{65000, 1287}, 2, "a last document longer than the share"},
        {{9787, 200}, 2, "a boundary at twice the share"},
        {{65523, 0}, 2, "an empty last file ending the text at a block's end"},
        {{30000, 30000, 0}, 3, "an empty last file"},
    };
    const char *tokenizers[] = {ours, "tests/fixtures/hf_llama3_bos.json", "tests/fixtures/spm_gemma3.json"};
    for (int c = 0; c < 4; c++)
        for (int t = 0; t < 3; t++) {
            char files[3][1100], tag[16], what[200];
            snprintf(tag, sizeof tag, "c%dt%d_", c, t);
            write_sized(files, cases[c].sizes, cases[c].n, tag);
            snprintf(dir, sizeof dir, "%s/%s", test_tmpdir(), tag);
            snprintf(what, sizeof what, "%s, %s", cases[c].what, tokenizers[t]);
            const char *paths[3] = {files[0], files[1], files[2]};
            expect_shards_as_whole(tokenizers[t], paths, cases[c].n, NULL, 0, dir, what);
        }
}

/* A last shard of one token would hold no target: the token left over after whole shards goes into
 * the last one, which then holds N + 1. */
TEST(prepare_in_shards_never_leaves_a_shard_of_one_token) {
    char text[1100], out[1100], tokpath[1200], trainpath[1200], err[ERR_LEN];
    snprintf(out, sizeof out, "%s/streamed", test_tmpdir());
    REQUIRE(prepare_our_tokenizer("whole", 20000, 9, text, tokpath) == 0, "the text whole");
    snprintf(trainpath, sizeof trainpath, "%s/whole/train.bin", test_tmpdir());
    ShardHeader h;
    REQUIRE(shard_read_header(trainpath, &h, err) == 0, "%s", err);
    REQUIRE(h.num_tokens > 1100, "a text of %llu training tokens", (unsigned long long)h.num_tokens);
    char per[32];
    snprintf(per, sizeof per, "%llu", (unsigned long long)h.num_tokens - 1); /* one shard and one token over */
    const char *streamed[] = {"prepare", "--tokenizer", tokpath, "--shard-tokens", per, "-o", out, text};
    REQUIRE(run_prepare(8, streamed) == 0, "streamed");
    Tokenizer *tok = tokenizer_load(tokpath, err);
    REQUIRE(tok, "%s", err);
    uint64_t n = 0;
    int shards = 0;
    uint32_t *ids = read_numbered(out, "train", h.num_tokens - 1, tokenizer_fingerprint(tok), 300, &n, &shards);
    CHECK(ids && shards == 1 && n == h.num_tokens, "%llu tokens in %d shard(s), wanted all %llu in one",
          (unsigned long long)n, shards, (unsigned long long)h.num_tokens);
    free(ids);
    tokenizer_free(tok);
}

static int count_named(const char *dir, const char *prefix) {
    int n = 0;
    for (int k = 0; k < 1000; k++) {
        char path[1300];
        snprintf(path, sizeof path, "%s/%s_%06d.bin", dir, prefix, k);
        n += access(path, F_OK) == 0;
    }
    return n;
}

/* A folder holds one set: a streamed set with fewer shards takes the earlier one's extra shards
 * away, a set of train.bin and val.bin takes numbered shards away and the other way round, and a
 * numbered name that is not our shard is refused before any work and kept. */
TEST(a_prepare_in_shards_replaces_the_earlier_set_whole) {
    char text[1100], out[1100], tokpath[1200], path[1300], log[1200];
    snprintf(out, sizeof out, "%s/set", test_tmpdir());
    snprintf(log, sizeof log, "%s/prepare.log", test_tmpdir());
    REQUIRE(prepare_our_tokenizer("tok", 200000, 4, text, tokpath) == 0, "the tokenizer");
    const char *small[] = {"prepare", "--tokenizer", tokpath, "--shard-tokens", "1024", "-o", out, text};
    REQUIRE(run_prepare(8, small) == 0, "shards of 1024");
    const int many = count_named(out, "train");
    CHECK(many > 10, "%d shards of 1024", many);
    const char *large[] = {"prepare", "--tokenizer", tokpath, "--shard-tokens", "8192", "-o", out, text};
    REQUIRE(run_prepare(8, large) == 0, "shards of 8192");
    const int fewer = count_named(out, "train");
    CHECK(fewer > 1 && fewer < many && count_named(out, "val") == 1, "%d shards of 8192 after %d of 1024", fewer,
          many);
    const char *whole[] = {"prepare", "--tokenizer", tokpath, "-o", out, text};
    REQUIRE(run_prepare(6, whole) == 0, "the text whole into the same folder");
    snprintf(path, sizeof path, "%s/train.bin", out);
    CHECK(access(path, F_OK) == 0 && count_named(out, "train") == 0 && count_named(out, "val") == 0,
          "the numbered shards are gone beside train.bin");
    REQUIRE(run_prepare(8, small) == 0, "streamed again");
    CHECK(access(path, F_OK) != 0 && count_named(out, "train") == many, "train.bin is gone beside %d shards",
          count_named(out, "train"));
    /* a numbered name that is another tool's file */
    snprintf(path, sizeof path, "%s/train_%06d.bin", out, many + 3);
    write_text_file(path, "raw uint16 tokens", 17);
    unlink(log);
    CHECK(run_prepare(8, large) == 1, "a foreign numbered file is a runtime error");
    char *said = read_text(log);
    CHECK(said && strstr(said, "holds no token shard of fusedgpt's") && !strstr(said, "encoding"),
          "refused before work: %s", said ? said : "");
    free(said);
    size_t n;
    char *kept = read_file(path, &n);
    CHECK(kept && n == 17, "the foreign file was changed");
    free(kept);
    CHECK(count_named(out, "train") == many + 1, "the earlier set stays whole");
    unlink(path);
    /* a file the training pattern would read beside the set: refused for a numbered set, and no
     * concern of a set of train.bin and val.bin */
    snprintf(path, sizeof path, "%s/val_old.bin", out);
    write_text_file(path, "their shard", 11);
    unlink(log);
    CHECK(run_prepare(8, large) == 1, "a stray val_old.bin is a runtime error");
    said = read_text(log);
    CHECK(said && strstr(said, "val_old.bin is no numbered shard, but the pattern of the validation shards") &&
              strstr(said, "('val_*.bin' there)") && !strstr(said, "encoding"),
          "refused before work: %s", said ? said : "");
    free(said);
    CHECK(count_named(out, "train") == many && access(path, F_OK) == 0, "the earlier set and the stray file stay");
    REQUIRE(run_prepare(6, whole) == 0, "the text whole beside val_old.bin");
    CHECK(access(path, F_OK) == 0, "the stray file stays");
}

/* A text the tokenizer refuses midway (Qwen 2's NFC normalizer, in the third file) is named by its
 * file and its byte there, and leaves no staged shard and no folder behind. */
TEST(a_prepare_in_shards_refused_midway_names_the_file_and_leaves_nothing) {
    char files[6][1100], out[1100], log[1200];
    REQUIRE(write_documents(files, "<|endoftext|>") == 6, "writing the documents");
    FILE *f = fopen(files[2], "ab");
    REQUIRE(f && fputs("a cafe\xcc\x81 with a combining accent\n", f) >= 0 && fclose(f) == 0, "appending");
    struct stat sb;
    REQUIRE(stat(files[2], &sb) == 0, "%s", files[2]);
    snprintf(out, sizeof out, "%s/refused", test_tmpdir());
    snprintf(log, sizeof log, "%s/prepare.log", test_tmpdir());
    unlink(log);
    const char *argv[] = {"prepare", "--tokenizer", "tests/fixtures/hf_qwen2_style.json", "--shard-tokens", "1024",
                          "-o", out, files[0], files[1], files[2], files[3], files[4], files[5]};
    CHECK(run_prepare(13, argv) == 1, "a text NFC rewrites is a runtime error");
    char want[1300];
    snprintf(want, sizeof want, "%s: the text holds U+0301 at byte %lld", files[2], (long long)sb.st_size - 27);
    char *said = read_text(log);
    CHECK(said && strstr(said, want), "wanted '%s' in: %s", want, said ? said : "");
    free(said);
    CHECK(access(out, F_OK) != 0, "the folder %s it made is left", out);
}

/* --shard-tokens streams through a given tokenizer, into shards of at least 1024 tokens, from text
 * files only. */
TEST(prepare_shard_tokens_flags_are_checked) {
    char text[1100], out[1100];
    snprintf(text, sizeof text, "%s/words.txt", test_tmpdir());
    snprintf(out, sizeof out, "%s/x", test_tmpdir());
    write_lines(text, 400, 3);
    const char *no_tok[] = {"prepare", "--shard-tokens", "4096", "-o", out, text};
    CHECK(run_prepare(6, no_tok) == 2, "--shard-tokens without --tokenizer is a command-line error");
    const char *few[] = {"prepare", "--tokenizer", "tests/fixtures/hf_llama3_bos.json", "--shard-tokens", "1023",
                         "-o", out, text};
    CHECK(run_prepare(8, few) == 2, "--shard-tokens 1023 is a command-line error");
    const char *word[] = {"prepare", "--tokenizer", "tests/fixtures/hf_llama3_bos.json", "--shard-tokens", "many",
                          "-o", out, text};
    CHECK(run_prepare(8, word) == 2, "--shard-tokens many is a command-line error");
    const char *corpus[] = {"prepare", "--default-corpus", "--shard-tokens", "4096"};
    CHECK(run_prepare(4, corpus) == 2, "--shard-tokens with --default-corpus is a command-line error");
    CHECK(access(out, F_OK) != 0, "nothing was made");
}

/* A shard's stored tokens, marks kept (NULL after a failed check). */
static uint32_t *shard_words(const char *path, uint64_t *n) {
    char err[ERR_LEN];
    uint32_t *tokens = NULL;
    ShardHeader h;
    if (shard_read(path, UINT32_MAX, &tokens, n, &h, err) != 0) CHECK(0, "%s", err);
    return tokens;
}

/* The shards in dir against the fixture set's expected words (key "train", "val" after prefix). */
static void expect_pair_shards(const char *dir, const JsonValue *set, const char *prefix, const char *name) {
    for (int part = 0; part < 2; part++) {
        char key[64], out[1300];
        snprintf(key, sizeof key, "%s%s", prefix, part ? "val" : "train");
        const JsonValue *want = json_get(set, key);
        snprintf(out, sizeof out, "%s/%s", dir, part ? "val.bin" : "train.bin");
        uint64_t got_n = 0;
        uint32_t *got = want ? shard_words(out, &got_n) : NULL;
        size_t differ = want && got_n == want->len ? want->len : 0;
        for (size_t i = 0; got && got_n == want->len && i < want->len; i++)
            if (got[i] == (uint32_t)want->items[i].number) differ--;
        CHECK(got && got_n == want->len && differ == 0, "%s %s: %llu tokens (want %zu), %zu differ in id or mark",
              name, key, (unsigned long long)got_n, want ? want->len : 0, differ);
        free(got);
    }
}

/* Conversations (TRL's conversational prompt-completion lines, with tools and chat_template_kwargs,
 * and a line of messages alone) through three tokenizers, each beside a tokenizer_config.json whose
 * chat template renders them: the shards hold the ids and marks that transformers' apply_chat_template
 * and TRL's rule give (tests/fixtures/chat_pairs.json, from dev/check/chat_pairs_check.py). Without
 * a chat template the line is refused, naming the fix. */
TEST(prepare_prompt_completion_renders_conversations_with_the_chat_template_as_trl_tokenizes_them) {
    size_t len;
    char *text = read_file("tests/fixtures/chat_pairs.json", &len), err[ERR_LEN];
    REQUIRE(text, "tests/fixtures/chat_pairs.json is missing");
    JsonValue *sets = json_parse(text, len, "chat_pairs.json", err);
    REQUIRE(sets && sets->type == JSON_ARRAY && sets->len == 3, "%s", err);
    for (size_t k = 0; k < sets->len; k++) {
        const JsonValue *set = &sets->items[k], *lines = json_get(set, "lines");
        const char *name = json_string(json_get(set, "tokenizer"));
        char dir[1100], path[1200], fixture[300];
        snprintf(dir, sizeof dir, "%s/chat_%s", test_tmpdir(), name);
        REQUIRE(mkdir(dir, 0755) == 0, "%s", dir);
        snprintf(fixture, sizeof fixture, "tests/fixtures/%s.json", name);
        snprintf(path, sizeof path, "%s/tokenizer.json", dir);
        size_t n;
        char *tok_json = read_file(fixture, &n);
        REQUIRE(tok_json, "%s", fixture);
        write_text_file(path, tok_json, n);
        free(tok_json);
        /* the config as the fixture holds it, written back as JSON text */
        const JsonValue *config = json_get(set, "config");
        snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
        FILE *f = fopen(path, "w");
        REQUIRE(f, "%s", path);
        fputs("{", f);
        for (size_t m = 0; m < config->len; m++) {
            const JsonValue *v = &config->members[m].value;
            fprintf(f, "%s\"%s\": ", m ? ", " : "", config->members[m].key);
            if (v->type == JSON_NULL) {
                fputs("null", f);
                continue;
            }
            fputc('"', f);
            for (size_t c = 0; c < v->len; c++) {
                const unsigned char ch = (unsigned char)v->string[c];
                if (ch == '"' || ch == '\\') fprintf(f, "\\%c", ch);
                else if (ch == '\n') fputs("\\n", f);
                else if (ch < 0x20) fprintf(f, "\\u%04x", ch);
                else fputc(ch, f);
            }
            fputc('"', f);
        }
        fputs("}\n", f);
        fclose(f);
        snprintf(path, sizeof path, "%s/pairs.jsonl", dir);
        f = fopen(path, "w");
        REQUIRE(f, "%s", path);
        for (size_t m = 0; m < lines->len; m++) fprintf(f, "%s\n", json_string(&lines->items[m]));
        fclose(f);
        char tok_path[1200], set_dir[1200];
        snprintf(tok_path, sizeof tok_path, "%s/tokenizer.json", dir);
        snprintf(set_dir, sizeof set_dir, "%s/set", dir);
        const char *argv[] = {"prepare", "--prompt-completion", "--tokenizer", tok_path, "--val-fraction", "0.2", "-o",
                              set_dir, path};
        REQUIRE(run_prepare(9, argv) == 0, "%s: prepare of the conversations failed", name);
        expect_pair_shards(set_dir, set, "", name);
        /* TRL's assistant_only_loss: only the {% generation %} text is a target */
        char only_dir[1200];
        snprintf(only_dir, sizeof only_dir, "%s/set_assistant", dir);
        const char *only[] = {"prepare", "--prompt-completion", "--assistant-only-loss", "--tokenizer", tok_path,
                              "--val-fraction", "0.2", "-o", only_dir, path};
        REQUIRE(run_prepare(10, only) == 0, "%s: prepare --assistant-only-loss failed", name);
        expect_pair_shards(only_dir, set, "assistant_", name);
        if (k == 0) { /* no template: refused, naming the fix */
            snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
            REQUIRE(unlink(path) == 0, "%s", path);
            char log[1100];
            snprintf(log, sizeof log, "%s/prepare.log", test_tmpdir());
            unlink(log);
            snprintf(set_dir, sizeof set_dir, "%s/set_without", dir); /* argv's -o */
            snprintf(path, sizeof path, "%s/pairs.jsonl", dir);
            CHECK(run_prepare(9, argv) == 1, "a conversation without a chat template was not refused");
            char *said = read_text(log);
            CHECK(said && strstr(said, "line 1 holds a conversation") && strstr(said, "chat_template.jinja beside"),
                  "%s", said ? said : "");
            free(said);
            /* the same template in a chat_template.jinja beside the tokenizer: the same shards */
            snprintf(path, sizeof path, "%s/chat_template.jinja", dir);
            const JsonValue *tpl = json_get(config, "chat_template");
            write_text_file(path, tpl->string, tpl->len);
            snprintf(set_dir, sizeof set_dir, "%s/set_jinja", dir);
            snprintf(path, sizeof path, "%s/pairs.jsonl", dir);
            REQUIRE(run_prepare(9, argv) == 0, "prepare with chat_template.jinja failed");
            char a[1300], b[1300];
            for (int part = 0; part < 2; part++) {
                snprintf(a, sizeof a, "%s/set/%s", dir, part ? "val.bin" : "train.bin");
                snprintf(b, sizeof b, "%s/set_jinja/%s", dir, part ? "val.bin" : "train.bin");
                CHECK(same_bytes(a, b), "with chat_template.jinja, %s differs", b);
            }
        }
    }
    json_free(sets);
    free(text);
}

/* The examples' expected ids, as TRL tokenizes a prompt-completion pair: tokenizer(prompt +
 * completion + eos) (eos only where the completion lacks it), its first len(tokenizer(prompt)) ids
 * marked SHARD_NO_LOSS. Appends to ids; returns the new count. */
static size_t expected_pair_ids(const Tokenizer *tok, const char *prompt, const char *completion, const char *eos,
                                uint32_t *ids, size_t n) {
    char whole[512];
    const size_t lc = strlen(completion), le = strlen(eos);
    const int has_eos = lc >= le && strcmp(completion + lc - le, eos) == 0;
    snprintf(whole, sizeof whole, "%s%s%s", prompt, completion, has_eos ? "" : eos);
    size_t np, nw;
    uint32_t *p = tokenizer_encode_alloc(tok, prompt, strlen(prompt), TOKENIZER_SPECIALS, &np);
    uint32_t *w = tokenizer_encode_alloc(tok, whole, strlen(whole), TOKENIZER_SPECIALS, &nw);
    for (size_t i = 0; i < nw; i++) ids[n + i] = w[i] | (i < np ? SHARD_NO_LOSS : 0) | (i == 0 ? SHARD_DOC_START : 0);
    free(w);
    free(p);
    return n + nw;
}

/* Ten pairs (an extra key, a blank line, one completion that ends with the eos text already)
 * through Llama 3's tokenizer beside a tokenizer_config.json whose eos_token (an object, as older
 * transformers wrote it) is not the document separator: each example is its BOS and prompt, marked,
 * then its completion and one eos, not marked; the last 20 % of the examples are validation. */
TEST(prepare_prompt_completion_marks_each_prompts_ids_as_no_target_and_ends_completions_with_eos) {
    char dir[1100], tok_path[1200], config[1200], pairs[1100], out[1100], path[1200], err[ERR_LEN];
    snprintf(dir, sizeof dir, "%s/model", test_tmpdir());
    snprintf(tok_path, sizeof tok_path, "%s/tokenizer.json", dir);
    snprintf(config, sizeof config, "%s/tokenizer_config.json", dir);
    snprintf(pairs, sizeof pairs, "%s/pairs.jsonl", test_tmpdir());
    snprintf(out, sizeof out, "%s/sft", test_tmpdir());
    REQUIRE(make_dirs(dir) == 0, "mkdir");
    size_t len;
    char *json = read_file("tests/fixtures/hf_llama3_bos.json", &len);
    REQUIRE(json && write_file_whole(tok_path, json, len) == 0, "tokenizer copy");
    free(json);
    const char *eos = "<|reserved_special_token_0|>";
    char text[4096];
    snprintf(text, sizeof text, "{\"eos_token\": {\"content\": \"%s\", \"lstrip\": false}}", eos);
    REQUIRE(write_file_whole(config, text, strlen(text)) == 0, "config");
    const char *prompt[10], *completion[10];
    char p_buf[10][64], c_buf[10][96];
    size_t at = 0;
    for (int i = 0; i < 10; i++) {
        snprintf(p_buf[i], sizeof p_buf[i], "Q%d: name a color.\nA:", i);
        snprintf(c_buf[i], sizeof c_buf[i], " blue and red%s", eos);
        if (i != 3) snprintf(c_buf[i], sizeof c_buf[i], " green, %d times", i);
        prompt[i] = p_buf[i], completion[i] = c_buf[i];
    }
    /* the prompts hold a newline: written escaped, as JSON Lines must */
    for (int i = 0; i < 10; i++)
        at += (size_t)snprintf(text + at, sizeof text - at, "{\"id\": %d, \"prompt\": \"Q%d: name a color.\\nA:\", "
                               "\"completion\": \"%s\"}\n%s", i, i, completion[i], i == 4 ? "  \n" : "");
    write_text_file(pairs, text, at);
    const char *argv[] = {"prepare", "--prompt-completion", "--tokenizer", tok_path, "-o", out, "--val-fraction", "0.2",
                          pairs};
    REQUIRE(run_prepare(9, argv) == 0, "prepare --prompt-completion failed");
    /* the command it suggests keeps each example whole in a window */
    snprintf(path, sizeof path, "%s/prepare.log", test_tmpdir());
    char *said = read_text(path);
    CHECK(said && strstr(said, "train with: ./train -i ") && strstr(said, " --pack bfd\n"), "%s", said ? said : "");
    free(said);
    Tokenizer *tok = tokenizer_load(tok_path, err);
    REQUIRE(tok, "%s", err);
    uint32_t want[2][1024];
    size_t nwant[2] = {0, 0};
    for (int i = 0; i < 10; i++) nwant[i >= 8] = expected_pair_ids(tok, prompt[i], completion[i], eos, want[i >= 8],
                                                                    nwant[i >= 8]);
    const uint32_t bos = shard_token_id(want[0][0]), eos_id = want[0][nwant[0] - 1];
    for (int k = 0; k < 2; k++) {
        snprintf(path, sizeof path, "%s/%s", out, k ? "val.bin" : "train.bin");
        uint32_t *got;
        uint64_t n;
        ShardHeader h;
        REQUIRE(shard_read(path, tokenizer_vocab_size(tok), &got, &n, &h, err) == 0, "%s", err);
        CHECK(h.flags == (SHARD_LOSS_MASK | SHARD_DOCUMENTS) && h.tokenizer == tokenizer_fingerprint(tok),
              "%s: flags %u", path, h.flags);
        CHECK(n == nwant[k] && memcmp(got, want[k], n * sizeof *got) == 0, "%s: %llu ids, %zu expected, or others",
              path, (unsigned long long)n, nwant[k]);
        /* each example: BOS first and marked, its last id the eos, once and not marked */
        uint64_t examples = 0, eos_seen = 0;
        for (uint64_t i = 0; i < n; i++) {
            examples += got[i] == (bos | SHARD_NO_LOSS | SHARD_DOC_START); /* each example a document */
            eos_seen += got[i] == eos_id;
            CHECK(got[i] != (eos_id | SHARD_NO_LOSS), "%s: a marked eos at %llu", path, (unsigned long long)i);
        }
        CHECK(examples == (k ? 2u : 8u) && eos_seen == examples, "%s: %llu examples, %llu eos", path,
              (unsigned long long)examples, (unsigned long long)eos_seen);
        free(got);
    }
    size_t n_eos;
    uint32_t *e = tokenizer_encode_alloc(tok, eos, strlen(eos), TOKENIZER_SPECIALS, &n_eos); /* BOS, then it */
    CHECK(n_eos == 2 && e[1] == eos_id, "the examples end with %u, not the config's eos_token", eos_id);
    free(e);
    tokenizer_free(tok);
}

/* --assistant-only-loss takes a template with {% generation %} marks (the tokenizer's, or one given
 * by --chat-template): without marks it names the flag that brings them; a conversation with no
 * marked text is refused by its line, as TRL refuses it; each flag without --prompt-completion is a
 * usage error; a --chat-template that cannot be read is named. The marked template's targets are
 * the assistant's text and end token only. */
TEST(prepare_assistant_only_loss_needs_generation_marks_and_names_what_is_missing) {
    char dir[1100], tok_path[1200], config[1200], pairs[1100], out[1100], log[1100], marked[1200];
    snprintf(dir, sizeof dir, "%s/aol_model", test_tmpdir());
    snprintf(tok_path, sizeof tok_path, "%s/tokenizer.json", dir);
    snprintf(config, sizeof config, "%s/tokenizer_config.json", dir);
    snprintf(marked, sizeof marked, "%s/training.jinja", dir);
    snprintf(pairs, sizeof pairs, "%s/aol.jsonl", test_tmpdir());
    snprintf(out, sizeof out, "%s/sft_aol", test_tmpdir());
    snprintf(log, sizeof log, "%s/prepare.log", test_tmpdir());
    REQUIRE(make_dirs(dir) == 0, "mkdir");
    size_t len;
    char *json = read_file("tests/fixtures/hf_qwen2_style.json", &len);
    REQUIRE(json && write_file_whole(tok_path, json, len) == 0, "tokenizer copy");
    free(json);
    const char *plain = "{\"eos_token\": \"<|im_end|>\", \"chat_template\": \"{% for m in messages %}<|im_start|>"
                        "{{ m.role }}\\n{{ m.content }}<|im_end|>\\n{% endfor %}\"}";
    REQUIRE(write_file_whole(config, plain, strlen(plain)) == 0, "config");
    const char *tpl = "{% for m in messages %}<|im_start|>{{ m.role }}\n{% if m.role == 'assistant' %}{% generation %}"
                      "{{ m.content }}<|im_end|>{% endgeneration %}{% else %}{{ m.content }}<|im_end|>{% endif %}\n"
                      "{% endfor %}";
    write_text_file(marked, tpl, strlen(tpl));
    const char *lines = "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", "
                        "\"content\": \"hello there\"}]}\n"
                        "{\"messages\": [{\"role\": \"user\", \"content\": \"bye\"}, {\"role\": \"assistant\", "
                        "\"content\": \"see you\"}]}\n";
    write_text_file(pairs, lines, strlen(lines));
    const char *unmarked_run[] = {"prepare", "--prompt-completion", "--assistant-only-loss", "--tokenizer", tok_path,
                                  "-o", out, pairs};
    unlink(log);
    CHECK(run_prepare(8, unmarked_run) == 1, "a template without marks was taken");
    char *said = read_text(log);
    CHECK(said && strstr(said, "--assistant-only-loss: the chat template (tokenizer_config.json) marks no assistant "
                               "text with {% generation %}: pass a template with those marks by --chat-template FILE"),
          "%s", said ? said : "");
    free(said);
    const char *marked_run[] = {"prepare", "--prompt-completion", "--assistant-only-loss", "--chat-template", marked,
                                "--tokenizer", tok_path, "-o", out, pairs};
    unlink(log);
    REQUIRE(run_prepare(10, marked_run) == 0, "prepare with a marked --chat-template failed");
    said = read_text(log);
    CHECK(said && !strstr(said, "not trained to end its turns"), "a template whose marks hold <|im_end|>: %s",
          said ? said : "");
    free(said);
    /* marks that leave the end-of-turn token out: taken, with TRL's warning as a note */
    char short_marks[1200], short_out[1200];
    snprintf(short_marks, sizeof short_marks, "%s/short.jinja", dir);
    snprintf(short_out, sizeof short_out, "%s_short", out);
    const char *short_tpl = "{% for m in messages %}<|im_start|>{{ m.role }}\n{% if m.role == 'assistant' %}"
                            "{% generation %}{{ m.content }}{% endgeneration %}{% else %}{{ m.content }}{% endif %}"
                            "<|im_end|>\n{% endfor %}";
    write_text_file(short_marks, short_tpl, strlen(short_tpl));
    const char *short_run[] = {"prepare", "--prompt-completion", "--assistant-only-loss", "--chat-template", short_marks,
                               "--tokenizer", tok_path, "-o", short_out, pairs};
    unlink(log);
    CHECK(run_prepare(10, short_run) == 0, "marks without the end-of-turn token were refused");
    said = read_text(log);
    CHECK(said && strstr(said, "does not end with its end-of-turn token, so the model is not trained to end its turns"),
          "%s", said ? said : "");
    free(said);
    /* the targets decode to the assistant's text and its end token, nothing else */
    Tokenizer *tok = tokenizer_load(tok_path, (char[ERR_LEN]){0});
    REQUIRE(tok, "tokenizer");
    char shard[1200], text[256];
    snprintf(shard, sizeof shard, "%s/train.bin", out);
    uint64_t n = 0;
    uint32_t *words = shard_words(shard, &n), targets[64];
    size_t n_targets = 0;
    for (uint64_t i = 0; words && i < n && n_targets < 64; i++)
        if (!(words[i] & SHARD_NO_LOSS)) targets[n_targets++] = words[i] & ~(SHARD_NO_LOSS | SHARD_DOC_START);
    const size_t got = tokenizer_decode(tok, targets, n_targets, text, sizeof text - 1);
    text[got < sizeof text ? got : sizeof text - 1] = 0;
    CHECK(!strcmp(text, "hello there<|im_end|>"), "the targets decode to '%s'", text);
    free(words);
    tokenizer_free(tok);
    /* a conversation with nothing marked has no target: refused by its line */
    const char *no_reply = "{\"messages\": [{\"role\": \"user\", \"content\": \"only a question\"}]}\n";
    write_text_file(pairs, no_reply, strlen(no_reply));
    unlink(log);
    CHECK(run_prepare(10, marked_run) == 1, "a conversation without marked text was taken");
    said = read_text(log);
    CHECK(said && strstr(said, "aol.jsonl line 1: the chat template marks no assistant text in it"), "%s",
          said ? said : "");
    free(said);
    struct {
        int argc;
        const char *argv[8], *says;
        int rc;
    } cases[] = {
        {5, {"prepare", "--assistant-only-loss", "--tokenizer", tok_path, pairs}, "--assistant-only-loss: applies to "
                                                                                  "the conversations of --prompt-completion", 2},
        {6, {"prepare", "--chat-template", marked, "--tokenizer", tok_path, pairs}, "--chat-template: applies to the "
                                                                                    "conversations of --prompt-completion", 2},
        {7, {"prepare", "--prompt-completion", "--chat-template", "no/such.jinja", "--tokenizer", tok_path, pairs},
         "no/such.jinja", 1},
    };
    write_text_file(pairs, lines, strlen(lines));
    /* a special token of the config that the tokenizer lacks (transformers would add it as a new id) */
    const char *foreign = "{\"eos_token\": \"<|not_a_token|>\", \"chat_template\": \"{{ messages[0].content }}\"}";
    REQUIRE(write_file_whole(config, foreign, strlen(foreign)) == 0, "config");
    const char *foreign_run[] = {"prepare", "--prompt-completion", "--tokenizer", tok_path, "-o", out, pairs};
    unlink(log);
    CHECK(run_prepare(7, foreign_run) == 1, "a config naming a token the tokenizer lacks was taken");
    said = read_text(log);
    CHECK(said && strstr(said, "the eos_token \"<|not_a_token|>\" of the tokenizer_config.json beside the tokenizer "
                               "is none of the tokenizer's special tokens"), "%s", said ? said : "");
    free(said);
    /* a ByteLevel post-processor that trims offsets would move the mask's edges: refused, not guessed */
    char trimming_dir[1100], trimming[1200];
    snprintf(trimming_dir, sizeof trimming_dir, "%s/trimming", test_tmpdir());
    snprintf(trimming, sizeof trimming, "%s/tokenizer.json", trimming_dir);
    const char *trim_edit[] = {"\"trim_offsets\": false", "\"trim_offsets\": true"};
    REQUIRE(make_dirs(trimming_dir) == 0 &&
                write_edited_copy("tests/fixtures/hf_llama3_bos.json", trimming, trim_edit, 1) == 0, "%s", trimming);
    const char *trim_run[] = {"prepare", "--prompt-completion", "--assistant-only-loss", "--chat-template", marked,
                              "--tokenizer", trimming, "-o", out, pairs};
    unlink(log);
    CHECK(run_prepare(10, trim_run) == 1, "a tokenizer that trims offsets was taken");
    said = read_text(log);
    CHECK(said && strstr(said, "--assistant-only-loss cannot place the marked text on this tokenizer's tokens: this "
                               "tokenizer's ByteLevel post-processor trims its offsets"), "%s", said ? said : "");
    free(said);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        unlink(log);
        const int rc = run_prepare(cases[c].argc, cases[c].argv);
        said = read_text(log);
        CHECK(rc == cases[c].rc && said && strstr(said, cases[c].says), "case %zu: exit %d, '%s'", c, rc,
              said ? said : "");
        free(said);
    }
}

/* TRL's language-modeling form, {"text": "..."}: tokenizer(text + eos), eos added unless the text
 * ends with it, every token a target and the first marked as an example's start; under
 * --assistant-only-loss such a line is refused, as TRL refuses a dataset that is no conversation. */
TEST(prepare_prompt_completion_takes_text_lines_as_trls_language_modeling_form) {
    char dir[1100], tok_path[1200], config[1200], pairs[1100], out[1100], log[1100], shard[1200];
    snprintf(dir, sizeof dir, "%s/text_model", test_tmpdir());
    snprintf(tok_path, sizeof tok_path, "%s/tokenizer.json", dir);
    snprintf(config, sizeof config, "%s/tokenizer_config.json", dir);
    snprintf(pairs, sizeof pairs, "%s/texts.jsonl", test_tmpdir());
    snprintf(out, sizeof out, "%s/sft_text", test_tmpdir());
    snprintf(log, sizeof log, "%s/prepare.log", test_tmpdir());
    REQUIRE(make_dirs(dir) == 0, "mkdir");
    size_t len;
    char *json = read_file("tests/fixtures/hf_llama3_bos.json", &len), err[ERR_LEN];
    REQUIRE(json && write_file_whole(tok_path, json, len) == 0, "tokenizer copy");
    free(json);
    const char *cfg = "{\"eos_token\": \"<|end_of_text|>\"}";
    REQUIRE(write_file_whole(config, cfg, strlen(cfg)) == 0, "config");
    const char *texts[] = {"Hello world, a text to learn.", "Already ended<|end_of_text|>"};
    const char *lines = "{\"text\": \"Hello world, a text to learn.\", \"id\": 1}\n"
                        "{\"text\": \"Already ended<|end_of_text|>\"}\n";
    write_text_file(pairs, lines, strlen(lines));
    const char *argv[] = {"prepare", "--prompt-completion", "--tokenizer", tok_path, "--val-fraction", "0.5", "-o", out,
                          pairs};
    REQUIRE(run_prepare(9, argv) == 0, "prepare of text lines failed");
    Tokenizer *tok = tokenizer_load(tok_path, err);
    REQUIRE(tok, "%s", err);
    for (int part = 0; part < 2; part++) {
        char text[128];
        snprintf(text, sizeof text, "%s%s", texts[part], part ? "" : "<|end_of_text|>");
        size_t n_want = 0;
        uint32_t *want = tokenizer_encode_alloc(tok, text, strlen(text), TOKENIZER_SPECIALS, &n_want);
        snprintf(shard, sizeof shard, "%s/%s", out, part ? "val.bin" : "train.bin");
        uint64_t n = 0;
        uint32_t *got = shard_words(shard, &n);
        size_t differ = n == n_want ? 0 : n_want + 1;
        for (size_t i = 0; got && want && n == n_want && i < n; i++)
            differ += got[i] != (want[i] | (i == 0 ? SHARD_DOC_START : 0));
        CHECK(want && got && n_want > 3 && differ == 0, "%s: %llu ids (want %zu), %zu differ", texts[part],
              (unsigned long long)n, n_want, differ);
        free(want);
        free(got);
    }
    tokenizer_free(tok);
    const char *only[] = {"prepare", "--prompt-completion", "--assistant-only-loss", "--tokenizer", tok_path, "-o", out,
                          pairs};
    unlink(log);
    CHECK(run_prepare(8, only) == 1, "a text line was taken under --assistant-only-loss");
    char *said = read_text(log);
    CHECK(said && strstr(said, "texts.jsonl line 1 is no conversation, and --assistant-only-loss takes conversations "
                               "only"), "%s", said ? said : "");
    free(said);
}

/* The tokenizer_config.json beside the tokenizer decides how completions end, so one that cannot
 * do so is refused: not JSON, not an object, an eos_token that is no text, or one that is not a
 * special token of the tokenizer (transformers would add it as a new token, which the model has no
 * row for; ours would spell it in ordinary tokens). A config without the key (or a null one) ends
 * them with the separator, and says so. */
TEST(prepare_prompt_completion_refuses_a_tokenizer_config_that_names_no_usable_eos) {
    char dir[1100], tok_path[1200], config[1200], pairs[1100], out[1100], log[1100];
    snprintf(dir, sizeof dir, "%s/eos_model", test_tmpdir());
    snprintf(tok_path, sizeof tok_path, "%s/tokenizer.json", dir);
    snprintf(config, sizeof config, "%s/tokenizer_config.json", dir);
    snprintf(pairs, sizeof pairs, "%s/eos_pairs.jsonl", test_tmpdir());
    snprintf(out, sizeof out, "%s/sft_eos", test_tmpdir());
    snprintf(log, sizeof log, "%s/prepare.log", test_tmpdir());
    REQUIRE(make_dirs(dir) == 0, "mkdir");
    size_t len;
    char *json = read_file("tests/fixtures/hf_llama3_bos.json", &len);
    REQUIRE(json && write_file_whole(tok_path, json, len) == 0, "tokenizer copy");
    free(json);
    const char *lines = "{\"prompt\": \"Q: a color?\\nA:\", \"completion\": \" blue\"}\n"
                        "{\"prompt\": \"Q: a number?\\nA:\", \"completion\": \" two\"}\n";
    write_text_file(pairs, lines, strlen(lines));
    const struct {
        const char *config;
        int rc;
        const char *says;
    } cases[] = {
        {"{\"eos_token\": \"<|nonexistent|>\"}", 1, "the eos_token \"<|nonexistent|>\" of the tokenizer_config.json beside "
                                                 "the tokenizer is not one of the tokenizer's special tokens"},
        {"{\"eos_token\": \"hello\"}", 1, "\"hello\" of the tokenizer_config.json beside the tokenizer is not one of"},
        {"{\"eos_token\": ", 1, "the tokenizer_config.json beside the tokenizer is not valid JSON: line 1 column 15"},
        {"", 1, "the tokenizer_config.json beside the tokenizer is not valid JSON"},
        {"[1]", 1, "the tokenizer_config.json beside the tokenizer is not a JSON object (fix it, or remove it"},
        {"{\"eos_token\": 5}", 1, "the eos_token of the tokenizer_config.json beside the tokenizer is a number, not"},
        {"{\"eos_token\": {\"content\": \"\"}}", 1, "is empty, not a token's text"},
        {"{\"bos_token\": \"<|begin_of_text|>\"}", 0, "names no eos_token, so each completion ends with the document "
                                                   "separator <|end_of_text|>"},
        {"{\"eos_token\": null}", 0, "names no eos_token"},
        {"{\"eos_token\": \"<|reserved_special_token_0|>\"}", 0, "(each completion or text ends with <|reserved_special_token_0|>)"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        REQUIRE(write_file_whole(config, cases[c].config, strlen(cases[c].config)) == 0, "config");
        unlink(log);
        const char *argv[] = {"prepare", "--prompt-completion", "--tokenizer", tok_path, "-o", out, pairs};
        const int rc = run_prepare(7, argv);
        char *said = read_text(log);
        CHECK(rc == cases[c].rc && said && strstr(said, cases[c].says), "config '%s': exit %d, '%s' lacks '%s'",
              cases[c].config, rc, said ? said : "", cases[c].says);
        free(said);
    }
}

TEST(prepare_prompt_completion_names_the_line_and_the_flag_that_is_wrong) {
    char pairs[1100], out[1100], log[1100];
    snprintf(pairs, sizeof pairs, "%s/bad.jsonl", test_tmpdir());
    snprintf(out, sizeof out, "%s/sft_bad", test_tmpdir());
    snprintf(log, sizeof log, "%s/prepare.log", test_tmpdir());
    const char *tok = "tests/fixtures/hf_llama3_bos.json";
    const struct {
        const char *lines, *says;
    } cases[] = {
        {"{\"prompt\": \"a\", \"completion\": \"b\"}\n{\"prompt\": \"a\" \"completion\": \"b\"}\n", "bad.jsonl line 2"},
        {"{\"prompt\": \"a\", \"completion\": \"b\"}\n\n{\"prompt\": \"a\"}\n", "line 3: no \"completion\""},
        {"{\"prompt\": 5, \"completion\": \"b\"}\n", "line 1: \"prompt\" is a number, not a string"},
        {"[\"a\", \"b\"]\n", "line 1 is an array, not an object"},
        {"{\"prompt\": \"a\", \"completion\": \"b\"}\n", "1 prompt-completion example(s) in all"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        write_text_file(pairs, cases[c].lines, strlen(cases[c].lines));
        unlink(log);
        const char *argv[] = {"prepare", "--prompt-completion", "--tokenizer", tok, "-o", out, pairs};
        CHECK(run_prepare(7, argv) == 1, "case %zu: not refused", c);
        char *said = read_text(log);
        CHECK(said && strstr(said, cases[c].says), "case %zu: '%s' lacks '%s'", c, said ? said : "", cases[c].says);
        free(said);
    }
    const char *no_tok[] = {"prepare", "--prompt-completion", "-o", out, pairs};
    CHECK(run_prepare(5, no_tok) == 2, "--prompt-completion without --tokenizer is a command-line error");
    const char *streamed[] = {"prepare", "--prompt-completion", "--tokenizer", tok, "--shard-tokens", "4096", "-o", out,
                              pairs};
    CHECK(run_prepare(9, streamed) == 2, "--prompt-completion with --shard-tokens is a command-line error");
    const char *valued[] = {"prepare", "--prompt-completion=1", "--tokenizer", tok, "-o", out, pairs};
    CHECK(run_prepare(7, valued) == 2, "--prompt-completion=1 is a command-line error");
    CHECK(access(out, F_OK) != 0, "nothing was made");
}
