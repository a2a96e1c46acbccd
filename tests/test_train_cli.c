/* ./train end to end on the CPU: every bad flag gets a one-line error naming it (exit 2), --help
 * comes from the option table, no GPU means a clear error, a tiny model learns a synthetic corpus,
 * and a resumed run prints exactly the losses of the uninterrupted one. */
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/err.h"
#include "data/loader.h"
#include "common/paths.h"
#include "common/stop_request.h"
#include "data/shard.h"
#include "model/train/checkpoint.h"
#include "model/train/schedule.h"
#include "model/train/step_check.h"
#include "tests/test.h"
#include "tests/test_util.h"
#include "tokenizer/tokenizer.h"

static int count_lines(const char *s) {
    int n = 0;
    for (; *s; s++) n += *s == '\n';
    return n;
}

static void expect_usage_error(const char *args, const char *needle) {
    char *out = NULL;
    int rc = run_train(args, &out);
    REQUIRE(out, "could not run ./train %s", args);
    CHECK(rc == 2, "'%s': exit status %d, expected 2 (%s)", args, rc, out);
    CHECK(strncmp(out, "error: ", 7) == 0 && count_lines(out) == 1, "'%s': not one error line: %s", args, out);
    CHECK(strstr(out, needle) != NULL, "'%s': message lacks '%s': %s", args, needle, out);
    free(out);
}

TEST(cli_bad_flags_name_the_flag_and_exit_2) {
    expect_usage_error("--bogus", "unknown flag '--bogus'");
    expect_usage_error("-q 3", "unknown flag '-q'");
    expect_usage_error("-x", "-x/--steps needs a value");
    expect_usage_error("--steps=abc", "-x/--steps expects an integer");
    expect_usage_error("-b 0", "-b/--batch must be positive");
    expect_usage_error("-t -5", "-t/--seq-len must be positive");
    expect_usage_error("-t 2048", "-t/--seq-len 2048 is above the model's context (--max-seq-len 1024): pass -t 1024 or less, or --max-seq-len 2048");
    /* a resumed model's context is its own: no --max-seq-len advice */
    expect_usage_error("-y 1 -t 2048", "(--max-seq-len 1024): pass -t 1024 or less (see ./train --help)");
    expect_usage_error("-b 4 -t 64 -d 1000", "-d/--total-batch 1000 must be a multiple of B*T*ranks, 256");
    expect_usage_error("-e tiny --heads 5", "--heads must divide --dim");
    /* widths whose int arithmetic would wrap (4 dim, heads x head dim) are named, not computed */
    expect_usage_error("--device cpu -e tiny --dim 536870912 --heads 2", "the model is wider than 262144 (dim 536870912");
    expect_usage_error("--device cpu --family llama --dim 64 --heads 65536 --head-dim 65536",
                       "heads x head dim 4294967296");
    expect_usage_error("-e d99", "-e/--preset must be one of");
    expect_usage_error("-l -1", "-l/--lr must be positive");
    expect_usage_error("-l 1e-3 --lr-final 1e-2", "--lr-final must be between");
    expect_usage_error("--lr-schedule step", "--lr-schedule must be cosine, linear or wsd");
    expect_usage_error("--lr-schedule WSD", "--lr-schedule must be cosine, linear or wsd");
    expect_usage_error("--decay-steps 50", "--decay-steps sets the decay of --lr-schedule wsd; cosine and linear decay");
    expect_usage_error("--lr-schedule linear --decay-steps 50", "--decay-steps sets the decay of --lr-schedule wsd");
    /* a fine-tuning rate below the default final rate: the message says the final rate is the default's */
    expect_usage_error("-l 2e-5", "--lr-final defaults to 6e-5, above this -l/--lr: pass a final rate below the peak");
    expect_usage_error("-v 1", "-v/--vocab");
    expect_usage_error("--output logits", "--output must be fused or canonical");
    expect_usage_error("--output chunked", "--output must be fused or canonical");
    expect_usage_error("--logits-mb -1", "--logits-mb must be at least 0");
    expect_usage_error("--device tpu", "--device must be cuda or cpu");
    expect_usage_error("--grad-reduce fp16", "--grad-reduce must be fp32 or bf16");
    expect_usage_error("--optimizer-state fp16", "--optimizer-state must be fp32 or bf16");
    expect_usage_error("--zero 2", "--zero must be auto, 0 or 1");
    expect_usage_error("--overlap-comm 2", "--overlap-comm must be auto, 0 or 1");
    expect_usage_error("--overlap-comm yes", "--overlap-comm must be auto, 0 or 1");
    /* an empty path would read as the flag left out: --init-from '' trained from scratch */
    expect_usage_error("--init-from ''", "--init-from needs a value, got an empty one");
    expect_usage_error("-j ''", "-j/--val-data needs a value, got an empty one");
    expect_usage_error("--tokenizer=", "--tokenizer needs a value, got an empty one");
    expect_usage_error("--zero on", "--zero must be auto, 0 or 1");
    expect_usage_error("-y 2", "-y/--resume must be 0, 1 or auto");
    expect_usage_error("-x 0", "-x/--steps must be positive");
    /* 2^32 tokens per step: an int would wrap to 0 and divide by it */
    expect_usage_error("-b 65536 -t 65536 --max-seq-len 65536", "-b/--batch times -t, -g and --nodes is above");
    /* a forgotten value must not swallow the next flag (it would train into a directory named -x) */
    expect_usage_error("-o -x 3", "-o/--out needs a value, got the flag '-x' (if that is the value, write --out=-x)");
    expect_usage_error("--prompt --steps 3", "--prompt needs a value, got the flag '--steps'");
    expect_usage_error("--help=1", "-h/--help takes no value");
    expect_usage_error("-b ' 4'", "-b/--batch expects an integer, got ' 4'");
    expect_usage_error("--lr nan", "-l/--lr expects a number, got 'nan'");
    expect_usage_error("--lr 1e-46", "-l/--lr: 1e-46 is beyond what a float holds");
    /* an integer too large for an int is named as such, not as something else */
    expect_usage_error("-b 2147483648", "-b/--batch 2147483648 is too large for an integer flag (at most 2147483647");
    expect_usage_error("--seed -1", "--seed expects a whole number from 0 to 18446744073709551615, got '-1'");
    expect_usage_error("--seed 18446744073709551616", "--seed expects a whole number from 0 to 18446744073709551615");
    expect_usage_error("-x 99999999999999999999", "-x/--steps 99999999999999999999 is too large for an integer flag");
    /* a negative beyond an int is refused by the flag's own range, as any negative is */
    expect_usage_error("--warmup -2147483648", "--warmup must be 0 or more");
    expect_usage_error("-b -99999999999999999999", "-b/--batch must be positive");
    static const char *const int_flags[] = {
        "--layers", "--heads", "--dim", "--kv-heads", "--head-dim", "--ffn-dim", "--sliding-window", "--query-pre-attn-scalar",
        "--max-seq-len", "-v", "-b", "-t", "-d", "-x", "--warmup", "-n", "--keep-checkpoints", "--val-every",
        "--val-batches", "-s", "-G", "--logits-mb", "-g", "--nodes", "--node-rank", "--bucket-mb",
        "--recompute-gelu", "--profile-step", "--step-parts", "--decay-steps"};
    for (size_t i = 0; i < sizeof int_flags / sizeof int_flags[0]; i++) {
        char args[96], *out = NULL;
        snprintf(args, sizeof args, "%s -3000000000", int_flags[i]);
        int rc = run_train(args, &out);
        REQUIRE(out, "could not run ./train %s", args);
        CHECK(rc == 2 && count_lines(out) == 1 && !strstr(out, "integer") && strstr(out, "must"),
              "'%s': not refused by the flag's range (exit %d): %s", args, rc, out);
        free(out);
    }
    /* the GPU's timing flags do nothing on the CPU: refused there, not ignored */
    expect_usage_error("--device cpu --step-parts 1", "--step-parts times the GPU's parts of a step: it needs --device cuda");
    expect_usage_error("--device cpu -x 5 --profile-step 3", "--profile-step opens a GPU profiler's capture range");
    expect_usage_error("-x 5 --profile-step 6", "--profile-step is past the last step (-x/--steps)");
}

TEST(cli_help_is_generated_from_the_option_table) {
    char *out = NULL;
    int rc = run_train("--help", &out);
    CHECK(rc == 0, "--help exit status %d", rc);
    const char *flags[] = {"-e, --preset", "-v, --vocab", "-b, --batch", "-t, --seq-len", "-d, --total-batch",
                           "-x, --steps", "-l, --lr", "--warmup", "--lr-final", "--weight-decay", "--grad-clip",
                           "--seed", "-i, --train-data", "-j, --val-data", "-o, --out", "-n, --checkpoint-every",
                           "-y, --resume", "--val-every", "--val-batches", "-s, --sample-every",
                           "-G, --gen-tokens", "--output", "--device", "--layers", "--heads", "--dim"};
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++)
        CHECK(out && strstr(out, flags[i]), "--help lacks %s", flags[i]);
    CHECK(out && strstr(out, "[6e-4]") && strstr(out, "[fused]"), "--help lacks the defaults");
    free(out);
}

/* cuBLASLt opens at the GPU's first matrix product (kernels/cublaslt_loader.cu): mapping it cost every
 * ./train 0.13 s before main, and a run that never reaches the GPU must not pay that. The dynamic
 * loader names what it loads under LD_DEBUG=libs; cudart, linked, shows that it does. */
TEST(a_run_that_never_reaches_the_gpu_does_not_load_cublas) {
    char *out = NULL;
    int rc = run_train_under("LD_DEBUG=libs", "--help", &out);
    REQUIRE(out, "could not run ./train --help");
    CHECK(rc == 0, "--help exit status %d", rc);
    CHECK(strstr(out, "libcudart") != NULL, "LD_DEBUG=libs names no libcudart: what ./train loads cannot be seen");
    CHECK(strstr(out, "libcublas") == NULL, "./train --help loaded cuBLAS: %.300s", strstr(out, "libcublas"));
    free(out);
}

/* --help beside a bad flag: every subcommand names the flag in one line and exits 2, as ./train does;
 * --help alone prints the usage and exits 0. */
TEST(cli_help_beside_an_unknown_flag_is_one_error_line_in_every_subcommand) {
    const char *commands[] = {"", "eval ", "sample ", "prepare "};
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) {
        char args[64], *out = NULL;
        snprintf(args, sizeof args, "%s--help --bogus", commands[i]);
        int rc = run_train(args, &out);
        CHECK(rc == 2 && out && strncmp(out, "error: ", 7) == 0 && count_lines(out) == 1 && strstr(out, "--bogus"),
              "./train %s: exit %d: %s", args, rc, out ? out : "");
        free(out);
        snprintf(args, sizeof args, "%s--help", commands[i]);
        rc = run_train(args, &out);
        CHECK(rc == 0 && out && strstr(out, "usage:") == out, "./train %s: exit %d: %.200s", args, rc, out ? out : "");
        free(out);
    }
}

/* A CPU model larger than the host's free memory is refused before anything is allocated (Linux
 * would let the allocations succeed and kill the run when it touches them), naming the size. */
TEST(a_cpu_model_larger_than_the_free_memory_is_refused_in_one_line) {
    char *out = NULL, shard[900], args[2400];
    snprintf(shard, sizeof shard, "%s/huge_model.bin", test_tmpdir());
    REQUIRE(write_pattern_shard(shard, 1000, 64, 1) == 0, "shard");
    /* 25.8B parameters: 720 GB with the optimizer and checkpoint buffers */
    snprintf(args, sizeof args, "--device cpu -e tiny --layers 128 --dim 4096 --heads 32 -v 64 -b 1 -t 2 -x 1 -s 0 "
             "--val-every 0 -i %s -o %s/huge", shard, test_tmpdir());
    const int rc = run_train(args, &out);
    CHECK(rc == 1 && out && strstr(out, "error: the CPU backend with its checkpoint buffers needs about ") &&
              strstr(out, "GB free; lower -b or -t"),
          "exit %d: %s", rc, out ? out : "");
    free(out);
}

TEST(cli_without_gpu_or_cuda_backend_says_so_in_one_line) {
    char *out = NULL;
    int rc = run_train("-e tiny -x 1", &out);
    CHECK(rc == 1, "exit status %d, expected 1: %s", rc, out);
    CHECK(out && strncmp(out, "error: ", 7) == 0 && count_lines(out) == 1 && strstr(out, "--device cpu"),
          "expected one error line pointing at --device cpu: %s", out);
    free(out);
}

/* Shards with a learnable pattern over 64 tokens, in the test's directory. */
static void make_corpus(char *train, char *val, size_t n) {
    snprintf(train, n, "%s/train.bin", test_tmpdir());
    snprintf(val, n, "%s/val.bin", test_tmpdir());
    write_pattern_shard(train, 40000, 64, 1);
    write_pattern_shard(val, 4000, 64, 2);
}

#define TINY_RUN "--device cpu -e tiny -v 64 -b 4 -t 32 -l 3e-3 --warmup 5 --lr-final 3e-4 -s 0"

TEST(cpu_training_loss_falls_well_below_ln_vocab) {
    char train[700], val[700], args[2400], *out = NULL;
    make_corpus(train, val, sizeof train);
    /* a run directory whose parents do not exist yet, like the default runs/default */
    snprintf(args, sizeof args, TINY_RUN " -x 80 --val-every 40 -i %s -j %s -o %s/runs/a/run", train, val,
             test_tmpdir());
    int rc = run_train(args, &out);
    REQUIRE(rc == 0, "training failed (%d): %s", rc, out);
    float losses[100];
    int n = parse_losses(out, losses, 100);
    REQUIRE(n == 80, "parsed %d losses", n);
    CHECK(fabsf(losses[0] - logf(64)) < 0.3f, "first loss %.3f should be near ln 64 = %.3f", losses[0], logf(64));
    CHECK(losses[79] < 0.5f * logf(64), "final loss %.3f is not well below ln 64", losses[79]);
    CHECK(strstr(out, "val loss") != NULL, "no validation line");
    char ck[800];
    snprintf(ck, sizeof ck, "%s/runs/a/run/step_00000080/model.safetensors", test_tmpdir());
    FILE *f = fopen(ck, "rb");
    CHECK(f != NULL, "final checkpoint %s missing", ck);
    if (f) fclose(f);
    free(out);
}

/* Llama (grouped heads of 48 over one key/value head, NH·hd != C, an MLP of 192) and Qwen3 (QK-norm)
 * learn the pattern on the CPU as GPT-2 does, and the run says that it writes no checkpoint. */
TEST(cpu_training_of_a_llama_and_a_qwen3_loss_falls_well_below_ln_vocab) {
    char train[700], val[700], args[2400], *out = NULL;
    make_corpus(train, val, sizeof train);
    const char *families[] = {"llama", "qwen3"};
    for (int i = 0; i < 2; i++) {
        snprintf(args, sizeof args,
                 TINY_RUN " --family %s --kv-heads 1 --head-dim 48 --ffn-dim 192 -x 20 --val-every 10 -i %s -j %s -o %s/runs/%s",
                 families[i], train, val, test_tmpdir(), families[i]);
        int rc = run_train(args, &out);
        REQUIRE(rc == 0, "%s training failed (%d): %s", families[i], rc, out);
        float losses[100];
        int n = parse_losses(out, losses, 100);
        REQUIRE(n == 20, "%s: parsed %d losses", families[i], n);
        CHECK(fabsf(losses[0] - logf(64)) < 0.3f, "%s: first loss %.3f should be near ln 64", families[i], losses[0]);
        CHECK(losses[19] < 0.5f * logf(64), "%s: final loss %.3f is not well below ln 64", families[i], losses[19]);
        CHECK(strstr(out, "family: ") && strstr(out, "checkpoint: "), "%s: no family line or checkpoint: %s",
              families[i], out);
        free(out);
        out = NULL;
    }
}

/* Gemma 3 (grouped heads of 48 over one key/value head, a window of 8 on five layers of six with a
 * sequence of 32, sandwich norms, the scaled embedding) learns the pattern on the CPU too, and the
 * run says which layers slide. */
TEST(cpu_training_of_a_gemma3_with_sliding_layers_loss_falls_well_below_ln_vocab) {
    char train[700], val[700], args[2400], *out = NULL;
    make_corpus(train, val, sizeof train);
    snprintf(args, sizeof args,
             TINY_RUN " --family gemma3 --layers 6 --kv-heads 1 --head-dim 48 --ffn-dim 192 --sliding-window 8 -x 20 "
                      "--val-every 10 -i %s -j %s -o %s/runs/gemma3",
             train, val, test_tmpdir());
    int rc = run_train(args, &out);
    REQUIRE(rc == 0, "gemma3 training failed (%d): %s", rc, out);
    float losses[100];
    int n = parse_losses(out, losses, 100);
    REQUIRE(n == 20, "parsed %d losses", n);
    CHECK(fabsf(losses[0] - logf(64)) < 0.3f, "first loss %.3f should be near ln 64", losses[0]);
    CHECK(losses[19] < 0.5f * logf(64), "final loss %.3f is not well below ln 64", losses[19]);
    CHECK(strstr(out, "gemma3: 5 of 6 layers slide with a window of 8 and RoPE theta 10000, the rest are global"),
          "no gemma3 line: %s", out);
    /* Gemma 3's pad_token_id 0 is said: with this corpus's ids, token 0 is a real token */
    CHECK(strstr(out, "padding: token 0 is the padding row (pad_token_id): its embedding row starts at 0"),
          "no padding line: %s", out);
    free(out);
}

/* A released model's preset takes its context from its config.json's max_position_embeddings, so
 * -t 2048 needs no --max-seq-len (a shape small enough for one CPU step at that length); a
 * --max-seq-len given still bounds -t, and so does the model's own context. */
