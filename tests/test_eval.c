/* `./train eval` and the loss it reports: the mean next-token loss over a shard's consecutive
 * windows, every target counted once, against a reference written out here from the CPU
 * backend's full-vocabulary logits (no loss path of the backend in it); a short last window, a
 * batch larger than the windows, a run's checkpoint and a Hugging Face directory; and the errors. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/err.h"
#include "common/rng.h"
#include "data/shard.h"
#include "model/backend.h"
#include "model/train/eval.h"
#include "model/train/hf_weights.h"
#include "tests/test.h"
#include "tests/test_util.h"
#include "tokenizer/tokenizer.h"

/* The loss written out: target i (0 <= i < n - 1) is token i + 1 (none where a masked shard marks
 * it, SHARD_NO_LOSS), predicted at position i mod T of
 * window i / T, whose inputs are tokens[w·T, w·T+T) (past the end: 0s, which the causal mask keeps
 * out of the positions before them); -log softmax of the logits of a full forward, in double. be
 * has T of its own and B = 1. */
static double reference_mean_loss(Backend *be, const uint32_t *tokens, uint64_t n) {
    const int T = be->T, V = be->table->cfg.vocab_size;
    int *window = malloc((size_t)T * sizeof *window);
    float *logits = malloc((size_t)V * sizeof *logits);
    double sum = 0.0;
    uint64_t targets = 0;
    for (uint64_t i = 0; i + 1 < n; i++) {
        if (tokens[i + 1] & SHARD_NO_LOSS) continue; /* a masked shard's prompt token: no target */
        const uint64_t start = i / (uint64_t)T * (uint64_t)T;
        for (int t = 0; t < T; t++)
            window[t] = start + (uint64_t)t < n ? (int)(tokens[start + (uint64_t)t] & ~SHARD_NO_LOSS) : 0;
        be->ops->logits_at(be, window, (int)(i - start), logits);
        double max = logits[0], z = 0.0;
        for (int v = 1; v < V; v++) max = fmax(max, logits[v]);
        for (int v = 0; v < V; v++) z += exp(logits[v] - max);
        sum += max + log(z) - logits[tokens[i + 1]];
        targets++;
    }
    free(logits);
    free(window);
    return sum / (double)targets;
}

/* A tiny GPT-2 (2 layers, 2 heads of 8, a context of 16, 37 tokens) on the CPU with B windows of
 * T, its weights moved far from the init so that the loss depends on every position; the same on
 * every call. */
static Backend *tiny_model(ParamTable *t, int B, int T, OutputKind output) {
    GPTConfig cfg = {.num_layers = 2, .num_heads = 2, .dim = 16, .max_seq_len = 16, .vocab_size = 37};
    gpt_config_finish(&cfg);
    char err[ERR_LEN];
    if (!t->params && param_table_build(t, &cfg, err) != 0) return NULL;
    return perturbed_cpu_backend(t, B, T, output);
}

/* Windows of T = 8 over 2 tokens (one target), one whole window (T + 1), a last window of one
 * target (3T + 2) and one of five (30 tokens); in batches of 3, so that the last batch holds fewer
 * windows than B, and of 5, more than most of these shards have windows. */
TEST(eval_loss_is_the_mean_over_every_target_of_consecutive_windows_with_a_short_last_one) {
    enum { T = 8, V = 37 };
    ParamTable t = {0};
    Backend *ref = tiny_model(&t, 1, T, OUTPUT_FUSED);
    REQUIRE(ref, "reference backend");
    uint32_t tokens[64];
    Rng rng;
    rng_seed(&rng, 5);
    for (size_t i = 0; i < sizeof tokens / sizeof tokens[0]; i++) tokens[i] = (uint32_t)rng_below(&rng, V);
    const uint64_t lengths[] = {2, T + 1, 3 * T + 2, 30};
    const uint64_t windows[] = {1, 1, 4, 4};
    const struct {
        int B;
        OutputKind output;
    } runs[] = {{3, OUTPUT_FUSED}, {5, OUTPUT_FUSED}, {3, OUTPUT_CANONICAL}};
    for (size_t r = 0; r < sizeof runs / sizeof runs[0]; r++) {
        Backend *be = tiny_model(&t, runs[r].B, T, runs[r].output);
        REQUIRE(be, "backend of B %d", runs[r].B);
        for (size_t k = 0; k < sizeof lengths / sizeof lengths[0]; k++) {
            const uint64_t n = lengths[k];
            CHECK(eval_window_count(n, T) == windows[k], "%llu tokens make %llu windows of %d, not %llu",
                  (unsigned long long)n, (unsigned long long)eval_window_count(n, T), T,
                  (unsigned long long)windows[k]);
            double got, want = reference_mean_loss(ref, tokens, n);
            char err[ERR_LEN];
            REQUIRE(eval_mean_loss(be, tokens, n, &got, err) == 0, "%s", err);
            CHECK(fabs(got - want) <= 1e-5 * want, "B %d output %d, %llu tokens: loss %.8f, the reference %.8f",
                  runs[r].B, (int)runs[r].output, (unsigned long long)n, got, want);
        }
        be->ops->destroy(be);
    }
    ref->ops->destroy(ref);
    param_table_free(&t);
}

