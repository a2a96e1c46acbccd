/* common/grow.h - growable arrays: the capacity doubles (from 1024 elements) until it holds what is
 * needed, so n appends cost O(n) copies. */
#ifndef FUSEDGPT_GROW_H
#define FUSEDGPT_GROW_H

#include <stdlib.h>

/* Makes *p (of *cap elements of `each` bytes) hold at least `need`. 0, or -1 (out of memory; *p and
 * *cap as they were). */
static inline int grow_array(void **p, size_t *cap, size_t need, size_t each) {
    if (need <= *cap) return 0;
    size_t c = *cap ? *cap : 1024;
    while (c < need) c *= 2;
    void *q = realloc(*p, c * each);
    if (!q) return -1;
    *p = q;
    *cap = c;
    return 0;
}

#endif
