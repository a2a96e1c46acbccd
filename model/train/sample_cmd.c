/* model/train/sample_cmd.c - `./train sample`: generates text from a checkpoint, on the GPU or the CPU.
 *
 * The checkpoint is read as Hugging Face reads it: config.json and model.safetensors
 * (model/train/hf_weights.c), and the tokenizer.json beside them, so whatever `transformers` loads from
 * a checkpoint directory is what samples here (a directory of GPT-2's own files works too, with
 * --checkpoint). The prompt runs through the model once, then each new token is one row against
 * the backend's key/value cache (model/train/sample.c), printed as it is drawn. */
#include "model/train/sample_cmd.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/cli_word.h"
#include "common/err.h"
#include "common/repeated_flags.h"
#include "common/host_memory.h"
#include "common/paths.h"
#include "common/rng.h"
#include "model/backend.h"
#include "model/train/checkpoint.h"
#include "model/cuda/cuda_device.h"
#include "model/train/hf_weights.h"
#include "model/train/sample.h"
#include "tokenizer/model_chat.h"
#include "tokenizer/tokenizer.h"

typedef struct {
    const char *run, *checkpoint, *prompt, *chat, *system, *messages, *tokenizer, *device;
    int step, gen_tokens, top_k, print_ids;
    float temperature, top_p;
    unsigned long long seed;
} SampleOptions;

static void usage(FILE *f) {
    fprintf(f,
            "usage: ./train sample -o RUN [--step N] [flags]    generate from a run's checkpoint\n"
            "       ./train sample --checkpoint DIR [flags]     ... or from a Hugging Face directory (gpt2, llama, qwen2, qwen3, gemma3)\n"
            "\n"
            "flags:\n"
            "  -o, --out RUN          run directory (its latest checkpoint, or --step's)\n"
            "      --step N           the checkpoint of step N (default: the latest)\n"
            "      --checkpoint DIR   a directory with config.json + model.safetensors (+ tokenizer.json)\n"
            "      --init-from DIR    the same (./train's and eval's name for it)\n"
            "      --prompt TEXT      text to continue (default: start after the document separator)\n"
            "      --chat TEXT        a user's message, rendered by the model's chat template with the generation\n"
            "                         prompt (its tokenizer_config.json's or chat_template.jinja); the reply ends\n"
            "                         at the tokenizer's eos_token\n"
            "      --system TEXT      with --chat: a system turn before the user's\n"
            "      --messages FILE    instead of --chat: the conversation so far, a JSON list of {\"role\",\n"
            "                         \"content\"} messages (system, user, assistant, ...), rendered the same way\n"
            "  -G, --gen-tokens N     tokens to generate (default 64); past the model's context (n_positions)\n"
            "                         the last half of the context is kept and run again from position 0\n"
            "      --temperature T    softmax temperature; 0 is greedy (default 1.0)\n"
            "      --top-k K          draw among the K likeliest tokens only (and those equal to the K-th); 0 for all,\n"
            "                         1 is greedy (default 0)\n"
            "      --top-p P          then among the fewest likeliest whose probability reaches P (0 < P <= 1;\n"
            "                         default 1: all)\n"
            "      --seed S           seed of the draws (default 1337)\n"
            "      --device KIND      cuda or cpu (the fp32 reference backend) (default cuda)\n"
            "      --tokenizer FILE   tokenizer, where the checkpoint carries none\n"
            "      --ids              also print the prompt's and the generated token ids, a line each\n"
            "  -h, --help             this text\n");
}

static int bad(const char *flag, const char *why) {
    print_error("sample %s %s (see ./train sample --help)", flag, why);
    return 2;
}

static int parse_int(const char *s, long lo, long hi, int *out) {
    char *end;
    errno = 0;
    long v = s ? strtol(s, &end, 10) : 0;
    if (!s || !*s || isspace((unsigned char)*s) || *end || errno || v < lo || v > hi) return -1;
    *out = (int)v;
    return 0;
}

