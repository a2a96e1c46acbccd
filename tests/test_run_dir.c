/* The run directory and its log never lie: every file of a run stays inside -o whatever its length,
 * a resume continues one timeline (an abandoned future moves aside, a stopped run's extra records
 * leave the log), a failed write stops the run with a true message, what a save needs is taken
 * before step 1, and every log line is valid JSON in valid UTF-8. */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/err.h"
#include "data/shard.h"
#include "model/train/checkpoint.h"
#include "model/train/runlog.h"
#include "tests/test.h"
#include "tests/test_util.h"

#define RUN "--device cpu -e tiny -v 64 -b 4 -t 32 -s 0"

/* A learnable training shard in the test's directory. */
static const char *train_shard(void) {
    static char path[700];
    snprintf(path, sizeof path, "%s/train.bin", test_tmpdir());
    if (access(path, F_OK) != 0) write_pattern_shard(path, 40000, 64, 1);
    return path;
}

static int exists(const char *fmt, const char *a, const char *b) {
    char p[4200];
    struct stat sb;
    snprintf(p, sizeof p, fmt, a, b);
    return stat(p, &sb) == 0;
}

/* A first run (`RUN first_flags -i <shard> -o <dir>/<name>`), then `alter` (a shell command, where
 * each %s is the test's directory), then a resume with second_flags: the resume's exit status and
 * output (*out, caller frees), or -1 when the first two failed (a failure recorded). */
static int run_alter_resume(const char *name, const char *first_flags, const char *alter, const char *second_flags,
                            char **out) {
    char args[1600], cmd[2400];
    const char *d = test_tmpdir();
    *out = NULL;
    snprintf(args, sizeof args, RUN " %s -i %s -o %s/%s", first_flags, train_shard(), d, name);
    if (run_train(args, out) != 0) {
        CHECK(0, "first run failed: %s", *out ? *out : "");
        return -1;
    }
    free(*out);
    *out = NULL;
    snprintf(cmd, sizeof cmd, alter, d, d, d);
    if (system(cmd) != 0) {
        CHECK(0, "%s failed", cmd);
        return -1;
    }
    snprintf(args, sizeof args, RUN " %s -y 1 -i %s -o %s/%s", second_flags, train_shard(), d, name);
    return run_train(args, out);
}

/* The steps of a log's step records, in file order, into steps[]; how many. Every line must be one
 * complete record. */
static int logged_steps(const char *log_path, int *steps, int max) {
    char *text = read_text(log_path);
    int n = 0;
    for (char *line = text; line && *line && n < max;) {
        char *end = strchr(line, '\n');
        int step;
        if (sscanf(line, "{\"type\":\"step\",\"step\":%d,", &step) == 1) steps[n++] = step;
        if (!end) break;
        line = end + 1;
    }
    free(text);
    return n;
}

static int count_lines_holding(const char *text, const char *needle) {
    int n = 0;
    for (const char *p = text; (p = strstr(p, needle)); p++) n++;
    return n;
}

TEST(a_long_run_directory_keeps_every_file_inside_it_or_is_refused_before_training) {
    /* 6 folders of 200 bytes: longer than any fixed path buffer of a kilobyte */
    char top[800], run[2400], args[3200], *out = NULL;
    snprintf(top, sizeof top, "%s/long", test_tmpdir());
    size_t len = (size_t)snprintf(run, sizeof run, "%s", top);
    for (int i = 0; i < 6; i++) {
        run[len++] = '/';
        memset(run + len, 'a' + i, 200);
        len += 200;
    }
    run[len] = 0;
    snprintf(args, sizeof args, RUN " -x 2 -n 1 -i %s -o %s", train_shard(), run);
    int rc = run_train(args, &out);
    CHECK(rc == 0, "a %zu-byte -o failed (%d): %.300s", len, rc, out);
    free(out);
    CHECK(exists("%s/%s", run, "log.jsonl") && exists("%s/%s", run, "step_00000002/state.bin") &&
              exists("%s/%s", run, "latest"),
          "the log, the checkpoint or latest is not in the run directory");
    int steps[8];
    char log[2500];
    snprintf(log, sizeof log, "%s/log.jsonl", run);
    CHECK(logged_steps(log, steps, 8) == 2, "the run's log does not hold its two steps");
    /* nothing beside the run directory: every path under top is one of its parents or inside it */
    char cmd[1000];
    snprintf(cmd, sizeof cmd, "find '%s' -mindepth 1", top);
    FILE *p = popen(cmd, "r");
    REQUIRE(p, "cannot list %s", top);
    char line[4200];
    int outside = 0;
    while (fgets(line, sizeof line, p)) {
        line[strcspn(line, "\n")] = 0;
        size_t k = strlen(line);
        int ancestor = strncmp(run, line, k) == 0 && (run[k] == '/' || run[k] == 0);
        int inside = strncmp(line, run, len) == 0 && line[len] == '/';
        if (!ancestor && !inside) {
            outside++;
            CHECK(0, "a file landed outside the run directory: %.80s... (%zu bytes)", line, k);
        }
    }
    pclose(p);
    CHECK(outside == 0, "%d files outside the run directory", outside);

    /* a -o whose files could not fit the system's 4096-byte paths: one error line before anything */
    char far[4300], far_args[5000];
    size_t flen = (size_t)snprintf(far, sizeof far, "%s/far", test_tmpdir());
    while (flen + 201 < 4090) {
        far[flen++] = '/';
        memset(far + flen, 'z', 200);
        flen += 200;
    }
    far[flen] = 0;
    snprintf(far_args, sizeof far_args, RUN " -x 2 -i %s -o %s", train_shard(), far);
    rc = run_train(far_args, &out);
    CHECK(rc == 2 && strncmp(out, "error: -o/--out is", 18) == 0 && strstr(out, "pass a shorter -o") &&
              count_lines_holding(out, "\n") == 1,
          "a %zu-byte -o: exit %d: %.300s", flen, rc, out);
    CHECK(!exists("%s/%s", test_tmpdir(), "far"), "the refused run created its directory");
    free(out);
}

