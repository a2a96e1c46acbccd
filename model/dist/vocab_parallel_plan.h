/* model/dist/vocab_parallel_plan.h - how --vocab-parallel splits a model over the ranks (host only:
 * the trainer's checks and the CPU tests use it; model/dist/vocab_parallel.h runs the split). */
#ifndef FUSEDGPT_VOCAB_PARALLEL_PLAN_H
#define FUSEDGPT_VOCAB_PARALLEL_PLAN_H

#include "model/gpt.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 1 when the model's head splits over `world` ranks of N rows each; else 0 with a one-line reason
 * in err (ERR_LEN bytes): a head that is neither the table's first row (tied: the token embedding)
 * nor its last (lm_head), Vp not a multiple of world, a slice of padding only. */
int vocab_parallel_check(const ParamTable *t, int world, int N, char *err);

/* The rows every rank keeps whole and reduces as data parallelism does: the table without the
 * head's row, copied into rows (t->count entries, the caller's) with the offsets of the flat
 * buffers that hold them, from 0. *begin: where they start in the whole table's layout (a tied
 * head's values, which lie before them; 0 for lm_head, which lies after). The table itself (rows a
 * copy, *begin 0) when the head does not split. */
ParamTable vocab_parallel_replicated(const ParamTable *t, ParamInfo *rows, size_t *begin);

#ifdef __cplusplus
}
#endif

#endif
