/* tokenizer/hf_import.c - a Hugging Face tokenizer.json of a BPE model as a Tokenizer: byte-level
 * here; a SentencePiece-style one (byte_fallback: Gemma 3, Llama 2, Mistral) shares the ids, token
 * strings, merges and added tokens built here, and spm_import.c reads the rest of its pipeline.
 *
 * What is honoured: the model's vocabulary and merges (rank = place in the list; the "a b" string
 * form and the ["a", "b"] pair form), ignore_merges, the added tokens (found in the text before it
 * is split, the longest at the leftmost place, as Hugging Face does), and the pre-tokenizer: GPT-2's
 * ByteLevel with its regex, or a Split on the Llama 3 / GPT-4 / Qwen 2 pattern followed by a
 * ByteLevel without its regex. Token strings are in ByteLevel's alphabet (one code point per
 * byte); a string with a character outside it stands for its own UTF-8 bytes, as Hugging Face's
 * ByteLevel decoder does. Added tokens take the ids tokenizers gives them (number_added_tokens),
 * whatever ids the file lists. Anything that would make our ids differ from Hugging Face's (another
 * model type, a normalizer that rewrites text, an unknown pattern, added tokens that strip space)
 * is refused with one line naming it, and so is a file that asks for more than a
 * vocabulary needs (an id far past the number of tokens, a token over TOKENIZER_MAX_TOKEN_BYTES).
 * The post-processor's tokens (Llama 3's BOS) are read by post_processor.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "common/json.h"
#include "tokenizer/spm.h"
#include "tokenizer/tokenizer_internal.h"
#include "tokenizer/utf8.h"

/* The patterns we split by hand (pretokenize.c), as tokenizer.json files spell them. */
static const struct {
    const char *regex;
    SplitKind kind;
    const char *name;
} known_patterns[] = {
    {"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
     "\\s+(?!\\S)|\\s+",
     SPLIT_CL100K, "Llama 3"},
    {"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
     "\\s+(?!\\S)|\\s+",
     SPLIT_QWEN2, "Qwen 2"},
    {"'(?i:[sdmt]|ll|ve|re)|[^\\r\\n\\p{L}\\p{N}]?+\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]++[\\r\\n]*|\\s*[\\r\\n]|"
     "\\s+(?!\\S)|\\s+",
     SPLIT_CL100K, "GPT-4 cl100k"},
    {"'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+", SPLIT_GPT2, "GPT-2"},
};

void byte_level_alphabet(uint32_t cp_of_byte[256]) {
    uint32_t next = 256;
    for (uint32_t b = 0; b < 256; b++) {
        int printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae);
        cp_of_byte[b] = printable ? b : next++;
    }
}

/* The bytes a token string stands for, into out (room for n bytes: never longer than the string);
 * returns their count. */
static size_t token_string_bytes(const int16_t *byte_of_cp, const char *str, size_t n, uint8_t *out) {
    size_t i = 0, k = 0;
    while (i < n) {
        uint32_t cp = utf8_next((const uint8_t *)str, n, &i);
        if (cp >= 324 || byte_of_cp[cp] < 0) { /* outside the alphabet: the string's own bytes */
            memcpy(out, str, n);
            return n;
        }
        out[k++] = (uint8_t)byte_of_cp[cp];
    }
    return k;
}

/* byte_of_cp[cp]: the byte a code point of the byte-level alphabet stands for, -1 outside it. */
static void byte_level_inverse(const uint32_t cp_of_byte[256], int16_t byte_of_cp[324]) {
    memset(byte_of_cp, 0xff, 324 * sizeof *byte_of_cp);
    for (int b = 0; b < 256; b++) byte_of_cp[cp_of_byte[b]] = (int16_t)b;
}

/* Up to 40 bytes of a token for a message, control characters escaped (escape_controls). */
static const char *shown(const char *s, size_t n, char *buf, size_t size) {
    escape_controls(buf, size, s, n < 40 ? n : 40);
    return buf;
}

static int is_false_or_absent(const JsonValue *v) {
    return !v || v->type == JSON_FALSE || v->type == JSON_NULL;
}

