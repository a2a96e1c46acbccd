/* Whole documents packed into windows, best fit decreasing (data/pack.h): at awkward lengths, every
 * target of every document lands in exactly one window, no document that fits a window is cut, and
 * no two windows could have been one; the loader's packed batches give each document whole, at its
 * own positions, padded with inputs and targets that count for nothing. */
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "common/rng.h"
#include "data/loader.h"
#include "data/pack.h"
#include "data/shard.h"
#include "tests/test.h"
#include "tests/test_util.h"

/* Random document starts over n tokens: lengths 1 to longest, token 0 maybe inside a leading part. */
static size_t random_starts(Rng *r, uint64_t n, int longest, int leading_part, uint64_t *starts) {
    size_t count = 0;
    uint64_t at = leading_part ? 1 + rng_below(r, (uint64_t)longest) : 0;
    while (at < n) {
        starts[count++] = at;
        at += 1 + rng_below(r, (uint64_t)longest);
    }
    return count;
}

static void check_packing(uint64_t n, int T, int longest, int leading_part, uint64_t seed) {
    Rng r;
    rng_seed(&r, seed);
    uint64_t *starts = malloc(n * sizeof *starts);
    const size_t count = random_starts(&r, n, longest, leading_part, starts);
    PackedWindows p;
    char err[ERR_LEN];
    REQUIRE(pack_documents(starts, count, n, T, &p, err) == 0, "%s", err);
    /* what each token is: its document's index, and whether it starts one */
    uint32_t *doc = malloc(n * sizeof *doc), *as_target = calloc(n, sizeof *as_target);
    unsigned char *first = calloc(n, 1);
    uint64_t *doc_len = calloc(count + 1, sizeof *doc_len);
    for (size_t d = 0, i = 0; i < n; i++) {
        if (d < count && starts[d] == i) first[i] = 1, d++;
        doc[i] = (uint32_t)d;
        doc_len[d]++;
    }
    first[0] = 1;
    uint64_t *fill = calloc(p.windows, sizeof *fill), tokens = 0;
    int bad_window = 0, bad_span = 0, cut = 0;
    for (uint64_t w = 0; w < p.windows; w++) {
        for (uint64_t k = p.first[w]; k < p.first[w + 1]; k++) {
            const PackSpan s = p.spans[k];
            fill[w] += s.len;
            tokens += s.len;
            if (s.len < 2 || s.start + s.len > n || doc[s.start + s.len - 1] != doc[s.start]) bad_span++;
            for (uint32_t j = 1; j < s.len && s.start + j < n; j++) as_target[s.start + j]++;
            /* a document of T + 1 tokens or fewer is one span, from its first token to its last */
            cut += doc_len[doc[s.start]] <= (uint64_t)T + 1 && s.len != doc_len[doc[s.start]];
        }
        bad_window += fill[w] > (uint64_t)T + 1 || fill[w] < 2;
    }
    uint64_t wrong_targets = 0;
    for (uint64_t i = 0; i < n; i++) wrong_targets += as_target[i] != (first[i] ? 0u : 1u);
    CHECK(bad_span == 0, "n %llu T %d: %d spans empty, past the end or across two documents", (unsigned long long)n, T,
          bad_span);
    CHECK(bad_window == 0, "n %llu T %d: %d windows hold more than T + 1 tokens or fewer than 2",
          (unsigned long long)n, T, bad_window);
    CHECK(wrong_targets == 0, "n %llu T %d: %llu tokens are a target other than once (a document's first: never)",
          (unsigned long long)n, T, (unsigned long long)wrong_targets);
    CHECK(cut == 0, "n %llu T %d: %d spans shorter than a window do not hold a whole document", (unsigned long long)n,
          T, cut);
    CHECK(tokens == p.tokens && p.first[p.windows] == p.num_spans, "the totals do not add up");
    /* any fit: a piece opens a window only when no open one takes it, so no two windows fit in one */
    int mergeable = 0;
    for (uint64_t a = 0; a < p.windows; a++)
        for (uint64_t b = a + 1; b < p.windows; b++) mergeable += fill[a] + fill[b] <= (uint64_t)T + 1;
    CHECK(mergeable == 0, "n %llu T %d: %d pairs of windows would fit in one", (unsigned long long)n, T, mergeable);
    /* windows in the order of their longest span's start */
    int unordered = 0;
    for (uint64_t w = 1; w < p.windows; w++) unordered += p.spans[p.first[w]].start < p.spans[p.first[w - 1]].start;
    CHECK(unordered == 0, "%d windows out of order", unordered);
    free(fill), free(doc_len), free(first), free(as_target), free(doc), free(starts);
    packed_windows_free(&p);
}

