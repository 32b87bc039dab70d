#include "regex_translate.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/util.h"

typedef struct {
    char *s;
    size_t n, cap;
} Str;

static void put(Str *b, const char *p, size_t n) {
    if (b->n + n + 1 > b->cap) {
        b->cap = 2 * (b->n + n + 1) + 64;
        b->s = xrealloc(b->s, b->cap);
    }
    memcpy(b->s + b->n, p, n);
    b->n += n;
    b->s[b->n] = '\0';
}

static void put_str(Str *b, const char *p) { put(b, p, strlen(p)); }

typedef struct {
    const char *p;
    size_t i, n;
    char *err;
    size_t err_cap;
} Parser;

/* Records the first problem; returns 0 so callers can `return fail(...)`. */
static int fail(Parser *ps, size_t at, const char *fmt, ...) KV_PRINTF(3, 4);
static int fail(Parser *ps, size_t at, const char *fmt, ...) {
    int k = snprintf(ps->err, ps->err_cap, "at byte %zu: ", at);
    if (k < 0 || (size_t)k >= ps->err_cap) return 0;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ps->err + k, ps->err_cap - (size_t)k, fmt, ap);
    va_end(ap);
    return 0;
}

/* Property names both engines read alike: the Unicode general categories.
 * Script names and Oniguruma's POSIX-like names (Alpha, Word, ...) differ
 * between the engines or their Unicode versions, so they are refused. */
static const char *const categories[] = {
    "L",  "Lu", "Ll", "Lt", "Lm", "Lo", "M",  "Mn", "Mc", "Me", "N",  "Nd", "Nl", "No", "P",  "Pc", "Pd", "Ps", "Pe",
    "Pi", "Pf", "Po", "S",  "Sm", "Sc", "Sk", "So", "Z",  "Zs", "Zl", "Zp", "C",  "Cc", "Cf", "Co", "Cn", "Cs",
};

/* ps->i is just after \p or \P: reads {Name} or {^Name}. */
static int property(Parser *ps, size_t at, int negate, Str *out) {
    const char *p = ps->p;
    if (ps->i >= ps->n || p[ps->i] != '{')
        return fail(ps, at, "\\%c without {Name} is not supported", negate ? 'P' : 'p');
    size_t start = ps->i + 1;
    if (start < ps->n && p[start] == '^') {
        negate = !negate;
        start++;
    }
    const char *close = memchr(p + start, '}', ps->n - start);
    if (!close) return fail(ps, at, "unterminated \\p{");
    size_t len = (size_t)(close - (p + start));
    for (size_t k = 0; k < sizeof categories / sizeof categories[0]; k++) {
        if (strlen(categories[k]) == len && memcmp(categories[k], p + start, len) == 0) {
            put_str(out, negate ? "\\P{" : "\\p{");
            put(out, p + start, len);
            put_str(out, "}");
            ps->i = (size_t)(close - p) + 1;
            return 1;
        }
    }
    return fail(ps, at, "property \\p{%.*s} is not supported (only Unicode general categories such as L, N, Lu)",
                (int)len, p + start);
}

/* Reads 1..max hex digits at ps->i, or {hex} when braced; emits \x{...}. */
static int hex_escape(Parser *ps, size_t at, size_t max, int exact, Str *out) {
    const char *p = ps->p;
    int braced = max == 2 && ps->i < ps->n && p[ps->i] == '{';
    size_t start = ps->i + (size_t)braced, k = start;
    size_t limit = braced ? 8 : max;
    while (k < ps->n && k - start < limit && isxdigit((unsigned char)p[k])) k++;
    if (k == start || (exact && k - start != max) || (braced && (k >= ps->n || p[k] != '}')))
        return fail(ps, at, "malformed hexadecimal escape");
    put_str(out, "\\x{");
    put(out, p + start, k - start);
    put_str(out, "}");
    ps->i = k + (size_t)braced;
    return 1;
}

enum { ESC_FAILED, ESC_DONE, ESC_WS, ESC_NONWS, ESC_SET };

