/* tokenizer/bpe_train.c - learns BPE merges from a text.
 *
 *   1. Count unique chunks (threads over pieces of the text, one hash map each, merged after).
 *      Sorting the chunks by their bytes makes everything after independent of the thread count.
 *   2. Each unique chunk is a "word": a count and its symbols (initially its bytes). Pair counts are
 *      weighted by word counts; each pair keeps a list of the words that contain it.
 *   3. A max-heap of pairs with lazy refresh: an entry whose count is stale is pushed back with the
 *      current count when popped. Counts only fall, except for pairs holding the newest token, which
 *      are pushed once their merge is done, so the first fresh entry popped is the best pair.
 *   4. Merging visits only the words on the pair's list. A word's old pairs are uncounted and its
 *      new pairs counted; new pairs (they hold the new token) list the word.
 * Ties go to the smaller (left, right) token ids, so training is deterministic. Merging stops at
 * the vocabulary size, or when the best pair occurs fewer than twice. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data/err.h"
#include "tokenizer/tokenizer_internal.h"

#define NO_NODE UINT32_MAX

typedef struct {
    uint64_t count; /* occurrences of the chunk in the corpus */
    uint64_t off;   /* first symbol in Trainer.symbols */
    uint32_t len;   /* symbols left after the merges so far */
    uint32_t stamp; /* last merge that visited the word, so a listed-twice word is merged once */
} Word;

typedef struct {
    int64_t count;
    uint32_t left, right;
    uint32_t head;  /* first node of the list of words holding this pair */
    uint32_t stamp; /* last merge that touched the pair, to push it once */
} Pair;

typedef struct {
    uint32_t word, next;
} Node;

typedef struct {
    int64_t count;
    uint32_t left, right, pair;
} HeapEntry;

typedef struct {
    Word *words;
    size_t n_words;
    uint32_t *symbols;
    Pair *pairs;
    size_t n_pairs, cap_pairs;
    PairMap pair_index; /* (left, right) -> index into pairs */
    Node *nodes;
    size_t n_nodes, cap_nodes;
    HeapEntry *heap;
    size_t n_heap, cap_heap;
    uint32_t *touched;
    size_t n_touched, cap_touched;
    int oom;
} Trainer;

/* ---- growable arrays ---- */
static int grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return 0;
    size_t c = *cap ? *cap : 1024;
    while (c < need) c *= 2;
    void *q = realloc(*p, c * elem);
    if (!q) return -1;
    *p = q;
    *cap = c;
    return 0;
}

/* ---- heap: larger count first, then smaller (left, right) ---- */
static inline int heap_before(const HeapEntry *a, const HeapEntry *b) {
    if (a->count != b->count) return a->count > b->count;
    if (a->left != b->left) return a->left < b->left;
    return a->right < b->right;
}

static void heap_push(Trainer *tr, uint32_t pair) {
    if (grow((void **)&tr->heap, &tr->cap_heap, tr->n_heap + 1, sizeof *tr->heap)) {
        tr->oom = 1;
        return;
    }
    const Pair *p = &tr->pairs[pair];
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
        if (grow((void **)&tr->pairs, &tr->cap_pairs, tr->n_pairs + 1, sizeof *tr->pairs)) {
            tr->oom = 1;
            return 0;
        }
        tr->pairs[tr->n_pairs] = (Pair){0, left, right, NO_NODE, 0};
        tr->n_pairs++;
    }
    return tr->pair_index.values[slot];
}

static void pair_list_word(Trainer *tr, uint32_t pair, uint32_t word) {
    if (tr->n_nodes >= NO_NODE) { /* node ids are 32-bit: a corpus this large needs a bigger machine */
        tr->oom = 1;
        return;
    }
    if (grow((void **)&tr->nodes, &tr->cap_nodes, tr->n_nodes + 1, sizeof *tr->nodes)) {
        tr->oom = 1;
        return;
    }
    tr->nodes[tr->n_nodes] = (Node){word, tr->pairs[pair].head};
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

/* Counts the unique chunks of the text and turns them into words; 0, or -1 on out of memory. */
static int build_words(Trainer *tr, const uint8_t *text, size_t len, int threads, int verbose) {
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
        return -1;
    }

    BytesSlot **order = malloc((all->count + 1) * sizeof *order);
    tr->words = malloc((all->count + 1) * sizeof *tr->words);
    tr->symbols = malloc((all->arena_len + 1) * sizeof *tr->symbols);
    if (!order || !tr->words || !tr->symbols) {
        free(order);
        bytes_map_free(all);
        return -1;
    }
    size_t n = 0;
    uint64_t total = 0;
    for (size_t i = 0; i <= all->mask; i++)
        if (all->slots[i].used) order[n++] = &all->slots[i];
    qsort_r(order, n, sizeof *order, compare_chunks, all->arena);
    uint64_t off = 0;
    for (size_t w = 0; w < n; w++) {
        const uint8_t *bytes = all->arena + order[w]->key_off;
        uint32_t L = order[w]->key_len;
        tr->words[w] = (Word){order[w]->value, off, L, 0};
        for (uint32_t i = 0; i < L; i++) tr->symbols[off + i] = bytes[i];
        off += L;
        total += order[w]->value;
    }
    tr->n_words = n;
    if (verbose)
        fprintf(stderr, "tokenizer: %llu chunks, %zu unique (%.1f MB of unique text)\n", (unsigned long long)total, n,
                off / 1e6);
    free(order);
    bytes_map_free(all);
    return 0;
}

