/* tokenizer/pretokenize.c - the hand-written scanners that split text into chunks as GPT-4's
 * cl100k pattern (and its Qwen 2 variant) and GPT-2's pattern do, and the helper that cuts a text
 * where chunking restarts cleanly.
 *
 * The pattern's alternatives, tried in order at each position (PCRE semantics, leftmost first):
 *   1 '(?i:[sdmt]|ll|ve|re)              contractions
 *   2 [^\r\n\p{L}\p{N}]?+\p{L}+          a word, with one leading non-letter (a space, a quote...)
 *   3 \p{N}{1,3}                         numbers, three digits at most
 *   4 ' '?[^\s\p{L}\p{N}]++[\r\n]*        a punctuation run, optional space before, newlines after
 *   5 \s*[\r\n]                          white space up to and including its last newline
 *   6 \s+(?!\S)                          white space except its last character when a non-space follows
 *   7 \s+                                what remains (one white space character)
 * Llama 3's tokenizer.json writes the same pattern without possessive quantifiers and with
 * \s*[\r\n]+ in rule 5; neither changes a match (rule 2's optional prefix can never be given back
 * usefully, a newline never follows a punctuation run's last character inside it, and the longest
 * \s*[\r\n]+ ends at the run's last newline too). Qwen 2's takes one digit in rule 3 (\p{N}).
 *
 * GPT-2's pattern, tried in order:
 *   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * (contractions case-sensitive, numbers of any length, only ' ' as a prefix, newlines plain white
 * space).
 * Classes come from tokenizer/unicode_table.c; a byte that is not valid UTF-8 is one "other"
 * character, so the scanner never stalls or reads past the end. */
#include <unistd.h>

#include "tokenizer/spm.h"
#include "tokenizer/tokenizer_internal.h"
#include "tokenizer/unicode_table.h"

/* Character classes as the scanner sees them: \r and \n apart from other white space. */
enum { C_OTHER = 0, C_LETTER = 1, C_NUMBER = 2, C_SPACE = 3, C_NEWLINE = 4 };

static const uint8_t ascii_class[128] = {
    /* 0x00-0x1f: controls; \t \v \f are space (White_Space), \n \r newline */
    0, 0, 0, 0, 0, 0, 0, 0, 0, C_SPACE, C_NEWLINE, C_SPACE, C_SPACE, C_NEWLINE, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    /* ' ' ! " # $ % & ' ( ) * + , - . / */
    C_SPACE, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    /* 0-9, then : ; < = > ? */
    2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 0, 0, 0, 0, 0, 0,
    /* @ A-O */
    0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    /* P-Z [ \ ] ^ _ */
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0,
    /* ` a-o */
    0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    /* p-z { | } ~ DEL */
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0,
};

/* Class and byte length of the character at s[i] (i < len). */
static inline int char_at(const uint8_t *s, size_t len, size_t i, size_t *nbytes) {
    uint8_t b = s[i];
    if (b < 0x80) {
        *nbytes = 1;
        return ascii_class[b];
    }
    uint32_t cp;
    size_t need;
    if (b >= 0xc2 && b <= 0xdf) {
        need = 2;
        cp = b & 0x1f;
    } else if (b >= 0xe0 && b <= 0xef) {
        need = 3;
        cp = b & 0x0f;
    } else if (b >= 0xf0 && b <= 0xf4) {
        need = 4;
        cp = b & 0x07;
    } else {
        *nbytes = 1; /* continuation byte or never-valid lead byte */
        return C_OTHER;
    }
    if (i + need > len) {
        *nbytes = 1;
        return C_OTHER;
    }
    for (size_t k = 1; k < need; k++) {
        uint8_t c = s[i + k];
        if ((c & 0xc0) != 0x80) {
            *nbytes = 1;
            return C_OTHER;
        }
        cp = (cp << 6) | (c & 0x3f);
    }
    /* Overlong forms, surrogates and code points past U+10FFFF are not valid UTF-8. */
    if ((need == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) || (need == 4 && (cp < 0x10000 || cp > 0x10ffff))) {
        *nbytes = 1;
        return C_OTHER;
    }
    *nbytes = need;
    return unicode_class(cp);
}

