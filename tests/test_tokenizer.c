/* tests/test_tokenizer.c - the byte-level BPE tokenizer: round trips, the split against a PCRE2
 * oracle, training against a brute-force reference, special tokens, and every bad input's error.
 * All text is generated here (seeded), so CI downloads nothing. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "common/rng.h"
#include "tests/test.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_internal.h"

/* ---- generated text ---- */

static const char *const words[] = {
    "the", "of", "and", "to", "in", "a", "is", "that", "for", "it", "as", "was", "with", "be", "by", "on",
    "not", "he", "I", "this", "are", "or", "his", "from", "at", "which", "but", "have", "an", "had", "they",
    "you", "were", "their", "one", "all", "we", "can", "her", "has", "there", "been", "if", "more", "when",
    "will", "would", "who", "so", "no", "Lord", "God", "said", "unto", "shall", "house", "water", "light",
    "word", "place", "people", "king", "land", "day", "night", "great", "small", "dictionary", "meaning",
};
/* Pieces that exercise every alternative of the split pattern and the UTF-8 decoder. */
static const char *const extras[] = {
    "'s", "'T", "'ll", "'VE", "'re", "'d", "'m", "'x", "don't", "I'M", " 123", "4567", "1,000,000", "3.14",
    "...", "!?", " --", "\n", "\n\n", "\r\n", "  \n ", "\t", "   ", " \t\n", "(", ")", " \"quoted\"", "#1",
    "caf\xc3\xa9", "na\xc3\xafve", "\xc3\x85ngstr\xc3\xb6m", "\xce\xb1\xce\xb2\xce\xb3", /* Greek */
    "\xe4\xb8\xad\xe6\x96\x87", /* CJK */ "\xc2\xa0", /* NBSP */ "\xe3\x80\x80", /* ideographic space */
    "\xd9\xa3\xd9\xa4", /* Arabic-Indic digits (Nd) */ "\xe2\x85\xab", /* Roman numeral XII (Nl) */
    "\xc2\xbd", /* one half (No) */ "e\xcc\x81", /* e + combining acute (Mn) */ "\xf0\x9f\x98\x80", /* emoji */
    "\xe2\x80\x94", /* em dash */ "\xe2\x80\xa8", /* line separator */ "\xc2\x85", /* NEL */ "\x0b\x0c",
    "$5", "x\xe2\x80\x99s", "ALL CAPS", "MiXeD",
};

/* Valid UTF-8, English-like, with the extras sprinkled in. */
static char *make_text(Rng *rng, size_t bytes, size_t *len) {
    char *s = malloc(bytes + 64);
    size_t n = 0;
    while (n < bytes) {
        const char *w;
        if (rng_below(rng, 10) == 0) w = extras[rng_below(rng, sizeof extras / sizeof *extras)];
        else w = words[rng_below(rng, sizeof words / sizeof *words)];
        size_t k = strlen(w);
        if (n + k + 2 > bytes + 63) break;
        memcpy(s + n, w, k);
        n += k;
        uint64_t r = rng_below(rng, 20);
        s[n++] = r == 0 ? '\n' : r == 1 ? ',' : r == 2 ? '.' : ' ';
    }
    *len = n;
    return s;
}

/* Arbitrary bytes, weighted toward the interesting ones: ASCII letters and spaces, UTF-8 lead and
 * continuation bytes, and pieces of "<|endoftext|>". */
static size_t make_bytes(Rng *rng, uint8_t *s, size_t max) {
    size_t n = rng_below(rng, max + 1);
    static const char pool[] = "ab <|endoftext|>\n\r\t'sdl9.";
    for (size_t i = 0; i < n; i++) {
        uint64_t r = rng_below(rng, 4);
        if (r == 0) s[i] = (uint8_t)rng_below(rng, 256);
        else if (r == 1) s[i] = (uint8_t)(0x80 + rng_below(rng, 0x78));
        else s[i] = (uint8_t)pool[rng_below(rng, sizeof pool - 1)];
    }
    return n;
}

static Tokenizer *train_on(const char *text, size_t len, uint32_t V, int threads) {
    char err[ERR_LEN];
    TokenizerTrainOptions opt = {V, threads, 0};
    Tokenizer *t = tokenizer_train(text, len, &opt, err);
    if (!t) test_fail(__FILE__, __LINE__, "training failed: %s", err);
    return t;
}

static Tokenizer *small_tokenizer(uint32_t V) {
    Rng rng;
    rng_seed(&rng, 7);
    size_t len;
    char *text = make_text(&rng, 200000, &len);
    Tokenizer *t = train_on(text, len, V, 2);
    free(text);
    return t;
}

