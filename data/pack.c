/* data/pack.c - whole documents packed into windows, best fit decreasing (see pack.h). */
#include "data/pack.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/shard.h"

const char *pack_kind_name(PackKind kind) { return kind == PACK_BFD ? "bfd" : "wrapped"; }

int pack_kind_parse(const char *name, PackKind *kind) {
    if (!strcmp(name, "wrapped")) *kind = PACK_WRAPPED;
    else if (!strcmp(name, "bfd")) *kind = PACK_BFD;
    else return -1;
    return 0;
}

int pack_note_starts(PackStarts *s, const uint32_t *tokens, size_t k, uint64_t at, char *err) {
    for (size_t i = 0; i < k; i++) {
        if (!shard_token_starts_document(tokens[i])) continue;
        if (s->count == s->cap) {
            const size_t bigger = s->cap ? 2 * s->cap : 1024;
            uint64_t *grown = realloc(s->at, bigger * sizeof *grown);
            if (!grown) {
                snprintf(err, ERR_LEN, "out of memory for the starts of %zu documents", s->count);
                return -1;
            }
            s->at = grown, s->cap = bigger;
        }
        s->at[s->count++] = at + i;
    }
    return 0;
}

void pack_starts_free(PackStarts *s) {
    free(s->at);
    memset(s, 0, sizeof *s);
}

void packed_windows_free(PackedWindows *p) {
    free(p->spans);
    free(p->first);
    memset(p, 0, sizeof *p);
}

/* The pieces the documents make, in shard order, into `into` (NULL: only counted); their count. */
static uint64_t each_piece(const uint64_t *starts, size_t count, uint64_t n, int T, PackSpan *into) {
    uint64_t pieces = 0;
    for (size_t d = 0; d <= count; d++) {
        const uint64_t begin = d == 0 ? 0 : starts[d - 1], end = d < count ? starts[d] : n;
        /* pieces of T + 1 at a stride of T: the token they share is a target in the first, an input in
         * the second; one token left over was the last piece's last target */
        for (uint64_t at = begin; end > at + 1; at += (uint64_t)T) {
            const uint64_t len = end - at < (uint64_t)T + 1 ? end - at : (uint64_t)T + 1;
            if (into) into[pieces] = (PackSpan){at, (uint32_t)len};
            pieces++;
            if (at + len == end) break;
        }
    }
    return pieces;
}

typedef struct {
    uint64_t key; /* where the window's longest span starts */
    uint64_t window;
} WindowKey;

static int compare_keys(const void *a, const void *b) {
    const WindowKey *x = a, *y = b;
    return (x->key > y->key) - (x->key < y->key);
}