/* Tokens a masked shard marks as no target (a prompt's) are inputs, and the loss is the mean over
 * the others only: a third of them marked at random, and the whole of one window of T, in batches
 * of 3 (a batch then holds windows of 0, few and many targets). */
TEST(eval_of_a_masked_shard_is_the_mean_over_the_targets_it_does_not_mark) {
    enum { T = 8, V = 37, N = 5 * T + 3 };
    ParamTable t = {0};
    Backend *ref = tiny_model(&t, 1, T, OUTPUT_FUSED), *be = tiny_model(&t, 3, T, OUTPUT_FUSED);
    REQUIRE(ref && be, "backends");
    uint32_t tokens[N];
    Rng rng;
    rng_seed(&rng, 9);
    uint64_t kept = 0;
    for (int i = 0; i < N; i++) {
        const int marked = (i > T && i <= 2 * T) || rng_below(&rng, 3) == 0; /* window 1's targets all marked */
        tokens[i] = (uint32_t)rng_below(&rng, V) | (marked ? SHARD_NO_LOSS : 0);
        kept += i > 0 && !marked;
    }
    EvalMeans m;
    char err[ERR_LEN];
    REQUIRE(eval_run(be, tokens, N, NULL, &m, NULL, NULL, err) == 0, "%s", err);
    const double want = reference_mean_loss(ref, tokens, N);
    CHECK(m.targets == kept, "%llu targets counted, %llu not marked", (unsigned long long)m.targets,
          (unsigned long long)kept);
    CHECK(fabs(m.loss - want) <= 1e-5 * want, "loss %.8f, the reference over the unmarked targets %.8f", m.loss, want);
    be->ops->destroy(be);
    ref->ops->destroy(ref);
    param_table_free(&t);
}

/* Packed whole (data/pack.h), a documents shard's loss is its documents' each evaluated alone: one
 * from its first token, and one longer than a window in consecutive windows of its own; documents
 * of 1 to 2T tokens, some targets marked, in batches of 3. */
TEST(eval_of_a_packed_shard_is_the_loss_of_each_document_alone) {
    enum { T = 8, V = 37, N = 150 };
    ParamTable t = {0};
    Backend *ref = tiny_model(&t, 1, T, OUTPUT_FUSED), *be = tiny_model(&t, 3, T, OUTPUT_FUSED);
    REQUIRE(ref && be, "backends");
    uint32_t tokens[N];
    Rng rng;
    rng_seed(&rng, 21);
    for (uint64_t i = 0, next = 0; i < N; i++) {
        tokens[i] = (uint32_t)rng_below(&rng, V);
        if (i == next) tokens[i] |= SHARD_DOC_START, next += 1 + rng_below(&rng, 2 * T);
        else if (rng_below(&rng, 5) == 0) tokens[i] |= SHARD_NO_LOSS;
    }
    PackedWindows packed;
    char err[ERR_LEN];
    REQUIRE(pack_shard(tokens, N, T, &packed, err) == 0, "%s", err);
    EvalMeans m;
    REQUIRE(eval_run(be, tokens, N, &packed, &m, NULL, NULL, err) == 0, "%s", err);
    double sum = 0.0;
    uint64_t targets = 0;
    for (uint64_t at = 0; at < N;) {
        uint64_t end = at + 1;
        while (end < N && !(tokens[end] & SHARD_DOC_START)) end++;
        uint32_t doc[N];
        uint64_t kept = 0;
        for (uint64_t i = at; i < end; i++) {
            doc[i - at] = tokens[i] & ~SHARD_DOC_START;
            kept += i > at && !(tokens[i] & SHARD_NO_LOSS);
        }
        if (kept) sum += reference_mean_loss(ref, doc, end - at) * (double)kept;
        targets += kept;
        at = end;
    }
    const double want = sum / (double)targets;
    CHECK(m.targets == targets, "%llu targets counted, the documents hold %llu", (unsigned long long)m.targets,
          (unsigned long long)targets);
    CHECK(fabs(m.loss - want) <= 1e-5 * want, "loss %.8f, the documents alone %.8f", m.loss, want);
    packed_windows_free(&packed);
    be->ops->destroy(be);
    ref->ops->destroy(ref);
    param_table_free(&t);
}

