/* The loss options through the command line: `./train eval` with --logit-softcap, --z-loss,
 * --label-smoothing and --per-token against an fp64 reference written here from the CPU backend's
 * full-vocabulary logits; a checkpoint whose config.json sets final_logit_softcapping; the training
 * log's cross-entropy, objective and lse; and the range errors. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/err.h"
#include "data/shard.h"
#include "model/backend.h"
#include "model/train/hf_weights.h"
#include "tests/test.h"
#include "tests/test_util.h"

/* A tiny run of 2 steps (extra flags appended); its checkpoint is run/step_00000002. */
static int train_tiny(const char *run, const char *extra, char **out) {
    char shard[900], args[2400];
    snprintf(shard, sizeof shard, "%s/train.bin", test_tmpdir());
    if (write_pattern_shard(shard, 5000, 300, 1) != 0) return -1;
    snprintf(args, sizeof args, "-i %s --device cpu -e tiny -v 300 -b 2 -t 32 --max-seq-len 64 -x 2 -s 0 -o %s %s",
             shard, run, extra);
    return run_train(args, out);
}

typedef struct {
    double loss, objective; /* means */
    double *per_token;      /* [n - 1] */
    uint64_t n;
} Expected;

/* Each target's cross-entropy and objective from the checkpoint's logits (logits_at: no loss path
 * of the backend in it), capped here by cap, in fp64, over windows of T. */
static Expected expected(const char *dir, const char *shard, int T, double cap, double zl, double eps) {
    Expected e = {0, 0, NULL, 0};
    char err[ERR_LEN];
    GPTConfig cfg;
    ParamTable t = {0};
    uint32_t *tokens = NULL;
    ShardHeader hdr;
    float *p = NULL, *logits = NULL;
    int *window = NULL;
    Backend *be = NULL;
    if (hf_read_config(dir, &cfg, err) != 0 || param_table_build(&t, &cfg, err) != 0 ||
        shard_read(shard, (uint32_t)cfg.vocab_size, &tokens, &e.n, &hdr, err) != 0 ||
        !(p = malloc(t.total * sizeof *p)) || hf_read_weights(dir, &t, p, err) != 0 ||
        !(be = backend_cpu_create(&t, 1, T, OUTPUT_FUSED, OPTIMIZER_STATE_FP32, 1, NULL, err))) {
        test_fail(__FILE__, __LINE__, "the checkpoint's reference: %s", err);
    } else {
        const int V = cfg.vocab_size;
        be->ops->write_state(be, p, NULL, NULL);
        e.per_token = malloc((e.n - 1) * sizeof(double));
        logits = malloc((size_t)V * sizeof *logits);
        window = malloc((size_t)T * sizeof *window);
        double *z = malloc((size_t)V * sizeof *z);
        for (uint64_t i = 0; i + 1 < e.n; i++) {
            const uint64_t start = i / (uint64_t)T * (uint64_t)T;
            for (int k = 0; k < T; k++) window[k] = start + (uint64_t)k < e.n ? (int)tokens[start + (uint64_t)k] : 0;
            be->ops->logits_at(be, window, (int)(i - start), logits);
            double mx = -INFINITY, zsum = 0, se = 0;
            for (int v = 0; v < V; v++) {
                z[v] = cap > 0 ? cap * tanh(logits[v] / cap) : logits[v];
                mx = fmax(mx, z[v]), zsum += z[v];
            }
            for (int v = 0; v < V; v++) se += exp(z[v] - mx);
            const double lse = mx + log(se), ce = lse - z[tokens[i + 1]];
            e.per_token[i] = ce;
            e.loss += ce / (double)(e.n - 1);
            e.objective += ((1 - eps) * ce + eps * (lse - zsum / V) + zl * lse * lse) / (double)(e.n - 1);
        }
        free(z);
    }
    if (be) be->ops->destroy(be);
    free(window), free(logits), free(p), free(tokens);
    param_table_free(&t);
    return e;
}

/* The value after `key ` on the output's last line; NAN when absent. */
static double last_line_value(const char *out, const char *key) {
    const char *last = out, *nl;
    while ((nl = strchr(last, '\n')) && nl[1]) last = nl + 1;
    char k[64];
    snprintf(k, sizeof k, "%s ", key);
    const char *at = strstr(last, k);
    return at ? strtod(at + strlen(k), NULL) : NAN;
}

