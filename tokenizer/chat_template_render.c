/* tokenizer/chat_template_render.c - a parsed chat template run on a conversation (see
 * chat_template.h): Python's values and operators as Jinja gives them to templates, the filters,
 * tests, methods and functions chat templates call, and Jinja's scoping (a set inside a loop lasts
 * one pass; a namespace outlives it). */
#include "tokenizer/chat_template.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tokenizer/chat_template_internal.h"
#include "tokenizer/py_str.h"

typedef enum { V_UNDEF, V_NONE, V_BOOL, V_INT, V_FLOAT, V_STR, V_LIST, V_DICT, V_NS, V_MACRO, V_METHOD, V_BUILTIN } VKind;

typedef struct Val Val;
typedef struct List List;
typedef struct Dict Dict;
typedef struct Frame Frame;

struct Val {
    VKind k;
    long long i;        /* V_BOOL, V_INT; V_METHOD and V_BUILTIN: which */
    double f;           /* V_FLOAT */
    const char *s;      /* V_STR's bytes; V_UNDEF: what was asked for, for the message */
    size_t n;           /* V_STR's length */
    List *list;         /* V_LIST */
    Dict *dict;         /* V_DICT, V_NS */
    const Stmt *macro;  /* V_MACRO */
    Frame *scope;       /* V_MACRO: what its body sees besides its arguments */
    const Val *self;    /* V_METHOD's object */
};

/* What Python type a list stands for: its repr, and what it equals, differ. */
typedef enum { L_LIST, L_TUPLE, L_DICT_ITEMS, L_DICT_KEYS, L_DICT_VALUES } ListKind;

struct List {
    size_t n;
    Val *items;
    ListKind kind;
};

struct Dict {
    size_t n, cap;
    const char **keys;
    size_t *klen;
    Val *vals;
};

struct Frame {
    Frame *parent;
    Dict vars;
};

typedef struct {
    char *s;
    size_t n, cap;
} Buf;

typedef struct {
    Arena arena;
    char *err;
    jmp_buf fail;
    Frame *root;
    int stop; /* 1: break, 2: continue, until the loop takes it */
    int depth;
    int nest;                  /* values and expressions being worked through, one inside another */
    int line;                  /* the line of the expression being worked out, for messages */
    uint64_t passes, bytes;    /* loop passes and memory taken so far: bounded, as a template is given */
    Buf *top;                  /* the template's own output, as Jinja's generate() has yielded it */
    ChatTemplateSpan *spans;   /* the {% generation %} blocks' text, when asked for */
    size_t n_spans, spans_cap;
    int track;
} Render;

/* The string methods, then the dict methods (attribute() looks each kind's range up). */
enum { M_STARTSWITH, M_ENDSWITH, M_STRIP, M_LSTRIP, M_RSTRIP, M_SPLIT, M_RSPLIT, M_SPLITLINES, M_UPPER, M_LOWER,
       M_TITLE, M_CAPITALIZE, M_SWAPCASE, M_REPLACE, M_FIND, M_RFIND, M_INDEX, M_RINDEX, M_COUNT, M_JOIN,
       M_REMOVEPREFIX, M_REMOVESUFFIX, M_ISALPHA, M_ISALNUM, M_ISDIGIT, M_ISDECIMAL, M_ISNUMERIC, M_ISSPACE,
       M_ISLOWER, M_ISUPPER, M_ISTITLE, M_LJUST, M_RJUST, M_CENTER, M_ZFILL, M_PARTITION, M_RPARTITION,
       M_GET, M_ITEMS, M_KEYS, M_VALUES };
static const char *const METHOD_NAMES[] = {
    "startswith", "endswith", "strip", "lstrip", "rstrip", "split", "rsplit", "splitlines", "upper", "lower", "title",
    "capitalize", "swapcase", "replace", "find", "rfind", "index", "rindex", "count", "join", "removeprefix",
    "removesuffix", "isalpha", "isalnum", "isdigit", "isdecimal", "isnumeric", "isspace", "islower", "isupper",
    "istitle", "ljust", "rjust", "center", "zfill", "partition", "rpartition", "get", "items", "keys", "values"};
enum { F_NAMESPACE, F_RANGE, F_RAISE, F_STRFTIME, F_DICT };
static const char *const BUILTIN_NAMES[] = {"namespace", "range", "raise_exception", "strftime_now", "dict"};

static void fail(Render *r, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4), noreturn));
static void fail(Render *r, int line, const char *fmt, ...) {
    char why[ERR_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    snprintf(r->err, ERR_LEN, "chat template line %d: %s", line, why);
    longjmp(r->fail, 1);
}

/* What a render may take: Python stops at 1000 nested calls (Jinja's compiled templates sooner); a conversation's text needs neither
 * millions of loop passes nor gigabytes, which only a runaway template (nested ranges, a text
 * doubled in a loop) would ask for. */
#define NEST_LIMIT 500
#define PASS_LIMIT 10000000u
#define BYTE_LIMIT (2ull << 30)

/* One level deeper into a value or an expression; leave() comes back out. */
static void enter(Render *r, int line) {
    if (++r->nest > NEST_LIMIT) fail(r, line ? line : r->line, "values or expressions nested deeper than 500 levels");
}
static void leave(Render *r) { r->nest--; }


static void *alloc(Render *r, size_t n) {
    if ((r->bytes += n) > BYTE_LIMIT) {
        snprintf(r->err, ERR_LEN, "the chat template takes more than 2 GiB to render (a loop or a text that keeps "
                 "growing)");
        longjmp(r->fail, 1);
    }
    void *p = arena_alloc(&r->arena, n);
    if (!p) {
        snprintf(r->err, ERR_LEN, "out of memory rendering the chat template");
        longjmp(r->fail, 1);
    }
    return p;
}

static void put(Render *r, Buf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? 2 * b->cap : 256;
        while (cap < b->n + n + 1) cap *= 2;
        char *grown = alloc(r, cap); /* the old one stays in the arena until the render ends */
        if (b->n) memcpy(grown, b->s, b->n);
        b->s = grown, b->cap = cap;
    }
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = 0;
}

static void puts_(Render *r, Buf *b, const char *s) { put(r, b, s, strlen(s)); }

static Val str_val(const char *s, size_t n) { return (Val){.k = V_STR, .s = s, .n = n}; }
static Val int_val(long long i) { return (Val){.k = V_INT, .i = i}; }
static Val bool_val(int b) { return (Val){.k = V_BOOL, .i = b != 0}; }
static Val undef(const char *what) { return (Val){.k = V_UNDEF, .s = what}; }
static Val buf_val(const Buf *b) { return str_val(b->s ? b->s : "", b->n); }

static const char *kind_name(const Val *v) {
    static const char *const names[] = {"undefined", "none", "a boolean", "an integer", "a float", "a string",
                                        "a list", "a dict", "a namespace", "a macro", "a method", "a function"};
    return names[v->k];
}

/* ---- dicts, lists ---- */

static Val *dict_find(const Dict *d, const char *key, size_t len) {
    for (size_t k = d->n; k-- > 0;)
        if (d->klen[k] == len && !memcmp(d->keys[k], key, len)) return &d->vals[k];
    return NULL;
}

static void dict_set(Render *r, Dict *d, const char *key, size_t len, Val v) {
    Val *at = dict_find(d, key, len);
    if (at) {
        *at = v;
        return;
    }
    if (d->n == d->cap) {
        const size_t cap = d->cap ? 2 * d->cap : 8;
        const char **keys = alloc(r, cap * sizeof *keys);
        size_t *klen = alloc(r, cap * sizeof *klen);
        Val *vals = alloc(r, cap * sizeof *vals);
        if (d->n) {
            memcpy(keys, d->keys, d->n * sizeof *keys);
            memcpy(klen, d->klen, d->n * sizeof *klen);
            memcpy(vals, d->vals, d->n * sizeof *vals);
        }
        d->keys = keys, d->klen = klen, d->vals = vals, d->cap = cap;
    }
    d->keys[d->n] = key, d->klen[d->n] = len, d->vals[d->n] = v;
    d->n++;
}

static Val list_val(Render *r, size_t n) {
    List *l = alloc(r, sizeof *l);
    l->items = alloc(r, (n + 1) * sizeof *l->items);
    l->n = n;
    return (Val){.k = V_LIST, .list = l};
}

static Val dict_val(Render *r, VKind kind) {
    Dict *d = alloc(r, sizeof *d);
    return (Val){.k = kind, .dict = d};
}

static Val from_json(Render *r, const JsonValue *j) {
    switch (j->type) {
    case JSON_NULL: return (Val){.k = V_NONE};
    case JSON_FALSE: return bool_val(0);
    case JSON_TRUE: return bool_val(1);
    case JSON_NUMBER:
        if (j->integer && fabs(j->number) < 9e15) return int_val((long long)j->number);
        return (Val){.k = V_FLOAT, .f = j->number};
    case JSON_STRING: return str_val(j->string, j->len);
    case JSON_ARRAY: {
        Val v = list_val(r, j->len);
        for (size_t k = 0; k < j->len; k++) v.list->items[k] = from_json(r, &j->items[k]);
        return v;
    }
    case JSON_OBJECT: {
        Val v = dict_val(r, V_DICT);
        for (size_t k = 0; k < j->len; k++)
            dict_set(r, v.dict, j->members[k].key, j->members[k].key_len, from_json(r, &j->members[k].value));
        return v;
    }
    }
    return (Val){.k = V_NONE};
}

/* ---- Python's str() and repr(), and json.dumps ---- */

/* A float as Python's repr writes it: the fewest digits that read back the same. */
static void put_float(Render *r, Buf *b, double f) {
    if (isnan(f)) return puts_(r, b, "nan");
    if (isinf(f)) return puts_(r, b, f < 0 ? "-inf" : "inf");
    char e[40];
    for (int p = 1; p <= 17; p++) {
        snprintf(e, sizeof e, "%.*e", p - 1, f);
        if (strtod(e, NULL) == f) break;
    }
    char digits[24];
    size_t nd = 0;
    const char *c = e;
    if (*c == '-') put(r, b, "-", 1), c++;
    for (; *c && *c != 'e'; c++)
        if (*c != '.') digits[nd++] = *c;
    const int exp = atoi(c + 1);
    if (exp >= -4 && exp < 16) {
        if (exp < 0) {
            puts_(r, b, "0.");
            for (int k = 0; k < -exp - 1; k++) put(r, b, "0", 1);
            put(r, b, digits, nd);
        } else if ((size_t)exp + 1 >= nd) {
            put(r, b, digits, nd);
            for (size_t k = nd; k < (size_t)exp + 1; k++) put(r, b, "0", 1);
            puts_(r, b, ".0");
        } else {
            put(r, b, digits, (size_t)exp + 1);
            put(r, b, ".", 1);
            put(r, b, digits + exp + 1, nd - (size_t)exp - 1);
        }
    } else {
        put(r, b, digits, 1);
        if (nd > 1) put(r, b, ".", 1), put(r, b, digits + 1, nd - 1);
        char x[8];
        snprintf(x, sizeof x, "e%c%02d", exp < 0 ? '-' : '+', abs(exp));
        puts_(r, b, x);
    }
}

static void put_repr(Render *r, Buf *b, const Val *v);

/* Python's str(v). */
static void put_str(Render *r, Buf *b, const Val *v) {
    char num[32];
    switch (v->k) {
    case V_UNDEF: return;
    case V_NONE: return puts_(r, b, "None");
    case V_BOOL: return puts_(r, b, v->i ? "True" : "False");
    case V_INT: snprintf(num, sizeof num, "%lld", v->i); return puts_(r, b, num);
    case V_FLOAT: return put_float(r, b, v->f);
    case V_STR: return put(r, b, v->s, v->n);
    default: return put_repr(r, b, v);
    }
}

static void put_repr_value(Render *r, Buf *b, const Val *v);

static void put_repr(Render *r, Buf *b, const Val *v) {
    enter(r, 0);
    put_repr_value(r, b, v);
    leave(r);
}

