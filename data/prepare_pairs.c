/* data/prepare_pairs.c - `./train prepare --prompt-completion`: JSON Lines of prompt-completion pairs
 * into shards whose prompt tokens carry no loss (SHARD_LOSS_MASK) and whose examples are documents
 * (SHARD_DOCUMENTS), for supervised fine-tuning.
 *
 * Each line of each file is an object (other keys are passed over) of one of TRL's SFT formats,
 * tokenized as TRL's SFTTrainer tokenizes it with completion_only_loss:
 * - "prompt" and "completion" strings: the completion gets the tokenizer's eos_token appended
 *   unless it ends with it, tokenizer(prompt + completion) gives the ids, and the first
 *   len(tokenizer(prompt)) of them are the prompt's, no target;
 * - "prompt" and "completion" lists of messages ({"role", "content"}): the model's chat template
 *   renders the prompt with the generation prompt and the whole conversation without, each is
 *   tokenized as apply_chat_template tokenizes (no post-processor tokens), and the first as many
 *   ids as the prompt's are no target; a line's "tools" and "chat_template_kwargs" go to the
 *   template;
 * - "messages", a list of messages: the rendered conversation, every token a target;
 * - "text", a string (TRL's language-modeling form): tokenizer(text + eos), every token a target.
 * Messages of ShareGPT's {"from", "value"} form, and "conversations" for "messages", are read as
 * TRL's maybe_convert_to_chatml converts them.
 * A message's keys whose value is null are left out, as apply_chat_template leaves them.
 * --chat-template FILE renders with that template instead of the tokenizer's. With
 * --assistant-only-loss (TRL's assistant_only_loss) a conversation's token is a target only where it
 * overlaps text of the template's {% generation %} blocks, as return_assistant_tokens_mask finds it
 * (and, for prompt and completion, only in the completion).
 * Examples follow each other in the shard, each one's first token marked: training packs them into
 * windows, and each runs as if alone (its own positions, no attention across examples). The last
 * --val-fraction of them (at least one) go to validation. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/grow.h"
#include "common/json.h"
#include "common/paths.h"
#include "data/prepare_internal.h"
#include "data/shard.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/model_chat.h"

/* The examples' ids, one after another, the prompt's with SHARD_NO_LOSS, each example's first with
 * SHARD_DOC_START; where each example starts. */
typedef struct {
    uint32_t *ids;
    size_t n, cap;
    size_t *starts; /* examples + 1 entries: starts[examples] == n */
    size_t examples, starts_cap;
    uint64_t mismatched; /* examples whose prompt's ids are not the start of the whole's */
    uint64_t prompt_ids, completion_ids;
    uint64_t stray;              /* a file's bytes outside UTF-8 in the examples' strings */
    size_t first_stray_line;     /* the line of the first */
    uint64_t conversations;      /* examples rendered by the chat template */
} PairIds;

/* The model's chat template and what it sees besides a conversation, read at the first line that
 * needs it. */
typedef struct {
    const Tokenizer *tok;
    const PrepareOptions *opt; /* --chat-template, --assistant-only-loss */
    int loaded, ok;
    ModelChat m;
} Chat;

/* The text transformers' tokenizer.eos_token names: tokenizer_config.json's eos_token beside the
 * tokenizer (a string, or an object with its "content"), else (no config, no key, or null) the
 * tokenizer's separator, with *named 0. A config that is not JSON, or an eos_token that is not one
 * of the tokenizer's special tokens (transformers would add it as a new token, which the model's
 * vocabulary has no row for), is refused: completions would end in ordinary text. malloc'ed; NULL
 * + message. */
