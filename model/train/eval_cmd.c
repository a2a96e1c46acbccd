/* model/train/eval_cmd.c - `./train eval`: the mean next-token loss of a checkpoint over a token
 * shard or a pattern of shards, on the GPU or the CPU, without training.
 *
 * The checkpoint is any the trainer reads with --init-from (a Hugging Face directory: ours or the
 * original's), or a run's, as `./train sample` finds it. Each shard is cut into consecutive windows
 * (model/train/eval.h; none spans two shards, as in training) that the backend's forward runs B at a
 * time. Several shards get a line each before the last, which is the result over all of them, for
 * scripts: `loss <mean> ppl <exp(mean)> tokens <targets>`, with `objective <mean>` after the loss
 * when --z-loss or --label-smoothing asks for one. --per-token FILE writes each target's loss. */
#include "model/train/eval_cmd.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/cli_word.h"
#include "common/err.h"
#include "common/repeated_flags.h"
#include "common/host_memory.h"
#include "common/paths.h"
#include "data/shard.h"
#include "model/backend.h"
#include "model/cuda/cuda_device.h"
#include "model/train/checkpoint.h"
#include "model/train/eval.h"
#include "model/train/hf_weights.h"
#include "tokenizer/tokenizer.h"

typedef struct {
    const char *init_from, *run, *data, *device, *output, *per_token, *pack;
    int step, seq_len, batch, help;
    float z_loss, logit_softcap, label_smoothing;
} EvalOptions;

typedef enum { EVAL_STR, EVAL_INT, EVAL_FLAG, EVAL_FLOAT } EvalArgType;

typedef struct {
    char short_name; /* 0: long form only */
    const char *long_name, *meta;
    EvalArgType type;
    size_t offset;
    int lo; /* EVAL_INT's smallest value */
    const char *help;
} EvalFlag;

#define E(field) offsetof(EvalOptions, field)

/* The one table of flags; --help is generated from it. Defaults are set in parse. */
static const EvalFlag flags[] = {
    {0, "init-from", "DIR", EVAL_STR, E(init_from), 0,
     "a Hugging Face checkpoint directory (config.json + model.safetensors), ours or the original's"},
    {0, "checkpoint", "DIR", EVAL_STR, E(init_from), 0, "the same (./train sample's name for it)"},
    {'o', "out", "RUN", EVAL_STR, E(run), 0, "... or a run directory: its latest checkpoint, or --step's"},
    {0, "step", "N", EVAL_INT, E(step), 0, "the run's checkpoint of step N (default: the latest)"},
    {'i', "data", "SHARD", EVAL_STR, E(data), 0,
     "token shard to evaluate (ours or llm.c's .bin), or a quoted glob pattern of shards"},
    {'t', "seq-len", "T", EVAL_INT, E(seq_len), 1,
     "window length (default: the model's context, or the longest shard's length less one if shorter)"},
    {'b', "batch", "B", EVAL_INT, E(batch), 1, "windows per forward (default 4; at most a shard's windows)"},
    {0, "pack", "HOW", EVAL_STR, E(pack), 0,
     "how a shard that marks documents becomes windows: wrapped (as above) or bfd (whole documents packed best fit "
     "decreasing, as ./train --pack bfd trains on them) (default wrapped)"},
    {0, "device", "KIND", EVAL_STR, E(device), 0, "cuda or cpu (the fp32 reference backend) (default cuda)"},
    {0, "output", "KIND", EVAL_STR, E(output), 0,
     "output layer: fused (no logits tensor) or canonical (all logits) (default fused)"},
    {0, "per-token", "FILE", EVAL_STR, E(per_token), 0,
     "write each target's loss to FILE: float32 little-endian, one per target in window order, shard after shard"},
    {0, "z-loss", "C", EVAL_FLOAT, E(z_loss), 0, "objective: add C lse^2 per token (C >= 0)"},
    {0, "label-smoothing", "EPS", EVAL_FLOAT, E(label_smoothing), 0,
     "objective: PyTorch's label smoothing over the real vocabulary (0 <= EPS < 1)"},
    {0, "logit-softcap", "CAP", EVAL_FLOAT, E(logit_softcap), 0,
     "cap the logits to CAP tanh(z/CAP) (CAP > 0), for a model whose config.json sets none"},
    {'h', "help", "", EVAL_FLAG, E(help), 0, "this text"},
};
#define NUM_FLAGS (sizeof flags / sizeof flags[0])

