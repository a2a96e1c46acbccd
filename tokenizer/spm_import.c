/* tokenizer/spm_import.c - the SentencePiece-style parts of a tokenizer.json (spm.h): normalizer,
 * pre-tokenizer, the byte-fallback model's characters, added tokens, post-processor and decoder.
 *
 * What is honoured: normalizers Replace (of a literal), Prepend and NFC (checked, as for byte-level
 * imports), alone or in a Sequence; pre-tokenizers Metaspace (prepend_scheme first, always or never;
 * split or not) and Split on a literal (every behavior, inverted or not), alone or in a Sequence;
 * the model's byte_fallback, unk_token and fuse_unk; added tokens special or not, normalized or
 * not, with lstrip, rstrip and single_word; decoders Replace, ByteFallback, Fuse, Strip and
 * Metaspace (the post-processor is read for every import: post_processor.c). Anything else is
 * refused in one line naming the component and its type. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/spm.h"

static const char *type_of(const JsonValue *v) {
    const char *s = json_string(json_get(v, "type"));
    return s ? s : "(no type)";
}

static int is_true(const JsonValue *v) {
    return v && v->type == JSON_TRUE;
}

static char *dup_bytes(const char *s, size_t n) {
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = 0;
    }
    return d;
}

int spm_wanted(const JsonValue *root) {
    return is_true(json_get(json_get(root, "model"), "byte_fallback"));
}

uint32_t spm_next_char(const uint8_t *s, size_t n, size_t *i) {
    uint8_t b = s[*i];
    if (b < 0x80) {
        (*i)++;
        return b;
    }
    size_t need = b >= 0xc2 && b <= 0xdf ? 2 : b >= 0xe0 && b <= 0xef ? 3 : b >= 0xf0 && b <= 0xf4 ? 4 : 0;
    if (!need || *i + need > n) {
        (*i)++;
        return UINT32_MAX;
    }
    uint32_t cp = b & (need == 2 ? 0x1fu : need == 3 ? 0x0fu : 0x07u);
    for (size_t k = 1; k < need; k++) {
        if ((s[*i + k] & 0xc0) != 0x80) {
            (*i)++;
            return UINT32_MAX;
        }
        cp = cp << 6 | (s[*i + k] & 0x3fu);
    }
    if ((need == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) || (need == 4 && (cp < 0x10000 || cp > 0x10ffff))) {
        (*i)++;
        return UINT32_MAX;
    }
    *i += need;
    return cp;
}

/* A component's steps: a Sequence's list (under key), or the component itself as one step. */
static const JsonValue *steps_of(const JsonValue *v, const char *key, size_t *n) {
    if (strcmp(type_of(v), "Sequence") != 0) {
        *n = 1;
        return v;
    }
    const JsonValue *list = json_get(v, key);
    if (!list || list->type != JSON_ARRAY) {
        *n = 0;
        return NULL;
    }
    *n = list->len;
    return list->items;
}

/* pattern {"String": "..."} of a Replace or a Split; NULL for a Regex (or nothing). */
static const JsonValue *literal_pattern(const JsonValue *step) {
    const JsonValue *p = json_get(json_get(step, "pattern"), "String");
    return p && p->type == JSON_STRING && p->len > 0 ? p : NULL;
}

static int set_rewrite(SpmRewrite *r, int prepend, const JsonValue *from, const JsonValue *to) {
    r->prepend = prepend;
    r->from = from ? dup_bytes(from->string, from->len) : NULL;
    r->from_len = from ? from->len : 0;
    r->to = dup_bytes(to->string, to->len);
    r->to_len = to->len;
    return (from && !r->from) || !r->to ? -1 : 0;
}