TEST(eval_per_token_writes_each_targets_capped_loss_in_window_order_and_the_objective_beside_the_loss) {
    char run[800], dir[900], shard[900], file[900], link[900], args[3000], *out = NULL;
    snprintf(run, sizeof run, "%s/run", test_tmpdir());
    snprintf(dir, sizeof dir, "%s/step_00000002", run);
    snprintf(shard, sizeof shard, "%s/eval.bin", test_tmpdir());
    snprintf(file, sizeof file, "%s/per_token.f32", test_tmpdir());
    snprintf(link, sizeof link, "%s/per_token_link.f32", test_tmpdir());
    REQUIRE(train_tiny(run, "", &out) == 0, "train: %s", out);
    free(out);
    REQUIRE(write_pattern_shard(shard, 87, 300, 2) == 0, "eval shard");
    /* a cap of 0.02 bends the logits of this barely trained model (a few hundredths) */
    const Expected e = expected(dir, shard, 16, 0.02, 0.01, 0.1), plain = expected(dir, shard, 16, 0.0, 0.01, 0.1);
    REQUIRE(e.per_token && plain.per_token && e.n == 87, "reference");
    CHECK(fabs(e.loss - plain.loss) > 1e-4, "the cap changes the loss by only %.3g: the test would not see it ignored",
          fabs(e.loss - plain.loss));
    free(plain.per_token);
    const char *outputs[] = {"fused", "canonical"};
    for (int k = 0; k < 2; k++) {
        /* the second run writes through a link to the first's file: in place, the link kept */
        if (k == 1) REQUIRE(symlink(file, link) == 0, "symlink %s", link);
        snprintf(args, sizeof args,
                 "eval --init-from %s -i %s -t 16 -b 4 --device cpu --output %s --logit-softcap 0.02 --z-loss 0.01 "
                 "--label-smoothing 0.1 --per-token %s",
                 dir, shard, outputs[k], k == 1 ? link : file);
        int rc = run_train(args, &out);
        REQUIRE(rc == 0 && out, "'%s': (%d) %s", args, rc, out);
        const double loss = last_line_value(out, "loss"), obj = last_line_value(out, "objective");
        CHECK(fabs(loss - e.loss) <= 2e-6 + 1e-6 * e.loss, "%s: loss %.6f, the reference %.8f", outputs[k], loss,
              e.loss);
        CHECK(fabs(obj - e.objective) <= 2e-6 + 1e-6 * e.objective, "%s: objective %.6f, the reference %.8f",
              outputs[k], obj, e.objective);
        CHECK(fabs(obj - loss) > 1e-3, "%s: objective %.6f equals the loss: the options did nothing", outputs[k], obj);
        free(out);
        struct stat lsb;
        if (k == 1) CHECK(lstat(link, &lsb) == 0 && S_ISLNK(lsb.st_mode), "--per-token replaced the link %s", link);
        size_t len = 0;
        unsigned char *bytes = (unsigned char *)read_file(file, &len);
        REQUIRE(bytes && len == 4 * (e.n - 1), "%s: %zu bytes of per-token losses, expected %llu", outputs[k], len,
                (unsigned long long)(4 * (e.n - 1)));
        double worst = 0;
        for (uint64_t i = 0; i + 1 < e.n; i++) {
            uint32_t u = (uint32_t)bytes[4 * i] | (uint32_t)bytes[4 * i + 1] << 8 | (uint32_t)bytes[4 * i + 2] << 16 |
                         (uint32_t)bytes[4 * i + 3] << 24;
            float x;
            memcpy(&x, &u, 4);
            worst = fmax(worst, fabs(x - e.per_token[i]) / fmax(1.0, e.per_token[i]));
        }
        CHECK(worst <= 1e-5, "%s: a per-token loss is off by %.3g relative", outputs[k], worst);
        free(bytes);
    }
    /* an eval that fails before it runs leaves a file written in place (through a link) as it was */
    size_t kept_len = 0, again_len = 0;
    char *kept = read_file(file, &kept_len);
    snprintf(args, sizeof args, "eval --init-from %s -i %s/no_such.bin -t 16 --device cpu --per-token %s", dir,
             test_tmpdir(), link);
    CHECK(run_train(args, &out) == 1, "'%s': %s", args, out ? out : "");
    free(out);
    char *again = read_file(file, &again_len);
    CHECK(kept && again && kept_len == again_len && kept_len > 0 && !memcmp(kept, again, kept_len),
          "a failed eval changed the file behind --per-token's link (%zu bytes, then %zu)", kept_len, again_len);
    free(kept), free(again);
    /* a --per-token path that cannot be created is refused before the model or the data is read */
    snprintf(args, sizeof args, "eval --init-from %s -i %s -t 16 --device cpu --per-token %s/x", dir, shard, file);
    CHECK(run_train(args, &out) == 1 && out && strstr(out, "error: cannot create") && strstr(out, "for --per-token") &&
              !strstr(out, "eval: "),
          "'%s': %s", args, out);
    free(out);
    /* without an objective flag there is no objective on the line */
    snprintf(args, sizeof args, "eval --init-from %s -i %s -t 16 --device cpu --logit-softcap 0.02", dir, shard);
    CHECK(run_train(args, &out) == 0 && out && !strstr(out, "objective") &&
              fabs(last_line_value(out, "loss") - e.loss) <= 2e-6 + 1e-6 * e.loss,
          "'%s': %s", args, out);
    free(out);
    free(e.per_token);
}

