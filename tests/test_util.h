/* tests/test_util.h - helpers shared by the CPU tests: random arrays, relative errors, running
 * ./train and capturing its output. */
#ifndef FUSEDGPT_TEST_UTIL_H
#define FUSEDGPT_TEST_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "common/rng.h"
#include "model/backend.h"
#include "tokenizer/tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

void fill_normal(float *x, size_t n, float std, Rng *rng);
/* ||a - b|| / ||b|| (0 when both are 0). */
double rel_l2(const float *a, const float *b, size_t n);
double max_abs(const float *x, size_t n);

/* Runs `<train binary> <args>` through the shell with stdout+stderr captured into *output
 * (malloc'ed, caller frees; a zero byte in it reads as '?'). Returns the exit status (or -1 if it
 * could not run). */
int run_train(const char *args, char **output);
/* The same, with shell commands before it in the same shell (`ulimit -f 0;`, `VAR=x`): limits and
 * environment for that run alone. */
int run_train_under(const char *shell_prefix, const char *args, char **output);

/* Starts `<train binary> <args>` in the background, stdout+stderr into log_path; returns its pid, or
 * -1. For tests that need several processes at once (two nodes of a run). */
int spawn_train(const char *args, const char *log_path);
/* Waits at most `seconds` for a process from spawn_train: its exit status, or -1 when it ran longer
 * (it is then killed, with everything it started). */
int wait_train(int pid, int seconds);
/* The same, for a process that may end by a signal: 1 with its wait status in *status, or 0 when it
 * ran longer than `seconds` (it is then killed). */
int wait_train_status(int pid, int seconds, int *status);
/* Waits at most `seconds` until the log at path holds `count` copies of needle (a process from
 * spawn_train reaching a point); 1 when it does. */
int wait_for_log(const char *path, const char *needle, int count, int seconds);
/* A whole file (malloc'ed, caller frees, with a 0 after its bytes) and its length, or NULL. */
char *read_file(const char *path, size_t *length);
/* Whether files a and b both exist and hold the same bytes. */
int same_bytes(const char *a, const char *b);
/* The same for a text file. */
char *read_text(const char *path);

/* A file of ids, one per line (fixtures that tokenizers wrote), into a malloc'ed array of *n, or NULL. */
uint32_t *read_ids_file(const char *path, size_t *n);

/* Writes a token shard of n tokens following a fixed learnable pattern over vocab tokens. */
int write_pattern_shard(const char *path, uint64_t n, uint32_t vocab, uint64_t seed);
/* The same, recording `tokenizer` (a tokenizer_fingerprint) as the tokenizer that made it. */
int write_pattern_shard_made_by(const char *path, uint64_t n, uint32_t vocab, uint64_t seed, uint64_t tokenizer);
/* Copies the text file from_path to to_path with the first occurrence of each edits[2i] replaced by
 * edits[2i + 1] (n_edits pairs); 0, or -1 when a file fails or a text to replace is missing. */
int write_edited_copy(const char *from_path, const char *to_path, const char *const *edits, int n_edits);
/* tests/fixtures/hf_gpt2_style.json with the ids of "A" and "B" swapped, at path: the same tokens
 * and merges, so it loads, but two ids stand for other text. */
int write_gpt2_style_tokenizer_with_two_ids_swapped(const char *path);

/* Checks that shard_read refuses the shard at path for a model of model_vocab words with one line
 * that contains msg (what names the case in failures). */
void expect_shard_refused(const char *path, uint32_t model_vocab, const char *what, const char *msg);

/* Loads the tokenizer.json fixture at fixture_path with its first `from` replaced by `to` (NULL and
 * err as tokenizer_load gives them). */
Tokenizer *tokenizer_json_edited(const char *fixture_path, const char *from, const char *to, char *err);
/* The same, checking that it is refused with one line that contains msg. */
void expect_tokenizer_json_refused(const char *fixture_path, const char *from, const char *to, const char *msg);

/* A CPU backend for B sequences of T tokens over table t, output layer `output`, its weights moved
 * away from the init by N(0, 0.3) noise (so attention is far from uniform), the same on every call;
 * NULL on failure. */
Backend *perturbed_cpu_backend(const ParamTable *t, int B, int T, OutputKind output);

/* One tensor of a safetensors file a test writes: name, dtype ("F32", "BF16", ...), shape [d0, d1]
 * (d0 0: a vector of d1), and its bytes. */
typedef struct {
    char name[96];
    const char *dtype;
    size_t d0, d1;
    size_t bytes;
    void *data;
} TestTensor;

/* Writes the n tensors as a safetensors file, laid out in the order given. */
void write_test_safetensors(const char *path, const TestTensor *ts, int n);
/* x truncated to bf16 (tests compare with the same rounding). */
uint16_t test_to_bf16(float x);

/* Extracts the losses printed by ./train ("step k/N | loss x") into losses[]; returns how many. */
int parse_losses(const char *output, float *losses, int max);

/* The cosine schedule's rate at step (0-based) of a run of total steps: lr_at_step's, shorter to write. */
float cosine_lr(int step, int total, int warmup, float lr, float fin);

#ifdef __cplusplus
}
#endif

#endif