/* encode then decode; returns 1 when the bytes come back and every id is in the vocabulary. */
static int round_trips(const Tokenizer *t, const char *s, size_t n, int allow_special) {
    uint32_t *ids = malloc((n + 1) * sizeof *ids);
    char *back = malloc(n + 1);
    size_t k = tokenizer_encode(t, s, n, allow_special, ids, n + 1);
    int ok = k <= n || (n == 0 && k == 0);
    for (size_t i = 0; ok && i < k; i++) ok = ids[i] < tokenizer_vocab_size(t);
    ok = ok && tokenizer_decode(t, ids, k, back, n + 1) == n && memcmp(back, s, n) == 0;
    free(back);
    free(ids);
    return ok;
}

/* ---- round trips ---- */

TEST(tokenizer_round_trips_random_bytes) {
    Tokenizer *t = small_tokenizer(2000);
    REQUIRE(t, "no tokenizer");
    Rng rng;
    rng_seed(&rng, 12345);
    uint8_t buf[600];
    int bad = 0;
    for (int i = 0; i < 5000; i++) {
        size_t n = make_bytes(&rng, buf, i % 10 == 0 ? sizeof buf : 40);
        for (int special = 0; special < 2; special++)
            if (!round_trips(t, (const char *)buf, n, special)) bad++;
    }
    CHECK(bad == 0, "%d of 10000 random byte strings did not round-trip", bad);
    tokenizer_free(t);
}

TEST(tokenizer_round_trips_generated_text_serial_equals_parallel) {
    Tokenizer *t = small_tokenizer(3000);
    REQUIRE(t, "no tokenizer");
    Rng rng;
    rng_seed(&rng, 99);
    size_t len;
    char *text = make_text(&rng, 300000, &len);
    CHECK(round_trips(t, text, len, 1), "generated text did not round-trip");
    uint32_t *serial = malloc((len + 1) * sizeof *serial), *par = NULL;
    size_t n1 = tokenizer_encode(t, text, len, 1, serial, len + 1), n2 = 0;
    char err[ERR_LEN];
    REQUIRE(tokenizer_encode_parallel(t, text, len, 1, 3, &par, &n2, err) == 0, "parallel encode: %s", err);
    CHECK(n1 == n2 && memcmp(serial, par, n1 * sizeof *par) == 0, "parallel encoding (%zu tokens) differs from serial (%zu)",
          n2, n1);
    CHECK(n1 < len / 2, "a 3000-token vocabulary should compress English-like text (%zu tokens for %zu bytes)", n1, len);
    free(par);
    free(serial);
    free(text);
    tokenizer_free(t);
}

TEST(tokenizer_long_chunks_heap_bpe_matches_quadratic_bpe) {
    Tokenizer *t = small_tokenizer(1500);
    REQUIRE(t, "no tokenizer");
    Rng rng;
    rng_seed(&rng, 5);
    uint32_t a[64], b[64];
    int bad = 0;
    for (int i = 0; i < 3000; i++) {
        uint8_t s[64];
        size_t n = 1 + rng_below(&rng, 64);
        static const char letters[] = "theandofwasaeiou";
        for (size_t j = 0; j < n; j++) s[j] = (uint8_t)letters[rng_below(&rng, sizeof letters - 1)];
        size_t na = bpe_chunk(t, s, n, a, 1), nb = bpe_chunk(t, s, n, b, 0);
        if (na != nb || memcmp(a, b, na * sizeof *a) != 0) bad++;
    }
    CHECK(bad == 0, "heap and quadratic BPE disagree on %d of 3000 chunks", bad);
    /* A chunk far longer than the cache limit: 100000 letters round-trip. */
    size_t n = 100000;
    char *long_word = malloc(n);
    for (size_t j = 0; j < n; j++) long_word[j] = "theand"[j % 6];
    CHECK(tokenizer_chunk_len(long_word, n) == n, "a run of letters is one chunk");
    CHECK(round_trips(t, long_word, n, 0), "a 100000-letter chunk did not round-trip");
    free(long_word);
    tokenizer_free(t);
}

/* ---- the split against PCRE2 ---- */

static const char *const cl100k_pattern =
    "'(?i:[sdmt]|ll|ve|re)|[^\\r\\n\\p{L}\\p{N}]?+\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]++[\\r\\n]*|\\s*[\\r\\n]|"
    "\\s+(?!\\S)|\\s+";

/* Compares our chunk boundaries with PCRE2's on s; returns the offset of the first disagreement
 * or SIZE_MAX when they agree. */
static size_t split_disagreement(pcre2_code *re, pcre2_match_data *md, const char *split, const char *s, size_t n) {
    size_t at = 0;
    while (at < n) {
        int rc = pcre2_match(re, (PCRE2_SPTR)s, n, at, PCRE2_NO_UTF_CHECK, md, NULL);
        if (rc < 0) return at;
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        if (ov[0] != at) return at;
        size_t ours = split ? tokenizer_split_len(split, s + at, n - at) : tokenizer_chunk_len(s + at, n - at);
        if (ours != ov[1] - ov[0]) return at;
        at += ours;
    }
    return SIZE_MAX;
}

