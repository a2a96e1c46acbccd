/* data/corpus.c - the default corpus recipe (see data/corpus.h): fetch with apt-get download,
 * unpack with dpkg -x, clean each source, interleave, write <cache_dir>/corpus/default-v1.txt.
 * External programs run through the shell with their output in <cache_dir>/corpus/fetch.log, so a
 * failure names a file the user can read. */
#include "data/corpus.h"
#include "common/paths.h"

#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/rng.h"
#include "data/shard.h"

#define EOT "<|endoftext|>"
#define EOT_LEN (sizeof EOT - 1)

/* ---- growable text ---- */

void textbuf_append(TextBuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 1 << 16;
        while (cap < b->len + n + 1) cap *= 2;
        char *d = realloc(b->data, cap);
        if (!d) {
            b->oom = 1;
            return;
        }
        b->data = d;
        b->cap = cap;
    }
    memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = 0;
}

/* Shortens the text to len bytes, keeping it NUL-terminated. */
static void textbuf_truncate(TextBuf *b, size_t len) {
    b->len = len;
    if (b->data) b->data[len] = 0;
}

static void textbuf_str(TextBuf *b, const char *s) {
    textbuf_append(b, s, strlen(s));
}

void textbuf_free(TextBuf *b) {
    free(b->data);
    memset(b, 0, sizeof *b);
}

/* ---- GCIDE ---- */

/* Source tags that close a definition; they say where the text came from, not what it means. */
static const char *const gcide_tags[] = {"[1913 Webster", "[Webster 1913", "[PJC", "[WordNet", "[Century Dict",
                                         "[Chambers", "[+PJC", "[RH", "[MW"};

static int is_source_tag(const char *s, size_t n) {
    for (size_t i = 0; i < sizeof gcide_tags / sizeof *gcide_tags; i++) {
        size_t k = strlen(gcide_tags[i]);
        if (n >= k && memcmp(s, gcide_tags[i], k) == 0) return 1;
    }
    return 0;
}

/* Cleans one line into out: drops \pronunciations\, {braces} and inline source tags, turns GCIDE's
 * accent notation ([=a], [.o]...) into the plain letter, and squeezes runs of spaces. */
static void gcide_clean_line(const char *s, size_t n, TextBuf *out) {
    size_t i = 0;
    while (i < n) {
        char c = s[i];
        if (c == '\\') {
            const char *close = memchr(s + i + 1, '\\', n - i - 1);
            if (close) {
                /* "Affect \Af*fect"\, v. t." -> "Affect, v. t.": drop the space before it too. */
                if (out->len && out->data[out->len - 1] == ' ') textbuf_truncate(out, out->len - 1);
                i = (size_t)(close - s) + 1;
                continue;
            }
        } else if (c == '{' || c == '}') {
            i++;
            continue;
        } else if (c == '[') {
            const char *close = memchr(s + i, ']', n - i);
            size_t k = close ? (size_t)(close - (s + i)) + 1 : 0;
            if (close && is_source_tag(s + i, k)) {
                i += k;
                continue;
            }
            /* [=a] [.o] [^e] [~n] ['e] [`a] ["u]: a mark and one to two letters */
            if (close && k >= 4 && k <= 5 && strchr("=.^~'`\"", s[i + 1])) {
                textbuf_append(out, s + i + 2, k - 3);
                i += k;
                continue;
            }
        }
        if (c == ' ' && out->len && out->data[out->len - 1] == ' ') {
            i++;
            continue;
        }
        textbuf_append(out, &c, 1);
        i++;
    }
}

