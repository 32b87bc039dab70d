#include "pretokenize.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdlib.h>

#include "../common/util.h"

/* tokenizer.json's pattern is
 *   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
 *    ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 * Regex engines disagree on the fringes of \s and (?i), so both are spelled
 * out; the ids equal Hugging Face tokenizers' and tiktoken's (with Meta's
 * pattern) on the adversarial cases that probe these fringes
 * (tests/test_tokenizer_oracle.sh):
 *  - \s is JavaScript's set: White_Space minus U+0085, plus U+FEFF;
 *  - the contractions are case-folded by plain ASCII pairs ([sS], not the
 *    Unicode fold that would also take U+017F). */
#define WS "\\t\\n\\x{0B}\\f\\r\\x{20}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}\\x{FEFF}"
static const char pattern[] =
    "'(?:[sS]|[tT]|[rR][eE]|[vV][eE]|[mM]|[lL][lL]|[dD])"
    "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+"
    "|\\p{N}{1,3}"
    "| ?[^" WS "\\p{L}\\p{N}]+[\\r\\n]*"
    "|[" WS "]*[\\r\\n]+"
    "|[" WS "]+(?![^" WS "])"
    "|[" WS "]+";

struct Pretokenizer {
    pcre2_code *code;
    int jit;
};

struct PretokenCursor {
    const Pretokenizer *p;
    pcre2_match_data *md;
};

Pretokenizer *pretokenizer_new(void) {
    int err;
    PCRE2_SIZE erroff;
    pcre2_code *code = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &err, &erroff, NULL);
    if (!code) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof msg);
        die("pre-tokenizer regex does not compile at offset %zu: %s", (size_t)erroff, (const char *)msg);
    }
    Pretokenizer *p = xcalloc(1, sizeof *p);
    p->code = code;
    p->jit = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0; /* interpreter fallback otherwise */
    return p;
}

void pretokenizer_free(Pretokenizer *p) {
    if (!p) return;
    pcre2_code_free(p->code);
    free(p);
}

PretokenCursor *pretoken_cursor_new(const Pretokenizer *p) {
    PretokenCursor *c = xcalloc(1, sizeof *c);
    c->p = p;
    c->md = pcre2_match_data_create_from_pattern(p->code, NULL);
    if (!c->md) die("out of memory creating PCRE2 match data");
    return c;
}

void pretoken_cursor_free(PretokenCursor *c) {
    if (!c) return;
    pcre2_match_data_free(c->md);
    free(c);
}

int pretoken_next(PretokenCursor *c, const char *text, size_t len, size_t *pos, size_t *start, size_t *end) {
    if (*pos >= len) return 0;
    /* the caller validated the UTF-8 once; re-checking per call would be quadratic */
    int rc = c->p->jit ? pcre2_jit_match(c->p->code, (PCRE2_SPTR)text, len, *pos, PCRE2_NO_UTF_CHECK, c->md, NULL)
                       : pcre2_match(c->p->code, (PCRE2_SPTR)text, len, *pos, PCRE2_NO_UTF_CHECK, c->md, NULL);
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(c->md);
    if (rc < 0 || ov[0] != *pos || ov[1] <= ov[0]) {
        /* The alternatives cover every code point, so a gap means a broken
         * pattern or engine; the oracle would emit the gap as its own piece. */
        if (rc == PCRE2_ERROR_NOMATCH || (rc >= 0 && ov[0] > *pos)) {
            *start = *pos;
            *end = rc >= 0 ? ov[0] : len;
            *pos = *end;
            return 1;
        }
        if (rc < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof msg);
            die("pre-tokenizer regex failed at byte %zu: %s", *pos, (const char *)msg);
        }
        die("pre-tokenizer regex matched an empty piece at byte %zu", *pos);
    }
    *start = ov[0];
    *end = ov[1];
    *pos = ov[1];
    return 1;
}
