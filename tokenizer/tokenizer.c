/* tokenizer/tokenizer.c - the Tokenizer object: built from its merge list (ours; tokenizer.json
 * imports build theirs in hf_import.c), its queries, and decode. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "common/hash.h"
#include "tokenizer/nfc.h"
#include "tokenizer/spm.h"
#include "tokenizer/tokenizer_internal.h"

void tok_error(char *err, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, ERR_LEN, fmt, ap);
    va_end(ap);
}

Tokenizer *tokenizer_from_merges(const uint32_t *merges, uint32_t n_merges, char *err) {
    if (n_merges > UINT32_MAX - TOKENIZER_MIN_VOCAB) {
        tok_error(err, "tokenizer has %u merges, more than a 32-bit token id can name", n_merges);
        return NULL;
    }
    Tokenizer *t = calloc(1, sizeof *t);
    const char *oom = "out of memory building the tokenizer; free memory or use a smaller vocabulary";
    if (!t) {
        tok_error(err, "%s", oom);
        return NULL;
    }
    t->n_merges = n_merges;
    t->eot = 256 + n_merges;
    t->vocab_size = t->eot + 1;
    t->merges = malloc(((size_t)n_merges + 1) * 2 * sizeof *t->merges);
    t->merge_result = malloc(((size_t)n_merges + 1) * sizeof *t->merge_result);
    t->tok_off = malloc(((size_t)t->vocab_size + 1) * sizeof *t->tok_off);
    t->special_ids = malloc(sizeof *t->special_ids);
    uint64_t *len = NULL;
    if (!t->merges || !t->merge_result || !t->tok_off || !t->special_ids || pair_map_init(&t->merge_map, n_merges) != 0)
        goto out_of_memory;
    if (n_merges) memcpy(t->merges, merges, (size_t)n_merges * 2 * sizeof *merges);

    /* Token lengths first, to size the byte table in one allocation: lengths add up in id order (a
     * merge only uses earlier ids), and each is checked against the limit as it is made, so a
     * corrupt list is refused before anything is sized from it. */
    len = malloc((size_t)t->vocab_size * sizeof *len);
    if (!len) goto out_of_memory;
    const size_t eot_len = strlen(TOKENIZER_EOT_TEXT);
    for (uint32_t i = 0; i < 256; i++) len[i] = 1;
    len[t->eot] = eot_len;
    uint64_t total = 256 + eot_len;
    for (uint32_t i = 0; i < n_merges; i++) {
        uint32_t a = merges[2 * i], b = merges[2 * i + 1], id = 256 + i;
        if (a >= id || b >= id) {
            tok_error(err, "tokenizer merge %u uses token %u, which does not exist yet; the file is corrupt, re-train it",
                      i, a >= id ? a : b);
            goto fail;
        }
        len[id] = len[a] + len[b];
        if (len[id] > TOKENIZER_MAX_TOKEN_BYTES) {
            tok_error(err, "tokenizer merge %u makes a token of %llu bytes, longer than the %u a token may have; the "
                      "file is corrupt, re-train it",
                      i, (unsigned long long)len[id], TOKENIZER_MAX_TOKEN_BYTES);
            goto fail;
        }
        total += len[id];
        int inserted;
        int64_t slot = pair_map_upsert(&t->merge_map, pair_key(a, b), i, &inserted);
        if (slot < 0) goto out_of_memory;
        if (!inserted) {
            tok_error(err, "tokenizer merges %u and %u join the same pair (%u, %u); the file is corrupt, re-train it",
                      t->merge_map.values[slot], i, a, b);
            goto fail;
        }
    }
    t->tok_bytes = malloc(total);
    if (!t->tok_bytes) goto out_of_memory;
    /* tok_off[id + 1] - tok_off[id] is the length of token id */
    t->tok_off[0] = 0;
    for (uint32_t id = 0; id < t->vocab_size; id++) t->tok_off[id + 1] = t->tok_off[id] + len[id];
    free(len);
    for (uint32_t i = 0; i < 256; i++) t->tok_bytes[i] = (uint8_t)i;
    for (uint32_t i = 0; i < n_merges; i++) {
        uint32_t a = merges[2 * i], b = merges[2 * i + 1];
        uint8_t *dst = t->tok_bytes + t->tok_off[256 + i];
        size_t la = t->tok_off[a + 1] - t->tok_off[a];
        memcpy(dst, t->tok_bytes + t->tok_off[a], la);
        memcpy(dst + la, t->tok_bytes + t->tok_off[b], t->tok_off[b + 1] - t->tok_off[b]);
    }
    memcpy(t->tok_bytes + t->tok_off[t->eot], TOKENIZER_EOT_TEXT, eot_len);
    for (uint32_t i = 0; i < n_merges; i++) t->merge_result[i] = 256 + i;
    for (uint32_t b = 0; b < 256; b++) t->byte_token[b] = b;
    t->split = SPLIT_CL100K;
    t->special_ids[0] = t->eot;
    t->n_specials = 1;
    tokenizer_index_specials(t);
    return t;

