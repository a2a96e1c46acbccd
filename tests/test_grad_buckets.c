/* The data-parallel bucket plan (model/dist/grad_buckets.c): buckets tile the layout, each holds only
 * values the backward has finished when the bucket is reduced, and ZeRO-1 shards split evenly; the
 * bf16 wire's rounds cover each bucket once, each rank's part being its ZeRO-1 shard piece. */
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "model/dist/grad_buckets.h"
#include "tests/test.h"

/* Position of a sync point in the backward: output layer, ln_f, layers L-1..0, encoder. */
static int point_time(SyncPoint p, int layer, int L) {
    switch (p) {
    case SYNC_AFTER_OUTPUT: return 0;
    case SYNC_AFTER_LNF: return 1;
    case SYNC_AFTER_LAYER: return 2 + (L - 1 - layer);
    case SYNC_AFTER_ENCODER: return 2 + L;
    }
    return -1;
}

/* When the backward has finished element i (before any reduction). With early embeddings the
 * encoder's share is added after the reduction, so the embeddings count as finished after the
 * output layer. */
static int element_time(const ParamTable *t, size_t i, int early_embeddings) {
    int L = t->cfg.num_layers;
    for (int k = 0; k < t->count; k++) {
        const ParamInfo *p = &t->params[k];
        if (i < p->offset || i >= p->offset + p->numel) continue;
        if (p->role == ROLE_WTE || p->role == ROLE_WPE) return early_embeddings ? 0 : 2 + L;
        if (p->role == ROLE_LM_HEAD) return 0;
        if (p->role == ROLE_LNF_W || p->role == ROLE_LNF_B) return 1;
        return 2 + (L - 1 - p->layer);
    }
    return 0; /* padding: zero from the start */
}

/* family: GPT-2, or a Llama with an untied head (whose lm_head lies after the final norm) */
static void family_table(ParamTable *t, ModelFamily family, int L, int C, int V) {
    GPTConfig cfg = {.num_layers = L, .num_heads = 1, .dim = C, .max_seq_len = 16, .vocab_size = V};
    gpt_family_defaults(&cfg, family);
    cfg.untied_head = family != FAMILY_GPT2;
    gpt_config_finish(&cfg);
    char err[ERR_LEN];
    REQUIRE(param_table_build(t, &cfg, err) == 0, "%s", err);
}

static void check_family_plan(ModelFamily family, int L, int C, int V, int world, int zero1, int early,
                              size_t min_bucket) {
    ParamTable t;
    char err[ERR_LEN];
    family_table(&t, family, L, C, V);
    BucketPlan plan[8];
    for (int r = 0; r < world; r++)
        REQUIRE(bucket_plan_build(&plan[r], &t, world, r, zero1, early, min_bucket, err) == 0, "%s", err);
    const BucketPlan *p = &plan[0];
    CHECK(p->padded_total >= t.total && p->padded_total < t.total + (size_t)world,
          "padded total %zu for %zu values, world %d", p->padded_total, t.total, world);
    if (zero1) CHECK(p->padded_total % (size_t)world == 0, "padded total %zu, world %d", p->padded_total, world);
    /* tiling: every element in exactly one bucket */
    unsigned char *seen = calloc(p->padded_total, 1);
    int last_time = -1;
    for (int b = 0; b < p->num_buckets; b++) {
        const GradBucket *g = &p->buckets[b];
        int when = point_time(g->point, g->layer, L);
        CHECK(when >= last_time, "L=%d world=%d: bucket %d (time %d) comes after time %d", L, world, b, when,
              last_time);
        last_time = when;
        CHECK(g->count > 0, "bucket %d is empty", b);
        int lowest = g->point == SYNC_AFTER_LAYER && g->layer == 0;
        if (g->point == SYNC_AFTER_LNF || (g->point == SYNC_AFTER_LAYER && !lowest))
            CHECK(g->count >= min_bucket, "bucket %d holds %zu values, fewer than %zu", b, g->count, min_bucket);
        if (zero1) CHECK(g->count % (size_t)world == 0, "bucket %d of %zu values, world %d", b, g->count, world);
        for (size_t i = g->begin; i < g->begin + g->count && i < p->padded_total; i++) {
            seen[i]++;
            int fin = element_time(&t, i, early);
            if (fin > when) {
                CHECK(0, "L=%d C=%d world=%d zero1=%d early=%d: element %zu (finished at %d) is in bucket %d "
                      "reduced at %d", L, C, world, zero1, early, i, fin, b, when);
                break;
            }
        }
    }
    size_t bad = 0;
    for (size_t i = 0; i < p->padded_total; i++) bad += seen[i] != 1;
    CHECK(bad == 0, "L=%d world=%d zero1=%d: %zu elements not in exactly one bucket", L, world, zero1, bad);
    /* ZeRO-1: the ranks' pieces of each bucket tile it; each rank's shard is compact */
    if (zero1) {
        memset(seen, 0, p->padded_total);
        for (int r = 0; r < world; r++) {
            size_t off = 0;
            CHECK(plan[r].shard_elems == p->padded_total / (size_t)world, "rank %d shard %zu of %zu", r,
                  plan[r].shard_elems, p->padded_total);
            for (int k = 0; k < plan[r].num_buckets; k++) {
                const ShardPiece *s = &plan[r].pieces[k];
                CHECK(s->shard_offset == off, "rank %d piece %d at %zu, expected %zu", r, k, s->shard_offset, off);
                off += s->count;
                for (size_t i = s->begin; i < s->begin + s->count; i++) seen[i]++;
                const ShardPiece *q = bucket_plan_piece(&plan[r], k);
                const GradBucket *g = &plan[r].buckets[k];
                CHECK(q && q->begin == g->begin + (size_t)r * (g->count / (size_t)world),
                      "rank %d: bucket %d's piece is not its rank-th part", r, k);
            }
        }
        bad = 0;
        for (size_t i = 0; i < p->padded_total; i++) bad += seen[i] != 1;
        CHECK(bad == 0, "L=%d world=%d: %zu elements in no shard or in two", L, world, bad);
    }
    free(seen);
    for (int r = 0; r < world; r++) bucket_plan_free(&plan[r]);
    param_table_free(&t);
}

