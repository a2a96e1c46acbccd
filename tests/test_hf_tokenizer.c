/* Hugging Face tokenizer.json in and out: the fixtures trained by `tokenizers` in the GPT-2,
 * Llama 3 and Qwen 2 styles (tests/fixtures/gen/make_hf_tokenizer_fixtures.py) encode a document
 * exactly as `tokenizers` did and decode back to it; ours, exported, re-imports to the same ids
 * (and, where Python's `tokenizers` is installed, it gives the same ids too); what we do not
 * support is refused in one line naming it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/err.h"
#include "common/paths.h"
#include "data/shard.h"
#include "tests/test.h"
#include "tests/test_util.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_internal.h"
#include "tokenizer/unicode_table.h"

#define DOCUMENT "tests/fixtures/hf_document.txt"

static uint32_t *encode_file(const Tokenizer *t, const char *path, size_t *n) {
    size_t len;
    char *text = read_file(path, &len);
    if (!text) return NULL;
    uint32_t *ids = malloc((len + 1) * sizeof *ids);
    *n = tokenizer_encode(t, text, len, 1, ids, len + 1);
    free(text);
    return ids;
}

static void expect_same_ids(const uint32_t *ours, size_t n_ours, const uint32_t *want, size_t n_want,
                            const char *what) {
    size_t i = 0;
    while (i < n_ours && i < n_want && ours[i] == want[i]) i++;
    CHECK(i == n_ours && i == n_want, "%s: ids differ at %zu (ours %u of %zu, expected %u of %zu)", what, i,
          i < n_ours ? ours[i] : 0, n_ours, i < n_want ? want[i] : 0, n_want);
}

static void expect_fixture_matches_tokenizers(const char *name) {
    char path[256], ids_path[256], err[ERR_LEN];
    snprintf(path, sizeof path, "tests/fixtures/%s.json", name);
    snprintf(ids_path, sizeof ids_path, "tests/fixtures/%s.ids", name);
    Tokenizer *t = tokenizer_load(path, err);
    REQUIRE(t, "%s", err);
    CHECK(tokenizer_is_imported(t) && tokenizer_vocab_size(t) == 700, "%s: vocabulary %u", name,
          tokenizer_vocab_size(t));
    size_t n_want = 0, n_ours = 0;
    uint32_t *want = read_ids_file(ids_path, &n_want), *ours = encode_file(t, DOCUMENT, &n_ours);
    REQUIRE(want && ours, "cannot read %s or %s", ids_path, DOCUMENT);
    expect_same_ids(ours, n_ours, want, n_want, name);
    /* the ids decode back to the document */
    size_t len;
    char *doc = read_file(DOCUMENT, &len);
    char *back = malloc(len + 64);
    size_t got = tokenizer_decode(t, ours, n_ours, back, len + 64);
    CHECK(got == len && memcmp(back, doc, len) == 0, "%s: decoding gives %zu bytes, not the %zu of the document", name,
          got, len);
    /* and the parallel encoder agrees with the serial one */
    uint32_t *par = NULL;
    size_t n_par = 0;
    REQUIRE(tokenizer_encode_parallel(t, doc, len, 1, 3, &par, &n_par, err) == 0, "%s", err);
    expect_same_ids(par, n_par, want, n_want, "parallel");
    free(par);
    free(back);
    free(doc);
    free(want);
    free(ours);
    tokenizer_free(t);
}

TEST(hf_tokenizer_gpt2_style_encodes_as_tokenizers_does) {
    expect_fixture_matches_tokenizers("hf_gpt2_style");
}

TEST(hf_tokenizer_llama3_style_encodes_as_tokenizers_does) {
    expect_fixture_matches_tokenizers("hf_llama3_style");
}

TEST(hf_tokenizer_qwen2_style_encodes_as_tokenizers_does) {
    expect_fixture_matches_tokenizers("hf_qwen2_style");
}

TEST(hf_tokenizer_separator_is_endoftext_or_end_of_text) {
    char err[ERR_LEN];
    Tokenizer *t = tokenizer_load("tests/fixtures/hf_llama3_style.json", err);
    REQUIRE(t, "%s", err);
    size_t n;
    const char *s = tokenizer_eot_text(t, &n);
    CHECK(n == 15 && memcmp(s, "<|end_of_text|>", 15) == 0 && tokenizer_eot_token(t) == 1, "Llama 3 style: %.*s",
          (int)n, s);
    tokenizer_free(t);
    t = tokenizer_load("tests/fixtures/hf_gpt2_style.json", err);
    REQUIRE(t, "%s", err);
    s = tokenizer_eot_text(t, &n);
    CHECK(n == 13 && memcmp(s, "<|endoftext|>", 13) == 0 && tokenizer_eot_token(t) == 0, "GPT-2 style: %.*s",
          (int)n, s);
    tokenizer_free(t);
}

/* A tokenizer path that is a directory, and a tokenizer_config.json beside a good tokenizer.json
 * that is one, are named as such (their size was read as the system's LONG_MAX, an allocation of
 * 8 EB that failed, or under the sanitizer aborted). */
TEST(a_tokenizer_or_its_config_that_is_a_directory_is_refused_naming_it) {
    char err[ERR_LEN], dir[800], json[900], config[900];
    snprintf(dir, sizeof dir, "%s/tokdir", test_tmpdir());
    REQUIRE(mkdir(dir, 0755) == 0, "mkdir %s", dir);
    Tokenizer *t = tokenizer_load(dir, err);
    CHECK(!t && strstr(err, "is a directory"), "a directory as the tokenizer: %s", t ? "loaded" : err);
    tokenizer_free(t);
    size_t len = 0;
    char *text = read_file("tests/fixtures/hf_gpt2_style.json", &len);
    REQUIRE(text, "fixture");
    snprintf(json, sizeof json, "%s/tokenizer.json", dir);
    FILE *f = fopen(json, "wb");
    REQUIRE(f && fwrite(text, 1, len, f) == len && fclose(f) == 0, "writing %s", json);
    free(text);
    snprintf(config, sizeof config, "%s/tokenizer_config.json", dir);
    REQUIRE(mkdir(config, 0755) == 0, "mkdir %s", config);
    t = tokenizer_load(json, err);
    CHECK(!t && strstr(err, "tokenizer_config.json") && strstr(err, "Is a directory"), "%s", t ? "loaded" : err);
    tokenizer_free(t);
}

/* A tokenizer.json that an editor saved with a UTF-8 byte-order mark first loads as without it. */
TEST(a_tokenizer_json_with_a_byte_order_mark_loads) {
    char err[ERR_LEN], path[800];
    size_t len = 0;
    char *text = read_file("tests/fixtures/hf_gpt2_style.json", &len);
    REQUIRE(text, "fixture");
    snprintf(path, sizeof path, "%s/bom.json", test_tmpdir());
    FILE *f = fopen(path, "wb");
    REQUIRE(f && fwrite("\xEF\xBB\xBF", 1, 3, f) == 3 && fwrite(text, 1, len, f) == len && fclose(f) == 0,
            "writing %s", path);
    free(text);
    Tokenizer *t = tokenizer_load(path, err);
    CHECK(t && tokenizer_vocab_size(t) == 700, "%s", t ? "wrong size" : err);
    tokenizer_free(t);
}