static int is_empty_or_absent(const JsonValue *v) {
    return !v || v->type == JSON_NULL || (v->type == JSON_STRING && v->len == 0);
}

static const char *type_of(const JsonValue *v) {
    const char *s = json_string(json_get(v, "type"));
    return s ? s : "(no type)";
}

/* The split of the pre_tokenizer, or -1 with a message. */
static int pre_tokenizer_split(const JsonValue *pt, const char *path, char *err) {
    if (!pt || pt->type == JSON_NULL) {
        tok_error(err, "%s has no pre_tokenizer; only byte-level BPE tokenizers (ByteLevel, or a Split then ByteLevel) "
                  "are supported", path);
        return -1;
    }
    const JsonValue *split = NULL, *byte_level = pt;
    if (strcmp(type_of(pt), "Sequence") == 0) {
        const JsonValue *list = json_get(pt, "pretokenizers");
        if (!list || list->type != JSON_ARRAY || list->len != 2) {
            tok_error(err, "%s: pre_tokenizer Sequence of %zu steps is not supported (a Split then a ByteLevel is)", path,
                      list && list->type == JSON_ARRAY ? list->len : 0);
            return -1;
        }
        split = &list->items[0];
        byte_level = &list->items[1];
        if (strcmp(type_of(split), "Split") != 0) {
            tok_error(err, "%s: pre_tokenizer %s is not supported (a Split then a ByteLevel is)", path, type_of(split));
            return -1;
        }
    }
    if (strcmp(type_of(byte_level), "ByteLevel") != 0) {
        tok_error(err, "%s: pre_tokenizer %s is not supported (only byte-level BPE tokenizers are)", path,
                  type_of(byte_level));
        return -1;
    }
    if (!is_false_or_absent(json_get(byte_level, "add_prefix_space"))) {
        tok_error(err, "%s: pre_tokenizer ByteLevel with add_prefix_space is not supported", path);
        return -1;
    }
    const JsonValue *use_regex = json_get(byte_level, "use_regex");
    const int byte_level_regex = !use_regex || use_regex->type == JSON_TRUE; /* Hugging Face's default: true */
    if (!split) {
        if (!byte_level_regex) {
            tok_error(err, "%s: pre_tokenizer ByteLevel without its regex and without a Split is not supported", path);
            return -1;
        }
        return SPLIT_GPT2;
    }
    if (byte_level_regex) {
        tok_error(err, "%s: pre_tokenizer Split followed by a ByteLevel that splits again (use_regex true) is not "
                  "supported", path);
        return -1;
    }
    const char *behavior = json_string(json_get(split, "behavior"));
    const char *regex = json_string(json_get(json_get(split, "pattern"), "Regex"));
    if (!behavior || strcmp(behavior, "Isolated") != 0 || !is_false_or_absent(json_get(split, "invert"))) {
        tok_error(err, "%s: pre_tokenizer Split with behavior %s%s is not supported (Isolated is)", path,
                  behavior ? behavior : "(none)", is_false_or_absent(json_get(split, "invert")) ? "" : " inverted");
        return -1;
    }
    for (size_t i = 0; regex && i < sizeof known_patterns / sizeof known_patterns[0]; i++)
        if (strcmp(regex, known_patterns[i].regex) == 0) return (int)known_patterns[i].kind;
    tok_error(err, "%s: pre_tokenizer Split pattern %.120s is not one we split by hand (GPT-2, GPT-4, Llama 3 or Qwen 2)",
              path, regex ? regex : "(not a Regex)");
    return -1;
}

/* Everything of a byte-level file besides the model: refused where it would change the ids. NFC
 * (Qwen 2's normalizer) is kept in *nfc: tokenizer_check_text refuses text it would rewrite (nfc.c),
 * and every other text is its own NFC. */