static void usage(FILE *f) {
    fprintf(f, "usage: ./train eval --init-from DIR -i SHARD [flags]    the loss of a checkpoint on a shard\n"
               "       ./train eval -o RUN [--step N] -i SHARD [flags]  ... of a run's checkpoint\n"
               "\n"
               "Window w takes inputs tokens[w*T, w*T+T), each target the token after its input. The last\n"
               "window holds what remains and counts if it has 2 tokens or more, so every token but the\n"
               "first is a target exactly once. The last line is `loss <mean> ppl <exp(mean)> tokens <count>`:\n"
               "the mean loss over all targets, and their count; with --z-loss or --label-smoothing\n"
               "`objective <mean>` follows the loss, which stays the cross-entropy of the (capped) logits.\n"
               "A pattern's shards (-i 'dir/val_*.bin', in the byte order of their paths) are cut into windows\n"
               "each, none spanning two; a line per shard, `shard <path>: loss <mean> tokens <count>`, comes\n"
               "before the last, whose mean is over the targets of them all. With --pack bfd a documents\n"
               "shard's windows are its whole documents packed best fit decreasing, as ./train --pack bfd\n"
               "trains on them.\n"
               "\nflags:\n");
    for (size_t i = 0; i < NUM_FLAGS; i++) {
        const EvalFlag *o = &flags[i];
        char left[64];
        if (o->short_name)
            snprintf(left, sizeof left, "-%c, --%s %s", o->short_name, o->long_name, o->meta);
        else
            snprintf(left, sizeof left, "    --%s %s", o->long_name, o->meta);
        fprintf(f, "  %-22s %s\n", left, o->help);
    }
}

static int bad(const char *flag, const char *why) {
    print_error("eval %s %s (see ./train eval --help)", flag, why);
    return 2;
}

/* The flag a command-line word names (-i, --data), or NULL. */
static const EvalFlag *find_flag(const char *a) {
    for (size_t i = 0; i < NUM_FLAGS; i++) {
        const EvalFlag *o = &flags[i];
        if ((a[0] == '-' && a[1] == '-' && !strcmp(a + 2, o->long_name)) ||
            (o->short_name && a[0] == '-' && a[1] == o->short_name && !a[2]))
            return o;
    }
    return NULL;
}

/* Whether a command-line word is one of the flags, its value inline or not. */
static int names_flag(const char *word) {
    CliWord w;
    cli_word_split(word, &w);
    return find_flag(w.flag) != NULL;
}

/* Whether the command line names the long flag (a value of 0 given, as against left out). */
static int find_given(int argc, char **argv, const char *flag) {
    for (int i = 1; i < argc; i++) {
        CliWord w;
        cli_word_split(argv[i], &w);
        if (!strcmp(w.flag, flag)) return 1;
    }
    return 0;
}

