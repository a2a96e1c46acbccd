#include "model/runlog.h"
#include "data/paths.h"

#include <errno.h>
#include <string.h>
#include <sys/stat.h>

int runlog_open(RunLog *log, const char *run_dir, char *err) {
    char path[1100];
    if (make_dirs(run_dir) != 0) {
        snprintf(err, 512, "cannot create run directory %s: %s (check -o)", run_dir, strerror(errno));
        return -1;
    }
    snprintf(path, sizeof path, "%s/log.jsonl", run_dir);
    log->f = fopen(path, "a");
    if (!log->f) {
        snprintf(err, 512, "cannot open %s for writing: %s (check -o)", path, strerror(errno));
        return -1;
    }
    return 0;
}

void runlog_close(RunLog *log) {
    if (log->f) fclose(log->f);
    log->f = NULL;
}

/* Records reach the disk at each line, so a crashed run still has its curve. */
void runlog_step(RunLog *log, int step, float loss, float lr, float grad_norm, double ms, double tokens_per_s,
                 double mfu_percent, double gpu_memory_gb, double comm_wait_ms) {
    if (!log->f) return; /* ranks other than 0 keep no log */
    fprintf(log->f,
            "{\"type\":\"step\",\"step\":%d,\"loss\":%.6f,\"lr\":%.6e,\"grad_norm\":%.6f,\"ms\":%.3f,"
            "\"tokens_per_s\":%.1f",
            step, loss, lr, grad_norm, ms, tokens_per_s);
    if (mfu_percent >= 0) fprintf(log->f, ",\"mfu_percent\":%.2f", mfu_percent);
    if (gpu_memory_gb >= 0) fprintf(log->f, ",\"gpu_memory_gb\":%.3f", gpu_memory_gb);
    if (comm_wait_ms >= 0) fprintf(log->f, ",\"comm_wait_ms\":%.3f", comm_wait_ms);
    fprintf(log->f, "}\n");
    fflush(log->f);
}

void runlog_eval(RunLog *log, int step, float val_loss) {
    if (!log->f) return; /* ranks other than 0 keep no log */
    fprintf(log->f, "{\"type\":\"eval\",\"step\":%d,\"val_loss\":%.6f}\n", step, val_loss);
    fflush(log->f);
}

void runlog_sample(RunLog *log, int step, const char *text) {
    if (!log->f) return; /* ranks other than 0 keep no log */
    fprintf(log->f, "{\"type\":\"sample\",\"step\":%d,\"text\":\"", step);
    for (const unsigned char *c = (const unsigned char *)text; *c; c++) {
        if (*c == '"' || *c == '\\')
            fprintf(log->f, "\\%c", *c);
        else if (*c < 0x20)
            fprintf(log->f, "\\u%04x", *c);
        else
            fputc(*c, log->f);
    }
    fprintf(log->f, "\"}\n");
    fflush(log->f);
}