static int check_byte_level_pipeline(const JsonValue *root, const char *path, int *nfc, char *err) {
    /* neither kind (a SentencePiece file with byte_fallback false, say): named as that, not by the
     * first of its steps a byte-level file would not have */
    const JsonValue *pre = json_get(root, "pre_tokenizer"), *steps = json_get(pre, "pretokenizers");
    int byte_level = strcmp(type_of(pre), "ByteLevel") == 0 || strcmp(type_of(json_get(root, "decoder")), "ByteLevel") == 0;
    for (size_t i = 0; steps && steps->type == JSON_ARRAY && i < steps->len; i++)
        byte_level |= strcmp(type_of(&steps->items[i]), "ByteLevel") == 0;
    if (!byte_level) {
        tok_error(err, "%s: a BPE that is neither byte-level (no ByteLevel pre-tokenizer or decoder) nor SentencePiece-"
                  "style with byte_fallback true is not supported: text outside its pieces would become its unknown "
                  "token", path);
        return -1;
    }
    const JsonValue *norm = json_get(root, "normalizer");
    if (norm && norm->type != JSON_NULL) {
        const JsonValue *list = json_get(norm, "normalizers");
        const int sequence = strcmp(type_of(norm), "Sequence") == 0 && list && list->type == JSON_ARRAY;
        const JsonValue *only = sequence && list->len == 1 ? &list->items[0] : norm;
        if (strcmp(type_of(only), "NFC") == 0) {
            *nfc = 1;
        } else if (!(sequence && list->len == 0)) {
            tok_error(err, "%s: normalizer %s is not supported (it rewrites text before encoding)", path,
                      sequence && list->len ? type_of(&list->items[0]) : type_of(norm));
            return -1;
        }
    }
    const JsonValue *dec = json_get(root, "decoder");
    if (dec && dec->type != JSON_NULL && strcmp(type_of(dec), "ByteLevel") != 0) {
        tok_error(err, "%s: decoder %s is not supported (ByteLevel is)", path, type_of(dec));
        return -1;
    }
    if (!is_false_or_absent(json_get(json_get(root, "model"), "byte_fallback"))) {
        tok_error(err, "%s: BPE with byte_fallback is not supported (it is not byte-level)", path);
        return -1;
    }
    return 0;
}

/* The model: a BPE (byte-level, or SentencePiece-style with byte_fallback), deterministic. */
static int check_model(const JsonValue *root, const char *path, char *err) {
    const JsonValue *model = json_get(root, "model");
    if (!model || model->type != JSON_OBJECT) {
        tok_error(err, "%s has no model object; is it a Hugging Face tokenizer.json?", path);
        return -1;
    }
    const char *type = json_string(json_get(model, "type"));
    if (!type && !json_get(model, "merges")) {
        tok_error(err, "%s: its model has neither a \"type\" nor \"merges\"; a BPE tokenizer.json (byte-level, or "
                  "SentencePiece-style with byte_fallback) is what reads", path);
        return -1;
    }
    if (type && strcmp(type, "BPE") != 0) {
        tok_error(err, "%s: model %s is not supported (BPE is: byte-level, or SentencePiece-style with byte_fallback)",
                  path, type);
        return -1;
    }
    const JsonValue *dropout = json_get(model, "dropout");
    if (dropout && dropout->type != JSON_NULL) {
        tok_error(err, "%s: BPE dropout is not supported (encoding would be random)", path);
        return -1;
    }
    if (!is_empty_or_absent(json_get(model, "continuing_subword_prefix")) ||
        !is_empty_or_absent(json_get(model, "end_of_word_suffix"))) {
        tok_error(err, "%s: BPE with a continuing_subword_prefix or end_of_word_suffix is not supported", path);
        return -1;
    }
    return 0;
}

/* Builds the tokenizer; `strings` holds each id's string (NULL: no token has that id). */
typedef struct {
    const JsonValue *root, *vocab, *merges, *added;
    const char **strings;
    size_t *string_lens;
    uint8_t *is_text;     /* per id: its string is plain text (an added token's), not vocabulary bytes */
    uint32_t *added_ids;  /* per added token: the id tokenizers gives it; NO_ID for an empty one */
    uint32_t vocab_size;
    BytesMap by_string; /* model vocabulary string -> id */
    size_t n_renumbered, first_renumbered; /* added tokens whose listed id is not the one given */
} Import;

#define NO_ID UINT32_MAX

static int lookup(const Import *im, const char *s, size_t n, uint32_t *id) {
    BytesSlot *slot = bytes_map_find(&im->by_string, (const uint8_t *)s, n, bytes_hash((const uint8_t *)s, n));
    if (!slot) return 0;
    *id = (uint32_t)slot->value;
    return 1;
}