static void put_repr_value(Render *r, Buf *b, const Val *v) {
    switch (v->k) {
    case V_STR: {
        const int dq = memchr(v->s, '\'', v->n) && !memchr(v->s, '"', v->n);
        const char q = dq ? '"' : '\'';
        put(r, b, &q, 1);
        for (size_t k = 0; k < v->n;) {
            const size_t at = k;
            const uint32_t c = py_utf8_next(v->s, v->n, &k);
            char esc[12];
            if (c == '\\' || c == (unsigned char)q) esc[0] = '\\', esc[1] = (char)c, put(r, b, esc, 2);
            else if (c == '\n') puts_(r, b, "\\n");
            else if (c == '\r') puts_(r, b, "\\r");
            else if (c == '\t') puts_(r, b, "\\t");
            else if (py_isprintable(c)) put(r, b, v->s + at, k - at);
            else if (c < 0x100 || c >= 0x110000u) /* a stray byte is printed as the escape of its value */
                snprintf(esc, sizeof esc, "\\x%02x", (unsigned)(c >= 0x110000u ? c - 0x110000u : c)), puts_(r, b, esc);
            else snprintf(esc, sizeof esc, c < 0x10000 ? "\\u%04x" : "\\U%08x", (unsigned)c), puts_(r, b, esc);
        }
        return put(r, b, &q, 1);
    }
    case V_LIST: {
        static const char *const open[] = {"[", "(", "dict_items([", "dict_keys([", "dict_values(["};
        static const char *const close[] = {"]", ")", "])", "])", "])"};
        const ListKind kind = v->list->kind;
        puts_(r, b, open[kind]);
        for (size_t k = 0; k < v->list->n; k++) {
            if (k) puts_(r, b, ", ");
            put_repr(r, b, &v->list->items[k]);
        }
        if (kind == L_TUPLE && v->list->n == 1) puts_(r, b, ",");
        return puts_(r, b, close[kind]);
    }
    case V_DICT:
    case V_NS:
        puts_(r, b, v->k == V_NS ? "<Namespace {" : "{");
        for (size_t k = 0; k < v->dict->n; k++) {
            if (k) puts_(r, b, ", ");
            const Val key = str_val(v->dict->keys[k], v->dict->klen[k]);
            put_repr(r, b, &key);
            puts_(r, b, ": ");
            put_repr(r, b, &v->dict->vals[k]);
        }
        return puts_(r, b, v->k == V_NS ? "}>" : "}");
    case V_MACRO: case V_METHOD: case V_BUILTIN: return puts_(r, b, "<function>");
    default: return put_str(r, b, v);
    }
}

/* json.dumps(v, ensure_ascii=False, indent=indent, separators=(item, key)), as transformers' tojson. */
static void put_json(Render *r, Buf *b, const Val *v, int indent, int level, const char *item, const char *key,
                     int line) {
    if (level >= NEST_LIMIT) fail(r, line, "a value nested deeper than 500 levels for tojson");
    switch (v->k) {
    case V_NONE: return puts_(r, b, "null");
    case V_BOOL: return puts_(r, b, v->i ? "true" : "false");
    case V_INT: case V_FLOAT:
        if (v->k == V_FLOAT && isnan(v->f)) return puts_(r, b, "NaN");
        if (v->k == V_FLOAT && isinf(v->f)) return puts_(r, b, v->f < 0 ? "-Infinity" : "Infinity");
        return put_str(r, b, v);
    case V_STR:
        put(r, b, "\"", 1);
        for (size_t k = 0; k < v->n; k++) {
            const unsigned char c = (unsigned char)v->s[k];
            char esc[8];
            if (c == '"') puts_(r, b, "\\\"");
            else if (c == '\\') puts_(r, b, "\\\\");
            else if (c == '\n') puts_(r, b, "\\n");
            else if (c == '\r') puts_(r, b, "\\r");
            else if (c == '\t') puts_(r, b, "\\t");
            else if (c == '\b') puts_(r, b, "\\b");
            else if (c == '\f') puts_(r, b, "\\f");
            else if (c < 0x20) snprintf(esc, sizeof esc, "\\u%04x", c), puts_(r, b, esc);
            else put(r, b, (const char *)&c, 1);
        }
        return put(r, b, "\"", 1);
    case V_LIST: case V_DICT: case V_NS: {
        const int dict = v->k != V_LIST;
        const size_t n = dict ? v->dict->n : v->list->n;
        put(r, b, dict ? "{" : "[", 1);
        for (size_t k = 0; k < n; k++) {
            if (k) puts_(r, b, item);
            if (indent >= 0) {
                put(r, b, "\n", 1);
                for (int s = 0; s < indent * (level + 1); s++) put(r, b, " ", 1);
            }
            if (dict) {
                const Val name = str_val(v->dict->keys[k], v->dict->klen[k]);
                put_json(r, b, &name, indent, level + 1, item, key, line);
                puts_(r, b, key);
                put_json(r, b, &v->dict->vals[k], indent, level + 1, item, key, line);
            } else {
                put_json(r, b, &v->list->items[k], indent, level + 1, item, key, line);
            }
        }
        if (indent >= 0 && n) {
            put(r, b, "\n", 1);
            for (int s = 0; s < indent * level; s++) put(r, b, " ", 1);
        }
        return put(r, b, dict ? "}" : "]", 1);
    }
    default: fail(r, line, "tojson of %s", kind_name(v));
    }
}

/* ---- truth, equality, order ---- */

static int truthy(const Val *v) {
    switch (v->k) {
    case V_UNDEF: case V_NONE: return 0;
    case V_BOOL: case V_INT: return v->i != 0;
    case V_FLOAT: return v->f != 0.0;
    case V_STR: return v->n != 0;
    case V_LIST: return v->list->n != 0;
    case V_DICT: return v->dict->n != 0;
    default: return 1;
    }
}

static int is_num(const Val *v) { return v->k == V_BOOL || v->k == V_INT || v->k == V_FLOAT; }
static double num(const Val *v) { return v->k == V_FLOAT ? v->f : (double)v->i; }

static int equal(Render *r, const Val *a, const Val *b);

static int equal_items(Render *r, const Val *a, const Val *b) {
    if (is_num(a) && is_num(b)) return a->k != V_FLOAT && b->k != V_FLOAT ? a->i == b->i : num(a) == num(b);
    if (a->k != b->k) return 0;
    switch (a->k) {
    case V_UNDEF: case V_NONE: return 1;
    case V_STR: return a->n == b->n && !memcmp(a->s, b->s, a->n);
    case V_LIST:
        if (a->list->n != b->list->n || a->list->kind != b->list->kind) return 0;
        for (size_t k = 0; k < a->list->n; k++)
            if (!equal(r, &a->list->items[k], &b->list->items[k])) return 0;
        return 1;
    case V_DICT:
        if (a->dict->n != b->dict->n) return 0;
        for (size_t k = 0; k < a->dict->n; k++) {
            const Val *other = dict_find(b->dict, a->dict->keys[k], a->dict->klen[k]);
            if (!other || !equal(r, &a->dict->vals[k], other)) return 0;
        }
        return 1;
    default: return a->dict == b->dict && a->macro == b->macro && a->i == b->i;
    }
}

static int equal(Render *r, const Val *a, const Val *b) {
    enter(r, 0);
    const int same = equal_items(r, a, b);
    leave(r);
    return same;
}

/* <0, 0, >0 as a is below, equal to or above b; an error for values Python does not order. */
static int order_items(Render *r, const Val *a, const Val *b, int line);

static int order(Render *r, const Val *a, const Val *b, int line) {
    enter(r, line);
    const int c = order_items(r, a, b, line);
    leave(r);
    return c;
}

static int order_items(Render *r, const Val *a, const Val *b, int line) {
    if (is_num(a) && is_num(b)) return (num(a) > num(b)) - (num(a) < num(b));
    if (a->k == V_STR && b->k == V_STR) {
        const int c = memcmp(a->s, b->s, a->n < b->n ? a->n : b->n); /* UTF-8 bytes order as code points do */
        return c ? c : (a->n > b->n) - (a->n < b->n);
    }
    if (a->k == V_LIST && b->k == V_LIST) {
        for (size_t k = 0; k < a->list->n && k < b->list->n; k++) {
            const int c = order(r, &a->list->items[k], &b->list->items[k], line);
            if (c) return c;
        }
        return (a->list->n > b->list->n) - (a->list->n < b->list->n);
    }
    fail(r, line, "%s and %s cannot be compared", kind_name(a), kind_name(b));
    return 0;
}

/* ---- strings by character, as Python indexes them ---- */

static size_t utf8_chars(const char *s, size_t n) {
    size_t c = 0;
    for (size_t k = 0; k < n; k++) c += ((unsigned char)s[k] & 0xC0) != 0x80;
    return c;
}

/* The byte offset of character i of s (n bytes; i may be the count, giving n). */
static size_t utf8_offset(const char *s, size_t n, size_t i) {
    size_t k = 0;
    for (size_t c = 0; k < n; k++)
        if (((unsigned char)s[k] & 0xC0) != 0x80 && c++ == i) return k;
    return n;
}

static size_t length_of(Render *r, const Val *v, int line) {
    switch (v->k) {
    case V_UNDEF: return 0;
    case V_STR: return utf8_chars(v->s, v->n);
    case V_LIST: return v->list->n;
    case V_DICT: case V_NS: return v->dict->n;
    default: fail(r, line, "%s has no length", kind_name(v));
    }
    return 0;
}

/* The items a for loop or a filter walks: a list's, a dict's keys, a string's characters. */
static List items_of(Render *r, const Val *v, int line) {
    List l = {0};
    switch (v->k) {
    case V_UNDEF: return l;
    case V_LIST: return *v->list;
    case V_DICT: case V_NS:
        l.items = alloc(r, (v->dict->n + 1) * sizeof *l.items);
        for (size_t k = 0; k < v->dict->n; k++) l.items[l.n++] = str_val(v->dict->keys[k], v->dict->klen[k]);
        return l;
    case V_STR:
        l.items = alloc(r, (v->n + 1) * sizeof *l.items);
        for (size_t k = 0; k < v->n;) {
            size_t e = k + 1;
            while (e < v->n && ((unsigned char)v->s[e] & 0xC0) == 0x80) e++;
            l.items[l.n++] = str_val(v->s + k, e - k);
            k = e;
        }
        return l;
    default: fail(r, line, "%s cannot be iterated", kind_name(v));
    }
    return l;
}

/* Python's index i (negative from the end) into a sequence of n, or -1 when outside it. */
static long long python_index(long long i, size_t n) {
    if (i < 0) i += (long long)n;
    return i >= 0 && i < (long long)n ? i : -1;
}

static Val slice(Render *r, const Val *v, const Val *parts, int line) {
    const int is_str = v->k == V_STR;
    if (!is_str && v->k != V_LIST) fail(r, line, "%s cannot be sliced", kind_name(v));
    const long long n = (long long)(is_str ? utf8_chars(v->s, v->n) : v->list->n);
    const Val *by = &parts[2];
    if (by->k != V_NONE && by->k != V_UNDEF && by->k != V_INT && by->k != V_BOOL)
        fail(r, line, "a slice step that is %s", kind_name(by));
    long long step = by->k == V_NONE || by->k == V_UNDEF ? 1 : by->i;
    if (step == 0) fail(r, line, "a slice step of 0");
    long long bound[2];
    for (int k = 0; k < 2; k++) {
        const Val *p = &parts[k];
        if (p->k == V_NONE || p->k == V_UNDEF) {
            bound[k] = step > 0 ? (k ? n : 0) : (k ? -1 : n - 1);
            continue;
        }
        if (p->k != V_INT && p->k != V_BOOL) fail(r, line, "a slice bound that is %s", kind_name(p));
        long long i = p->i < 0 ? p->i + n : p->i;
        if (step > 0) i = i < 0 ? 0 : i > n ? n : i;
        else i = i < -1 ? -1 : i > n - 1 ? n - 1 : i;
        bound[k] = i;
    }
    Val out = list_val(r, 0);
    List chars = is_str ? items_of(r, v, line) : *v->list;
    Buf b = {0};
    out.list->items = alloc(r, ((size_t)n + 1) * sizeof *out.list->items);
    put(r, &b, "", 0);
    for (long long i = bound[0]; step > 0 ? i < bound[1] : i > bound[1];) {
        if (is_str) put(r, &b, chars.items[i].s, chars.items[i].n);
        else out.list->items[out.list->n++] = chars.items[i];
        if (step > 0 ? step >= bound[1] - i : step <= bound[1] - i) break; /* the next would pass the end */
        i += step;
    }
    return is_str ? buf_val(&b) : out;
}

/* ---- attributes and items ---- */

static int method_id(const char *name, int first, int last) {
    for (int k = first; k <= last; k++)
        if (!strcmp(name, METHOD_NAMES[k])) return k;
    return -1;
}

