/* How --vocab-parallel splits a model (model/dist/vocab_parallel_plan.h): which models and rank
 * counts it takes, and the rows every rank keeps whole. */
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "model/dist/vocab_parallel_plan.h"
#include "tests/test.h"

static void build(ParamTable *t, int untied, int vocab) {
    GPTConfig cfg = {0};
    cfg.num_layers = 2, cfg.num_heads = 2, cfg.dim = 64, cfg.max_seq_len = 32, cfg.vocab_size = vocab;
    gpt_family_defaults(&cfg, FAMILY_QWEN3);
    cfg.num_kv_heads = 1, cfg.head_dim = 32, cfg.ffn_dim = 96, cfg.untied_head = untied;
    gpt_config_finish(&cfg);
    char err[ERR_LEN];
    if (param_table_build(t, &cfg, err) != 0) fprintf(stderr, "%s\n", err);
}

TEST(vocab_parallel_keeps_every_row_but_lm_head_whole) {
    ParamTable t;
    build(&t, 1, 1000);
    const ParamInfo *head = param_whole(&t, ROLE_LM_HEAD);
    REQUIRE(head, "an untied table has lm_head");
    ParamInfo *rows = malloc((size_t)t.count * sizeof *rows);
    size_t begin = 99;
    ParamTable r = vocab_parallel_replicated(&t, rows, &begin);
    CHECK(r.count == t.count - 1 && r.total == head->offset && r.total + head->numel == t.total && begin == 0,
          "replicated rows: %d of %d, %zu of %zu values, from %zu", r.count, t.count, r.total, t.total, begin);
    CHECK(!param_whole(&r, ROLE_LM_HEAD) && param_whole(&r, ROLE_WTE)->offset == 0 &&
              !strcmp(param_whole(&r, ROLE_WTE)->name, param_whole(&t, ROLE_WTE)->name),
          "the replicated table still names lm_head, or lost the embedding");
    free(rows);
    param_table_free(&t);
}

/* A tied head is the token embedding, the first row: the others move down by its values, so that
 * every role and layer of the replicated table addresses the flat buffers that hold them alone. */
TEST(vocab_parallel_keeps_every_row_but_a_tied_embedding_whole_with_offsets_moved_down) {
    ParamTable t;
    build(&t, 0, 1000);
    const ParamInfo *wte = param_whole(&t, ROLE_WTE);
    ParamInfo *rows = malloc((size_t)t.count * sizeof *rows);
    size_t begin = 0;
    ParamTable r = vocab_parallel_replicated(&t, rows, &begin);
    CHECK(r.count == t.count - 1 && begin == wte->numel && r.total == t.total - wte->numel,
          "replicated rows: %d of %d, %zu of %zu values, from %zu", r.count, t.count, r.total, t.total, begin);
    CHECK(!param_whole(&r, ROLE_WTE), "the replicated table still names the token embedding");
    int moved = 1;
    for (int l = 0; l < t.cfg.num_layers; l++) {
        moved &= r.layer_begin[l] + begin == t.layer_begin[l];
        for (int role = FIRST_LAYER_ROLE; role < FIRST_LAYER_ROLE + NUM_LAYER_ROLES; role++) {
            const ParamInfo *a = param_of_layer(&t, l, (ParamRole)role), *b = param_of_layer(&r, l, (ParamRole)role);
            if (!a || !b) moved &= !a && !b;
            else moved &= !strcmp(a->name, b->name) && b->offset + begin == a->offset && b->numel == a->numel;
        }
    }
    const ParamInfo *a = param_whole(&t, ROLE_LNF_W), *b = param_whole(&r, ROLE_LNF_W);
    moved &= b && !strcmp(a->name, b->name) && b->offset + begin == a->offset && b->offset + b->numel == r.total;
    CHECK(moved, "a row of the replicated table is not the whole table's, moved down by the embedding");
    free(rows);
    param_table_free(&t);
}

TEST(vocab_parallel_takes_tied_and_untied_heads_whose_padded_vocabulary_splits_into_real_words) {
    ParamTable t;
    char err[ERR_LEN];
    for (int untied = 0; untied < 2; untied++) {
        build(&t, untied, 1000); /* Vp = 1024 */
        CHECK(vocab_parallel_check(&t, 2, 64, err) && vocab_parallel_check(&t, 8, 1, err), "refused: %s", err);
        CHECK(!vocab_parallel_check(&t, 3, 64, err) && strstr(err, "split evenly over 3 ranks") && !strchr(err, '\n'),
              "3 ranks: %s", err);
        /* 16 ranks of 64 rows: the last holds words 960..999; 64 ranks of 16: rank 63's rows 1008..1023 are padding */
        CHECK(vocab_parallel_check(&t, 16, 64, err), "16 ranks: %s", err);
        CHECK(!vocab_parallel_check(&t, 64, 64, err) && strstr(err, "rank 63 only padding"), "64 ranks: %s", err);
        CHECK(!vocab_parallel_check(&t, 2, 0, err) && strstr(err, "at least one row"), "no rows: %s", err);
        param_table_free(&t);
    }
}