/* The patterns of Hugging Face tokenizer.json files we split by hand, spelled as those files do. */
static const char *const llama3_pattern =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char *const qwen2_pattern =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char *const gpt2_pattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

/* Our split (NULL: tokenizer_chunk_len, else tokenizer_split_len's name) against PCRE2 running
 * pattern, on generated text. */
static void check_split_against_pcre2(const char *pattern, const char *split);

TEST(tokenizer_split_matches_pcre2_cl100k_oracle) {
    check_split_against_pcre2(cl100k_pattern, NULL);
}

TEST(tokenizer_split_matches_pcre2_on_llama3s_spelling_of_the_pattern) {
    check_split_against_pcre2(llama3_pattern, "cl100k");
}

TEST(tokenizer_split_qwen2_matches_pcre2) {
    check_split_against_pcre2(qwen2_pattern, "qwen2");
}

TEST(tokenizer_split_gpt2_matches_pcre2) {
    check_split_against_pcre2(gpt2_pattern, "gpt2");
}

static void check_split_against_pcre2(const char *pattern, const char *split) {
    int errcode;
    PCRE2_SIZE erroff;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &errcode,
                                   &erroff, NULL);
    REQUIRE(re, "PCRE2 did not compile the pattern %s (error %d at %zu)", pattern, errcode, (size_t)erroff);
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
    Rng rng;
    rng_seed(&rng, 2024);
    /* Short texts find the first difference quickly; one long text covers the rest. */
    for (int i = 0; i < 2000; i++) {
        size_t len;
        char *text = make_text(&rng, 1 + rng_below(&rng, 120), &len);
        size_t bad = split_disagreement(re, md, split, text, len);
        if (bad != SIZE_MAX) {
            test_fail(__FILE__, __LINE__, "split differs from PCRE2 at byte %zu of \"%.*s\"", bad, (int)len, text);
            free(text);
            break;
        }
        free(text);
    }
    /* Pieces glued with no separator, so every pair of alternatives meets. */
    for (int i = 0; i < 3000; i++) {
        char glued[512];
        size_t n = 0;
        for (int k = 0; k < 6; k++) {
            const char *w = rng_below(&rng, 2) ? extras[rng_below(&rng, sizeof extras / sizeof *extras)]
                                                : words[rng_below(&rng, sizeof words / sizeof *words)];
            memcpy(glued + n, w, strlen(w));
            n += strlen(w);
        }
        size_t bad = split_disagreement(re, md, split, glued, n);
        if (bad != SIZE_MAX) {
            test_fail(__FILE__, __LINE__, "split differs from PCRE2 at byte %zu of \"%.*s\"", bad, (int)n, glued);
            break;
        }
    }
    size_t len;
    char *text = make_text(&rng, 1000000, &len);
    size_t bad = split_disagreement(re, md, split, text, len);
    CHECK(bad == SIZE_MAX, "split differs from PCRE2 at byte %zu of the generated text: \"%.*s\"", bad, 40,
          bad < len ? text + bad : "");
    free(text);
    pcre2_match_data_free(md);
    pcre2_code_free(re);
}

TEST(tokenizer_split_examples) {
    const char *s = "Hello world's  big\n\n  123456 caf\xc3\xa9!!\n";
    const char *want[] = {"Hello", " world", "'s", " ", " big", "\n\n", " ", " ", "123", "456", " caf\xc3\xa9", "!!\n"};
    size_t n = strlen(s), at = 0, k = 0;
    while (at < n && k < sizeof want / sizeof *want) {
        size_t c = tokenizer_chunk_len(s + at, n - at);
        CHECK(c == strlen(want[k]) && memcmp(s + at, want[k], c) == 0, "chunk %zu is \"%.*s\", expected \"%s\"", k,
              (int)c, s + at, want[k]);
        at += c;
        k++;
    }
    CHECK(at == n && k == sizeof want / sizeof *want, "split into a different number of chunks");
    /* Invalid UTF-8 bytes are single "other" characters: a stray continuation byte, a truncated
     * sequence at the end. */
    CHECK(tokenizer_chunk_len("\x80" "abc", 4) == 4, "a stray byte before letters is rule 2's prefix");
    CHECK(tokenizer_chunk_len("\xe4\xb8", 2) == 2, "a truncated sequence is a punctuation run of two bytes");
}

/* ---- training ---- */

