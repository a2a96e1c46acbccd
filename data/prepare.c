/* data/prepare.c - text -> tokenizer + train/val token shards (`./train prepare`), and the default
 * corpus prepared on first use and cached (prepare_default_corpus).
 *
 * Text files are joined into one text, one document per file, with "<|endoftext|>" between them
 * ("<|endoftext|>" already inside a file also separates documents); an imported tokenizer's
 * separator takes its place, and each document gets its post-processor's tokens (Llama 3's BOS).
 * The tokenizer is trained on all of it; the last ~val_fraction of the bytes, starting at a
 * document boundary, becomes the validation shard. Shards are written through data/shard.h with the vocabulary size the tokenizer
 * reached (which can be below the one asked for on a small corpus); with --documents they mark each
 * document's first token (SHARD_DOCUMENTS, wrap_documents). With --shard-tokens the text
 * is streamed instead (data/prepare_stream.c); data/prepare_internal.h is what the two share. */
#include "data/prepare.h"
#include "data/prepare_internal.h"
#include "common/cli_word.h"
#include "common/err.h"
#include "common/paths.h"
#include "common/repeated_flags.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <dirent.h>
#include <time.h>

#include "data/corpus.h"
#include "data/shard.h"
#include "tokenizer/tokenizer.h"

#define PREPARE_DEFAULT_VOCAB 50257u
#define PREPARE_DEFAULT_VAL 0.01

double prepare_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int prepare_path_join(char *dst, const char *dir, const char *name, char *err) {
    const size_t n = strlen(dir);
    const char *slash = n && dir[n - 1] == '/' ? "" : "/"; /* -o mydata/ gives mydata/train.bin */
    if ((size_t)snprintf(dst, PREPARE_PATH_LEN, "%s%s%s", dir, slash, name) >= PREPARE_PATH_LEN - PREPARE_STAGING_ROOM) {
        fgpt_set_err(err, "path %s/%s is longer than %d bytes; use a shorter folder", dir, name,
                     PREPARE_PATH_LEN - PREPARE_STAGING_ROOM - 1);
        return -1;
    }
    return 0;
}

int prepare_make_dirs(const char *path, char *err) {
    if (make_dirs(path) != 0) {
        fgpt_set_err(err, "cannot create folder %s: %s (choose a writable place)", path, strerror(errno));
        return -1;
    }
    return 0;
}

/* A folder this prepare made and then failed to fill: its lock goes, and the folder if nothing else
 * is in it (rmdir refuses otherwise), so that a failed run leaves nothing behind. */
void prepare_remove_made_folder(const char *dir) {
    char lock[PREPARE_PATH_LEN + 8];
    snprintf(lock, sizeof lock, "%s/.lock", dir);
    unlink(lock);
    rmdir(dir);
}

/* Refuses an output folder that cannot be made or written into, before the text is read or a
 * tokenizer trained: the nearest part of the path that exists must be a writable folder. */
int prepare_check_out_dir(const char *dir, char *err) {
    char path[PREPARE_PATH_LEN];
    if ((size_t)snprintf(path, sizeof path, "%s", dir) >= sizeof path) {
        fgpt_set_err(err, "prepare -o: the path is longer than %d bytes; use a shorter folder", PREPARE_PATH_LEN - 1);
        return -1;
    }
    struct stat sb;
    while (stat(path, &sb) != 0) {
        if (errno != ENOENT && errno != ENOTDIR) {
            fgpt_set_err(err, "prepare -o %s: cannot reach %s: %s (choose another folder)", dir, path, strerror(errno));
            return -1;
        }
        char *slash = strrchr(path, '/');
        if (!slash) snprintf(path, sizeof path, ".");
        else if (slash == path) path[1] = 0; /* "/x" goes up to "/" */
        else *slash = 0;
    }
    if (!S_ISDIR(sb.st_mode)) {
        fgpt_set_err(err, "prepare -o %s: %s is a file, not a folder (pass the folder that is to hold tokenizer.bin, "
                     "train.bin and val.bin)", dir, path);
        return -1;
    }
    if (access(path, W_OK | X_OK) != 0) {
        fgpt_set_err(err, "prepare -o %s: cannot write into %s: %s (choose a writable folder)", dir, path,
                     strerror(errno));
        return -1;
    }
    return 0;
}

/* Whether two files hold the same bytes (0 when either cannot be read). */
static int same_file_bytes(const char *a, const char *b) {
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    int same = fa && fb;
    char ba[1 << 14], bb[1 << 14];
    while (same) {
        const size_t na = fread(ba, 1, sizeof ba, fa), nb = fread(bb, 1, sizeof bb, fb);
        same = na == nb && memcmp(ba, bb, na) == 0 && !ferror(fa) && !ferror(fb);
        if (na == 0) break;
    }
    if (fa) fclose(fa);
    if (fb) fclose(fb);
    return same;
}

/* A numbered shard's name, "<train|val>_<six digits>.bin", staged as ".new" and written as
 * ".new.tmp" (data/shard.h's writer). 1 when name is one, with its kind, index and stage. */
typedef struct {
    int val;        /* val_ rather than train_ */
    uint64_t index; /* its number */
    int staged;     /* .new or .new.tmp */
} NumberedName;

static int numbered_name(const char *name, NumberedName *n) {
    const char *p = name;
    if (!strncmp(p, "train_", 6)) n->val = 0, p += 6;
    else if (!strncmp(p, "val_", 4)) n->val = 1, p += 4;
    else return 0;
    if (strspn(p, "0123456789") != 6) return 0;
    n->index = strtoull(p, NULL, 10);
    p += 6;
    if (!strcmp(p, ".bin")) n->staged = 0;
    else if (!strcmp(p, ".bin.new") || !strcmp(p, ".bin.new.tmp")) n->staged = 1;
    else return 0;
    return 1;
}

/* The numbered shards' names in dir, by a callback (name, what it is); stops at a callback's -1. */
static int each_numbered(const char *dir, int (*fn)(const char *dir, const char *name, const NumberedName *n,
                                                    void *ctx), void *ctx) {
    DIR *d = opendir(dir);
    if (!d) return 0; /* a folder not made yet holds none */
    int rc = 0;
    for (struct dirent *e; rc == 0 && (e = readdir(d));) {
        NumberedName n;
        if (numbered_name(e->d_name, &n)) rc = fn(dir, e->d_name, &n, ctx);
    }
    closedir(d);
    return rc;
}

/* One name prepare's set writes or replaces must be free, an empty file, or a regular file of
 * prepare's kind: a shard, one of ours (*our_set then says so); the tokenizer, one of an earlier
 * prepare's set (our_set) or the very file given as --tokenizer (`given`). */
static int check_one_name(const char *dir, const char *name, const char *what, const char *given, int *our_set,
                          char *err) {
    const int shard = !strcmp(what, "shard");
    char path[PREPARE_PATH_LEN], staged[PREPARE_PATH_LEN + 8];
    if (prepare_path_join(path, dir, name, err) != 0) return -1;
    struct stat sb;
    /* the name each is written under first: a file there is a stopped prepare's, to overwrite */
    snprintf(staged, sizeof staged, "%s.new", path);
    if (lstat(staged, &sb) == 0 && !S_ISREG(sb.st_mode)) {
        fgpt_set_err(err, "prepare -o %s: %s is %s, where prepare stages its %s (move it, or pass another -o)", dir,
                     staged, S_ISDIR(sb.st_mode) ? "a folder" : "no regular file", what);
        return -1;
    }
    if (stat(path, &sb) != 0) {
        if (errno == ENOENT) return 0;
        fgpt_set_err(err, "prepare -o %s: cannot check %s: %s (move it, or pass another -o)", dir, path,
                     strerror(errno));
        return -1;
    }
    if (!S_ISREG(sb.st_mode)) {
        fgpt_set_err(err, "prepare -o %s: %s is %s, where prepare writes its %s (move it, or pass another -o)", dir,
                     path, S_ISDIR(sb.st_mode) ? "a folder" : "no regular file (a pipe, device or socket)", what);
        return -1;
    }
    if (sb.st_size == 0) return 0;
    if (!shard) {
        if (*our_set || (given && same_file_bytes(path, given))) return 0;
        fgpt_set_err(err, "prepare -o %s: %s is not the %s of an earlier prepare there (no shard of fusedgpt's "
                     "beside it), and prepare would replace it with %s (move it, or pass another -o)", dir, path, what,
                     !strcmp(what, "tokenizer") ? given ? given : "the one it trains" : "its own or remove it");
        return -1;
    }
    FILE *f = fopen(path, "rb");
    unsigned char head[8];
    const size_t got = f ? fread(head, 1, sizeof head, f) : 0;
    if (!f) {
        fgpt_set_err(err, "prepare -o %s: cannot read %s: %s (move it, or pass another -o)", dir, path,
                     strerror(errno));
        return -1;
    }
    fclose(f);
    if (got == sizeof head && memcmp(head, SHARD_MAGIC, 8) == 0) {
        *our_set = 1;
        return 0;
    }
    int32_t magic = 0;
    if (got >= 4) memcpy(&magic, head, 4);
    fgpt_set_err(err, "prepare -o %s: %s holds %s, which prepare's set would replace (move it, or pass another -o)",
                 dir, path, magic == LLMC_MAGIC_GPT2 || magic == LLMC_MAGIC_LLAMA3 ? "an llm.c shard"
                                                                                   : "no token shard of fusedgpt's");
    return -1;
}

