/* tokenizer/tokenizer_file.c - the tokenizer file: save and validating load.
 *
 * Layout (little-endian):
 *   0   char[8]  magic "FGPTBPE1"
 *   8   uint32   format version (1)
 *   12  uint32   vocabulary size V = 256 + merges + 1
 *   16  uint32   merges M
 *   20  uint32   EOT token id (256 + M)
 *   24  uint32   length S of the EOT text
 *   28  S bytes  the EOT text, "<|endoftext|>"
 *   ..  M x (uint32 left, uint32 right): the pair that makes token 256 + i
 *   ..  uint64   FNV-1a 64 checksum of every byte before it
 * Token bytes are not stored: they follow from the merges. tokenizer_load also reads a Hugging Face
 * tokenizer.json (hf_import.c), told apart by its first character. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "common/paths.h"
#include "tokenizer/tokenizer_internal.h"

#define TOKENIZER_MAGIC "FGPTBPE1"
#define TOKENIZER_VERSION 1u
#define FIXED_HEADER 28

static void put_u32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void put_u64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t get_u32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t get_u64(const uint8_t *p) {
    return (uint64_t)get_u32(p) | (uint64_t)get_u32(p + 4) << 32;
}

static uint64_t fnv1a(const uint8_t *p, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

int tokenizer_save(const Tokenizer *t, const char *path, char *err) {
    const size_t eot_len = strlen(TOKENIZER_EOT_TEXT);
    size_t size = FIXED_HEADER + eot_len + (size_t)t->n_merges * 8 + 8;
    uint8_t *buf = malloc(size);
    if (!buf) {
        tok_error(err, "out of memory saving the tokenizer to %s", path);
        return -1;
    }
    memcpy(buf, TOKENIZER_MAGIC, 8);
    put_u32(buf + 8, TOKENIZER_VERSION);
    put_u32(buf + 12, t->vocab_size);
    put_u32(buf + 16, t->n_merges);
    put_u32(buf + 20, t->eot);
    put_u32(buf + 24, (uint32_t)eot_len);
    memcpy(buf + FIXED_HEADER, TOKENIZER_EOT_TEXT, eot_len);
    uint8_t *m = buf + FIXED_HEADER + eot_len;
    for (uint32_t i = 0; i < 2 * t->n_merges; i++) put_u32(m + 4 * (size_t)i, t->merges[i]);
    put_u64(buf + size - 8, fnv1a(buf, size - 8));

    /* whole or not at all: an interrupted save never leaves half a file under path */
    const int rc = write_file_whole(path, buf, size);
    const int e = errno;
    free(buf);
    if (rc != 0) {
        tok_error(err, "cannot write %s: %s (check the folder exists and is writable, and the disk has room)", path,
                  strerror(e));
        return -1;
    }
    return 0;
}

/* Checks the fixed header; returns the file size it implies, or 0 with a message. */
static uint64_t check_header(const uint8_t *h, size_t have, const char *path, char *err) {
    const size_t eot_len = strlen(TOKENIZER_EOT_TEXT);
    if (have == 0) {
        tok_error(err, "tokenizer %s is empty (0 bytes; a write that never finished?): pass the tokenizer.bin that "
                  "`./train prepare` wrote, or a Hugging Face tokenizer.json", path);
        return 0;
    }
    if (have < 8 || memcmp(h, TOKENIZER_MAGIC, 8) != 0) {
        tok_error(err, "%s is not a fusedgpt tokenizer file (bad magic) nor a tokenizer.json; pass the tokenizer.bin "
                  "that `./train prepare` wrote, or a Hugging Face tokenizer.json",
                  path);
        return 0;
    }
    if (have < FIXED_HEADER) {
        tok_error(err, "tokenizer %s is truncated (%zu bytes); re-run `./train prepare`", path, have);
        return 0;
    }
    if (get_u32(h + 8) != TOKENIZER_VERSION) {
        tok_error(err, "tokenizer %s has format version %u, this build reads version %u; re-run `./train prepare`", path,
                  get_u32(h + 8), TOKENIZER_VERSION);
        return 0;
    }
    uint32_t V = get_u32(h + 12), M = get_u32(h + 16), eot = get_u32(h + 20), S = get_u32(h + 24);
    if (S != eot_len || (uint64_t)M + TOKENIZER_MIN_VOCAB != V || eot != 256 + M) {
        tok_error(err,
                  "tokenizer %s has an inconsistent header (vocab %u, merges %u, eot %u); the file is corrupt, re-run "
                  "`./train prepare`",
                  path, V, M, eot);
        return 0;
    }
    return (uint64_t)FIXED_HEADER + S + (uint64_t)M * 8 + 8;
}

/* A Hugging Face tokenizer.json, and the tokenizer_config.json beside it when there is one (a
 * checkpoint hands both on as they were). */
