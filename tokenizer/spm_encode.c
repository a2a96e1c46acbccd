/* tokenizer/spm_encode.c - a SentencePiece-style tokenizer (spm.h) at work: text -> ids in the
 * order tokenizers runs its pipeline, the cuts that let threads share a text, and ids -> text
 * through the decoder.
 *
 * Each stage hands its pieces to the next as it finds them (no list of pieces is built): a stage
 * that rewrites text writes into the encoder's scratch buffer of its own. A piece "at the origin"
 * starts at the first byte of its document, where Metaspace's prepend_scheme "first" adds its
 * "▁". */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/spm.h"
#include "tokenizer/unicode_table.h"

/* Scratch buffers of the encoder: 0 and 1 for the normalizer, 2.. for the pre-tokenizer steps,
 * the last for a word's symbols. */
#define SCRATCH_PRE 2
#define SCRATCH_SYMBOLS (ENCODE_SCRATCH - 1)

/* Chunks up to this many bytes go through the cache (bpe_encode.c uses the same bound). */
#define CACHED_BYTES 64

typedef struct {
    uint32_t *ids;
    size_t cap, done;
} Out;

static inline void put(Out *o, uint32_t id) {
    if (o->done < o->cap) o->ids[o->done] = id;
    o->done++;
}

static inline uint32_t char_token(const Spm *spm, uint32_t cp) {
    return cp == UINT32_MAX ? UINT32_MAX : pair_map_get(&spm->char_token, cp);
}

/* ---- normalizer ---- */
static size_t rewrite_bound(const SpmRewrite *r, size_t n) {
    return n * (r->to_len > 1 ? r->to_len : 1) + r->to_len;
}

static size_t rewrite(const SpmRewrite *r, const uint8_t *s, size_t n, int may_prepend, uint8_t *out) {
    if (r->prepend) {
        size_t k = 0;
        if (n && may_prepend) {
            memcpy(out, r->to, r->to_len);
            k = r->to_len;
        }
        memcpy(out + k, s, n);
        return k + n;
    }
    size_t i = 0, k = 0;
    while (i < n) {
        const uint8_t *hit = memmem(s + i, n - i, r->from, r->from_len);
        size_t gap = hit ? (size_t)(hit - (s + i)) : n - i;
        memcpy(out + k, s + i, gap);
        k += gap;
        i += gap;
        if (!hit) break;
        memcpy(out + k, r->to, r->to_len);
        k += r->to_len;
        i += r->from_len;
    }
    return k;
}

const uint8_t *spm_normalize(const Spm *spm, const uint8_t *s, size_t n, int may_prepend, SpmRoom room, void *ctx,
                             size_t *out_n) {
    for (int k = 0; k < spm->n_norm; k++) {
        uint8_t *dst = room(ctx, k & 1, rewrite_bound(&spm->norm[k], n));
        if (!dst) return NULL;
        n = rewrite(&spm->norm[k], s, n, may_prepend, dst);
        s = dst;
    }
    *out_n = n;
    return s;
}

static uint8_t *ctx_room(void *ctx, int i, size_t size) {
    return encode_ctx_scratch(ctx, i, size);
}

/* ---- added tokens ---- */
static int is_space_cp(uint32_t cp) {
    return cp != UINT32_MAX && (cp == '\n' || cp == '\r' || unicode_class(cp) == UCLASS_SPACE);
}

/* Regex \w as tokenizers' single_word sees it (unicode_is_word); cp is UINT32_MAX for no character. */
static int is_word_cp(uint32_t cp) {
    return cp < 0x110000 && unicode_is_word(cp);
}

/* The character that ends at s[end) (end > 0) and where it starts. */
static uint32_t char_before(const uint8_t *s, size_t end, size_t *start) {
    size_t j = end - 1;
    while (j > 0 && end - j < 4 && (s[j] & 0xc0) == 0x80) j--;
    size_t at = j;
    uint32_t cp = spm_next_char(s, end, &at);
    if (at != end) { /* not one character: the last byte alone */
        j = end - 1;
        cp = UINT32_MAX;
    }
    *start = j;
    return cp;
}

