/* The JSON reader: every value type, escapes and surrogate pairs, the document order of members,
 * and each malformed input refused with its line and column, never read past its end. */
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "tests/test.h"
#include "common/json.h"

static JsonValue *parse(const char *s, char *err) {
    return json_parse(s, strlen(s), "t.json", err);
}

TEST(json_reads_every_value_type_in_document_order) {
    char err[ERR_LEN];
    JsonValue *v = parse(" {\"b\": [1, -2.5e3, 0.125, true, false, null], \"a\": {\"x\": \"y\"}, \"e\": [], \"o\": {}}\n",
                         err);
    REQUIRE(v, "%s", err);
    REQUIRE(v->type == JSON_OBJECT && v->len == 4, "root");
    CHECK(strcmp(v->members[0].key, "b") == 0 && strcmp(v->members[1].key, "a") == 0, "member order");
    const JsonValue *b = json_get(v, "b");
    REQUIRE(b && b->type == JSON_ARRAY && b->len == 6, "array");
    CHECK(b->items[0].number == 1 && b->items[1].number == -2500 && b->items[2].number == 0.125, "numbers");
    CHECK(b->items[3].type == JSON_TRUE && b->items[4].type == JSON_FALSE && b->items[5].type == JSON_NULL,
          "literals");
    CHECK(json_string(json_get(json_get(v, "a"), "x")) && strcmp(json_string(json_get(json_get(v, "a"), "x")), "y") == 0,
          "nested string");
    CHECK(json_get(v, "e")->len == 0 && json_get(v, "o")->len == 0, "empty containers");
    CHECK(json_get(v, "missing") == NULL && json_get(b, "b") == NULL, "absent keys");
    long long x;
    CHECK(json_int(&b->items[0], 0, 10, &x) && x == 1, "integer");
    CHECK(!json_int(&b->items[2], -10, 10, &x) && !json_int(&b->items[1], 0, 10, &x), "non-integers");
    json_free(v);
    /* an integer value written with a fraction or exponent is a float to Python's json, and to the
     * readers of sizes and shapes that follow it */
    v = parse("[512, 512.0, 5.12e2, 5E2, -0]", err);
    REQUIRE(v, "%s", err);
    CHECK(json_int(&v->items[0], 0, 1000, &x) && x == 512, "512");
    for (int i = 1; i < 4; i++) CHECK(!json_int(&v->items[i], 0, 1000, &x), "item %d taken as an integer", i);
    CHECK(json_int(&v->items[4], 0, 10, &x) && x == 0, "-0");
    json_free(v);
}

TEST(json_decodes_escapes_and_surrogate_pairs_to_utf8) {
    char err[ERR_LEN];
    JsonValue *v = parse("[\"a\\\"b\\\\c\\/d\\b\\f\\n\\r\\t\", \"\\u0120\\u00e9\\u4e2d\\ud83d\\ude00\", \"x\\u0000y\", "
                         "\"\xc4\xa0raw\"]", err);
    REQUIRE(v, "%s", err);
    CHECK(v->items[0].len == 12 && memcmp(v->items[0].string, "a\"b\\c/d\b\f\n\r\t", 12) == 0, "simple escapes");
    const char want[] = "\xc4\xa0\xc3\xa9\xe4\xb8\xad\xf0\x9f\x98\x80";
    CHECK(v->items[1].len == sizeof want - 1 && memcmp(v->items[1].string, want, sizeof want - 1) == 0,
          "\\u escapes: %zu bytes", v->items[1].len);
    CHECK(v->items[2].len == 3 && memcmp(v->items[2].string, "x\0y", 3) == 0, "NUL inside a string");
    CHECK(v->items[3].len == 5 && memcmp(v->items[3].string, "\xc4\xa0raw", 5) == 0, "raw UTF-8");
    json_free(v);
}

static void expect_bad(const char *text, const char *needle) {
    char err[ERR_LEN] = "";
    JsonValue *v = parse(text, err);
    CHECK(v == NULL, "'%s' was accepted", text);
    CHECK(strstr(err, needle) != NULL, "'%s': message '%s' lacks '%s'", text, err, needle);
    CHECK(strstr(err, "t.json is not valid JSON: line ") == err, "'%s': message '%s' names no place", text, err);
    json_free(v);
}