typedef struct {
    int *our_set;
    char *err;
} NumberedCheck;

static int check_numbered(const char *dir, const char *name, const NumberedName *n, void *ctx) {
    NumberedCheck *c = ctx;
    if (!n->staged) return check_one_name(dir, name, "shard", NULL, c->our_set, c->err);
    char path[PREPARE_PATH_LEN];
    struct stat sb;
    if (prepare_path_join(path, dir, name, c->err) != 0) return -1;
    if (lstat(path, &sb) == 0 && !S_ISREG(sb.st_mode)) {
        fgpt_set_err(c->err, "prepare -o %s: %s is %s, where prepare stages its shards (move it, or pass another -o)",
                     dir, path, S_ISDIR(sb.st_mode) ? "a folder" : "no regular file");
        return -1;
    }
    return 0;
}

/* The files prepare writes replace files of those names in -o, and those it removes once the new
 * set is in (data/prepare_internal.h) must be an earlier set's, so each name must pass
 * check_one_name. Anything else there (another tool's data or a model's own tokenizer under a
 * common name, a folder, a pipe) is refused before any work, rather than overwritten, or found only
 * at the renames with part of the new set in place. A tokenizer of the other kind (other_name) must
 * be an earlier set's too: a checkpoint's or a model folder's tokenizer.json is never removed. */
/* A name the printed patterns 'DIR/train_*.bin' and 'DIR/val_*.bin' would match that is no
 * numbered shard's (train_old.bin): training would read it as part of the set. */
static int check_pattern_strays(const char *dir, char *err) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    int rc = 0;
    for (struct dirent *e; rc == 0 && (e = readdir(d));) {
        NumberedName n;
        const int val = fnmatch("val_*.bin", e->d_name, 0) == 0;
        if ((val || fnmatch("train_*.bin", e->d_name, 0) == 0) && !numbered_name(e->d_name, &n)) {
            char path[PREPARE_PATH_LEN];
            if (prepare_path_join(path, dir, e->d_name, err) == 0)
                fgpt_set_err(err, "prepare -o %s: %s is no numbered shard, but the pattern of the %s shards that "
                             "training takes ('%s_*.bin' there) would read it with the new set (move it, or pass "
                             "another -o)", dir, path, val ? "validation" : "training", val ? "val" : "train");
            rc = -1;
        }
    }
    closedir(d);
    return rc;
}

int prepare_check_replaceable(const char *dir, int numbered_set, const char *tokenizer_name, const char *other_name,
                              const char *given, char *err) {
    int our_set = 0; /* a shard there is one of ours */
    NumberedCheck numbered = {&our_set, err};
    if (check_one_name(dir, "train.bin", "shard", NULL, &our_set, err) != 0 ||
        check_one_name(dir, "val.bin", "shard", NULL, &our_set, err) != 0 ||
        each_numbered(dir, check_numbered, &numbered) != 0 ||
        check_one_name(dir, tokenizer_name, "tokenizer", given, &our_set, err) != 0 ||
        (numbered_set && check_pattern_strays(dir, err) != 0))
        return -1;
    /* the tokenizer's own files: an earlier set's, or those beside the given tokenizer (-o is its
     * folder), which the new set writes back unchanged */
    for (int k = 0; k < 2; k++) {
        char beside[PREPARE_PATH_LEN];
        const char *slash = given ? strrchr(given, '/') : NULL;
        snprintf(beside, sizeof beside, "%.*s/%s", slash ? (int)(slash - given) : 1, slash ? given : ".",
                 tokenizer_file_names[k]);
        if (check_one_name(dir, tokenizer_file_names[k], tokenizer_file_roles[k], given ? beside : NULL, &our_set,
                           err) != 0)
            return -1;
    }
    char other[PREPARE_PATH_LEN];
    struct stat sb;
    if (prepare_path_join(other, dir, other_name, err) != 0) return -1;
    if (!our_set && lstat(other, &sb) == 0) {
        fgpt_set_err(err, "prepare -o %s: %s is not the tokenizer of an earlier prepare there (no shard of fusedgpt's "
                     "beside it), and prepare's set would sit beside it with %s (move it, or pass another -o)", dir,
                     other, tokenizer_name);
        return -1;
    }
    return 0;
}

typedef struct {
    uint64_t keep[2]; /* numbered shards of each kind the new set holds */
    int removed, failed;
    char first_failed[PREPARE_PATH_LEN];
} EarlierSet;

static void remove_earlier_file(const char *path, EarlierSet *e) {
    if (unlink(path) == 0) e->removed++;
    else if (errno != ENOENT && e->failed++ == 0) snprintf(e->first_failed, sizeof e->first_failed, "%s", path);
}

static int remove_numbered(const char *dir, const char *name, const NumberedName *n, void *ctx) {
    EarlierSet *e = ctx;
    char path[PREPARE_PATH_LEN];
    char err[ERR_LEN];
    if ((n->staged || n->index >= e->keep[n->val]) && prepare_path_join(path, dir, name, err) == 0)
        remove_earlier_file(path, e);
    return 0;
}

void prepare_remove_earlier_set(const char *dir, int numbered, uint64_t n_train, uint64_t n_val,
                                const char *other_name, const char *tokenizer_path) {
    EarlierSet e = {{numbered ? n_train : 0, numbered ? n_val : 0}, 0, 0, ""};
    char path[PREPARE_PATH_LEN], err[ERR_LEN];
    each_numbered(dir, remove_numbered, &e);
    for (int k = 0; numbered && k < 2; k++)
        if (prepare_path_join(path, dir, k ? "val.bin" : "train.bin", err) == 0) remove_earlier_file(path, &e);
    if (e.removed)
        fprintf(stderr, "prepare: removed %d shard file(s) of an earlier set from %s\n", e.removed, dir);
    if (e.failed)
        fprintf(stderr, "prepare: note: cannot remove %d shard file(s) of an earlier set (the first: %s): delete "
                "them, as they are not the new set's\n", e.failed, e.first_failed);
    /* an earlier set's tokenizer of the other kind would sit beside shards it did not make */
    if (prepare_path_join(path, dir, other_name, err) == 0 && access(path, F_OK) == 0) {
        if (unlink(path) == 0)
            fprintf(stderr, "prepare: removed %s, the earlier set's tokenizer (the new shards are %s's)\n", path,
                    tokenizer_path);
        else
            fprintf(stderr, "prepare: note: cannot remove %s, the earlier set's tokenizer (%s): the new shards are %s's\n",
                    path, strerror(errno), tokenizer_path);
    }
}

FILE *prepare_open_text(const char *path, char *err) {
    char why[ERR_LEN];
    FILE *f = open_regular(path, why);
    if (f) return f;
    if (why[0])
        fgpt_set_err(err, "%s", why);
    else if (errno == EISDIR)
        fgpt_set_err(err, "%s is a folder, not a text file: pass the files in it (e.g. %s/*.txt)", path, path);
    else
        fgpt_set_err(err, "cannot open text file %s: %s (check the path)", path, strerror(errno));
    return NULL;
}

void prepare_zero_byte_err(const char *path, uint64_t at, char *err) {
    fgpt_set_err(err, "%s holds a zero byte (at byte %llu): it is not UTF-8 text (a binary file, or UTF-16: convert it "
                 "to UTF-8)", path, (unsigned long long)at);
}

/* Appends a file to *buf; -1 + message when it cannot be read, or, with `text_only`, as soon as a
 * zero byte is read: no UTF-8 text holds one, so it is a binary file (read no further: it may be
 * larger than memory) or UTF-16 text. */
