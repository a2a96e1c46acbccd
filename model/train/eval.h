/* model/train/eval.h - the mean next-token loss of a model over a whole token sequence (a shard).
 *
 * The N tokens are cut into consecutive windows of T: window w's inputs are tokens[w·T, w·T+T)
 * and each target is the token after its input, so window w reads tokens up to w·T+T. The last
 * window holds what remains, fewer than T targets, and counts when it has 2 tokens or more (one
 * target): every token after the first is a target exactly once, N - 1 of them, less those a
 * masked shard marks as no target (SHARD_NO_LOSS: tokens are as shard_read gives them). The windows
 * run through the backend's forward (no backward) be->B at a time; the rows of a last batch with
 * fewer windows, and the positions past the end of the last window, have ignored targets. Packed
 * instead (data/pack.h), the windows are a PackedWindows' of the same tokens, in its order. */
#ifndef FUSEDGPT_EVAL_H
#define FUSEDGPT_EVAL_H

#include <stdint.h>
#include <stdio.h>

#include "data/pack.h"
#include "model/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The windows of T that n tokens make (n >= 2): ceil((n - 1) / T). */
uint64_t eval_window_count(uint64_t n, int T);

/* The mean loss over the targets of tokens[0..n) (n >= 2, every token's id below the model's
 * vocabulary), in windows of be->T, into *mean (0 when there is none). 0, or -1 with a message in err (ERR_LEN bytes)
 * when there is no memory for a batch. */
int eval_mean_loss(Backend *be, const uint32_t *tokens, uint64_t n, double *mean, char *err);

/* Means over the targets (0 when there is none): the loss (cross-entropy), the objective under the
 * backend's loss options (the loss when it has none), the log-sum-exp of the logits; and the count. */
typedef struct {
    double loss, objective, lse;
    uint64_t targets;
} EvalMeans;

/* eval_mean_loss's windows (packed's, when not NULL), with every mean, and with per_token non-NULL
 * each target's loss in window order (means->targets values) written to it as float32
 * little-endian. -1 with a message in err also when a write fails (per_token_name names the file in
 * it). */
int eval_run(Backend *be, const uint32_t *tokens, uint64_t n, const PackedWindows *packed, EvalMeans *means,
             FILE *per_token, const char *per_token_name, char *err);

#ifdef __cplusplus
}
#endif

#endif
