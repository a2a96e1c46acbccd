/* tokenizer/utf8.h - one code point of UTF-8 at a time. */
#ifndef FUSEDGPT_UTF8_H
#define FUSEDGPT_UTF8_H

#include <stddef.h>
#include <stdint.h>

/* The code point at s[*i] (s holds n bytes; *i advances past it), or UINT32_MAX for a byte that
 * starts no valid UTF-8 sequence (overlong forms and surrogates included), which is skipped alone. */
static inline uint32_t utf8_next(const uint8_t *s, size_t n, size_t *i) {
    const uint8_t b = s[*i];
    const size_t need = b < 0x80 ? 1 : b >= 0xc2 && b <= 0xdf ? 2 : b >= 0xe0 && b <= 0xef ? 3 : b >= 0xf0 && b <= 0xf4 ? 4 : 0;
    if (!need || *i + need > n) {
        (*i)++;
        return UINT32_MAX;
    }
    uint32_t cp = need == 1 ? b : need == 2 ? b & 0x1fu : need == 3 ? b & 0x0fu : b & 0x07u;
    for (size_t k = 1; k < need; k++) {
        if ((s[*i + k] & 0xc0) != 0x80) {
            (*i)++;
            return UINT32_MAX;
        }
        cp = cp << 6 | (s[*i + k] & 0x3fu);
    }
    if ((need == 3 && cp < 0x800) || (need == 4 && (cp < 0x10000 || cp > 0x10ffff)) || (cp >= 0xd800 && cp <= 0xdfff)) {
        (*i)++;
        return UINT32_MAX;
    }
    *i += need;
    return cp;
}

#endif
