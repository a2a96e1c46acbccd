/* model/train/schedule.h - learning-rate schedule: linear warmup to lr over `warmup` steps, then cosine
 * decay to lr_final at the last step. Steps are 0-based. */
#ifndef FUSEDGPT_SCHEDULE_H
#define FUSEDGPT_SCHEDULE_H

float lr_at_step(int step, int total_steps, int warmup, float lr, float lr_final);

#endif
