/* data/shard.c - token shard writer and validating reader (format in shard.h). */
#include "data/shard.h"
#include "common/err.h"
#include "common/paths.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <glob.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* The one build-time check of byte order: the file formats (shards, checkpoints) and the hashes and
 * fingerprints they store are little-endian and written with memcpy, and this file is in every build. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "fusedgpt reads and writes its files little-endian: this host is big-endian"
#endif

void fgpt_set_err(char *err, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, ERR_LEN, fmt, ap);
    va_end(ap);
}

struct ShardWriter {
    FILE *f;
    char path[1024], tmp_path[1040];
    uint32_t vocab_size, bytes_per_token, flags;
    uint64_t count, tokenizer;
};

static uint32_t width_for_vocab(uint32_t vocab_size) {
    return vocab_size <= 65536u ? 2u : 4u;
}

/* A shard without flags stays version 2, which earlier builds read. */
static void encode_header(unsigned char h[SHARD_HEADER_BYTES], const ShardWriter *w) {
    memset(h, 0, SHARD_HEADER_BYTES);
    memcpy(h, SHARD_MAGIC, 8);
    uint32_t version = w->flags ? SHARD_VERSION_FLAGS : SHARD_VERSION;
    memcpy(h + 8, &version, 4);
    memcpy(h + 12, &w->bytes_per_token, 4);
    memcpy(h + 16, &w->vocab_size, 4);
    memcpy(h + 20, &w->flags, 4);
    memcpy(h + 24, &w->count, 8);
    memcpy(h + 32, &w->tokenizer, 8);
}

static ShardWriter *open_writer(const char *path, uint32_t vocab_size, uint64_t tokenizer, uint32_t flags,
                                char *err) {
    if (vocab_size == 0) {
        snprintf(err, ERR_LEN, "shard %s: vocabulary size 0 (pass the tokenizer's vocabulary size)", path);
        return NULL;
    }
    if (strlen(path) >= sizeof((ShardWriter *)0)->path) {
        snprintf(err, ERR_LEN, "shard path %s is longer than %zu bytes; use a shorter folder", path,
                 sizeof((ShardWriter *)0)->path - 1);
        return NULL;
    }
    ShardWriter *w = calloc(1, sizeof *w);
    if (!w) {
        snprintf(err, ERR_LEN, "out of memory opening shard %s", path);
        return NULL;
    }
    snprintf(w->path, sizeof w->path, "%s", path);
    snprintf(w->tmp_path, sizeof w->tmp_path, "%s.tmp", path);
    w->vocab_size = vocab_size;
    w->tokenizer = tokenizer;
    w->flags = flags;
    w->bytes_per_token = flags ? 4u : width_for_vocab(vocab_size);
    w->f = create_new_file(w->tmp_path);
    unsigned char h[SHARD_HEADER_BYTES];
    encode_header(h, w);
    if (!w->f || fwrite(h, 1, sizeof h, w->f) != sizeof h) {
        snprintf(err, ERR_LEN, "cannot write shard %s: %s (check the directory exists and is writable)",
                 w->tmp_path, strerror(errno));
        if (w->f) fclose(w->f);
        free(w);
        return NULL;
    }
    return w;
}

ShardWriter *shard_writer_open(const char *path, uint32_t vocab_size, uint64_t tokenizer, char *err) {
    return open_writer(path, vocab_size, tokenizer, 0, err);
}

ShardWriter *shard_writer_open_flagged(const char *path, uint32_t vocab_size, uint64_t tokenizer, uint32_t flags,
                                       char *err) {
    if (flags & ~SHARD_KNOWN_FLAGS) {
        snprintf(err, ERR_LEN, "shard %s: flags 0x%x, of which only 0x%x exist", path, flags, SHARD_KNOWN_FLAGS);
        return NULL;
    }
    if (flags && vocab_size > FGPT_MAX_VOCAB) { /* an id past 2^30 would read back as a marked one */
        snprintf(err, ERR_LEN, "shard %s: a vocabulary of %u tokens leaves no room for the marks, which need ids "
                 "below %u", path, vocab_size, FGPT_MAX_VOCAB);
        return NULL;
    }
    return open_writer(path, vocab_size, tokenizer, flags, err);
}