static int append_file(const char *path, int text_only, char **buf, size_t *len, size_t *cap, char *err) {
    const size_t start = *len;
    FILE *f = prepare_open_text(path, err);
    if (!f) return -1;
    for (;;) {
        if (*cap - *len < (1 << 16)) {
            size_t c = *cap ? 2 * *cap : 1 << 20;
            char *b = realloc(*buf, c);
            if (!b) {
                fclose(f);
                fgpt_set_err(err, "out of memory reading %s; prepare fewer or smaller files", path);
                return -1;
            }
            *buf = b;
            *cap = c;
        }
        size_t got = fread(*buf + *len, 1, *cap - *len, f);
        const char *zero = text_only ? memchr(*buf + *len, 0, got) : NULL;
        if (zero) {
            fclose(f);
            prepare_zero_byte_err(path, (uint64_t)(zero - (*buf + start)), err);
            return -1;
        }
        *len += got;
        if (got == 0) break;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        fgpt_set_err(err, "cannot read text file %s (I/O error)", path);
        return -1;
    }
    return 0;
}

int prepare_check_file_text(const Tokenizer *given, const char *path, const char *text, size_t len, uint64_t offset,
                            uint64_t *stray, uint64_t *first_stray, char *err) {
    char terr[ERR_LEN];
    if (given && tokenizer_check_text(given, text, len, (size_t)offset, terr) != 0) {
        fgpt_set_err(err, "%s: %s", path, terr);
        return -1;
    }
    size_t first = 0;
    const size_t bad = corpus_invalid_utf8(text, len, &first);
    if (bad && *stray == 0) *first_stray = offset + first;
    *stray += bad;
    return 0;
}

/* a few stray bytes are common in real text (Windows-1252 quotes) and train as bytes: named, not refused */
void prepare_note_stray_bytes(const char *path, uint64_t stray, uint64_t first_stray) {
    if (stray)
        fprintf(stderr, "note: %s holds %llu byte(s) outside UTF-8 (the first at byte %llu): they are tokenized as "
                "bytes, and samples print them as they are (convert the file to UTF-8 to avoid it)\n", path,
                (unsigned long long)stray, (unsigned long long)first_stray);
}

/* A file the user gave as text, checked against the given tokenizer's normalizer. -1 + message. */
static int append_text_file(const char *path, const Tokenizer *given, char **buf, size_t *len, size_t *cap,
                            char *err) {
    const size_t start = *len;
    uint64_t stray = 0, first = 0;
    if (append_file(path, 1, buf, len, cap, err) != 0 ||
        prepare_check_file_text(given, path, *buf + start, *len - start, 0, &stray, &first, err) != 0)
        return -1;
    prepare_note_stray_bytes(path, stray, first);
    return 0;
}

int prepare_lock_out_dir(const char *dir, char *err) {
    const int lock = lock_dir(dir);
    if (lock >= 0) return lock;
    if (errno == EWOULDBLOCK)
        fgpt_set_err(err, "another prepare is writing into %s; wait for it to finish or pass another -o", dir);
    else
        fgpt_set_err(err, "cannot lock %s/.lock: %s (check the folder is writable)", dir, strerror(errno));
    return -1;
}

void prepare_note_val_cut(double fraction, uint64_t cut, int imported, int exact, const char *eot, size_t eot_len) {
    if (exact)
        fprintf(stderr, "prepare: no document boundary near the last %g of the text: validation starts inside the "
                "last document, at byte %llu%s\n", fraction, (unsigned long long)cut,
                imported ? ", where the tokenizer's pieces are sure to end" : "");
    else
        fprintf(stderr, "note: no document boundary near the last %g of the text, and no place near it where this "
                "tokenizer's pieces are sure to end: validation starts at byte %llu, where its first token(s) may "
                "differ from those of the text whole (separate documents with %.*s to cut between them)\n",
                fraction, (unsigned long long)cut, (int)eot_len, eot);
}

/* Byte where validation starts, near the target that leaves `fraction` of the bytes to it: the
 * document boundary (just after the separator `eot`) nearest at or after the target, else the
 * nearest before it; where that would give validation more than twice its share (one long last
 * document: a last file of 37% of the text), a line start at or after the target, else the target
 * itself. *at_boundary tells whether it is a document boundary. */
static size_t val_cut(const char *text, size_t len, double fraction, const char *eot, size_t eot_len,
                      int *at_boundary) {
    size_t target = (size_t)((double)len * (1.0 - fraction));
    const size_t most = 2 * (len - target);
    *at_boundary = 1;
    if (target >= len) return len;
    const char *e = memmem(text + target, len - target, eot, eot_len);
    if (e && (size_t)(e - text) + eot_len < len) return (size_t)(e - text) + eot_len;
    for (size_t i = target; i > 0 && len - i <= most; i--)
        if (i >= eot_len && memcmp(text + i - eot_len, eot, eot_len) == 0) return i;
    *at_boundary = 0;
    const char *nl = memchr(text + target, '\n', len - target);
    if (nl && (size_t)(nl - text) + 1 < len) return (size_t)(nl - text) + 1;
    /* never inside a character: a UTF-8 continuation byte (10xxxxxx) would start validation with a
     * byte the text does not hold alone */
    while (target > 0 && ((unsigned char)text[target] & 0xC0) == 0x80) target--;
    return target;
}

/* Every separator in the text ends one document and starts the next, and each document gets the
 * tokens the tokenizer's post-processor puts around a text, so that its ids are Hugging Face's
 * tokenizer(document)["input_ids"] (Llama 3: <|begin_of_text|> before it; Qwen 2: nothing). The
 * encoder put them around the part (where its ends are a document's: tokenizer.h's flags); here
 * they go on either side of each separator in ids[0..*n), which grows to hold them. Between two
 * documents lies the separator once: not again where the post-processor's tokens already put it
 * there (Gemma's and Llama 2's <bos> is their separator). The post-processor's own tokens at the
 * part's ends (flags: where the encoder put them) are no separators, even where one of them is the
 * separator's id ("<s> $A </s>", "<bos> <bos> $A"). */
static int wrap_documents(const Tokenizer *tok, int flags, int marks, uint32_t **ids, size_t *n, char *err) {
    const uint32_t *before, *after, sep = tokenizer_eot_token(tok);
    const size_t n_before = (size_t)tokenizer_post_tokens(tok, 0, &before);
    const size_t n_after = (size_t)tokenizer_post_tokens(tok, 1, &after);
    const int sep_there = (n_after && after[n_after - 1] == sep) || (n_before && before[0] == sep);
    const size_t each = n_after + n_before + !sep_there; /* the ids one separator becomes */
    /* the next document starts after the ending one's ids: its post-processor's, then the separator
     * unless it is one of theirs (at the next one's head where it is its <bos>) */
    const size_t lead = n_after + !sep_there;
    const int mark = marks & PREPARE_MARK_DOCUMENTS;
    size_t head = flags & TOKENIZER_MID_START ? 0 : n_before, tail = flags & TOKENIZER_MID_END ? 0 : n_after;
    if (head + tail > *n) head = tail = 0; /* cannot be: the encoder put them there */
    const size_t end = *n - tail;          /* separators lie in [head, end) */
    size_t seps = 0;
    for (size_t i = head; i < end; i++) seps += (*ids)[i] == sep;
    /* the part's first id is marked last: a mark must not hide a separator from the tests below */
    const int mark_first = mark && (marks & PREPARE_STARTS_DOCUMENT);
    if (each == 1 || seps == 0) {
        /* a mark never makes a separator (ids are below 2^30), nor hides one from the test */
        for (size_t i = head; mark && i < end; i++)
            if (shard_token_id((*ids)[i]) == sep && i + lead < *n) (*ids)[i + lead] |= SHARD_DOC_START;
        if (mark_first && *n) (*ids)[0] |= SHARD_DOC_START;
        return 0;
    }
    const size_t total = *n + seps * (each - 1);
    uint32_t *grown = realloc(*ids, (total ? total : 1) * sizeof *grown);
    if (!grown) {
        fgpt_set_err(err, "out of memory for %zu tokens; prepare less text at a time", total);
        return -1;
    }
    /* from the back, so each id moves once and is never overwritten before it moves */
    for (size_t i = *n, o = total; i-- > 0;) {
        if (grown[i] != sep || i < head || i >= end) {
            grown[--o] = grown[i];
            continue;
        }
        for (size_t k = n_before; k-- > 0;) grown[--o] = before[k];
        if (!sep_there) grown[--o] = sep;
        for (size_t k = n_after; k-- > 0;) grown[--o] = after[k];
        if (mark && o + lead < total) grown[o + lead] |= SHARD_DOC_START; /* in place from o on */
    }
    if (mark_first && total) grown[0] |= SHARD_DOC_START;
    *ids = grown;
    *n = total;
    return 0;
}

