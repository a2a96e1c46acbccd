/* train.c - the fusedgpt command line and training loop.
 *
 *   ./train [flags]            train a model (see --help; defaults come from one table below)
 *   ./train prepare [flags]    turn text into a tokenizer and token shards (data/prepare.c)
 *   ./train sample [flags]     generate text from a checkpoint (model/train/sample_cmd.c)
 *   ./train eval [flags]       a checkpoint's loss on a token shard (model/train/eval_cmd.c)
 *
 * Everything else lives in model/ (the network, backends, checkpoints), data/ (shards, loader) and
 * tokenizer/. Exit status: 0 success, 1 runtime failure, 2 bad command line. */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/err.h"
#include "common/host_memory.h"
#include "data/loader.h"
#include "common/paths.h"
#include "data/prepare.h"
#include "common/rng.h"
#include "common/safetensors.h"
#include "common/repeated_flags.h"
#include "common/stop_request.h"
#include "model/backend.h"
#include "model/memory_estimate.h"
#include "model/train/checkpoint.h"
#include "model/train/checkpoint_writer.h"
#include "model/train/eval_cmd.h"
#include "model/cuda/cuda_device.h"
#include "model/dist/dist.h"
#include "model/dist/vocab_parallel_plan.h"
#include "model/gpt.h"
#include "model/train/hf_weights.h"
#include "model/train/loss_weights.h"
#include "model/train/runlog.h"
#include "model/train/sample.h"
#include "model/train/sample_cmd.h"
#include "model/train/schedule.h"
#include "model/train/step_check.h"
#include "tokenizer/tokenizer.h"

typedef struct {
    const char *preset, *family;
    int layers, heads, dim, max_seq_len;
    int kv_heads, head_dim, ffn_dim, sliding_window, query_pre_attn_scalar;
    int vocab, batch, seq_len, total_batch, steps;
    float lr, lr_final, weight_decay, grad_clip;
    float z_loss, logit_softcap, label_smoothing;
    int warmup, decay_steps;
    const char *lr_schedule;
    uint64_t seed; /* checkpoints and `./train sample --seed` take all 64 bits */
    const char *train_data, *val_data, *out, *cache_dir, *tokenizer, *prompt, *init_from;
    const char *pack;
    int checkpoint_every, keep_checkpoints;
    const char *resume_mode; /* -y as given: 0, 1 or auto */
    int resume;              /* what it decided: 1 resumes the run directory's checkpoint */
    int resume_auto;         /* -y auto, which found nothing to resume when resume is 0 */
    int val_every, val_batches, sample_every, gen_tokens;
    const char *output, *device;
    int logits_mb;
    int gpus, nodes, node_rank;
    const char *master;
    const char *zero, *overlap_comm;
    int bucket_mb, vocab_parallel;
    const char *grad_reduce;
    const char *optimizer_state;
    int untied_head;
    int recompute_gelu, profile_step, step_parts;
    int help;
    unsigned from_env; /* bit k: option_env[k]'s value came from its environment variable */
    RepeatedFlags repeated; /* the flags' uses, for the note on those given more than once */
    unsigned char given[64]; /* given[k]: options[k] was on the command line (its default was not taken) */
    /* where the model's shape comes from, flags left out taking its config.json's values: --init-from's
     * checkpoint, or on -y 1 the run's own (find_shape_source); "" for the flags alone */
    char shape_from[FGPT_PATH_LEN];
    char shape_label[FGPT_PATH_LEN + 32]; /* how messages name it: "--init-from DIR", "the checkpoint DIR" */
    char shape_unread[ERR_LEN];           /* -y 1: why the checkpoint's config.json did not read ("": it did) */
    const char *ignored_init_from;        /* --init-from given with -y 1, which resumes from the run's own */
} Options;

typedef enum { OPT_INT, OPT_U64, OPT_FLOAT, OPT_STR, OPT_FLAG } OptType;

typedef struct {
    char short_name; /* 0: long form only */
    const char *long_name;
    OptType type;
    size_t offset;
    const char *default_value; /* parsed like a command-line value, so defaults obey the same rules */
    const char *meta;
    const char *help;
} OptSpec;

#define O(field) offsetof(Options, field)
#define STRINGIFY(x) #x
#define DEFAULT_STRING(x) STRINGIFY(x)

/* The one table of flags and defaults; --help is generated from it. */
static const OptSpec options[] = {
    {'e', "preset", OPT_STR, O(preset), "d12", "NAME", "model preset: "},
    {0, "layers", OPT_INT, O(layers), "0", "L", "layers (0: from the preset)"},
    {0, "heads", OPT_INT, O(heads), "0", "NH", "attention heads (0: from the preset)"},
    {0, "dim", OPT_INT, O(dim), "0", "C", "model width (0: from the preset)"},
    {0, "family", OPT_STR, O(family), "", "NAME",
     "gpt2, llama, qwen2, qwen3 or gemma3 (default: the preset's)"},
    {0, "kv-heads", OPT_INT, O(kv_heads), "0", "NKV", "key/value heads, dividing --heads (0: the preset's, or --heads)"},
    {0, "head-dim", OPT_INT, O(head_dim), "0", "HD", "size of a head, even (0: the preset's, or C/NH)"},
    {0, "ffn-dim", OPT_INT, O(ffn_dim), "0", "F", "MLP hidden width (0: the preset's, or 4C)"},
    {0, "sliding-window", OPT_INT, O(sliding_window), "0", "W",
     "gemma3: its sliding layers' query t sees keys t-W+1..t (0: the preset's, or 4096)"},
    {0, "query-pre-attn-scalar", OPT_INT, O(query_pre_attn_scalar), "0", "S",
     "gemma3: attention scores scaled by S^-1/2 (0: the preset's, or 256; Gemma 3 27B's is 168)"},
    {0, "untied-head", OPT_FLAG, O(untied_head), "0", "",
     "llama, qwen2, qwen3, gemma3: the output layer gets its own matrix (lm_head.weight), not the token embedding"},
    {0, "max-seq-len", OPT_INT, O(max_seq_len), "1024", "T",
     "context length of the model (GPT-2's position table; a released model's preset: its own)"},
    {'v', "vocab", OPT_INT, O(vocab), "50257", "V", "vocabulary size (padded to a multiple of 128 inside)"},
    {'b', "batch", OPT_INT, O(batch), "4", "B", "micro-batch size in sequences"},
    {'t', "seq-len", OPT_INT, O(seq_len), "1024", "T", "sequence length of a batch"},
    {'d', "total-batch", OPT_INT, O(total_batch), "0", "TOKENS",
     "tokens per optimizer step (0: B*T*ranks); gradient accumulation = TOKENS/(B*T*ranks), ranks = gpus*nodes"},
    {'x', "steps", OPT_INT, O(steps), "1000", "N", "optimizer steps"},
    {'l', "lr", OPT_FLOAT, O(lr), "6e-4", "LR", "peak learning rate"},
    {0, "warmup", OPT_INT, O(warmup), "100", "N", "linear warmup steps"},
    {0, "lr-final", OPT_FLOAT, O(lr_final), "6e-5", "LR", "learning rate at the last step (equal to -l: constant after the warmup)"},
    {0, "lr-schedule", OPT_STR, O(lr_schedule), "cosine", "SHAPE",
     "after the warmup: cosine or linear decay to --lr-final over the remaining steps, or wsd (warmup-stable-decay: "
     "-l until the last --decay-steps, which fall to --lr-final as 1 - sqrt of their progress)"},
    {0, "decay-steps", OPT_INT, O(decay_steps), "0", "N", "wsd: the steps at the end of the run that decay (0: a fifth of -x)"},
    {0, "weight-decay", OPT_FLOAT, O(weight_decay), "0.1", "WD", "AdamW decoupled weight decay (matrices and embeddings; not biases or norms)"},
    {0, "grad-clip", OPT_FLOAT, O(grad_clip), "1.0", "NORM", "clip the global gradient norm (0: off)"},
    {0, "optimizer-state", OPT_STR, O(optimizer_state), "fp32", "TYPE",
     "AdamW's state: fp32 (master weights and moments beside the bf16 weights: 18 bytes a parameter with the "
     "fp32 gradients), or bf16 (moments in bf16 and no master copy, each rounded stochastically: 10 bytes)"},
    {0, "z-loss", OPT_FLOAT, O(z_loss), "0", "C", "objective: add C lse^2 per token (PaLM's z-loss; 0: off)"},
    {0, "label-smoothing", OPT_FLOAT, O(label_smoothing), "0", "EPS",
     "objective: PyTorch's label smoothing over the real vocabulary, 0 <= EPS < 1 (0: off)"},
    {0, "logit-softcap", OPT_FLOAT, O(logit_softcap), "0", "CAP",
     "model: logits become CAP tanh(z/CAP) before the softmax (0: none, or --init-from's final_logit_softcapping)"},
    {0, "seed", OPT_U64, O(seed), "1337", "S", "seed for init, data order and sampling (0 to 2^64 - 1)"},
    {'i', "train-data", OPT_STR, O(train_data), "", "FILE",
     "train token shard, or a quoted pattern of several ('data/train_*.bin') (default: the default corpus)"},
    {'j', "val-data", OPT_STR, O(val_data), "", "FILE", "validation token shard, or a quoted pattern of several"},
    {0, "pack", OPT_STR, O(pack), "wrapped", "HOW",
     "how a shard that marks documents becomes windows: wrapped (end to end, a document crossing a window's end "
     "goes on in the next window) or bfd (whole documents, best fit decreasing, the rest padded; longer than -t "
     "+ 1: cut into windows)"},
    {0, "tokenizer", OPT_STR, O(tokenizer), "", "FILE",
     "tokenizer (ours, or a Hugging Face tokenizer.json), to decode samples; checkpoints carry it"},
    {0, "init-from", OPT_STR, O(init_from), "", "DIR",
     "start from a Hugging Face checkpoint (config.json + model.safetensors or its shards): gpt2, llama, qwen2, qwen3, gemma3; "
     "the shape flags left out take its values"},
    {0, "cache-dir", OPT_STR, O(cache_dir), ".cache", "DIR", "where the default corpus is prepared and cached"},
    {'o', "out", OPT_STR, O(out), "runs/default", "DIR", "run directory: log.jsonl and checkpoints"},
    {'n', "checkpoint-every", OPT_INT, O(checkpoint_every), "0", "N",
     "checkpoint every N steps (0: only at the end)"},
    {0, "keep-checkpoints", OPT_INT, O(keep_checkpoints), "2", "N", "checkpoints kept in the run directory"},
    {'y', "resume", OPT_STR, O(resume_mode), "0", "0|1|auto",
     "1: resume from the run directory's latest checkpoint; auto: resume when the run directory holds a checkpoint, "
     "else start a new run (a job that may be requeued)"},
    {0, "val-every", OPT_INT, O(val_every), "100", "N", "validation loss every N steps (0: off)"},
    {0, "val-batches", OPT_INT, O(val_batches), "10", "N", "micro-batches per validation (over all GPUs)"},
    {'s', "sample-every", OPT_INT, O(sample_every), "500", "N", "generate a sample every N steps (0: off)"},
    {'G', "gen-tokens", OPT_INT, O(gen_tokens), "64", "N", "tokens per sample"},
    {0, "prompt", OPT_STR, O(prompt), "", "TEXT", "text that samples start from (needs a tokenizer)"},
    {0, "output", OPT_STR, O(output), "fused", "KIND",
     "output layer: fused (no logits tensor) or canonical (all logits, the baseline)"},
    {0, "logits-mb", OPT_INT, O(logits_mb), DEFAULT_STRING(OUTPUT_FUSED_DEFAULT_BUDGET_MIB), "MB",
     "fused layer: memory for the chunked path's scaled exponentials (less if the GPU lacks it); 0: the streaming path"},
    {0, "device", OPT_STR, O(device), "cuda", "KIND", "cuda or cpu (the fp32 reference backend)"},
    {'g', "gpus", OPT_INT, O(gpus), "1", "N", "GPUs on this host, one process each (data parallel)"},
    {0, "nodes", OPT_INT, O(nodes), "1", "M", "hosts taking part, each started with the same flags"},
    {0, "node-rank", OPT_INT, O(node_rank), "0", "K", "this host's place, 0..M-1 (node 0 serves the rendezvous)"},
    {0, "master", OPT_STR, O(master), "", "HOST:PORT", "node 0's address and a free port (needed with --nodes > 1)"},
    {0, "zero", OPT_STR, O(zero), "auto", "auto|0|1",
     "1: ZeRO-1, each GPU keeps 1/N of AdamW's state (master weights and moments) (data parallel); auto: 1 on two GPUs "
     "or more, 0 with --vocab-parallel"},
    {0, "overlap-comm", OPT_STR, O(overlap_comm), "auto", "auto|0|1",
     "1: reduce gradients during the backward; 0: after it; auto: after it when all ranks are on one host with "
     "NVLink between every pair of the GPUs they use, during it otherwise (data parallel)"},
    {0, "bucket-mb", OPT_INT, O(bucket_mb), "0", "MB",
     "gradients per reduction at least, in MB of fp32 (layers merge; 0: one per layer)"},
    {0, "grad-reduce", OPT_STR, O(grad_reduce), "fp32", "TYPE",
     "what the gradient reduction sends: fp32, or bf16 (each GPU's gradients rounded once to bf16 and summed in "
     "fp32: half the bytes of the reduce-scatter; data parallel)"},
    {0, "vocab-parallel", OPT_FLAG, O(vocab_parallel), "0", "",
     "split the output layer (lm_head, or a tied head's token embedding) over the GPUs by vocabulary rows: its "
     "weights, gradient and AdamW state divided by -g (needs -g 2 or more)"},
    {0, "recompute-gelu", OPT_INT, O(recompute_gelu), "0", "0|1|2",
     "1: the backward recomputes GELU rather than storing it, and Qwen3's and Gemma 3's normed, rotated q and k "
     "(less memory; automatic when memory is short); 2: Llama/Qwen/Gemma also recompute the MLP's gate/up "
     "projection (a GEMM per layer, 2*ffn-dim values a token less)"},
    {0, "profile-step", OPT_INT, O(profile_step), "0", "N",
     "CUDA: step N (1-based) alone inside the profiler's capture range (nsys --capture-range=cudaProfilerApi; 0: none)"},
    {0, "step-parts", OPT_INT, O(step_parts), "0", "0|1",
     "1: GPU time of the forward, output layer and backward on each step line (CUDA)"},
    {'h', "help", OPT_FLAG, O(help), "0", "", "this text"},
};
#define NUM_OPTIONS ((int)(sizeof options / sizeof options[0]))

/* Flags that the environment may give instead (a flag on the command line wins), so that a cluster
 * scheduler's launch script can start every node with the same command. */
static const struct {
    const char *long_name, *env;
} option_env[] = {{"nodes", "FUSEDGPT_NODES"}, {"node-rank", "FUSEDGPT_NODE_RANK"}, {"master", "FUSEDGPT_MASTER"}};
#define NUM_OPTION_ENV ((int)(sizeof option_env / sizeof option_env[0]))

static int env_index(const char *long_name) {
    for (int i = 0; i < NUM_OPTION_ENV; i++)
        if (strcmp(option_env[i].long_name, long_name) == 0) return i;
    return -1;
}

static const char *env_of(const OptSpec *o) {
    int i = env_index(o->long_name);
    return i < 0 ? NULL : option_env[i].env;
}

/* Flags whose allowed values live in a table of their own: their help ends with the list. */
static const struct {
    const char *long_name;
    void (*list)(char *buf, size_t n);
} option_values[] = {{"preset", gpt_preset_list}};
#define NUM_OPTION_VALUES ((int)(sizeof option_values / sizeof option_values[0]))

static void print_values_of(const OptSpec *o, FILE *f) {
    for (int i = 0; i < NUM_OPTION_VALUES; i++) {
        if (strcmp(option_values[i].long_name, o->long_name)) continue;
        char values[256];
        option_values[i].list(values, sizeof values);
        fputs(values, f);
    }
}

/* How an error names the flag: "--nodes", or "FUSEDGPT_NODES (for --nodes)" when that is where the
 * value came from, so the user knows what to change. */
static const char *source_name(const Options *opt, const char *long_name, char *buf, size_t n) {
    int i = env_index(long_name);
    if (i >= 0 && (opt->from_env >> i & 1))
        snprintf(buf, n, "%s (for --%s)", option_env[i].env, long_name);
    else
        snprintf(buf, n, "--%s", long_name);
    return buf;
}

static void usage(FILE *f) {
    fprintf(f, "usage: ./train [flags]          train a model (GPT-2, Llama, Qwen, Gemma 3)\n"
               "       ./train prepare --help   text -> tokenizer + token shards\n"
               "       ./train sample --help    generate from a checkpoint\n"
               "       ./train eval --help      a checkpoint's loss on a token shard\n\nflags:\n");
    for (int i = 0; i < NUM_OPTIONS; i++) {
        const OptSpec *o = &options[i];
        char left[64];
        if (o->short_name)
            snprintf(left, sizeof left, "-%c, --%s %s", o->short_name, o->long_name, o->meta);
        else
            snprintf(left, sizeof left, "    --%s %s", o->long_name, o->meta);
        fprintf(f, "  %-30s %s", left, o->help);
        print_values_of(o, f);
        if (o->type != OPT_FLAG && o->default_value[0]) fprintf(f, " [%s]", o->default_value);
        if (env_of(o)) fprintf(f, " (env %s)", env_of(o));
        fputc('\n', f);
    }
}

