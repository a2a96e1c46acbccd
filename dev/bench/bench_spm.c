/* dev/bench/bench_spm.c - a tokenizer.json's load time and encode speed: MB/s on one thread over a
 * text as it is (in lines) and over the same text as one line (newlines made spaces), their ratio,
 * MB/s on all cores, and a check that the threads give the one-thread ids. Timings live here,
 * never in tests.
 *
 *   ./build/bench_spm TOKENIZER.json TEXT [MB]     (MB: the first MB of TEXT, default 3)
 *   dev/bench/bench_spm.sh                          (builds the tokenizers it times) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/err.h"
#include "tokenizer/tokenizer.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Best of three one-thread encodes: seconds, and the ids of the last. */
static double time_encode(const Tokenizer *t, const char *text, size_t len, uint32_t **ids, size_t *n) {
    double best = 1e30;
    for (int r = 0; r < 3; r++) {
        free(*ids);
        double t0 = now();
        *ids = tokenizer_encode_alloc(t, text, len, TOKENIZER_SPECIALS, n);
        double s = now() - t0;
        if (s < best) best = s;
    }
    return best;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s TOKENIZER.json TEXT [MB]\n", argv[0]);
        return 2;
    }
    char err[ERR_LEN];
    double best_load = 1e30;
    Tokenizer *t = NULL;
    for (int r = 0; r < 3; r++) {
        tokenizer_free(t);
        double t0 = now();
        t = tokenizer_load(argv[1], err);
        if (!t) {
            fprintf(stderr, "error: %s\n", err);
            return 1;
        }
        if (now() - t0 < best_load) best_load = now() - t0;
    }
    printf("%s: %u tokens, loads in %.3f s (best of 3)\n", argv[1], tokenizer_vocab_size(t), best_load);
    FILE *f = fopen(argv[2], "rb");
    size_t want = (size_t)((argc > 3 ? atof(argv[3]) : 3.0) * 1e6);
    char *text = malloc(want + 1);
    size_t len = f && text ? fread(text, 1, want, f) : 0;
    if (f) fclose(f);
    if (!len) {
        fprintf(stderr, "error: cannot read %s\n", argv[2]);
        return 1;
    }
    uint32_t *lines_ids = NULL, *one_ids = NULL, *par = NULL;
    size_t n_lines = 0, n_one = 0, n_par = 0;
    double s_lines = time_encode(t, text, len, &lines_ids, &n_lines);
    double t0 = now();
    if (tokenizer_encode_parallel(t, text, len, TOKENIZER_SPECIALS, 0, &par, &n_par, err) != 0) {
        fprintf(stderr, "error: %s\n", err);
        return 1;
    }
    double s_par = now() - t0;
    int same = n_par == n_lines && memcmp(par, lines_ids, n_par * sizeof *par) == 0;
    for (size_t i = 0; i < len; i++)
        if (text[i] == '\n') text[i] = ' ';
    double s_one = time_encode(t, text, len, &one_ids, &n_one);
    printf("text: %s, first %.2f MB: %zu tokens (%.3f tokens/byte)\n", argv[2], len / 1e6, n_lines,
           (double)n_lines / (double)len);
    printf("one thread, in lines:     %.2f MB/s\n", len / 1e6 / s_lines);
    printf("one thread, one line:     %.2f MB/s (%.2fx the time in lines)\n", len / 1e6 / s_one, s_one / s_lines);
    printf("all cores, in lines:      %.2f MB/s (%s the one-thread ids)\n", len / 1e6 / s_par,
           same ? "same as" : "DIFFERENT FROM");
    free(par);
    free(one_ids);
    free(lines_ids);
    free(text);
    tokenizer_free(t);
    return same ? 0 : 1;
}