static char *eos_text(const Tokenizer *tok, int *named, char *err) {
    char terr[ERR_LEN];
    *named = 0;
    char *config = tokenizer_has_hf_config(tok) ? tokenizer_hf_config_json(tok, 0, terr) : NULL;
    if (!config && tokenizer_has_hf_config(tok)) {
        fgpt_set_err(err, "%s", terr);
        return NULL;
    }
    JsonValue *root = config ? json_parse(config, strlen(config), "the tokenizer_config.json beside the tokenizer", terr)
                             : NULL;
    free(config);
    if (config && (!root || root->type != JSON_OBJECT)) {
        if (root) snprintf(terr, sizeof terr, "the tokenizer_config.json beside the tokenizer is not a JSON object");
        fgpt_set_err(err, "%s (fix it, or remove it to end each completion with the document separator)", terr);
        json_free(root);
        return NULL;
    }
    const JsonValue *eos = root ? json_get(root, "eos_token") : NULL;
    if (eos && eos->type == JSON_OBJECT) eos = json_get(eos, "content");
    char *text = NULL;
    if (eos && eos->type != JSON_NULL) {
        if (!json_string(eos) || !eos->len)
            fgpt_set_err(err, "the eos_token of the tokenizer_config.json beside the tokenizer is %s, not a token's "
                         "text (name one of its special tokens there)", json_string(eos) ? "empty" : json_type_name(eos->type));
        else if (!tokenizer_is_special_text(tok, json_string(eos)))
            fgpt_set_err(err, "the eos_token \"%.200s\" of the tokenizer_config.json beside the tokenizer is not one of "
                         "the tokenizer's special tokens, so completions would end in ordinary text (name one of its "
                         "special tokens there, as the model's own tokenizer_config.json does)", json_string(eos));
        else if (!(text = strdup(json_string(eos))))
            fgpt_set_err(err, "out of memory");
        json_free(root);
        if (text) *named = 1;
        return text;
    }
    json_free(root);
    /* no config names one: the separator the tokenizer ends documents with */
    size_t len;
    const char *sep = tokenizer_eot_text(tok, &len);
    if (!(text = strndup(sep, len))) fgpt_set_err(err, "out of memory");
    return text;
}

static int stop_token_trained(const Chat *c, char *why);

/* The chat template (--chat-template's file, else the tokenizer's), read once. 0, or -1 + message
 * naming what is missing and the fix. */
static int load_chat(Chat *c, const char *where, char *err) {
    if (c->loaded) return c->ok ? 0 : -1;
    c->loaded = 1;
    char terr[ERR_LEN];
    const int rc = model_chat_load(&c->m, c->tok, c->opt->chat_template, terr);
    if (rc == MODEL_CHAT_NONE) {
        fgpt_set_err(err, "%s holds a conversation, which the model's chat template renders, but the tokenizer has "
                     "none: put the model's tokenizer_config.json (with its chat_template) or chat_template.jinja "
                     "beside the tokenizer.json, or pass --chat-template FILE", where);
        return -1;
    }
    if (rc != 0) {
        fgpt_set_err(err, "%s%s", c->opt->chat_template ? "--chat-template: " : "", terr);
        return -1;
    }
    if (c->opt->assistant_only_loss && !c->m.marked) {
        fgpt_set_err(err, "--assistant-only-loss: the chat template (%s) marks no assistant text with {%% generation "
                     "%%}: pass a template with those marks by --chat-template FILE (TRL's trl/chat_templates/ "
                     "holds such training templates, e.g. qwen3_training.jinja)", c->m.source);
        return -1;
    }
    char why[ERR_LEN] = "";
    if (c->opt->assistant_only_loss && !stop_token_trained(c, why)) {
        if (why[0])
            fprintf(stderr, "prepare: note: cannot check that the chat template's {%% generation %%} text of an "
                    "assistant turn ends with its end-of-turn token (a user, assistant, user conversation: %s); TRL "
                    "warns then that the model may not learn to end its turns\n", why);
        else
            fprintf(stderr, "prepare: note: the chat template's {%% generation %%} text of an assistant turn does not "
                    "end with its end-of-turn token, so the model is not trained to end its turns (TRL warns of the "
                    "same)\n");
    }
    c->ok = 1;
    return 0;
}

static void free_chat(Chat *c) { model_chat_free(&c->m); }

/* Appends ids[0..n) as one example whose first `masked` ids are no target, nor those whose
 * targets[i] is 0 (targets NULL: all after the first `masked` are). */
