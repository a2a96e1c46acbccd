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
#include "tokenizer/chat_template_internal.h" /* the arena's size */
#include "tokenizer/py_str.h"

/* The first byte where a and b differ, for the message. */
static size_t first_difference(const char *a, size_t na, const char *b, size_t nb) {
    size_t k = 0;
    while (k < na && k < nb && a[k] == b[k]) k++;
    return k;
}

TEST(chat_templates_render_as_transformers_renders_them) {
    size_t n;
    /* FGPT_CHAT_TEMPLATES names another file of the same form: dev/check/chat_template_check.py
     * --templates DIR writes one for a folder of models' own templates */
    const char *other = getenv("FGPT_CHAT_TEMPLATES"), *path = other ? other : "tests/fixtures/chat_templates.json";
    char *text = read_file(path, &n), err[ERR_LEN];
    REQUIRE(text, "%s is missing", path);
    JsonValue *root = json_parse(text, n, "chat_templates.json", err);
    REQUIRE(root, "%s", err);
    const JsonValue *templates = json_get(root, "templates"), *cases = json_get(root, "cases");
    REQUIRE(templates && cases && cases->type == JSON_ARRAY && cases->len > 0, "the fixture holds no cases");
    int wrong = 0, refused = 0;
    for (size_t i = 0; i < cases->len; i++) {
        const JsonValue *c = &cases->items[i], *tpl = json_get(templates, json_string(json_get(c, "name")));
        const JsonValue *vars = json_get(c, "vars");
        REQUIRE(tpl && json_string(tpl), "case %zu names no template of the fixture", i);
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
        size_t len = 0, n_spans = 0;
        ChatTemplateSpan *spans = NULL;
        char *got = chat_template_render_marked(t, json_get(c, "messages"),
                                                json_get(c, "add_generation_prompt")->type == JSON_TRUE, v, nv, &len,
                                                &spans, &n_spans, err);
        /* the {% generation %} blocks' spans, as transformers' return_assistant_tokens_mask takes them */
        const JsonValue *want_spans = json_get(c, "spans");
        if (got && want_spans) {
            int same = want_spans->len == n_spans;
            for (size_t k = 0; same && k < n_spans; k++)
                same = want_spans->items[k].items[0].number == (double)spans[k].start &&
                       want_spans->items[k].items[1].number == (double)spans[k].end;
            CHECK(same, "case %zu (%s): %zu generation spans, transformers %zu (or at other places)", i,
                  json_string(json_get(c, "name")), n_spans, want_spans->len);
            wrong += !same;
        }
        free(spans);
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
    CHECK(other || refused > 0, "no case where transformers raised was refused");
    if (other) printf("    %s: %zu cases, %d differ, %d refused where transformers raised\n", path, cases->len, wrong, refused);
    json_free(root);
    free(text);
}

/* Renders src on `messages` (JSON text), with no variables; NULL with err set when it fails. */
static char *render_text(const char *src, const char *messages, char *err) {
    JsonValue *m = json_parse(messages, strlen(messages), "messages", err);
    ChatTemplate *t = m ? chat_template_parse(src, strlen(src), err) : NULL;
    size_t len = 0;
    char *out = t ? chat_template_render(t, m, 0, NULL, 0, &len, err) : NULL;
    chat_template_free(t);
    json_free(m);
    return out;
}

/* What the template language does not hold, or a template that fails as it runs, is one line that
 * names the line of the template and the problem: never a crash, never a silent empty text. */
TEST(a_chat_template_that_cannot_be_rendered_names_its_line_and_why) {
    const char *msgs = "[{\"role\": \"user\", \"content\": \"hi\"}]";
    static const struct {
        const char *src, *says;
    } cases[] = {
        {"a\n{% if x %}b", "line 2: the template ends before {% endif %}"},
        {"{{ 1 + }}", "line 1: a value was expected"},
        {"x\ny\n{% include 'other' %}", "line 3: the statement 'include' is no part of the template language"},
        /* tags and a comment over several lines: the lexer counts lines on from the last token's */
        {"{{ 'a'\n }}\n{# c\n #}\n{% if 1\n %}x{% endif %}\n{{ 1 + }}", "line 7: a value was expected"},
        {"{{ x|wordwrap(5) }}", "line 1: the filter 'wordwrap' is no part of the template language"},
        {"{{ 'a' is tasty }}", "line 1: the test 'tasty' is no part of the template language"},
        {"{% endfor %}", "line 1: {% endfor %} closes no block opened before it"},
        {"{{ 'open", "a string in ' is not closed"},
        {"{{ x", "a tag is not closed (}} missing)"},
        {"{# never closed", "a comment is not closed (#} missing)"},
        {"\n\n{{ raise_exception('roles must alternate') }}", "line 3: the template raised an error: roles must alternate"},
        {"{{ messages[0].missing.deeper }}", "'missing' is undefined, so it has no attribute 'deeper'"},
        {"{{ 'a' + 1 }}", "a string and an integer cannot be computed with"},
        {"{{ 'abc'[::1.5] }}", "line 1: a slice step that is a float"},
        {"{{ [1, 2][::'a'] }}", "line 1: a slice step that is a string"},
        {"{{ 1 / 0 }}", "division by zero"},
        {"{% set x.y = 1 %}", "only a namespace's attributes can be set"},
        {"{% for a, b in [1, 2] %}{% endfor %}", "a for loop of 2 names over an item that is not 2 values"},
        {"{% macro m() %}{{ m() }}{% endmacro %}{{ m() }}", "macros call each other more than 64 deep"},
        {"{{ 2 ** 70 }}", "an integer past 64 bits"}, /* Python's has no bound: refused, not wrapped */
        {"{{ range(0, 9223372036854775807) }}", "range of more than 10000000 numbers"},
        {"{{ 'ab' * 9223372036854775807 }}", "a repetition past 64M items"},
        {"{{ '\\N{BULLET}' }}", "line 1: a \\N{...} escape (write the character itself, or its \\u escape)"},
        {"{{ '\\U00110000' }}", "a \\U escape past U+10FFFF"},
        {"{{ '\\ud800' }}", "an escape of a lone surrogate"},
        {"{{ 'abc'.index('x') }}", "index: substring not found"},
        {"{{ [1, 'a']|sort }}", "and an integer cannot be compared"},
        {"{{ 'a'.partition('') }}", "partition with an empty separator"},
        {"{{ [1]|batch(0) }}", "batch takes a count above 0"},
        {"{{ 1.5|round(0, 'up') }}", "round's method must be common, ceil or floor"},
        {"{{ 0 ** -1 }}", "0 cannot be raised to a negative power"},
        {"{{ (-8) ** 0.5 }}", "a negative number raised to a fractional power"},
        {"{{ 9223372036854775808 }}", "an integer past 64 bits"},
        /* a runaway template is refused, never a crash: nesting, chains, growing values, loops */
        {"{% set ns = namespace(x=[]) %}{% for i in range(2000) %}{% set ns.x = [ns.x] %}{% endfor %}{{ ns.x }}",
         "values or expressions nested deeper than 500 levels"},
        {"{% set ns = namespace(x=[]) %}{% for i in range(2000) %}{% set ns.x = [ns.x] %}{% endfor %}{{ ns.x|tojson }}",
         "a value nested deeper than 500 levels for tojson"},
        {"{% for i in range(10000000) %}{% for j in range(10000000) %}{% endfor %}{% endfor %}",
         "the chat template takes more than 2 GiB to render"},
        {"{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}{% endfor %}",
         "the chat template takes more than 2 GiB to render"},
        {"{{ [1, 2]|batch(4611686018427387904, 0)|list }}", "batch of more than 64M items"},
        {"{{ [1]|slice(4611686018427387904)|list }}", "slice of more than 64M items"},
        {"{{ [1]|tojson(sort_keys=true) }}", "tojson with ensure_ascii or sort_keys is not supported here"},
        /* 64 macro calls deep, each inside 100 nested blocks: the nesting bound, not the stack */
        {"{% macro f(n) %}{% for i in [1] %}{% for i in [1] %}{% for i in [1] %}{% for i in [1] %}{% for i in [1] %}"
         "{% for i in [1] %}{% for i in [1] %}{% for i in [1] %}{% for i in [1] %}{% for i in [1] %}"
         "{% if n > 0 %}{{ f(n - 1) }}{% endif %}"
         "{% endfor %}{% endfor %}{% endfor %}{% endfor %}{% endfor %}{% endfor %}{% endfor %}{% endfor %}{% endfor %}"
         "{% endfor %}{% endmacro %}{{ f(63) }}", "values or expressions nested deeper than 500 levels"},
        {"{{ none.x }}", NULL}, /* an attribute of none is undefined, as in Jinja: renders empty */
    };
    /* nesting that would overflow the stack: brackets, signs, nots, blocks; a chain of 3000 filters */
    static const char *const deep[][5] = {{"{{ ", "(", "1", ")", " }}"}, {"{{ ", "[", "1", "]", " }}"},
                                          {"{{ ", "not ", "1", "", " }}"}, {"{{ ", "-", "1", "", " }}"},
                                          {"", "{% if 1 %}", "x", "{% endif %}", ""}};
    for (size_t k = 0; k < sizeof deep / sizeof deep[0]; k++) {
        const size_t unit = strlen(deep[k][1]) + strlen(deep[k][3]);
        char *src = malloc(unit * 5000 + 64), err[ERR_LEN] = "";
        REQUIRE(src, "memory");
        size_t n = (size_t)sprintf(src, "%s", deep[k][0]);
        for (int i = 0; i < 5000; i++) n += (size_t)sprintf(src + n, "%s", deep[k][1]);
        n += (size_t)sprintf(src + n, "%s", deep[k][2]);
        for (int i = 0; i < 5000; i++) n += (size_t)sprintf(src + n, "%s", deep[k][3]);
        sprintf(src + n, "%s", deep[k][4]);
        char *out = render_text(src, msgs, err);
        CHECK(!out && strstr(err, "line 1: nesting deeper than 500 levels"), "nesting of '%s': %s", deep[k][1],
              out ? "rendered" : err);
        free(out);
        free(src);
    }
    /* a chain of 30000 elifs nests as deep as it is long */
    char *elifs = malloc(30000 * 20 + 64), err_elif[ERR_LEN] = "";
    REQUIRE(elifs, "memory");
    size_t at_elif = (size_t)sprintf(elifs, "{%% if false %%}");
    for (int i = 0; i < 30000; i++) at_elif += (size_t)sprintf(elifs + at_elif, "{%% elif false %%}");
    sprintf(elifs + at_elif, "{%% endif %%}");
    char *elif_out = render_text(elifs, msgs, err_elif);
    CHECK(!elif_out && strstr(err_elif, "nesting deeper than 500 levels"), "%s", elif_out ? "rendered" : err_elif);
    free(elif_out);
    free(elifs);
    char chain[3000 * 7 + 32], err_chain[ERR_LEN] = "";
    size_t at = (size_t)sprintf(chain, "{{ 'x'");
    for (int i = 0; i < 3000; i++) at += (size_t)sprintf(chain + at, "|string");
    sprintf(chain + at, " }}");
    char *chained = render_text(chain, msgs, err_chain);
    CHECK(!chained && strstr(err_chain, "values or expressions nested deeper than 500 levels"), "%s",
          chained ? "rendered" : err_chain);
    free(chained);
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        char err[ERR_LEN] = "";
        char *out = render_text(cases[k].src, msgs, err);
        if (!cases[k].says) {
            CHECK(out && !strcmp(out, ""), "case %zu: '%s' (%s)", k, out ? out : "", err);
        } else {
            CHECK(!out && strstr(err, cases[k].says) && strstr(err, "chat template"), "case %zu: %s", k,
                  out ? "rendered" : err);
        }
        free(out);
    }
}

