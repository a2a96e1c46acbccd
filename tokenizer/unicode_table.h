/* tokenizer/unicode_table.h - the character classes of the pre-tokenizer (letter, number, white
 * space, other), generated from the Unicode Character Database by tokenizer/gen_unicode_table.py. */
#ifndef FUSEDGPT_UNICODE_TABLE_H
#define FUSEDGPT_UNICODE_TABLE_H

#include <stdint.h>

enum { UCLASS_OTHER = 0, UCLASS_LETTER = 1, UCLASS_NUMBER = 2, UCLASS_SPACE = 3 };

extern const uint8_t unicode_class_stage1[0x110000 >> 8];
extern const uint8_t unicode_class_stage2[][64];

/* Class of code point cp (< 0x110000). */
static inline int unicode_class(uint32_t cp) {
    const uint8_t *block = unicode_class_stage2[unicode_class_stage1[cp >> 8]];
    return (block[(cp & 255) >> 2] >> ((cp & 3) * 2)) & 3;
}

#endif