/* A command-line error: one line naming the flag, exit status 2. */
static void die_usage(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die_usage(const char *fmt, ...) {
    char msg[ERR_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    print_error("%s (see ./train --help)", msg);
    exit(2);
}

static void flag_name(const OptSpec *o, char *buf, size_t n) {
    if (o->short_name)
        snprintf(buf, n, "-%c/--%s", o->short_name, o->long_name);
    else
        snprintf(buf, n, "--%s", o->long_name);
}

/* source: where the value came from, for errors (NULL: the flag itself). */
static void set_value(Options *opt, const OptSpec *o, const char *value, const char *source) {
    char name[128];
    flag_name(o, name, sizeof name);
    if (source) {
        char flag[64];
        snprintf(flag, sizeof flag, "%s", name);
        snprintf(name, sizeof name, "%s (for %s)", source, flag);
    }
    void *dst = (char *)opt + o->offset;
    char *end = NULL;
    errno = 0;
    switch (o->type) {
    case OPT_INT: {
        long v = strtol(value, &end, 10);
        if (!*value || isspace((unsigned char)*value) || *end || (errno && errno != ERANGE))
            die_usage("%s expects an integer, got '%s'", name, value);
        if ((errno == ERANGE && v > 0) || v > 2147483647L)
            die_usage("%s %s is too large for an integer flag (at most 2147483647)", name, value);
        /* no integer flag takes a negative value: each one's own check names its range
         * (validate), so a negative beyond an int is held as the most negative one */
        *(int *)dst = v < INT_MIN ? INT_MIN : (int)v;
        break;
    }
    case OPT_U64: {
        unsigned long long v = strtoull(value, &end, 10);
        if (!*value || isspace((unsigned char)*value) || *value == '-' || *value == '+' || *end || errno)
            die_usage("%s expects a whole number from 0 to 18446744073709551615, got '%s'", name, value);
        *(uint64_t *)dst = v;
        break;
    }
    case OPT_FLOAT: {
        float v = strtof(value, &end);
        if (*value && !isspace((unsigned char)*value) && !*end && errno == ERANGE)
            die_usage("%s: %s is beyond what a float holds (about 1.2e-38 to 3.4e38 in size)", name, value);
        if (!*value || isspace((unsigned char)*value) || *end || errno || !isfinite(v))
            die_usage("%s expects a number, got '%s'", name, value);
        *(float *)dst = v;
        break;
    }
    case OPT_STR: *(const char **)dst = value; break;
    case OPT_FLAG: *(int *)dst = 1; break;
    }
    int k = env_index(o->long_name);
    if (k >= 0) opt->from_env = source ? opt->from_env | 1u << k : opt->from_env & ~(1u << k);
}

/* The option a command-line word names (-x, --steps, --steps=5), or NULL. */
static const OptSpec *find_option(const char *arg) {
    if (arg[0] == '-' && arg[1] == '-' && arg[2]) {
        const char *eq = strchr(arg + 2, '=');
        size_t len = eq ? (size_t)(eq - arg - 2) : strlen(arg + 2);
        for (int k = 0; k < NUM_OPTIONS; k++)
            if (strlen(options[k].long_name) == len && strncmp(options[k].long_name, arg + 2, len) == 0)
                return &options[k];
    } else if (arg[0] == '-' && arg[1] && !arg[2]) {
        for (int k = 0; k < NUM_OPTIONS; k++)
            if (options[k].short_name == arg[1]) return &options[k];
    }
    return NULL;
}

static void parse_args(Options *opt, int argc, char **argv) {
    memset(opt, 0, sizeof *opt);
    for (int i = 0; i < NUM_OPTIONS; i++)
        if (options[i].type != OPT_FLAG) set_value(opt, &options[i], options[i].default_value, NULL);
    for (int i = 0; i < NUM_OPTIONS; i++) { /* the environment, which flags then override */
        const char *env = env_of(&options[i]), *v = env ? getenv(env) : NULL;
        if (v && *v) set_value(opt, &options[i], v, env);
    }
    _Static_assert(NUM_OPTIONS <= (int)sizeof opt->given, "Options.given has a flag for every option");
    unsigned char *given = opt->given;
    const OptSpec *previous = NULL;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i], *eq = arg[0] == '-' && arg[1] == '-' ? strchr(arg, '=') : NULL;
        const char *inline_value = eq ? eq + 1 : NULL;
        const OptSpec *o = find_option(arg);
        /* a shell that expanded -i data/train_*.bin unquoted leaves the second shard as a word of its own */
        if (!o && arg[0] != '-' && previous && (previous->short_name == 'i' || previous->short_name == 'j'))
            die_usage("'%s' follows the value of -%c: for several shards, quote a pattern so that the shell leaves it "
                      "whole (-%c 'data/%s_*.bin')", arg, previous->short_name, previous->short_name,
                      previous->short_name == 'i' ? "train" : "val");
        if (!o) die_usage("unknown flag '%s'", arg);
        previous = o;
        char name[64];
        flag_name(o, name, sizeof name);
        /* the last value holds (scripts override their defaults this way), but the user hears of it */
        given[o - options] = 1;
        if (o->type != OPT_FLAG) repeated_flags_use(&opt->repeated, name);
        if (o->type == OPT_FLAG) {
            if (inline_value) die_usage("%s takes no value, got '%s'", name, arg);
            set_value(opt, o, "1", NULL);
            continue;
        }
        const char *value = inline_value;
        if (!value) {
            if (i + 1 >= argc) die_usage("%s needs a value", name);
            value = argv[++i];
            /* "-o -x 10" would otherwise train into a directory named -x; a value that really is
             * such a name can still be given as --out=-x */
            if (find_option(value))
                die_usage("%s needs a value, got the flag '%s' (if that is the value, write --%s=%s)", name, value,
                          o->long_name, value);
        }
        /* an empty path or name would read as the flag left out: --init-from '' would train from scratch */
        if (o->type == OPT_STR && !*value)
            die_usage("%s needs a value, got an empty one (leave the flag out for its default)", name);
        set_value(opt, o, value, NULL);
    }
}

/* 1 when the command line gave the flag (long name), so that its default does not stand. */
static int was_given(const Options *opt, const char *long_name) {
    const OptSpec *o = NULL;
    for (int k = 0; k < NUM_OPTIONS && !o; k++)
        if (strcmp(options[k].long_name, long_name) == 0) o = &options[k];
    return o && opt->given[o - options];
}

static void bad(const char *flag, const char *why) {
    die_usage("%s %s", flag, why);
}

/* -y: 1 resumes -o's checkpoint; auto does when -o holds one (its latest, or any step_* checkpoint,
 * whole or not, so that a damaged one is named rather than set aside for a new run) and starts anew
 * when it holds none (missing, empty, a log, or a first checkpoint whose write was cut off). */
static void decide_resume(Options *opt) {
    const char *mode = opt->resume_mode;
    if (strcmp(mode, "0") && strcmp(mode, "1") && strcmp(mode, "auto")) bad("-y/--resume", "must be 0, 1 or auto");
    opt->resume_auto = !strcmp(mode, "auto");
    opt->resume = !strcmp(mode, "1");
    char latest[FGPT_PATH_LEN];
    struct stat sb;
    if (opt->resume_auto)
        opt->resume = (path_format(latest, "%s/latest", opt->out) == 0 && lstat(latest, &sb) == 0) ||
                      checkpoint_newest_step(opt->out) >= 0;
}

/* Fills cfg from the options and rejects contradictory combinations. */
static void validate(Options *opt, GPTConfig *cfg) {
    const GPTPreset *p = gpt_find_preset(opt->preset);
    if (!p) {
        char names[256];
        gpt_preset_list(names, sizeof names);
        die_usage("-e/--preset must be one of %s", names);
    }
    ModelFamily family = p->family;
    if (opt->family[0] && gpt_family_parse(opt->family, &family) != 0) bad("--family", "must be gpt2, llama, qwen2, qwen3 or gemma3");
    gpt_family_defaults(cfg, family);
    /* the preset's shape and RoPE hold only for its own family; another family takes its defaults */
    const int own = family == p->family;
    if (own && p->rope.theta > 0) cfg->rope = p->rope;
    if (own && p->sliding_window > 0) cfg->sliding_window = p->sliding_window;
    cfg->num_layers = opt->layers ? opt->layers : p->num_layers;
    cfg->num_heads = opt->heads ? opt->heads : p->num_heads;
    cfg->dim = opt->dim ? opt->dim : p->dim;
    cfg->num_kv_heads = opt->kv_heads ? opt->kv_heads : own ? p->num_kv_heads : 0;
    cfg->head_dim = opt->head_dim ? opt->head_dim : own ? p->head_dim : 0;
    cfg->ffn_dim = opt->ffn_dim ? opt->ffn_dim : own ? p->ffn_dim : 0;
    /* a preset of a released model carries its vocabulary and context; -v and --max-seq-len given
     * on the command line win */
    cfg->max_seq_len = own && p->max_seq_len && !was_given(opt, "max-seq-len") ? p->max_seq_len : opt->max_seq_len;
    cfg->vocab_size = own && p->vocab_size && !was_given(opt, "vocab") ? p->vocab_size : opt->vocab;
    if (opt->layers < 0 || cfg->num_layers < 1 || cfg->num_layers > GPT_MAX_LAYERS)
        bad("--layers", "must be between 1 and 128");
    if (opt->heads < 0 || cfg->num_heads < 1) bad("--heads", "must be positive");
    if (opt->dim < 0 || cfg->dim < 1) bad("--dim", "must be positive");
    if (opt->kv_heads < 0 || opt->head_dim < 0 || opt->ffn_dim < 0)
        bad("--kv-heads, --head-dim and --ffn-dim", "must be positive (0: the preset's)");
    if (family == FAMILY_GPT2 && (opt->kv_heads || opt->head_dim || opt->ffn_dim) && !opt->shape_from[0])
        bad("--kv-heads, --head-dim and --ffn-dim", "need --family llama, qwen2, qwen3 or gemma3 (GPT-2's follow from --heads and --dim)");
    if (opt->sliding_window < 0) bad("--sliding-window", "must be positive (0: the preset's)");
    if (opt->sliding_window && family != FAMILY_GEMMA3 && !opt->shape_from[0]) bad("--sliding-window", "needs --family gemma3 (the family with sliding layers)");
    if (opt->sliding_window) cfg->sliding_window = opt->sliding_window;
    if (opt->query_pre_attn_scalar < 0) bad("--query-pre-attn-scalar", "must be positive (0: the preset's)");
    if (opt->query_pre_attn_scalar && family != FAMILY_GEMMA3 && !opt->shape_from[0])
        bad("--query-pre-attn-scalar", "needs --family gemma3 (the others scale by head_dim^-1/2)");
    if (opt->query_pre_attn_scalar) cfg->query_pre_attn_scalar = (float)opt->query_pre_attn_scalar;
    /* beside a checkpoint, its config.json gives the family, and take_shape checks the flag against it */
    if (opt->untied_head && family == FAMILY_GPT2 && !opt->shape_from[0])
        bad("--untied-head", "needs --family llama, qwen2, qwen3 or gemma3 (GPT-2's output layer is its token embedding)");
    cfg->untied_head = opt->untied_head;
    if (!cfg->head_dim && cfg->dim % cfg->num_heads) bad("--heads", "must divide --dim (the model width), or pass --head-dim");
    if (cfg->num_kv_heads && cfg->num_heads % cfg->num_kv_heads) {
        char why[96];
        snprintf(why, sizeof why, "%d must divide --heads %d%s", cfg->num_kv_heads, cfg->num_heads,
                 opt->kv_heads ? "" : " (the preset's: pass --kv-heads)");
        bad("--kv-heads", why);
    }
    if (cfg->head_dim % 2) bad("--head-dim", "must be even (rotary positions turn pairs)");
    if (opt->max_seq_len < 1) bad("--max-seq-len", "must be positive");
    if (cfg->vocab_size < 2 || cfg->vocab_size > (long long)FGPT_MAX_VOCAB) bad("-v/--vocab", "must be between 2 and 1073741824 (2^30)");
    if (opt->batch < 1) bad("-b/--batch", "must be positive");
    if (opt->seq_len < 1) bad("-t/--seq-len", "must be positive");
    /* the checkpoint's context is its config.json's unless --max-seq-len is given (take_shape) */
    if (opt->seq_len > cfg->max_seq_len && !(opt->shape_from[0] && !was_given(opt, "max-seq-len"))) {
        /* a resumed model keeps its context (GPT-2's position table is part of its weights) */
        char or_longer[48] = "";
        if (!opt->resume) snprintf(or_longer, sizeof or_longer, ", or --max-seq-len %d", opt->seq_len);
        die_usage("-t/--seq-len %d is above the model's context (--max-seq-len %d): pass -t %d or less%s", opt->seq_len,
                  cfg->max_seq_len, cfg->max_seq_len, or_longer);
    }
    if (opt->steps < 1) bad("-x/--steps", "must be positive");
    if (!(opt->lr > 0)) bad("-l/--lr", "must be positive");
    if (opt->lr_final < 0 || opt->lr_final > opt->lr)
        bad("--lr-final", was_given(opt, "lr-final") ? "must be between 0 and the peak -l/--lr"
                                                     : "defaults to 6e-5, above this -l/--lr: pass a final rate below "
                                                       "the peak (e.g. a tenth of it)");
    if (opt->warmup < 0) bad("--warmup", "must be 0 or more");
    LrShape shape;
    if (lr_shape_parse(opt->lr_schedule, &shape) != 0) bad("--lr-schedule", "must be cosine, linear or wsd");
    PackKind pack;
    if (pack_kind_parse(opt->pack, &pack) != 0) bad("--pack", "must be wrapped or bfd");
    if (opt->decay_steps < 0) bad("--decay-steps", "must be 0 (a fifth of -x) or more");
    if (opt->decay_steps > 0 && shape != LR_WSD)
        bad("--decay-steps", "sets the decay of --lr-schedule wsd; cosine and linear decay over every step after the "
                             "warmup");
    if (opt->weight_decay < 0) bad("--weight-decay", "must be 0 or more");
    if (opt->grad_clip < 0) bad("--grad-clip", "must be 0 (off) or positive");
    if (!(opt->z_loss >= 0)) bad("--z-loss", "must be 0 (off) or positive");
    if (!(opt->label_smoothing >= 0 && opt->label_smoothing < 1)) bad("--label-smoothing", "must be in [0, 1)");
    if (!(opt->logit_softcap >= 0)) bad("--logit-softcap", "must be positive (or 0: none)");
    cfg->logit_softcap = opt->logit_softcap;
    if (opt->checkpoint_every < 0) bad("-n/--checkpoint-every", "must be 0 or more");
    if (opt->keep_checkpoints < 1) bad("--keep-checkpoints", "must be at least 1");
    if (opt->val_every < 0) bad("--val-every", "must be 0 or more");
    if (opt->val_batches < 1) bad("--val-batches", "must be positive");
    if (opt->sample_every < 0) bad("-s/--sample-every", "must be 0 or more");
    if (opt->gen_tokens < 1 || opt->gen_tokens > 1048576) bad("-G/--gen-tokens", "must be between 1 and 2^20");
    if (opt->gpus < 1) bad("-g/--gpus", "must be positive");
    char nodes[64], node_rank[64], master[64], why[ERR_LEN], host[256];
    source_name(opt, "nodes", nodes, sizeof nodes);
    source_name(opt, "node-rank", node_rank, sizeof node_rank);
    source_name(opt, "master", master, sizeof master);
    if (opt->nodes < 1) bad(nodes, "must be positive");
    int port;
    if (opt->node_rank < 0) bad(node_rank, "must be 0 or more (this host's place among --nodes)");
    if (opt->node_rank >= opt->nodes)
        die_usage("%s %d is out of range for %s %d (0..%d)", node_rank, opt->node_rank, nodes, opt->nodes,
                  opt->nodes - 1);
    if ((long long)opt->gpus * opt->nodes > DIST_MAX_WORLD) bad(nodes, "times -g/--gpus is above 1024 ranks");
    if (opt->master[0] && dist_parse_master(opt->master, host, sizeof host, &port) != 0)
        die_usage("%s expects HOST:PORT (node 0's address, a port 1..65535), got '%s'", master, opt->master);
    if (opt->nodes > 1 && !opt->master[0])
        die_usage("%s %d needs --master HOST:PORT (node 0's address, the same on every node)", nodes, opt->nodes);
    if (strcmp(opt->zero, "auto") && strcmp(opt->zero, "0") && strcmp(opt->zero, "1"))
        bad("--zero", "must be auto, 0 or 1");
    if (strcmp(opt->overlap_comm, "auto") && strcmp(opt->overlap_comm, "0") && strcmp(opt->overlap_comm, "1"))
        bad("--overlap-comm", "must be auto, 0 or 1");
    if (opt->bucket_mb < 0) bad("--bucket-mb", "must be 0 or more");
    if (strcmp(opt->grad_reduce, "fp32") && strcmp(opt->grad_reduce, "bf16"))
        bad("--grad-reduce", "must be fp32 or bf16");
    if (strcmp(opt->optimizer_state, "fp32") && strcmp(opt->optimizer_state, "bf16"))
        bad("--optimizer-state", "must be fp32 or bf16");
    if (opt->recompute_gelu < 0 || opt->recompute_gelu > 2) bad("--recompute-gelu", "must be 0, 1 or 2");
    if (opt->profile_step < 0) bad("--profile-step", "must be 0 (off) or a step number");
    if (opt->profile_step > opt->steps) bad("--profile-step", "is past the last step (-x/--steps)");
    if (opt->step_parts != 0 && opt->step_parts != 1) bad("--step-parts", "must be 0 or 1");
    if (!strcmp(opt->device, "cpu") && opt->profile_step)
        bad("--profile-step", "opens a GPU profiler's capture range: it needs --device cuda");
    if (!strcmp(opt->device, "cpu") && opt->step_parts)
        bad("--step-parts", "times the GPU's parts of a step: it needs --device cuda");
    if (strcmp(opt->output, "fused") && strcmp(opt->output, "canonical"))
        bad("--output", "must be fused or canonical");
    if (opt->logits_mb < 0) bad("--logits-mb", "must be at least 0 (0: the streaming path)");
    if (opt->vocab_parallel) {
        if (strcmp(opt->device, "cuda")) bad("--vocab-parallel", "splits the output layer over GPUs: it needs --device cuda");
        if ((long long)opt->gpus * opt->nodes < 2) bad("--vocab-parallel", "needs two GPUs or more (-g 2)");
        if (strcmp(opt->output, "fused")) bad("--vocab-parallel", "runs the fused output layer: leave out --output canonical");
        if (!strcmp(opt->zero, "1")) bad("--vocab-parallel", "is not combined with --zero 1 yet: leave out one of them");
        if (opt->z_loss > 0 || opt->label_smoothing > 0 || opt->logit_softcap > 0)
            bad("--vocab-parallel", "takes the plain cross-entropy only: leave out --z-loss, --label-smoothing and "
                                    "--logit-softcap");
        if (was_given(opt, "sample-every") && opt->sample_every)
            bad("--vocab-parallel", "leaves no rank the whole output layer to sample from: pass -s 0 (sample from a "
                                    "checkpoint with ./train sample)");
        opt->sample_every = 0;
    }
    if (strcmp(opt->device, "cuda") && strcmp(opt->device, "cpu")) bad("--device", "must be cuda or cpu");
    long long bt = (long long)opt->batch * opt->seq_len, ranks = (long long)opt->gpus * opt->nodes;
    if (bt * ranks > INT32_MAX) bad("-b/--batch", "times -t, -g and --nodes is above 2^31 tokens per step");
    if (opt->total_batch == 0) opt->total_batch = (int)(bt * ranks); /* no accumulation */
    if (opt->total_batch < 0) bad("-d/--total-batch", "must be positive");
    if (opt->total_batch % (bt * ranks))
        die_usage("-d/--total-batch %d must be a multiple of B*T*ranks, %lld (-b times -t times -g times --nodes)",
                  opt->total_batch, bt * ranks);
    if (!opt->out[0]) bad("-o/--out", "must name a directory");
    if (checkpoint_run_dir_ok(opt->out, why) != 0) die_usage("%s", why);
    /* what the data flags leave open is decided here too, before anything touches the disk */
    if (!opt->train_data[0] && opt->val_data[0]) bad("-j/--val-data", "needs -i/--train-data too");
    /* the default corpus brings its tokenizer, and so may a resumed checkpoint or --init-from's folder */
    if (opt->prompt[0] && opt->train_data[0] && !opt->tokenizer[0] && !opt->resume && !opt->init_from[0])
        bad("--prompt", "needs a tokenizer to encode it: pass --tokenizer FILE (the one that made -i's tokens)");
    gpt_config_finish(cfg);
}

