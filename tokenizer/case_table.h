/* tokenizer/case_table.h - Python's case mappings and character properties, for the chat
 * template's string methods: generated into tokenizer/case_table.c by tokenizer/gen_case_table.py. */
#ifndef FUSEDGPT_CASE_TABLE_H
#define FUSEDGPT_CASE_TABLE_H

#include <stddef.h>
#include <stdint.h>

/* (code point, mapping) sorted by code point, for those a mapping changes. A mapping with
 * CASE_EXPANDED set is several code points: case_expansions[mapping & ~CASE_EXPANDED], 0-ended
 * when fewer than 3. */
#define CASE_EXPANDED 0x80000000u
extern const uint32_t case_upper[][2], case_lower[][2], case_title[][2];
extern const size_t case_upper_len, case_lower_len, case_title_len;
extern const uint32_t case_expansions[][3];

/* Runs (first, last, flags) of code points with the same nonzero flags, sorted. */
enum {
    CASE_CASED = 1,          /* lower, upper or title case (Unicode's Cased) */
    CASE_IGNORABLE = 2,      /* Unicode's Case_Ignorable */
    CASE_LOWER = 4,          /* str.islower() of the character alone */
    CASE_UPPER = 8,          /* str.isupper() */
    CASE_DIGIT = 16,         /* str.isdigit() */
    CASE_DECIMAL = 32,       /* str.isdecimal() */
    CASE_NUMERIC = 64,       /* str.isnumeric() */
    CASE_ALPHA = 128,        /* str.isalpha() */
    CASE_UNPRINTABLE = 256   /* not str.isprintable(): repr() escapes it */
};
extern const uint32_t case_props[][3];
extern const size_t case_props_len;

/* The mapping of cp in one of the tables (cp itself when it has none). */
static inline uint32_t case_map_of(const uint32_t (*table)[2], size_t n, uint32_t cp) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        const size_t mid = (lo + hi) / 2;
        if (table[mid][0] < cp) lo = mid + 1;
        else hi = mid;
    }
    return lo < n && table[lo][0] == cp ? table[lo][1] : cp;
}

/* The flags of cp. */
static inline unsigned case_props_of(uint32_t cp) {
    size_t lo = 0, hi = case_props_len;
    while (lo < hi) {
        const size_t mid = (lo + hi) / 2;
        if (case_props[mid][1] < cp) lo = mid + 1;
        else hi = mid;
    }
    return lo < case_props_len && case_props[lo][0] <= cp ? case_props[lo][2] : 0;
}

#endif
