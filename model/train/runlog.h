/* model/train/runlog.h - the machine-readable run log: one JSON object per line in <run>/log.jsonl,
 * {"type":"step",...}, {"type":"eval",...}, {"type":"sample",...}, {"type":"resume",...}. Plot
 * scripts read it.
 *
 * Every line is valid JSON in valid UTF-8 (a number that is not finite is written null), and the
 * log holds one timeline: a resumed run first
 * drops (or moves aside) the records written after the checkpoint it resumes from. A write that
 * fails (a full disk) is never silent: it makes that call and every later one return -1. */
#ifndef FUSEDGPT_RUNLOG_H
#define FUSEDGPT_RUNLOG_H

#include <stdio.h>

#include "common/err.h"
#include "common/paths.h"

typedef struct {
    FILE *f;
    char path[FGPT_PATH_LEN];
    int failed;   /* a write failed: err says which and why */
    char err[ERR_LEN];
} RunLog;

/* Opens <run_dir>/log.jsonl for appending: a resumed run continues the same log (a new run found
 * an earlier run's log set aside, checkpoint_set_aside_run). 0 or -1+err. */
int runlog_open(RunLog *log, const char *run_dir, char *err);
void runlog_close(RunLog *log);

/* Each writes one record and returns 0, or -1 (with log->err) when this or an earlier write failed.
 * Ranks other than 0 keep no log: with no file open they return 0.
 * mfu_percent, gpu_memory_gb and comm_wait_ms < 0 are left out (the CPU backend has no GPU; one
 * rank does not communicate). */
/* loss is the cross-entropy, lse the mean log-sum-exp of the logits; objective (NULL: none, the
 * loss is the objective) what the gradients are of when the loss options add to it. */
int runlog_step(RunLog *log, int step, float loss, float lr, float grad_norm, double ms, double tokens_per_s,
                double mfu_percent, double gpu_memory_gb, double comm_wait_ms, double lse, const double *objective);
int runlog_eval(RunLog *log, int step, float val_loss);
/* text is any bytes (a sample can end inside a character): it is written as a JSON string, with
 * each byte that does not belong to a valid UTF-8 character written as U+FFFD. */
int runlog_sample(RunLog *log, int step, const char *text);
/* A resume from the checkpoint of `step`, on `ranks` ranks (the checkpoint's run had ranks_before);
 * changed: what the resume changed, as its notes say it ("-l/--lr 0.0006 -> 0.0003, ..."), or "". */
int runlog_resume(RunLog *log, int step, int ranks, int ranks_before, const char *changed);

/* For a run resumed from the checkpoint of step `step`: rewrites <run_dir>/log.jsonl (by rename, so
 * a crash leaves the old one) without the records that came after that checkpoint in the earlier
 * timeline: step records above `step`, eval and sample records above it, resume records at it or
 * above (the resume writes its own), eval and sample records at `step` itself
 * that the resumed run writes again (eval_again, sample_again: its schedule has one there), and a
 * last line cut short by a crash (*cut_short: 1 when there was one, which is dropped). With moved_log
 * the records are appended to that file, else dropped. How many whole records left the log (0 and
 * no line cut short: the file is untouched; *written_again of them were at `step` itself), or -1
 * with a message in err; any other line that is not a record is such an error, naming the file and
 * the line, and the file is untouched. cut_short and written_again may be NULL. */
int runlog_trim_after(const char *run_dir, int step, int eval_again, int sample_again, const char *moved_log,
                      int *cut_short, int *written_again, char *err);

#endif