void corpus_clean_gcide_entry(const char *entry, size_t n, TextBuf *out) {
    size_t i = 0;
    int in_paragraph = 0, wrote = 0;
    while (i < n) {
        const char *nl = memchr(entry + i, '\n', n - i);
        size_t end = nl ? (size_t)(nl - entry) : n;
        size_t a = i, b = end;
        while (a < b && (entry[a] == ' ' || entry[a] == '\t')) a++;
        while (b > a && (entry[b - 1] == ' ' || entry[b - 1] == '\t' || entry[b - 1] == '\r')) b--;
        i = end + 1;
        if (a == b) { /* blank line: the paragraph ends */
            if (in_paragraph) textbuf_append(out, "\n", 1);
            in_paragraph = 0;
            continue;
        }
        if (entry[a] == '[' && entry[b - 1] == ']' && memchr(entry + a, ']', b - a) == entry + b - 1)
            continue; /* a line that is only a bracketed tag */
        size_t before = out->len;
        if (in_paragraph) textbuf_append(out, " ", 1);
        gcide_clean_line(entry + a, b - a, out);
        if (out->len == before + (in_paragraph ? 1 : 0)) { /* nothing survived the cleaning */
            textbuf_truncate(out, before);
            continue;
        }
        in_paragraph = 1;
        wrote = 1;
    }
    if (in_paragraph) textbuf_append(out, "\n", 1);
    (void)wrote;
}

/* ---- the Bible ---- */

void corpus_clean_bible(const char *text, size_t n, TextBuf *out) {
    char chapter[32] = "";
    size_t i = 0;
    while (i < n) {
        const char *nl = memchr(text + i, '\n', n - i);
        size_t end = nl ? (size_t)(nl - text) : n;
        const char *line = text + i;
        size_t len = end - i;
        i = end + 1;
        const char *sp = memchr(line, ' ', len);
        const char *colon = memchr(line, ':', len);
        if (!sp || !colon || colon > sp || (size_t)(colon - line) >= sizeof chapter) continue; /* not a verse */
        size_t key = (size_t)(colon - line);
        if (strlen(chapter) != key || memcmp(chapter, line, key) != 0) {
            if (chapter[0]) textbuf_append(out, EOT, EOT_LEN);
            memcpy(chapter, line, key);
            chapter[key] = 0;
        }
        size_t skip = (size_t)(sp - line) + 1;
        textbuf_append(out, line + skip, len - skip);
        textbuf_append(out, "\n", 1);
    }
}

/* ---- fortunes ---- */

void corpus_clean_fortunes(const char *text, size_t n, TextBuf *out) {
    size_t i = 0, doc_start = out->len;
    int any = 0;
    while (i <= n) {
        const char *nl = i < n ? memchr(text + i, '\n', n - i) : NULL;
        size_t end = nl ? (size_t)(nl - text) : n;
        const char *line = text + i;
        size_t len = end - i;
        int last = !nl;
        i = end + 1;
        int sep = len == 1 && line[0] == '%';
        if (!sep && !last) {
            textbuf_append(out, line, len);
            textbuf_append(out, "\n", 1);
            continue;
        }
        if (!sep && len) {
            textbuf_append(out, line, len);
            textbuf_append(out, "\n", 1);
        }
        /* A fortune ends: drop trailing blank lines; drop it whole if empty. */
        while (out->len > doc_start && (out->data[out->len - 1] == '\n' || out->data[out->len - 1] == ' '))
            textbuf_truncate(out, out->len - 1);
        if (out->len > doc_start) {
            textbuf_append(out, "\n", 1);
            textbuf_append(out, EOT, EOT_LEN);
            any = 1;
        }
        doc_start = out->len;
        if (last) break;
    }
    /* The caller joins sources with its own separators: no trailing one here. */
    if (any && out->len >= EOT_LEN && memcmp(out->data + out->len - EOT_LEN, EOT, EOT_LEN) == 0)
        textbuf_truncate(out, out->len - EOT_LEN);
}

/* ---- the synthetic corpus ---- */

