/* common/cli_word.h - one command-line word of a subcommand, with its value written inline.
 *
 * `./train` takes `--steps=5` as well as `--steps 5`; prepare, eval and sample read their words
 * through this, so that the same spelling works everywhere. Only long flags take an inline value:
 * `-o=x` stays a word of its own, as in ./train. */
#ifndef FUSEDGPT_CLI_WORD_H
#define FUSEDGPT_CLI_WORD_H

typedef struct {
    char flag[64];     /* "--steps" of "--steps=5"; the whole word when it has no inline value */
    const char *value; /* "5" of "--steps=5" (may be empty), else NULL: the value is the next word */
} CliWord;

/* Splits word at its first '=' when it is a long flag. A name too long for flag[] stays whole,
 * so the caller names it as an unknown flag. */
void cli_word_split(const char *word, CliWord *w);

#endif