int prepare_encode_part(const Tokenizer *tok, const char *text, size_t len, int flags, int marks, int threads,
                        uint32_t **ids, size_t *n, char *err) {
    char terr[ERR_LEN];
    *ids = NULL;
    *n = 0;
    if (tokenizer_encode_parallel(tok, text, len, TOKENIZER_SPECIALS | TOKENIZER_DOCUMENTS | flags, threads, ids, n,
                                  terr) != 0) {
        fgpt_set_err(err, "%s", terr);
        return -1;
    }
    if (wrap_documents(tok, flags, marks, ids, n, err) != 0) {
        free(*ids);
        *ids = NULL;
        return -1;
    }
    return 0;
}

/* Encodes one part and writes it as a shard (marks: prepare_encode_part's; with them a shard of
 * SHARD_DOCUMENTS). */
static int write_part(const Tokenizer *tok, const char *text, size_t len, int flags, int marks, int threads,
                      const char *path, uint64_t *n_tokens, char *err) {
    uint32_t *ids;
    size_t n;
    if (prepare_encode_part(tok, text, len, flags, marks, threads, &ids, &n, err) != 0) return -1;
    int rc = shard_write_flagged(path, ids, n, tokenizer_vocab_size(tok), tokenizer_fingerprint(tok),
                                 marks ? SHARD_DOCUMENTS : 0, err);
    free(ids);
    *n_tokens = n;
    return rc;
}

int prepare_save_tokenizer(const Tokenizer *tok, const char *path, char *err) {
    char terr[ERR_LEN];
    if (!tokenizer_is_imported(tok)) {
        if (tokenizer_save(tok, path, terr) == 0) return 0;
        fgpt_set_err(err, "%s", terr);
        return -1;
    }
    size_t n;
    char *json = tokenizer_hf_json(tok, &n, terr);
    if (!json) {
        fgpt_set_err(err, "%s", terr);
        return -1;
    }
    /* whole or not at all: a failed write leaves the tokenizer.json a folder held before */
    const int rc = write_file_whole(path, json, n);
    const int e = errno;
    free(json);
    if (rc != 0) {
        fgpt_set_err(err, "cannot write %s: %s (check the folder is writable and the disk has room)", path, strerror(e));
        return -1;
    }
    return 0;
}

const char *const tokenizer_file_names[2] = {"tokenizer_config.json", "chat_template.jinja"};
const char *const tokenizer_file_roles[2] = {"tokenizer's config", "chat template"};

int prepare_stage_tokenizer_files(const Tokenizer *tok, const char *dir, char staged[2][PREPARE_PATH_LEN],
                                  char *err) {
    char terr[ERR_LEN];
    for (int k = 0; k < 2; k++) {
        staged[k][0] = 0;
        size_t n = 0;
        char *config = !k && tokenizer_is_imported(tok) && tokenizer_has_hf_config(tok)
                           ? tokenizer_hf_config_json(tok, 0, terr) : NULL;
        const char *text = k ? tokenizer_is_imported(tok) ? tokenizer_hf_chat_template(tok, &n) : NULL : config;
        if (!k && tokenizer_is_imported(tok) && tokenizer_has_hf_config(tok) && !config) {
            fgpt_set_err(err, "%s", terr);
            return -1;
        }
        if (!k && config) n = strlen(config);
        if (!text) continue;
        char path[PREPARE_PATH_LEN];
        int rc = prepare_path_join(path, dir, tokenizer_file_names[k], err);
        if (rc == 0 && snprintf(staged[k], PREPARE_PATH_LEN, "%s.new", path) >= PREPARE_PATH_LEN) {
            fgpt_set_err(err, "prepare -o %s: the path of %s is too long (choose a shorter -o)", dir, path);
            rc = -1;
        }
        if (rc == 0 && write_file_whole(staged[k], text, n) != 0) {
            fgpt_set_err(err, "cannot write %s: %s (check the folder is writable and the disk has room)", staged[k],
                         strerror(errno));
            rc = -1;
        }
        free(config);
        if (rc != 0) {
            staged[k][0] = 0;
            return -1;
        }
    }
    return 0;
}

int prepare_install_tokenizer_files(const char *dir, char staged[2][PREPARE_PATH_LEN], char *err) {
    for (int k = 0; k < 2; k++) {
        char path[PREPARE_PATH_LEN];
        if (prepare_path_join(path, dir, tokenizer_file_names[k], err) != 0) return -1;
        if (staged[k][0] && rename(staged[k], path) != 0) {
            fgpt_set_err(err, "cannot move %s to %s: %s (check the folder is writable); the folder now holds part "
                         "of the new set and part of the earlier one: run prepare again", staged[k], path,
                         strerror(errno));
            return -1;
        }
        if (staged[k][0]) {
            staged[k][0] = 0;
            continue;
        }
        /* the earlier set's (prepare_check_replaceable refused any other): the new tokenizer has none */
        if (unlink(path) == 0)
            fprintf(stderr, "prepare: removed %s, the earlier set's %s (the new tokenizer has none)\n", path,
                    tokenizer_file_roles[k]);
        else if (errno != ENOENT)
            fprintf(stderr, "prepare: note: cannot remove %s, the earlier set's %s (%s): the new tokenizer has none, "
                    "so delete it\n", path, tokenizer_file_roles[k], strerror(errno));
    }
    return 0;
}

/* The whole pipeline on a text in memory: tokenizer (trained, or `given`, which stays the
 * caller's), then the two shards. */