static int append_example(PairIds *p, const uint32_t *ids, size_t n, size_t masked, const unsigned char *targets,
                          char *err) {
    if (grow_array((void **)&p->ids, &p->cap, p->n + n, sizeof *p->ids) != 0 ||
        grow_array((void **)&p->starts, &p->starts_cap, p->examples + 2, sizeof *p->starts) != 0) {
        fgpt_set_err(err, "out of memory for the ids of %zu examples; prepare fewer at a time", p->examples + 1);
        return -1;
    }
    size_t no_target = 0;
    for (size_t i = 0; i < n; i++) {
        const int none = i < masked || (targets && !targets[i]);
        p->ids[p->n + i] = ids[i] | (none ? SHARD_NO_LOSS : 0) | (i == 0 ? SHARD_DOC_START : 0);
        no_target += none;
    }
    p->starts[p->examples++] = p->n;
    p->n += n;
    p->starts[p->examples] = p->n;
    p->prompt_ids += no_target, p->completion_ids += n - no_target;
    return 0;
}

/* Which of ids (encoding text) are targets under --assistant-only-loss: those that overlap a span of
 * {% generation %} text, as transformers' return_assistant_tokens_mask finds them (*targets
 * malloc'ed). 0, or -1 + message. */
static int assistant_targets(const Tokenizer *tok, const char *text, size_t len, const uint32_t *ids, size_t n,
                             const ChatTemplateSpan *spans, size_t n_spans, const char *where,
                             unsigned char **targets, char *err) {
    size_t *at = malloc((n + 1) * sizeof *at);
    *targets = calloc(n + 1, 1);
    char terr[ERR_LEN];
    if (!at || !*targets) {
        free(at);
        fgpt_set_err(err, "out of memory for %s's assistant mask", where);
        return -1;
    }
    if (tokenizer_token_offsets(tok, ids, n, text, len, at, terr) != 0) {
        free(at);
        fgpt_set_err(err, "%s: --assistant-only-loss cannot place the marked text on this tokenizer's tokens: %s",
                     where, terr);
        return -1;
    }
    size_t span = 0, marked = 0;
    for (size_t i = 0; i < n; i++) { /* transformers' walk: spans and tokens both in order */
        while (span < n_spans && at[i] >= spans[span].end) span++;
        if (span == n_spans) break;
        if (at[i + 1] > spans[span].start) (*targets)[i] = 1, marked++;
    }
    free(at);
    if (!marked) {
        fgpt_set_err(err, "%s: the chat template marks no assistant text in it ({%% generation %%}), so it would hold "
                     "no target (TRL refuses such an example too)", where);
        return -1;
    }
    return 0;
}

/* Whether the template's {% generation %} text of an assistant turn ends on an added token (its
 * end of turn), as TRL's is_chat_template_stop_token_trained asks of a user, assistant, user
 * conversation: trailing white space passed over, the last target must be one. 0 also when the
 * probe cannot be rendered or placed on the tokens, with why set. */
static int stop_token_trained(const Chat *c, char *why) {
    static const char PROBE[] = "[{\"role\": \"user\", \"content\": \"dummy\"}, {\"role\": \"assistant\", "
                                "\"content\": \"dummy\"}, {\"role\": \"user\", \"content\": \"dummy\"}]";
    char terr[ERR_LEN];
    JsonValue *probe = json_parse(PROBE, strlen(PROBE), "probe", terr);
    size_t len = 0, n_spans = 0, n = 0;
    ChatTemplateSpan *spans = NULL;
    char *text = probe ? chat_template_render_marked(c->m.template, probe, 0, c->m.vars, c->m.num_vars, &len, &spans,
                                                     &n_spans, terr)
                       : NULL;
    uint32_t *ids = text ? tokenizer_encode_alloc(c->tok, text, len, TOKENIZER_SPECIALS | TOKENIZER_NO_POST, &n) : NULL;
    unsigned char *targets = NULL;
    int trained = 0;
    if (!text) snprintf(why, ERR_LEN, "%s", probe ? terr : "out of memory");
    else if (!ids) snprintf(why, ERR_LEN, "out of memory");
    if (ids && assistant_targets(c->tok, text, len, ids, n, spans, n_spans, "the probe", &targets, terr) != 0)
        snprintf(why, ERR_LEN, "%s", terr);
    else if (ids) {
        for (size_t i = n; i-- > 0;) {
            if (!targets[i]) continue;
            char piece[256];
            const size_t got = tokenizer_decode(c->tok, &ids[i], 1, piece, sizeof piece);
            size_t blank = 0;
            while (got <= sizeof piece && blank < got && strchr(" \t\n\r\v\f", piece[blank])) blank++;
            if (got <= sizeof piece && blank == got) continue; /* white space */
            trained = tokenizer_is_added(c->tok, ids[i]); /* TRL: in get_added_vocab() */
            break;
        }
    }
    free(targets);
    free(ids);
    free(text);
    free(spans);
    json_free(probe);
    return trained;
}

