/* tokenizer/bpe_train.c - learns BPE merges from a text.
 *
 *   1. Count unique chunks (threads over pieces of the text, one hash map each, merged after).
 *      Sorting the chunks by their bytes makes everything after independent of the thread count.
 *   2. Each unique chunk is a "word": a count and its symbols (initially its bytes), laid end to end
 *      in one array of cells and linked both ways, so a merge rewrites two cells in place. Pair
 *      counts are weighted by word counts; each pair keeps a list of the cells where it starts.
 *   3. A max-heap of pairs with lazy refresh: an entry whose count is stale is pushed back with the
 *      current count when popped. Counts only fall, except for pairs holding the newest token, which
 *      are pushed once their merge is done, so the first fresh entry popped is the best pair.
 *   4. Merging visits only the cells on the pair's list; at each it joins the two symbols and moves
 *      the counts of the two neighbouring pairs to the pairs they now form with the new token, which
 *      list the cell. A merge costs the occurrences it rewrites, however long the word: one line of
 *      1 MB without white space is one word, and rescanning it at each merge was quadratic.
 * Ties go to the smaller (left, right) token ids, so training is deterministic. Merging stops at
 * the vocabulary size, or when no pair occurs twice that would make a token of at most
 * TOKENIZER_MAX_TOKEN_BYTES. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/err.h"
#include "common/grow.h"
#include "tokenizer/tokenizer_internal.h"

#define NO_NODE UINT32_MAX
#define NO_CELL UINT32_MAX    /* no neighbour: the cell starts or ends its word */
#define EMPTY_CELL UINT32_MAX /* the symbol of a cell merged into the one on its left */

typedef struct {
    int64_t count;
    uint32_t left, right;
    uint32_t head;  /* first node of the list of cells where this pair starts (some may be stale) */
    uint32_t stamp; /* last merge that touched the pair, to push it once */
} Pair;

typedef struct {
    uint32_t cell, next;
} Node;

typedef struct {
    int64_t count;
    uint32_t left, right, pair;
} HeapEntry;

/* The words' symbols, one cell per byte of unique text. A merge keeps its symbol in the left cell
 * and empties the right one; prev and next skip empty cells. */
typedef struct {
    uint32_t *sym;     /* the symbol starting at the cell; EMPTY_CELL once merged into its left */
    uint32_t *prev;    /* the cell of the symbol before, or NO_CELL */
    uint32_t *next;    /* the cell of the symbol after, or NO_CELL */
    uint32_t *word_of; /* the word the cell belongs to, for its count */
    size_t n;
} Cells;

typedef struct {
    uint64_t *word_count; /* occurrences of each unique chunk in the corpus */
    size_t n_words;
    Cells cells;
    uint32_t *tok_len; /* bytes of each token made so far, for the length limit */
    Pair *pairs;
    size_t n_pairs, cap_pairs;
    PairMap pair_index; /* (left, right) -> index into pairs */
    Node *nodes;
    size_t n_nodes, cap_nodes;
    HeapEntry *heap;
    size_t n_heap, cap_heap;
    uint32_t *touched;
    size_t n_touched, cap_touched;
    uint32_t *at; /* the cells of the pair being merged */
    size_t cap_at;
    int too_long; /* some pair occurring twice was left out for making a token over the limit */
    int oom;
} Trainer;

/* ---- heap: larger count first, then smaller (left, right) ---- */
static inline int heap_before(const HeapEntry *a, const HeapEntry *b) {
    if (a->count != b->count) return a->count > b->count;
    if (a->left != b->left) return a->left < b->left;
    return a->right < b->right;
}

static void heap_push(Trainer *tr, uint32_t pair) {
    const Pair *p = &tr->pairs[pair];
    if ((uint64_t)tr->tok_len[p->left] + tr->tok_len[p->right] > TOKENIZER_MAX_TOKEN_BYTES) {
        tr->too_long = 1;
        return;
    }
    if (grow_array((void **)&tr->heap, &tr->cap_heap, tr->n_heap + 1, sizeof *tr->heap)) {
        tr->oom = 1;
        return;
    }
    HeapEntry e = {p->count, p->left, p->right, pair};
    size_t i = tr->n_heap++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!heap_before(&e, &tr->heap[parent])) break;
        tr->heap[i] = tr->heap[parent];
        i = parent;
    }
    tr->heap[i] = e;
}