/* Ours, trained on the README, written as tokenizer.json into the test's folder. */
static Tokenizer *exported_tokenizer(char *json_path, size_t size) {
    size_t len;
    char *text = read_file("README.md", &len), err[ERR_LEN];
    if (!text) return NULL;
    TokenizerTrainOptions opt = {1500, 1, 0};
    Tokenizer *t = tokenizer_train(text, len, &opt, err);
    free(text);
    if (!t) return NULL;
    size_t n;
    char *json = tokenizer_hf_json(t, &n, err);
    snprintf(json_path, size, "%s/tokenizer.json", test_tmpdir());
    FILE *f = fopen(json_path, "wb");
    int ok = json && f && fwrite(json, 1, n, f) == n;
    if (f) fclose(f);
    free(json);
    if (!ok) {
        fprintf(stderr, "%s\n", err);
        tokenizer_free(t);
        return NULL;
    }
    return t;
}

TEST(hf_tokenizer_our_export_reimports_to_the_same_ids) {
    char path[700], err[ERR_LEN];
    Tokenizer *ours = exported_tokenizer(path, sizeof path);
    REQUIRE(ours, "could not train and export a tokenizer");
    Tokenizer *back = tokenizer_load(path, err);
    REQUIRE(back, "%s", err);
    CHECK(tokenizer_vocab_size(back) == tokenizer_vocab_size(ours) &&
              tokenizer_eot_token(back) == tokenizer_eot_token(ours),
          "vocabulary %u eot %u, expected %u %u", tokenizer_vocab_size(back), tokenizer_eot_token(back),
          tokenizer_vocab_size(ours), tokenizer_eot_token(ours));
    for (uint32_t id = 0; id < tokenizer_vocab_size(ours); id++) {
        size_t a, b;
        const uint8_t *x = tokenizer_token_bytes(ours, id, &a), *y = tokenizer_token_bytes(back, id, &b);
        if (a != b || memcmp(x, y, a) != 0) {
            test_fail(__FILE__, __LINE__, "token %u has other bytes after the round trip", id);
            break;
        }
    }
    const char *files[] = {DOCUMENT, "README.md", "train.c"};
    for (int f = 0; f < 3; f++) {
        size_t n1 = 0, n2 = 0;
        uint32_t *a = encode_file(ours, files[f], &n1), *b = encode_file(back, files[f], &n2);
        expect_same_ids(b, n2, a, n1, files[f]);
        free(a);
        free(b);
    }
    tokenizer_free(back);
    tokenizer_free(ours);
}

/* A shard records its tokenizer's fingerprint, and the trainer compares it with the tokenizer it is
 * given: so the fingerprint must not change when a tokenizer travels as tokenizer.json (checkpoints
 * carry ours that way), and must change when one id stands for other text. */
TEST(hf_tokenizer_fingerprint_survives_the_export_and_tells_swapped_ids_apart) {
    char path[700], swapped[800], err[ERR_LEN];
    Tokenizer *ours = exported_tokenizer(path, sizeof path);
    REQUIRE(ours, "could not train and export a tokenizer");
    Tokenizer *back = tokenizer_load(path, err);
    REQUIRE(back, "%s", err);
    CHECK(tokenizer_fingerprint(ours) == tokenizer_fingerprint(back) && tokenizer_fingerprint(ours) != 0,
          "ours %016llx, its tokenizer.json %016llx", (unsigned long long)tokenizer_fingerprint(ours),
          (unsigned long long)tokenizer_fingerprint(back));
    snprintf(swapped, sizeof swapped, "%s/swapped.json", test_tmpdir());
    REQUIRE(write_gpt2_style_tokenizer_with_two_ids_swapped(swapped) == 0, "writing %s", swapped);
    Tokenizer *a = tokenizer_load("tests/fixtures/hf_gpt2_style.json", err), *b = tokenizer_load(swapped, err);
    REQUIRE(a && b, "%s", err);
    Tokenizer *a2 = tokenizer_load("tests/fixtures/hf_gpt2_style.json", err);
    REQUIRE(a2, "%s", err);
    CHECK(tokenizer_vocab_size(a) == tokenizer_vocab_size(b), "the swap changed the size");
    CHECK(tokenizer_fingerprint(a) != tokenizer_fingerprint(b), "ids 33 and 34 swapped, the same fingerprint");
    CHECK(tokenizer_fingerprint(a) == tokenizer_fingerprint(a2), "two loads of one file differ");
    CHECK(tokenizer_fingerprint(a) != tokenizer_fingerprint(ours), "two unrelated tokenizers agree");
    tokenizer_free(a2);
    tokenizer_free(b);
    tokenizer_free(a);
    tokenizer_free(back);
    tokenizer_free(ours);
}

/* The oracle itself, where Python's `tokenizers` is installed (`make deps` does not install
 * it: the fixtures above carry its answers into every run). */
TEST(hf_tokenizer_our_export_encodes_as_tokenizers_does_when_python_has_it) {
    if (system("python3 -c 'import tokenizers' >/dev/null 2>&1") != 0) {
        test_skip("needs Python's tokenizers");
        return;
    }
    char path[700], cmd[2000], ids_path[800];
    Tokenizer *ours = exported_tokenizer(path, sizeof path);
    REQUIRE(ours, "could not train and export a tokenizer");
    const char *files[] = {DOCUMENT, "README.md"};
    for (int f = 0; f < 2; f++) {
        snprintf(ids_path, sizeof ids_path, "%s/ids.txt", test_tmpdir());
        snprintf(cmd, sizeof cmd, "python3 tests/fixtures/gen/hf_encode.py '%s' '%s' > '%s'", path,
                 files[f], ids_path);
        REQUIRE(system(cmd) == 0, "%s failed", cmd);
        size_t n_want = 0, n_ours = 0;
        uint32_t *want = read_ids_file(ids_path, &n_want), *got = encode_file(ours, files[f], &n_ours);
        expect_same_ids(got, n_ours, want, n_want, files[f]);
        free(want);
        free(got);
    }
    tokenizer_free(ours);
}

static void expect_refused(const char *from, const char *to, const char *msg) {
    expect_tokenizer_json_refused("tests/fixtures/hf_gpt2_style.json", from, to, msg);
}