static int prepare_text(const char *text, size_t len, const PrepareOptions *opt, Tokenizer *given,
                        const char *out_dir, PreparedData *out, char *err) {
    memset(out, 0, sizeof *out);
    const int imported = given && tokenizer_is_imported(given);
    char terr[ERR_LEN];
    /* what can be refused from the text alone (and the given tokenizer) is, before anything is
     * written; a trained tokenizer separates documents with "<|endoftext|>" and normalizes nothing */
    if (len == 0) {
        fgpt_set_err(err, "the text is empty (0 bytes): give files that hold text");
        return -1;
    }
    size_t eot_len = strlen(TOKENIZER_EOT_TEXT);
    const char *eot = given ? tokenizer_eot_text(given, &eot_len) : TOKENIZER_EOT_TEXT;
    int at_boundary;
    size_t cut = val_cut(text, len, opt->val_fraction, eot, eot_len, &at_boundary);
    /* An imported tokenizer encodes the text as Hugging Face does each document of it: the
     * validation part goes on from the training part, so it starts at the separator (the piece
     * after it then begins as it does in the whole, and the separator brings the post-processor's
     * tokens around it: wrap_documents), or at the place nearest the asked-for share where the
     * tokenizer can cut text (tokenizer_cut_near), within half to twice that share. Where there is
     * none (a long text whose lines all start with white space; some tokenizers can never be cut),
     * validation starts where val_cut put it, and its first ids may differ from those the whole
     * text would give there. */
    int exact = 1; /* the cut gives the ids of the whole text */
    if (imported && at_boundary && cut < len) cut -= eot_len;
    else if (imported && !at_boundary && cut < len) {
        const size_t share = len - (size_t)((double)len * (1.0 - opt->val_fraction));
        const size_t lo = share * 2 < len ? len - share * 2 : 1, hi = len - share / 2;
        size_t at = tokenizer_cut_near(given, text, len, len - share < lo ? lo : len - share, lo, hi);
        if (at < len) cut = at;
        else exact = 0;
    }
    if (cut == len) {
        fgpt_set_err(err, "the validation part of the text is empty (%zu bytes in all); give more text or raise "
                     "--val-fraction", len);
        return -1;
    }
    SetInProgress set;
    if (prepare_begin_set(out_dir, imported, 0, out, &set, err) != 0) return -1;
    out->vocab_requested = opt->vocab;
    Tokenizer *tok;
    double t0 = prepare_seconds();
    if (given) {
        tok = given;
        out->vocab_requested = tokenizer_vocab_size(tok);
    } else {
        fprintf(stderr, "prepare: training a %u-token tokenizer on %.1f MB of text\n", opt->vocab, len / 1e6);
        TokenizerTrainOptions topt = {opt->vocab, opt->threads, 1};
        tok = tokenizer_train(text, len, &topt, terr);
    }
    if (!tok) {
        fgpt_set_err(err, "%s", terr);
        prepare_end_set(&set, -1, tok, err);
        return -1;
    }
    out->vocab_reached = tokenizer_vocab_size(tok);
    if (!given) {
        fprintf(stderr, "prepare: tokenizer has %u tokens (%u asked for) after %.1f s\n", out->vocab_reached, opt->vocab,
                prepare_seconds() - t0);
    }
    if (!at_boundary) prepare_note_val_cut(opt->val_fraction, cut, imported, exact, eot, eot_len);
    uint64_t n_train = 0, n_val = 0;
    t0 = prepare_seconds();
    fprintf(stderr, "prepare: encoding %.1f MB (train) + %.2f MB (validation)\n", cut / 1e6, (len - cut) / 1e6);
    const int mid_start = imported ? TOKENIZER_MID_START : 0, mid_end = imported ? TOKENIZER_MID_END : 0;
    /* validation starts a document where it starts after our separator; an imported tokenizer's
     * starts at the separator, whose ids end the document before */
    const int marks = opt->documents ? PREPARE_MARK_DOCUMENTS : 0;
    const int val_marks = marks | (marks && !imported && at_boundary ? PREPARE_STARTS_DOCUMENT : 0);
    int rc = write_part(tok, text, cut, mid_end, marks | (marks ? PREPARE_STARTS_DOCUMENT : 0), opt->threads,
                        set.train_new, &n_train, err);
    if (rc == 0)
        rc = write_part(tok, text + cut, len - cut, mid_start, val_marks, opt->threads, set.val_new, &n_val, err);
    if (rc == 0)
        fprintf(stderr, "prepare: %llu train + %llu validation tokens (%.3f tokens/byte) in %.1f s -> %s\n",
                (unsigned long long)n_train, (unsigned long long)n_val, (double)(n_train + n_val) / (double)len,
                prepare_seconds() - t0, out_dir);
    /* a shard of one token holds no target, and the trainer and eval refuse it */
    if (rc == 0 && n_train < 2) {
        fgpt_set_err(err, "the training part of the text holds %llu token(s), and a target needs 2 (%zu bytes in all); "
                     "give more text", (unsigned long long)n_train, len);
        rc = -1;
    }
    if (rc == 0 && n_val < 2) {
        fgpt_set_err(err, "the validation part of the text holds %llu token(s), and a target needs 2 (%zu bytes in "
                     "all); give more text or raise --val-fraction", (unsigned long long)n_val, len);
        rc = -1;
    }
    rc = prepare_end_set(&set, rc, tok, err);
    if (tok != given) tokenizer_free(tok);
    return rc;
}

int prepare_begin_set(const char *out_dir, int imported, int numbered, PreparedData *out, SetInProgress *set,
                      char *err) {
    struct stat before;
    memset(set, 0, sizeof *set);
    set->lock = -1;
    set->out_dir = out_dir;
    set->out = out;
    set->imported = imported;
    set->numbered = numbered;
    set->made_here = stat(out_dir, &before) != 0; /* a failed prepare takes back a folder it made */
    if (prepare_make_dirs(out_dir, err) != 0 ||
        prepare_path_join(out->train_path, out_dir, numbered ? "train_*.bin" : "train.bin", err) != 0 ||
        prepare_path_join(out->val_path, out_dir, numbered ? "val_*.bin" : "val.bin", err) != 0 ||
        prepare_path_join(out->tokenizer_path, out_dir, imported ? "tokenizer.json" : "tokenizer.bin", err) != 0)
        return -1;
    /* two prepares into one folder would stage and rename each other's files into a mixed set */
    if ((set->lock = prepare_lock_out_dir(out_dir, err)) < 0) return -1;
    /* the three files are written whole under staging names and renamed over the old ones only
     * when all are: a prepare stopped before that leaves the folder's earlier set as it was (and
     * staged files the next prepare overwrites), never new shards beside an old tokenizer */
    if (!numbered) {
        snprintf(set->train_new, sizeof set->train_new, "%s.new", out->train_path);
        snprintf(set->val_new, sizeof set->val_new, "%s.new", out->val_path);
    }
    snprintf(set->tok_new, sizeof set->tok_new, "%s.new", out->tokenizer_path);
    return 0;
}

int prepare_end_set(SetInProgress *set, int rc, const Tokenizer *tok, char *err) {
    PreparedData *out = set->out;
    if (rc == 0 && prepare_save_tokenizer(tok, set->tok_new, err) != 0) rc = -1;
    if (rc == 0 && prepare_stage_tokenizer_files(tok, set->out_dir, set->tok_files_new, err) != 0) rc = -1;
    /* the tokenizer last: in the instant between renames the trainer refuses shards of a larger
     * vocabulary than the old tokenizer's, and names those of a smaller one */
    const char *staged[3] = {set->val_new, set->train_new, set->tok_new}, *final[3] = {out->val_path, out->train_path,
                                                                                          out->tokenizer_path};
    if (rc == 0 && set->numbered && set->install_shards(set->shards, err) != 0) rc = -1;
    for (int k = set->numbered ? 2 : 0; rc == 0 && k < 3; k++) {
        /* the tokenizer's config and chat template just before it: the trainer reads them beside it */
        if (k == 2 && prepare_install_tokenizer_files(set->out_dir, set->tok_files_new, err) != 0) {
            rc = -1;
            break;
        }
        if (rename(staged[k], final[k]) != 0) {
            /* the files moved before it are the new set's, the rest the earlier one's: ./train refuses
             * such a pair (their tokenizers differ), and running prepare again mends it */
            fgpt_set_err(err, "cannot move %s to %s: %s (check the folder is writable)%s", staged[k], final[k],
                         strerror(errno), k || set->numbered ? "; the folder now holds part of the new set and part "
                                                               "of the earlier one: run prepare again" : "");
            rc = -1;
        }
    }
    if (rc == 0)
        prepare_remove_earlier_set(set->out_dir, set->numbered, set->n_train, set->n_val,
                                   set->imported ? "tokenizer.bin" : "tokenizer.json", out->tokenizer_path);
    /* the set is in place either way; without the sync a power loss soon after may undo the renames */
    if (rc == 0 && !sync_dir(set->out_dir))
        fprintf(stderr, "prepare: note: cannot sync the folder %s (%s): the new files are in place, but a power loss "
                "in the next seconds may bring back the old ones\n", set->out_dir, strerror(errno));
    if (rc != 0) {
        for (int k = 0; k < 3; k++)
            if (staged[k][0]) unlink(staged[k]);
        for (int k = 0; k < 2; k++)
            if (set->tok_files_new[k][0]) unlink(set->tok_files_new[k]);
        if (set->numbered) set->abort_shards(set->shards);
    }
    if (set->lock >= 0) close(set->lock); /* releases it; the empty file stays, as a run's .lock does */
    if (rc != 0 && set->made_here) prepare_remove_made_folder(set->out_dir);
    return rc;
}

/* A text file by its identity on disk, and its place on the command line. */
typedef struct {
    dev_t dev;
    ino_t ino;
    int index;
} FileId;

static int by_identity(const void *a, const void *b) {
    const FileId *x = a, *y = b;
    if (x->dev != y->dev) return x->dev < y->dev ? -1 : 1;
    if (x->ino != y->ino) return x->ino < y->ino ? -1 : 1;
    return (x->index > y->index) - (x->index < y->index);
}

/* Notes each of files[0..n) that names a file given earlier (a link, another path): allowed, a text
 * weighted twice, but its copy may land in validation. Sorted by identity, so that tens of thousands
 * of files take no pairwise checks. */
static void note_files_given_twice(const char *const *files, int n) {
    FileId *ids = malloc((size_t)(n ? n : 1) * sizeof *ids);
    int known = 0;
    for (int f = 0; ids && f < n; f++) {
        struct stat sb;
        if (stat(files[f], &sb) == 0) ids[known++] = (FileId){sb.st_dev, sb.st_ino, f};
    }
    if (ids) qsort(ids, (size_t)known, sizeof *ids, by_identity);
    for (int k = 1; ids && k < known; k++)
        if (ids[k].dev == ids[k - 1].dev && ids[k].ino == ids[k - 1].ino)
            fprintf(stderr, "note: %s is given more than once: its text is in the shards as often, and validation may "
                    "hold a copy of training text\n", files[ids[k].index]);
    free(ids);
}