TEST(packing_places_every_target_once_keeps_short_documents_whole_and_leaves_no_two_windows_mergeable) {
    check_packing(1000, 13, 9, 0, 1);     /* all documents shorter than a window */
    check_packing(1000, 13, 40, 1, 2);    /* some three windows long, a leading part before the first mark */
    check_packing(777, 1, 5, 0, 3);       /* T = 1: windows of two tokens */
    check_packing(3001, 64, 200, 1, 4);   /* across a word of the room bitmap */
    check_packing(2, 5, 1, 0, 5);         /* documents of one token: nothing to pack */
    PackedWindows p;
    char err[ERR_LEN];
    const uint64_t starts[] = {3, 5, 9};  /* documents of 3, 2, 4 and 1 tokens at T + 1 = 5 */
    REQUIRE(pack_documents(starts, 3, 10, 4, &p, err) == 0, "%s", err);
    CHECK(p.windows == 2 && p.num_spans == 3 && p.tokens == 9, "%llu windows, %llu spans",
          (unsigned long long)p.windows, (unsigned long long)p.num_spans);
    /* the 4 first; the 3 beside it does not fit, so it opens the second window, which the 2 then fills */
    CHECK(p.spans[0].start == 0 && p.spans[0].len == 3 && p.spans[1].start == 3 && p.spans[1].len == 2 &&
              p.spans[2].start == 5 && p.spans[2].len == 4,
          "spans (%llu %u) (%llu %u) (%llu %u)", (unsigned long long)p.spans[0].start, p.spans[0].len,
          (unsigned long long)p.spans[1].start, p.spans[1].len, (unsigned long long)p.spans[2].start, p.spans[2].len);
    packed_windows_free(&p);
}

/* The loader's packed batches over a documents shard: every (input, target) pair of the shard once
 * an epoch, each document shorter than a window whole in one window from position 0, the padding
 * after the last document input 0 with no target; and the fingerprint tells the packings apart. */