/* The next added token kept in s[0..n), as tokenizers finds them: the leftmost longest match of
 * the trie from *scan (matches never overlap, a discarded one included), then its filters (a
 * special token when specials are off, a single_word token inside a word) and its stripping of
 * white space (lstrip never reaches before kept_end, the end of the previous token). */
static int next_added(const Spm *spm, const SpmTrie *tr, const uint8_t *s, size_t n, int specials, size_t *scan,
                      size_t kept_end, size_t *start, size_t *stop, uint32_t *id) {
    if (!tr->added) return 0;
    for (size_t i = *scan; i < n; i++) {
        if (!tr->first[s[i]]) continue;
        uint32_t node = 0, best = 0;
        size_t best_end = 0;
        for (size_t j = i; j < n; j++) {
            node = pair_map_get(&tr->edges, pair_key(node, s[j]));
            if (node == UINT32_MAX) break;
            if (tr->added[node]) {
                best = tr->added[node];
                best_end = j + 1;
            }
        }
        if (!best) continue;
        *scan = best_end;
        const SpmAdded *a = &spm->added[best - 1];
        size_t b;
        if ((a->special && !specials) ||
            (a->single_word && ((i > 0 && is_word_cp(char_before(s, i, &b))) ||
                                (best_end < n && (b = best_end, is_word_cp(spm_next_char(s, n, &b))))))) {
            i = best_end - 1;
            continue;
        }
        size_t st = i, sp = best_end;
        if (a->lstrip) {
            while (st > kept_end) {
                size_t from;
                if (!is_space_cp(char_before(s, st, &from)) || from < kept_end) break;
                st = from;
            }
        }
        if (a->rstrip) {
            while (sp < n) {
                size_t next = sp;
                if (!is_space_cp(spm_next_char(s, n, &next))) break;
                sp = next;
            }
            if (sp > *scan) *scan = sp;
        }
        *start = st;
        *stop = sp;
        *id = a->id;
        return 1;
    }
    *scan = n;
    return 0;
}

/* ---- the model ---- */
/* Symbols of one chunk as tokenizers' BPE makes them before merging: each character's token, else
 * its bytes' <0xNN> tokens, else unk (runs of unknown characters fused into one with fuse_unk; the
 * pending unk is written when a known character comes, as tokenizers does). */
static size_t symbols_of(const Spm *spm, const uint8_t *s, size_t n, uint32_t *sym) {
    size_t k = 0;
    int unk_pending = 0;
    for (size_t i = 0; i < n;) {
        size_t start = i;
        uint32_t id = char_token(spm, spm_next_char(s, n, &i));
        if (id != UINT32_MAX) {
            if (unk_pending) sym[k++] = spm->unk;
            unk_pending = 0;
            sym[k++] = id;
            continue;
        }
        int all = 1;
        for (size_t j = start; j < i; j++) all &= spm->byte_token[s[j]] != UINT32_MAX;
        if (all) {
            for (size_t j = start; j < i; j++) sym[k++] = spm->byte_token[s[j]];
            continue;
        }
        if (spm->unk == UINT32_MAX) continue; /* no unk: the character is dropped */
        if (unk_pending && !spm->fuse_unk) sym[k++] = spm->unk;
        unk_pending = 1;
    }
    if (unk_pending) sym[k++] = spm->unk;
    return k;
}