/* FNV-1a over the corpus: the cache key says which text the shards came from. */
static uint64_t text_hash(const char *s, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 0x100000001b3ull;
    return h;
}

/* A cached preparation is complete when its tokenizer loads and both shards pass their header
 * checks; anything less is prepared again. */
static int cached_ok(const char *dir, uint32_t vocab, PreparedData *out) {
    char err[ERR_LEN], terr[ERR_LEN];
    if (prepare_path_join(out->train_path, dir, "train.bin", err) || prepare_path_join(out->val_path, dir, "val.bin", err) ||
        prepare_path_join(out->tokenizer_path, dir, "tokenizer.bin", err))
        return 0;
    ShardHeader h;
    if (shard_read_header(out->train_path, &h, err) != 0 || shard_read_header(out->val_path, &h, err) != 0) return 0;
    Tokenizer *tok = tokenizer_load(out->tokenizer_path, terr);
    if (!tok) return 0;
    out->vocab_requested = vocab;
    out->vocab_reached = tokenizer_vocab_size(tok);
    tokenizer_free(tok);
    return h.vocab_size == out->vocab_reached;
}

static int prepare_default_locked(uint32_t vocab_size, const char *cache_dir, int extended, PreparedData *out,
                                  char *err) {
    char text_path[PREPARE_PATH_LEN], name[32];
    if (corpus_default(cache_dir, extended, text_path, sizeof text_path, name, err) != 0) return -1;
    char *text = NULL;
    size_t len = 0, cap = 0;
    if (append_file(text_path, 0, &text, &len, &cap, err) != 0) {
        free(text);
        return -1;
    }
    char key[96], dir[PREPARE_PATH_LEN];
    snprintf(key, sizeof key, "%s-%012llx-v%u", name, (unsigned long long)(text_hash(text, len) >> 16), vocab_size);
    if (prepare_path_join(dir, cache_dir, key, err) != 0) {
        free(text);
        return -1;
    }
    if (cached_ok(dir, vocab_size, out)) {
        snprintf(out->corpus, sizeof out->corpus, "%s", name);
        free(text);
        return 0;
    }
    fprintf(stderr, "prepare: first use of the %s corpus with -v %u; preparing it once into %s\n", name, vocab_size,
            dir);
    PrepareOptions opt = {vocab_size, PREPARE_DEFAULT_VAL, 0, NULL, 0, 0, 0, NULL};
    int rc = prepare_text(text, len, &opt, NULL, dir, out, err);
    snprintf(out->corpus, sizeof out->corpus, "%s", name);
    free(text);
    return rc;
}

/* Several trainer processes (one per GPU) may ask at once on first use: an exclusive lock on
 * <cache_dir>/prepare.lock makes one of them prepare while the others wait, then find the cache. */
static int prepare_recipe(uint32_t vocab_size, const char *cache_dir, int extended, PreparedData *out, char *err) {
    memset(out, 0, sizeof *out);
    if (vocab_size < TOKENIZER_MIN_VOCAB) {
        fgpt_set_err(err, "vocabulary size %u is below %u (256 byte tokens + <|endoftext|>); pass -v %u or more", vocab_size,
                TOKENIZER_MIN_VOCAB, TOKENIZER_MIN_VOCAB);
        return -1;
    }
    char lock_path[PREPARE_PATH_LEN];
    if (corpus_check_cache_dir(cache_dir, err) != 0 || prepare_make_dirs(cache_dir, err) != 0 || prepare_path_join(lock_path, cache_dir, "prepare.lock", err) != 0) return -1;
    int fd = open(lock_path, O_RDWR | O_CREAT, 0644);
    if (fd < 0 || flock(fd, LOCK_EX) != 0) {
        fgpt_set_err(err, "cannot lock %s: %s (choose a writable --cache-dir)", lock_path, strerror(errno));
        if (fd >= 0) close(fd);
        return -1;
    }
    int rc = prepare_default_locked(vocab_size, cache_dir, extended, out, err);
    close(fd); /* releases the lock */
    return rc;
}

int prepare_wants_extended_corpus(uint32_t vocab_size) {
    return vocab_size > PREPARE_STANDARD_CORPUS_VOCAB;
}

int prepare_default_corpus(uint32_t vocab_size, const char *cache_dir, PreparedData *out, char *err) {
    return prepare_recipe(vocab_size, cache_dir, prepare_wants_extended_corpus(vocab_size), out, err);
}

/* ---- the `./train prepare` command line ---- */

static void usage(FILE *f) {
    fprintf(f,
            "usage: ./train prepare [options] [--] FILE...   text files -> tokenizer + train/val token shards\n"
            "       ./train prepare --default-corpus [-v V]  fetch, clean and prepare the default corpus (cached)\n"
            "\n"
            "options:\n"
            "  -v, --vocab V          tokens in the tokenizer, <|endoftext|> included (default %u)\n"
            "      --corpus KIND      with --default-corpus: standard (~37 MB; reaches ~187.5k tokens) or extended\n"
            "                         (+5 Debian dictionaries, ~72 MB; reaches 262144); default: extended for a -v\n"
            "                         above 187536, as ./train does\n"
            "  -o, --out DIR          where tokenizer.bin, train.bin and val.bin go (default: prepared)\n"
            "      --tokenizer FILE   encode with this tokenizer instead of training one (ours, or a Hugging Face\n"
            "                         tokenizer.json: a byte-level BPE in the GPT-2, Llama 3 or Qwen 2 style,\n"
            "                         or a SentencePiece-style one, Gemma's or Llama 2's)\n"
            "      --val-fraction F   share of the text held out for validation, from its end (default %.2f)\n"
            "      --cache-dir DIR    where the default corpus is cached (default .cache)\n"
            "      --threads N        threads for counting and encoding (default: all cores)\n"
            "      --files-from LIST  also the text files LIST names, one path a line (- for stdin): more files\n"
            "                         than a command line holds\n"
            "      --shard-tokens N   with --tokenizer: stream text of any size into shards of N tokens\n"
            "                         (DIR/train_000000.bin, ..., DIR/val_000000.bin, ...; at least %u)\n"
            "      --prompt-completion  with --tokenizer: each FILE is JSON Lines of {\"prompt\": ..., \"completion\":\n"
            "                         ...}, for fine-tuning: the prompts' tokens are no target (TRL's\n"
            "                         completion-only loss); --val-fraction counts examples. The two may be\n"
            "                         lists of {\"role\", \"content\"} messages, or a line {\"messages\": [...]}\n"
            "                         (ShareGPT's {\"conversations\": [...]} too), which the chat template of\n"
            "                         the tokenizer_config.json beside the tokenizer renders; a line\n"
            "                         {\"text\": ...} is learned whole\n"
            "      --chat-template FILE  render conversations with this template (a .jinja file) instead\n"
            "      --assistant-only-loss  only the conversations' text that the template marks with\n"
            "                         {%% generation %%} is a target (TRL's assistant_only_loss); needs a template\n"
            "                         with those marks, such as TRL's training templates\n"
            "      --documents        mark where each document starts: training keeps each one's attention and\n"
            "                         positions inside it, as if it ran alone (4-byte tokens; --prompt-completion\n"
            "                         marks its examples so already)\n"
            "  -h, --help             this text\n"
            "Each FILE is one document; the tokenizer's separator (\"<|endoftext|>\", or Llama 3's\n"
            "\"<|end_of_text|>\") inside a file also separates documents.\n"
            "Then train with the command it prints: ./train -i DIR/train.bin -j DIR/val.bin --tokenizer\n"
            "DIR/tokenizer.bin (tokenizer.json for --tokenizer FILE.json) -v <tokens>; with --shard-tokens,\n"
            "-i 'DIR/train_*.bin' -j 'DIR/val_*.bin'\n",
            PREPARE_DEFAULT_VOCAB, PREPARE_DEFAULT_VAL, PREPARE_MIN_SHARD_TOKENS);
}

/* s as one word of a POSIX shell: as it is when it holds only characters no shell reads specially,
 * else in single quotes (a quote inside written '\''). */
static void print_shell_word(FILE *f, const char *s) {
    if (*s && strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_./+-=:,@%") == strlen(s)) {
        fputs(s, f);
        return;
    }
    fputc('\'', f);
    for (; *s; s++)
        if (*s == '\'') fputs("'\\''", f);
        else fputc(*s, f);
    fputc('\'', f);
}

