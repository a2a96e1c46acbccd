/* check_split_pcre2.c - runs the pre-tokenizer and PCRE2 (the cl100k pattern, UTF + UCP) over
 * a whole text file and reports the first place they split differently. The unit tests do this on
 * generated text; this program does it on a real corpus (the default one is ~37 MB):
 *
 *   make check-split [SPLIT_FILE=.cache/corpus/default-v1.txt]
 *
 * Invalid UTF-8 is outside what PCRE2 can judge, so such a file is checked up to its first bad byte. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tokenizer.h"

static const char *const pattern =
    "'(?i:[sdmt]|ll|ve|re)|[^\\r\\n\\p{L}\\p{N}]?+\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]++[\\r\\n]*|\\s*[\\r\\n]|"
    "\\s+(?!\\S)|\\s+";

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s TEXT_FILE\n", argv[0]);
        return 2;
    }
    FILE *f = fopen(argv[1], "rb");
    if (!f) {
        fprintf(stderr, "error: cannot open %s (run `make data` for the default corpus)\n", argv[1]);
        return 1;
    }
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = malloc((size_t)size + 1);
    if (!text || fread(text, 1, (size_t)size, f) != (size_t)size) {
        fprintf(stderr, "error: cannot read %s\n", argv[1]);
        return 1;
    }
    fclose(f);
    size_t len = (size_t)size;
    int errcode;
    PCRE2_SIZE erroff;
    pcre2_code *re =
        pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &errcode, &erroff, NULL);
    if (!re) {
        fprintf(stderr, "error: PCRE2 rejected the pattern (code %d)\n", errcode);
        return 1;
    }
    /* PCRE2 needs valid UTF-8: find where it stops being valid, if anywhere. */
    PCRE2_SIZE valid = len;
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
    int rc0 = pcre2_match(re, (PCRE2_SPTR)text, len, 0, 0, md, NULL);
    if (rc0 <= PCRE2_ERROR_UTF8_ERR1 && rc0 >= PCRE2_ERROR_UTF8_ERR21) {
        valid = pcre2_get_startchar(md);
        printf("note: invalid UTF-8 at byte %zu; checking the %zu bytes before it\n", (size_t)valid, (size_t)valid);
    }
    size_t at = 0, chunks = 0;
    while (at < valid) {
        int rc = pcre2_match(re, (PCRE2_SPTR)text, valid, at, PCRE2_NO_UTF_CHECK, md, NULL);
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t ours = tokenizer_chunk_len(text + at, valid - at);
        if (rc < 0 || ov[0] != at || ov[1] - ov[0] != ours) {
            printf("DIFFERENT at byte %zu after %zu chunks: ours %zu bytes, PCRE2 %zd bytes: \"%.*s\"\n", at, chunks,
                   ours, rc < 0 ? (ssize_t)-1 : (ssize_t)(ov[1] - ov[0]), 40, text + at);
            return 1;
        }
        at += ours;
        chunks++;
    }
    printf("same split: %zu chunks over %zu bytes of %s\n", chunks, (size_t)valid, argv[1]);
    pcre2_match_data_free(md);
    pcre2_code_free(re);
    free(text);
    return 0;
}
