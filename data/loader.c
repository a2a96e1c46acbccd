/* data/loader.c - shuffled, rank-sliced, resumable batches of token windows (see loader.h). */
#include "data/loader.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/err.h"
#include "common/hash.h"
#include "common/rng.h"

static void build_order(Loader *l) {
    for (uint64_t i = 0; i < l->total_windows; i++) l->order[i] = (uint32_t)i;
    if (!l->shuffle) return;
    Rng rng;
    rng_seed(&rng, l->seed * 0x9e3779b97f4a7c15ull + l->epoch);
    for (uint64_t i = l->total_windows; i > 1; i--) { /* Fisher-Yates */
        const uint64_t j = rng_below(&rng, i);
        const uint32_t tmp = l->order[i - 1];
        l->order[i - 1] = l->order[j];
        l->order[j] = tmp;
    }
}

/* The open loaders, for the bus-error handler to tell a shard's pages from other memory. */
#define MAX_OPEN_LOADERS 16
static const Loader *open_loaders[MAX_OPEN_LOADERS];

static void note_open(const Loader *l, int open) {
    for (int i = 0; i < MAX_OPEN_LOADERS; i++)
        if (open_loaders[i] == (open ? NULL : l)) {
            open_loaders[i] = open ? l : NULL;
            return;
        }
}

static void write_str(const char *s) {
    if (write(2, s, strlen(s)) < 0) return;
}

/* A mapped page past a file's end faults with SIGBUS: on a shard's pages, its file was cut short
 * while the run read it. Anything else keeps the default action (the fault recurs without us). */
static void on_bus_error(int sig, siginfo_t *info, void *context) {
    (void)context;
    const char *at = info->si_addr;
    for (int i = 0; i < MAX_OPEN_LOADERS; i++) {
        const Loader *l = open_loaders[i];
        for (size_t k = 0; l && k < l->num_shards; k++) {
            const char *map = l->shards[k].map.map;
            if (at < map || at >= map + l->shards[k].map.map_bytes) continue;
            write_str("error: token shard ");
            write_str(l->shards[k].path);
            write_str(" was cut short while the run read it (rewritten in place?): put it back as it was and resume "
                      "with -y 1 from the last checkpoint, or write new data under another name\n");
            _exit(1);
        }
    }
    signal(sig, SIG_DFL);
}

void loader_catch_cut_shards(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_bus_error;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGBUS, &sa, NULL);
}

/* Maps every shard and checks that they share a vocabulary and tokenizer (their headers alone). */
static int map_shards(Loader *l, const ShardPaths *paths, const char *spec, uint32_t model_vocab, char *err) {
    l->shards = calloc(paths->n, sizeof *l->shards);
    if (!l->shards) {
        snprintf(err, ERR_LEN, "out of memory for %zu shards", paths->n);
        return -1;
    }
    size_t named_by = 0; /* the first shard that records its tokenizer */
    for (size_t i = 0; i < paths->n; i++) {
        LoaderShard *s = &l->shards[i];
        if (shard_map(paths->paths[i], &s->map, err) != 0) {
            if (paths->n > 1) { /* which pattern brought the file in */
                char why[ERR_LEN];
                snprintf(why, sizeof why, "%s", err);
                snprintf(err, ERR_LEN, "%s (a file of the shard pattern %s)", why, spec);
            }
            return -1;
        }
        l->num_shards = i + 1;
        if (!(s->path = strdup(paths->paths[i]))) {
            snprintf(err, ERR_LEN, "out of memory");
            return -1;
        }
        const ShardHeader *h = &s->map.hdr;
        if (shard_joins_set(h, s->path, &l->shards[0].map.hdr, l->shards[0].path,
                            l->shard_tokenizer ? &l->shards[named_by].map.hdr : NULL, l->shards[named_by].path, err) != 0)
            return -1;
        if (!l->shard_tokenizer) l->shard_tokenizer = h->tokenizer, named_by = i;
        s->limit = shard_token_limit(h, model_vocab);
        l->masked |= (h->flags & (SHARD_LOSS_MASK | SHARD_DOCUMENTS)) != 0;
        l->documents |= (h->flags & SHARD_DOCUMENTS) != 0;
        l->num_tokens += h->num_tokens;
    }
    l->shard_vocab = l->shards[0].map.hdr.vocab_size;
    return 0;
}