static HeapEntry heap_pop(Trainer *tr) {
    HeapEntry top = tr->heap[0];
    HeapEntry last = tr->heap[--tr->n_heap];
    size_t i = 0, n = tr->n_heap;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && heap_before(&tr->heap[c + 1], &tr->heap[c])) c++;
        if (!heap_before(&tr->heap[c], &last)) break;
        tr->heap[i] = tr->heap[c];
        i = c;
    }
    if (n) tr->heap[i] = last;
    return top;
}

/* ---- pairs ---- */
static uint32_t pair_get_or_add(Trainer *tr, uint32_t left, uint32_t right) {
    int inserted;
    int64_t slot = pair_map_upsert(&tr->pair_index, pair_key(left, right), (uint32_t)tr->n_pairs, &inserted);
    if (slot < 0) {
        tr->oom = 1;
        return 0;
    }
    if (inserted) {
        if (grow_array((void **)&tr->pairs, &tr->cap_pairs, tr->n_pairs + 1, sizeof *tr->pairs)) {
            tr->oom = 1;
            return 0;
        }
        tr->pairs[tr->n_pairs] = (Pair){0, left, right, NO_NODE, 0};
        tr->n_pairs++;
    }
    return tr->pair_index.values[slot];
}

static void pair_list_cell(Trainer *tr, uint32_t pair, uint32_t cell) {
    if (tr->n_nodes >= NO_NODE) { /* node ids are 32-bit: a corpus this large needs a bigger machine */
        tr->oom = 1;
        return;
    }
    if (grow_array((void **)&tr->nodes, &tr->cap_nodes, tr->n_nodes + 1, sizeof *tr->nodes)) {
        tr->oom = 1;
        return;
    }
    tr->nodes[tr->n_nodes] = (Node){cell, tr->pairs[pair].head};
    tr->pairs[pair].head = (uint32_t)tr->n_nodes++;
}

/* ---- counting chunks ---- */
typedef struct {
    const uint8_t *text;
    size_t begin, end;
    BytesMap map;
    int failed;
} CountJob;

static int count_range(BytesMap *map, const uint8_t *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        size_t len = tokenizer_chunk_len((const char *)s + i, n - i);
        int inserted;
        BytesSlot *slot = bytes_map_upsert(map, s + i, len, bytes_hash(s + i, len), &inserted);
        if (!slot) return -1;
        slot->value++;
        i += len;
    }
    return 0;
}

static void *count_job(void *arg) {
    CountJob *job = arg;
    const size_t eot_len = strlen(TOKENIZER_EOT_TEXT);
    const uint8_t *s = job->text + job->begin;
    size_t n = job->end - job->begin;
    /* The special token separates documents: chunks never span it and it is never learned. */
    while (n > 0) {
        const uint8_t *eot = memmem(s, n, TOKENIZER_EOT_TEXT, eot_len);
        size_t piece = eot ? (size_t)(eot - s) : n;
        if (count_range(&job->map, s, piece) != 0) {
            job->failed = 1;
            return NULL;
        }
        if (!eot) break;
        s += piece + eot_len;
        n -= piece + eot_len;
    }
    return NULL;
}

/* qsort_r (not a global arena pointer) so that two trainings on two threads stay independent. */
static int compare_chunks(const void *a, const void *b, void *arena) {
    const BytesSlot *x = *(BytesSlot *const *)a, *y = *(BytesSlot *const *)b;
    const uint8_t *bytes = arena;
    size_t n = x->key_len < y->key_len ? x->key_len : y->key_len;
    int c = memcmp(bytes + x->key_off, bytes + y->key_off, n);
    if (c) return c;
    return (x->key_len > y->key_len) - (x->key_len < y->key_len);
}

