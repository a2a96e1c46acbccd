/* model/train/checkpoint_writer.c - a checkpoint written by a thread of its own (checkpoint_writer.h). */
#include "model/train/checkpoint_writer.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double seconds_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The writer whose write may be in flight when the process calls exit() (a CUDA error, a shard
 * changed under the run): exit waits for it, so that the checkpoint lands whole rather than being
 * cut short with the process, and says which it was. Set and cleared on the thread that starts and
 * waits; atexit handlers run on the thread that exits, before stdio is flushed and closed. */
static CheckpointWriter *g_writer;

static void wait_at_exit(void) {
    CheckpointWriter *w = g_writer;
    if (!w || !w->pending) return;
    pthread_join(w->thread, NULL);
    w->pending = 0;
    if (w->rc == 0)
        printf("checkpoint: %s/step_%08d (written before the exit)\n", w->run_dir, w->st.step);
    else
        fprintf(stderr, "error: %s\n", w->err);
}

static void *write_checkpoint(void *arg) {
    CheckpointWriter *w = arg;
    const double t0 = seconds_now();
    w->rc = checkpoint_save_with(w->run_dir, w->t, w->params, w->m, w->v, &w->st, w->tok, w->keep, w->err);
    w->seconds = seconds_now() - t0;
    atomic_store(&w->done, 1);
    return NULL;
}

int checkpoint_writer_start(CheckpointWriter *w, const char *run_dir, const ParamTable *t, const float *params,
                            const float *m, const float *v, const TrainState *st, const CheckpointTokenizer *tok,
                            int keep, char *err) {
    if (w->pending) {
        snprintf(err, ERR_LEN, "internal: a checkpoint write started while the one of step %d was pending",
                 w->st.step);
        return -1;
    }
    if (snprintf(w->run_dir, sizeof w->run_dir, "%s", run_dir) >= (int)sizeof w->run_dir) {
        snprintf(err, ERR_LEN, "the run directory %.64s... is longer than %d bytes: pass a shorter -o", run_dir,
                 FGPT_PATH_LEN - 1);
        return -1;
    }
    w->t = t, w->params = params, w->m = m, w->v = v, w->st = *st, w->tok = tok, w->keep = keep;
    w->rc = -1, w->seconds = 0, w->err[0] = '\0';
    atomic_store(&w->done, 0);
    /* a thread inherits its creator's signal mask: block the stop signals around the creation, so
     * that they reach the training thread (whose handler asks for the stop) and never interrupt a
     * write's system calls */
    sigset_t stops, before;
    sigemptyset(&stops);
    sigaddset(&stops, SIGINT);
    sigaddset(&stops, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stops, &before);
    const int rc = pthread_create(&w->thread, NULL, write_checkpoint, w);
    pthread_sigmask(SIG_SETMASK, &before, NULL);
    if (rc != 0) {
        snprintf(err, ERR_LEN, "cannot start the checkpoint writer thread: %s", strerror(rc));
        return -1;
    }
    w->pending = 1;
    static int wait_registered;
    if (!wait_registered) wait_registered = atexit(wait_at_exit) == 0;
    g_writer = w;
    return 0;
}

int checkpoint_writer_finished(const CheckpointWriter *w) {
    return w->pending && atomic_load(&w->done);
}

int checkpoint_writer_wait(CheckpointWriter *w, int *step, double *seconds, char *err) {
    if (!w->pending) return 1;
    pthread_join(w->thread, NULL);
    w->pending = 0;
    *step = w->st.step;
    *seconds = w->seconds;
    if (w->rc != 0) {
        snprintf(err, ERR_LEN, "%s", w->err);
        return -1;
    }
    return 0;
}
