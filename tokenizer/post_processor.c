/* tokenizer/post_processor.c - a tokenizer.json's post_processor: the tokens Hugging Face's
 * encode(text) puts around the text (add_special_tokens=True), for byte-level and
 * SentencePiece-style imports alike.
 *
 * TemplateProcessing's single template gives them (Llama 3's "<|begin_of_text|> $A", Gemma's
 * "<bos> $A"): each item is $A or a special token of one id. ByteLevel only trims offsets, so it
 * adds nothing (Qwen 2's, and Llama 3's first step). A Sequence of these applies each in turn.
 * Anything else (RobertaProcessing, BertProcessing) is refused in one line naming it. */
#include <string.h>

#include "tokenizer/tokenizer_internal.h"

static const char *type_of(const JsonValue *v) {
    const char *s = json_string(json_get(v, "type"));
    return s ? s : "(no type)";
}

static int special_id(const JsonValue *specials, const char *name, uint32_t *id) {
    const JsonValue *ids = json_get(json_get(specials, name), "ids");
    long long v;
    if (!ids || ids->type != JSON_ARRAY || ids->len != 1 || !json_int(&ids->items[0], 0, 0x7ffffffe, &v)) return 0;
    *id = (uint32_t)v;
    return 1;
}

static int read_template(Tokenizer *t, const JsonValue *pp, const char *path, char *err) {
    const JsonValue *single = json_get(pp, "single"), *specials = json_get(pp, "special_tokens");
    int seen_a = 0;
    for (size_t i = 0; single && single->type == JSON_ARRAY && i < single->len; i++) {
        const JsonValue *item = &single->items[i];
        const char *name = json_string(json_get(json_get(item, "SpecialToken"), "id"));
        uint32_t id;
        if (json_get(item, "Sequence")) {
            seen_a = 1;
        } else if (!name || !special_id(specials, name, &id) || id >= t->vocab_size) {
            tok_error(err, "%s: post_processor TemplateProcessing item %zu is neither $A nor a special token of one id "
                      "in the vocabulary", path, i);
            return -1;
        } else if ((seen_a ? t->n_suffix : t->n_prefix) == TOKENIZER_MAX_AROUND) {
            tok_error(err, "%s: post_processor TemplateProcessing adds more than %d tokens on one side", path,
                      TOKENIZER_MAX_AROUND);
            return -1;
        } else if (seen_a) {
            t->suffix[t->n_suffix++] = id;
        } else {
            t->prefix[t->n_prefix++] = id;
        }
    }
    if (!seen_a) {
        tok_error(err, "%s: post_processor TemplateProcessing has no single template with $A", path);
        return -1;
    }
    return 0;
}

int read_post_processor(Tokenizer *t, const JsonValue *pp, const char *path, char *err) {
    if (!pp || pp->type == JSON_NULL) return 0;
    const JsonValue *steps = pp;
    size_t n = 1;
    if (strcmp(type_of(pp), "Sequence") == 0) {
        steps = json_get(pp, "processors");
        if (!steps || steps->type != JSON_ARRAY) {
            tok_error(err, "%s: post_processor Sequence has no processors list", path);
            return -1;
        }
        n = steps->len;
        steps = steps->items;
    }
    int templates = 0;
    for (size_t i = 0; i < n; i++) {
        const char *type = type_of(&steps[i]);
        if (strcmp(type, "ByteLevel") == 0) { /* tokenizers' default trims */
            const JsonValue *trim = json_get(&steps[i], "trim_offsets");
            t->trims_offsets |= !trim || trim->type == JSON_TRUE;
            continue;
        }
        if (strcmp(type, "TemplateProcessing") != 0) {
            tok_error(err, "%s: post_processor %s is not supported (TemplateProcessing, ByteLevel and a Sequence of "
                      "them are)", path, type);
            return -1;
        }
        if (templates++) {
            tok_error(err, "%s: post_processor has more than one TemplateProcessing (merge them into one template)",
                      path);
            return -1;
        }
        if (read_template(t, &steps[i], path, err) != 0) return -1;
    }
    return 0;
}