TEST(tokenizer_training_is_deterministic_across_threads) {
    Rng rng;
    rng_seed(&rng, 3);
    size_t len;
    char *text = make_text(&rng, 300000, &len);
    Tokenizer *a = train_on(text, len, 4000, 1), *b = train_on(text, len, 4000, 2);
    REQUIRE(a && b, "no tokenizer");
    char pa[1200], pb[1200], err[ERR_LEN];
    snprintf(pa, sizeof pa, "%s/a.bin", test_tmpdir());
    snprintf(pb, sizeof pb, "%s/b.bin", test_tmpdir());
    REQUIRE(tokenizer_save(a, pa, err) == 0, "save: %s", err);
    REQUIRE(tokenizer_save(b, pb, err) == 0, "save: %s", err);
    FILE *fa = fopen(pa, "rb"), *fb = fopen(pb, "rb");
    REQUIRE(fa && fb, "saved files missing");
    int same = 1, ca, cb;
    do {
        ca = fgetc(fa);
        cb = fgetc(fb);
        if (ca != cb) same = 0;
    } while (ca != EOF && cb != EOF);
    fclose(fa);
    fclose(fb);
    CHECK(same, "two trainings of the same text gave different files");
    tokenizer_free(a);
    tokenizer_free(b);
    free(text);
}

TEST(tokenizer_learns_expected_merges_on_hand_made_text) {
    /* One chunk "aaabdaaabac": (a,a) occurs 4 times (overlaps counted, as pair counts do); merging
     * it gives Z a b d Z a b a c, where (Z,a) and (a,b) tie at 2 and the smaller ids win: (a,b).
     * Then (Z,Y) occurs twice; after that every pair occurs once, so training stops there. */
    const char *text = "aaabdaaabac";
    Tokenizer *t = train_on(text, strlen(text), 1000, 1);
    REQUIRE(t, "no tokenizer");
    CHECK(tokenizer_num_merges(t) == 3, "expected 3 merges, got %u", tokenizer_num_merges(t));
    CHECK(tokenizer_vocab_size(t) == 260, "vocabulary should stop at 260 tokens, got %u", tokenizer_vocab_size(t));
    uint32_t want[3][2] = {{'a', 'a'}, {'a', 'b'}, {256, 257}};
    for (uint32_t i = 0; i < 3 && i < tokenizer_num_merges(t); i++) {
        uint32_t l, r;
        CHECK(tokenizer_merge_pair(t, 256 + i, &l, &r) == 0 && l == want[i][0] && r == want[i][1],
              "merge %u is (%u, %u), expected (%u, %u)", i, l, r, want[i][0], want[i][1]);
    }
    size_t n;
    const uint8_t *b = tokenizer_token_bytes(t, 258, &n);
    CHECK(b && n == 4 && memcmp(b, "aaab", 4) == 0, "token 258 should be \"aaab\"");
    uint32_t ids[16];
    size_t k = tokenizer_encode(t, text, strlen(text), 0, ids, 16);
    uint32_t expect[] = {258, 'd', 258, 'a', 'c'};
    CHECK(k == 5 && memcmp(ids, expect, sizeof expect) == 0, "\"aaabdaaabac\" should encode to 5 tokens, got %zu", k);
    tokenizer_free(t);
}

/* The textbook algorithm: recount every pair of every word before each merge. */
static uint32_t reference_train(const char *text, size_t len, uint32_t n_merges, uint32_t *merges) {
    size_t cap = len + 1, n_words = 0;
    uint32_t **sym = malloc(cap * sizeof *sym);
    size_t *wl = malloc(cap * sizeof *wl);
    for (size_t at = 0; at < len;) {
        size_t c = tokenizer_chunk_len(text + at, len - at);
        sym[n_words] = malloc(c * sizeof **sym);
        for (size_t i = 0; i < c; i++) sym[n_words][i] = (uint8_t)text[at + i];
        wl[n_words++] = c;
        at += c;
    }
    PairMap counts;
    pair_map_init(&counts, 1 << 12);
    uint32_t m = 0;
    int64_t *cnt = malloc(sizeof *cnt * (len + 1));
    uint64_t *keys = malloc(sizeof *keys * (len + 1));
    for (; m < n_merges; m++) {
        pair_map_free(&counts);
        pair_map_init(&counts, 1 << 12);
        size_t np = 0;
        for (size_t w = 0; w < n_words; w++)
            for (size_t i = 0; i + 1 < wl[w]; i++) {
                int ins;
                int64_t slot = pair_map_upsert(&counts, pair_key(sym[w][i], sym[w][i + 1]), (uint32_t)np, &ins);
                if (ins) {
                    keys[np] = pair_key(sym[w][i], sym[w][i + 1]);
                    cnt[np++] = 0;
                }
                cnt[counts.values[slot]]++;
            }
        size_t best = SIZE_MAX;
        for (size_t p = 0; p < np; p++)
            if (best == SIZE_MAX || cnt[p] > cnt[best] || (cnt[p] == cnt[best] && keys[p] < keys[best])) best = p;
        if (best == SIZE_MAX || cnt[best] < 2) break;
        uint32_t a = (uint32_t)(keys[best] >> 32), b = (uint32_t)keys[best], z = 256 + m;
        merges[2 * m] = a;
        merges[2 * m + 1] = b;
        for (size_t w = 0; w < n_words; w++) {
            size_t j = 0;
            for (size_t i = 0; i < wl[w];) {
                if (i + 1 < wl[w] && sym[w][i] == a && sym[w][i + 1] == b) {
                    sym[w][j++] = z;
                    i += 2;
                } else {
                    sym[w][j++] = sym[w][i++];
                }
            }
            wl[w] = j;
        }
    }
    for (size_t w = 0; w < n_words; w++) free(sym[w]);
    free(sym);
    free(wl);
    free(cnt);
    free(keys);
    pair_map_free(&counts);
    return m;
}


