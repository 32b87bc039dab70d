#include "pretokenize.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>

#include "../common/util.h"

typedef struct {
    pcre2_code *code;
    int jit;
} Stage;

struct Pretokenizer {
    Stage stage[PRETOKENIZE_MAX_STAGES];
    int n;
};

struct PretokenCursor {
    const Pretokenizer *p;
    pcre2_match_data *md[PRETOKENIZE_MAX_STAGES];
};

Pretokenizer *pretokenizer_new(void) { return xcalloc(1, sizeof(Pretokenizer)); }

int pretokenizer_add_stage(Pretokenizer *p, const char *pattern, char *err, size_t err_cap) {
    if (p->n == PRETOKENIZE_MAX_STAGES) {
        snprintf(err, err_cap, "more than %d split stages", PRETOKENIZE_MAX_STAGES);
        return 0;
    }
    int code_err;
    PCRE2_SIZE off;
    pcre2_code *code = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &code_err, &off, NULL);
    if (!code) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(code_err, msg, sizeof msg);
        snprintf(err, err_cap, "PCRE2 cannot compile its translation '%s' at offset %zu: %s", pattern, (size_t)off,
                 (const char *)msg);
        return 0;
    }
    Stage *s = &p->stage[p->n++];
    s->code = code;
    s->jit = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0; /* interpreter fallback otherwise */
    return 1;
}

int pretokenizer_stages(const Pretokenizer *p) { return p->n; }

void pretokenizer_free(Pretokenizer *p) {
    if (!p) return;
    for (int i = 0; i < p->n; i++) pcre2_code_free(p->stage[i].code);
    free(p);
}

PretokenCursor *pretoken_cursor_new(const Pretokenizer *p) {
    PretokenCursor *c = xcalloc(1, sizeof *c);
    c->p = p;
    for (int i = 0; i < p->n; i++) {
        c->md[i] = pcre2_match_data_create_from_pattern(p->stage[i].code, NULL);
        if (!c->md[i]) die("out of memory creating PCRE2 match data");
    }
    return c;
}

void pretoken_cursor_free(PretokenCursor *c) {
    if (!c) return;
    for (int i = 0; i < c->p->n; i++) pcre2_match_data_free(c->md[i]);
    free(c);
}

/* Byte length of the UTF-8 character that starts with b (input is valid). */
static size_t utf8_len(unsigned char b) { return b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4; }

static void split_stage(PretokenCursor *c, int k, const char *s, size_t n, PretokenFn fn, void *ctx) {
    if (k == c->p->n) {
        fn(ctx, s, n);
        return;
    }
    const Stage *st = &c->p->stage[k];
    pcre2_match_data *md = c->md[k];
    size_t prev = 0, from = 0;
    while (from < n) {
        /* the caller validated the UTF-8 once; re-checking per call would be quadratic */
        int rc = st->jit ? pcre2_jit_match(st->code, (PCRE2_SPTR)s, n, from, PCRE2_NO_UTF_CHECK, md, NULL)
                         : pcre2_match(st->code, (PCRE2_SPTR)s, n, from, PCRE2_NO_UTF_CHECK, md, NULL);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof msg);
            die("pre-tokenizer regex (stage %d) failed at byte %zu of a piece: %s", k, from, (const char *)msg);
        }
        const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t m0 = ov[0], m1 = ov[1];
        if (m0 > prev) split_stage(c, k + 1, s + prev, m0 - prev, fn, ctx); /* the gap: a piece of its own */
        if (m1 > m0) {
            split_stage(c, k + 1, s + m0, m1 - m0, fn, ctx);
            prev = from = m1;
        } else {
            /* An empty match still ends the gap before it (Hugging Face
             * drops the empty piece); the search resumes one character on. */
            prev = m0;
            from = m0 + (m0 < n ? utf8_len((unsigned char)s[m0]) : 1);
        }
    }
    if (prev < n) split_stage(c, k + 1, s + prev, n - prev, fn, ctx);
}

void pretokenize(PretokenCursor *c, const char *text, size_t len, PretokenFn fn, void *ctx) {
    if (len == 0) return;
    split_stage(c, 0, text, len, fn, ctx);
}