static int read_normalizer(Spm *spm, Tokenizer *t, const JsonValue *norm, const char *path, char *err) {
    if (!norm || norm->type == JSON_NULL) return 0;
    size_t n;
    const JsonValue *steps = steps_of(norm, "normalizers", &n);
    if (!steps && n == 0 && strcmp(type_of(norm), "Sequence") == 0) {
        tok_error(err, "%s: normalizer Sequence has no list of normalizers", path);
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        const JsonValue *s = &steps[i];
        const char *type = type_of(s);
        if (strcmp(type, "NFC") == 0) {
            t->nfc = 1;
            continue;
        }
        if (spm->n_norm == SPM_MAX_STEPS) {
            tok_error(err, "%s: normalizer has more than %d steps", path, SPM_MAX_STEPS);
            return -1;
        }
        SpmRewrite *r = &spm->norm[spm->n_norm];
        if (strcmp(type, "Replace") == 0) {
            const JsonValue *from = literal_pattern(s), *to = json_get(s, "content");
            if (json_get(json_get(s, "pattern"), "Regex")) {
                tok_error(err, "%s: normalizer Replace with a regex pattern is not supported (a literal String is)", path);
                return -1;
            }
            if (!from || !json_string(to)) {
                tok_error(err, "%s: normalizer Replace needs a non-empty pattern String and a content string", path);
                return -1;
            }
            if (set_rewrite(r, 0, from, to) != 0) goto oom;
        } else if (strcmp(type, "Prepend") == 0) {
            const JsonValue *to = json_get(s, "prepend");
            if (!json_string(to)) {
                tok_error(err, "%s: normalizer Prepend has no prepend string", path);
                return -1;
            }
            if (set_rewrite(r, 1, NULL, to) != 0) goto oom;
        } else {
            tok_error(err, "%s: normalizer %s is not supported with byte_fallback (Replace, Prepend, NFC and Sequence "
                      "are)", path, type);
            return -1;
        }
        spm->n_norm++;
    }
    return 0;
oom:
    tok_error(err, "out of memory reading %s", path);
    return -1;
}

static int read_pre_tokenizer(Spm *spm, const JsonValue *pt, const char *path, char *err) {
    if (!pt || pt->type == JSON_NULL) return 0;
    size_t n;
    const JsonValue *steps = steps_of(pt, "pretokenizers", &n);
    if (n > SPM_MAX_STEPS) {
        tok_error(err, "%s: pre_tokenizer has more than %d steps", path, SPM_MAX_STEPS);
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        const JsonValue *s = &steps[i];
        const char *type = type_of(s);
        SpmPreStep *p = &spm->pre[spm->n_pre];
        const JsonValue *text;
        if (strcmp(type, "Metaspace") == 0) {
            text = json_get(s, "replacement");
            size_t at = 0;
            if (!json_string(text) || text->len == 0 ||
                (spm_next_char((const uint8_t *)text->string, text->len, &at), at != text->len)) {
                tok_error(err, "%s: pre_tokenizer Metaspace needs a one-character replacement", path);
                return -1;
            }
            p->metaspace = 1;
            const char *scheme = json_string(json_get(s, "prepend_scheme"));
            const JsonValue *add_prefix = json_get(s, "add_prefix_space"), *split = json_get(s, "split");
            p->prepend = !scheme || strcmp(scheme, "always") == 0 ? SPM_PREPEND_ALWAYS
                         : strcmp(scheme, "first") == 0           ? SPM_PREPEND_FIRST
                         : strcmp(scheme, "never") == 0           ? SPM_PREPEND_NEVER
                                                                  : -1;
            if (p->prepend < 0) {
                tok_error(err, "%s: pre_tokenizer Metaspace prepend_scheme %s is unknown (first, always or never)",
                          path, scheme);
                return -1;
            }
            if (add_prefix && add_prefix->type == JSON_FALSE) p->prepend = SPM_PREPEND_NEVER;
            p->split = !split || split->type != JSON_FALSE;
        } else if (strcmp(type, "Split") == 0) {
            text = literal_pattern(s);
            if (!text) {
                tok_error(err, "%s: pre_tokenizer Split on a regex is not supported with byte_fallback (Split on a "
                          "literal String is)", path);
                return -1;
            }
            static const char *const names[] = {"Removed", "Isolated", "MergedWithPrevious", "MergedWithNext",
                                                "Contiguous"};
            const char *behavior = json_string(json_get(s, "behavior"));
            int b = -1;
            for (int k = 0; behavior && k < 5; k++)
                if (strcmp(behavior, names[k]) == 0) b = k;
            if (b < 0) {
                tok_error(err, "%s: pre_tokenizer Split behavior %s is unknown", path, behavior ? behavior : "(none)");
                return -1;
            }
            p->behavior = (SpmBehavior)b;
            p->invert = is_true(json_get(s, "invert"));
        } else {
            tok_error(err, "%s: pre_tokenizer %s is not supported with byte_fallback (Metaspace, Split on a literal and "
                      "Sequence are)", path, type);
            return -1;
        }
        p->text = dup_bytes(text->string, text->len);
        p->text_len = text->len;
        if (!p->text) {
            tok_error(err, "out of memory reading %s", path);
            return -1;
        }
        spm->n_pre++;
    }
    return 0;
}

