/* data/prepare_stream.c - `./train prepare --tokenizer FILE --shard-tokens N FILE...`: text of any
 * size, through a given tokenizer, into numbered shards of N tokens (train_000000.bin, ... and
 * val_000000.bin, ...) in memory bounded by a block of text and its ids, not by the text.
 *
 * The files are one text, one document per file joined by the tokenizer's separator, as
 * data/prepare.c joins them. The text reaches the encoder in blocks that end at their last document
 * boundary, else at a place where the tokenizer's pieces are sure to end (tokenizer_cut_near); each
 * block is encoded alone as a part of the whole (tokenizer.h's TOKENIZER_MID_*), so the shards hold
 * the ids that prepare gives the text whole. Where validation starts is settled before any of it is
 * encoded, by a pass over the text's last 2 x --val-fraction (the files' sizes at the start give
 * the joined text's length), with prepare's whole-text rule: the first document boundary at or
 * after the place that leaves validation its share, else the last one before it within the share,
 * else (an imported tokenizer) the place nearest it, looked for within 64 MiB, where the
 * tokenizer's pieces are sure to end, else the next line's start. Every shard holds N tokens but
 * the last of each kind, which holds 2 to N + 1 (a shard of one token has no target). */
#include "data/prepare_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/err.h"
#include "common/paths.h"
#include "data/shard.h"

/* A block of text holds about a shard's ids (4 bytes of text a token is generous), within bounds
 * that keep the encoder's threads busy and the memory small. */
#define BLOCK_MIN ((size_t)64 << 10)
#define BLOCK_MAX ((size_t)64 << 20)
/* How far from the validation target a place to cut inside a document is looked for. */
#define CUT_WINDOW ((uint64_t)64 << 20)
/* Six digits name a shard, and the byte order of the names is their order. */
#define MAX_SHARDS 1000000ull
#define PROGRESS_EVERY_S 10.0

/* ---- the files as one text ---- */

typedef struct {
    const char *const *files;
    int n_files;
    int next;         /* the next file to open */
    int cur;          /* the file being read; -1 between files */
    int sep_given;    /* the separator before files[next] is given */
    FILE *f;
    uint64_t in_file; /* bytes read of the current file */
    const char *sep;
    size_t sep_len, sep_left; /* the separator's bytes still to give */
    uint64_t pos;             /* bytes of the joined text given so far */
    uint64_t *start, *end;    /* each file's bytes in the joined text; end UINT64_MAX while unread */
} Joined;

/* Up to `want` bytes of the joined text into dst; *got < want only at its end. -1 + message. */
static int joined_read(Joined *j, char *dst, size_t want, size_t *got, char *err) {
    *got = 0;
    while (*got < want) {
        if (j->sep_left) {
            const size_t k = j->sep_left < want - *got ? j->sep_left : want - *got;
            memcpy(dst + *got, j->sep + (j->sep_len - j->sep_left), k);
            j->sep_left -= k;
            *got += k;
            j->pos += k;
            continue;
        }
        if (!j->f) {
            if (j->next == j->n_files) break;
            if (j->next > 0 && !j->sep_given) { /* one document per file */
                j->sep_given = 1;
                j->sep_left = j->sep_len;
                continue;
            }
            if (!(j->f = prepare_open_text(j->files[j->next], err))) return -1;
            j->cur = j->next++;
            j->sep_given = 0;
            j->start[j->cur] = j->pos;
            j->in_file = 0;
        }
        const size_t n = fread(dst + *got, 1, want - *got, j->f);
        const char *zero = memchr(dst + *got, 0, n);
        if (zero) {
            prepare_zero_byte_err(j->files[j->cur], j->in_file + (uint64_t)(zero - (dst + *got)), err);
            return -1;
        }
        *got += n;
        j->pos += n;
        j->in_file += n;
        if (n == 0) {
            const int bad = ferror(j->f);
            fclose(j->f);
            j->f = NULL;
            if (bad) {
                fgpt_set_err(err, "cannot read text file %s (I/O error)", j->files[j->cur]);
                return -1;
            }
            j->end[j->cur] = j->pos;
            j->cur = -1;
        }
    }
    return 0;
}