static const char *const syn_det[] = {"the", "a", "this", "that", "every", "no", "some", "one", "my", "our"};
static const char *const syn_noun[] = {
    "river", "stone", "house", "king", "child", "word", "light", "field", "city", "ship", "tree", "road", "law",
    "night", "voice", "hand", "garden", "letter", "market", "winter", "mountain", "teacher", "machine", "song",
    "bridge", "forest", "number", "island", "window", "story", "question", "friend", "fire", "bird", "door",
};
static const char *const syn_verb[] = {
    "sees", "finds", "keeps", "leaves", "builds", "carries", "follows", "names", "opens", "counts", "remembers",
    "changes", "answers", "watches", "crosses", "holds", "writes", "loses", "meets", "teaches",
};
static const char *const syn_adj[] = {
    "old", "green", "quiet", "bright", "small", "long", "strange", "cold", "early", "honest", "narrow", "golden",
    "heavy", "open", "gentle", "distant",
};
static const char *const syn_conn[] = {"and", "but", "because", "while", "so", "although", "until", "when"};
static const char *const syn_onset[] = {"b", "br", "c", "ch", "d", "dr", "f", "g", "gr", "h", "k", "l", "m", "n",
                                        "p", "pl", "qu", "r", "s", "sh", "st", "t", "th", "tr", "v", "w", "z"};
static const char *const syn_vowel[] = {"a", "e", "i", "o", "u", "ai", "ea", "ou", "io", "y"};
static const char *const syn_coda[] = {"", "", "n", "r", "s", "l", "m", "nd", "st", "th", "x", "ck"};

#define PICK(rng, arr) arr[rng_below(rng, sizeof arr / sizeof *arr)]

/* Pseudo-word number k: the same k always spells the same word, and there are enough of them
 * (1 to 4 syllables) that merges keep finding repeated pairs at large vocabularies. */
static void pseudo_word(uint64_t k, TextBuf *out) {
    Rng r;
    rng_seed(&r, k * 0x9e3779b97f4a7c15ull + 17);
    int syl = 1 + (int)rng_below(&r, 4);
    for (int s = 0; s < syl; s++) {
        textbuf_str(out, PICK(&r, syn_onset));
        textbuf_str(out, PICK(&r, syn_vowel));
        if (s == syl - 1 || rng_below(&r, 3) == 0) textbuf_str(out, PICK(&r, syn_coda));
    }
}

/* Zipf-like: small k far more often than large. */
static uint64_t zipf_index(Rng *rng, uint64_t n) {
    double u = rng_uniform(rng);
    return (uint64_t)(n * u * u) % n;
}

static void noun_phrase(Rng *rng, TextBuf *out) {
    textbuf_str(out, PICK(rng, syn_det));
    textbuf_str(out, " ");
    if (rng_below(rng, 3) == 0) {
        textbuf_str(out, PICK(rng, syn_adj));
        textbuf_str(out, " ");
    }
    if (rng_below(rng, 2) == 0) pseudo_word(zipf_index(rng, 2000000), out);
    else textbuf_str(out, PICK(rng, syn_noun));
}

void corpus_synthetic(uint64_t seed, size_t bytes, TextBuf *out) {
    Rng rng;
    rng_seed(&rng, seed);
    size_t start = out->len;
    while (out->len - start < bytes && !out->oom) {
        int sentences = 2 + (int)rng_below(&rng, 8);
        for (int s = 0; s < sentences; s++) {
            size_t at = out->len;
            noun_phrase(&rng, out);
            if (!out->oom) out->data[at] = (char)(out->data[at] - 32); /* capitalize: determiners are lower-case ASCII */
            textbuf_str(out, " ");
            textbuf_str(out, PICK(&rng, syn_verb));
            textbuf_str(out, " ");
            noun_phrase(&rng, out);
            if (rng_below(&rng, 3) == 0) {
                textbuf_str(out, rng_below(&rng, 2) ? ", " : " ");
                textbuf_str(out, PICK(&rng, syn_conn));
                textbuf_str(out, " ");
                noun_phrase(&rng, out);
                textbuf_str(out, " ");
                textbuf_str(out, PICK(&rng, syn_verb));
                if (rng_below(&rng, 4) == 0) {
                    char num[24];
                    snprintf(num, sizeof num, " %u times", (unsigned)rng_below(&rng, 2000));
                    textbuf_str(out, num);
                }
            }
            textbuf_str(out, rng_below(&rng, 8) == 0 ? "?" : ".");
            textbuf_str(out, s + 1 < sentences ? " " : "\n");
        }
        textbuf_str(out, EOT);
    }
}