/* The ids tokenizers gives the added tokens, which are not the ids the file lists: in the order
 * listed, a content already given an id keeps it, one the model's vocabulary holds as a key gets
 * that key's id, and any other takes the next id from the vocabulary's number of distinct keys up
 * (tokenizers' AddedVocabulary::add_tokens). Real files list exactly these ids; one that lists
 * others is read as transformers reads it. An empty content is skipped, as tokenizers skips it. */
static int number_added_tokens(Import *im, size_t n_keys, const char *path, char *err) {
    BytesMap given;
    im->added_ids = malloc((im->added->len + 1) * sizeof *im->added_ids);
    if (!im->added_ids || bytes_map_init(&given, im->added->len) != 0) {
        tok_error(err, "out of memory reading %s", path);
        return -1;
    }
    uint64_t next = n_keys;
    for (size_t i = 0; i < im->added->len; i++) {
        const JsonValue *c = json_get(&im->added->items[i], "content");
        const uint32_t listed = (uint32_t)json_get(&im->added->items[i], "id")->number;
        im->added_ids[i] = NO_ID;
        if (c->len == 0) continue;
        const uint64_t h = bytes_hash((const uint8_t *)c->string, c->len);
        int inserted;
        BytesSlot *slot = bytes_map_upsert(&given, (const uint8_t *)c->string, c->len, h, &inserted);
        if (!slot) {
            tok_error(err, "out of memory reading %s", path);
            bytes_map_free(&given);
            return -1;
        }
        uint32_t id;
        if (!inserted) id = (uint32_t)slot->value;
        else if (!lookup(im, c->string, c->len, &id)) {
            if (next > 0x7ffffffe) {
                tok_error(err, "%s: too many added tokens", path);
                bytes_map_free(&given);
                return -1;
            }
            id = (uint32_t)next++;
        }
        slot->value = id;
        im->added_ids[i] = id;
        if (id != listed && im->n_renumbered++ == 0) im->first_renumbered = i;
    }
    bytes_map_free(&given);
    return 0;
}

/* Whether a byte-level key stands for its own text: "<|endoftext|>" does, the byte token "\u00d7"
 * (the byte 0xd7) does not. */
static int key_is_its_text(const int16_t *byte_of_cp, const char *key, size_t n) {
    uint8_t *bytes = malloc(n + 1);
    const int same = bytes && token_string_bytes(byte_of_cp, key, n, bytes) == n && memcmp(bytes, key, n) == 0;
    free(bytes);
    return same;
}

/* byte_of_cp: the byte-level alphabet undone (byte_level_inverse); NULL for a SentencePiece-style
 * vocabulary, whose strings are their own bytes. */