/* A template's memory grows with its length, not with its length times its string literals: each
 * literal takes room for its own characters (it took room for the rest of the template: 187 MB for
 * this 76 KB one, against 1.9 MB now). */
TEST(a_chat_template_of_many_string_literals_takes_memory_in_proportion_to_its_length) {
    const char *one = "{{ 'abcdefghij' }}\n";
    const size_t count = 4000, each = strlen(one), len = count * each;
    char *src = malloc(len + 1);
    REQUIRE(src, "host memory");
    for (size_t i = 0; i < count; i++) memcpy(src + i * each, one, each);
    src[len] = 0;
    char err[512] = "";
    ChatTemplate *t = chat_template_parse(src, len, err);
    REQUIRE(t, "the template should parse: %s", err);
    const size_t bytes = arena_bytes(&t->arena);
    /* a literal's string, its output node and the arena's blocks: 25 bytes a byte of template, and
     * room for AddressSanitizer's block of its own for every value */
    CHECK(bytes < 64 * len, "%zu bytes of arena for a %zu-byte template of %zu literals", bytes, len, count);
    chat_template_free(t);
    free(src);
}

/* Bytes that are no UTF-8 (an overlong form, a surrogate, a code point past U+10FFFF, a lone
 * continuation byte) pass through Python's case mappings as they are, each a character of its own. */
TEST(py_str_keeps_bytes_that_are_no_utf8_as_they_are) {
    static const char *const bad[] = {"\xE0\x80\x80", "\xED\xA0\x80", "\xF4\x90\x80\x80", "\xF0\x80\x80\x80", "\x80", "\xC0\xAF"};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        char out[64];
        const size_t n = strlen(bad[k]), got = py_case(bad[k], n, PY_UPPER, out);
        CHECK(got == n && !memcmp(out, bad[k], n), "case %zu: %zu bytes out of %zu", k, got, n);
        size_t at = 0, chars = 0;
        while (at < n) py_utf8_next(bad[k], n, &at), chars++;
        CHECK(chars == n, "case %zu: %zu characters, one a byte wanted", k, chars);
    }
    char out[16];
    CHECK(py_case("a\xC3\xA9", 3, PY_UPPER, out) == 3 && !memcmp(out, "A\xC3\x89", 3), "valid text maps");
}