TEST(what_a_checkpoint_needs_is_taken_and_counted_before_the_first_step) {
    char args[1200], *out = NULL;
    GPTConfig cfg = {.num_layers = 2, .num_heads = 2, .dim = 128, .max_seq_len = 1024, .vocab_size = 64};
    gpt_config_finish(&cfg);
    ParamTable t;
    char err[ERR_LEN], want[128];
    REQUIRE(param_table_build(&t, &cfg, err) == 0, "%s", err);
    snprintf(want, sizeof want, "  %-40s %10.2f MB\n", "checkpoint buffers (fp32 weights, m, v)", 12.0 * t.total / 1e6);
    param_table_free(&t);
    snprintf(args, sizeof args, RUN " -x 1 -i %s -o %s/run", train_shard(), test_tmpdir());
    REQUIRE(run_train(args, &out) == 0, "run failed: %s", out);
    const char *total = strstr(out, "total allocated");
    CHECK(strstr(out, want) && total && strstr(out, want) < total, "the memory table lacks '%s' in its total: %s",
          want, out);
    free(out);
#ifndef __SANITIZE_ADDRESS__ /* AddressSanitizer reserves terabytes of address space: no ulimit -v for it */
    /* V = 1e6: the backend's weights, gradients and moments are 2.05 GB, the checkpoint buffers 1.54 GB
     * more; 3.5 GB of address space (with the libraries' mappings, about 1 GB) holds the first alone */
    snprintf(args, sizeof args, "--device cpu -e tiny -v 1000000 -b 2 -t 32 -s 0 --val-every 0 -x 1 -i %s -o %s/big",
             train_shard(), test_tmpdir());
    int rc = run_train_under("ulimit -v 3500000; OMP_NUM_THREADS=2", args, &out);
    CHECK(rc == 1 && strstr(out, "error: out of host memory for the checkpoint buffers") &&
              !strstr(out, "step     1/1"),
          "a checkpoint that cannot fit must stop the run before step 1: exit %d: %s", rc, out);
    free(out);
#endif
}

TEST(the_run_log_writes_any_sample_bytes_as_valid_utf8_json) {
    RunLog log = {NULL};
    char err[ERR_LEN];
    REQUIRE(runlog_open(&log, test_tmpdir(), err) == 0, "%s", err);
    /* valid 2-, 3- and 4-byte characters; then a character cut short at the end of the sample (the
     * case of a sample decoded from a few tokens), a stray continuation byte, an overlong '/', an
     * encoded surrogate and a byte that never starts a character */
    const char *text = "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 \"q\"\\ \t|\x80|\xc0\xaf|\xed\xa0\x80|\xff|\xe2\x82";
    CHECK(runlog_sample(&log, 7, text) == 0, "writing the sample failed: %s", log.err);
    runlog_close(&log);
    char path[700];
    snprintf(path, sizeof path, "%s/log.jsonl", test_tmpdir());
    char *got = read_text(path);
    const char *want = "{\"type\":\"sample\",\"step\":7,\"text\":\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 "
                       "\\\"q\\\"\\\\ \\u0009|\\ufffd|\\ufffd\\ufffd|\\ufffd\\ufffd\\ufffd|\\ufffd|\\ufffd\\ufffd\"}\n";
    CHECK(got && strcmp(got, want) == 0, "the log line is\n%s\nexpected\n%s", got ? got : "(none)", want);
    free(got);
}

TEST(a_rollback_by_hand_moves_the_abandoned_future_aside_and_keeps_the_resume_point) {
    char args[1200], path[800], *out = NULL;
    const char *d = test_tmpdir();
    snprintf(args, sizeof args, RUN " -x 6 -n 2 --keep-checkpoints 3 -i %s -o %s/r", train_shard(), d);
    REQUIRE(run_train(args, &out) == 0, "first run failed: %s", out);
    free(out);
    snprintf(path, sizeof path, "%s/r/latest", d);
    FILE *f = fopen(path, "w");
    REQUIRE(f && fputs("step_00000004\n", f) >= 0 && fclose(f) == 0, "rewriting latest");
    snprintf(args, sizeof args, RUN " -x 10 -y 1 -i %s -o %s/r", train_shard(), d);
    int rc = run_train(args, &out);
    REQUIRE(rc == 0, "resumed run failed (%d): %s", rc, out);
    CHECK(strstr(out, "held 1 checkpoint(s) after step 4, where this run resumes; moved them and 2 log record(s)"),
          "the resume does not say what it moved aside: %s", out);
    free(out);
    char run[800];
    snprintf(run, sizeof run, "%s/r", d);
    /* the resume point survives the pruning at step 10 (keep 2); the abandoned step 6 is not among them */
    CHECK(exists("%s/%s", run, "step_00000004") && exists("%s/%s", run, "step_00000010"),
          "the resume point or the new checkpoint is missing");
    CHECK(!exists("%s/%s", run, "step_00000006") && !exists("%s/%s", run, "step_00000002"),
          "the abandoned step 6 (or the pruned step 2) is still in the run directory");
    /* the abandoned future: its checkpoint, a latest naming it, its log records */
    CHECK(exists("%s/%s", run, "earlier_run_1/step_00000006/state.bin"), "the abandoned checkpoint was not kept aside");
    char *latest = NULL;
    snprintf(path, sizeof path, "%s/r/earlier_run_1/latest", d);
    latest = read_text(path);
    CHECK(latest && strcmp(latest, "step_00000006\n") == 0, "earlier_run_1/latest is '%s'", latest ? latest : "");
    free(latest);
    int steps[32], n;
    snprintf(path, sizeof path, "%s/r/earlier_run_1/log.jsonl", d);
    n = logged_steps(path, steps, 32);
    CHECK(n == 2 && steps[0] == 5 && steps[1] == 6, "the abandoned log holds %d records", n);
    /* the run's log: one record per step of the surviving timeline */
    snprintf(path, sizeof path, "%s/r/log.jsonl", d);
    n = logged_steps(path, steps, 32);
    CHECK(n == 10, "the log holds %d step records for 10 steps", n);
    for (int i = 0; i < n && i < 10; i++) CHECK(steps[i] == i + 1, "record %d is of step %d", i + 1, steps[i]);
    /* the future set aside still resumes */
    snprintf(args, sizeof args, RUN " -x 7 -y 1 -i %s -o %s/r/earlier_run_1", train_shard(), d);
    rc = run_train(args, &out);
    CHECK(rc == 0 && strstr(out, "at step 6") && strstr(out, "step     7/7"), "the abandoned future: %s", out);
    free(out);
}

