/* common/repeated_flags.h - the flags a command line gives more than once.
 *
 * The last value holds, as scripts expect when they override their own defaults, but the user
 * hears of it, in one note for the whole command line: every command (train, eval, sample,
 * prepare) says it the same way. */
#ifndef FUSEDGPT_REPEATED_FLAGS_H
#define FUSEDGPT_REPEATED_FLAGS_H

#include <stdio.h>

#define REPEATED_FLAGS_MAX 64

typedef struct {
    char seen[REPEATED_FLAGS_MAX][40]; /* each flag's name once, as first met */
    unsigned char uses[REPEATED_FLAGS_MAX];
    int n;
} RepeatedFlags;

/* One use of a flag that takes a value, by the one name of all its spellings (-G and --gen-tokens
 * are both "-G/--gen-tokens"). */
void repeated_flags_use(RepeatedFlags *r, const char *name);

/* "note: given more than once, the last value is used: A, B" and a newline on `to`, when any flag
 * was; nothing otherwise. */
void repeated_flags_note(const RepeatedFlags *r, FILE *to);

#endif