/* Counts the unique chunks of the text and turns them into words; 0, or -1 + message. */
static int build_words(Trainer *tr, const uint8_t *text, size_t len, int threads, int verbose, char *err) {
    const char *oom = "out of memory while training the tokenizer; use a smaller corpus or free memory";
    if (threads <= 0) threads = tokenizer_default_threads();
    size_t cuts[65];
    if (threads > 64) threads = 64;
    int parts = tokenizer_cut_text((const char *)text, len, threads, cuts);
    CountJob jobs[64];
    pthread_t tids[64];
    int ok = 1;
    for (int k = 0; k < parts; k++) {
        jobs[k] = (CountJob){text, cuts[k], cuts[k + 1], {0}, 0};
        if (bytes_map_init(&jobs[k].map, 1 << 16) != 0) {
            parts = k;
            ok = 0;
            break;
        }
    }
    int started = 0;
    for (int k = 1; ok && k < parts; k++, started++)
        if (pthread_create(&tids[k], NULL, count_job, &jobs[k]) != 0) break;
    if (ok) count_job(&jobs[0]);
    for (int k = 1; k <= started; k++) pthread_join(tids[k], NULL);
    for (int k = started + 1; ok && k < parts; k++) count_job(&jobs[k]); /* thread could not start */
    for (int k = 0; k < parts; k++) ok &= !jobs[k].failed;

    /* Fold the other maps into the first. */
    BytesMap *all = &jobs[0].map;
    for (int k = 1; ok && k < parts; k++) {
        BytesMap *m = &jobs[k].map;
        for (size_t i = 0; ok && i <= m->mask; i++) {
            BytesSlot *src = &m->slots[i];
            if (!src->used) continue;
            int inserted;
            BytesSlot *dst = bytes_map_upsert(all, m->arena + src->key_off, src->key_len, src->hash, &inserted);
            if (!dst) ok = 0;
            else dst->value += src->value;
        }
    }
    for (int k = 1; k < parts; k++) bytes_map_free(&jobs[k].map);
    if (!ok) {
        if (parts > 0) bytes_map_free(all);
        tok_error(err, "%s", oom);
        return -1;
    }
    /* cells are named by 32-bit indices */
    if (all->arena_len >= NO_CELL) {
        tok_error(err, "the corpus holds %.1f GB of unique chunks, more than the %.1f GB a tokenizer trains on; "
                  "train it on a sample of the text", all->arena_len / 1e9, NO_CELL / 1e9);
        bytes_map_free(all);
        return -1;
    }

    const size_t N = all->arena_len;
    Cells *c = &tr->cells;
    BytesSlot **order = malloc((all->count + 1) * sizeof *order);
    tr->word_count = malloc((all->count + 1) * sizeof *tr->word_count);
    c->sym = malloc((N + 1) * sizeof *c->sym);
    c->prev = malloc((N + 1) * sizeof *c->prev);
    c->next = malloc((N + 1) * sizeof *c->next);
    c->word_of = malloc((N + 1) * sizeof *c->word_of);
    if (!order || !tr->word_count || !c->sym || !c->prev || !c->next || !c->word_of) {
        free(order);
        bytes_map_free(all);
        tok_error(err, "%s", oom);
        return -1;
    }
    size_t n = 0;
    uint64_t total = 0;
    for (size_t i = 0; i <= all->mask; i++)
        if (all->slots[i].used) order[n++] = &all->slots[i];
    qsort_r(order, n, sizeof *order, compare_chunks, all->arena);
    uint32_t cell = 0;
    for (size_t w = 0; w < n; w++) {
        const uint8_t *bytes = all->arena + order[w]->key_off;
        uint32_t L = order[w]->key_len;
        tr->word_count[w] = order[w]->value;
        for (uint32_t i = 0; i < L; i++, cell++) {
            c->sym[cell] = bytes[i];
            c->prev[cell] = i ? cell - 1 : NO_CELL;
            c->next[cell] = i + 1 < L ? cell + 1 : NO_CELL;
            c->word_of[cell] = (uint32_t)w;
        }
        total += order[w]->value;
    }
    c->n = N;
    tr->n_words = n;
    if (verbose)
        fprintf(stderr, "tokenizer: %llu chunks, %zu unique (%.1f MB of unique text)\n", (unsigned long long)total, n,
                N / 1e6);
    free(order);
    bytes_map_free(all);
    return 0;
}