TEST(a_resume_after_a_kill_leaves_one_log_record_per_step) {
    /* a run killed after step 5 with its last checkpoint at step 4: what -x 5 -n 2 leaves without its
     * final checkpoint */
    char args[1200], path[800], *out = NULL;
    const char *d = test_tmpdir();
    snprintf(args, sizeof args, RUN " -x 5 -n 2 --val-every 2 -j %s -i %s -o %s/k", train_shard(), train_shard(), d);
    REQUIRE(run_train(args, &out) == 0, "first run failed: %s", out);
    free(out);
    snprintf(args, sizeof args, "rm -r %s/k/step_00000005 && echo step_00000004 > %s/k/latest && printf "
             "'{\"type\":\"step\",\"step\":6,\"lo' >> %s/k/log.jsonl", d, d, d);
    REQUIRE(system(args) == 0, "making the killed run's directory");
    snprintf(args, sizeof args, RUN " -x 8 -n 2 --val-every 2 -j %s -y 1 -i %s -o %s/k", train_shard(),
             train_shard(), d);
    int rc = run_train(args, &out);
    REQUIRE(rc == 0, "resumed run failed (%d): %s", rc, out);
    /* step 5 and the eval after it; the eval at step 4 comes again as it was, unnamed */
    CHECK(strstr(out, "held 2 record(s) after step 4") && strstr(out, "dropped them, this run writes them again") &&
              strstr(out, "log.jsonl ended in a line cut short (a run killed while writing it); dropped it"),
          "the resume does not say what it dropped: %s", out);
    free(out);
    int steps[32];
    snprintf(path, sizeof path, "%s/k/log.jsonl", d);
    int n = logged_steps(path, steps, 32);
    CHECK(n == 8, "the log holds %d step records for 8 steps", n);
    for (int i = 0; i < n && i < 8; i++) CHECK(steps[i] == i + 1, "record %d is of step %d", i + 1, steps[i]);
    /* evaluations at 0, 2, 4, 6 and the last at 8, once each; every line a whole record */
    char *log = read_text(path);
    REQUIRE(log, "no log");
    CHECK(count_lines_holding(log, "\"type\":\"eval\"") == 5 && count_lines_holding(log, "\"type\":\"eval\",\"step\":4,") == 1,
          "evaluations repeated or lost:\n%s", log);
    int lines = count_lines_holding(log, "\n"), records = count_lines_holding(log, "{\"type\":");
    CHECK(lines == records && log[strlen(log) - 1] == '\n', "a line is not one whole record:\n%s", log);
    free(log);
}

TEST(a_file_size_limit_stops_the_run_with_one_line_naming_the_last_checkpoint) {
    /* RLIMIT_FSIZE stands in for a full disk: the kernel's SIGXFSZ would kill the run without a word,
     * so writes past the limit must fail (EFBIG) and be reported as any failed write is */
    char args[1200], *out = NULL;
    const char *d = test_tmpdir();
    snprintf(args, sizeof args, RUN " -x 5 -i %s -o %s/full", train_shard(), d);
    int rc = run_train_under("ulimit -f 0;", args, &out);
    CHECK(rc == 1 && strstr(out, "error: cannot write the run log") && strstr(out, "full/log.jsonl") &&
              strstr(out, "ulimit -f") && strstr(out, "this run has no checkpoint yet") &&
              count_lines_holding(out, "error:") == 1 && strstr(out, "step     1/5") && !strstr(out, "step     2/5"),
          "a log that cannot be written must stop the run at its first record: exit %d: %s", rc, out);
    free(out);
    /* 4 KB: the log fits, a checkpoint does not; the run has none yet */
    snprintf(args, sizeof args, RUN " -x 3 -i %s -o %s/small", train_shard(), d);
    rc = run_train_under("ulimit -f 8;", args, &out);
    CHECK(rc == 1 && strstr(out, "error: cannot write checkpoint file") && strstr(out, "this run has no checkpoint yet") &&
              !strstr(out, "intact") && count_lines_holding(out, "error:") == 1,
          "exit %d: %s", rc, out);
    free(out);
    /* with a checkpoint written earlier, that one is named as intact, by a failed save or log write */
    snprintf(args, sizeof args, RUN " -x 2 -i %s -o %s/small", train_shard(), d);
    REQUIRE(run_train(args, &out) == 0, "%s", out);
    free(out);
    snprintf(args, sizeof args, RUN " -x 3 -y 1 -i %s -o %s/small", train_shard(), d);
    rc = run_train_under("ulimit -f 8;", args, &out);
    CHECK(rc == 1 && strstr(out, "the last checkpoint (step_00000002) is intact") &&
              count_lines_holding(out, "error:") == 1,
          "exit %d: %s", rc, out);
    free(out);
    rc = run_train_under("ulimit -f 0;", args, &out);
    CHECK(rc == 1 && strstr(out, "error: cannot ") &&
              strstr(out, "File too large (a file-size limit: raise ulimit -f)") &&
              strstr(out, "the last checkpoint (step_00000002) is intact") && count_lines_holding(out, "error:") == 1,
          "exit %d: %s", rc, out);
    free(out);
}

