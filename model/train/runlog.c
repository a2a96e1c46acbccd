#include "model/train/runlog.h"
#include "common/err.h"
#include "common/json.h"
#include "common/paths.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int runlog_open(RunLog *log, const char *run_dir, char *err) {
    log->failed = 0;
    log->err[0] = 0;
    if (make_dirs(run_dir) != 0) {
        snprintf(err, ERR_LEN, "cannot create run directory %s: %s (check -o)", run_dir, strerror(errno));
        return -1;
    }
    if (path_format(log->path, "%s/log.jsonl", run_dir) != 0) {
        snprintf(err, ERR_LEN, "run directory %s is too long a path for its log (pass a shorter -o)", run_dir);
        return -1;
    }
    log->f = fopen(log->path, "a");
    if (!log->f) {
        snprintf(err, ERR_LEN, "cannot open %s for writing: %s (check -o)", log->path, strerror(errno));
        return -1;
    }
    return 0;
}

void runlog_close(RunLog *log) {
    if (log->f) fclose(log->f);
    log->f = NULL;
}

/* Ends a record: it reaches the disk at each line, so a crashed run still has its curve, and a
 * failed write is reported at the record that hit it. */
static int finish_record(RunLog *log) {
    if (fflush(log->f) == 0 && !ferror(log->f)) return 0;
    const int e = errno ? errno : EIO;
    if (!log->failed)
        snprintf(log->err, sizeof log->err, "cannot write the run log %s: %s (%s)", log->path, strerror(e),
                 write_error_hint(e));
    log->failed = 1;
    return -1;
}

/* ,"key":x in fmt, or null when x is not finite: JSON has no NaN or infinity (a validation loss can
 * be either), and a line that is not JSON would stop the next resume. */
static void put_number(FILE *f, const char *key, const char *fmt, double x) {
    fprintf(f, ",\"%s\":", key);
    if (isfinite(x))
        fprintf(f, fmt, x);
    else
        fputs("null", f);
}

int runlog_step(RunLog *log, int step, float loss, float lr, float grad_norm, double ms, double tokens_per_s,
                double mfu_percent, double gpu_memory_gb, double comm_wait_ms, double lse, const double *objective) {
    if (!log->f) return 0;
    if (log->failed) return -1;
    /* "loss" right after "step": dev/plots/plot_losses.sh reads the two together */
    fprintf(log->f, "{\"type\":\"step\",\"step\":%d", step);
    put_number(log->f, "loss", "%.6f", loss);
    if (objective) put_number(log->f, "objective", "%.6f", *objective);
    put_number(log->f, "lse", "%.6f", lse);
    put_number(log->f, "lr", "%.6e", lr);
    put_number(log->f, "grad_norm", "%.6f", grad_norm);
    put_number(log->f, "ms", "%.3f", ms);
    put_number(log->f, "tokens_per_s", "%.1f", tokens_per_s);
    if (mfu_percent >= 0) put_number(log->f, "mfu_percent", "%.2f", mfu_percent);
    if (gpu_memory_gb >= 0) put_number(log->f, "gpu_memory_gb", "%.3f", gpu_memory_gb);
    if (comm_wait_ms >= 0) put_number(log->f, "comm_wait_ms", "%.3f", comm_wait_ms);
    fprintf(log->f, "}\n");
    return finish_record(log);
}

int runlog_eval(RunLog *log, int step, float val_loss) {
    if (!log->f) return 0;
    if (log->failed) return -1;
    fprintf(log->f, "{\"type\":\"eval\",\"step\":%d", step);
    put_number(log->f, "val_loss", "%.6f", val_loss);
    fprintf(log->f, "}\n");
    return finish_record(log);
}

/* Bytes of the valid UTF-8 character at s (1 to 4), or 0 when the bytes there are not one: a
 * character cut short, a stray continuation byte, an overlong form, a surrogate, or above U+10FFFF. */