static int collect_ids(Import *im, const int16_t *byte_of_cp, const char *path, char *err) {
    const int byte_level = byte_of_cp != NULL;
    uint64_t top = 0;
    for (size_t i = 0; i < im->vocab->len; i++) {
        long long id;
        if (!json_int(&im->vocab->members[i].value, 0, 0x7ffffffe, &id)) {
            tok_error(err, "%s: vocabulary entry \"%.40s\" has no valid id", path, im->vocab->members[i].key);
            return -1;
        }
        if ((uint64_t)id + 1 > top) top = (uint64_t)id + 1;
    }
    for (size_t i = 0; i < im->added->len; i++) {
        long long id;
        const JsonValue *a = &im->added->items[i];
        if (!json_int(json_get(a, "id"), 0, 0x7ffffffe, &id) || !json_string(json_get(a, "content"))) {
            tok_error(err, "%s: added token %zu has no valid id or content", path, i);
            return -1;
        }
        if (byte_level && (!is_false_or_absent(json_get(a, "lstrip")) || !is_false_or_absent(json_get(a, "rstrip")) ||
                           !is_false_or_absent(json_get(a, "single_word")))) {
            tok_error(err, "%s: added token \"%.40s\" strips space or matches single words only; that is not supported",
                      path, json_string(json_get(a, "content")));
            return -1;
        }
    }
    /* a key listed twice keeps its later id, as tokenizers' map does */
    size_t n_keys = 0;
    if (bytes_map_init(&im->by_string, im->vocab->len) != 0) {
        tok_error(err, "out of memory reading %s", path);
        return -1;
    }
    for (size_t i = 0; i < im->vocab->len; i++) {
        const JsonMember *m = &im->vocab->members[i];
        int inserted;
        BytesSlot *slot = bytes_map_upsert(&im->by_string, (const uint8_t *)m->key, m->key_len,
                                           bytes_hash((const uint8_t *)m->key, m->key_len), &inserted);
        if (!slot) {
            tok_error(err, "out of memory reading %s", path);
            return -1;
        }
        slot->value = (uint32_t)m->value.number;
        n_keys += (size_t)inserted;
    }
    if (number_added_tokens(im, n_keys, path, err) != 0) return -1;
    for (size_t i = 0; i < im->added->len; i++)
        if (im->added_ids[i] != NO_ID && (uint64_t)im->added_ids[i] + 1 > top) top = (uint64_t)im->added_ids[i] + 1;
    if (top < 1) {
        tok_error(err, "%s has an empty vocabulary", path);
        return -1;
    }
    /* Ids index tables sized by the largest: a real vocabulary's run from 0 with few gaps or
     * none (GPT-2's 50257, Llama 3's, Qwen 2's, Gemma 3's 262144), so an id past twice the number
     * of tokens listed is a corrupt file, not a vocabulary to allocate. */
    const size_t listed = im->vocab->len + im->added->len;
    if (top > 2 * (uint64_t)listed) {
        tok_error(err, "%s: id %llu is far beyond the %zu tokens the file lists (ids run from 0 with at most half of "
                  "them unused); the file is corrupt",
                  path, (unsigned long long)(top - 1), listed);
        return -1;
    }
    im->vocab_size = (uint32_t)top;
    im->strings = calloc(top, sizeof *im->strings);
    im->string_lens = calloc(top, sizeof *im->string_lens);
    im->is_text = calloc(top, 1);
    if (!im->strings || !im->string_lens || !im->is_text) {
        tok_error(err, "out of memory reading %s", path);
        return -1;
    }
    for (size_t i = 0; i < im->vocab->len; i++) {
        const JsonMember *m = &im->vocab->members[i];
        uint32_t id = (uint32_t)m->value.number;
        if (im->strings[id]) {
            tok_error(err, "%s: tokens \"%.40s\" and \"%.40s\" share id %u", path, im->strings[id], m->key, id);
            return -1;
        }
        im->strings[id] = m->key;
        im->string_lens[id] = m->key_len;
    }
    /* an added token new to the vocabulary is its content's text; numbered from the count of keys,
     * it lands on a vocabulary id only when the vocabulary's ids leave gaps, and then tokenizers
     * would give two tokens one id */
    for (size_t i = 0; i < im->added->len; i++) {
        const JsonValue *c = json_get(&im->added->items[i], "content");
        const uint32_t id = im->added_ids[i];
        if (id == NO_ID || im->is_text[id]) continue;
        if (lookup(im, c->string, c->len, &(uint32_t){0})) {
            /* tokenizers finds the text and gives the key's id, which decodes to other bytes */
            if (byte_level && !key_is_its_text(byte_of_cp, c->string, c->len)) {
                char added[200];
                tok_error(err, "%s: added token \"%s\" is spelled like the byte-level key of id %u, which stands for "
                          "other bytes than its text; not supported", path, shown(c->string, c->len, added, sizeof added),
                          id);
                return -1;
            }
            continue;
        }
        if (im->strings[id]) {
            char added[200], held[200];
            tok_error(err, "%s: added token \"%s\" takes id %u, the next after the vocabulary's %zu keys as tokenizers "
                      "numbers added tokens, but the vocabulary gives that id to \"%s\" (its ids leave gaps); the file "
                      "is corrupt", path, shown(c->string, c->len, added, sizeof added), id, n_keys,
                      shown(im->strings[id], im->string_lens[id], held, sizeof held));
            return -1;
        }
        im->strings[id] = c->string;
        im->string_lens[id] = c->len;
        im->is_text[id] = 1;
    }
    return 0;
}