TEST(a_resume_without_latest_names_the_damaged_newer_checkpoint_it_passes_over) {
    /* checkpoints at steps 2 and 4, latest gone and step 4's state file cut short: the resume takes
     * step 2, says why step 4 was passed over, and sets it aside without claiming it resumes */
    char *out;
    const char *d = test_tmpdir();
    int rc = run_alter_resume("dm", "-x 4 -n 2 --val-every 0",
                              "rm %s/dm/latest && truncate -s 1000 %s/dm/step_00000004/state.bin",
                              "-x 6 -n 2 --val-every 0", &out);
    REQUIRE(rc >= 0, "setting up");
    CHECK(rc == 0 && strstr(out, "resuming from the newest checkpoint that loads whole, from step_00000002 down "
                                 "(step_00000004, newer, is incomplete or damaged)") &&
              strstr(out, "none of which loads whole") && !strstr(out, "resumes them") && strstr(out, "step     6/6"),
          "exit %d: %s", rc, out);
    free(out);
    CHECK(!exists("%s/%s", d, "dm/earlier_run_1/latest"), "a latest was written beside only damaged checkpoints");
    CHECK(exists("%s/%s", d, "dm/earlier_run_1/step_00000004"), "the damaged checkpoint was not set aside");
    /* whole in size but changed on disk: only its checksum tells, when it is loaded */
    rc = run_alter_resume("dc", "-x 4 -n 2 --val-every 0",
                          "rm %s/dc/latest && printf XXXX | dd of=%s/dc/step_00000004/state.bin bs=1 seek=2000 "
                          "conv=notrunc 2>/dev/null",
                          "-x 6 -n 2 --val-every 0", &out);
    REQUIRE(rc >= 0, "setting up");
    CHECK(rc == 0 && strstr(out, "from step_00000004 down") &&
              strstr(out, "note: step_00000004, the newest checkpoint, does not load (") && strstr(out, "checksum") &&
              strstr(out, "this run resumes from step 2, the newest that does") &&
              strstr(out, "none of which loads whole") && !strstr(out, "resumes them") && strstr(out, "step     6/6"),
          "exit %d: %s", rc, out);
    free(out);
    CHECK(!exists("%s/%s", d, "dc/earlier_run_1/latest"), "a latest named the damaged checkpoint");
}

TEST(a_pipe_at_latest_or_at_a_state_file_is_named_not_waited_on) {
    /* a FIFO blocks the open that reads it until a writer comes: the resume would hang */
    char *out;
    int rc = run_alter_resume("fl", "-x 2 -n 2 --val-every 0", "rm %s/fl/latest && mkfifo %s/fl/latest",
                              "-x 3 -n 2 --val-every 0", &out);
    REQUIRE(rc >= 0, "setting up");
    CHECK(rc != 0 && out && strstr(out, "fl/latest is a pipe"), "a pipe at latest: exit %d: %s", rc, out);
    free(out);
    rc = run_alter_resume("fs", "-x 2 -n 2 --val-every 0",
                          "rm %s/fs/step_00000002/state.bin && mkfifo %s/fs/step_00000002/state.bin",
                          "-x 3 -n 2 --val-every 0", &out);
    REQUIRE(rc >= 0, "setting up");
    CHECK(rc != 0 && out && strstr(out, "state.bin is a pipe"), "a pipe at state.bin: exit %d: %s", rc, out);
    free(out);
}

TEST(a_rolled_back_resume_sets_aside_a_latest_naming_the_newest_whole_checkpoint) {
    /* checkpoints at 2, 4 and 6, step 6's state file cut short, latest rolled back to step 2 by hand:
     * 4 and 6 move aside, and their latest names step 4, which -y 1 can resume */
    char path[1000], *out;
    int rc = run_alter_resume("rb", "-x 6 -n 2 --keep-checkpoints 3 --val-every 0",
                              "truncate -s 1000 %s/rb/step_00000006/state.bin && echo step_00000002 > %s/rb/latest",
                              "-x 3 -n 2 --warmup 1 --val-every 0", &out);
    REQUIRE(rc >= 0, "setting up");
    CHECK(rc == 0 && strstr(out, "held 2 checkpoint(s) after step 2") && strstr(out, "-y 1 resumes them"),
          "exit %d: %s", rc, out);
    free(out);
    snprintf(path, sizeof path, "%s/rb/earlier_run_1/latest", test_tmpdir());
    char *latest = read_text(path);
    CHECK(latest && strcmp(latest, "step_00000004\n") == 0, "the set-aside latest holds '%s', not step_00000004",
          latest ? latest : "(none)");
    free(latest);
}

TEST(a_resume_without_latest_continues_from_the_newest_complete_checkpoint) {
    /* the disk filled while latest was replaced: the step directory is whole, latest is gone and an
     * empty latest.tmp remains */
    char args[1200], cmd[2000], *out;
    const char *d = test_tmpdir();
    int rc = run_alter_resume("nl", "-x 4 -n 2", "rm %s/nl/latest && : > %s/nl/latest.tmp", "-x 5 -n 2", &out);
    REQUIRE(rc >= 0, "setting up");
    CHECK(rc == 0 && strstr(out, "nl/latest is missing") && strstr(out, "at step 4") && strstr(out, "step     5/5"),
          "exit %d: %s", rc, out);
    free(out);
    CHECK(exists("%s/%s", d, "nl/latest"), "the resumed run wrote no latest");
    /* a new run there names the earlier run's checkpoint rather than saying it wrote none */
    snprintf(cmd, sizeof cmd, "rm %s/nl/latest", d);
    REQUIRE(system(cmd) == 0, "removing latest");
    snprintf(args, sizeof args, RUN " -x 1 -i %s -o %s/nl", train_shard(), d);
    rc = run_train(args, &out);
    CHECK(rc == 0 && strstr(out, "held an earlier run (latest checkpoint step_00000005)"), "exit %d: %s", rc, out);
    free(out);
}