TEST(a_released_models_preset_takes_its_context_from_max_position_embeddings) {
    char train[700], val[700], args[2400], *out = NULL;
    make_corpus(train, val, sizeof train);
    snprintf(args, sizeof args,
             "-e qwen3-0.6b --device cpu --layers 1 --dim 32 --heads 2 --kv-heads 1 --head-dim 16 --ffn-dim 32 -v 64 "
             "-b 1 -t 2048 -x 1 -s 0 --val-every 0 -i %s -o %s/runs/ctx",
             train, test_tmpdir());
    int rc = run_train(args, &out);
    CHECK(rc == 0 && out && strstr(out, "maxT=40960 "), "qwen3-0.6b -t 2048 without --max-seq-len (%d): %s", rc, out);
    free(out);
    expect_usage_error("-e qwen3-0.6b -t 40961", "-t/--seq-len 40961 is above the model's context (--max-seq-len 40960)");
    expect_usage_error("-e qwen3-0.6b --max-seq-len 1024 -t 2048", "-t/--seq-len 2048 is above the model's context");
}

TEST(a_family_flag_the_run_cannot_honour_is_a_usage_error_naming_it) {
    const struct {
        const char *flags, *msg;
    } bad[] = {
        {"--family mistral", "--family must be gpt2, llama, qwen2, qwen3 or gemma3"},
        {"--kv-heads 1", "need --family llama, qwen2, qwen3 or gemma3"},
        {"--family llama --sliding-window 8", "--sliding-window needs --family gemma3"},
        {"--family gemma3 --sliding-window -1", "--sliding-window must be positive"},
        {"--family llama --query-pre-attn-scalar 168", "--query-pre-attn-scalar needs --family gemma3"},
        {"--family gemma3 --query-pre-attn-scalar -1", "--query-pre-attn-scalar must be positive"},
        {"--family llama --kv-heads 3", "--kv-heads 3 must divide --heads 2"},
        /* the preset's kv heads, named as the preset's */
        {"-e qwen3-0.6b --layers 1 --dim 96 --heads 6", "--kv-heads 8 must divide --heads 6 (the preset's: pass --kv-heads)"},
        {"--family llama --head-dim 33", "--head-dim must be even"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char args[400], *out = NULL;
        snprintf(args, sizeof args, "%s %s -x 1 -o %s/runs/bad", strstr(bad[i].flags, "--device") ? "" : TINY_RUN,
                 bad[i].flags, test_tmpdir());
        int rc = run_train(args, &out);
        CHECK(rc == 2 && out && strncmp(out, "error: ", 7) == 0 && count_lines(out) == 1 && strstr(out, bad[i].msg),
              "'%s': (%d) %s", bad[i].flags, rc, out);
        free(out);
    }
}

TEST(cpu_small_validation_shard_is_used_whole_and_a_too_small_one_is_an_error) {
    char train[700], val[700], tiny[700], args[2400], *out = NULL;
    make_corpus(train, val, sizeof train);
    /* 4000 tokens hold 124 windows of 33, i.e. 31 batches of 4: fewer than --val-batches 100 */
    snprintf(args, sizeof args, TINY_RUN " -x 2 --val-every 1 --val-batches 100 -i %s -j %s -o %s/runs/v", train,
             val, test_tmpdir());
    int rc = run_train(args, &out);
    CHECK(rc == 0, "training failed (%d): %s", rc, out);
    CHECK(out && strstr(out, "holds 31 batch(es) of 4 x 33 per rank"), "no note on the 31 batches used: %s", out);
    CHECK(out && strstr(out, "val loss"), "no validation line: %s", out);
    free(out);
    snprintf(tiny, sizeof tiny, "%s/tiny_val.bin", test_tmpdir());
    write_pattern_shard(tiny, 100, 64, 3); /* not even one batch of 4 x 33 */
    snprintf(args, sizeof args, TINY_RUN " -x 2 -i %s -j %s -o %s/runs/w", train, tiny, test_tmpdir());
    rc = run_train(args, &out);
    CHECK(rc == 1, "exit status %d, expected 1: %s", rc, out);
    CHECK(out && strstr(out, "error: shard") && strstr(out, "too few for a batch"), "no clear error: %s", out);
    free(out);
}

/* The loss lines "step k/N | loss x ..." for k > from, joined, without timings. */
static void losses_after(const char *out, int from, char *buf, size_t n) {
    buf[0] = 0;
    const char *p = out;
    while ((p = strstr(p, "step ")) != NULL) {
        int k, total;
        float loss;
        if (sscanf(p, "step %d/%d | loss %f", &k, &total, &loss) == 3 && k > from) {
            const char *e = strstr(p, "| lr");
            size_t len = strlen(buf);
            snprintf(buf + len, n - len, "%.*s\n", (int)(e - p), p);
        }
        p += 5;
    }
}

/* A run directory dst holding only checkpoint step_NNNNNNNN of run directory src. */
static int copy_checkpoint(const char *src, int step, const char *dst) {
    char cmd[3000];
    snprintf(cmd, sizeof cmd, "mkdir -p %s && cp -r %s/step_%08d %s/ && echo step_%08d > %s/latest", dst, src, step,
             dst, step, dst);
    return system(cmd);
}

/* state.bin's header: the number of ranks (uint32) at byte 12, the loader's position (uint64) at 72 */
#define STATE_WORLD_AT 12
#define STATE_POSITION_AT 72
#define STATE_BATCH_AT 44 /* B (int32) */
#define STATE_PARAMS_AT 112 /* the parameter count (uint64) */
static int rewrite_state(const char *state, long at, const void *value, size_t bytes) {
    FILE *f = fopen(state, "r+b");
    if (!f) return -1;
    int ok = fseek(f, at, SEEK_SET) == 0 && fwrite(value, bytes, 1, f) == 1;
    char err[ERR_LEN];
    /* as a conversion tool would: the checksum follows the rewritten header */
    return (fclose(f) == 0 && ok && checkpoint_state_reseal(state, err) == 0) ? 0 : -1;
}

/* -o naming one of a run's checkpoints (a Hugging Face folder) is refused, new run or resume: a run's
 * files beside its weights would make it neither. */
TEST(an_out_folder_that_is_a_checkpoint_is_refused_naming_both_ways_on) {
    char train[700], val[700], args[2400], *out = NULL;
    make_corpus(train, val, sizeof train);
    const char *d = test_tmpdir();
    snprintf(args, sizeof args, TINY_RUN " -x 2 --val-every 0 -i %s -o %s/r", train, d);
    REQUIRE(run_train(args, &out) == 0, "%s", out);
    free(out);
    for (int resume = 0; resume < 2; resume++) {
        snprintf(args, sizeof args, TINY_RUN " -x 4 --val-every 0 -y %d -i %s -o %s/r/step_00000002", resume, train, d);
        const int rc = run_train(args, &out);
        CHECK(rc == 1 && out && strstr(out, "step_00000002 is a checkpoint (config.json and its weights), not a run's "
                                            "directory") && strstr(out, "--init-from "),
              "-y %d: (%d) %s", resume, rc, out);
        free(out);
    }
    char lock[900];
    snprintf(lock, sizeof lock, "%s/r/step_00000002/log.jsonl", d);
    CHECK(access(lock, F_OK) != 0, "a run's log was written into the checkpoint");
}

/* A finished run taken further: its final eval, at the step the resume starts from and evaluates
 * again, is not called the record of a run stopped before its next checkpoint. */
TEST(a_finished_run_taken_further_drops_its_final_eval_without_a_stopped_run_note) {
    char train[700], val[700], args[2400], *out = NULL;
    make_corpus(train, val, sizeof train);
    snprintf(args, sizeof args, TINY_RUN " -x 3 --val-every 3 -i %s -j %s -o %s/r", train, val, test_tmpdir());
    REQUIRE(run_train(args, &out) == 0, "%s", out);
    free(out);
    snprintf(args, sizeof args, TINY_RUN " -x 6 --val-every 3 -y 1 -i %s -j %s -o %s/r", train, val, test_tmpdir());
    REQUIRE(run_train(args, &out) == 0, "%s", out);
    CHECK(!strstr(out, "stopped before its next checkpoint") && strstr(out, "step     3 | val loss") &&
              strstr(out, "step     6/6"),
          "%s", out);
    /* step 4 is in the warmup of either schedule: its rate does not move, and the line says so */
    CHECK(strstr(out, "-x/--steps 3 -> 6; the learning rate of step 4 stays 2.400e-03"), "%s", out);
    free(out);
}

/* --seed takes all 64 bits, as checkpoints record it and `./train sample --seed` reads it: seeds
 * that differ above bit 31 train differently, and a resume must name the same one. */
TEST(seeds_take_all_64_bits_and_a_resume_names_the_same_one) {
    char train[700], val[700], args[2400], *out = NULL;
    make_corpus(train, val, sizeof train);
    const char *d = test_tmpdir();
    float first[2] = {0, 0};
    const char *seeds[2] = {"5", "4294967301"}; /* 2^32 + 5 */
    for (int k = 0; k < 2; k++) {
        snprintf(args, sizeof args, TINY_RUN " -x 2 --val-every 0 --seed %s -i %s -o %s/s%d", seeds[k], train, d, k);
        REQUIRE(run_train(args, &out) == 0, "--seed %s: %s", seeds[k], out);
        REQUIRE(parse_losses(out, &first[k], 1) == 1, "no loss: %s", out);
        free(out);
    }
    CHECK(first[0] != first[1], "seeds 5 and 2^32 + 5 gave the same first loss %g", first[0]);
    snprintf(args, sizeof args, TINY_RUN " -x 2 --val-every 0 --seed 18446744073709551557 -i %s -o %s/big", train, d);
    REQUIRE(run_train(args, &out) == 0, "the largest seeds: %s", out);
    free(out);
    snprintf(args, sizeof args, TINY_RUN " -x 3 --val-every 0 --seed 18446744073709551557 -y 1 -i %s -o %s/big", train, d);
    REQUIRE(run_train(args, &out) == 0, "resuming with the same seed: %s", out);
    CHECK(strstr(out, "step     3/3") != NULL, "no step 3: %s", out);
    free(out);
    snprintf(args, sizeof args, TINY_RUN " -x 4 --val-every 0 -y 1 -i %s -o %s/big", train, d);
    const int rc = run_train(args, &out);
    CHECK(rc == 1 && strstr(out, "--seed 18446744073709551557; resume with the same"), "another seed: exit %d: %s", rc,
          out);
    free(out);
}

TEST(resume_prints_exactly_the_losses_of_the_uninterrupted_run) {
    char train[700], val[700], args[2400], *full = NULL, *resumed = NULL, *bad = NULL;
    make_corpus(train, val, sizeof train);
    const char *d = test_tmpdir();
    snprintf(args, sizeof args, TINY_RUN " -x 20 -n 10 --keep-checkpoints 3 --val-every 5 -i %s -j %s -o %s/a",
             train, val, d);
    REQUIRE(run_train(args, &full) == 0, "first run failed: %s", full);
    /* a second run directory holding only the step-10 checkpoint */
    char src[800], dst[800];
    snprintf(src, sizeof src, "%s/a", d);
    snprintf(dst, sizeof dst, "%s/b", d);
    REQUIRE(copy_checkpoint(src, 10, dst) == 0, "copying the checkpoint failed");
    snprintf(args, sizeof args, TINY_RUN " -x 20 -n 10 --val-every 5 -y 1 -i %s -j %s -o %s/b", train, val, d);
    REQUIRE(run_train(args, &resumed) == 0, "resumed run failed: %s", resumed);
    CHECK(strstr(resumed, "resumed from") != NULL, "no resume message");
    CHECK(!strstr(resumed, "cannot read that checkpoint"), "a whole checkpoint was called unreadable: %s", resumed);
    static char a[8192], b[8192];
    losses_after(full, 10, a, sizeof a);
    losses_after(resumed, 10, b, sizeof b);
    CHECK(count_lines(a) == 10, "expected 10 loss lines after step 10, got %d", count_lines(a));
    CHECK(strcmp(a, b) == 0, "resumed losses differ:\n%s---\n%s", a, b);
    /* the same checkpoint with another vocabulary is refused, naming the flag (a runtime failure: the
     * command line alone is not wrong) */
    snprintf(args, sizeof args, "--device cpu -e tiny -v 65 -b 4 -t 32 -x 20 -y 1 -i %s -o %s/b", train, d);
    int rc = run_train(args, &bad);
    CHECK(rc == 1 && strstr(bad, "-v 64"), "mismatched resume: exit %d: %s", rc, bad);
    free(bad);
    /* ... and so is a resume on another shard of the same vocabulary (the data position would point
     * into other data) */
    snprintf(args, sizeof args, TINY_RUN " -x 20 -y 1 -i %s -o %s/b", val, d);
    rc = run_train(args, &bad);
    CHECK(rc == 1 && strstr(bad, "was trained on other data") && strstr(bad, "resume with the same -i"),
          "resume on other data: exit %d: %s", rc, bad);
    free(bad);
    /* a state.bin claiming 2 ranks for a batch of one micro-batch per step is refused, not used */
    char state[800];
    snprintf(state, sizeof state, "%s/b/step_00000010/state.bin", d);
    uint32_t two = 2;
    REQUIRE(rewrite_state(state, STATE_WORLD_AT, &two, 4) == 0, "cannot rewrite %s", state);
    char cmd[1000];
    snprintf(cmd, sizeof cmd, "echo step_00000010 > %s/latest", dst); /* the resumed run moved it to step 20 */
    REQUIRE(system(cmd) == 0, "rewriting latest");
    snprintf(args, sizeof args, TINY_RUN " -x 20 -y 1 -i %s -o %s/b", train, d);
    rc = run_train(args, &bad);
    CHECK(rc == 1 && strstr(bad, "(2 rank(s), 1 micro-batches per step): that many ranks cannot share its batch"),
          "exit %d: %s", rc, bad);
    free(bad);
    /* a batch of 0 in a resealed header is named as such, not as a batch to resume with */
    const int32_t one = 1, zero = 0;
    REQUIRE(rewrite_state(state, STATE_WORLD_AT, &one, 4) == 0 && rewrite_state(state, STATE_BATCH_AT, &zero, 4) == 0,
            "cannot rewrite %s", state);
    rc = run_train(args, &bad);
    CHECK(rc == 1 && strstr(bad, "holds -b 0 -t 32 -d 128, a batch no run writes") &&
              strstr(bad, "--init-from ") && strstr(bad, "/b/step_00000010"),
          "exit %d: %s", rc, bad);
    free(bad);
    /* a checkpoint whose model.safetensors was cut short still resumes (from state.bin), and the run
     * says that eval, sample and transformers cannot read it */
    char weights[800];
    snprintf(weights, sizeof weights, "%s/a/step_00000020/model.safetensors", d);
    REQUIRE(truncate(weights, 5000) == 0, "truncating %s", weights);
    snprintf(args, sizeof args, TINY_RUN " -x 21 -n 10 --val-every 5 -y 1 -i %s -j %s -o %s/a", train, val, d);
    rc = run_train(args, &bad);
    CHECK(rc == 0 && strstr(bad, "note: resuming from ") && strstr(bad, "step_00000020/state.bin, but eval, sample "
                                                                        "and transformers cannot read that checkpoint"),
          "exit %d: %s", rc, bad);
    free(bad);
    /* one weight of model.safetensors changed after the save: the resume continues from state.bin,
     * and says that the file eval and sample read holds other weights */
    CHECK(!strstr(resumed, "holds other weights"), "an untouched checkpoint was called edited: %s", resumed);
    snprintf(weights, sizeof weights, "%s/a/step_00000021/model.safetensors", d);
    FILE *f = fopen(weights, "r+b");
    const float edited = 0.125f;
    REQUIRE(f && fseek(f, -4, SEEK_END) == 0 && fwrite(&edited, 4, 1, f) == 1 && fclose(f) == 0, "editing %s", weights);
    snprintf(args, sizeof args, TINY_RUN " -x 22 -n 10 --val-every 5 -y 1 -i %s -j %s -o %s/a", train, val, d);
    rc = run_train(args, &bad);
    CHECK(rc == 0 && strstr(bad, "step_00000021/model.safetensors holds other weights than its state.bin (from ") &&
              strstr(bad, "start a new run with --init-from"),
          "exit %d: %s", rc, bad);
    free(bad);
    free(resumed);
    free(full);
}

/* --optimizer-state bf16 on the CPU: the run says so, learns, its state file holds the weights, m
 * and v in 2 bytes each, and a resume from its checkpoint prints exactly the uninterrupted run's
 * losses: the state crosses bf16 exactly and the rounding's random bits follow the step. The
 * checkpoint also resumes with fp32 state, which says so. */
TEST(cpu_training_with_bf16_optimizer_state_learns_and_resumes_exactly) {
    char train[700], val[700], args[2400], *full = NULL, *resumed = NULL;
    make_corpus(train, val, sizeof train);
    const char *d = test_tmpdir();
    const char *llama = TINY_RUN " --family llama --kv-heads 1 --head-dim 48 --ffn-dim 192 --optimizer-state bf16";
    snprintf(args, sizeof args, "%s -x 20 -n 10 --val-every 0 -i %s -j %s -o %s/bf16a", llama, train, val, d);
    REQUIRE(run_train(args, &full) == 0, "bf16 state run failed: %s", full);
    CHECK(strstr(full, "optimizer: AdamW on bf16 moments") && strstr(full, "AdamW m, v (fp32 holding bf16 values)"),
          "no optimizer line or memory row: %s", full);
    float losses[100];
    int n = parse_losses(full, losses, 100);
    REQUIRE(n == 20, "parsed %d losses", n);
    CHECK(losses[19] < 0.5f * logf(64), "final loss %.3f is not well below ln 64", losses[19]);
    char src[800], dst[800];
    snprintf(src, sizeof src, "%s/bf16a", d);
    snprintf(dst, sizeof dst, "%s/bf16b", d);
    char state[900];
    snprintf(state, sizeof state, "%s/step_00000010/state.bin", src);
    FILE *f = fopen(state, "rb");
    uint64_t params = 0;
    struct stat sb;
    REQUIRE(f && fseek(f, STATE_PARAMS_AT, SEEK_SET) == 0 && fread(&params, 8, 1, f) == 1 && stat(state, &sb) == 0,
            "reading %s", state);
    fclose(f);
    CHECK(params > 1000 && (uint64_t)sb.st_size > 6 * params && (uint64_t)sb.st_size < 6 * params + 4096,
          "state.bin of %lld bytes for %llu parameters: not 6 bytes each", (long long)sb.st_size,
          (unsigned long long)params);
    /* the weights are all bf16s: model.safetensors holds them as BF16 */
    snprintf(state, sizeof state, "%s/step_00000010/model.safetensors", src);
    size_t bytes = 0;
    char *weights = read_file(state, &bytes);
    uint64_t header = 0;
    if (weights && bytes > 8) memcpy(&header, weights, 8);
    REQUIRE(header > 2 && header < bytes - 8, "reading %s", state);
    weights[8 + header] = 0; /* the JSON header alone */
    CHECK(strstr(weights + 8, "\"dtype\":\"BF16\"") && !strstr(weights + 8, "\"F32\""),
          "model.safetensors of a bf16 state run is not all BF16: %s", weights + 8);
    free(weights);
    REQUIRE(copy_checkpoint(src, 10, dst) == 0, "copying the checkpoint failed");
    snprintf(args, sizeof args, "%s -x 20 -n 10 --val-every 0 -y 1 -i %s -j %s -o %s/bf16b", llama, train, val, d);
    REQUIRE(run_train(args, &resumed) == 0, "resumed run failed: %s", resumed);
    static char a[8192], b[8192];
    losses_after(full, 10, a, sizeof a);
    losses_after(resumed, 10, b, sizeof b);
    CHECK(count_lines(a) == 10 && strcmp(a, b) == 0, "resumed losses differ:\n%s---\n%s", a, b);
    CHECK(!strstr(resumed, "holds other weights"), "the BF16 model.safetensors and state.bin disagree: %s", resumed);
    free(resumed);
    snprintf(dst, sizeof dst, "%s/bf16c", d);
    REQUIRE(copy_checkpoint(src, 10, dst) == 0, "copying the checkpoint failed");
    char fp32[2400];
    snprintf(fp32, sizeof fp32, "%s", llama);
    *strstr(fp32, " --optimizer-state bf16") = 0;
    snprintf(args, sizeof args, "%s -x 12 --val-every 0 -y 1 -i %s -j %s -o %s/bf16c", fp32, train, val, d);
    REQUIRE(run_train(args, &resumed) == 0, "the resume with fp32 state failed: %s", resumed);
    /* step 11's loss is the checkpoint's weights' on the same batch, whichever state updates them */
    const char *loss11 = strstr(resumed, "step    11/12 | loss "), *full11 = strstr(full, "step    11/20 | loss ");
    CHECK(strstr(resumed, "--optimizer-state bf16 -> fp32") && loss11 && full11 &&
              strncmp(loss11 + 13, full11 + 13, 17) == 0,
          "the resume with fp32 state: %s", resumed);
    free(resumed);
    free(full);
}

TEST(resume_on_another_number_of_ranks_continues_the_same_data) {
    /* -d 256 = 2 micro-batches per step: one rank accumulating 2 or two ranks taking one each. The
     * step-10 checkpoint of the one-rank run, rewritten as the two-rank run would have written it
     * (2 ranks, half the per-rank position), resumed on one rank repeats the uninterrupted losses. */
    char train[700], val[700], args[2400], *full = NULL, *resumed = NULL;
    make_corpus(train, val, sizeof train);
    const char *d = test_tmpdir();
    snprintf(args, sizeof args, TINY_RUN " -d 256 -x 20 -n 10 --val-every 0 -i %s -o %s/r1", train, d);
    REQUIRE(run_train(args, &full) == 0, "first run failed: %s", full);
    char src[800], dst[800], state[900];
    snprintf(src, sizeof src, "%s/r1", d);
    snprintf(dst, sizeof dst, "%s/r2", d);
    REQUIRE(copy_checkpoint(src, 10, dst) == 0, "copying the checkpoint failed");
    snprintf(state, sizeof state, "%s/step_00000010/state.bin", dst);
    FILE *f = fopen(state, "rb");
    uint64_t position = 0;
    REQUIRE(f && fseek(f, STATE_POSITION_AT, SEEK_SET) == 0 && fread(&position, 8, 1, f) == 1, "reading %s", state);
    fclose(f);
    REQUIRE(position % 2 == 0, "one rank with accumulation 2 is at the odd position %llu", (unsigned long long)position);
    const uint32_t two = 2;
    const uint64_t half = position / 2;
    REQUIRE(rewrite_state(state, STATE_WORLD_AT, &two, 4) == 0 && rewrite_state(state, STATE_POSITION_AT, &half, 8) == 0,
            "cannot rewrite %s", state);
    snprintf(args, sizeof args, TINY_RUN " -d 256 -x 20 --val-every 0 -y 1 -i %s -o %s", train, dst);
    REQUIRE(run_train(args, &resumed) == 0, "resumed run failed: %s", resumed);
    CHECK(strstr(resumed, "resuming a run of 2 rank(s) on 1") != NULL, "no note of the rank change: %s", resumed);
    static char a[8192], b[8192];
    losses_after(full, 10, a, sizeof a);
    losses_after(resumed, 10, b, sizeof b);
    CHECK(count_lines(a) == 10, "expected 10 loss lines after step 10, got %d", count_lines(a));
    CHECK(strcmp(a, b) == 0, "resumed losses differ:\n%s---\n%s", a, b);
    free(resumed);
    free(full);
}

TEST(tokens_beyond_the_vocabulary_are_reported_with_the_fix) {
    char train[700], val[700], args[2400], *out = NULL;
    make_corpus(train, val, sizeof train);
    snprintf(args, sizeof args, "--device cpu -e tiny -v 32 -b 4 -t 32 -x 1 -i %s -o %s/run", train, test_tmpdir());
    int rc = run_train(args, &out);
    CHECK(rc == 1 && strstr(out, "is >= vocabulary 32") && strstr(out, "pass -v"), "exit %d: %s", rc, out);
    free(out);
}

TEST(a_non_finite_loss_or_gradient_norm_stops_the_step_and_is_named) {
    const struct {
        float loss, norm;
        const char *want; /* NULL: the step goes on */
    } cases[] = {
        {2.5f, 1.0f, NULL},
        {2.5f, 0.0f, NULL},
        {NAN, 1.0f, "error: loss is NaN at step 7;"},
        {INFINITY, NAN, "error: loss is Inf at step 7;"}, /* the loss is named first */
        {-INFINITY, 1.0f, "error: loss is Inf at step 7;"},
        {2.5f, NAN, "error: gradient norm is NaN at step 7;"},
        {2.5f, INFINITY, "error: gradient norm is Inf at step 7;"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char msg[256] = "";
        int ok = step_is_finite(cases[i].loss, cases[i].norm, 7, msg, sizeof msg);
        if (!cases[i].want) {
            CHECK(ok == 1 && msg[0] == 0, "case %zu: a finite step was stopped: %s", i, msg);
        } else {
            CHECK(ok == 0 && strstr(msg, cases[i].want) == msg && strstr(msg, "lower -l/--lr"),
                  "case %zu: wanted '%s...' with the fix, got '%s'", i, cases[i].want, msg);
        }
    }
    /* before any update the learning rate cannot be the cause: the starting weights or loss options are */
    char msg[512] = "";
    CHECK(step_is_finite(NAN, NAN, 1, msg, sizeof msg) == 0 && strstr(msg, "error: loss is NaN at step 1;") == msg &&
              strstr(msg, "--init-from") && strstr(msg, "--z-loss") && !strstr(msg, "lower -l/--lr"),
          "step 1 names the starting weights and loss options, not the learning rate: '%s'", msg);
}

/* The last update's weights meet no training step's check, only the validation after it: a
 * non-finite validation loss ends the run with exit status 1 and names the checkpoint that holds
 * those weights (an update at an absurd learning rate diverges them). */
TEST(a_non_finite_validation_loss_ends_the_run_and_names_its_checkpoint) {
    char train[700], val[700], args[2400], *out = NULL;
    make_corpus(train, val, sizeof train);
    snprintf(args, sizeof args,
             "--device cpu -e tiny -v 64 -b 4 -t 32 -l 3e38 --warmup 0 --weight-decay 0.9 -x 1 -s 0 --val-every 1 "
             "--val-batches 1 -i %s -j %s -o %s/diverged", train, val, test_tmpdir());
    int rc = run_train(args, &out);
    REQUIRE(out, "could not run ./train");
    CHECK(rc == 1 && strstr(out, "step     1 | val loss") &&
              strstr(out, "error: the validation loss is NaN after step 1 (the weights diverged: lower -l/--lr") &&
              strstr(out, "the checkpoint of step 1 holds these weights"),
          "exit %d: %s", rc, out);
    free(out);
    char msg[512] = "";
    CHECK(validation_is_finite(2.5f, 3, 1, msg, sizeof msg) == 1 && msg[0] == 0, "a finite loss was refused: %s", msg);
    CHECK(validation_is_finite(INFINITY, 0, 0, msg, sizeof msg) == 0 &&
              strstr(msg, "error: the validation loss is Inf after step 0 (no update has run yet") == msg &&
              !strstr(msg, "checkpoint of step"),
          "before any update: '%s'", msg);
}

TEST(nan_loss_stops_the_run_and_keeps_the_last_checkpoint) {
    char train[700], val[700], args[2400], *out = NULL;
    make_corpus(train, val, sizeof train);
    /* an absurd learning rate drives the weights to Inf within a few steps */
    snprintf(args, sizeof args,
             "--device cpu -e tiny -v 64 -b 4 -t 32 -l 1e30 --lr-final 1e30 --warmup 0 -x 20 -n 1 -s 0 "
             "--val-every 0 -i %s -o %s/run",
             train, test_tmpdir());
    int rc = run_train(args, &out);
    REQUIRE(out, "could not run ./train");
    CHECK(rc == 1, "exit status %d, expected 1: %s", rc, out);
    const char *e = strstr(out, "error: ");
    CHECK(e && (strstr(e, "is NaN at step") || strstr(e, "is Inf at step")), "no NaN/Inf error line: %s", out);
    /* the checkpoint `latest` names was written by a step whose loss was finite */
    char path[800], name[64] = "";
    snprintf(path, sizeof path, "%s/run/latest", test_tmpdir());
    FILE *f = fopen(path, "r");
    REQUIRE(f, "no checkpoint was written before the failure");
    CHECK(fscanf(f, "%63s", name) == 1, "latest is empty");
    fclose(f);
    int last_step = atoi(name + 5), failed_step = -1;
    if (e && (e = strstr(e, "at step "))) failed_step = atoi(e + 8);
    CHECK(last_step >= 1 && last_step < failed_step, "latest is %s but the failure was at step %d", name,
          failed_step);
    /* with a checkpoint every step, the newest holds the weights the failing step ran on, and the line says so */
    char held[96];
    snprintf(held, sizeof held, "; the checkpoint of step %d holds the weights that gave it", failed_step - 1);
    CHECK(last_step == failed_step - 1 && strstr(out, held), "the error line does not name step %d's checkpoint: %s",
          failed_step - 1, out);
    /* ... and holds finite weights and moments */
    GPTConfig cfg = {.num_layers = 2, .num_heads = 2, .dim = 128, .max_seq_len = 1024, .vocab_size = 64};
    gpt_config_finish(&cfg);
    ParamTable t;
    char err[ERR_LEN];
    REQUIRE(param_table_build(&t, &cfg, err) == 0, "%s", err);
    float *state = malloc(3 * t.total * sizeof(float));
    TrainState st;
    snprintf(path, sizeof path, "%s/run", test_tmpdir());
    REQUIRE(state && checkpoint_load_latest(path, &t, state, state + t.total, state + 2 * t.total, &st, err) == 0,
            "%s", err);
    size_t bad = 0;
    for (size_t i = 0; i < 3 * t.total; i++) bad += !isfinite(state[i]);
    CHECK(bad == 0, "the kept checkpoint (%s) holds %zu non-finite values", name, bad);
    free(state);
    param_table_free(&t);
    free(out);
}

/* Runs ./train with the flags fmt makes, after the shell commands `prefix` (run_train_under);
 * its exit status must be rc and its output must hold `needle` and, unless NULL, `needle2`. */
static void expect_run_under(const char *prefix, int rc, const char *needle, const char *needle2, const char *fmt,
                             va_list ap) {
    char args[2400], *out = NULL;
    vsnprintf(args, sizeof args, fmt, ap);
    int got = prefix ? run_train_under(prefix, args, &out) : run_train(args, &out);
    CHECK(out && got == rc && strstr(out, needle) && (!needle2 || strstr(out, needle2)),
          "./train %s: exit %d (expected %d), output lacks '%s'%s%s: %s", args, got, rc, needle, needle2 ? " or " : "",
          needle2 ? needle2 : "", out ? out : "");
    free(out);
}

/* The same without a prefix. */
static void expect_run(int rc, const char *needle, const char *needle2, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void expect_run(int rc, const char *needle, const char *needle2, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    expect_run_under(NULL, rc, needle, needle2, fmt, ap);
    va_end(ap);
}

/* ./train without apt-get on PATH, so that the default corpus is the synthetic one (in cache_dir). */
static void expect_run_synthetic_corpus(int rc, const char *needle, const char *needle2, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void expect_run_synthetic_corpus(int rc, const char *needle, const char *needle2, const char *fmt, ...) {
    char nobin[900], prefix[1000];
    snprintf(nobin, sizeof nobin, "%s/nobin_synthetic", test_tmpdir());
    mkdir(nobin, 0755);
    snprintf(prefix, sizeof prefix, "PATH=%s", nobin);
    va_list ap;
    va_start(ap, fmt);
    expect_run_under(prefix, rc, needle, needle2, fmt, ap);
    va_end(ap);
}

TEST(a_new_run_in_a_used_directory_sets_the_old_one_aside_and_a_finished_resume_says_so) {
    char train[700], val[700], path[900];
    make_corpus(train, val, sizeof train);
    const char *d = test_tmpdir();
    expect_run(0, "step     4/4", NULL, TINY_RUN " -x 4 -n 2 --val-every 0 -i %s -o %s/u", train, d);
    /* a new run, not a resume, into the same directory: said at the start, and the earlier run's
     * checkpoints, latest and log move whole into earlier_run_1 (nothing of it pruned or mixed) */
    expect_run(0, "held an earlier run (latest checkpoint step_00000004); moved it to", NULL,
               TINY_RUN " -x 1 --val-every 0 -i %s -o %s/u", train, d);
    const char *kept[] = {"earlier_run_1/step_00000002", "earlier_run_1/step_00000004", "earlier_run_1/latest",
                          "earlier_run_1/log.jsonl", "step_00000001", "latest", "log.jsonl"};
    struct stat sb;
    for (size_t i = 0; i < sizeof kept / sizeof kept[0]; i++) {
        snprintf(path, sizeof path, "%s/u/%s", d, kept[i]);
        CHECK(stat(path, &sb) == 0, "%s is missing", path);
    }
    snprintf(path, sizeof path, "%s/u/step_00000004", d);
    CHECK(stat(path, &sb) != 0, "the earlier run's checkpoint was left among the new run's");
    /* resuming the new run: the checkpoint is step 1, and -x 1 leaves nothing to do; -x 2 goes on */
    expect_run(0, "resumed from", "nothing to train: the checkpoint is at step 1 and -x is 1",
               TINY_RUN " -x 1 --val-every 0 -y 1 -i %s -o %s/u", train, d);
    expect_run(0, "at step 1", "step     2/2", TINY_RUN " -x 2 --val-every 0 -y 1 -i %s -o %s/u", train, d);
    /* and the earlier run still resumes where it stopped */
    expect_run(0, "at step 4", "step     5/5", TINY_RUN " -x 5 --val-every 0 -y 1 -i %s -o %s/u/earlier_run_1",
               train, d);
}

/* RUN/step_N.tmp holding one file `name` with `text`, as a stopped save leaves it; the file's path in path. */
static void leave_unfinished_checkpoint(const char *run, int step, const char *name, const char *text, char *path,
                                        size_t n) {
    snprintf(path, n, "%s/step_%08d.tmp", run, step);
    REQUIRE(mkdir(path, 0755) == 0, "%s", path);
    snprintf(path, n, "%s/step_%08d.tmp/%s", run, step, name);
    REQUIRE(write_file_whole(path, text, strlen(text)) == 0, "%s", path);
}

/* An unfinished checkpoint (step_N.tmp) a stopped run left behind is cleared on resume; one that
 * holds files a checkpoint does not write is named before training, not at the save that needs it. */
TEST(a_resume_clears_an_unfinished_checkpoint_or_names_one_holding_other_files) {
    char train[700], val[700], run[800], path[1000];
    make_corpus(train, val, sizeof train);
    snprintf(run, sizeof run, "%s/left", test_tmpdir());
    expect_run(0, "step     2/2", NULL, TINY_RUN " -x 2 -n 1 --val-every 0 -i %s -o %s", train, run);
    leave_unfinished_checkpoint(run, 3, "config.json", "{", path, sizeof path);
    expect_run(0, "step     3/3", NULL, TINY_RUN " -x 3 -n 1 --val-every 0 -y 1 -i %s -o %s", train, run);
    leave_unfinished_checkpoint(run, 4, "notes.txt", "mine", path, sizeof path);
    expect_run(1, "step_00000004.tmp, the unfinished checkpoint of a stopped run, holds files a checkpoint does not write",
               NULL, TINY_RUN " -x 4 -n 1 --val-every 0 -y 1 -i %s -o %s", train, run);
    struct stat sb;
    CHECK(stat(path, &sb) == 0, "the user's file in the leftover was removed");
    /* a folder where the run's log belongs is named as such, not as an I/O error */
    char cmd[2400];
    snprintf(cmd, sizeof cmd, "rm -r %s/step_00000004.tmp && rm %s/log.jsonl && mkdir %s/log.jsonl", run, run, run);
    REQUIRE(system(cmd) == 0, "%s", cmd);
    expect_run(1, "log.jsonl is not a file (a run's log is): move it out of the run directory", NULL,
               TINY_RUN " -x 4 -n 1 --val-every 0 -y 1 -i %s -o %s", train, run);
}

TEST(inputs_that_would_be_silently_useless_are_refused_or_named) {
    char train[700], val[700], other[800];
    make_corpus(train, val, sizeof train);
    const char *d = test_tmpdir();
    expect_run(2, "--prompt needs a tokenizer", NULL, TINY_RUN " -x 1 --prompt hello -i %s -o %s/p", train, d);
    /* a validation shard from another tokenizer (vocabulary 60 against 64) */
    snprintf(other, sizeof other, "%s/val60.bin", d);
    REQUIRE(write_pattern_shard(other, 4000, 60, 3) == 0, "writing %s", other);
    expect_run(1, "for a vocabulary of 64 but", "for 60", TINY_RUN " -x 1 -i %s -j %s -o %s/q", train, other, d);
    expect_run(2, "not to the CPU backend", NULL, TINY_RUN " -x 1 --zero 1 -i %s -o %s/z", train, d);
    /* --zero's default, auto, and an explicit 0 mean no sharding: the CPU backend takes both */
    expect_run(0, "step     1/1", NULL, TINY_RUN " -x 1 --val-every 0 --zero auto -i %s -o %s/za", train, d);
    expect_run(0, "step     1/1", NULL, TINY_RUN " -x 1 --val-every 0 --zero 0 -i %s -o %s/z0", train, d);
    /* reducing after the backward asks for GPUs; the default, auto, and 1 (the default before auto) run */
    expect_run(2, "not to the CPU backend", NULL, TINY_RUN " -x 1 --overlap-comm 0 -i %s -o %s/o0", train, d);
    expect_run(0, "step     1/1", NULL, TINY_RUN " -x 1 --val-every 0 --overlap-comm auto -i %s -o %s/oa", train, d);
    expect_run(2, "--grad-reduce set how GPUs share gradients", "not to the CPU backend",
               TINY_RUN " -x 1 --grad-reduce bf16 -i %s -o %s/w", train, d);
    /* a resume from a directory that does not exist says so and does not create it */
    struct stat sb;
    expect_run(1, "no checkpoint to resume in", "drop -y or check -o", TINY_RUN " -x 1 -y 1 -i %s -o %s/typo/run",
               train, d);
    snprintf(other, sizeof other, "%s/typo", d);
    CHECK(stat(other, &sb) != 0, "a failed resume created %s", other);
    /* a second trainer in a run directory in use */
    char dir[800];
    snprintf(dir, sizeof dir, "%s/busy", d);
    int fd = lock_dir(dir);
    REQUIRE(fd >= 0, "cannot lock %s", dir);
    expect_run(1, "another trainer is using run directory", NULL, TINY_RUN " -x 1 -i %s -o %s", train, dir);
    /* a resume there, before that trainer's first checkpoint: the same, not "nothing to resume" */
    expect_run(1, "another trainer is using run directory", NULL, TINY_RUN " -x 1 -y 1 -i %s -o %s", train, dir);
    close(fd);
    expect_run(0, "step     1/1", NULL, TINY_RUN " -x 1 -i %s -o %s", train, dir);
    expect_run(0, "--logits-mb sizes the fused layer's chunks; --output canonical does not use it", NULL,
               TINY_RUN " -x 1 --output canonical --logits-mb 64 -i %s -o %s/lm", train, d);
    /* flags given again (TINY_RUN has -b 4): the last value holds (-x 2 trains two steps), each named
     * once in a note */
    expect_run(0, "note: given more than once, the last value is used: -b/--batch, -x/--steps\n", "step     2/2",
               TINY_RUN " -x 1 -b 2 -x 9 -b 4 -x 2 -i %s -o %s/twice", train, d);
    /* notes, not errors: no validation shard for --val-every; a warmup the run never finishes */
    expect_run(0, "validation: off (no -j/--val-data", "--warmup 10 is longer than -x 2",
               "--device cpu -e tiny -v 64 -b 4 -t 32 -s 0 -x 2 --warmup 10 --val-every 1 -i %s -o %s/r", train, d);
}

/* eval, sample and prepare say which flags came twice as ./train does, and refuse a number that
 * starts with white space as ./train does (strtol would skip it). */
TEST(the_commands_name_flags_given_twice_and_refuse_numbers_with_leading_space_alike) {
    const char *d = test_tmpdir();
    expect_run(1, "note: given more than once, the last value is used: -i/--data, -b/--batch\n", NULL,
               "eval --device cpu -o %s/none -i a -i b -b 2 --batch 3", d);
    expect_run(1, "note: given more than once, the last value is used: -o/--out, -G/--gen-tokens\n", NULL,
               "sample --device cpu -o %s/none -G 3 --gen-tokens 4 --out %s/none", d, d);
    expect_run(1, "note: given more than once, the last value is used: -v/--vocab, -o/--out\n", NULL,
               "prepare -v 512 --vocab 600 -o %s/p -o %s/q %s/no_such.txt", d, d, d);
    expect_run(2, "sample --temperature must be from 0", NULL, "sample --device cpu -o %s/none --temperature ' 1'", d);
    expect_run(2, "sample --top-k must be a whole number", NULL, "sample --device cpu -o %s/none --top-k ' 3'", d);
    expect_run(2, "sample --top-p must be above 0 and at most 1", NULL, "sample --device cpu -o %s/none --top-p 0", d);
    expect_run(2, "sample --top-p must be above 0 and at most 1", NULL, "sample --device cpu -o %s/none --top-p 1.5", d);
    expect_run(2, "sample --top-p must be above 0 and at most 1", NULL, "sample --device cpu -o %s/none --top-p nan", d);
    expect_run(2, "eval -b", "expects a whole number", "eval --device cpu -o %s/none -i a -b ' 2'", d);
    expect_run(2, "prepare -v: needs a whole number", NULL, "prepare -v ' 512' %s/no_such.txt", d);
}

TEST(cli_help_as_a_word_prints_the_help) {
    char *out = NULL;
    int rc = run_train("help", &out);
    CHECK(rc == 0 && out && strncmp(out, "usage: ./train", 14) == 0 && strstr(out, "-o, --out"),
          "./train help: exit %d: %.200s", rc, out ? out : "");
    free(out);
}

TEST(a_checkpoint_of_another_shape_or_a_changed_one_is_a_runtime_failure_naming_the_fix) {
    char train[700], val[700], state[800];
    make_corpus(train, val, sizeof train);
    const char *d = test_tmpdir();
    expect_run(0, "step     1/1", NULL, TINY_RUN " -x 1 --val-every 0 -i %s -o %s/c", train, d);
    /* a tiny run resumed as d6: its config.json gives the shape, so the preset is what to leave out */
    expect_run(1, "/c/step_00000001 has layers 2 but the preset -e gives 6 (leave out -e: the checkpoint gives the "
               "shape)", NULL, "--device cpu -e d6 -v 64 -b 4 -t 32 -s 0 -x 2 -y 1 -i %s -o %s/c", train, d);
    expect_run(0, "step     1/1", NULL, TINY_RUN " --layers 3 -x 1 --val-every 0 -i %s -o %s/c3", train, d);
    expect_run(1, "/c3/step_00000001 has layers 3 but the preset -e gives 2", NULL, TINY_RUN " -x 2 -y 1 -i %s -o %s/c3",
               train, d);
    /* without a config.json to read, the state file names the shape: the preset, not one of its numbers, is
     * the fix, and a shape no preset has gets the three flags alone */
    snprintf(state, sizeof state, "%s/c/step_00000001/config.json", d);
    REQUIRE(remove(state) == 0, "removing %s", state);
    expect_run(1, "is a model of 2 layers, 2 heads and width 128 but this run's is 6, 6 and 384 (pass -e tiny, or "
               "--layers 2 --heads 2 --dim 128;", NULL, "--device cpu -e d6 -v 64 -b 4 -t 32 -s 0 -x 2 -y 1 -i %s -o %s/c",
               train, d);
    snprintf(state, sizeof state, "%s/c3/step_00000001/config.json", d);
    REQUIRE(remove(state) == 0, "removing %s", state);
    expect_run(1, "(pass --layers 3 --heads 2 --dim 128;", NULL, TINY_RUN " -x 2 -y 1 -i %s -o %s/c3", train, d);
    /* a state file changed on disk */
    snprintf(state, sizeof state, "%s/c/step_00000001/state.bin", d);
    FILE *f = fopen(state, "r+b");
    REQUIRE(f && fseek(f, 1000, SEEK_SET) == 0 && fputc(0x55, f) != EOF && fclose(f) == 0, "changing %s", state);
    expect_run(1, "does not match its checksum", NULL, TINY_RUN " -x 2 -y 1 -i %s -o %s/c", train, d);
}

TEST(samples_come_every_n_steps_and_after_the_last_when_n_divides_it) {
    char train[700], val[700], args[2000], *out = NULL;
    make_corpus(train, val, sizeof train);
    const char *d = test_tmpdir();
    /* -x 4 -s 2: after steps 2 and 4 (the trained model's sample), in the output and the log */
    snprintf(args, sizeof args, TINY_RUN " -x 4 -s 2 -G 4 --val-every 0 -i %s -o %s/s4", train, d);
    int rc = run_train(args, &out);
    CHECK(rc == 0 && out && strstr(out, "sample at step 2: ") && strstr(out, "sample at step 4: "),
          "./train %s: exit %d, expected samples at steps 2 and 4: %s", args, rc, out ? out : "");
    free(out);
    char log_path[900];
    snprintf(log_path, sizeof log_path, "%s/s4/log.jsonl", d);
    char *log = read_text(log_path);
    CHECK(log && strstr(log, "\"type\":\"sample\",\"step\":4,"), "the log lacks the sample at step 4: %s",
          log ? log : "(unreadable)");
    free(log);
    /* -x 3 -s 2: after step 2 only; step 3 is not a multiple of 2 */
    snprintf(args, sizeof args, TINY_RUN " -x 3 -s 2 -G 4 --val-every 0 -i %s -o %s/s3", train, d);
    out = NULL;
    rc = run_train(args, &out);
    CHECK(rc == 0 && out && strstr(out, "sample at step 2: ") && !strstr(out, "sample at step 3"),
          "./train %s: exit %d, expected a sample at step 2 alone: %s", args, rc, out ? out : "");
    free(out);
}

TEST(samples_that_cannot_hold_the_prompt_or_the_asked_tokens_say_so) {
    char train[700], val[700], tok_path[800], err[ERR_LEN];
    make_corpus(train, val, sizeof train);
    const char *d = test_tmpdir();
    /* a byte-level tokenizer of 257 tokens (no merges): a prompt's tokens are its bytes */
    const char *text = "hello world";
    TokenizerTrainOptions topt = {257, 1, 0};
    Tokenizer *tok = tokenizer_train(text, strlen(text), &topt, err);
    REQUIRE(tok, "%s", err);
    snprintf(tok_path, sizeof tok_path, "%s/tok.bin", d);
    REQUIRE(tokenizer_save(tok, tok_path, err) == 0, "%s", err);
    tokenizer_free(tok);
    /* a 40-byte prompt in a window of -t 16: samples start from its first 15 tokens and generate one */
    expect_run(0, "note: --prompt is 40 tokens, more than a sample's window of -t 16 holds: samples start from its first 15",
               "note: a sample's window holds -t 16 tokens, so samples generate 1 tokens, not -G 8",
               "--device cpu -e tiny -v 257 -b 4 -t 16 -x 2 -s 1 -G 8 --val-every 0 --tokenizer %s "
               "--prompt 0123456789012345678901234567890123456789 -i %s -o %s/s", tok_path, train, d);
    /* without a prompt, -G beyond the window is named alone */
    expect_run(0, "samples generate 15 tokens, not -G 64", NULL,
               "--device cpu -e tiny -v 257 -b 4 -t 16 -x 2 -s 1 --val-every 0 --tokenizer %s -i %s -o %s/t",
               tok_path, train, d);
    /* a resume encodes --prompt with its checkpoint's tokenizer */
    expect_run(0, "(the resumed checkpoint's)", "step     3/3",
               "--device cpu -e tiny -v 257 -b 4 -t 16 -x 3 -s 1 -G 4 --val-every 0 -y 1 --prompt hello -i %s -o %s/t",
               train, d);
    /* a prompt no sample of the run uses is named */
    expect_run(0, "note: --prompt is for samples during training, and -s 0 takes none in this run", NULL,
               "--device cpu -e tiny -v 257 -b 4 -t 16 -x 1 -s 0 --val-every 0 --tokenizer %s --prompt hi -i %s -o %s/u",
               tok_path, train, d);
    /* a resumed run without a tokenizer cannot encode one */
    expect_run(0, "step     1/1", NULL, TINY_RUN " -x 1 --val-every 0 -i %s -o %s/v", train, d);
    expect_run(1, "--prompt needs a tokenizer to encode it, and", "brings none: pass --tokenizer FILE",
               TINY_RUN " -x 2 -s 1 --val-every 0 -y 1 --prompt hi -i %s -o %s/v", train, d);
}

TEST(a_shard_token_no_vocabulary_flag_can_fix_gets_no_such_hint) {
    char path[800];
    const char *d = test_tmpdir();
    /* a shard whose header allows 2^32 - 1 tokens, holding token 2^31 + 5: -v cannot go that high */
    snprintf(path, sizeof path, "%s/wide.bin", d);
    uint32_t t[64];
    for (int i = 0; i < 64; i++) t[i] = i == 40 ? 2147483653u : (uint32_t)i;
    char err[ERR_LEN];
    REQUIRE(shard_write(path, t, 64, UINT32_MAX, 0, err) == 0, "%s", err);
    expect_run(1, "token 2147483653 at position 40", "(re-tokenize: the shard's vocabulary of 4294967295 is above the "
               "largest a model takes, -v 1073741824)", "--device cpu -e tiny -v 64 -b 1 -t 8 -x 1 -i %s -o %s/w",
               path, d);
    /* a shard whose token contradicts its own header is corrupt, whatever -v is */
    snprintf(path, sizeof path, "%s/bad.bin", d);
    for (int i = 0; i < 64; i++) t[i] = (uint32_t)i % 50;
    REQUIRE(shard_write(path, t, 64, 64, 0, err) == 0, "%s", err);
    FILE *f = fopen(path, "r+b");
    REQUIRE(f && fseek(f, SHARD_HEADER_BYTES + 2 * 10, SEEK_SET) == 0 && fputc(0xff, f) != EOF &&
                fputc(0xff, f) != EOF && fclose(f) == 0,
            "corrupting %s", path);
    expect_run(1, "token 65535 at position 10", "is beyond the shard's own vocabulary of 64 (the shard is corrupt: "
               "re-create it)", "--device cpu -e tiny -v 64 -b 1 -t 8 -x 1 -i %s -o %s/b", path, d);
}

TEST(a_damaged_default_corpus_cache_is_named_with_its_fix) {
    char cache[800], nobin[800], prefix[900], *out = NULL, args[1600];
    const char *d = test_tmpdir();
    snprintf(cache, sizeof cache, "%s/cache", d);
    snprintf(nobin, sizeof nobin, "%s/nobin", d);
    mkdir(nobin, 0755);
    /* without apt-get on PATH the default corpus is the synthetic one, prepared here in seconds */
    snprintf(prefix, sizeof prefix, "PATH=%s", nobin);
    snprintf(args, sizeof args, "--device cpu -e tiny -v 300 -b 2 -t 16 -x 1 -s 0 --val-every 0 --cache-dir %s -o %s/r",
             cache, d);
    int rc = run_train_under(prefix, args, &out);
    REQUIRE(rc == 0, "first run failed (%d): %s", rc, out);
    free(out);
    char cmd[2000];
    snprintf(cmd, sizeof cmd, "printf '\\377\\377' | dd of=$(ls -d %s/synthetic-v1-*-v300)/train.bin bs=1 seek=1000 "
             "conv=notrunc 2>/dev/null", cache);
    REQUIRE(system(cmd) == 0, "corrupting the cached shard");
    rc = run_train_under(prefix, args, &out);
    CHECK(rc == 1 && strstr(out, "the shard is corrupt") && strstr(out, "it belongs to the default corpus's cache: delete ") &&
              strstr(out, "-v300 and run again") && !strstr(out, "pass -v"),
          "exit %d: %s", rc, out);
    free(out);
}

/* A command line that is wrong is refused before anything touches the disk: no run directory, no
 * lock file. */
TEST(a_usage_error_leaves_no_run_directory_behind) {
    char train[700], val[700], dir[800];
    make_corpus(train, val, sizeof train);
    const char *d = test_tmpdir();
    struct stat sb;
    expect_run(2, "-j/--val-data needs -i/--train-data too", NULL, "--device cpu -j %s -o %s/nodisk_j", val, d);
    snprintf(dir, sizeof dir, "%s/nodisk_j", d);
    CHECK(stat(dir, &sb) != 0, "a usage error created %s", dir);
    expect_run(2, "--prompt needs a tokenizer", NULL, TINY_RUN " -x 1 --prompt hi -i %s -o %s/nodisk_p", train, d);
    snprintf(dir, sizeof dir, "%s/nodisk_p", d);
    CHECK(stat(dir, &sb) != 0, "a usage error created %s", dir);
}

/* A run that fails on its inputs leaves the disk as it found it: no run directory, no parent of
 * one, no lock file in a directory that was there before. */
TEST(a_runtime_error_before_training_leaves_no_run_directory_behind) {
    char train[700], val[700], tok_path[800], small[800], dir[900], err[ERR_LEN];
    make_corpus(train, val, sizeof train);
    const char *d = test_tmpdir();
    struct stat sb;
    /* a tokenizer of 257 tokens, more than -v 64 */
    TokenizerTrainOptions topt = {257, 1, 0};
    Tokenizer *tok = tokenizer_train("hello", 5, &topt, err);
    REQUIRE(tok, "%s", err);
    snprintf(tok_path, sizeof tok_path, "%s/tok257.bin", d);
    REQUIRE(tokenizer_save(tok, tok_path, err) == 0, "%s", err);
    tokenizer_free(tok);
    snprintf(small, sizeof small, "%s/small.bin", d);
    REQUIRE(write_pattern_shard(small, 50, 64, 4) == 0, "writing %s", small);
    expect_run(1, "/nonexistent", NULL, TINY_RUN " -x 1 -i /nonexistent/train.bin -o %s/gone1/run", d);
    expect_run(1, "/nonexistent", NULL, TINY_RUN " -x 1 -i %s -j /nonexistent/val.bin -o %s/gone2/run", train, d);
    expect_run(1, "/nonexistent", NULL, TINY_RUN " -x 1 -i %s --tokenizer /nonexistent/tok.bin -o %s/gone3/run",
               train, d);
    expect_run(1, "has 257 tokens but the model's vocabulary is 64", NULL,
               TINY_RUN " -x 1 -i %s --tokenizer %s -o %s/gone4/run", train, tok_path, d);
    expect_run(1, "too few for a batch", NULL, TINY_RUN " -x 1 -i %s -o %s/gone5/run", small, d);
    /* a validation shard shorter than a batch: named with its way out, and needless when validation is off */
    expect_run(1, "too few for a batch", "or pass --val-every 0", TINY_RUN " -x 1 -i %s -j %s -o %s/gone7/run",
               train, small, d);
    expect_run(0, "step     1/1", NULL, TINY_RUN " -x 1 --val-every 0 -i %s -j %s -o %s/short_val", train, small, d);
    expect_run(1, "/nonexistent", NULL, TINY_RUN " -x 1 -i %s --init-from /nonexistent -o %s/gone6/run", train, d);
    for (int i = 1; i <= 7; i++) {
        snprintf(dir, sizeof dir, "%s/gone%d", d, i);
        CHECK(stat(dir, &sb) != 0, "a failed run created %s", dir);
    }
    /* a directory that was there stays, with what it held and without a lock file */
    snprintf(dir, sizeof dir, "%s/kept", d);
    REQUIRE(mkdir(dir, 0755) == 0, "mkdir %s", dir);
    expect_run(1, "/nonexistent", NULL, TINY_RUN " -x 1 -i /nonexistent/train.bin -o %s", dir);
    CHECK(stat(dir, &sb) == 0, "a failed run removed %s, which it did not create", dir);
    snprintf(dir, sizeof dir, "%s/kept/.lock", d);
    CHECK(stat(dir, &sb) != 0, "a failed run left %s", dir);
    /* a resume that fails on its checkpoint leaves its copy as it was */
    expect_run(0, "step     1/1", NULL, TINY_RUN " -x 1 --val-every 0 -i %s -o %s/src", train, d);
    char cmd[2000];
    snprintf(cmd, sizeof cmd, "mkdir %s/copy && cp -r %s/src/step_00000001 %s/src/latest %s/copy/", d, d, d, d);
    REQUIRE(system(cmd) == 0, "%s", cmd);
    expect_run(1, "-v 64", NULL, "--device cpu -e tiny -v 65 -b 4 -t 32 -s 0 -x 2 -y 1 -i %s -o %s/copy", train, d);
    snprintf(dir, sizeof dir, "%s/copy/.lock", d);
    CHECK(stat(dir, &sb) != 0, "a failed resume left %s", dir);
}

TEST(a_bad_init_from_is_refused_before_any_corpus_work) {
    /* config.json agrees with the flags, model.safetensors is not one */
    char ck[800], path[900], cache[800], nobin[800], prefix[900], args[2400], *out = NULL;
    const char *d = test_tmpdir();
    snprintf(ck, sizeof ck, "%s/hf", d);
    REQUIRE(mkdir(ck, 0755) == 0, "mkdir %s", ck);
    snprintf(path, sizeof path, "%s/config.json", ck);
    FILE *f = fopen(path, "w");
    REQUIRE(f && fputs("{\"model_type\": \"gpt2\", \"n_layer\": 2, \"n_head\": 2, \"n_embd\": 128, "
                       "\"n_positions\": 1024, \"vocab_size\": 300}\n", f) >= 0 && fclose(f) == 0,
            "writing %s", path);
    snprintf(path, sizeof path, "%s/model.safetensors", ck);
    f = fopen(path, "w");
    REQUIRE(f && fputs("not a safetensors file", f) >= 0 && fclose(f) == 0, "writing %s", path);
    snprintf(cache, sizeof cache, "%s/cache", d);
    snprintf(nobin, sizeof nobin, "%s/nobin", d);
    mkdir(nobin, 0755);
    /* without apt-get on PATH the default corpus would be the synthetic one */
    snprintf(prefix, sizeof prefix, "PATH=%s", nobin);
    snprintf(args, sizeof args, "--device cpu -e tiny -v 300 -b 2 -t 16 -x 1 -s 0 --val-every 0 --init-from %s "
             "--cache-dir %s -o %s/run", ck, cache, d);
    int rc = run_train_under(prefix, args, &out);
    CHECK(rc == 1 && strstr(out, "error: ") && strstr(out, "model.safetensors") && count_lines(out) == 1 &&
              strstr(out, "the file is damaged or incomplete: copy, download or export it again"),
          "exit %d: %s", rc, out);
    free(out);
    struct stat sb;
    CHECK(stat(cache, &sb) != 0, "the default corpus was prepared for a run that could not start");
    snprintf(path, sizeof path, "%s/run", d);
    CHECK(stat(path, &sb) != 0, "the refused run created %s", path);
}

TEST(an_error_quoting_a_control_character_from_a_file_stays_one_line) {
    /* model_type holds a newline, an escape sequence and a C1 control (valid JSON escapes); the message
     * quotes it */
    char ck[800], path[900], args[2400], *out = NULL;
    const char *d = test_tmpdir();
    snprintf(ck, sizeof ck, "%s/hf_ctl", d);
    REQUIRE(mkdir(ck, 0755) == 0, "mkdir %s", ck);
    snprintf(path, sizeof path, "%s/config.json", ck);
    FILE *f = fopen(path, "w");
    REQUIRE(f && fputs("{\"model_type\": \"gpt\\u001b[31m\\nneo\\u009b\", \"hidden_size\": 64}\n", f) >= 0 &&
                fclose(f) == 0,
            "writing %s", path);
    snprintf(args, sizeof args, "--device cpu -e tiny -b 2 -t 16 -x 1 -s 0 --val-every 0 --init-from %s -o %s/run_ctl", ck,
             d);
    int rc = run_train(args, &out);
    CHECK(rc == 1 && out && strncmp(out, "error: ", 7) == 0 && count_lines(out) == 1 &&
              strstr(out, "model_type gpt\\x1b[31m\\nneo\\u009b is not supported") && !strchr(out, 0x1b),
          "exit %d: %s", rc, out);
    free(out);
}

/* A tokenizer smaller than the shard's recorded vocabulary did not make the shard (files of two
 * prepares put side by side give such a pair): refused before training, naming both sizes. */
TEST(a_tokenizer_smaller_than_the_shards_vocabulary_is_refused) {
    char shard[800], args[2400], *out = NULL;
    snprintf(shard, sizeof shard, "%s/v900.bin", test_tmpdir());
    /* a shard of a 900-token vocabulary (the model's 1024 hold its ids), the tokenizer of 700 */
    REQUIRE(write_pattern_shard(shard, 4000, 900, 1) == 0, "shard");
    snprintf(args, sizeof args, "--device cpu -e tiny -v 1024 -b 2 -t 16 -x 1 -s 0 --val-every 0 -i %s "
             "--tokenizer tests/fixtures/hf_gpt2_style.json -o %s/run_small_tok", shard, test_tmpdir());
    int rc = run_train(args, &out);
    CHECK(rc == 1 && out && count_lines(out) >= 1 && strstr(out, "error: tokenizer") &&
              strstr(out, "has 700 tokens but") && strstr(out, "vocabulary of 900"),
          "exit %d: %s", rc, out);
    free(out);
}

/* A -v above the tokenizer's size (no weights fixing it) is named with the ids that have no text;
 * -v equal to it says nothing of the kind. */
TEST(a_vocabulary_larger_than_the_tokenizer_is_named_with_the_ids_that_have_no_text) {
    char shard[800], args[2400], *out = NULL;
    snprintf(shard, sizeof shard, "%s/v700.bin", test_tmpdir());
    REQUIRE(write_pattern_shard(shard, 4000, 700, 1) == 0, "shard");
    const int vocab[2] = {1024, 700};
    for (int k = 0; k < 2; k++) {
        snprintf(args, sizeof args, "--device cpu -e tiny -v %d -b 2 -t 16 -x 1 --warmup 0 -s 0 --val-every 0 -i %s "
                 "--tokenizer tests/fixtures/hf_gpt2_style.json -o %s/run_v%d", vocab[k], shard, test_tmpdir(), vocab[k]);
        const int rc = run_train(args, &out);
        const char *note = out ? strstr(out, "note: the model's vocabulary of 1024 is larger than the 700 tokens of "
                                             "tests/fixtures/hf_gpt2_style.json: ids 700 to 1023 have no text")
                               : NULL;
        CHECK(rc == 0 && (k == 0 ? note && strstr(note, "pass -v 700") : !strstr(out, "have no text")), "-v %d: %s",
              vocab[k], out ? out : "");
        free(out);
    }
}

#define GPT2_STYLE_TOKENIZER "tests/fixtures/hf_gpt2_style.json"
#define RUN700 "--device cpu -e tiny -v 700 -b 2 -t 16 -x 1 --warmup 0 -s 0 --val-every 0"

/* Into the test folder: `other`, the GPT-2-style fixture tokenizer with two ids swapped (the same size),
 * and two pattern shards of 700 ids, `by_a` made by the fixture and `by_b` by the other, at paths
 * named after tag (each path buffer PATH_BUF bytes). 0, or -1. */
#define PATH_BUF 800
static int two_tokenizers_and_their_shards(const char *tag, char *other, char *by_a, char *by_b) {
    char err[ERR_LEN];
    const char *d = test_tmpdir();
    snprintf(other, PATH_BUF, "%s/%s_swapped_ids.json", d, tag);
    snprintf(by_a, PATH_BUF, "%s/%s_made_by_a.bin", d, tag);
    snprintf(by_b, PATH_BUF, "%s/%s_made_by_b.bin", d, tag);
    if (write_gpt2_style_tokenizer_with_two_ids_swapped(other) != 0) return -1;
    Tokenizer *a = tokenizer_load(GPT2_STYLE_TOKENIZER, err), *b = a ? tokenizer_load(other, err) : NULL;
    int rc = a && b && write_pattern_shard_made_by(by_a, 4000, 700, 1, tokenizer_fingerprint(a)) == 0 &&
                     write_pattern_shard_made_by(by_b, 2000, 700, 2, tokenizer_fingerprint(b)) == 0
                 ? 0
                 : -1;
    if (!a || !b) fprintf(stderr, "%s\n", err);
    tokenizer_free(a);
    tokenizer_free(b);
    return rc;
}

/* A tokenizer.json beside a checkpoint's weights with more tokens than their vocabulary is not
 * theirs: training names it as such (no -v can help: the weights fix the vocabulary), and eval
 * refuses it rather than advise tokenizing with it. */
TEST(a_tokenizer_larger_than_the_weights_vocabulary_beside_them_is_named_as_not_theirs) {
    char shard[PATH_BUF], ck[PATH_BUF], args[2400], *out = NULL;
    const char *d = test_tmpdir();
    snprintf(shard, sizeof shard, "%s/v300.bin", d);
    REQUIRE(write_pattern_shard_made_by(shard, 4000, 300, 1, 12345) == 0, "shard");
    expect_run(0, "step     1/1", NULL, "--device cpu -e tiny -v 300 -b 2 -t 16 -x 1 --warmup 0 -s 0 --val-every 0 "
               "-i %s -o %s/run300", shard, d);
    snprintf(ck, sizeof ck, "%s/run300/step_00000001", d);
    snprintf(args, sizeof args, "cp %s %s/tokenizer.json", GPT2_STYLE_TOKENIZER, ck);
    REQUIRE(system(args) == 0, "%s", args);
    snprintf(args, sizeof args, "--device cpu -b 2 -t 16 -x 1 --warmup 0 -s 0 --val-every 0 -i %s --init-from %s "
             "-o %s/from300", shard, ck, d);
    int rc = run_train(args, &out);
    CHECK(rc == 0 && out && strstr(out, "has 700 tokens, more than the vocabulary of 300 of the model's weights: it "
                                        "is not their tokenizer") && !strstr(out, "pass -v"),
          "training: exit %d: %s", rc, out ? out : "");
    free(out);
    snprintf(args, sizeof args, "eval --device cpu --init-from %s -i %s -t 16", ck, shard);
    rc = run_train(args, &out);
    CHECK(rc == 1 && out && count_lines(out) == 1 && strstr(out, "more than the vocabulary of 300 of the weights "
                                                               "beside it: it is not their tokenizer"),
          "eval: exit %d: %s", rc, out ? out : "");
    free(out);
}

/* The default corpus's validation shard is 1 % of its text: a micro-batch larger than it turns
 * validation off with a note (deleting the cache would make the same shard), and the run goes on to
 * its next check, here the huge model's memory. */
TEST(a_micro_batch_larger_than_the_default_corpus_validation_shard_turns_validation_off) {
    const char *d = test_tmpdir();
    expect_run_synthetic_corpus(1, "validation: off (shard ", "the CPU backend with its checkpoint buffers needs about",
                                "--device cpu -e tiny --layers 128 --dim 4096 --heads 32 -v 700 -b 4096 -t 64 -x 1 "
                                "-s 0 --val-every 1 --cache-dir %s/cache_val -o %s/val_off", d, d);
}

/* A shard records the tokenizer that made it. Another tokenizer of the same size, whose ids stand
 * for other text, is refused for the training shard and a validation shard made by another is
 * refused beside it; the tokenizer that made the shard trains. */
TEST(a_shard_made_by_another_tokenizer_of_the_same_size_is_refused) {
    char other[PATH_BUF], train[PATH_BUF], val_b[PATH_BUF], args[2400], *out = NULL;
    const char *d = test_tmpdir(), *fixture = GPT2_STYLE_TOKENIZER;
    REQUIRE(two_tokenizers_and_their_shards("cli", other, train, val_b) == 0, "tokenizers and shards");
    snprintf(args, sizeof args, RUN700 " -i %s --tokenizer %s -o %s/run_other_tok", train, other, d);
    int rc = run_train(args, &out);
    CHECK(rc == 1 && out && strncmp(out, "error: ", 7) == 0 && count_lines(out) == 1 &&
              strstr(out, "cli_made_by_a.bin was made by another tokenizer than") && strstr(out, "cli_swapped_ids.json"),
          "another tokenizer: exit %d: %s", rc, out);
    free(out);
    snprintf(args, sizeof args, RUN700 " --val-every 1 -i %s -j %s --tokenizer %s -o %s/run_val_b", train, val_b,
             fixture, d);
    rc = run_train(args, &out);
    CHECK(rc == 1 && out && strstr(out, "error: ") && strstr(out, "cli_made_by_b.bin was made by another tokenizer than"),
          "a validation shard of another tokenizer: exit %d: %s", rc, out);
    free(out);
    /* without a tokenizer, the pair itself */
    snprintf(args, sizeof args, RUN700 " --val-every 1 -i %s -j %s -o %s/run_val_b_alone", train, val_b, d);
    rc = run_train(args, &out);
    CHECK(rc == 1 && out && strstr(out, "error: ") && strstr(out, "were made by different tokenizers"),
          "a validation shard of another tokenizer, no --tokenizer: exit %d: %s", rc, out);
    free(out);
    expect_run(0, "step     1/1", NULL, RUN700 " -i %s --tokenizer %s -o %s/run_same_tok", train, fixture, d);
}

/* A resume without --tokenizer keeps the one its checkpoint carries: the checkpoints it writes carry
 * it on (they used to lose it, and with it the text, once the old ones were pruned). */
TEST(a_resume_keeps_the_tokenizer_its_checkpoint_carries) {
    char other[PATH_BUF], train[PATH_BUF], train_b[PATH_BUF], args[2400], path[PATH_BUF + 64], *out = NULL;
    const char *d = test_tmpdir(), *fixture = GPT2_STYLE_TOKENIZER;
    REQUIRE(two_tokenizers_and_their_shards("resume", other, train, train_b) == 0, "tokenizers and shards");
    expect_run(0, "step     1/1", NULL, RUN700 " -i %s --tokenizer %s -o %s/res_tok", train, fixture, d);
    snprintf(args, sizeof args, RUN700 " -i %s -x 2 -y 1 -o %s/res_tok", train, d);
    int rc = run_train(args, &out);
    CHECK(rc == 0 && out && strstr(out, "step_00000001/tokenizer.json (the resumed checkpoint's)") &&
              !strstr(out, "no --tokenizer"),
          "the resumed checkpoint's tokenizer: exit %d: %s", rc, out);
    free(out);
    snprintf(path, sizeof path, "%s/res_tok/step_00000002/tokenizer.json", d);
    CHECK(access(path, F_OK) == 0, "the resumed run's checkpoint carries no tokenizer.json (%s)", path);
    /* a run without one resumes without one, as before */
    expect_run(0, "step     1/1", NULL, RUN700 " -i %s -o %s/res_none", train, d);
    expect_run(0, "no --tokenizer", NULL, RUN700 " -i %s -x 2 -y 1 -o %s/res_none", train, d);
}

/* --init-from takes the tokenizer.json beside the weights (our checkpoints carry one) unless
 * --tokenizer names another: so a shard its tokenizer did not make is refused there too. */
TEST(init_from_takes_the_tokenizer_beside_the_weights_and_refuses_a_shard_it_did_not_make) {
    char other[PATH_BUF], train[PATH_BUF], train_b[PATH_BUF], ck[900], args[2400], *out = NULL;
    const char *d = test_tmpdir(), *fixture = GPT2_STYLE_TOKENIZER;
    REQUIRE(two_tokenizers_and_their_shards("init", other, train, train_b) == 0, "tokenizers and shards");
    expect_run(0, "step     1/1", NULL, RUN700 " -i %s --tokenizer %s -o %s/with_tok", train, fixture, d);
    snprintf(ck, sizeof ck, "%s/with_tok/step_00000001", d);
    snprintf(args, sizeof args, RUN700 " --init-from %s -i %s -o %s/from_ck", ck, train, d);
    int rc = run_train(args, &out);
    CHECK(rc == 0 && out && strstr(out, "step_00000001/tokenizer.json (beside --init-from's weights)") &&
              !strstr(out, "no --tokenizer"),
          "the tokenizer beside the weights: exit %d: %s", rc, out);
    free(out);
    snprintf(args, sizeof args, RUN700 " --init-from %s -i %s -o %s/from_ck_b", ck, train_b, d);
    rc = run_train(args, &out);
    CHECK(rc == 1 && out && strstr(out, "error: ") && strstr(out, "init_made_by_b.bin was made by another tokenizer than") &&
              strstr(out, "step_00000001/tokenizer.json"),
          "a shard of another tokenizer: exit %d: %s", rc, out);
    free(out);
    /* a shard of another tokenizer whose ids pass the vocabulary: the tokenizer is named, not -v, which
     * --init-from's weights would refuse next */
    char wide[900];
    snprintf(wide, sizeof wide, "%s/init_wider.bin", d);
    REQUIRE(write_pattern_shard_made_by(wide, 20000, 1000, 3, 0x5eed) == 0, "%s", wide);
    snprintf(args, sizeof args, RUN700 " --init-from %s -i %s -o %s/from_ck_wide", ck, wide, d);
    rc = run_train(args, &out);
    CHECK(rc == 1 && out && strstr(out, "init_wider.bin was made by another tokenizer than") && !strstr(out, "-v 1000"),
          "a shard of a larger tokenizer: exit %d: %s", rc, out);
    free(out);
    /* without -i, the default corpus: our own tokenizer made it, not the checkpoint's */
    char cache[900];
    snprintf(cache, sizeof cache, "%s/cache_fp", d);
    expect_run_synthetic_corpus(1, "error: the default corpus is tokenized by its own tokenizer, not ",
                                "step_00000001/tokenizer.json: tokenize your text with `./train prepare --tokenizer",
                                RUN700 " --init-from %s --cache-dir %s -o %s/from_ck_default", ck, cache, d);
    /* one of our tokenizers, but not the default corpus's: refused once the corpus is prepared */
    char ours[900];
    snprintf(ours, sizeof ours, "%s/ours_other", d);
    expect_run(0, "train.bin", NULL, "prepare -v 700 -o %s README.md", ours);
    expect_run_synthetic_corpus(1, "error: the default corpus is tokenized by its own tokenizer, not ",
                                "ours_other/tokenizer.bin", RUN700 " --tokenizer %s/tokenizer.bin --cache-dir %s -o %s/ours_default",
                                ours, cache, d);
    /* a checkpoint whose tokenizer.json cannot be read: named and left out on shards, refused on the
     * default corpus (nothing says which tokenizer the weights learnt) */
    char bad[900];
    snprintf(bad, sizeof bad, "%s/ck_bad_tok", d);
    snprintf(args, sizeof args, "cp -r %s %s && echo '{\"model\": 1}' > %s/tokenizer.json", ck, bad, bad);
    REQUIRE(system(args) == 0, "%s", args);
    expect_run(0, "step     1/1", "note: not using", RUN700 " --init-from %s -i %s -o %s/bad_tok_shard", bad, train, d);
    expect_run_synthetic_corpus(1, "error: --init-from ", "its tokenizer.json cannot be used",
                                RUN700 " --init-from %s --cache-dir %s -o %s/bad_tok_default", bad, cache, d);
    /* no tokenizer.json at all: nothing says which tokenizer the weights learnt */
    char none[900];
    snprintf(none, sizeof none, "%s/ck_no_tok", d);
    snprintf(args, sizeof args, "cp -r %s %s && rm %s/tokenizer.json", ck, none, none);
    REQUIRE(system(args) == 0, "%s", args);
    expect_run_synthetic_corpus(1, "error: --init-from ", "has no tokenizer.json, and the default corpus",
                                RUN700 " --init-from %s --cache-dir %s -o %s/no_tok_default", none, cache, d);
    /* --tokenizer wins over the one beside the weights, which is named */
    snprintf(args, sizeof args, RUN700 " --init-from %s -i %s --tokenizer %s -o %s/from_ck_given", ck, train_b, other, d);
    rc = run_train(args, &out);
    CHECK(rc == 0 && out && strstr(out, "init_swapped_ids.json is not ") &&
              strstr(out, "the tokenizer the weights were trained with"),
          "--tokenizer over the checkpoint's: exit %d: %s", rc, out);
    free(out);
    /* eval refuses the shard too: its loss would be of other text */
    snprintf(args, sizeof args, "eval --init-from %s -i %s -t 16 --device cpu", ck, train_b);
    rc = run_train(args, &out);
    CHECK(rc == 1 && out && strncmp(out, "error: ", 7) == 0 && count_lines(out) == 1 &&
              strstr(out, "init_made_by_b.bin was made by another tokenizer than"),
          "eval of a shard of another tokenizer: exit %d: %s", rc, out);
    free(out);
    snprintf(args, sizeof args, "eval --init-from %s -i %s -t 16 --device cpu", ck, train);
    rc = run_train(args, &out);
    CHECK(rc == 0 && out && strstr(out, "loss "), "eval of its own tokenizer's shard: exit %d: %s", rc, out);
    free(out);
}

/* The schedule note a resume prints, as the trainer formats it. */
static void schedule_note(char *buf, size_t n, const char *changes, int step, float before, float after) {
    snprintf(buf, n,
             "schedule: changed since the checkpoint: %s; the learning rate of step %d goes from %.3e to %.3e\n",
             changes, step, before, after);
}

TEST(a_schedule_too_short_to_decay_says_where_its_last_step_runs) {
    char train[700], val[700], args[2400], *out = NULL;
    make_corpus(train, val, sizeof train);
    const char *d = test_tmpdir();
    /* TINY_RUN: -l 3e-3 --warmup 5 --lr-final 3e-4; the last of 2 steps runs at 2/5 of -l */
    expect_run(0, "schedule: --warmup 5 is longer than -x 2: the learning rate climbs to 0.0012 of -l 0.003", "lr 1.200e-03",
               TINY_RUN " -x 2 --val-every 0 -i %s -o %s/a", train, d);
    expect_run(0, "schedule: --warmup 2 leaves one step of -x 3 after it: the last step runs at -l 0.003, not --lr-final 0.0003",
               "step     3/3 | loss", TINY_RUN " -x 3 --warmup 2 --val-every 0 -i %s -o %s/b", train, d);
    snprintf(args, sizeof args, TINY_RUN " -x 3 --warmup 1 --val-every 0 -i %s -o %s/c", train, d);
    REQUIRE(run_train(args, &out) == 0, "%s", out);
    CHECK(!strstr(out, "schedule:") && strstr(out, "lr 3.000e-04"), "a schedule that decays: %s", out);
    free(out);
}

/* The learning rate on the step line of step `step` (1-based) in a run's output; -1 when absent. */
static double step_lr(const char *out, int step, int steps) {
    char head[64];
    snprintf(head, sizeof head, "step %5d/%d | loss", step, steps);
    const char *line = strstr(out, head), *lr = line ? strstr(line, "| lr ") : NULL;
    double v;
    return lr && sscanf(lr, "| lr %lf", &v) == 1 ? v : -1.0;
}

/* Each shape's rates reach the optimizer: the step lines print them, as the schedule gives them. */
TEST(each_schedule_shape_sets_the_step_lines_learning_rate) {
    char train[700], val[700], args[2400], *out = NULL, *wsd_out = NULL;
    make_corpus(train, val, sizeof train);
    static const struct {
        const char *flags;
        LrSchedule s;
    } runs[] = {
        {"--lr-schedule wsd --decay-steps 3", {.shape = LR_WSD, .decay_steps = 3}},
        {"--lr-schedule wsd", {.shape = LR_WSD}}, /* a fifth of 10: the last 2 steps */
        {"--lr-schedule linear", {.shape = LR_LINEAR}},
        {"", {.shape = LR_COSINE}},
    };
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        /* TINY_RUN: -l 3e-3 --warmup 5 --lr-final 3e-4 */
        snprintf(args, sizeof args, TINY_RUN " -x 10 --warmup 2 %s --val-every 0 -i %s -o %s/shape%zu", runs[i].flags,
                 train, test_tmpdir(), i);
        REQUIRE(run_train(args, &out) == 0, "%s", out);
        LrSchedule s = runs[i].s;
        s.total_steps = 10, s.warmup = 2, s.lr = 3e-3f, s.lr_final = 3e-4f;
        for (int step = 0; step < 10; step++) {
            char want[16], got[16];
            snprintf(want, sizeof want, "%.3e", lr_at_step(&s, step));
            snprintf(got, sizeof got, "%.3e", step_lr(out, step + 1, 10));
            if (strcmp(want, got)) {
                CHECK(0, "'%s': step %d runs at %s, the schedule gives %s: %s", runs[i].flags, step + 1, got, want, out);
                break;
            }
        }
        if (i == 0) wsd_out = out; /* kept for the check below */
        else free(out);
        out = NULL;
    }
    /* the wsd run (--decay-steps 3) holds the peak until its decay and ends at --lr-final */
    CHECK(step_lr(wsd_out, 7, 10) == 3e-3 && step_lr(wsd_out, 8, 10) < 3e-3 && step_lr(wsd_out, 10, 10) == 3e-4,
          "wsd: step 7 %g, step 8 %g, step 10 %g", step_lr(wsd_out, 7, 10), step_lr(wsd_out, 8, 10),
          step_lr(wsd_out, 10, 10));
    free(wsd_out);
    /* a warmup that fills the run leaves wsd no step to decay in; a default decay of a fifth of -x
     * longer than the steps after the warmup is named as --decay-steps is */
    expect_run(0, "schedule: --warmup 5 leaves no step of -x 5 after it: the last step runs at -l 0.003, not --lr-final "
               "0.0003 (the decay needs a step)", NULL,
               TINY_RUN " -x 5 --lr-schedule wsd --val-every 0 -i %s -o %s/filled", train, test_tmpdir());
    expect_run(0, "schedule: a fifth of -x (2 steps, wsd's default decay) is longer than the 1 step after the warmup: the "
               "decay starts right after it", "lr 3.000e-04",
               TINY_RUN " -x 10 --warmup 9 --lr-schedule wsd --val-every 0 -i %s -o %s/fifth", train, test_tmpdir());
    /* a decay longer than the steps after the warmup is named */
    expect_run(0, "schedule: --decay-steps 20 is longer than the 8 steps after the warmup: the decay starts right after it",
               NULL, TINY_RUN " -x 10 --warmup 2 --lr-schedule wsd --decay-steps 20 --val-every 0 -i %s -o %s/long", train,
               test_tmpdir());
}

/* The step lines from step `from` (1-based) on, without the total and after the norm (step, loss,
 * lse, lr); other lines between them are passed over. NULL when step `from` has none. */
static char *step_lines_from(const char *out, int from) {
    char head[32];
    snprintf(head, sizeof head, "step %5d/", from);
    const char *p = strstr(out, head);
    if (!p) return NULL;
    char *lines = calloc(strlen(p) + 1, 1);
    size_t len = 0;
    for (; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
        const char *end = strchr(p, '\n'), *norm = strstr(p, " | norm"), *slash = strchr(p, '/'), *bar = strchr(p, '|');
        if (strncmp(p, "step ", 5) || !norm || !bar || (end && norm > end)) continue;
        len += (size_t)sprintf(lines + len, "%.*s%.*s\n", (int)(slash - p), p, (int)(norm - bar), bar);
    }
    return lines;
}

/* warmup-stable-decay's promise: a run stopped in its stable part and resumed with a larger -x
 * trains as a run of that length from the start, step for step. */
TEST(a_wsd_run_resumed_in_its_stable_part_with_more_steps_is_the_longer_run) {
    char train[700], val[700], args[2400], *longer = NULL, *resumed = NULL;
    make_corpus(train, val, sizeof train);
    const char *d = test_tmpdir();
    const char *wsd = TINY_RUN " --warmup 2 --lr-schedule wsd --decay-steps 3 --val-every 0";
    expect_run(0, "step     8/8", NULL, "%s -x 8 -n 4 -i %s -o %s/short", wsd, train, d);
    snprintf(args, sizeof args, "echo step_00000004 > %s/short/latest", d);
    REQUIRE(system(args) == 0, "rolling latest back to step 4");
    snprintf(args, sizeof args, "%s -x 14 -n 4 -y 1 -i %s -o %s/short", wsd, train, d);
    REQUIRE(run_train(args, &resumed) == 0, "%s", resumed);
    snprintf(args, sizeof args, "%s -x 14 -i %s -o %s/long", wsd, train, d);
    REQUIRE(run_train(args, &longer) == 0, "%s", longer);
    char *a = step_lines_from(resumed, 5), *b = step_lines_from(longer, 5);
    CHECK(a && b && !strcmp(a, b) && strstr(b, "step    14") && strstr(resumed, "-x/--steps 8 -> 14"),
          "steps 5 to 14 resumed:\n%s\nfrom the start:\n%s", a ? a : "", b ? b : "");
    free(a);
    free(b);
    free(resumed);
    free(longer);
}

TEST(a_resume_with_another_schedule_says_what_changed) {
    char train[700], val[700], want[400];
    make_corpus(train, val, sizeof train);
    const char *d = test_tmpdir();
    /* TINY_RUN: -l 3e-3 --warmup 5 --lr-final 3e-4 */
    expect_run(0, "step     4/4", NULL, TINY_RUN " -x 4 -n 2 --val-every 0 -i %s -o %s/s", train, d);
    /* the same schedule from step 2: nothing to say */
    char args[2400], *out = NULL;
    snprintf(args, sizeof args, "echo step_00000002 > %s/s/latest", d);
    REQUIRE(system(args) == 0, "rolling latest back");
    snprintf(args, sizeof args, TINY_RUN " -x 4 -n 2 --val-every 0 -y 1 -i %s -o %s/s", train, d);
    REQUIRE(run_train(args, &out) == 0, "%s", out);
    CHECK(!strstr(out, "since the checkpoint"), "an unchanged schedule was named: %s", out);
    free(out);
    schedule_note(want, sizeof want, "-x/--steps 4 -> 8, -l/--lr 0.003 -> 0.01, --warmup 5 -> 2", 5,
                  cosine_lr(4, 4, 5, 3e-3f, 3e-4f), cosine_lr(4, 8, 2, 1e-2f, 3e-4f));
    expect_run(0, want, "step     8/8", TINY_RUN " -x 8 -l 1e-2 --warmup 2 --val-every 0 -y 1 -i %s -o %s/s", train,
               d);
    /* the final learning rate too */
    schedule_note(want, sizeof want, "-x/--steps 8 -> 9, --lr-final 0.0003 -> 0.001", 9,
                  cosine_lr(8, 8, 2, 1e-2f, 3e-4f), cosine_lr(8, 9, 2, 1e-2f, 1e-3f));
    expect_run(0, want, NULL, TINY_RUN " -x 9 -l 1e-2 --warmup 2 --lr-final 1e-3 --val-every 0 -y 1 -i %s -o %s/s",
               train, d);
    /* the shape and the decay's length: a cosine run continued as warmup-stable-decay */
    const LrSchedule wsd = {.shape = LR_WSD, .total_steps = 12, .warmup = 2, .decay_steps = 3, .lr = 1e-2f,
                            .lr_final = 1e-3f};
    schedule_note(want, sizeof want, "-x/--steps 9 -> 12, --lr-schedule cosine -> wsd, --decay-steps 0 -> 3", 10,
                  cosine_lr(9, 9, 2, 1e-2f, 1e-3f), lr_at_step(&wsd, 9));
    expect_run(0, want, "step    12/12",
               TINY_RUN " -x 12 -l 1e-2 --warmup 2 --lr-final 1e-3 --lr-schedule wsd --decay-steps 3 --val-every 0 -y 1 "
                        "-i %s -o %s/s", train, d);
    /* a longer wsd run moves its decay, which the note says */
    const LrSchedule wsd15 = {.shape = LR_WSD, .total_steps = 15, .warmup = 2, .decay_steps = 3, .lr = 1e-2f,
                              .lr_final = 1e-3f};
    schedule_note(want, sizeof want, "-x/--steps 12 -> 15, wsd's decay: steps 10-12 -> 13-15", 13, lr_at_step(&wsd, 12),
                  lr_at_step(&wsd15, 12));
    expect_run(0, want, "step    15/15",
               TINY_RUN " -x 15 -l 1e-2 --warmup 2 --lr-final 1e-3 --lr-schedule wsd --decay-steps 3 --val-every 0 -y 1 "
                        "-i %s -o %s/s", train, d);
}

TEST(a_resume_with_other_optimizer_or_objective_settings_says_which_changed) {
    char train[700], val[700];
    make_corpus(train, val, sizeof train);
    const char *d = test_tmpdir();
    expect_run(0, "step     4/4", NULL, TINY_RUN " -x 4 -n 2 --val-every 0 -i %s -o %s/o", train, d);
    char args[2400], *out = NULL;
    snprintf(args, sizeof args, "echo step_00000002 > %s/o/latest", d);
    REQUIRE(system(args) == 0, "rolling latest back");
    snprintf(args, sizeof args, TINY_RUN " -x 4 -n 2 --val-every 0 -y 1 -i %s -o %s/o", train, d);
    REQUIRE(run_train(args, &out) == 0, "%s", out);
    CHECK(!strstr(out, "settings:"), "unchanged settings were named: %s", out);
    free(out);
    expect_run(0, "settings: changed since the checkpoint: --weight-decay 0.1 -> 0.02, --grad-clip 1 -> 0.5, "
               "--optimizer-state fp32 -> bf16, --z-loss 0 -> 0.0001, --label-smoothing 0 -> 0.1; they apply from "
               "this step on\n", "step     6/6",
               TINY_RUN " -x 6 -n 2 --val-every 0 -y 1 --weight-decay 0.02 --grad-clip 0.5 --optimizer-state bf16 "
               "--z-loss 1e-4 --label-smoothing 0.1 -i %s -o %s/o", train, d);
    /* the checkpoint of step 6 records the new values: going on with them says nothing */
    snprintf(args, sizeof args, TINY_RUN " -x 7 --val-every 0 -y 1 --weight-decay 0.02 --grad-clip 0.5 "
             "--optimizer-state bf16 --z-loss 1e-4 --label-smoothing 0.1 -i %s -o %s/o", train, d);
    REQUIRE(run_train(args, &out) == 0, "%s", out);
    CHECK(!strstr(out, "settings:") && strstr(out, "step     7/7"), "the recorded settings were named: %s", out);
    free(out);
    /* log.jsonl keeps each resume of the timeline, with what it changed */
    snprintf(args, sizeof args, "%s/o/log.jsonl", d);
    char *log = read_text(args);
    const char *resumes[] = {
        "{\"type\":\"resume\",\"step\":2,\"ranks\":1,\"ranks_before\":1,\"changed\":\"\"}\n",
        "{\"type\":\"resume\",\"step\":4,\"ranks\":1,\"ranks_before\":1,\"changed\":\"-x/--steps 4 -> 6, "
        "--weight-decay 0.1 -> 0.02, --grad-clip 1 -> 0.5, --optimizer-state fp32 -> bf16, --z-loss 0 -> 0.0001, "
        "--label-smoothing 0 -> 0.1\"}\n",
        "{\"type\":\"resume\",\"step\":6,\"ranks\":1,\"ranks_before\":1,\"changed\":\"-x/--steps 6 -> 7\"}\n",
    };
    const char *at = log;
    for (size_t i = 0; i < sizeof resumes / sizeof resumes[0] && at; i++)
        if ((at = strstr(at, resumes[i]))) at += strlen(resumes[i]);
    CHECK(at && !strstr(at, "\"resume\"") && strstr(log, "\"step\":7,"), "the resumes in log.jsonl:\n%s",
          log ? log : "(none)");
    free(log);
}

TEST(a_resume_validating_on_another_shard_says_so_and_logs_it) {
    char train[700], val[700], other[800];
    make_corpus(train, val, sizeof train);
    const char *d = test_tmpdir();
    snprintf(other, sizeof other, "%s/other_val.bin", d);
    REQUIRE(write_pattern_shard(other, 3000, 64, 3) == 0, "%s", other);
    expect_run(0, "step     2/2", NULL, TINY_RUN " -x 2 --val-every 2 --val-batches 2 -i %s -j %s -o %s/v", train, val,
               d);
    char args[2400], *out = NULL;
    snprintf(args, sizeof args, TINY_RUN " -x 3 --val-every 2 --val-batches 2 -y 1 -i %s -j %s -o %s/v", train, val, d);
    REQUIRE(run_train(args, &out) == 0, "%s", out);
    CHECK(!strstr(out, "validation: ") || !strstr(out, "is not the shard"), "the same shard was named: %s", out);
    free(out);
    /* a resume without validation keeps the checkpoint's shard for the next one to compare */
    expect_run(0, "step     4/4", NULL, TINY_RUN " -x 4 --val-every 0 -y 1 -i %s -o %s/v", train, d);
    char want[1200];
    snprintf(want, sizeof want, "validation: %s (3000 tokens) is not the data the checkpoint's run validated on (4000 "
             "tokens): the validation losses from step 4 on are on other data than those before\n", other);
    expect_run(0, want, "step     5/5", TINY_RUN " -x 5 --val-every 2 --val-batches 2 -y 1 -i %s -j %s -o %s/v", train,
               other, d);
    snprintf(args, sizeof args, "%s/v/log.jsonl", d);
    char *log = read_text(args);
    CHECK(log && strstr(log, "{\"type\":\"resume\",\"step\":4,\"ranks\":1,\"ranks_before\":1,\"changed\":\"-x/--steps 4 "
                             "-> 5, -j/--val-data: another shard\"}\n"),
          "log.jsonl: %s", log ? log : "(none)");
    free(log);
}

/* Whether <d>/straight and <d>/stopped hold the same weights, byte for byte, at `step`. */
static int same_weights_at(const char *d, int step) {
    char a[900], b[900];
    snprintf(a, sizeof a, "%s/straight/step_%08d/model.safetensors", d, step);
    snprintf(b, sizeof b, "%s/stopped/step_%08d/model.safetensors", d, step);
    return same_bytes(a, b);
}

/* Starts ./train with args, its output into log; once `needle` is in the log, sends sig and waits
 * for the end. The output (to free), with *seen, *ended and the wait status *st. */
static char *signal_when_logged(const char *args, const char *log, const char *needle, int sig, int *seen, int *ended,
                                int *st) {
    *seen = *ended = *st = 0;
    const int pid = spawn_train(args, log);
    if (pid <= 0) return NULL;
    *seen = wait_for_log(log, needle, 1, 60);
    kill(pid, sig);
    *ended = wait_train_status(pid, 600, st);
    return read_text(log);
}

/* Ctrl-C (or a scheduler's SIGTERM) ends training at the end of a step with a checkpoint of it, then
 * the process by the signal; the same command with -y 1 then ends where the uninterrupted run does,
 * bit for bit. */
TEST(sigint_stops_training_after_its_step_with_a_checkpoint_and_the_resume_ends_bit_for_bit) {
    char train[700], val[700], args[2400], log[800];
    make_corpus(train, val, sizeof train);
    const char *d = test_tmpdir();
    const char *run = TINY_RUN " --layers 2 -x 40 --val-every 0";
    snprintf(args, sizeof args, "%s -i %s -o %s/straight", run, train, d);
    char *out = NULL;
    REQUIRE(run_train(args, &out) == 0, "the uninterrupted run: %s", out);
    free(out);
    snprintf(log, sizeof log, "%s/stopped.log", d);
    snprintf(args, sizeof args, "%s -i %s -o %s/stopped", run, train, d);
    const int pid = spawn_train(args, log);
    REQUIRE(pid > 0, "could not start ./train");
    const int seen = wait_for_log(log, "step     3/40", 1, 30);
    kill(pid, SIGINT);
    int st = 0;
    const int ended = wait_train_status(pid, 60, &st);
    out = read_text(log);
    int stopped_at = 0;
    const char *said = out ? strstr(out, "stopped by SIGINT after step ") : NULL;
    if (said) sscanf(said, "stopped by SIGINT after step %d", &stopped_at);
    /* it ends by the signal, as any program Ctrl-C ends, once the checkpoint is written */
    CHECK(seen && ended && WIFSIGNALED(st) && WTERMSIG(st) == SIGINT && stopped_at >= 3 && stopped_at < 40 &&
              strstr(out, "stop requested (SIGINT)") && strstr(said, "-y 1 goes on from there"),
          "status %#x, stopped at %d: %s", st, stopped_at, out ? out : "");
    free(out);
    char ck[900];
    snprintf(ck, sizeof ck, "%s/stopped/step_%08d/state.bin", d, stopped_at);
    CHECK(access(ck, F_OK) == 0, "no checkpoint %s", ck);
    snprintf(args, sizeof args, "%s -y 1 -i %s -o %s/stopped", run, train, d);
    REQUIRE(run_train(args, &out) == 0, "the resume: %s", out);
    free(out);
    CHECK(same_weights_at(d, 40), "the stopped and resumed run ends with other weights");
}

/* A stop asked for during a validation abandons it at the next batch (unlogged) and leaves the
 * checkpoint of the steps taken, step 0's included; resuming from either ends bit for bit where the
 * uninterrupted run does. In the validation after the last step it only ends the run. A validation
 * of 400 batches takes seconds here (minutes under the sanitizers) and the signal comes as it
 * starts, so it is still running. */
TEST(a_stop_during_validation_abandons_it_and_leaves_the_checkpoint_of_the_steps_taken) {
    char train[700], val[700], args[2400], log[800], ck[900];
    const char *d = test_tmpdir();
    make_corpus(train, val, sizeof train);
    snprintf(val, sizeof val, "%s/long_val.bin", d);
    REQUIRE(write_pattern_shard(val, 60000, 64, 2) == 0, "writing %s", val);
    const char *run = TINY_RUN " --layers 2 -x 6";
    char *out = NULL;
    snprintf(args, sizeof args, "%s --val-every 0 -i %s -o %s/straight", run, train, d);
    REQUIRE(run_train(args, &out) == 0, "the uninterrupted run: %s", out);
    free(out);
    const char *stops[2] = {"stopped by SIGINT before the first step: checkpoint ",
                            "stopped by SIGINT after step 2 of 6: checkpoint "};
    const char *waits[2] = {"largest micro-batch", "step     2/6"};
    for (int k = 0; k < 2; k++) {
        if (k == 1) { /* on from step 1, so the next validation comes after step 2, whose checkpoint is not due */
            snprintf(args, sizeof args, TINY_RUN " --layers 2 -x 1 --val-every 0 -y 1 -i %s -o %s/stopped", train, d);
            REQUIRE(run_train(args, &out) == 0, "the step to step 1: %s", out);
            free(out);
        }
        snprintf(log, sizeof log, "%s/stopped%d.log", d, k);
        snprintf(args, sizeof args, "%s --val-every 2 --val-batches 400 -y %d -i %s -j %s -o %s/stopped", run, k, train,
                 val, d);
        int seen, ended, st;
        out = signal_when_logged(args, log, waits[k], SIGINT, &seen, &ended, &st);
        const int at = 2 * k;
        char abandoned[64];
        snprintf(abandoned, sizeof abandoned, "step %5d | validation abandoned on SIGINT", at);
        CHECK(seen && ended && WIFSIGNALED(st) && WTERMSIG(st) == SIGINT && out && strstr(out, abandoned) &&
                  strstr(out, stops[k]) && !strstr(out, "val loss"),
              "stop %d: status %#x: %s", k, st, out ? out : "");
        free(out);
        snprintf(ck, sizeof ck, "%s/stopped/step_%08d/state.bin", d, at);
        CHECK(access(ck, F_OK) == 0, "no checkpoint %s", ck);
    }
    /* on to step 5, then step 6 and a stop in the validation after it: training is done */
    snprintf(args, sizeof args, TINY_RUN " --layers 2 -x 5 --val-every 0 -y 1 -i %s -o %s/stopped", train, d);
    REQUIRE(run_train(args, &out) == 0, "the resume to step 5: %s", out);
    free(out);
    snprintf(log, sizeof log, "%s/stopped_last.log", d);
    snprintf(args, sizeof args, "%s --val-every 4 --val-batches 400 -y 1 -i %s -j %s -o %s/stopped", run, train, val, d);
    int seen, ended, st;
    out = signal_when_logged(args, log, "step_00000006", SIGINT, &seen, &ended, &st);
    CHECK(seen && ended && WIFSIGNALED(st) && WTERMSIG(st) == SIGINT && out &&
              strstr(out, "step     6 | validation abandoned on SIGINT") &&
              strstr(out, "stopped by SIGINT after the last step: training is done, checkpoint ") &&
              !strstr(out, "val loss"),
          "the last validation: status %#x: %s", st, out ? out : "");
    free(out);
    CHECK(same_weights_at(d, 6), "the stopped and resumed run ends with other weights");
}

/* The same signal again, STOP_REPEAT_SECONDS or more after the first, ends a step that is still
 * running at once: the process dies of the signal, with no checkpoint; a repeat sooner is the same
 * request. The signals come during the first step, once the header is out (the handler is in place
 * by then): a step of four micro-batches takes half a minute on one core here, minutes under the
 * sanitizers, so a much faster machine still has one running. Repeats go on every half second past
 * STOP_REPEAT_SECONDS, so a first signal the process saw late still counts. */
TEST(a_second_sigint_two_seconds_later_ends_the_step_in_progress_at_once) {
    char train[700], args[2400], log[800];
    const char *d = test_tmpdir();
    snprintf(train, sizeof train, "%s/long.bin", d);
    REQUIRE(write_pattern_shard(train, 100000, 64, 1) == 0, "writing %s", train);
    snprintf(log, sizeof log, "%s/twice.log", d);
    snprintf(args, sizeof args,
             "--device cpu -e tiny -v 64 -b 128 -t 128 -d 65536 -s 0 -x 100 --val-every 0 -i %s -o %s/twice", train, d);
    setenv("OMP_NUM_THREADS", "1", 1);
    const int pid = spawn_train(args, log);
    unsetenv("OMP_NUM_THREADS");
    REQUIRE(pid > 0, "could not start ./train");
    const int seen = wait_for_log(log, "batch: B=128", 1, 60);
    kill(pid, SIGINT);
    struct timespec soon = {0, 300 * 1000000L}, half = {0, 500 * 1000000L};
    nanosleep(&soon, NULL);
    kill(pid, SIGINT);
    nanosleep(&half, NULL);
    int st = 0, ended = waitpid(pid, &st, WNOHANG) == pid;
    const int survived_the_quick_repeat = !ended;
    struct timespec rest = {STOP_REPEAT_SECONDS - 1, 400 * 1000000L};
    nanosleep(&rest, NULL);
    for (int tries = 0; tries < 60 && !ended; tries++) {
        kill(pid, SIGINT);
        nanosleep(&half, NULL);
        ended = waitpid(pid, &st, WNOHANG) == pid;
    }
    if (!ended) ended = wait_train_status(pid, 1, &st);
    char *out = read_text(log);
    CHECK(seen && survived_the_quick_repeat, "the header seen %d; alive after a repeat 0.3 s later %d: %s", seen,
          survived_the_quick_repeat, out ? out : "");
    CHECK(ended && WIFSIGNALED(st) && WTERMSIG(st) == SIGINT && strstr(out, "stop requested (SIGINT)") &&
              strstr(out, "stop requested again: ending at once") && !strstr(out, "stopped by") &&
              !strstr(out, "checkpoint:") && !strstr(out, "step     1/100"),
          "ended %d, signaled %d (%d), exit %d: %s", ended, WIFSIGNALED(st), WIFSIGNALED(st) ? WTERMSIG(st) : 0,
          WIFEXITED(st) ? WEXITSTATUS(st) : -1, out ? out : "");
    free(out);
    /* a resume of a run that wrote no whole checkpoint names the unfinished one its save left */
    char cut[900];
    snprintf(cut, sizeof cut, "%s/twice/step_00000001.tmp", d);
    REQUIRE(mkdir(cut, 0755) == 0, "%s", cut);
    snprintf(args, sizeof args, "--device cpu -e tiny -v 64 -b 128 -t 128 -d 65536 -s 0 -x 100 --val-every 0 -y 1 -i %s "
             "-o %s/twice", train, d);
    char *said = NULL;
    const int rc = run_train(args, &said);
    CHECK(rc == 1 && said && strstr(said, "step_00000001.tmp is a checkpoint whose write was cut off"), "(%d) %s", rc,
          said ? said : "");
    free(said);
}

TEST(validation_batches_and_windows_near_2_to_the_31_do_not_overflow) {
    CHECK(loader_batches_per_rank(10, 1) == 10 && loader_batches_per_rank(10, 4) == 3 &&
              loader_batches_per_rank(1, 8) == 1 && loader_batches_per_rank(8, 8) == 1,
          "small counts: %d %d %d %d", loader_batches_per_rank(10, 1), loader_batches_per_rank(10, 4),
          loader_batches_per_rank(1, 8), loader_batches_per_rank(8, 8));
    CHECK(loader_batches_per_rank(2147483647, 8) == 268435456 && loader_batches_per_rank(2147483647, 1024) == 2097152,
          "--val-batches 2^31 - 1: %d per rank of 8, %d per rank of 1024", loader_batches_per_rank(2147483647, 8),
          loader_batches_per_rank(2147483647, 1024));
    /* a window of 2^31 tokens (-t 2^31 - 1 and its target): more than the shard holds, said truly */
    char train[700], val[700];
    make_corpus(train, val, sizeof train);
    expect_run(1, "too few for a batch of 1 x 2147483648 on each of 1 rank(s)", NULL,
               "--device cpu -e tiny -v 64 -b 1 -t 2147483647 --max-seq-len 2147483647 -x 1 -i %s -o %s/wide", train,
               test_tmpdir());
    /* end to end: the shard holds fewer, and the run uses those */
    expect_run(0, "holds 31 batch(es) of 4 x 33 per rank, fewer than --val-batches asks", "val loss",
               TINY_RUN " -x 1 --val-every 1 --val-batches 2147483647 -i %s -j %s -o %s/vb", train, val,
               test_tmpdir());
}

/* --vocab-parallel's refusals come before any GPU is looked for, so the CPU sees them all; a run it
 * accepts gets as far as looking for GPUs. */
#define UNTIED_LLAMA "--family llama --kv-heads 1 --ffn-dim 192 --untied-head"
TEST(vocab_parallel_is_refused_with_one_line_wherever_it_cannot_run) {
    char train[700], val[700];
    make_corpus(train, val, sizeof train);
    const char *d = test_tmpdir();
    expect_run(2, "--vocab-parallel splits the output layer over GPUs: it needs --device cuda", NULL,
               TINY_RUN " " UNTIED_LLAMA " -x 1 --vocab-parallel -i %s -o %s/vp", train, d);
    expect_run(2, "--vocab-parallel needs two GPUs or more", NULL,
               TINY_RUN " " UNTIED_LLAMA " --device cuda -x 1 --vocab-parallel -i %s -o %s/vp", train, d);
    expect_run(2, "leave out --output canonical", NULL,
               TINY_RUN " " UNTIED_LLAMA " --device cuda -g 2 --output canonical -x 1 --vocab-parallel -i %s -o %s/vp",
               train, d);
    expect_run(2, "not combined with --zero 1", NULL,
               TINY_RUN " " UNTIED_LLAMA " --device cuda -g 2 --zero 1 -x 1 --vocab-parallel -i %s -o %s/vp", train, d);
    expect_run(2, "plain cross-entropy only", "--z-loss",
               TINY_RUN " " UNTIED_LLAMA " --device cuda -g 2 --z-loss 1e-4 -x 1 --vocab-parallel -i %s -o %s/vp", train,
               d);
    expect_run(2, "plain cross-entropy only", NULL,
               TINY_RUN " " UNTIED_LLAMA " --device cuda -g 2 --logit-softcap 30 -x 1 --vocab-parallel -i %s -o %s/vp",
               train, d);
    expect_run(2, "pass -s 0", NULL,
               TINY_RUN " " UNTIED_LLAMA " --device cuda -g 2 -s 10 -x 1 --vocab-parallel -i %s -o %s/vp", train, d);
    /* -v 64 pads to 128 rows: over 2 ranks the second slice would hold padding alone */
    expect_run(2, "gives rank 1 only padding rows", NULL,
               TINY_RUN " " UNTIED_LLAMA " --device cuda -g 2 -x 1 --vocab-parallel -i %s -o %s/vp", train, d);
    /* Vp = 128 rows do not split over 3 ranks */
    expect_run(2, "to split evenly over 3 ranks", NULL,
               TINY_RUN " " UNTIED_LLAMA " --device cuda -g 3 -x 1 --vocab-parallel -i %s -o %s/vp", train, d);
    expect_run(2, "--untied-head needs --family llama, qwen2, qwen3 or gemma3", NULL,
               TINY_RUN " --untied-head -x 1 -i %s -o %s/vp", train, d);
}

TEST(a_resume_whose_head_tying_differs_from_its_checkpoints_names_the_flag) {
    char train[700], val[700], args[2400], *out = NULL;
    make_corpus(train, val, sizeof train);
    const char *d = test_tmpdir();
    expect_run(0, "step     2/2", NULL, TINY_RUN " " UNTIED_LLAMA " -x 2 -n 4 --val-every 0 -i %s -o %s/u", train, d);
    /* the checkpoint's config.json says the head is untied: a resume without the flag keeps it */
    snprintf(args, sizeof args, TINY_RUN " --family llama --kv-heads 1 --ffn-dim 192 -x 3 -n 4 --val-every 0 -y 1 -i %s "
             "-o %s/u", train, d);
    int rc = run_train(args, &out);
    CHECK(rc == 0 && out && strstr(out, "step     3/3"), "resumed without --untied-head: (%d) %s", rc, out ? out : "");
    free(out);
    /* the first command again with -y 1: the flag agrees with the checkpoint, so it stands */
    snprintf(args, sizeof args, TINY_RUN " " UNTIED_LLAMA " -x 3 -n 4 --val-every 0 -y 1 -i %s -o %s/u", train, d);
    rc = run_train(args, &out);
    CHECK(rc == 0 && out && strstr(out, "nothing to train: the checkpoint is at step 3"), "resumed with --untied-head: (%d) %s", rc, out ? out : "");
    free(out);
    /* a tied checkpoint (GPT-2's, whose family the command line does not name) refuses the flag */
    snprintf(args, sizeof args, TINY_RUN " --untied-head -x 1 --val-every 0 --init-from %s/t/step_00000001 -i %s -o %s/t2",
             d, train, d);
    expect_run(0, "step     1/1", NULL, TINY_RUN " -x 1 --val-every 0 -i %s -o %s/t", train, d);
    rc = run_train(args, &out);
    CHECK(rc == 1 && out && strstr(out, "ties its output head to the token embedding (tie_word_embeddings) but the flags "
                                        "give --untied-head (leave out --untied-head)"),
          "--untied-head beside a tied checkpoint: (%d) %s", rc, out ? out : "");
    free(out);
    /* without a config.json to read the flags give the model, and the state names the flag */
    snprintf(args, sizeof args, "%s/u/step_00000003/config.json", d);
    REQUIRE(remove(args) == 0, "removing %s", args);
    snprintf(args, sizeof args, TINY_RUN " --family llama --kv-heads 1 --ffn-dim 192 -x 4 --val-every 0 -y 1 -i %s -o %s/u",
             train, d);
    rc = run_train(args, &out);
    CHECK(rc != 0 && out && strstr(out, "has an untied output head but this run's is tied (pass --untied-head"),
          "resumed tied: (%d) %s", rc, out ? out : "");
    free(out);
}

TEST(vocab_parallel_on_a_tied_or_untied_head_over_two_gpus_passes_every_check_before_the_gpus) {
    char train[700], val[700], *out = NULL, args[2400];
    make_corpus(train, val, sizeof train);
    /* an untied Llama, and GPT-2 and Qwen3, whose heads are their token embeddings */
    const char *models[] = {UNTIED_LLAMA, "", "--family qwen3 --kv-heads 1 --ffn-dim 192"};
    for (int i = 0; i < 3; i++) {
        snprintf(args, sizeof args, TINY_RUN " %s -v 100 --device cuda -g 2 -x 1 --vocab-parallel -i %s -o %s/vpok%d",
                 models[i], train, test_tmpdir(), i);
        int rc = run_train(args, &out);
        /* on a machine without GPUs the run stops at the GPU count; with two it trains */
        CHECK(out && (rc == 0 || strstr(out, "CUDA GPU")) && !strstr(out, "--vocab-parallel"), "./train %s: exit %d: %s",
              args, rc, out ? out : "");
        free(out);
        out = NULL;
    }
}

TEST(an_untied_llama_made_with_untied_head_trains_on_the_cpu_and_exports_its_lm_head) {
    char train[700], val[700], path[900];
    make_corpus(train, val, sizeof train);
    const char *d = test_tmpdir();
    expect_run(0, "untied", NULL, TINY_RUN " " UNTIED_LLAMA " -x 2 -n 2 --val-every 0 -i %s -o %s/untied", train, d);
    snprintf(path, sizeof path, "%s/untied/step_00000002/model.safetensors", d);
    size_t len = 0;
    char *st = read_file(path, &len);
    CHECK(st && len > 16 && memmem(st, len, "lm_head.weight", 14), "%s lacks lm_head.weight", path);
    free(st);
}

TEST(gpu_memory_flags_on_the_cpu_backend_are_noted_as_the_gpus) {
    char train[700], val[700];
    make_corpus(train, val, sizeof train);
    const char *d = test_tmpdir();
    expect_run(0, "note: --recompute-gelu sets the GPU backend's memory; the CPU backend keeps every activation",
               "step     1/1", TINY_RUN " -x 1 --val-every 0 --recompute-gelu 2 -i %s -o %s/g", train, d);
    expect_run(0, "note: --recompute-gelu and --logits-mb set the GPU backend's memory;", "step     1/1",
               TINY_RUN " -x 1 --val-every 0 --recompute-gelu 1 --logits-mb 64 -i %s -o %s/h", train, d);
}

/* --master typed for a run on one host is noted as unused; the same address from a scheduler's
 * environment, set for every job, is not. */
TEST(a_master_address_given_to_a_run_on_one_host_is_noted_as_unused) {
    char train[700], val[700], args[2400], *out = NULL;
    make_corpus(train, val, sizeof train);
    snprintf(args, sizeof args, TINY_RUN " -x 1 --val-every 0 --master localhost:29500 -i %s -o %s/m", train,
             test_tmpdir());
    int rc = run_train(args, &out);
    CHECK(rc == 0 && out && strstr(out, "note: --master localhost:29500 serves the rendezvous of --nodes 2 or more"),
          "exit %d: %s", rc, out);
    free(out);
    setenv("FUSEDGPT_MASTER", "localhost:29500", 1);
    snprintf(args, sizeof args, TINY_RUN " -x 1 --val-every 0 -i %s -o %s/m2", train, test_tmpdir());
    rc = run_train(args, &out);
    unsetenv("FUSEDGPT_MASTER");
    CHECK(rc == 0 && out && !strstr(out, "--master"), "exit %d: %s", rc, out);
    free(out);
}

/* -i takes a quoted pattern of shards: a run over them resumes exactly, a changed set is other data,
 * and a pattern the shell expanded is named with the fix. */
TEST(training_on_a_pattern_of_shards_resumes_exactly_and_a_changed_set_is_other_data) {
    const char *d = test_tmpdir();
    char part[700], args[2400], *full = NULL, *resumed = NULL, *bad = NULL;
    for (int k = 1; k <= 2; k++) {
        snprintf(part, sizeof part, "%s/part_%d.bin", d, k);
        REQUIRE(write_pattern_shard(part, 20000, 64, (uint64_t)k) == 0, "writing %s", part);
    }
    snprintf(args, sizeof args, TINY_RUN " -x 10 -n 5 --val-every 0 -i '%s/part_*.bin' -o %s/full", d, d);
    REQUIRE(run_train(args, &full) == 0, "%s", full);
    /* 624 windows of 33 tokens in each shard's 20000, four a step */
    CHECK(strstr(full, "/part_*.bin, 40000 tokens in 2 shards: 312 steps an epoch\n"), "no data line: %s", full);
    char src[800], dst[800];
    snprintf(src, sizeof src, "%s/full", d);
    snprintf(dst, sizeof dst, "%s/cut", d);
    REQUIRE(copy_checkpoint(src, 5, dst) == 0, "copying the checkpoint failed");
    snprintf(args, sizeof args, TINY_RUN " -x 10 --val-every 0 -y 1 -i '%s/part_*.bin' -o %s/cut", d, d);
    REQUIRE(run_train(args, &resumed) == 0, "%s", resumed);
    static char a[8192], b[8192];
    losses_after(full, 5, a, sizeof a);
    losses_after(resumed, 5, b, sizeof b);
    CHECK(count_lines(a) == 5 && strcmp(a, b) == 0, "resumed losses differ:\n%s---\n%s", a, b);
    /* a third shard matching the pattern: the data position would point into other windows */
    snprintf(part, sizeof part, "%s/part_3.bin", d);
    REQUIRE(write_pattern_shard(part, 20000, 64, 3) == 0, "writing %s", part);
    snprintf(args, sizeof args, TINY_RUN " -x 12 --val-every 0 -y 1 -i '%s/part_*.bin' -o %s/cut", d, d);
    int rc = run_train(args, &bad);
    CHECK(rc == 1 && strstr(bad, "was trained on other data"), "exit %d: %s", rc, bad);
    free(bad);
    /* validation on one of the training shards is named, as one shard for both is */
    snprintf(args, sizeof args, TINY_RUN " -x 1 --val-every 1 --val-batches 1 -i '%s/part_*.bin' -j %s/part_2.bin -o %s/v",
             d, d, d);
    rc = run_train(args, &bad);
    CHECK(rc == 0 && strstr(bad, "part_2.bin is a shard of both -i and -j: the validation loss is measured partly on the "
                                 "training data"),
          "exit %d: %s", rc, bad);
    free(bad);
    /* the shell expanded an unquoted pattern: the second shard stands alone */
    snprintf(args, sizeof args, TINY_RUN " -x 10 -i %s/part_*.bin -o %s/x", d, d);
    rc = run_train(args, &bad);
    CHECK(rc == 2 && strstr(bad, "part_2.bin' follows the value of -i: for several shards, quote a pattern"),
          "exit %d: %s", rc, bad);
    free(bad);
    free(resumed);
    free(full);
}

/* A corpus prepared in parts with one tokenizer trains as one pattern: the parts' shards and
 * validation shards agree on their tokenizer, and the data line counts both parts. */
TEST(a_corpus_prepared_in_parts_with_one_tokenizer_trains_as_one_pattern) {
    const char *d = test_tmpdir();
    char args[2400], *out = NULL;
    snprintf(args, sizeof args, "prepare -v 300 --val-fraction 0.2 -o %s/parts/p0 tests/fixtures/hf_document.txt", d);
    REQUIRE(run_train(args, &out) == 0, "%s", out);
    free(out);
    snprintf(args, sizeof args, "prepare --tokenizer %s/parts/p0/tokenizer.bin --val-fraction 0.2 -o %s/parts/p1 "
             "tests/fixtures/spm_document.txt", d, d);
    REQUIRE(run_train(args, &out) == 0, "%s", out);
    free(out);
    ShardHeader h0, h1;
    char p0[800], p1[800], err[ERR_LEN];
    snprintf(p0, sizeof p0, "%s/parts/p0/train.bin", d);
    snprintf(p1, sizeof p1, "%s/parts/p1/train.bin", d);
    REQUIRE(shard_read_header(p0, &h0, err) == 0 && shard_read_header(p1, &h1, err) == 0, "%s", err);
    snprintf(args, sizeof args, "--device cpu -e tiny -v 300 -b 2 -t 16 -x 2 --val-every 2 --val-batches 1 -s 0 -i "
             "'%s/parts/*/train.bin' -j '%s/parts/*/val.bin' --tokenizer %s/parts/p0/tokenizer.bin -o %s/run", d, d, d, d);
    char want[200];
    snprintf(want, sizeof want, ", %llu tokens in 2 shards: ", (unsigned long long)(h0.num_tokens + h1.num_tokens));
    const int rc = run_train(args, &out);
    CHECK(rc == 0 && strstr(out, want) && strstr(out, "step     2 | val loss"), "exit %d: %s", rc, out);
    free(out);
}

/* --query-pre-attn-scalar sets Gemma 3's attention scale from scratch (27B's 168, where the others'
 * are 256): the run says it, its config.json carries it, --init-from takes it back, and a checkpoint
 * of another value refuses the flag. */
TEST(a_gemma3_from_scratch_takes_its_query_pre_attn_scalar_into_its_checkpoint) {
    char train[700], val[700], args[2400], config[900], *out = NULL;
    make_corpus(train, val, sizeof train);
    const char *d = test_tmpdir();
#define SMALL_GEMMA3 "--family gemma3 --layers 2 --kv-heads 1 --head-dim 16 --ffn-dim 64"
    expect_run(0, "query_pre_attn_scalar 168;", NULL,
               TINY_RUN " " SMALL_GEMMA3 " --query-pre-attn-scalar 168 -x 1 --val-every 0 -i %s -o %s/q", train, d);
    snprintf(config, sizeof config, "%s/q/step_00000001/config.json", d);
    char *json = read_text(config);
    CHECK(json && strstr(json, "\"query_pre_attn_scalar\": 168,"), "%s: %s", config, json ? json : "(none)");
    free(json);
    expect_run(0, "query_pre_attn_scalar 168;", NULL,
               "--device cpu -b 4 -t 32 -s 0 -x 1 --val-every 0 --init-from %s/q/step_00000001 -i %s -o %s/q2", d, train, d);
    snprintf(args, sizeof args, "--device cpu -b 4 -t 32 -s 0 --query-pre-attn-scalar 100 -x 1 --val-every 0 --init-from %s/q/step_00000001 "
             "-i %s -o %s/q3", d, train, d);
    int rc = run_train(args, &out);
    CHECK(rc == 1 && out && strstr(out, "has query_pre_attn_scalar 168 but the flags give 100 (leave out "
                                        "--query-pre-attn-scalar: the checkpoint gives it)"),
          "(%d) %s", rc, out ? out : "");
    free(out);
#undef SMALL_GEMMA3
}