/* config.json's final_logit_softcapping is part of the model: the eval of such a checkpoint is
 * capped without the flag, a contradicting flag is refused, and a training run's --logit-softcap
 * goes into its checkpoints' config.json. */
TEST(a_checkpoints_final_logit_softcapping_caps_its_logits_without_the_flag) {
    char run[800], dir[900], shard[900], cfgpath[1000], args[3000], *out = NULL;
    snprintf(run, sizeof run, "%s/run", test_tmpdir());
    snprintf(dir, sizeof dir, "%s/step_00000002", run);
    snprintf(shard, sizeof shard, "%s/eval.bin", test_tmpdir());
    snprintf(cfgpath, sizeof cfgpath, "%s/config.json", dir);
    REQUIRE(train_tiny(run, "--logit-softcap 0.25", &out) == 0, "train: %s", out);
    /* a GPT-2 with a cap loads into transformers without it: the run says so */
    CHECK(out && strstr(out, "note: checkpoints record the cap as final_logit_softcapping, but transformers' "
                             "GPT2LMHeadModel does not apply it"),
          "no note on the cap transformers leaves out: %s", out);
    free(out);
    char *cfg = read_text(cfgpath);
    CHECK(cfg && strstr(cfg, "\"final_logit_softcapping\": 0.25,"), "config.json: %s", cfg);
    free(cfg);
    REQUIRE(write_pattern_shard(shard, 60, 300, 2) == 0, "eval shard");
    /* the backend's logits are the model's, capped already: the reference adds no cap of its own */
    const Expected e = expected(dir, shard, 16, 0.0, 0, 0);
    REQUIRE(e.per_token, "reference");
    snprintf(args, sizeof args, "eval --init-from %s -i %s -t 16 --device cpu", dir, shard);
    CHECK(run_train(args, &out) == 0 && out && fabs(last_line_value(out, "loss") - e.loss) <= 2e-6 + 1e-6 * e.loss,
          "'%s' (reference %.8f): %s", args, e.loss, out);
    free(out);
    snprintf(args, sizeof args, "eval --init-from %s -i %s -t 16 --device cpu --logit-softcap 5", dir, shard);
    int rc = run_train(args, &out);
    CHECK(rc == 1 && out && strstr(out, "error: --logit-softcap 5 differs from the final_logit_softcapping 0.25"),
          "(%d) %s", rc, out);
    free(out);
    /* the same weights without the field: another loss, so the cap above was in force */
    char *text = read_text(cfgpath), *at = text ? strstr(text, "\n  \"final_logit_softcapping\": 0.25,") : NULL;
    REQUIRE(at, "config.json lost its cap");
    const size_t cut = strlen("\n  \"final_logit_softcapping\": 0.25,");
    memmove(at, at + cut, strlen(at + cut) + 1);
    FILE *f = fopen(cfgpath, "w");
    REQUIRE(f && fputs(text, f) >= 0 && fclose(f) == 0, "rewrite %s", cfgpath);
    free(text);
    snprintf(args, sizeof args, "eval --init-from %s -i %s -t 16 --device cpu", dir, shard);
    CHECK(run_train(args, &out) == 0 && out && fabs(last_line_value(out, "loss") - e.loss) > 1e-3,
          "uncapped, the loss is the capped one (%.8f): %s", e.loss, out);
    free(out);
    free(e.per_token);
}