TEST(a_latest_that_cannot_be_written_names_the_complete_checkpoint_a_resume_takes) {
    char args[1200], cmd[2000], *out = NULL;
    const char *d = test_tmpdir();
    snprintf(args, sizeof args, RUN " -x 2 -n 2 -i %s -o %s/lw", train_shard(), d);
    REQUIRE(run_train(args, &out) == 0, "first run failed: %s", out);
    free(out);
    /* latest.tmp cannot be created (a directory stands there): the step-4 checkpoint is whole */
    snprintf(cmd, sizeof cmd, "mkdir %s/lw/latest.tmp", d);
    REQUIRE(system(cmd) == 0, "%s", cmd);
    snprintf(args, sizeof args, RUN " -x 4 -n 2 -y 1 -i %s -o %s/lw", train_shard(), d);
    int rc = run_train(args, &out);
    CHECK(rc == 1 && strstr(out, "error: cannot update") && strstr(out, "checkpoint step_00000004 is complete") &&
              count_lines_holding(out, "error:") == 1,
          "exit %d: %s", rc, out);
    free(out);
    /* latest, which still named step 2, is gone, so that a resume takes step 4 */
    CHECK(!exists("%s/%s", d, "lw/latest"), "a stale latest was left naming an older checkpoint");
    snprintf(cmd, sizeof cmd, "rmdir %s/lw/latest.tmp", d);
    REQUIRE(system(cmd) == 0, "%s", cmd);
    snprintf(args, sizeof args, RUN " -x 5 -n 2 -y 1 -i %s -o %s/lw", train_shard(), d);
    rc = run_train(args, &out);
    CHECK(rc == 0 && strstr(out, "at step 4") && strstr(out, "step     5/5"), "exit %d: %s", rc, out);
    free(out);
}

TEST(a_new_run_beside_an_earlier_one_without_checkpoints_does_not_offer_to_continue_it) {
    char args[1200], path[800], *out = NULL;
    snprintf(path, sizeof path, "%s/n", test_tmpdir());
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/n/log.jsonl", test_tmpdir());
    FILE *f = fopen(path, "w");
    REQUIRE(f && fputs("{\"type\":\"step\",\"step\":1,\"loss\":4.0}\n", f) >= 0 && fclose(f) == 0, "writing %s", path);
    snprintf(args, sizeof args, RUN " -x 1 -i %s -o %s/n", train_shard(), test_tmpdir());
    int rc = run_train(args, &out);
    CHECK(rc == 0 && strstr(out, "held files of an earlier run that wrote no checkpoint; moved them to") &&
              !strstr(out, "-y 1 would have continued it"),
          "exit %d: %s", rc, out);
    free(out);
}

TEST(progress_lines_reach_a_redirected_stdout_as_they_happen) {
    /* a CPU-time limit kills the run (SIGXCPU) in its first steps: what it printed before must
     * already be out, not lost in a buffer */
    char args[1200], *out = NULL;
    snprintf(args, sizeof args, RUN " -x 100000 --val-every 0 -i %s -o %s/p", train_shard(), test_tmpdir());
    run_train_under("ulimit -t 1;", args, &out);
    CHECK(out && strstr(out, "model: L=2") && strstr(out, "total allocated"),
          "the start-up lines were lost with the process: '%s'", out ? out : "");
    free(out);
}

TEST(a_resume_keeps_the_records_of_its_step_that_it_will_not_write_again) {
    /* a run that ended at step 3: its last eval (at 3) is the resumed run's too unless it evaluates
     * at step 3 itself; a sample at 3 it writes again; a line cut short by a crash goes */
    char path[800], err[ERR_LEN];
    snprintf(path, sizeof path, "%s/log.jsonl", test_tmpdir());
    const char *before = "{\"type\":\"step\",\"step\":3,\"loss\":1.0}\n"
                         "{\"type\":\"eval\",\"step\":3,\"val_loss\":2.0}\n"
                         "{\"type\":\"sample\",\"step\":3,\"text\":\"a\"}\n"
                         "{\"type\":\"step\",\"step\":4,\"loss\":0.9}\n"
                         "{\"type\":\"eval\",\"step\":4,\"val_loss\":1.9}\n"
                         "{\"type\":\"step\",\"step\":5,\"lo";
    FILE *f = fopen(path, "w");
    REQUIRE(f && fputs(before, f) >= 0 && fclose(f) == 0, "writing %s", path);
    int cut_short = 0, again = 0;
    CHECK(runlog_trim_after(test_tmpdir(), 3, 0, 1, NULL, &cut_short, &again, err) == 3 && cut_short == 1 && again == 1,
          "trimming: %d line cut short, %d at step 3; %s", cut_short, again, err);
    char *after = read_text(path);
    CHECK(after && strcmp(after, "{\"type\":\"step\",\"step\":3,\"loss\":1.0}\n"
                                 "{\"type\":\"eval\",\"step\":3,\"val_loss\":2.0}\n") == 0,
          "the log after the trim:\n%s", after ? after : "");
    free(after);
    /* nothing left to trim: the file is not rewritten */
    CHECK(runlog_trim_after(test_tmpdir(), 3, 0, 1, NULL, &cut_short, NULL, err) == 0 && !cut_short,
          "a second trim moved records: %s", err);
}