/* The flags that take a value, so that an unknown flag is named as such, not as one missing its value. */
static int flag_takes_value(const char *a) {
    static const char *const flags[] = {"-o",     "--out",        "--checkpoint", "--init-from", "--prompt", "--chat",
                                        "--system", "--messages",
                                        "--tokenizer", "--device", "--step", "-G",         "--gen-tokens",
                                        "--top-k", "--top-p", "--temperature", "--seed"};
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++)
        if (!strcmp(a, flags[i])) return 1;
    return 0;
}

/* 0, or the exit status of a bad command line (after its message). */
static int parse(SampleOptions *o, int argc, char **argv, int *help) {
    *o = (SampleOptions){.device = "cuda", .step = -1, .gen_tokens = 64, .temperature = 1.0f, .top_p = 1.0f, .seed = 1337};
    *help = 0;
    RepeatedFlags repeated = {0};
    for (int i = 1; i < argc; i++) {
        CliWord w;
        cli_word_split(argv[i], &w);
        const char *a = w.flag, *v = w.value ? w.value : i + 1 < argc ? argv[i + 1] : NULL;
        const int no_value = !strcmp(a, "-h") || !strcmp(a, "--help") || !strcmp(a, "--ids");
        if (no_value && w.value) return bad(a, "takes no value");
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { /* the rest is still read: a bad flag is named, as ./train does */
            *help = 1;
            continue;
        }
        if (!strcmp(a, "--ids")) {
            o->print_ids = 1;
            continue;
        }
        if (!flag_takes_value(a)) {
            print_error("sample: unknown flag '%s' (see ./train sample --help)", argv[i]);
            return 2;
        }
        if (!v) return bad(a, "needs a value");
        if (!w.value) i++;
        const int out = !strcmp(a, "-o") || !strcmp(a, "--out"), gen = !strcmp(a, "-G") || !strcmp(a, "--gen-tokens");
        const int checkpoint = !strcmp(a, "--checkpoint") || !strcmp(a, "--init-from");
        repeated_flags_use(&repeated, out ? "-o/--out" : gen ? "-G/--gen-tokens" : checkpoint ? "--checkpoint" : a);
        if (out) {
            o->run = v;
        } else if (checkpoint) {
            o->checkpoint = v;
        } else if (!strcmp(a, "--prompt")) {
            o->prompt = v;
        } else if (!strcmp(a, "--chat")) {
            o->chat = v;
        } else if (!strcmp(a, "--system")) {
            o->system = v;
        } else if (!strcmp(a, "--messages")) {
            o->messages = v;
        } else if (!strcmp(a, "--tokenizer")) {
            o->tokenizer = v;
        } else if (!strcmp(a, "--device")) {
            if (strcmp(v, "cuda") && strcmp(v, "cpu")) return bad(a, "must be cuda or cpu");
            o->device = v;
        } else if (!strcmp(a, "--step")) {
            if (parse_int(v, 0, 2147483647L, &o->step)) return bad(a, "expects a step number");
        } else if (gen) {
            if (parse_int(v, 1, 1 << 20, &o->gen_tokens)) return bad(a, "must be between 1 and 2^20");
        } else if (!strcmp(a, "--top-k")) {
            if (parse_int(v, 0, 2147483647L, &o->top_k)) return bad(a, "must be a whole number from 0 to 2147483647");
        } else if (!strcmp(a, "--seed")) {
            char *end;
            errno = 0;
            o->seed = strtoull(v, &end, 10);
            if (!*v || isspace((unsigned char)*v) || *end || errno || v[0] == '-') return bad(a, "expects a whole number");
        } else if (!strcmp(a, "--temperature")) {
            char *end;
            o->temperature = strtof(v, &end);
            if (!*v || isspace((unsigned char)*v) || *end || !(o->temperature >= 0 && o->temperature < 1e6))
                return bad(a, "must be from 0 (greedy) to below 1e6");
        } else if (!strcmp(a, "--top-p")) {
            char *end;
            o->top_p = strtof(v, &end);
            if (!*v || isspace((unsigned char)*v) || *end || !(o->top_p > 0 && o->top_p <= 1))
                return bad(a, "must be above 0 and at most 1");
        }
    }
    if (*help) return 0;
    repeated_flags_note(&repeated, stderr);
    if (!o->run == !o->checkpoint) return bad("-o/--out", "or --checkpoint: give one of them");
    if (o->prompt && o->chat) return bad("--chat", "is a prompt of its own: give --prompt or --chat, not both");
    if (o->prompt && o->messages)
        return bad("--messages", "is a prompt of its own: give --prompt or --messages, not both");
    if (o->chat && o->messages)
        return bad("--messages", "holds the whole conversation: give --messages or --chat, not both");
    if (o->system && !o->chat)
        return bad("--system", o->messages ? "goes with --chat; with --messages, put the system turn in the file"
                                           : "goes with --chat (a system turn before the user's message)");
    if (o->checkpoint && o->step >= 0) return bad("--step", "goes with -o RUN, not --checkpoint");
    /* every file read below the directory must fit the system's paths, uncut */
    char err[ERR_LEN];
    if (o->run && checkpoint_run_dir_ok(o->run, err) != 0) {
        print_error("sample %s", err);
        return 2;
    }
    if (o->checkpoint && strlen(o->checkpoint) > CHECKPOINT_RUN_DIR_MAX)
        return bad("--checkpoint", "is too long a path for the files in it to fit the system's paths");
    return 0;
}