/* One pass over the shards' tokens: each checked against model_vocab and hashed for the fingerprint;
 * under PACK_BFD each shard's documents packed into windows of T + 1. */
static int check_tokens(Loader *l, uint32_t model_vocab, char *err) {
    enum { CHUNK = 1 << 16 };
    uint32_t *buf = malloc(CHUNK * sizeof *buf);
    if (!buf) {
        snprintf(err, ERR_LEN, "out of memory");
        return -1;
    }
    FgptHashStream hash;
    fgpt_hash_begin(&hash, l->num_tokens);
    int rc = 0;
    PackStarts starts = {0};
    for (size_t i = 0; rc == 0 && i < l->num_shards; i++) {
        LoaderShard *s = &l->shards[i];
        const uint64_t n = s->map.hdr.num_tokens;
        starts.count = 0;
        for (uint64_t at = 0; rc == 0 && at < n; at += CHUNK) {
            const size_t k = n - at < CHUNK ? (size_t)(n - at) : CHUNK;
            rc = shard_decode_checked(&s->map.hdr, s->path, s->map.tokens + at * s->map.hdr.bytes_per_token, at, k,
                                      model_vocab, buf, err);
            fgpt_hash_add(&hash, buf, k * sizeof *buf);
            for (size_t j = 0; rc == 0 && l->masked && j < k; j++) {
                l->no_loss_tokens += (buf[j] & SHARD_NO_LOSS) != 0;
                l->document_starts += shard_token_starts_document(buf[j]);
            }
            if (rc == 0 && l->pack == PACK_BFD) rc = pack_note_starts(&starts, buf, k, at, err);
        }
        if (rc == 0 && l->pack == PACK_BFD) {
            rc = pack_documents(starts.at, starts.count, n, l->T, &s->packed, err);
            l->packed_tokens += s->packed.tokens;
        }
    }
    pack_starts_free(&starts);
    free(buf);
    /* where the shards end decides the windows: the same tokens cut otherwise are other data (one
     * shard keeps the hash of its tokens alone, which checkpoints before patterns recorded) */
    for (size_t i = 0; l->num_shards > 1 && i < l->num_shards; i++)
        fgpt_hash_add(&hash, &l->shards[i].map.hdr.num_tokens, sizeof(uint64_t));
    l->fingerprint = fgpt_hash_end(&hash);
    return rc;
}