static Val method_of(Render *r, const Val *obj, int which) {
    Val *self = alloc(r, sizeof *self);
    *self = *obj;
    return (Val){.k = V_METHOD, .i = which, .self = self};
}

/* An undefined value's name, quoted, for a message: 'x', or "a value". */
static const char *undef_name(Render *r, const Val *v) {
    if (!v->s) return "a value";
    char *q = alloc(r, strlen(v->s) + 3);
    sprintf(q, "'%s'", v->s);
    return q;
}

/* obj.name as Jinja's getattr takes it: a method of the object, else its item. */
static Val attribute(Render *r, const Val *obj, const char *name, int line) {
    if (obj->k == V_UNDEF) fail(r, line, "%s is undefined, so it has no attribute '%s'", undef_name(r, obj), name);
    int m;
    if (obj->k == V_STR && (m = method_id(name, M_STARTSWITH, M_RPARTITION)) >= 0) return method_of(r, obj, m);
    if (obj->k == V_DICT && (m = method_id(name, M_GET, M_VALUES)) >= 0) return method_of(r, obj, m);
    if (obj->k == V_DICT || obj->k == V_NS) {
        const Val *v = dict_find(obj->dict, name, strlen(name));
        if (v) return *v;
    }
    return undef(name);
}

/* obj[key] as Jinja's getitem takes it: the item, else the attribute a string key names. */
static Val item(Render *r, const Val *obj, const Val *key, int line) {
    if (obj->k == V_UNDEF) fail(r, line, "%s is undefined, so it has no items", undef_name(r, obj));
    if ((obj->k == V_DICT || obj->k == V_NS) && key->k == V_STR) {
        const Val *v = dict_find(obj->dict, key->s, key->n);
        if (v) return *v;
    }
    if ((obj->k == V_LIST || obj->k == V_STR) && (key->k == V_INT || key->k == V_BOOL)) {
        const size_t n = obj->k == V_LIST ? obj->list->n : utf8_chars(obj->s, obj->n);
        const long long i = python_index(key->i, n);
        if (i < 0) return undef("an index past the end");
        if (obj->k == V_LIST) return obj->list->items[i];
        const size_t a = utf8_offset(obj->s, obj->n, (size_t)i), b = utf8_offset(obj->s, obj->n, (size_t)i + 1);
        return str_val(obj->s + a, b - a);
    }
    if (key->k == V_STR) {
        char *name = alloc(r, key->n + 1);
        memcpy(name, key->s, key->n);
        return attribute(r, obj, name, line);
    }
    return undef("an item");
}

/* ---- evaluation ---- */

static Val eval(Render *r, const Expr *e, Frame *f);
static void exec_body(Render *r, const Body *body, Frame *f, Buf *out);

/* A frame whose names hide parent's, in the arena (it lives as long as the render: a macro may keep it). */
static Frame *new_frame(Render *r, Frame *parent) {
    Frame *g = alloc(r, sizeof *g);
    g->parent = parent;
    return g;
}

static Val lookup(Frame *f, const char *name) {
    for (; f; f = f->parent) {
        const Val *v = dict_find(&f->vars, name, strlen(name));
        if (v) return *v;
    }
    for (int k = 0; k < (int)(sizeof BUILTIN_NAMES / sizeof BUILTIN_NAMES[0]); k++)
        if (!strcmp(name, BUILTIN_NAMES[k])) return (Val){.k = V_BUILTIN, .i = k};
    return undef(name);
}

static const char *need_str(Render *r, const Val *v, const char *what, int line) {
    if (v->k != V_STR) fail(r, line, "%s must be a string, not %s", what, kind_name(v));
    return v->s;
}

static long long need_int(Render *r, const Val *v, const char *what, int line);

/* Whether code point cp is among the characters of chars (a string), or white space when chars is
 * NULL or none. */
static int strip_char(uint32_t cp, const Val *chars) {
    if (!chars || chars->k != V_STR) return py_isspace(cp);
    for (size_t k = 0; k < chars->n;)
        if (py_utf8_next(chars->s, chars->n, &k) == cp) return 1;
    return 0;
}

/* The byte where the character before byte b of s starts. */
static size_t char_before(const char *s, size_t b) {
    do b--;
    while (b > 0 && ((unsigned char)s[b] & 0xC0) == 0x80);
    return b;
}

static Val strip(Render *r, const Val *s, const Val *chars, int left, int right, int line) {
    if (chars && chars->k != V_STR && chars->k != V_NONE) fail(r, line, "strip's characters must be a string or none");
    size_t a = 0, b = s->n;
    while (left && a < b) {
        size_t next = a;
        if (!strip_char(py_utf8_next(s->s, b, &next), chars)) break;
        a = next;
    }
    while (right && b > a) {
        size_t at = char_before(s->s, b), k = at;
        if (at < a || !strip_char(py_utf8_next(s->s, b, &k), chars)) break;
        b = at;
    }
    return str_val(s->s + a, b - a);
}

static const char *find_bytes(const char *h, size_t hn, const char *n, size_t nn) {
    if (nn == 0) return h;
    for (size_t k = 0; k + nn <= hn; k++)
        if (!memcmp(h + k, n, nn)) return h + k;
    return NULL;
}

static const char *rfind_bytes(const char *h, size_t hn, const char *n, size_t nn) {
    for (size_t k = hn - (nn <= hn ? nn : hn) + 1; nn <= hn && k-- > 0;)
        if (!memcmp(h + k, n, nn)) return h + k;
    return NULL;
}

/* s split at runs of white space (sep none) or at sep, from the left, or from the right (rsplit),
 * at most max times (max < 0: no bound). */
static Val split(Render *r, const Val *s, const Val *sep, long long max, int from_right, int line) {
    Val out = list_val(r, 0);
    Val *parts = alloc(r, (s->n + 2) * sizeof *parts);
    size_t n = 0;
    const int white = !sep || sep->k == V_NONE;
    if (!white) {
        need_str(r, sep, "split's separator", line);
        if (!sep->n) fail(r, line, "split with an empty separator");
    }
    size_t a = 0, b = s->n; /* what is left to split */
    for (;;) {
        if (white) { /* the ends' white space is never a part */
            Val rest = strip(r, &(Val){.k = V_STR, .s = s->s + a, .n = b - a}, NULL, !from_right, from_right, line);
            a = (size_t)(rest.s - s->s), b = a + rest.n;
            if (a == b) break;
        }
        const int last = max >= 0 && (long long)n == max;
        size_t at = 0, len = 0; /* the separator found: bytes [at, at + len) */
        int found = 0;
        if (!last && white) { /* the first (last) run of white space */
            size_t k = from_right ? b : a;
            while (!found && (from_right ? k > a : k < b)) {
                size_t c = from_right ? char_before(s->s, k) : k, next = c;
                if (py_isspace(py_utf8_next(s->s, s->n, &next))) found = 1, at = c, len = next - c;
                else k = from_right ? c : next;
            }
            while (found && !from_right && at + len < b) { /* the whole run */
                size_t next = at + len;
                if (!py_isspace(py_utf8_next(s->s, s->n, &next))) break;
                len = next - at;
            }
            while (found && from_right && at > a) {
                size_t c = char_before(s->s, at), next = c;
                if (!py_isspace(py_utf8_next(s->s, s->n, &next))) break;
                len += at - c, at = c;
            }
        } else if (!last) {
            const char *hit = from_right ? rfind_bytes(s->s + a, b - a, sep->s, sep->n)
                                         : find_bytes(s->s + a, b - a, sep->s, sep->n);
            if (hit) found = 1, at = (size_t)(hit - s->s), len = sep->n;
        }
        if (!found) {
            parts[n++] = str_val(s->s + a, b - a);
            break;
        }
        if (from_right) parts[n++] = str_val(s->s + at + len, b - at - len), b = at;
        else parts[n++] = str_val(s->s + a, at - a), a = at + len;
    }
    out.list->items = parts;
    out.list->n = n;
    for (size_t k = 0; from_right && k < n / 2; k++) { /* rsplit found its parts last first */
        const Val t = parts[k];
        parts[k] = parts[n - 1 - k], parts[n - 1 - k] = t;
    }
    return out;
}

/* str.splitlines(keepends). */
static Val split_lines(Render *r, const Val *s, int keep_ends) {
    Val out = list_val(r, 0);
    out.list->items = alloc(r, (s->n + 1) * sizeof *out.list->items);
    for (size_t a = 0, k = 0; a < s->n; a = k) {
        size_t end = s->n;
        for (k = a; k < s->n;) {
            const size_t at = k;
            const uint32_t cp = py_utf8_next(s->s, s->n, &k);
            if (!py_is_line_end(cp)) continue;
            if (cp == '\r' && k < s->n && s->s[k] == '\n') k++;
            end = at;
            break;
        }
        out.list->items[out.list->n++] = str_val(s->s + a, (keep_ends ? k : end) - a);
    }
    return out;
}

static Val case_map(Render *r, const Val *s, PyCase mode) {
    char *o = alloc(r, 3 * s->n + 1);
    return str_val(o, py_case(s->s, s->n, mode, o));
}

/* Python's slice bounds of a string's characters [start, end) as bytes of s: 0 when start lies past
 * the end or past end, where find gives -1 and startswith false even for an empty text. */
static int char_range(Render *r, const Val *s, const Val *start, const Val *end, size_t *a, size_t *b, int line) {
    const long long n = (long long)utf8_chars(s->s, s->n);
    long long i = start && start->k != V_NONE ? need_int(r, start, "the start", line) : 0;
    long long j = end && end->k != V_NONE ? need_int(r, end, "the end", line) : n;
    if (i < 0) i = i + n < 0 ? 0 : i + n;
    if (j < 0) j = j + n < 0 ? 0 : j + n;
    if (j > n) j = n;
    if (i > n || j < i) return 0; /* Python: end - start below the text's length, even for an empty one */
    *a = utf8_offset(s->s, s->n, (size_t)i), *b = utf8_offset(s->s, s->n, (size_t)j);
    return 1;
}

/* str.startswith / endswith of a text or of a tuple of texts, within [start, end). */
static int starts_or_ends(Render *r, const Val *s, const Val *with, int ends, const Val *start, const Val *end,
                          int line) {
    size_t a, b;
    if (with && with->k == V_LIST && with->list->kind == L_TUPLE) {
        for (size_t k = 0; k < with->list->n; k++)
            if (starts_or_ends(r, s, &with->list->items[k], ends, start, end, line)) return 1;
        return 0;
    }
    need_str(r, with ? with : &(Val){.k = V_UNDEF}, ends ? "endswith's text" : "startswith's text", line);
    if (!char_range(r, s, start, end, &a, &b, line) || with->n > b - a) return 0;
    return !memcmp(ends ? s->s + b - with->n : s->s + a, with->s, with->n);
}

static Val replace(Render *r, const Val *s, const Val *old, const Val *new_, long long count, int line) {
    need_str(r, old, "replace's old text", line);
    need_str(r, new_, "replace's new text", line);
    Buf b = {0};
    size_t k = 0;
    put(r, &b, "", 0);
    for (long long done = 0; count < 0 || done < count; done++) {
        if (!old->n) { /* Python puts the new text before each character and at the end */
            put(r, &b, new_->s, new_->n);
            if (k == s->n) break;
            const size_t at = k;
            py_utf8_next(s->s, s->n, &k);
            put(r, &b, s->s + at, k - at);
            continue;
        }
        const char *at = find_bytes(s->s + k, s->n - k, old->s, old->n);
        if (!at) break;
        put(r, &b, s->s + k, (size_t)(at - s->s) - k);
        put(r, &b, new_->s, new_->n);
        k = (size_t)(at - s->s) + old->n;
    }
    put(r, &b, s->s + k, s->n - k);
    return buf_val(&b);
}

static Val join(Render *r, const Val *seq, const Val *sep, int line) {
    List l = items_of(r, seq, line);
    Buf b = {0};
    put(r, &b, "", 0);
    for (size_t k = 0; k < l.n; k++) {
        if (k && sep) put(r, &b, sep->s, sep->n);
        put_str(r, &b, &l.items[k]);
    }
    return buf_val(&b);
}

/* Arguments as evaluated: positional args[0..na), then keyword (names, vals)[0..nk). */
typedef struct {
    Val args[8];
    size_t na;
    const char *names[8];
    Val kw[8];
    size_t nk;
} Args;