/* ---- fetching ---- */

static int file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0;
}

static int run(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int run(const char *fmt, ...) {
    char cmd[8192];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof cmd) return -1;
    return system(cmd) == 0 ? 0 : -1;
}

static char *read_all(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    TextBuf b = {0};
    char chunk[1 << 16];
    size_t got;
    while ((got = fread(chunk, 1, sizeof chunk, f)) > 0) textbuf_append(&b, chunk, got);
    fclose(f);
    if (b.oom) {
        textbuf_free(&b);
        return NULL;
    }
    if (!b.data) textbuf_append(&b, "", 0);
    *len = b.len;
    return b.data;
}

static const char *const base_packages[] = {"bible-kjv", "bible-kjv-text", "dict-gcide", "fortunes", "fortunes-min"};
/* The extended recipe's extra dictionaries (Debian main, dictd format): the standard corpus alone
 * runs out of repeated pairs at ~187k tokens; with these it reaches 262144 (dev/RESULTS.md). */
static const char *const extra_dicts[] = {"wn", "foldoc", "jargon", "devil", "vera"};
#define N_BASE (sizeof base_packages / sizeof *base_packages)
#define N_EXTRA (sizeof extra_dicts / sizeof *extra_dicts)

/* "pkg pkg ..." for messages and apt-get. */
static void package_list(int extended, char *out, size_t cap) {
    size_t n = 0;
    out[0] = 0;
    for (size_t i = 0; i < N_BASE; i++) n += (size_t)snprintf(out + n, cap - n, "%s%s", n ? " " : "", base_packages[i]);
    for (size_t i = 0; extended && i < N_EXTRA; i++) n += (size_t)snprintf(out + n, cap - n, " dict-%s", extra_dicts[i]);
}

/* Downloads the packages not yet in dir/debs, then unpacks them all into dir/root. */
static int fetch_packages(const char *dir, const char *log, int extended) {
    char missing[512] = "";
    size_t n = 0;
    for (size_t i = 0; i < N_BASE + (extended ? N_EXTRA : 0); i++) {
        char pkg[64];
        if (i < N_BASE) snprintf(pkg, sizeof pkg, "%s", base_packages[i]);
        else snprintf(pkg, sizeof pkg, "dict-%s", extra_dicts[i - N_BASE]);
        if (run("ls '%s/debs/%s'_*.deb >/dev/null 2>&1", dir, pkg) != 0)
            n += (size_t)snprintf(missing + n, sizeof missing - n, " %s", pkg);
    }
    if (n && run("cd '%s/debs' && apt-get download%s >>'%s' 2>&1", dir, missing, log) != 0) return -1;
    if (run("for d in '%s'/debs/*.deb; do dpkg -x \"$d\" '%s/root' || exit 1; done >>'%s' 2>&1", dir, dir, log) == 0)
        return 0;
    run("rm -f '%s'/debs/*.deb", dir); /* a damaged download: fetch afresh next time */
    return -1;
}

/* Runs the unpacked `bible` program over the whole book. It needs libreadline; a minimal system may
 * lack it, so on failure fetch that library too and point the loader at it. */
