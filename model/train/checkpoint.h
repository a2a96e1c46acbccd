/* model/train/checkpoint.h - checkpoints a resumed run continues from bit for bit.
 *
 * A checkpoint is a directory <run>/step_NNNNNNNN/ holding
 *   model.safetensors  the weights named and oriented as the family's HF class (wte unpadded): F32,
 *                      or BF16 when every weight is a bf16 (--optimizer-state bf16)
 *   config.json        the family's HF config, so AutoModelForCausalLM.from_pretrained(dir) loads it
 *   state.bin          config, step, data position, RNG, and the master weights and AdamW m, v in our
 *                      table layout (resume reads only this file), with a checksum; each array fp32,
 *                      or bf16 when every value of it is one (all three under --optimizer-state bf16)
 *   tokenizer.json, tokenizer_config.json   the run's tokenizer in Hugging Face's format, when the
 *                      run has one (checkpoint_save_with), so AutoTokenizer loads it beside the model
 * It is written as step_NNNNNNNN.tmp/ and renamed when complete; then <run>/latest (the name of the
 * newest checkpoint) is replaced by rename, so a crash leaves the previous checkpoint intact. A crash
 * or a full disk between the two leaves no latest: a resume then takes the newest complete one. */
#ifndef FUSEDGPT_CHECKPOINT_H
#define FUSEDGPT_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "common/paths.h"
#include "model/gpt.h"
#include "model/train/schedule.h"

/* The longest run directory (-o) whose files all fit a path of FGPT_PATH_LEN bytes: the deepest
 * name a run writes below it is /step_NNNNNNNNNN.replaced/tokenizer_config.json (47 bytes). */
#define CHECKPOINT_RUN_DIR_MAX (FGPT_PATH_LEN - 64)

/* What a step optimizes besides the schedule (--weight-decay, --grad-clip, --optimizer-state, --z-loss,
 * --label-smoothing): a resume may change them, and then says which changed. recorded 0: a checkpoint
 * written before they were kept, whose values are unknown. */
typedef struct {
    int recorded;
    int bf16_state; /* --optimizer-state bf16 (a checkpoint of either loads under either) */
    float weight_decay, grad_clip, z_loss, label_smoothing;
} TrainSettings;

typedef struct {
    int step;                       /* optimizer steps completed */
    uint64_t loader_epoch, loader_position;
    uint64_t rng[4];
    int B, T, total_batch;          /* must match on resume: they decide the data order */
    int world;                      /* data-parallel ranks (the data position counts per rank) */
    uint64_t seed;
    uint64_t data_tokens, data_fingerprint; /* the training shard (Loader.fingerprint): a resume on other data
                                               is refused; 0 0: not recorded (not checked) */
    uint64_t val_tokens, val_fingerprint;   /* the validation shard: a resume with another one says so;
                                               0 0: no validation, or not recorded */
    LrSchedule schedule;            /* -x, --warmup, -l, --lr-final, --lr-schedule, --decay-steps: a resume
                                       with another one says what changed */
    TrainSettings settings;
    uint64_t checksum; /* set by checkpoint_load_latest: the state file's, which ranks compare */
    /* set by checkpoint_load_latest without latest: the newest checkpoint, when it did not load and an
     * older one did (-1: none passed over), and why */
    int passed_over_step;
    char passed_over_why[ERR_LEN];
} TrainState;

/* Host copies of the fp32 weights and AdamW moments in table layout: what checkpoint_save writes
 * from and checkpoint_load_latest reads into, 12 bytes per parameter. A run takes them before its
 * first step, so that it never trains for hours and then finds no memory to save what it learned. */
typedef struct {
    float *params, *m, *v;
} CheckpointBuffers;

size_t checkpoint_buffers_bytes(const ParamTable *t);
/* Allocates and touches (so that the memory is really there) the three arrays. 0, or -1 with a
 * message in err and nothing allocated. */
int checkpoint_buffers_alloc(CheckpointBuffers *b, const ParamTable *t, char *err);
void checkpoint_buffers_free(CheckpointBuffers *b);

/* 0 when every file of a run in run_dir fits the system's path limit, else -1 with a message naming
 * -o in err: a checked length up front, so that no path is ever cut to fit (a cut path names a file
 * outside the run directory). */
int checkpoint_run_dir_ok(const char *run_dir, char *err);

/* Writes a checkpoint of params/m/v (table layout, fp32) and st. Keeps it and the newest keep - 1
 * checkpoints of earlier steps, removes older ones (never one of a later step: see
 * prune_checkpoints). Returns 0, or -1 with a one-line message in err. */
int checkpoint_save(const char *run_dir, const ParamTable *t, const float *params, const float *m, const float *v,
                    const TrainState *st, int keep, char *err);

/* The run's tokenizer as Hugging Face files: their texts, and the ids config.json names as
 * bos_token_id (the token that opens a text) and eos_token_id (the separator: generate stops there). */
