#include "normalizer.h"

#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "../common/util.h"

static char *reserve(NormScratch *w, int k, size_t n) {
    if (n > w->cap[k]) {
        w->cap[k] = n + n / 2 + 64;
        w->buf[k] = xrealloc(w->buf[k], w->cap[k]);
    }
    return w->buf[k];
}

static int is_ascii(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] >= 0x80) return 0;
    return 1;
}

/* NFC into buffer k; ASCII is its own NFC and is returned as it is. */
static const char *nfc(NormScratch *w, int k, const char *s, size_t n, size_t *out_len) {
    *out_len = n;
    if (is_ascii(s, n)) return s;
    const utf8proc_option_t opt = UTF8PROC_STABLE | UTF8PROC_COMPOSE;
    for (;;) {
        utf8proc_ssize_t got = utf8proc_decompose((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, w->cps,
                                                  (utf8proc_ssize_t)w->cps_cap, opt);
        KV_CHECK(got >= 0, "NFC normalizer: %s", utf8proc_errmsg(got));
        if ((size_t)got <= w->cps_cap) {
            /* reencode composes, then writes UTF-8 over the code points: at
             * most 4 bytes each, so the buffer holds the result */
            utf8proc_ssize_t len = utf8proc_reencode(w->cps, got, opt);
            KV_CHECK(len >= 0, "NFC normalizer: %s", utf8proc_errmsg(len));
            char *out = reserve(w, k, (size_t)len + 1);
            memcpy(out, w->cps, (size_t)len);
            *out_len = (size_t)len;
            return out;
        }
        w->cps_cap = (size_t)got + 16;
        w->cps = xrealloc(w->cps, w->cps_cap * sizeof(int32_t));
    }
}

/* Every occurrence of pat, left to right without overlap, becomes rep. */
static const char *replace(NormScratch *w, int k, const char *s, size_t n, const char *pat, const char *rep,
                           size_t *out_len) {
    size_t pl = strlen(pat), rl = strlen(rep), hits = 0;
    for (const char *p = s; (p = memmem(p, n - (size_t)(p - s), pat, pl)) != NULL; p += pl) hits++;
    *out_len = n;
    if (hits == 0) return s;
    size_t len = n - hits * pl + hits * rl;
    KV_CHECK(rl <= pl || (len - n) / (rl - pl) == hits, "normalizer: Replace result too large");
    char *out = reserve(w, k, len + 1), *o = out;
    const char *p = s, *q;
    while ((q = memmem(p, n - (size_t)(p - s), pat, pl)) != NULL) {
        memcpy(o, p, (size_t)(q - p));
        o += q - p;
        memcpy(o, rep, rl);
        o += rl;
        p = q + pl;
    }
    memcpy(o, p, n - (size_t)(p - s));
    *out_len = len;
    return out;
}

const char *normalize(const Normalizer *nz, NormScratch *w, const char *s, size_t n, size_t *out_len) {
    const char *cur = s;
    size_t len = n;
    for (int i = 0; i < nz->n; i++) {
        const NormStep *st = &nz->step[i];
        /* write into the buffer that does not hold the current text */
        int k = cur == w->buf[0] ? 1 : 0;
        if (st->kind == NORM_NFC) {
            cur = nfc(w, k, cur, len, &len);
        } else if (st->kind == NORM_REPLACE) {
            cur = replace(w, k, cur, len, st->text, st->replacement, &len);
        } else if (len > 0) { /* Prepend leaves an empty piece empty */
            size_t pl = strlen(st->text);
            KV_CHECK(len < SIZE_MAX - pl - 1, "normalizer: Prepend result too large");
            char *out = reserve(w, k, len + pl + 1);
            memcpy(out, st->text, pl);
            memcpy(out + pl, cur, len);
            cur = out;
            len += pl;
        }
    }
    *out_len = len;
    return cur;
}

void norm_scratch_free(NormScratch *w) {
    free(w->buf[0]);
    free(w->buf[1]);
    free(w->cps);
    memset(w, 0, sizeof *w);
}

void normalizer_free(Normalizer *nz) {
    for (int i = 0; i < nz->n; i++) {
        free(nz->step[i].text);
        free(nz->step[i].replacement);
    }
    memset(nz, 0, sizeof *nz);
}
