/* bench_tokenizer.c - tokenizer speed on a text file: training time at a vocabulary size,
 * merges reached, tokens per byte, encode MB/s on one thread and on all cores, and a round-trip
 * check of the whole file. Timings live here, never in tests.
 *
 *   make bench-tokenizer                      (default corpus, V = 262144 and 50304)
 *   ./build/bench_tokenizer FILE V [V ...]    (any text; "<|endoftext|>" separates documents) */
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

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc(n > 0 ? (size_t)n : 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    *len = (size_t)n;
    return buf;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s FILE V [V ...]\n", argv[0]);
        return 2;
    }
    size_t len;
    char *text = read_file(argv[1], &len);
    if (!text) {
        fprintf(stderr, "error: cannot read %s (run `make data` first for the default corpus)\n", argv[1]);
        return 1;
    }
    printf("corpus: %s, %.2f MB\n", argv[1], len / 1e6);
    for (int a = 2; a < argc; a++) {
        char err[ERR_LEN];
        TokenizerTrainOptions opt = {(uint32_t)strtoul(argv[a], NULL, 10), 0, 0};
        double t0 = now();
        Tokenizer *t = tokenizer_train(text, len, &opt, err);
        double train_s = now() - t0;
        if (!t) {
            fprintf(stderr, "error: %s\n", err);
            return 1;
        }
        uint32_t *ids = malloc((len + 1) * sizeof *ids);
        t0 = now();
        size_t n1 = tokenizer_encode(t, text, len, 1, ids, len + 1);
        double enc1_s = now() - t0;
        uint32_t *ids_par = NULL;
        size_t n2 = 0;
        t0 = now();
        if (tokenizer_encode_parallel(t, text, len, 1, 0, &ids_par, &n2, err) != 0) {
            fprintf(stderr, "error: %s\n", err);
            return 1;
        }
        double encp_s = now() - t0;
        char *back = malloc(len + 1);
        t0 = now();
        size_t nb = tokenizer_decode(t, ids, n1, back, len + 1);
        double dec_s = now() - t0;
        int same = n1 == n2 && memcmp(ids, ids_par, n1 * sizeof *ids) == 0;
        int roundtrip = nb == len && memcmp(back, text, len) == 0;
        printf("V=%u: trained in %.2f s, %u merges, vocab %u%s\n", opt.vocab_size, train_s, tokenizer_num_merges(t),
               tokenizer_vocab_size(t), tokenizer_vocab_size(t) < opt.vocab_size ? " (corpus ran out of pairs)" : "");
        printf("  %zu tokens, %.4f tokens/byte (%.2f bytes/token)\n", n1, (double)n1 / len, (double)len / n1);
        printf("  encode 1 thread: %.1f MB/s; all cores: %.1f MB/s; decode: %.0f MB/s\n", len / 1e6 / enc1_s,
               len / 1e6 / encp_s, len / 1e6 / dec_s);
        printf("  parallel == serial: %s; decode(encode(text)) == text: %s\n", same ? "yes" : "NO",
               roundtrip ? "yes" : "NO");
        free(back);
        free(ids_par);
        free(ids);
        tokenizer_free(t);
    }
    free(text);
    return 0;
}