TEST(a_packed_loader_gives_each_document_whole_at_its_own_positions_and_every_target_once) {
    enum { N = 2000, T = 16, V = 1000 };
    Rng r;
    rng_seed(&r, 11);
    uint32_t *tok = malloc(N * sizeof *tok);
    uint64_t starts[N];
    const size_t count = random_starts(&r, N, 30, 0, starts);
    size_t d = 0;
    for (uint64_t i = 0; i < N; i++) {
        tok[i] = 1 + (uint32_t)rng_below(&r, V - 1); /* no 0: the padding's input */
        if (d < count && starts[d] == i) tok[i] |= SHARD_DOC_START, d++;
        if (i % 7 == 3 && !(tok[i] & SHARD_DOC_START)) tok[i] |= SHARD_NO_LOSS;
    }
    tok[0] |= SHARD_DOC_START;
    char path[700], err[ERR_LEN];
    snprintf(path, sizeof path, "%s/packed.bin", test_tmpdir());
    REQUIRE(shard_write_flagged(path, tok, N, V, 0, SHARD_DOCUMENTS | SHARD_LOSS_MASK, err) == 0, "%s", err);
    Loader l;
    REQUIRE(loader_open(&l, path, V, 1, T, 0, 1, 1, 1, 5, PACK_BFD, err) == 0, "%s", err);
    const uint64_t windows = l.total_windows;
    CHECK(l.num_batches == windows && l.pack == PACK_BFD, "%llu batches for %llu windows",
          (unsigned long long)l.num_batches, (unsigned long long)windows);
    /* the shard's pairs: token i - 1's id predicts token i's, unless i starts a document or is no target */
    int *pair_count = calloc((size_t)V * V, sizeof *pair_count);
    uint64_t expected = 0;
    for (uint64_t i = 1; i < N; i++)
        if (!(tok[i] & (SHARD_DOC_START | SHARD_NO_LOSS))) {
            pair_count[shard_token_id(tok[i - 1]) * V + shard_token_id(tok[i])]++;
            expected++;
        }
    int in[T], tg[T], pos[T], wrong_positions = 0, bad_padding = 0, whole = 0, short_docs = 0;
    uint64_t seen = 0, unexpected = 0;
    for (uint64_t b = 0; b < windows; b++) {
        loader_next_batch(&l, in, tg, pos);
        int pad = 0;
        for (int t = 0; t < T; t++) {
            if (in[t] == 0) pad = 1;
            if (pad) {
                bad_padding += in[t] != 0 || tg[t] != -1;
                continue;
            }
            wrong_positions += t > 0 && pos[t] != 0 && pos[t] != pos[t - 1] + 1;
            if (tg[t] >= 0) {
                seen++;
                if (--pair_count[in[t] * V + tg[t]] < 0) unexpected++;
            }
            /* a document from its first token: does the shard hold it there, whole? (The last of a full
             * window has its last token as a target only.) */
            if (pos[t] == 0) {
                int len = 1;
                while (t + len < T && in[t + len] != 0 && pos[t + len] != 0) len++;
                for (size_t k = 0; k < count; k++) {
                    const uint64_t end = k + 1 < count ? starts[k + 1] : N;
                    if (end - starts[k] != (uint64_t)len && (t + len < T || end - starts[k] != (uint64_t)len + 1))
                        continue;
                    int same = 1;
                    for (int j = 0; j < len && same; j++) same = (int)shard_token_id(tok[starts[k] + j]) == in[t + j];
                    if (same) {
                        whole++;
                        break;
                    }
                }
            }
        }
    }
    for (size_t k = 0; k < count; k++) { /* one token has no target, and no window */
        const uint64_t len = (k + 1 < count ? starts[k + 1] : N) - starts[k];
        short_docs += len >= 2 && len <= T + 1;
    }
    CHECK(seen == expected && unexpected == 0, "%llu targets an epoch (%llu not the shard's), not the shard's %llu",
          (unsigned long long)seen, (unsigned long long)unexpected, (unsigned long long)expected);
    CHECK(wrong_positions == 0 && bad_padding == 0, "%d positions not counting on, %d padding tokens not 0 and -1",
          wrong_positions, bad_padding);
    CHECK(whole >= short_docs, "%d documents found whole in windows, of the %d of 2 to T + 1 tokens", whole, short_docs);
    const uint64_t packed = loader_fingerprint(&l);
    loader_close(&l);
    REQUIRE(loader_open(&l, path, V, 1, T, 0, 1, 1, 1, 5, PACK_WRAPPED, err) == 0, "%s", err);
    CHECK(loader_fingerprint(&l) != packed && loader_fingerprint_packed(&l, PACK_BFD) == packed,
          "the fingerprints of the two packings");
    loader_close(&l);
    /* a shard without document marks has nothing to pack */
    for (int i = 0; i < N; i++) tok[i] = shard_token_id(tok[i]);
    REQUIRE(shard_write(path, tok, N, V, 0, err) == 0, "%s", err);
    CHECK(loader_open(&l, path, V, 1, T, 0, 1, 1, 1, 5, PACK_BFD, err) == -1 && strstr(err, "marks none") &&
              strstr(err, "--documents"),
          "packing a shard without documents: %s", err);
    free(pair_count), free(tok);
}