int shard_writer_append(ShardWriter *w, const uint32_t *tokens, size_t n, char *err) {
    enum { CHUNK = 4096 };
    unsigned char buf[CHUNK * 4];
    for (size_t i = 0; i < n;) {
        size_t k = n - i < CHUNK ? n - i : CHUNK;
        for (size_t j = 0; j < k; j++) {
            uint32_t tok = tokens[i + j];
            const ShardHeader marks = {.flags = w->flags};
            const uint32_t id = tok & shard_id_bits(&marks);
            if (id >= w->vocab_size) {
                snprintf(err, ERR_LEN, "token %u is >= the shard's vocabulary %u (writing %s)", id,
                         w->vocab_size, w->path);
                return -1;
            }
            if (w->bytes_per_token == 2) {
                uint16_t t16 = (uint16_t)tok;
                memcpy(buf + 2 * j, &t16, 2);
            } else {
                memcpy(buf + 4 * j, &tok, 4);
            }
        }
        if (fwrite(buf, w->bytes_per_token, k, w->f) != k) {
            const int e = errno;
            snprintf(err, ERR_LEN, "cannot write shard %s: %s (%s)", w->tmp_path, strerror(e), write_error_hint(e));
            return -1;
        }
        i += k;
        w->count += k;
    }
    return 0;
}

void shard_writer_abort(ShardWriter *w) {
    if (!w) return;
    if (w->f) fclose(w->f);
    unlink(w->tmp_path);
    free(w);
}

int shard_writer_close(ShardWriter *w, char *err) {
    unsigned char h[SHARD_HEADER_BYTES];
    encode_header(h, w);
    int ok = fseek(w->f, 0, SEEK_SET) == 0 && fwrite(h, 1, sizeof h, w->f) == sizeof h && fflush(w->f) == 0 &&
             fsync(fileno(w->f)) == 0;
    ok = (fclose(w->f) == 0) && ok;
    w->f = NULL;
    if (!ok || rename(w->tmp_path, w->path) != 0) {
        const int e = errno;
        snprintf(err, ERR_LEN, "cannot finish shard %s: %s (%s)", w->path, strerror(e), write_error_hint(e));
        shard_writer_abort(w);
        return -1;
    }
    free(w);
    return 0;
}

static int write_whole(ShardWriter *w, const uint32_t *tokens, uint64_t n, char *err) {
    if (!w) return -1;
    if (shard_writer_append(w, tokens, n, err) != 0) {
        shard_writer_abort(w);
        return -1;
    }
    return shard_writer_close(w, err);
}

int shard_write(const char *path, const uint32_t *tokens, uint64_t n, uint32_t vocab_size, uint64_t tokenizer,
                char *err) {
    return write_whole(shard_writer_open(path, vocab_size, tokenizer, err), tokens, n, err);
}

int shard_write_flagged(const char *path, const uint32_t *tokens, uint64_t n, uint32_t vocab_size, uint64_t tokenizer,
                        uint32_t flags, char *err) {
    return write_whole(shard_writer_open_flagged(path, vocab_size, tokenizer, flags, err), tokens, n, err);
}

/* An llm.c file, recognised by its magic in the first int32 of a 256 x int32 header: checks the
 * version that goes with the magic and the file length against header[2], the token count, and
 * leaves f at the first token. The header records no vocabulary, so the one llm.c's scripts use for
 * that magic stands in (for the train/validation comparison and the -v an error suggests). */
static FILE *open_llmc(FILE *f, const char *path, const int32_t llmc[3], const struct stat *st, ShardHeader *hdr,
                       char *err) {
    const int gpt2 = llmc[0] == LLMC_MAGIC_GPT2;
    const int32_t version = gpt2 ? LLMC_VERSION_GPT2 : LLMC_VERSION_LLAMA3;
    hdr->version = (uint32_t)llmc[1];
    hdr->tokenizer = 0;
    hdr->bytes_per_token = gpt2 ? 2 : 4;
    hdr->vocab_size = gpt2 ? LLMC_VOCAB_GPT2 : LLMC_VOCAB_LLAMA3;
    hdr->header_bytes = LLMC_HEADER_BYTES;
    hdr->flags = 0;
    if (llmc[1] != version) {
        snprintf(err, ERR_LEN, "llm.c shard %s has magic %d with version %d, but that magic goes with version %d "
                 "(corrupt header; re-create it with llm.c's dev/data scripts)", path, (int)llmc[0], (int)llmc[1],
                 (int)version);
        fclose(f);
        return NULL;
    }
    if (llmc[2] < 0) {
        snprintf(err, ERR_LEN, "llm.c shard %s records %d tokens (corrupt header; re-create it)", path,
                 (int)llmc[2]);
        fclose(f);
        return NULL;
    }
    hdr->num_tokens = (uint64_t)llmc[2];
    uint64_t expect = LLMC_HEADER_BYTES + hdr->num_tokens * hdr->bytes_per_token;
    if ((uint64_t)st->st_size != expect) {
        snprintf(err, ERR_LEN,
                 "token shard %s is %lld bytes but its header promises %llu tokens (%llu bytes): truncated or "
                 "corrupt, re-create it",
                 path, (long long)st->st_size, (unsigned long long)hdr->num_tokens, (unsigned long long)expect);
        fclose(f);
        return NULL;
    }
    if (fseek(f, LLMC_HEADER_BYTES, SEEK_SET) != 0) {
        snprintf(err, ERR_LEN, "cannot read token shard %s: %s", path, strerror(errno));
        fclose(f);
        return NULL;
    }
    return f;
}