static int bad_arg(const char *flag, const char *why) {
    print_error("prepare %s: %s (see ./train prepare --help)", flag, why);
    return 2;
}

/* Appends the paths listed in `list` (one a line; "-": stdin; lines of blanks passed over) to *files
 * (n of them, capacity *cap), keeping each line's text as the path. 0, or -1 with a message. */
static int read_file_list(const char *list, const char ***files, int *n, size_t *cap, char **text, char *err) {
    FILE *f = strcmp(list, "-") ? fopen(list, "r") : stdin;
    if (!f) {
        fgpt_set_err(err, "prepare --files-from %s: cannot read it: %s", list, strerror(errno));
        return -1;
    }
    size_t len = 0, room = 1 << 16;
    char *buf = malloc(room);
    int rc = buf ? 0 : -1;
    for (size_t got; rc == 0 && (got = fread(buf + len, 1, room - len - 1, f)) > 0;) {
        len += got;
        char *grown = len + 1 == room ? realloc(buf, room *= 2) : buf;
        if (!grown) rc = -1;
        else buf = grown;
    }
    if (rc == 0 && ferror(f)) {
        fgpt_set_err(err, "prepare --files-from %s: read error: %s", list, strerror(errno));
        rc = -2;
    }
    if (f != stdin) fclose(f);
    if (rc == -1) fgpt_set_err(err, "prepare --files-from %s: out of memory", list);
    if (rc != 0) {
        free(buf);
        return -1;
    }
    buf[len] = 0;
    if (memchr(buf, 0, len)) {
        fgpt_set_err(err, "prepare --files-from %s holds a NUL byte: it is no list of paths, one a line", list);
        free(buf);
        return -1;
    }
    for (char *line = buf; *line;) {
        char *end = strchr(line, '\n');
        if (end) *end = 0;
        const size_t k = strlen(line);
        if (k && line[k - 1] == '\r') line[k - 1] = 0; /* a list written on Windows */
        if (line[strspn(line, " \t")]) { /* a line of blanks is a blank line, not a path */
            if ((size_t)*n + 1 >= *cap) {
                const char **grown = realloc(*files, (*cap *= 2) * sizeof *grown);
                if (!grown) {
                    fgpt_set_err(err, "prepare --files-from %s: out of memory", list);
                    free(buf);
                    return -1;
                }
                *files = grown;
            }
            (*files)[(*n)++] = line;
        }
        if (!end) break;
        line = end + 1;
    }
    *text = buf;
    return 0;
}

static int parse_u32(const char *s, uint32_t *v) {
    char *end;
    errno = 0;
    unsigned long long x = strtoull(s, &end, 10);
    if (errno || end == s || *end || x > UINT32_MAX || s[0] == '-' || isspace((unsigned char)s[0])) return -1;
    *v = (uint32_t)x;
    return 0;
}

