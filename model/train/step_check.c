/* model/train/step_check.c - the finite check of a training step (see step_check.h). */
#include "model/train/step_check.h"

#include <math.h>
#include <stdio.h>

int step_is_finite(float loss, float norm, int step, char *msg, size_t n) {
    if (isfinite(loss) && isfinite(norm)) return 1;
    const int loss_bad = !isfinite(loss);
    const float bad = loss_bad ? loss : norm;
    /* Step 1 runs on weights no update has touched, so the learning rate cannot be the cause there. */
    const char *fix = step == 1 ? "no update has run yet, so check the starting weights (a checkpoint given to "
                                  "--init-from) and the loss options (--z-loss, --logit-softcap, --label-smoothing)"
                                : "lower -l/--lr or --weight-decay, or check the data";
    snprintf(msg, n,
             "error: %s is %s at step %d; stopping before anything of it is saved (checkpoints written earlier stay "
             "as they were; %s)",
             loss_bad ? "loss" : "gradient norm", isnan(bad) ? "NaN" : "Inf", step, fix);
    return 0;
}

int validation_is_finite(float loss, int step, int saved, char *msg, size_t n) {
    if (isfinite(loss)) return 1;
    char held[160] = "";
    if (saved && step > 0)
        snprintf(held, sizeof held, "; the checkpoint of step %d holds these weights: resume from an earlier one, or "
                 "start again", step);
    snprintf(msg, n, "error: the validation loss is %s after step %d (%s%s)", isnan(loss) ? "NaN" : "Inf", step,
             step == 0 ? "no update has run yet, so check the starting weights (a checkpoint given to --init-from) "
                         "and the loss options"
                       : "the weights diverged: lower -l/--lr or --weight-decay, or check the data",
             held);
    return 0;
}