/* 0, or the exit status of a bad command line (after its message). */
static int parse(EvalOptions *o, int argc, char **argv) {
    *o = (EvalOptions){.device = "cuda", .output = "fused", .pack = "wrapped", .step = -1, .batch = 4};
    RepeatedFlags repeated = {0};
    for (int i = 1; i < argc; i++) {
        CliWord w;
        cli_word_split(argv[i], &w);
        const char *a = w.flag, *v = w.value ? w.value : i + 1 < argc ? argv[i + 1] : NULL;
        const EvalFlag *f = find_flag(a);
        if (!f) {
            print_error("eval: unknown flag '%s' (see ./train eval --help)", argv[i]);
            return 2;
        }
        void *dst = (char *)o + f->offset;
        if (f->type == EVAL_FLAG) {
            if (w.value) return bad(a, "takes no value");
            *(int *)dst = 1;
            continue;
        }
        /* "-o -i shard" would read a run named -i; a value that really is such a name is written --out=-i */
        if (!v || (!w.value && names_flag(v))) return bad(a, "needs a value");
        if (!w.value) i++;
        for (const EvalFlag *first = flags; first < f; first++) /* two names of one setting repeat each other */
            if (first->offset == f->offset) f = first;
        char name[48];
        if (f->short_name) snprintf(name, sizeof name, "-%c/--%s", f->short_name, f->long_name);
        else snprintf(name, sizeof name, "--%s", f->long_name);
        repeated_flags_use(&repeated, name);
        if (f->type == EVAL_STR) {
            /* an empty path would read as the flag left out */
            if (!*v) return bad(a, "needs a value, got an empty one");
            *(const char **)dst = v;
            continue;
        }
        char *end;
        errno = 0;
        if (f->type == EVAL_FLOAT) {
            float x = strtof(v, &end);
            if (!*v || isspace((unsigned char)*v) || *end || errno || !isfinite(x)) return bad(a, "expects a number");
            *(float *)dst = x;
            continue;
        }
        long n = strtol(v, &end, 10);
        if (!*v || isspace((unsigned char)*v) || *end || errno || n < f->lo || n > 2147483647L) {
            char why[96];
            snprintf(why, sizeof why, "expects a whole number from %d to 2147483647, got '%.24s%s'", f->lo, v,
                     strlen(v) > 24 ? "..." : "");
            return bad(a, why);
        }
        *(int *)dst = (int)n;
    }
    if (o->help) return 0;
    repeated_flags_note(&repeated, stderr);
    if (!o->run == !o->init_from) return bad("--init-from", "or -o/--out: give one of them");
    if (o->init_from && o->step >= 0) return bad("--step", "goes with -o RUN, not --init-from");
    if (!o->data) return bad("-i/--data", "is missing: name the token shard to evaluate");
    if (strcmp(o->device, "cuda") && strcmp(o->device, "cpu")) return bad("--device", "must be cuda or cpu");
    if (strcmp(o->output, "fused") && strcmp(o->output, "canonical"))
        return bad("--output", "must be fused or canonical");
    PackKind pack;
    if (pack_kind_parse(o->pack, &pack) != 0) return bad("--pack", "must be wrapped or bfd");
    if (o->per_token && strlen(o->per_token) >= FGPT_PATH_LEN) return bad("--per-token", "is too long a path");
    /* known before the evaluation, not at its end, where the finished file is renamed into place */
    struct stat sb;
    if (o->per_token && stat(o->per_token, &sb) == 0 && S_ISDIR(sb.st_mode))
        return bad("--per-token", "names a directory: give a file name");
    if (o->z_loss < 0.0f) return bad("--z-loss", "must be >= 0");
    if (!(o->label_smoothing >= 0.0f && o->label_smoothing < 1.0f))
        return bad("--label-smoothing", "must be in [0, 1)");
    if (o->logit_softcap < 0.0f || (o->logit_softcap == 0.0f && find_given(argc, argv, "--logit-softcap")))
        return bad("--logit-softcap", "must be > 0");
    /* every file read below the directory must fit the system's paths, uncut */
    char err[ERR_LEN];
    if (o->run && checkpoint_run_dir_ok(o->run, err) != 0) {
        print_error("eval %s", err);
        return 2;
    }
    if (o->init_from && strlen(o->init_from) > CHECKPOINT_RUN_DIR_MAX)
        return bad("--init-from", "is too long a path for the files in it to fit the system's paths");
    return 0;
}

/* 1 after the message when the checkpoint in dir carries a tokenizer.json that is not the one
 * that made the shard at path (made_by: its header's fingerprint, 0 where it records none;
 * shard_vocab: the vocabulary it records; the shards of a pattern share both): the loss would be of
 * other text. Without a fingerprint, a tokenizer with fewer tokens than the shard's vocabulary is
 * not its maker, as training judges it. One with more tokens than the weights' vocabulary V is not
 * theirs at all, and is named as such. */