/* ps->i is at a backslash. Emits literals and properties; \s and \S are
 * left to the caller, whose context decides their spelling. */
static int escape(Parser *ps, Str *out) {
    size_t at = ps->i;
    if (at + 1 >= ps->n) return fail(ps, at, "trailing backslash"), ESC_FAILED;
    unsigned char c = (unsigned char)ps->p[at + 1];
    ps->i = at + 2;
    switch (c) {
        case 's': return ESC_WS;
        case 'S': return ESC_NONWS;
        case 'p':
        case 'P': return property(ps, at, c == 'P', out) ? ESC_SET : ESC_FAILED;
        case 'r': put_str(out, "\\r"); return ESC_DONE;
        case 'n': put_str(out, "\\n"); return ESC_DONE;
        case 't': put_str(out, "\\t"); return ESC_DONE;
        case 'f': put_str(out, "\\f"); return ESC_DONE;
        case 'v': put_str(out, "\\x{0B}"); return ESC_DONE; /* PCRE2's \v is a class */
        case 'x': return hex_escape(ps, at, 2, 0, out) ? ESC_DONE : ESC_FAILED;
        case 'u': return hex_escape(ps, at, 4, 1, out) ? ESC_DONE : ESC_FAILED;
        default:
            if (c < 0x80 && ispunct(c)) { /* an escaped metacharacter: a literal in both engines */
                char lit[2] = {'\\', (char)c};
                put(out, lit, 2);
                return ESC_DONE;
            }
            if (c >= 0x80) return fail(ps, at, "backslash before a non-ASCII character is not supported"), ESC_FAILED;
            return fail(ps, at, "\\%c is not supported", c), ESC_FAILED;
    }
}

/* ps->i is at '['. A class holding \S cannot be written as one PCRE2 class
 * (the whitespace set is a list, not a property), so it becomes
 * (?:[^WS]|[rest]) or, negated, (?:(?![rest])[WS]). */
static int char_class(Parser *ps, Str *out) {
    const char *p = ps->p;
    size_t start = ps->i;
    ps->i++;
    int negated = ps->i < ps->n && p[ps->i] == '^';
    if (negated) ps->i++;
    if (ps->i < ps->n && p[ps->i] == ']') return fail(ps, ps->i, "']' first in a class is not supported (escape it)");
    Str items = {0};
    int nonws = 0, prev_set = 0, prev_dash = 0, ok = 1;
    for (;;) {
        if (ps->i >= ps->n) {
            ok = fail(ps, start, "unterminated '['");
            break;
        }
        char c = p[ps->i];
        if (c == ']') {
            ps->i++;
            break;
        }
        if (c == '[') {
            ok = fail(ps, ps->i, "'[' inside a class (nested or POSIX bracket class) is not supported");
            break;
        }
        if (c == '&' && ps->i + 1 < ps->n && p[ps->i + 1] == '&') {
            ok = fail(ps, ps->i, "class intersection '&&' is not supported");
            break;
        }
        if (c == '-') {
            int last = ps->i + 1 < ps->n && p[ps->i + 1] == ']';
            if (prev_set && !last) {
                ok = fail(ps, ps->i, "a range cannot start at a class escape");
                break;
            }
            put_str(&items, "-");
            ps->i++;
            prev_dash = items.n > 1 && !last;
            prev_set = 0;
            continue;
        }
        int is_set = 0;
        if (c == '\\') {
            size_t at = ps->i;
            int kind = escape(ps, &items);
            if (kind == ESC_FAILED) {
                ok = 0;
                break;
            }
            if (kind == ESC_WS) put_str(&items, REGEX_WS_CLASS_BODY);
            if (kind == ESC_NONWS) nonws = 1;
            is_set = kind != ESC_DONE;
            if (is_set && prev_dash) {
                ok = fail(ps, at, "a range cannot end at a class escape");
                break;
            }
        } else {
            put(&items, &c, 1); /* UTF-8 continuation bytes are copied one by one */
            ps->i++;
        }
        prev_set = is_set;
        prev_dash = 0;
    }
    if (ok) {
        if (!nonws) {
            put_str(out, negated ? "[^" : "[");
            if (items.n) put(out, items.s, items.n);
            put_str(out, "]");
        } else if (!negated) {
            put_str(out, "(?:[^" REGEX_WS_CLASS_BODY "]");
            if (items.n) {
                put_str(out, "|[");
                put(out, items.s, items.n);
                put_str(out, "]");
            }
            put_str(out, ")");
        } else {
            put_str(out, "(?:");
            if (items.n) {
                put_str(out, "(?![");
                put(out, items.s, items.n);
                put_str(out, "])");
            }
            put_str(out, "[" REGEX_WS_CLASS_BODY "])");
        }
    }
    free(items.s);
    return ok;
}

