/* SentencePiece-style tokenizer.json (byte-fallback BPE) in: the fixtures trained by `tokenizers`
 * in the layouts of Gemma 3, Llama 2, Mistral, a split Metaspace and a Split on a literal
 * (tests/fixtures/gen/make_sentencepiece_fixtures.py) give, for hard strings, exactly the ids
 * `tokenizers` gave (with its post-processor's BOS) and decode as it decoded them; a document
 * encodes the same on one thread, on several, and through `./train prepare`; what is not supported
 * is refused in one line naming the component. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "data/shard.h"
#include "tests/test.h"
#include "tests/test_util.h"
#include "common/json.h"
#include "tokenizer/tokenizer.h"

static const char *const layouts[] = {"gemma3", "llama2", "mistral", "metaspace", "split"};
#define N_LAYOUTS (sizeof layouts / sizeof layouts[0])

static Tokenizer *load_layout(const char *name) {
    char path[256], err[ERR_LEN];
    snprintf(path, sizeof path, "tests/fixtures/spm_%s.json", name);
    Tokenizer *t = tokenizer_load(path, err);
    if (!t) test_fail(__FILE__, __LINE__, "%s", err);
    return t;
}

/* Where two id lists first differ, or -1. */
static long first_difference(const uint32_t *a, size_t na, const uint32_t *b, size_t nb) {
    size_t i = 0;
    while (i < na && i < nb && a[i] == b[i]) i++;
    return i == na && i == nb ? -1 : (long)i;
}

/* Every case of spm_CASES.expected.json (at least min_cases) with layout NAME's tokenizer: ids (with
 * the BOS) and the decoded text. */
static void expect_cases_match_tokenizers(const char *name, const char *cases_name, size_t min_cases) {
    Tokenizer *t = load_layout(name);
    if (!t) return;
    char path[256], err[ERR_LEN];
    snprintf(path, sizeof path, "tests/fixtures/spm_%s.expected.json", cases_name);
    size_t len;
    char *text = read_file(path, &len);
    REQUIRE(text, "cannot read %s", path);
    JsonValue *cases = json_parse(text, len, path, err);
    REQUIRE(cases && cases->type == JSON_ARRAY && cases->len >= min_cases, "%s: %s", path, err);
    int failures = 0;
    for (size_t c = 0; c < cases->len && failures < 5; c++) {
        const JsonValue *k = &cases->items[c], *s = json_get(k, "text"), *want = json_get(k, "ids_bos"),
                        *decoded = json_get(k, "decoded"), *plain = json_get(k, "ids");
        size_t n;
        uint32_t *ids = tokenizer_encode_alloc(t, s->string, s->len, TOKENIZER_SPECIALS, &n);
        uint32_t *expect = malloc((want->len + 1) * sizeof *expect);
        REQUIRE(ids && expect, "out of memory");
        for (size_t i = 0; i < want->len; i++) expect[i] = (uint32_t)want->items[i].number;
        long at = first_difference(ids, n, expect, want->len);
        if (at >= 0) {
            failures++;
            test_fail(__FILE__, __LINE__, "%s: \"%.40s\": ids differ at %ld (ours %u of %zu, tokenizers %u of %zu)", name,
                      s->string, at, (size_t)at < n ? ids[at] : 0, n,
                      (size_t)at < want->len ? expect[at] : 0, want->len);
        }
        /* the decoder gives back what tokenizers' gives for the ids without the post-processor */
        for (size_t i = 0; i < plain->len; i++) expect[i] = (uint32_t)plain->items[i].number;
        size_t need = tokenizer_decode(t, expect, plain->len, NULL, 0);
        char *back = malloc(need + 1);
        REQUIRE(back, "out of memory");
        size_t got = tokenizer_decode(t, expect, plain->len, back, need);
        if (got != decoded->len || memcmp(back, decoded->string, got) != 0) {
            failures++;
            test_fail(__FILE__, __LINE__, "%s: \"%.40s\" decodes as \"%.*s\", tokenizers gives \"%s\"", name, s->string,
                      (int)(got < 80 ? got : 80), back, decoded->string);
        }
        free(back);
        free(expect);
        free(ids);
    }
    json_free(cases);
    free(text);
    tokenizer_free(t);
}