static void eval_args(Render *r, const Expr *e, Frame *f, Args *a) {
    a->na = 0, a->nk = 0;
    if (e->nargs > 8 || e->nkw > 8) fail(r, e->line, "more than 8 arguments");
    for (size_t k = 0; k < e->nargs; k++) a->args[a->na++] = eval(r, e->args[k], f);
    for (size_t k = 0; k < e->nkw; k++) a->names[k] = e->kwnames[k], a->kw[a->nk++] = eval(r, e->kwargs[k], f);
}

/* Keyword argument `name`, or NULL. */
static const Val *kwarg(const Args *a, const char *name) {
    for (size_t k = 0; name && k < a->nk; k++)
        if (!strcmp(a->names[k], name)) return &a->kw[k];
    return NULL;
}

/* Argument `pos`, or keyword `name`, or NULL. */
static const Val *arg(const Args *a, size_t pos, const char *name) {
    if (pos < a->na) return &a->args[pos];
    return kwarg(a, name);
}

static long long need_int(Render *r, const Val *v, const char *what, int line) {
    if (!v || (v->k != V_INT && v->k != V_BOOL)) fail(r, line, "%s must be an integer", what);
    return v->i;
}

/* A string padded to width characters with fill: on the right (ljust), left (rjust) or both. */
static Val pad(Render *r, const Val *s, const Args *a, int which, int line) {
    const long long width = need_int(r, arg(a, 0, NULL), "the width", line);
    const Val *fill = arg(a, 1, NULL);
    if (fill && (fill->k != V_STR || utf8_chars(fill->s, fill->n) != 1)) fail(r, line, "the fill must be one character");
    const long long n = (long long)utf8_chars(s->s, s->n);
    if (width <= n) return *s;
    if (width > (1 << 26)) fail(r, line, "a width past 64M characters");
    const long long extra = width - n;
    /* Python's center puts the odd character on the left when the width is odd */
    const long long left = which == M_LJUST ? 0 : which == M_RJUST ? extra : extra / 2 + (extra & width & 1);
    Buf b = {0};
    put(r, &b, "", 0);
    for (long long k = 0; k < extra; k++) {
        if (k == left) put(r, &b, s->s, s->n);
        put(r, &b, fill ? fill->s : " ", fill ? fill->n : 1);
    }
    if (left == extra) put(r, &b, s->s, s->n);
    return buf_val(&b);
}

static Val call_method(Render *r, const Val *self, int which, const Args *a, int line) {
    const Val *a0 = arg(a, 0, NULL), *a1 = arg(a, 1, NULL);
    switch (which) {
    case M_STARTSWITH: case M_ENDSWITH:
        return bool_val(starts_or_ends(r, self, a0, which == M_ENDSWITH, a1, arg(a, 2, NULL), line));
    case M_STRIP: return strip(r, self, a0, 1, 1, line);
    case M_LSTRIP: return strip(r, self, a0, 1, 0, line);
    case M_RSTRIP: return strip(r, self, a0, 0, 1, line);
    case M_SPLIT: case M_RSPLIT: {
        const Val *max = arg(a, 1, "maxsplit");
        return split(r, self, arg(a, 0, "sep"), max ? need_int(r, max, "maxsplit", line) : -1, which == M_RSPLIT, line);
    }
    case M_SPLITLINES: {
        const Val *keep = arg(a, 0, "keepends");
        return split_lines(r, self, keep && truthy(keep));
    }
    case M_UPPER: return case_map(r, self, PY_UPPER);
    case M_LOWER: return case_map(r, self, PY_LOWER);
    case M_TITLE: return case_map(r, self, PY_TITLE);
    case M_CAPITALIZE: return case_map(r, self, PY_CAPITALIZE);
    case M_SWAPCASE: return case_map(r, self, PY_SWAPCASE);
    case M_REPLACE: {
        if (!a0 || !a1) fail(r, line, "replace takes the old and the new text");
        const Val *count = arg(a, 2, "count");
        return replace(r, self, a0, a1, count ? need_int(r, count, "replace's count", line) : -1, line);
    }
    case M_FIND: case M_RFIND: case M_INDEX: case M_RINDEX: case M_COUNT: {
        need_str(r, a0 ? a0 : &(Val){.k = V_UNDEF}, METHOD_NAMES[which], line);
        size_t lo, hi;
        const int in_range = char_range(r, self, a1, arg(a, 2, NULL), &lo, &hi, line);
        const size_t skip = in_range ? utf8_chars(self->s, lo) : 0;
        if (which == M_COUNT) {
            long long count = 0;
            for (size_t k = lo; in_range && k + a0->n <= hi;) {
                const char *at = find_bytes(self->s + k, hi - k, a0->s, a0->n);
                if (!at) break;
                count++;
                k = (size_t)(at - self->s) + (a0->n ? a0->n : 1);
                if (!a0->n && k > hi) break;
            }
            if (in_range && !a0->n) count = (long long)utf8_chars(self->s + lo, hi - lo) + 1;
            return int_val(count);
        }
        const int right = which == M_RFIND || which == M_RINDEX;
        const char *at = !in_range ? NULL : right ? rfind_bytes(self->s + lo, hi - lo, a0->s, a0->n)
                                                  : find_bytes(self->s + lo, hi - lo, a0->s, a0->n);
        if (!at && (which == M_INDEX || which == M_RINDEX)) fail(r, line, "%s: substring not found", METHOD_NAMES[which]);
        return int_val(at ? (long long)(skip + utf8_chars(self->s + lo, (size_t)(at - self->s) - lo)) : -1);
    }
    case M_REMOVEPREFIX: case M_REMOVESUFFIX: {
        need_str(r, a0 ? a0 : &(Val){.k = V_UNDEF}, METHOD_NAMES[which], line);
        const int suffix = which == M_REMOVESUFFIX;
        if (a0->n > self->n || memcmp(suffix ? self->s + self->n - a0->n : self->s, a0->s, a0->n)) return *self;
        return str_val(suffix ? self->s : self->s + a0->n, self->n - a0->n);
    }
    case M_ISALPHA: case M_ISALNUM: case M_ISDIGIT: case M_ISDECIMAL: case M_ISNUMERIC: case M_ISSPACE:
    case M_ISLOWER: case M_ISUPPER: case M_ISTITLE:
        return bool_val(py_str_is(self->s, self->n, (PyIs)(which - M_ISALPHA)));
    case M_LJUST: case M_RJUST: case M_CENTER: return pad(r, self, a, which, line);
    case M_ZFILL: { /* zeros after the sign */
        const long long width = need_int(r, a0, "zfill's width", line), n = (long long)utf8_chars(self->s, self->n);
        if (width <= n) return *self;
        if (width > (1 << 26)) fail(r, line, "a width past 64M characters");
        const int sign = self->n && (self->s[0] == '+' || self->s[0] == '-');
        Buf b = {0};
        put(r, &b, self->s, (size_t)sign);
        for (long long k = 0; k < width - n; k++) put(r, &b, "0", 1);
        put(r, &b, self->s + sign, self->n - (size_t)sign);
        return buf_val(&b);
    }
    case M_PARTITION: case M_RPARTITION: {
        need_str(r, a0 ? a0 : &(Val){.k = V_UNDEF}, METHOD_NAMES[which], line);
        if (!a0->n) fail(r, line, "%s with an empty separator", METHOD_NAMES[which]);
        const char *at = which == M_PARTITION ? find_bytes(self->s, self->n, a0->s, a0->n)
                                              : rfind_bytes(self->s, self->n, a0->s, a0->n);
        Val out = list_val(r, 3);
        out.list->kind = L_TUPLE;
        const Val empty = str_val("", 0);
        if (!at) {
            out.list->items[0] = which == M_PARTITION ? *self : empty;
            out.list->items[1] = empty;
            out.list->items[2] = which == M_PARTITION ? empty : *self;
            return out;
        }
        const size_t k = (size_t)(at - self->s);
        out.list->items[0] = str_val(self->s, k);
        out.list->items[1] = str_val(at, a0->n);
        out.list->items[2] = str_val(at + a0->n, self->n - k - a0->n);
        return out;
    }
    case M_JOIN: if (!a0) fail(r, line, "join takes a sequence"); return join(r, a0, self, line);
    case M_GET: {
        if (!a0) fail(r, line, "get takes a key");
        const Val *v = a0->k == V_STR ? dict_find(self->dict, a0->s, a0->n) : NULL;
        return v ? *v : a1 ? *a1 : (Val){.k = V_NONE};
    }
    case M_ITEMS: case M_KEYS: case M_VALUES: {
        Val out = list_val(r, self->dict->n);
        out.list->kind = which == M_ITEMS ? L_DICT_ITEMS : which == M_KEYS ? L_DICT_KEYS : L_DICT_VALUES;
        for (size_t k = 0; k < self->dict->n; k++) {
            const Val key = str_val(self->dict->keys[k], self->dict->klen[k]);
            if (which == M_KEYS) out.list->items[k] = key;
            else if (which == M_VALUES) out.list->items[k] = self->dict->vals[k];
            else {
                Val pair = list_val(r, 2);
                pair.list->kind = L_TUPLE;
                pair.list->items[0] = key, pair.list->items[1] = self->dict->vals[k];
                out.list->items[k] = pair;
            }
        }
        return out;
    }
    }
    return (Val){.k = V_NONE};
}

static Val call_macro(Render *r, const Val *macro, const Args *a, int line) {
    const Stmt *m = macro->macro;
    if (a->na > m->nnames - 1) fail(r, line, "macro %s takes %zu arguments, not %zu", m->names[0], m->nnames - 1, a->na);
    if (++r->depth > 64) fail(r, line, "macros call each other more than 64 deep");
    Frame *f = new_frame(r, macro->scope);
    for (size_t k = 1; k < m->nnames; k++) {
        const Val *v = arg(a, k - 1, m->names[k]);
        const Val value = v ? *v : m->defaults[k] ? eval(r, m->defaults[k], f) : undef(m->names[k]);
        dict_set(r, &f->vars, m->names[k], strlen(m->names[k]), value);
    }
    Buf out = {0};
    put(r, &out, "", 0);
    exec_body(r, &m->body, f, &out);
    r->depth--;
    return buf_val(&out);
}

static Val call_builtin(Render *r, int which, const Args *a, int line) {
    switch (which) {
    case F_NAMESPACE: case F_DICT: {
        Val d = dict_val(r, which == F_NAMESPACE ? V_NS : V_DICT);
        const Val *from = arg(a, 0, NULL);
        if (from && from->k == V_DICT)
            for (size_t k = 0; k < from->dict->n; k++)
                dict_set(r, d.dict, from->dict->keys[k], from->dict->klen[k], from->dict->vals[k]);
        for (size_t k = 0; k < a->nk; k++) dict_set(r, d.dict, a->names[k], strlen(a->names[k]), a->kw[k]);
        return d;
    }
    case F_RANGE: {
        long long lo = 0, hi, step = 1;
        if (a->na == 1) hi = need_int(r, &a->args[0], "range's end", line);
        else {
            lo = need_int(r, arg(a, 0, NULL), "range's start", line);
            hi = need_int(r, arg(a, 1, NULL), "range's end", line);
            if (a->na > 2) step = need_int(r, &a->args[2], "range's step", line);
        }
        if (step == 0) fail(r, line, "range with a step of 0");
        const __int128 span = step > 0 ? (__int128)hi - lo : (__int128)lo - hi, stride = step > 0 ? step : -(__int128)step;
        const __int128 count128 = span > 0 ? (span + stride - 1) / stride : 0;
        if (count128 > 10000000) fail(r, line, "range of more than 10000000 numbers");
        const long long count = (long long)count128;
        Val out = list_val(r, (size_t)count);
        for (long long k = 0; k < count; k++) out.list->items[k] = int_val(lo + k * step);
        return out;
    }
    case F_RAISE: {
        const Val *m = arg(a, 0, NULL);
        Buf b = {0};
        put(r, &b, "", 0);
        if (m) put_str(r, &b, m);
        fail(r, line, "the template raised an error: %s", b.s);
    }
    case F_STRFTIME: {
        const Val *fmt = arg(a, 0, NULL);
        need_str(r, fmt ? fmt : &(Val){.k = V_UNDEF}, "strftime_now's format", line);
        const time_t now = time(NULL);
        struct tm tm;
        localtime_r(&now, &tm);
        char *out = alloc(r, 256), *cfmt = alloc(r, fmt->n + 1);
        memcpy(cfmt, fmt->s, fmt->n);
        const size_t n = strftime(out, 256, cfmt, &tm);
        return str_val(out, n);
    }
    }
    return (Val){.k = V_NONE};
}

