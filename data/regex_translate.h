#ifndef KVCPT_REGEX_TRANSLATE_H
#define KVCPT_REGEX_TRANSLATE_H
/* Rewrites a tokenizer.json split regex (Hugging Face runs it with
 * Oniguruma) into the PCRE2 spelling (UTF + UCP) that matches the same
 * pieces. The engines disagree on a few fringes, so those are spelled out:
 *  - \s is Oniguruma's set as Hugging Face sees it: White_Space minus U+0085,
 *    plus U+FEFF (JavaScript's set); \S its complement, inside classes too;
 *  - (?i:...) holding alternatives of ASCII literals becomes per-letter
 *    classes ([sS]), the ASCII-only folding that Hugging Face's ids show
 *    (Unicode folding would also take U+017F for s and U+212A for k);
 *  - . excludes only \n, {,n} is {0,n}, \v is U+000B, \uHHHH is \x{HHHH}.
 * Anything outside the small subset it understands (anchors, \d \w \b,
 * back-references, inline flags other than (?i:...), nested or POSIX
 * classes, properties other than the Unicode general categories) is
 * refused rather than guessed. */
#include <stddef.h>

/* The whitespace set, as the body of a character class. */
#define REGEX_WS_CLASS_BODY                                                                                      \
    "\\t\\n\\x{0B}\\f\\r\\x{20}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}" \
    "\\x{FEFF}"

/* Returns the PCRE2 pattern (heap), or NULL with a message in err that
 * names the byte offset in `pattern` and the construct. */
char *regex_translate(const char *pattern, char *err, size_t err_cap);

#endif