TEST(hf_tokenizer_unsupported_parts_are_refused_by_name) {
    expect_refused("\"type\": \"BPE\"", "\"type\": \"Unigram\"", "model Unigram is not supported");
    expect_refused("\"type\": \"BPE\"", "\"type\": \"WordPiece\"", "model WordPiece is not supported");
    /* a model naming no type is a BPE when it has merges (older files), and named for what it lacks if not */
    expect_refused("\"model\": {\n  \"type\": \"BPE\",", "\"model\": {\"vocab\": {}}, \"unused\": {",
                   "its model has neither a \"type\" nor \"merges\"");
    expect_refused("\"normalizer\": null", "\"normalizer\": {\"type\": \"Lowercase\"}",
                   "normalizer Lowercase is not supported");
    expect_refused("\"normalizer\": null", "\"normalizer\": {\"type\": \"NFKC\"}", "normalizer NFKC");
    expect_refused("\"add_prefix_space\": false", "\"add_prefix_space\": true", "add_prefix_space");
    expect_refused("\"pre_tokenizer\": {", "\"pre_tokenizer\": {\"type\": \"Whitespace\"}, \"x\": {",
                   "pre_tokenizer Whitespace is not supported");
    expect_refused("\"byte_fallback\": false", "\"byte_fallback\": true", "byte_fallback");
    expect_refused("\"lstrip\": false", "\"lstrip\": true", "strips space");
    expect_refused("\"decoder\": {", "\"decoder\": {\"type\": \"Metaspace\"}, \"y\": {", "decoder Metaspace");
    expect_refused("\"version\"", "\"version\" [", "is not valid JSON: line 2");
    expect_refused("\"!\": ", "\"no-byte\": ", "has no token for the byte 0x21");
}

/* `text` encodes to `want` (the post-processor's tokens left out) under t, the tokenizer.json just
 * written to the test folder, and under Python's tokenizers where it is installed; the ids decode
 * back to the text. */
static void expect_added_ids(const Tokenizer *t, const char *text, const uint32_t *want, size_t n_want,
                             const char *what) {
    uint32_t all[64];
    const uint32_t *around;
    const size_t len = strlen(text), n_all = tokenizer_encode(t, text, len, TOKENIZER_SPECIALS, all, 64);
    const size_t before = (size_t)tokenizer_post_tokens(t, 0, &around), after = (size_t)tokenizer_post_tokens(t, 1, &around);
    REQUIRE(n_all <= 64 && n_all >= before + after, "%s: %zu ids", what, n_all);
    const uint32_t *ids = all + before;
    const size_t n = n_all - before - after;
    expect_same_ids(ids, n, want, n_want, what);
    char back[256];
    CHECK(tokenizer_decode(t, ids, n, back, sizeof back) == len && memcmp(back, text, len) == 0,
          "%s: the ids do not decode back to the text", what);
    if (system("python3 -c 'import tokenizers' >/dev/null 2>&1") != 0) return;
    char text_path[700], ids_path[700], cmd[2400];
    snprintf(text_path, sizeof text_path, "%s/added.txt", test_tmpdir());
    snprintf(ids_path, sizeof ids_path, "%s/added_ids.txt", test_tmpdir());
    FILE *f = fopen(text_path, "wb");
    REQUIRE(f && fputs(text, f) >= 0 && fclose(f) == 0, "cannot write %s", text_path);
    snprintf(cmd, sizeof cmd, "python3 tests/fixtures/gen/hf_encode.py '%s/tokenizer.json' '%s' > '%s'",
             test_tmpdir(), text_path, ids_path);
    REQUIRE(system(cmd) == 0, "%s failed", cmd);
    size_t n_hf = 0;
    uint32_t *hf = read_ids_file(ids_path, &n_hf);
    REQUIRE(hf, "cannot read %s", ids_path);
    expect_same_ids(ids, n, hf, n_hf, "against tokenizers");
    free(hf);
}

static Tokenizer *with_added(const char *tokens, char *err) {
    char to[600];
    snprintf(to, sizeof to, "\"added_tokens\": [\n  %s,", tokens);
    return tokenizer_json_edited("tests/fixtures/hf_gpt2_style.json", "\"added_tokens\": [", to, err);
}

#define ADDED(id, content) "{\"id\": " #id ", \"content\": \"" content "\", \"single_word\": false, \"lstrip\": false, " \
                           "\"rstrip\": false, \"normalized\": false, \"special\": false}"

TEST(an_added_token_takes_the_id_tokenizers_gives_it_whatever_id_the_file_lists) {
    /* The fixture's 700 keys have ids 0..699; its one added token, <|endoftext|>, is the key of id 0.
     * tokenizers numbers an added token that no key spells from 700 on, in the order listed. */
    char err[ERR_LEN] = "";
    /* the newline's key is the byte-level "\u010a" (id 199); the text "\n" is no key, so 700 */
    Tokenizer *t = with_added(ADDED(199, "\\n"), err);
    REQUIRE(t, "%s", err);
    CHECK(tokenizer_vocab_size(t) == 701, "vocabulary %u, not 701", tokenizer_vocab_size(t));
    expect_added_ids(t, "a\nb", (const uint32_t[]){65, 700, 66}, 3, "a newline listed at 199");
    const char *note = tokenizer_load_note(t);
    CHECK(note && strstr(note, "added token \"\\n\" at id 199") && strstr(note, "gives it id 700") && !strchr(note, '\n'),
          "the note should name the token and both ids on one line: %s", note ? note : "(none)");
    tokenizer_free(t);
    /* prepare says so, and its shard holds the newline as 700 */
    char args[1600], shard_path[800], *out = NULL;
    snprintf(args, sizeof args, "prepare --tokenizer %s/tokenizer.json --val-fraction 0.1 -o %s/prep_note " DOCUMENT,
             test_tmpdir(), test_tmpdir());
    int rc = run_train(args, &out);
    CHECK(rc == 0 && out && strstr(out, "note: ") && strstr(out, "gives it id 700"), "prepare: (%d) %s", rc, out);
    free(out);
    snprintf(shard_path, sizeof shard_path, "%s/prep_note/train.bin", test_tmpdir());
    uint32_t *shard_ids = NULL;
    uint64_t n_shard = 0, newlines = 0;
    ShardHeader h;
    REQUIRE(shard_read(shard_path, 701, &shard_ids, &n_shard, &h, err) == 0, "%s", err);
    for (uint64_t i = 0; i < n_shard; i++) newlines += shard_ids[i] == 700;
    CHECK(h.vocab_size == 701 && newlines > 0, "the shard: vocabulary %u, %llu newlines as 700", h.vocab_size,
          (unsigned long long)newlines);
    free(shard_ids);
    /* the sign x, listed at 358 (its bytes C3 97 are the key "\u00c3\u0139"): tokenizers gives it
     * the id of the key "\u00d7", the byte token of D7 (148), and decodes it to that one byte */
    expect_refused("\"added_tokens\": [", "\"added_tokens\": [\n  " ADDED(358, "\u00d7") ",",
                   "added token \"\u00d7\" is spelled like the byte-level key of id 148");
    /* a text the vocabulary spells as a key takes the key's id, whatever the file lists */
    t = tokenizer_json_edited("tests/fixtures/hf_gpt2_style.json", "\"id\": 0,", "\"id\": 5,", err);
    REQUIRE(t, "%s", err);
    CHECK(tokenizer_vocab_size(t) == 700 && tokenizer_eot_token(t) == 0, "vocabulary %u, separator %u",
          tokenizer_vocab_size(t), tokenizer_eot_token(t));
    expect_added_ids(t, "<|endoftext|>", (const uint32_t[]){0}, 1, "<|endoftext|> listed at 5");
    note = tokenizer_load_note(t);
    CHECK(note && strstr(note, "at id 5") && strstr(note, "gives it id 0"), "note: %s", note ? note : "(none)");
    tokenizer_free(t);
    /* gaps and disorder in the listed ids (only 701 is as given); a content listed twice keeps its
     * first id */
    t = with_added(ADDED(750, "<y>") ", " ADDED(701, "<x>") ", " ADDED(702, "<y>"), err);
    REQUIRE(t, "%s", err);
    CHECK(tokenizer_vocab_size(t) == 702, "vocabulary %u, not 702", tokenizer_vocab_size(t));
    expect_added_ids(t, "<x><y>", (const uint32_t[]){701, 700}, 2, "listed 750, 701 and 702");
    note = tokenizer_load_note(t);
    CHECK(note && strstr(note, "\"<y>\" at id 750") && strstr(note, "(2 of 4 added tokens"), "note: %s",
          note ? note : "(none)");
    tokenizer_free(t);
    /* an empty added token is skipped and takes no id */
    t = with_added(ADDED(700, "") ", " ADDED(701, "<x>"), err);
    REQUIRE(t, "%s", err);
    CHECK(tokenizer_vocab_size(t) == 701, "vocabulary %u, not 701", tokenizer_vocab_size(t));
    expect_added_ids(t, "<x>", (const uint32_t[]){700}, 1, "<x> after an empty added token");
    tokenizer_free(t);
    /* ids listed as tokenizers gives them: no note */
    t = with_added(ADDED(700, "<y>") ", " ADDED(701, "<x>"), err);
    REQUIRE(t, "%s", err);
    CHECK(!tokenizer_load_note(t), "a note for ids listed as given: %s", tokenizer_load_note(t));
    expect_added_ids(t, "<x><y>", (const uint32_t[]){701, 700}, 2, "listed 700 and 701");
    tokenizer_free(t);
    /* a SentencePiece-style file (800 keys) numbers them the same way */
    t = tokenizer_json_edited("tests/fixtures/spm_llama2.json", "\"added_tokens\": [",
                              "\"added_tokens\": [\n  " ADDED(5000, "<x>") ",", err);
    REQUIRE(t, "%s", err);
    CHECK(tokenizer_vocab_size(t) == 801, "vocabulary %u, not 801", tokenizer_vocab_size(t));
    expect_added_ids(t, "<x>", (const uint32_t[]){800}, 1, "a SentencePiece-style file's <x> listed at 5000");
    tokenizer_free(t);
    /* keys with a gap (699 moved to 700): the next id after the 700 keys is a key's */
    char *json = read_text("tests/fixtures/hf_gpt2_style.json"), path[700];
    REQUIRE(json && strstr(json, ": 699\n"), "the fixture has no id 699 at a line's end");
    snprintf(path, sizeof path, "%s/gap.json", test_tmpdir());
    FILE *f = fopen(path, "wb");
    char *at = strstr(json, ": 699\n");
    REQUIRE(f, "cannot write %s", path);
    fwrite(json, 1, (size_t)(at - json), f);
    fputs(": 700\n", f);
    fputs(at + 6, f);
    fclose(f);
    free(json);
    expect_tokenizer_json_refused(path, "\"added_tokens\": [", "\"added_tokens\": [\n  " ADDED(3, "<x>") ",",
                                  "added token \"<x>\" takes id 700, the next after the vocabulary's 700 keys");
}