/* The numbers of the last line, `loss <mean> ppl <exp(mean)> tokens <count>`: 0, or -1 when the
 * output's last line is not exactly that. */
static int parse_result(const char *out, double *loss, double *ppl, unsigned long long *count) {
    size_t len = out ? strlen(out) : 0;
    if (len < 2 || out[len - 1] != '\n') return -1;
    const char *last = out + len - 1;
    while (last > out && last[-1] != '\n') last--;
    int end = 0;
    if (sscanf(last, "loss %lf ppl %lf tokens %llu\n%n", loss, ppl, count, &end) != 3 || (size_t)end != strlen(last))
        return -1;
    char again[128];
    snprintf(again, sizeof again, "loss %.6f ppl %.6f tokens %llu\n", *loss, *ppl, *count);
    return strcmp(again, last) == 0 ? 0 : -1;
}

/* A tiny run of 2 steps on a pattern shard of 300 tokens, a context of 64: its checkpoint is
 * run/step_00000002. 0, or -1. */
static int train_tiny_run(const char *run) {
    char shard[900], args[2400], *out = NULL;
    snprintf(shard, sizeof shard, "%s/train.bin", test_tmpdir());
    if (write_pattern_shard(shard, 5000, 300, 1) != 0) return -1;
    snprintf(args, sizeof args, "-i %s --device cpu -e tiny -v 300 -b 2 -t 32 --max-seq-len 64 -x 2 -s 0 -o %s",
             shard, run);
    int rc = run_train(args, &out);
    CHECK(rc == 0, "train: %s", out);
    free(out);
    return rc == 0 ? 0 : -1;
}

/* The reference loss of the checkpoint in dir over the n tokens of shard path, in windows of T. */
static double checkpoint_reference_loss(const char *dir, const char *path, int T, uint64_t *n) {
    char err[ERR_LEN];
    GPTConfig cfg;
    ParamTable t = {0};
    uint32_t *tokens = NULL;
    ShardHeader hdr;
    double loss = NAN;
    float *p = NULL;
    Backend *be = NULL;
    if (hf_read_config(dir, &cfg, err) != 0 || param_table_build(&t, &cfg, err) != 0 ||
        shard_read(path, (uint32_t)cfg.vocab_size, &tokens, n, &hdr, err) != 0 ||
        !(p = malloc(t.total * sizeof *p)) || hf_read_weights(dir, &t, p, err) != 0 ||
        !(be = backend_cpu_create(&t, 1, T, OUTPUT_FUSED, OPTIMIZER_STATE_FP32, 1, NULL, err))) {
        test_fail(__FILE__, __LINE__, "the checkpoint's reference: %s", err);
    } else {
        be->ops->write_state(be, p, NULL, NULL);
        loss = reference_mean_loss(be, tokens, *n);
    }
    if (be) be->ops->destroy(be);
    free(p);
    free(tokens);
    param_table_free(&t);
    return loss;
}

static int one_line(const char *s);

/* 87 tokens in windows of 16: five whole windows and one of 6 targets, 86 targets in all. A run's
 * checkpoint (-o), the same directory as a Hugging Face one (--init-from), in batches of 4 (the
 * second holds 2 windows), of 100 (more than the 6 windows: 6 are allocated) and through the
 * canonical output layer all give the reference's loss. */