/* The tokenizer: --tokenizer, else the checkpoint's tokenizer.json, else none (NULL, *status 0). */
static Tokenizer *open_tokenizer(const SampleOptions *o, const char *dir, int *status) {
    char path[FGPT_PATH_LEN], err[ERR_LEN];
    *status = 0;
    if (!o->tokenizer && !file_in_dir(path, dir, "tokenizer.json")) return NULL;
    const int has_own = o->tokenizer && file_in_dir(path, dir, "tokenizer.json");
    Tokenizer *t = tokenizer_load(o->tokenizer ? o->tokenizer : path, err);
    if (!t && !o->tokenizer) { /* the checkpoint's own: another can stand in for it */
        print_error("the checkpoint's tokenizer.json cannot be read (%s); pass the model's tokenizer with --tokenizer "
                    "FILE, or sample ids without it by moving that file out", err);
        *status = 1;
    } else if (!t) {
        print_error("%s", err);
        *status = 1;
    }
    /* the checkpoint's own names the model's ids: another decodes them as other text */
    Tokenizer *own = t && has_own ? tokenizer_load(path, err) : NULL;
    if (own && tokenizer_fingerprint(own) != tokenizer_fingerprint(t))
        fprintf(stderr, "note: --tokenizer %s is not %s, the tokenizer the checkpoint carries: its ids mean other "
                "text to the model (leave out --tokenizer to use the checkpoint's)\n", o->tokenizer, path);
    tokenizer_free(own);
    return t;
}

/* Writes the text of ids[0..n) to stdout, every byte (a token may hold a zero byte). */
static void write_text(const Tokenizer *tok, const uint32_t *ids, size_t n) {
    const size_t need = tokenizer_decode(tok, ids, n, NULL, 0);
    char *text = malloc(need + 1);
    if (text) fwrite(text, 1, tokenizer_decode(tok, ids, n, text, need), stdout);
    free(text);
}

/* Prints each token as it is drawn (ctx: the tokenizer): its text, or its id where there is no
 * tokenizer. Byte-level tokens concatenate, so the pieces make the text of the whole. */
static void print_token(int token, void *ctx) {
    const Tokenizer *tok = ctx;
    const uint32_t id = (uint32_t)token;
    if (tok)
        write_text(tok, &id, 1);
    else
        printf(" %d", token);
    fflush(stdout);
}

/* Generates o->gen_tokens tokens after the prompt (or after the document separator), printing them
 * as they come. */