/* The text of messages rendered by the chat template with the line's tools and
 * chat_template_kwargs, its ids into *ids (malloc'ed, *n); with targets, which of them
 * --assistant-only-loss keeps as targets (malloc'ed). 0, or -1 + message. */
static int render_ids(Chat *c, const JsonValue *line, const JsonValue *messages, int generation_prompt,
                      const char *where, PairIds *p, size_t line_no, uint32_t **ids, size_t *n,
                      unsigned char **targets, char *err) {
    ChatTemplateVar vars[8 + 32];
    size_t nv = c->m.num_vars;
    memcpy(vars, c->m.vars, nv * sizeof *vars);
    const JsonValue *tools = json_get(line, "tools"), *kwargs = json_get(line, "chat_template_kwargs");
    JsonValue *parsed_tools = NULL;
    char terr[ERR_LEN];
    if (tools && tools->type == JSON_STRING) /* TRL takes a JSON text too */
        tools = parsed_tools = json_parse(tools->string, tools->len, "its \"tools\"", terr);
    if (tools && tools->type != JSON_NULL) vars[nv++] = (ChatTemplateVar){"tools", tools};
    if (kwargs && kwargs->type == JSON_OBJECT)
        for (size_t k = 0; k < kwargs->len && nv < sizeof vars / sizeof vars[0]; k++)
            vars[nv++] = (ChatTemplateVar){kwargs->members[k].key, &kwargs->members[k].value};
    size_t len = 0, n_spans = 0;
    ChatTemplateSpan *spans = NULL;
    JsonValue copy;
    const JsonValue *given = chat_messages_without_nulls(messages, &copy);
    char *text = given ? chat_template_render_marked(c->m.template, given, generation_prompt, vars, nv, &len,
                                                     targets ? &spans : NULL, &n_spans, terr)
                       : (snprintf(terr, sizeof terr, "out of memory"), NULL);
    chat_messages_copy_free(&copy);
    json_free(parsed_tools);
    if (!text) {
        fgpt_set_err(err, "%s: the chat template does not render it: %s", where, terr);
        return -1;
    }
    uint64_t stray = 0, first = 0;
    if (prepare_check_file_text(c->tok, where, text, len, 0, &stray, &first, err) != 0) {
        free(spans);
        free(text);
        return -1;
    }
    if (stray && !p->stray) p->first_stray_line = line_no;
    p->stray += stray;
    *ids = tokenizer_encode_alloc(c->tok, text, len, TOKENIZER_SPECIALS | TOKENIZER_NO_POST, n);
    int rc = *ids ? 0 : -1;
    if (!*ids) fgpt_set_err(err, "out of memory encoding %s", where);
    if (rc == 0 && targets) rc = assistant_targets(c->tok, text, len, *ids, *n, spans, n_spans, where, targets, err);
    free(spans);
    free(text);
    return rc;
}