TEST(letters_of_unicode_16_join_words_as_in_tokenizers_and_later_ones_do_not) {
    /* tokenizers splits by Unicode 16.0's categories: Todhri's U+105C0 and Garay's U+10D50 (16.0) are
     * letters, Sidetic's U+10940 (17.0) is not yet; Kawi's U+11F04 (15.0) is */
    char err[ERR_LEN] = "";
    REQUIRE(unicode_class(0x105C0) == UCLASS_LETTER && unicode_class(0x10D50) == UCLASS_LETTER &&
                unicode_class(0x10940) == UCLASS_OTHER && unicode_class(0x11F04) == UCLASS_LETTER,
            "classes %d %d %d %d", unicode_class(0x105C0), unicode_class(0x10D50), unicode_class(0x10940),
            unicode_class(0x11F04));
    Tokenizer *t = tokenizer_json_edited("tests/fixtures/hf_llama3_style.json", "\"added_tokens\": [",
                                         "\"added_tokens\": [", err);
    REQUIRE(t, "%s", err);
    /* the ids tokenizers 0.23.3 gives it */
    const uint32_t want[] = {90, 175, 241, 248, 225, 91, 223, 19, 175, 241, 116, 241,
                             223, 175, 241, 101, 225, 92, 223, 175, 242, 123, 229, 83};
    expect_added_ids(t, "x\U000105c0y 1\U00010d50 \U00010940z \U00011f04q", want, sizeof want / sizeof want[0],
                     "Unicode 16 letters");
    tokenizer_free(t);
}

TEST(hf_tokenizer_unknown_split_pattern_is_refused_naming_it) {
    char *json = read_text("tests/fixtures/hf_llama3_style.json"), path[700], err[ERR_LEN] = "";
    REQUIRE(json, "cannot read the fixture");
    char *at = strstr(json, "\\\\p{N}{1,3}");
    REQUIRE(at, "the fixture's pattern has no \\p{N}{1,3}");
    memcpy(at, "\\\\p{N}{1,4}", 11);
    snprintf(path, sizeof path, "%s/tokenizer.json", test_tmpdir());
    FILE *f = fopen(path, "wb");
    fputs(json, f);
    fclose(f);
    free(json);
    Tokenizer *t = tokenizer_load(path, err);
    CHECK(!t && strstr(err, "Split pattern") && strstr(err, "{1,4}") && strstr(err, "is not one we split by hand"),
          "an unknown pattern: %s", err);
    tokenizer_free(t);
}

/* `./train prepare --tokenizer tokenizer.json` on the document: its train and validation shards
 * together hold exactly the ids `tokenizers` gives the document (the cut falls after a separator). */