static int generate(const SampleOptions *o, Backend *be, const Tokenizer *tok, int separator, const uint32_t *prompt,
                    size_t n_prompt, const int *stops, int n_stops) {
    const int V = be->table->cfg.vocab_size;
    const int start = n_prompt ? (int)n_prompt : 1; /* no prompt: after the separator, as a new document */
    const size_t n = (size_t)start + (size_t)o->gen_tokens;
    int *tokens = malloc(n * sizeof *tokens);
    float *logits = malloc((size_t)V * sizeof *logits);
    if (!tokens || !logits) {
        free(tokens), free(logits);
        print_error("out of host memory for sampling");
        return 1;
    }
    for (size_t i = 0; i < n_prompt; i++) tokens[i] = (int)prompt[i];
    if (!n_prompt) tokens[0] = separator;
    if (tok)
        write_text(tok, prompt, n_prompt);
    else
        fputs("ids:", stdout);
    fflush(stdout);
    Rng rng;
    rng_seed(&rng, o->seed);
    const int drawn =
        sample_generate(be, tokens, start, o->gen_tokens,
                        &(SampleSettings){.temperature = o->temperature, .top_k = o->top_k, .top_p = o->top_p,
                                          .stops = stops, .n_stops = n_stops},
                        &rng, logits, print_token, (void *)tok);
    fputc('\n', stdout);
    int stopped = 0;
    for (int k = 0; drawn > 0 && k < n_stops; k++) stopped |= tokens[start + drawn - 1] == stops[k];
    if (drawn < o->gen_tokens && !stopped) {
        print_error("the model's logits are NaN or Inf after %d token(s): its weights are damaged or diverged "
                    "(sample from an earlier checkpoint: --step N)", drawn);
        free(logits);
        free(tokens);
        return 1;
    }
    const size_t end = (size_t)start + (size_t)drawn; /* the stop token ends what was drawn */
    /* a model's vocabulary often has room past its tokenizer's (Qwen's 151936 over 151665 tokens) */
    int textless = 0, first = -1;
    for (size_t i = (size_t)start; tok && i < end; i++)
        if ((uint32_t)tokens[i] >= tokenizer_vocab_size(tok)) textless++, first = first < 0 ? tokens[i] : first;
    if (textless)
        printf("note: %d drawn token(s) (the first id %d) lie past the tokenizer's %u tokens and have no text: "
               "printed as U+FFFD\n", textless, first, tokenizer_vocab_size(tok));
    if (o->print_ids && n_prompt) {
        printf("prompt ids:");
        for (size_t i = 0; i < n_prompt; i++) printf(" %u", prompt[i]);
        printf("\n");
    }
    if (o->print_ids && tok) {
        printf("ids:");
        for (size_t i = (size_t)start; i < end; i++) printf(" %d", tokens[i]);
        printf("\n");
    }
    free(logits);
    free(tokens);
    return 0;
}

/* --messages' file: a JSON list of message objects (*root, json_free), or NULL after printing why. */
static JsonValue *read_messages(const char *path) {
    char why[ERR_LEN], jerr[ERR_LEN];
    FILE *f = open_regular(path, why);
    if (!f) {
        if (why[0]) print_error("--messages: %s", why);
        else print_error("--messages: cannot open %s: %s", path, strerror(errno));
        return NULL;
    }
    size_t len = 0;
    char *text = read_stream_whole(f, &len);
    fclose(f);
    if (!text) {
        print_error("--messages: cannot read %s: %s", path, strerror(errno));
        return NULL;
    }
    JsonValue *root = json_parse(text, len, path, jerr);
    free(text);
    if (!root) {
        print_error("--messages: %s", jerr);
        return NULL;
    }
    if (!chat_is_messages(root) || root->len == 0) {
        print_error("--messages: %s is not a list of {\"role\", \"content\"} messages (write the conversation as "
                    "[{\"role\": \"user\", \"content\": \"Hi\"}, ...])", path);
        json_free(root);
        return NULL;
    }
    return root;
}

/* --chat (with --system's turn before it) or --messages: the conversation rendered by the model's
 * chat template with the generation prompt, its null-valued keys left out, tokenized as
 * apply_chat_template tokenizes it (*prompt, malloc'ed); the tokenizer_config.json's eos_token joins
 * stops[0..*n_stops) (room for 9), which end the reply. 0, or 1 after printing why. */