/* Opens path and validates its header against the file's length. */
static FILE *open_and_check(const char *path, ShardHeader *hdr, char *err) {
    char why[ERR_LEN];
    FILE *f = open_regular(path, why);
    if (!f) {
        if (why[0])
            snprintf(err, ERR_LEN, "%s", why);
        else if (errno == EISDIR)
            snprintf(err, ERR_LEN, "%s is a directory, not a token shard (pass the shard file, e.g. DIR/train.bin)",
                     path);
        else
            snprintf(err, ERR_LEN,
                     "cannot open token shard %s: %s (check the path; `./train prepare` makes shards from text, "
                     "`make data` the default corpus's)",
                     path, strerror(errno));
        return NULL;
    }
    unsigned char h[SHARD_HEADER_BYTES];
    struct stat st;
    const size_t got = fstat(fileno(f), &st) == 0 ? fread(h, 1, sizeof h, f) : 0;
    int32_t llmc[3] = {0, 0, 0};
    memcpy(llmc, h, got < sizeof llmc ? got : sizeof llmc);
    if (got != sizeof h) { /* an llm.c file's header is its own, of 1024 bytes */
        const int llmc_magic = got >= 4 && (llmc[0] == LLMC_MAGIC_GPT2 || llmc[0] == LLMC_MAGIC_LLAMA3);
        snprintf(err, ERR_LEN, "token shard %s is shorter than its %d-byte %sheader (truncated; re-create it)", path,
                 llmc_magic ? LLMC_HEADER_BYTES : SHARD_HEADER_BYTES, llmc_magic ? "llm.c " : "");
        fclose(f);
        return NULL;
    }
    if (llmc[0] == LLMC_MAGIC_GPT2 || llmc[0] == LLMC_MAGIC_LLAMA3) return open_llmc(f, path, llmc, &st, hdr, err);
    if (memcmp(h, SHARD_MAGIC, 8) != 0) {
        snprintf(err, ERR_LEN, "%s is not a token shard (bad magic; expected one written by `train prepare`, "
                 "or an llm.c .bin file)", path);
        fclose(f);
        return NULL;
    }
    hdr->header_bytes = SHARD_HEADER_BYTES;
    memcpy(&hdr->version, h + 8, 4);
    memcpy(&hdr->bytes_per_token, h + 12, 4);
    memcpy(&hdr->vocab_size, h + 16, 4);
    memcpy(&hdr->num_tokens, h + 24, 8);
    if (hdr->version < 1 || hdr->version > SHARD_VERSION_FLAGS) {
        snprintf(err, ERR_LEN, "token shard %s has format version %u, this build reads 1 to %u (re-create it, or "
                 "use the fusedgpt that wrote it)", path, hdr->version, SHARD_VERSION_FLAGS);
        fclose(f);
        return NULL;
    }
    hdr->tokenizer = 0;
    hdr->flags = 0;
    if (hdr->version >= 2) memcpy(&hdr->tokenizer, h + 32, 8);
    if (hdr->version >= SHARD_VERSION_FLAGS) memcpy(&hdr->flags, h + 20, 4);
    if (hdr->flags & ~SHARD_KNOWN_FLAGS) {
        snprintf(err, ERR_LEN, "token shard %s has flags 0x%x, of which this build knows 0x%x (a newer format or a "
                 "corrupt header; re-create it)", path, hdr->flags, SHARD_KNOWN_FLAGS);
        fclose(f);
        return NULL;
    }
    /* the writer leaves them 0: anything else is a field this version does not know, or a corrupt
     * header (version 1 had no fingerprint: bytes 32..39 were reserved too; before version 3 bytes
     * 20..23 were) */
    const int reserved[][2] = {{20, hdr->version >= SHARD_VERSION_FLAGS ? 20 : 24},
                               {hdr->version >= 2 ? 40 : 32, SHARD_HEADER_BYTES}}; /* [from, to) */
    for (int r = 0; r < 2; r++)
        for (int i = reserved[r][0]; i < reserved[r][1]; i++)
            if (h[i] != 0) {
                snprintf(err, ERR_LEN, "token shard %s: reserved header byte %d is 0x%02x, not 0 (a newer format or "
                         "a corrupt header; re-create it)", path, i, h[i]);
                fclose(f);
                return NULL;
            }
    if (hdr->bytes_per_token != 2 && hdr->bytes_per_token != 4) {
        snprintf(err, ERR_LEN, "token shard %s has %u bytes per token (must be 2 or 4; corrupt header)", path,
                 hdr->bytes_per_token);
        fclose(f);
        return NULL;
    }
    if (hdr->flags && hdr->bytes_per_token != 4) {
        snprintf(err, ERR_LEN, "token shard %s marks tokens (flags 0x%x) in 2-byte tokens, which have no room for the "
                 "marks (corrupt header; re-create it)", path, hdr->flags);
        fclose(f);
        return NULL;
    }
    if (hdr->flags && hdr->vocab_size > FGPT_MAX_VOCAB) {
        snprintf(err, ERR_LEN, "token shard %s marks tokens (flags 0x%x) but records a vocabulary of %u, whose ids "
                 "would reach the marks' bits (corrupt header; re-create it)", path, hdr->flags, hdr->vocab_size);
        fclose(f);
        return NULL;
    }
    if (hdr->bytes_per_token == 2 && hdr->vocab_size > 65536u) {
        snprintf(err, ERR_LEN, "token shard %s stores 2-byte tokens for a %u-token vocabulary (corrupt header)",
                 path, hdr->vocab_size);
        fclose(f);
        return NULL;
    }
    if (hdr->vocab_size == 0) {
        snprintf(err, ERR_LEN, "token shard %s records a vocabulary of 0 tokens (corrupt header; re-create it)",
                 path);
        fclose(f);
        return NULL;
    }
    if (hdr->num_tokens > ((uint64_t)1 << 60)) {
        snprintf(err, ERR_LEN, "token shard %s promises %llu tokens, more than any file holds (corrupt header; "
                 "re-create it)", path, (unsigned long long)hdr->num_tokens);
        fclose(f);
        return NULL;
    }
    uint64_t expect = SHARD_HEADER_BYTES + hdr->num_tokens * hdr->bytes_per_token;
    if ((uint64_t)st.st_size != expect) {
        snprintf(err, ERR_LEN,
                 "token shard %s is %lld bytes but its header promises %llu tokens (%llu bytes): truncated or "
                 "corrupt, re-create it",
                 path, (long long)st.st_size, (unsigned long long)hdr->num_tokens, (unsigned long long)expect);
        fclose(f);
        return NULL;
    }
    return f;
}