static void check_plan(int L, int C, int V, int world, int zero1, int early, size_t min_bucket) {
    check_family_plan(FAMILY_GPT2, L, C, V, world, zero1, early, min_bucket);
}

TEST(grad_buckets_tile_the_layout_and_hold_only_finished_values) {
    const int worlds[] = {1, 2, 3, 4, 7, 8};
    for (int w = 0; w < 6; w++)
        for (int zero1 = 0; zero1 <= 1; zero1++)
            for (int early = 0; early <= !zero1; early++) {
                for (size_t min_bucket = 0; min_bucket <= 100000; min_bucket += 20000) {
                    check_plan(1, 8, 11, worlds[w], zero1, early, min_bucket);
                    check_plan(3, 24, 300, worlds[w], zero1, early, min_bucket);
                    check_plan(5, 64, 1001, worlds[w], zero1, early, min_bucket);
                }
            }
}

TEST(grad_buckets_of_a_llama_follow_its_tables_layer_ranges) {
    const int worlds[] = {1, 3, 8};
    for (int w = 0; w < 3; w++)
        for (int zero1 = 0; zero1 <= 1; zero1++)
            for (size_t min_bucket = 0; min_bucket <= 40000; min_bucket += 20000)
                check_family_plan(FAMILY_LLAMA, 3, 24, 300, worlds[w], zero1, 0, min_bucket);
}

/* ZeRO-1's weight gather runs in layout order (the buckets by where they begin: the bucket array
 * reversed), and a forward about to read values [0, end) waits for the first
 * bucket_plan_count_below(end) of that order: together they must cover [0, end), and the next
 * bucket (not waited for) must hold nothing below end. */
static void check_forward_gather_order(ModelFamily family, int L, int world, size_t min_bucket) {
    ParamTable t;
    char err[ERR_LEN];
    family_table(&t, family, L, 24, 300);
    BucketPlan p;
    REQUIRE(bucket_plan_build(&p, &t, world, world - 1, 1, 0, min_bucket, err) == 0, "%s", err);
    const int nb = p.num_buckets;
    for (int i = 1; i < nb; i++)
        CHECK(p.buckets[i].begin + p.buckets[i].count == p.buckets[i - 1].begin,
              "%s world %d: bucket %d [%zu, +%zu) is not right below bucket %d at %zu", gpt_family_name(family),
              world, i, p.buckets[i].begin, p.buckets[i].count, i - 1, p.buckets[i - 1].begin);
    CHECK(p.buckets[nb - 1].begin == 0, "the forward's first bucket starts at %zu", p.buckets[nb - 1].begin);
    /* what the forward reads up to, in order: the embeddings, layer 0..L-1, the tail */
    for (int l = 0; l <= L + 1; l++) {
        const size_t end = l <= L ? t.layer_begin[l] : t.total;
        const int n = bucket_plan_count_below(&p, end);
        const size_t covered = n ? p.buckets[nb - n].begin + p.buckets[nb - n].count : 0;
        CHECK(covered >= end, "%s world %d min %zu: values below %zu need %d buckets, which cover only %zu",
              gpt_family_name(family), world, min_bucket, end, n, covered);
        CHECK(n == nb || p.buckets[nb - 1 - n].begin >= end,
              "%s world %d min %zu: values below %zu need %d buckets, but the next one starts at %zu",
              gpt_family_name(family), world, min_bucket, end, n, p.buckets[nb - 1 - n].begin);
    }
    CHECK(bucket_plan_count_below(&p, t.total) == nb, "the tail needs %d of %d buckets",
          bucket_plan_count_below(&p, t.total), nb);
    CHECK(bucket_plan_count_below(&p, 0) == 0, "nothing below 0 needs %d buckets", bucket_plan_count_below(&p, 0));
    bucket_plan_free(&p);
    param_table_free(&t);
}

