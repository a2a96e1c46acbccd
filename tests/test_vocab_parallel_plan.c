/* How --vocab-parallel splits a model (model/dist/vocab_parallel_plan.h): which models and rank
 * counts it takes, and the rows every rank keeps whole. */
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
    ParamTable r = vocab_parallel_replicated(&t);
    CHECK(r.count == t.count - 1 && r.total == head->offset && r.total + head->numel == t.total,
          "replicated rows: %d of %d, %zu of %zu values", r.count, t.count, r.total, t.total);
    CHECK(!param_whole(&r, ROLE_LM_HEAD) && param_whole(&r, ROLE_WTE) == param_whole(&t, ROLE_WTE),
          "the replicated table still names lm_head, or lost the embedding");
    param_table_free(&t);
}

TEST(vocab_parallel_takes_untied_heads_whose_padded_vocabulary_splits_into_real_words) {
    ParamTable t;
    char err[ERR_LEN];
    build(&t, 1, 1000); /* Vp = 1024 */
    CHECK(vocab_parallel_check(&t, 2, 64, err) && vocab_parallel_check(&t, 8, 1, err), "refused: %s", err);
    CHECK(!vocab_parallel_check(&t, 3, 64, err) && strstr(err, "split evenly over 3 ranks"), "3 ranks: %s", err);
    /* 16 ranks of 64 rows: the last holds words 960..999; 64 ranks of 16: rank 63's rows 1008..1023 are padding */
    CHECK(vocab_parallel_check(&t, 16, 64, err), "16 ranks: %s", err);
    CHECK(!vocab_parallel_check(&t, 64, 64, err) && strstr(err, "rank 63 only padding"), "64 ranks: %s", err);
    CHECK(!vocab_parallel_check(&t, 2, 0, err) && strstr(err, "at least one row"), "no rows: %s", err);
    param_table_free(&t);
    build(&t, 0, 1000);
    CHECK(!vocab_parallel_check(&t, 2, 64, err) && strstr(err, "untied") && !strchr(err, '\n'), "tied: %s", err);
    ParamTable r = vocab_parallel_replicated(&t);
    CHECK(r.count == t.count && r.total == t.total, "a tied table lost rows");
    param_table_free(&t);
}