static void expect_prepare_matches_tokenizers(const char *name) {
    char args[1200], path[800], err[ERR_LEN];
    snprintf(args, sizeof args, "prepare --tokenizer tests/fixtures/%s.json --val-fraction 0.5 -o %s/prep " DOCUMENT,
             name, test_tmpdir());
    char *out = NULL;
    int rc = run_train(args, &out);
    CHECK(rc == 0 && out && strstr(out, "/prep/tokenizer.json"), "prepare with %s: (%d) %s", name, rc, out);
    free(out);
    uint32_t *ids[2] = {NULL, NULL};
    uint64_t n[2] = {0, 0};
    const char *parts[2] = {"train", "val"};
    for (int k = 0; k < 2; k++) {
        ShardHeader h;
        snprintf(path, sizeof path, "%s/prep/%s.bin", test_tmpdir(), parts[k]);
        REQUIRE(shard_read(path, 700, &ids[k], &n[k], &h, err) == 0, "%s", err);
        CHECK(h.vocab_size == 700, "%s: the shard records vocabulary %u", path, h.vocab_size);
    }
    CHECK(n[1] > 0 && n[0] > 0, "%s: %llu train and %llu validation tokens", name, (unsigned long long)n[0],
          (unsigned long long)n[1]);
    uint32_t *all = malloc((n[0] + n[1] + 1) * sizeof *all);
    memcpy(all, ids[0], n[0] * sizeof *all);
    memcpy(all + n[0], ids[1], n[1] * sizeof *all);
    char ids_path[256];
    snprintf(ids_path, sizeof ids_path, "tests/fixtures/%s.ids", name);
    size_t n_want;
    uint32_t *want = read_ids_file(ids_path, &n_want);
    REQUIRE(want, "cannot read %s", ids_path);
    expect_same_ids(all, n[0] + n[1], want, n_want, name);
    /* the tokenizer.json beside the shards is the file as it was */
    snprintf(path, sizeof path, "%s/prep/tokenizer.json", test_tmpdir());
    char *copy = read_text(path), *orig = NULL;
    snprintf(ids_path, sizeof ids_path, "tests/fixtures/%s.json", name);
    orig = read_text(ids_path);
    CHECK(copy && orig && strcmp(copy, orig) == 0, "%s: prepare's tokenizer.json is not the file given", name);
    free(copy);
    free(orig);
    free(want);
    free(all);
    free(ids[0]);
    free(ids[1]);
}

TEST(hf_tokenizer_prepare_gives_the_ids_tokenizers_gives) {
    expect_prepare_matches_tokenizers("hf_gpt2_style");
    expect_prepare_matches_tokenizers("hf_llama3_style");
}

/* Prepares `text` (written to a file) with --val-fraction `fraction` and the GPT-2-style
 * tokenizer.json; returns the tokens of the two shards (n[0] train, n[1] validation) one after the
 * other, or NULL. */
static uint32_t *prepare_halves(const char *text, double fraction, uint64_t n[2], char **out) {
    char path[800], args[1800], err[ERR_LEN];
    snprintf(path, sizeof path, "%s/halves.txt", test_tmpdir());
    FILE *f = fopen(path, "wb");
    if (!f) return NULL;
    fputs(text, f);
    fclose(f);
    snprintf(args, sizeof args, "prepare --tokenizer tests/fixtures/hf_gpt2_style.json --val-fraction %g -o %s/halves %s",
             fraction, test_tmpdir(), path);
    if (run_train(args, out) != 0) return NULL;
    uint32_t *ids[2] = {NULL, NULL}, *all = NULL;
    const char *parts[2] = {"train", "val"};
    for (int k = 0; k < 2; k++) {
        ShardHeader h;
        snprintf(path, sizeof path, "%s/halves/%s.bin", test_tmpdir(), parts[k]);
        if (shard_read(path, 700, &ids[k], &n[k], &h, err) != 0) n[k] = 0;
    }
    if (ids[0] && ids[1] && (all = malloc((n[0] + n[1]) * sizeof *all))) {
        memcpy(all, ids[0], n[0] * sizeof *all);
        memcpy(all + n[0], ids[1], n[1] * sizeof *all);
    }
    free(ids[0]);
    free(ids[1]);
    return all;
}

/* An imported tokenizer's validation part starts where the tokenizer can cut the text exactly: here
 * only at a line that starts with a letter. The one nearest the asked-for half lies before it (the
 * indented lines after it have none, their last line is too near the end), so validation holds
 * about 60 % of the tokens, and the two parts give the ids of the whole. Nearest the asked-for
 * point, not the line start after it: a long last line but one must not push the cut past it. Text
 * with no such line near the half is cut elsewhere, with a note. */
TEST(prepare_with_a_tokenizer_json_cuts_validation_at_the_exact_cut_nearest_the_fraction) {
    char *text = malloc(1 << 16), *out = NULL, err[ERR_LEN] = "";
    size_t len = 0;
    for (int i = 0; i < 300; i++) len += (size_t)sprintf(text + len, "Plain line %03d here.\n", i);
    for (int i = 0; i < 600; i++) len += (size_t)sprintf(text + len, "    indented %03d\n", i);
    len += (size_t)sprintf(text + len, "end\n");
    uint64_t n[2] = {0, 0};
    uint32_t *all = prepare_halves(text, 0.5, n, &out);
    REQUIRE(all, "prepare: %s", out ? out : "");
    double val_share = (double)n[1] / (double)(n[0] + n[1]);
    CHECK(val_share > 0.5 && val_share < 0.75 && strstr(out, "where the tokenizer's pieces are sure to end") &&
              !strstr(out, "note:"),
          "%llu train and %llu validation tokens: %s", (unsigned long long)n[0], (unsigned long long)n[1], out);
    Tokenizer *t = tokenizer_load("tests/fixtures/hf_gpt2_style.json", err);
    REQUIRE(t, "%s", err);
    size_t n_whole = 0;
    uint32_t *whole = tokenizer_encode_alloc(t, text, len, TOKENIZER_SPECIALS, &n_whole);
    REQUIRE(whole, "out of memory");
    CHECK(n_whole == n[0] + n[1] && memcmp(all, whole, n_whole * sizeof *all) == 0,
          "the two parts (%llu tokens) are not the whole's %zu", (unsigned long long)(n[0] + n[1]), n_whole);
    free(all), free(whole), free(out);
    out = NULL;
    len = 0;
    for (int i = 0; i < 200; i++) len += (size_t)sprintf(text + len, "Line %03d xx\n", i);
    memset(text + len, 'x', 700), len += 700;
    len += (size_t)sprintf(text + len, "\nTail end\n");
    all = prepare_halves(text, 0.2, n, &out);
    val_share = all ? (double)n[1] / (double)(n[0] + n[1]) : 0;
    CHECK(all && val_share > 0.1 && val_share < 0.4 && !strstr(out, "note:"), "%llu train and %llu validation tokens: %s",
          (unsigned long long)n[0], (unsigned long long)n[1], out ? out : "");
    free(all), free(out);
    out = NULL;
    /* no line near the half starts with a letter: cut elsewhere, said */
    len = (size_t)sprintf(text, "Title\n");
    for (int i = 0; i < 900; i++) len += (size_t)sprintf(text + len, "    indented %03d\n", i);
    len += (size_t)sprintf(text + len, "end\n");
    all = prepare_halves(text, 0.5, n, &out);
    CHECK(all && n[1] * 3 > n[0] && n[0] * 3 > n[1] &&
              strstr(out, "note: no document boundary near the last 0.5 of the text, and no place near it where this "
                          "tokenizer's pieces are sure to end"),
          "%llu train and %llu validation tokens: %s", (unsigned long long)n[0], (unsigned long long)n[1],
          out ? out : "");
    free(all), free(out), free(text);
    tokenizer_free(t);
}

/* prepare -o a model's folder: its own tokenizer.json given as --tokenizer stays (the same bytes);
 * another one there is refused before any work, and kept. */