TEST(eval_of_a_checkpoint_prints_the_reference_loss_of_every_target_on_its_last_line) {
    char run[800], dir[900], shard[900], args[2400], *out = NULL;
    snprintf(run, sizeof run, "%s/run", test_tmpdir());
    snprintf(dir, sizeof dir, "%s/step_00000002", run);
    snprintf(shard, sizeof shard, "%s/eval.bin", test_tmpdir());
    REQUIRE(train_tiny_run(run) == 0, "the run");
    REQUIRE(write_pattern_shard(shard, 87, 300, 2) == 0, "eval shard");
    uint64_t n = 0;
    const double want = checkpoint_reference_loss(dir, shard, 16, &n);
    REQUIRE(n == 87 && isfinite(want), "reference over %llu tokens: %g", (unsigned long long)n, want);
    const struct {
        const char *source, *flags, *header;
    } runs[] = {
        {"-o", "-b 4", "6 window(s) of T=16 in batches of B=4"},
        {"--init-from", "-b 4", "6 window(s) of T=16 in batches of B=4"},
        {"--checkpoint", "-b 4", "6 window(s) of T=16 in batches of B=4"}, /* ./train sample's name for it */
        {"-o", "-b 100", "in batches of B=6,"},
        {"-o", "-b 4 --output canonical", "output layer canonical"},
    };
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        snprintf(args, sizeof args, "eval %s %s -i %s -t 16 %s --device cpu", runs[i].source,
                 strcmp(runs[i].source, "-o") ? dir : run, shard, runs[i].flags);
        double loss = 0, ppl = 0;
        unsigned long long count = 0;
        int rc = run_train(args, &out);
        CHECK(rc == 0 && parse_result(out, &loss, &ppl, &count) == 0, "'%s': (%d) %s", args, rc, out);
        CHECK(fabs(loss - want) <= 2e-6 + 1e-6 * want, "'%s': loss %.6f, the reference %.8f", args, loss, want);
        CHECK(fabs(ppl - exp(loss)) <= 1e-5 * ppl, "'%s': ppl %.6f is not exp(%.6f)", args, ppl, loss);
        CHECK(count == 86, "'%s': %llu targets counted, not 86", args, count);
        CHECK(out && strstr(out, runs[i].header), "'%s': the header does not say '%s': %s", args, runs[i].header, out);
        free(out);
    }
    /* every long flag takes its value inline too, as ./train's do */
    snprintf(args, sizeof args, "eval --out=%s --data=%s --seq-len=16 --batch=4 --device=cpu", run, shard);
    double inline_loss = 0, inline_ppl = 0;
    unsigned long long inline_count = 0;
    CHECK(run_train(args, &out) == 0 && parse_result(out, &inline_loss, &inline_ppl, &inline_count) == 0 &&
              fabs(inline_loss - want) <= 2e-6 + 1e-6 * want && inline_count == 86 &&
              strstr(out, "6 window(s) of T=16 in batches of B=4"),
          "'%s': %s", args, out);
    free(out);
    /* without -t the windows are the model's context, 64: one window of 86 targets would not fit
     * it, so two, of 64 and 22 */
    snprintf(args, sizeof args, "eval -o %s -i %s --device cpu", run, shard);
    CHECK(run_train(args, &out) == 0 && out && strstr(out, "2 window(s) of T=64 in batches of B=2"), "%s", out);
    free(out);
    /* a shard shorter than the context: one window of its n - 1 targets, not a window of the whole
     * context (a Llama 3's 131072 would take gigabytes for a few tokens), and the loss of -t 64 */
    char small[900];
    snprintf(small, sizeof small, "%s/small.bin", test_tmpdir());
    REQUIRE(write_pattern_shard(small, 21, 300, 4) == 0, "small shard");
    double by_default = 0, by_context = -1, ppl;
    unsigned long long count = 0;
    snprintf(args, sizeof args, "eval -o %s -i %s --device cpu", run, small);
    CHECK(run_train(args, &out) == 0 && out && strstr(out, "1 window(s) of T=20 in batches of B=1") &&
              parse_result(out, &by_default, &ppl, &count) == 0 && count == 20,
          "%s", out);
    free(out);
    snprintf(args, sizeof args, "eval -o %s -i %s -t 64 --device cpu", run, small);
    CHECK(run_train(args, &out) == 0 && out && parse_result(out, &by_context, &ppl, &count) == 0 &&
              by_default == by_context,
          "the default window gave %.8f, -t 64 %.8f: %s", by_default, by_context, out);
    free(out);
    /* a checkpoint's tokenizer.json that cannot be read: the shard (made by some tokenizer) is
     * evaluated, and the run says that nothing checked it against the checkpoint's */
    char tok[1000], made_by[900];
    snprintf(tok, sizeof tok, "%s/tokenizer.json", dir);
    snprintf(made_by, sizeof made_by, "%s/made_by.bin", test_tmpdir());
    FILE *f = fopen(tok, "w");
    REQUIRE(f && fputs("{\"model\": {\"type\": \"BPE\", \"vocab\": {", f) >= 0 && fclose(f) == 0, "%s", tok);
    REQUIRE(write_pattern_shard_made_by(made_by, 87, 300, 2, 0x1234567) == 0, "shard made by a tokenizer");
    snprintf(args, sizeof args, "eval --init-from %s -i %s -t 16 --device cpu", dir, made_by);
    CHECK(run_train(args, &out) == 0 && out && strstr(out, "note: not checking the shard against the checkpoint's "
                                                           "tokenizer: ") && strstr(out, "tokenizer.json"),
          "%s", out);
    free(out);
    /* a shard that records no tokenizer but a vocabulary of 300, beside a checkpoint whose
     * tokenizer.json has 257 tokens: that tokenizer did not make it, and eval says so before any
     * work; one of 300 or more could have, and the loss is printed */
    char err[ERR_LEN];
    const TokenizerTrainOptions bytes_only = {257, 1, 0};
    Tokenizer *small_tok = tokenizer_train("hello world", 11, &bytes_only, err);
    REQUIRE(small_tok, "%s", err);
    size_t json_len = 0;
    char *json = tokenizer_hf_json(small_tok, &json_len, err);
    tokenizer_free(small_tok);
    REQUIRE(json, "%s", err);
    f = fopen(tok, "wb");
    REQUIRE(f && fwrite(json, 1, json_len, f) == json_len && fclose(f) == 0, "%s", tok);
    free(json);
    snprintf(args, sizeof args, "eval --init-from %s -i %s -t 16 --device cpu", dir, shard);
    CHECK(run_train(args, &out) == 1 && out && one_line(out) &&
              strstr(out, "tokenizer.json has 257 tokens but ") &&
              strstr(out, "eval.bin was tokenized for a vocabulary of 300: it is not the tokenizer that made the "
                          "shard (evaluate a shard made by it"),
          "%s", out);
    free(out);
    remove(tok);
    CHECK(run_train(args, &out) == 0 && out && parse_result(out, &by_default, &ppl, &count) == 0, "%s", out);
    free(out);
}

