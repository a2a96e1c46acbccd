/* Chat templates (tokenizer/chat_template.c) against transformers' own renderer: every case of
 * tests/fixtures/chat_templates.json (written by dev/check/chat_template_check.py from transformers'
 * render_jinja_template) renders to the same text, or fails where transformers raised; and what the
 * template language does not hold is refused when read, naming the line. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "common/json.h"
#include "tests/test.h"
#include "tests/test_util.h"
#include "tokenizer/chat_template.h"

/* The first byte where a and b differ, for the message. */
static size_t first_difference(const char *a, size_t na, const char *b, size_t nb) {
    size_t k = 0;
    while (k < na && k < nb && a[k] == b[k]) k++;
    return k;
}

TEST(chat_templates_render_as_transformers_renders_them) {
    size_t n;
    char *text = read_file("tests/fixtures/chat_templates.json", &n), err[ERR_LEN];
    REQUIRE(text, "tests/fixtures/chat_templates.json is missing");
    JsonValue *cases = json_parse(text, n, "chat_templates.json", err);
    REQUIRE(cases && cases->type == JSON_ARRAY && cases->len > 0, "%s", err);
    int wrong = 0, refused = 0;
    for (size_t i = 0; i < cases->len; i++) {
        const JsonValue *c = &cases->items[i], *tpl = json_get(c, "template"), *vars = json_get(c, "vars");
        const JsonValue *want = json_get(c, "text");
        ChatTemplateVar v[16];
        JsonValue *parsed[16] = {NULL};
        size_t nv = 0;
        for (size_t k = 0; vars && k < vars->len && nv < 16; k++) { /* each a JSON text */
            const JsonValue *text = &vars->members[k].value;
            parsed[nv] = json_parse(text->string, text->len, vars->members[k].key, err);
            REQUIRE(parsed[nv], "%s", err);
            v[nv] = (ChatTemplateVar){vars->members[k].key, parsed[nv]};
            nv++;
        }
        ChatTemplate *t = chat_template_parse(tpl->string, tpl->len, err);
        if (!t) {
            CHECK(0, "case %zu (%s): not read: %s", i, json_string(json_get(c, "name")), err);
            wrong++;
            for (size_t k = 0; k < nv; k++) json_free(parsed[k]);
            continue;
        }
        size_t len = 0;
        char *got = chat_template_render(t, json_get(c, "messages"), json_get(c, "add_generation_prompt")->type == JSON_TRUE,
                                         v, nv, &len, err);
        if (!want) { /* transformers raised: so must we */
            CHECK(!got, "case %zu (%s): rendered where transformers raised %s", i, json_string(json_get(c, "name")),
                  json_string(json_get(c, "error")));
            refused += !got;
        } else if (!got) {
            CHECK(0, "case %zu (%s): %s", i, json_string(json_get(c, "name")), err);
            wrong++;
        } else if (len != want->len || memcmp(got, want->string, len)) {
            const size_t at = first_difference(got, len, want->string, want->len);
            const size_t from = at > 40 ? at - 40 : 0;
            CHECK(0, "case %zu (%s): differs at byte %zu: ours '%.80s' transformers' '%.80s'", i,
                  json_string(json_get(c, "name")), at, got + from, want->string + from);
            wrong++;
        }
        free(got);
        chat_template_free(t);
        for (size_t k = 0; k < nv; k++) json_free(parsed[k]);
    }
    CHECK(wrong == 0, "%d of %zu cases differ", wrong, cases->len);
    CHECK(refused > 0, "no case where transformers raised was refused");
    json_free(cases);
    free(text);
}