/* "0A" -> 10 (upper-case digits, as tokenizers writes byte tokens: "<0x0A>"), else -1. */
static int byte_of_hex(const char *h) {
    int v = 0;
    for (int i = 0; i < 2; i++) {
        char c = h[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

/* The model's single characters, byte tokens, unk and "▁", from its vocabulary. */
static int read_model(Spm *spm, const JsonValue *model, const char *path, char *err) {
    const JsonValue *vocab = json_get(model, "vocab");
    const char *unk = json_string(json_get(model, "unk_token"));
    spm->byte_fallback = 1;
    spm->fuse_unk = is_true(json_get(model, "fuse_unk"));
    spm->unk = spm->meta = UINT32_MAX;
    for (int b = 0; b < 256; b++) spm->byte_token[b] = UINT32_MAX;
    if (pair_map_init(&spm->char_token, vocab->len / 4 + 16) != 0) goto oom;
    for (size_t i = 0; i < vocab->len; i++) {
        const JsonMember *m = &vocab->members[i];
        const uint8_t *key = (const uint8_t *)m->key;
        uint32_t id = (uint32_t)m->value.number;
        int hex = m->key_len == 6 && memcmp(m->key, "<0x", 3) == 0 && m->key[5] == '>' ? byte_of_hex(m->key + 3) : -1;
        if (hex >= 0) spm->byte_token[hex] = id;
        if (unk && strcmp(m->key, unk) == 0 && m->key_len == strlen(unk)) spm->unk = id;
        size_t at = 0;
        uint32_t cp = m->key_len ? spm_next_char(key, m->key_len, &at) : UINT32_MAX;
        if (cp != UINT32_MAX && at == m->key_len) {
            int inserted;
            int64_t slot = pair_map_upsert(&spm->char_token, cp, id, &inserted);
            if (slot < 0) goto oom;
            if (cp == SPM_META) spm->meta = id;
        }
    }
    if (unk && spm->unk == UINT32_MAX) {
        tok_error(err, "%s: unk_token \"%.40s\" is not in the vocabulary", path, unk);
        return -1;
    }
    return 0;
oom:
    tok_error(err, "out of memory reading %s", path);
    return -1;
}

/* The code points that some token made by a merge holds just before a "▁" (a "▁" after them may
 * be merged with them, so a word is never cut there). */
static int find_joins(Spm *spm, const Tokenizer *t, const char *path, char *err) {
    if (pair_map_init(&spm->joins_meta, 64) != 0) goto oom;
    for (uint32_t i = 0; i < t->n_merges; i++) {
        size_t n;
        const uint8_t *s = tokenizer_token_bytes(t, t->merge_result[i], &n);
        uint32_t prev = UINT32_MAX;
        for (size_t at = 0; at < n;) {
            uint32_t cp = spm_next_char(s, n, &at);
            if (cp == SPM_META && prev != UINT32_MAX && prev != SPM_META) {
                int inserted;
                if (pair_map_upsert(&spm->joins_meta, prev, 1, &inserted) < 0) goto oom;
            }
            prev = cp;
        }
    }
    return 0;
oom:
    tok_error(err, "out of memory reading %s", path);
    return -1;
}

static uint8_t *malloc_room(void *ctx, int i, size_t size) {
    uint8_t **bufs = ctx;
    uint8_t *p = realloc(bufs[i], size ? size : 1);
    if (p) bufs[i] = p;
    return p;
}

static int trie_add(SpmTrie *tr, const uint8_t *s, size_t n, uint32_t index) {
    if (!tr->added) {
        tr->cap_nodes = 64;
        tr->added = calloc(tr->cap_nodes, sizeof *tr->added);
        tr->n_nodes = 1;
        if (!tr->added || pair_map_init(&tr->edges, 64) != 0) return -1;
    }
    uint32_t node = 0;
    tr->first[s[0]] = 1;
    for (size_t i = 0; i < n; i++) {
        int inserted;
        int64_t slot = pair_map_upsert(&tr->edges, pair_key(node, s[i]), tr->n_nodes, &inserted);
        if (slot < 0) return -1;
        if (inserted) {
            if (tr->n_nodes == tr->cap_nodes) {
                uint32_t *grown = realloc(tr->added, 2 * (size_t)tr->cap_nodes * sizeof *grown);
                if (!grown) return -1;
                memset(grown + tr->cap_nodes, 0, tr->cap_nodes * sizeof *grown);
                tr->added = grown;
                tr->cap_nodes *= 2;
            }
            tr->n_nodes++;
        }
        node = tr->edges.values[slot];
    }
    tr->added[node] = index + 1; /* a repeated content: the later token, as a map keeps it */
    return 0;
}

/* An ASCII letter followed by " " or "▁": a token or pattern that could span a cut for threads. */
static int spans_word_space(const char *s, size_t n) {
    for (size_t i = 0; i + 1 < n; i++) {
        int letter = (s[i] | 0x20) >= 'a' && (s[i] | 0x20) <= 'z';
        if (letter && (s[i + 1] == ' ' || (i + 3 < n && memcmp(s + i + 1, "\xe2\x96\x81", 3) == 0))) return 1;
    }
    return 0;
}

static int read_added(Spm *spm, const JsonValue *added, const uint32_t *ids, const char *path, char *err) {
    spm->added = calloc(added->len + 1, sizeof *spm->added);
    uint8_t *bufs[2] = {NULL, NULL};
    if (!spm->added) goto oom;
    for (size_t i = 0; i < added->len; i++) {
        const JsonValue *a = &added->items[i];
        const JsonValue *c = json_get(a, "content"), *normalized = json_get(a, "normalized");
        if (c->len == 0) continue; /* skipped, as tokenizers skips it */
        SpmAdded *x = &spm->added[spm->n_added];
        x->id = ids[i];
        x->special = is_true(json_get(a, "special"));
        x->lstrip = is_true(json_get(a, "lstrip"));
        x->rstrip = is_true(json_get(a, "rstrip"));
        x->single_word = is_true(json_get(a, "single_word"));
        /* absent, it follows tokenizers' AddedToken: normalized unless special */
        const int is_normalized = normalized ? normalized->type == JSON_TRUE : !x->special;
        const uint8_t *s = (const uint8_t *)c->string;
        size_t n = c->len;
        if (is_normalized) {
            s = spm_normalize(spm, s, n, 1, malloc_room, bufs, &n);
            if (!s) goto oom;
        }
        if (x->lstrip || x->rstrip || x->single_word || spans_word_space((const char *)s, n) ||
            spans_word_space(c->string, c->len))
            spm->can_cut = 0;
        if (n && trie_add(is_normalized ? &spm->normalized : &spm->raw, s, n, spm->n_added) != 0) goto oom;
        spm->n_added++;
    }
    free(bufs[1]);
    free(bufs[0]);
    return 0;
oom:
    free(bufs[1]);
    free(bufs[0]);
    tok_error(err, "out of memory reading %s", path);
    return -1;
}

static int read_decoder(Spm *spm, const JsonValue *dec, const char *path, char *err) {
    if (!dec || dec->type == JSON_NULL) return 0;
    size_t n;
    const JsonValue *steps = steps_of(dec, "decoders", &n);
    int fused = 0;
    for (size_t i = 0; i < n; i++) {
        const JsonValue *s = &steps[i];
        const char *type = type_of(s);
        if (strcmp(type, "Replace") == 0) {
            const JsonValue *from = literal_pattern(s), *to = json_get(s, "content");
            if (!from || !json_string(to) || spm->n_dec_replace == SPM_MAX_STEPS) {
                tok_error(err, "%s: decoder Replace needs a literal String pattern and content", path);
                return -1;
            }
            if (set_rewrite(&spm->dec_replace[spm->n_dec_replace++], 0, from, to) != 0) {
                tok_error(err, "out of memory reading %s", path);
                return -1;
            }
        } else if (strcmp(type, "ByteFallback") == 0) {
            spm->dec_byte_fallback = 1;
        } else if (strcmp(type, "Fuse") == 0) {
            fused = 1;
        } else if (strcmp(type, "Strip") == 0) {
            const JsonValue *content = json_get(s, "content");
            long long start = 0, stop = 0;
            size_t at = 0;
            if (!fused || !json_string(content) || content->len == 0 || !json_int(json_get(s, "start"), 0, 1 << 20, &start) ||
                !json_int(json_get(s, "stop"), 0, 1 << 20, &stop)) {
                tok_error(err, "%s: decoder Strip is supported after a Fuse, with a content character, start and stop",
                          path);
                return -1;
            }
            spm->dec_strip_char = spm_next_char((const uint8_t *)content->string, content->len, &at);
            spm->dec_strip_start = (int)start;
            spm->dec_strip_stop = (int)stop;
        } else if (strcmp(type, "Metaspace") == 0) {
            const char *scheme = json_string(json_get(s, "prepend_scheme"));
            const JsonValue *add_prefix = json_get(s, "add_prefix_space");
            spm->dec_metaspace = 1;
            spm->dec_metaspace_first = !(scheme && strcmp(scheme, "never") == 0) &&
                                       !(add_prefix && add_prefix->type == JSON_FALSE);
        } else {
            tok_error(err, "%s: decoder %s is not supported with byte_fallback (Replace, ByteFallback, Fuse, Strip, "
                      "Metaspace and Sequence are)", path, type);
            return -1;
        }
    }
    return 0;
}

/* Cutting a text for threads before a space between two ASCII letters (spm_cut_text) gives the ids
 * of the whole when nothing can match across that space and the space becomes the "▁" that starts
 * a word: no added token, Replace or Split pattern holds a letter then a space, no added token
 * strips space or wants single words, and the space becomes "▁" by a Replace or a first Metaspace. */
static int cuts_are_safe(const Spm *spm) {
    if (!spm->can_cut || spm->meta == UINT32_MAX) return 0;
    int space_to_meta = spm->n_pre > 0 && spm->pre[0].metaspace;
    for (int i = 0; i < spm->n_norm; i++) {
        const SpmRewrite *r = &spm->norm[i];
        if (r->prepend) continue;
        if (r->from_len == 1 && r->from[0] == ' ' && r->to_len == 3 && memcmp(r->to, "\xe2\x96\x81", 3) == 0)
            space_to_meta = 1;
        else if (memchr(r->from, ' ', r->from_len) || spans_word_space(r->from, r->from_len) ||
                 spans_word_space(r->to, r->to_len))
            return 0;
        for (size_t k = 0; k < r->from_len; k++)
            if (((r->from[k] | 0x20) >= 'a' && (r->from[k] | 0x20) <= 'z')) return 0; /* rewrites letters */
    }
    for (int i = 0; i < spm->n_pre; i++) {
        const SpmPreStep *p = &spm->pre[i];
        if (p->metaspace ? memcmp(p->text, "\xe2\x96\x81", 3) != 0 || p->text_len != 3
                         : spans_word_space(p->text, p->text_len))
            return 0;
    }
    return space_to_meta;
}

int spm_import(Tokenizer *t, const JsonValue *root, const uint32_t *added_ids, const char *path, char *err) {
    Spm *spm = calloc(1, sizeof *spm);
    if (!spm) {
        tok_error(err, "out of memory reading %s", path);
        return -1;
    }
    t->spm = spm;
    spm->can_cut = 1;
    static const JsonValue empty_array = {.type = JSON_ARRAY};
    const JsonValue *added = json_get(root, "added_tokens");
    if (!added || added->type != JSON_ARRAY) added = &empty_array;
    if (read_normalizer(spm, t, json_get(root, "normalizer"), path, err) != 0 ||
        read_pre_tokenizer(spm, json_get(root, "pre_tokenizer"), path, err) != 0 ||
        read_model(spm, json_get(root, "model"), path, err) != 0 || find_joins(spm, t, path, err) != 0 ||
        read_added(spm, added, added_ids, path, err) != 0 ||
        read_decoder(spm, json_get(root, "decoder"), path, err) != 0)
        return -1;
    spm->can_cut = cuts_are_safe(spm);
    /* documents are separated by the post-processor's first token (Gemma's and Llama 2's BOS),
     * else by an end-of-sequence token when the file has one */
    if (t->n_prefix) t->eot = t->prefix[0];
    else if (t->n_suffix) t->eot = t->suffix[0];
    else
        for (uint32_t i = 0; i < spm->n_added; i++) {
            size_t n;
            const uint8_t *s = tokenizer_token_bytes(t, spm->added[i].id, &n);
            if (spm->added[i].special && ((n == 4 && memcmp(s, "</s>", 4) == 0) || (n == 5 && memcmp(s, "<eos>", 5) == 0)))
                t->eot = spm->added[i].id;
        }
    return 0;
}

static void trie_free(SpmTrie *tr) {
    if (!tr->added) return;
    pair_map_free(&tr->edges);
    free(tr->added);
}

void spm_free(Spm *s) {
    if (!s) return;
    for (int i = s->n_dec_replace - 1; i >= 0; i--) {
        free(s->dec_replace[i].to);
        free(s->dec_replace[i].from);
    }
    trie_free(&s->normalized);
    trie_free(&s->raw);
    free(s->added);
    if (s->joins_meta.keys) pair_map_free(&s->joins_meta);
    if (s->char_token.keys) pair_map_free(&s->char_token);
    for (int i = s->n_pre - 1; i >= 0; i--) free(s->pre[i].text);
    for (int i = s->n_norm - 1; i >= 0; i--) {
        free(s->norm[i].to);
        free(s->norm[i].from);
    }
    free(s);
}
