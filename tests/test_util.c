#include "tests/test_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/err.h"
#include "model/backend.h"
#include "tests/test.h"
#include "tokenizer/tokenizer.h"
#include "data/shard.h"
#include "model/train/schedule.h"
#include "tests/test.h"

void fill_normal(float *x, size_t n, float std, Rng *rng) {
    for (size_t i = 0; i < n; i++) x[i] = (float)(rng_normal(rng) * std);
}

double rel_l2(const float *a, const float *b, size_t n) {
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - b[i];
        num += d * d;
        den += (double)b[i] * b[i];
    }
    if (den == 0.0) return num == 0.0 ? 0.0 : INFINITY;
    return sqrt(num / den);
}

double max_abs(const float *x, size_t n) {
    double m = 0.0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs(x[i]));
    return m;
}

int run_train(const char *args, char **output) {
    return run_train_under("", args, output);
}

int run_train_under(const char *shell_prefix, const char *args, char **output) {
    /* -o may be as long as the system's paths (4096 bytes) */
    size_t n = strlen(shell_prefix) + strlen(test_train_binary()) + strlen(args) + 32;
    char *cmd = malloc(n);
    snprintf(cmd, n, "%s %s %s 2>&1", shell_prefix, test_train_binary(), args);
    FILE *p = popen(cmd, "r");
    free(cmd);
    if (!p) return -1;
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    size_t k;
    while ((k = fread(buf + len, 1, cap - len - 1, p)) > 0) {
        len += k;
        if (len + 1 == cap) buf = realloc(buf, cap *= 2);
    }
    /* a sample may print a zero byte (a token that decodes to one): it would end the string early */
    for (size_t i = 0; i < len; i++)
        if (buf[i] == 0) buf[i] = '?';
    buf[len] = 0;
    int st = pclose(p);
    *output = buf;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

int spawn_train(const char *args, const char *log_path) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "exec %s %s > '%s' 2>&1", test_train_binary(), args, log_path);
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        setpgid(0, 0); /* its own process group, so that a timeout can end all of it */
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    return pid > 0 ? (int)pid : -1;
}

int wait_train_status(int pid, int seconds, int *status) {
    for (int waited = 0; waited < seconds * 100; waited++) {
        if (waitpid(pid, status, WNOHANG) == pid) return 1;
        struct timespec ts = {0, 10 * 1000000L};
        nanosleep(&ts, NULL);
    }
    kill(-pid, SIGKILL);
    waitpid(pid, status, 0);
    return 0;
}

int wait_for_log(const char *path, const char *needle, int count, int seconds) {
    for (int waited = 0; waited < seconds * 50; waited++) {
        char *text = read_text(path);
        int n = 0;
        for (const char *p = text; p && (p = strstr(p, needle)); p++) n++;
        free(text);
        if (n >= count) return 1;
        struct timespec ts = {0, 20 * 1000000L};
        nanosleep(&ts, NULL);
    }
    return 0;
}

int wait_train(int pid, int seconds) {
    int st;
    return wait_train_status(pid, seconds, &st) && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

int same_bytes(const char *a, const char *b) {
    size_t la = 0, lb = 0;
    char *x = read_file(a, &la), *y = read_file(b, &lb);
    const int same = x && y && la == lb && memcmp(x, y, la) == 0;
    free(x);
    free(y);
    return same;
}

char *read_file(const char *path, size_t *length) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 12, len = 0, k;
    char *buf = malloc(cap);
    while ((k = fread(buf + len, 1, cap - len - 1, f)) > 0) {
        len += k;
        if (len + 1 == cap) buf = realloc(buf, cap *= 2);
    }
    buf[len] = 0;
    fclose(f);
    if (length) *length = len;
    return buf;
}

char *read_text(const char *path) { return read_file(path, NULL); }

int write_pattern_shard(const char *path, uint64_t n, uint32_t vocab, uint64_t seed) {
    return write_pattern_shard_made_by(path, n, vocab, seed, 0);
}