static void expect_layout_matches_tokenizers(const char *name) {
    expect_cases_match_tokenizers(name, name, 21);
}

TEST(a_gemma3_layout_tokenizer_encodes_and_decodes_hard_strings_as_tokenizers_does) {
    expect_layout_matches_tokenizers("gemma3");
}

TEST(a_llama2_layout_tokenizer_with_prepend_and_fused_unk_matches_tokenizers) {
    expect_layout_matches_tokenizers("llama2");
}

TEST(a_mistral_layout_metaspace_first_with_stripping_added_tokens_matches_tokenizers) {
    expect_layout_matches_tokenizers("mistral");
}

TEST(a_split_metaspace_layout_with_normalized_and_single_word_tokens_matches_tokenizers) {
    expect_layout_matches_tokenizers("metaspace");
}

/* tokenizers' word characters (the Rust regex crate's \w) beside a single_word token: ² and ① are no
 * word characters, Ⓐ, a spacing mark and a variation selector are */
TEST(a_single_word_token_is_kept_from_word_characters_as_tokenizers_keeps_it) {
    expect_cases_match_tokenizers("metaspace", "metaspace_words", 23);
}

TEST(a_split_on_literal_layout_matches_tokenizers) {
    expect_layout_matches_tokenizers("split");
}

TEST(a_sentencepiece_document_encodes_the_same_on_one_thread_and_on_several) {
    size_t len;
    char *doc = read_file("tests/fixtures/spm_document.txt", &len), err[ERR_LEN], path[256];
    REQUIRE(doc, "cannot read the document");
    for (size_t l = 0; l < N_LAYOUTS; l++) {
        Tokenizer *t = load_layout(layouts[l]);
        if (!t) continue;
        snprintf(path, sizeof path, "tests/fixtures/spm_%s.ids", layouts[l]);
        size_t n_want, n;
        uint32_t *want = read_ids_file(path, &n_want), *one = tokenizer_encode_alloc(t, doc, len, TOKENIZER_SPECIALS, &n);
        REQUIRE(want && one, "cannot read %s", path);
        long at = first_difference(one, n, want, n_want);
        CHECK(at < 0, "%s: the document's ids differ at %ld (ours %zu, tokenizers %zu)", layouts[l], at, n, n_want);
        for (int threads = 2; threads <= 7; threads += 5) {
            uint32_t *par = NULL;
            size_t n_par = 0;
            REQUIRE(tokenizer_encode_parallel(t, doc, len, TOKENIZER_SPECIALS, threads, &par, &n_par, err) == 0, "%s",
                    err);
            at = first_difference(par, n_par, want, n_want);
            CHECK(at < 0, "%s on %d threads: ids differ at %ld", layouts[l], threads, at);
            free(par);
        }
        free(one);
        free(want);
        tokenizer_free(t);
    }
    free(doc);
}

/* Post-processors whose tokens hold the separator (Llama 2's <s>) more than once or at the end: each
 * document's ids in the shards are tokenizers' for that document alone, its template's tokens once
 * (the tokens at the parts' ends are the template's, not separators between documents). */
