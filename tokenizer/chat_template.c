/* tokenizer/chat_template.c - a chat template's text into a syntax tree (see chat_template.h): the
 * lexer, with Jinja's white space control as transformers sets it, and the parser. The renderer is
 * chat_template_render.c. */
#include "tokenizer/chat_template.h"

#include <ctype.h>
#include <errno.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/chat_template_internal.h"
#include "tokenizer/py_str.h"

struct ArenaBlock {
    ArenaBlock *next;
    size_t used, size;
    max_align_t data[];
};

#if defined(__SANITIZE_ADDRESS__)
#define ARENA_BLOCK_EACH 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ARENA_BLOCK_EACH 1
#endif
#endif

void *arena_alloc(Arena *a, size_t n) {
#ifdef ARENA_BLOCK_EACH
    /* under AddressSanitizer each allocation is a block of its own, of exactly n bytes, so that a
     * write past a value meets the sanitizer's redzone rather than the next value of a shared block */
    ArenaBlock *own = malloc(sizeof *own + (n ? n : 1));
    if (!own) return NULL;
    own->next = a->head, own->used = own->size = n;
    a->head = own;
    memset(own->data, 0, n);
    return own->data;
#endif
    n = (n + sizeof(max_align_t) - 1) / sizeof(max_align_t) * sizeof(max_align_t);
    ArenaBlock *b = a->head;
    if (!b || b->size - b->used < n) {
        const size_t size = n > (64u << 10) ? n : (64u << 10);
        if (!(b = malloc(sizeof *b + size))) return NULL;
        b->next = a->head, b->used = 0, b->size = size;
        a->head = b;
    }
    void *p = (char *)b->data + b->used;
    b->used += n;
    memset(p, 0, n);
    return p;
}

size_t arena_bytes(const Arena *a) {
    size_t bytes = 0;
    for (const ArenaBlock *b = a->head; b; b = b->next) bytes += sizeof *b + b->size;
    return bytes;
}

void arena_free(Arena *a) {
    for (ArenaBlock *b = a->head, *next; b; b = next) {
        next = b->next;
        free(b);
    }
    a->head = NULL;
}

/* ---- the lexer ---- */

typedef enum { K_EOF, K_TEXT, K_VAR_BEGIN, K_VAR_END, K_BLOCK_BEGIN, K_BLOCK_END, K_NAME, K_STRING, K_INT, K_FLOAT, K_OP } TokKind;

typedef struct {
    TokKind kind;
    int line;
    const char *s; /* K_TEXT, K_NAME, K_OP: in the source; K_STRING: decoded, in the arena */
    size_t n;
    long long i;
    double f;
} Tok;

typedef struct {
    const char *src;
    size_t len;
    Arena *arena;
    Tok *toks;
    size_t n, cap, at;
    char *err;
    jmp_buf fail;
    int depth; /* brackets, operators and blocks open: bounded, so that no template overflows the stack */
    size_t line_from; /* line_at's last answer: src[line_from] is on line line_of_from */
    int line_of_from;
} Parser;

/* Python's parser stops near 200 levels of brackets; Jinja's blocks nest as deep as Python's code. */
#define PARSE_DEPTH_LIMIT 500

static __attribute__((noreturn)) void fail(Parser *p, int line, const char *fmt, const char *what) {
    char why[160];
    snprintf(why, sizeof why, fmt, what);
    snprintf(p->err, ERR_LEN, "chat template line %d: %s", line, why);
    longjmp(p->fail, 1);
}

static void *alloc(Parser *p, size_t n) {
    void *q = arena_alloc(p->arena, n);
    if (!q) {
        snprintf(p->err, ERR_LEN, "out of memory reading the chat template");
        longjmp(p->fail, 1);
    }
    return q;
}

static Tok *push(Parser *p, TokKind kind, int line, const char *s, size_t n) {
    if (p->n == p->cap) {
        const size_t cap = p->cap ? 2 * p->cap : 256;
        Tok *grown = realloc(p->toks, cap * sizeof *grown);
        if (!grown) {
            snprintf(p->err, ERR_LEN, "out of memory reading the chat template");
            longjmp(p->fail, 1);
        }
        p->toks = grown, p->cap = cap;
    }
    Tok *t = &p->toks[p->n++];
    memset(t, 0, sizeof *t);
    t->kind = kind, t->line = line, t->s = s, t->n = n;
    return t;
}

/* The lexer asks for the line of every token, each further on than the last: counting on from the
 * last answer keeps lexing linear (counting from the start each time took 7 s, 98 s under ASan, on
 * the 500 KB chain of elifs of a test). A place before the last answer counts from the start. */
static int line_at(Parser *p, size_t at) {
    if (at < p->line_from) p->line_from = 0, p->line_of_from = 1;
    for (; p->line_from < at; p->line_from++) p->line_of_from += p->src[p->line_from] == '\n';
    return p->line_of_from;
}