static int chat_prompt(const Tokenizer *tok, const SampleOptions *o, const char *dir, uint32_t **prompt, size_t *n,
                       int *stops, int *n_stops) {
    const char *flag = o->messages ? "--messages" : "--chat";
    ModelChat chat;
    char err[ERR_LEN];
    const int rc = model_chat_load(&chat, tok, NULL, err);
    if (rc != 0) {
        if (rc == MODEL_CHAT_NONE)
            print_error("%s needs the model's chat template: the tokenizer of %s has none (a tokenizer_config.json "
                        "with its chat_template, or a chat_template.jinja, beside the tokenizer.json)", flag, dir);
        else
            print_error("%s: %s", flag, err);
        model_chat_free(&chat);
        return 1;
    }
    /* [{"role": "system", "content": system}, {"role": "user", "content": chat}] */
    JsonMember fields[2][2];
    JsonValue turns[2];
    JsonValue list = {.type = JSON_ARRAY, .len = 0, .items = turns};
    const char *roles[2] = {"system", "user"}, *texts[2] = {o->system, o->chat};
    for (int t = 0; t < 2 && !o->messages; t++) {
        if (!texts[t]) continue;
        fields[t][0] = (JsonMember){(char *)"role", 4, {.type = JSON_STRING, .len = strlen(roles[t]), .string = (char *)roles[t]}};
        fields[t][1] = (JsonMember){(char *)"content", 7, {.type = JSON_STRING, .len = strlen(texts[t]), .string = (char *)texts[t]}};
        turns[list.len++] = (JsonValue){.type = JSON_OBJECT, .len = 2, .members = fields[t]};
    }
    JsonValue *root = o->messages ? read_messages(o->messages) : NULL, copy;
    int status = 1;
    char *text = NULL;
    if (o->messages && !root) {
        model_chat_free(&chat);
        return 1;
    }
    const JsonValue *messages = chat_messages_without_nulls(root ? root : &list, &copy);
    size_t len = 0;
    if (!messages) {
        print_error("out of host memory for the conversation");
    } else if (!(text = chat_template_render(chat.template, messages, 1, chat.vars, chat.num_vars, &len, err))) {
        print_error("%s: the model's chat template (%s) does not render the %s: %s", flag, chat.source,
                    o->messages ? "conversation" : "message", err);
    } else if (tokenizer_check_text(tok, text, len, 0, err) != 0) {
        print_error("%s: %s", flag, err);
    } else if (!(*prompt = tokenizer_encode_alloc(tok, text, len, TOKENIZER_SPECIALS | TOKENIZER_NO_POST, n))) {
        print_error("out of host memory for the prompt");
    } else {
        status = 0;
        for (size_t k = 0; k < chat.num_vars; k++)
            if (!strcmp(chat.vars[k].name, "eos_token")) {
                uint32_t id;
                const JsonValue *eos = chat.vars[k].value;
                if (tokenizer_encode(tok, eos->string, eos->len, TOKENIZER_SPECIALS, &id, 1) == 1 && *n_stops < 9)
                    stops[(*n_stops)++] = (int)id;
            }
    }
    free(text);
    chat_messages_copy_free(&copy);
    json_free(root);
    model_chat_free(&chat);
    return status;
}

