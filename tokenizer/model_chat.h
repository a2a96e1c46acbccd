/* tokenizer/model_chat.h - the chat template a model's tokenizer comes with, found as transformers
 * finds it: tokenizer_config.json's chat_template (a string, or the one named "default" of a list),
 * else the chat_template.jinja beside the tokenizer.json; or a template file given instead. With it,
 * the special tokens the template sees (bos_token, eos_token, ... as transformers' special_tokens_map
 * passes them). And the messages a template is given, as apply_chat_template hands them over. */
#ifndef FUSEDGPT_MODEL_CHAT_H
#define FUSEDGPT_MODEL_CHAT_H

#include <stddef.h>

#include "common/json.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

typedef struct {
    ChatTemplate *template;
    JsonValue *config;         /* the tokenizer_config.json, whose special tokens vars point into */
    ChatTemplateVar vars[8];
    size_t num_vars;
    char source[160];          /* where the template came from: tokenizer_config.json, chat_template.jinja, the file */
    int marked;                /* its text holds {% generation %} marks */
} ModelChat;

/* Returned by model_chat_load when the tokenizer has no chat template (and none was given). */
#define MODEL_CHAT_NONE (-2)

/* Reads tok's chat template, or the file template_file (NULL: tok's). 0; MODEL_CHAT_NONE; or -1 +
 * message (a template that cannot be read or parsed, a special token of the config that the
 * tokenizer lacks, which transformers would add as a new id). model_chat_free releases it either
 * way. */
int model_chat_load(ModelChat *c, const Tokenizer *tok, const char *template_file, char *err);
void model_chat_free(ModelChat *c);

/* Whether v is a list of message objects, each with a "role" string. */
int chat_is_messages(const JsonValue *v);

/* messages as apply_chat_template hands them to the template: each message's keys whose value is
 * null left out (as datasets fill keys a line lacks). The original when none is; else a copy into
 * *copy (NULL when out of memory), whose arrays chat_messages_copy_free frees (either way). */
const JsonValue *chat_messages_without_nulls(const JsonValue *messages, JsonValue *copy);
void chat_messages_copy_free(JsonValue *copy);

#endif
