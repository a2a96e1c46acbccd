/* tokenizer/model_chat.c - a model's chat template beside its tokenizer (see model_chat.h). */
#include "tokenizer/model_chat.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "common/paths.h"

/* Whether a template's text holds a {% generation %} tag (white space and '-' allowed inside), as
 * transformers looks for one. */
static int has_generation_marks(const char *s, size_t n) {
    for (size_t k = 0; k + 2 <= n; k++) {
        if (s[k] != '{' || s[k + 1] != '%') continue;
        size_t j = k + 2;
        if (j < n && s[j] == '-') j++;
        while (j < n && (s[j] == ' ' || (s[j] >= '\t' && s[j] <= '\r'))) j++;
        if (n - j < 10 || memcmp(s + j, "generation", 10)) continue;
        j += 10;
        while (j < n && (s[j] == ' ' || (s[j] >= '\t' && s[j] <= '\r'))) j++;
        if (j < n && s[j] == '-') j++;
        if (j + 2 <= n && s[j] == '%' && s[j + 1] == '}') return 1;
    }
    return 0;
}

/* The text of template_file (malloc'ed), or NULL + message. */
static char *read_template_file(const char *path, size_t *len, char *err) {
    char why[ERR_LEN];
    FILE *f = open_regular(path, why);
    if (!f) {
        if (why[0]) snprintf(err, ERR_LEN, "%s", why);
        else snprintf(err, ERR_LEN, "cannot read the chat template %s: %s", path, strerror(errno));
        return NULL;
    }
    char *text = read_stream_whole(f, len);
    const int e = errno;
    fclose(f);
    if (!text) snprintf(err, ERR_LEN, "cannot read the chat template %s: %s", path, strerror(e));
    return text;
}

int model_chat_load(ModelChat *c, const Tokenizer *tok, const char *template_file, char *err) {
    memset(c, 0, sizeof *c);
    char terr[ERR_LEN];
    char *config = tokenizer_has_hf_config(tok) ? tokenizer_hf_config_json(tok, 0, terr) : NULL;
    if (config) c->config = json_parse(config, strlen(config), "the tokenizer_config.json beside the tokenizer", terr);
    free(config);
    const JsonValue *tpl = c->config && !template_file ? json_get(c->config, "chat_template") : NULL;
    if (tpl && tpl->type == JSON_ARRAY) { /* [{"name": "default", "template": "..."}, ...] */
        const JsonValue *found = NULL;
        for (size_t k = 0; k < tpl->len && !found; k++) {
            const char *name = json_string(json_get(&tpl->items[k], "name"));
            if (name && !strcmp(name, "default")) found = json_get(&tpl->items[k], "template");
        }
        tpl = found;
    }
    const char *src = NULL;
    size_t src_len = 0;
    char *from_file = NULL;
    if (template_file) {
        if (!(from_file = read_template_file(template_file, &src_len, err))) return -1;
        src = from_file;
        snprintf(c->source, sizeof c->source, "%.150s", template_file);
    } else if (tpl && json_string(tpl)) {
        src = tpl->string, src_len = tpl->len;
        snprintf(c->source, sizeof c->source, "tokenizer_config.json");
    } else if ((src = tokenizer_hf_chat_template(tok, &src_len))) {
        snprintf(c->source, sizeof c->source, "chat_template.jinja");
    } else {
        return MODEL_CHAT_NONE;
    }
    c->template = chat_template_parse(src, src_len, terr);
    c->marked = has_generation_marks(src, src_len);
    free(from_file);
    if (!c->template) {
        if (template_file) snprintf(err, ERR_LEN, "the chat template %s cannot be rendered here: %s", c->source, terr);
        else
            snprintf(err, ERR_LEN, "the model's chat template (%s beside the tokenizer) cannot be rendered here: %s",
                     c->source, terr);
        return -1;
    }
    static const char *const SPECIAL[] = {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token",
                                          "mask_token"};
    for (size_t k = 0; c->config && k < sizeof SPECIAL / sizeof SPECIAL[0]; k++) {
        const JsonValue *v = json_get(c->config, SPECIAL[k]);
        if (v && v->type == JSON_OBJECT) v = json_get(v, "content");
        if (!v || v->type != JSON_STRING) continue;
        /* transformers adds a special token its tokenizer lacks as a new id: ours would spell it as text */
        if (v->len && !tokenizer_is_special_text(tok, v->string)) {
            snprintf(err, ERR_LEN, "the %s \"%.100s\" of the tokenizer_config.json beside the tokenizer is none of the "
                     "tokenizer's special tokens, so transformers would add it as a new token, which the model has no "
                     "row for (give the model's own tokenizer.json and tokenizer_config.json)", SPECIAL[k], v->string);
            return -1;
        }
        c->vars[c->num_vars++] = (ChatTemplateVar){SPECIAL[k], v};
    }
    return 0;
}

void model_chat_free(ModelChat *c) {
    chat_template_free(c->template);
    json_free(c->config);
    memset(c, 0, sizeof *c);
}

int chat_is_messages(const JsonValue *v) {
    if (!v || v->type != JSON_ARRAY) return 0;
    for (size_t k = 0; k < v->len; k++)
        if (v->items[k].type != JSON_OBJECT || !json_string(json_get(&v->items[k], "role"))) return 0;
    return 1;
}

const JsonValue *chat_messages_without_nulls(const JsonValue *messages, JsonValue *copy) {
    int any = 0;
    for (size_t k = 0; k < messages->len; k++)
        for (size_t j = 0; messages->items[k].type == JSON_OBJECT && j < messages->items[k].len; j++)
            any |= messages->items[k].members[j].value.type == JSON_NULL;
    *copy = (JsonValue){.type = JSON_ARRAY};
    if (!any) return messages;
    copy->items = calloc(messages->len + 1, sizeof *copy->items);
    if (!copy->items) return NULL;
    copy->len = messages->len;
    for (size_t k = 0; k < messages->len; k++) {
        const JsonValue *m = &messages->items[k];
        copy->items[k] = *m;
        if (m->type != JSON_OBJECT) continue;
        JsonMember *kept = calloc(m->len + 1, sizeof *kept);
        copy->items[k].members = kept, copy->items[k].len = 0;
        if (!kept) return NULL;
        for (size_t j = 0; j < m->len; j++)
            if (m->members[j].value.type != JSON_NULL) kept[copy->items[k].len++] = m->members[j];
    }
    return copy;
}

void chat_messages_copy_free(JsonValue *copy) {
    for (size_t k = 0; copy->items && k < copy->len; k++)
        if (copy->items[k].type == JSON_OBJECT) free(copy->items[k].members);
    free(copy->items);
}
