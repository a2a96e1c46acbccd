/* tokenizer/model_chat.h - the chat template a model's tokenizer comes with, found as transformers
 * finds it: tokenizer_config.json's chat_template (a string, or the one named "default" of a list),
 * else the chat_template.jinja beside the tokenizer.json; or a template file given instead. With it,
 * the special tokens the template sees (bos_token, eos_token, ... as transformers' special_tokens_map
 * passes them). */
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

#endif