/* A quoted string at src[*at] (the quote), its escapes decoded as Python's unicode-escape decodes
 * them (Jinja's lexer does so), into the arena. */
static void lex_string(Parser *p, size_t *at, int line) {
    const char q = p->src[(*at)++];
    /* no escape decodes to more bytes than it is written in, so the literal's own span bounds its
     * value (the rest of the template did too, but made a template's memory grow as its length times
     * its literals) */
    size_t end = *at;
    while (end < p->len && p->src[end] != q) end += p->src[end] == '\\' && end + 1 < p->len ? 2 : 1;
    char *out = alloc(p, end - *at + 1);
    size_t n = 0;
    while (*at < p->len && p->src[*at] != q) {
        char c = p->src[(*at)++];
        if (c != '\\' || *at >= p->len) {
            out[n++] = c;
            continue;
        }
        c = p->src[(*at)++];
        unsigned cp = 0;
        switch (c) {
        case 'n': out[n++] = '\n'; break;
        case 't': out[n++] = '\t'; break;
        case 'r': out[n++] = '\r'; break;
        case 'a': out[n++] = '\a'; break;
        case 'b': out[n++] = '\b'; break;
        case 'f': out[n++] = '\f'; break;
        case 'v': out[n++] = '\v'; break;
        case '\n': break; /* a line continued */
        case '\\': case '\'': case '"': out[n++] = c; break;
        case '0': case '1': case '2': case '3': case '4': case '5': case '6': case '7': /* octal, up to 3 digits */
            cp = (unsigned)(c - '0');
            for (int k = 1; k < 3 && *at < p->len && p->src[*at] >= '0' && p->src[*at] <= '7'; k++)
                cp = cp * 8 + (unsigned)(p->src[(*at)++] - '0');
            n += py_utf8_put(out + n, cp);
            break;
        case 'u': case 'x': case 'U': {
            const int digits = c == 'U' ? 8 : c == 'u' ? 4 : 2;
            for (int k = 0; k < digits; k++) {
                const int h = *at < p->len && isxdigit((unsigned char)p->src[*at]) ? p->src[(*at)++] : -1;
                if (h < 0) fail(p, line, "a \\%s escape without its hex digits", c == 'U' ? "U" : c == 'u' ? "u" : "x");
                cp = cp * 16 + (unsigned)(isdigit(h) ? h - '0' : tolower(h) - 'a' + 10);
            }
            if (cp > 0x10FFFF) fail(p, line, "a \\U escape past U+10FFFF%s", "");
            if (cp >= 0xD800 && cp < 0xE000) fail(p, line, "an escape of a lone surrogate (U+D800 to U+DFFF)%s", "");
            n += py_utf8_put(out + n, cp);
            break;
        }
        case 'N': fail(p, line, "a \\N{...} escape (write the character itself, or its \\u escape)%s", "");
        default: out[n++] = '\\', out[n++] = c; /* Python keeps an unknown escape as it is */
        }
    }
    if (*at >= p->len) fail(p, line, "a string %s is not closed", q == '"' ? "in \"" : "in '");
    (*at)++;
    Tok *t = push(p, K_STRING, line, out, n);
    (void)t;
}

/* The tokens of one tag from src[*at] (after its opening) to its end `close` ("}}" or "%}"), which
 * may follow a - or a +; *strip and *keep say which. */
static void lex_tag(Parser *p, size_t *at, const char *close, int *strip, int *keep) {
    static const char *const ops[] = {"==", "!=", "<=", ">=", "//", "**", "+", "-", "*", "/", "%", "~", "<", ">",
                                      "=", ".", ",", ":", "|", "(", ")", "[", "]", "{", "}"};
    int depth = 0; /* brackets open: "}}" inside {'a': {}} closes dicts, not the tag, as in Jinja */
    for (;;) {
        while (*at < p->len && isspace((unsigned char)p->src[*at])) (*at)++;
        const int line = line_at(p, *at);
        if (*at >= p->len) fail(p, line, "a tag is not closed (%s missing)", close);
        const char *s = p->src + *at;
        const size_t left = p->len - *at;
        if (depth == 0 && (s[0] == '-' || s[0] == '+') && left >= 3 && !memcmp(s + 1, close, 2)) {
            *strip = s[0] == '-', *keep = s[0] == '+';
            *at += 3;
            return;
        }
        if (depth == 0 && left >= 2 && !memcmp(s, close, 2)) {
            *at += 2;
            return;
        }
        if (s[0] == '\'' || s[0] == '"') {
            lex_string(p, at, line);
        } else if (isalpha((unsigned char)s[0]) || s[0] == '_') {
            size_t n = 1;
            while (n < left && (isalnum((unsigned char)s[n]) || s[n] == '_')) n++;
            push(p, K_NAME, line, s, n);
            *at += n;
        } else if (isdigit((unsigned char)s[0])) {
            char *end;
            errno = 0;
            const long long i = strtoll(s, &end, 10);
            const int too_large = errno == ERANGE;
            if (end < s + left && ((*end == '.' && isdigit((unsigned char)end[1])) || *end == 'e' || *end == 'E')) {
                Tok *t = push(p, K_FLOAT, line, s, 0);
                t->f = strtod(s, &end);
            } else if (too_large) { /* Python's integers have no bound; ours stop at 64 bits, with a message */
                fail(p, line, "an integer past 64 bits%s", "");
            } else {
                Tok *t = push(p, K_INT, line, s, 0);
                t->i = i;
            }
            *at += (size_t)(end - s);
        } else {
            size_t k = 0;
            while (k < sizeof ops / sizeof ops[0] && (strlen(ops[k]) > left || memcmp(s, ops[k], strlen(ops[k])))) k++;
            if (k == sizeof ops / sizeof ops[0]) {
                char c[2] = {s[0], 0};
                fail(p, line, "the character '%s' is no part of the template language", c);
            }
            push(p, K_OP, line, ops[k], strlen(ops[k]));
            *at += strlen(ops[k]);
            if (strchr("([{", ops[k][0]) && ops[k][1] == 0) depth++;
            if (strchr(")]}", ops[k][0]) && ops[k][1] == 0 && depth > 0) depth--;
        }
    }
}