int prepare_main(int argc, char **argv) {
    PrepareOptions opt = {PREPARE_DEFAULT_VOCAB, PREPARE_DEFAULT_VAL, 0, NULL, 0, 0, 0, NULL};
    const char *out_dir = "prepared", *cache_dir = ".cache";
    int default_corpus = 0, extended = -1, n_files = 0, vocab_given = 0, help = 0; /* extended -1: chosen by -v */
    int pairs = 0;
    const char *for_files = NULL, *for_corpus = NULL; /* a flag given that only FILE... or --default-corpus takes */
    size_t files_cap = (size_t)argc + 1;
    const char **files = calloc(files_cap, sizeof *files);
    char *lists[8] = {NULL}; /* the --files-from lists' text, which files[] points into */
    int n_lists = 0;
    if (!files) return 1;
    int status = 2;
    RepeatedFlags repeated = {0};
    static const char *const value_flags[][2] = {
        {"-v", "-v/--vocab"},           {"--vocab", "-v/--vocab"},      {"-o", "-o/--out"},
        {"--out", "-o/--out"},          {"--corpus", "--corpus"},       {"--tokenizer", "--tokenizer"},
        {"--val-fraction", "--val-fraction"}, {"--cache-dir", "--cache-dir"}, {"--threads", "--threads"},
        {"--shard-tokens", "--shard-tokens"}, {"--chat-template", "--chat-template"}, {"--files-from", NULL}};
    int only_files = 0; /* after "--": a file named like a flag ("-notes.txt") */
    for (int i = 1; i < argc; i++) {
        if (!only_files && !strcmp(argv[i], "--")) {
            only_files = 1;
            continue;
        }
        CliWord w;
        cli_word_split(argv[i], &w);
        const char *a = w.flag;
        const char *val = w.value ? w.value : i + 1 < argc ? argv[i + 1] : NULL;
        if (only_files) a = ""; /* no flag: the file branch below */
        if (w.value && (!strcmp(a, "-h") || !strcmp(a, "--help") || !strcmp(a, "--default-corpus") ||
                        !strcmp(a, "--prompt-completion") || !strcmp(a, "--documents") ||
                        !strcmp(a, "--assistant-only-loss"))) {
            status = bad_arg(a, "takes no value");
            goto done;
        }
        for (size_t k = 0; k < sizeof value_flags / sizeof value_flags[0]; k++)
            if (!strcmp(a, value_flags[k][0]) && value_flags[k][1]) {
                repeated_flags_use(&repeated, value_flags[k][1]);
                if (!strcmp(value_flags[k][1], "-o/--out") || !strcmp(a, "--val-fraction") || !strcmp(a, "--threads") ||
                    !strcmp(a, "--shard-tokens"))
                    for_files = value_flags[k][1];
                if (!strcmp(a, "--cache-dir")) for_corpus = "--cache-dir";
            }
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { /* the rest is still read: a bad flag is named, as ./train does */
            help = 1;
        } else if (!strcmp(a, "--default-corpus")) {
            default_corpus = 1;
        } else if (!strcmp(a, "--prompt-completion")) {
            pairs = 1;
            for_files = "--prompt-completion";
        } else if (!strcmp(a, "--assistant-only-loss")) {
            opt.assistant_only_loss = 1;
        } else if (!strcmp(a, "--chat-template")) {
            if (!val || !*val) {
                status = bad_arg(a, "needs a template file (.jinja)");
                goto done;
            }
            opt.chat_template = val;
            i += !w.value;
        } else if (!strcmp(a, "--documents")) {
            opt.documents = 1;
            for_files = "--documents";
        } else if (!strcmp(a, "--corpus")) {
            if (!val || (strcmp(val, "standard") && strcmp(val, "extended"))) {
                status = bad_arg(a, "is standard or extended");
                goto done;
            }
            extended = !strcmp(val, "extended");
            i += !w.value;
        } else if (!strcmp(a, "-v") || !strcmp(a, "--vocab")) {
            if (!val || parse_u32(val, &opt.vocab) != 0) {
                /* -v bounds what the text reaches, so any 32-bit count is taken; beyond it, say so */
                status = bad_arg(a, val && *val && strspn(val, "0123456789") == strlen(val)
                                        ? "is too large: at most 4294967295 (the text bounds the vocabulary anyway)"
                                        : "needs a whole number of tokens, e.g. -v 50257");
                goto done;
            }
            if (opt.vocab < TOKENIZER_MIN_VOCAB) {
                print_error("prepare -v %u: a vocabulary needs at least %u tokens (256 bytes + <|endoftext|>)",
                            opt.vocab, TOKENIZER_MIN_VOCAB);
                goto done;
            }
            vocab_given = 1;
            i += !w.value;
        } else if (!strcmp(a, "-o") || !strcmp(a, "--out")) {
            if (!val || !*val) {
                status = bad_arg(a, "needs a folder");
                goto done;
            }
            out_dir = val;
            i += !w.value;
        } else if (!strcmp(a, "--tokenizer")) {
            if (!val || !*val) {
                status = bad_arg(a, "needs a tokenizer file");
                goto done;
            }
            opt.tokenizer_in = val;
            i += !w.value;
        } else if (!strcmp(a, "--val-fraction")) {
            char *end;
            opt.val_fraction = val ? strtod(val, &end) : -1;
            if (!val || isspace((unsigned char)*val) || *end || !(opt.val_fraction > 0 && opt.val_fraction <= 0.5)) {
                status = bad_arg(a, "needs a fraction in (0, 0.5], e.g. 0.01");
                goto done;
            }
            i += !w.value;
        } else if (!strcmp(a, "--cache-dir")) {
            if (!val || !*val) {
                status = bad_arg(a, "needs a folder");
                goto done;
            }
            cache_dir = val;
            i += !w.value;
        } else if (!strcmp(a, "--files-from")) {
            char err[ERR_LEN];
            if (!val || !*val) {
                status = bad_arg(a, "needs a file listing text files, one a line (- for stdin)");
                goto done;
            }
            if (n_lists == (int)(sizeof lists / sizeof lists[0])) {
                status = bad_arg(a, "is given more than 8 times (put the paths in one list)");
                goto done;
            }
            if (read_file_list(val, &files, &n_files, &files_cap, &lists[n_lists], err) != 0) {
                print_error("%s", err);
                status = 1;
                goto done;
            }
            n_lists++;
            i += !w.value;
        } else if (!strcmp(a, "--shard-tokens")) {
            uint32_t n;
            if (!val || parse_u32(val, &n) != 0 || n < PREPARE_MIN_SHARD_TOKENS) {
                status = bad_arg(a, "needs a token count of 1024 to 4294967295, e.g. 100000000 (a shard of llm.c's "
                                    "FineWeb)");
                goto done;
            }
            opt.shard_tokens = n;
            i += !w.value;
        } else if (!strcmp(a, "--threads")) {
            uint32_t t;
            if (!val || parse_u32(val, &t) != 0 || t < 1 || t > 64) {
                status = bad_arg(a, "needs a thread count from 1 to 64");
                goto done;
            }
            opt.threads = (int)t;
            i += !w.value;
        } else if (a[0] == '-' && a[1]) {
            print_error("prepare: unknown option %s (see ./train prepare --help; a file whose name starts with - "
                        "goes after --)", argv[i]);
            goto done;
        } else {
            if ((size_t)n_files + 1 >= files_cap) { /* lists came first */
                const char **grown = realloc(files, (files_cap *= 2) * sizeof *grown);
                if (!grown) {
                    print_error("prepare: out of memory for the list of files");
                    status = 1;
                    goto done;
                }
                files = grown;
            }
            files[n_files++] = argv[i];
        }
    }
    if (help) {
        usage(stdout);
        status = 0;
        goto done;
    }
    repeated_flags_note(&repeated, stderr);
    char err[ERR_LEN];
    PreparedData out;
    if (default_corpus && (n_files || opt.tokenizer_in)) {
        status = bad_arg("--default-corpus", "takes no text files and no --tokenizer");
        goto done;
    }
    if (!pairs && (opt.assistant_only_loss || opt.chat_template)) {
        status = bad_arg(opt.assistant_only_loss ? "--assistant-only-loss" : "--chat-template",
                         "applies to the conversations of --prompt-completion (add it)");
        goto done;
    }
    if (pairs && opt.shard_tokens) {
        status = bad_arg("--prompt-completion", "holds the examples in memory; --shard-tokens streams plain text "
                                                "(drop one)");
        goto done;
    }
    if (pairs && !default_corpus && !opt.tokenizer_in) {
        status = bad_arg("--prompt-completion", "tokenizes with the model's tokenizer: pass --tokenizer FILE (its "
                                                "tokenizer.json, or a tokenizer.bin of ours)");
        goto done;
    }
    if (opt.shard_tokens && !default_corpus && !opt.tokenizer_in) {
        status = bad_arg("--shard-tokens", "streams the text through a given tokenizer: pass --tokenizer FILE (to "
                                           "train one, prepare a part of the text without --shard-tokens, then pass "
                                           "its tokenizer)");
        goto done;
    }
    if (vocab_given && opt.tokenizer_in) {
        status = bad_arg("-v", "sizes a tokenizer that prepare trains; --tokenizer FILE brings its own vocabulary "
                               "(drop -v, or drop --tokenizer to train one)");
        goto done;
    }
    if (!default_corpus && extended >= 0) {
        status = bad_arg("--corpus", "goes with --default-corpus");
        goto done;
    }
    /* the default corpus is prepared into its cache with its own split, where ./train looks for it */
    if (default_corpus && for_files) {
        status = bad_arg(for_files, "applies to FILE..., not to --default-corpus, which is prepared into --cache-dir "
                                    "with its own validation share (prepare the files yourself to choose these)");
        goto done;
    }
    if (!default_corpus && for_corpus) {
        status = bad_arg("--cache-dir", "goes with --default-corpus (FILE... are prepared into -o)");
        goto done;
    }
    if (default_corpus) {
        if (extended < 0) extended = prepare_wants_extended_corpus(opt.vocab);
        if (prepare_recipe(opt.vocab, cache_dir, extended, &out, err) != 0) {
            print_error("%s", err);
            status = 1;
            goto done;
        }
    } else {
        if (n_files == 0) {
            print_error("prepare: no text files given (pass FILE..., or --default-corpus)");
            goto done;
        }
        status = 1;
        if (prepare_check_out_dir(out_dir, err) != 0) {
            print_error("%s", err);
            goto done;
        }
        char *text = NULL;
        size_t len = 0, cap = 0;
        /* documents are joined by the tokenizer's separator: "<|endoftext|>" unless a given
         * tokenizer has another (Llama 3's "<|end_of_text|>") */
        Tokenizer *given = NULL;
        const char *sep = TOKENIZER_EOT_TEXT;
        size_t sep_len = strlen(sep);
        if (opt.tokenizer_in) {
            char terr[ERR_LEN];
            given = tokenizer_load(opt.tokenizer_in, terr);
            if (!given) {
                print_error("%s", terr);
                goto done;
            }
            sep = tokenizer_eot_text(given, &sep_len);
            if (tokenizer_load_note(given)) fprintf(stderr, "note: %s\n", tokenizer_load_note(given));
            if (tokenizer_unapplied_settings(given))
                fprintf(stderr, "note: %s sets %s, which prepare does not apply: each document is tokenized whole\n",
                        opt.tokenizer_in, tokenizer_unapplied_settings(given));
        }
        const int imported = given && tokenizer_is_imported(given);
        if (prepare_check_replaceable(out_dir, opt.shard_tokens > 0, imported ? "tokenizer.json" : "tokenizer.bin",
                              imported ? "tokenizer.bin" : "tokenizer.json", opt.tokenizer_in, err) != 0) {
            print_error("%s", err);
            tokenizer_free(given);
            goto done;
        }
        if (opt.shard_tokens || pairs) {
            note_files_given_twice(files, n_files);
            const int rc = pairs ? prepare_pairs(files, n_files, &opt, given, out_dir, &out, err)
                                 : prepare_stream(files, n_files, &opt, given, out_dir, &out, err);
            tokenizer_free(given);
            if (rc != 0) {
                print_error("%s", err);
                goto done;
            }
            goto prepared;
        }
        for (int f = 0; f < n_files; f++) {
            if (f > 0) {
                /* one document per file */
                if (cap - len < sep_len) {
                    char *b = realloc(text, cap + sep_len + (1 << 20));
                    if (!b) {
                        print_error("out of memory joining the text files");
                        free(text);
                        tokenizer_free(given);
                        goto done;
                    }
                    text = b;
                    cap += sep_len + (1 << 20);
                }
                memcpy(text + len, sep, sep_len);
                len += sep_len;
            }
            if (append_text_file(files[f], given, &text, &len, &cap, err) != 0) {
                print_error("%s", err);
                free(text);
                tokenizer_free(given);
                goto done;
            }
        }
        note_files_given_twice(files, n_files);
        int rc = prepare_text(text, len, &opt, given, out_dir, &out, err);
        tokenizer_free(given);
        free(text);
        if (rc != 0) {
            print_error("%s", err);
            goto done;
        }
    }
prepared:
    printf("prepared: %s %s %s (vocabulary %u of %u asked for)\n", out.tokenizer_path, out.train_path, out.val_path,
           out.vocab_reached, out.vocab_requested);
    /* a command to paste: paths with spaces or quotes quoted as a shell takes them */
    printf("train with: ./train -i ");
    print_shell_word(stdout, out.train_path);
    printf(" -j ");
    print_shell_word(stdout, out.val_path);
    printf(" --tokenizer ");
    print_shell_word(stdout, out.tokenizer_path);
    /* examples kept whole, as TRL's SFTTrainer packs them by default */
    printf(" -v %u%s\n", out.vocab_reached, pairs ? " --pack bfd" : "");
    status = 0;
done:
    free(files);
    for (int k = 0; k < n_lists; k++) free(lists[k]);
    return status;
}
