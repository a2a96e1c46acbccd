#include "model/train/schedule.h"

#include <math.h>
#include <string.h>

static const char *const SHAPE_NAMES[] = {"cosine", "linear", "wsd"};

const char *lr_shape_name(LrShape shape) {
    return (unsigned)shape < sizeof SHAPE_NAMES / sizeof SHAPE_NAMES[0] ? SHAPE_NAMES[shape] : "unknown";
}

int lr_shape_parse(const char *name, LrShape *shape) {
    for (unsigned i = 0; i < sizeof SHAPE_NAMES / sizeof SHAPE_NAMES[0]; i++)
        if (!strcmp(name, SHAPE_NAMES[i])) {
            *shape = (LrShape)i;
            return 0;
        }
    return -1;
}

int lr_wsd_decay_asked(const LrSchedule *s) {
    if (s->shape != LR_WSD) return 0;
    if (s->decay_steps > 0) return s->decay_steps;
    return s->total_steps / 5 > 1 ? s->total_steps / 5 : 1;
}

int lr_wsd_decay_steps(const LrSchedule *s) {
    const int after_warmup = s->total_steps - s->warmup, d = lr_wsd_decay_asked(s);
    if (after_warmup <= 0) return 0;
    return d < after_warmup ? d : after_warmup;
}

float lr_at_step(const LrSchedule *s, int step) {
    const float lr = s->lr, lr_final = s->lr_final;
    if (step < s->warmup) return lr * (float)(step + 1) / (float)s->warmup;
    if (s->shape == LR_WSD) {
        const int d = lr_wsd_decay_steps(s), start = s->total_steps - d;
        if (d <= 0 || step < start) return lr;
        /* the first decay step is already below the peak; the last (progress 1) runs at lr_final */
        double progress = (double)(step - start + 1) / (double)d;
        if (progress > 1.0) progress = 1.0;
        return (float)(lr_final + (lr - lr_final) * (1.0 - sqrt(progress)));
    }
    const int decay_steps = s->total_steps - s->warmup;
    if (decay_steps <= 1) return lr;
    /* progress reaches 1 at the last step (total_steps - 1), which therefore runs at lr_final */
    double progress = (double)(step - s->warmup) / (double)(decay_steps - 1);
    if (progress > 1.0) progress = 1.0;
    if (s->shape == LR_LINEAR) return (float)(lr_final + (lr - lr_final) * (1.0 - progress));
    return (float)(lr_final + 0.5 * (lr - lr_final) * (1.0 + cos(3.14159265358979323846 * progress)));
}
