/* common/err.h - the one size of an error message. A function that can fail writes one line, what
 * went wrong and what to do about it, into a caller's buffer of ERR_LEN bytes (char err[ERR_LEN])
 * and returns -1 or NULL; the caller prints it (print_error) or adds to it. */
#ifndef FUSEDGPT_ERR_H
#define FUSEDGPT_ERR_H

#define ERR_LEN 512

#include <errno.h>
#include <stdio.h>

/* What a write that failed with errnum most likely met, and its fix, for the message: a file-size
 * limit (ulimit -f: EFBIG, the signal ignored) reads differently from a full disk. */
static inline const char *write_error_hint(int errnum) {
    return errnum == EFBIG ? "a file-size limit: raise ulimit -f" : "disk full? free space or pass another -o";
}

/* Prints "error: <msg>" as one line on stderr. A message may quote what a file holds (a
 * config.json's model_type, a token's text): control characters in it are written as escapes, so
 * a quoted newline cannot split the line and a quoted escape sequence cannot reach the terminal. */
static inline void print_error(const char *msg) {
    fputs("error: ", stderr);
    for (const unsigned char *c = (const unsigned char *)msg; *c; c++) {
        if (*c == '\n') fputs("\\n", stderr);
        else if (*c == '\t') fputs("\\t", stderr);
        else if (*c < 0x20 || *c == 0x7f) fprintf(stderr, "\\x%02x", *c);
        else fputc(*c, stderr);
    }
    fputc('\n', stderr);
}

#endif