/* One line of a conversational format: prompt and completion messages, or messages alone. */
static int add_conversation(PairIds *p, Chat *c, const JsonValue *line, const char *where, size_t line_no,
                            char *err) {
    const JsonValue *prompt = json_get(line, "prompt"), *completion = json_get(line, "completion");
    const JsonValue *messages = json_get(line, "messages");
    if (load_chat(c, where, err) != 0) return -1;
    uint32_t *whole = NULL, *head = NULL;
    unsigned char *targets = NULL;
    unsigned char **want_targets = c->opt->assistant_only_loss ? &targets : NULL;
    size_t n_whole = 0, n_head = 0;
    int rc;
    if (messages) {
        rc = render_ids(c, line, messages, 0, where, p, line_no, &whole, &n_whole, want_targets, err);
    } else {
        JsonValue both = {.type = JSON_ARRAY, .len = prompt->len + completion->len};
        both.items = malloc((both.len + 1) * sizeof *both.items);
        if (!both.items) {
            fgpt_set_err(err, "out of memory");
            return -1;
        }
        memcpy(both.items, prompt->items, prompt->len * sizeof *both.items);
        memcpy(both.items + prompt->len, completion->items, completion->len * sizeof *both.items);
        rc = render_ids(c, line, prompt, 1, where, p, line_no, &head, &n_head, NULL, err);
        if (rc == 0) rc = render_ids(c, line, &both, 0, where, p, line_no, &whole, &n_whole, want_targets, err);
        free(both.items);
    }
    if (rc == 0) {
        const size_t masked = n_head < n_whole ? n_head : n_whole;
        if (head) p->mismatched += masked != n_head || memcmp(head, whole, masked * sizeof *whole) != 0;
        rc = append_example(p, whole, n_whole, masked, targets, err);
        p->conversations++;
    }
    free(targets);
    free(head);
    free(whole);
    return rc;
}

static int ends_with(const char *s, size_t n, const char *tail) {
    const size_t k = strlen(tail);
    return n >= k && memcmp(s + n - k, tail, k) == 0;
}

/* Appends one example: the ids of prompt + completion (+ eos), the prompt's marked. */
static int add_example(PairIds *p, const Tokenizer *tok, const JsonValue *prompt, const JsonValue *completion,
                       const char *eos, const char *where, size_t line, char *err) {
    const size_t eos_len = ends_with(completion->string, completion->len, eos) ? 0 : strlen(eos);
    const size_t len = prompt->len + completion->len + eos_len;
    char *text = malloc(len + 1);
    size_t n_prompt = 0, n_whole = 0;
    uint32_t *ids_prompt = NULL, *ids_whole = NULL;
    if (text) {
        memcpy(text, prompt->string, prompt->len);
        memcpy(text + prompt->len, completion->string, completion->len);
        memcpy(text + prompt->len + completion->len, eos, eos_len);
        text[len] = 0;
        /* the normalizer's refusals (text NFC would change) name the line; stray bytes are counted */
        uint64_t stray = 0, first = 0;
        if (prepare_check_file_text(tok, where, text, len, 0, &stray, &first, err) != 0) {
            free(text);
            return -1;
        }
        if (stray && !p->stray) p->first_stray_line = line;
        p->stray += stray;
        ids_prompt = tokenizer_encode_alloc(tok, prompt->string, prompt->len, TOKENIZER_SPECIALS, &n_prompt);
        ids_whole = tokenizer_encode_alloc(tok, text, len, TOKENIZER_SPECIALS, &n_whole);
    }
    int rc = -1;
    if (!text || !ids_prompt || !ids_whole) {
        fgpt_set_err(err, "out of memory for the ids of %zu examples; prepare fewer at a time", p->examples + 1);
    } else {
        const size_t masked = n_prompt < n_whole ? n_prompt : n_whole;
        p->mismatched += masked != n_prompt || memcmp(ids_prompt, ids_whole, masked * sizeof *ids_whole) != 0;
        rc = append_example(p, ids_whole, n_whole, masked, NULL, err);
    }
    free(ids_whole);
    free(ids_prompt);
    free(text);
    return rc;
}

/* TRL's maybe_convert_to_chatml, in place: messages of ShareGPT's {"from", "value"} form in
 * "prompt", "completion", "messages" or "conversations" take the names "role" and "content" (moved
 * to the end, as Python's pop and set move them), and "conversations" becomes "messages". 0, or -1
 * + message when memory runs out. */
