/* model/train/eval.c - the mean next-token loss over consecutive windows (see eval.h). */
#include "model/train/eval.h"

#include <stdio.h>
#include <stdlib.h>

#include "common/err.h"

uint64_t eval_window_count(uint64_t n, int T) {
    return (n - 1 + (uint64_t)T - 1) / (uint64_t)T;
}

int eval_mean_loss(Backend *be, const uint32_t *tokens, uint64_t n, double *mean, char *err) {
    const int B = be->B, T = be->T;
    const size_t BT = (size_t)B * T;
    const uint64_t windows = eval_window_count(n, T);
    int *inputs = malloc(BT * sizeof *inputs), *targets = malloc(BT * sizeof *targets);
    if (!inputs || !targets) {
        free(targets), free(inputs);
        snprintf(err, ERR_LEN, "out of host memory for a batch of %d x %d tokens (pass a smaller -b or -t)", B, T);
        return -1;
    }
    double sum = 0.0;
    for (uint64_t first = 0; first < windows; first += (uint64_t)B) {
        uint64_t valid = 0;
        for (int b = 0; b < B; b++) {
            const uint64_t start = (first + (uint64_t)b) * (uint64_t)T;
            for (int t = 0; t < T; t++) {
                const uint64_t i = start + (uint64_t)t;
                /* past the end: any valid token as input (causal attention keeps it out of the
                 * positions before it), and an ignored target */
                const int counts = i + 1 < n;
                inputs[(size_t)b * T + t] = counts ? (int)tokens[i] : 0;
                targets[(size_t)b * T + t] = counts ? (int)tokens[i + 1] : -1;
                valid += (uint64_t)counts;
            }
        }
        /* the backend's mean over the batch's targets, weighted by their count: every target
         * weighs the same in the whole mean */
        sum += (double)be->ops->eval_loss(be, inputs, targets) * (double)valid;
    }
    free(targets);
    free(inputs);
    *mean = sum / (double)(n - 1);
    return 0;
}