static Val call(Render *r, const Val *fn, const Args *a, int line) {
    switch (fn->k) {
    case V_METHOD: return call_method(r, fn->self, (int)fn->i, a, line);
    case V_MACRO: return call_macro(r, fn, a, line);
    case V_BUILTIN: return call_builtin(r, (int)fn->i, a, line);
    case V_UNDEF: fail(r, line, "%s is undefined, so it cannot be called", undef_name(r, fn));
    default: fail(r, line, "%s cannot be called", kind_name(fn));
    }
    return (Val){.k = V_NONE};
}

static int test(Render *r, const char *name, const Val *v, const Args *a, int line);

/* Jinja's filter `name` of v. */
static Val arithmetic(Render *r, BinOp op, const Val *a, const Val *b, int line);

/* ---- filters over sequences, and the rest of Jinja's text and number filters ---- */

/* An item's attribute as Jinja's make_attrgetter reads it: dotted parts ("user.name"), a part of
 * digits an index; with fold, a string lower-cased (the filters' case_sensitive=False). */
static Val attr_path(Render *r, const Val *v, const Val *path, int fold, int line) {
    Val got = *v;
    if (path && path->k == V_INT) got = item(r, v, path, line);
    else if (path && path->k != V_NONE) {
        need_str(r, path, "the attribute", line);
        for (size_t a = 0, b; a <= path->n; a = b + 1) {
            for (b = a; b < path->n && path->s[b] != '.';) b++;
            Val key = str_val(path->s + a, b - a);
            if (b > a && strspn(key.s, "0123456789") >= b - a) key = int_val(strtoll(key.s, NULL, 10));
            got = item(r, &got, &key, line);
        }
    }
    if (fold && got.k == V_STR) got = case_map(r, &got, PY_LOWER);
    return got;
}

/* The items of v ordered by keys[] as Python's sorted() orders them: stable, reverse keeping equal
 * items in their order. In place; merge sort, as keys may be any comparable values. */
static void sort_by_keys(Render *r, Val *items, Val *keys, size_t n, int reverse, int line) {
    if (n < 2) return;
    const size_t h = n / 2;
    sort_by_keys(r, items, keys, h, reverse, line);
    sort_by_keys(r, items + h, keys + h, n - h, reverse, line);
    Val *ti = alloc(r, n * sizeof *ti), *tk = alloc(r, n * sizeof *tk);
    size_t i = 0, j = h, k = 0;
    while (i < h && j < n) {
        const int c = order(r, &keys[j], &keys[i], line);
        const int right_first = reverse ? c > 0 : c < 0;
        const size_t from = right_first ? j++ : i++;
        ti[k] = items[from], tk[k++] = keys[from];
    }
    while (i < h) ti[k] = items[i], tk[k++] = keys[i++];
    while (j < n) ti[k] = items[j], tk[k++] = keys[j++];
    memcpy(items, ti, n * sizeof *ti);
    memcpy(keys, tk, n * sizeof *tk);
}

/* A list's keys for sort, unique, min and max: each item's attribute (or itself), folded unless
 * case_sensitive. The attribute of sort may be several, comma-separated: a tuple of them. */
static Val *item_keys(Render *r, const List *l, const Args *a, int many, int line) {
    const Val *attr = kwarg(a, "attribute"), *cs = kwarg(a, "case_sensitive");
    const int fold = !(cs && truthy(cs));
    Val *keys = alloc(r, (l->n + 1) * sizeof *keys);
    for (size_t k = 0; k < l->n; k++) {
        if (!many || !attr || attr->k != V_STR || !memchr(attr->s, ',', attr->n)) {
            keys[k] = attr_path(r, &l->items[k], attr, fold, line);
            continue;
        }
        Val tuple = list_val(r, 0);
        tuple.list->kind = L_TUPLE;
        tuple.list->items = alloc(r, (attr->n + 1) * sizeof(Val));
        for (size_t s = 0, e; s <= attr->n; s = e + 1) {
            for (e = s; e < attr->n && attr->s[e] != ',';) e++;
            const Val one = str_val(attr->s + s, e - s);
            tuple.list->items[tuple.list->n++] = attr_path(r, &l->items[k], &one, fold, line);
        }
        keys[k] = tuple;
    }
    return keys;
}

/* a's positional arguments from `from` on as the keywords first and second (for item_keys). */
static Args positional_as_named(Render *r, const Args *a, size_t from, const char *first, const char *second, int line) {
    Args named = *a;
    named.na = 0;
    for (size_t k = from; k < a->na && k < from + 2; k++) {
        if (named.nk == 8) fail(r, line, "more than 8 arguments");
        named.names[named.nk] = k == from ? first : second, named.kw[named.nk++] = a->args[k];
    }
    return named;
}

/* A copy of a sequence's items. */
static Val copy_items(Render *r, const Val *v, int line) {
    const List l = items_of(r, v, line);
    Val out = list_val(r, l.n);
    if (l.n) memcpy(out.list->items, l.items, l.n * sizeof *l.items);
    return out;
}

/* Python's round(x, digits) of a float: correctly rounded, ties to even, as printf rounds. */
static double round_float(double x, long long digits) {
    if (!isfinite(x) || digits > 300) return x;
    if (digits < 0) {
        const double scale = pow(10.0, (double)-digits);
        return nearbyint(x / scale) * scale;
    }
    char text[400];
    snprintf(text, sizeof text, "%.*f", (int)digits, x);
    return strtod(text, NULL);
}

/* The sequence and number filters besides the common ones; 1 with *out set when name is one. */
static int sequence_filter(Render *r, const char *name, const Val *v, const Args *a, Val *out, int line) {
    const Val *a0 = arg(a, 0, NULL);
    if (!strcmp(name, "sort")) { /* sort(reverse, case_sensitive, attribute) */
        *out = copy_items(r, v, line);
        const Val *reverse = arg(a, 0, "reverse");
        const Args named = positional_as_named(r, a, 1, "case_sensitive", "attribute", line);
        Val *keys = item_keys(r, out->list, &named, 1, line);
        sort_by_keys(r, out->list->items, keys, out->list->n, reverse && truthy(reverse), line);
        return 1;
    }
    if (!strcmp(name, "unique") || !strcmp(name, "min") || !strcmp(name, "max")) {
        const List l = items_of(r, v, line);
        const Args named = positional_as_named(r, a, 0, "case_sensitive", "attribute", line);
        const Val *keys = item_keys(r, &l, &named, 0, line);
        if (name[0] != 'u') { /* the first smallest (largest) item; undefined for none */
            size_t best = 0;
            for (size_t k = 1; k < l.n; k++) {
                const int c = order(r, &keys[k], &keys[best], line);
                if (name[1] == 'i' ? c < 0 : c > 0) best = k;
            }
            *out = l.n ? l.items[best] : undef("the min or max of an empty sequence");
            return 1;
        }
        *out = list_val(r, l.n);
        out->list->n = 0;
        for (size_t k = 0; k < l.n; k++) {
            int seen = 0;
            for (size_t j = 0; j < k && !seen; j++) seen = equal(r, &keys[j], &keys[k]);
            if (!seen) out->list->items[out->list->n++] = l.items[k];
        }
        return 1;
    }
    if (!strcmp(name, "dictsort")) {
        if (v->k != V_DICT) fail(r, line, "dictsort of %s", kind_name(v));
        const Val *cs = arg(a, 0, "case_sensitive"), *by = arg(a, 1, "by"), *reverse = arg(a, 2, "reverse");
        const int value = by && by->k == V_STR && by->n == 5 && !memcmp(by->s, "value", 5);
        if (by && !value && !(by->k == V_STR && by->n == 3 && !memcmp(by->s, "key", 3)))
            fail(r, line, "dictsort's by must be 'key' or 'value'");
        *out = call_method(r, v, M_ITEMS, &(Args){0}, line);
        out->list->kind = L_LIST;
        Val *keys = alloc(r, (out->list->n + 1) * sizeof *keys);
        for (size_t k = 0; k < out->list->n; k++) {
            keys[k] = out->list->items[k].list->items[value];
            if (!(cs && truthy(cs)) && keys[k].k == V_STR) keys[k] = case_map(r, &keys[k], PY_LOWER);
        }
        sort_by_keys(r, out->list->items, keys, out->list->n, reverse && truthy(reverse), line);
        return 1;
    }
    if (!strcmp(name, "sum")) {
        const List l = items_of(r, v, line);
        const Val *attr = arg(a, 0, "attribute"), *start = arg(a, 1, "start");
        *out = start ? *start : int_val(0);
        for (size_t k = 0; k < l.n; k++) {
            const Val x = attr_path(r, &l.items[k], attr, 0, line);
            *out = arithmetic(r, OP_ADD, out, &x, line);
        }
        return 1;
    }
    if (!strcmp(name, "batch") || !strcmp(name, "slice")) {
        const List l = items_of(r, v, line);
        const long long per = need_int(r, a0, name[0] == 'b' ? "batch's size" : "slice's count", line);
        const Val *fill = arg(a, 1, "fill_with");
        if (per <= 0) fail(r, line, "%s takes a count above 0", name);
        if (per > (1 << 26)) fail(r, line, "%s of more than 64M items", name);
        const int batch = name[0] == 'b';
        const size_t groups = batch ? (l.n + (size_t)per - 1) / (size_t)per : (size_t)per;
        *out = list_val(r, groups);
        const size_t each = batch ? (size_t)per : l.n / (size_t)per, extra = batch ? 0 : l.n % (size_t)per;
        for (size_t g = 0, at = 0; g < groups; g++) {
            const size_t n = each + (g < extra), room = batch ? (size_t)per : each + 1;
            Val part = list_val(r, 0);
            part.list->items = alloc(r, (room + 1) * sizeof(Val));
            for (size_t k = 0; k < n && at < l.n; k++) part.list->items[part.list->n++] = l.items[at++];
            /* batch fills the last group up to the size; slice adds one to each group without an extra item */
            while (batch && fill && fill->k != V_NONE && part.list->n < room) part.list->items[part.list->n++] = *fill;
            if (!batch && fill && fill->k != V_NONE && g >= extra) part.list->items[part.list->n++] = *fill;
            out->list->items[g] = part;
        }
        return 1;
    }
    if (!strcmp(name, "round")) {
        const Val *prec = arg(a, 0, "precision"), *method = arg(a, 1, "method");
        const long long digits = prec ? need_int(r, prec, "round's precision", line) : 0;
        const char *m = method ? need_str(r, method, "round's method", line) : "common";
        const int common = !strcmp(m, "common");
        if (!common && strcmp(m, "ceil") && strcmp(m, "floor")) fail(r, line, "round's method must be common, ceil or floor");
        if (!is_num(v)) fail(r, line, "round of %s", kind_name(v));
        if (common && v->k != V_FLOAT) *out = int_val(digits >= 0 ? v->i : (long long)round_float(num(v), digits));
        else if (common) *out = (Val){.k = V_FLOAT, .f = round_float(num(v), digits)};
        else {
            const double scale = pow(10.0, (double)digits), x = num(v) * scale;
            *out = (Val){.k = V_FLOAT, .f = (m[0] == 'c' ? ceil(x) : floor(x)) / scale};
        }
        return 1;
    }
    if (!strcmp(name, "float")) {
        const Val *dflt = arg(a, 0, "default");
        *out = dflt ? *dflt : (Val){.k = V_FLOAT, .f = 0.0};
        if (is_num(v)) *out = (Val){.k = V_FLOAT, .f = num(v)};
        if (v->k == V_STR) {
            char *text = alloc(r, v->n + 1), *end;
            memcpy(text, v->s, v->n);
            const double x = strtod(text, &end);
            while (end > text && (*end == ' ' || (*end >= '\t' && *end <= '\r'))) end++;
            if (end > text && *end == 0) *out = (Val){.k = V_FLOAT, .f = x};
        }
        return 1;
    }
    return 0;
}