TEST(a_resume_keeps_the_resume_records_of_its_timeline_only) {
    /* resumed at 2 and at 5, then resumed again from 4: the resume at 5 belongs to a timeline that is
     * gone, and the one from 4 writes its own */
    char path[800], err[ERR_LEN];
    snprintf(path, sizeof path, "%s/log.jsonl", test_tmpdir());
    const char *kept = "{\"type\":\"step\",\"step\":2,\"loss\":1.0}\n"
                       "{\"type\":\"resume\",\"step\":2,\"ranks\":2,\"ranks_before\":1,\"changed\":\"\"}\n"
                       "{\"type\":\"step\",\"step\":4,\"loss\":0.9}\n";
    char before[1000];
    snprintf(before, sizeof before, "%s%s", kept,
             "{\"type\":\"step\",\"step\":5,\"loss\":0.8}\n"
             "{\"type\":\"resume\",\"step\":5,\"ranks\":2,\"ranks_before\":2,\"changed\":\"-l/--lr 0.1 -> 0.2\"}\n"
             "{\"type\":\"step\",\"step\":6,\"loss\":0.7}\n");
    FILE *f = fopen(path, "w");
    REQUIRE(f && fputs(before, f) >= 0 && fclose(f) == 0, "writing %s", path);
    CHECK(runlog_trim_after(test_tmpdir(), 4, 0, 0, NULL, NULL, NULL, err) == 3, "trimming: %s", err);
    char *after = read_text(path);
    CHECK(after && strcmp(after, kept) == 0, "the log after the trim:\n%s", after ? after : "");
    free(after);
    /* a resume from 2 itself drops the resume at 2: the new one is written in its place */
    CHECK(runlog_trim_after(test_tmpdir(), 2, 0, 0, NULL, NULL, NULL, err) == 2, "trimming at 2: %s", err);
    after = read_text(path);
    CHECK(after && strcmp(after, "{\"type\":\"step\",\"step\":2,\"loss\":1.0}\n") == 0, "the log after the trim at 2:\n%s",
          after ? after : "");
    free(after);
}

TEST(a_non_finite_validation_loss_is_logged_as_null_so_the_log_stays_json) {
    /* JSON has no NaN: a line holding nan would be refused by the next resume */
    char err[ERR_LEN];
    RunLog log;
    REQUIRE(runlog_open(&log, test_tmpdir(), err) == 0, "%s", err);
    CHECK(runlog_eval(&log, 4, NAN) == 0 &&
              runlog_step(&log, 5, 2.0f, INFINITY, 1.0f, 3.0, INFINITY, -1, -1, -1, 1.5, NULL) == 0,
          "writing: %s", log.err);
    runlog_close(&log);
    char path[800];
    snprintf(path, sizeof path, "%s/log.jsonl", test_tmpdir());
    char *text = read_text(path);
    CHECK(text && strcmp(text, "{\"type\":\"eval\",\"step\":4,\"val_loss\":null}\n"
                               "{\"type\":\"step\",\"step\":5,\"loss\":2.000000,\"lse\":1.500000,\"lr\":null,"
                               "\"grad_norm\":1.000000,"
                               "\"ms\":3.000,\"tokens_per_s\":null}\n") == 0,
          "the log:\n%s", text ? text : "");
    free(text);
    CHECK(runlog_trim_after(test_tmpdir(), 4, 0, 0, NULL, NULL, NULL, err) == 1, "the log refused on resume: %s", err);
}

