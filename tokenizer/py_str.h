/* tokenizer/py_str.h - Python's str methods on UTF-8 text, as chat templates call them under
 * transformers' Jinja: full case mappings with the final sigma, white space, line ends and the
 * character classes of str.isalpha() and its kin, by the tables of tokenizer/case_table.c.
 *
 * Text is taken as UTF-8; a byte that starts no valid sequence is taken as one character of its
 * own and kept as it is. */
#ifndef FUSEDGPT_PY_STR_H
#define FUSEDGPT_PY_STR_H

#include <stddef.h>
#include <stdint.h>

/* The code point at s[*k] (of n bytes), *k moved past it. */
uint32_t py_utf8_next(const char *s, size_t n, size_t *k);

/* Code point cp as UTF-8 at out (up to 4 bytes; a stray byte py_utf8_next gave, as that byte): its
 * length. */
size_t py_utf8_put(char *out, uint32_t cp);

/* str.isspace() of one character (white space and the four information separators). */
int py_isspace(uint32_t cp);

/* str.isprintable() of one character: repr() writes the others as escapes. */
int py_isprintable(uint32_t cp);

/* A line end of str.splitlines(): \n, \r, \v, \f, \x1c-\x1e, \x85, U+2028, U+2029. */
int py_is_line_end(uint32_t cp);

typedef enum {
    PY_UPPER, PY_LOWER, PY_TITLE, PY_CAPITALIZE, PY_SWAPCASE,
    PY_JINJA_TITLE /* Jinja's title filter: each word after a run of -, (, {, [, < or white space upper-cased
                      at its first character, the rest lower-cased */
} PyCase;

/* s[0..n) mapped as str.upper() ... would, into out, which holds 3 * n bytes (no mapping more than
 * triples a character's bytes). Its length. */
size_t py_case(const char *s, size_t n, PyCase mode, char *out);

typedef enum { PY_ISALPHA, PY_ISALNUM, PY_ISDIGIT, PY_ISDECIMAL, PY_ISNUMERIC, PY_ISSPACE, PY_ISLOWER, PY_ISUPPER,
               PY_ISTITLE } PyIs;

/* str.isalpha() ... of s[0..n). */
int py_str_is(const char *s, size_t n, PyIs which);

#endif