static int made_by_other_tokenizer(const char *path, uint64_t made_by, uint32_t shard_vocab, const char *dir, int V) {
    char tok_path[FGPT_PATH_LEN], err[ERR_LEN];
    if (!file_in_dir(tok_path, dir, "tokenizer.json")) return 0;
    Tokenizer *tok = tokenizer_load(tok_path, err);
    if (!tok) { /* not needed to evaluate, but then nothing checks the shard against it */
        fprintf(stderr, "note: not checking the shard against the checkpoint's tokenizer: %s\n", err);
        return 0;
    }
    if (tokenizer_vocab_size(tok) > (uint32_t)V) {
        print_error("%s has %u tokens, more than the vocabulary of %d of the weights beside it: it is not their "
                    "tokenizer (put the one they were trained with there)", tok_path, tokenizer_vocab_size(tok), V);
        tokenizer_free(tok);
        return 1;
    }
    char fix[FGPT_PATH_LEN + 96];
    snprintf(fix, sizeof fix, "evaluate a shard made by it (`./train prepare --tokenizer %s`)", tok_path);
    const uint32_t words = tokenizer_vocab_size(tok);
    const int other = made_by ? shard_check_tokenizer(path, made_by, tok_path, tokenizer_fingerprint(tok), fix, err) != 0
                              : words < shard_vocab;
    tokenizer_free(tok);
    if (other && made_by) print_error("%s", err);
    else if (other)
        print_error("%s has %u tokens but %s was tokenized for a vocabulary of %u: it is not the tokenizer that made "
                    "the shard (%s)", tok_path, words, path, shard_vocab, fix);
    return other;
}

/* The shards -i names, their headers read and checked before any weights are: one tokenizer for
 * them all, and a target in each. */
typedef struct {
    ShardPaths paths;
    ShardHeader *hdr;
    size_t named;     /* the first shard that records its tokenizer; paths.n when none does */
    uint64_t targets; /* over all shards: each one's tokens less one */
} EvalShards;

static void eval_shards_free(EvalShards *s) {
    shard_paths_free(&s->paths);
    free(s->hdr);
}

/* 0, or the exit status after the message. */
static int open_shards(const char *spec, EvalShards *s) {
    char err[ERR_LEN];
    memset(s, 0, sizeof *s);
    if (shard_paths(spec, &s->paths, err) != 0) {
        print_error("%s", err);
        return 1;
    }
    const size_t n = s->paths.n;
    const char *const *path = s->paths.paths;
    if (!(s->hdr = calloc(n, sizeof *s->hdr))) {
        print_error("out of memory for the headers of %zu shards", n);
        return 1;
    }
    s->named = n;
    for (size_t i = 0; i < n; i++) {
        if (strlen(path[i]) >= FGPT_PATH_LEN) {
            print_error("the shard path %s is too long", path[i]);
            return 2;
        }
        if (shard_read_header(path[i], &s->hdr[i], err) != 0) {
            if (n > 1) print_error("%s (a file of the shard pattern %s)", err, spec);
            else print_error("%s", err);
            return 1;
        }
        if (shard_joins_set(&s->hdr[i], path[i], &s->hdr[0], path[0], s->named < n ? &s->hdr[s->named] : NULL,
                            s->named < n ? path[s->named] : "", err) != 0) {
            print_error("%s", err);
            return 1;
        }
        if (s->named == n && s->hdr[i].tokenizer) s->named = i;
        const uint64_t count = s->hdr[i].num_tokens;
        if (count < 2) {
            print_error("shard %s holds %llu token(s): a target needs 2 (%s)", path[i], (unsigned long long)count,
                        n > 1 ? "leave it out of the pattern" : "pass a longer shard");
            return 1;
        }
        s->targets += count - 1;
    }
    return 0;
}

/* The shard's tokens, each below the model's vocabulary V. NULL after the message. */
static uint32_t *read_tokens(const char *path, int V, const char *dir, uint64_t *n) {
    char err[ERR_LEN];
    uint32_t *tokens;
    ShardHeader hdr;
    /* the shard's own checks here; the model's vocabulary below, with a hint that fits a model
     * whose vocabulary is the checkpoint's */
    if (shard_read(path, UINT32_MAX, &tokens, n, &hdr, err) != 0) {
        print_error("%s", err);
        return NULL;
    }
    for (uint64_t i = 0; i < *n; i++) {
        if (shard_token_id(tokens[i]) < (uint32_t)V) continue;
        print_error("token %u at position %llu in shard %s is >= the vocabulary %d of the model in %s "
                    "(evaluate a shard made by the model's tokenizer)",
                    shard_token_id(tokens[i]), (unsigned long long)i, path, V, dir);
        free(tokens);
        return NULL;
    }
    return tokens;
}