/* The first n_ref merges of t are the reference's pairs, in order (a failure names the first that differs). */
static void expect_merges_of_reference(const Tokenizer *t, const uint32_t *ref, uint32_t n_ref) {
    for (uint32_t i = 0; i < n_ref && i < tokenizer_num_merges(t); i++) {
        uint32_t l, r;
        tokenizer_merge_pair(t, 256 + i, &l, &r);
        if (l != ref[2 * i] || r != ref[2 * i + 1]) {
            test_fail(__FILE__, __LINE__, "merge %u is (%u, %u), reference (%u, %u)", i, l, r, ref[2 * i],
                      ref[2 * i + 1]);
            return;
        }
    }
}
TEST(tokenizer_training_matches_brute_force_reference) {
    Rng rng;
    rng_seed(&rng, 11);
    size_t len;
    char *text = make_text(&rng, 20000, &len);
    uint32_t want = 600;
    uint32_t *ref = malloc(2 * want * sizeof *ref);
    uint32_t n_ref = reference_train(text, len, want, ref);
    Tokenizer *t = train_on(text, len, want + TOKENIZER_MIN_VOCAB, 2);
    REQUIRE(t, "no tokenizer");
    CHECK(tokenizer_num_merges(t) == n_ref, "%u merges, reference made %u", tokenizer_num_merges(t), n_ref);
    expect_merges_of_reference(t, ref, n_ref);
    free(ref);
    free(text);
    tokenizer_free(t);
}

/* Words glued with no white space or punctuation: one chunk of about `bytes` letters. */
static char *make_long_line(Rng *rng, size_t bytes, size_t *len) {
    char *s = malloc(bytes + 32);
    size_t n = 0;
    while (n < bytes) {
        const char *w = words[rng_below(rng, sizeof words / sizeof *words)];
        memcpy(s + n, w, strlen(w));
        n += strlen(w);
    }
    *len = n;
    return s;
}

TEST(tokenizer_training_on_one_long_line_matches_the_brute_force_reference) {
    /* Every merge rewrites the same single word, runs of one letter included ("aaaa..." merges its
     * overlapping pairs left to right), and ties are broken as the reference breaks them. */
    Rng rng;
    rng_seed(&rng, 17);
    size_t len;
    char *text = make_long_line(&rng, 20000, &len);
    memset(text + 1000, 'a', 333);
    memset(text + 3000, 'e', 64);
    REQUIRE(tokenizer_chunk_len(text, len) == len, "the text should be one chunk");
    uint32_t want = 400;
    uint32_t *ref = malloc(2 * want * sizeof *ref);
    uint32_t n_ref = reference_train(text, len, want, ref);
    Tokenizer *t = train_on(text, len, want + TOKENIZER_MIN_VOCAB, 1);
    REQUIRE(t, "no tokenizer");
    CHECK(n_ref == want && tokenizer_num_merges(t) == n_ref, "%u merges, reference made %u", tokenizer_num_merges(t),
          n_ref);
    expect_merges_of_reference(t, ref, n_ref);
    free(ref);
    free(text);
    tokenizer_free(t);
}

TEST(tokenizer_training_on_a_long_line_without_white_space_reaches_the_vocabulary) {
    /* Half a megabyte in one chunk: every merge rewrites the same word, so the cost of a merge must
     * follow the occurrences it joins, not the word's length. */
    Rng rng;
    rng_seed(&rng, 23);
    size_t len;
    char *text = make_long_line(&rng, 500000, &len);
    Tokenizer *t = train_on(text, len, 2000, 1);
    REQUIRE(t, "no tokenizer");
    CHECK(tokenizer_vocab_size(t) == 2000, "reached %u tokens of 2000", tokenizer_vocab_size(t));
    CHECK(round_trips(t, text, len, 0), "the line did not round-trip");
    uint32_t *ids = malloc((len + 1) * sizeof *ids);
    size_t n = tokenizer_encode(t, text, len, 0, ids, len + 1);
    CHECK(n < len / 4, "2000 tokens learned from the line should compress it (%zu tokens for %zu bytes)", n, len);
    free(ids);
    free(text);
    tokenizer_free(t);
}