/* Initial pair counts and cell lists. */
static void count_pairs(Trainer *tr) {
    const Cells *c = &tr->cells;
    for (uint32_t i = 0; i < c->n && !tr->oom; i++) {
        if (c->next[i] == NO_CELL) continue;
        uint32_t p = pair_get_or_add(tr, c->sym[i], c->sym[i + 1]);
        if (tr->oom) return;
        tr->pairs[p].count += (int64_t)tr->word_count[c->word_of[i]];
        pair_list_cell(tr, p, i);
    }
    for (size_t p = 0; p < tr->n_pairs && !tr->oom; p++)
        if (tr->pairs[p].count >= 2) heap_push(tr, (uint32_t)p);
}

/* Adds w to the count of the pair (left, right) starting at cell; when it holds the new token z,
 * the cell joins its list and the pair is marked for the heap. */
static void recount(Trainer *tr, uint32_t left, uint32_t right, uint32_t cell, int64_t w, uint32_t z,
                    uint32_t stamp) {
    uint32_t p = pair_get_or_add(tr, left, right);
    if (tr->oom) return;
    tr->pairs[p].count += w;
    if (left != z && right != z) return;
    pair_list_cell(tr, p, cell);
    if (tr->pairs[p].stamp == stamp) return;
    tr->pairs[p].stamp = stamp;
    if (grow_array((void **)&tr->touched, &tr->cap_touched, tr->n_touched + 1, sizeof *tr->touched)) {
        tr->oom = 1;
        return;
    }
    tr->touched[tr->n_touched++] = p;
}

/* Joins (a, b) at cell i into z when the pair still starts there, moving the counts of the pairs
 * either side to the pairs they now form with z. */
static void merge_at(Trainer *tr, uint32_t i, uint32_t a, uint32_t b, uint32_t z, uint32_t stamp) {
    Cells *c = &tr->cells;
    if (c->sym[i] != a) return; /* a stale list entry: an earlier merge rewrote the cell */
    uint32_t j = c->next[i];
    if (j == NO_CELL || c->sym[j] != b) return;
    const int64_t w = (int64_t)tr->word_count[c->word_of[i]];
    const uint32_t before = c->prev[i], after = c->next[j];
    tr->pairs[pair_map_get(&tr->pair_index, pair_key(a, b))].count -= w;
    if (before != NO_CELL) {
        tr->pairs[pair_map_get(&tr->pair_index, pair_key(c->sym[before], a))].count -= w;
        recount(tr, c->sym[before], z, before, w, z, stamp);
    }
    if (after != NO_CELL) {
        tr->pairs[pair_map_get(&tr->pair_index, pair_key(b, c->sym[after]))].count -= w;
        recount(tr, z, c->sym[after], i, w, z, stamp);
        c->prev[after] = i;
    }
    c->sym[i] = z;
    c->sym[j] = EMPTY_CELL;
    c->next[i] = after;
}

static int compare_cells(const void *x, const void *y) {
    uint32_t a = *(const uint32_t *)x, b = *(const uint32_t *)y;
    return (a > b) - (a < b);
}

/* Merges (a, b) into z at every cell on the pair's list. */
static void merge_pair(Trainer *tr, uint32_t pair, uint32_t a, uint32_t b, uint32_t z, uint32_t stamp) {
    size_t n = 0;
    for (uint32_t node = tr->pairs[pair].head; node != NO_NODE; node = tr->nodes[node].next) {
        if (grow_array((void **)&tr->at, &tr->cap_at, n + 1, sizeof *tr->at)) {
            tr->oom = 1;
            return;
        }
        tr->at[n++] = tr->nodes[node].cell;
    }
    tr->pairs[pair].head = NO_NODE; /* the pair is gone from every word */
    /* Occurrences of (a, a) overlap in a run (a a a): joining them left to right, as a scan of the
     * word does, needs them in order. Those of (a, b), a != b, never share a cell, so any order
     * leaves the same words and counts. */
    if (a == b) qsort(tr->at, n, sizeof *tr->at, compare_cells);
    for (size_t k = 0; k < n && !tr->oom; k++) merge_at(tr, tr->at[k], a, b, z, stamp);
}

static void trainer_free(Trainer *tr) {
    free(tr->at);
    free(tr->touched);
    free(tr->heap);
    free(tr->nodes);
    pair_map_free(&tr->pair_index);
    free(tr->pairs);
    free(tr->tok_len);
    free(tr->cells.word_of);
    free(tr->cells.next);
    free(tr->cells.prev);
    free(tr->cells.sym);
    free(tr->word_count);
}