/* byte_of_cp NULL: token strings are their own bytes (a SentencePiece-style vocabulary). */
static int build_token_bytes(Tokenizer *t, const Import *im, const int16_t *byte_of_cp, const char *path, char *err) {
    static const char replacement[] = "\xef\xbf\xbd"; /* an id no token has decodes as U+FFFD */
    uint64_t total = 0;
    for (uint32_t id = 0; id < im->vocab_size; id++) total += im->strings[id] ? im->string_lens[id] : 3;
    t->tok_off = malloc(((size_t)im->vocab_size + 1) * sizeof *t->tok_off);
    t->tok_bytes = malloc(total ? total : 1);
    if (!t->tok_off || !t->tok_bytes) {
        tok_error(err, "out of memory reading %s", path);
        return -1;
    }
    uint64_t at = 0;
    for (uint32_t id = 0; id < im->vocab_size; id++) {
        t->tok_off[id] = at;
        if (im->strings[id]) {
            size_t n = im->string_lens[id];
            if (byte_of_cp && !im->is_text[id]) n = token_string_bytes(byte_of_cp, im->strings[id], n, t->tok_bytes + at);
            else memcpy(t->tok_bytes + at, im->strings[id], n);
            if (n > TOKENIZER_MAX_TOKEN_BYTES) {
                tok_error(err, "%s: token %u is %zu bytes, longer than the %u a token may have", path, id, n,
                          TOKENIZER_MAX_TOKEN_BYTES);
                return -1;
            }
            at += n;
        } else {
            memcpy(t->tok_bytes + at, replacement, 3);
            at += 3;
        }
    }
    t->tok_off[im->vocab_size] = at;
    return 0;
}

/* One merge's two strings: "a b" or ["a", "b"]. */
static int merge_strings(const JsonValue *m, const char **a, size_t *na, const char **b, size_t *nb) {
    if (m->type == JSON_STRING) {
        const char *sp = memchr(m->string, ' ', m->len);
        if (!sp || memchr(sp + 1, ' ', m->len - (size_t)(sp + 1 - m->string))) return 0;
        *a = m->string;
        *na = (size_t)(sp - m->string);
        *b = sp + 1;
        *nb = m->len - *na - 1;
        return *na > 0 && *nb > 0;
    }
    if (m->type != JSON_ARRAY || m->len != 2 || m->items[0].type != JSON_STRING || m->items[1].type != JSON_STRING)
        return 0;
    *a = m->items[0].string;
    *na = m->items[0].len;
    *b = m->items[1].string;
    *nb = m->items[1].len;
    return 1;
}

static int build_merges(Tokenizer *t, const Import *im, const char *path, char *err) {
    size_t n = im->merges->len;
    t->n_merges = (uint32_t)n;
    t->merges = malloc((n + 1) * 2 * sizeof *t->merges);
    t->merge_result = malloc((n + 1) * sizeof *t->merge_result);
    char *joined = NULL;
    size_t joined_cap = 0;
    if (!t->merges || !t->merge_result || pair_map_init(&t->merge_map, n) != 0) {
        tok_error(err, "out of memory reading %s", path);
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        const char *a, *b;
        size_t na, nb;
        uint32_t ia, ib, ir;
        if (!merge_strings(&im->merges->items[i], &a, &na, &b, &nb)) {
            tok_error(err, "%s: merge %zu is neither \"a b\" nor [\"a\", \"b\"]", path, i);
            free(joined);
            return -1;
        }
        if (na + nb > joined_cap) {
            joined_cap = 2 * (na + nb);
            char *j = realloc(joined, joined_cap);
            if (!j) {
                tok_error(err, "out of memory reading %s", path);
                free(joined);
                return -1;
            }
            joined = j;
        }
        memcpy(joined, a, na);
        memcpy(joined + na, b, nb);
        if (!lookup(im, a, na, &ia) || !lookup(im, b, nb, &ib) || !lookup(im, joined, na + nb, &ir)) {
            tok_error(err, "%s: merge %zu (\"%.*s\" \"%.*s\") uses or makes a token the vocabulary lacks", path, i,
                      (int)(na < 40 ? na : 40), a, (int)(nb < 40 ? nb : 40), b);
            free(joined);
            return -1;
        }
        t->merges[2 * i] = ia;
        t->merges[2 * i + 1] = ib;
        t->merge_result[i] = ir;
        int inserted;
        int64_t slot = pair_map_upsert(&t->merge_map, pair_key(ia, ib), (uint32_t)i, &inserted);
        if (slot < 0) {
            tok_error(err, "out of memory reading %s", path);
            free(joined);
            return -1;
        }
        t->merge_map.values[slot] = (uint32_t)i; /* a repeated pair: the later rank, as Hugging Face keeps it */
    }
    free(joined);
    return 0;
}