static void encode_chunk(EncodeCtx *c, const uint8_t *s, size_t n, Out *o) {
    const Tokenizer *t = encode_ctx_tokenizer(c);
    uint64_t h = 0;
    if (n <= CACHED_BYTES) {
        size_t k;
        h = bytes_hash(s, n);
        const uint32_t *hit = encode_cache_get(c, s, n, h, &k);
        if (hit) {
            for (size_t j = 0; j < k; j++) put(o, hit[j]);
            return;
        }
    }
    uint32_t *sym = (uint32_t *)encode_ctx_scratch(c, SCRATCH_SYMBOLS, (n + 1) * sizeof *sym);
    if (!sym) {
        encode_ctx_set_oom(c);
        return;
    }
    size_t k = symbols_of(t->spm, s, n, sym);
    size_t merged = bpe_symbols(t, sym, k);
    if (merged == SIZE_MAX) encode_ctx_set_oom(c);
    else k = merged;
    for (size_t j = 0; j < k; j++) put(o, sym[j]);
    if (n <= CACHED_BYTES && merged != SIZE_MAX) encode_cache_put(c, s, n, h, sym, k);
}

/* One word of the pre-tokenizer. Cut into chunks before each "▁" that follows a character of the
 * vocabulary no merge joins to a "▁": no token can span the cut, so merging each chunk alone gives
 * the merges of the word (merges in one chunk never change the pairs of another). */
static void encode_word(EncodeCtx *c, const uint8_t *s, size_t n, Out *o) {
    const Tokenizer *t = encode_ctx_tokenizer(c);
    const Spm *spm = t->spm;
    if (t->ignore_merges) {
        BytesSlot *whole = bytes_map_find(&t->whole_tokens, s, n, bytes_hash(s, n));
        if (whole) {
            put(o, (uint32_t)whole->value);
            return;
        }
    }
    size_t chunk = 0;
    if (spm->meta != UINT32_MAX) {
        for (size_t i = 1; i + 3 <= n; i++) {
            const uint8_t *m = memmem(s + i, n - i, "\xe2\x96\x81", 3);
            if (!m) break;
            i = (size_t)(m - s);
            size_t from;
            uint32_t prev = char_before(s, i, &from);
            if (prev != SPM_META && char_token(spm, prev) != UINT32_MAX &&
                pair_map_get(&spm->joins_meta, prev) == UINT32_MAX && i > chunk) {
                encode_chunk(c, s + chunk, i - chunk, o);
                chunk = i;
            }
        }
    }
    encode_chunk(c, s + chunk, n - chunk, o);
}

/* ---- pre-tokenizer ---- */
static void pre_step(EncodeCtx *c, int k, const uint8_t *s, size_t n, int origin, Out *o);

static void metaspace_step(EncodeCtx *c, int k, const SpmPreStep *p, const uint8_t *s, size_t n, int origin, Out *o) {
    const size_t rl = p->text_len;
    uint8_t *buf = encode_ctx_scratch(c, SCRATCH_PRE + k, n * rl + rl);
    if (!buf) {
        encode_ctx_set_oom(c);
        return;
    }
    const int starts_with_rep = s[0] == ' ' || (n >= rl && memcmp(s, p->text, rl) == 0);
    const int prepend = !starts_with_rep && (p->prepend == SPM_PREPEND_ALWAYS || (p->prepend == SPM_PREPEND_FIRST && origin));
    size_t m = 0;
    if (prepend) {
        memcpy(buf, p->text, rl);
        m = rl;
    }
    for (size_t i = 0; i < n;) {
        const uint8_t *sp = memchr(s + i, ' ', n - i);
        size_t gap = sp ? (size_t)(sp - (s + i)) : n - i;
        memcpy(buf + m, s + i, gap);
        m += gap;
        i += gap;
        if (!sp) break;
        memcpy(buf + m, p->text, rl);
        m += rl;
        i++;
    }
    if (!p->split) {
        pre_step(c, k + 1, buf, m, origin, o);
        return;
    }
    /* split before each replacement: a run of them gives one piece each, the last one merged with
     * the text after it (tokenizers' MergedWithNext) */
    size_t piece = 0;
    for (size_t i = 1; i < m;) {
        const uint8_t *r = memmem(buf + i, m - i, p->text, rl);
        if (!r) break;
        size_t at = (size_t)(r - buf);
        pre_step(c, k + 1, buf + piece, at - piece, origin && piece == 0, o);
        piece = at;
        i = at + rl;
    }
    pre_step(c, k + 1, buf + piece, m - piece, origin && piece == 0, o);
}

