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

/* The same for a validation loss after `step` updates (0: the starting weights): 1 when finite; else
 * 0 with the error line, which says that the checkpoint of that step holds the weights that gave
 * it (saved: one was written) and to resume from an earlier one. */
int validation_is_finite(float loss, int step, int saved, char *msg, size_t n);

#endif