TEST(training_logs_the_cross_entropy_the_objective_and_the_mean_lse) {
    char run[800], path[1000], *out = NULL;
    snprintf(run, sizeof run, "%s/run", test_tmpdir());
    REQUIRE(train_tiny(run, "--z-loss 0.01 --label-smoothing 0.1", &out) == 0, "train: %s", out);
    float losses[2];
    CHECK(out && parse_losses(out, losses, 2) == 2 && strstr(out, " | objective ") && strstr(out, " | lse "),
          "the step lines: %s", out);
    free(out);
    snprintf(path, sizeof path, "%s/log.jsonl", run);
    char *text = read_text(path);
    const char *rec = text ? strstr(text, "{\"type\":\"step\",\"step\":1,\"loss\":") : NULL;
    CHECK(rec && strstr(rec, ",\"objective\":") && strstr(rec, ",\"lse\":"), "log.jsonl: %s", text ? text : "(none)");
    if (rec) {
        const double loss = strtod(strstr(rec, "\"loss\":") + 7, NULL);
        const double obj = strtod(strstr(rec, "\"objective\":") + 12, NULL), lse = strtod(strstr(rec, "\"lse\":") + 6, NULL);
        /* at init every logit is near 0: lse ~ ln 300, the loss near it, the objective above it by
         * about 0.01 lse^2 */
        CHECK(fabs(lse - log(300.0)) < 0.5 && obj > loss + 0.005 * lse * lse, "loss %g objective %g lse %g", loss, obj,
              lse);
    }
    free(text);
    /* without an objective, no objective in the line or the record, and the lse still there */
    char run2[800];
    snprintf(run2, sizeof run2, "%s/run2", test_tmpdir());
    REQUIRE(train_tiny(run2, "", &out) == 0, "train: %s", out);
    CHECK(out && !strstr(out, "objective") && strstr(out, " | lse "), "%s", out);
    free(out);
}

/* A cap of 1 over 300 words bounds the loss below by ln(1 + 299 e^-2), and a z-loss of 1 outweighs
 * the cross-entropy at the start: each is said before the first step. Gemma 2's cap and PaLM's
 * weight are said nothing of. */
TEST(a_cap_that_bounds_the_loss_and_a_z_loss_that_outweighs_it_are_noted_before_training) {
    char run[800], *out = NULL;
    snprintf(run, sizeof run, "%s/notes", test_tmpdir());
    REQUIRE(train_tiny(run, "--logit-softcap 1 --z-loss 1", &out) == 0, "train: %s", out);
    const char *cap = out ? strstr(out, "note: --logit-softcap 1 keeps every logit within +-1, so over 300 words the "
                                        "loss cannot fall below ")
                          : NULL;
    const char *zl = out ? strstr(out, "note: --z-loss 1 weighs lse^2 above the cross-entropy itself") : NULL;
    const char *first = out ? strstr(out, "step     1/2") : NULL;
    const double floor = cap ? strtod(strstr(cap, "below ") + 6, NULL) : -1;
    CHECK(cap && zl && first && cap < first && zl < first && fabs(floor - log1p(299.0 * exp(-2.0))) < 1e-3,
          "floor %g, expected %g: %s", floor, log1p(299.0 * exp(-2.0)), out ? out : "");
    free(out);
    snprintf(run, sizeof run, "%s/usual", test_tmpdir());
    REQUIRE(train_tiny(run, "--logit-softcap 30 --z-loss 1e-4", &out) == 0, "train: %s", out);
    CHECK(out && !strstr(out, "note: --logit-softcap") && !strstr(out, "note: --z-loss"), "%s", out ? out : "");
    free(out);
}

TEST(loss_option_flags_out_of_range_are_refused_in_one_line) {
    const char *cases[][2] = {
        {"-x 1 --device cpu -e tiny --z-loss -1", "--z-loss must be 0 (off) or positive"},
        {"-x 1 --device cpu -e tiny --label-smoothing 1", "--label-smoothing must be in [0, 1)"},
        {"-x 1 --device cpu -e tiny --logit-softcap -3", "--logit-softcap must be positive"},
        {"eval -o x -i y --z-loss -0.5", "--z-loss must be >= 0"},
        {"eval -o x -i y --label-smoothing 1.5", "--label-smoothing must be in [0, 1)"},
        {"eval -o x -i y --logit-softcap 0", "--logit-softcap must be > 0"},
        {"eval -o x -i y --z-loss abc", "--z-loss expects a number"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *out = NULL;
        int rc = run_train(cases[i][0], &out);
        const char *nl = out ? strchr(out, '\n') : NULL;
        CHECK(rc == 2 && out && strncmp(out, "error: ", 7) == 0 && strstr(out, cases[i][1]) && nl && !nl[1],
              "'%s': (%d) %s", cases[i][0], rc, out);
        free(out);
    }
}