/* Split on a literal: the text is a sequence of segments, matches of the pattern and the text
 * between them (inverted: the other way round), joined into pieces by the behavior as tokenizers'
 * NormalizedString::split joins them. */
typedef struct {
    EncodeCtx *c;
    int k, origin;
    const uint8_t *s;
    Out *o;
    size_t start, end; /* the pending piece, when has */
    int has, is_match;
} SplitState;

static void split_emit(SplitState *st, size_t a, size_t b) {
    pre_step(st->c, st->k + 1, st->s + a, b - a, st->origin && a == 0, st->o);
}

static void split_flush(SplitState *st) {
    if (st->has) split_emit(st, st->start, st->end);
    st->has = 0;
}

static void split_segment(SplitState *st, SpmBehavior behavior, size_t a, size_t b, int is_match) {
    switch (behavior) {
    case SPM_SPLIT_REMOVED:
        if (!is_match) split_emit(st, a, b);
        return;
    case SPM_SPLIT_ISOLATED: split_emit(st, a, b); return;
    case SPM_SPLIT_CONTIGUOUS:
    case SPM_SPLIT_MERGED_PREVIOUS:
        /* Contiguous joins a segment to a pending one of its kind; MergedWithPrevious joins a match
         * to the text before it */
        if (st->has && (behavior == SPM_SPLIT_CONTIGUOUS ? st->is_match == is_match : is_match && !st->is_match)) {
            st->end = b;
        } else {
            split_flush(st);
            st->start = a;
            st->end = b;
            st->has = 1;
        }
        st->is_match = is_match;
        return;
    case SPM_SPLIT_MERGED_NEXT:
        /* a match waits for the text after it */
        if (st->has && !is_match) {
            split_emit(st, st->start, b);
            st->has = 0;
        } else {
            split_flush(st);
            if (is_match) {
                st->start = a;
                st->end = b;
                st->has = 1;
            } else {
                split_emit(st, a, b);
            }
        }
        return;
    }
}

static void split_step(EncodeCtx *c, int k, const SpmPreStep *p, const uint8_t *s, size_t n, int origin, Out *o) {
    SplitState st = {c, k, origin, s, o, 0, 0, 0, 0};
    size_t i = 0;
    while (i < n) {
        const uint8_t *hit = memmem(s + i, n - i, p->text, p->text_len);
        size_t at = hit ? (size_t)(hit - s) : n;
        if (at > i) split_segment(&st, p->behavior, i, at, p->invert);
        if (!hit) break;
        split_segment(&st, p->behavior, at, at + p->text_len, !p->invert);
        i = at + p->text_len;
    }
    split_flush(&st);
}

static void pre_step(EncodeCtx *c, int k, const uint8_t *s, size_t n, int origin, Out *o) {
    if (n == 0) return;
    const Spm *spm = encode_ctx_tokenizer(c)->spm;
    if (k == spm->n_pre) encode_word(c, s, n, o);
    else if (spm->pre[k].metaspace) metaspace_step(c, k, &spm->pre[k], s, n, origin, o);
    else split_step(c, k, &spm->pre[k], s, n, origin, o);
}

/* ---- pieces and documents ---- */
/* A piece of text between added tokens that are matched before normalizing. */
static void encode_piece(EncodeCtx *c, const uint8_t *s, size_t n, int origin, int may_prepend, int specials, Out *o) {
    const Spm *spm = encode_ctx_tokenizer(c)->spm;
    size_t m = n;
    const uint8_t *ns = spm_normalize(spm, s, n, may_prepend, ctx_room, c, &m);
    if (!ns) {
        encode_ctx_set_oom(c);
        return;
    }
    size_t scan = 0, pos = 0, st, sp;
    uint32_t id;
    while (next_added(spm, &spm->normalized, ns, m, specials, &scan, pos, &st, &sp, &id)) {
        pre_step(c, 0, ns + pos, st - pos, origin && pos == 0, o);
        put(o, id);
        pos = sp;
    }
    pre_step(c, 0, ns + pos, m - pos, origin && pos == 0, o);
}