/* How a tag treats the text around it: which side strips it (-), which keeps it (+), and whether it
 * is a block or comment (whose line the Jinja settings of transformers trim). */
typedef struct {
    int block, open_strip, open_keep, close_strip, close_keep;
    size_t begin; /* where the tag starts in the source */
} TagEdges;

/* The text src[from, to) between the tags before (NULL at the start) and after (NULL at the end),
 * trimmed as Jinja's settings in transformers trim it, as a K_TEXT token. */
static void push_text(Parser *p, size_t from, size_t to, const TagEdges *before, const TagEdges *after) {
    const char *s = p->src;
    size_t a = from, b = to;
    if (before && before->close_strip) {
        while (a < b && isspace((unsigned char)s[a])) a++;
    } else if (before && before->block && !before->close_keep) { /* trim_blocks: the newline after a block */
        if (a < b && s[a] == '\n') a++;
        else if (a + 1 < b && s[a] == '\r' && s[a + 1] == '\n') a += 2;
    }
    if (after && after->open_strip) {
        while (b > a && isspace((unsigned char)s[b - 1])) b--;
    } else if (after && after->block && !after->open_keep) { /* lstrip_blocks: blanks from the line's start */
        size_t k = to;
        while (k > from && (s[k - 1] == ' ' || s[k - 1] == '\t')) k--;
        if ((k > from && s[k - 1] == '\n') || k == 0) b = k > a ? k : a;
    }
    push(p, K_TEXT, line_at(p, from), s + a, b > a ? b - a : 0);
}

static void lex(Parser *p) {
    size_t at = 0, text_from = 0;
    TagEdges before, *prev = NULL;
    for (;;) {
        const char *next = NULL;
        for (size_t k = at; k + 1 < p->len && !next; k++)
            if (p->src[k] == '{' && (p->src[k + 1] == '{' || p->src[k + 1] == '%' || p->src[k + 1] == '#')) next = p->src + k;
        if (!next) {
            push_text(p, text_from, p->len, prev, NULL);
            push(p, K_EOF, line_at(p, p->len), NULL, 0);
            return;
        }
        const size_t tag = (size_t)(next - p->src);
        const char kind = next[1];
        TagEdges edges = {.block = kind != '{', .begin = tag};
        at = tag + 2;
        if (at < p->len && (p->src[at] == '-' || p->src[at] == '+'))
            edges.open_strip = p->src[at] == '-', edges.open_keep = p->src[at] == '+', at++;
        push_text(p, text_from, tag, prev, &edges);
        const int line = line_at(p, tag);
        if (kind == '#') {
            const char *end = NULL;
            for (size_t k = at; k + 1 < p->len && !end; k++)
                if (p->src[k] == '#' && p->src[k + 1] == '}') end = p->src + k;
            if (!end) fail(p, line, "a comment is not closed (%s missing)", "#}");
            const size_t e = (size_t)(end - p->src);
            if (e > at && (p->src[e - 1] == '-' || p->src[e - 1] == '+'))
                edges.close_strip = p->src[e - 1] == '-', edges.close_keep = p->src[e - 1] == '+';
            at = e + 2;
        } else {
            push(p, kind == '{' ? K_VAR_BEGIN : K_BLOCK_BEGIN, line, NULL, 0);
            lex_tag(p, &at, kind == '{' ? "}}" : "%}", &edges.close_strip, &edges.close_keep);
            push(p, kind == '{' ? K_VAR_END : K_BLOCK_END, line_at(p, at), NULL, 0);
        }
        before = edges;
        prev = &before;
        text_from = at;
    }
}

/* ---- the parser ---- */

static Tok *peek(Parser *p) { return &p->toks[p->at]; }
static Tok *take(Parser *p) { return &p->toks[p->at < p->n - 1 ? p->at++ : p->at]; }