/* Letter pairs that some single character folds into (U+00DF and U+1E9E
 * into ss, the ligatures U+FB00..U+FB06 into ff, fi, fl, st): Oniguruma
 * matches those, per-letter classes cannot. */
static int multi_fold_pair(char a, char b) {
    static const char *const pairs[] = {"ss", "st", "ff", "fi", "fl"};
    for (size_t k = 0; k < sizeof pairs / sizeof pairs[0]; k++)
        if (tolower((unsigned char)a) == pairs[k][0] && tolower((unsigned char)b) == pairs[k][1]) return 1;
    return 0;
}

/* ps->i is at "(?i:". Only alternatives of ASCII literals are understood;
 * each letter becomes the class of the characters Unicode's simple case
 * folding makes equal to it. */
static int case_insensitive_group(Parser *ps, Str *out) {
    const char *p = ps->p;
    size_t start = ps->i;
    ps->i += 4;
    put_str(out, "(?:");
    size_t alt_len = 0;
    for (;;) {
        if (ps->i >= ps->n) return fail(ps, start, "unterminated '(?i:'");
        unsigned char c = (unsigned char)p[ps->i];
        if (c == ')' || c == '|') {
            if (alt_len == 0) return fail(ps, ps->i, "empty alternative in '(?i:...)'");
            put(out, (const char *)&c, 1);
            ps->i++;
            alt_len = 0;
            if (c == ')') return 1;
            continue;
        }
        if (c == '\\') {
            unsigned char d = ps->i + 1 < ps->n ? (unsigned char)p[ps->i + 1] : 0;
            if (!(d < 0x80 && ispunct(d)))
                return fail(ps, ps->i, "'(?i:...)' holds an escape other than an escaped punctuation character");
            char lit[2] = {'\\', (char)d};
            put(out, lit, 2);
            ps->i += 2;
        } else if (c >= 0x80) {
            return fail(ps, ps->i, "'(?i:...)' holds a non-ASCII character (its case folding is not supported)");
        } else if (strchr("()[]{}*+?.^$", c)) {
            return fail(ps, ps->i, "'(?i:...)' holds '%c'; only alternatives of literal characters are supported", c);
        } else if (isalpha(c)) {
            if (alt_len > 0 && isalpha((unsigned char)p[ps->i - 1]) && multi_fold_pair(p[ps->i - 1], (char)c))
                return fail(ps, ps->i - 1, "'(?i:...)' holds '%c%c', which one character folds into (not supported)",
                            p[ps->i - 1], c);
            char cls[4] = {'[', (char)tolower(c), (char)toupper(c), ']'};
            put(out, cls, 3);
            if (tolower(c) == 's') put_str(out, "\\x{17F}"); /* LATIN SMALL LETTER LONG S */
            if (tolower(c) == 'k') put_str(out, "\\x{212A}"); /* KELVIN SIGN */
            put(out, cls + 3, 1);
            ps->i++;
        } else { /* digits and punctuation that is no metacharacter here */
            put(out, (const char *)&c, 1);
            ps->i++;
        }
        alt_len++;
    }
}

