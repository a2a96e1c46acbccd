/* dev/check/nfc_check.c - reads UTF-8 lines and prints, per line, what nfc_is_normal says (1: the
 * text is its own NFC); dev/check/nfc_check.py compares that with an NFC of Python's. */
#include <stdio.h>
#include <string.h>

#include "tokenizer/nfc.h"

int main(void) {
    static char line[1 << 16];
    while (fgets(line, sizeof line, stdin)) {
        size_t n = strlen(line);
        if (n && line[n - 1] == '\n') line[--n] = 0;
        uint32_t cp;
        size_t at;
        printf("%d\n", nfc_is_normal((const uint8_t *)line, n, &cp, &at));
    }
    return 0;
}