TEST(prepare_into_a_model_folder_keeps_its_tokenizer_json_unless_it_is_the_one_given) {
    char dir[800], path[900], args[2000], *out = NULL;
    snprintf(dir, sizeof dir, "%s/model_folder", test_tmpdir());
    REQUIRE(make_dirs(dir) == 0, "mkdir %s", dir);
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    char *own = read_text("tests/fixtures/hf_llama3_style.json");
    REQUIRE(own, "cannot read the fixture");
    FILE *f = fopen(path, "wb");
    REQUIRE(f, "cannot write %s", path);
    fputs(own, f);
    fclose(f);
    snprintf(args, sizeof args, "prepare --tokenizer tests/fixtures/hf_gpt2_style.json -o %s " DOCUMENT, dir);
    CHECK(run_train(args, &out) == 1 && strstr(out, "tokenizer.json is not the tokenizer of an earlier prepare there"),
          "another tokenizer.json: %s", out ? out : "");
    free(out);
    char *kept = read_text(path);
    CHECK(kept && strcmp(kept, own) == 0, "the folder's tokenizer.json was changed");
    free(kept);
    snprintf(args, sizeof args, "prepare --tokenizer %s -o %s " DOCUMENT, path, dir);
    CHECK(run_train(args, &out) == 0, "its own tokenizer.json: %s", out ? out : "");
    free(out);
    free(own);
}

/* Qwen 2's NFC normalizer: text that is already NFC encodes as `tokenizers` does (above); text
 * that NFC would rewrite is refused, naming the place, never encoded differently. */
TEST(hf_tokenizer_nfc_normalizer_refuses_text_it_would_rewrite) {
    char err[ERR_LEN] = "";
    Tokenizer *t = tokenizer_load("tests/fixtures/hf_qwen2_style.json", err);
    REQUIRE(t, "%s", err);
    const char *nfc = "caf\xc3\xa9 \xed\x95\x9c\xea\xb5\xad\xec\x96\xb4 \xce\xac"; /* é, Korean syllables, ά */
    CHECK(tokenizer_check_text(t, nfc, strlen(nfc), 0, err) == 0, "NFC text refused: %s", err);
    const char *decomposed = "cafe\xcc\x81!"; /* e + U+0301: NFC makes it é */
    CHECK(tokenizer_check_text(t, decomposed, strlen(decomposed), 0, err) != 0 && strstr(err, "U+0301 at byte 4"),
          "decomposed text: %s", err);
    /* combining marks in text already NFC pass: Hindi's virama and vowel signs, Thai, Arabic's
     * harakat, Hebrew's points in canonical order, a mark NFC leaves after its composite */
    const char *marked[] = {"\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e",
                            "\u0e20\u0e32\u0e29\u0e32\u0e44\u0e17\u0e22 \u0e01\u0e34\u0e19",
                            "\u0645\u064e\u0631\u0652\u062d\u064e\u0628\u064b\u0627",
                            "\u05e9\u05b8\u05c1\u05dc\u05d5\u05b9\u05dd", "\u1eb9\u0301"};
    for (int k = 0; k < 5; k++)
        CHECK(tokenizer_check_text(t, marked[k], strlen(marked[k]), 0, err) == 0, "NFC text %d refused: %s", k, err);
    /* and text NFC rewrites is refused, naming where: a mark out of canonical order after a
     * composite (é then a dot below: NFC gives ẹ then the acute), Hangul jamo that compose, a
     * composite that composes backwards once decomposed (Tulu-Tigalari), Hebrew points out of order */
    const struct {
        const char *text, *msg;
    } rewritten[] = {{"x\u00e9\u0323", "U+0323 at byte 3"},
                     {"\u1100\u1161", "U+1161 at byte 3"},
                     {"\U000113c2\U000113c5", "U+113C2 at byte 0"},
                     {"\u05e9\u05c1\u05b8", "U+05C1 at byte 2"}};
    for (int k = 0; k < 4; k++)
        CHECK(tokenizer_check_text(t, rewritten[k].text, strlen(rewritten[k].text), 0, err) != 0 &&
                  strstr(err, rewritten[k].msg),
              "text %d NFC rewrites: %s", k, err);
    tokenizer_free(t);
    t = tokenizer_load("tests/fixtures/hf_llama3_style.json", err);
    REQUIRE(t, "%s", err);
    CHECK(tokenizer_check_text(t, decomposed, strlen(decomposed), 0, err) == 0, "no normalizer: nothing to refuse");
    tokenizer_free(t);
    char path[800], args[1600], *out = NULL;
    snprintf(path, sizeof path, "%s/doc.txt", test_tmpdir());
    FILE *f = fopen(path, "w");
    REQUIRE(f, "cannot write %s", path);
    fputs("plain text, then a cafe\xcc\x81 written with a combining accent\n", f);
    fclose(f);
    snprintf(args, sizeof args, "prepare --tokenizer tests/fixtures/hf_qwen2_style.json -o %s/p %s", test_tmpdir(), path);
    int rc = run_train(args, &out);
    /* named by its file and its byte in that file */
    CHECK(rc != 0 && out && strstr(out, "doc.txt: the text holds U+0301 at byte 23") &&
              strstr(out, "normalize the text to NFC"),
          "prepare: (%d) %s", rc, out);
    free(out);
}

/* ---- bounds on what a tokenizer.json may ask for ---- */

/* Writes one code point into a JSON string. */
static void put_json_cp(FILE *f, uint32_t cp) {
    if (cp == '"' || cp == '\\') fprintf(f, "\\%c", (char)cp);
    else if (cp < 0x80) fputc((int)cp, f);
    else fprintf(f, "%c%c", (char)(0xc0 | cp >> 6), (char)(0x80 | (cp & 0x3f)));
}

/* A byte-level BPE tokenizer.json without merges: the 256 byte tokens (ids 0..255), n_filler more
 * tokens "t<id>" (ids 256..), a token of long_len 'a's when long_len > 0 (the next id), and the
 * separator "<|endoftext|>" as an added token of id eot_id. */
static int write_plain_hf_json(const char *path, uint32_t n_filler, size_t long_len, uint64_t eot_id) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    fputs("{\"added_tokens\": [{\"id\": ", f);
    fprintf(f, "%llu", (unsigned long long)eot_id);
    fputs(", \"content\": \"<|endoftext|>\", \"single_word\": false, \"lstrip\": false, \"rstrip\": false, "
          "\"normalized\": false, \"special\": true}],\n \"normalizer\": null,\n"
          " \"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": true},\n"
          " \"decoder\": {\"type\": \"ByteLevel\"},\n \"model\": {\"type\": \"BPE\", \"vocab\": {",
          f);
    uint32_t cp_of_byte[256];
    byte_level_alphabet(cp_of_byte);
    for (uint32_t b = 0; b < 256; b++) {
        fputs(b ? ", \"" : "\"", f);
        put_json_cp(f, cp_of_byte[b]);
        fprintf(f, "\": %u", b);
    }
    uint32_t id = 256;
    for (uint32_t i = 0; i < n_filler; i++, id++) fprintf(f, ", \"t%u\": %u", id, id);
    if (long_len) {
        fputs(", \"", f);
        for (size_t i = 0; i < long_len; i++) fputc('a', f);
        fprintf(f, "\": %u", id);
    }
    fputs("}, \"merges\": []}}\n", f);
    return fclose(f) == 0 ? 0 : -1;
}