static int build_specials(Tokenizer *t, const Import *im, const char *path, char *err) {
    t->special_ids = malloc((im->added->len + 1) * sizeof *t->special_ids);
    if (!t->special_ids) {
        tok_error(err, "out of memory reading %s", path);
        return -1;
    }
    /* every added token is cut out of the text before splitting, special or not */
    int64_t eot = -1, first_special = -1;
    for (size_t i = 0; i < im->added->len; i++) {
        const JsonValue *a = &im->added->items[i];
        const uint32_t id = im->added_ids[i];
        if (id == NO_ID) continue;
        t->special_ids[t->n_specials++] = id;
        if (json_get(a, "special") && json_get(a, "special")->type == JSON_TRUE) {
            const char *c = json_string(json_get(a, "content"));
            if (first_special < 0) first_special = id;
            if (strcmp(c, TOKENIZER_EOT_TEXT) == 0) eot = id;
            if (strcmp(c, "<|end_of_text|>") == 0 && eot < 0) eot = id;
        }
    }
    if (eot < 0) eot = first_special;
    if (eot < 0) {
        tok_error(err, "%s has no special added token to separate documents; add one (e.g. %s)", path,
                  TOKENIZER_EOT_TEXT);
        return -1;
    }
    t->eot = (uint32_t)eot;
    tokenizer_index_specials(t);
    return 0;
}

static int build_whole_tokens(Tokenizer *t, const Import *im, const char *path, char *err) {
    if (bytes_map_init(&t->whole_tokens, im->vocab->len) != 0) {
        tok_error(err, "out of memory reading %s", path);
        return -1;
    }
    t->ignore_merges = 1;
    for (size_t i = 0; i < im->vocab->len; i++) {
        uint32_t id = (uint32_t)im->vocab->members[i].value.number;
        size_t n;
        const uint8_t *s = tokenizer_token_bytes(t, id, &n);
        int inserted;
        BytesSlot *slot = bytes_map_upsert(&t->whole_tokens, s, n, bytes_hash(s, n), &inserted);
        if (!slot) {
            tok_error(err, "out of memory reading %s", path);
            return -1;
        }
        if (inserted) slot->value = id;
    }
    return 0;
}

/* A tokenizer.json saved from a tokenizer with truncation or padding switched on keeps them; tokenizers
 * would cut or pad each encoding to them, which a corpus for pretraining must not be. */
static void describe_unapplied(Tokenizer *t, const JsonValue *root) {
    const JsonValue *trunc = json_get(root, "truncation"), *pad = json_get(root, "padding");
    const int truncates = trunc && trunc->type != JSON_NULL, pads = pad && pad->type != JSON_NULL;
    const JsonValue *max_length = truncates ? json_get(trunc, "max_length") : NULL;
    char length[48] = "";
    if (max_length && max_length->type == JSON_NUMBER && max_length->number >= 0 && max_length->number < 1e15)
        snprintf(length, sizeof length, " to %.0f tokens", max_length->number);
    snprintf(t->unapplied, sizeof t->unapplied, "%s%s%s%s", truncates ? "truncation" : "", length,
             truncates && pads ? " and " : "", pads ? "padding" : "");
}