TEST(zero1_gather_in_forward_order_has_every_layers_values_once_its_counted_buckets_arrive) {
    const int worlds[] = {2, 3, 8};
    for (int w = 0; w < 3; w++)
        for (size_t min_bucket = 0; min_bucket <= 40000; min_bucket += 5000) {
            check_forward_gather_order(FAMILY_GPT2, 5, worlds[w], min_bucket);
            check_forward_gather_order(FAMILY_LLAMA, 3, worlds[w], min_bucket);
        }
}

/* The one bucket that holds every value of row r (-1 when the row is split or in none: a row is
 * reduced exactly once, whole, at one sync point). */
static int bucket_of_row(const BucketPlan *p, const ParamInfo *r) {
    int found = -1;
    for (int b = 0; b < p->num_buckets; b++) {
        const GradBucket *g = &p->buckets[b];
        if (r->offset >= g->begin + g->count || r->offset + r->numel <= g->begin) continue;
        if (found >= 0 || r->offset < g->begin || r->offset + r->numel > g->begin + g->count) return -1;
        found = b;
    }
    return found;
}

/* A RoPE family at world 2 with buckets of one layer each: every layer's rows at that layer's sync
 * point, the final norm (and an untied lm_head, final since the output layer) together at ln_f's,
 * and the token embedding, which the encoder's backward finishes, in the last bucket (early: the
 * first, right after the output layer, the encoder's share added after it). */
static void check_rows_sync_points(ModelFamily family, int untied, int zero1, int early) {
    GPTConfig cfg = {.num_layers = 3, .num_heads = 2, .dim = 16, .max_seq_len = 16, .vocab_size = 50};
    gpt_family_defaults(&cfg, family);
    cfg.num_kv_heads = 1, cfg.head_dim = 8, cfg.ffn_dim = 32, cfg.untied_head = untied;
    gpt_config_finish(&cfg);
    ParamTable t;
    char err[ERR_LEN];
    REQUIRE(param_table_build(&t, &cfg, err) == 0, "%s", err);
    CHECK((param_whole(&t, ROLE_LM_HEAD) != NULL) == untied, "%s: lm_head present %d, untied %d",
          gpt_family_name(family), param_whole(&t, ROLE_LM_HEAD) != NULL, untied);
    BucketPlan p;
    REQUIRE(bucket_plan_build(&p, &t, 2, 1, zero1, early, 0, err) == 0, "%s", err);
    CHECK(p.num_buckets == cfg.num_layers + 2, "%d buckets, expected one per layer, ln_f and the embedding",
          p.num_buckets);
    const int embed_bucket = early ? 0 : p.num_buckets - 1;
    for (int i = 0; i < t.count; i++) {
        const ParamInfo *r = &t.params[i];
        int b = bucket_of_row(&p, r);
        REQUIRE(b >= 0, "%s zero1=%d early=%d: %s is not reduced whole by exactly one bucket",
                gpt_family_name(family), zero1, early, r->name);
        const GradBucket *g = &p.buckets[b];
        if (r->role == ROLE_WTE) {
            CHECK(b == embed_bucket && g->point == (early ? SYNC_AFTER_OUTPUT : SYNC_AFTER_ENCODER),
                  "%s early=%d: the embedding is in bucket %d at point %d", gpt_family_name(family), early, b,
                  g->point);
        } else if (r->role == ROLE_LNF_W || r->role == ROLE_LM_HEAD) {
            CHECK(b == (early ? 1 : 0) && g->point == SYNC_AFTER_LNF, "%s zero1=%d: %s is in bucket %d at point %d",
                  gpt_family_name(family), zero1, r->name, b, g->point);
        } else {
            CHECK(g->point == SYNC_AFTER_LAYER && g->layer == r->layer, "%s zero1=%d: %s is reduced at point %d "
                  "layer %d", gpt_family_name(family), zero1, r->name, g->point, g->layer);
        }
    }
    bucket_plan_free(&p);
    param_table_free(&t);
}

