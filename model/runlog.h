/* model/runlog.h - the machine-readable run log: one JSON object per line in <run>/log.jsonl,
 * {"type":"step",...}, {"type":"eval",...}, {"type":"sample",...}. Plot scripts read it. */
#ifndef FUSEDGPT_RUNLOG_H
#define FUSEDGPT_RUNLOG_H

#include <stdio.h>

typedef struct {
    FILE *f;
} RunLog;

/* Opens <run_dir>/log.jsonl for appending: a resumed run continues the same log (a new run found
 * an earlier run's log set aside, checkpoint_set_aside_run). 0 or -1+err. */
int runlog_open(RunLog *log, const char *run_dir, char *err);
void runlog_close(RunLog *log);
/* mfu_percent, gpu_memory_gb and comm_wait_ms < 0 are left out (the CPU backend has no GPU; one
 * rank does not communicate). */
void runlog_step(RunLog *log, int step, float loss, float lr, float grad_norm, double ms, double tokens_per_s,
                 double mfu_percent, double gpu_memory_gb, double comm_wait_ms);
void runlog_eval(RunLog *log, int step, float val_loss);
/* text is escaped as a JSON string. */
void runlog_sample(RunLog *log, int step, const char *text);

#endif