/* indent, center, wordcount, escape: 1 with *out set when name is one. */
static int text_filter(Render *r, const char *name, const Val *v, const Args *a, Val *out, int line) {
    if (!strcmp(name, "indent")) {
        const Val *width = arg(a, 0, "width"), *first = arg(a, 1, "first"), *blank = arg(a, 2, "blank");
        Buf pad = {0};
        put(r, &pad, "", 0);
        if (width && width->k == V_STR) put(r, &pad, width->s, width->n);
        else
            for (long long k = width ? need_int(r, width, "indent's width", line) : 4; k > 0; k--) put(r, &pad, " ", 1);
        Buf text = {0};
        put(r, &text, "", 0);
        put_str(r, &text, v);
        put(r, &text, "\n", 1); /* as Jinja does, so that splitlines sees a last empty line */
        const Val lines = split_lines(r, &(Val){.k = V_STR, .s = text.s, .n = text.n}, 0);
        Buf b = {0};
        put(r, &b, "", 0);
        if (first && truthy(first)) put(r, &b, pad.s, pad.n);
        for (size_t k = 0; k < lines.list->n; k++) {
            const Val *line_k = &lines.list->items[k];
            if (k) put(r, &b, "\n", 1);
            if (k && (line_k->n || (blank && truthy(blank)))) put(r, &b, pad.s, pad.n);
            put(r, &b, line_k->s, line_k->n);
        }
        *out = buf_val(&b);
        return 1;
    }
    if (!strcmp(name, "center")) {
        Buf b = {0};
        put(r, &b, "", 0);
        put_str(r, &b, v);
        const Val *width = arg(a, 0, "width");
        Args pa = {.na = 1, .args = {width ? *width : int_val(80)}};
        *out = pad(r, &(Val){.k = V_STR, .s = b.s, .n = b.n}, &pa, M_CENTER, line);
        return 1;
    }
    if (!strcmp(name, "wordcount")) { /* re.findall(r"\w+"): runs of letters, digits and _ */
        Buf b = {0};
        put(r, &b, "", 0);
        put_str(r, &b, v);
        long long words = 0;
        int in_word = 0;
        for (size_t k = 0; k < b.n;) {
            const size_t at = k;
            const uint32_t cp = py_utf8_next(b.s, b.n, &k);
            const int w = cp == '_' || py_str_is(b.s + at, k - at, PY_ISALNUM);
            words += w && !in_word;
            in_word = w;
        }
        *out = int_val(words);
        return 1;
    }
    if (!strcmp(name, "escape") || !strcmp(name, "e") || !strcmp(name, "forceescape")) {
        Buf text = {0}, b = {0};
        put(r, &text, "", 0);
        put(r, &b, "", 0);
        put_str(r, &text, v);
        for (size_t k = 0; k < text.n; k++) {
            const char c = text.s[k];
            const char *esc = c == '&' ? "&amp;" : c == '<' ? "&lt;" : c == '>' ? "&gt;" : c == '"' ? "&#34;"
                            : c == '\'' ? "&#39;" : NULL;
            if (esc) puts_(r, &b, esc);
            else put(r, &b, &c, 1);
        }
        *out = buf_val(&b);
        return 1;
    }
    return 0;
}

static Val filter(Render *r, const char *name, const Val *v, const Args *a, Frame *f, int line) {
    (void)f;
    const Val *a0 = arg(a, 0, NULL);
    if (!strcmp(name, "length") || !strcmp(name, "count")) return int_val((long long)length_of(r, v, line));
    if (!strcmp(name, "trim")) { /* of the value's str(), as Jinja's */
        Buf b = {0};
        put(r, &b, "", 0);
        put_str(r, &b, v);
        const Val s = buf_val(&b);
        return strip(r, &s, arg(a, 0, "chars"), 1, 1, line);
    }
    if (!strcmp(name, "tojson")) {
        const Val *indent = arg(a, 1, "indent"), *sep = arg(a, 2, "separators");
        const Val *ascii = arg(a, 0, "ensure_ascii"), *sorted = arg(a, 3, "sort_keys");
        if ((ascii && truthy(ascii)) || (sorted && truthy(sorted)))
            fail(r, line, "tojson with ensure_ascii or sort_keys is not supported here");
        const int ind = indent && indent->k != V_NONE ? (int)need_int(r, indent, "tojson's indent", line) : -1;
        const char *item = ind >= 0 ? "," : ", ", *key = ": ";
        if (sep && sep->k == V_LIST && sep->list->n == 2 && sep->list->items[0].k == V_STR && sep->list->items[1].k == V_STR) {
            char *it = alloc(r, sep->list->items[0].n + 1), *ky = alloc(r, sep->list->items[1].n + 1);
            memcpy(it, sep->list->items[0].s, sep->list->items[0].n);
            memcpy(ky, sep->list->items[1].s, sep->list->items[1].n);
            item = it, key = ky;
        }
        Buf b = {0};
        put(r, &b, "", 0);
        put_json(r, &b, v, ind, 0, item, key, line);
        return buf_val(&b);
    }
    if (!strcmp(name, "first") || !strcmp(name, "last")) {
        List l = items_of(r, v, line);
        return l.n ? l.items[name[0] == 'f' ? 0 : l.n - 1] : undef(name);
    }
    if (!strcmp(name, "join")) {
        const Val *sep = arg(a, 0, "d");
        return join(r, v, sep && sep->k == V_STR ? sep : NULL, line);
    }
    if (!strcmp(name, "upper") || !strcmp(name, "lower") || !strcmp(name, "title") || !strcmp(name, "capitalize")) {
        Buf b = {0};
        put(r, &b, "", 0);
        put_str(r, &b, v);
        const Val s = buf_val(&b);
        return case_map(r, &s, name[0] == 'u' ? PY_UPPER : name[0] == 'l' ? PY_LOWER : name[0] == 't' ? PY_JINJA_TITLE
                                                                                                    : PY_CAPITALIZE);
    }
    if (!strcmp(name, "default") || !strcmp(name, "d")) {
        const Val *boolean = arg(a, 1, "boolean");
        const int replace_it = v->k == V_UNDEF || (boolean && truthy(boolean) && !truthy(v));
        return replace_it ? (a0 ? *a0 : str_val("", 0)) : *v;
    }
    if (!strcmp(name, "string")) {
        Buf b = {0};
        put(r, &b, "", 0);
        put_str(r, &b, v);
        return buf_val(&b);
    }
    if (!strcmp(name, "int")) { /* Jinja's: int(value), else int(float(value)), else the default */
        const Val *dflt = arg(a, 0, "default");
        const Val fallback = dflt ? *dflt : int_val(0);
        if (v->k == V_FLOAT) return isfinite(v->f) && fabs(v->f) < 9.2e18 ? int_val((long long)v->f) : fallback;
        if (v->k == V_STR) {
            char *text = alloc(r, v->n + 1), *end;
            memcpy(text, v->s, v->n);
            char *at = text;
            while (*at == ' ' || (*at >= '\t' && *at <= '\r')) at++;
            errno = 0;
            const long long i = strtoll(at, &end, 10);
            while (end > at && (*end == ' ' || (*end >= '\t' && *end <= '\r'))) end++;
            if (end > at && !*end && !errno) return int_val(i);
            if (strpbrk(at, "xXpP")) return fallback; /* Python's float() reads no hexadecimal */
            const double f = strtod(at, &end);
            while (end > at && (*end == ' ' || (*end >= '\t' && *end <= '\r'))) end++;
            if (end > at && !*end && isfinite(f) && fabs(f) < 9.2e18) return int_val((long long)f);
            return fallback;
        }
        return is_num(v) ? int_val(v->i) : fallback;
    }
    if (!strcmp(name, "list")) {
        List l = items_of(r, v, line);
        Val out = list_val(r, l.n);
        if (l.n) memcpy(out.list->items, l.items, l.n * sizeof *l.items);
        return out;
    }
    if (!strcmp(name, "items")) {
        if (v->k != V_DICT) fail(r, line, "items of %s", kind_name(v));
        return call_method(r, v, M_ITEMS, a, line);
    }
    if (!strcmp(name, "reverse")) {
        if (v->k == V_STR) {
            const Val parts[3] = {{.k = V_NONE}, {.k = V_NONE}, int_val(-1)};
            return slice(r, v, parts, line);
        }
        List l = items_of(r, v, line);
        Val out = list_val(r, l.n);
        for (size_t k = 0; k < l.n; k++) out.list->items[k] = l.items[l.n - 1 - k];
        return out;
    }
    if (!strcmp(name, "replace")) {
        if (v->k != V_STR || !a0 || !arg(a, 1, NULL)) fail(r, line, "replace takes a string, the old and the new text");
        const Val *count = arg(a, 2, "count");
        return replace(r, v, a0, arg(a, 1, NULL), count ? need_int(r, count, "replace's count", line) : -1, line);
    }
    if (!strcmp(name, "abs")) {
        if (!is_num(v) || (v->k != V_FLOAT && v->i == LLONG_MIN)) fail(r, line, "abs of %s", kind_name(v));
        return v->k == V_FLOAT ? (Val){.k = V_FLOAT, .f = fabs(v->f)} : int_val(llabs(v->i));
    }
    if (!strcmp(name, "safe")) return *v;
    if (!strcmp(name, "select") || !strcmp(name, "reject")) { /* items passing a test (truthy without one) */
        List l = items_of(r, v, line);
        Val out = list_val(r, l.n);
        out.list->n = 0;
        Args rest = {.na = a->na > 1 ? a->na - 1 : 0};
        for (size_t j = 0; j < rest.na && j < 8; j++) rest.args[j] = a->args[j + 1];
        for (size_t k = 0; k < l.n; k++) {
            const int pass = a0 ? test(r, need_str(r, a0, "the test's name", line), &l.items[k], &rest, line)
                                : truthy(&l.items[k]);
            if (pass == (name[0] == 's')) out.list->items[out.list->n++] = l.items[k];
        }
        return out;
    }
    if (!strcmp(name, "map")) { /* map('filter', args...) or map(attribute='a.b', default=d) */
        List l = items_of(r, v, line);
        Val out = list_val(r, l.n);
        const Val *attr = kwarg(a, "attribute"), *dflt = kwarg(a, "default");
        if (!a0 && !attr) fail(r, line, "map takes a filter's name or an attribute");
        Args rest = *a;
        rest.na = a->na ? a->na - 1 : 0;
        for (size_t j = 0; j < rest.na; j++) rest.args[j] = a->args[j + 1];
        const char *fname = NULL;
        if (a0) {
            need_str(r, a0, "map's filter", line);
            char *copy = alloc(r, a0->n + 1);
            memcpy(copy, a0->s, a0->n);
            fname = copy;
        }
        for (size_t k = 0; k < l.n; k++) {
            if (fname) {
                out.list->items[k] = filter(r, fname, &l.items[k], &rest, f, line);
                continue;
            }
            const Val got = attr_path(r, &l.items[k], attr, 0, line);
            out.list->items[k] = got.k == V_UNDEF && dflt ? *dflt : got;
        }
        return out;
    }
    if (!strcmp(name, "selectattr") || !strcmp(name, "rejectattr")) {
        List l = items_of(r, v, line);
        Val out = list_val(r, l.n);
        out.list->n = 0;
        if (!a0 || a0->k != V_STR) fail(r, line, "%s takes an attribute's name", name);
        for (size_t k = 0; k < l.n; k++) {
            const Val got = attr_path(r, &l.items[k], a0, 0, line);
            Args rest = {.na = a->na > 2 ? a->na - 2 : 0};
            for (size_t j = 0; j < rest.na; j++) rest.args[j] = a->args[j + 2];
            const int pass = a->na > 1 ? test(r, need_str(r, &a->args[1], "the test's name", line), &got, &rest, line)
                                       : truthy(&got);
            if (pass == (name[0] == 's')) out.list->items[out.list->n++] = l.items[k];
        }
        return out;
    }
    Val out;
    if (sequence_filter(r, name, v, a, &out, line) || text_filter(r, name, v, a, &out, line)) return out;
    fail(r, line, "the filter '%s' is no part of the template language", name);
    return (Val){.k = V_NONE};
}

/* Jinja's test `name` of v. */
static int contains(Render *r, const Val *hay, const Val *needle, int line);

