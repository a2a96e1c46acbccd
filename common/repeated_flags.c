#include "common/repeated_flags.h"

#include <string.h>

void repeated_flags_use(RepeatedFlags *r, const char *name) {
    for (int i = 0; i < r->n; i++)
        if (!strcmp(r->seen[i], name)) {
            if (r->uses[i] < 255) r->uses[i]++;
            return;
        }
    if (r->n == REPEATED_FLAGS_MAX) return; /* more distinct flags than any command has */
    snprintf(r->seen[r->n], sizeof r->seen[r->n], "%s", name);
    r->uses[r->n++] = 1;
}

void repeated_flags_note(const RepeatedFlags *r, FILE *to) {
    int said = 0;
    for (int i = 0; i < r->n; i++) {
        if (r->uses[i] < 2) continue;
        fprintf(to, "%s%s", said ? ", " : "note: given more than once, the last value is used: ", r->seen[i]);
        said = 1;
    }
    if (said) fputc('\n', to);
}
