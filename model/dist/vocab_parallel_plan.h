/* model/dist/vocab_parallel_plan.h - how --vocab-parallel splits a model over the ranks (host only:
 * the trainer's checks and the CPU tests use it; model/dist/vocab_parallel.h runs the split). */
#ifndef FUSEDGPT_VOCAB_PARALLEL_PLAN_H
#define FUSEDGPT_VOCAB_PARALLEL_PLAN_H

#include "model/gpt.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 1 when the model's head splits over `world` ranks of N rows each; else 0 with a one-line reason
 * in err (ERR_LEN bytes): a tied head, Vp not a multiple of world, a slice of padding only. */
int vocab_parallel_check(const ParamTable *t, int world, int N, char *err);

/* The table without the head row: the rows every rank keeps whole and reduces as data parallelism
 * does (params points into t's; nothing to free). The table itself when the head is not split. */
ParamTable vocab_parallel_replicated(const ParamTable *t);

#ifdef __cplusplus
}
#endif

#endif