int shard_read_header(const char *path, ShardHeader *hdr, char *err) {
    FILE *f = open_and_check(path, hdr, err);
    if (!f) return -1;
    fclose(f);
    return 0;
}

/* The message for token tok at position at of the shard: what bounds it and what would fix it. */
static void bad_token_message(const ShardHeader *hdr, const char *path, uint32_t tok, uint64_t at, uint32_t model_vocab,
                              char *err) {
    const int recorded = hdr->header_bytes == SHARD_HEADER_BYTES;
    const unsigned long long byte = hdr->header_bytes + at * hdr->bytes_per_token;
    if (!recorded && tok >= FGPT_MAX_VOCAB) /* no -v takes it */
        snprintf(err, ERR_LEN,
                 "token %u at position %llu (byte %llu) in shard %s is above the largest vocabulary a model takes, "
                 "%u (the shard is corrupt or holds no token ids: re-create it)", tok, (unsigned long long)at, byte,
                 path, FGPT_MAX_VOCAB);
    else if (!recorded && tok >= hdr->vocab_size) /* beyond what llm.c's magic suggests: that guess is off */
        snprintf(err, ERR_LEN,
                 "token %u at position %llu (byte %llu) in shard %s is >= vocabulary %u (pass the -v of the "
                 "tokenizer that made it, above %u, or re-tokenize)", tok, (unsigned long long)at, byte, path,
                 model_vocab, tok);
    else if (tok >= hdr->vocab_size) /* the shard contradicts its own header: no -v makes it right */
        snprintf(err, ERR_LEN,
                 "token %u at position %llu (byte %llu) in shard %s is beyond the shard's own vocabulary of %u (the "
                 "shard is corrupt: re-create it)", tok, (unsigned long long)at, byte, path, hdr->vocab_size);
    else if (hdr->vocab_size > FGPT_MAX_VOCAB)
        snprintf(err, ERR_LEN,
                 "token %u at position %llu (byte %llu) in shard %s is >= vocabulary %u (re-tokenize: the shard's "
                 "vocabulary of %u is above the largest a model takes, -v %u)", tok, (unsigned long long)at, byte,
                 path, model_vocab, hdr->vocab_size, FGPT_MAX_VOCAB);
    else
        snprintf(err, ERR_LEN,
                 "token %u at position %llu (byte %llu) in shard %s is >= vocabulary %u (re-tokenize, or pass -v %u)",
                 tok, (unsigned long long)at, byte, path, model_vocab, hdr->vocab_size);
}