/* A text, or the part of one (origin = 0: it began before). With documents, the text after the
 * separator is at the origin of a document of its own. */
static void encode_document(EncodeCtx *c, const uint8_t *s, size_t n, int origin, int specials, int documents,
                            Out *o) {
    const Tokenizer *t = encode_ctx_tokenizer(c);
    const Spm *spm = t->spm;
    size_t scan = 0, pos = 0, st, sp;
    uint32_t id;
    int at_origin = origin; /* the piece from pos starts a document */
    while (next_added(spm, &spm->raw, s, n, specials, &scan, pos, &st, &sp, &id)) {
        if (st > pos) encode_piece(c, s + pos, st - pos, at_origin, origin || pos > 0, specials, o);
        put(o, id);
        pos = sp;
        at_origin = documents && id == t->eot;
    }
    if (pos < n) encode_piece(c, s + pos, n - pos, at_origin, origin || pos > 0, specials, o);
}

/* The text as tokenizers encodes it, the post-processor's tokens around it (with specials): a
 * separator inside the text is the added token it is, as it is there. */
size_t spm_encode(EncodeCtx *c, const uint8_t *text, size_t len, int flags, uint32_t *out, size_t cap) {
    const Tokenizer *t = encode_ctx_tokenizer(c);
    Out o = {out, cap, 0};
    const int specials = flags & TOKENIZER_SPECIALS, starts = !(flags & TOKENIZER_MID_START);
    const int post = specials && !(flags & TOKENIZER_NO_POST);
    if (post && starts)
        for (int i = 0; i < t->n_prefix; i++) put(&o, t->prefix[i]);
    encode_document(c, text, len, starts, specials, specials && (flags & TOKENIZER_DOCUMENTS), &o);
    if (post && !(flags & TOKENIZER_MID_END))
        for (int i = 0; i < t->n_suffix; i++) put(&o, t->suffix[i]);
    return o.done;
}

/* ---- cutting for threads ---- */
static int is_letter(uint8_t b) {
    return (b | 0x20) >= 'a' && (b | 0x20) <= 'z';
}

/* A space between two ASCII letters, the first of which no merge joins to a "▁": the word after
 * the space starts a chunk of its own in the whole text as in the part (spm_import.c says when the
 * tokenizer allows it). */
int spm_is_cut_point(const Spm *spm, const uint8_t *s, size_t len, size_t i) {
    if (!spm->can_cut) return 0;
    return i > 0 && i + 1 < len && s[i] == ' ' && is_letter(s[i - 1]) && is_letter(s[i + 1]) &&
           char_token(spm, s[i - 1]) != UINT32_MAX && pair_map_get(&spm->joins_meta, s[i - 1]) == UINT32_MAX;
}

int spm_cut_text(const Tokenizer *t, const char *text, size_t len, int parts, size_t *cuts) {
    const uint8_t *s = (const uint8_t *)text;
    int k = 0;
    cuts[0] = 0;
    for (int p = 1; t->spm->can_cut && p < parts; p++) {
        size_t target = (size_t)((double)len * p / parts);
        if (target <= cuts[k]) continue;
        size_t i = target;
        while (i < len && !spm_is_cut_point(t->spm, s, len, i)) i++;
        if (i >= len) break;
        cuts[++k] = i;
    }
    cuts[++k] = len;
    return k;
}

/* ---- decoding ---- */
typedef struct {
    char *p;
    size_t len, cap;
    int oom;
} Text;

/* Room for need bytes in all; 0 when out of memory. */
static int text_reserve(Text *b, size_t need) {
    if (b->oom) return 0;
    if (need > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < need) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = 1;
            return 0;
        }
        b->p = p;
        b->cap = cap;
    }
    return 1;
}