/* The later shards of a pattern checked as read_tokens checks the first, before any work, mapped
 * (their pages stay in the cache for their turn): a bad token in the last shard is named before the
 * first shard's line. Under PACK_BFD each one's packed windows of T are counted into windows[k].
 * 0, or 1 after the message. */
static int check_later_shards(const EvalShards *s, int V, const char *dir, PackKind pack, int T, uint64_t *windows) {
    enum { CHUNK = 1 << 16 };
    char err[ERR_LEN];
    uint32_t *buf = malloc(CHUNK * sizeof *buf);
    if (!buf) {
        print_error("out of memory checking the shards of a pattern");
        return 1;
    }
    int status = 0;
    PackStarts starts = {0};
    for (size_t k = 1; status == 0 && k < s->paths.n; k++) {
        MappedShard m;
        const char *path = s->paths.paths[k];
        if (shard_map(path, &m, err) != 0) {
            print_error("%s", err);
            status = 1;
            break;
        }
        starts.count = 0;
        for (uint64_t at = 0; status == 0 && at < m.hdr.num_tokens; at += CHUNK) {
            const size_t n = m.hdr.num_tokens - at < CHUNK ? (size_t)(m.hdr.num_tokens - at) : CHUNK;
            if (shard_decode_checked(&m.hdr, path, m.tokens + at * m.hdr.bytes_per_token, at, n, UINT32_MAX, buf,
                                     err) != 0) {
                print_error("%s", err);
                status = 1;
            }
            for (size_t i = 0; status == 0 && i < n; i++)
                if (shard_token_id(buf[i]) >= (uint32_t)V) {
                    print_error("token %u at position %llu in shard %s is >= the vocabulary %d of the model in %s "
                                "(evaluate a shard made by the model's tokenizer)",
                                shard_token_id(buf[i]), (unsigned long long)(at + i), path, V, dir);
                    status = 1;
                }
            if (status == 0 && pack == PACK_BFD && pack_note_starts(&starts, buf, n, at, err) != 0) {
                print_error("%s", err);
                status = 1;
            }
        }
        PackedWindows packed;
        if (status == 0 && pack == PACK_BFD) {
            if (pack_documents(starts.at, starts.count, m.hdr.num_tokens, T, &packed, err) != 0) {
                print_error("%s", err);
                status = 1;
            } else {
                windows[k] = packed.windows;
                packed_windows_free(&packed);
            }
        }
        shard_unmap(&m);
    }
    pack_starts_free(&starts);
    free(buf);
    return status;
}

/* The checkpoint's weights in the table's layout (malloc'd), read and checked against its config.json
 * before anything else is checked against them: a config whose vocabulary disagrees with the weights
 * is named as such, not as a tokenizer or a shard that does not fit it. NULL after the message. */
static float *read_weights(const char *dir, const ParamTable *table) {
    char err[ERR_LEN];
    float *params = hf_load_weights(dir, table, err);
    if (!params) print_error("%s", err);
    return params;
}

/* The backend of B windows of T on the device asked for, holding params. NULL after the message. */
static Backend *load_model(const EvalOptions *o, const ParamTable *table, const float *params, int B, int T) {
    char err[ERR_LEN];
    const OutputKind output = strcmp(o->output, "canonical") == 0 ? OUTPUT_CANONICAL : OUTPUT_FUSED;
    Backend *be = NULL;
    if (strcmp(o->device, "cuda") == 0) {
        char why[ERR_LEN] = "";
        if (cuda_device_count(why) == 0)
            snprintf(err, ERR_LEN, "no CUDA GPU available (%s); use --device cpu for the CPU reference backend", why);
        else
            be = backend_cuda_create(table, B, T, output, OUTPUT_FUSED_DEFAULT_BUDGET, 0, OPTIMIZER_STATE_FP32, 0, params, NULL, err);
    } else if (!host_memory_short(backend_cpu_bytes(table, B, T, output, 0), "the CPU backend", "lower -b or -t",
                                  err)) {
        be = backend_cpu_create(table, B, T, output, OPTIMIZER_STATE_FP32, 0, params, err);
    }
    if (!be) print_error("%s", err);
    return be;
}