out_of_memory:
    tok_error(err, "%s", oom);
fail:
    free(len);
    tokenizer_free(t);
    return NULL;
}

void tokenizer_index_specials(Tokenizer *t) {
    memset(t->special_first, 0, sizeof t->special_first);
    t->special_has_newline = 0;
    for (uint32_t i = 0; i < t->n_specials; i++) {
        size_t len;
        const uint8_t *s = tokenizer_token_bytes(t, t->special_ids[i], &len);
        if (!s || !len) continue;
        t->special_first[s[0]] = 1;
        if (memchr(s, '\n', len)) t->special_has_newline = 1;
    }
}

void tokenizer_free(Tokenizer *t) {
    if (!t) return;
    pair_map_free(&t->merge_map);
    spm_free(t->spm);
    if (t->ignore_merges) bytes_map_free(&t->whole_tokens);
    free(t->hf_json);
    free(t->hf_config);
    free(t->hf_chat_template);
    free(t->load_note);
    free(t->special_ids);
    free(t->merge_result);
    free(t->tok_bytes);
    free(t->tok_off);
    free(t->merges);
    free(t);
}

uint32_t tokenizer_vocab_size(const Tokenizer *t) {
    return t->vocab_size;
}

uint32_t tokenizer_eot_token(const Tokenizer *t) {
    return t->eot;
}

uint32_t tokenizer_bos_token(const Tokenizer *t) {
    return t->n_prefix > 0 ? t->prefix[0] : t->eot;
}

const char *tokenizer_eot_text(const Tokenizer *t, size_t *len) {
    return (const char *)tokenizer_token_bytes(t, t->eot, len);
}

int tokenizer_post_tokens(const Tokenizer *t, int after, const uint32_t **ids) {
    *ids = after ? t->suffix : t->prefix;
    return after ? t->n_suffix : t->n_prefix;
}

const char *tokenizer_unapplied_settings(const Tokenizer *t) {
    return t->unapplied[0] ? t->unapplied : NULL;
}

const char *tokenizer_load_note(const Tokenizer *t) {
    return t->load_note;
}

int tokenizer_is_imported(const Tokenizer *t) {
    return t->hf_json != NULL;
}

uint32_t tokenizer_num_merges(const Tokenizer *t) {
    return t->n_merges;
}

const uint8_t *tokenizer_token_bytes(const Tokenizer *t, uint32_t id, size_t *len) {
    if (id >= t->vocab_size) return NULL;
    *len = t->tok_off[id + 1] - t->tok_off[id];
    return t->tok_bytes + t->tok_off[id];
}

uint64_t tokenizer_fingerprint(const Tokenizer *t) {
    /* each id's length goes in before its bytes, so a byte moving from one token to the next changes it */
    uint64_t h = fgpt_hash64(&t->vocab_size, sizeof t->vocab_size, 0x746f6b656e697a65ull);
    for (uint32_t id = 0; id < t->vocab_size; id++) {
        size_t len;
        const uint8_t *b = tokenizer_token_bytes(t, id, &len);
        const uint32_t n = (uint32_t)len;
        h = fgpt_hash64(&n, sizeof n, h);
        h = fgpt_hash64(b, len, h);
    }
    return h ? h : 1;
}

int tokenizer_merge_pair(const Tokenizer *t, uint32_t id, uint32_t *left, uint32_t *right) {
    if (t->hf_json || id < 256 || id >= t->eot) return -1;
    *left = t->merges[2 * (id - 256)];
    *right = t->merges[2 * (id - 256) + 1];
    return 0;
}