int shard_joins_set(const ShardHeader *h, const char *path, const ShardHeader *first, const char *first_path,
                    const ShardHeader *named, const char *named_path, char *err) {
    if (h->vocab_size != first->vocab_size) {
        fgpt_set_err(err, "shard %s was made by another tokenizer than %s (a vocabulary of %u against %u): the "
                     "shards of one pattern must share their tokenizer", path, first_path, h->vocab_size,
                     first->vocab_size);
        return -1;
    }
    if (h->tokenizer && named && h->tokenizer != named->tokenizer) {
        fgpt_set_err(err, "shard %s was made by another tokenizer than %s (the same vocabulary of %u, other ids): the "
                     "shards of one pattern must share their tokenizer", path, named_path, h->vocab_size);
        return -1;
    }
    return 0;
}

uint32_t shard_token_limit(const ShardHeader *hdr, uint32_t model_vocab) {
    /* Our header records the vocabulary the tokens were made with, so a token at or above it is
     * corrupt even where the model's is larger. llm.c's records none (its stand-in is a guess from the
     * magic), so there only the model's vocabulary bounds the tokens. */
    const int recorded = hdr->header_bytes == SHARD_HEADER_BYTES;
    const uint32_t bound = recorded && hdr->vocab_size < model_vocab ? hdr->vocab_size : model_vocab;
    /* and no id reaches a mark's bit (shard_token_id), whatever a header records */
    return bound < FGPT_MAX_VOCAB ? bound : FGPT_MAX_VOCAB;
}

int shard_decode_checked(const ShardHeader *hdr, const char *path, const void *src, uint64_t first, size_t count,
                         uint32_t model_vocab, uint32_t *out, char *err) {
    const uint32_t limit = shard_token_limit(hdr, model_vocab), id_bits = shard_id_bits(hdr);
    for (size_t j = 0; j < count; j++) {
        const uint32_t tok = shard_token_at(src, hdr->bytes_per_token, j);
        if ((tok & id_bits) >= limit) {
            bad_token_message(hdr, path, tok & id_bits, first + j, model_vocab, err);
            return -1;
        }
        out[j] = tok;
    }
    return 0;
}

int shard_read(const char *path, uint32_t model_vocab, uint32_t **tokens, uint64_t *n, ShardHeader *hdr,
               char *err) {
    *tokens = NULL;
    *n = 0;
    FILE *f = open_and_check(path, hdr, err);
    if (!f) return -1;
    uint64_t count = hdr->num_tokens;
    uint32_t *out = malloc((count ? count : 1) * sizeof(uint32_t));
    if (!out) {
        snprintf(err, ERR_LEN, "out of memory reading %llu tokens from %s", (unsigned long long)count, path);
        fclose(f);
        return -1;
    }
    enum { CHUNK = 1 << 16 };
    unsigned char *buf = malloc((size_t)CHUNK * 4);
    int rc = buf ? 0 : -1;
    if (!buf) snprintf(err, ERR_LEN, "out of memory reading %s", path);
    for (uint64_t i = 0; rc == 0 && i < count;) {
        size_t k = count - i < CHUNK ? (size_t)(count - i) : CHUNK;
        if (fread(buf, hdr->bytes_per_token, k, f) != k) {
            snprintf(err, ERR_LEN, "read error in token shard %s: %s", path, strerror(errno));
            rc = -1;
            break;
        }
        rc = shard_decode_checked(hdr, path, buf, i, k, model_vocab, out + i, err);
        i += k;
    }
    free(buf);
    fclose(f);
    if (rc != 0) {
        free(out);
        return -1;
    }
    *tokens = out;
    *n = count;
    return 0;
}