static void text_put(Text *b, const void *s, size_t n) {
    if (n == 0 || !text_reserve(b, b->len + n)) return;
    memcpy(b->p + b->len, s, n);
    b->len += n;
}

static int is_utf8(const uint8_t *s, size_t n) {
    for (size_t i = 0; i < n;)
        if (spm_next_char(s, n, &i) == UINT32_MAX) return 0;
    return 1;
}

/* A byte token's string "<0xNN>" (either case, as tokenizers' ByteFallback reads it): its byte. */
static int byte_of_token(const uint8_t *s, size_t n) {
    if (n != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>') return -1;
    int v = 0;
    for (int i = 3; i < 5; i++) {
        int c = s[i] | 0x20, d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

/* Bytes from a run of byte tokens: themselves when they make UTF-8, else one U+FFFD each. */
static void flush_bytes(Text *out, Text *bytes) {
    if (!bytes->len) return;
    if (is_utf8((const uint8_t *)bytes->p, bytes->len)) text_put(out, bytes->p, bytes->len);
    else
        for (size_t i = 0; i < bytes->len; i++) text_put(out, "\xef\xbf\xbd", 3);
    bytes->len = 0;
}

size_t spm_decode(const Tokenizer *t, const uint32_t *ids, size_t n, char *out, size_t cap) {
    const Spm *spm = t->spm;
    Text text = {0}, bytes = {0}, a = {0}, b = {0};
    for (size_t i = 0; i < n; i++) {
        size_t len;
        const uint8_t *s = tokenizer_token_bytes(t, ids[i], &len);
        if (!s) {
            s = (const uint8_t *)"\xef\xbf\xbd";
            len = 3;
        }
        a.len = 0;
        text_put(&a, s, len);
        for (int r = 0; r < spm->n_dec_replace && !a.oom; r++) {
            if (!text_reserve(&b, rewrite_bound(&spm->dec_replace[r], a.len))) break;
            b.len = rewrite(&spm->dec_replace[r], (const uint8_t *)a.p, a.len, 0, (uint8_t *)b.p);
            Text swap = a;
            a = b;
            b = swap;
        }
        int byte = spm->dec_byte_fallback ? byte_of_token((const uint8_t *)a.p, a.len) : -1;
        if (byte >= 0) {
            uint8_t c = (uint8_t)byte;
            text_put(&bytes, &c, 1);
            continue;
        }
        flush_bytes(&text, &bytes);
        if (!spm->dec_metaspace) {
            text_put(&text, a.p, a.len);
            continue;
        }
        for (size_t j = 0; j < a.len;) {
            if (j + 3 <= a.len && memcmp(a.p + j, "\xe2\x96\x81", 3) == 0) {
                if (!(i == 0 && spm->dec_metaspace_first)) text_put(&text, " ", 1);
                j += 3;
            } else {
                text_put(&text, a.p + j, 1);
                j++;
            }
        }
    }
    flush_bytes(&text, &bytes);
    /* Strip, on the fused text */
    text.oom |= a.oom || b.oom || bytes.oom;
    size_t from = 0, to = text.oom ? 0 : text.len; /* out of memory: nothing rather than a wrong text */
    for (int k = 0; k < spm->dec_strip_start && from < to; k++) {
        size_t next = from;
        if (spm_next_char((const uint8_t *)text.p, to, &next) != spm->dec_strip_char) break;
        from = next;
    }
    for (int k = 0; k < spm->dec_strip_stop && to > from; k++) {
        size_t start;
        if (char_before((const uint8_t *)text.p, to, &start) != spm->dec_strip_char || start < from) break;
        to = start;
    }
    size_t need = to - from;
    if (cap) memcpy(out, text.p + from, need < cap ? need : cap);
    free(b.p);
    free(a.p);
    free(bytes.p);
    free(text.p);
    return need;
}
