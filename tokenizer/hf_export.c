/* tokenizer/hf_export.c - a Tokenizer as Hugging Face's tokenizer.json and tokenizer_config.json,
 * so that AutoTokenizer.from_pretrained(checkpoint) loads the tokenizer a run used.
 *
 * An imported tokenizer is given back as it was read (and its tokenizer_config.json, when one sat
 * beside it). Ours becomes a byte-level BPE: token i < 256 is byte i written in ByteLevel's
 * alphabet, merge i makes token 256 + i (merges in the "a b" form every tokenizers version reads),
 * "<|endoftext|>" is a special added token, and the pre-tokenizer is a Split on Llama 3's spelling
 * of the cl100k pattern (the split ours makes: pretokenize.c) then a ByteLevel without its regex. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tokenizer_internal.h"

typedef struct {
    char *p;
    size_t len, cap;
    int oom;
} Buf;

static void put(Buf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 1 << 16;
        while (cap < b->len + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

static void puts_(Buf *b, const char *s) {
    put(b, s, strlen(s));
}

static void printf_(Buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void printf_(Buf *b, const char *fmt, ...) {
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    put(b, tmp, n < (int)sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

/* A JSON string of raw text (escapes for '"', '\' and control characters). */
static void put_json_string(Buf *b, const uint8_t *s, size_t n) {
    put(b, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '"' || s[i] == '\\') {
            char e[2] = {'\\', (char)s[i]};
            put(b, e, 2);
        } else if (s[i] < 0x20) {
            printf_(b, "\\u%04x", s[i]);
        } else {
            put(b, (const char *)&s[i], 1);
        }
    }
    put(b, "\"", 1);
}

/* Token bytes in ByteLevel's alphabet, inside a JSON string (no quotes). */
static void put_token_chars(Buf *b, const uint32_t *cp_of_byte, const uint8_t *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        uint32_t cp = cp_of_byte[s[i]];
        if (cp == '"' || cp == '\\') {
            char e[2] = {'\\', (char)cp};
            put(b, e, 2);
        } else if (cp < 0x80) {
            char c = (char)cp;
            put(b, &c, 1);
        } else { /* every code point of the alphabet is below U+0800: two UTF-8 bytes */
            char u[2] = {(char)(0xc0 | cp >> 6), (char)(0x80 | (cp & 0x3f))};
            put(b, u, 2);
        }
    }
}

static void put_token_string(Buf *b, const uint32_t *cp_of_byte, const uint8_t *s, size_t n) {
    put(b, "\"", 1);
    put_token_chars(b, cp_of_byte, s, n);
    put(b, "\"", 1);
}

/* Two tokens with the same bytes would be one string in the vocabulary, and Hugging Face would
 * give both the same id: such a tokenizer cannot be written in its format. */
static int find_duplicate(const Tokenizer *t, uint32_t *first, uint32_t *second) {
    BytesMap seen;
    if (bytes_map_init(&seen, t->vocab_size) != 0) return -1;
    int found = 0;
    for (uint32_t id = 0; id < t->vocab_size && !found; id++) {
        if (id == t->eot) continue;
        size_t n;
        const uint8_t *s = tokenizer_token_bytes(t, id, &n);
        int inserted;
        BytesSlot *slot = bytes_map_upsert(&seen, s, n, bytes_hash(s, n), &inserted);
        if (!slot) {
            found = -1;
            break;
        }
        if (inserted) {
            slot->value = id;
        } else {
            *first = (uint32_t)slot->value;
            *second = id;
            found = 1;
        }
    }
    bytes_map_free(&seen);
    return found;
}