static int is_op(const Tok *t, const char *op) { return t->kind == K_OP && t->n == strlen(op) && !memcmp(t->s, op, t->n); }
static int is_name(const Tok *t, const char *name) {
    return t->kind == K_NAME && t->n == strlen(name) && !memcmp(t->s, name, t->n);
}

static const char *token_text(Parser *p, const Tok *t) {
    char *s = alloc(p, t->n + 1);
    memcpy(s, t->s, t->n);
    return s;
}

static void expect_op(Parser *p, const char *op) {
    Tok *t = take(p);
    if (!is_op(t, op)) fail(p, t->line, "expected '%s'", op);
}

static const char *expect_name(Parser *p) {
    Tok *t = take(p);
    if (t->kind != K_NAME) fail(p, t->line, "expected a name%s", "");
    return token_text(p, t);
}

/* One level deeper into brackets, operators or blocks (p->depth-- comes back out). */
static void enter(Parser *p) {
    if (++p->depth > PARSE_DEPTH_LIMIT) fail(p, peek(p)->line, "nesting deeper than %s levels", "500");
}

static Expr *node(Parser *p, ExprKind kind, int line) {
    Expr *e = alloc(p, sizeof *e);
    e->kind = kind, e->line = line;
    return e;
}

static Expr *parse_expr(Parser *p);
static Expr *parse_unary(Parser *p);

/* Arguments of a call, filter or test up to ')': positional, then name=value. */
static void parse_args(Parser *p, Expr *e) {
    Expr *args[32], *kwargs[32];
    const char *kwnames[32];
    size_t na = 0, nk = 0;
    while (!is_op(peek(p), ")")) {
        if (na + nk == 32) fail(p, peek(p)->line, "more than %s arguments", "32");
        Tok *t = peek(p);
        if (t->kind == K_NAME && is_op(&p->toks[p->at + 1], "=")) {
            kwnames[nk] = token_text(p, take(p));
            take(p);
            kwargs[nk++] = parse_expr(p);
        } else {
            if (nk) fail(p, t->line, "a positional argument after a keyword one%s", "");
            args[na++] = parse_expr(p);
        }
        if (!is_op(peek(p), ",")) break;
        take(p);
    }
    expect_op(p, ")");
    e->args = alloc(p, (na + 1) * sizeof *e->args);
    memcpy(e->args, args, na * sizeof *args);
    e->nargs = na;
    e->kwnames = alloc(p, (nk + 1) * sizeof *e->kwnames);
    e->kwargs = alloc(p, (nk + 1) * sizeof *e->kwargs);
    memcpy(e->kwnames, kwnames, nk * sizeof *kwnames);
    memcpy(e->kwargs, kwargs, nk * sizeof *kwargs);
    e->nkw = nk;
}

static Expr *parse_primary(Parser *p) {
    Tok *t = take(p);
    Expr *e;
    switch (t->kind) {
    case K_NAME:
        if (is_name(t, "true") || is_name(t, "True") || is_name(t, "false") || is_name(t, "False")) {
            e = node(p, E_BOOL, t->line);
            e->i = t->s[0] == 't' || t->s[0] == 'T';
        } else if (is_name(t, "none") || is_name(t, "None")) {
            e = node(p, E_NONE, t->line);
        } else {
            e = node(p, E_NAME, t->line);
            e->s = token_text(p, t);
        }
        return e;
    case K_STRING: { /* adjacent strings join, as in Python */
        e = node(p, E_STR, t->line);
        e->s = t->s, e->n = t->n;
        while (peek(p)->kind == K_STRING) {
            Tok *u = take(p);
            char *joined = alloc(p, e->n + u->n + 1);
            memcpy(joined, e->s, e->n);
            memcpy(joined + e->n, u->s, u->n);
            e->s = joined, e->n += u->n;
        }
        return e;
    }
    case K_INT:
        e = node(p, E_INT, t->line);
        e->i = t->i;
        return e;
    case K_FLOAT:
        e = node(p, E_FLOAT, t->line);
        e->f = t->f;
        return e;
    case K_OP:
        if (is_op(t, "(")) { /* a value in parentheses, or a tuple: (), (a,), (a, b) */
            Expr *items[256];
            size_t n = 0;
            int tuple = is_op(peek(p), ")");
            while (!is_op(peek(p), ")")) {
                if (n == 256) fail(p, t->line, "a literal of more than %s items", "256");
                items[n++] = parse_expr(p);
                if (!is_op(peek(p), ",")) break;
                take(p);
                tuple = 1;
            }
            expect_op(p, ")");
            if (!tuple) return items[0];
            e = node(p, E_LIST, t->line);
            e->tuple = 1;
            e->args = alloc(p, (n + 1) * sizeof *e->args);
            memcpy(e->args, items, n * sizeof *items);
            e->nargs = n;
            return e;
        }
        if (is_op(t, "[") || is_op(t, "{")) {
            const int dict = is_op(t, "{");
            Expr *items[256], *values[256];
            size_t n = 0;
            while (!is_op(peek(p), dict ? "}" : "]")) {
                if (n == 256) fail(p, t->line, "a literal of more than %s items", "256");
                items[n] = parse_expr(p);
                if (dict) {
                    expect_op(p, ":");
                    values[n] = parse_expr(p);
                }
                n++;
                if (!is_op(peek(p), ",")) break;
                take(p);
            }
            expect_op(p, dict ? "}" : "]");
            e = node(p, dict ? E_DICT : E_LIST, t->line);
            e->args = alloc(p, (n + 1) * sizeof *e->args);
            memcpy(e->args, items, n * sizeof *items);
            e->nargs = n;
            if (dict) {
                e->kwargs = alloc(p, (n + 1) * sizeof *e->kwargs);
                memcpy(e->kwargs, values, n * sizeof *values);
                e->nkw = n;
            }
            return e;
        }
        fail(p, t->line, "'%s' cannot start a value", token_text(p, t));
        return NULL;
    default:
        fail(p, t->line, "a value was expected%s", "");
        return NULL;
    }
}