static int convert_to_chatml(JsonValue *line, char *err) {
    static const char *const LISTS[] = {"prompt", "completion", "messages", "conversations"};
    int rc = 0;
    for (size_t k = 0; k < sizeof LISTS / sizeof LISTS[0]; k++) {
        JsonValue *list = (JsonValue *)json_get(line, LISTS[k]);
        for (size_t m = 0; list && list->type == JSON_ARRAY && m < list->len; m++)
            if (json_rename_member(&list->items[m], "from", "role") != 0 ||
                json_rename_member(&list->items[m], "value", "content") != 0)
                rc = -1;
    }
    if (json_rename_member(line, "conversations", "messages") != 0) rc = -1;
    if (rc != 0) fgpt_set_err(err, "out of memory reading the examples");
    return rc;
}

/* Appends a line of TRL's language-modeling form, {"text": "..."}: tokenizer(text + eos) (eos unless
 * it ends so), every token a target. */
static int add_text(PairIds *p, const Tokenizer *tok, const JsonValue *text, const char *eos, const char *where,
                    size_t line, char *err) {
    const size_t eos_len = ends_with(text->string, text->len, eos) ? 0 : strlen(eos), len = text->len + eos_len;
    char *whole = malloc(len + 1);
    if (!whole) {
        fgpt_set_err(err, "out of memory for the ids of %zu examples; prepare fewer at a time", p->examples + 1);
        return -1;
    }
    memcpy(whole, text->string, text->len);
    memcpy(whole + text->len, eos, eos_len);
    whole[len] = 0;
    uint64_t stray = 0, first = 0;
    if (prepare_check_file_text(tok, where, whole, len, 0, &stray, &first, err) != 0) {
        free(whole);
        return -1;
    }
    if (stray && !p->stray) p->first_stray_line = line;
    p->stray += stray;
    size_t n = 0;
    uint32_t *ids = tokenizer_encode_alloc(tok, whole, len, TOKENIZER_SPECIALS, &n);
    free(whole);
    int rc = -1;
    if (!ids) fgpt_set_err(err, "out of memory for the ids of %zu examples; prepare fewer at a time", p->examples + 1);
    else rc = append_example(p, ids, n, 0, NULL, err);
    free(ids);
    return rc;
}

/* The string member `key` of line `line` of path, or NULL + message. */
static const JsonValue *pair_string(const JsonValue *v, const char *key, const char *path, size_t line, char *err) {
    const JsonValue *s = json_get(v, key);
    if (s && s->type == JSON_STRING) return s;
    char what[64];
    if (s) snprintf(what, sizeof what, "\"%s\" is %s, not a string", key, json_type_name(s->type));
    else snprintf(what, sizeof what, "no \"%s\"", key);
    fgpt_set_err(err, "%s line %zu: %s (each line of --prompt-completion is an object {\"prompt\": \"...\", "
                 "\"completion\": \"...\"}, the two as lists of {\"role\", \"content\"} messages, "
                 "{\"messages\": [...]} or {\"text\": \"...\"})", path, line, what);
    return NULL;
}

/* Whether line v is of a conversational format: 1 with *rc 0 when it is one whole, 1 with *rc -1
 * and a message when it is one in part (a list of messages beside a string), 0 when it is not. */
static int conversational(const JsonValue *v, const char *path, size_t line, int *rc, char *err) {
    const JsonValue *prompt = json_get(v, "prompt"), *completion = json_get(v, "completion");
    const JsonValue *messages = json_get(v, "messages");
    *rc = 0;
    if (messages && !prompt) {
        if (chat_is_messages(messages)) return 1;
        fgpt_set_err(err, "%s line %zu: \"messages\" is not a list of {\"role\", \"content\"} messages", path, line);
        *rc = -1;
        return 1;
    }
    const int listed = (prompt && prompt->type == JSON_ARRAY) + (completion && completion->type == JSON_ARRAY);
    if (!listed) return 0;
    if (listed == 2 && chat_is_messages(prompt) && chat_is_messages(completion)) return 1;
    fgpt_set_err(err, "%s line %zu: give \"prompt\" and \"completion\" both as strings, or both as lists of "
                 "{\"role\", \"content\"} messages", path, line);
    *rc = -1;
    return 1;
}

