/* tokenizer/bpe_encode.c - text -> tokens.
 *
 * Text is cut at "<|endoftext|>" (when specials are allowed), each piece is split into chunks by the
 * pre-tokenizer, and each chunk is turned into tokens by applying merges lowest id first, which is
 * the order training learned them in. Most chunks repeat (" the", ","), so a per-thread cache maps
 * chunk bytes to their tokens; a miss runs the BPE below. Big texts are cut into pieces for threads
 * where a chunk boundary is certain, so the parallel result equals the serial one. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/spm.h"
#include "tokenizer/tokenizer_internal.h"

/* Chunks longer than this use the heap BPE and are not cached: they are rare (long runs of
 * letters, spaces or symbols) and would fill the cache with one-off keys. */
#define SHORT_CHUNK 64
/* The cache is cleared when it holds this many chunks, bounding memory on endless text. */
#define CACHE_MAX_ENTRIES (1u << 20)

static inline uint32_t rank_of(const Tokenizer *t, uint32_t a, uint32_t b) {
    return pair_map_get(&t->merge_map, pair_key(a, b)); /* merge rank, UINT32_MAX when no merge */
}

/* Short chunks: keep the merge rank of each adjacent pair; each step merges the lowest one (the
 * leftmost on ties, as training does and as Hugging Face's BPE does) and recomputes only its two
 * neighbours. */
static size_t bpe_quadratic_symbols(const Tokenizer *t, uint32_t *sym, size_t n) {
    uint32_t rank[SHORT_CHUNK];
    for (size_t i = 0; i + 1 < n; i++) rank[i] = rank_of(t, sym[i], sym[i + 1]);
    while (n > 1) {
        uint32_t best = UINT32_MAX;
        size_t at = 0;
        for (size_t i = 0; i + 1 < n; i++)
            if (rank[i] < best) {
                best = rank[i];
                at = i;
            }
        if (best == UINT32_MAX) break;
        sym[at] = t->merge_result[best];
        memmove(sym + at + 1, sym + at + 2, (n - at - 2) * sizeof *sym);
        memmove(rank + at + 1, rank + at + 2, (n - at - 2) * sizeof *rank);
        n--;
        if (at > 0) rank[at - 1] = rank_of(t, sym[at - 1], sym[at]);
        if (at + 1 < n) rank[at] = rank_of(t, sym[at], sym[at + 1]);
    }
    return n;
}

static size_t bpe_quadratic(const Tokenizer *t, const uint8_t *s, size_t n, uint32_t *sym) {
    for (size_t i = 0; i < n; i++) sym[i] = t->byte_token[s[i]];
    return bpe_quadratic_symbols(t, sym, n);
}

/* Long chunks: a doubly linked list of symbols and a min-heap of (merge rank, position). An entry
 * is stale when its symbol is gone or its pair changed; the (rank, position) order merges the
 * leftmost occurrence of the lowest rank first. */
typedef struct {
    uint32_t rank;
    uint32_t pos;
} BpeEntry;

static inline int bpe_before(BpeEntry a, BpeEntry b) {
    return a.rank != b.rank ? a.rank < b.rank : a.pos < b.pos;
}

static void bpe_push(BpeEntry *h, size_t *n, BpeEntry e) {
    size_t i = (*n)++;
    while (i > 0 && bpe_before(e, h[(i - 1) / 2])) {
        h[i] = h[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h[i] = e;
}

static BpeEntry bpe_pop(BpeEntry *h, size_t *n) {
    BpeEntry top = h[0], last = h[--(*n)];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && bpe_before(h[c + 1], h[c])) c++;
        if (!bpe_before(h[c], last)) break;
        h[i] = h[c];
        i = c;
    }
    if (*n) h[i] = last;
    return top;
}

