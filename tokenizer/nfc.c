/* tokenizer/nfc.c - whether a text is its own Unicode NFC. Text without a code point of
 * nfc_unsafe_ranges is (the fast path: ASCII, most scripts). Around each stretch of such code
 * points, from the last code point before it that NFC never touches (it may be the starter a mark
 * composes with) to the next, the stretch is normalized as UAX #15 says (full canonical
 * decomposition, canonical ordering, canonical composition) and compared: text already NFC with
 * combining marks (Devanagari's virama, Thai's vowels, Arabic's harakat) passes, and only text NFC
 * would rewrite is refused. */
#include "tokenizer/nfc.h"

#include <stdlib.h>
#include <string.h>

#include "tokenizer/nfc_table.h"
#include "tokenizer/utf8.h"

/* Hangul syllables compose and decompose by arithmetic (UAX #15, 3.12 of the standard). */
enum {
    S_BASE = 0xAC00, L_BASE = 0x1100, V_BASE = 0x1161, T_BASE = 0x11A7,
    L_COUNT = 19, V_COUNT = 21, T_COUNT = 28, N_COUNT = V_COUNT * T_COUNT, S_COUNT = L_COUNT * N_COUNT
};

static int combining_class(uint32_t cp) {
    unsigned lo = 0, hi = nfc_class_count;
    while (lo < hi) {
        const unsigned mid = (lo + hi) / 2;
        if (cp < nfc_class_ranges[mid][0]) hi = mid;
        else if (cp > nfc_class_ranges[mid][1]) lo = mid + 1;
        else return (int)nfc_class_ranges[mid][2];
    }
    return 0;
}

/* The full canonical decomposition of cp (not a Hangul syllable) and its length; NULL for none. */
static const uint32_t *decomposition(uint32_t cp, unsigned *n) {
    unsigned lo = 0, hi = nfc_decomposition_count;
    while (lo < hi) {
        const unsigned mid = (lo + hi) / 2;
        if (cp < nfc_decomposition_index[mid][0]) hi = mid;
        else if (cp > nfc_decomposition_index[mid][0]) lo = mid + 1;
        else {
            *n = nfc_decomposition_index[mid][2];
            return nfc_decomposed + nfc_decomposition_index[mid][1];
        }
    }
    return NULL;
}

/* The primary composite of the pair (a, b), or 0. */
static uint32_t composite(uint32_t a, uint32_t b) {
    if (a >= L_BASE && a < L_BASE + L_COUNT && b >= V_BASE && b < V_BASE + V_COUNT)
        return S_BASE + ((a - L_BASE) * V_COUNT + (b - V_BASE)) * T_COUNT;
    if (a >= S_BASE && a < S_BASE + S_COUNT && (a - S_BASE) % T_COUNT == 0 && b > T_BASE && b < T_BASE + T_COUNT)
        return a + (b - T_BASE);
    unsigned lo = 0, hi = nfc_composition_count;
    while (lo < hi) {
        const unsigned mid = (lo + hi) / 2;
        const uint32_t *p = nfc_compositions[mid];
        if (a < p[0] || (a == p[0] && b < p[1])) hi = mid;
        else if (a > p[0] || b > p[1]) lo = mid + 1;
        else return p[2];
    }
    return 0;
}

typedef struct {
    uint32_t *v;
    size_t n, cap;
} CodePoints;

static int push(CodePoints *c, uint32_t x) {
    if (c->n == c->cap) {
        const size_t cap = c->cap ? 2 * c->cap : 64;
        uint32_t *v = realloc(c->v, cap * sizeof *v);
        if (!v) return -1;
        c->v = v;
        c->cap = cap;
    }
    c->v[c->n++] = x;
    return 0;
}

/* NFC of in[0..n) into out, through work. 0, or -1 out of memory. */
static int normalize(const uint32_t *in, size_t n, CodePoints *work, CodePoints *out) {
    work->n = out->n = 0;
    for (size_t i = 0; i < n; i++) {
        const uint32_t cp = in[i];
        unsigned len = 0;
        const uint32_t *d = decomposition(cp, &len);
        if (cp >= S_BASE && cp < S_BASE + S_COUNT) {
            const uint32_t s = cp - S_BASE, t = s % T_COUNT;
            if (push(work, L_BASE + s / N_COUNT) || push(work, V_BASE + (s % N_COUNT) / T_COUNT) ||
                (t && push(work, T_BASE + t)))
                return -1;
        } else if (d) {
            for (unsigned k = 0; k < len; k++)
                if (push(work, d[k])) return -1;
        } else if (push(work, cp)) {
            return -1;
        }
    }
    /* canonical ordering: each run of nonzero classes sorted by class, stably */
    for (size_t i = 1; i < work->n; i++) {
        const uint32_t cp = work->v[i];
        const int cc = combining_class(cp);
        size_t j = i;
        for (; cc && j > 0 && combining_class(work->v[j - 1]) > cc; j--) work->v[j] = work->v[j - 1];
        work->v[j] = cp;
    }
    /* canonical composition: a code point joins the last starter when nothing between blocks it
     * (a starter, or a mark of its class or above) */
    size_t starter = SIZE_MAX;
    int last_class = 0;
    for (size_t i = 0; i < work->n; i++) {
        const uint32_t cp = work->v[i];
        const int cc = combining_class(cp);
        if (starter != SIZE_MAX && (out->n == starter + 1 || (last_class != 0 && last_class < cc))) {
            const uint32_t joined = composite(out->v[starter], cp);
            if (joined) {
                out->v[starter] = joined;
                continue;
            }
        }
        if (cc == 0) starter = out->n;
        last_class = cc;
        if (push(out, cp)) return -1;
    }
    return 0;
}

int nfc_is_normal(const uint8_t *s, size_t len, uint32_t *cp, size_t *at) {
    CodePoints stretch = {0}, work = {0}, normal = {0};
    size_t i = 0, untouched = 0; /* where the last code point NFC never touches starts */
    int rc = 1;
    while (i < len && rc == 1) {
        if (s[i] < 0x80) {
            untouched = i++;
            continue;
        }
        const size_t start = i;
        const uint32_t c = utf8_next(s, len, &i);
        if (c == UINT32_MAX || !nfc_may_change(c)) {
            untouched = c == UINT32_MAX ? i : start; /* a stretch never reaches back past a byte not UTF-8 */
            continue;
        }
        size_t end = i;
        while (end < len) {
            size_t e = end;
            const uint32_t d = utf8_next(s, len, &e);
            if (d == UINT32_MAX || !nfc_may_change(d)) break;
            end = e;
        }
        stretch.n = 0;
        for (size_t k = untouched; k < end && rc == 1;)
            if (push(&stretch, utf8_next(s, len, &k))) rc = -1;
        if (rc == 1 && normalize(stretch.v, stretch.n, &work, &normal) != 0) rc = -1;
        if (rc == 1 && (normal.n != stretch.n || memcmp(normal.v, stretch.v, stretch.n * sizeof *stretch.v) != 0)) {
            *cp = c;
            *at = start;
            rc = 0;
        }
        i = end;
    }
    free(stretch.v);
    free(work.v);
    free(normal.v);
    return rc;
}
