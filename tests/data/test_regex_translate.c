/* Translation of tokenizer.json split regexes (Oniguruma) into PCRE2: each
 * supported construct's spelling, the refusals (naming the offset), and
 * that the translations of the four pre-tokenizer styles compile and split
 * sample text as Hugging Face does. The ids themselves are compared with
 * Hugging Face by tests/data/test_tokenizer_oracle.sh. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdlib.h>
#include <string.h>

#include "../../data/regex_translate.h"
#include "../testlib.h"

#define WS REGEX_WS_CLASS_BODY

static void check_spelling(const char *name, const char *in, const char *want) {
    char err[256] = "";
    char *got = regex_translate(in, err, sizeof err);
    tl_result(got && strcmp(got, want) == 0, name, "'%s' -> '%s' (%s), expected '%s'", in, got ? got : "NULL", err,
              want);
    free(got);
}

static void check_refused(const char *name, const char *in, const char *expect) {
    char err[256] = "";
    char *got = regex_translate(in, err, sizeof err);
    tl_result(!got && strstr(err, expect) != NULL, name, "'%s' -> '%s', error '%s' (expected one with '%s')", in,
              got ? got : "NULL", err, expect);
    free(got);
}

/* Splits text with the translated pattern the way the pre-tokenizer does
 * (matches and the gaps between them are pieces) and joins the pieces with
 * '|'. */
static char *split_join(const char *onig, const char *text) {
    char err[256];
    char *pat = regex_translate(onig, err, sizeof err);
    if (!pat) return NULL;
    int code_err;
    PCRE2_SIZE off;
    pcre2_code *code =
        pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &code_err, &off, NULL);
    free(pat);
    if (!code) return NULL;
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(code, NULL);
    size_t len = strlen(text), pos = 0, prev = 0, n = 0;
    char *out = calloc(2 * len + 2, 1);
    while (pos < len && pcre2_match(code, (PCRE2_SPTR)text, len, pos, 0, md, NULL) >= 0) {
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t pieces[2][2] = {{prev, ov[0]}, {ov[0], ov[1]}};
        for (int k = 0; k < 2; k++) {
            if (pieces[k][1] == pieces[k][0]) continue;
            if (n) out[n++] = '|';
            memcpy(out + n, text + pieces[k][0], pieces[k][1] - pieces[k][0]);
            n += pieces[k][1] - pieces[k][0];
        }
        prev = pos = ov[1] > ov[0] ? ov[1] : ov[1] + 1;
    }
    if (prev < len) {
        if (n) out[n++] = '|';
        memcpy(out + n, text + prev, len - prev);
    }
    pcre2_match_data_free(md);
    pcre2_code_free(code);
    return out;
}

static void check_split(const char *name, const char *onig, const char *text, const char *want) {
    char *got = split_join(onig, text);
    tl_result(got && strcmp(got, want) == 0, name, "got '%s', expected '%s'", got ? got : "(no pattern)", want);
    free(got);
}

static const char llama3[] = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
                             "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char gpt2[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
static const char qwen2[] = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
                            "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