/* Every example of one file, line by line (blank lines passed over). */
/* (*eos: the text completions end with, found at the first pair of strings.) */
static int read_pairs(const char *path, const Tokenizer *tok, char **eos, int *eos_named, Chat *chat, PairIds *p,
                      char *err) {
    FILE *f = prepare_open_text(path, err);
    if (!f) return -1;
    size_t len;
    char *text = read_stream_whole(f, &len);
    const int e = errno;
    fclose(f);
    if (!text) {
        fgpt_set_err(err, "cannot read %s: %s", path, strerror(e));
        return -1;
    }
    int rc = 0;
    size_t line = 0;
    p->stray = 0;
    for (char *at = text, *end = text + len; rc == 0 && at < end;) {
        char *nl = memchr(at, '\n', (size_t)(end - at));
        const size_t n = nl ? (size_t)(nl - at) : (size_t)(end - at);
        line++;
        size_t blank = 0;
        while (blank < n && (at[blank] == ' ' || at[blank] == '\t' || at[blank] == '\r')) blank++;
        if (blank < n) {
            char what[ERR_LEN], jerr[ERR_LEN];
            snprintf(what, sizeof what, "%s line %zu", path, line);
            JsonValue *v = json_parse(at, n, what, jerr);
            const JsonValue *prompt = NULL, *completion = NULL;
            if (!v) fgpt_set_err(err, "%s (--prompt-completion reads JSON Lines: one object a line)", jerr);
            else if (v->type != JSON_OBJECT)
                fgpt_set_err(err, "%s line %zu is %s, not an object {\"prompt\": \"...\", \"completion\": \"...\"}", path,
                             line, json_type_name(v->type));
            else if (convert_to_chatml(v, err) != 0)
                rc = -1;
            else if (chat->opt->assistant_only_loss && !chat_is_messages(json_get(v, "messages")) &&
                     !chat_is_messages(json_get(v, "prompt"))) { /* as TRL refuses such a dataset */
                fgpt_set_err(err, "%s line %zu is no conversation, and --assistant-only-loss takes conversations only "
                             "(give its lines as messages, or drop the flag)", path, line);
                prompt = completion = v;
                rc = -1;
            }
            else if (!json_get(v, "prompt") && !json_get(v, "messages") && json_string(json_get(v, "text"))) {
                if (!*eos && !(*eos = eos_text(tok, eos_named, err))) rc = -1;
                else rc = add_text(p, tok, json_get(v, "text"), *eos, what, line, err);
                prompt = completion = v; /* read */
            } else if (conversational(v, path, line, &rc, err)) {
                if (rc == 0) rc = add_conversation(p, chat, v, what, line, err);
                prompt = completion = v; /* read */
            } else if ((prompt = pair_string(v, "prompt", path, line, err)) &&
                       (completion = pair_string(v, "completion", path, line, err))) {
                if (!*eos && !(*eos = eos_text(tok, eos_named, err))) rc = -1;
                else rc = add_example(p, tok, prompt, completion, *eos, what, line, err);
            }
            if (!prompt || !completion) rc = -1;
            json_free(v);
        }
        at += n + 1;
    }
    free(text);
    if (rc == 0 && p->stray) /* they are tokenized as bytes, as in a text file */
        fprintf(stderr, "note: %s holds %llu byte(s) outside UTF-8 in its strings (the first on line %zu): they are "
                "tokenized as bytes (convert the file to UTF-8 to avoid it)\n", path, (unsigned long long)p->stray,
                p->first_stray_line);
    return rc;
}