static int utf8_char_length(const unsigned char *s) {
    if (s[0] < 0x80) return 1;
    int n;
    uint32_t cp, min;
    if ((s[0] & 0xe0) == 0xc0)
        n = 2, cp = s[0] & 0x1f, min = 0x80;
    else if ((s[0] & 0xf0) == 0xe0)
        n = 3, cp = s[0] & 0x0f, min = 0x800;
    else if ((s[0] & 0xf8) == 0xf0)
        n = 4, cp = s[0] & 0x07, min = 0x10000;
    else
        return 0;
    for (int i = 1; i < n; i++) { /* the string's terminating 0 is no continuation byte, so this stops there */
        if ((s[i] & 0xc0) != 0x80) return 0;
        cp = cp << 6 | (s[i] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
    return n;
}

/* text as a JSON string, quotes included; a byte of no valid UTF-8 character as U+FFFD. */
static void put_string(FILE *f, const char *text) {
    fputc('"', f);
    for (const unsigned char *c = (const unsigned char *)text; *c;) {
        int n = utf8_char_length(c);
        if (n == 0) {
            fputs("\\ufffd", f);
            c++;
        } else if (*c == '"' || *c == '\\') {
            fprintf(f, "\\%c", *c++);
        } else if (*c < 0x20) {
            fprintf(f, "\\u%04x", *c++);
        } else {
            fwrite(c, 1, (size_t)n, f);
            c += n;
        }
    }
    fputc('"', f);
}

int runlog_sample(RunLog *log, int step, const char *text) {
    if (!log->f) return 0;
    if (log->failed) return -1;
    fprintf(log->f, "{\"type\":\"sample\",\"step\":%d,\"text\":", step);
    put_string(log->f, text);
    fprintf(log->f, "}\n");
    return finish_record(log);
}

int runlog_resume(RunLog *log, int step, int ranks, int ranks_before, const char *changed) {
    if (!log->f) return 0;
    if (log->failed) return -1;
    fprintf(log->f, "{\"type\":\"resume\",\"step\":%d,\"ranks\":%d,\"ranks_before\":%d,\"changed\":", step, ranks,
            ranks_before);
    put_string(log->f, changed);
    fprintf(log->f, "}\n");
    return finish_record(log);
}

/* Which records of the earlier timeline a resume from the checkpoint of step `step` keeps. */
typedef struct {
    int step, eval_again, sample_again;
} Resume;

/* Whether a record of `type` at `step` belongs to the timeline up to the checkpoint. */
static int before_checkpoint(const char *type, long long at, const Resume *r) {
    /* a step record is written at the end of its step; eval and sample records of step k at the
     * start of step k + 1, after the checkpoint of step k (or, for the last eval and sample, after
     * the loop) */
    if (strcmp(type, "step") == 0) return at <= r->step;
    /* a resume from step k is written when the steps after k begin: the resume from here writes its own */
    if (strcmp(type, "resume") == 0) return at < r->step;
    if (at != r->step) return at < r->step;
    return strcmp(type, "eval") == 0 ? !r->eval_again : !r->sample_again;
}

/* Whether a line of the log (its newline included) stays in the log of the resume: 1 or 0, or -1
 * with what is wrong in why (ERR_LEN bytes) when it is not a record. Only the last line can lack its
 * newline: a crash cut it short (a record reaches the file whole only with its newline), and it
 * goes. Any other line that is not a record this file writes is refused rather than kept or dropped
 * blindly: the log's timeline could not be told from it. */
static int line_stays(const char *line, size_t len, const Resume *r, int *at_step, char *why) {
    *at_step = 0;
    if (line[len - 1] != '\n') return 0;
    char jerr[ERR_LEN];
    JsonValue *v = json_parse(line, len, "the line", jerr);
    const char *type = v ? json_string(json_get(v, "type")) : NULL;
    long long at = 0;
    int stays = -1;
    if (!v)
        snprintf(why, ERR_LEN, "not JSON");
    else if (v->type != JSON_OBJECT)
        snprintf(why, ERR_LEN, "%s, not an object", json_type_name(v->type));
    else if (!type || (strcmp(type, "step") && strcmp(type, "eval") && strcmp(type, "sample") && strcmp(type, "resume")))
        snprintf(why, ERR_LEN, "its type is not step, eval, sample or resume");
    else if (!json_int(json_get(v, "step"), 0, INT32_MAX, &at))
        snprintf(why, ERR_LEN, "its step is not a count");
    else
        stays = before_checkpoint(type, at, r), *at_step = at == r->step;
    json_free(v);
    return stays;
}

/* fsync of the directory that holds path, so that a rename in it survives a power loss. */
static int sync_parent(const char *path) {
    char dir[FGPT_PATH_LEN];
    if (path_format(dir, "%s", path) != 0) return 0;
    char *slash = strrchr(dir, '/');
    if (slash) *slash = 0;
    int fd = open(slash ? dir : ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return 0;
    int ok = fsync(fd) == 0;
    return close(fd) == 0 && ok;
}

int runlog_trim_after(const char *run_dir, int step, int eval_again, int sample_again, const char *moved_log,
                      int *cut_short, int *written_again, char *err) {
    const Resume r = {step, eval_again, sample_again};
    if (cut_short) *cut_short = 0;
    if (written_again) *written_again = 0;
    char path[FGPT_PATH_LEN], tmp[FGPT_PATH_LEN];
    if (path_format(path, "%s/log.jsonl", run_dir) != 0 || path_format(tmp, "%s.tmp", path) != 0) {
        snprintf(err, ERR_LEN, "run directory %s is too long a path for its log (pass a shorter -o)", run_dir);
        return -1;
    }
    struct stat sb;
    if (stat(path, &sb) == 0 && !S_ISREG(sb.st_mode)) { /* fopen takes a folder; its reads fail as "I/O error" */
        snprintf(err, ERR_LEN, "%s is not a file (a run's log is): move it out of the run directory", path);
        return -1;
    }
    FILE *in = fopen(path, "r");
    if (!in) {
        if (errno == ENOENT) return 0;
        snprintf(err, ERR_LEN, "cannot read %s: %s", path, strerror(errno));
        return -1;
    }
    /* a first pass decides whether anything leaves, so that a log that needs nothing is not rewritten */
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int leaving = 0, stays = 1, torn = 0, again = 0, at_step;
    long long number = 0;
    char why[ERR_LEN];
    while (stays >= 0 && (len = getline(&line, &cap, in)) > 0) {
        number++;
        stays = line_stays(line, (size_t)len, &r, &at_step, why);
        leaving += stays == 0;
        again += stays == 0 && at_step;
        torn = line[len - 1] != '\n'; /* only the last line can lack its newline */
    }
    if (stays < 0) {
        snprintf(err, ERR_LEN, "%s line %lld is not a run-log record (%s; delete or fix that line, then resume again)",
                 path, number, why);
        free(line);
        fclose(in);
        return -1;
    }
    if (leaving == 0 || ferror(in)) {
        int bad = ferror(in);
        free(line);
        fclose(in);
        if (bad) snprintf(err, ERR_LEN, "cannot read %s (I/O error)", path);
        return bad ? -1 : 0;
    }
    rewind(in);
    FILE *out = create_new_file(tmp), *moved = moved_log ? fopen(moved_log, "a") : NULL;
    int ok = out && (!moved_log || moved);
    while (ok && (len = getline(&line, &cap, in)) > 0) {
        int keep = line_stays(line, (size_t)len, &r, &at_step, why);
        if (keep < 0) /* the file changed since the first pass */
            ok = 0;
        else if (keep)
            ok = fwrite(line, 1, (size_t)len, out) == (size_t)len;
        else if (moved && line[len - 1] == '\n')
            ok = fwrite(line, 1, (size_t)len, moved) == (size_t)len;
    }
    ok = ok && !ferror(in);
    free(line);
    fclose(in);
    if (moved) ok = (fflush(moved) == 0 && fsync(fileno(moved)) == 0) & (fclose(moved) == 0) && ok;
    if (out) ok = (fflush(out) == 0 && fsync(fileno(out)) == 0) & (fclose(out) == 0) && ok;
    if (!ok || rename(tmp, path) != 0 || !sync_parent(path)) {
        const int e = errno;
        snprintf(err, ERR_LEN, "cannot rewrite %s without the records after step %d: %s (%s)", path, step,
                 strerror(e), write_error_hint(e));
        unlink(tmp);
        return -1;
    }
    if (cut_short) *cut_short = torn;
    if (written_again) *written_again = again;
    return leaving - torn;
}
