/* model/train/schedule.h - the learning-rate schedule. Every shape climbs linearly to the peak lr over
 * `warmup` steps; then
 *   cosine: from the peak (the first step after the warmup) to lr_final (the last step) along half a cosine;
 *   linear: the same span along a straight line;
 *   wsd:    warmup-stable-decay: the peak until the last decay steps, which fall to lr_final as
 *           1 - sqrt(progress) (the cooldown shape Hägele et al., 2024, found best). A run stopped in the
 *           stable part can be resumed with a larger total and decays at its new end.
 * Steps are 0-based. The last step (total_steps - 1) runs at lr_final when the warmup leaves it two
 * steps (cosine, linear) or one (wsd); with fewer it runs at lr. */
#ifndef FUSEDGPT_SCHEDULE_H
#define FUSEDGPT_SCHEDULE_H

typedef enum { LR_COSINE = 0, LR_LINEAR = 1, LR_WSD = 2 } LrShape;

typedef struct {
    LrShape shape;
    int total_steps, warmup;
    int decay_steps; /* wsd: the steps at the end that decay; 0: a fifth of total_steps. Unused by the others. */
    float lr, lr_final;
} LrSchedule;

float lr_at_step(const LrSchedule *s, int step);

/* wsd: the decay's length asked for: decay_steps, or a fifth of total_steps (at least 1). 0 for the
 * other shapes. */
int lr_wsd_decay_asked(const LrSchedule *s);

/* wsd: the decay's length as run: the length asked for, at most the steps the warmup leaves. 0 for the
 * other shapes. */
int lr_wsd_decay_steps(const LrSchedule *s);

/* "cosine", "linear" or "wsd"; parse returns 0, or -1 for any other name. */
const char *lr_shape_name(LrShape shape);
int lr_shape_parse(const char *name, LrShape *shape);

#endif