TEST(tokenizer_training_never_makes_a_token_longer_than_the_limit) {
    /* 100000 a's: merges double a token while its pair repeats; a token of 2048 bytes is never made,
     * and training stops short of the vocabulary asked for rather than make one. */
    size_t len = 100000;
    char *text = malloc(len);
    memset(text, 'a', len);
    Tokenizer *t = train_on(text, len, 1000, 1);
    REQUIRE(t, "no tokenizer");
    size_t longest = 0;
    for (uint32_t id = 0; id < tokenizer_eot_token(t); id++) {
        size_t n;
        tokenizer_token_bytes(t, id, &n);
        if (n > longest) longest = n;
    }
    CHECK(longest == TOKENIZER_MAX_TOKEN_BYTES, "the longest token is %zu bytes", longest);
    CHECK(tokenizer_vocab_size(t) < 1000, "reached %u tokens: only a few pairs of a's fit the limit",
          tokenizer_vocab_size(t));
    CHECK(round_trips(t, text, len, 0), "the a's did not round-trip");
    free(text);
    tokenizer_free(t);
}

TEST(tokenizer_stops_when_no_pair_repeats_and_reports_size) {
    const char *text = "the cat sat on the mat";
    Tokenizer *t = train_on(text, strlen(text), 262144, 1);
    REQUIRE(t, "no tokenizer");
    CHECK(tokenizer_vocab_size(t) < 300, "a 22-byte corpus cannot reach 262144 tokens (reached %u)",
          tokenizer_vocab_size(t));
    CHECK(tokenizer_eot_token(t) == tokenizer_vocab_size(t) - 1, "EOT is the last token");
    tokenizer_free(t);
}

TEST(tokenizer_rejects_vocab_below_bytes_plus_specials) {
    char err[ERR_LEN] = "";
    TokenizerTrainOptions opt = {256, 1, 0};
    CHECK(!tokenizer_train("hello hello", 11, &opt, err), "V = 256 must be rejected");
    CHECK(strstr(err, "below 257"), "error should name the minimum: %s", err);
    opt.vocab_size = 257;
    Tokenizer *t = tokenizer_train("hello hello", 11, &opt, err);
    CHECK(t && tokenizer_vocab_size(t) == 257 && tokenizer_num_merges(t) == 0, "V = 257 is bytes + EOT");
    tokenizer_free(t);
}

TEST(tokenizer_rejects_empty_corpus) {
    char err[ERR_LEN] = "";
    TokenizerTrainOptions opt = {1000, 1, 0};
    CHECK(!tokenizer_train("", 0, &opt, err), "an empty corpus must be rejected");
    CHECK(strstr(err, "empty"), "error should say the corpus is empty: %s", err);
    err[0] = 0;
    const char *only = "<|endoftext|><|endoftext|>";
    CHECK(!tokenizer_train(only, strlen(only), &opt, err), "a corpus of separators only must be rejected");
    CHECK(strstr(err, "empty"), "error should say the corpus is empty: %s", err);
}

/* ---- special token ---- */

TEST(tokenizer_special_token_encodes_only_when_allowed) {
    Tokenizer *t = small_tokenizer(600);
    REQUIRE(t, "no tokenizer");
    uint32_t eot = tokenizer_eot_token(t);
    CHECK(eot == 599 && tokenizer_vocab_size(t) == 600, "EOT should be the last of 600 tokens, is %u", eot);
    const char *s = "the end.<|endoftext|>A new start<|endoftext|>";
    size_t n = strlen(s);
    uint32_t ids[64];
    size_t k = tokenizer_encode(t, s, n, 1, ids, 64);
    int eots = 0;
    for (size_t i = 0; i < k; i++) eots += ids[i] == eot;
    CHECK(eots == 2 && ids[k - 1] == eot, "allowed: two EOT tokens, the last one at the end (got %d)", eots);
    k = tokenizer_encode(t, s, n, 0, ids, 64);
    eots = 0;
    for (size_t i = 0; i < k; i++) eots += ids[i] == eot;
    CHECK(eots == 0, "not allowed: the separator is plain text (got %d EOT tokens)", eots);
    CHECK(round_trips(t, s, n, 0) && round_trips(t, s, n, 1), "both ways round-trip");
    char out[32];
    CHECK(tokenizer_decode(t, &eot, 1, out, sizeof out) == 13 && memcmp(out, "<|endoftext|>", 13) == 0,
          "EOT decodes as its text");
    /* The separator is never learned as a merge, however common. */
    for (uint32_t id = 256; id < eot; id++) {
        size_t len;
        const uint8_t *b = tokenizer_token_bytes(t, id, &len);
        if (len >= 2 && memmem(b, len, "|>", 2)) {
            test_fail(__FILE__, __LINE__, "token %u holds part of the separator", id);
            break;
        }
    }
    tokenizer_free(t);
}

