/* model/train/loss_weights.h - how much each micro-batch weighs in a step's loss when the data marks
 * tokens that are no target (a fine-tuning prompt's, SHARD_LOSS_MASK).
 *
 * A backend's micro-step returns the mean loss over its valid targets and scales its gradients by
 * a loss_scale (model/backend.h). With every target valid each micro-batch weighs 1/accum. With
 * masked targets the micro-batches hold different numbers of them, and the step's loss is, as in
 * transformers' Trainer (its loss over num_items_in_batch), the sum over every valid target of the
 * step on every rank divided by their count: each target weighs the same, wherever it lies. */
#ifndef FUSEDGPT_LOSS_WEIGHTS_H
#define FUSEDGPT_LOSS_WEIGHTS_H

#include <stddef.h>
#include <stdint.h>

/* The targets of n that are valid (not -1). */
uint64_t count_valid_targets(const int *targets, size_t n);

/* The loss_scale of each of a step's accum micro-batches on this rank, into scales[accum]:
 *   mine[a]: micro-batch a's valid targets on this rank;
 *   every[a]: micro-batch a's valid targets summed over the world's ranks.
 * With the data-parallel layer each rank's micro-step is of its own mean and the ranks average
 * their gradients: scale = world · mine[a] / total. The vocabulary-parallel layer's micro-step is
 * already of the mean over every rank's rows: scale = every[a] / total. Either way, the step's
 * loss is the ranks' average of sum over a of (micro-batch a's mean · scales[a]). A step with no
 * valid target (total 0) gets scales of 0: no gradient. */
void step_loss_scales(const uint64_t *mine, const uint64_t *every, int accum, int world, int vocab_parallel,
                      float *scales);

/* num / den rounded once to float, as 1.0f / accum is when num / den reduces to 1 / accum. */
float exact_ratio(uint64_t num, uint64_t den);

#endif