Tokenizer *tokenizer_from_hf_json(const char *text, size_t len, const char *path, char *err) {
    char jerr[ERR_LEN];
    JsonValue *root = json_parse(text, len, path, jerr);
    if (!root) {
        tok_error(err, "%s", jerr);
        return NULL;
    }
    Import im = {.root = root};
    Tokenizer *t = calloc(1, sizeof *t);
    const int spm = spm_wanted(root);
    int ok = t && check_model(root, path, err) == 0;
    ok = ok && (spm || check_byte_level_pipeline(root, path, &t->nfc, err) == 0);
    int split = !ok ? -1 : spm ? SPLIT_CL100K : pre_tokenizer_split(json_get(root, "pre_tokenizer"), path, err);
    ok = ok && split >= 0;
    if (ok) {
        const JsonValue *model = json_get(root, "model");
        static const JsonValue empty_array = {.type = JSON_ARRAY};
        im.vocab = json_get(model, "vocab");
        im.merges = json_get(model, "merges");
        im.added = json_get(root, "added_tokens");
        if (!im.added || im.added->type == JSON_NULL) im.added = &empty_array;
        if (!im.vocab || im.vocab->type != JSON_OBJECT || !im.merges || im.merges->type != JSON_ARRAY ||
            im.added->type != JSON_ARRAY) {
            tok_error(err, "%s: model.vocab must be an object, model.merges and added_tokens arrays", path);
            ok = 0;
        }
    }
    uint32_t cp_of_byte[256];
    int16_t byte_of_cp[324];
    byte_level_alphabet(cp_of_byte);
    byte_level_inverse(cp_of_byte, byte_of_cp);
    ok = ok && collect_ids(&im, spm ? NULL : byte_of_cp, path, err) == 0;
    if (ok) {
        t->vocab_size = im.vocab_size;
        t->split = (SplitKind)split;
        ok = build_token_bytes(t, &im, spm ? NULL : byte_of_cp, path, err) == 0;
    }
    for (int b = 0; ok && !spm && b < 256; b++) { /* every byte needs its token, or some text has no encoding */
        char s[4];
        size_t n = cp_of_byte[b] < 0x80 ? (s[0] = (char)cp_of_byte[b], 1)
                                        : (s[0] = (char)(0xc0 | cp_of_byte[b] >> 6), s[1] = (char)(0x80 | (cp_of_byte[b] & 0x3f)), 2);
        if (!lookup(&im, s, n, &t->byte_token[b])) {
            tok_error(err, "%s has no token for the byte 0x%02x (\"%.*s\"); a byte-level BPE needs all 256", path, b,
                      (int)n, s);
            ok = 0;
        }
    }
    ok = ok && build_merges(t, &im, path, err) == 0 && build_specials(t, &im, path, err) == 0;
    ok = ok && read_post_processor(t, json_get(root, "post_processor"), path, err) == 0;
    ok = ok && (!spm || spm_import(t, root, im.added_ids, path, err) == 0);
    const JsonValue *ignore = json_get(json_get(root, "model"), "ignore_merges");
    if (ok && ignore && ignore->type == JSON_TRUE) ok = build_whole_tokens(t, &im, path, err) == 0;
    if (ok) {
        t->hf_json = malloc(len + 1);
        if (t->hf_json) {
            memcpy(t->hf_json, text, len);
            t->hf_json[len] = 0;
            t->hf_json_len = len;
        } else {
            tok_error(err, "out of memory reading %s", path);
            ok = 0;
        }
    }
    if (ok) describe_unapplied(t, root);
    if (ok && im.n_renumbered) {
        const JsonValue *a = &im.added->items[im.first_renumbered];
        const JsonValue *c = json_get(a, "content");
        char shown_content[200];
        t->load_note = malloc(ERR_LEN);
        if (t->load_note)
            snprintf(t->load_note, ERR_LEN, "%s lists added token \"%s\" at id %u; tokenizers gives it id %u (in the "
                     "order listed, after the vocabulary's keys and the earlier added tokens), and so does this run "
                     "(%zu of %zu added tokens take another id than listed)", path,
                     shown(c->string, c->len, shown_content, sizeof shown_content), (uint32_t)json_get(a, "id")->number,
                     im.added_ids[im.first_renumbered], im.n_renumbered, im.added->len);
    }
    if (!t) tok_error(err, "out of memory reading %s", path);
    bytes_map_free(&im.by_string);
    free(im.strings);
    free(im.string_lens);
    free(im.is_text);
    free(im.added_ids);
    json_free(root);
    if (!ok) {
        tokenizer_free(t);
        return NULL;
    }
    return t;
}
