/* model/dist/vocab_parallel_plan.c - how --vocab-parallel splits a model (model/dist/vocab_parallel_plan.h). */
#include <stdio.h>

#include "common/err.h"
#include "model/cpu/vocab_parallel_cpu.h"
#include "model/dist/vocab_parallel_plan.h"

/* The head's row: lm_head, the table's last, or a tied head's token embedding, its first. */
static const ParamInfo *split_row(const ParamTable *t) {
    const ParamInfo *head = param_whole(t, head_role(&t->cfg));
    if (!head) return NULL;
    if (t->cfg.untied_head) return head == &t->params[t->count - 1] ? head : NULL;
    return head == &t->params[0] ? head : NULL;
}

int vocab_parallel_check(const ParamTable *t, int world, int N, char *err) {
    const GPTConfig *cfg = &t->cfg;
    const int Vp = cfg->padded_vocab_size;
    if (!split_row(t)) {
        snprintf(err, ERR_LEN, "--vocab-parallel splits an output layer that is the table's first row (a tied "
                               "token embedding) or its last (lm_head.weight), and this model's is neither (leave "
                               "out --vocab-parallel)");
        return 0;
    }
    if (world < 1 || Vp % world) {
        snprintf(err, ERR_LEN, "--vocab-parallel needs the padded vocabulary (%d) to split evenly over %d ranks "
                               "(use a rank count that divides it)", Vp, world);
        return 0;
    }
    for (int r = 0; r < world; r++) {
        VocabSlice s = vocab_slice(cfg->vocab_size, Vp, world, r);
        if (s.real < 1) {
            snprintf(err, ERR_LEN, "--vocab-parallel over %d ranks gives rank %d only padding rows of the vocabulary "
                                   "(use fewer ranks)", world, r);
            return 0;
        }
    }
    if (N < 1) {
        snprintf(err, ERR_LEN, "--vocab-parallel needs at least one row per rank");
        return 0;
    }
    return 1;
}

ParamTable vocab_parallel_replicated(const ParamTable *t, ParamInfo *rows, size_t *begin) {
    ParamTable r = *t;
    const ParamInfo *head = split_row(t);
    *begin = 0;
    for (int i = 0; i < t->count; i++) rows[i] = t->params[i];
    r.params = rows;
    if (!head) return r;
    const int first = head == &t->params[0]; /* tied: the rows after it move down by its values */
    const size_t shift = first ? head->numel : 0;
    const int k = (int)(head - t->params);
    r.count = t->count - 1;
    r.total = t->total - head->numel;
    for (int i = 0; i < r.count; i++) {
        rows[i] = t->params[i + first];
        rows[i].offset -= shift;
    }
    for (int role = 0; role < NUM_ROLES; role++) {
        const int i = t->global_index[role];
        r.global_index[role] = i == k ? -1 : i > k ? i - 1 : i;
    }
    for (int l = 0; l < t->cfg.num_layers; l++)
        for (int j = 0; j < NUM_LAYER_ROLES; j++) {
            const int i = t->layer_index[l][j];
            r.layer_index[l][j] = i > k ? i - 1 : i;
        }
    for (int l = 0; l <= t->cfg.num_layers; l++) r.layer_begin[l] = t->layer_begin[l] - shift;
    *begin = shift;
    return r;
}