/* Where the model's shape comes from (Options.shape_from): --init-from's checkpoint for a new run;
 * for -y 1 the checkpoint it resumes (latest's, or the newest whole one), when its config.json reads
 * (else the flags alone, and the resume names what does not match). --init-from beside -y 1 is
 * passed over: the resume takes the run's own weights, shape and tokenizer. */
static void find_shape_source(Options *opt) {
    char name[256], err[ERR_LEN];
    GPTConfig cfg;
    if (opt->resume && opt->init_from[0]) {
        opt->ignored_init_from = opt->init_from;
        opt->init_from = "";
    }
    if (opt->init_from[0]) {
        snprintf(opt->shape_from, sizeof opt->shape_from, "%s", opt->init_from);
        snprintf(opt->shape_label, sizeof opt->shape_label, "--init-from %s", opt->init_from);
    } else if (opt->resume && checkpoint_latest_name(opt->out, name, sizeof name, err) >= 0 &&
               path_format(opt->shape_from, "%s/%s", opt->out, name) == 0) {
        snprintf(opt->shape_label, sizeof opt->shape_label, "the checkpoint %s", opt->shape_from);
        char config[FGPT_PATH_LEN];
        struct stat sb;
        if (hf_read_config(opt->shape_from, &cfg, err) != 0) {
            /* a config.json there but damaged is said before the flags are asked for one at a time */
            if (path_format(config, "%s/config.json", opt->shape_from) == 0 && stat(config, &sb) == 0)
                snprintf(opt->shape_unread, sizeof opt->shape_unread, "%s", err);
            opt->shape_from[0] = 0;
        }
    } else {
        opt->shape_from[0] = 0;
    }
}

/* The model of Options.shape_from is the one its config.json describes: every shape flag left at its
 * default takes the checkpoint's value, and one the command line gives (a preset given names its
 * shape) must agree, or it is refused with the flag that would make them agree (exit 1, as for a
 * checkpoint of another model: a file that does not match the flags). 0, or -1 after printing the
 * error. */
static int take_shape(const Options *opt, GPTConfig *cfg) {
    GPTConfig hf;
    char err[ERR_LEN];
    const char *from = opt->shape_label;
    if (!opt->shape_from[0]) return 0;
    char latest[FGPT_PATH_LEN];
    if (opt->init_from[0] && checkpoint_is_run_dir(opt->init_from, latest)) {
        print_error("--init-from %s is a training run's directory, not a checkpoint: pass --init-from %s, its "
                    "latest (or -y 1 -o %s to go on with that run)", opt->init_from, latest, opt->init_from);
        return -1;
    }
    if (hf_read_config(opt->shape_from, &hf, err) != 0) {
        print_error("%s", err);
        return -1;
    }
    const int preset = was_given(opt, "preset");
    if ((preset || was_given(opt, "family")) && hf.family != cfg->family) {
        print_error("%s is a %s model but the flags give %s (pass --family %s, or leave out -e and --family)", from,
                    gpt_family_name(hf.family), gpt_family_name(cfg->family),
                    gpt_family_name(hf.family));
        return -1;
    }
    const struct {
        const char *what, *flag, *long_name;
        int theirs, ours, by_preset;
    } fields[] = {
        {"layers", "--layers", "layers", hf.num_layers, cfg->num_layers, 1},
        {"heads", "--heads", "heads", hf.num_heads, cfg->num_heads, 1},
        {"width", "--dim", "dim", hf.dim, cfg->dim, 1},
        {"kv heads", "--kv-heads", "kv-heads", hf.num_kv_heads, cfg->num_kv_heads, 1},
        {"head dim", "--head-dim", "head-dim", hf.head_dim, cfg->head_dim, 1},
        {"ffn dim", "--ffn-dim", "ffn-dim", hf.ffn_dim, cfg->ffn_dim, 1},
        {hf.family == FAMILY_GPT2 ? "context (n_positions)" : "context (max_position_embeddings)", "--max-seq-len",
         "max-seq-len", hf.max_seq_len, cfg->max_seq_len, 0},
        {"vocabulary", "-v", "vocab", hf.vocab_size, cfg->vocab_size, 0},
        {"sliding window", "--sliding-window", "sliding-window", hf.sliding_window, cfg->sliding_window, 1},
    };
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
        if (fields[i].theirs == fields[i].ours || !(was_given(opt, fields[i].long_name) || (preset && fields[i].by_preset)))
            continue;
        if (was_given(opt, fields[i].long_name))
            print_error("%s has %s %d but the flags give %d (pass %s %d)", from,
                        fields[i].what, fields[i].theirs, fields[i].ours, fields[i].flag, fields[i].theirs);
        else /* the preset's shape: the checkpoint gives the whole shape without it */
            print_error("%s has %s %d but the preset -e gives %d (leave out -e: the checkpoint gives the shape)", from,
                        fields[i].what, fields[i].theirs, fields[i].ours);
        return -1;
    }
    if (opt->query_pre_attn_scalar && hf.query_pre_attn_scalar != cfg->query_pre_attn_scalar) {
        print_error("%s has query_pre_attn_scalar %g but the flags give %g (leave out --query-pre-attn-scalar: the "
                    "checkpoint gives it)", from, (double)hf.query_pre_attn_scalar, (double)cfg->query_pre_attn_scalar);
        return -1;
    }
    if (opt->untied_head && !hf.untied_head) {
        print_error("%s ties its output head to the token embedding (tie_word_embeddings) but the flags give "
                    "--untied-head (leave out --untied-head)", from);
        return -1;
    }
    if (hf.logit_softcap > 0 && (cfg->logit_softcap > 0 || was_given(opt, "logit-softcap")) &&
        hf.logit_softcap != cfg->logit_softcap) {
        print_error("%s has final_logit_softcapping %g but the flags give %g (leave out --logit-softcap)", from,
                    (double)hf.logit_softcap, (double)cfg->logit_softcap);
        return -1;
    }
    if (hf.logit_softcap == 0) hf.logit_softcap = cfg->logit_softcap; /* the flag caps a model that has no cap */
    *cfg = hf;
    if (opt->seq_len > cfg->max_seq_len) {
        print_error("-t/--seq-len %d is above the context of %s, %d (pass -t %d or less)", opt->seq_len, from,
                    cfg->max_seq_len, cfg->max_seq_len);
        return -1;
    }
    return 0;
}

/* The tokenizer as Hugging Face files for every checkpoint; 0 when it cannot be written in that
 * format (said once, and checkpoints then carry none). */
static int checkpoint_tokenizer(const Tokenizer *tok, int max_seq_len, CheckpointTokenizer *ck) {
    char err[ERR_LEN];
    size_t len = 0;
    char *json = tokenizer_hf_json(tok, &len, err), *config = json ? tokenizer_hf_config_json(tok, max_seq_len, err) : NULL;
    if (!json || !config) {
        printf("note: checkpoints will carry no tokenizer.json: %s\n", err);
        free(json);
        return 0;
    }
    size_t chat_len = 0;
    const char *chat = tokenizer_hf_chat_template(tok, &chat_len);
    *ck = (CheckpointTokenizer){json, len, config, chat, chat_len, (int)tokenizer_bos_token(tok),
                                (int)tokenizer_eot_token(tok)};
    return 1;
}

/* What the same run would take on a GPU, whatever the family (the CUDA backend's own table says
 * it exactly for the families it runs), below the table of a run on the CPU. An H100's 80 GB is
 * the reference for the largest micro-batch. */
static void print_gpu_estimate(const ParamTable *t, int B, int T, int recompute_mlp, OptimizerState state) {
    const size_t h100 = (size_t)80e9;
    const MemoryEstimate e = memory_estimate(t, B, T, recompute_mlp, state);
    /* the backend recomputes what it must to fit, up to level 2 */
    const int largest = memory_estimate_largest_batch(t, T, 2, state, MEMORY_RUNTIME_RESERVE, h100);
    printf("  on a GPU (estimate): %.2f MB weights and optimizer state + %.2f MB activations = %.2f MB\n"
           "    (bf16 weights; fp32 gradients; %s; plus the output layer's workspace, the kernels' scratch and %.0f GB "
           "for the runtime)\n"
           "    the largest micro-batch on an 80 GB H100 is -b %d (recomputing what it must to fit)\n",
           (e.weights + e.master + e.grads + e.adamw) / 1e6, e.activations / 1e6, memory_estimate_total(&e) / 1e6,
           state == OPTIMIZER_STATE_BF16 ? "bf16 AdamW m, v" : "fp32 master weights, AdamW m, v",
           MEMORY_RUNTIME_RESERVE / 1e9, largest);
}

/* The learning-rate schedule of the flags (checked by then). */
static LrSchedule schedule_of(const Options *opt) {
    LrSchedule s = {.shape = LR_COSINE, .total_steps = opt->steps, .warmup = opt->warmup,
                    .decay_steps = opt->decay_steps, .lr = opt->lr, .lr_final = opt->lr_final};
    lr_shape_parse(opt->lr_schedule, &s.shape);
    return s;
}

static OptimizerState optimizer_state_of(const Options *opt) {
    return strcmp(opt->optimizer_state, "bf16") ? OPTIMIZER_STATE_FP32 : OPTIMIZER_STATE_BF16;
}

/* Prints the start-up memory table: the backend's, and the host buffers checkpoints are written
 * from (checkpoint_bytes, 0 on ranks that write none), in the total when the backend's memory is
 * host memory too. */