int prepare_pairs(const char *const *files, int n_files, const PrepareOptions *opt, Tokenizer *tok,
                  const char *out_dir, PreparedData *out, char *err) {
    memset(out, 0, sizeof *out);
    PairIds p = {0};
    Chat chat = {.tok = tok, .opt = opt};
    int eos_named = 0, rc = 0;
    char *eos = NULL;
    const double t0 = prepare_seconds();
    for (int f = 0; rc == 0 && f < n_files; f++) rc = read_pairs(files[f], tok, &eos, &eos_named, &chat, &p, err);
    if (rc == 0 && p.examples < 2)
        fgpt_set_err(err, "%zu prompt-completion example(s) in all: training and validation need one each at least "
                     "(give more examples)", p.examples), rc = -1;
    SetInProgress set;
    /* a failed begin leaves the folder to whoever holds its lock */
    if (rc != 0 || prepare_begin_set(out_dir, tokenizer_is_imported(tok), 0, out, &set, err) != 0) {
        rc = -1;
        goto done;
    }
    out->vocab_requested = out->vocab_reached = tokenizer_vocab_size(tok);
    size_t val = (size_t)((double)p.examples * opt->val_fraction + 0.5);
    if (val < 1) val = 1;
    if (val > p.examples - 1) val = p.examples - 1;
    const size_t cut = p.starts[p.examples - val];
    /* a shard of one token holds no target, and the trainer and eval refuse it */
    if (cut < 2 || p.n - cut < 2) {
        fgpt_set_err(err, "the %s examples hold %zu token(s), and a target needs 2 (give more examples%s)",
                     cut < 2 ? "training" : "validation", cut < 2 ? cut : p.n - cut,
                     cut < 2 ? "" : ", or raise --val-fraction");
        prepare_end_set(&set, -1, tok, err);
        rc = -1;
        goto done;
    }
    const uint32_t V = tokenizer_vocab_size(tok);
    const uint64_t fp = tokenizer_fingerprint(tok);
    const uint32_t flags = SHARD_LOSS_MASK | SHARD_DOCUMENTS;
    rc = shard_write_flagged(set.train_new, p.ids, cut, V, fp, flags, err);
    if (rc == 0) rc = shard_write_flagged(set.val_new, p.ids + cut, p.n - cut, V, fp, flags, err);
    rc = prepare_end_set(&set, rc, tok, err);
    if (rc == 0) {
        char ends[160];
        if (p.conversations == p.examples)
            snprintf(ends, sizeof ends, "rendered by the chat template of %s", chat.m.source);
        else if (p.conversations)
            snprintf(ends, sizeof ends, "%llu rendered by the chat template of %s, the others' completions and texts "
                     "ending with %s", (unsigned long long)p.conversations, chat.m.source, eos);
        else
            snprintf(ends, sizeof ends, "each completion or text ends with %s", eos);
        fprintf(stderr, "prepare: %zu train + %zu validation examples, %llu %s + %llu %s tokens (%s) in %.1f s -> %s\n",
                p.examples - val, val, (unsigned long long)p.prompt_ids,
                opt->assistant_only_loss ? "no-target" : "prompt", (unsigned long long)p.completion_ids,
                opt->assistant_only_loss ? "target (assistant text)" : "completion", ends, prepare_seconds() - t0,
                out_dir);
        if (!eos_named && tokenizer_is_imported(tok) && p.conversations < p.examples)
            fprintf(stderr, "prepare: note: %s, so each completion ends with the document separator %s (put the "
                    "model's tokenizer_config.json beside the tokenizer.json to end them with its eos_token)\n",
                    tokenizer_has_hf_config(tok) ? "the tokenizer_config.json beside the tokenizer names no eos_token"
                                                 : "no tokenizer_config.json beside the tokenizer names its eos_token",
                    eos);
        if (p.mismatched)
            fprintf(stderr, "prepare: note: in %llu example(s) the prompt's ids are not the start of the whole's (the "
                    "tokenizer merged across the join%s): as TRL does, the first as many ids as the prompt has are "
                    "its, no target\n", (unsigned long long)p.mismatched,
                    p.conversations ? ", or the chat template renders a prompt alone otherwise than in the whole" : "");
    }
done:
    free_chat(&chat);
    free(p.starts);
    free(p.ids);
    free(eos);
    return rc;
}