Tokenizer *tokenizer_train(const char *text, size_t len, const TokenizerTrainOptions *opt, char *err) {
    uint32_t V = opt->vocab_size;
    if (V < TOKENIZER_MIN_VOCAB) {
        snprintf(err, ERR_LEN,
                 "vocabulary size %u is below %u (256 byte tokens + the <|endoftext|> token); ask for %u or more", V,
                 TOKENIZER_MIN_VOCAB, TOKENIZER_MIN_VOCAB);
        return NULL;
    }
    Trainer tr;
    memset(&tr, 0, sizeof tr);
    const char *oom = "out of memory while training the tokenizer; use a smaller corpus or free memory";
    if (build_words(&tr, (const uint8_t *)text, len, opt->threads, opt->verbose, err) != 0) {
        trainer_free(&tr);
        return NULL;
    }
    if (tr.n_words == 0) {
        snprintf(err, ERR_LEN,
                 "the corpus is empty (no text besides <|endoftext|>); give the tokenizer some text to learn from");
        trainer_free(&tr);
        return NULL;
    }
    uint32_t want = V - TOKENIZER_MIN_VOCAB;
    /* each merge shortens the corpus's tokenization by one token at least, so no corpus of len bytes
     * gives more than len merges: a vocabulary asked for far past that does not size the tables */
    if ((uint64_t)want > (uint64_t)len) want = (uint32_t)len;
    uint32_t *merges = malloc(((size_t)want + 1) * 2 * sizeof *merges);
    tr.tok_len = malloc(((size_t)want + 256) * sizeof *tr.tok_len);
    if (!merges || !tr.tok_len || pair_map_init(&tr.pair_index, 1 << 20) != 0) {
        tok_error(err, "%s", oom);
        free(merges);
        trainer_free(&tr);
        return NULL;
    }
    for (uint32_t i = 0; i < 256; i++) tr.tok_len[i] = 1;
    count_pairs(&tr);

    uint32_t m = 0;
    int64_t last_count = 0;
    /* a terminal gets one line rewritten 100 times; a log file (not a terminal) 10 lines */
    const int tty = isatty(fileno(stderr));
    const uint32_t parts = tty ? 100 : 10;
    uint32_t report_every = want / parts ? want / parts : 1;
    while (m < want && tr.n_heap > 0 && !tr.oom) {
        HeapEntry top = heap_pop(&tr);
        Pair *best = &tr.pairs[top.pair];
        if (best->count != top.count) {
            if (best->count >= 2) heap_push(&tr, top.pair); /* stale: back in with its true count */
            continue;
        }
        uint32_t a = best->left, b = best->right, z = 256 + m, stamp = m + 1;
        merges[2 * m] = a;
        merges[2 * m + 1] = b;
        last_count = best->count;
        tr.tok_len[z] = tr.tok_len[a] + tr.tok_len[b];
        tr.n_touched = 0;
        merge_pair(&tr, top.pair, a, b, z, stamp);
        for (size_t i = 0; i < tr.n_touched && !tr.oom; i++)
            if (tr.pairs[tr.touched[i]].count >= 2) heap_push(&tr, tr.touched[i]);
        m++;
        if (opt->verbose && (m % report_every == 0 || m == want))
            fprintf(stderr, "%stokenizer: %u/%u merges (last pair seen %lld times)%s", tty ? "\r" : "", m, want,
                    (long long)last_count, tty ? "   " : "\n");
    }
    if (opt->verbose && tty) fprintf(stderr, "\n");
    if (tr.oom) {
        tok_error(err, "%s", oom);
        free(merges);
        trainer_free(&tr);
        return NULL;
    }
    if (opt->verbose && m < want) {
        char limit[96] = "";
        if (tr.too_long) snprintf(limit, sizeof limit, " that makes a token of at most %u bytes", TOKENIZER_MAX_TOKEN_BYTES);
        fprintf(stderr, "tokenizer: no pair occurs twice%s after %u merges: vocabulary is %u tokens, not %u\n", limit,
                m, m + TOKENIZER_MIN_VOCAB, V);
    }
    trainer_free(&tr);
    Tokenizer *t = tokenizer_from_merges(merges, m, err);
    free(merges);
    return t;
}