TEST(a_tokenizer_json_whose_ids_leave_more_than_half_their_range_unused_is_refused) {
    /* 258 tokens listed (256 bytes, "t256" and the separator): "t256" at id 515 leaves at most half
     * of the range unused and loads; at 516, or at 268435456, the file is not a vocabulary but a
     * corrupt one. */
    char plain[700], err[ERR_LEN] = "";
    snprintf(plain, sizeof plain, "%s/plain.json", test_tmpdir());
    REQUIRE(write_plain_hf_json(plain, 1, 0, 257) == 0, "cannot write %s", plain);
    Tokenizer *t = tokenizer_json_edited(plain, "\"t256\": 256", "\"t256\": 515", err);
    CHECK(t && tokenizer_vocab_size(t) == 516 && tokenizer_eot_token(t) == 257, "t256 at 515 among 258 tokens: %s",
          t ? "wrong vocabulary" : err);
    tokenizer_free(t);
    const char *too_far[] = {"516", "268435456"};
    for (int k = 0; k < 2; k++) {
        char to[64], want[64];
        snprintf(to, sizeof to, "\"t256\": %s", too_far[k]);
        err[0] = 0;
        t = tokenizer_json_edited(plain, "\"t256\": 256", to, err);
        CHECK(!t, "an id of %s among 258 tokens was accepted", too_far[k]);
        snprintf(want, sizeof want, "id %s is far beyond the 258 tokens", too_far[k]);
        CHECK(strstr(err, "tokenizer.json") && strstr(err, want) && strstr(err, "corrupt") && !strchr(err, '\n'),
              "the error should name the file and the id on one line: %s", err);
        tokenizer_free(t);
    }
}

TEST(a_tokenizer_json_of_gemma_3s_262144_dense_ids_loads) {
    char path[700], err[ERR_LEN] = "";
    snprintf(path, sizeof path, "%s/tokenizer.json", test_tmpdir());
    REQUIRE(write_plain_hf_json(path, 262144 - 257, 0, 262143) == 0, "cannot write %s", path);
    Tokenizer *t = tokenizer_load(path, err);
    REQUIRE(t, "%s", err);
    CHECK(tokenizer_vocab_size(t) == 262144 && tokenizer_eot_token(t) == 262143, "vocabulary %u, separator %u",
          tokenizer_vocab_size(t), tokenizer_eot_token(t));
    size_t n;
    const uint8_t *b = tokenizer_token_bytes(t, 100000, &n);
    CHECK(b && n == 7 && memcmp(b, "t100000", 7) == 0, "token 100000 is \"%.*s\"", (int)n, b ? (const char *)b : "");
    tokenizer_free(t);
}

TEST(a_tokenizer_json_token_longer_than_the_limit_is_refused) {
    char path[700], err[ERR_LEN] = "";
    snprintf(path, sizeof path, "%s/tokenizer.json", test_tmpdir());
    REQUIRE(write_plain_hf_json(path, 0, TOKENIZER_MAX_TOKEN_BYTES, 257) == 0, "cannot write %s", path);
    Tokenizer *t = tokenizer_load(path, err);
    size_t n = 0;
    CHECK(t && tokenizer_token_bytes(t, 256, &n) && n == TOKENIZER_MAX_TOKEN_BYTES,
          "a token of %u bytes, the limit, should load: %s", TOKENIZER_MAX_TOKEN_BYTES, t ? "wrong length" : err);
    tokenizer_free(t);
    REQUIRE(write_plain_hf_json(path, 0, TOKENIZER_MAX_TOKEN_BYTES + 1, 257) == 0, "cannot write %s", path);
    err[0] = 0;
    t = tokenizer_load(path, err);
    CHECK(!t, "a token of %u bytes was accepted", TOKENIZER_MAX_TOKEN_BYTES + 1);
    CHECK(strstr(err, path) && strstr(err, "token 256 is 1025 bytes") && !strchr(err, '\n'),
          "the error should name the file and the token on one line: %s", err);
    tokenizer_free(t);
}

/* ---- the post-processor: the tokens Hugging Face's encode(text) puts around a text ---- */
#define LLAMA3_BOS "tests/fixtures/hf_llama3_bos.json"

/* Llama 3's post-processor (ByteLevel, then "<|begin_of_text|> $A"): encoding with specials gives
 * <|begin_of_text|> then the ids of the text alone, once however many threads encode it; without
 * specials, the text's ids alone. */
TEST(a_llama3_tokenizer_json_puts_begin_of_text_before_an_encoded_text) {
    char err[ERR_LEN];
    Tokenizer *t = tokenizer_load(LLAMA3_BOS, err);
    REQUIRE(t, "%s", err);
    size_t n_plain = 0, len = 0;
    uint32_t *plain = read_ids_file("tests/fixtures/hf_llama3_style.ids", &n_plain);
    char *doc = read_file(DOCUMENT, &len);
    REQUIRE(plain && doc, "cannot read the fixtures");
    uint32_t *want = malloc((n_plain + 1) * sizeof *want);
    want[0] = 0; /* <|begin_of_text|> */
    memcpy(want + 1, plain, n_plain * sizeof *want);
    size_t n = 0;
    uint32_t *ids = tokenizer_encode_alloc(t, doc, len, TOKENIZER_SPECIALS, &n);
    expect_same_ids(ids, n, want, n_plain + 1, "with specials");
    free(ids);
    /* a text without special tokens in it: the same ids, without <|begin_of_text|> */
    size_t n_with = 0;
    uint32_t *with = tokenizer_encode_alloc(t, "Hello world", 11, TOKENIZER_SPECIALS, &n_with);
    ids = tokenizer_encode_alloc(t, "Hello world", 11, 0, &n);
    REQUIRE(with && ids && n_with > 1, "cannot encode");
    CHECK(with[0] == 0 && ids[0] != 0, "<|begin_of_text|> with specials only");
    expect_same_ids(ids, n, with + 1, n_with - 1, "without specials");
    free(with);
    free(ids);
    ids = NULL;
    REQUIRE(tokenizer_encode_parallel(t, doc, len, TOKENIZER_SPECIALS, 3, &ids, &n, err) == 0, "%s", err);
    expect_same_ids(ids, n, want, n_plain + 1, "on 3 threads");
    const uint32_t *around;
    CHECK(tokenizer_post_tokens(t, 0, &around) == 1 && around[0] == 0 && tokenizer_post_tokens(t, 1, &around) == 0,
          "the post-processor's tokens are not <|begin_of_text|> before and none after");
    free(ids);
    free(want);
    free(doc);
    free(plain);
    tokenizer_free(t);
}

