/* model/train/step_check.c - the finite check of a training step (see step_check.h). */
#include "model/train/step_check.h"

#include <math.h>
#include <stdio.h>

int step_is_finite(float loss, float norm, int step, char *msg, size_t n) {
    if (isfinite(loss) && isfinite(norm)) return 1;
    const int loss_bad = !isfinite(loss);
    const float bad = loss_bad ? loss : norm;
    snprintf(msg, n,
             "error: %s is %s at step %d; stopping before anything of it is saved (checkpoints written earlier stay "
             "as they were; lower -l/--lr or check the data)",
             loss_bad ? "loss" : "gradient norm", isnan(bad) ? "NaN" : "Inf", step);
    return 0;
}
