#include "metaspace.h"

#include <stdlib.h>
#include <string.h>

#include "../common/util.h"

void metaspace_pretokenize(const Metaspace *m, MetaspaceScratch *w, const char *s, size_t n, int at_start,
                           void (*fn)(void *ctx, const char *piece, size_t len), void *ctx) {
    if (n == 0) return;
    size_t spaces = 0;
    for (size_t i = 0; i < n; i++) spaces += s[i] == ' ';
    KV_CHECK(n < SIZE_MAX / 8, "Metaspace: text too large");
    size_t need = n + spaces * (m->rep_len - 1) + m->rep_len + 1;
    if (need > w->cap) {
        w->cap = need + need / 2;
        w->buf = xrealloc(w->buf, w->cap);
    }
    char *o = w->buf;
    /* the test for a leading replacement looks at the text after spaces
     * became replacements, as Hugging Face's does */
    int starts_with_rep = s[0] == ' ' || (n >= m->rep_len && memcmp(s, m->rep, m->rep_len) == 0);
    if (!starts_with_rep && (m->prepend == METASPACE_ALWAYS || (m->prepend == METASPACE_FIRST && at_start))) {
        memcpy(o, m->rep, m->rep_len);
        o += m->rep_len;
    }
    for (size_t i = 0; i < n; i++) {
        if (s[i] == ' ') {
            memcpy(o, m->rep, m->rep_len);
            o += m->rep_len;
        } else {
            *o++ = s[i];
        }
    }
    size_t len = (size_t)(o - w->buf);
    if (!m->split) {
        fn(ctx, w->buf, len);
        return;
    }
    const char *p = w->buf, *end = w->buf + len;
    while (p < end) {
        /* the piece runs to the next replacement after its first character */
        const char *q = p + 1, *next = NULL;
        if (q < end) next = memmem(q, (size_t)(end - q), m->rep, m->rep_len);
        if (!next) next = end;
        fn(ctx, p, (size_t)(next - p));
        p = next;
    }
}

void metaspace_scratch_free(MetaspaceScratch *w) {
    free(w->buf);
    memset(w, 0, sizeof *w);
}
