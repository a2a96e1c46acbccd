/* tokenizer/py_str.c - Python's str methods on UTF-8 text (see py_str.h). */
#include "tokenizer/py_str.h"

#include <stdlib.h>

#include "tokenizer/case_table.h"

uint32_t py_utf8_next(const char *s, size_t n, size_t *k) {
    const unsigned char *u = (const unsigned char *)s;
    const unsigned char c = u[*k];
    const int len = c < 0x80 ? 1 : c >= 0xC2 && c < 0xE0 ? 2 : c >= 0xE0 && c < 0xF0 ? 3 : c >= 0xF0 && c < 0xF5 ? 4 : 0;
    uint32_t cp = len == 1 ? c : len == 2 ? c & 0x1F : len == 3 ? c & 0x0F : c & 0x07;
    int ok = len > 0 && *k + (size_t)len <= n;
    if (ok && len > 2) { /* no overlong form, surrogate or code point past U+10FFFF */
        const unsigned char c1 = u[*k + 1];
        ok = !(c == 0xE0 && c1 < 0xA0) && !(c == 0xED && c1 >= 0xA0) && !(c == 0xF0 && c1 < 0x90) &&
             !(c == 0xF4 && c1 >= 0x90);
    }
    for (int j = 1; ok && j < len; j++) {
        ok = (u[*k + j] & 0xC0) == 0x80;
        cp = cp << 6 | (u[*k + j] & 0x3F);
    }
    if (!ok) { /* a stray byte: itself, outside the code points' range so that no table maps it */
        (*k)++;
        return 0x110000u + c;
    }
    *k += (size_t)len;
    return cp;
}

size_t py_utf8_put(char *out, uint32_t cp) {
    if (cp >= 0x110000u) return out[0] = (char)(cp - 0x110000u), 1;
    if (cp < 0x80) return out[0] = (char)cp, 1;
    if (cp < 0x800) return out[0] = (char)(0xC0 | cp >> 6), out[1] = (char)(0x80 | (cp & 63)), 2;
    if (cp < 0x10000)
        return out[0] = (char)(0xE0 | cp >> 12), out[1] = (char)(0x80 | (cp >> 6 & 63)), out[2] = (char)(0x80 | (cp & 63)), 3;
    out[0] = (char)(0xF0 | cp >> 18), out[1] = (char)(0x80 | (cp >> 12 & 63));
    out[2] = (char)(0x80 | (cp >> 6 & 63)), out[3] = (char)(0x80 | (cp & 63));
    return 4;
}

int py_isspace(uint32_t cp) {
    return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
           cp == 0x3000;
}

static unsigned props(uint32_t cp) { return cp < 0x110000u ? case_props_of(cp) : 0; }

int py_isprintable(uint32_t cp) { return cp < 0x110000u && !(case_props_of(cp) & CASE_UNPRINTABLE); }

int py_is_line_end(uint32_t cp) {
    return (cp >= 0x0A && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x1E) || cp == 0x85 || cp == 0x2028 || cp == 0x2029;
}


/* The mapping of cp in a table, as up to 3 code points into out: their count. */
static int mapped(const uint32_t (*table)[2], size_t len, uint32_t cp, uint32_t out[3]) {
    const uint32_t m = cp < 0x110000u ? case_map_of(table, len, cp) : cp;
    if (!(m & CASE_EXPANDED)) return out[0] = m, 1;
    const uint32_t *e = case_expansions[m & ~CASE_EXPANDED];
    int n = 0;
    while (n < 3 && e[n]) out[n] = e[n], n++;
    return n;
}

/* Python's lower() of cps[i] among cps[0..n): a capital sigma is final (ς) after a cased character
 * and not before one, case-ignorable characters passed over either way. */
static int lower_at(const uint32_t *cps, size_t n, size_t i, uint32_t out[3]) {
    if (cps[i] != 0x3A3) return mapped(case_lower, case_lower_len, cps[i], out);
    size_t j = i;
    while (j > 0 && (props(cps[j - 1]) & CASE_IGNORABLE)) j--;
    int final = j > 0 && (props(cps[j - 1]) & CASE_CASED);
    j = i + 1;
    while (final && j < n && (props(cps[j]) & CASE_IGNORABLE)) j++;
    if (final && j < n) final = !(props(cps[j]) & CASE_CASED);
    out[0] = final ? 0x3C2 : 0x3C3;
    return 1;
}

