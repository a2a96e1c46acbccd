/* model/train/step_check.h - the check every training step passes before its update: a loss or gradient
 * norm that is NaN or Inf stops the run (with the last checkpoint untouched) instead of writing
 * non-finite weights. */
#ifndef FUSEDGPT_STEP_CHECK_H
#define FUSEDGPT_STEP_CHECK_H

#include <stddef.h>

/* 1 when loss and norm are both finite; else 0 with the error line for step (1-based) in msg: what
 * is non-finite (the loss first: a non-finite loss makes the norm so too), which way, and the fix (at
 * step 1, before any update, the starting weights or the loss options rather than the learning rate). */
int step_is_finite(float loss, float norm, int step, char *msg, size_t n);

#endif
