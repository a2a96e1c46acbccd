/* tokenizer/unicode_table.h - the character classes of the pre-tokenizer (letter, number, white
 * space, other) and the word characters of a single_word added token (regex's \w), generated from
 * the Unicode Character Database by tokenizer/gen_unicode_table.py. */
#ifndef FUSEDGPT_UNICODE_TABLE_H
#define FUSEDGPT_UNICODE_TABLE_H

#include <stdint.h>

enum { UCLASS_OTHER = 0, UCLASS_LETTER = 1, UCLASS_NUMBER = 2, UCLASS_SPACE = 3 };

extern const uint8_t unicode_class_stage1[0x110000 >> 8];
extern const uint8_t unicode_class_stage2[][64];
extern const uint8_t unicode_word_stage1[0x110000 >> 8];
extern const uint8_t unicode_word_stage2[][32];

/* Class of code point cp (< 0x110000). */
static inline int unicode_class(uint32_t cp) {
    const uint8_t *block = unicode_class_stage2[unicode_class_stage1[cp >> 8]];
    return (block[(cp & 255) >> 2] >> ((cp & 3) * 2)) & 3;
}

/* Whether code point cp (< 0x110000) is a word character: Alphabetic, a mark, a decimal digit,
 * connector punctuation or a joiner. */
static inline int unicode_is_word(uint32_t cp) {
    return (unicode_word_stage2[unicode_word_stage1[cp >> 8]][(cp & 255) >> 3] >> (cp & 7)) & 1;
}

#endif