static Tokenizer *load_hf(FILE *f, const char *path, char *err) {
    size_t len = 0;
    char *text = read_stream_whole(f, &len);
    fclose(f);
    if (!text) {
        tok_error(err, "cannot read tokenizer %s: %s", path, strerror(errno));
        return NULL;
    }
    const size_t bom = len >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0 ? 3 : 0;
    Tokenizer *t = tokenizer_from_hf_json(text + bom, len - bom, path, err);
    free(text);
    if (!t) return NULL;
    char config[4200];
    const char *slash = strrchr(path, '/');
    int dir_len = slash ? (int)(slash - path) : 1;
    snprintf(config, sizeof config, "%.*s/tokenizer_config.json", dir_len, slash ? path : ".");
    char why[ERR_LEN];
    FILE *c = open_regular(config, why);
    if (!c && errno != ENOENT) {
        if (why[0])
            tok_error(err, "%s", why);
        else
            tok_error(err, "cannot read %s beside tokenizer %s: %s (fix or remove it)", config, path,
                      strerror(errno));
        tokenizer_free(t);
        return NULL;
    }
    if (c) {
        size_t clen;
        t->hf_config = read_stream_whole(c, &clen);
        fclose(c);
        if (!t->hf_config) {
            tok_error(err, "cannot read %s beside tokenizer %s: %s (fix or remove it)", config, path, strerror(errno));
            tokenizer_free(t);
            return NULL;
        }
    }
    snprintf(config, sizeof config, "%.*s/chat_template.jinja", dir_len, slash ? path : ".");
    if ((c = open_regular(config, why)) != NULL) {
        t->hf_chat_template = read_stream_whole(c, &t->hf_chat_template_len);
        fclose(c);
    }
    if (!t->hf_chat_template && errno != ENOENT) {
        tok_error(err, "cannot read %s beside tokenizer %s: %s (fix or remove it)", config, path,
                  why[0] ? why : strerror(errno));
        tokenizer_free(t);
        return NULL;
    }
    return t;
}

Tokenizer *tokenizer_load(const char *path, char *err) {
    char why[ERR_LEN];
    FILE *f = open_regular(path, why);
    if (!f) {
        if (why[0])
            tok_error(err, "%s", why);
        else if (errno == EISDIR)
            tok_error(err, "tokenizer %s is a directory (pass the file in it: tokenizer.bin or tokenizer.json)", path);
        else
            tok_error(err, "cannot open tokenizer %s: %s (train one with `./train prepare`)", path, strerror(errno));
        return NULL;
    }
    int first = fgetc(f);
    /* a UTF-8 byte-order mark, which some editors write first, is no part of the JSON */
    if (first == 0xEF && fgetc(f) == 0xBB && fgetc(f) == 0xBF) first = ' ';
    while (first == ' ' || first == '\t' || first == '\n' || first == '\r') first = fgetc(f);
    if (first == '{') return load_hf(f, path, err);
    rewind(f);
    /* The header first, so a wrong file (a shard, a checkpoint) is named without reading it all. */
    uint8_t head[FIXED_HEADER];
    size_t have = fread(head, 1, sizeof head, f);
    uint64_t expected = check_header(head, have, path, err);
    if (!expected) {
        fclose(f);
        return NULL;
    }
    uint64_t size = 0;
    if (fseek(f, 0, SEEK_END) == 0) {
        long end = ftell(f);
        size = end > 0 ? (uint64_t)end : 0;
    }
    if (size != expected) {
        tok_error(err, "tokenizer %s is %s (%llu bytes, its header says %llu); re-run `./train prepare`", path,
                  size < expected ? "truncated" : "longer than its header says", (unsigned long long)size,
                  (unsigned long long)expected);
        fclose(f);
        return NULL;
    }
    uint8_t *buf = malloc((size_t)size);
    if (!buf) {
        fclose(f);
        tok_error(err, "out of memory reading tokenizer %s", path);
        return NULL;
    }
    int ok = fseek(f, 0, SEEK_SET) == 0 && fread(buf, 1, (size_t)size, f) == size;
    fclose(f);
    Tokenizer *t = NULL;
    const size_t eot_len = strlen(TOKENIZER_EOT_TEXT);
    uint32_t M = get_u32(buf + 16);
    if (!ok) {
        tok_error(err, "cannot read tokenizer %s (I/O error); check the disk", path);
    } else if (get_u64(buf + size - 8) != fnv1a(buf, size - 8)) {
        tok_error(err, "tokenizer %s fails its checksum (the file is corrupt); re-run `./train prepare`", path);
    } else if (memcmp(buf + FIXED_HEADER, TOKENIZER_EOT_TEXT, eot_len) != 0) {
        tok_error(err, "tokenizer %s names an unknown special token; re-run `./train prepare`", path);
    } else {
        uint32_t *merges = malloc(((size_t)M + 1) * 2 * sizeof *merges);
        if (!merges) {
            tok_error(err, "out of memory reading tokenizer %s", path);
        } else {
            const uint8_t *m = buf + FIXED_HEADER + eot_len;
            for (size_t i = 0; i < 2 * (size_t)M; i++) merges[i] = get_u32(m + 4 * i);
            char why[ERR_LEN];
            t = tokenizer_from_merges(merges, M, why);
            if (!t) tok_error(err, "%s: %s", path, why);
            free(merges);
        }
    }
    free(buf);
    return t;
}