static inline int lower_ascii(uint8_t c) {
    return (c >= 'A' && c <= 'Z') ? c + 32 : c;
}

/* End of the run of characters of class cls starting at i. */
static inline size_t run_of(const uint8_t *s, size_t len, size_t i, int cls) {
    while (i < len) {
        size_t nb;
        if (char_at(s, len, i, &nb) != cls) break;
        i += nb;
    }
    return i;
}

/* End of a run of "other" characters (rule 4's [^\s\p{L}\p{N}]++), then of its [\r\n]*. */
static inline size_t punct_then_newlines(const uint8_t *s, size_t len, size_t i) {
    i = run_of(s, len, i, C_OTHER);
    while (i < len && (s[i] == '\r' || s[i] == '\n')) i++;
    return i;
}

/* White space run at s[0]: rules 6 and 7 of both patterns, the whole run at the end of the text,
 * else all but its last character, else the one character. *last_newline_end: where the run's last
 * newline ends (0: none), for cl100k's rule 5. */
static size_t space_run_len(const uint8_t *s, size_t len, size_t *last_newline_end) {
    size_t i = 0, last_char_start = 0;
    *last_newline_end = 0;
    while (i < len) {
        size_t nb;
        int c = char_at(s, len, i, &nb);
        if (c != C_SPACE && c != C_NEWLINE) break;
        last_char_start = i;
        i += nb;
        if (c == C_NEWLINE) *last_newline_end = i;
    }
    if (i == len) return i;
    return last_char_start > 0 ? last_char_start : i;
}

static size_t cl100k_chunk_len(const uint8_t *s, size_t len, int max_digits) {
    if (len == 0) return 0;
    size_t n0;
    int c0 = char_at(s, len, 0, &n0);

    /* 1: contractions */
    if (s[0] == '\'' && len >= 2) {
        int a = lower_ascii(s[1]);
        if (a == 's' || a == 'd' || a == 'm' || a == 't') return 2;
        if (len >= 3) {
            int b = lower_ascii(s[2]);
            if ((a == 'l' && b == 'l') || (a == 'v' && b == 'e') || (a == 'r' && b == 'e')) return 3;
        }
    }
    /* 2: letters, with one optional leading character that is not \r, \n, a letter or a number */
    if (c0 == C_LETTER) return run_of(s, len, n0, C_LETTER);
    size_t n1 = 0;
    int c1 = n0 < len ? char_at(s, len, n0, &n1) : -1;
    if ((c0 == C_OTHER || c0 == C_SPACE) && c1 == C_LETTER) return run_of(s, len, n0 + n1, C_LETTER);
    /* 3: one to three numbers */
    if (c0 == C_NUMBER) {
        size_t i = n0;
        for (int k = 1; k < max_digits && i < len; k++) {
            size_t nb;
            if (char_at(s, len, i, &nb) != C_NUMBER) break;
            i += nb;
        }
        return i;
    }
    /* 4: punctuation run, with an optional space before and newlines after */
    if (s[0] == ' ' && c1 == C_OTHER) return punct_then_newlines(s, len, n0);
    if (c0 == C_OTHER) return punct_then_newlines(s, len, 0);

    /* c0 is white space. 5: \s*[\r\n] takes the run up to its last newline; else 6 and 7 */
    size_t last_nl_end;
    const size_t run = space_run_len(s, len, &last_nl_end);
    return last_nl_end ? last_nl_end : run;
}

