/* common/err.h - the one size of an error message. A function that can fail writes one line, what
 * went wrong and what to do about it, into a caller's buffer of ERR_LEN bytes (char err[ERR_LEN])
 * and returns -1 or NULL; the caller prints it (print_error) or adds to it. */
#ifndef FUSEDGPT_ERR_H
#define FUSEDGPT_ERR_H

#define ERR_LEN 512

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* What a write that failed with errnum most likely met, and its fix, for the message: a file-size
 * limit (ulimit -f: EFBIG, the signal ignored), a folder that is not writable and a full disk
 * each read differently. with_out: the file is in the folder -o names, so another -o is a fix too. */
static inline const char *write_error_advice(int errnum, int with_out) {
    switch (errnum) {
    case EFBIG: return "a file-size limit: raise ulimit -f";
    case EACCES: case EPERM: case EROFS:
        return with_out ? "not writable: fix its permissions or pass another -o" : "not writable: fix its permissions";
    case ENOSPC: case EDQUOT: return with_out ? "disk full: free space or pass another -o" : "disk full: free space";
    default: return with_out ? "check the disk, or pass another -o" : "check the disk";
    }
}

/* For a file in the folder -o names. */
static inline const char *write_error_hint(int errnum) { return write_error_advice(errnum, 1); }

/* For a file that no -o names (eval's --per-token). */
static inline const char *write_error_cause(int errnum) { return write_error_advice(errnum, 0); }

/* Up to n bytes of src into dst (cap bytes, NUL-terminated) with control characters written as
 * escapes (\n, \t, \xNN; C1 controls, UTF-8 encoded, as \u0080-\u009f), so that text quoted from
 * a file or a peer cannot split a message's line or reach the terminal (a NUL byte is \x00). Stops
 * early rather than cut an escape. Returns the length written. */
static inline size_t escape_controls(char *dst, size_t cap, const char *src, size_t n) {
    size_t k = 0;
    const unsigned char *c = (const unsigned char *)src, *end = c + n;
    for (; c < end && k + 8 < cap; c++) {
        if (*c == '\n') k += (size_t)snprintf(dst + k, cap - k, "\\n");
        else if (*c == '\t') k += (size_t)snprintf(dst + k, cap - k, "\\t");
        else if (*c < 0x20 || *c == 0x7f) k += (size_t)snprintf(dst + k, cap - k, "\\x%02x", *c);
        else if (*c == 0xc2 && c + 1 < end && c[1] >= 0x80 && c[1] <= 0x9f) /* a C1 control */
            k += (size_t)snprintf(dst + k, cap - k, "\\u%04x", *++c);
        else dst[k++] = (char)*c;
    }
    dst[k] = 0;
    return k;
}

/* Prints "error: " and the formatted message as one line on stderr, in one write (ranks that fail
 * together do not interleave their lines), its control characters escaped (escape_controls). */
static inline void print_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static inline void print_error(const char *fmt, ...) {
    char msg[2 * ERR_LEN], line[8 * ERR_LEN + 16] = "error: ";
    va_list args;
    va_start(args, fmt);
    vsnprintf(msg, sizeof msg, fmt, args);
    va_end(args);
    size_t k = 7 + escape_controls(line + 7, sizeof line - 8, msg, strlen(msg));
    line[k++] = '\n';
    line[k] = 0;
    fputs(line, stderr);
}

#endif
