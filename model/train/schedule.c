#include "model/train/schedule.h"

#include <math.h>

float lr_at_step(int step, int total_steps, int warmup, float lr, float lr_final) {
    if (step < warmup) return lr * (float)(step + 1) / (float)warmup;
    int decay_steps = total_steps - warmup;
    if (decay_steps <= 1) return lr;
    /* progress reaches 1 at the last step (total_steps - 1), which therefore runs at lr_final */
    double progress = (double)(step - warmup) / (double)(decay_steps - 1);
    if (progress > 1.0) progress = 1.0;
    return (float)(lr_final + 0.5 * (lr - lr_final) * (1.0 + cos(3.14159265358979323846 * progress)));
}