TEST(tokenizer_decode_reports_needed_bytes_and_marks_bad_ids) {
    Tokenizer *t = small_tokenizer(500);
    REQUIRE(t, "no tokenizer");
    uint32_t ids[] = {'h', 'i', 4000000000u};
    char out[8];
    size_t need = tokenizer_decode(t, ids, 3, out, 3);
    CHECK(need == 5, "two bytes + U+FFFD need 5 bytes, got %zu", need);
    CHECK(memcmp(out, "hi\xef", 3) == 0, "decode writes the prefix that fits");
    uint32_t enc[4];
    size_t k = tokenizer_encode(t, "hello there", 11, 0, enc, 1);
    CHECK(k >= 2 && enc[0] < 500, "encode returns the count needed even when cap is small (%zu)", k);
    tokenizer_free(t);
}

/* ---- files ---- */

static long file_size(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fclose(f);
    return n;
}

TEST(tokenizer_save_load_round_trip) {
    Tokenizer *t = small_tokenizer(1200);
    REQUIRE(t, "no tokenizer");
    char path[1200], err[ERR_LEN];
    snprintf(path, sizeof path, "%s/tok.bin", test_tmpdir());
    REQUIRE(tokenizer_save(t, path, err) == 0, "save: %s", err);
    Tokenizer *u = tokenizer_load(path, err);
    REQUIRE(u, "load: %s", err);
    CHECK(tokenizer_vocab_size(u) == tokenizer_vocab_size(t) && tokenizer_eot_token(u) == tokenizer_eot_token(t),
          "sizes differ after load");
    const char *s = "Which is the word of the Lord, 123 caf\xc3\xa9 don't.\n";
    uint32_t a[128], b[128];
    size_t na = tokenizer_encode(t, s, strlen(s), 1, a, 128), nb = tokenizer_encode(u, s, strlen(s), 1, b, 128);
    CHECK(na == nb && memcmp(a, b, na * sizeof *a) == 0, "loaded tokenizer encodes differently");
    tokenizer_free(u);
    tokenizer_free(t);
}

TEST(tokenizer_load_rejects_missing_truncated_and_corrupt_files) {
    Tokenizer *t = small_tokenizer(800);
    REQUIRE(t, "no tokenizer");
    char path[1200], bad[1300], err[ERR_LEN];
    snprintf(path, sizeof path, "%s/tok.bin", test_tmpdir());
    REQUIRE(tokenizer_save(t, path, err) == 0, "save: %s", err);
    tokenizer_free(t);
    long size = file_size(path);
    FILE *f = fopen(path, "rb");
    unsigned char *buf = malloc((size_t)size);
    REQUIRE(f && fread(buf, 1, (size_t)size, f) == (size_t)size, "read back");
    fclose(f);
    snprintf(bad, sizeof bad, "%s/bad.bin", test_tmpdir());

    struct {
        const char *what;
        long len;      /* bytes of the good file to write */
        long flip;     /* byte to corrupt, or -1 */
        const char *must_say;
    } cases[] = {
        {"truncated in the merges", size / 2, -1, "truncated"},
        {"truncated in the header", 12, -1, "truncated"},
        {"empty", 0, -1, "is empty (0 bytes"},
        {"bad magic", size, 0, "not a fusedgpt tokenizer"},
        {"future version", size, 8, "version"},
        {"flipped merge byte", size, size - 20, "checksum"},
        {"inconsistent header", size, 16, "inconsistent"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        f = fopen(bad, "wb");
        REQUIRE(f, "cannot write %s", bad);
        if (cases[i].flip >= 0) buf[cases[i].flip] ^= 0x5a;
        fwrite(buf, 1, (size_t)cases[i].len, f);
        if (cases[i].flip >= 0) buf[cases[i].flip] ^= 0x5a;
        fclose(f);
        err[0] = 0;
        Tokenizer *u = tokenizer_load(bad, err);
        CHECK(!u, "%s: load should fail", cases[i].what);
        CHECK(strstr(err, cases[i].must_say) && !strchr(err, '\n'), "%s: error should say \"%s\" on one line: %s",
              cases[i].what, cases[i].must_say, err);
        tokenizer_free(u);
    }
    snprintf(bad, sizeof bad, "%s/does-not-exist.bin", test_tmpdir());
    CHECK(!tokenizer_load(bad, err) && strstr(err, "cannot open"), "missing file: %s", err);
    free(buf);
}

static void put32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}

/* Writes our tokenizer file for merges[0..2 * n_merges) with a right header, sizes and checksum, so
 * that only the merge list itself can make tokenizer_load refuse it. */