/* Subscripts, slices, attributes and calls after a primary. */
static Expr *parse_postfix(Parser *p, Expr *e) {
    for (;;) {
        Tok *t = peek(p);
        if (is_op(t, ".")) {
            take(p);
            Tok *name = take(p);
            Expr *a = node(p, E_ATTR, t->line);
            if (name->kind == K_INT) { /* x.0 is x[0] */
                a->kind = E_ITEM;
                a->b = node(p, E_INT, t->line);
                a->b->i = name->i;
            } else if (name->kind == K_NAME) {
                a->s = token_text(p, name);
            } else {
                fail(p, t->line, "a name was expected after '.'%s", "");
            }
            a->a = e;
            e = a;
        } else if (is_op(t, "[")) {
            take(p);
            Expr *parts[3] = {NULL, NULL, NULL};
            int k = 0;
            for (;;) {
                if (!is_op(peek(p), ":") && !is_op(peek(p), "]")) parts[k] = parse_expr(p);
                if (is_op(peek(p), ":") && k < 2) {
                    take(p);
                    k++;
                    continue;
                }
                break;
            }
            expect_op(p, "]");
            Expr *s = node(p, k ? E_SLICE : E_ITEM, t->line);
            s->a = e;
            if (k) {
                s->args = alloc(p, 3 * sizeof *s->args);
                memcpy(s->args, parts, sizeof parts);
                s->nargs = 3;
            } else {
                if (!parts[0]) fail(p, t->line, "an empty subscript%s", "");
                s->b = parts[0];
            }
            e = s;
        } else if (is_op(t, "(")) {
            take(p);
            Expr *c = node(p, E_CALL, t->line);
            c->a = e;
            parse_args(p, c);
            e = c;
        } else {
            return e;
        }
    }
}

/* Filters (x|f, x|f(args)) and tests (x is t, x is not t(arg)) after a value. */
static Expr *parse_filters(Parser *p, Expr *e) {
    for (;;) {
        Tok *t = peek(p);
        if (is_op(t, "|")) {
            take(p);
            Expr *f = node(p, E_FILTER, t->line);
            f->s = expect_name(p);
            f->a = e;
            if (is_op(peek(p), "(")) {
                take(p);
                parse_args(p, f);
            } else {
                f->args = alloc(p, sizeof *f->args), f->kwnames = alloc(p, sizeof *f->kwnames);
                f->kwargs = alloc(p, sizeof *f->kwargs);
            }
            e = f;
        } else if (is_name(t, "is")) {
            take(p);
            Expr *x = node(p, E_TEST, t->line);
            if (is_name(peek(p), "not")) take(p), x->negate = 1;
            Tok *name = take(p);
            if (name->kind != K_NAME) fail(p, t->line, "a test's name was expected after 'is'%s", "");
            x->s = token_text(p, name);
            x->a = e;
            x->args = alloc(p, 2 * sizeof *x->args), x->kwnames = alloc(p, sizeof *x->kwnames);
            x->kwargs = alloc(p, sizeof *x->kwargs);
            /* one argument may follow without parentheses, as Jinja reads it: x is divisibleby 3,
             * x is in ['a', 'b'] */
            Tok *next = peek(p);
            if (next->kind == K_STRING || next->kind == K_INT || next->kind == K_FLOAT || is_op(next, "(") ||
                is_op(next, "[") || is_op(next, "{") ||
                (next->kind == K_NAME && !is_name(next, "else") && !is_name(next, "or") && !is_name(next, "and"))) {
                if (is_name(next, "is")) fail(p, next->line, "tests cannot be chained with '%s'", "is");
                x->args[0] = parse_postfix(p, parse_primary(p));
                x->nargs = 1;
            }
            e = x;
        } else {
            return e;
        }
    }
}