TEST(prepare_wraps_each_document_in_a_template_that_holds_the_separator_as_tokenizers_does) {
    const char *single_seq = "\"Sequence\": {\n          \"id\": \"A\",\n          \"type_id\": 0\n        }\n      }\n    ],";
    const char *with_eos = "\"Sequence\": {\"id\": \"A\", \"type_id\": 0}}, {\"SpecialToken\": {\"id\": \"</s>\", "
                           "\"type_id\": 0}}],";
    const struct {
        const char *what, *edits[4];
        int n_edits;
    } variants[] = {
        {"<s> $A </s>", {single_seq, with_eos, "\"special_tokens\": {", "\"special_tokens\": {\"</s>\": {\"id\": \"</s>\", "
                                                                     "\"ids\": [2], \"tokens\": [\"</s>\"]},"}, 2},
        {"<s> <s> $A", {"\"single\": [", "\"single\": [{\"SpecialToken\": {\"id\": \"<s>\", \"type_id\": 0}},"}, 1},
    };
    const char *docs[] = {"The quick brown fox jumps over the lazy dog. Hello world, again and again.\n",
                          "Größe Straße schön, and a second document of some length to encode here.\n",
                          "A third one: def encode(text): return [vocab[piece] for piece in split(text)]\n"};
    char files[3][800];
    for (int d = 0; d < 3; d++) {
        snprintf(files[d], sizeof files[d], "%s/doc%d.txt", test_tmpdir(), d);
        FILE *f = fopen(files[d], "w");
        REQUIRE(f && fputs(docs[d], f) >= 0 && fclose(f) == 0, "%s", files[d]);
    }
    for (size_t v = 0; v < sizeof variants / sizeof variants[0]; v++) {
        char json[800], args[4000], path[900], err[ERR_LEN], *out = NULL;
        snprintf(json, sizeof json, "%s/variant%zu.json", test_tmpdir(), v);
        REQUIRE(write_edited_copy("tests/fixtures/spm_llama2.json", json, variants[v].edits, variants[v].n_edits) == 0,
                "%s", variants[v].what);
        Tokenizer *t = tokenizer_load(json, err);
        REQUIRE(t, "%s: %s", variants[v].what, err);
        uint32_t want[4096];
        size_t n_want = 0;
        for (int d = 0; d < 3; d++) {
            size_t n;
            uint32_t *ids = tokenizer_encode_alloc(t, docs[d], strlen(docs[d]), TOKENIZER_SPECIALS, &n);
            REQUIRE(ids && n_want + n <= 4096, "encoding");
            memcpy(want + n_want, ids, n * sizeof *ids);
            n_want += n;
            free(ids);
        }
        tokenizer_free(t);
        snprintf(args, sizeof args, "prepare --tokenizer %s --val-fraction 0.4 -o %s/w%zu %s %s %s", json, test_tmpdir(),
                 v, files[0], files[1], files[2]);
        REQUIRE(run_train(args, &out) == 0, "%s: %s", variants[v].what, out);
        free(out);
        uint32_t *ids[2] = {NULL, NULL}, all[4096];
        uint64_t n[2] = {0, 0};
        const char *parts[2] = {"train", "val"};
        for (int k = 0; k < 2; k++) {
            ShardHeader h;
            snprintf(path, sizeof path, "%s/w%zu/%s.bin", test_tmpdir(), v, parts[k]);
            REQUIRE(shard_read(path, 1024, &ids[k], &n[k], &h, err) == 0, "%s", err);
        }
        REQUIRE(n[0] + n[1] <= 4096, "%llu ids", (unsigned long long)(n[0] + n[1]));
        memcpy(all, ids[0], n[0] * sizeof *all);
        memcpy(all + n[0], ids[1], n[1] * sizeof *all);
        const long at = first_difference(all, n[0] + n[1], want, n_want);
        CHECK(at < 0, "%s: the shards' %llu + %llu ids differ from the documents' %zu at %ld (%u against %u)",
              variants[v].what, (unsigned long long)n[0], (unsigned long long)n[1], n_want, at,
              at >= 0 && (size_t)at < n[0] + n[1] ? all[at] : 0, at >= 0 && (size_t)at < n_want ? want[at] : 0);
        free(ids[0]);
        free(ids[1]);
    }
}

/* `./train prepare --tokenizer` on the document: its train and validation shards together hold the
 * ids `tokenizers` gives the document (its BOS once, at the start), wherever the cut falls. */