typedef struct {
    const char *tokenizer_json;
    size_t tokenizer_json_len;
    const char *tokenizer_config_json;
    const char *chat_template; /* chat_template.jinja's text (NULL: the tokenizer came with none) */
    size_t chat_template_len;
    int bos_token_id, eos_token_id;
} CheckpointTokenizer;

/* checkpoint_save, with the tokenizer files written into the checkpoint too (tok NULL: none). */
int checkpoint_save_with(const char *run_dir, const ParamTable *t, const float *params, const float *m,
                         const float *v, const TrainState *st, const CheckpointTokenizer *tok, int keep, char *err);

/* Removes the files a checkpoint writes from every unfinished checkpoint (step_N.tmp) a stopped run
 * left in run_dir, and those folders. 0, or -1 with err naming one that holds other files: caught
 * before training, not at the save that would need its name. */
int checkpoint_clear_leftovers(const char *run_dir, char *err);

/* A new run in a directory that holds an earlier run's files (latest, log.jsonl, step_* checkpoints)
 * moves them into <run_dir>/earlier_run_N (the first free N), so that nothing of the earlier run is
 * overwritten or pruned. 1 with that directory in moved_to, 0 when there was nothing to move
 * (or no directory yet), -1 with a message in err. */
int checkpoint_set_aside_run(const char *run_dir, char *moved_to, size_t size, char *err);

/* A resume from step `step` (latest rolled back by hand, or an older checkpoint named in latest)
 * moves the checkpoints of later steps, a future this run abandons, into <run_dir>/earlier_run_N
 * with a latest naming the newest whole one, so that they are neither pruned in place of this run's
 * checkpoints nor mixed into its timeline, and `-o <run_dir>/earlier_run_N -y 1` still resumes them
 * (*resumable 1; 0 when none of them is whole, and no latest is written). `damaged`: a step known
 * not to load (its checksum failed), never named there (-1: none). How many were moved (0: none, no
 * directory made), with that directory in moved_to, or -1 with a message in err. */
int checkpoint_set_aside_after(const char *run_dir, int step, int damaged, char *moved_to, size_t size,
                               int *resumable, char *err);

/* The newest step_NNNNNNNN directory in run_dir, whole or not: its step, or -1 when there is none. */
int checkpoint_newest_step(const char *run_dir);

/* The step of a checkpoint directory named step_NNNNNNNN exactly (no .tmp), or -1. */
int checkpoint_dir_step(const char *name);

/* The name (step_NNNNNNNN) of the checkpoint a resume continues from, into name (size bytes): the
 * one <run_dir>/latest holds (0), or, when latest is missing, the newest step directory whose
 * state.bin is whole (1). -1 with a message in err when there is none or latest is not such a name. */
int checkpoint_latest_name(const char *run_dir, char *name, size_t size, char *err);

/* Whether dir is a training run's directory (it has a latest file) rather than a checkpoint: then
 * its latest checkpoint's path (dir/step_NNNNNNNN, the placeholder itself when latest names none)
 * goes into path (FGPT_PATH_LEN bytes), for a message that points a flag expecting a checkpoint to
 * it. */
int checkpoint_is_run_dir(const char *dir, char *path);

/* Whether dir is a checkpoint (config.json beside model.safetensors or its index), where a flag
 * expecting a training run's directory was given one of its checkpoints. */
int checkpoint_is_checkpoint_dir(const char *dir);

/* The checkpoint directory that a command reading one (sample, eval) takes, into dir (FGPT_PATH_LEN
 * bytes): hf_dir when it is given (a Hugging Face directory, which messages name by its flag,
 * hf_flag), else run_dir's checkpoint of step `step`, or its latest when step < 0. config.json and
 * model.safetensors must be in it, so that a missing one is named with the flag that chose the
 * directory. The caller has checked that run_dir's files, or hf_dir's, fit the system's paths.
 * 0, or -1 with a one-line message in err. */
int checkpoint_dir_to_read(const char *run_dir, int step, const char *hf_dir, const char *hf_flag, char *dir,
                           char *err);

/* For the message of a run stopped by a failed write: "the last checkpoint (step_NNNNNNNN) is intact"
 * or "this run has no checkpoint yet", into buf (size bytes). */
void checkpoint_what_is_left(const char *run_dir, char *buf, size_t size);

/* Loads the checkpoint named by <run_dir>/latest into params/m/v (each table->total floats) and st;
 * without latest, the newest checkpoint that loads whole (the newest one's error when none does).
 * The checkpoint's model config must equal t->cfg; otherwise -1 with a message naming the field.
 * state.bin carries a checksum of all its bytes: a file changed on disk is refused, never used. */
int checkpoint_load_latest(const char *run_dir, const ParamTable *t, float *params, float *m, float *v,
                           TrainState *st, char *err);

/* Recomputes the checksum of a state.bin whose header fields were rewritten on purpose (a tool that
 * converts a checkpoint; the tests do). 0, or -1 with a message in err. */
int checkpoint_state_reseal(const char *path, char *err);

#endif
