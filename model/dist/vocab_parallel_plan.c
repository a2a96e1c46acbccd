/* model/dist/vocab_parallel_plan.c - how --vocab-parallel splits a model (model/dist/vocab_parallel_plan.h). */
#include <stdio.h>

#include "common/err.h"
#include "model/cpu/vocab_parallel_cpu.h"
#include "model/dist/vocab_parallel_plan.h"

int vocab_parallel_check(const ParamTable *t, int world, int N, char *err) {
    const GPTConfig *cfg = &t->cfg;
    const int Vp = cfg->padded_vocab_size;
    const ParamInfo *head = param_whole(t, ROLE_LM_HEAD);
    if (!cfg->untied_head || !head || head != &t->params[t->count - 1]) {
        snprintf(err, ERR_LEN, "--vocab-parallel splits an untied output layer (lm_head.weight) only so far, and this "
                               "model's is its token embedding (pass --untied-head with --family llama, qwen2 or "
                               "qwen3, or leave out --vocab-parallel)");
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

ParamTable vocab_parallel_replicated(const ParamTable *t) {
    ParamTable r = *t;
    const ParamInfo *head = param_whole(t, ROLE_LM_HEAD);
    if (head && head == &t->params[t->count - 1]) {
        r.count = t->count - 1;
        r.total = head->offset;
        r.global_index[ROLE_LM_HEAD] = -1;
    }
    return r;
}