static size_t gpt2_chunk_len(const uint8_t *s, size_t len) {
    if (len == 0) return 0;
    /* contractions, as written (no case folding) */
    if (s[0] == '\'' && len >= 2) {
        if (s[1] == 's' || s[1] == 't' || s[1] == 'm' || s[1] == 'd') return 2;
        if (len >= 3 && ((s[1] == 'r' && s[2] == 'e') || (s[1] == 'v' && s[2] == 'e') || (s[1] == 'l' && s[2] == 'l')))
            return 3;
    }
    size_t n0, n1 = 0;
    int c0 = char_at(s, len, 0, &n0);
    int c1 = n0 < len ? char_at(s, len, n0, &n1) : -1;
    /* ' ?' then a run of letters, of numbers, or of other characters */
    if (c0 == C_LETTER || c0 == C_NUMBER || c0 == C_OTHER) return run_of(s, len, n0, c0);
    if (s[0] == ' ' && (c1 == C_LETTER || c1 == C_NUMBER || c1 == C_OTHER)) return run_of(s, len, n0 + n1, c1);
    size_t newlines_too; /* GPT-2's pattern has no newline rule: they are white space like any */
    return space_run_len(s, len, &newlines_too);
}

size_t split_chunk_len(SplitKind kind, const uint8_t *s, size_t len) {
    switch (kind) {
    case SPLIT_GPT2: return gpt2_chunk_len(s, len);
    case SPLIT_QWEN2: return cl100k_chunk_len(s, len, 1);
    default: return cl100k_chunk_len(s, len, 3);
    }
}

size_t tokenizer_chunk_len(const char *text, size_t len) {
    return cl100k_chunk_len((const uint8_t *)text, len, 3);
}

size_t tokenizer_split_len(const char *split, const char *text, size_t len) {
    SplitKind k = strcmp(split, "gpt2") == 0 ? SPLIT_GPT2 : strcmp(split, "qwen2") == 0 ? SPLIT_QWEN2 : SPLIT_CL100K;
    return split_chunk_len(k, (const uint8_t *)text, len);
}

/* A chunk always starts right after '\n' when the next byte is printable ASCII: no alternative can
 * carry a newline into the following character (rule 2's prefix excludes \r\n, rules 4 and 5 end at
 * a newline, rule 6 needs white space after), and the scanner never looks behind. The same holds
 * for GPT-2's pattern: its only prefix is ' ', and its white space rules stop before a non-space. */
static int is_cut_point(const uint8_t *s, size_t len, size_t i) {
    return i > 0 && i < len && s[i - 1] == '\n' && s[i] > 0x20 && s[i] < 0x7f;
}

static int can_cut_at(const Tokenizer *t, const uint8_t *s, size_t len, size_t i) {
    if (t->spm) return spm_is_cut_point(t->spm, s, len, i);
    return !t->special_has_newline && is_cut_point(s, len, i); /* a line start may lie inside a special token */
}

size_t tokenizer_cut_near(const Tokenizer *t, const char *text, size_t len, size_t at, size_t lo, size_t hi) {
    const uint8_t *s = (const uint8_t *)text;
    if (hi >= len) hi = len - 1;
    if (at < lo || at > hi || len == 0) return len;
    /* outwards from at, one byte each way a round: the first found is the nearest */
    for (size_t d = 0; at - lo >= d || hi - at >= d; d++) {
        if (hi - at >= d && can_cut_at(t, s, len, at + d)) return at + d;
        if (d > 0 && at - lo >= d && can_cut_at(t, s, len, at - d)) return at - d;
    }
    return len;
}

int tokenizer_cut_text(const char *text, size_t len, int parts, size_t *cuts) {
    const uint8_t *s = (const uint8_t *)text;
    if (parts < 1) parts = 1;
    int k = 0;
    cuts[0] = 0;
    for (int p = 1; p < parts; p++) {
        size_t target = (size_t)((double)len * p / parts);
        if (target <= cuts[k]) continue;
        size_t i = target;
        while (i < len && !is_cut_point(s, len, i)) i++;
        if (i >= len) break;
        cuts[++k] = i;
    }
    cuts[++k] = len;
    return k;
}

int tokenizer_default_threads(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    if (n < 1) n = 1;
    if (n > 64) n = 64;
    return (int)n;
}