int shard_map(const char *path, MappedShard *m, char *err) {
    memset(m, 0, sizeof *m);
    FILE *f = open_and_check(path, &m->hdr, err);
    if (!f) return -1;
    struct stat st;
    if (fstat(fileno(f), &st) != 0) {
        snprintf(err, ERR_LEN, "cannot read token shard %s: %s", path, strerror(errno));
        fclose(f);
        return -1;
    }
    m->map_bytes = (size_t)st.st_size;
    m->device = (uint64_t)st.st_dev, m->inode = (uint64_t)st.st_ino;
    m->map = mmap(NULL, m->map_bytes, PROT_READ, MAP_PRIVATE, fileno(f), 0);
    fclose(f); /* the mapping keeps the file */
    if (m->map == MAP_FAILED) {
        const int no_room = errno == ENOMEM; /* most likely the count of mappings (vm.max_map_count) */
        snprintf(err, ERR_LEN, "cannot map token shard %s into memory: %s%s", path, strerror(errno),
                 no_room ? " (past some 65000 shards this is the system's limit on mappings, vm.max_map_count: "
                           "merge shards, or raise it with sysctl)" : "");
        m->map = NULL;
        return -1;
    }
    m->tokens = (const unsigned char *)m->map + m->hdr.header_bytes;
    return 0;
}

void shard_unmap(MappedShard *m) {
    if (m->map) munmap(m->map, m->map_bytes);
    memset(m, 0, sizeof *m);
}

static int by_bytes(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int shard_paths(const char *spec, ShardPaths *out, char *err) {
    memset(out, 0, sizeof *out);
    struct stat st;
    /* a path that names a file is that file, even with a glob character in its name */
    if ((!strpbrk(spec, "*?[") && spec[0] != '~') || stat(spec, &st) == 0) {
        out->paths = malloc(sizeof *out->paths);
        out->paths_owned = out->paths ? strdup(spec) : NULL;
        if (!out->paths_owned) {
            free(out->paths);
            out->paths = NULL;
            snprintf(err, ERR_LEN, "out of memory");
            return -1;
        }
        out->paths[0] = out->paths_owned;
        out->n = 1;
        return 0;
    }
    glob_t g;
    const int rc = glob(spec, GLOB_NOSORT | GLOB_TILDE, NULL, &g); /* ~ too: the pattern is quoted */
    if (rc == GLOB_NOMATCH || (rc == 0 && g.gl_pathc == 0)) {
        if (rc == 0) globfree(&g);
        snprintf(err, ERR_LEN, "no file matches the shard pattern %s (check the path; quote the pattern so that "
                 "./train expands it)", spec);
        return -1;
    }
    if (rc != 0) {
        snprintf(err, ERR_LEN, "cannot list the shards of %s: %s", spec,
                 rc == GLOB_NOSPACE ? "out of memory" : "a directory on the way cannot be read");
        return -1;
    }
    /* byte order, not the locale's collation: every rank and host must see one order */
    qsort(g.gl_pathv, g.gl_pathc, sizeof *g.gl_pathv, by_bytes);
    out->glob = malloc(sizeof g);
    if (!out->glob) {
        globfree(&g);
        snprintf(err, ERR_LEN, "out of memory");
        return -1;
    }
    memcpy(out->glob, &g, sizeof g);
    out->paths = (const char **)g.gl_pathv;
    out->n = g.gl_pathc;
    return 0;
}

void shard_paths_free(ShardPaths *p) {
    if (p->glob) {
        globfree(p->glob);
        free(p->glob);
    } else {
        free(p->paths_owned);
        free(p->paths);
    }
    memset(p, 0, sizeof *p);
}

int shard_check_tokenizer(const char *path, uint64_t made_by, const char *tok_path, uint64_t tokenizer,
                          const char *fix, char *err) {
    if (!made_by || !tokenizer || made_by == tokenizer) return 0;
    snprintf(err, ERR_LEN, "token shard %s was made by another tokenizer than %s (its ids stand for other text): %s",
             path, tok_path, fix);
    return -1;
}
