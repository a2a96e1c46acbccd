/* tokenizer/chat_template.h - a model's chat template (the Jinja text of its tokenizer_config.json
 * or chat_template.jinja) rendered as transformers' apply_chat_template renders it.
 *
 * The template language is the part of Jinja that chat templates use, with the settings
 * transformers gives Jinja: blocks trim the newline after them and the blanks before them on their
 * line (trim_blocks, lstrip_blocks), `-` trims white space by hand, {% break %} and {% continue %}
 * exist, {% generation %} renders its body, and tojson is json.dumps (non-ASCII kept, ", " and ": "
 * between items). Statements: if / elif / else, for (a filter, else, loop.index ...), set (of a
 * name, a namespace's attribute, or a block), macro. Expressions: Python's literals and operators,
 * `~`, `in`, chained comparisons, tuples, conditional expressions, subscripts and slices (strings
 * by character), Python's string methods (by its Unicode tables: tokenizer/py_str.h), dict get /
 * items / keys / values, the filters and tests of Jinja chat templates use (sort, dictsort, map,
 * indent, round ... but not format or wordwrap), and namespace(), range(), dict(),
 * raise_exception() and strftime_now(). Anything else is refused when the template is read or run,
 * naming the line. Undefined values behave as Jinja's default Undefined: empty when printed, false,
 * an error when an attribute of one is asked for.
 *
 * This module knows nothing else of the project. */
#ifndef FUSEDGPT_CHAT_TEMPLATE_H
#define FUSEDGPT_CHAT_TEMPLATE_H

#include <stddef.h>

#include "common/err.h"
#include "common/json.h"

typedef struct ChatTemplate ChatTemplate;

/* The template src[0..len), parsed. NULL with a one-line message in err naming the line and what
 * is not understood there. */
ChatTemplate *chat_template_parse(const char *src, size_t len, char *err);
void chat_template_free(ChatTemplate *t);

/* A variable the template sees besides the conversation: bos_token, eos_token, tools, a template
 * argument (enable_thinking: false). A later one of a name replaces an earlier one. */
typedef struct {
    const char *name;
    const JsonValue *value;
} ChatTemplateVar;

/* The text of the conversation `messages` (a JSON array of {"role", "content", ...} objects) as the
 * template renders it, with add_generation_prompt, tools and documents none, and vars: malloc'ed,
 * *len bytes, NUL after. NULL with a one-line message in err (a raise_exception's message, an
 * undefined value's attribute asked for, a type an operation cannot take). */
char *chat_template_render(const ChatTemplate *t, const JsonValue *messages, int add_generation_prompt,
                           const ChatTemplateVar *vars, size_t num_vars, size_t *len, char *err);

/* A stretch of rendered text, bytes [start, end). */
typedef struct {
    size_t start, end;
} ChatTemplateSpan;

/* chat_template_render, and where the template's {% generation %} blocks put their text, as
 * transformers' return_assistant_tokens_mask finds it: each block's span starts after the text the
 * template had written at its top level when the block ended (a block inside a macro or a set
 * block is placed where that macro's text begins, as transformers' tracker places it). *spans
 * (malloc'ed, NULL when none) in the order the blocks ran. */
char *chat_template_render_marked(const ChatTemplate *t, const JsonValue *messages, int add_generation_prompt,
                                  const ChatTemplateVar *vars, size_t num_vars, size_t *len, ChatTemplateSpan **spans,
                                  size_t *n_spans, char *err);

#endif