/* The file that holds byte `at` of the joined text, or the last one opened before it. */
static int file_at(const Joined *j, uint64_t at) {
    int lo = 0, hi = j->next - 1;
    while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        if (j->start[mid] <= at) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

/* Makes the next joined_read give the joined text from byte `at`; size[k] is file k's size, from
 * which the files' places are known. -1 + message. */
static int joined_seek(Joined *j, const uint64_t *size, uint64_t at, char *err) {
    uint64_t start = 0;
    int k = 0;
    while (k + 1 < j->n_files && start + size[k] + j->sep_len <= at) start += size[k++] + j->sep_len;
    j->pos = at;
    if (at >= start + size[k] && k + 1 < j->n_files) { /* inside the separator after file k */
        j->next = k + 1;
        j->sep_given = 1;
        j->sep_left = (size_t)(start + size[k] + j->sep_len - at);
        return 0;
    }
    j->next = k + 1;
    j->sep_given = 0;
    j->sep_left = 0;
    if (!(j->f = prepare_open_text(j->files[k], err))) return -1;
    j->cur = k;
    j->start[k] = start;
    j->in_file = at - start;
    if (fseeko(j->f, (off_t)j->in_file, SEEK_SET) != 0) {
        fgpt_set_err(err, "cannot read text file %s: %s", j->files[k], strerror(errno));
        return -1;
    }
    return 0;
}

/* ---- numbered shards ---- */

typedef struct {
    const char *dir;
    const char *kind; /* "train" or "val" */
    uint64_t per_shard;
    uint32_t vocab;
    uint64_t fingerprint;
    uint32_t flags;    /* SHARD_DOCUMENTS or 0 */
    ShardWriter *w;    /* the shard being written, under its staged name */
    uint64_t in_shard; /* its tokens so far */
    uint64_t shards;   /* shards closed */
    uint64_t tokens;   /* tokens given, the held one included */
    uint32_t held;     /* the last token given, not yet written: the last shard takes it, so that no shard
                        * holds one token alone */
    int has_held;
} ShardSink;

static int staged_name(char *dst, const ShardSink *s, uint64_t index, int staged, char *err) {
    char name[64];
    snprintf(name, sizeof name, "%s_%06llu.bin%s", s->kind, (unsigned long long)index, staged ? ".new" : "");
    return prepare_path_join(dst, s->dir, name, err);
}

static int sink_rotate(ShardSink *s, char *err) {
    if (s->w) {
        const int rc = shard_writer_close(s->w, err);
        s->w = NULL;
        if (rc != 0) return -1;
        s->shards++;
        s->in_shard = 0;
    }
    if (s->shards + 1 > MAX_SHARDS) {
        fgpt_set_err(err, "the text makes more than %llu %s shards of %llu tokens: raise --shard-tokens",
                     MAX_SHARDS, s->kind, (unsigned long long)s->per_shard);
        return -1;
    }
    char path[PREPARE_PATH_LEN];
    if (staged_name(path, s, s->shards, 1, err) != 0) return -1;
    s->w = shard_writer_open_flagged(path, s->vocab, s->fingerprint, s->flags, err);
    return s->w ? 0 : -1;
}

static int sink_emit(ShardSink *s, const uint32_t *ids, size_t n, char *err) {
    while (n) {
        if ((!s->w || s->in_shard == s->per_shard) && sink_rotate(s, err) != 0) return -1;
        const uint64_t room = s->per_shard - s->in_shard;
        const size_t take = n < room ? n : (size_t)room;
        if (shard_writer_append(s->w, ids, take, err) != 0) return -1;
        s->in_shard += take;
        ids += take;
        n -= take;
    }
    return 0;
}

static int sink_add(ShardSink *s, const uint32_t *ids, size_t n, char *err) {
    if (n == 0) return 0;
    s->tokens += n;
    if (s->has_held && sink_emit(s, &s->held, 1, err) != 0) return -1;
    if (sink_emit(s, ids, n - 1, err) != 0) return -1;
    s->held = ids[n - 1];
    s->has_held = 1;
    return 0;
}

/* The held token goes into the last shard, full or not; then it is closed. */
static int sink_finish(ShardSink *s, char *err) {
    if (s->has_held) {
        s->has_held = 0;
        if (!s->w && sink_rotate(s, err) != 0) return -1;
        if (shard_writer_append(s->w, &s->held, 1, err) != 0) return -1;
    }
    if (!s->w) return 0;
    const int rc = shard_writer_close(s->w, err);
    s->w = NULL;
    if (rc == 0) s->shards++;
    return rc;
}

/* Takes back what this prepare staged. */
static void sink_abort(ShardSink *s) {
    char path[PREPARE_PATH_LEN], err[ERR_LEN];
    if (s->w) shard_writer_abort(s->w);
    s->w = NULL;
    for (uint64_t i = 0; i < s->shards; i++)
        if (staged_name(path, s, i, 1, err) == 0) unlink(path);
}

static int sink_install(const ShardSink *s, char *err) {
    char staged[PREPARE_PATH_LEN], final[PREPARE_PATH_LEN];
    for (uint64_t i = 0; i < s->shards; i++) {
        if (staged_name(staged, s, i, 1, err) != 0 || staged_name(final, s, i, 0, err) != 0) return -1;
        if (rename(staged, final) != 0) {
            fgpt_set_err(err, "cannot move %s to %s: %s (check the folder is writable)", staged, final,
                         strerror(errno));
            return -1;
        }
    }
    return 0;
}

/* ---- the stream ---- */

typedef struct {
    const PrepareOptions *opt;
    const Tokenizer *tok;
    int imported;
    Joined text;
    uint64_t *stray, *first_stray; /* each file's bytes outside UTF-8 */
    int starts_document;           /* the next piece starts a document (--documents marks its first id) */
} Stream;

/* Checks each file's bytes in the piece [at, at + len) of the joined text, then encodes it (last:
 * it ends the text) and gives its ids to the sink. */
static int encode_piece(Stream *st, ShardSink *sink, const char *text, size_t len, uint64_t at, int last, char *err) {
    if (len == 0) return 0;
    const Joined *j = &st->text;
    for (int k = file_at(j, at); k < j->next && j->start[k] < at + len; k++) {
        const uint64_t from = at > j->start[k] ? at : j->start[k];
        const uint64_t to = at + len < j->end[k] ? at + len : j->end[k];
        if (from < to && prepare_check_file_text(st->tok, j->files[k], text + (from - at), (size_t)(to - from),
                                                 from - j->start[k], &st->stray[k], &st->first_stray[k], err) != 0)
            return -1;
    }
    /* an imported tokenizer's part goes on from the text before it and stops before the text's end:
     * no BOS, no prefix space, no end-of-text token there (ours adds none) */
    int flags = 0;
    if (st->imported) flags = (at > 0 ? TOKENIZER_MID_START : 0) | (last ? 0 : TOKENIZER_MID_END);
    int marks = 0;
    if (st->opt->documents) marks = PREPARE_MARK_DOCUMENTS | (st->starts_document ? PREPARE_STARTS_DOCUMENT : 0);
    /* after our separator a document starts; an imported tokenizer's piece starts at its separator,
     * whose ids the piece's own marks place */
    size_t sep_len;
    const char *sep = tokenizer_eot_text(st->tok, &sep_len);
    st->starts_document = !st->imported && len >= sep_len && memcmp(text + len - sep_len, sep, sep_len) == 0;
    uint32_t *ids;
    size_t n;
    if (prepare_encode_part(st->tok, text, len, flags, marks, st->opt->threads, &ids, &n, err) != 0) return -1;
    const int rc = sink_add(sink, ids, n, err);
    free(ids);
    return rc;
}

/* The last document boundary in text[0..len) that leaves a non-empty part on either side: an
 * imported tokenizer's part starts at the separator (its post-processor's tokens go around it),
 * ours after it. 0 when there is none. */
static size_t last_boundary(const char *text, size_t len, const char *sep, size_t sep_len, int imported) {
    /* candidates by the separator's first byte, from the end: [0, n) holds the starts left to try */
    for (size_t n = len >= sep_len ? len - sep_len + 1 : 0; n > 0;) {
        const char *p = memrchr(text, sep[0], n);
        if (!p) break;
        const size_t i = (size_t)(p - text);
        const size_t b = imported ? i : i + sep_len;
        if (memcmp(p, sep, sep_len) == 0 && b > 0 && b < len) return b;
        n = i;
    }
    return 0;
}

/* A second reader of the stream's files, for the pass that finds validation's cut: it keeps the
 * files' places in its own marks (2 x n_files), so that the stream's record stays its own. */
static Joined side_reader(const Joined *text, uint64_t *marks) {
    Joined j = *text;
    j.f = NULL;
    j.cur = -1;
    j.start = marks;
    j.end = marks + text->n_files;
    return j;
}

/* Bytes [at, at + n) of the joined text into dst, through a copy of `side`: *got of them (fewer at
 * its end). -1 + message. */
static int read_joined_at(const Joined *side, const uint64_t *size, uint64_t at, char *dst, size_t n, size_t *got,
                          char *err) {
    Joined j = *side;
    int rc = joined_seek(&j, size, at, err);
    if (rc == 0) rc = joined_read(&j, dst, n, got, err);
    if (j.f) fclose(j.f);
    return rc;
}

/* Where validation starts, in bytes of the joined text (total of them; the target leaves it its
 * share): prepare's whole-text rule (val_cut and prepare_text in data/prepare.c), found by one pass
 * over [target - share, total) that stops at the first boundary after the target. */
static int find_val_cut(const Stream *st, const uint64_t *size, uint64_t total, uint64_t target, uint64_t share,
                        uint64_t *cut, char *err) {
    size_t sep_len;
    const char *sep = tokenizer_eot_text(st->tok, &sep_len);
    const uint64_t lo = target > share ? target - share : 0; /* validation gets at most twice its share */
    enum { CHUNK = 1 << 20 };
    char *buf = malloc(CHUNK + sep_len);
    uint64_t *marks = calloc(2 * (size_t)st->text.n_files, sizeof *marks);
    if (!buf || !marks) {
        free(buf);
        free(marks);
        fgpt_set_err(err, "out of memory finding where validation starts");
        return -1;
    }
    const Joined side = side_reader(&st->text, marks);
    uint64_t after = UINT64_MAX, before = 0, line = UINT64_MAX; /* boundaries' ends, a line's start */
    uint64_t base = lo > sep_len ? lo - sep_len : 0;          /* buf[0]'s byte */
    size_t keep = 0;                                          /* bytes of the last chunk kept in front */
    Joined j = side;
    int rc = joined_seek(&j, size, base, err);
    while (rc == 0 && after == UINT64_MAX) {
        size_t got;
        if ((rc = joined_read(&j, buf + keep, CHUNK, &got, err)) != 0 || got == 0) break;
        const size_t have = keep + got;
        for (const char *p = buf; (p = memmem(p, have - (size_t)(p - buf), sep, sep_len)); p++) {
            const uint64_t end = base + (uint64_t)(p - buf) + sep_len;
            if (end - sep_len >= target && end < total) {
                after = end;
                break;
            }
            if (end <= target && end >= lo && end > 0) before = end;
        }
        const char *nl = line == UINT64_MAX ? memchr(buf + keep, '\n', got) : NULL;
        for (; nl && line == UINT64_MAX; nl = memchr(nl + 1, '\n', have - (size_t)(nl + 1 - buf)))
            if (base + (uint64_t)(nl - buf) >= target && base + (uint64_t)(nl - buf) + 1 < total)
                line = base + (uint64_t)(nl - buf) + 1;
        keep = have < sep_len - 1 ? have : sep_len - 1; /* a separator may span two chunks */
        memmove(buf, buf + have - keep, keep);
        base += have - keep;
        if (got < CHUNK) break;
    }
    if (j.f) fclose(j.f);
    /* an imported tokenizer's validation part starts at its separator */
    const uint64_t at_sep = st->imported ? sep_len : 0;
    int at_boundary = 1, exact = 1;
    if (rc == 0 && after != UINT64_MAX) *cut = after - at_sep;
    else if (rc == 0 && before) *cut = before - at_sep;
    else if (rc == 0) {
        at_boundary = 0;
        /* the next line's start, else the target at a character's start */
        unsigned char near[4];
        size_t got = 0;
        const uint64_t from = target > 3 ? target - 3 : 0;
        rc = read_joined_at(&side, size, from, (char *)near, (size_t)(target - from + 1), &got, err);
        uint64_t c = target;
        while (rc == 0 && c > from && c - from < got && (near[c - from] & 0xC0) == 0x80) c--;
        *cut = line != UINT64_MAX ? line : c;
        if (rc == 0 && st->imported) { /* where the tokenizer's pieces are sure to end, nearest the target */
            const uint64_t lo_cut = lo > 0 ? lo : 1, hi = total - share / 2;
            const uint64_t w_lo = target > CUT_WINDOW && target - CUT_WINDOW > lo_cut ? target - CUT_WINDOW : lo_cut;
            const uint64_t w_hi = target + CUT_WINDOW < hi ? target + CUT_WINDOW : hi;
            /* two bytes either side: what a cut place's test reads around it */
            const uint64_t w_from = w_lo > 2 ? w_lo - 2 : 0, w_to = w_hi + 3;
            char *win = malloc((size_t)(w_to - w_from));
            size_t wn = 0;
            rc = win ? read_joined_at(&side, size, w_from, win, (size_t)(w_to - w_from), &wn, err) : -1;
            if (!win) fgpt_set_err(err, "out of memory finding where validation starts");
            if (rc == 0 && wn > target - w_from) {
                const size_t hi_in = w_hi - w_from < wn - 1 ? (size_t)(w_hi - w_from) : wn - 1;
                const size_t at = tokenizer_cut_near(st->tok, win, wn, (size_t)(target - w_from),
                                                     (size_t)(w_lo - w_from), hi_in);
                if (at < wn) *cut = w_from + at;
                else exact = 0;
            } else if (rc == 0) {
                exact = 0;
            }
            free(win);
        }
    }
    free(buf);
    free(marks);
    if (rc == 0 && !at_boundary) prepare_note_val_cut(st->opt->val_fraction, *cut, st->imported, exact, sep, sep_len);
    return rc;
}

static size_t block_bytes(uint64_t shard_tokens) {
    const uint64_t b = shard_tokens * 4;
    return b < BLOCK_MIN ? BLOCK_MIN : b > BLOCK_MAX ? BLOCK_MAX : (size_t)b;
}

/* Each file's size (size[k]) and the joined text's bytes: -1 + message for a file that cannot be
 * read. */
static int text_size(const char *const *files, int n_files, size_t sep_len, uint64_t *size, uint64_t *total,
                     char *err) {
    *total = 0;
    for (int k = 0; k < n_files; k++) {
        FILE *f = prepare_open_text(files[k], err);
        struct stat sb;
        if (!f) return -1;
        const int rc = fstat(fileno(f), &sb);
        fclose(f);
        if (rc != 0) {
            fgpt_set_err(err, "cannot read text file %s: %s (check the path)", files[k], strerror(errno));
            return -1;
        }
        size[k] = (uint64_t)sb.st_size;
        *total += size[k] + (k > 0 ? sep_len : 0);
    }
    return 0;
}

/* Reads, encodes and shards the whole text, validation from byte `cut` on; the sinks hold the
 * staged shards after. */
static int run_stream(Stream *st, ShardSink *train, ShardSink *val, uint64_t total, uint64_t cut,
                      const char *out_dir, char *err) {
    const size_t block = block_bytes(st->opt->shard_tokens);
    size_t cap = 2 * block, have = 0, want = block;
    char *buf = malloc(cap);
    if (!buf) {
        fgpt_set_err(err, "out of memory for a block of %zu bytes of text", cap);
        return -1;
    }
    size_t sep_len;
    const char *sep = tokenizer_eot_text(st->tok, &sep_len);
    uint64_t base = 0; /* buf[0]'s byte in the joined text */
    int eof = 0, in_val = 0, rc = 0;
    const double t0 = prepare_seconds();
    double said = t0;
    while (rc == 0) {
        if (want > cap) {
            char *grown = realloc(buf, want);
            if (!grown) {
                fgpt_set_err(err, "out of memory for %zu bytes of text with no place to cut them (a document of no "
                             "line ends?)", want);
                rc = -1;
                break;
            }
            buf = grown;
            cap = want;
        }
        while (!eof && have < want) {
            size_t got;
            if ((rc = joined_read(&st->text, buf + have, want - have, &got, err)) != 0) break;
            have += got;
            eof = have < want;
        }
        if (rc != 0 || have == 0) break;
        want = block;
        size_t end = have;
        if (!in_val && cut - base <= have) { /* training's last piece ends where validation starts */
            end = (size_t)(cut - base);
            rc = encode_piece(st, train, buf, end, base, 0, err);
            in_val = 1;
        } else {
            if (!eof) {
                end = last_boundary(buf, have, sep, sep_len, st->imported);
                if (end == 0) end = tokenizer_cut_near(st->tok, buf, have, have - 1, have / 2, have - 1);
                if (end >= have) { /* no place to cut: read on, twice as much each time */
                    want = 2 * have;
                    continue;
                }
            }
            rc = encode_piece(st, in_val ? val : train, buf, end, base, eof && end == have, err);
        }
        memmove(buf, buf + end, have - end);
        have -= end;
        base += end;
        const double now = prepare_seconds();
        if (rc == 0 && now - said >= PROGRESS_EVERY_S) {
            said = now;
            fprintf(stderr, "prepare: %.1f of %.1f MB, %llu tokens, %.0f s -> %s\n", base / 1e6, total / 1e6,
                    (unsigned long long)(train->tokens + val->tokens), now - t0, out_dir);
        }
    }
    free(buf);
    return rc;
}

/* The set's numbered shards, validation's then training's (sinks[0], sinks[1]): prepare_end_set's
 * install_shards and abort_shards. */
static int install_sinks(void *ctx, char *err) {
    ShardSink **sinks = ctx;
    return sink_install(sinks[0], err) != 0 || sink_install(sinks[1], err) != 0 ? -1 : 0;
}

static void abort_sinks(void *ctx) {
    ShardSink **sinks = ctx;
    sink_abort(sinks[0]);
    sink_abort(sinks[1]);
}

int prepare_stream(const char *const *files, int n_files, const PrepareOptions *opt, Tokenizer *given,
                   const char *out_dir, PreparedData *out, char *err) {
    memset(out, 0, sizeof *out);
    size_t sep_len;
    const char *sep = tokenizer_eot_text(given, &sep_len);
    const int imported = tokenizer_is_imported(given);
    uint64_t total, cut = 0;
    uint64_t *size = malloc((size_t)n_files * sizeof *size);
    if (!size) {
        fgpt_set_err(err, "out of memory for the list of %d files", n_files);
        return -1;
    }
    if (text_size(files, n_files, sep_len, size, &total, err) != 0) {
        free(size);
        return -1;
    }
    if (total == 0) {
        free(size);
        fgpt_set_err(err, "the text is empty (0 bytes): give files that hold text");
        return -1;
    }
    const uint64_t target = (uint64_t)((double)total * (1.0 - opt->val_fraction)), share = total - target;
    if (target >= total) {
        free(size);
        fgpt_set_err(err, "the validation part of the text is empty (%llu bytes in all); give more text or raise "
                     "--val-fraction", (unsigned long long)total);
        return -1;
    }
    SetInProgress set;
    if (prepare_begin_set(out_dir, imported, 1, out, &set, err) != 0) {
        free(size);
        return -1;
    }
    out->vocab_requested = out->vocab_reached = tokenizer_vocab_size(given);

    Stream st = {opt, given, imported, {files, n_files, 0, -1, 0, NULL, 0, sep, sep_len, 0, 0, NULL, NULL}, NULL,
                 NULL, 1};
    st.text.start = calloc((size_t)n_files, sizeof *st.text.start);
    st.text.end = malloc((size_t)n_files * sizeof *st.text.end);
    st.stray = calloc((size_t)n_files, sizeof *st.stray);
    st.first_stray = calloc((size_t)n_files, sizeof *st.first_stray);
    for (int k = 0; st.text.end && k < n_files; k++) st.text.end[k] = UINT64_MAX;
    ShardSink train = {out_dir, "train", opt->shard_tokens, out->vocab_reached, tokenizer_fingerprint(given),
                       opt->documents ? SHARD_DOCUMENTS : 0, NULL, 0, 0, 0, 0, 0};
    ShardSink val = train;
    val.kind = "val";
    ShardSink *sinks[2] = {&val, &train};
    set.install_shards = install_sinks, set.abort_shards = abort_sinks, set.shards = sinks;
    int rc = 0;
    if (!st.text.start || !st.text.end || !st.stray || !st.first_stray) {
        fgpt_set_err(err, "out of memory for the list of %d files", n_files);
        rc = -1;
    }
    const double t0 = prepare_seconds();
    if (rc == 0) rc = find_val_cut(&st, size, total, target, share, &cut, err);
    if (rc == 0) {
        fprintf(stderr, "prepare: encoding %.1f MB (train) + %.2f MB (validation) in shards of %llu tokens\n",
                cut / 1e6, (total - cut) / 1e6, (unsigned long long)opt->shard_tokens);
        rc = run_stream(&st, &train, &val, total, cut, out_dir, err);
    }
    if (st.text.f) fclose(st.text.f);
    if (rc == 0) rc = sink_finish(&train, err);
    if (rc == 0) rc = sink_finish(&val, err);
    if (rc == 0)
        fprintf(stderr, "prepare: %llu train tokens in %llu shard(s) + %llu validation tokens in %llu, %.3f tokens/byte, "
                "in %.1f s -> %s\n", (unsigned long long)train.tokens, (unsigned long long)train.shards,
                (unsigned long long)val.tokens, (unsigned long long)val.shards,
                (double)(train.tokens + val.tokens) / (double)total, prepare_seconds() - t0, out_dir);
    /* a shard of one token holds no target, and the trainer and eval refuse it */
    if (rc == 0 && train.tokens < 2) {
        fgpt_set_err(err, "the training part of the text holds %llu token(s), and a target needs 2 (%llu bytes in "
                     "all); give more text", (unsigned long long)train.tokens, (unsigned long long)total);
        rc = -1;
    }
    if (rc == 0 && val.tokens < 2) {
        fgpt_set_err(err, "the validation part of the text holds %llu token(s), and a target needs 2 (%llu bytes in "
                     "all); give more text or raise --val-fraction", (unsigned long long)val.tokens,
                     (unsigned long long)total);
        rc = -1;
    }
    set.n_train = train.shards, set.n_val = val.shards;
    rc = prepare_end_set(&set, rc, given, err);
    for (int k = 0; rc == 0 && k < n_files; k++) prepare_note_stray_bytes(files[k], st.stray[k], st.first_stray[k]);
    free(st.text.start);
    free(st.text.end);
    free(st.stray);
    free(st.first_stray);
    free(size);
    return rc;
}