TEST(a_resume_refuses_a_run_log_line_that_is_not_a_record_naming_its_line) {
    /* only the last line can be cut short by a crash (it has no newline yet); anything else that is
     * not a record was written by something else, and trimming around it would keep or drop it blindly */
    char path[800], err[ERR_LEN];
    snprintf(path, sizeof path, "%s/log.jsonl", test_tmpdir());
    const char *rec = "{\"type\":\"step\",\"step\":1,\"loss\":1.0}\n";
    const struct {
        const char *line, *msg;
    } cases[] = {
        {"garbage\n", "line 2 is not a run-log record (not JSON; delete or fix that line"},
        {"{\"type\":\"step\",\"step\":2,\"lo\n", "line 2 is not a run-log record (not JSON; delete or fix that line"},
        {"[1,2]\n", "line 2 is not a run-log record (an array, not an object;"},
        {"{\"type\":\"note\",\"step\":2}\n", "line 2 is not a run-log record (its type is not step, eval, sample or resume;"},
        {"{\"type\":\"eval\",\"step\":\"2\"}\n", "line 2 is not a run-log record (its step is not a count;"},
        {"\n", "line 2 is not a run-log record (not JSON; delete or fix that line"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        FILE *f = fopen(path, "w");
        REQUIRE(f && fputs(rec, f) >= 0 && fputs(cases[i].line, f) >= 0 && fputs(rec, f) >= 0 && fclose(f) == 0,
                "writing %s", path);
        err[0] = 0;
        CHECK(runlog_trim_after(test_tmpdir(), 1, 0, 0, NULL, NULL, NULL, err) == -1 && strstr(err, path) &&
                  strstr(err, cases[i].msg),
              "'%.30s': message '%s' lacks '%s'", cases[i].line, err, cases[i].msg);
        char *after = read_text(path);
        CHECK(after && strncmp(after, rec, strlen(rec)) == 0 && strstr(after, cases[i].line),
              "a refused log was changed:\n%s", after ? after : "");
        free(after);
    }
}

TEST(checkpoints_with_a_tokenizer_keep_it_through_pruning_and_a_rollback_at_the_longest_o) {
    /* a run with a tokenizer writes tokenizer.json and tokenizer_config.json into every checkpoint:
     * they fit below the longest -o, go with the checkpoints that pruning removes and with the
     * future a rollback moves aside */
    char prep[800], args[6000], run[FGPT_PATH_LEN], *out = NULL;
    const char *d = test_tmpdir();
    snprintf(prep, sizeof prep, "%s/tokprep", d);
    snprintf(args, sizeof args, "prepare -v 300 -o %s README.md", prep);
    REQUIRE(run_train(args, &out) == 0, "prepare: %s", out);
    free(out);
    size_t len = (size_t)snprintf(run, sizeof run, "%s/longtok", d);
    /* folders of at most 200 bytes that make the path exactly CHECKPOINT_RUN_DIR_MAX bytes */
    const size_t total = CHECKPOINT_RUN_DIR_MAX - len, n = (total + 200) / 201;
    for (size_t i = 0; i < n; i++) {
        size_t part = (total - n) / n + (i < (total - n) % n);
        run[len++] = '/';
        memset(run + len, 'k', part);
        len += part;
    }
    run[len] = 0;
    REQUIRE(len == CHECKPOINT_RUN_DIR_MAX, "the run directory is %zu bytes", len);
    const char *flags = "--device cpu -e tiny -v 300 -b 2 -t 32 -s 0 --val-every 0 --keep-checkpoints 2";
    snprintf(args, sizeof args, "%s -x 4 -n 1 -i %s/train.bin --tokenizer %s/tokenizer.bin -o %s", flags, prep, prep,
             run);
    int rc = run_train(args, &out);
    REQUIRE(rc == 0, "a run at a %zu-byte -o failed (%d): %.300s", len, rc, out);
    free(out);
    CHECK(exists("%s/%s", run, "step_00000004/tokenizer.json") && exists("%s/%s", run, "step_00000004/tokenizer_config.json"),
          "the checkpoint lacks its tokenizer files");
    CHECK(!exists("%s/%s", run, "step_00000001") && !exists("%s/%s", run, "step_00000002"),
          "a pruned checkpoint with tokenizer files was not removed whole");
    /* roll back to step 3: step 4 moves aside with its tokenizer files, and is written anew */
    char latest[FGPT_PATH_LEN];
    REQUIRE(path_format(latest, "%s/latest", run) == 0, "latest's path");
    FILE *f = fopen(latest, "w");
    REQUIRE(f && fputs("step_00000003\n", f) >= 0 && fclose(f) == 0, "rewriting latest");
    snprintf(args, sizeof args, "%s -x 4 -n 1 -y 1 -i %s/train.bin --tokenizer %s/tokenizer.bin -o %s", flags, prep,
             prep, run);
    rc = run_train(args, &out);
    CHECK(rc == 0 && out && strstr(out, "held 1 checkpoint(s) after step 3"), "the resume (%d): %.300s", rc, out);
    free(out);
    CHECK(exists("%s/%s", run, "earlier_run_1/step_00000004/tokenizer_config.json") &&
              exists("%s/%s", run, "step_00000004/tokenizer_config.json"),
          "the set-aside or the new step 4 lacks its tokenizer files");
}

/* A tokenizer.json with a chat_template.jinja beside it (where transformers now saves a chat
 * template) hands the template on: every checkpoint carries it byte for byte, so that transformers
 * loading the checkpoint renders conversations as the model's own tokenizer does. */
TEST(a_chat_template_beside_the_tokenizer_goes_into_every_checkpoint) {
    char dir[800], path[900], args[3000], *out = NULL;
    snprintf(dir, sizeof dir, "%s/chat_tok", test_tmpdir());
    REQUIRE(mkdir(dir, 0755) == 0, "%s", dir);
    snprintf(args, sizeof args, "cp tests/fixtures/hf_llama3_bos.json %s/tokenizer.json", dir);
    REQUIRE(system(args) == 0, "%s", args);
    const char *tpl = "{{ bos_token }}{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}\n";
    snprintf(path, sizeof path, "%s/chat_template.jinja", dir);
    FILE *f = fopen(path, "w");
    REQUIRE(f && fputs(tpl, f) >= 0 && fclose(f) == 0, "%s", path);
    snprintf(path, sizeof path, "%s/pattern.bin", dir);
    REQUIRE(write_pattern_shard(path, 4000, 700, 1) == 0, "%s", path);
    snprintf(args, sizeof args, "--device cpu -e tiny -v 700 -b 2 -t 32 -x 2 -n 1 -s 0 --val-every 0 "
             "-i %s --tokenizer %s/tokenizer.json -o %s/run", path, dir, dir);
    const int rc = run_train(args, &out);
    REQUIRE(rc == 0, "(%d) %.400s", rc, out);
    free(out);
    for (int step = 1; step <= 2; step++) {
        snprintf(path, sizeof path, "%s/run/step_%08d/chat_template.jinja", dir, step);
        char *got = read_text(path);
        CHECK(got && !strcmp(got, tpl), "step %d's chat_template.jinja: '%s'", step, got ? got : "(none)");
        free(got);
    }
}

/* A new run whose earlier run cannot be set aside whole moves none of it: a failed move puts back
 * what had moved, so that the folder still resumes as it did. The failure here: an entry whose path
 * fits the run's folder but not earlier_run_1 inside it. */
TEST(an_earlier_run_that_cannot_be_set_aside_whole_is_left_as_it_was) {
    char dir[FGPT_PATH_LEN], args[FGPT_PATH_LEN + 200], name[FGPT_PATH_LEN], *out = NULL;
    int len = snprintf(dir, sizeof dir, "%s/deep", test_tmpdir());
    REQUIRE(mkdir(dir, 0755) == 0, "%s", dir);
    while (len < FGPT_PATH_LEN - 254 - 250) { /* folders of 200 characters up to 254 short of the limit */
        len += snprintf(dir + len, sizeof dir - len, "/%0200d", 0);
        REQUIRE(mkdir(dir, 0755) == 0, "%s", dir);
    }
    len += snprintf(dir + len, sizeof dir - len, "/%0*d", FGPT_PATH_LEN - 254 - len - 1, 0);
    REQUIRE(mkdir(dir, 0755) == 0 && len == FGPT_PATH_LEN - 254, "%d", len);
    snprintf(args, sizeof args, RUN " -x 2 --val-every 0 -i %s -o %s", train_shard(), dir);
    REQUIRE(run_train(args, &out) == 0, "%s", out);
    free(out);
    /* dir + "/" + 245 characters fits; dir + "/earlier_run_1/" + 245 does not */
    snprintf(name, sizeof name, "%s/step_%0240d", dir, 0);
    FILE *f = fopen(name, "w");
    REQUIRE(f && fclose(f) == 0, "%s", name);
    const int rc = run_train(args, &out);
    /* (the message's end, past the long paths, is cut at the error length) */
    CHECK(rc == 1 && out && strstr(out, "error: cannot move "), "(%d) %.300s", rc, out ? out : "");
    free(out);
    char path[FGPT_PATH_LEN + 32];
    snprintf(path, sizeof path, "%s/earlier_run_1", dir);
    CHECK(access(path, F_OK) != 0, "earlier_run_1 was left behind");
    /* moves go in the order of the names: latest and log.jsonl had moved when the long name failed */
    snprintf(path, sizeof path, "%s/latest", dir);
    CHECK(access(path, F_OK) == 0, "latest did not come back");
    snprintf(path, sizeof path, "%s/log.jsonl", dir);
    CHECK(access(path, F_OK) == 0, "the log did not come back");
    snprintf(path, sizeof path, "%s/step_00000002/state.bin", dir);
    CHECK(access(path, F_OK) == 0, "the checkpoint did not come back");
    CHECK(access(name, F_OK) == 0, "the long-named entry moved");
}

/* -y auto, for a job a scheduler may start again: the first start finds nothing and trains from step
 * 0 (from --init-from's weights when given), the next resumes where it stopped and ends as one run
 * would; a damaged checkpoint is named, never set aside for a new run. */
TEST(a_requeued_job_with_y_auto_starts_anew_then_resumes_and_names_a_damaged_checkpoint) {
    char args[1600], a[900], b[900], *out = NULL;
    const char *d = test_tmpdir();
    snprintf(args, sizeof args, RUN " -x 6 -n 2 -i %s -o %s/straight", train_shard(), d);
    REQUIRE(run_train(args, &out) == 0, "the uninterrupted run: %s", out);
    free(out);
    snprintf(args, sizeof args, RUN " -x 4 -n 2 -y auto -i %s -o %s/auto", train_shard(), d);
    int rc = run_train(args, &out);
    CHECK(rc == 0 && strstr(out, "auto holds no checkpoint to resume (-y auto): a new run") && strstr(out, "step     4/4"),
          "the first start: exit %d: %s", rc, out);
    free(out);
    snprintf(args, sizeof args, RUN " -x 6 -n 2 -y auto -i %s -o %s/auto", train_shard(), d);
    rc = run_train(args, &out);
    CHECK(rc == 0 && strstr(out, "at step 4") && strstr(out, "step     6/6") && !strstr(out, "a new run"),
          "the second start: exit %d: %s", rc, out);
    free(out);
    snprintf(a, sizeof a, "%s/straight/step_00000006/model.safetensors", d);
    snprintf(b, sizeof b, "%s/auto/step_00000006/model.safetensors", d);
    size_t na = 0, nb = 0;
    char *wa = read_file(a, &na), *wb = read_file(b, &nb);
    CHECK(wa && wb && na == nb && memcmp(wa, wb, na) == 0, "the resumed run's weights are not the uninterrupted run's");
    free(wa);
    free(wb);

    /* fine-tuning: --init-from's weights on the first start, the run's own checkpoint after */
    snprintf(args, sizeof args, RUN " -x 2 -n 2 -y auto --init-from %s/straight/step_00000006 -i %s -o %s/ft", d,
             train_shard(), d);
    rc = run_train(args, &out);
    CHECK(rc == 0 && strstr(out, "init: weights from") && strstr(out, "a new run"), "fine-tuning: exit %d: %s", rc, out);
    free(out);
    snprintf(args, sizeof args, RUN " -x 3 -n 2 -y auto --init-from %s/straight/step_00000006 -i %s -o %s/ft", d,
             train_shard(), d);
    rc = run_train(args, &out);
    CHECK(rc == 0 && strstr(out, "at step 2") && strstr(out, "is not read") && !strstr(out, "init: weights from"),
          "fine-tuning resumed: exit %d: %s", rc, out);
    free(out);

    /* the only checkpoint damaged and no latest: named, and left where it is */
    char cmd[2400];
    snprintf(cmd, sizeof cmd, "mkdir -p %s/dmg && cp -r %s/straight/step_00000006 %s/dmg/ && : > %s/dmg/step_00000006/state.bin",
             d, d, d, d);
    REQUIRE(system(cmd) == 0, "%s", cmd);
    snprintf(args, sizeof args, RUN " -x 8 -y auto -i %s -o %s/dmg", train_shard(), d);
    rc = run_train(args, &out);
    CHECK(rc == 1 && strstr(out, "every step_* checkpoint there is incomplete or damaged") && !strstr(out, "(-y auto): a new run"),
          "a damaged checkpoint: exit %d: %s", rc, out);
    free(out);
    CHECK(exists("%s/%s", d, "dmg/step_00000006/config.json"), "the damaged checkpoint was moved");
}

/* A resume whose checkpoint's config.json is damaged says so before anything else: the flags then
 * give the shape (here they match, and the run goes on), and the error a mismatch would bring names
 * a flag, not the file. */
TEST(a_resume_names_a_damaged_config_json_before_asking_the_flags) {
    char *out = NULL;
    int rc = run_alter_resume("cfg", "-x 2 -n 2", "echo '{' > %s/cfg/step_00000002/config.json", "-x 3", &out);
    REQUIRE(rc >= 0, "setting up");
    CHECK(rc == 0 && strstr(out, "note: the resumed checkpoint's config.json does not read (") &&
              strstr(out, "config.json is not valid JSON") && strstr(out, "step     3/3"),
          "exit %d: %s", rc, out);
    free(out);
}