int pack_documents(const uint64_t *starts, size_t count, uint64_t n, int T, PackedWindows *out, char *err) {
    memset(out, 0, sizeof *out);
    const uint32_t cap = (uint32_t)T + 1;
    const uint64_t pieces = each_piece(starts, count, n, T, NULL);
    const size_t words = (cap + 64) / 64;
    PackSpan *piece = malloc((pieces + 1) * sizeof *piece), *sorted = malloc((pieces + 1) * sizeof *sorted);
    uint64_t *by_len = calloc((size_t)cap + 2, sizeof *by_len), *bin_of = malloc((pieces + 1) * sizeof *bin_of);
    uint64_t *room_head = malloc(((size_t)cap + 1) * sizeof *room_head), *next = malloc((pieces + 1) * sizeof *next);
    uint64_t *open = calloc(words, sizeof *open); /* bit r: some window has exactly r tokens of room */
    uint32_t *room = malloc((pieces + 1) * sizeof *room);
    WindowKey *keys = malloc((pieces + 1) * sizeof *keys);
    int ok = piece && sorted && by_len && bin_of && room_head && next && open && room && keys;
    if (ok) {
        each_piece(starts, count, n, T, piece);
        /* longest first, ties in shard order: a counting sort on the length */
        for (uint64_t i = 0; i < pieces; i++) by_len[cap - piece[i].len + 1]++;
        for (uint32_t l = 1; l <= cap + 1; l++) by_len[l] += by_len[l - 1];
        for (uint64_t i = 0; i < pieces; i++) sorted[by_len[cap - piece[i].len]++] = piece[i];
        for (uint32_t r = 0; r <= cap; r++) room_head[r] = UINT64_MAX;
        uint64_t windows = 0;
        for (uint64_t i = 0; i < pieces; i++) {
            const uint32_t len = sorted[i].len;
            /* the window with the least room that still takes the piece: the first set bit at or above len */
            uint32_t r = UINT32_MAX;
            for (size_t w = len / 64; w < words && r == UINT32_MAX; w++) {
                uint64_t bits = open[w];
                if (w == len / 64) bits &= ~0ull << (len % 64);
                if (bits) r = (uint32_t)(w * 64 + (size_t)__builtin_ctzll(bits));
            }
            uint64_t bin;
            if (r == UINT32_MAX) {
                bin = windows++;
                room[bin] = cap;
                keys[bin] = (WindowKey){sorted[i].start, bin};
            } else {
                bin = room_head[r];
                room_head[r] = next[bin];
                if (room_head[r] == UINT64_MAX) open[r / 64] &= ~(1ull << (r % 64));
            }
            bin_of[i] = bin;
            room[bin] -= len;
            if (room[bin] >= 2) { /* a room of one token takes no piece */
                next[bin] = room_head[room[bin]];
                room_head[room[bin]] = bin;
                open[room[bin] / 64] |= 1ull << (room[bin] % 64);
            }
        }
        /* windows in the order of their longest span's start, so that the first windows of a shard
         * hold its first documents (a validation pass over part of it sees a sample, not the longest) */
        qsort(keys, windows, sizeof *keys, compare_keys);
        out->first = calloc(windows + 1, sizeof *out->first);
        out->spans = malloc((pieces + 1) * sizeof *out->spans);
        ok = out->first && out->spans;
        if (ok) {
            uint64_t *rank = next; /* reused: a window's place in the order */
            for (uint64_t k = 0; k < windows; k++) rank[keys[k].window] = k;
            for (uint64_t i = 0; i < pieces; i++) out->first[rank[bin_of[i]] + 1]++;
            for (uint64_t k = 0; k < windows; k++) out->first[k + 1] += out->first[k];
            uint64_t *fill = malloc((windows + 1) * sizeof *fill);
            ok = fill != NULL;
            if (ok) {
                memcpy(fill, out->first, windows * sizeof *fill);
                for (uint64_t i = 0; i < pieces; i++) { /* longest first within a window, as placed */
                    out->spans[fill[rank[bin_of[i]]]++] = sorted[i];
                    out->tokens += sorted[i].len;
                }
            }
            free(fill);
            out->windows = windows;
            out->num_spans = pieces;
        }
    }
    free(keys), free(room), free(open), free(next), free(room_head), free(bin_of), free(by_len), free(sorted);
    free(piece);
    if (!ok) {
        packed_windows_free(out);
        snprintf(err, ERR_LEN, "out of memory packing %llu documents into windows", (unsigned long long)count + 1);
        return -1;
    }
    return 0;
}

int pack_shard(const uint32_t *tokens, uint64_t n, int T, PackedWindows *out, char *err) {
    PackStarts starts = {0};
    int rc = pack_note_starts(&starts, tokens, (size_t)n, 0, err);
    if (rc == 0) rc = pack_documents(starts.at, starts.count, n, T, out, err);
    pack_starts_free(&starts);
    return rc;
}

int packed_window_tokens(const PackedWindows *p, uint64_t w, const uint32_t *tokens, uint32_t *out) {
    int count = 0;
    for (uint64_t s = p->first[w]; s < p->first[w + 1]; s++) {
        memcpy(out + count, tokens + p->spans[s].start, p->spans[s].len * sizeof *out);
        out[count] |= SHARD_DOC_START;
        count += (int)p->spans[s].len;
    }
    return count;
}