static int one_line(const char *s) {
    const char *nl = strchr(s, '\n');
    return nl && nl[1] == 0;
}

/* fmt into dst (size bytes) with each names[k][0] replaced by names[k][1]. */
static void expand(char *dst, size_t size, const char *fmt, const char *names[][2], int count) {
    size_t len = 0;
    while (*fmt && len + 1 < size) {
        int k = 0;
        while (k < count && strncmp(fmt, names[k][0], strlen(names[k][0]))) k++;
        if (k < count) {
            len += (size_t)snprintf(dst + len, size - len, "%s", names[k][1]);
            fmt += strlen(names[k][0]);
        } else {
            dst[len++] = *fmt++;
        }
    }
    dst[len < size ? len : size - 1] = 0;
}

/* A pattern of shards: each cut into windows of its own, a line per shard, and on the last line the
 * mean over the targets of all, which is their losses weighted by their targets; --per-token writes
 * the shards' losses one after the other. A shard of one token in the pattern is named. */
TEST(eval_of_a_pattern_of_shards_weighs_each_shards_loss_by_its_targets) {
    char run[800], a[900], b[900], dir[900], args[2400], spec[900], *out = NULL;
    snprintf(run, sizeof run, "%s/run", test_tmpdir());
    snprintf(a, sizeof a, "%s/set/val_a.bin", test_tmpdir());
    snprintf(b, sizeof b, "%s/set/val_b.bin", test_tmpdir());
    snprintf(dir, sizeof dir, "%s/set", test_tmpdir());
    snprintf(spec, sizeof spec, "'%s/set/val_*.bin'", test_tmpdir());
    REQUIRE(train_tiny_run(run) == 0, "the run");
    REQUIRE(mkdir(dir, 0755) == 0, "%s", dir);
    REQUIRE(write_pattern_shard(a, 87, 300, 2) == 0 && write_pattern_shard(b, 40, 300, 5) == 0, "shards");
    double loss[2], ppl;
    unsigned long long count[2];
    char per[2][900], both[900];
    const char *paths[2] = {a, b};
    for (int k = 0; k < 2; k++) {
        snprintf(per[k], sizeof per[k], "%s/per_%d.f32", test_tmpdir(), k);
        snprintf(args, sizeof args, "eval -o %s -i %s -t 16 -b 3 --device cpu --per-token %s", run, paths[k], per[k]);
        CHECK(run_train(args, &out) == 0 && parse_result(out, &loss[k], &ppl, &count[k]) == 0, "'%s': %s", args, out);
        free(out);
    }
    REQUIRE(count[0] == 86 && count[1] == 39, "targets %llu and %llu", count[0], count[1]);
    snprintf(both, sizeof both, "%s/per_both.f32", test_tmpdir());
    snprintf(args, sizeof args, "eval -o %s -i %s -t 16 -b 3 --device cpu --per-token %s", run, spec, both);
    double mean = 0;
    unsigned long long targets = 0;
    int rc = run_train(args, &out);
    CHECK(rc == 0 && parse_result(out, &mean, &ppl, &targets) == 0, "'%s': (%d) %s", args, rc, out);
    const double want = (86 * loss[0] + 39 * loss[1]) / 125;
    CHECK(targets == 125 && fabs(mean - want) <= 2e-6, "mean %.6f over %llu targets, want %.6f over 125", mean, targets,
          want);
    /* 6 windows of 16 in the first shard, 3 in the second */
    CHECK(out && strstr(out, "127 tokens in 2 shards, 9 window(s) of T=16 in batches of B=3"), "header: %s", out);
    char line[1000];
    for (int k = 0; k < 2; k++) {
        snprintf(line, sizeof line, "shard %s: loss %.6f tokens %llu\n", paths[k], loss[k], count[k]);
        CHECK(out && strstr(out, line), "no line '%s' in %s", line, out);
    }
    free(out);
    size_t len[3];
    char *f0 = read_file(per[0], &len[0]), *f1 = read_file(per[1], &len[1]), *fb = read_file(both, &len[2]);
    CHECK(f0 && f1 && fb && len[0] == 86 * 4 && len[1] == 39 * 4 && len[2] == len[0] + len[1] &&
              memcmp(fb, f0, len[0]) == 0 && memcmp(fb + len[0], f1, len[1]) == 0,
          "--per-token over the pattern is not the two shards' files one after the other");
    free(f0), free(f1), free(fb);
    /* a file-size limit below the file's 500 bytes is named as such, with its fix */
    snprintf(args, sizeof args, "eval -o %s -i %s -t 16 -b 3 --device cpu --per-token %s", run, spec, both);
    CHECK(run_train_under("ulimit -f 0;", args, &out) == 1 && out &&
              strstr(out, "File too large (a file-size limit: raise ulimit -f, or pass another path)"),
          "%s", out);
    free(out);
    /* without -t: the windows are the model's context (64), as the longest shard has more targets */
    snprintf(args, sizeof args, "eval -o %s -i %s --device cpu", run, spec);
    CHECK(run_train(args, &out) == 0 && out && strstr(out, "3 window(s) of T=64 in batches of B=2"), "%s", out);
    free(out);
    char lone[900], err[ERR_LEN];
    const uint32_t single = 7;
    snprintf(lone, sizeof lone, "%s/set/val_c.bin", test_tmpdir());
    REQUIRE(shard_write(lone, &single, 1, 300, 0, err) == 0, "%s", err);
    snprintf(args, sizeof args, "eval -o %s -i %s --device cpu", run, spec);
    CHECK(run_train(args, &out) == 1 && out && strstr(out, "val_c.bin holds 1 token(s): a target needs 2 (leave it out "
                                                           "of the pattern)") && one_line(out),
          "%s", out);
    free(out);
    /* a token the model cannot take in the pattern's last shard is named before any shard's line */
    uint32_t ids[90];
    for (int i = 0; i < 90; i++) ids[i] = (uint32_t)(i * 7 % 300);
    snprintf(a, sizeof a, "%s/wide/val_a.bin", test_tmpdir());
    snprintf(b, sizeof b, "%s/wide/val_b.bin", test_tmpdir());
    snprintf(dir, sizeof dir, "%s/wide", test_tmpdir());
    REQUIRE(mkdir(dir, 0755) == 0 && shard_write(a, ids, 90, 400, 0, err) == 0, "%s", err);
    ids[61] = 350; /* below the shards' vocabulary of 400, not below the model's 300 */
    REQUIRE(shard_write(b, ids, 90, 400, 0, err) == 0, "%s", err);
    snprintf(args, sizeof args, "eval -o %s -i '%s/val_*.bin' -t 16 --device cpu", run, dir);
    char refusal[1200];
    snprintf(refusal, sizeof refusal, "token 350 at position 61 in shard %s is >= the vocabulary 300 of the model", b);
    CHECK(run_train(args, &out) == 1 && out && strstr(out, refusal) && !strstr(out, "loss"), "%s", out);
    free(out);
}