static int bible_text(const char *dir, const char *log, const char *outp) {
    const char *cmd = "'%s/root/usr/bin/bible' -f -p '%s/root/usr/lib' Gen1:1-Rev22:21 >'%s' 2>>'%s'";
    if (run(cmd, dir, dir, outp, log) == 0 && file_exists(outp)) return 0;
    if (run("cd '%s/debs' && (apt-get download libreadline8 || apt-get download libreadline8t64) >>'%s' 2>&1 && "
            "for d in libreadline*.deb; do dpkg -x \"$d\" '%s/root'; done >>'%s' 2>&1",
            dir, log, dir, log) != 0)
        return -1;
    return run("LD_LIBRARY_PATH='%s/root/lib/x86_64-linux-gnu:%s/root/usr/lib/x86_64-linux-gnu:%s/root/lib:%s/root/usr/lib' "
               "'%s/root/usr/bin/bible' -f -p '%s/root/usr/lib' Gen1:1-Rev22:21 >'%s' 2>>'%s'",
               dir, dir, dir, dir, dir, dir, outp, log) == 0 && file_exists(outp)
               ? 0
               : -1;
}

static uint64_t b64_value(const char *s, size_t n) {
    static const char digits[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        const char *p = memchr(digits, s[i], 64);
        v = v * 64 + (p ? (uint64_t)(p - digits) : 0);
    }
    return v;
}

typedef struct {
    uint64_t off, len;
} Span;

static int compare_spans(const void *a, const void *b) {
    const Span *x = a, *y = b;
    return (x->off > y->off) - (x->off < y->off);
}

/* A dictd dictionary (<name>.index + <name>.dict.dz). Index lines are "headword<TAB>offset<TAB>
 * length" in base64 digits; several headwords can point at one entry, so entries are deduplicated
 * by offset. The 00-database-* entries are the dictionary's own metadata. Every entry goes through
 * the GCIDE cleaner, whose rules (braces, bracket-only lines, joined lines) fit the others too. */
static int dictd_text(const char *dir, const char *log, const char *name, TextBuf *out) {
    char dict[4200], index[4200];
    snprintf(dict, sizeof dict, "%s/%s.dict", dir, name);
    snprintf(index, sizeof index, "%s/root/usr/share/dictd/%s.index", dir, name);
    if (run("gzip -dc '%s/root/usr/share/dictd/%s.dict.dz' >'%s' 2>>'%s'", dir, name, dict, log) != 0) return -1;
    size_t dlen, ilen;
    char *d = read_all(dict, &dlen), *ix = read_all(index, &ilen);
    remove(dict);
    if (!d || !ix) {
        free(d);
        free(ix);
        return -1;
    }
    size_t n = 0, cap = 1024;
    Span *spans = malloc(cap * sizeof *spans);
    for (size_t i = 0; spans && i < ilen;) {
        const char *nl = memchr(ix + i, '\n', ilen - i);
        size_t end = nl ? (size_t)(nl - ix) : ilen;
        const char *line = ix + i;
        size_t len = end - i;
        i = end + 1;
        const char *t1 = memchr(line, '\t', len);
        const char *t2 = t1 ? memchr(t1 + 1, '\t', (size_t)(line + len - t1 - 1)) : NULL;
        if (!t2 || (len >= 3 && memcmp(line, "00-", 3) == 0) || (len >= 10 && memcmp(line, "00database", 10) == 0))
            continue;
        Span s = {b64_value(t1 + 1, (size_t)(t2 - t1 - 1)), b64_value(t2 + 1, (size_t)(line + len - t2 - 1))};
        if (s.off > dlen || s.len > dlen - s.off || s.len == 0) continue; /* a sum could wrap */
        if (n == cap) {
            Span *bigger = realloc(spans, 2 * cap * sizeof *spans);
            if (!bigger) break;
            spans = bigger;
            cap *= 2;
        }
        spans[n++] = s;
    }
    int ok = spans != NULL;
    if (ok) {
        qsort(spans, n, sizeof *spans, compare_spans);
        int first = 1;
        for (size_t k = 0; k < n; k++) {
            if (k > 0 && spans[k].off == spans[k - 1].off) continue;
            size_t before = out->len;
            if (!first) textbuf_append(out, EOT, EOT_LEN);
            size_t body = out->len;
            corpus_clean_gcide_entry(d + spans[k].off, spans[k].len, out);
            if (out->len == body) textbuf_truncate(out, before); /* an entry with nothing left */
            else first = 0;
        }
    }
    free(spans);
    free(d);
    free(ix);
    return ok && !out->oom ? 0 : -1;
}