/* Whether path's folder is dir; a link is followed to the file it names, which is what a write
 * through it changes. */
static int in_folder(const char *path, const char *dir) {
    char parent[FGPT_PATH_LEN], resolved[PATH_MAX];
    struct stat lsb;
    if (lstat(path, &lsb) == 0 && S_ISLNK(lsb.st_mode) && realpath(path, resolved) && strlen(resolved) < sizeof parent)
        path = resolved;
    snprintf(parent, sizeof parent, "%s", path);
    char *slash = strrchr(parent, '/');
    if (!slash) snprintf(parent, sizeof parent, ".");
    else if (slash == parent) parent[1] = 0;
    else *slash = 0;
    return same_file(parent, dir);
}

/* The checkpoint that o names: its directory into dir (FGPT_PATH_LEN bytes) and its config.json,
 * with the flags that bear on it checked. 0, or 1 after the message. */
static int find_model(const EvalOptions *o, char *dir, GPTConfig *cfg) {
    char err[ERR_LEN];
    if (checkpoint_dir_to_read(o->run, o->step, o->init_from, "--init-from", dir, err) != 0 ||
        hf_read_config(dir, cfg, err) != 0) {
        print_error("%s", err);
        return 1;
    }
    if (o->logit_softcap > 0.0f) {
        if (cfg->logit_softcap != 0.0f && cfg->logit_softcap != o->logit_softcap) {
            print_error("--logit-softcap %g differs from the final_logit_softcapping %g of the model in %s "
                        "(drop the flag: the model's own cap applies)",
                        (double)o->logit_softcap, (double)cfg->logit_softcap, dir);
            return 1;
        }
        cfg->logit_softcap = o->logit_softcap;
    }
    if (o->seq_len > cfg->max_seq_len) {
        print_error("-t %d is above the context of the model in %s (pass -t %d or less)", o->seq_len, dir,
                    cfg->max_seq_len);
        return 1;
    }
    return 0;
}