static void print_memory(Backend *be, size_t checkpoint_bytes, int host_backend) {
    MemoryItem items[MAX_MEMORY_ITEMS];
    int n = be->ops->memory_items(be, items);
    size_t total = 0;
    const char *ck_what = "checkpoint buffers (fp32 weights, m, v)";
    printf("memory:\n");
    for (int i = 0; i < n; i++) {
        printf("  %-40s %10.2f MB%s\n", items[i].what, items[i].bytes / 1e6,
               items[i].informational ? "   (not allocated; for comparison)" : "");
        if (!items[i].informational) total += items[i].bytes;
    }
    if (checkpoint_bytes && host_backend) {
        printf("  %-40s %10.2f MB\n", ck_what, checkpoint_bytes / 1e6);
        total += checkpoint_bytes;
    }
    printf("  %-40s %10.2f MB\n", "total allocated", total / 1e6);
    if (checkpoint_bytes && !host_backend) printf("  %-40s %10.2f MB   (host memory)\n", ck_what, checkpoint_bytes / 1e6);
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* A stop asked for on this rank as two flags (SIGINT, SIGTERM) for a mean over the ranks, which the
 * caller takes with its own values (a step's means and its stop go in one collective);
 * stop_from_flags then gives every rank the same answer: SIGINT if any rank got one, else SIGTERM,
 * else 0. */
static void stop_flags(double *values) {
    const int asked = stop_request_signal();
    values[0] = asked == SIGINT ? 1.0 : 0.0;
    values[1] = asked && asked != SIGINT ? 1.0 : 0.0;
}
static int stop_from_flags(const double *means) { return means[0] > 0.0 ? SIGINT : means[1] > 0.0 ? SIGTERM : 0; }

/* The stop signal any rank was asked for, agreed by every rank (one collective). */
static int stop_agreed(const Dist *dist) {
    double flags[2];
    stop_flags(flags);
    dist_mean_scalars(dist, flags, 2);
    return stop_from_flags(flags);
}

/* A shard written over while the run reads it: its tokens are no longer the checked ones. The
 * process ends at once, as it does on a shard cut short (loader_catch_cut_shards): other ranks wait
 * in a collective, and the launcher ends them when this one fails. */
static _Noreturn void shard_changed(const Loader *l) {
    print_error("%s", l->changed);
    exit(1);
}

/* The mean loss over the validation batches, or a stop asked for during them (*stop_signal; the loss
 * is then meaningless). The ranks agree on a stop batch by batch: a long validation would otherwise
 * hold a Ctrl-C for its whole length and then a step's more. With masked data each batch's mean
 * weighs as many targets as it holds (loss_weights.h). The vocabulary-parallel layer's mean is
 * already over every rank's rows, the same on every rank: weighed by each rank's count, the ranks'
 * sum weighs it by their total all the same. */
static float validation_loss(Backend *be, const Dist *dist, Loader *val, int batches, int *inputs, int *targets,
                             int *positions, int *stop_signal) {
    loader_reset(val);
    double sum = 0.0, weight = 0.0;
    *stop_signal = 0;
    for (int i = 0; i < batches; i++) {
        if ((*stop_signal = stop_agreed(dist))) return 0.0f;
        /* documents: positions for every batch, so that the ranks' collectives agree */
        loader_next_batch(val, inputs, targets, positions);
        if (val->changed[0]) shard_changed(val);
        const double mean = be->ops->eval_loss(be, inputs, targets, val->documents ? positions : NULL);
        if (!val->masked) {
            sum += mean;
            continue;
        }
        const double valid = (double)count_valid_targets(targets, (size_t)be->B * be->T);
        sum += mean * valid, weight += valid;
    }
    if (!val->masked) return (float)dist_mean_scalar(dist, sum / batches);
    double both[2] = {sum, weight};
    dist_mean_scalars(dist, both, 2);
    return both[1] > 0.0 ? (float)(both[0] / both[1]) : 0.0f;
}

/* The prompt's tokens (all of them; a sample keeps those that fit its window) into ids, allocated
 * here (NULL with 0 when there is no prompt or no memory). */
static size_t encode_prompt(const Tokenizer *tok, const char *prompt, uint32_t **ids) {
    size_t len = strlen(prompt), n = 0;
    *ids = tok && len ? tokenizer_encode_alloc(tok, prompt, len, 0, &n) : NULL;
    return *ids ? n : 0;
}

/* A sample fills one window of -t tokens: the prompt's first -t - 1 tokens (or the end-of-text
 * token), then generated ones. Says so at the start when that cuts --prompt or -G. */
static void note_sample_window(const Tokenizer *tok, const Options *opt) {
    if (!opt->sample_every || opt->sample_every > opt->steps) return; /* no sample in this run */
    const int T = opt->seq_len;
    uint32_t *ids;
    const size_t n = encode_prompt(tok, opt->prompt, &ids);
    free(ids);
    int start = n < (size_t)(T - 1) ? (int)n : T - 1;
    if (start == 0) start = 1;
    if (n > (size_t)(T - 1))
        printf("note: --prompt is %zu tokens, more than a sample's window of -t %d holds: samples start from its "
               "first %d\n", n, T, T - 1);
    if ((long long)start + opt->gen_tokens > T)
        printf("note: a sample's window holds -t %d tokens, so samples generate %d tokens, not -G %d\n", T,
               T - start, opt->gen_tokens);
}

/* Generates from the prompt (or the end-of-text token) into the window of -t tokens (tokens, B*T
 * of them) and prints and logs the text. */
static void generate_sample(Backend *be, const Tokenizer *tok, const Options *opt, Rng *rng, int step,
                            RunLog *log, int *tokens, float *logits) {
    int B = be->B, T = be->T;
    int start = 1;
    for (int i = 0; i < B * T; i++) tokens[i] = tok ? (int)tokenizer_eot_token(tok) : 0;
    uint32_t *ids;
    const size_t n = encode_prompt(tok, opt->prompt, &ids);
    if (n) {
        start = 0;
        for (size_t i = 0; i < n && start < T - 1; i++) tokens[start++] = (int)ids[i];
        if (start == 0) start = 1;
    }
    free(ids);
    int end = (long long)start + opt->gen_tokens < T ? start + opt->gen_tokens : T;
    const SampleSettings plain = {.temperature = 1.0f, .top_p = 1.0f};
    const int drawn = sample_generate(be, tokens, start, end - start, &plain, rng, logits, NULL, NULL);
    if (drawn < end - start) {
        printf("note: the sample at step %d stopped after %d token(s): the model's logits are NaN or Inf\n", step, drawn);
        end = start + drawn;
    }
    char *text = sample_text(tok, tokens, end);
    if (!text) return;
    printf("sample at step %d: %s\n", step, text);
    runlog_sample(log, step, text);
    free(text);
}

/* 1 when every rank holds this value. Every rank makes both calls and reaches the same answer, so
 * all of them go on or all stop (a rank that skipped a collective would leave the others waiting). */
static int ranks_agree(const Dist *dist, double value) {
    const double largest = dist_max_scalar(dist, value), smallest = -dist_max_scalar(dist, -value);
    return largest == smallest;
}

/* A resume from the checkpoint of step `step` continues one timeline: checkpoints of later steps
 * (latest rolled back by hand) move aside with their log records, and records that a stopped run
 * wrote after its last checkpoint leave the log, since this run writes them again. */
static int leave_later_timeline(const char *run_dir, int step, int damaged, int eval_again, int sample_again,
                                char *err) {
    char moved_to[FGPT_PATH_LEN], moved_log[FGPT_PATH_LEN];
    int resumable = 0;
    int moved = checkpoint_set_aside_after(run_dir, step, damaged, moved_to, sizeof moved_to, &resumable, err);
    if (moved < 0) return -1;
    if (moved && path_format(moved_log, "%s/log.jsonl", moved_to) != 0) {
        snprintf(err, ERR_LEN, "run directory %s is too long a path (pass a shorter -o)", run_dir);
        return -1;
    }
    int cut_short = 0, again = 0;
    int records =
        runlog_trim_after(run_dir, step, eval_again, sample_again, moved ? moved_log : NULL, &cut_short, &again, err);
    if (records < 0) return -1;
    if (moved && resumable)
        printf("note: %s held %d checkpoint(s) after step %d, where this run resumes; moved them and %d log "
               "record(s) after that step to %s (-o %s -y 1 resumes them; remove it when it is not needed)\n",
               run_dir, moved, step, records, moved_to, moved_to);
    else if (moved)
        printf("note: %s held %d checkpoint(s) after step %d, where this run resumes, none of which loads whole; moved "
               "them and %d log record(s) after that step to %s (remove it when it is not needed)\n",
               run_dir, moved, step, records, moved_to);
    else if (records > again) /* those at the step itself (its eval, its sample) come again as they were */
        printf("note: %s/log.jsonl held %d record(s) after step %d, from a run stopped before its next checkpoint; "
               "dropped them, this run writes them again\n", run_dir, records - again, step);
    if (cut_short)
        printf("note: %s/log.jsonl ended in a line cut short (a run killed while writing it); dropped it\n", run_dir);
    return 0;
}

/* ---- the run: what a training run holds, set up in stages and released by close_run ---- */

/* A stage's answer: RUN_ON while the run goes on, else the exit status the process stops with. */
#define RUN_ON (-1)

typedef struct {
    Options opt;
    GPTConfig cfg;
    ParamTable table;
    Dist dist;
    int overlap_comm; /* --overlap-comm as it applies to this world (overlap_on) */
    int launcher; /* this process started the ranks (or is the launcher's self-test): it trains nothing */
    PreparedData prepared; /* the default corpus, when there is no -i */
    const char *train_path, *val_path, *tok_path;
    char beside_init[FGPT_PATH_LEN]; /* the tokenizer.json beside --init-from's weights, taken when no --tokenizer */
    char carried_tok[FGPT_PATH_LEN]; /* the tokenizer.json of the checkpoint -y 1 resumes, taken when no --tokenizer */
    Tokenizer *tok;
    CheckpointTokenizer ck_tok; /* the tokenizer as checkpoints carry it (rank 0) */
    int have_ck_tok;
    int B, T, accum;           /* micro-batch, sequence, micro-batches per step on each rank */
    Loader train_loader, val_loader;
    int have_val, val_batches_per_rank, val_batches_asked;
    uint64_t train_fingerprint; /* checkpoints record it */
    uint64_t val_tokens, val_fingerprint; /* and the validation shard's (0 0: none) */
    int saved_step;                       /* the step of -o's newest checkpoint (-1: none yet) */
    int resumed_world;          /* a resume: the ranks of the checkpoint's run (0: a new run) */
    char resume_changes[1000];  /* a resume: what it changed, for the log */
    float *init_params;         /* --init-from's weights (table layout), until the backend takes them */
    TrainState resumed;         /* a resume: the checkpoint's state (read_resumed_checkpoint) */
    Backend *be;
    CheckpointBuffers ck; /* host copies of the weights and moments that checkpoints are read into and written from */
    CheckpointWriter writer; /* rank 0: writes a checkpoint from ck while training goes on */
    double state_read_s;     /* how long the pending checkpoint's state took to reach ck */
    int *inputs, *targets; /* a batch; with masked training data a step's batches, one after another */
    int *positions;        /* theirs (loader_next_batch), given to the backend when the data has documents */
    float *loss_scales;    /* masked training data: each of a step's batches' (loss_weights.h) */
    uint64_t *step_targets; /* masked training data: each batch's valid targets here, then on every rank */
    float *logits; /* one row, for samples */
    Rng rng;       /* samples' draws */
    int start_step;
    size_t made_dirs_from; /* the length of -o's prefix that names the first directory this run created (0: none) */
    int made_lock;         /* this run created -o/.lock */
    int stopped_by;        /* the signal that stopped training after a step, with a checkpoint (0: none) */
    RunLog log;
    double flops_per_step;
    char err[ERR_LEN];
} Run;

/* What one optimizer step measured, for its log line. */
typedef struct {
    double loss, objective, lse, ms, tokens_per_s, comm_ms; /* loss: the cross-entropy; means over the step */
    float lr, norm;
    int stop_signal; /* a rank was asked to stop (SIGINT if any rank got one, else SIGTERM): every rank
                        stops after this step; 0: none */
} StepResult;

static int fail(const char *err) {
    print_error("%s", err);
    return 1;
}

static int finish_checkpoint(Run *r);
static int finish_checkpoint_on_every_rank(Run *r);

/* A failed write stops the run; the message says what of it is left, once a checkpoint in flight
 * has landed (or failed: its own line says so). err must not be r->err. */
static int fail_write(Run *r, const char *err) {
    finish_checkpoint(r);
    char left[ERR_LEN];
    checkpoint_what_is_left(r->opt.out, left, sizeof left);
    print_error("%s; %s", err, left);
    return 1;
}

/* The parameter table of the model the flags describe (before anything touches the disk). */
static int plan_model(Run *r) {
    if (param_table_build(&r->table, &r->cfg, r->err) != 0) {
        print_error("%s", r->err);
        return 2;
    }
    return RUN_ON;
}

/* --vocab-parallel's checks that need the model as its checkpoint leaves it (--init-from's, or the
 * resumed one's): no softcap from config.json, and a head (tied or untied) whose padded vocabulary
 * splits over the ranks. */
static int check_vocab_parallel(Run *r) {
    const Options *opt = &r->opt;
    if (!opt->vocab_parallel) return RUN_ON;
    if (r->cfg.logit_softcap > 0) {
        print_error("--vocab-parallel takes the plain cross-entropy only, and %s sets final_logit_softcapping %g "
                    "(leave out --vocab-parallel)", opt->shape_from[0] ? opt->shape_label : "--logit-softcap",
                    (double)r->cfg.logit_softcap);
        return 2;
    }
    const int world = opt->gpus * opt->nodes;
    if (!vocab_parallel_check(&r->table, world, opt->batch * opt->seq_len, r->err)) {
        print_error("%s", r->err);
        return 2;
    }
    return RUN_ON;
}

/* Data with documents (SHARD_DOCUMENTS) runs every document at its own positions. A tied GPT-2 head
 * split by --vocab-parallel looks up the position table inside the head's slice, over every rank's
 * tokens at their rows' places in a window, which has no positions of its own: refused. */
static int check_documents(Run *r) {
    if (!r->train_loader.documents || !r->opt.vocab_parallel || r->cfg.untied_head || r->cfg.positions != POS_LEARNED)
        return RUN_ON;
    print_error("%s marks documents, whose positions a GPT-2 head tied to the embedding cannot take under "
                "--vocab-parallel (leave out --vocab-parallel, or train an untied or RoPE model)", r->train_path);
    return 2;
}

/* --overlap-comm auto. On one host whose GPUs NVLink joins, reducing after the backward was as fast
 * or faster in every measurement (ZeRO-1: 0.1-1.5 % on two H100s, two and four H200s; the all-reduce
 * within 0.2 % or faster): the reductions beside the backward take SMs and memory bandwidth from its
 * kernels and slow it by about what they hide, and over NVLink there is little to hide. Over slower
 * links (hosts over a network, PCIe) the reductions are long enough that hiding them pays.
 * dev/RESULTS.md, Multi-GPU. */
static int overlap_on(const Options *opt, const Dist *d) {
    if (d->world == 1) return 0;
    /* every rank makes the same collectives whatever its flag, so ranks started with different
     * values reach the check below instead of pairing one rank's query with another's reduction */
    const int nvlink = dist_one_nvlink_host(d, opt->nodes);
    const int overlap = !strcmp(opt->overlap_comm, "auto") ? !nvlink : !strcmp(opt->overlap_comm, "1");
    return ranks_agree(d, overlap) ? overlap : -1;
}

/* The ranks of this run: a worker started by `-g N` knows its rank from the environment; anything
 * else is either the launcher of this node (-g N > 1 or --nodes M > 1) or a world of one. The
 * launcher returns the workers' status; a worker joins NCCL. */
static int start_world(Run *r, char **argv) {
    const Options *opt = &r->opt;
    if (dist_from_env(&r->dist, r->err) != 0) {
        print_error("%s", r->err);
        return 2;
    }
    const int is_worker = getenv("FUSEDGPT_RANK") != NULL;
    const char *test_launcher = getenv("FUSEDGPT_TEST_LAUNCHER");
    if (test_launcher && strcmp(test_launcher, "1") == 0) {
        /* the launcher and rendezvous without GPUs (tests) */
        r->launcher = 1;
        if (!is_worker) return dist_launch(argv, opt->gpus, opt->nodes, opt->node_rank, opt->master);
        return dist_selftest_worker(&r->dist);
    }
    const int cpu = strcmp(opt->device, "cpu") == 0;
    if (!cpu) {
        char why[ERR_LEN] = "";
        int n = cuda_device_count(why);
        if (n == 0) {
            print_error("no CUDA GPU available (%s); use --device cpu for the CPU reference backend",
                        why);
            return 1;
        }
        if (opt->gpus > n) {
            print_error("-g/--gpus %d but this host has %d CUDA GPU(s)", opt->gpus, n);
            return 1;
        }
        if ((opt->gpus > 1 || opt->nodes > 1) && !is_worker) {
            r->launcher = 1;
            return dist_launch(argv, opt->gpus, opt->nodes, opt->node_rank, opt->master);
        }
        if (is_worker && r->dist.world != opt->gpus * opt->nodes) {
            print_error("worker of a %d-rank group started with -g %d --nodes %d", r->dist.world,
                        opt->gpus, opt->nodes);
            return 2;
        }
        if (dist_nccl_init(&r->dist, r->err) != 0) return fail(r->err);
        r->overlap_comm = overlap_on(opt, &r->dist);
        if (r->overlap_comm < 0) {
            print_error("the ranks reduce gradients in different modes (--overlap-comm differs between nodes): "
                        "start every node with the same flags");
            return 2;
        }
        /* -y auto looks at -o on each host: one that resumed beside one that starts anew would train
         * two models as one */
        if (!ranks_agree(&r->dist, opt->resume)) {
            print_error("the ranks disagree on resuming: -o %s holds a checkpoint on some hosts and none on others "
                        "(-y auto): give every host the same run directory (a shared file system)", opt->out);
            return 1;
        }
    }
    if (cpu && (opt->gpus != 1 || opt->nodes != 1 || r->dist.world != 1)) {
        print_error("-g/--gpus and --nodes (data parallel) apply to --device cuda only (see ./train --help)");
        return 2;
    }
    if (cpu && (!strcmp(opt->zero, "1") || !strcmp(opt->overlap_comm, "0") || opt->bucket_mb || strcmp(opt->grad_reduce, "fp32"))) {
        print_error("--zero, --overlap-comm, --bucket-mb and --grad-reduce set how GPUs share gradients: "
                    "they apply to --device cuda with -g/--nodes, not to the CPU backend (see ./train --help)");
        return 2;
    }
    /* Rank 0 alone prints, logs, samples and checkpoints; the others keep stderr for errors. */
    if (r->dist.rank != 0 && !freopen("/dev/null", "w", stdout)) {
        print_error("rank %d cannot silence its stdout", r->dist.rank);
        return 1;
    }
    return RUN_ON;
}

/* Fine-tuning: --init-from's weights, read whole before the data is prepared or the run directory
 * made, so that a damaged file stops the run before either. Every rank reads the file (ZeRO-1
 * scatters from each rank's copy); a resume takes its weights from the checkpoint instead. */
static int read_init_from(Run *r) {
    const Options *opt = &r->opt;
    if (!opt->init_from[0] || opt->resume) return RUN_ON;
    if (!(r->init_params = hf_load_weights(opt->init_from, &r->table, r->err))) return fail(r->err);
    return RUN_ON;
}

/* The length of the first prefix of path, cut at a '/', that does not exist (the first directory
 * make_dirs creates for it), or 0 when path exists. */
static size_t missing_from(const char *path) {
    char p[FGPT_PATH_LEN];
    struct stat sb;
    snprintf(p, sizeof p, "%s", path); /* validate checked that -o fits */
    for (size_t i = 1;; i++) {
        if (p[i] != '/' && p[i] != 0) continue;
        const char c = p[i];
        p[i] = 0;
        const int missing = stat(p, &sb) != 0;
        p[i] = c;
        if (missing) return i;
        if (c == 0) return 0;
    }
}

/* One trainer per run directory: two would interleave their checkpoints, latest and log. A resume
 * with nothing to resume stops before it creates the directory (a typo in -o). What this creates is
 * noted, so that a run that stops before it writes anything leaves the disk as it found it. */
static int claim_run_dir(Run *r) {
    const Options *opt = &r->opt;
    if (r->dist.rank != 0) return RUN_ON;
    /* a run's files beside a checkpoint's weights would make it neither (transformers and -y alike) */
    if (checkpoint_is_checkpoint_dir(opt->out)) {
        print_error("-o %s is a checkpoint (config.json and its weights), not a run's directory: pass the run's "
                    "directory to go on with it, or a new -o (--init-from %s starts from its weights)", opt->out,
                    opt->out);
        return 1;
    }
    if (opt->resume) {
        char name[256];
        int found = checkpoint_latest_name(opt->out, name, sizeof name, r->err);
        if (found < 0 && dir_locked_by_another(opt->out)) { /* a trainer before its first checkpoint */
            print_error("another trainer is using run directory %s; wait for it to finish or pass another -o",
                        opt->out);
            return 1;
        }
        if (found < 0) return fail(r->err);
        if (found == 1) {
            /* a newer step directory passed over is named: its state file is cut short or not ours */
            const int newest = checkpoint_newest_step(opt->out);
            char skipped[96] = "";
            if (newest > checkpoint_dir_step(name))
                snprintf(skipped, sizeof skipped, " (step_%08d, newer, is incomplete or damaged)", newest);
            printf("note: %s/latest is missing (a crash or a full disk while it was written); resuming from the "
                   "newest checkpoint that loads whole, from %s down%s\n", opt->out, name, skipped);
        }
    }
    char lock[FGPT_PATH_LEN];
    struct stat sb;
    r->made_dirs_from = missing_from(opt->out);
    r->made_lock = path_format(lock, "%s/.lock", opt->out) == 0 && stat(lock, &sb) != 0;
    if (lock_dir(opt->out) < 0) {
        if (errno == EWOULDBLOCK) {
            print_error("another trainer is using run directory %s; wait for it to finish or pass "
                        "another -o", opt->out);
            return 1;
        }
        if (errno != ENOSYS && errno != ENOLCK && errno != EOPNOTSUPP) {
            print_error("cannot create or lock run directory %s: %s (check -o)", opt->out,
                        strerror(errno));
            return 1;
        }
        /* a cluster file system mounted without locks: train, but nothing stops a second trainer */
        printf("note: run directory %s cannot be locked (%s); do not start a second trainer on it\n", opt->out,
               strerror(errno));
    }
    /* the lock of an earlier run opens read-only: a directory this run cannot write into would only
     * be found at its first checkpoint, after the training it would lose */
    if (access(opt->out, W_OK | X_OK) != 0) {
        print_error("cannot write into run directory %s: %s (check -o and its permissions)", opt->out,
                    strerror(errno));
        return 1;
    }
    return RUN_ON;
}

/* Undoes claim_run_dir for a run that stopped before it wrote anything: the lock file and the
 * directories it created go. rmdir removes empty directories only, so nothing else can. */
static void release_run_dir(const Run *r) {
    char p[FGPT_PATH_LEN];
    if (r->made_lock && path_format(p, "%s/.lock", r->opt.out) == 0) unlink(p);
    if (!r->made_dirs_from) return;
    snprintf(p, sizeof p, "%s", r->opt.out);
    size_t n = strlen(p);
    while (n > 1 && p[n - 1] == '/') p[--n] = 0;
    while (n >= r->made_dirs_from && rmdir(p) == 0) {
        while (n > 0 && p[n - 1] != '/') n--; /* up to the parent */
        while (n > 1 && p[n - 1] == '/') n--;
        p[n] = 0;
    }
}

/* 1 for a tokenizer laid out as ours (ids 0..255 the single bytes, "<|endoftext|>" last), the only
 * kind that can have made the default corpus: a cheap refusal before preparing it for another. */
static int has_our_layout(const Tokenizer *t) {
    size_t len;
    const uint8_t *b;
    for (uint32_t id = 0; id < 256; id++)
        if (!(b = tokenizer_token_bytes(t, id, &len)) || len != 1 || b[0] != id) return 0;
    const uint32_t eot = tokenizer_eot_token(t);
    b = tokenizer_token_bytes(t, eot, &len);
    return eot + 1 == tokenizer_vocab_size(t) && b && len == 13 && memcmp(b, "<|endoftext|>", 13) == 0;
}

/* The default corpus is tokenized by our own tokenizer: one given (--tokenizer, or --init-from's) that
 * did not make it is refused with the command that tokenizes the user's text for it. */
static int refuse_default_corpus(const Run *r) {
    print_error("the default corpus is tokenized by its own tokenizer, not %s: tokenize your text with "
                "`./train prepare --tokenizer %s -o DIR FILE...` and pass -i DIR/train.bin -j DIR/val.bin",
                r->tok_path, r->tok_path);
    return 1;
}

/* r->tok from r->tok_path, checked against the model's vocabulary. `from` says where it was found
 * when no --tokenizer named it (beside --init-from's weights, in the checkpoint resumed): such a one is
 * not needed to train on shards, so one that does not fit is only named; one named by --tokenizer
 * must load. */
static int load_tokenizer(Run *r, const char *from) {
    const GPTConfig *cfg = &r->cfg;
    r->tok = tokenizer_load(r->tok_path, r->err);
    if (r->tok && tokenizer_vocab_size(r->tok) > (uint32_t)cfg->vocab_size) {
        /* weights from --init-from or a resumed checkpoint fix the vocabulary: -v cannot help there */
        if (from || r->opt.init_from[0] || r->opt.resume)
            snprintf(r->err, sizeof r->err, "tokenizer %s has %u tokens, more than the vocabulary of %d of the model's "
                     "weights: it is not their tokenizer (pass the one they were trained with as --tokenizer)",
                     r->tok_path, tokenizer_vocab_size(r->tok), cfg->vocab_size);
        else
            snprintf(r->err, sizeof r->err, "tokenizer %s has %u tokens but the model's vocabulary is %d (pass -v %u)",
                     r->tok_path, tokenizer_vocab_size(r->tok), cfg->vocab_size, tokenizer_vocab_size(r->tok));
        tokenizer_free(r->tok);
        r->tok = NULL;
    }
    if (!r->tok && !from) return fail(r->err);
    if (!r->tok && r->dist.rank == 0)
        printf("note: not using %s (%s); checkpoints will carry no tokenizer.json (pass --tokenizer FILE)\n",
               r->tok_path, r->err);
    if (r->tok && from && r->dist.rank == 0) printf("tokenizer: %s (%s)\n", r->tok_path, from);
    if (r->tok && tokenizer_load_note(r->tok) && !r->opt.resume && r->dist.rank == 0)
        printf("note: %s\n", tokenizer_load_note(r->tok));
    /* a -v of our own choosing above the tokenizer's (weights fix theirs, often with room to spare) */
    const uint32_t words = r->tok ? tokenizer_vocab_size(r->tok) : 0;
    if (r->tok && !from && !r->opt.init_from[0] && !r->opt.resume && words < (uint32_t)cfg->vocab_size &&
        r->dist.rank == 0)
        printf("note: the model's vocabulary of %d is larger than the %u tokens of %s: ids %u to %d have no text, "
               "yet cost the output layer its work (pass -v %u unless the room is meant for tokens to come)\n",
               cfg->vocab_size, words, r->tok_path, words, cfg->vocab_size - 1, words);
    return RUN_ON;
}

/* The default corpus, prepared for the model's vocabulary (cached), and its tokenizer unless one
 * was given, which must be the one that made it. */
static int use_default_corpus(Run *r, int beside) {
    const Options *opt = &r->opt;
    const GPTConfig *cfg = &r->cfg;
    if (opt->init_from[0] && !opt->tokenizer[0] && !beside) {
        print_error("--init-from %s has no tokenizer.json, and the default corpus is tokenized by our own tokenizer, "
                    "which need not be the one its weights learnt: pass -i and -j shards made by the model's "
                    "tokenizer, or --tokenizer FILE naming the one that made the default corpus", opt->init_from);
        return 1;
    }
    if (beside && !r->tok) {
        print_error("--init-from %s: its tokenizer.json cannot be used (%s), and the default corpus is tokenized by "
                    "our own tokenizer: pass -i and -j shards made by the model's tokenizer", opt->init_from, r->err);
        return 1;
    }
    if (r->tok && !has_our_layout(r->tok)) return refuse_default_corpus(r);
    if (prepare_default_corpus((uint32_t)cfg->vocab_size, opt->cache_dir, &r->prepared, r->err) != 0)
        return fail(r->err);
    r->train_path = r->prepared.train_path;
    r->val_path = r->prepared.val_path;
    printf("data: the default corpus %s%s, tokenizer of %u tokens\n", r->prepared.corpus,
           prepare_wants_extended_corpus((uint32_t)cfg->vocab_size) ? " (the standard one supports fewer tokens than -v)"
                                                                    : "",
           r->prepared.vocab_reached);
    if (r->prepared.vocab_reached < r->prepared.vocab_requested)
        printf("tokenizer: the corpus supports %u of the %u tokens asked for; the model keeps V = %d\n",
               r->prepared.vocab_reached, r->prepared.vocab_requested, cfg->vocab_size);
    /* its tokenizer, not its shards' headers: a cache of version 1 records none */
    Tokenizer *made = tokenizer_load(r->prepared.tokenizer_path, r->err);
    if (!made) return fail(r->err);
    if (!r->tok) {
        r->tok = made;
        r->tok_path = r->prepared.tokenizer_path;
        return RUN_ON;
    }
    const int same = tokenizer_fingerprint(made) == tokenizer_fingerprint(r->tok);
    tokenizer_free(made);
    return same ? RUN_ON : refuse_default_corpus(r);
}

/* --tokenizer overrides the tokenizer.json beside --init-from's weights: said when they differ, since
 * the weights learnt the other one's ids. */
static void note_other_than_init_from(const Run *r) {
    char path[FGPT_PATH_LEN], err[ERR_LEN];
    if (!file_in_dir(path, r->opt.init_from, "tokenizer.json")) return;
    Tokenizer *own = tokenizer_load(path, err);
    if (own && tokenizer_fingerprint(own) != tokenizer_fingerprint(r->tok))
        printf("note: --tokenizer %s is not %s, the tokenizer the weights were trained with: its ids mean other "
               "text to the model\n", r->tok_path, path);
    tokenizer_free(own);
}

/* A shard of val that is also one of train (the same file), or NULL. */
static const char *shard_in_both(const Loader *train, const Loader *val) {
    for (size_t i = 0; i < val->num_shards; i++)
        for (size_t k = 0; k < train->num_shards; k++) {
            const MappedShard *a = &train->shards[k].map, *b = &val->shards[i].map;
            if (a->device == b->device && a->inode == b->inode) return val->shards[i].path;
        }
    return NULL;
}

/* A shard made by another tokenizer than the run's (its header's fingerprint) is named as such
 * before its ids are checked against the vocabulary: "pass -v" would be the wrong fix for ids of
 * another tokenizer, and --init-from's vocabulary refuses it anyway. A header that does not read is
 * left to the loader, which names it. 0, or 1 after the message. */
static int shards_of_the_tokenizer(Run *r) {
    if (!r->tok) return 0;
    /* the model's own tokenizer (--init-from's) is to be kept: only the text can change */
    char fix[FGPT_PATH_LEN + 128], err[ERR_LEN];
    if (r->tok_path == r->beside_init)
        snprintf(fix, sizeof fix, "tokenize the text for this model with `./train prepare --tokenizer %s`", r->tok_path);
    else
        snprintf(fix, sizeof fix, "pass the tokenizer that made it, or tokenize the text again with `./train prepare "
                 "--tokenizer %s`", r->tok_path);
    const uint64_t fp = tokenizer_fingerprint(r->tok);
    const char *paths[2] = {r->train_path, r->have_val ? r->val_path : NULL};
    for (int k = 0; k < 2; k++) {
        ShardPaths shards;
        if (!paths[k] || shard_paths(paths[k], &shards, err) != 0) continue; /* the loader names what is wrong */
        int other = 0;
        for (size_t i = 0; i < shards.n && !other; i++) {
            ShardHeader h;
            other = shard_read_header(shards.paths[i], &h, err) == 0 &&
                    shard_check_tokenizer(shards.paths[i], h.tokenizer, r->tok_path, fp, fix, r->err) != 0;
        }
        shard_paths_free(&shards);
        if (other) {
            print_error("%s", r->err);
            return 1;
        }
    }
    return 0;
}

/* Data: the user's shards, or the default corpus prepared for this vocabulary; the tokenizer; the
 * loaders, each rank reading its share. */
static int resolve_data(Run *r) {
    const Options *opt = &r->opt;
    const GPTConfig *cfg = &r->cfg;
    r->train_path = opt->train_data, r->val_path = opt->val_data, r->tok_path = opt->tokenizer;
    /* a Hugging Face checkpoint's own tokenizer, unless another is named: samples decode with it,
     * checkpoints carry it, and a shard made by another is refused */
    const int beside =
        !r->tok_path[0] && opt->init_from[0] && file_in_dir(r->beside_init, opt->init_from, "tokenizer.json");
    if (beside) r->tok_path = r->beside_init;
    /* a resume keeps the tokenizer its checkpoint carries, unless another is named: the checkpoints it
     * writes carry it on (the default corpus brings its own) */
    char latest[256], ignored[ERR_LEN], dir[FGPT_PATH_LEN];
    const int carried = !r->tok_path[0] && opt->resume && opt->train_data[0] &&
                        checkpoint_latest_name(opt->out, latest, sizeof latest, ignored) >= 0 &&
                        path_format(dir, "%s/%s", opt->out, latest) == 0 &&
                        file_in_dir(r->carried_tok, dir, "tokenizer.json");
    if (carried) r->tok_path = r->carried_tok;
    const char *from = beside ? "beside --init-from's weights" : carried ? "the resumed checkpoint's" : NULL;
    if (r->tok_path[0] && load_tokenizer(r, from) != RUN_ON) return 1;
    if (!r->train_path[0] && use_default_corpus(r, beside) != RUN_ON) return 1;
    if (!r->tok) r->tok_path = "";
    if (opt->prompt[0] && !r->tok) {
        print_error("--prompt needs a tokenizer to encode it, and %s brings none: pass --tokenizer FILE (the one that "
                    "made -i's tokens)", opt->init_from[0] ? opt->init_from : opt->out);
        return 1;
    }
    if (opt->prompt[0] && (!opt->sample_every || opt->sample_every > opt->steps) && r->dist.rank == 0)
        printf("note: --prompt is for samples during training, and -s %d takes none in this run (sample a checkpoint "
               "with ./train sample --prompt)\n", opt->sample_every);
    if (opt->train_data[0] && !r->val_path[0] && opt->val_every > 0) /* -i without -j: nothing to validate on */
        printf("validation: off (no -j/--val-data shard beside -i); --val-every has nothing to evaluate\n");
    if (r->val_path[0] && opt->val_every == 0 && opt->val_data[0])
        printf("validation: off (--val-every 0): -j %s is not read\n", r->val_path);
    repeated_flags_note(&opt->repeated, stdout);
    if (opt->logits_mb != OUTPUT_FUSED_DEFAULT_BUDGET_MIB && strcmp(opt->output, "fused"))
        printf("output layer: --logits-mb sizes the fused layer's chunks; --output %s does not use it\n", opt->output);
    /* the cosine and linear decays run from the step after the warmup (at -l) to the last (at
     * --lr-final), so they need two steps, and wsd's one; with fewer, the last step runs at -l or, in a
     * warmup longer than the run, below (a one-step run without warmup, a smoke test, runs at -l
     * unremarked). A wsd decay longer than the steps the warmup leaves starts right after it. */
    const LrSchedule schedule = schedule_of(opt);
    const int after = opt->steps - opt->warmup, needs = schedule.shape == LR_WSD ? 1 : 2;
    if (opt->warmup > opt->steps)
        printf("schedule: --warmup %d is longer than -x %d: the learning rate climbs to %g of -l %g and never decays "
               "to --lr-final\n", opt->warmup, opt->steps, (double)lr_at_step(&schedule, opt->steps - 1),
               (double)opt->lr);
    else if (opt->warmup > 0 && after < needs && opt->lr_final != opt->lr)
        printf("schedule: --warmup %d leaves %s of -x %d after it: the last step runs at -l %g, not --lr-final %g "
               "(the decay needs %s)\n", opt->warmup, after == 0 ? "no step" : "one step", opt->steps, (double)opt->lr,
               (double)opt->lr_final, needs == 2 ? "two steps" : "a step");
    else if (schedule.shape == LR_WSD && after > 0) {
        const int asked = lr_wsd_decay_asked(&schedule);
        if (lr_wsd_decay_steps(&schedule) < asked) {
            char what[64];
            if (opt->decay_steps > 0) snprintf(what, sizeof what, "--decay-steps %d", asked);
            else snprintf(what, sizeof what, "a fifth of -x (%d steps, wsd's default decay)", asked);
            printf("schedule: %s is longer than the %d step%s after the warmup: the decay starts right after it\n",
                   what, after, after == 1 ? "" : "s");
        }
    }
    if (!r->tok && r->dist.rank == 0 && !from)
        printf("note: no --tokenizer: checkpoints will carry no tokenizer.json\n");
    if (r->tok && opt->tokenizer[0] && opt->init_from[0] && r->dist.rank == 0) note_other_than_init_from(r);
    r->have_ck_tok = r->tok && r->dist.rank == 0 && checkpoint_tokenizer(r->tok, cfg->max_seq_len, &r->ck_tok);
    note_sample_window(r->tok, opt);

    const int world = r->dist.world, rank = r->dist.rank;
    r->B = opt->batch, r->T = opt->seq_len, r->accum = opt->total_batch / (r->B * r->T * world);
    /* --val-batches counts batches over all ranks, so N GPUs evaluate what one GPU evaluates */
    r->val_batches_per_rank = loader_batches_per_rank(opt->val_batches, world);
    r->have_val = r->val_path[0] != 0 && opt->val_every > 0; /* validation that never runs needs no shard */
    if (shards_of_the_tokenizer(r) != 0) return 1;
    PackKind pack = PACK_WRAPPED;
    pack_kind_parse(opt->pack, &pack);
    int rc = loader_open(&r->train_loader, r->train_path, (uint32_t)cfg->vocab_size, r->B, r->T, rank, world,
                         r->accum, 1, opt->seed, pack, r->err);
    if (rc == 0 && r->have_val) {
        rc = loader_open(&r->val_loader, r->val_path, (uint32_t)cfg->vocab_size, r->B, r->T, rank, world, 1, 0, 0,
                         pack, r->err);
        if (rc == LOADER_TOO_SHORT && r->val_path == r->prepared.val_path) {
            /* the default corpus's validation text is 1 % of it: a batch this large outgrows it */
            printf("validation: off (%s)\n", r->err);
            r->have_val = 0, rc = 0;
        } else if (rc == LOADER_TOO_SHORT) {
            print_error("%s, or pass --val-every 0", r->err);
            return 1;
        }
    }
    if (rc == -1 && r->prepared.train_path[0]) { /* the default corpus: its cache, which the trainer made, is damaged */
        char dir[PREPARE_PATH_LEN];
        snprintf(dir, sizeof dir, "%s", r->prepared.train_path);
        if (strrchr(dir, '/')) *strrchr(dir, '/') = 0;
        print_error("%s; it belongs to the default corpus's cache: delete %s and run again to prepare it anew", r->err,
                    dir);
        return 1;
    }
    if (rc != 0) return fail(r->err);
    /* the two shards must come from one tokenizer, or the validation loss means nothing */
    if (r->have_val && r->train_loader.shard_vocab != r->val_loader.shard_vocab) {
        print_error("%s was tokenized for a vocabulary of %u but %s for %u: pass a validation shard "
                    "made by the same tokenizer (a prepare stopped while rewriting a folder leaves such a pair: "
                    "run it again)", r->train_path, r->train_loader.shard_vocab, r->val_path,
                    r->val_loader.shard_vocab);
        return 1;
    }
    if (r->have_val && r->train_loader.shard_tokenizer && r->val_loader.shard_tokenizer &&
        r->train_loader.shard_tokenizer != r->val_loader.shard_tokenizer) {
        print_error("%s and %s were made by different tokenizers: pass a validation shard made by the training "
                    "shard's tokenizer (a prepare stopped while rewriting a folder leaves such a pair: run it again)",
                    r->train_path, r->val_path);
        return 1;
    }
    /* allowed (a smoke test), but a validation loss that looks too good needs saying */
    const char *shared = r->have_val ? shard_in_both(&r->train_loader, &r->val_loader) : NULL;
    if (shared && r->val_loader.num_shards == 1 && r->train_loader.num_shards == 1)
        printf("note: -j %s is the training shard itself: the validation loss is measured on the training data\n",
               r->val_path);
    else if (shared)
        printf("note: %s is a shard of both -i and -j: the validation loss is measured partly on the training "
               "data\n", shared);
    /* a tokenizer of another size than the shard records is not the one that made it (files of two
     * prepares put side by side give such a pair): a smaller one cannot decode the
     * shard's ids, and is refused; a larger one is named (a synthetic shard may use a few ids) */
    if (r->tok && tokenizer_vocab_size(r->tok) < r->train_loader.shard_vocab) {
        print_error("tokenizer %s has %u tokens but %s was tokenized for a vocabulary of %u: pass the tokenizer "
                    "that made the shard (or prepare the text again)", r->tok_path, tokenizer_vocab_size(r->tok),
                    r->train_path, r->train_loader.shard_vocab);
        return 1;
    }
    if (r->tok && tokenizer_vocab_size(r->tok) > r->train_loader.shard_vocab && rank == 0)
        printf("note: tokenizer %s has %u tokens, more than the vocabulary of %u that %s records: samples and "
               "checkpoints carry it; pass the tokenizer that made the shard if it is another\n", r->tok_path,
               tokenizer_vocab_size(r->tok), r->train_loader.shard_vocab, r->train_path);
    r->train_fingerprint = loader_fingerprint(&r->train_loader);
    if (r->have_val) r->val_tokens = r->val_loader.num_tokens, r->val_fingerprint = loader_fingerprint(&r->val_loader);
    /* a small validation shard (1 % of a small corpus) is used whole rather than refused */
    r->val_batches_asked = r->val_batches_per_rank;
    if (r->have_val && r->val_loader.num_batches < (uint64_t)r->val_batches_per_rank)
        r->val_batches_per_rank = (int)r->val_loader.num_batches;
    return RUN_ON;
}

/* --zero auto: ZeRO-1 wherever there is a gradient to share, except with --vocab-parallel, which
 * splits the head instead (the two do not combine yet). It ran level with the all-reduce or faster in
 * every measurement over NVLink, overlapped and after the backward (up to 3.1 %, on two and on four
 * GPUs), and keeps less memory (dev/RESULTS.md, Multi-GPU). */
static int zero1_on(const Options *opt, int world) {
    if (!strcmp(opt->zero, "auto")) return world > 1 && !opt->vocab_parallel;
    return !strcmp(opt->zero, "1");
}

static OutputKind output_kind(const Options *opt) {
    return strcmp(opt->output, "canonical") == 0 ? OUTPUT_CANONICAL : OUTPUT_FUSED;
}

/* Rank 0 writes every checkpoint; a resume has each rank read one. */
static int keeps_checkpoint(const Run *r) {
    return r->dist.rank == 0 || r->opt.resume;
}

/* The CPU backend and its checkpoint buffers in this host's memory, asked before either is made or
 * a checkpoint read into them. */
static int check_host_memory(Run *r) {
    const Options *opt = &r->opt;
    if (strcmp(opt->device, "cpu") != 0) return RUN_ON;
    if (host_memory_short(backend_cpu_bytes(&r->table, r->B, r->T, output_kind(opt), 1) +
                              (keeps_checkpoint(r) ? (double)checkpoint_buffers_bytes(&r->table) : 0.0),
                          "the CPU backend with its checkpoint buffers",
                          opt->init_from[0] || opt->resume ? "lower -b or -t"
                                                           : "lower -b or -t, or the model: -e, -v, --max-seq-len",
                          r->err))
        return fail(r->err);
    return RUN_ON;
}

/* A resume reads its checkpoint into the checkpoint buffers before the backend is made, which then
 * starts from the checkpoint's weights instead of drawing the seed's only to have them replaced
 * (2 s of Llama-3.2-1B's start on 16 cores). resume() checks and applies the rest. */
static int read_resumed_checkpoint(Run *r) {
    const Options *opt = &r->opt;
    if (!opt->resume) return RUN_ON;
    if (opt->shape_unread[0] && r->dist.rank == 0)
        printf("note: the resumed checkpoint's config.json does not read (%s): the model's shape comes from the flags, "
               "and eval, sample and transformers cannot read that checkpoint (the next one is written whole)\n",
               opt->shape_unread);
    if (checkpoint_buffers_alloc(&r->ck, &r->table, r->err) != 0) return fail(r->err);
    if (checkpoint_load_latest(opt->out, &r->table, r->ck.params, r->ck.m, r->ck.v, &r->resumed, r->err) != 0)
        return fail(r->err);
    return RUN_ON;
}

/* The backend that trains (CPU reference or CUDA), from --init-from's weights, a resumed
 * checkpoint's or the seed's; the checkpoint buffers and the host buffers of a batch. */
static int create_backend(Run *r) {
    const Options *opt = &r->opt;
    const OutputKind output = output_kind(opt);
    DataParallel dp = {.dist = &r->dist, .zero1 = zero1_on(opt, r->dist.world), .overlap = r->overlap_comm,
                       .bucket_bytes = (size_t)opt->bucket_mb << 20, .bf16_wire = !strcmp(opt->grad_reduce, "bf16"),
                       .vocab_parallel = opt->vocab_parallel};
    const float *init = r->init_params ? r->init_params : opt->resume ? r->ck.params : NULL;
    r->be = strcmp(opt->device, "cpu") == 0
                ? backend_cpu_create(&r->table, r->B, r->T, output, optimizer_state_of(opt), opt->seed, init, r->err)
                : backend_cuda_create(&r->table, r->B, r->T, output, (size_t)opt->logits_mb << 20,
                                      opt->recompute_gelu, optimizer_state_of(opt), opt->seed, init, &dp, r->err);
    free(r->init_params); /* the backend holds them now, AdamW's moments at zero */
    r->init_params = NULL;
    if (!r->be) return fail(r->err);
    r->be->dist = &r->dist;
    r->be->z_loss = opt->z_loss, r->be->label_smoothing = opt->label_smoothing;
    if (keeps_checkpoint(r) && !r->ck.params && checkpoint_buffers_alloc(&r->ck, &r->table, r->err) != 0)
        return fail(r->err);
    /* masked data fetches a step's batches at once (fetch_masked_step) */
    const size_t batches = r->train_loader.masked ? (size_t)r->accum : 1;
    r->inputs = malloc(batches * r->B * r->T * sizeof(int));
    r->targets = malloc(batches * r->B * r->T * sizeof(int));
    r->positions = malloc(batches * r->B * r->T * sizeof(int));
    r->loss_scales = malloc((size_t)r->accum * sizeof(float));
    r->step_targets = malloc(2 * (size_t)r->accum * sizeof(uint64_t));
    r->logits = malloc((size_t)r->cfg.vocab_size * sizeof(float));
    if (!r->inputs || !r->targets || !r->positions || !r->loss_scales || !r->step_targets || !r->logits)
        return fail("out of host memory");
    rng_seed(&r->rng, opt->seed ^ 0x5eed5a3e1eull);
    return RUN_ON;
}

/* Appends ", what" (what alone first) to the list in buf (size bytes, len used so far). */
static void list_append(char *buf, size_t size, size_t *len, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void list_append(char *buf, size_t size, size_t *len, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    if (*len && *len < size) *len += (size_t)snprintf(buf + *len, size - *len, ", ");
    if (*len < size) *len += (size_t)vsnprintf(buf + *len, size - *len, fmt, ap);
    va_end(ap);
}

/* A resume may take another learning-rate schedule (a longer run, another peak), but the learning
 * rate then jumps where it goes on: one line says what changed and how far it jumps. */
static void note_schedule_change(const TrainState *st, const Options *opt, int step, char *changed) {
    char changes[400] = "";
    size_t len = 0;
    const LrSchedule *old = &st->schedule, new = schedule_of(opt);
    if (old->total_steps != new.total_steps)
        list_append(changes, sizeof changes, &len, "-x/--steps %d -> %d", old->total_steps, new.total_steps);
    if (old->lr != new.lr) list_append(changes, sizeof changes, &len, "-l/--lr %g -> %g", old->lr, new.lr);
    if (old->warmup != new.warmup)
        list_append(changes, sizeof changes, &len, "--warmup %d -> %d", old->warmup, new.warmup);
    if (old->lr_final != new.lr_final)
        list_append(changes, sizeof changes, &len, "--lr-final %g -> %g", old->lr_final, new.lr_final);
    if (old->shape != new.shape)
        list_append(changes, sizeof changes, &len, "--lr-schedule %s -> %s", lr_shape_name(old->shape),
                    lr_shape_name(new.shape));
    if (old->decay_steps != new.decay_steps)
        list_append(changes, sizeof changes, &len, "--decay-steps %d -> %d", old->decay_steps, new.decay_steps);
    /* a new -x moves a wsd decay, which the flags alone do not show */
    const int d_old = lr_wsd_decay_steps(old), d_new = lr_wsd_decay_steps(&new);
    if (old->shape == LR_WSD && new.shape == LR_WSD && d_old > 0 && d_new > 0 &&
        (d_old != d_new || old->total_steps != new.total_steps))
        list_append(changes, sizeof changes, &len, "wsd's decay: steps %d-%d -> %d-%d", old->total_steps - d_old + 1,
                    old->total_steps, new.total_steps - d_new + 1, new.total_steps);
    snprintf(changed, 400, "%s", changes);
    if (!len) return;
    const float was = lr_at_step(old, step), now = lr_at_step(&new, step);
    if (was == now) /* in the warmup, say, where -x does not reach */
        printf("schedule: changed since the checkpoint: %s; the learning rate of step %d stays %.3e\n", changes,
               step + 1, now);
    else
        printf("schedule: changed since the checkpoint: %s; the learning rate of step %d goes from %.3e to %.3e\n",
               changes, step + 1, was, now);
}

/* The run's optimizer and objective settings, as a checkpoint records them. */
static TrainSettings train_settings(const Options *opt) {
    return (TrainSettings){.recorded = 1, .bf16_state = optimizer_state_of(opt) == OPTIMIZER_STATE_BF16,
                           .weight_decay = opt->weight_decay, .grad_clip = opt->grad_clip, .z_loss = opt->z_loss,
                           .label_smoothing = opt->label_smoothing};
}

/* A resume may also take other optimizer or objective settings (a fine-tuning phase, a clip found too
 * tight): they act from the next step on, and one line names them, so that a mistyped flag in a
 * restart script is seen before hours of training. */
static void note_settings_change(const TrainSettings *was, const Options *opt, char *changed) {
    const TrainSettings now = train_settings(opt);
    changed[0] = 0;
    if (!was->recorded) return; /* a checkpoint of an earlier fusedgpt */
    char changes[400] = "";
    size_t len = 0;
    if (was->weight_decay != now.weight_decay)
        list_append(changes, sizeof changes, &len, "--weight-decay %g -> %g", was->weight_decay, now.weight_decay);
    if (was->grad_clip != now.grad_clip)
        list_append(changes, sizeof changes, &len, "--grad-clip %g -> %g", was->grad_clip, now.grad_clip);
    if (was->bf16_state != now.bf16_state)
        list_append(changes, sizeof changes, &len, "--optimizer-state %s -> %s", was->bf16_state ? "bf16" : "fp32",
                    now.bf16_state ? "bf16" : "fp32");
    if (was->z_loss != now.z_loss)
        list_append(changes, sizeof changes, &len, "--z-loss %g -> %g", was->z_loss, now.z_loss);
    if (was->label_smoothing != now.label_smoothing)
        list_append(changes, sizeof changes, &len, "--label-smoothing %g -> %g", was->label_smoothing,
                    now.label_smoothing);
    snprintf(changed, 400, "%s", changes);
    if (len) printf("settings: changed since the checkpoint: %s; they apply from this step on\n", changes);
}

/* A note when the resumed checkpoint's Hugging Face files cannot be read, or hold other weights than
 * its state.bin: the resume reads only state.bin (the master weights and moments), while eval,
 * sample and transformers read config.json and model.safetensors, so an edit there would otherwise
 * leave the two silently apart. params: state.bin's weights, as loaded. */
static void note_export(const char *run_dir, int step, const ParamTable *t, const float *params) {
    char dir[FGPT_PATH_LEN], path[FGPT_PATH_LEN], err[ERR_LEN];
    if (path_format(dir, "%s/step_%08d", run_dir, step) != 0 || path_format(path, "%s/model.safetensors", dir) != 0)
        return;
    GPTConfig cfg;
    StFile st;
    if (hf_read_config(dir, &cfg, err) != 0 || st_open(&st, path, err) != 0) {
        printf("note: resuming from %s/state.bin, but eval, sample and transformers cannot read that checkpoint: %s "
               "(the next checkpoint is written whole)\n", dir, err);
        return;
    }
    st_close(&st);
    float *exported = hf_load_weights(dir, t, err); /* NULL: not comparable (short of memory), nothing to say */
    const ParamInfo *first = NULL;
    for (int k = 0; exported && k < t->count && !first; k++) {
        const ParamInfo *p = &t->params[k];
        for (size_t i = p->offset; i < p->offset + p->numel && !first; i++)
            if (exported[i] != params[i]) first = p;
    }
    free(exported);
    if (first)
        printf("note: %s holds other weights than its state.bin (from %s on; edited after the save?): the resume "
               "continues from state.bin's, which eval and sample of that checkpoint do not; to train from the "
               "file's weights, start a new run with --init-from %s\n", path, first->name, dir);
}

/* -y 1: the latest checkpoint's weights, moments, data position and draws, after checking that it
 * belongs to this run (the same on every rank, batch, seed and data). 0 when it is already at -x. */
static int resume(Run *r) {
    const Options *opt = &r->opt;
    const Dist *dist = &r->dist;
    char *err = r->err;
    const TrainState st = r->resumed; /* read_resumed_checkpoint's */
    /* each rank read the checkpoint itself; on hosts that do not share -o they may have read
     * different ones, and would train different replicas or wait for each other forever */
    const int same_step = ranks_agree(dist, st.step);
    const int same_high = ranks_agree(dist, (double)(st.checksum >> 32));
    const int same_low = ranks_agree(dist, (double)(st.checksum & 0xffffffffu));
    if (!same_step || !same_high || !same_low) {
        print_error("rank %d read a checkpoint of step %d in %s that differs from another rank's; "
                    "every host needs the same checkpoint (-o on a shared file system, or a copy)",
                    dist->rank, st.step, opt->out);
        return 1;
    }
    if (st.passed_over_step >= 0 && dist->rank == 0)
        printf("note: step_%08d, the newest checkpoint, does not load (%s); this run resumes from step %d, the newest "
               "that does\n", st.passed_over_step, st.passed_over_why, st.step);
    if (st.B < 1 || st.T < 1 || st.total_batch < 1) { /* "resume with -b 0" would be a fix no one can follow */
        fprintf(stderr,
                "error: checkpoint in %s holds -b %d -t %d -d %d, a batch no run writes (a state.bin edited and "
                "resealed?); start from its weights instead: --init-from %s/step_%08d\n",
                opt->out, st.B, st.T, st.total_batch, opt->out, st.step);
        return 1;
    }
    if (st.B != r->B || st.T != r->T || st.total_batch != opt->total_batch || st.seed != opt->seed) {
        fprintf(stderr,
                "error: checkpoint in %s was trained with -b %d -t %d -d %d --seed %llu; resume with the same "
                "values so the data order continues\n",
                opt->out, st.B, st.T, st.total_batch, (unsigned long long)st.seed);
        return 1;
    }
    const Loader *train = &r->train_loader;
    const PackKind other_pack = train->pack == PACK_BFD ? PACK_WRAPPED : PACK_BFD;
    if (st.data_fingerprint && st.data_tokens == train->num_tokens && st.data_fingerprint != r->train_fingerprint &&
        st.data_fingerprint == loader_fingerprint_packed(train, other_pack)) {
        print_error("checkpoint in %s was trained on these shards cut into windows by --pack %s: resume with --pack %s "
                    "so the data order continues", opt->out, pack_kind_name(other_pack), pack_kind_name(other_pack));
        return 1;
    }
    if ((st.data_tokens || st.data_fingerprint) &&
        (st.data_tokens != train->num_tokens || st.data_fingerprint != r->train_fingerprint)) {
        fprintf(stderr,
                "error: checkpoint in %s was trained on other data (%llu tokens) than %s (%llu tokens%s); resume "
                "with the same -i so the data order continues%s\n",
                opt->out, (unsigned long long)st.data_tokens, r->train_path, (unsigned long long)train->num_tokens,
                st.data_tokens == train->num_tokens ? ", other values" : "",
                train->num_shards > 1 ? " (a pattern's shards count in the byte order of their paths, each as it is cut)"
                                      : "");
        return 1;
    }
    LoaderState ls = {st.loader_epoch, st.loader_position};
    if (st.world != dist->world) {
        /* the checkpoint holds the whole model and optimizer state, so only the data position
         * depends on the number of ranks; a step's micro-batches must split over both counts */
        const int per_step = opt->total_batch / (r->B * r->T);
        const char *why = NULL;
        if (st.world < 1 || per_step % st.world)
            why = "that many ranks cannot share its batch (a damaged state.bin?)";
        else if (loader_state_for_world(&ls, st.world, dist->world, err) != 0)
            why = err;
        if (why) {
            print_error("checkpoint in %s (%d rank(s), %d micro-batches per step): %s", opt->out,
                        st.world, per_step, why);
            return 1;
        }
        printf("resuming a run of %d rank(s) on %d: the data order goes on where it stopped; losses follow the "
               "%d-rank run's to rounding, not bit for bit\n",
               st.world, dist->world, st.world);
    }
    if (loader_set_state(&r->train_loader, ls, err) != 0) return fail(err);
    r->be->ops->write_state(r->be, NULL, r->ck.m, r->ck.v); /* the weights since create_backend */
    if (dist->rank != 0) checkpoint_buffers_free(&r->ck); /* only rank 0 writes checkpoints */
    memcpy(r->rng.s, st.rng, sizeof r->rng.s);
    r->start_step = st.step;
    printf("resumed from %s at step %d\n", opt->out, r->start_step);
    if (dist->rank == 0) note_export(opt->out, st.step, &r->table, r->ck.params);
    if (r->start_step >= opt->steps) {
        printf("nothing to train: the checkpoint is at step %d and -x is %d (pass a larger -x to go on)\n",
               r->start_step, opt->steps);
        return 0;
    }
    char schedule[400], settings[400];
    note_schedule_change(&st, opt, r->start_step, schedule);
    note_settings_change(&st.settings, opt, settings);
    const int other_val = r->have_val && (st.val_tokens || st.val_fingerprint) &&
                          (st.val_tokens != r->val_loader.num_tokens || st.val_fingerprint != r->val_fingerprint);
    if (other_val)
        printf("validation: %s (%llu tokens) is not the data the checkpoint's run validated on (%llu tokens): the "
               "validation losses from step %d on are on other data than those before\n",
               r->val_path, (unsigned long long)r->val_loader.num_tokens, (unsigned long long)st.val_tokens,
               r->start_step);
    /* a resume that does not validate keeps the shard its checkpoint names, for the next one to compare */
    if (!r->have_val) r->val_tokens = st.val_tokens, r->val_fingerprint = st.val_fingerprint;
    size_t len = 0;
    r->resume_changes[0] = 0;
    if (schedule[0]) list_append(r->resume_changes, sizeof r->resume_changes, &len, "%s", schedule);
    if (settings[0]) list_append(r->resume_changes, sizeof r->resume_changes, &len, "%s", settings);
    if (other_val) list_append(r->resume_changes, sizeof r->resume_changes, &len, "-j/--val-data: another shard");
    r->resumed_world = st.world;
    /* the records of step start_step that the loop writes again */
    const int eval_again = r->have_val && opt->val_every && r->start_step % opt->val_every == 0;
    const int sample_again = opt->sample_every && r->start_step % opt->sample_every == 0;
    if (dist->rank == 0 &&
        leave_later_timeline(opt->out, r->start_step, st.passed_over_step, eval_again, sample_again, err) != 0)
        return fail_write(r, err);
    if (dist->rank == 0 && checkpoint_clear_leftovers(opt->out, err) != 0) return fail(err);
    if (opt->ignored_init_from)
        printf("note: resuming: the checkpoint holds the weights, shape and tokenizer; --init-from %s is not read\n",
               opt->ignored_init_from);
    return RUN_ON;
}

/* A new run: the seed's weights or --init-from's; nothing of an earlier run in this directory is
 * overwritten, pruned or mixed in (it moves aside). */
static int start_new(Run *r) {
    const Options *opt = &r->opt;
    if (opt->init_from[0]) printf("init: weights from %s\n", opt->init_from);
    if (r->dist.rank != 0) return RUN_ON;
    if (opt->resume_auto) printf("note: %s holds no checkpoint to resume (-y auto): a new run\n", opt->out);
    char name[256] = "", moved_to[FGPT_PATH_LEN];
    int had_latest = checkpoint_latest_name(opt->out, name, sizeof name, r->err) >= 0;
    int moved = checkpoint_set_aside_run(opt->out, moved_to, sizeof moved_to, r->err);
    if (moved < 0) return fail(r->err);
    if (moved && had_latest)
        printf("note: %s held an earlier run (latest checkpoint %s); moved it to %s (-y 1 would have continued "
               "it; remove that directory when it is not needed)\n",
               opt->out, name, moved_to);
    else if (moved)
        printf("note: %s held files of an earlier run that wrote no checkpoint; moved them to %s (remove that "
               "directory when it is not needed)\n",
               opt->out, moved_to);
    return RUN_ON;
}

static int open_log(Run *r) {
    if (r->dist.rank != 0) return RUN_ON;
    if (runlog_open(&r->log, r->opt.out, r->err) != 0) return fail(r->err);
    if (r->resumed_world &&
        runlog_resume(&r->log, r->start_step, r->dist.world, r->resumed_world, r->resume_changes) != 0)
        return fail_write(r, r->log.err);
    return RUN_ON;
}

/* Loss settings that are legal but rarely meant, said before any step. A cap CAP keeps
 * every logit within ±CAP, so the best a softmax over V words can give its target is
 * e^CAP / (e^CAP + (V - 1) e^-CAP): the loss cannot fall below ln(1 + (V - 1) e^(-2 CAP)). A z-loss
 * weight above 1 / ln V makes C lse² outweigh the cross-entropy at the start, where lse is about ln V. */
static void print_loss_option_notes(const OutputLossOptions *lo, int vocab) {
    const double ln_v = log((double)vocab);
    if (lo->logit_softcap > 0) {
        const double floor = log1p((vocab - 1) * exp(-2.0 * lo->logit_softcap));
        if (floor >= 0.1)
            printf("note: --logit-softcap %g keeps every logit within +-%g, so over %d words the loss cannot fall "
                   "below %.3f (ln V = %.3f); Gemma 2's is 30\n",
                   (double)lo->logit_softcap, (double)lo->logit_softcap, vocab, floor, ln_v);
    }
    if (lo->z_loss > 0 && lo->z_loss * ln_v > 1.0)
        printf("note: --z-loss %g weighs lse^2 above the cross-entropy itself at the start (%.3g against %.3f "
               "with lse near ln V); PaLM's weight is 1e-4\n",
               (double)lo->z_loss, lo->z_loss * ln_v * ln_v, ln_v);
}

/* The model, the batch, the device and the start-up memory table. */
static void print_header(Run *r) {
    const Options *opt = &r->opt;
    const GPTConfig *cfg = &r->cfg;
    Backend *be = r->be;
    printf("model: L=%d NH=%d C=%d maxT=%d V=%d (padded %d), %.2fM parameters\n", cfg->num_layers, cfg->num_heads,
           cfg->dim, cfg->max_seq_len, cfg->vocab_size, cfg->padded_vocab_size, r->table.total / 1e6);
    if (cfg->family != FAMILY_GPT2)
        printf("family: %s, NKV=%d hd=%d F=%d, RoPE theta %g%s, RMSNorm eps %g%s%s, %s head\n",
               gpt_family_name(cfg->family), cfg->num_kv_heads, cfg->head_dim, cfg->ffn_dim, cfg->rope.theta,
               cfg->rope.scaling == ROPE_SCALING_LLAMA3 ? " (llama3 scaling)" : "", cfg->norm_eps,
               cfg->qk_norm ? ", QK-norm" : "", cfg->qkv_bias ? ", qkv bias" : "", cfg->untied_head ? "untied" : "tied");
    if (cfg->family == FAMILY_GEMMA3) {
        int sliding = 0;
        for (int l = 0; l < cfg->num_layers; l++) sliding += gpt_layer_is_sliding(cfg, l);
        printf("gemma3: %d of %d layers slide with a window of %d and RoPE theta %g%s; norms x (1 + w) before and after "
               "each branch; query_pre_attn_scalar %g; embeddings x %g\n",
               sliding, cfg->num_layers, cfg->sliding_window, cfg->rope_local_theta,
               sliding == cfg->num_layers ? " (none is global)" : sliding ? ", the rest are global" : "",
               cfg->query_pre_attn_scalar, gpt_embed_scale(cfg));
    }
    /* nn.Embedding(padding_idx): said, since with a tokenizer of other ids that row is a real token's */
    if (cfg->has_pad_token) {
        char text[64] = "";
        if (r->tok) {
            const uint32_t id = (uint32_t)cfg->pad_token_id;
            char piece[48];
            const size_t n = tokenizer_decode(r->tok, &id, 1, piece, sizeof piece - 1);
            if (n < sizeof piece) snprintf(text, sizeof text, " (\"%.*s\" to the tokenizer)", (int)n, piece);
        }
        printf("padding: token %d%s is the padding row (pad_token_id): its embedding row starts at 0 and its lookups "
               "give it no gradient\n", cfg->pad_token_id, text);
    }
    printf("batch: B=%d T=%d, %d tokens per step (%d micro-batches x %d rank(s)), output layer %s, device %s (%s)\n",
           r->B, r->T, opt->total_batch, r->accum, r->dist.world, opt->output, opt->device, be->device_name);
    if (be->output_path[0]) printf("output layer: %s\n", be->output_path);
    const Loader *tl = &r->train_loader;
    char shards[48] = "";
    if (tl->num_shards > 1) snprintf(shards, sizeof shards, " in %zu shards", tl->num_shards);
    printf("data: %s, %llu tokens%s: %llu steps an epoch\n", r->train_path, (unsigned long long)tl->num_tokens, shards,
           (unsigned long long)(tl->num_batches / (uint64_t)r->accum));
    if (tl->masked && (tl->no_loss_tokens || !tl->documents))
        printf("data: %.1f %% of the tokens are marked as no target (prompts, or text outside the assistant's "
               "turns): the loss is the mean over the rest, each step's over all of its targets on every rank\n",
               100.0 * (double)tl->no_loss_tokens / (double)tl->num_tokens);
    if (tl->documents)
        printf("data: the shards mark %llu documents (%.0f tokens each on average): each runs as if alone, at its "
               "own positions and attending only within itself\n", (unsigned long long)tl->document_starts,
               tl->document_starts ? (double)tl->num_tokens / (double)tl->document_starts : 0.0);
    if (tl->pack == PACK_BFD)
        printf("data: whole documents packed best fit decreasing into %llu windows of %d tokens, %.1f %% of them "
               "padding\n", (unsigned long long)tl->total_windows, r->T + 1,
               tl->total_windows ? 100.0 * (1.0 - (double)tl->packed_tokens / ((double)tl->total_windows * (r->T + 1)))
                                 : 0.0);
    if (be->optimizer_state == OPTIMIZER_STATE_BF16)
        printf("optimizer: AdamW on bf16 moments and the bf16 weights, no fp32 master copy, each value rounded "
               "stochastically (checkpoints stay fp32)\n");
    if (r->dist.world > 1)
        printf("data parallel: %s, gradients reduced %s the backward%s\n",
               zero1_on(opt, r->dist.world) ? "ZeRO-1 (each rank keeps 1/N of AdamW's state)"
               : opt->vocab_parallel        ? "the head split by vocabulary rows, the rest of the optimizer state whole on "
                                              "every rank"
                                            : "every rank keeps the whole optimizer state",
               r->overlap_comm ? "during" : "after",
               strcmp(opt->overlap_comm, "auto")   ? ""
               : r->overlap_comm                   ? " (--overlap-comm auto: ranks on several hosts, or GPUs without NVLink)"
                                                   : " (--overlap-comm auto: one host, its GPUs joined by NVLink)");
    const int bf16_wire = !strcmp(opt->grad_reduce, "bf16");
    if (bf16_wire && r->dist.world == 1)
        printf("gradient reduce: --grad-reduce bf16 does nothing in a world of one: there is nothing to reduce, "
               "the gradients stay fp32\n");
    else if (bf16_wire)
        printf("gradient reduce: bf16 on the wire, summed in fp32 in rank order (each rank's gradients rounded once); "
               "%s\n", zero1_on(opt, r->dist.world) ? "ZeRO-1 keeps the fp32 sums of its shard: 2 + 2 bytes a parameter with the bf16 "
                                    "weight gather, against 4 + 2"
                                  : "the fp32 sums are all-gathered: 2 + 4 bytes a parameter, against the fp32 "
                                    "all-reduce's 4 + 4");
    else if (be->grad_reduce_path[0])
        printf("gradient reduce: %s\n", be->grad_reduce_path);
    const OutputLossOptions lo = backend_loss_options(be);
    if (lo.z_loss > 0 || lo.logit_softcap > 0 || lo.label_smoothing > 0)
        printf("loss: z-loss %g, logit softcap %g, label smoothing %g (the logged loss is the cross-entropy)\n",
               (double)lo.z_loss, (double)lo.logit_softcap, (double)lo.label_smoothing);
    print_loss_option_notes(&lo, r->cfg.vocab_size);
    char dropout[200];
    if (opt->init_from[0] && !opt->resume && hf_dropout_note(opt->init_from, r->cfg.family, dropout, sizeof dropout) > 0)
        printf("note: --init-from's config.json sets dropout (%s), which training here does not apply: its steps "
               "are those of transformers with dropout off\n", dropout);
    /* transformers applies final_logit_softcapping in Gemma's classes only */
    if (lo.logit_softcap > 0 && r->cfg.family != FAMILY_GEMMA3)
        printf("note: checkpoints record the cap as final_logit_softcapping, but transformers' %s does not apply it: "
               "loaded there, this model's logits are uncapped\n", hf_architecture(r->cfg.family));
    if (be->output == OUTPUT_FUSED && be->output_path[0] && lo.logit_softcap > 0 && lo.label_smoothing > 0)
        printf("output layer: soft-capping with label smoothing runs the streaming path (the chunks' rank-1 "
               "smoothing term does not hold under the cap)\n");
    if (be->peak_flops > 0)
        printf("MFU against a dense bf16 peak of %.0f TFLOP/s (%s)\n", be->peak_flops / 1e12,
               be->peak_source ? be->peak_source : "published");
    if (r->val_batches_per_rank < r->val_batches_asked)
        printf("validation: %s holds %d batch(es) of %d x %lld per rank, fewer than --val-batches asks; using those\n",
               r->val_path, r->val_batches_per_rank, r->B, (long long)r->T + 1);
    r->flops_per_step = gpt_flops_per_token(cfg, r->T) * opt->total_batch;
    const int on_cpu = strcmp(opt->device, "cpu") == 0;
    print_memory(be, r->ck.params ? checkpoint_buffers_bytes(&r->table) : 0, on_cpu);
    if (on_cpu) print_gpu_estimate(&r->table, r->B, r->T, opt->recompute_gelu, optimizer_state_of(opt));
    /* the CPU reference keeps every activation and runs its output layer whole */
    if (on_cpu && (was_given(opt, "recompute-gelu") || was_given(opt, "logits-mb")))
        printf("note: %s%s%s set%s the GPU backend's memory; the CPU backend keeps every activation and computes its "
               "output layer whole (the GPU estimate above takes --recompute-gelu)\n",
               was_given(opt, "recompute-gelu") ? "--recompute-gelu" : "",
               was_given(opt, "recompute-gelu") && was_given(opt, "logits-mb") ? " and " : "",
               was_given(opt, "logits-mb") ? "--logits-mb" : "",
               was_given(opt, "recompute-gelu") && was_given(opt, "logits-mb") ? "" : "s");
    /* a scheduler's environment may set FUSEDGPT_MASTER for every job; the flag typed for one host is a slip */
    if (opt->nodes == 1 && was_given(opt, "master"))
        printf("note: --master %s serves the rendezvous of --nodes 2 or more; this run on one host does not use it\n",
               opt->master);
    fflush(stdout); /* a log file or a `| tee` shows the set-up before the first step ends */
}

/* The validation loss at `step`, printed and logged, or the signal of a stop asked for during it
 * (*stop_signal), which leaves it unlogged. */
static int evaluate(Run *r, int step, int *stop_signal) {
    float vl = validation_loss(r->be, &r->dist, &r->val_loader, r->val_batches_per_rank, r->inputs, r->targets,
                               r->positions, stop_signal);
    if (*stop_signal) {
        if (r->dist.rank == 0) printf("step %5d | validation abandoned on %s\n", step, stop_request_name(*stop_signal));
        return RUN_ON;
    }
    printf("step %5d | val loss %.6f\n", step, vl);
    if (runlog_eval(&r->log, step, vl) != 0) return fail_write(r, r->log.err);
    /* every rank holds the same mean, so all of them stop here */
    if (!isfinite(vl)) {
        const int whole = finish_checkpoint_on_every_rank(r); /* the line below may name it */
        char why[512];
        validation_is_finite(vl, step, whole && r->saved_step == step, why, sizeof why);
        fprintf(stderr, "%s\n", why);
        return 1;
    }
    return RUN_ON;
}

/* Masked training data: the step's batches, all fetched before the first runs, and each one's
 * loss_scale from how many valid targets the step holds on every rank (a collective for each
 * DIST_MAX_SCALARS batches). */
static void fetch_masked_step(Run *r) {
    const size_t BT = (size_t)r->B * r->T;
    uint64_t *mine = r->step_targets, *every = r->step_targets + r->accum;
    for (int a = 0; a < r->accum; a++) {
        loader_next_batch(&r->train_loader, r->inputs + a * BT, r->targets + a * BT, r->positions + a * BT);
        if (r->train_loader.changed[0]) shard_changed(&r->train_loader);
        mine[a] = count_valid_targets(r->targets + a * BT, BT);
    }
    for (int a = 0; a < r->accum; a += DIST_MAX_SCALARS) {
        const int n = r->accum - a < DIST_MAX_SCALARS ? r->accum - a : DIST_MAX_SCALARS;
        double counts[DIST_MAX_SCALARS];
        for (int k = 0; k < n; k++) counts[k] = (double)mine[a + k];
        dist_mean_scalars(&r->dist, counts, n);
        for (int k = 0; k < n; k++) every[a + k] = (uint64_t)llround(counts[k] * r->dist.world);
    }
    step_loss_scales(mine, every, r->accum, r->dist.world, r->opt.vocab_parallel, r->loss_scales);
}

/* One optimizer step (0-based `step`): -d/--total-batch tokens in micro-batches, their gradients
 * reduced over the ranks, checked for a non-finite loss or norm, clipped, and AdamW. */
static int take_step(Run *r, int step, StepResult *s) {
    const Options *opt = &r->opt;
    Backend *be = r->be;
    const int profiled = step + 1 == opt->profile_step && strcmp(opt->device, "cpu") != 0;
    if (profiled) cuda_profiler_range(1);
    double t0 = now_ms();
    be->ops->zero_grad(be);
    const int masked = r->train_loader.masked;
    if (masked) fetch_masked_step(r);
    const size_t BT = (size_t)r->B * r->T;
    double loss = 0.0, objective = 0.0, lse = 0.0;
    for (int micro = 0; micro < r->accum; micro++) {
        int *inputs = r->inputs, *targets = r->targets, *positions = r->positions;
        if (masked) {
            inputs += micro * BT, targets += micro * BT, positions += micro * BT;
        } else {
            loader_next_batch(&r->train_loader, inputs, targets, positions);
            if (r->train_loader.changed[0]) shard_changed(&r->train_loader);
        }
        const float scale = masked ? r->loss_scales[micro] : 1.0f / r->accum;
        const double weight = masked ? scale : 1.0; /* the step's means: a masked batch's by its targets */
        loss += be->ops->train_micro_step(be, inputs, targets, r->train_loader.documents ? positions : NULL, scale,
                                          micro == r->accum - 1) * weight;
        objective += be->last_objective * weight, lse += be->last_mean_lse * weight;
    }
    be->ops->reduce_grads(be);
    /* one collective for the step's means and for whether any rank was asked to stop: every rank
     * reads the same answer, so all of them stop after the same step */
    const double per = masked ? 1.0 : r->accum;
    double means[5] = {loss / per, objective / per, lse / per};
    stop_flags(means + 3);
    dist_mean_scalars(&r->dist, means, 5);
    const OutputLossOptions lo = backend_loss_options(be);
    s->loss = means[0];
    s->objective = output_loss_has_objective(&lo) ? means[1] : s->loss;
    s->lse = means[2];
    s->stop_signal = stop_from_flags(means + 3);
    s->norm = (float)sqrt(be->ops->grad_sumsq(be));
    char why[512];
    if (!step_is_finite((float)s->loss, s->norm, step + 1, why, sizeof why)) {
        const int whole = finish_checkpoint_on_every_rank(r); /* the line below may name it */
        /* the weights that gave it are the newest checkpoint's when it was written right before */
        if (whole && r->saved_step == step && step > 0)
            fprintf(stderr, "%s; the checkpoint of step %d holds the weights that gave it: resume from an earlier one, "
                    "or start again\n", why, step);
        else
            fprintf(stderr, "%s\n", why);
        return 1;
    }
    const LrSchedule schedule = schedule_of(opt);
    AdamWStep as = {
        .lr = lr_at_step(&schedule, step),
        .beta1 = 0.9f,
        .beta2 = 0.95f,
        .eps = 1e-8f,
        .weight_decay = opt->weight_decay,
        .grad_scale = (opt->grad_clip > 0 && s->norm > opt->grad_clip) ? opt->grad_clip / s->norm : 1.0f,
        .step = step + 1,
    };
    be->ops->adamw_update(be, &as);
    if (profiled) cuda_profiler_range(0);
    /* data parallel: what the step waited on communication (the rest hid under the backward) */
    s->comm_ms = r->dist.world > 1 ? be->ops->comm_wait_ms(be) : -1.0;
    s->ms = now_ms() - t0;
    s->tokens_per_s = opt->total_batch / (s->ms / 1e3);
    s->lr = as.lr;
    return RUN_ON;
}

/* The step's line on stdout and its record in log.jsonl. */
static int log_step(Run *r, int step, const StepResult *s) {
    const Options *opt = &r->opt;
    Backend *be = r->be;
    const OutputLossOptions lo = backend_loss_options(be);
    const int objective = output_loss_has_objective(&lo);
    printf("step %5d/%d | loss %.6f", step + 1, opt->steps, s->loss);
    if (objective) printf(" | objective %.6f", s->objective);
    printf(" | lse %.3f | lr %.3e | norm %.4f | %.1f ms | %.0f tok/s", s->lse, s->lr, s->norm, s->ms, s->tokens_per_s);
    if (s->comm_ms >= 0) printf(" | comm %.2f ms", s->comm_ms);
    if (opt->step_parts && be->ops->phase_ms) {
        double part[3];
        be->ops->phase_ms(be, part);
        printf(" | fwd %.1f out %.1f bwd %.1f ms", part[0], part[1], part[2]);
    }
    double mfu = -1, mem_gb = -1;
    if (be->peak_flops > 0) {
        mfu = 100.0 * r->flops_per_step / (s->ms / 1e3) / (be->peak_flops * r->dist.world); /* per GPU */
        mem_gb = be->ops->memory_in_use(be) / 1e9;
        printf(" | MFU %.1f%% | %.1f GB", mfu, mem_gb);
    }
    printf("\n");
    fflush(stdout);
    /* also reports a failed sample record of this step */
    if (runlog_step(&r->log, step + 1, (float)s->loss, s->lr, s->norm, s->ms, s->tokens_per_s, mfu, mem_gb,
                    s->comm_ms, s->lse, objective ? &s->objective : NULL) != 0)
        return fail_write(r, r->log.err);
    return RUN_ON;
}

/* Waits for the checkpoint being written, if any, and says that it is whole, or fails the run with
 * the write's error. Every place that tells of the newest checkpoint, or ends the run, waits first. */
static int finish_checkpoint(Run *r) {
    int step;
    double seconds;
    const int rc = checkpoint_writer_wait(&r->writer, &step, &seconds, r->err);
    if (rc < 0) return fail(r->err);
    if (rc == 0)
        printf("checkpoint: %s/step_%08d (state read in %.1f s, written in %.1f s)\n", r->opt.out, step,
               r->state_read_s, seconds);
    return RUN_ON;
}

/* finish_checkpoint where every rank stops at once (a non-finite loss, which all of them see): the
 * others wait for rank 0's write, since a rank that exits first has the launcher end the rest. 1
 * when the newest checkpoint is whole (or none was pending), 0 when its write failed (said). */
static int finish_checkpoint_on_every_rank(Run *r) {
    double ok = finish_checkpoint(r) == RUN_ON;
    dist_mean_scalars(&r->dist, &ok, 1);
    return ok == 1.0;
}

/* The checkpoint after `steps_done` steps: every rank takes part in reading the state (ZeRO-1
 * gathers the shards); rank 0 writes it on the writer's thread while training goes on, or in this
 * one when that thread cannot start. The previous write finishes first: its buffers are reused. */
static int save_checkpoint(Run *r, int steps_done) {
    const Options *opt = &r->opt;
    if (finish_checkpoint(r) != RUN_ON) return 1;
    const double t0 = now_ms();
    r->be->ops->read_state(r->be, r->ck.params, r->ck.m, r->ck.v);
    r->state_read_s = (now_ms() - t0) / 1e3;
    if (r->dist.rank != 0) return RUN_ON;
    LoaderState ls = loader_get_state(&r->train_loader);
    TrainState st = {.step = steps_done, .loader_epoch = ls.epoch, .loader_position = ls.position,
                     .B = r->B, .T = r->T, .total_batch = opt->total_batch, .world = r->dist.world,
                     .seed = opt->seed, .data_tokens = r->train_loader.num_tokens,
                     .data_fingerprint = r->train_fingerprint, .schedule = schedule_of(opt),
                     .val_tokens = r->val_tokens, .val_fingerprint = r->val_fingerprint,
                     .settings = train_settings(opt)};
    memcpy(st.rng, r->rng.s, sizeof st.rng);
    const CheckpointTokenizer *tok = r->have_ck_tok ? &r->ck_tok : NULL;
    if (checkpoint_writer_start(&r->writer, opt->out, &r->table, r->ck.params, r->ck.m, r->ck.v, &st, tok,
                                opt->keep_checkpoints, r->err) == 0)
        return RUN_ON;
    if (checkpoint_save_with(opt->out, &r->table, r->ck.params, r->ck.m, r->ck.v, &st, tok, opt->keep_checkpoints,
                             r->err) != 0)
        return fail(r->err);
    printf("checkpoint: %s/step_%08d\n", opt->out, steps_done);
    return RUN_ON;
}

/* Training stopped on request (signal sig) after `steps_done` steps, whose checkpoint is written:
 * says how to go on. A launcher's worker exits 128 + sig, which the launcher counts as stopped; the
 * process a user or scheduler started ends by the signal itself (main). */
static int stop_after(Run *r, int steps_done, int sig) {
    if (finish_checkpoint(r) != RUN_ON) return 1;
    r->stopped_by = sig;
    const char *name = stop_request_name(sig), *out = r->opt.out;
    if (r->dist.rank != 0) return stop_request_exit_status(sig);
    if (steps_done == r->opt.steps) /* a resume would have nothing to train, and so no validation to run */
        printf("stopped by %s after the last step: training is done, checkpoint %s/step_%08d written; the last "
               "validation and sample are skipped (`./train eval -o %s -i SHARD` measures a loss)\n", name, out,
               steps_done, out);
    else if (steps_done == 0)
        printf("stopped by %s before the first step: checkpoint %s/step_%08d written; the same command with -y 1 "
               "starts from there\n", name, out, steps_done);
    else
        printf("stopped by %s after step %d of %d: checkpoint %s/step_%08d written; the same command with -y 1 "
               "goes on from there\n", name, steps_done, r->opt.steps, out, steps_done);
    return stop_request_exit_status(sig);
}

/* Releases everything the stages created, in reverse order, whichever stage stopped the run; a rank
 * that succeeded tells the rendezvous so (without it, node 0's launcher counts the rank as failed). */
static int close_run(Run *r, int status) {
    /* a write in flight when the run failed still completes: it is the run's newest checkpoint */
    if (finish_checkpoint(r) != RUN_ON && status == 0) status = 1;
    if (status != 0 && !r->log.f) release_run_dir(r);
    runlog_close(&r->log);
    free(r->logits);
    free(r->step_targets);
    free(r->loss_scales);
    free(r->positions);
    free(r->targets);
    free(r->inputs);
    checkpoint_buffers_free(&r->ck);
    if (r->be) r->be->ops->destroy(r->be);
    loader_close(&r->val_loader);
    loader_close(&r->train_loader);
    free(r->init_params);
    free((char *)r->ck_tok.tokenizer_json);
    free((char *)r->ck_tok.tokenizer_config_json);
    if (r->tok) tokenizer_free(r->tok);
    dist_nccl_free(&r->dist);
    if ((status == 0 || r->stopped_by) && !r->launcher) dist_finish(&r->dist);
    param_table_free(&r->table);
    return status;
}

int main(int argc, char **argv) {
    /* progress lines appear as they happen, also when stdout is a file or a pipe */
    setvbuf(stdout, NULL, _IOLBF, 0);
    /* a file-size limit (ulimit -f) then fails the write (EFBIG), which is reported as a full disk
     * is, rather than killing the process without a word */
    signal(SIGXFSZ, SIG_IGN);
    loader_catch_cut_shards();
    if (argc > 1 && strcmp(argv[1], "prepare") == 0) return prepare_main(argc - 1, argv + 1);
    if (argc > 1 && strcmp(argv[1], "sample") == 0) return sample_main(argc - 1, argv + 1);
    if (argc > 1 && strcmp(argv[1], "eval") == 0) return eval_main(argc - 1, argv + 1);
    if (argc == 2 && strcmp(argv[1], "help") == 0) {
        usage(stdout);
        return 0;
    }
    static Run run; /* zero: nothing created yet */
    Run *r = &run;
    const Options *opt = &r->opt;
    parse_args(&r->opt, argc, argv);
    if (opt->help) {
        usage(stdout);
        return 0;
    }
    decide_resume(&r->opt);
    find_shape_source(&r->opt);

    /* ---- set up: the command line is checked whole before anything touches the disk ---- */
    validate(&r->opt, &r->cfg); /* exits with status 2 */
    if (take_shape(opt, &r->cfg) != 0) return 1;
    int status = plan_model(r);
    if (status == RUN_ON) status = check_vocab_parallel(r);
    if (status == RUN_ON) status = start_world(r, argv);
    if (status == RUN_ON) status = read_init_from(r);
    if (status == RUN_ON) status = claim_run_dir(r);
    if (status == RUN_ON) status = resolve_data(r);
    if (status == RUN_ON) status = check_documents(r);
    if (status == RUN_ON) status = check_host_memory(r);
    if (status == RUN_ON) status = read_resumed_checkpoint(r);
    if (status == RUN_ON) status = create_backend(r);
    if (status == RUN_ON) status = opt->resume ? resume(r) : start_new(r);
    if (status == RUN_ON) status = open_log(r);
    /* before the header: once its lines are out, a Ctrl-C is a stop request */
    if (status == RUN_ON)
        stop_request_install(r->dist.rank == 0 ? "training stops at the end of a step or validation batch, with a "
                                                 "checkpoint"
                                               : NULL);
    if (status == RUN_ON) print_header(r);

    /* ---- the training loop ---- */
    r->saved_step = opt->resume ? r->start_step : -1;
    for (int step = r->start_step; status == RUN_ON && step < opt->steps; step++) {
        if (r->have_val && opt->val_every && step % opt->val_every == 0) {
            int asked;
            status = evaluate(r, step, &asked);
            /* a stop during validation leaves the checkpoint of the steps taken (step 0's included) */
            if (status == RUN_ON && asked && r->saved_step != step) status = save_checkpoint(r, step);
            if (status == RUN_ON && asked) status = stop_after(r, step, asked);
            if (status != RUN_ON) break;
        }
        if (r->dist.rank == 0 && opt->sample_every && step > 0 && step % opt->sample_every == 0)
            generate_sample(r->be, r->tok, opt, &r->rng, step, &r->log, r->inputs, r->logits);
        StepResult s = {0};
        status = take_step(r, step, &s);
        if (status == RUN_ON) status = log_step(r, step, &s);
        if (status == RUN_ON && checkpoint_writer_finished(&r->writer)) status = finish_checkpoint(r);
        /* a stop asked for at the last step leaves its checkpoint as the last one: the run has finished
         * training, and the stop skips what would follow it (below) */
        const int last = step + 1 == opt->steps;
        int stop = status == RUN_ON && !last ? s.stop_signal : 0;
        const int checkpoint_due =
            (opt->checkpoint_every && (step + 1) % opt->checkpoint_every == 0) || last || stop;
        if (status == RUN_ON && checkpoint_due) {
            status = save_checkpoint(r, step + 1);
            r->saved_step = step + 1;
            /* the last one is whole before the validation and sample after it, which may fail or be
             * stopped */
            if (status == RUN_ON && last) status = finish_checkpoint(r);
            /* asked for while that checkpoint's state was read (a second for a 1B model): stop at
             * it, not a step and a checkpoint later */
            if (status == RUN_ON && !stop && !last) stop = stop_agreed(&r->dist);
        }
        if (status == RUN_ON && stop) status = stop_after(r, step + 1, stop);
    }
    /* a stop asked for at the last step, or in the validation after it, skips that validation and the
     * last sample: what was asked is to stop */
    int asked = status == RUN_ON ? stop_agreed(&r->dist) : 0;
    if (status == RUN_ON && !asked && r->have_val && opt->val_every) status = evaluate(r, opt->steps, &asked);
    if (status == RUN_ON && asked) status = stop_after(r, opt->steps, asked);
    /* every N steps includes the last: a run of -x N with -s N samples its trained model once */
    if (status == RUN_ON && r->dist.rank == 0 && opt->sample_every && opt->steps % opt->sample_every == 0) {
        generate_sample(r->be, r->tok, opt, &r->rng, opt->steps, &r->log, r->inputs, r->logits);
        /* in the loop the next step's record reports a failed sample record; here none follows */
        if (r->log.failed) status = fail_write(r, r->log.err);
    }

    /* ---- tear down ---- */
    const int rc = close_run(r, status == RUN_ON ? 0 : status);
    /* stopped on request: the process that was started (not a launcher's worker) ends by the signal */
    const int stopped = r->stopped_by ? r->stopped_by
                        : r->launcher && (rc == stop_request_exit_status(SIGINT) ||
                                          rc == stop_request_exit_status(SIGTERM)) ? rc - 128 : 0;
    if (stopped && !getenv("FUSEDGPT_RANK")) stop_request_end(stopped);
    return rc;
}