/* ps->i is at '{': {n}, {n,}, {n,m} or Oniguruma's {,m} (= {0,m}). */
static int quantifier(Parser *ps, Str *out) {
    const char *p = ps->p;
    size_t at = ps->i, k = at + 1, lo = k;
    while (k < ps->n && isdigit((unsigned char)p[k])) k++;
    size_t lo_end = k, hi = k, hi_end = k;
    int comma = k < ps->n && p[k] == ',';
    if (comma) {
        hi = ++k;
        while (k < ps->n && isdigit((unsigned char)p[k])) k++;
        hi_end = k;
    }
    if (k >= ps->n || p[k] != '}' || (lo_end == lo && (!comma || hi_end == hi)))
        return fail(ps, at, "'{' is not a quantifier {n}, {n,}, {n,m} or {,m} (escape a literal brace)");
    put_str(out, "{");
    if (lo_end == lo) put_str(out, "0");
    else put(out, p + lo, lo_end - lo);
    if (comma) {
        put_str(out, ",");
        put(out, p + hi, hi_end - hi);
    }
    put_str(out, "}");
    ps->i = k + 1;
    return 1;
}

static int starts(const Parser *ps, const char *s) {
    size_t n = strlen(s);
    return ps->i + n <= ps->n && memcmp(ps->p + ps->i, s, n) == 0;
}

char *regex_translate(const char *pattern, char *err, size_t err_cap) {
    Parser ps = {.p = pattern, .i = 0, .n = strlen(pattern), .err = err, .err_cap = err_cap};
    Str out = {0};
    put_str(&out, "");
    int ok = 1, depth = 0;
    static const char *const groups[] = {"(?:", "(?=", "(?!", "(?>", "(?<=", "(?<!"};
    while (ok && ps.i < ps.n) {
        char c = pattern[ps.i];
        switch (c) {
            case '\\': {
                int kind = escape(&ps, &out);
                if (kind == ESC_WS) put_str(&out, "[" REGEX_WS_CLASS_BODY "]");
                if (kind == ESC_NONWS) put_str(&out, "[^" REGEX_WS_CLASS_BODY "]");
                ok = kind != ESC_FAILED;
                break;
            }
            case '[': ok = char_class(&ps, &out); break;
            case '(':
                if (starts(&ps, "(?i:")) {
                    ok = case_insensitive_group(&ps, &out);
                    break;
                }
                if (ps.i + 1 < ps.n && pattern[ps.i + 1] == '?') {
                    size_t k = 0;
                    while (k < sizeof groups / sizeof groups[0] && !starts(&ps, groups[k])) k++;
                    if (k == sizeof groups / sizeof groups[0]) {
                        ok = fail(&ps, ps.i, "group '(?%.2s' is not supported", pattern + ps.i + 2);
                        break;
                    }
                    put_str(&out, groups[k]);
                    ps.i += strlen(groups[k]);
                } else { /* captures mean nothing to a split: keep it cheap */
                    put_str(&out, "(?:");
                    ps.i++;
                }
                depth++;
                break;
            case ')':
                if (depth == 0) {
                    ok = fail(&ps, ps.i, "unbalanced ')'");
                    break;
                }
                depth--;
                put_str(&out, ")");
                ps.i++;
                break;
            case '{': ok = quantifier(&ps, &out); break;
            case '.': /* Oniguruma's . excludes only \n */
                put_str(&out, "[^\\n]");
                ps.i++;
                break;
            case '^':
            case '$': ok = fail(&ps, ps.i, "anchor '%c' is not supported (Oniguruma's are line anchors)", c); break;
            case ']':
            case '}': {
                char lit[2] = {'\\', c};
                put(&out, lit, 2);
                ps.i++;
                break;
            }
            default: put(&out, &c, 1); ps.i++;
        }
    }
    if (ok && depth != 0) ok = fail(&ps, ps.n, "unbalanced '('");
    if (!ok) {
        free(out.s);
        return NULL;
    }
    return out.s;
}