int write_pattern_shard_made_by(const char *path, uint64_t n, uint32_t vocab, uint64_t seed, uint64_t tokenizer) {
    /* Tokens follow t[i+1] = (5·t[i] + 3) mod vocab, restarting at a random token every 16 steps:
     * a model can learn it (loss far below ln vocab) but not from the unigram counts alone. */
    uint32_t *t = malloc(n * sizeof(uint32_t));
    Rng rng;
    rng_seed(&rng, seed);
    for (uint64_t i = 0; i < n; i++)
        t[i] = (i % 16 == 0) ? (uint32_t)rng_below(&rng, vocab) : (5 * t[i - 1] + 3) % vocab;
    char err[ERR_LEN];
    int rc = shard_write(path, t, n, vocab, tokenizer, err);
    if (rc) fprintf(stderr, "%s\n", err);
    free(t);
    return rc;
}

int write_edited_copy(const char *from_path, const char *to_path, const char *const *edits, int n_edits) {
    size_t len;
    char *text = read_file(from_path, &len);
    if (!text) return -1;
    for (int i = 0; i < n_edits; i++) {
        const char *from = edits[2 * i], *to = edits[2 * i + 1];
        char *at = strstr(text, from);
        if (!at) {
            free(text);
            return -1;
        }
        const size_t nf = strlen(from), nt = strlen(to), pre = (size_t)(at - text);
        char *next = malloc(len - nf + nt + 1);
        memcpy(next, text, pre);
        memcpy(next + pre, to, nt);
        memcpy(next + pre + nt, at + nf, len - pre - nf + 1);
        free(text);
        text = next;
        len = len - nf + nt;
    }
    FILE *f = fopen(to_path, "wb");
    int ok = f && fwrite(text, 1, len, f) == len;
    if (f) ok = fclose(f) == 0 && ok;
    free(text);
    return ok ? 0 : -1;
}

int write_gpt2_style_tokenizer_with_two_ids_swapped(const char *path) {
    static const char *const swap[] = {"\"A\": 33,", "\"A\": 34,", "\"B\": 34,", "\"B\": 33,"};
    return write_edited_copy("tests/fixtures/hf_gpt2_style.json", path, swap, 2);
}

int parse_losses(const char *output, float *losses, int max) {
    int n = 0;
    const char *p = output;
    while (n < max && (p = strstr(p, "| loss ")) != NULL) {
        p += 7;
        losses[n++] = strtof(p, NULL);
    }
    return n;
}

void expect_shard_refused(const char *path, uint32_t model_vocab, const char *what, const char *msg) {
    char err[ERR_LEN] = "";
    uint32_t *t = NULL;
    uint64_t n;
    ShardHeader h;
    int rc = shard_read(path, model_vocab, &t, &n, &h, err);
    CHECK(rc == -1 && t == NULL, "%s: accepted", what);
    CHECK(strstr(err, msg) != NULL, "%s: message '%s' lacks '%s'", what, err, msg);
    CHECK(strchr(err, '\n') == NULL, "%s: message is not one line", what);
    free(t);
}

Tokenizer *tokenizer_json_edited(const char *fixture_path, const char *from, const char *to, char *err) {
    char *json = read_text(fixture_path), path[700];
    char *at = json ? strstr(json, from) : NULL;
    snprintf(path, sizeof path, "%s/tokenizer.json", test_tmpdir());
    FILE *f = at ? fopen(path, "wb") : NULL;
    if (!f) {
        CHECK(0, "fixture %s: %s", fixture_path, !json ? "cannot read it" : !at ? "no such text to replace" : "cannot write the copy");
        free(json);
        snprintf(err, ERR_LEN, "the fixture could not be edited");
        return NULL;
    }
    fwrite(json, 1, (size_t)(at - json), f);
    fputs(to, f);
    fputs(at + strlen(from), f);
    fclose(f);
    free(json);
    return tokenizer_load(path, err);
}