/* A sign binds looser than what follows it and tighter than filters: -x.y|abs is (-(x.y))|abs. */
static Expr *parse_signed(Parser *p) {
    Tok *t = peek(p);
    if (is_op(t, "-") || is_op(t, "+")) {
        take(p);
        Expr *e = node(p, is_op(t, "-") ? E_NEG : E_POS, t->line);
        enter(p);
        e->a = parse_signed(p);
        p->depth--;
        return parse_postfix(p, e);
    }
    return parse_postfix(p, parse_primary(p));
}

static Expr *parse_unary(Parser *p) { return parse_filters(p, parse_signed(p)); }

static Expr *binary(Parser *p, BinOp op, Expr *a, Expr *b, int line) {
    Expr *e = node(p, E_BIN, line);
    e->op = op, e->a = a, e->b = b;
    return e;
}

static Expr *parse_pow(Parser *p) {
    Expr *e = parse_unary(p);
    while (is_op(peek(p), "**")) {
        const int line = take(p)->line;
        e = binary(p, OP_POW, e, parse_unary(p), line);
    }
    return e;
}

static Expr *parse_product(Parser *p) {
    Expr *e = parse_pow(p);
    for (;;) {
        Tok *t = peek(p);
        const BinOp op = is_op(t, "*") ? OP_MUL : is_op(t, "/") ? OP_DIV : is_op(t, "//") ? OP_FLOORDIV
                       : is_op(t, "%") ? OP_MOD : OP_EQ;
        if (op == OP_EQ) return e;
        take(p);
        e = binary(p, op, e, parse_pow(p), t->line);
    }
}

/* `~` binds tighter than + and -, looser than * and /, as Jinja's grammar has it: 1 + 2 ~ 3 is
 * 1 + '23', an error. */
static Expr *parse_concat(Parser *p) {
    Expr *e = parse_product(p);
    while (is_op(peek(p), "~")) {
        const int line = take(p)->line;
        e = binary(p, OP_CONCAT, e, parse_product(p), line);
    }
    return e;
}

static Expr *parse_sum(Parser *p) {
    Expr *e = parse_concat(p);
    for (;;) {
        Tok *t = peek(p);
        if (!is_op(t, "+") && !is_op(t, "-")) return e;
        take(p);
        e = binary(p, is_op(t, "+") ? OP_ADD : OP_SUB, e, parse_concat(p), t->line);
    }
}

/* Comparisons chain as Python's: a < b < c is a < b and b < c, b computed once. */
static Expr *parse_compare(Parser *p) {
    Expr *first = parse_sum(p), *operands[65] = {first};
    BinOp ops[64];
    size_t n = 0;
    const int line = peek(p)->line;
    for (;;) {
        Tok *t = peek(p);
        BinOp op;
        if (is_op(t, "==")) op = OP_EQ;
        else if (is_op(t, "!=")) op = OP_NE;
        else if (is_op(t, "<")) op = OP_LT;
        else if (is_op(t, "<=")) op = OP_LE;
        else if (is_op(t, ">")) op = OP_GT;
        else if (is_op(t, ">=")) op = OP_GE;
        else if (is_name(t, "in")) op = OP_IN;
        else if (is_name(t, "not") && is_name(&p->toks[p->at + 1], "in")) op = OP_NOT_IN, take(p);
        else break;
        take(p);
        if (n == 64) fail(p, t->line, "a chain of more than %s comparisons", "64");
        ops[n] = op;
        operands[++n] = parse_sum(p);
    }
    if (n == 0) return first;
    if (n == 1) return binary(p, ops[0], first, operands[1], line);
    Expr *e = node(p, E_COMPARE, line);
    e->args = alloc(p, (n + 1) * sizeof *e->args);
    memcpy(e->args, operands, (n + 1) * sizeof *operands);
    e->ops = alloc(p, n * sizeof *e->ops);
    memcpy(e->ops, ops, n * sizeof *ops);
    e->nargs = n + 1;
    return e;
}

static Expr *parse_not(Parser *p) {
    if (is_name(peek(p), "not")) {
        const int line = take(p)->line;
        Expr *e = node(p, E_NOT, line);
        enter(p);
        e->a = parse_not(p);
        p->depth--;
        return e;
    }
    return parse_compare(p);
}

static Expr *parse_and(Parser *p) {
    Expr *e = parse_not(p);
    while (is_name(peek(p), "and")) {
        Expr *a = node(p, E_AND, take(p)->line);
        a->a = e, a->b = parse_not(p);
        e = a;
    }
    return e;
}

static Expr *parse_or(Parser *p) {
    Expr *e = parse_and(p);
    while (is_name(peek(p), "or")) {
        Expr *o = node(p, E_OR, take(p)->line);
        o->a = e, o->b = parse_and(p);
        e = o;
    }
    return e;
}

static Expr *parse_expr(Parser *p) {
    enter(p);
    Expr *e = parse_or(p);
    while (is_name(peek(p), "if")) { /* b if a else c; without else, undefined */
        Expr *c = node(p, E_COND, take(p)->line);
        c->b = e;
        c->a = parse_or(p);
        if (is_name(peek(p), "else")) {
            take(p);
            c->c = parse_expr(p);
        }
        e = c;
    }
    p->depth--;
    return e;
}