/* Merges sym[0..n) in place; returns the token count, or SIZE_MAX on out of memory. */
static size_t bpe_heap(const Tokenizer *t, uint32_t *sym, size_t n) {
    if (n > UINT32_MAX - 1) return SIZE_MAX;
    uint32_t *next = malloc(n * sizeof *next), *prev = malloc(n * sizeof *prev);
    uint8_t *alive = malloc(n);
    /* Each merge pushes at most two entries, and there are fewer than n merges. */
    BpeEntry *heap = malloc(3 * n * sizeof *heap);
    size_t count = SIZE_MAX;
    if (!next || !prev || !alive || !heap) goto done;
    const uint32_t NONE = UINT32_MAX;
    size_t nh = 0;
    for (size_t i = 0; i < n; i++) {
        next[i] = i + 1 < n ? (uint32_t)(i + 1) : NONE;
        prev[i] = i > 0 ? (uint32_t)(i - 1) : NONE;
        alive[i] = 1;
    }
    for (size_t i = 0; i + 1 < n; i++) {
        uint32_t r = rank_of(t, sym[i], sym[i + 1]);
        if (r != UINT32_MAX) bpe_push(heap, &nh, (BpeEntry){r, (uint32_t)i});
    }
    while (nh > 0) {
        BpeEntry e = bpe_pop(heap, &nh);
        uint32_t i = e.pos, j = next[i];
        if (!alive[i] || j == NONE || rank_of(t, sym[i], sym[j]) != e.rank) continue;
        sym[i] = t->merge_result[e.rank];
        alive[j] = 0;
        next[i] = next[j];
        if (next[j] != NONE) prev[next[j]] = i;
        if (prev[i] != NONE) {
            uint32_t r = rank_of(t, sym[prev[i]], sym[i]);
            if (r != UINT32_MAX) bpe_push(heap, &nh, (BpeEntry){r, prev[i]});
        }
        if (next[i] != NONE) {
            uint32_t r = rank_of(t, sym[i], sym[next[i]]);
            if (r != UINT32_MAX) bpe_push(heap, &nh, (BpeEntry){r, i});
        }
    }
    count = 0; /* the survivors, in order, to the front (position i >= count always) */
    for (uint32_t i = n ? 0 : NONE; i != NONE; i = next[i]) sym[count++] = sym[i];
done:
    free(heap);
    free(alive);
    free(prev);
    free(next);
    return count;
}

/* Bytes as their tokens, then merged; SIZE_MAX on out of memory. */
static size_t bpe_heap_bytes(const Tokenizer *t, const uint8_t *s, size_t n, uint32_t *out) {
    for (size_t i = 0; i < n; i++) out[i] = t->byte_token[s[i]];
    return bpe_heap(t, out, n);
}

size_t bpe_symbols(const Tokenizer *t, uint32_t *sym, size_t n) {
    if (n <= SHORT_CHUNK) return bpe_quadratic_symbols(t, sym, n);
    return bpe_heap(t, sym, n);
}

size_t bpe_chunk(const Tokenizer *t, const uint8_t *s, size_t n, uint32_t *out, int quadratic) {
    if (n == 0) return 0;
    if (quadratic && n <= SHORT_CHUNK) return bpe_quadratic(t, s, n, out);
    return bpe_heap_bytes(t, s, n, out);
}

/* ---- per-thread encoder with its chunk cache ---- */
struct EncodeCtx {
    const Tokenizer *t;
    BytesMap cache;   /* chunk -> offset into toks, where toks[off] is the count, then the tokens */
    uint32_t *toks;
    size_t n_toks, cap_toks;
    int has_cache;
    int oom;
    uint8_t *scratch[ENCODE_SCRATCH]; /* a SentencePiece-style pipeline's text at each stage */
    size_t scratch_cap[ENCODE_SCRATCH];
};

/* The cache is optional: without memory for it, encoding still works, only slower. */
static void encode_ctx_init(EncodeCtx *c, const Tokenizer *t) {
    memset(c, 0, sizeof *c);
    c->t = t;
    c->cap_toks = 1 << 16;
    c->toks = malloc(c->cap_toks * sizeof *c->toks);
    c->has_cache = c->toks && bytes_map_init(&c->cache, 1 << 12) == 0;
}