int loader_open(Loader *l, const char *spec, uint32_t model_vocab, int B, int T, int rank, int world, int accum,
                int shuffle, uint64_t seed, PackKind pack, char *err) {
    memset(l, 0, sizeof *l);
    ShardPaths paths;
    if (shard_paths(spec, &paths, err) != 0) return -1;
    const int rc = map_shards(l, &paths, spec, model_vocab, err);
    const size_t n_paths = paths.n;
    shard_paths_free(&paths);
    if (rc != 0) {
        loader_close(l);
        return -1;
    }
    l->B = B;
    l->T = T;
    l->rank = rank;
    l->world = world;
    l->shuffle = shuffle;
    l->seed = seed;
    l->pack = pack;
    if (pack == PACK_BFD && !l->documents) {
        snprintf(err, ERR_LEN, "--pack bfd packs whole documents, and %s marks none: prepare it with --documents or "
                 "--prompt-completion, or leave --pack out", spec);
        loader_close(l);
        return -1;
    }
    for (size_t i = 0; i < l->num_shards; i++) {
        LoaderShard *s = &l->shards[i];
        s->first_window = l->total_windows;
        s->windows = s->map.hdr.num_tokens > 0 ? (s->map.hdr.num_tokens - 1) / (uint64_t)T : 0;
        l->total_windows += s->windows;
    }
    /* 4 bytes a window in the order: a 100-billion-token corpus at T = 1024 takes 390 MB a rank.
     * Said before the pass over the tokens, which would take minutes at this size. */
    if (l->total_windows > UINT32_MAX) {
        snprintf(err, ERR_LEN, "%s holds %llu windows of %lld tokens, more than one run orders (%u): raise -t, or "
                 "train on part of the shards at a time", spec, (unsigned long long)l->total_windows, (long long)T + 1,
                 UINT32_MAX);
        loader_close(l);
        return -1;
    }
    if (check_tokens(l, model_vocab, err) != 0) {
        loader_close(l);
        return -1;
    }
    if (pack == PACK_BFD) {
        l->total_windows = 0;
        for (size_t i = 0; i < l->num_shards; i++) {
            LoaderShard *s = &l->shards[i];
            s->first_window = l->total_windows;
            s->windows = s->packed.windows;
            l->total_windows += s->windows;
        }
        if (l->total_windows > UINT32_MAX) {
            snprintf(err, ERR_LEN, "%s packs into %llu windows of %lld tokens, more than one run orders (%u): raise -t, "
                     "or train on part of the shards at a time", spec, (unsigned long long)l->total_windows,
                     (long long)T + 1, UINT32_MAX);
            loader_close(l);
            return -1;
        }
    }
    l->num_batches = l->total_windows / (uint64_t)B / ((uint64_t)world * accum) * accum;
    if (l->num_batches == 0) {
        char what[ERR_LEN];
        if (n_paths == 1)
            snprintf(what, sizeof what, "shard %s has %llu tokens", l->shards[0].path, (unsigned long long)l->num_tokens);
        else /* windows stop at each shard's end */
            snprintf(what, sizeof what, "the %zu shards of %s hold %llu windows of %lld tokens", n_paths, spec,
                     (unsigned long long)l->total_windows, (long long)T + 1);
        snprintf(err, ERR_LEN,
                 "%s: too few for a batch of %d x %lld on each of %d rank(s) with %d micro-batch(es) per step "
                 "(need %llu %s; lower -b or -t%s, or use more data)",
                 what, B, (long long)T + 1, world, accum,
                 n_paths == 1 ? (unsigned long long)B * T * world * accum + 1 : (unsigned long long)B * world * accum,
                 n_paths == 1 ? "tokens" : "windows", accum > 1 ? " (or -d)" : "");
        loader_close(l);
        return LOADER_TOO_SHORT;
    }
    l->order = malloc(l->total_windows * sizeof *l->order);
    l->window = malloc(((size_t)T + 1) * sizeof *l->window);
    if (!l->order || !l->window) {
        snprintf(err, ERR_LEN, "out of memory for the batch order of %s", spec);
        loader_close(l);
        return -1;
    }
    build_order(l);
    note_open(l, 1);
    return 0;
}

void loader_close(Loader *l) {
    note_open(l, 0);
    free(l->order);
    free(l->window);
    for (size_t i = 0; i < l->num_shards; i++) {
        shard_unmap(&l->shards[i].map);
        packed_windows_free(&l->shards[i].packed);
        free(l->shards[i].path);
    }
    free(l->shards);
    memset(l, 0, sizeof *l);
}

/* The shard that holds window w: the last whose first window is at or before it. */
static const LoaderShard *shard_of_window(const Loader *l, uint64_t w) {
    size_t lo = 0, hi = l->num_shards - 1;
    while (lo < hi) {
        const size_t mid = (lo + hi + 1) / 2;
        if (l->shards[mid].first_window <= w) lo = mid;
        else hi = mid - 1;
    }
    return &l->shards[lo];
}

int loader_split_window(const uint32_t *stored, int count, int T, int *inputs, int *targets, int *positions) {
    int documents = 0, at = 0;
    for (int t = 0; t <= T; t++) {
        const uint32_t tok = t < count ? stored[t] : 0;
        const int starts = t < count && shard_token_starts_document(tok);
        if (t < T) {
            at = t == 0 || starts ? 0 : at + 1;
            documents |= t > 0 && starts;
            inputs[t] = (int)shard_token_id(tok);
            if (positions) positions[t] = at;
        }
        /* no document predicts the next one's first token */
        if (t > 0) targets[t - 1] = t < count && !starts ? shard_token_target(tok) : -1;
    }
    return documents;
}

/* Token i of shard s, checked against its bound: checked when the loader opened, but a file written
 * over in place shows through its mapping (l->changed then says so, and the token reads as 0). */