TEST(prepare_with_a_sentencepiece_tokenizer_gives_the_ids_tokenizers_gives) {
    const char *which[] = {"gemma3", "mistral", "llama2"};
    for (int l = 0; l < 3; l++) {
        char args[1200], path[800], err[ERR_LEN], *out = NULL;
        snprintf(args, sizeof args,
                 "prepare --tokenizer tests/fixtures/spm_%s.json --val-fraction 0.3 -o %s/p%d "
                 "tests/fixtures/spm_document.txt",
                 which[l], test_tmpdir(), l);
        int rc = run_train(args, &out);
        CHECK(rc == 0, "prepare with %s: (%d) %s", which[l], rc, out);
        free(out);
        uint32_t *ids[2] = {NULL, NULL};
        uint64_t n[2] = {0, 0};
        const char *parts[2] = {"train", "val"};
        for (int k = 0; k < 2; k++) {
            ShardHeader h;
            snprintf(path, sizeof path, "%s/p%d/%s.bin", test_tmpdir(), l, parts[k]);
            REQUIRE(shard_read(path, 1024, &ids[k], &n[k], &h, err) == 0, "%s", err);
        }
        uint32_t *all = malloc((n[0] + n[1] + 1) * sizeof *all);
        memcpy(all, ids[0], n[0] * sizeof *all);
        memcpy(all + n[0], ids[1], n[1] * sizeof *all);
        snprintf(path, sizeof path, "tests/fixtures/spm_%s.ids", which[l]);
        size_t n_want;
        uint32_t *want = read_ids_file(path, &n_want);
        REQUIRE(want, "cannot read %s", path);
        long at = first_difference(all, n[0] + n[1], want, n_want);
        CHECK(n[1] > 0 && at < 0, "%s: %llu + %llu ids differ from tokenizers' %zu at %ld", which[l],
              (unsigned long long)n[0], (unsigned long long)n[1], n_want, at);
        free(want);
        free(all);
        free(ids[0]);
        free(ids[1]);
    }
}

/* prepare's files are documents, each encoded by tokenizers alone: after the separator the ids of
 * the next document are those it has alone, past the post-processor's tokens before it (Mistral's
 * Metaspace, prepend_scheme "first", puts its "▁" at each document's start, not only the text's). */
TEST(a_document_after_the_separator_gets_the_ids_it_has_alone_in_every_layout) {
    for (size_t l = 0; l < N_LAYOUTS; l++) {
        Tokenizer *t = load_layout(layouts[l]);
        if (!t) continue;
        size_t eot_len, n_whole, n_alone;
        const char *eot = tokenizer_eot_text(t, &eot_len);
        const char *second = "Second doc here, with more words.";
        char text[256];
        snprintf(text, sizeof text, "First doc.%.*s%s", (int)eot_len, eot, second);
        const int flags = TOKENIZER_SPECIALS | TOKENIZER_DOCUMENTS;
        uint32_t *whole = tokenizer_encode_alloc(t, text, strlen(text), flags, &n_whole);
        uint32_t *alone = tokenizer_encode_alloc(t, second, strlen(second), flags, &n_alone);
        const uint32_t *before;
        const size_t n_before = (size_t)tokenizer_post_tokens(t, 0, &before);
        size_t at = n_before; /* past the post-processor's tokens, which may hold the separator's id */
        while (whole && at < n_whole && whole[at] != tokenizer_eot_token(t)) at++;
        REQUIRE(whole && alone && at < n_whole && n_alone >= n_before, "%s: no separator among the ids", layouts[l]);
        const uint32_t *tail = whole + at + 1;
        const size_t n_tail = n_whole - at - 1;
        CHECK(first_difference(tail, n_tail, alone + n_before, n_alone - n_before) < 0,
              "%s: the second document's ids differ from its own at %ld", layouts[l],
              first_difference(tail, n_tail, alone + n_before, n_alone - n_before));
        free(whole);
        free(alone);
        tokenizer_free(t);
    }
}

/* A run trained on shards of an imported Gemma 3 layout tokenizer: each checkpoint carries its
 * tokenizer.json byte for byte, and `./train sample` decodes through its decoder ("▁" as spaces). */