int sample_main(int argc, char **argv) {
    SampleOptions o;
    int help, status = parse(&o, argc, argv, &help);
    if (status || help) {
        if (help && !status) usage(stdout); /* a bad flag beside --help gets its one line, as ./train's do */
        return status;
    }
    char dir[FGPT_PATH_LEN], err[ERR_LEN];
    GPTConfig cfg;
    if (checkpoint_dir_to_read(o.run, o.step, o.checkpoint, "--checkpoint", dir, err) != 0 ||
        hf_read_config(dir, &cfg, err) != 0) {
        print_error("%s", err);
        return 1;
    }
    char own_tok[FGPT_PATH_LEN]; /* what needs no reading comes first */
    const int chat = o.chat || o.messages;
    const char *prompt_flag = o.chat ? "--chat" : o.messages ? "--messages" : "--prompt";
    if ((o.prompt || chat) && !o.tokenizer && !file_in_dir(own_tok, dir, "tokenizer.json")) {
        print_error("%s needs a tokenizer: %s has no tokenizer.json (pass --tokenizer FILE)", prompt_flag, dir);
        return 1;
    }
    /* the weights first, checked against config.json: a config whose vocabulary is not theirs is named
     * as such, not as a tokenizer that does not fit it */
    ParamTable table;
    memset(&table, 0, sizeof table);
    Backend *be = NULL;
    Tokenizer *tok = NULL;
    uint32_t *prompt = NULL;
    float *params = NULL;
    if (param_table_build(&table, &cfg, err) != 0) {
        print_error("%s", err);
        status = 1;
        goto done;
    }
    if (!(params = hf_load_weights(dir, &table, err))) {
        print_error("%s", err);
        status = 1;
        goto done;
    }
    tok = open_tokenizer(&o, dir, &status);
    if (status) goto done;
    status = 1;
    if ((o.prompt || chat) && !tok) {
        print_error("%s needs a tokenizer: %s has no tokenizer.json (pass --tokenizer FILE)", prompt_flag, dir);
        goto done;
    }
    if (tok && tokenizer_vocab_size(tok) > (uint32_t)cfg.vocab_size) {
        print_error("the tokenizer has %u tokens but the model's vocabulary is %d (pass the tokenizer the "
                    "model was trained with)", tokenizer_vocab_size(tok), cfg.vocab_size);
        goto done;
    }
    size_t n_prompt = 0;
    /* a reply ends where transformers' generate ends it: generation_config.json's eos_token_id (else
     * config.json's), and the tokenizer_config.json's eos_token */
    int stops[9], n_stops = chat ? hf_read_stop_tokens(dir, cfg.vocab_size, stops, 8) : 0;
    if (chat && chat_prompt(tok, &o, dir, &prompt, &n_prompt, stops, &n_stops) != 0) goto done;
    if (o.prompt) {
        size_t len = strlen(o.prompt);
        char terr[ERR_LEN];
        if (tokenizer_check_text(tok, o.prompt, len, 0, terr) != 0) {
            print_error("--prompt: %s", terr);
            goto done;
        }
        prompt = tokenizer_encode_alloc(tok, o.prompt, len, TOKENIZER_SPECIALS, &n_prompt);
        if (!prompt) n_prompt = 0;
    }
    /* a new document starts after the separator: the tokenizer's, else config.json's eos_token_id */
    const int eos = hf_read_eos_token(dir, cfg.vocab_size);
    const int separator = tok ? (int)tokenizer_eot_token(tok) : eos >= 0 ? eos : 0;
    /* the window: room for the prompt and what is asked, in multiples of 64, within the context
     * (beyond it the window slides: sample_generate) */
    long want = (long)(n_prompt ? n_prompt : 1) + o.gen_tokens;
    int T = (int)((want + 63) / 64 * 64);
    if (T > cfg.max_seq_len) T = cfg.max_seq_len;
    if ((long)n_prompt >= T) {
        print_error("the prompt is %zu tokens and must be shorter than the model's context, %d, to leave room "
                    "for a token; shorten --prompt", n_prompt, cfg.max_seq_len);
        goto done;
    }
    if (strcmp(o.device, "cuda") == 0) {
        char why[ERR_LEN] = "";
        if (cuda_device_count(why) == 0) {
            print_error("no CUDA GPU available (%s); use --device cpu for the CPU reference backend", why);
            goto done;
        }
        be = backend_cuda_create(&table, 1, T, OUTPUT_FUSED, 0, 0, OPTIMIZER_STATE_FP32, o.seed, params, NULL, err);
    } else if (!host_memory_short(backend_cpu_bytes(&table, 1, T, OUTPUT_FUSED, 0), "the CPU backend", "ask for fewer "
                                  "tokens (-G) or give a shorter --prompt", err)) {
        be = backend_cpu_create(&table, 1, T, OUTPUT_FUSED, OPTIMIZER_STATE_FP32, o.seed, params, err);
    }
    if (!be) {
        print_error("%s", err);
        goto done;
    }
    status = generate(&o, be, tok, separator, prompt, n_prompt, stops, n_stops);
done:
    if (be) be->ops->destroy(be);
    free(params);
    param_table_free(&table);
    free(prompt);
    tokenizer_free(tok);
    return status;
}
