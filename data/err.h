/* data/err.h - the one size of an error message. A function that can fail writes one line, what
 * went wrong and what to do about it, into a caller's buffer of ERR_LEN bytes (char err[ERR_LEN])
 * and returns -1 or NULL; the caller prints it ("error: %s") or adds to it. */
#ifndef FUSEDGPT_ERR_H
#define FUSEDGPT_ERR_H

#define ERR_LEN 512

#endif