/* The evaluation of the model in dir over the shards: 0, or 1 after the message. */
static int evaluate(EvalOptions o, const char *dir, GPTConfig cfg, const EvalShards *shards) {
    char err[ERR_LEN];
    const size_t num_shards = shards->paths.n;
    const char *const *shard = shards->paths.paths;
    /* the file, and the temporary name it is written under, must be neither a shard nor in the
     * checkpoint's folder, through links included */
    char tmp[FGPT_PATH_LEN + 8] = ""; /* the per-token file's temporary name while it is written */
    if (o.per_token) snprintf(tmp, sizeof tmp, "%s.tmp", o.per_token);
    for (int k = 0; o.per_token && k < 2; k++) {
        const char *path = k ? tmp : o.per_token;
        struct stat ls;
        char resolved[PATH_MAX];
        const int link = lstat(path, &ls) == 0 && S_ISLNK(ls.st_mode);
        if (k == 1 && link) continue; /* a link at the temporary name is removed, never written through */
        if (link && !realpath(path, resolved)) { /* where it would create a file is not known */
            print_error("--per-token %s is a link to no file (%s): pass the path of the file itself", o.per_token,
                        strerror(errno));
            return 1;
        }
        int onto_shard = 0;
        for (size_t i = 0; i < num_shards; i++) onto_shard |= same_file(path, shard[i]);
        if (onto_shard || in_folder(path, dir)) {
            print_error("--per-token %s would %s%s%s: pass a path outside the checkpoint and other than -i", o.per_token,
                        onto_shard ? "overwrite the shard being evaluated" : "write into the checkpoint's folder",
                        k ? ", through its temporary name " : "", k ? tmp : "");
            return 1;
        }
    }
    uint32_t *tokens = NULL;
    uint64_t *shard_windows = NULL; /* under --pack bfd, each later shard's packed windows */
    PackedWindows packed = {0};     /* the shard in hand's, under --pack bfd */
    float *params = NULL;
    ParamTable table;
    memset(&table, 0, sizeof table);
    Backend *be = NULL;
    FILE *per_token = NULL;
    int status = 1;
    /* The file goes to a temporary name, renamed once complete: a failed run leaves whatever the
     * path held before. It is created before the model and the data are read, so that a path that
     * cannot be written costs nothing. A path that is there and is not a regular file (a FIFO, a
     * device such as /dev/stdout, a link) is written in place, since a rename would replace it: it
     * is opened only once the evaluation is ready to run, since opening empties what it names. */
    struct stat lsb;
    const int in_place = o.per_token && lstat(o.per_token, &lsb) == 0 && !S_ISREG(lsb.st_mode);
    if (in_place) tmp[0] = 0;
    if (o.per_token && !in_place) {
        if (!(per_token = create_new_file(tmp))) {
            print_error("cannot create %s for --per-token: %s (pass a path in a writable directory)", tmp,
                        strerror(errno));
            tmp[0] = 0;
            goto done;
        }
    }
    if (param_table_build(&table, &cfg, err) != 0) {
        print_error("%s", err);
        goto done;
    }
    if (!(params = read_weights(dir, &table))) goto done;
    const size_t named = shards->named < num_shards ? shards->named : 0;
    if (made_by_other_tokenizer(shard[named], shards->hdr[named].tokenizer, shards->hdr[0].vocab_size, dir,
                                cfg.vocab_size))
        goto done;
    PackKind pack = PACK_WRAPPED;
    pack_kind_parse(o.pack, &pack);
    int documents = 0;
    for (size_t i = 0; i < num_shards; i++) documents |= (shards->hdr[i].flags & SHARD_DOCUMENTS) != 0;
    if (pack == PACK_BFD && !documents) {
        print_error("eval --pack bfd packs whole documents, and %s marks none: evaluate a shard prepared with "
                    "--documents or --prompt-completion, or leave --pack out", num_shards > 1 ? o.data : shard[0]);
        goto done;
    }
    /* by default the model's context, or the longest shard's targets when fewer: a longer window
     * holds the same targets in more memory (Llama 3's context is 131072) */
    uint64_t longest = 0, windows = 0, most = 0;
    for (size_t i = 0; i < num_shards; i++)
        if (shards->hdr[i].num_tokens - 1 > longest) longest = shards->hdr[i].num_tokens - 1;
    const int T = o.seq_len ? o.seq_len : longest < (uint64_t)cfg.max_seq_len ? (int)longest : cfg.max_seq_len;
    /* every shard's tokens before the model is made: the first read whole, the later ones checked */
    uint64_t n = 0;
    if (!(shard_windows = calloc(num_shards, sizeof *shard_windows))) {
        print_error("out of memory for the windows of %zu shards", num_shards);
        goto done;
    }
    if (!(tokens = read_tokens(shard[0], cfg.vocab_size, dir, &n)) ||
        check_later_shards(shards, cfg.vocab_size, dir, pack, T, shard_windows))
        goto done;
    if (pack == PACK_BFD && pack_shard(tokens, n, T, &packed, err) != 0) {
        print_error("%s", err);
        goto done;
    }
    for (size_t i = 0; i < num_shards; i++) {
        const uint64_t w = pack == PACK_WRAPPED ? eval_window_count(shards->hdr[i].num_tokens, T)
                         : i == 0               ? packed.windows
                                                : shard_windows[i];
        windows += w;
        if (w > most) most = w;
    }
    /* a batch holds no more windows than a shard has: the backend's buffers are no larger than needed */
    const int B = most < (uint64_t)o.batch ? (int)most : o.batch;
    if (!(be = load_model(&o, &table, params, B, T))) goto done;
    free(params); /* the backend holds its own copy */
    params = NULL;
    be->z_loss = o.z_loss, be->label_smoothing = o.label_smoothing;
    char in_shards[48] = "";
    if (num_shards > 1) snprintf(in_shards, sizeof in_shards, " in %zu shards", num_shards);
    printf("eval: %s on %s: %llu tokens%s, %llu window(s) of T=%d%s in batches of B=%d, output layer %s, device %s "
           "(%s)\n", dir, num_shards > 1 ? o.data : shard[0], (unsigned long long)(shards->targets + num_shards),
           in_shards, (unsigned long long)windows, T, pack == PACK_BFD ? " packed with whole documents" : "", B,
           o.output, o.device, be->device_name);
    if (in_place && !(per_token = fopen(o.per_token, "wb"))) {
        print_error("cannot open %s for --per-token: %s (pass a path in a writable directory)", o.per_token,
                    strerror(errno));
        goto done;
    }
    /* the means over all targets: each shard's, weighted by its targets */
    EvalMeans m = {0};
    for (size_t i = 0; i < num_shards; i++) {
        EvalMeans one;
        if (i > 0 && !(tokens = read_tokens(shard[i], cfg.vocab_size, dir, &n))) goto done;
        if (i > 0 && pack == PACK_BFD) {
            packed_windows_free(&packed);
            if (pack_shard(tokens, n, T, &packed, err) != 0) {
                print_error("%s", err);
                goto done;
            }
        }
        if (eval_run(be, tokens, n, pack == PACK_BFD ? &packed : NULL, &one, per_token, o.per_token, err) != 0) {
            print_error("%s", err);
            goto done;
        }
        free(tokens);
        tokens = NULL;
        if (num_shards == 1) m = one; /* as it was: the division below gives it back to rounding only */
        else {
            m.loss += one.loss * (double)one.targets, m.objective += one.objective * (double)one.targets;
            m.lse += one.lse * (double)one.targets, m.targets += one.targets;
        }
        if (num_shards > 1) printf("shard %s: loss %.6f tokens %llu\n", shard[i], one.loss, (unsigned long long)one.targets);
    }
    if (m.targets == 0) { /* a masked shard whose every token is a prompt's */
        print_error("%s holds no target with a loss: every token is marked as a prompt's (evaluate a shard with "
                    "completions, or one of plain text)", num_shards > 1 ? o.data : shard[0]);
        goto done;
    }
    if (num_shards > 1) m.loss /= (double)m.targets, m.objective /= (double)m.targets, m.lse /= (double)m.targets;
    if (!isfinite(m.loss) || !isfinite(m.objective)) { /* a number a script would take for a result */
        print_error("the loss is not finite (%g): the weights in %s hold a NaN or an infinity, or "
                    "overflow fp32 (evaluate another checkpoint)", !isfinite(m.loss) ? m.loss : m.objective, dir);
        goto done;
    }
    if (per_token) {
        const int closed = fclose(per_token);
        per_token = NULL;
        if (closed != 0 || (tmp[0] && rename(tmp, o.per_token) != 0)) {
            const int e = errno;
            print_error("cannot write the per-token losses to %s: %s (%s, or pass another path)", o.per_token,
                        strerror(e), write_error_cause(e));
            goto done;
        }
        tmp[0] = 0;
    }
    printf("loss %.6f", m.loss);
    if (o.z_loss != 0.0f || o.label_smoothing != 0.0f) printf(" objective %.6f", m.objective);
    printf(" ppl %.6f tokens %llu\n", exp(m.loss), (unsigned long long)m.targets);
    status = 0;
done:
    if (per_token) fclose(per_token);
    if (tmp[0]) remove(tmp);
    if (be) be->ops->destroy(be);
    param_table_free(&table);
    free(params);
    free(tokens);
    free(shard_windows);
    packed_windows_free(&packed);
    return status;
}

int eval_main(int argc, char **argv) {
    EvalOptions o;
    int status = parse(&o, argc, argv);
    if (status || o.help) {
        if (o.help && !status) usage(stdout); /* a bad flag beside --help gets its one line, as ./train's do */
        return status;
    }
    /* the model first, then the shards' headers, before the weights and the tokens are read */
    char dir[FGPT_PATH_LEN];
    GPTConfig cfg;
    if ((status = find_model(&o, dir, &cfg)) != 0) return status;
    EvalShards shards;
    if ((status = open_shards(o.data, &shards)) != 0) {
        eval_shards_free(&shards);
        return status;
    }
    status = evaluate(o, dir, cfg, &shards);
    eval_shards_free(&shards);
    return status;
}
