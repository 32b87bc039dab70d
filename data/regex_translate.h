#ifndef KVCPT_REGEX_TRANSLATE_H
#define KVCPT_REGEX_TRANSLATE_H
/* Rewrites a tokenizer.json split regex (Hugging Face runs it with
 * Oniguruma) into the PCRE2 spelling (UTF + UCP) that matches the same
 * pieces. The engines disagree on a few fringes, so those are spelled out
 * as Hugging Face tokenizers 0.22's Oniguruma behaves (probed character by
 * character with its Split pre-tokenizer):
 *  - \s is Unicode's White_Space list (U+0085 in, U+FEFF and U+180E out),
 *    written as a class so no engine's notion of "space" enters; \S its
 *    complement, inside classes too;
 *  - (?i:...) holding alternatives of ASCII literals becomes per-letter
 *    classes with Unicode's simple case folding: [sS\x{17F}], [kK\x{212A}],
 *    [xX] for the other letters. Oniguruma also folds several characters
 *    into one (U+00DF matches "ss"); alternatives where that could happen
 *    (ss, st, ff, fi, fl in any case) are refused;
 *  - . excludes only \n, {,n} is {0,n}, \v is U+000B, \uHHHH is \x{HHHH}.
 * Anything outside the small subset it understands (anchors, \d \w \b,
 * back-references, inline flags other than (?i:...), nested or POSIX
 * classes, properties other than the Unicode general categories) is
 * refused rather than guessed. */
#include <stddef.h>

/* The whitespace set, as the body of a character class. */
#define REGEX_WS_CLASS_BODY                                                                                            \
    "\\t\\n\\x{0B}\\f\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{"     \
    "3000}"

/* Returns the PCRE2 pattern (heap), or NULL with a message in err that
 * names the byte offset in `pattern` and the construct. */
char *regex_translate(const char *pattern, char *err, size_t err_cap);

#endif
