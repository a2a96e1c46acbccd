/* common/err.h - the one size of an error message. A function that can fail writes one line, what
 * went wrong and what to do about it, into a caller's buffer of ERR_LEN bytes (char err[ERR_LEN])
 * and returns -1 or NULL; the caller prints it ("error: %s") or adds to it. */
#ifndef FUSEDGPT_ERR_H
#define FUSEDGPT_ERR_H

#define ERR_LEN 512

#include <errno.h>

/* What a write that failed with errnum most likely met, and its fix, for the message: a file-size
 * limit (ulimit -f: EFBIG, the signal ignored) reads differently from a full disk. */
static inline const char *write_error_hint(int errnum) {
    return errnum == EFBIG ? "a file-size limit: raise ulimit -f" : "disk full? free space or pass another -o";
}

#endif