size_t tokenizer_decode(const Tokenizer *t, const uint32_t *ids, size_t n, char *out, size_t cap) {
    static const char replacement[] = "\xef\xbf\xbd"; /* U+FFFD */
    if (t->spm) return spm_decode(t, ids, n, out, cap);
    size_t need = 0;
    for (size_t i = 0; i < n; i++) {
        const uint8_t *src;
        size_t len;
        if (ids[i] < t->vocab_size) {
            src = t->tok_bytes + t->tok_off[ids[i]];
            len = t->tok_off[ids[i] + 1] - t->tok_off[ids[i]];
        } else {
            src = (const uint8_t *)replacement;
            len = 3;
        }
        if (need < cap) memcpy(out + need, src, len <= cap - need ? len : cap - need);
        need += len;
    }
    return need;
}

int tokenizer_is_special_text(const Tokenizer *t, const char *text) {
    uint32_t special[2], plain[2];
    const int around = TOKENIZER_MID_START | TOKENIZER_MID_END;
    const size_t len = strlen(text);
    const size_t n = tokenizer_encode(t, text, len, TOKENIZER_SPECIALS | around, special, 2);
    const size_t m = tokenizer_encode(t, text, len, around, plain, 2);
    return n == 1 && !(m == 1 && plain[0] == special[0]);
}

int tokenizer_is_added(const Tokenizer *t, uint32_t id) {
    for (uint32_t k = 0; k < t->n_specials; k++)
        if (t->special_ids[k] == id) return 1;
    for (uint32_t k = 0; t->spm && k < t->spm->n_added; k++)
        if (t->spm->added[k].id == id) return 1;
    return id == t->eot;
}

int tokenizer_token_offsets(const Tokenizer *t, const uint32_t *ids, size_t n, const char *text, size_t len,
                            size_t *offsets, char *err) {
    if (t->trims_offsets) {
        tok_error(err, "this tokenizer's ByteLevel post-processor trims its offsets (trim_offsets), which is not "
                  "supported here");
        return -1;
    }
    char piece[256];
    size_t at = 0;
    for (size_t i = 0; i < n;) {
        const size_t got = tokenizer_decode(t, &ids[i], 1, piece, sizeof piece);
        char *long_piece = got > sizeof piece && got <= len - at ? malloc(got) : NULL;
        if (long_piece) tokenizer_decode(t, &ids[i], 1, long_piece, got);
        const int same = got <= len - at && (got <= sizeof piece || long_piece) &&
                         memcmp(long_piece ? long_piece : piece, text + at, got) == 0;
        free(long_piece);
        if (same) {
            offsets[i++] = at;
            at += got;
            continue;
        }
        /* a character in byte-fallback tokens decodes whole only: k tokens of its k bytes, a byte each */
        size_t k = 2;
        while (k <= 4 && i + k <= n &&
               !(tokenizer_decode(t, &ids[i], k, piece, sizeof piece) == k && k <= len - at &&
                 memcmp(piece, text + at, k) == 0))
            k++;
        if (k > 4 || i + k > n) {
            tok_error(err, "token %zu (id %u) does not spell the text at byte %zu (the tokenizer's normalizer or "
                      "decoder rewrites it)", i, ids[i], at);
            return -1;
        }
        for (size_t j = 0; j < k; j++) offsets[i++] = at++;
    }
    offsets[n] = at;
    if (at != len) {
        tok_error(err, "the tokens spell %zu of the text's %zu bytes (the tokenizer's normalizer rewrites it)", at, len);
        return -1;
    }
    return 0;
}

int tokenizer_check_text(const Tokenizer *t, const char *text, size_t len, size_t base, char *err) {
    if (!t->nfc) return 0;
    uint32_t cp = 0;
    size_t at = 0;
    const int normal = nfc_is_normal((const uint8_t *)text, len, &cp, &at);
    if (normal < 0) {
        tok_error(err, "out of memory checking the text against this tokenizer's NFC normalizer");
        return -1;
    }
    if (!normal) {
        tok_error(err, "the text holds U+%04X at byte %zu, where NFC (this tokenizer's normalizer) rewrites it; "
                  "normalize the text to NFC first (e.g. uconv -x any-nfc)", cp, base + at);
        return -1;
    }
    return 0;
}