/* ---- statements ---- */

static void expect_block_end(Parser *p) {
    Tok *t = take(p);
    if (t->kind != K_BLOCK_END) fail(p, t->line, "expected the end of the tag (%s)", "%}");
}

static Stmt *stmt(Parser *p, StmtKind kind, int line) {
    Stmt *s = alloc(p, sizeof *s);
    s->kind = kind, s->line = line;
    return s;
}

/* Statements until a block whose keyword is one of `ends` (NULL-terminated), which is left to be
 * read: its index in ends, or -1 at the end of the template (an error when ends is not empty). */
static int parse_body(Parser *p, Body *body, const char *const *ends);

static const char *const END_IF[] = {"elif", "else", "endif", NULL};

static Stmt *parse_if(Parser *p, int line) {
    Stmt *s = stmt(p, S_IF, line);
    s->e = parse_expr(p);
    expect_block_end(p);
    const int end = parse_body(p, &s->body, END_IF);
    take(p); /* the keyword */
    if (end == 0) { /* elif: an if alone in the else branch */
        s->orelse.items = alloc(p, sizeof *s->orelse.items);
        enter(p); /* each elif nests one deeper */
        s->orelse.items[0] = parse_if(p, p->toks[p->at - 1].line);
        p->depth--;
        s->orelse.n = 1;
        return s;
    }
    if (end == 1) {
        static const char *const ENDIF[] = {"endif", NULL};
        expect_block_end(p);
        parse_body(p, &s->orelse, ENDIF);
        take(p);
    }
    expect_block_end(p);
    return s;
}

static Stmt *parse_for(Parser *p, int line) {
    Stmt *s = stmt(p, S_FOR, line);
    const char *names[2];
    size_t n = 0;
    do {
        if (n == 2) fail(p, line, "a for loop of more than %s names", "2");
        names[n++] = expect_name(p);
    } while (is_op(peek(p), ",") && take(p));
    s->names = alloc(p, n * sizeof *s->names);
    memcpy(s->names, names, n * sizeof *names);
    s->nnames = n;
    if (!is_name(take(p), "in")) fail(p, line, "expected 'in' in a for loop%s", "");
    s->e = parse_or(p); /* not parse_expr: its `if` is the loop's filter */
    if (is_name(peek(p), "if")) {
        take(p);
        s->filter = parse_expr(p);
    }
    if (is_name(peek(p), "recursive")) fail(p, line, "recursive loops are no part of the template language%s", "");
    expect_block_end(p);
    static const char *const END_FOR[] = {"else", "endfor", NULL};
    if (parse_body(p, &s->body, END_FOR) == 0) {
        take(p);
        expect_block_end(p);
        static const char *const ENDFOR[] = {"endfor", NULL};
        parse_body(p, &s->orelse, ENDFOR);
    }
    take(p);
    expect_block_end(p);
    return s;
}

static Stmt *parse_set(Parser *p, int line) {
    const char *name = expect_name(p);
    Stmt *s = stmt(p, S_SET, line);
    s->names = alloc(p, sizeof *s->names);
    s->names[0] = name;
    s->nnames = 1;
    if (is_op(peek(p), ".")) {
        take(p);
        s->attr = expect_name(p);
    }
    if (is_op(peek(p), ",")) fail(p, line, "a set of several names is no part of the template language%s", "");
    if (peek(p)->kind == K_BLOCK_END && !s->attr) { /* {% set x %}...{% endset %} */
        take(p);
        s->kind = S_SET_BLOCK;
        static const char *const ENDSET[] = {"endset", NULL};
        parse_body(p, &s->body, ENDSET);
        take(p);
        expect_block_end(p);
        return s;
    }
    expect_op(p, "=");
    s->e = parse_expr(p);
    expect_block_end(p);
    return s;
}

static Stmt *parse_macro(Parser *p, int line) {
    const char *names[33];
    Expr *defaults[33];
    size_t n = 0;
    names[n] = expect_name(p), defaults[n++] = NULL;
    expect_op(p, "(");
    while (!is_op(peek(p), ")")) {
        if (n == 33) fail(p, line, "a macro of more than %s parameters", "32");
        names[n] = expect_name(p);
        defaults[n] = NULL;
        if (is_op(peek(p), "=")) {
            take(p);
            defaults[n] = parse_expr(p);
        }
        n++;
        if (!is_op(peek(p), ",")) break;
        take(p);
    }
    expect_op(p, ")");
    expect_block_end(p);
    Stmt *s = stmt(p, S_MACRO, line);
    s->names = alloc(p, n * sizeof *s->names);
    s->defaults = alloc(p, n * sizeof *s->defaults);
    memcpy(s->names, names, n * sizeof *names);
    memcpy(s->defaults, defaults, n * sizeof *defaults);
    s->nnames = n;
    static const char *const ENDMACRO[] = {"endmacro", NULL};
    parse_body(p, &s->body, ENDMACRO);
    take(p);
    expect_block_end(p);
    return s;
}