/* Jinja's title filter splits at runs of these: re.compile(r"([-\s({\[<]+)"). */
static int jinja_word_break(uint32_t cp) {
    return cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<' || py_isspace(cp);
}

size_t py_case(const char *s, size_t n, PyCase mode, char *out) {
    uint32_t *cps = malloc((n + 1) * sizeof *cps);
    size_t count = 0, len = 0;
    if (!cps) abort();
    for (size_t k = 0; k < n;) cps[count++] = py_utf8_next(s, n, &k);
    if (mode == PY_JINJA_TITLE) { /* each piece of the split, the breaks' too: item[0].upper() + item[1:].lower() */
        for (size_t a = 0, b; a < count; a = b) {
            const int brk = jinja_word_break(cps[a]);
            for (b = a + 1; b < count && jinja_word_break(cps[b]) == brk;) b++;
            uint32_t m[3];
            int got = mapped(case_upper, case_upper_len, cps[a], m);
            for (int j = 0; j < got; j++) len += py_utf8_put(out + len, m[j]);
            for (size_t i = a + 1; i < b; i++) {
                got = lower_at(cps + a + 1, b - a - 1, i - a - 1, m);
                for (int j = 0; j < got; j++) len += py_utf8_put(out + len, m[j]);
            }
        }
        free(cps);
        return len;
    }
    int previous_cased = 0;
    for (size_t i = 0; i < count; i++) {
        uint32_t m[3];
        int got;
        const unsigned p = props(cps[i]);
        switch (mode) {
        case PY_UPPER: got = mapped(case_upper, case_upper_len, cps[i], m); break;
        case PY_LOWER: got = lower_at(cps, count, i, m); break;
        case PY_TITLE:
            got = previous_cased ? lower_at(cps, count, i, m) : mapped(case_title, case_title_len, cps[i], m);
            previous_cased = (p & CASE_CASED) != 0;
            break;
        case PY_CAPITALIZE:
            got = i == 0 ? mapped(case_title, case_title_len, cps[i], m) : lower_at(cps, count, i, m);
            break;
        default: /* PY_SWAPCASE */
            got = p & CASE_UPPER ? lower_at(cps, count, i, m)
                : p & CASE_LOWER ? mapped(case_upper, case_upper_len, cps[i], m) : (m[0] = cps[i], 1);
        }
        for (int j = 0; j < got; j++) len += py_utf8_put(out + len, m[j]);
    }
    free(cps);
    return len;
}

int py_str_is(const char *s, size_t n, PyIs which) {
    int any = 0, cased = 0, previous_cased = 0;
    for (size_t k = 0; k < n;) {
        const uint32_t cp = py_utf8_next(s, n, &k);
        const unsigned p = props(cp);
        const int title = cp < 0x110000u && (p & CASE_CASED) && !(p & (CASE_LOWER | CASE_UPPER));
        any = 1;
        switch (which) {
        case PY_ISALPHA: if (!(p & CASE_ALPHA)) return 0; break;
        case PY_ISALNUM: if (!(p & (CASE_ALPHA | CASE_DECIMAL | CASE_DIGIT | CASE_NUMERIC))) return 0; break;
        case PY_ISDIGIT: if (!(p & CASE_DIGIT)) return 0; break;
        case PY_ISDECIMAL: if (!(p & CASE_DECIMAL)) return 0; break;
        case PY_ISNUMERIC: if (!(p & CASE_NUMERIC)) return 0; break;
        case PY_ISSPACE: if (!py_isspace(cp)) return 0; break;
        case PY_ISLOWER: /* no upper or title case, one lower case at least */
            if ((p & CASE_UPPER) || title) return 0;
            cased |= (p & CASE_LOWER) != 0;
            break;
        case PY_ISUPPER:
            if ((p & CASE_LOWER) || title) return 0;
            cased |= (p & CASE_UPPER) != 0;
            break;
        case PY_ISTITLE: /* upper and title case only after uncased ones, lower case only after cased */
            if ((p & CASE_UPPER) || title) {
                if (previous_cased) return 0;
                previous_cased = cased = 1;
            } else if (p & CASE_LOWER) {
                if (!previous_cased) return 0;
                cased = 1;
            } else {
                previous_cased = 0;
            }
            break;
        }
    }
    return which == PY_ISLOWER || which == PY_ISUPPER || which == PY_ISTITLE ? cased : any;
}
