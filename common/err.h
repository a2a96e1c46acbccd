/* common/err.h - the one size of an error message. A function that can fail writes one line, what
 * went wrong and what to do about it, into a caller's buffer of ERR_LEN bytes (char err[ERR_LEN])
 * and returns -1 or NULL; the caller prints it (print_error) or adds to it. */
#ifndef FUSEDGPT_ERR_H
#define FUSEDGPT_ERR_H

#define ERR_LEN 512

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>

/* What a write that failed with errnum most likely met, and its fix, for the message: a file-size
 * limit (ulimit -f: EFBIG, the signal ignored), a folder that is not writable and a full disk
 * each read differently. */
static inline const char *write_error_hint(int errnum) {
    switch (errnum) {
    case EFBIG: return "a file-size limit: raise ulimit -f";
    case EACCES: case EPERM: case EROFS: return "not writable: fix its permissions or pass another -o";
    case ENOSPC: case EDQUOT: return "disk full: free space or pass another -o";
    default: return "check the disk, or pass another -o";
    }
}

/* Prints "error: " and the formatted message as one line on stderr, in one write (ranks that fail
 * together do not interleave their lines). A message may quote what a file or a peer holds (a
 * config.json's model_type, a token's text, another rank's error): control characters in it are
 * written as escapes (C1 controls as \u0080-\u009f), so a quoted newline cannot split the line and
 * a quoted escape sequence cannot reach the terminal. */
static inline void print_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static inline void print_error(const char *fmt, ...) {
    char msg[2 * ERR_LEN], line[8 * ERR_LEN + 16];
    va_list args;
    va_start(args, fmt);
    vsnprintf(msg, sizeof msg, fmt, args);
    va_end(args);
    size_t k = (size_t)snprintf(line, sizeof line, "error: ");
    for (const unsigned char *c = (const unsigned char *)msg; *c && k + 8 < sizeof line; c++) {
        if (*c == '\n') k += (size_t)snprintf(line + k, sizeof line - k, "\\n");
        else if (*c == '\t') k += (size_t)snprintf(line + k, sizeof line - k, "\\t");
        else if (*c < 0x20 || *c == 0x7f) k += (size_t)snprintf(line + k, sizeof line - k, "\\x%02x", *c);
        else if (*c == 0xc2 && c[1] >= 0x80 && c[1] <= 0x9f) /* a C1 control, UTF-8 encoded */
            k += (size_t)snprintf(line + k, sizeof line - k, "\\u%04x", *++c);
        else line[k++] = (char)*c;
    }
    line[k++] = '\n';
    line[k] = 0;
    fputs(line, stderr);
}

#endif