static int test(Render *r, const char *name, const Val *v, const Args *a, int line) {
    const Val *a0 = arg(a, 0, NULL);
    if (!strcmp(name, "defined")) return v->k != V_UNDEF;
    if (!strcmp(name, "undefined")) return v->k == V_UNDEF;
    if (!strcmp(name, "none")) return v->k == V_NONE;
    if (!strcmp(name, "string")) return v->k == V_STR;
    if (!strcmp(name, "number")) return v->k == V_INT || v->k == V_FLOAT || v->k == V_BOOL; /* Python's bool is one */
    if (!strcmp(name, "integer")) return v->k == V_INT;
    if (!strcmp(name, "float")) return v->k == V_FLOAT;
    if (!strcmp(name, "boolean")) return v->k == V_BOOL;
    if (!strcmp(name, "true")) return v->k == V_BOOL && v->i;
    if (!strcmp(name, "false")) return v->k == V_BOOL && !v->i;
    if (!strcmp(name, "mapping")) return v->k == V_DICT;
    if (!strcmp(name, "sequence")) return v->k == V_LIST || v->k == V_STR || v->k == V_DICT;
    if (!strcmp(name, "iterable")) return v->k == V_LIST || v->k == V_STR || v->k == V_DICT;
    if (!strcmp(name, "callable")) return v->k == V_MACRO || v->k == V_METHOD || v->k == V_BUILTIN;
    if (!strcmp(name, "lower") || !strcmp(name, "upper")) {
        Buf b = {0};
        put(r, &b, "", 0);
        put_str(r, &b, v);
        return py_str_is(b.s, b.n, name[0] == 'l' ? PY_ISLOWER : PY_ISUPPER);
    }
    if (!strcmp(name, "filter") || !strcmp(name, "test")) { /* a name of Jinja's (the environment's, not ours) */
        static const char *const FILTERS =
            " abs attr batch capitalize center count d default dictsort e escape filesizeformat first float "
            "forceescape format groupby indent int items join last length list lower map max min pprint random reject "
            "rejectattr replace reverse round safe select selectattr slice sort string striptags sum title tojson trim "
            "truncate unique upper urlencode urlize wordcount wordwrap xmlattr ";
        static const char *const TESTS =
            " odd even divisibleby defined undefined filter test none boolean false true integer float lower upper "
            "string mapping number sequence iterable callable sameas escaped in == eq equalto != ne > gt greaterthan ge "
            ">= < lt lessthan <= le ";
        if (v->k != V_STR || !v->n || memchr(v->s, ' ', v->n)) return 0;
        const char *list = name[0] == 'f' ? FILTERS : TESTS;
        for (const char *at = strstr(list, " "); at && at[1]; at = strchr(at + 1, ' '))
            if (!strncmp(at + 1, v->s, v->n) && at[1 + v->n] == ' ') return 1;
        return 0;
    }
    if (!strcmp(name, "escaped")) return 0; /* no value here is Markup */
    if (!strcmp(name, "even") || !strcmp(name, "odd")) return (int)(need_int(r, v, "even/odd's value", line) & 1) == (name[0] == 'o');
    if (!strcmp(name, "divisibleby")) {
        const long long d = need_int(r, a0, "divisibleby's divisor", line);
        return d && need_int(r, v, "divisibleby's value", line) % d == 0;
    }
    static const char *const COMPARING[] = {"eq", "equalto", "==", "ne", "!=", "sameas", "lt", "lessthan", "<", "le",
                                            "<=", "gt", "greaterthan", ">", "ge", ">=", "in"};
    int known = 0;
    for (size_t k = 0; k < sizeof COMPARING / sizeof COMPARING[0]; k++) known |= !strcmp(name, COMPARING[k]);
    if (!known) fail(r, line, "the test '%s' is no part of the template language", name);
    if (!a0) fail(r, line, "the test '%s' takes a value to compare with", name);
    if (!strcmp(name, "eq") || !strcmp(name, "equalto") || !strcmp(name, "==")) return equal(r, v, a0);
    if (!strcmp(name, "ne") || !strcmp(name, "!=")) return !equal(r, v, a0);
    if (!strcmp(name, "sameas")) return equal(r, v, a0) && v->k == a0->k;
    if (!strcmp(name, "lt") || !strcmp(name, "lessthan") || !strcmp(name, "<")) return order(r, v, a0, line) < 0;
    if (!strcmp(name, "le") || !strcmp(name, "<=")) return order(r, v, a0, line) <= 0;
    if (!strcmp(name, "gt") || !strcmp(name, "greaterthan") || !strcmp(name, ">")) return order(r, v, a0, line) > 0;
    if (!strcmp(name, "ge") || !strcmp(name, ">=")) return order(r, v, a0, line) >= 0;
    if (!strcmp(name, "in")) return contains(r, a0, v, line); /* Python's `in`: a substring of a string */
    fail(r, line, "the test '%s' is no part of the template language", name);
    return 0;
}

static int contains(Render *r, const Val *hay, const Val *needle, int line) {
    if (hay->k == V_STR) {
        need_str(r, needle, "the left side of 'in' a string", line);
        return find_bytes(hay->s, hay->n, needle->s, needle->n) != NULL;
    }
    if (hay->k == V_DICT || hay->k == V_NS)
        return needle->k == V_STR && dict_find(hay->dict, needle->s, needle->n) != NULL;
    List l = items_of(r, hay, line);
    for (size_t k = 0; k < l.n; k++)
        if (equal(r, needle, &l.items[k])) return 1;
    return 0;
}

static int compare(Render *r, BinOp op, const Val *a, const Val *b, int line) {
    switch (op) {
    case OP_EQ: return equal(r, a, b);
    case OP_NE: return !equal(r, a, b);
    case OP_LT: return order(r, a, b, line) < 0;
    case OP_LE: return order(r, a, b, line) <= 0;
    case OP_GT: return order(r, a, b, line) > 0;
    case OP_GE: return order(r, a, b, line) >= 0;
    case OP_IN: return contains(r, b, a, line);
    default: return !contains(r, b, a, line); /* OP_NOT_IN */
    }
}

static Val arithmetic(Render *r, BinOp op, const Val *a, const Val *b, int line) {
    if (op == OP_CONCAT) {
        Buf out = {0};
        put(r, &out, "", 0);
        put_str(r, &out, a);
        put_str(r, &out, b);
        return buf_val(&out);
    }
    if (a->k == V_UNDEF || b->k == V_UNDEF)
        fail(r, line, "%s is undefined, so it cannot be computed with", undef_name(r, a->k == V_UNDEF ? a : b));
    if (op == OP_ADD && a->k == V_STR && b->k == V_STR) {
        char *s = alloc(r, a->n + b->n + 1);
        memcpy(s, a->s, a->n);
        memcpy(s + a->n, b->s, b->n);
        return str_val(s, a->n + b->n);
    }
    if (op == OP_ADD && a->k == V_LIST && b->k == V_LIST) {
        Val out = list_val(r, a->list->n + b->list->n);
        memcpy(out.list->items, a->list->items, a->list->n * sizeof(Val));
        memcpy(out.list->items + a->list->n, b->list->items, b->list->n * sizeof(Val));
        return out;
    }
    if (op == OP_MUL && (a->k == V_STR || a->k == V_LIST) && (b->k == V_INT || b->k == V_BOOL)) {
        Buf out = {0};
        Val l = list_val(r, 0);
        const long long times = b->i > 0 ? b->i : 0;
        const size_t unit = a->k == V_STR ? a->n : a->list->n;
        if (unit && (unsigned long long)times > (1ull << 26) / unit) fail(r, line, "a repetition past 64M items");
        l.list->items = alloc(r, ((a->k == V_LIST ? a->list->n * (size_t)times : 0) + 1) * sizeof(Val));
        put(r, &out, "", 0);
        for (long long k = 0; k < times; k++) {
            if (a->k == V_STR) put(r, &out, a->s, a->n);
            else
                for (size_t j = 0; j < a->list->n; j++) l.list->items[l.list->n++] = a->list->items[j];
        }
        return a->k == V_STR ? buf_val(&out) : l;
    }
    if (!is_num(a) || !is_num(b)) fail(r, line, "%s and %s cannot be computed with", kind_name(a), kind_name(b));
    const int ints = a->k != V_FLOAT && b->k != V_FLOAT;
    const double x = num(a), y = num(b);
    long long z;
    switch (op) { /* Python's integers have no bound; ours stop at 64 bits, with a message */
    case OP_ADD:
        if (ints && __builtin_add_overflow(a->i, b->i, &z)) fail(r, line, "an integer past 64 bits");
        return ints ? int_val(z) : (Val){.k = V_FLOAT, .f = x + y};
    case OP_SUB:
        if (ints && __builtin_sub_overflow(a->i, b->i, &z)) fail(r, line, "an integer past 64 bits");
        return ints ? int_val(z) : (Val){.k = V_FLOAT, .f = x - y};
    case OP_MUL:
        if (ints && __builtin_mul_overflow(a->i, b->i, &z)) fail(r, line, "an integer past 64 bits");
        return ints ? int_val(z) : (Val){.k = V_FLOAT, .f = x * y};
    case OP_DIV:
        if (y == 0) fail(r, line, "division by zero");
        return (Val){.k = V_FLOAT, .f = x / y};
    case OP_FLOORDIV: case OP_MOD:
        if (y == 0) fail(r, line, "division by zero");
        if (ints) {
            if (a->i == LLONG_MIN && b->i == -1) fail(r, line, "an integer past 64 bits");
            long long q = a->i / b->i, m = a->i % b->i;
            if (m && ((m < 0) != (b->i < 0))) q--, m += b->i; /* Python floors */
            return int_val(op == OP_MOD ? m : q);
        } else { /* Python's float_floor_div and float_rem: from fmod, not from x / y */
            double m = fmod(x, y), q = (x - m) / y;
            if (m != 0 && ((y < 0) != (m < 0))) m += y, q -= 1.0;
            if (m == 0) m = copysign(0.0, y);
            double fq = q != 0 ? floor(q) : copysign(0.0, x / y);
            if (q != 0 && q - fq > 0.5) fq += 1.0;
            return (Val){.k = V_FLOAT, .f = op == OP_MOD ? m : fq};
        }
    case OP_POW:
        if (x == 0 && y < 0) fail(r, line, "0 cannot be raised to a negative power");
        if (x < 0 && y != floor(y)) fail(r, line, "a negative number raised to a fractional power (Python's is complex)");
        if (ints && b->i >= 0) { /* by squaring: 1 ** (2 ** 62) takes 62 steps */
            long long p = 1, base = a->i;
            for (long long e = b->i; e > 0; e >>= 1) {
                if ((e & 1) && __builtin_mul_overflow(p, base, &p)) fail(r, line, "an integer past 64 bits");
                if (e > 1 && __builtin_mul_overflow(base, base, &base)) fail(r, line, "an integer past 64 bits");
            }
            return int_val(p);
        }
        return (Val){.k = V_FLOAT, .f = pow(x, y)};
    default: return (Val){.k = V_NONE};
    }
}

static Val eval_expr(Render *r, const Expr *e, Frame *f);

/* A call, filter or test of v with e's arguments. Apart from eval_expr, so that the arguments' room
 * is taken only while they are worked out, not at each level of a chain such as x|f|f|f. */
static __attribute__((noinline)) Val apply(Render *r, const Expr *e, Frame *f, const Val *v) {
    Args a;
    eval_args(r, e, f, &a);
    if (e->kind == E_CALL) return call(r, v, &a, e->line);
    if (e->kind == E_FILTER) return filter(r, e->s, v, &a, f, e->line);
    return bool_val(test(r, e->s, v, &a, e->line) != e->negate);
}

static Val eval(Render *r, const Expr *e, Frame *f) {
    enter(r, e->line);
    r->line = e->line;
    const Val v = eval_expr(r, e, f);
    leave(r);
    return v;
}

