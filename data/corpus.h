/* data/corpus.h - the default corpus: real English from Debian main, fetched without installing
 * anything, cleaned into one text file; or, when the packages cannot be had, a seeded synthetic
 * corpus. Documents in the text are separated by "<|endoftext|>".
 *
 * Sources (apt-get download + dpkg -x into <cache_dir>/corpus/):
 *   bible-kjv(+ -text)  the King James Bible: its own `bible` program prints the verses; the verse
 *                       references are stripped; one chapter per document.
 *   dict-gcide          the GNU Collaborative International Dictionary of English: gcide.dict.dz is
 *                       gzip; pronunciations (\Af*fect"\), source tags ([1913 Webster]) and
 *                       cross-reference braces are stripped and wrapped lines joined; one entry
 *                       per document.
 *   fortunes(-min)      fortune cookies: `%` lines separate them; one per document.
 * The three are interleaved by position, so the held-out tail is a mix of all of them. */
#ifndef FUSEDGPT_CORPUS_H
#define FUSEDGPT_CORPUS_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

/* Bumped whenever the recipe changes what text comes out, so caches keyed on it are rebuilt. */
#define CORPUS_DEFAULT_NAME "default-v1"
/* The standard sources plus Debian main's dict-wn, dict-foldoc, dict-jargon, dict-devil and
 * dict-vera (~72 MB): enough repeated pairs for a 262144-token vocabulary, which the standard
 * ~37 MB is not (it stops near 187.5k tokens). Taken for any -v above what the standard one
 * supports (data/prepare.h), or asked for: `./train prepare --default-corpus --corpus extended`. */
#define CORPUS_EXTENDED_NAME "extended-v1"
#define CORPUS_SYNTHETIC_NAME "synthetic-v1"
#define CORPUS_SYNTHETIC_BYTES (36u << 20)

/* 0 when cache_dir can hold the corpus; -1 with a one-line message when it cannot: the fetch
 * commands quote it with single quotes, so it may hold none. Checked before anything is created. */
int corpus_check_cache_dir(const char *cache_dir, char *err);

/* Makes sure <cache_dir>/corpus/<name>.txt exists (the standard recipe, or with extended = 1 the
 * extended one), fetching and cleaning on first use, and writes its path into path (cap bytes) and
 * the corpus name into name (32 bytes). Falls back to the synthetic corpus, saying so in one line
 * on stderr, when the packages cannot be fetched. Returns 0, or -1 with a one-line message in err
 * (ERR_LEN bytes). */
int corpus_default(const char *cache_dir, int extended, char *path, size_t cap, char *name, char *err);

/* Cleaners, one source each; exposed for tests. Each appends to *out (a growable buffer). */
typedef struct {
    char *data;
    size_t len, cap;
    int oom;
} TextBuf;
void textbuf_append(TextBuf *b, const char *s, size_t n);
void textbuf_free(TextBuf *b);

/* One GCIDE entry (as the dictd index delimits it) -> cleaned paragraphs, one per line. */
void corpus_clean_gcide_entry(const char *entry, size_t n, TextBuf *out);
/* `bible -f` output ("Ge1:1 In the beginning...") -> verses without references, one chapter per
 * document, documents separated by "<|endoftext|>". */
void corpus_clean_bible(const char *text, size_t n, TextBuf *out);
/* A fortune file -> one document per fortune, separated by "<|endoftext|>". */
void corpus_clean_fortunes(const char *text, size_t n, TextBuf *out);
/* Makes the text valid UTF-8: stray Windows-1252/Latin-1 bytes become their characters, other
 * invalid bytes are dropped. */
void corpus_fix_utf8(TextBuf *b);

/* How many of s[0..n) are bytes outside valid UTF-8 sequences (stray, truncated, overlong, surrogate),
 * the first one's offset in *first when there is one. */
size_t corpus_invalid_utf8(const char *s, size_t n, size_t *first);
/* bytes of synthetic English-like text from a seeded grammar over our own word list and a large
 * set of pseudo-words (so large vocabularies stay reachable); deterministic in seed. */
void corpus_synthetic(uint64_t seed, size_t bytes, TextBuf *out);

#endif
