/* model/train/eval.c - the mean next-token loss over consecutive windows (see eval.h). */
#include "model/train/eval.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "data/loader.h"
#include "data/shard.h"

uint64_t eval_window_count(uint64_t n, int T) {
    return (n - 1 + (uint64_t)T - 1) / (uint64_t)T;
}

/* The batch's valid rows' losses (the first `valid` of each window's T, windows in order) as
 * float32 little-endian. 0, or -1 with the message in err. */
static int write_per_token(Backend *be, const int *targets, float *rows, uint8_t *bytes, FILE *f, const char *name,
                           char *err) {
    const size_t BT = (size_t)be->B * be->T;
    be->ops->row_losses(be, rows);
    size_t k = 0;
    for (size_t r = 0; r < BT; r++) {
        if (targets[r] == -1) continue;
        uint32_t u;
        memcpy(&u, &rows[r], 4);
        for (int b = 0; b < 4; b++) bytes[4 * k + b] = (uint8_t)(u >> (8 * b));
        k++;
    }
    if (fwrite(bytes, 4, k, f) != k) {
        const int e = errno;
        snprintf(err, ERR_LEN, "cannot write the per-token losses to %s: %s (%s, or pass another path)", name,
                 strerror(e), write_error_cause(e));
        return -1;
    }
    return 0;
}

int eval_run(Backend *be, const uint32_t *tokens, uint64_t n, const PackedWindows *packed, EvalMeans *means,
             FILE *per_token, const char *per_token_name, char *err) {
    const int B = be->B, T = be->T;
    const size_t BT = (size_t)B * T;
    const uint64_t windows = packed ? packed->windows : eval_window_count(n, T);
    int *inputs = malloc(BT * sizeof *inputs), *targets = malloc(BT * sizeof *targets);
    int *positions = malloc(BT * sizeof *positions);
    uint32_t *window = packed ? malloc(((size_t)T + 1) * sizeof *window) : NULL;
    float *rows = per_token ? malloc(BT * sizeof *rows) : NULL;
    uint8_t *bytes = per_token ? malloc(BT * 4) : NULL;
    if (!inputs || !targets || !positions || (packed && !window) || (per_token && (!rows || !bytes))) {
        free(bytes), free(rows), free(window), free(positions), free(targets), free(inputs);
        snprintf(err, ERR_LEN, "out of host memory for a batch of %d x %d tokens (pass a smaller -b or -t)", B, T);
        return -1;
    }
    double sum = 0.0, obj = 0.0, lse = 0.0;
    uint64_t all_valid = 0;
    int status = 0;
    for (uint64_t first = 0; first < windows && status == 0; first += (uint64_t)B) {
        uint64_t valid = 0;
        int documents = 0;
        for (int b = 0; b < B; b++) {
            const uint64_t w = first + (uint64_t)b, start = w * (uint64_t)T;
            /* past the end: input 0 (causal attention keeps it out of the positions before it), and
             * ignored targets; a window past the last is all of that */
            const uint64_t left = start < n ? n - start : 0;
            int count = left < (uint64_t)T + 1 ? (int)left : T + 1;
            const uint32_t *stored = tokens + (start < n ? start : 0);
            if (packed) {
                count = w < windows ? packed_window_tokens(packed, w, tokens, window) : 0;
                stored = window;
            }
            documents |= loader_split_window(stored, count, T, inputs + (size_t)b * T, targets + (size_t)b * T,
                                             positions + (size_t)b * T);
            for (int t = 0; t < T; t++) valid += (uint64_t)(targets[(size_t)b * T + t] >= 0);
        }
        /* the backend's mean over the batch's targets, weighted by their count: every target
         * weighs the same in the whole mean */
        sum += (double)be->ops->eval_loss(be, inputs, targets, documents ? positions : NULL) * (double)valid;
        obj += (double)be->last_objective * (double)valid;
        lse += (double)be->last_mean_lse * (double)valid;
        all_valid += valid;
        if (per_token) status = write_per_token(be, targets, rows, bytes, per_token, per_token_name, err);
    }
    free(bytes);
    free(rows);
    free(window);
    free(positions);
    free(targets);
    free(inputs);
    const double d = all_valid ? (double)all_valid : 1.0; /* none: every mean is 0 */
    means->loss = sum / d;
    means->objective = obj / d;
    means->lse = lse / d;
    means->targets = all_valid;
    return status;
}

int eval_mean_loss(Backend *be, const uint32_t *tokens, uint64_t n, double *mean, char *err) {
    EvalMeans m;
    if (eval_run(be, tokens, n, NULL, &m, NULL, NULL, err) != 0) return -1;
    *mean = m.loss;
    return 0;
}
