/* model/train/checkpoint_writer.h - a checkpoint written by a thread of its own while training goes on.
 *
 * Writing a checkpoint (its checksum, state.bin, model.safetensors, fsync) takes seconds per GB,
 * and the GPU would sit idle through all of it. The run copies the state into its host buffers
 * (CheckpointBuffers) at the step boundary, hands them to this writer, and trains on; the next save
 * waits for the write before it reuses the buffers. The checkpoint itself is checkpoint_save_with's:
 * written under a .tmp name and renamed when whole, so a run that ends mid-write leaves the previous
 * checkpoint as `latest`. A process that calls exit() with a write in flight waits for it first (an
 * atexit handler); one killed, or ended by _exit, leaves it unfinished. */
#ifndef FUSEDGPT_CHECKPOINT_WRITER_H
#define FUSEDGPT_CHECKPOINT_WRITER_H

#include <pthread.h>
#include <stdatomic.h>

#include "common/err.h"
#include "model/train/checkpoint.h"

typedef struct {
    /* the write in flight: what checkpoint_save_with is given (the arrays and *t, *tok are the
     * caller's and must stay unchanged until checkpoint_writer_wait) */
    char run_dir[FGPT_PATH_LEN];
    const ParamTable *t;
    const float *params, *m, *v;
    TrainState st;
    const CheckpointTokenizer *tok;
    int keep;
    pthread_t thread;
    int pending;      /* started and not yet waited for */
    atomic_int done;  /* set by the thread as its last act */
    /* its outcome, read after the join */
    int rc;
    double seconds;
    char err[ERR_LEN];
} CheckpointWriter;

/* Starts writing the checkpoint of st->step from params, m, v (table layout, fp32) on a thread that
 * blocks SIGINT and SIGTERM (the run's stop requests stay with the thread that acts on them).
 * A write still pending must have been waited for. 0 when the thread runs; -1 with a message in
 * err when it could not start (the caller may then write in its own thread). */
int checkpoint_writer_start(CheckpointWriter *w, const char *run_dir, const ParamTable *t, const float *params,
                            const float *m, const float *v, const TrainState *st, const CheckpointTokenizer *tok,
                            int keep, char *err);

/* Whether a started write has finished (waiting for it then returns at once). */
int checkpoint_writer_finished(const CheckpointWriter *w);

/* Waits for the pending write: 0 when it is whole on disk (*step its step, *seconds how long it
 * took), -1 with checkpoint_save_with's message in err, 1 when none was pending. */
int checkpoint_writer_wait(CheckpointWriter *w, int *step, double *seconds, char *err);

#endif
