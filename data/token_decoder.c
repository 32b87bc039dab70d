#include "token_decoder.h"

#include <stdlib.h>
#include <string.h>

#include "../common/util.h"
#include "utf8.h"

/* A list of token strings, each its own heap copy. */
typedef struct {
    char **s;
    size_t *len;
    int64_t n, cap;
} StrList;

static void list_push(StrList *l, const char *s, size_t n) {
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 64;
        l->s = xrealloc(l->s, (size_t)l->cap * sizeof(char *));
        l->len = xrealloc(l->len, (size_t)l->cap * sizeof(size_t));
    }
    l->s[l->n] = xmalloc(n + 1);
    memcpy(l->s[l->n], s, n);
    l->s[l->n][n] = '\0';
    l->len[l->n++] = n;
}

static void list_free(StrList *l) {
    for (int64_t i = 0; i < l->n; i++) free(l->s[i]);
    free(l->s);
    free(l->len);
    memset(l, 0, sizeof *l);
}

/* The byte of "<0xNN>", or -1: Rust's u8::from_str_radix(NN, 16), which
 * takes either case and a leading '+' ("<0x+A>" is 10). */
static int hex_byte(const char *s, size_t n) {
    if (n != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>') return -1;
    int v = 0;
    for (int i = (s[3] == '+') ? 4 : 3; i < 5; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

static void flush_bytes(StrList *out, ByteBuf *run, int64_t *run_tokens) {
    if (*run_tokens == 0) return;
    if (utf8_first_invalid(run->data, (size_t)run->n) < 0) {
        list_push(out, (const char *)run->data, (size_t)run->n);
    } else {
        for (int64_t i = 0; i < *run_tokens; i++) list_push(out, "\xEF\xBF\xBD", 3); /* U+FFFD */
    }
    run->n = 0;
    *run_tokens = 0;
}

static void step_byte_fallback(const StrList *in, StrList *out) {
    ByteBuf run = {0};
    int64_t run_tokens = 0;
    for (int64_t i = 0; i < in->n; i++) {
        int b = hex_byte(in->s[i], in->len[i]);
        if (b >= 0) {
            uint8_t byte = (uint8_t)b;
            byte_buf_append(&run, &byte, 1);
            run_tokens++;
            continue;
        }
        flush_bytes(out, &run, &run_tokens);
        list_push(out, in->s[i], in->len[i]);
    }
    flush_bytes(out, &run, &run_tokens);
    byte_buf_free(&run);
}

static void step_replace(const StrList *in, StrList *out, const char *pat, const char *rep) {
    size_t pl = strlen(pat), rl = strlen(rep);
    ByteBuf b = {0};
    for (int64_t i = 0; i < in->n; i++) {
        b.n = 0;
        const char *p = in->s[i], *end = p + in->len[i], *q;
        while (pl > 0 && (q = memmem(p, (size_t)(end - p), pat, pl)) != NULL) {
            byte_buf_append(&b, p, (size_t)(q - p));
            byte_buf_append(&b, rep, rl);
            p = q + pl;
        }
        byte_buf_append(&b, p, (size_t)(end - p));
        list_push(out, (const char *)b.data, (size_t)b.n);
    }
    byte_buf_free(&b);
}

/* Length in bytes of the UTF-8 character at s (valid UTF-8). */
static size_t char_len(const char *s) {
    unsigned char c = (unsigned char)*s;
    return c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
}

/* Start of the last character of s[0..n), n > 0. */
static size_t last_char(const char *s, size_t n) {
    size_t i = n - 1;
    while (i > 0 && ((unsigned char)s[i] & 0xC0) == 0x80) i--;
    return i;
}

static void step_strip(const StrList *in, StrList *out, const char *enc, int64_t start, int64_t stop) {
    size_t el = strlen(enc);
    for (int64_t i = 0; i < in->n; i++) {
        const char *s = in->s[i];
        size_t a = 0, z = in->len[i];
        for (int64_t k = 0; k < start && a < z && z - a >= el && memcmp(s + a, enc, el) == 0; k++) a += el;
        for (int64_t k = 0; k < stop && z > a; k++) {
            size_t at = last_char(s, z);
            if (at < a || z - at != el || memcmp(s + at, enc, el) != 0) break;
            z = at;
        }
        list_push(out, s + a, z - a);
    }
}

static void step_metaspace(const StrList *in, StrList *out, const char *rep, int keep_first) {
    size_t rl = strlen(rep);
    ByteBuf b = {0};
    for (int64_t i = 0; i < in->n; i++) {
        b.n = 0;
        const char *p = in->s[i], *end = p + in->len[i];
        while (p < end) {
            size_t cl = char_len(p);
            if (cl == rl && memcmp(p, rep, rl) == 0) {
                if (i > 0 || keep_first) byte_buf_append(&b, " ", 1);
            } else {
                byte_buf_append(&b, p, cl);
            }
            p += cl;
        }
        list_push(out, b.n ? (const char *)b.data : "", (size_t)b.n);
    }
    byte_buf_free(&b);
}

void tok_decoder_run(const TokDecoder *d, const char *const *tok, const size_t *len, int64_t n, ByteBuf *out) {
    StrList cur = {0};
    for (int64_t i = 0; i < n; i++) list_push(&cur, tok[i], len[i]);
    for (int k = 0; k < d->n; k++) {
        const DecStep *st = &d->step[k];
        StrList next = {0};
        switch (st->kind) {
            case DEC_REPLACE: step_replace(&cur, &next, st->text, st->replacement); break;
            case DEC_BYTE_FALLBACK: step_byte_fallback(&cur, &next); break;
            case DEC_STRIP: step_strip(&cur, &next, st->text, st->start, st->stop); break;
            case DEC_METASPACE: step_metaspace(&cur, &next, st->text, st->keep_first); break;
            case DEC_FUSE: {
                ByteBuf all = {0};
                for (int64_t i = 0; i < cur.n; i++) byte_buf_append(&all, cur.s[i], cur.len[i]);
                list_push(&next, all.n ? (const char *)all.data : "", (size_t)all.n);
                byte_buf_free(&all);
                break;
            }
        }
        list_free(&cur);
        cur = next;
    }
    for (int64_t i = 0; i < cur.n; i++) {
        if (i > 0 && !d->present) byte_buf_append(out, " ", 1);
        byte_buf_append(out, cur.s[i], cur.len[i]);
    }
    list_free(&cur);
}

void tok_decoder_free(TokDecoder *d) {
    for (int i = 0; i < d->n; i++) {
        free(d->step[i].text);
        free(d->step[i].replacement);
    }
    memset(d, 0, sizeof *d);
}