static void encode_ctx_release(EncodeCtx *c) {
    for (int i = ENCODE_SCRATCH - 1; i >= 0; i--) free(c->scratch[i]);
    if (c->has_cache) bytes_map_free(&c->cache);
    free(c->toks);
}

uint8_t *encode_ctx_scratch(EncodeCtx *c, int i, size_t n) {
    if (n > c->scratch_cap[i]) {
        size_t cap = c->scratch_cap[i] ? c->scratch_cap[i] : 256;
        while (cap < n) cap *= 2;
        uint8_t *p = realloc(c->scratch[i], cap);
        if (!p) return NULL;
        c->scratch[i] = p;
        c->scratch_cap[i] = cap;
    }
    return c->scratch[i];
}

const Tokenizer *encode_ctx_tokenizer(const EncodeCtx *c) {
    return c->t;
}

void encode_ctx_set_oom(EncodeCtx *c) {
    c->oom = 1;
}

EncodeCtx *encode_ctx_new(const Tokenizer *t) {
    EncodeCtx *c = malloc(sizeof *c);
    if (c) encode_ctx_init(c, t);
    return c;
}

void encode_ctx_free(EncodeCtx *c) {
    if (!c) return;
    encode_ctx_release(c);
    free(c);
}

/* Tokens of one chunk into out (room for n tokens always: a chunk never needs more tokens than
 * bytes). Returns the count. */
static size_t encode_chunk(EncodeCtx *c, const uint8_t *s, size_t n, uint32_t *out) {
    if (c->t->ignore_merges) { /* a chunk that is a token as a whole stays whole (Llama 3) */
        BytesSlot *whole = bytes_map_find(&c->t->whole_tokens, s, n, bytes_hash(s, n));
        if (whole) {
            out[0] = (uint32_t)whole->value;
            return 1;
        }
    }
    if (n > SHORT_CHUNK) {
        size_t k = bpe_heap_bytes(c->t, s, n, out);
        if (k == SIZE_MAX) { /* out of memory: bytes are still a correct (if long) encoding */
            c->oom = 1;
            for (size_t i = 0; i < n; i++) out[i] = c->t->byte_token[s[i]];
            return n;
        }
        return k;
    }
    if (!c->has_cache) return bpe_quadratic(c->t, s, n, out);
    uint64_t h = bytes_hash(s, n);
    size_t k;
    const uint32_t *cached = encode_cache_get(c, s, n, h, &k);
    if (cached) {
        memcpy(out, cached, k * sizeof *out);
        return k;
    }
    k = bpe_quadratic(c->t, s, n, out);
    encode_cache_put(c, s, n, h, out, k);
    return k;
}

const uint32_t *encode_cache_get(EncodeCtx *c, const uint8_t *s, size_t n, uint64_t h, size_t *k) {
    BytesSlot *hit = c->has_cache ? bytes_map_find(&c->cache, s, n, h) : NULL;
    if (!hit) return NULL;
    *k = c->toks[hit->value];
    return c->toks + hit->value + 1;
}

void encode_cache_put(EncodeCtx *c, const uint8_t *s, size_t n, uint64_t h, const uint32_t *toks, size_t k) {
    if (!c->has_cache) return;
    if (c->cache.count >= CACHE_MAX_ENTRIES) {
        bytes_map_clear(&c->cache);
        c->n_toks = 0;
    }
    if (c->n_toks + k + 1 > c->cap_toks) {
        size_t cap = c->cap_toks * 2;
        while (cap < c->n_toks + k + 1) cap *= 2;
        uint32_t *grown = realloc(c->toks, cap * sizeof *grown);
        if (!grown) return; /* no room to cache; the tokens are still right */
        c->toks = grown;
        c->cap_toks = cap;
    }
    int inserted;
    BytesSlot *slot = bytes_map_upsert(&c->cache, s, n, h, &inserted);
    if (!slot) return;
    slot->value = c->n_toks;
    c->toks[c->n_toks] = (uint32_t)k;
    memcpy(c->toks + c->n_toks + 1, toks, k * sizeof *toks);
    c->n_toks += k + 1;
}

