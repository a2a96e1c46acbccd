/* common/json.c - the JSON reader (see json.h): recursive descent over the text, one malloc'ed
 * array per container. Containers grow by doubling while they are read, then keep their size. */
#include "common/json.h"
#include "common/err.h"

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *s;
    size_t len, at;
    const char *what;
    char *err;
    int failed;
} Parser;

static void fail(Parser *p, const char *fmt, ...) {
    if (p->failed) return;
    p->failed = 1;
    size_t line = 1, col = 1;
    for (size_t i = 0; i < p->at && i < p->len; i++) {
        if (p->s[i] == '\n') {
            line++;
            col = 1;
        } else {
            col++;
        }
    }
    char why[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    snprintf(p->err, ERR_LEN, "%s is not valid JSON: line %zu column %zu: %s", p->what, line, col, why);
}

static void skip_space(Parser *p) {
    while (p->at < p->len) {
        char c = p->s[p->at];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
        p->at++;
    }
}

static void free_value(JsonValue *v) {
    if (v->type == JSON_STRING) {
        free(v->string);
    } else if (v->type == JSON_ARRAY) {
        for (size_t i = 0; i < v->len; i++) free_value(&v->items[i]);
        free(v->items);
    } else if (v->type == JSON_OBJECT) {
        for (size_t i = 0; i < v->len; i++) {
            free(v->members[i].key);
            free_value(&v->members[i].value);
        }
        free(v->members);
    }
    v->type = JSON_NULL;
}

static int hex4(Parser *p, uint32_t *out) {
    if (p->len - p->at < 4) return 0;
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p->s[p->at + i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return 0;
        v = v * 16 + (uint32_t)d;
    }
    p->at += 4;
    *out = v;
    return 1;
}

static size_t put_utf8(char *o, uint32_t cp) {
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xc0 | cp >> 6);
        o[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xe0 | cp >> 12);
        o[1] = (char)(0x80 | (cp >> 6 & 0x3f));
        o[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    o[0] = (char)(0xf0 | cp >> 18);
    o[1] = (char)(0x80 | (cp >> 12 & 0x3f));
    o[2] = (char)(0x80 | (cp >> 6 & 0x3f));
    o[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

/* A string at p->at (the opening quote); its decoded bytes are never longer than its source. */
static char *parse_string(Parser *p, size_t *out_len) {
    p->at++; /* the quote */
    size_t start = p->at, end = start;
    while (end < p->len && p->s[end] != '"') end += p->s[end] == '\\' ? 2 : 1;
    if (end >= p->len) {
        fail(p, "a string that never ends");
        return NULL;
    }
    char *o = malloc(end - start + 1);
    if (!o) {
        fail(p, "out of memory");
        return NULL;
    }
    size_t n = 0;
    while (p->at < end) {
        unsigned char c = (unsigned char)p->s[p->at];
        if (c < 0x20) {
            fail(p, "a control character (0x%02x) inside a string; it must be escaped", c);
            free(o);
            return NULL;
        }
        if (c != '\\') {
            o[n++] = (char)c;
            p->at++;
            continue;
        }
        char e = p->s[++p->at];
        p->at++;
        switch (e) {
        case '"': o[n++] = '"'; break;
        case '\\': o[n++] = '\\'; break;
        case '/': o[n++] = '/'; break;
        case 'b': o[n++] = '\b'; break;
        case 'f': o[n++] = '\f'; break;
        case 'n': o[n++] = '\n'; break;
        case 'r': o[n++] = '\r'; break;
        case 't': o[n++] = '\t'; break;
        case 'u': {
            uint32_t cp, lo;
            if (!hex4(p, &cp)) {
                fail(p, "\\u needs four hex digits");
                free(o);
                return NULL;
            }
            if (cp >= 0xdc00 && cp <= 0xdfff) {
                fail(p, "a low surrogate \\u%04x without a high one before it", cp);
                free(o);
                return NULL;
            }
            if (cp >= 0xd800 && cp <= 0xdbff) {
                /* a pair: 12 source bytes become 4 */
                if (p->at + 1 >= end || p->s[p->at] != '\\' || p->s[p->at + 1] != 'u' || (p->at += 2, !hex4(p, &lo)) ||
                    lo < 0xdc00 || lo > 0xdfff) {
                    fail(p, "a high surrogate \\u%04x without a low one after it", cp);
                    free(o);
                    return NULL;
                }
                cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
            }
            n += put_utf8(o + n, cp);
            break;
        }
        default:
            p->at--;
            fail(p, "unknown escape \\%c", e);
            free(o);
            return NULL;
        }
    }
    p->at = end + 1;
    o[n] = 0;
    *out_len = n;
    return o;
}

static int is_digit(char c) {
    return c >= '0' && c <= '9';
}

/* RFC 8259's number grammar, checked before strtod reads it (strtod takes more: hex, inf, nan).
 * 1: a number; 0: not one here; -1: one past a double's range (an error set: it would read as inf,
 * and a file written back from it would hold no JSON at all). */
static int parse_number(Parser *p, double *out, int *integer) {
    size_t i = p->at;
    *integer = 1;
    if (i < p->len && p->s[i] == '-') i++;
    if (i >= p->len || !is_digit(p->s[i])) return 0;
    if (p->s[i] == '0') i++;
    else
        while (i < p->len && is_digit(p->s[i])) i++;
    if (i < p->len && p->s[i] == '.') {
        i++, *integer = 0;
        if (i >= p->len || !is_digit(p->s[i])) return 0;
        while (i < p->len && is_digit(p->s[i])) i++;
    }
    if (i < p->len && (p->s[i] == 'e' || p->s[i] == 'E')) {
        i++, *integer = 0;
        if (i < p->len && (p->s[i] == '+' || p->s[i] == '-')) i++;
        if (i >= p->len || !is_digit(p->s[i])) return 0;
        while (i < p->len && is_digit(p->s[i])) i++;
    }
    char buf[64];
    size_t n = i - p->at;
    if (n >= sizeof buf) { /* a long literal: strtod on a copy of any length */
        char *big = malloc(n + 1);
        if (!big) return 0;
        memcpy(big, p->s + p->at, n);
        big[n] = 0;
        *out = strtod(big, NULL);
        free(big);
    } else {
        memcpy(buf, p->s + p->at, n);
        buf[n] = 0;
        *out = strtod(buf, NULL);
    }
    if (!isfinite(*out)) {
        fail(p, "the number %.*s is too large for a double", (int)(n < 40 ? n : 40), p->s + p->at);
        return -1;
    }
    p->at = i;
    return 1;
}

static int parse_value(Parser *p, JsonValue *v, int depth);

/* Appends one slot to a growing array of elements of size `size`; NULL on out of memory. */
static void *grow(void **arr, size_t *cap, size_t count, size_t size) {
    if (count == *cap) {
        size_t c = *cap ? *cap * 2 : 4;
        void *a = realloc(*arr, c * size);
        if (!a) return NULL;
        *arr = a;
        *cap = c;
    }
    return (char *)*arr + count * size;
}

static int parse_container(Parser *p, JsonValue *v, int depth) {
    const int object = p->s[p->at] == '{';
    const char close = object ? '}' : ']';
    v->type = object ? JSON_OBJECT : JSON_ARRAY;
    if (depth >= JSON_MAX_DEPTH) {
        fail(p, "nesting deeper than %d levels", JSON_MAX_DEPTH);
        return 0;
    }
    p->at++;
    size_t cap = 0;
    skip_space(p);
    if (p->at < p->len && p->s[p->at] == close) {
        p->at++;
        return 1;
    }
    for (;;) {
        skip_space(p);
        JsonValue *slot;
        if (object) {
            if (p->at >= p->len || p->s[p->at] != '"') {
                fail(p, "expected a \"key\" in an object");
                return 0;
            }
            JsonMember *m = grow((void **)&v->members, &cap, v->len, sizeof *m);
            if (!m) {
                fail(p, "out of memory");
                return 0;
            }
            memset(m, 0, sizeof *m);
            m->key = parse_string(p, &m->key_len);
            if (!m->key) return 0;
            v->len++; /* counted now, so an error below still frees the key */
            skip_space(p);
            if (p->at >= p->len || p->s[p->at] != ':') {
                fail(p, "expected ':' after the key \"%.40s\"", m->key);
                return 0;
            }
            p->at++;
            slot = &m->value;
        } else {
            slot = grow((void **)&v->items, &cap, v->len, sizeof *slot);
            if (!slot) {
                fail(p, "out of memory");
                return 0;
            }
            memset(slot, 0, sizeof *slot);
            v->len++;
        }
        if (!parse_value(p, slot, depth + 1)) return 0;
        skip_space(p);
        if (p->at < p->len && p->s[p->at] == ',') {
            p->at++;
            skip_space(p);
            if (p->at < p->len && p->s[p->at] == close) {
                fail(p, "a trailing comma before '%c'", close);
                return 0;
            }
            continue;
        }
        if (p->at < p->len && p->s[p->at] == close) {
            p->at++;
            return 1;
        }
        fail(p, "expected ',' or '%c'", close);
        return 0;
    }
}

static int parse_literal(Parser *p, const char *word) {
    size_t n = strlen(word);
    if (p->len - p->at >= n && memcmp(p->s + p->at, word, n) == 0) {
        p->at += n;
        return 1;
    }
    return 0;
}

static int parse_value(Parser *p, JsonValue *v, int depth) {
    skip_space(p);
    if (p->at >= p->len) {
        fail(p, "the text ends where a value should be");
        return 0;
    }
    char c = p->s[p->at];
    if (c == '{' || c == '[') return parse_container(p, v, depth);
    if (c == '"') {
        v->string = parse_string(p, &v->len);
        if (!v->string) return 0;
        v->type = JSON_STRING;
        return 1;
    }
    if (parse_literal(p, "null")) return v->type = JSON_NULL, 1;
    if (parse_literal(p, "true")) return v->type = JSON_TRUE, 1;
    if (parse_literal(p, "false")) return v->type = JSON_FALSE, 1;
    const int number = parse_number(p, &v->number, &v->integer);
    if (number > 0) return v->type = JSON_NUMBER, 1;
    if (number < 0) return 0;
    fail(p, "expected a value (object, array, string, number, true, false or null)");
    return 0;
}

JsonValue *json_parse(const char *text, size_t len, const char *what, char *err) {
    Parser p = {text, len, 0, what, err, 0};
    JsonValue *root = calloc(1, sizeof *root);
    if (!root) {
        snprintf(err, ERR_LEN, "out of memory reading %s", what);
        return NULL;
    }
    /* an editor's byte-order mark is no JSON (Python's json refuses it too): named, with the fix */
    if (len >= 3 && memcmp(text, "\xef\xbb\xbf", 3) == 0)
        fail(&p, "the file starts with a UTF-8 byte-order mark (save it as UTF-8 without one)");
    else if (parse_value(&p, root, 0)) {
        skip_space(&p);
        if (p.at < len) fail(&p, "more text after the value");
    }
    if (p.failed) {
        json_free(root);
        return NULL;
    }
    return root;
}

void json_free(JsonValue *v) {
    if (!v) return;
    free_value(v);
    free(v);
}

const JsonValue *json_get(const JsonValue *v, const char *key) {
    if (!v || v->type != JSON_OBJECT) return NULL;
    size_t n = strlen(key);
    for (size_t i = v->len; i-- > 0;)
        if (v->members[i].key_len == n && memcmp(v->members[i].key, key, n) == 0) return &v->members[i].value;
    return NULL;
}

int json_rename_member(JsonValue *obj, const char *key, const char *new_key) {
    if (!obj || obj->type != JSON_OBJECT) return 0;
    const size_t n = strlen(key), m = strlen(new_key);
    size_t from = obj->len, to = obj->len;
    for (size_t i = obj->len; i-- > 0;) {
        const JsonMember *mb = &obj->members[i];
        if (from == obj->len && mb->key_len == n && !memcmp(mb->key, key, n)) from = i;
        if (to == obj->len && mb->key_len == m && !memcmp(mb->key, new_key, m)) to = i;
    }
    if (from == obj->len || from == to) return 0;
    JsonMember moved = obj->members[from];
    if (to < obj->len) { /* new_key's place keeps, with key's value */
        free_value(&obj->members[to].value);
        obj->members[to].value = moved.value;
        free(moved.key);
    } else {
        char *name = malloc(m + 1);
        if (!name) return -1;
        memcpy(name, new_key, m + 1);
        free(moved.key);
        moved.key = name, moved.key_len = m;
    }
    memmove(&obj->members[from], &obj->members[from + 1], (obj->len - from - 1) * sizeof *obj->members);
    if (to < obj->len) obj->len--;
    else obj->members[obj->len - 1] = moved;
    return 0;
}

const char *json_string(const JsonValue *v) {
    return v && v->type == JSON_STRING ? v->string : NULL;
}

int json_int(const JsonValue *v, long long lo, long long hi, long long *out) {
    if (!v || v->type != JSON_NUMBER || !v->integer || !(v->number >= (double)lo && v->number <= (double)hi))
        return 0;
    *out = (long long)v->number;
    return 1;
}

const char *json_type_name(JsonType t) {
    static const char *names[] = {"null", "false", "true", "a number", "a string", "an array", "an object"};
    return names[t];
}