char *tokenizer_hf_json(const Tokenizer *t, size_t *len, char *err) {
    if (t->hf_json) {
        char *copy = malloc(t->hf_json_len + 1);
        if (!copy) {
            tok_error(err, "out of memory copying the tokenizer");
            return NULL;
        }
        memcpy(copy, t->hf_json, t->hf_json_len + 1);
        *len = t->hf_json_len;
        return copy;
    }
    uint32_t a = 0, b2 = 0;
    int dup = find_duplicate(t, &a, &b2);
    if (dup) {
        if (dup < 0) tok_error(err, "out of memory exporting the tokenizer");
        else
            tok_error(err, "tokens %u and %u have the same bytes, which Hugging Face's format cannot tell apart", a, b2);
        return NULL;
    }
    uint32_t cp_of_byte[256];
    byte_level_alphabet(cp_of_byte);
    Buf b = {0};
    size_t eot_len;
    const uint8_t *eot = tokenizer_token_bytes(t, t->eot, &eot_len);
    puts_(&b, "{\n  \"version\": \"1.0\",\n  \"truncation\": null,\n  \"padding\": null,\n  \"added_tokens\": [\n    {\"id\": ");
    printf_(&b, "%u, \"content\": ", t->eot);
    put_json_string(&b, eot, eot_len);
    puts_(&b, ", \"single_word\": false, \"lstrip\": false, \"rstrip\": false, \"normalized\": false, \"special\": true}\n"
              "  ],\n  \"normalizer\": null,\n"
              "  \"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [\n"
              "    {\"type\": \"Split\", \"pattern\": {\"Regex\": ");
    static const char llama3[] = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
                                 "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
    put_json_string(&b, (const uint8_t *)llama3, sizeof llama3 - 1);
    puts_(&b, "}, \"behavior\": \"Isolated\", \"invert\": false},\n"
              "    {\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": true, \"use_regex\": false}\n"
              "  ]},\n  \"post_processor\": null,\n"
              "  \"decoder\": {\"type\": \"ByteLevel\", \"add_prefix_space\": true, \"trim_offsets\": true, "
              "\"use_regex\": true},\n"
              "  \"model\": {\n    \"type\": \"BPE\",\n    \"dropout\": null,\n    \"unk_token\": null,\n"
              "    \"continuing_subword_prefix\": null,\n    \"end_of_word_suffix\": null,\n    \"fuse_unk\": false,\n"
              "    \"byte_fallback\": false,\n    \"ignore_merges\": false,\n    \"vocab\": {");
    int first = 1;
    for (uint32_t id = 0; id < t->vocab_size; id++) {
        if (id == t->eot) continue;
        size_t n;
        const uint8_t *s = tokenizer_token_bytes(t, id, &n);
        puts_(&b, first ? "\n      " : ",\n      ");
        first = 0;
        put_token_string(&b, cp_of_byte, s, n);
        printf_(&b, ": %u", id);
    }
    puts_(&b, "\n    },\n    \"merges\": [");
    for (uint32_t i = 0; i < t->n_merges; i++) {
        size_t nl, nr;
        const uint8_t *l = tokenizer_token_bytes(t, t->merges[2 * i], &nl);
        const uint8_t *r = tokenizer_token_bytes(t, t->merges[2 * i + 1], &nr);
        puts_(&b, i ? ",\n      " : "\n      ");
        /* "a b": the space between them is never inside a token string (it is written as U+0120) */
        put(&b, "\"", 1);
        put_token_chars(&b, cp_of_byte, l, nl);
        put(&b, " ", 1);
        put_token_chars(&b, cp_of_byte, r, nr);
        put(&b, "\"", 1);
    }
    puts_(&b, "\n    ]\n  }\n}\n");
    if (b.oom) {
        free(b.p);
        tok_error(err, "out of memory exporting the tokenizer");
        return NULL;
    }
    *len = b.len;
    return b.p;
}

int tokenizer_has_hf_config(const Tokenizer *t) { return t->hf_config != NULL; }

const char *tokenizer_hf_chat_template(const Tokenizer *t, size_t *len) {
    *len = t->hf_chat_template_len;
    return t->hf_chat_template;
}

char *tokenizer_hf_config_json(const Tokenizer *t, int model_max_length, char *err) {
    if (t->hf_config) {
        char *copy = strdup(t->hf_config);
        if (!copy) tok_error(err, "out of memory copying the tokenizer's config");
        return copy;
    }
    Buf b = {0};
    size_t eot_len, bos_len;
    const uint8_t *eot = tokenizer_token_bytes(t, t->eot, &eot_len);
    const uint8_t *bos = tokenizer_token_bytes(t, tokenizer_bos_token(t), &bos_len);
    puts_(&b, "{\n  \"tokenizer_class\": \"PreTrainedTokenizerFast\",\n  \"bos_token\": ");
    put_json_string(&b, bos, bos_len);
    puts_(&b, ",\n  \"eos_token\": ");
    put_json_string(&b, eot, eot_len);
    printf_(&b, ",\n  \"model_max_length\": %d,\n  \"clean_up_tokenization_spaces\": false\n}\n", model_max_length);
    if (b.oom) {
        free(b.p);
        tok_error(err, "out of memory exporting the tokenizer's config");
        return NULL;
    }
    return b.p;
}