/* Encodes text without specials; writes at most cap tokens, returns the count needed. */
static size_t encode_plain(EncodeCtx *c, const uint8_t *s, size_t len, uint32_t *out, size_t cap, size_t done) {
    uint32_t spill[SHORT_CHUNK];
    size_t i = 0;
    while (i < len) {
        size_t n = split_chunk_len(c->t->split, s + i, len - i);
        if (done + n <= cap) {
            done += encode_chunk(c, s + i, n, out + done); /* room for the worst case: write in place */
        } else if (n <= SHORT_CHUNK) {
            size_t k = encode_chunk(c, s + i, n, spill);
            for (size_t j = 0; j < k; j++)
                if (done + j < cap) out[done + j] = spill[j];
            done += k;
        } else {
            uint32_t *tmp = malloc(n * sizeof *tmp);
            if (!tmp) {
                c->oom = 1;
                done += n; /* an upper bound; the caller sees oom */
            } else {
                size_t k = encode_chunk(c, s + i, n, tmp);
                for (size_t j = 0; j < k; j++)
                    if (done + j < cap) out[done + j] = tmp[j];
                done += k;
                free(tmp);
            }
        }
        i += n;
    }
    return done;
}

/* The leftmost special in s[0..len) (the longest one starting there, as Hugging Face matches
 * added tokens), or NULL; its id and length in *id, *n. */
static const uint8_t *next_special(const Tokenizer *t, const uint8_t *s, size_t len, uint32_t *id, size_t *n) {
    size_t one_len;
    const uint8_t *one = tokenizer_token_bytes(t, t->special_ids[0], &one_len);
    if (t->n_specials == 1) { /* ours: memmem is much faster than the scan below */
        const uint8_t *at = one_len ? memmem(s, len, one, one_len) : NULL;
        *id = t->special_ids[0];
        *n = one_len;
        return at;
    }
    for (size_t i = 0; i < len; i++) {
        if (!t->special_first[s[i]]) continue;
        size_t best = 0;
        for (uint32_t k = 0; k < t->n_specials; k++) {
            size_t l;
            const uint8_t *b = tokenizer_token_bytes(t, t->special_ids[k], &l);
            if (l > best && l <= len - i && memcmp(s + i, b, l) == 0) {
                best = l;
                *id = t->special_ids[k];
            }
        }
        if (best) {
            *n = best;
            return s + i;
        }
    }
    return NULL;
}

size_t encode_with_ctx(EncodeCtx *c, const uint8_t *text, size_t len, int flags, uint32_t *out, size_t cap) {
    if (c->t->spm) return spm_encode(c, text, len, flags, out, cap);
    const int allow_special = flags & TOKENIZER_SPECIALS, post = allow_special && !(flags & TOKENIZER_NO_POST);
    const Tokenizer *t = c->t;
    size_t done = 0;
    for (int i = 0; post && !(flags & TOKENIZER_MID_START) && i < t->n_prefix; i++, done++)
        if (done < cap) out[done] = t->prefix[i];
    while (len > 0) {
        uint32_t id = 0;
        size_t special_len = 0;
        const uint8_t *special = allow_special ? next_special(c->t, text, len, &id, &special_len) : NULL;
        size_t piece = special ? (size_t)(special - text) : len;
        done = encode_plain(c, text, piece, out, cap, done);
        if (!special) break;
        if (done < cap) out[done] = id;
        done++;
        text += piece + special_len;
        len -= piece + special_len;
    }
    for (int i = 0; post && !(flags & TOKENIZER_MID_END) && i < t->n_suffix; i++, done++)
        if (done < cap) out[done] = t->suffix[i];
    return done;
}

size_t tokenizer_encode(const Tokenizer *t, const char *text, size_t len, int flags, uint32_t *out, size_t cap) {
    EncodeCtx c;
    encode_ctx_init(&c, t);
    size_t n = encode_with_ctx(&c, (const uint8_t *)text, len, flags, out, cap);
    encode_ctx_release(&c);
    return n;
}