TEST(a_checkpoint_carries_the_imported_sentencepiece_tokenizer_json_unchanged_and_samples_decode_with_it) {
    char args[2400], path[900], run[800], *out = NULL;
    snprintf(run, sizeof run, "%s/run", test_tmpdir());
    snprintf(args, sizeof args, "prepare --tokenizer tests/fixtures/spm_gemma3.json -o %s/prep tests/fixtures/spm_document.txt",
             test_tmpdir());
    CHECK(run_train(args, &out) == 0, "prepare: %s", out);
    free(out);
    snprintf(args, sizeof args,
             "-i %s/prep/train.bin --tokenizer tests/fixtures/spm_gemma3.json -v 1024 --device cpu -e tiny -b 2 -t 32 "
             "--max-seq-len 128 -x 4 -n 4 -s 0 -o %s",
             test_tmpdir(), run);
    CHECK(run_train(args, &out) == 0, "train: %s", out);
    free(out);
    size_t n_copy = 0, n_orig = 0;
    snprintf(path, sizeof path, "%s/step_00000004/tokenizer.json", run);
    char *copy = read_file(path, &n_copy), *orig = read_file("tests/fixtures/spm_gemma3.json", &n_orig);
    CHECK(copy && orig && n_copy == n_orig && memcmp(copy, orig, n_orig) == 0,
          "the checkpoint's tokenizer.json (%zu bytes) is not the imported file (%zu bytes)", n_copy, n_orig);
    free(copy);
    free(orig);
    snprintf(args, sizeof args, "sample -o %s --device cpu --prompt 'Hello world' -G 8 --temperature 0 --ids", run);
    CHECK(run_train(args, &out) == 0 && out && strstr(out, "<bos>Hello world") && !strstr(out, "\xe2\x96\x81"),
          "sample: %s", out);
    free(out);
}

static void expect_refused(const char *from, const char *to, const char *msg) {
    expect_tokenizer_json_refused("tests/fixtures/spm_gemma3.json", from, to, msg);
}

TEST(sentencepiece_models_and_components_we_do_not_run_are_refused_by_name) {
    /* without byte fallback it is neither kind: said so, not blamed on a step byte-level files lack */
    for (int l = 0; l < 3; l++) {
        const char *files[] = {"tests/fixtures/spm_gemma3.json", "tests/fixtures/spm_llama2.json",
                               "tests/fixtures/spm_mistral.json"};
        expect_tokenizer_json_refused(files[l], "\"byte_fallback\": true", "\"byte_fallback\": false",
                                      "neither byte-level (no ByteLevel pre-tokenizer or decoder) nor SentencePiece-style "
                                      "with byte_fallback true");
    }
    expect_refused("\"type\": \"BPE\"", "\"type\": \"Unigram\"", "model Unigram is not supported");
    expect_refused("\"type\": \"BPE\"", "\"type\": \"WordPiece\"", "model WordPiece is not supported");
    expect_refused("\"type\": \"BPE\"", "\"type\": \"WordLevel\"", "model WordLevel is not supported");
    expect_refused("\"type\": \"Replace\"", "\"type\": \"NFKC\"", "normalizer NFKC is not supported");
    expect_refused("\"type\": \"Replace\"", "\"type\": \"Lowercase\"", "normalizer Lowercase is not supported");
    expect_refused("\"pre_tokenizer\": null", "\"pre_tokenizer\": {\"type\": \"Whitespace\"}",
                   "pre_tokenizer Whitespace is not supported");
    expect_refused("\"pre_tokenizer\": null", "\"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"Regex\": \" \"}}",
                   "pre_tokenizer Split on a regex is not supported");
    expect_refused("\"type\": \"TemplateProcessing\"", "\"type\": \"RobertaProcessing\"",
                   "post_processor RobertaProcessing is not supported");
    expect_refused("\"type\": \"ByteFallback\"", "\"type\": \"WordPiece\"", "decoder WordPiece is not supported");
    expect_refused("\"type\": \"Fuse\"", "\"type\": \"CTC\"", "decoder CTC is not supported");
    expect_refused("\"unk_token\": null", "\"unk_token\": \"<nope>\"", "unk_token \"<nope>\" is not in the vocabulary");
    expect_refused("\"dropout\": null", "\"dropout\": 0.1", "dropout");
    /* a Replace on a regex is not run; one with an empty String or no content is malformed */
    expect_refused("\"String\": \" \"\n    },\n    \"content\"", "\"Regex\": \" \"\n    },\n    \"content\"",
                   "normalizer Replace with a regex pattern is not supported");
    expect_refused("\"String\": \" \"\n    },\n    \"content\"", "\"String\": \"\"\n    },\n    \"content\"",
                   "normalizer Replace needs a non-empty pattern String and a content string");
}
