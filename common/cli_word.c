/* common/cli_word.c - see cli_word.h. */
#include "cli_word.h"

#include <string.h>

void cli_word_split(const char *word, CliWord *w) {
    const char *eq = word[0] == '-' && word[1] == '-' && word[2] ? strchr(word + 2, '=') : NULL;
    const size_t len = eq ? (size_t)(eq - word) : strlen(word);
    w->value = NULL;
    if (eq && len < sizeof w->flag) {
        memcpy(w->flag, word, len);
        w->flag[len] = '\0';
        w->value = eq + 1;
    } else {
        size_t n = strlen(word);
        if (n >= sizeof w->flag) n = sizeof w->flag - 1; /* still no known flag's name */
        memcpy(w->flag, word, n);
        w->flag[n] = '\0';
    }
}