static Val eval_expr(Render *r, const Expr *e, Frame *f) {
    switch (e->kind) {
    case E_STR: return str_val(e->s, e->n);
    case E_INT: return int_val(e->i);
    case E_FLOAT: return (Val){.k = V_FLOAT, .f = e->f};
    case E_BOOL: return bool_val((int)e->i);
    case E_NONE: return (Val){.k = V_NONE};
    case E_NAME: return lookup(f, e->s);
    case E_ATTR: {
        const Val obj = eval(r, e->a, f);
        return attribute(r, &obj, e->s, e->line);
    }
    case E_ITEM: {
        const Val obj = eval(r, e->a, f), key = eval(r, e->b, f);
        return item(r, &obj, &key, e->line);
    }
    case E_SLICE: {
        const Val obj = eval(r, e->a, f);
        Val parts[3];
        for (int k = 0; k < 3; k++) parts[k] = e->args[k] ? eval(r, e->args[k], f) : (Val){.k = V_NONE};
        return slice(r, &obj, parts, e->line);
    }
    case E_CALL: case E_FILTER: case E_TEST: {
        const Val v = eval(r, e->a, f);
        return apply(r, e, f, &v);
    }
    case E_NEG: case E_POS: {
        const Val v = eval(r, e->a, f);
        if (!is_num(&v)) fail(r, e->line, "a sign before %s", kind_name(&v));
        if (e->kind == E_POS) return v.k == V_BOOL ? int_val(v.i) : v;
        if (v.k != V_FLOAT && v.i == LLONG_MIN) fail(r, e->line, "an integer past 64 bits");
        return v.k == V_FLOAT ? (Val){.k = V_FLOAT, .f = -v.f} : int_val(-v.i);
    }
    case E_NOT: {
        const Val v = eval(r, e->a, f);
        return bool_val(!truthy(&v));
    }
    case E_AND: case E_OR: { /* Python's: the deciding operand itself */
        const Val a = eval(r, e->a, f);
        if (truthy(&a) == (e->kind == E_OR)) return a;
        return eval(r, e->b, f);
    }
    case E_COND: {
        const Val c = eval(r, e->a, f);
        if (truthy(&c)) return eval(r, e->b, f);
        return e->c ? eval(r, e->c, f) : undef("the else of a conditional");
    }
    case E_BIN: {
        const Val a = eval(r, e->a, f), b = eval(r, e->b, f);
        return e->op >= OP_EQ ? bool_val(compare(r, e->op, &a, &b, e->line)) : arithmetic(r, e->op, &a, &b, e->line);
    }
    case E_COMPARE: { /* Python's chain: stops at the first false link, each operand computed once */
        Val a = eval(r, e->args[0], f);
        for (size_t k = 1; k < e->nargs; k++) {
            const Val b = eval(r, e->args[k], f);
            if (!compare(r, e->ops[k - 1], &a, &b, e->line)) return bool_val(0);
            a = b;
        }
        return bool_val(1);
    }
    case E_LIST: {
        Val out = list_val(r, e->nargs);
        if (e->tuple) out.list->kind = L_TUPLE;
        for (size_t k = 0; k < e->nargs; k++) out.list->items[k] = eval(r, e->args[k], f);
        return out;
    }
    case E_DICT: {
        Val out = dict_val(r, V_DICT);
        for (size_t k = 0; k < e->nargs; k++) {
            const Val key = eval(r, e->args[k], f);
            need_str(r, &key, "a dict's key", e->line);
            dict_set(r, out.dict, key.s, key.n, eval(r, e->kwargs[k], f));
        }
        return out;
    }
    }
    return (Val){.k = V_NONE};
}

/* ---- statements ---- */

/* A for loop's names bound to one item (unpacked when there are several) in frame g. */
static void bind_targets(Render *r, const Stmt *s, Frame *g, const Val *item) {
    if (s->nnames == 1) {
        dict_set(r, &g->vars, s->names[0], strlen(s->names[0]), *item);
        return;
    }
    if (item->k != V_LIST || item->list->n != s->nnames)
        fail(r, s->line, "a for loop of %zu names over an item that is not %zu values", s->nnames, s->nnames);
    for (size_t j = 0; j < s->nnames; j++) dict_set(r, &g->vars, s->names[j], strlen(s->names[j]), item->list->items[j]);
}

static void exec_for(Render *r, const Stmt *s, Frame *f, Buf *out) {
    const Val seq = eval(r, s->e, f);
    if (seq.k == V_NONE) fail(r, s->line, "a for loop over none");
    List all = items_of(r, &seq, s->line);
    /* the loop's filter runs first: loop.length and loop.last count what passes it */
    List l = {.items = alloc(r, (all.n + 1) * sizeof(Val))};
    for (size_t k = 0; k < all.n; k++) {
        if (s->filter) {
            Frame g = {.parent = f};
            bind_targets(r, s, &g, &all.items[k]);
            const Val keep = eval(r, s->filter, &g);
            if (!truthy(&keep)) continue;
        }
        l.items[l.n++] = all.items[k];
    }
    for (size_t k = 0; k < l.n; k++) {
        if (++r->passes > PASS_LIMIT) fail(r, s->line, "loops of more than 10000000 passes in all");
        Frame *g = new_frame(r, f); /* in the arena: a macro defined in the loop keeps it */
        bind_targets(r, s, g, &l.items[k]);
        Val loop = dict_val(r, V_DICT);
        const long long n = (long long)l.n, i = (long long)k;
        dict_set(r, loop.dict, "index", 5, int_val(i + 1));
        dict_set(r, loop.dict, "index0", 6, int_val(i));
        dict_set(r, loop.dict, "revindex", 8, int_val(n - i));
        dict_set(r, loop.dict, "revindex0", 9, int_val(n - i - 1));
        dict_set(r, loop.dict, "first", 5, bool_val(i == 0));
        dict_set(r, loop.dict, "last", 4, bool_val(i == n - 1));
        dict_set(r, loop.dict, "length", 6, int_val(n));
        dict_set(r, loop.dict, "depth", 5, int_val(1));
        dict_set(r, loop.dict, "depth0", 6, int_val(0));
        dict_set(r, loop.dict, "previtem", 8, k ? l.items[k - 1] : undef("loop.previtem"));
        dict_set(r, loop.dict, "nextitem", 8, k + 1 < l.n ? l.items[k + 1] : undef("loop.nextitem"));
        dict_set(r, &g->vars, "loop", 4, loop);
        exec_body(r, &s->body, g, out);
        const int stop = r->stop;
        r->stop = 0;
        if (stop == 1) break;
    }
    if (!l.n) exec_body(r, &s->orelse, f, out);
}

static void exec_statements(Render *r, const Body *body, Frame *f, Buf *out);

/* A block's statements, one level deeper (blocks and macro calls nest: bounded with the rest). */
static void exec_body(Render *r, const Body *body, Frame *f, Buf *out) {
    enter(r, 0);
    exec_statements(r, body, f, out);
    leave(r);
}

static void exec_statements(Render *r, const Body *body, Frame *f, Buf *out) {
    for (size_t k = 0; k < body->n && !r->stop; k++) {
        const Stmt *s = body->items[k];
        switch (s->kind) {
        case S_TEXT: put(r, out, s->text, s->n); break;
        case S_OUT: {
            const Val v = eval(r, s->e, f);
            put_str(r, out, &v);
            break;
        }
        case S_IF: {
            const Val c = eval(r, s->e, f);
            exec_body(r, truthy(&c) ? &s->body : &s->orelse, f, out);
            break;
        }
        case S_FOR: exec_for(r, s, f, out); break;
        case S_SET: {
            const Val v = eval(r, s->e, f);
            if (s->attr) {
                const Val ns = lookup(f, s->names[0]);
                if (ns.k != V_NS) fail(r, s->line, "set %s.%s: only a namespace's attributes can be set", s->names[0], s->attr);
                dict_set(r, ns.dict, s->attr, strlen(s->attr), v);
            } else {
                dict_set(r, &f->vars, s->names[0], strlen(s->names[0]), v);
            }
            break;
        }
        case S_SET_BLOCK: {
            Buf b = {0};
            put(r, &b, "", 0);
            exec_body(r, &s->body, f, &b);
            dict_set(r, &f->vars, s->names[0], strlen(s->names[0]), buf_val(&b));
            break;
        }
        case S_MACRO: /* the body sees the names of the frames around its definition as they are when it runs */
            dict_set(r, &f->vars, s->names[0], strlen(s->names[0]), (Val){.k = V_MACRO, .macro = s, .scope = f});
            break;
        case S_BREAK: r->stop = 1; break;
        case S_CONTINUE: r->stop = 2; break;
        case S_GENERATION: { /* transformers' marks of assistant text: a block of its own scope */
            Buf body = {0};
            put(r, &body, "", 0);
            exec_body(r, &s->body, new_frame(r, f), &body);
            if (r->track) { /* where transformers' tracker puts it: after what the template has yielded so far */
                if (r->n_spans == r->spans_cap) {
                    const size_t cap = r->spans_cap ? 2 * r->spans_cap : 16;
                    ChatTemplateSpan *grown = alloc(r, cap * sizeof *grown);
                    if (r->n_spans) memcpy(grown, r->spans, r->n_spans * sizeof *grown);
                    r->spans = grown, r->spans_cap = cap;
                }
                /* as characters, as transformers counts: the end is placed in the final text (a block in
                 * a macro or a set block is not where its span says) */
                r->spans[r->n_spans++] = (ChatTemplateSpan){r->top->n, utf8_chars(body.s, body.n)};
            }
            put(r, out, body.s, body.n);
            break;
        }
        }
    }
}

/* A message's reasoning under each name templates read it by, as transformers passes messages: the
 * first of reasoning_content, thinking and reasoning that is not none becomes reasoning_content,
 * and thinking (gpt-oss templates read that) unless the message has its own, listed first
 * ({"thinking": r, **message, "reasoning_content": r}). */
static Val alias_reasoning(Render *r, Val messages) {
    static const char *const NAMES[] = {"reasoning_content", "thinking", "reasoning"};
    for (size_t k = 0; messages.k == V_LIST && k < messages.list->n; k++) {
        Val *m = &messages.list->items[k];
        const Val *reasoning = NULL;
        for (int j = 0; m->k == V_DICT && !reasoning && j < 3; j++) {
            const Val *v = dict_find(m->dict, NAMES[j], strlen(NAMES[j]));
            if (v && v->k != V_NONE) reasoning = v;
        }
        if (!reasoning) continue;
        Val aliased = dict_val(r, V_DICT);
        const Val *own = dict_find(m->dict, "thinking", 8);
        dict_set(r, aliased.dict, "thinking", 8, own ? *own : *reasoning);
        for (size_t j = 0; j < m->dict->n; j++)
            dict_set(r, aliased.dict, m->dict->keys[j], m->dict->klen[j], m->dict->vals[j]);
        dict_set(r, aliased.dict, "reasoning_content", 17, *reasoning);
        *m = aliased;
    }
    return messages;
}

char *chat_template_render(const ChatTemplate *t, const JsonValue *messages, int add_generation_prompt,
                           const ChatTemplateVar *vars, size_t num_vars, size_t *len, char *err) {
    return chat_template_render_marked(t, messages, add_generation_prompt, vars, num_vars, len, NULL, NULL, err);
}

char *chat_template_render_marked(const ChatTemplate *t, const JsonValue *messages, int add_generation_prompt,
                                  const ChatTemplateVar *vars, size_t num_vars, size_t *len, ChatTemplateSpan **spans,
                                  size_t *n_spans, char *err) {
    /* on the heap: what the render changes after setjmp is read again after a longjmp */
    Render *volatile r = calloc(1, sizeof *r);
    Frame *volatile root = calloc(1, sizeof *root);
    char *volatile text = NULL;
    if (!r || !root) {
        free(root);
        free(r);
        snprintf(err, ERR_LEN, "out of memory rendering the chat template");
        return NULL;
    }
    r->err = err;
    r->root = root;
    if (setjmp(r->fail) == 0) {
        dict_set(r, &root->vars, "messages", 8, alias_reasoning(r, from_json(r, messages)));
        dict_set(r, &root->vars, "add_generation_prompt", 21, bool_val(add_generation_prompt));
        dict_set(r, &root->vars, "tools", 5, (Val){.k = V_NONE});
        dict_set(r, &root->vars, "documents", 9, (Val){.k = V_NONE});
        for (size_t k = 0; k < num_vars; k++)
            dict_set(r, &root->vars, vars[k].name, strlen(vars[k].name), from_json(r, vars[k].value));
        Buf out = {0};
        put(r, &out, "", 0);
        r->top = &out;
        r->track = spans != NULL;
        exec_body(r, &t->body, root, &out);
        ChatTemplateSpan *copy = NULL;
        if (spans && r->n_spans && !(copy = malloc(r->n_spans * sizeof *copy))) {
            snprintf(err, ERR_LEN, "out of memory rendering the chat template");
        } else if ((text = malloc(out.n + 1))) {
            memcpy(text, out.s, out.n + 1);
            *len = out.n;
            if (spans) {
                for (size_t k = 0; copy && k < r->n_spans; k++) { /* a span's end: its characters on from its start */
                    const size_t from = r->spans[k].start < out.n ? r->spans[k].start : out.n;
                    copy[k] = (ChatTemplateSpan){from, from + utf8_offset(out.s + from, out.n - from, r->spans[k].end)};
                }
                *spans = copy, *n_spans = r->n_spans;
            }
        } else {
            free(copy);
            snprintf(err, ERR_LEN, "out of memory rendering the chat template");
        }
    }
    arena_free(&r->arena);
    free(root);
    free(r);
    return text;
}