static int write_merges_file(const char *path, const uint32_t *merges, uint32_t n_merges) {
    size_t size = 28 + 13 + (size_t)n_merges * 8 + 8;
    unsigned char *buf = malloc(size);
    if (!buf) return -1;
    memcpy(buf, "FGPTBPE1", 8);
    put32(buf + 8, 1);
    put32(buf + 12, 256 + n_merges + 1);
    put32(buf + 16, n_merges);
    put32(buf + 20, 256 + n_merges);
    put32(buf + 24, 13);
    memcpy(buf + 28, "<|endoftext|>", 13);
    for (size_t i = 0; i < 2 * (size_t)n_merges; i++) put32(buf + 41 + 4 * i, merges[i]);
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < size - 8; i++) h = (h ^ buf[i]) * 0x100000001b3ull;
    for (int i = 0; i < 8; i++) buf[size - 8 + i] = (unsigned char)(h >> (8 * i));
    FILE *f = fopen(path, "wb");
    int ok = f && fwrite(buf, 1, size, f) == size;
    if (f) ok &= fclose(f) == 0;
    free(buf);
    return ok ? 0 : -1;
}

TEST(tokenizer_load_rejects_merges_that_name_tokens_not_made_yet) {
    /* A well-formed file whose second merge uses token 258, which only the third merge would make:
     * the merge list itself is checked, not just the bytes. */
    uint32_t merges[6] = {'a', 'b', 258, 'c', 'x', 'y'};
    char path[1200], err[ERR_LEN] = "";
    snprintf(path, sizeof path, "%s/future.bin", test_tmpdir());
    REQUIRE(write_merges_file(path, merges, 3) == 0, "cannot write %s", path);
    Tokenizer *t = tokenizer_load(path, err);
    CHECK(!t && strstr(err, "does not exist yet"), "load should name the bad merge: %s", err);
    tokenizer_free(t);
    /* Duplicate pair: merges 0 and 1 both join (a, b). */
    merges[2] = 'a';
    merges[3] = 'b';
    REQUIRE(write_merges_file(path, merges, 3) == 0, "cannot write %s", path);
    t = tokenizer_load(path, err);
    CHECK(!t && strstr(err, "same pair"), "load should name the repeated pair: %s", err);
    tokenizer_free(t);
}

/* n merges that each join the newest token to itself: token 256 + i is 2^(i + 1) bytes of 'a'. */
static uint32_t *doubling_merges(uint32_t n) {
    uint32_t *m = malloc(2 * (size_t)n * sizeof *m);
    for (uint32_t i = 0; i < n; i++) m[2 * i] = m[2 * i + 1] = i == 0 ? 'a' : 255 + i;
    return m;
}

TEST(a_tokenizer_whose_merges_double_a_token_past_the_length_limit_is_refused) {
    /* 30 merges ask for 2 GiB of token bytes, 33 for 16 GiB, and 63 wrap the 64-bit sum of the
     * lengths: each is refused at its first token over the limit, naming the file. */
    const uint32_t counts[] = {30, 33, 63};
    for (size_t k = 0; k < sizeof counts / sizeof *counts; k++) {
        char path[1200], err[ERR_LEN] = "";
        snprintf(path, sizeof path, "%s/doubling%u.bin", test_tmpdir(), counts[k]);
        uint32_t *merges = doubling_merges(counts[k]);
        REQUIRE(write_merges_file(path, merges, counts[k]) == 0, "cannot write %s", path);
        free(merges);
        Tokenizer *t = tokenizer_load(path, err);
        CHECK(!t, "%u doubling merges were accepted", counts[k]);
        CHECK(strstr(err, path) && strstr(err, "merge 10 makes a token of 2048 bytes") && strstr(err, "corrupt") &&
                  !strchr(err, '\n'),
              "%u doubling merges: the error should name the file and the first token too long, on one line: %s",
              counts[k], err);
        tokenizer_free(t);
    }
}

TEST(a_tokenizer_whose_longest_token_is_at_the_length_limit_loads) {
    /* 10 doubling merges make a token of 1024 bytes, the longest a token may be. */
    char path[1200], err[ERR_LEN] = "";
    snprintf(path, sizeof path, "%s/limit.bin", test_tmpdir());
    uint32_t *merges = doubling_merges(10);
    REQUIRE(write_merges_file(path, merges, 10) == 0, "cannot write %s", path);
    free(merges);
    Tokenizer *t = tokenizer_load(path, err);
    REQUIRE(t, "a tokenizer whose longest token is %u bytes was refused: %s", TOKENIZER_MAX_TOKEN_BYTES, err);
    size_t n = 0;
    const uint8_t *b = tokenizer_token_bytes(t, 265, &n);
    CHECK(b && n == TOKENIZER_MAX_TOKEN_BYTES && b[0] == 'a' && b[n - 1] == 'a', "token 265 is %zu bytes", n);
    uint32_t ids[4];
    char text[TOKENIZER_MAX_TOKEN_BYTES];
    memset(text, 'a', sizeof text);
    CHECK(tokenizer_encode(t, text, sizeof text, 0, ids, 4) == 1 && ids[0] == 265, "1024 a's are one token");
    tokenizer_free(t);
}