/* Initial pair counts and word lists. */
static void count_pairs(Trainer *tr) {
    for (size_t w = 0; w < tr->n_words && !tr->oom; w++) {
        const Word *word = &tr->words[w];
        const uint32_t *sym = tr->symbols + word->off;
        for (uint32_t i = 0; i + 1 < word->len; i++) {
            uint32_t p = pair_get_or_add(tr, sym[i], sym[i + 1]);
            if (tr->oom) return;
            tr->pairs[p].count += (int64_t)word->count;
            /* A word lists a pair once however often it holds it: the head is this word if seen. */
            uint32_t head = tr->pairs[p].head;
            if (head == NO_NODE || tr->nodes[head].word != w) pair_list_word(tr, p, (uint32_t)w);
        }
    }
    for (size_t p = 0; p < tr->n_pairs && !tr->oom; p++)
        if (tr->pairs[p].count >= 2) heap_push(tr, (uint32_t)p);
}

/* Replaces every (a, b) in word w by z, updating pair counts and lists. */
static void merge_word(Trainer *tr, uint32_t w, uint32_t a, uint32_t b, uint32_t z, uint32_t stamp) {
    Word *word = &tr->words[w];
    uint32_t *sym = tr->symbols + word->off;
    uint32_t L = word->len;
    int found = 0;
    for (uint32_t i = 0; i + 1 < L; i++)
        if (sym[i] == a && sym[i + 1] == b) {
            found = 1;
            break;
        }
    if (!found) return; /* a stale list entry: an earlier merge took the pair out of this word */
    int64_t c = (int64_t)word->count;
    for (uint32_t i = 0; i + 1 < L; i++)
        tr->pairs[pair_map_get(&tr->pair_index, pair_key(sym[i], sym[i + 1]))].count -= c;
    uint32_t j = 0;
    for (uint32_t i = 0; i < L;) {
        if (i + 1 < L && sym[i] == a && sym[i + 1] == b) {
            sym[j++] = z;
            i += 2;
        } else {
            sym[j++] = sym[i++];
        }
    }
    word->len = j;
    for (uint32_t i = 0; i + 1 < j; i++) {
        uint32_t p = pair_get_or_add(tr, sym[i], sym[i + 1]);
        if (tr->oom) return;
        Pair *pair = &tr->pairs[p];
        pair->count += c;
        if (sym[i] == z || sym[i + 1] == z) {
            uint32_t head = pair->head;
            if (head == NO_NODE || tr->nodes[head].word != w) pair_list_word(tr, p, w);
            if (tr->pairs[p].stamp != stamp) {
                tr->pairs[p].stamp = stamp;
                if (grow((void **)&tr->touched, &tr->cap_touched, tr->n_touched + 1, sizeof *tr->touched)) {
                    tr->oom = 1;
                    return;
                }
                tr->touched[tr->n_touched++] = p;
            }
        }
    }
}

static void trainer_free(Trainer *tr) {
    free(tr->touched);
    free(tr->heap);
    free(tr->nodes);
    pair_map_free(&tr->pair_index);
    free(tr->pairs);
    free(tr->symbols);
    free(tr->words);
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
    if (build_words(&tr, (const uint8_t *)text, len, opt->threads, opt->verbose) != 0) {
        tok_error(err, "%s", oom);
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
    uint32_t *merges = malloc(((size_t)want + 1) * 2 * sizeof *merges);
    if (!merges || pair_map_init(&tr.pair_index, 1 << 20) != 0) {
        tok_error(err, "%s", oom);
        free(merges);
        trainer_free(&tr);
        return NULL;
    }
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
        tr.n_touched = 0;
        for (uint32_t node = best->head; node != NO_NODE && !tr.oom;) {
            Node nd = tr.nodes[node]; /* copy: merge_word may grow (move) the node pool */
            if (tr.words[nd.word].stamp != stamp) {
                tr.words[nd.word].stamp = stamp;
                merge_word(&tr, nd.word, a, b, z, stamp);
            }
            node = nd.next;
        }
        tr.pairs[top.pair].head = NO_NODE; /* the pair is gone from every word */
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
    if (opt->verbose && m < want)
        fprintf(stderr, "tokenizer: no pair occurs twice after %u merges: vocabulary is %u tokens, not %u\n", m,
                m + TOKENIZER_MIN_VOCAB, V);
    trainer_free(&tr);
    Tokenizer *t = tokenizer_from_merges(merges, m, err);
    free(merges);
    return t;
}