int main(void) {
    check_spelling("\\s outside a class is the whitespace list", "\\s+", "[" WS "]+");
    check_spelling("\\S outside a class is its complement", "a\\S", "a[^" WS "]");
    check_spelling("\\s inside a class joins the list", "[^\\s\\p{L}]", "[^" WS "\\p{L}]");
    check_spelling("\\S inside a positive class becomes an alternation", "[\\Sx]", "(?:[^" WS "]|[x])");
    check_spelling("\\S inside a negated class becomes a look-ahead", "[^\\S\\r\\n]", "(?:(?![\\r\\n])[" WS "])");
    check_spelling("\\S alone in a negated class is the whitespace class", "[^\\S]", "(?:[" WS "])");
    check_spelling("(?i:...) of literals becomes per-letter classes, with U+017F for s and U+212A for k",
                   "(?i:'s|'ll|k9)", "(?:'[sS\\x{17F}]|'[lL][lL]|[kK\\x{212A}]9)");
    check_spelling("general categories pass, \\p{^L} is \\P{L}", "\\p{N}\\P{Lu}\\p{^L}", "\\p{N}\\P{Lu}\\P{L}");
    check_spelling("{,n} is {0,n}; {n}, {n,}, {n,m} kept", "a{,3}b{2}c{2,}d{1,3}", "a{0,3}b{2}c{2,}d{1,3}");
    check_spelling(". excludes only newline", "a.b", "a[^\\n]b");
    check_spelling("\\v is U+000B, \\uHHHH and \\xHH are \\x{...}", "\\v\\u00e9\\x41\\x{1F600}",
                   "\\x{0B}\\x{00e9}\\x{41}\\x{1F600}");
    check_spelling("capturing groups become non-capturing; look-arounds kept", "(a)(?=b)(?!c)(?<=d)(?<!e)(?>f)",
                   "(?:a)(?=b)(?!c)(?<=d)(?<!e)(?>f)");
    check_spelling("escaped metacharacters and UTF-8 literals pass", "\\.\\(\\[\\|é ?", "\\.\\(\\[\\|é ?");

    check_refused("anchors refused", "^a", "at byte 0: anchor '^'");
    check_refused("\\d refused (engines disagree on its range)", "x\\d", "at byte 1: \\d is not supported");
    check_refused("\\w refused", "\\w+", "\\w is not supported");
    check_refused("\\b refused", "a\\b", "\\b is not supported");
    check_refused("back-reference refused", "(a)\\1", "at byte 3: \\1 is not supported");
    check_refused("script properties refused", "\\p{Han}", "property \\p{Han} is not supported");
    check_refused("inline flags other than (?i: refused", "(?m:a)", "group '(?m:' is not supported");
    check_refused("bare (?i) refused", "(?i)a", "group '(?i)' is not supported");
    check_refused("named groups refused", "(?<x>a)", "group '(?<x' is not supported");
    check_refused("(?i:...) with a class refused", "(?i:[a-z]s)", "at byte 4: '(?i:...)' holds '['");
    check_refused("(?i:...) with non-ASCII refused", "(?i:é)", "non-ASCII");
    check_refused("(?i:ss) refused: U+00DF folds into it", "(?i:'re|'SS)", "at byte 9: '(?i:...)' holds 'SS'");
    check_refused("(?i:fi) refused: U+FB01 folds into it", "(?i:xfi)", "holds 'fi'");
    check_refused("nested class refused", "[a[b]]", "at byte 2: '[' inside a class");
    check_refused("POSIX bracket refused", "[[:alpha:]]", "'[' inside a class");
    check_refused("class intersection refused", "[a-z&&[^c]]", "'&&'");
    check_refused("range ending at a class escape refused", "[a-\\s]", "range cannot end");
    check_refused("unbalanced '(' refused", "(a", "unbalanced '('");
    check_refused("unbalanced ')' refused", "a)", "at byte 1: unbalanced ')'");
    check_refused("unterminated class refused", "[ab", "at byte 0: unterminated '['");
    check_refused("'{' that is no quantifier refused", "a{x}", "at byte 1: '{' is not a quantifier");
    check_refused("trailing backslash refused", "a\\", "trailing backslash");

    /* Expected pieces: what Hugging Face tokenizers' Split(pattern, Isolated)
     * gives for these strings (pre_tokenizer.pre_tokenize_str). */
    check_split("Llama 3: digits in threes, contractions fold ASCII, space before letters", llama3,
                "I'LL pay 12345 now's", "I|'LL| pay| |123|45| now|'s");
    check_split("Llama 3: U+017F folds to s and U+212A to k, as in Oniguruma", llama3,
                "x'\xc5\xbft '\xe2\x84\xaa"
                "x",
                "x|'\xc5\xbf|t| '|\xe2\x84\xaa"
                "x");
    check_split("Llama 3: trailing spaces before a word stay apart", llama3, "a   b\n\n c", "a|  | b|\n\n| c");
    check_split("GPT-2: digits in one run, no case folding", gpt2, "I'LL 12345 's", "I|'|LL| 12345| '|s");
    check_split("GPT-2: U+0085 is whitespace, U+FEFF is not", gpt2,
                "a \xc2\x85\xc2\x85"
                "b \xef\xbb\xbf b",
                "a| \xc2\x85|\xc2\x85|"
                "b| \xef\xbb\xbf| b");
    check_split("Qwen2: each digit alone", qwen2, "x 2024!\r\n", "x| |2|0|2|4|!\r\n");
    return tl_finish();
}