void expect_tokenizer_json_refused(const char *fixture_path, const char *from, const char *to, const char *msg) {
    char err[ERR_LEN] = "";
    Tokenizer *t = tokenizer_json_edited(fixture_path, from, to, err);
    CHECK(!t, "'%s' was accepted", to);
    CHECK(strstr(err, msg) && !strchr(err, '\n'), "'%s': message '%s' lacks '%s' or is not one line", to, err, msg);
    tokenizer_free(t);
}

Backend *perturbed_cpu_backend(const ParamTable *t, int B, int T, OutputKind output) {
    char err[ERR_LEN];
    Backend *be = backend_cpu_create(t, B, T, output, OPTIMIZER_STATE_FP32, 7, NULL, err);
    float *p = malloc(t->total * sizeof *p);
    if (!be || !p) {
        free(p);
        if (be) be->ops->destroy(be);
        return NULL;
    }
    be->ops->read_state(be, p, NULL, NULL);
    Rng rng;
    rng_seed(&rng, 11);
    for (size_t i = 0; i < t->total; i++) p[i] += (float)(0.3 * rng_normal(&rng));
    be->ops->write_state(be, p, NULL, NULL);
    free(p);
    return be;
}

uint32_t *read_ids_file(const char *path, size_t *n) {
    char *text = read_text(path);
    if (!text) return NULL;
    size_t cap = 1024;
    uint32_t *ids = malloc(cap * sizeof *ids);
    *n = 0;
    for (char *p = text; ids && *p;) {
        char *end;
        unsigned long v = strtoul(p, &end, 10);
        if (end == p) break;
        if (*n == cap) {
            uint32_t *grown = realloc(ids, (cap *= 2) * sizeof *ids);
            if (!grown) free(ids);
            ids = grown;
            if (!ids) break;
        }
        ids[(*n)++] = (uint32_t)v;
        p = end;
        while (*p == '\n') p++;
    }
    free(text);
    return ids;
}

void write_test_safetensors(const char *path, const TestTensor *ts, int n) {
    size_t cap = 256 + (size_t)n * 256, len = 0, off = 0;
    char *hdr = malloc(cap);
    len += (size_t)snprintf(hdr + len, cap - len, "{\"__metadata__\":{\"format\":\"pt\"}");
    for (int i = 0; i < n; i++) {
        if (ts[i].d0)
            len += (size_t)snprintf(hdr + len, cap - len,
                                    ",\"%s\":{\"dtype\":\"%s\",\"shape\":[%zu,%zu],\"data_offsets\":[%zu,%zu]}",
                                    ts[i].name, ts[i].dtype, ts[i].d0, ts[i].d1, off, off + ts[i].bytes);
        else
            len += (size_t)snprintf(hdr + len, cap - len,
                                    ",\"%s\":{\"dtype\":\"%s\",\"shape\":[%zu],\"data_offsets\":[%zu,%zu]}",
                                    ts[i].name, ts[i].dtype, ts[i].d1, off, off + ts[i].bytes);
        off += ts[i].bytes;
    }
    len += (size_t)snprintf(hdr + len, cap - len, "}");
    FILE *f = fopen(path, "wb");
    uint64_t hl = len;
    fwrite(&hl, 8, 1, f);
    fwrite(hdr, 1, len, f);
    for (int i = 0; i < n; i++) fwrite(ts[i].data, 1, ts[i].bytes, f);
    fclose(f);
    free(hdr);
}

uint16_t test_to_bf16(float x) {
    uint32_t b;
    memcpy(&b, &x, 4);
    return (uint16_t)(b >> 16);
}

float cosine_lr(int step, int total, int warmup, float lr, float fin) {
    const LrSchedule s = {.shape = LR_COSINE, .total_steps = total, .warmup = warmup, .lr = lr, .lr_final = fin};
    return lr_at_step(&s, step);
}