/* Qwen 2's post-processor is a ByteLevel one, which only trims offsets: it adds no token. */
TEST(a_byte_level_post_processor_adds_no_token) {
    char *json = read_text("tests/fixtures/hf_qwen2_style.json"), path[700], err[ERR_LEN];
    REQUIRE(json, "cannot read the fixture");
    const char *from = "\"post_processor\": null";
    char *at = strstr(json, from);
    REQUIRE(at, "the fixture has no null post_processor");
    snprintf(path, sizeof path, "%s/tokenizer.json", test_tmpdir());
    FILE *f = fopen(path, "wb");
    fwrite(json, 1, (size_t)(at - json), f);
    fputs("\"post_processor\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": false, "
          "\"use_regex\": false}", f);
    fputs(at + strlen(from), f);
    fclose(f);
    free(json);
    Tokenizer *t = tokenizer_load(path, err);
    REQUIRE(t, "%s", err);
    size_t n_want = 0, n = 0;
    uint32_t *want = read_ids_file("tests/fixtures/hf_qwen2_style.ids", &n_want), *ids = encode_file(t, DOCUMENT, &n);
    REQUIRE(want && ids, "cannot read the fixtures");
    expect_same_ids(ids, n, want, n_want, "ByteLevel post-processor");
    free(ids);
    free(want);
    tokenizer_free(t);
}

/* `./train prepare` with Llama 3's tokenizer.json on three files (the first and last hold separators
 * of their own, which end documents too): each document's ids are
 * tokenizer(document)["input_ids"] (<|begin_of_text|> first), <|end_of_text|> between them, as
 * the fixture's generator recorded; the validation shard starts at the last separator, which
 * brings the last document's <|begin_of_text|> with it. */
TEST(prepare_gives_each_document_the_post_processors_tokens_and_end_of_text_between_them) {
    char args[1400], path[800], err[ERR_LEN];
    snprintf(args, sizeof args,
             "prepare --tokenizer " LLAMA3_BOS " --val-fraction 0.2 -o %s/bos " DOCUMENT
             " tests/fixtures/spm_document.txt " DOCUMENT, test_tmpdir());
    char *out = NULL;
    int rc = run_train(args, &out);
    CHECK(rc == 0, "prepare: (%d) %s", rc, out);
    free(out);
    uint32_t *ids[2] = {NULL, NULL};
    uint64_t n[2] = {0, 0};
    const char *parts[2] = {"train", "val"};
    for (int k = 0; k < 2; k++) {
        ShardHeader h;
        snprintf(path, sizeof path, "%s/bos/%s.bin", test_tmpdir(), parts[k]);
        REQUIRE(shard_read(path, 700, &ids[k], &n[k], &h, err) == 0, "%s", err);
    }
    const uint32_t bos = 0, end_of_text = 1;
    CHECK(n[0] > 0 && ids[0][0] == bos, "the training shard does not start with <|begin_of_text|>");
    CHECK(n[1] > 1 && ids[1][0] == end_of_text && ids[1][1] == bos,
          "the validation shard does not start with <|end_of_text|> <|begin_of_text|>");
    uint32_t *all = malloc((n[0] + n[1] + 1) * sizeof *all);
    memcpy(all, ids[0], n[0] * sizeof *all);
    memcpy(all + n[0], ids[1], n[1] * sizeof *all);
    size_t n_want;
    uint32_t *want = read_ids_file("tests/fixtures/hf_llama3_bos.ids", &n_want);
    REQUIRE(want, "cannot read tests/fixtures/hf_llama3_bos.ids");
    expect_same_ids(all, n[0] + n[1], want, n_want, "prepared documents");
    free(want);
    free(all);
    free(ids[0]);
    free(ids[1]);
}

TEST(a_post_processor_we_cannot_apply_is_refused_by_name) {
    expect_tokenizer_json_refused(LLAMA3_BOS, "\"type\": \"TemplateProcessing\"", "\"type\": \"RobertaProcessing\"",
                                  "post_processor RobertaProcessing is not supported");
    expect_tokenizer_json_refused(LLAMA3_BOS, "\"id\": \"<|begin_of_text|>\"", "\"id\": \"<|nope|>\"",
                                  "TemplateProcessing item 0 is neither $A nor a special token");
    expect_tokenizer_json_refused(LLAMA3_BOS, "\"processors\": [",
                                  "\"processors\": [{\"type\": \"TemplateProcessing\", \"single\": [{\"Sequence\": "
                                  "{\"id\": \"A\", \"type_id\": 0}}]},",
                                  "more than one TemplateProcessing");
    expect_tokenizer_json_refused(LLAMA3_BOS, "\"processors\": [", "\"processors\": 3, \"x\": [",
                                  "post_processor Sequence has no processors list");
}

/* A tokenizer.json saved with truncation or padding on keeps them; prepare tokenizes each document
 * whole regardless, and says so, so that nobody expects shards cut to max_length. */
TEST(a_tokenizer_json_with_truncation_and_padding_is_noted_and_prepare_keeps_documents_whole) {
    char err[ERR_LEN] = "", args[1600], shard[800], plain_shard[800], *out = NULL;
    Tokenizer *t = tokenizer_load("tests/fixtures/hf_gpt2_style.json", err);
    REQUIRE(t, "%s", err);
    CHECK(!tokenizer_unapplied_settings(t), "a fixture without them: %s", tokenizer_unapplied_settings(t));
    tokenizer_free(t);
    snprintf(args, sizeof args, "prepare --tokenizer tests/fixtures/hf_gpt2_style.json --val-fraction 0.1 -o %s/whole "
             DOCUMENT, test_tmpdir());
    REQUIRE(run_train(args, &out) == 0, "prepare: %s", out);
    free(out);
    t = tokenizer_json_edited("tests/fixtures/hf_gpt2_style.json", "\"truncation\": null,\n \"padding\": null",
                              "\"truncation\": {\"direction\": \"Right\", \"max_length\": 8, \"strategy\": "
                              "\"LongestFirst\", \"stride\": 0},\n \"padding\": {\"strategy\": {\"Fixed\": 8}, "
                              "\"direction\": \"Right\", \"pad_to_multiple_of\": null, \"pad_id\": 0, \"pad_type_id\": 0, "
                              "\"pad_token\": \"<|endoftext|>\"}",
                              err);
    REQUIRE(t, "%s", err);
    const char *said = tokenizer_unapplied_settings(t);
    CHECK(said && !strcmp(said, "truncation to 8 tokens and padding"), "%s", said ? said : "(none)");
    tokenizer_free(t);
    snprintf(args, sizeof args, "prepare --tokenizer %s/tokenizer.json --val-fraction 0.1 -o %s/cut " DOCUMENT,
             test_tmpdir(), test_tmpdir());
    int rc = run_train(args, &out);
    CHECK(rc == 0 && out && strstr(out, "tokenizer.json sets truncation to 8 tokens and padding, which prepare does not "
                                        "apply: each document is tokenized whole"),
          "prepare: (%d) %s", rc, out);
    free(out);
    snprintf(shard, sizeof shard, "%s/cut/train.bin", test_tmpdir());
    snprintf(plain_shard, sizeof plain_shard, "%s/whole/train.bin", test_tmpdir());
    size_t n_cut = 0, n_whole = 0;
    char *cut = read_file(shard, &n_cut), *whole = read_file(plain_shard, &n_whole);
    CHECK(cut && whole && n_cut == n_whole && n_cut > 64 * 4 && !memcmp(cut, whole, n_cut),
          "the shard differs from the one without truncation (%zu against %zu bytes)", n_cut, n_whole);
    free(cut);
    free(whole);
}