static int compare_names(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int fortunes_text(const char *dir, TextBuf *out) {
    char fdir[4096];
    snprintf(fdir, sizeof fdir, "%s/root/usr/share/games/fortunes", dir);
    DIR *dp = opendir(fdir);
    if (!dp) return -1;
    char *names[512];
    int n = 0;
    struct dirent *e;
    while ((e = readdir(dp)) && n < 512) {
        size_t len = strlen(e->d_name);
        if (e->d_name[0] == '.' || (len > 4 && strcmp(e->d_name + len - 4, ".dat") == 0) ||
            (len > 3 && strcmp(e->d_name + len - 3, ".u8") == 0))
            continue; /* .dat are indexes, .u8 are links to the same text */
        names[n++] = strdup(e->d_name);
    }
    closedir(dp);
    qsort(names, (size_t)n, sizeof *names, compare_names);
    int ok = 1;
    for (int i = 0; i < n; i++) {
        char path[4608];
        snprintf(path, sizeof path, "%s/%s", fdir, names[i]);
        struct stat st;
        size_t len;
        char *text = (lstat(path, &st) == 0 && S_ISREG(st.st_mode)) ? read_all(path, &len) : NULL;
        if (text && len) {
            if (out->len) textbuf_append(out, EOT, EOT_LEN);
            corpus_clean_fortunes(text, len, out);
        }
        free(text);
        free(names[i]);
    }
    return ok && out->len && !out->oom ? 0 : -1;
}

/* Splits text at the separators into documents (spans), dropping empty ones. */
static Span *split_docs(const TextBuf *b, size_t *n_docs) {
    size_t n = 0, cap = 1024;
    Span *docs = malloc(cap * sizeof *docs);
    for (size_t i = 0; docs && i < b->len;) {
        const char *e = memmem(b->data + i, b->len - i, EOT, EOT_LEN);
        size_t end = e ? (size_t)(e - b->data) : b->len;
        if (end > i) {
            if (n == cap) {
                Span *bigger = realloc(docs, 2 * cap * sizeof *docs);
                if (!bigger) {
                    free(docs);
                    return NULL;
                }
                docs = bigger;
                cap *= 2;
            }
            docs[n++] = (Span){i, end - i};
        }
        i = e ? end + EOT_LEN : b->len;
    }
    *n_docs = n;
    return docs;
}

/* Interleaves the sources' documents by relative position (document i of n sits at (i + 0.5) / n),
 * ties to the earlier source, and writes them with separators. */
static int interleave(TextBuf *src, int n_src, TextBuf *out) {
    Span *docs[16];
    size_t count[16], next[16] = {0};
    if (n_src > 16) return -1;
    for (int s = 0; s < n_src; s++) {
        docs[s] = split_docs(&src[s], &count[s]);
        if (!docs[s]) return -1;
    }
    for (;;) {
        int best = -1;
        double best_pos = 2.0;
        for (int s = 0; s < n_src; s++) {
            if (next[s] == count[s]) continue;
            double pos = (next[s] + 0.5) / count[s];
            if (pos < best_pos) {
                best_pos = pos;
                best = s;
            }
        }
        if (best < 0) break;
        Span d = docs[best][next[best]++];
        textbuf_append(out, src[best].data + d.off, d.len);
        if (src[best].data[d.off + d.len - 1] != '\n') textbuf_append(out, "\n", 1);
        textbuf_append(out, EOT, EOT_LEN);
    }
    for (int s = 0; s < n_src; s++) free(docs[s]);
    return out->oom ? -1 : 0;
}

/* Length of the valid UTF-8 sequence at s[0], or 0 when s[0] does not start one. */
static size_t utf8_valid_len(const uint8_t *s, size_t n) {
    uint8_t b = s[0];
    if (b < 0x80) return 1;
    size_t need = (b >= 0xc2 && b <= 0xdf) ? 2 : (b >= 0xe0 && b <= 0xef) ? 3 : (b >= 0xf0 && b <= 0xf4) ? 4 : 0;
    if (!need || need > n) return 0;
    uint32_t cp = b & (0x7f >> need);
    for (size_t k = 1; k < need; k++) {
        if ((s[k] & 0xc0) != 0x80) return 0;
        cp = (cp << 6) | (s[k] & 0x3f);
    }
    if ((need == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) || (need == 4 && (cp < 0x10000 || cp > 0x10ffff)))
        return 0;
    return need;
}

size_t corpus_invalid_utf8(const char *s, size_t n, size_t *first) {
    const uint8_t *u = (const uint8_t *)s;
    size_t bad = 0;
    for (size_t i = 0; i < n;) {
        const size_t k = utf8_valid_len(u + i, n - i);
        if (k) {
            i += k;
            continue;
        }
        if (!bad && first) *first = i;
        bad++, i++;
    }
    return bad;
}

/* The sources are UTF-8 but for a few stray Windows-1252 bytes (GCIDE has three). Those become the
 * characters they were meant to be (Latin-1 for 0xA0-0xFF, the usual quotes and dashes below), so
 * the corpus is clean UTF-8; anything else is dropped. */
void corpus_fix_utf8(TextBuf *b) {
    size_t i = 0, j = 0;
    uint8_t *s = (uint8_t *)b->data;
    TextBuf fixed = {0};
    int changed = 0;
    for (; i < b->len;) {
        size_t k = utf8_valid_len(s + i, b->len - i);
        if (k) {
            i += k;
            continue;
        }
        if (!changed) textbuf_append(&fixed, b->data, i);
        else textbuf_append(&fixed, b->data + j, i - j);
        changed = 1;
        uint8_t c = s[i++];
        j = i;
        uint32_t cp = c >= 0xa0 ? c : c == 0x91 ? 0x2018 : c == 0x92 ? 0x2019 : c == 0x93 ? 0x201c : c == 0x94 ? 0x201d
                                                : c == 0x96 ? 0x2013 : c == 0x97 ? 0x2014 : 0;
        if (!cp) continue;
        char u[3];
        if (cp < 0x800) {
            u[0] = (char)(0xc0 | (cp >> 6));
            u[1] = (char)(0x80 | (cp & 0x3f));
            textbuf_append(&fixed, u, 2);
        } else {
            u[0] = (char)(0xe0 | (cp >> 12));
            u[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
            u[2] = (char)(0x80 | (cp & 0x3f));
            textbuf_append(&fixed, u, 3);
        }
    }
    if (!changed) return;
    textbuf_append(&fixed, b->data + j, b->len - j);
    if (fixed.oom) {
        textbuf_free(&fixed);
        b->oom = 1;
        return;
    }
    textbuf_free(b);
    *b = fixed;
}

static int write_text(const char *path, const TextBuf *b) {
    return write_file_whole(path, b->data, b->len);
}

/* The real corpus; -1 when a step fails (the log says which). */
static int build_real(const char *dir, const char *final_path, const char *log, int extended) {
    char sub[4200], bible_out[4200], list[512];
    snprintf(sub, sizeof sub, "%s/debs", dir);
    if (make_dirs(sub) != 0) return -1;
    snprintf(sub, sizeof sub, "%s/root", dir);
    if (make_dirs(sub) != 0) return -1;
    package_list(extended, list, sizeof list);
    fprintf(stderr, "corpus: fetching %s with apt-get download (log: %s)\n", list, log);
    if (fetch_packages(dir, log, extended) != 0) return -1;
    snprintf(bible_out, sizeof bible_out, "%s/bible.out", dir);
    enum { MAX_SRC = 3 + N_EXTRA };
    TextBuf src[MAX_SRC], all = {0};
    memset(src, 0, sizeof src);
    int n_src = 3, rc = -1;
    size_t blen;
    char *braw = NULL;
    if (bible_text(dir, log, bible_out) != 0 || !(braw = read_all(bible_out, &blen))) goto done;
    corpus_clean_bible(braw, blen, &src[0]);
    if (dictd_text(dir, log, "gcide", &src[1]) != 0 || fortunes_text(dir, &src[2]) != 0) goto done;
    fprintf(stderr, "corpus: bible %.1f MB, dictionary %.1f MB, fortunes %.1f MB of clean text\n", src[0].len / 1e6,
            src[1].len / 1e6, src[2].len / 1e6);
    for (size_t i = 0; extended && i < N_EXTRA; i++, n_src++) {
        if (dictd_text(dir, log, extra_dicts[i], &src[n_src]) != 0) goto done;
        fprintf(stderr, "corpus: %s %.1f MB of clean text\n", extra_dicts[i], src[n_src].len / 1e6);
    }
    if (interleave(src, n_src, &all) != 0) goto done;
    corpus_fix_utf8(&all);
    if (all.oom || write_text(final_path, &all) != 0) goto done;
    rc = 0;
    /* The unpacked tree is only an intermediate; the .debs stay, so a rebuild needs no network. */
    run("rm -rf '%s/root'", dir);
done:
    remove(bible_out);
    free(braw);
    for (int i = 0; i < MAX_SRC; i++) textbuf_free(&src[i]);
    textbuf_free(&all);
    return rc;
}

int corpus_check_cache_dir(const char *cache_dir, char *err) {
    if (strchr(cache_dir, '\'')) {
        fgpt_set_err(err, "cache directory %s contains a quote; pass --cache-dir without quotes", cache_dir);
        return -1;
    }
    return 0;
}

int corpus_default(const char *cache_dir, int extended, char *path, size_t cap, char *name, char *err) {
    if (corpus_check_cache_dir(cache_dir, err) != 0) return -1;
    char dir[4096], final_path[4200], log[4200], rel[4096];
    snprintf(rel, sizeof rel, "%s/corpus", cache_dir);
    /* Absolute, because the fetch commands change into the cache and write their log by this path. */
    if (make_dirs(rel) != 0 || !realpath(rel, dir)) {
        fgpt_set_err(err, "cannot create %s: %s (choose a writable --cache-dir)", rel, strerror(errno));
        return -1;
    }
    const char *chosen = extended ? CORPUS_EXTENDED_NAME : CORPUS_DEFAULT_NAME;
    char list[512];
    package_list(extended, list, sizeof list);
    snprintf(final_path, sizeof final_path, "%s/%s.txt", dir, chosen);
    snprintf(log, sizeof log, "%s/fetch.log", dir);
    if (!file_exists(final_path) && build_real(dir, final_path, log, extended) != 0) {
        chosen = CORPUS_SYNTHETIC_NAME;
        snprintf(final_path, sizeof final_path, "%s/%s.txt", dir, CORPUS_SYNTHETIC_NAME);
        fprintf(stderr,
                "corpus: could not fetch the Debian packages %s (see %s; no network, or `apt-get update` "
                "needed?); using the synthetic corpus instead\n",
                list, log);
        if (!file_exists(final_path)) {
            TextBuf b = {0};
            corpus_synthetic(1, CORPUS_SYNTHETIC_BYTES, &b);
            int bad = b.oom || write_text(final_path, &b) != 0;
            textbuf_free(&b);
            if (bad) {
                fgpt_set_err(err, "cannot write the synthetic corpus to %s (disk full or not writable?)", final_path);
                return -1;
            }
        }
    }
    if ((size_t)snprintf(path, cap, "%s", final_path) >= cap) {
        fgpt_set_err(err, "corpus path %s is too long; use a shorter --cache-dir", final_path);
        return -1;
    }
    snprintf(name, 32, "%s", chosen);
    return 0;
}