static uint32_t checked_token(Loader *l, const LoaderShard *s, uint64_t i) {
    const uint32_t tok = shard_token_at(s->map.tokens, s->map.hdr.bytes_per_token, i);
    const uint32_t id = tok & shard_id_bits(&s->map.hdr);
    if (id < s->limit) return tok;
    if (!l->changed[0])
        snprintf(l->changed, sizeof l->changed, "token shard %s changed while the run read it: token %u at position "
                 "%llu is not below %u (written over in place?): put it back as it was and resume with -y 1 from the "
                 "last checkpoint, or write new data under another name", s->path, id, (unsigned long long)i, s->limit);
    return 0;
}

/* Window w of shard s into l->window; the count of its tokens (T + 1 unless packed). */
static int window_tokens(Loader *l, const LoaderShard *s, uint64_t w) {
    const int T = l->T;
    if (l->pack == PACK_WRAPPED) {
        const uint64_t base = w * (uint64_t)T;
        for (int t = 0; t <= T; t++) l->window[t] = checked_token(l, s, base + (uint64_t)t);
        return T + 1;
    }
    const PackedWindows *p = &s->packed;
    int count = 0;
    for (uint64_t k = p->first[w]; k < p->first[w + 1]; k++) {
        const PackSpan span = p->spans[k];
        for (uint32_t j = 0; j < span.len; j++) l->window[count + (int)j] = checked_token(l, s, span.start + j);
        l->window[count] |= SHARD_DOC_START; /* as packed_window_tokens marks it */
        count += (int)span.len;
    }
    return count;
}

int loader_next_batch(Loader *l, int *inputs, int *targets, int *positions) {
    int T = l->T, documents = 0;
    if (l->position == l->num_batches) {
        l->epoch++;
        l->position = 0;
        build_order(l);
    }
    uint64_t batch = l->position * (uint64_t)l->world + (uint64_t)l->rank; /* dealt round-robin */
    l->position++;
    for (int b = 0; b < l->B; b++) {
        const uint64_t w = l->order[batch * (uint64_t)l->B + (uint64_t)b];
        const LoaderShard *s = shard_of_window(l, w);
        const int count = window_tokens(l, s, w - s->first_window);
        documents |= loader_split_window(l->window, count, T, inputs + (size_t)b * T, targets + (size_t)b * T,
                                         positions ? positions + (size_t)b * T : NULL);
    }
    return documents;
}

void loader_reset(Loader *l) {
    l->epoch = 0;
    l->position = 0;
    build_order(l);
}

LoaderState loader_get_state(const Loader *l) {
    return (LoaderState){l->epoch, l->position};
}

uint64_t loader_fingerprint_packed(const Loader *l, PackKind pack) {
    /* consecutive windows keep the tokens' hash alone, which checkpoints before packing recorded */
    return pack == PACK_WRAPPED ? l->fingerprint : fgpt_hash64(pack_kind_name(pack), 3, l->fingerprint);
}

uint64_t loader_fingerprint(const Loader *l) { return loader_fingerprint_packed(l, l->pack); }

int loader_state_for_world(LoaderState *s, int from_world, int to_world, char *err) {
    const uint64_t consumed = s->position * (uint64_t)from_world;
    if (from_world < 1 || to_world < 1 || consumed % (uint64_t)to_world) {
        snprintf(err, ERR_LEN,
                 "the checkpoint's data position (%llu batches on each of %d rank(s)) is not a whole number of "
                 "batches on %d rank(s) (resume with -g %d)",
                 (unsigned long long)s->position, from_world, to_world, from_world);
        return -1;
    }
    s->position = consumed / (uint64_t)to_world;
    return 0;
}

int loader_batches_per_rank(int batches, int world) {
    return batches / world + (batches % world != 0);
}

int loader_set_state(Loader *l, LoaderState s, char *err) {
    if (s.position > l->num_batches) {
        snprintf(err, ERR_LEN,
                 "checkpoint's data position %llu is beyond this shard's %llu batches per rank (resume with the "
                 "same data, -b, -t and -d)",
                 (unsigned long long)s.position, (unsigned long long)l->num_batches);
        return -1;
    }
    l->epoch = s.epoch;
    l->position = s.position;
    build_order(l);
    return 0;
}