uint32_t *tokenizer_encode_alloc(const Tokenizer *t, const char *text, size_t len, int flags, size_t *n) {
    size_t cap = len + 1;
    uint32_t *ids = malloc(cap * sizeof *ids);
    if (!ids) return NULL;
    *n = tokenizer_encode(t, text, len, flags, ids, cap);
    if (*n > cap) { /* a SentencePiece-style tokenizer needed more: once more with room for all */
        uint32_t *more = realloc(ids, *n * sizeof *ids);
        if (!more) {
            free(ids);
            return NULL;
        }
        ids = more;
        *n = tokenizer_encode(t, text, len, flags, ids, *n);
    }
    return ids;
}

/* ---- parallel encoding ---- */
typedef struct {
    const Tokenizer *t;
    const uint8_t *text;
    size_t len;
    int flags;
    uint32_t *out;
    size_t n;
    int failed;
} EncodeJob;

static void *encode_job(void *arg) {
    EncodeJob *job = arg;
    size_t cap = job->len + 1;
    job->out = malloc(cap * sizeof *job->out);
    if (!job->out) {
        job->failed = 1;
        return NULL;
    }
    EncodeCtx c;
    encode_ctx_init(&c, job->t);
    job->n = encode_with_ctx(&c, job->text, job->len, job->flags, job->out, cap);
    if (job->n > cap) { /* more tokens than bytes (tokenizer_encode says when): again with room */
        uint32_t *more = realloc(job->out, job->n * sizeof *more);
        if (more) {
            job->out = more;
            job->n = encode_with_ctx(&c, job->text, job->len, job->flags, job->out, job->n);
        } else {
            c.oom = 1;
        }
    }
    job->failed = c.oom;
    encode_ctx_release(&c);
    return NULL;
}

int tokenizer_encode_parallel(const Tokenizer *t, const char *text, size_t len, int flags, int threads,
                              uint32_t **out, size_t *n_out, char *err) {
    if (threads <= 0) threads = tokenizer_default_threads();
    if (t->special_has_newline && !t->spm) threads = 1;
    if (threads > 64) threads = 64;
    /* Several pieces per thread would balance better, but one each keeps memory at 1x the tokens
     * and documents are similar enough that the pieces finish together. A cut may fall inside
     * "<|endoftext|>" only if the text holds "\n" within it, which it cannot. */
    size_t cuts[65];
    int parts = t->spm ? spm_cut_text(t, text, len, threads, cuts) : tokenizer_cut_text(text, len, threads, cuts);
    EncodeJob jobs[64];
    pthread_t tids[64];
    int started[64] = {0};
    for (int k = 0; k < parts; k++) {
        /* each part but the first goes on, and each but the last stops, inside the text: the
         * post-processor's tokens go around the whole (and a SentencePiece-style text is cut inside
         * a word run) */
        int f = flags;
        if (k > 0) f |= TOKENIZER_MID_START;
        if (k + 1 < parts) f |= TOKENIZER_MID_END;
        jobs[k] = (EncodeJob){t, (const uint8_t *)text + cuts[k], cuts[k + 1] - cuts[k], f, NULL, 0, 0};
    }
    for (int k = 1; k < parts; k++) started[k] = pthread_create(&tids[k], NULL, encode_job, &jobs[k]) == 0;
    encode_job(&jobs[0]);
    for (int k = 1; k < parts; k++) {
        if (started[k]) pthread_join(tids[k], NULL);
        else encode_job(&jobs[k]);
    }
    size_t total = 0;
    int failed = 0;
    for (int k = 0; k < parts; k++) {
        failed |= jobs[k].failed;
        total += jobs[k].n;
    }
    uint32_t *all = failed ? NULL : malloc((total + 1) * sizeof *all);
    if (all) {
        size_t at = 0;
        for (int k = 0; k < parts; k++) {
            memcpy(all + at, jobs[k].out, jobs[k].n * sizeof *all);
            at += jobs[k].n;
        }
    }
    for (int k = 0; k < parts; k++) free(jobs[k].out);
    if (!all) {
        tok_error(err, "out of memory encoding %zu bytes of text; free memory or encode less", len);
        return -1;
    }
    *out = all;
    *n_out = total;
    return 0;
}