TEST(json_refuses_malformed_text_naming_the_place) {
    expect_bad("", "ends where a value should be");
    expect_bad("[1, 2,]", "trailing comma");
    expect_bad("{\"a\": 1,}", "trailing comma");
    expect_bad("{\"a\" 1}", "expected ':'");
    expect_bad("{a: 1}", "expected a \"key\"");
    expect_bad("[1 2]", "expected ',' or ']'");
    expect_bad("\"abc", "never ends");
    expect_bad("\"a\\qb\"", "unknown escape \\q");
    expect_bad("\"\\u12g4\"", "four hex digits");
    expect_bad("\"\\ud800x\"", "high surrogate");
    expect_bad("\"\\udc00\"", "low surrogate");
    expect_bad("\"a\tb\"", "control character");
    expect_bad("01", "more text after the value");
    expect_bad("1.", "expected a value");
    expect_bad("-", "expected a value");
    expect_bad("+1", "expected a value");
    expect_bad("[1e400]", "the number 1e400 is too large for a double");
    expect_bad("-1e309", "too large for a double");
    expect_bad("nul", "expected a value");
    expect_bad("{} {}", "more text after the value");
    expect_bad("// comment\n1", "line 1 column 1");
    expect_bad("[\n1,\n  x]", "line 3 column 3");
    expect_bad("\xef\xbb\xbf{\"a\": 1}", "starts with a UTF-8 byte-order mark (save it as UTF-8 without one)");
    char deep[JSON_MAX_DEPTH + 10];
    memset(deep, '[', sizeof deep - 1);
    deep[sizeof deep - 1] = 0;
    expect_bad(deep, "nesting deeper than");
}

TEST(json_never_reads_past_the_given_length) {
    char err[ERR_LEN];
    /* the bytes after len would complete the value: they must not be seen */
    const char *s = "[1, 2]";
    CHECK(json_parse(s, 5, "t.json", err) == NULL && strstr(err, "expected ',' or ']'"), "short length: %s", err);
    JsonValue *v = json_parse("\"ab\"zz", 4, "t.json", err);
    CHECK(v && v->len == 2, "string within length: %s", err);
    json_free(v);
}

/* Python's obj[new] = obj.pop(old): the renamed member moves to the end; one already named new
 * keeps its place and takes the value; a missing key changes nothing. */
TEST(json_rename_member_moves_as_pythons_pop_and_set_do) {
    char err[ERR_LEN];
    const char *text = "{\"from\": \"human\", \"x\": 1, \"value\": \"hi\"}";
    JsonValue *v = json_parse(text, strlen(text), "test", err);
    REQUIRE(v, "%s", err);
    CHECK(json_rename_member(v, "from", "role") == 0 && json_rename_member(v, "value", "content") == 0 &&
              json_rename_member(v, "missing", "other") == 0, "rename");
    CHECK(v->len == 3 && !strcmp(v->members[0].key, "x") && !strcmp(v->members[1].key, "role") &&
              !strcmp(v->members[2].key, "content") && !strcmp(json_string(json_get(v, "role")), "human") &&
              !strcmp(json_string(json_get(v, "content")), "hi"), "order after renames: %s %s %s",
          v->members[0].key, v->len > 1 ? v->members[1].key : "", v->len > 2 ? v->members[2].key : "");
    json_free(v);
    const char *both = "{\"role\": \"user\", \"a\": 2, \"from\": [\"gpt\"]}";
    v = json_parse(both, strlen(both), "test", err);
    REQUIRE(v, "%s", err);
    CHECK(json_rename_member(v, "from", "role") == 0, "rename");
    CHECK(v->len == 2 && !strcmp(v->members[0].key, "role") && v->members[0].value.type == JSON_ARRAY &&
              !strcmp(v->members[1].key, "a"), "an existing role keeps its place and takes from's value");
    json_free(v);
}
