/* tokenizer/chat_template_internal.h - what the chat template's parser (chat_template.c) hands its
 * renderer (chat_template_render.c): the syntax tree, and the arena both allocate from. */
#ifndef FUSEDGPT_CHAT_TEMPLATE_INTERNAL_H
#define FUSEDGPT_CHAT_TEMPLATE_INTERNAL_H

#include <stddef.h>

/* Blocks of memory freed all at once: a template's tree lives as long as the template, a render's
 * values as long as the render. NULL only when memory runs out. */
typedef struct ArenaBlock ArenaBlock;
typedef struct {
    ArenaBlock *head;
} Arena;
void *arena_alloc(Arena *a, size_t n); /* zeroed */
void arena_free(Arena *a);
size_t arena_bytes(const Arena *a); /* its blocks' bytes, headers included */

typedef struct Expr Expr;
typedef struct Stmt Stmt;

typedef struct {
    Stmt **items;
    size_t n;
} Body;

typedef enum {
    E_STR, E_INT, E_FLOAT, E_BOOL, E_NONE, /* literals */
    E_NAME, E_ATTR, E_ITEM, E_SLICE, E_CALL, E_FILTER, E_TEST,
    E_NEG, E_POS, E_NOT, E_AND, E_OR, E_BIN, E_COMPARE, E_COND, E_LIST, E_DICT
} ExprKind;

typedef enum {
    OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_FLOORDIV, OP_MOD, OP_POW, OP_CONCAT,
    OP_EQ, OP_NE, OP_LT, OP_LE, OP_GT, OP_GE, OP_IN, OP_NOT_IN /* the comparisons last, from OP_EQ */
} BinOp;

struct Expr {
    ExprKind kind;
    int line;
    const char *s; /* E_STR's bytes; the name of E_NAME, E_ATTR, E_FILTER, E_TEST */
    size_t n;      /* E_STR's length */
    long long i;   /* E_INT, E_BOOL */
    double f;      /* E_FLOAT */
    BinOp op;      /* E_BIN */
    BinOp *ops;    /* E_COMPARE: a chain as Python's, args[0] ops[0] args[1] ops[1] args[2] ... */
    Expr *a, *b, *c; /* operands: E_COND is b if a else c; E_SLICE's object is a */
    Expr **args;   /* positional arguments; E_LIST's items; E_DICT's keys; E_SLICE's start, stop, step;
                      E_COMPARE's operands */
    size_t nargs;
    const char **kwnames; /* keyword arguments (E_DICT: none; its values are kwargs) */
    Expr **kwargs;
    size_t nkw;
    int negate; /* E_TEST: `is not` */
    int tuple;  /* E_LIST: a tuple, (a, b) */
};

typedef enum { S_TEXT, S_OUT, S_IF, S_FOR, S_SET, S_SET_BLOCK, S_MACRO, S_BREAK, S_CONTINUE, S_GENERATION } StmtKind;

struct Stmt {
    StmtKind kind;
    int line;
    const char *text; /* S_TEXT, after the white space control */
    size_t n;
    Expr *e;      /* S_OUT's value, S_IF's condition, S_FOR's sequence, S_SET's value */
    Expr *filter; /* S_FOR's `if` */
    Body body, orelse; /* S_IF's branches (an elif is an S_IF alone in orelse); S_FOR's body and else;
                          S_MACRO's and S_GENERATION's body */
    const char **names; /* S_FOR's targets; S_SET's and S_SET_BLOCK's name; S_MACRO's name, then its parameters */
    size_t nnames;
    const char *attr;  /* S_SET of a namespace's attribute: names[0].attr */
    Expr **defaults;   /* S_MACRO: each parameter's default (NULL: none) */
};

struct ChatTemplate {
    Arena arena;
    Body body;
};

#endif