TEST(grad_buckets_reduce_an_untied_llamas_lm_head_once_with_the_final_norm_and_its_embedding_last) {
    for (int zero1 = 0; zero1 <= 1; zero1++)
        for (int early = 0; early <= !zero1; early++) check_rows_sync_points(FAMILY_LLAMA, 1, zero1, early);
}

TEST(grad_buckets_reduce_a_tied_qwen3s_rows_at_their_layers_and_its_embedding_last) {
    for (int zero1 = 0; zero1 <= 1; zero1++)
        for (int early = 0; early <= !zero1; early++) check_rows_sync_points(FAMILY_QWEN3, 0, zero1, early);
}

TEST(wire_split_rounds_cover_every_value_of_a_bucket_once_inside_its_ranks_part) {
    const size_t sizes[] = {1, 2, 7, 100, 1001, 4096, 65537};
    const int worlds[] = {1, 2, 3, 4, 7, 8};
    const size_t slices[] = {1, 3, 64, 1000, (size_t)1 << 40};
    for (int a = 0; a < 7; a++)
        for (int w = 0; w < 6; w++)
            for (int c = 0; c < 5; c++) {
                const size_t n = sizes[a];
                const int world = worlds[w];
                const WireSplit s = wire_split(n, world, slices[c]);
                unsigned char *seen = calloc(n, 1);
                size_t parts = 0, bad = 0;
                int last_round_used = 0;
                for (int j = 0; j < world; j++) {
                    const size_t part_begin = (size_t)j * s.part, part_len = wire_part_len(&s, j);
                    parts += part_len;
                    for (int k = 0; k < s.rounds; k++) {
                        const size_t len = wire_slice_len(&s, j, k), begin = part_begin + (size_t)k * s.slice;
                        bad += len > slices[c] || (len && begin + len > part_begin + part_len);
                        last_round_used |= k == s.rounds - 1 && len > 0;
                        for (size_t i = begin; i < begin + len && i < n; i++) seen[i]++;
                    }
                }
                for (size_t i = 0; i < n; i++) bad += seen[i] != 1;
                CHECK(bad == 0 && parts == n && last_round_used,
                      "n %zu, world %d, slice %zu: %zu values misplaced, parts hold %zu, last round %s", n, world,
                      slices[c], bad, parts, last_round_used ? "used" : "empty");
                free(seen);
            }
}

TEST(wire_split_of_a_zero1_bucket_gives_each_rank_its_shard_piece) {
    GPTConfig cfg = {.num_layers = 3, .num_heads = 1, .dim = 24, .max_seq_len = 16, .vocab_size = 300};
    gpt_config_finish(&cfg);
    ParamTable t;
    char err[ERR_LEN];
    REQUIRE(param_table_build(&t, &cfg, err) == 0, "%s", err);
    const int worlds[] = {2, 3, 4, 8};
    for (int w = 0; w < 4; w++)
        for (int r = 0; r < worlds[w]; r++) {
            BucketPlan p;
            REQUIRE(bucket_plan_build(&p, &t, worlds[w], r, 1, 0, 0, err) == 0, "%s", err);
            for (int b = 0; b < p.num_buckets; b++) {
                const WireSplit s = wire_split(p.buckets[b].count, worlds[w], 5);
                const ShardPiece *piece = bucket_plan_piece(&p, b);
                CHECK(piece->begin == p.buckets[b].begin + (size_t)r * s.part && piece->count == wire_part_len(&s, r),
                      "world %d rank %d bucket %d: part [%zu, +%zu) but shard piece [%zu, +%zu)", worlds[w], r, b,
                      p.buckets[b].begin + (size_t)r * s.part, wire_part_len(&s, r), piece->begin, piece->count);
            }
            bucket_plan_free(&p);
        }
    param_table_free(&t);
}

TEST(grad_buckets_reject_a_bad_rank) {
    GPTConfig cfg = {.num_layers = 2, .num_heads = 1, .dim = 8, .max_seq_len = 4, .vocab_size = 11};
    gpt_config_finish(&cfg);
    ParamTable t;
    char err[ERR_LEN];
    REQUIRE(param_table_build(&t, &cfg, err) == 0, "%s", err);
    BucketPlan p;
    CHECK(bucket_plan_build(&p, &t, 2, 2, 1, 0, 0, err) == -1, "rank 2 of 2 accepted");
    CHECK(bucket_plan_build(&p, &t, 0, 0, 1, 0, 0, err) == -1, "world 0 accepted");
    CHECK(bucket_plan_build(&p, &t, 2, 0, 1, 1, 0, err) == -1, "ZeRO-1 with early embeddings accepted");
    param_table_free(&t);
}