static int parse_statements(Parser *p, Body *body, const char *const *ends);

/* A block's statements (nesting bounded): the index in ends of the tag that ended it. */
static int parse_body(Parser *p, Body *body, const char *const *ends) {
    enter(p);
    const int end = parse_statements(p, body, ends);
    p->depth--;
    return end;
}

static int parse_statements(Parser *p, Body *body, const char *const *ends) {
    Stmt **items = NULL;
    size_t n = 0, cap = 0;
    int end = -1;
    for (;;) {
        Tok *t = take(p);
        Stmt *s = NULL;
        if (t->kind == K_EOF) {
            size_t last = 0;
            while (ends[last] && ends[last + 1]) last++;
            if (ends[0]) fail(p, t->line, "the template ends before {%% %s %%}", ends[last]);
            break;
        }
        if (t->kind == K_TEXT) {
            if (!t->n) continue;
            s = stmt(p, S_TEXT, t->line);
            s->text = t->s, s->n = t->n;
        } else if (t->kind == K_VAR_BEGIN) {
            s = stmt(p, S_OUT, t->line);
            s->e = parse_expr(p);
            Tok *close = take(p);
            if (close->kind != K_VAR_END) fail(p, close->line, "expected the end of the value (%s)", "}}");
        } else if (t->kind == K_BLOCK_BEGIN) {
            Tok *kw = peek(p);
            for (int k = 0; ends[k] && end < 0; k++)
                if (is_name(kw, ends[k])) end = k;
            if (end >= 0) break;
            static const char *const CLOSERS[] = {"elif", "else", "endif", "endfor", "endset", "endmacro", "endgeneration"};
            for (size_t k = 0; k < sizeof CLOSERS / sizeof CLOSERS[0]; k++)
                if (is_name(kw, CLOSERS[k])) fail(p, kw->line, "{%% %s %%} closes no block opened before it", CLOSERS[k]);
            take(p);
            if (is_name(kw, "if")) s = parse_if(p, kw->line);
            else if (is_name(kw, "for")) s = parse_for(p, kw->line);
            else if (is_name(kw, "set")) s = parse_set(p, kw->line);
            else if (is_name(kw, "macro")) s = parse_macro(p, kw->line);
            else if (is_name(kw, "break") || is_name(kw, "continue")) {
                s = stmt(p, is_name(kw, "break") ? S_BREAK : S_CONTINUE, kw->line);
                expect_block_end(p);
            } else if (is_name(kw, "generation")) { /* transformers' marker of assistant text: its body */
                expect_block_end(p);
                s = stmt(p, S_GENERATION, kw->line);
                static const char *const ENDGEN[] = {"endgeneration", NULL};
                parse_body(p, &s->body, ENDGEN);
                take(p);
                expect_block_end(p);
            } else {
                fail(p, kw->line, "the statement '%s' is no part of the template language",
                     kw->kind == K_NAME ? token_text(p, kw) : "?");
            }
        } else {
            fail(p, t->line, "unexpected %s", "text in a tag");
        }
        if (n == cap) {
            cap = cap ? 2 * cap : 8;
            Stmt **grown = alloc(p, cap * sizeof *grown);
            if (n) memcpy(grown, items, n * sizeof *items);
            items = grown;
        }
        items[n++] = s;
    }
    body->items = items, body->n = n;
    return end;
}

ChatTemplate *chat_template_parse(const char *src, size_t len, char *err) {
    /* on the heap: what the parser changes after setjmp is read again after a longjmp */
    ChatTemplate *volatile t = calloc(1, sizeof *t);
    Parser *volatile p = calloc(1, sizeof *p);
    if (!t || !p) {
        free(p);
        free(t);
        snprintf(err, ERR_LEN, "out of memory reading the chat template");
        return NULL;
    }
    p->arena = &t->arena, p->err = err, p->line_of_from = 1;
    if (setjmp(p->fail)) {
        free(p->toks);
        free(p);
        chat_template_free(t);
        return NULL;
    }
    /* as Jinja reads a template: every line end a "\n", and one at the very end dropped */
    char *text = alloc(p, len + 1);
    size_t n = 0;
    for (size_t k = 0; k < len; k++) {
        if (src[k] == '\r' && k + 1 < len && src[k + 1] == '\n') continue;
        text[n++] = src[k] == '\r' ? '\n' : src[k];
    }
    if (n && text[n - 1] == '\n') n--;
    p->src = text, p->len = n;
    lex(p);
    static const char *const NONE[] = {NULL};
    parse_body(p, &t->body, NONE);
    free(p->toks);
    free(p);
    return t;
}

void chat_template_free(ChatTemplate *t) {
    if (!t) return;
    arena_free(&t->arena);
    free(t);
}
