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
    pcre2_match_context *mctx;
    /* the last failure: its stage, where its search started, PCRE2's words */
    int err_stage;
    const char *err_at;
    char err[256];
};

Pretokenizer *pretokenizer_new(void) { return xcalloc(1, sizeof(Pretokenizer)); }

int pretokenizer_add_stage(Pretokenizer *p, const char *pattern, char *err, size_t err_cap) {
    if (p->n == PRETOKENIZE_MAX_STAGES) {
        snprintf(err, err_cap, "more than %d split stages", PRETOKENIZE_MAX_STAGES);
        return 0;
    }
    int code_err;
    PCRE2_SIZE off;
    pcre2_code *code =
        pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &code_err, &off, NULL);
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
    /* PCRE2's default match limit (10 million backtracking steps) is a guard
     * for hand-written patterns, but the tokenizer patterns backtrack once
     * per character of a white-space run (\s*[\r\n]+ first takes the whole
     * run, then gives it back looking for a line break): 20 MB of spaces
     * would fail although Hugging Face tokenizes it. Those patterns do
     * linear work per match, so the limits go to their maximum, which
     * changes no match, only which inputs get one. */
    c->mctx = pcre2_match_context_create(NULL);
    if (!c->mctx) die("out of memory creating the PCRE2 match context");
    if (pcre2_set_match_limit(c->mctx, UINT32_MAX) != 0 || pcre2_set_depth_limit(c->mctx, UINT32_MAX) != 0)
        die("internal error: PCRE2 refused its own maximum match limits");
    return c;
}

void pretoken_cursor_free(PretokenCursor *c) {
    if (!c) return;
    for (int i = 0; i < c->p->n; i++) pcre2_match_data_free(c->md[i]);
    pcre2_match_context_free(c->mctx);
    free(c);
}

/* Byte length of the UTF-8 character that starts with b (input is valid). */
static size_t utf8_len(unsigned char b) { return b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4; }

/* Returns 1, or 0 after a regex failure (the message in c->err). */
static int split_stage(PretokenCursor *c, int k, const char *s, size_t n, PretokenFn fn, void *ctx) {
    if (k == c->p->n) {
        fn(ctx, s, n);
        return 1;
    }
    const Stage *st = &c->p->stage[k];
    pcre2_match_data *md = c->md[k];
    size_t prev = 0, from = 0;
    while (from < n) {
        /* the caller validated the UTF-8 once; re-checking per call would be quadratic */
        int rc = st->jit ? pcre2_jit_match(st->code, (PCRE2_SPTR)s, n, from, PCRE2_NO_UTF_CHECK, md, c->mctx)
                         : pcre2_match(st->code, (PCRE2_SPTR)s, n, from, PCRE2_NO_UTF_CHECK, md, c->mctx);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            if (pcre2_get_error_message(rc, (PCRE2_UCHAR *)c->err, sizeof c->err) < 0)
                snprintf(c->err, sizeof c->err, "PCRE2 error %d", rc);
            c->err_stage = k;
            c->err_at = s + from;
            return 0;
        }
        const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t m0 = ov[0], m1 = ov[1];
        /* the gap before the match: a piece of its own */
        if (m0 > prev && !split_stage(c, k + 1, s + prev, m0 - prev, fn, ctx)) return 0;
        if (m1 > m0) {
            if (!split_stage(c, k + 1, s + m0, m1 - m0, fn, ctx)) return 0;
            prev = from = m1;
        } else {
            /* An empty match still ends the gap before it (Hugging Face
             * drops the empty piece); the search resumes one character on. */
            prev = m0;
            from = m0 + (m0 < n ? utf8_len((unsigned char)s[m0]) : 1);
        }
    }
    return prev >= n || split_stage(c, k + 1, s + prev, n - prev, fn, ctx);
}

int pretokenize(PretokenCursor *c, const char *text, size_t len, PretokenFn fn, void *ctx) {
    if (len == 0) return 1;
    return split_stage(c, 0, text, len, fn, ctx);
}

const char *pretoken_cursor_error(const PretokenCursor *c, int *stage, const char **at) {
    *stage = c->err_stage;
    *at = c->err_at;
    return c->err;
}