TEST(eval_errors_name_the_problem_in_one_line) {
    char run[800], shard[900], big[900], one[900], *out = NULL;
    snprintf(run, sizeof run, "%s/run", test_tmpdir());
    snprintf(shard, sizeof shard, "%s/eval.bin", test_tmpdir());
    snprintf(big, sizeof big, "%s/big.bin", test_tmpdir());
    snprintf(one, sizeof one, "%s/one.bin", test_tmpdir());
    REQUIRE(train_tiny_run(run) == 0, "the run");
    REQUIRE(write_pattern_shard(shard, 100, 300, 2) == 0 && write_pattern_shard(big, 100, 400, 3) == 0, "shards");
    const uint32_t single = 7;
    char err[ERR_LEN];
    REQUIRE(shard_write(one, &single, 1, 300, 0, err) == 0, "%s", err);
    char link[800], copy[800], copy_tmp[900], weights[900];
    snprintf(link, sizeof link, "%s/weights_link", test_tmpdir());
    snprintf(weights, sizeof weights, "%s/step_00000002/model.safetensors", run);
    REQUIRE(symlink(weights, link) == 0, "linking %s", link);
    char dangling[800], inside[900];
    snprintf(dangling, sizeof dangling, "%s/dangling_link", test_tmpdir());
    snprintf(inside, sizeof inside, "%s/step_00000002/losses.bin", run);
    REQUIRE(symlink(inside, dangling) == 0, "linking %s", dangling);
    snprintf(copy, sizeof copy, "%s/copy.bin", test_tmpdir());
    snprintf(copy_tmp, sizeof copy_tmp, "%s.tmp", copy);
    REQUIRE(write_pattern_shard(copy_tmp, 100, 300, 2) == 0, "%s", copy_tmp);
    struct stat before_w, before_c, after;
    REQUIRE(stat(weights, &before_w) == 0 && stat(copy_tmp, &before_c) == 0, "stat");
    const struct {
        const char *fmt, *msg;
        int status;
    } cases[] = {
        {"eval --device cpu", "--init-from or -o/--out: give one of them", 2},
        {"eval -o {run} --bogus 1 -i {shard}", "unknown flag '--bogus'", 2},
        {"eval -o {run} -i {shard} -t 0", "-t expects a whole number from 1 to 2147483647, got '0'", 2},
        {"eval -o {run} -i {shard} -b x", "-b expects a whole number from 1 to 2147483647, got 'x'", 2},
        {"eval -o {run} -i {shard} -b", "-b needs a value", 2},
        {"eval -o {run} -i -t 8", "-i needs a value", 2},
        {"eval -o {run} -i {shard} --device tpu", "--device must be cuda or cpu", 2},
        {"eval -o {run} -i {shard} --device=tpu", "--device must be cuda or cpu", 2},
        {"eval -o {run} -i {shard} --help=1", "--help takes no value", 2},
        {"eval -o {run} -i {shard} --bogus=1", "unknown flag '--bogus=1'", 2},
        {"eval -o {run} -i {shard} --out=", "--out needs a value, got an empty one", 2},
        {"eval -o {run} -i {shard} --output logits", "--output must be fused or canonical", 2},
        {"eval -o {run} --init-from {run}/step_00000002 -i {shard}", "give one of them", 2},
        {"eval --init-from {run}/step_00000002 --step 2 -i {shard}", "--step goes with -o RUN", 2},
        {"eval -o {run} --device cpu", "-i/--data is missing", 2},
        {"eval --init-from /nonexistent -i {shard} --device cpu", "--init-from /nonexistent: No such file or directory", 1},
        {"eval -o /nonexistent/run -i {shard} --device cpu", "no run directory /nonexistent/run (pass -o", 1},
        {"eval -o {run} --step 5 -i {shard} --device cpu", "has no checkpoint of step 5", 1},
        {"eval -o {run} -i {shard} -t 65 --device cpu", "-t 65 is above the context of the model", 1},
        {"eval -o {run} -i /nonexistent.bin --device cpu", "/nonexistent.bin", 1},
        {"eval -o {run} -i '{shard}*.none' --device cpu", "no file matches the shard pattern", 1},
        /* big.bin's header records a vocabulary of 400, eval.bin's 300 */
        {"eval -o {run} -i '{run}/../*.bin' --device cpu", "the shards of one pattern must share their tokenizer", 1},
        {"eval -o {run} -i {big} --device cpu", "is >= the vocabulary 300 of the model", 1},
        {"eval -o {run} -i {one} --device cpu", "holds 1 token(s): a target needs 2", 1},
        /* said before the evaluation, not after it, where the finished file would be renamed into place */
        {"eval -o {run} -i {shard} --device cpu --per-token {run}", "--per-token names a directory", 2},
        {"eval -o {run} -i {shard} --device cpu --per-token ''", "--per-token needs a value, got an empty one", 2},
        /* the output may not land on the input: the shard, or any file of the checkpoint's folder */
        {"eval -o {run} -i {shard} --device cpu --per-token {shard}", "would overwrite the shard being evaluated", 1},
        {"eval -o {run} -i {shard} --device cpu --per-token {run}/step_00000002/model.safetensors",
         "would write into the checkpoint's folder", 1},
        /* ... through a link to one of its files, or through the temporary name it is written under */
        {"eval -o {run} -i {shard} --device cpu --per-token {link}", "would write into the checkpoint's folder", 1},
        {"eval -o {run} -i {copy}.tmp --device cpu --per-token {copy}",
         "would overwrite the shard being evaluated, through its temporary name", 1},
        /* a link to a file not yet there (in the checkpoint's folder, say) is no path to create */
        {"eval -o {run} -i {shard} --device cpu --per-token {dangling}", "is a link to no file", 1},
        {"eval -o {run} -i {shard} -b 99999999999999999999999999 --device cpu",
         "got '999999999999999999999999...'", 2},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char args[1200];
        const char *names[][2] = {{"{run}", run},   {"{shard}", shard}, {"{big}", big},          {"{one}", one},
                                  {"{link}", link}, {"{copy}", copy},   {"{dangling}", dangling}};
        expand(args, sizeof args, cases[i].fmt, names, 7);
        int rc = run_train(args, &out);
        CHECK(rc == cases[i].status && out && strncmp(out, "error: ", 7) == 0 && strstr(out, cases[i].msg) &&
                  one_line(out),
              "'%s': (%d) %s", args, rc, out);
        free(out);
    }
    CHECK(stat(weights, &after) == 0 && after.st_size == before_w.st_size && after.st_mtime == before_w.st_mtime,
          "the checkpoint's weights were written through the link");
    CHECK(stat(copy_tmp, &after) == 0 && after.st_size == before_c.st_size, "the shard named like the temporary file "
                                                                          "was touched");
    CHECK(access(inside, F_OK) != 0, "a file was created in the checkpoint's folder through a dangling link");
}

/* --help comes from the table of flags: every flag is in it, and it says what the last window does. */
TEST(eval_help_lists_every_flag_and_the_window_rule) {
    char *out = NULL;
    int rc = run_train("eval --help", &out);
    const char *want[] = {"--init-from DIR", "-o, --out RUN", "--step N", "-i, --data SHARD", "-t, --seq-len T",
                          "-b, --batch B",   "--device KIND", "--output KIND", "-h, --help",
                          "counts if it has 2 tokens or more", "loss <mean> ppl <exp(mean)> tokens <count>"};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        CHECK(rc == 0 && out && strstr(out, want[i]), "--help lacks '%s': (%d) %s", want[i], rc, out);
    free(out);
    CHECK(run_train("--help", &out) == 0 && out && strstr(out, "./train eval --help"), "the trainer's --help: %s", out);
    free(out);
}

/* A checkpoint whose weights hold a NaN (its file's last float) gives no number to report: one
 * line that says so, exit 1, never `loss nan`. */
TEST(eval_of_weights_that_make_the_loss_non_finite_is_refused) {
    char run[800], dir[900], shard[900], path[1000], args[2400], *out = NULL;
    snprintf(run, sizeof run, "%s/run", test_tmpdir());
    snprintf(dir, sizeof dir, "%s/run/step_00000002", test_tmpdir());
    snprintf(shard, sizeof shard, "%s/eval.bin", test_tmpdir());
    REQUIRE(train_tiny_run(run) == 0, "the run");
    REQUIRE(write_pattern_shard(shard, 100, 300, 2) == 0, "shard");
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    /* the final norm's gain and bias (the file's last 2 x 128 floats) as large as a float goes: every
     * weight a number, but the hidden states overflow and the loss with them */
    FILE *f = fopen(path, "r+b");
    float huge[256];
    for (int i = 0; i < 256; i++) huge[i] = FLT_MAX;
    REQUIRE(f && fseek(f, -(long)sizeof huge, SEEK_END) == 0 && fwrite(huge, sizeof huge, 1, f) == 1 && fclose(f) == 0,
            "%s", path);
    snprintf(args, sizeof args, "eval --init-from %s -i %s --device cpu", dir, shard);
    int rc = run_train(args, &out);
    CHECK(rc == 1 && out && strstr(out, "error: the loss is not finite") && one_line(strstr(out, "error: ")) &&
              !strstr(out, "loss nan"),
          "(%d) %s", rc, out);
    free(out);
    /* a NaN among the weights is refused where they are read */
    f = fopen(path, "r+b");
    const float nan = NAN;
    REQUIRE(f && fseek(f, -4, SEEK_END) == 0 && fwrite(&nan, 4, 1, f) == 1 && fclose(f) == 0, "%s", path);
    rc = run_train(args, &out);
    CHECK(rc == 1 && out && strstr(out, "holds a NaN") && one_line(strstr(out, "error: ")), "(%d) %s", rc, out);
    free(out);
}
