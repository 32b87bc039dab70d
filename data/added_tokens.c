#include "added_tokens.h"

#include <stdlib.h>
#include <string.h>

#include "../common/util.h"

static int longest_first(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

void added_set_build(AddedSet *s, const char *const *contents, const size_t *len, const int32_t *id,
                     const uint8_t *special, int n) {
    memset(s, 0, sizeof *s);
    s->n = n;
    s->id = xmalloc(sizeof(int32_t) * (size_t)(n + 1));
    s->special = xmalloc((size_t)n + 1);
    s->lengths = xmalloc(sizeof(int32_t) * (size_t)(n + 1));
    VocabMap *v = &s->content;
    v->n_ids = n;
    v->offset = xmalloc(sizeof(int64_t) * (size_t)(n + 1));
    v->offset[0] = 0;
    for (int k = 0; k < n; k++) v->offset[k + 1] = v->offset[k] + (int64_t)len[k];
    v->blob = xmalloc((size_t)v->offset[n] + 1);
    for (int k = 0; k < n; k++) {
        KV_CHECK(len[k] > 0 && len[k] < INT32_MAX, "added token %d has an empty or huge content", k);
        memcpy(v->blob + v->offset[k], contents[k], len[k]);
        s->id[k] = id[k];
        s->special[k] = special[k];
        s->n_special += special[k] != 0;
        s->first[(uint8_t)contents[k][0]] = 1;
        int seen = 0;
        for (int j = 0; j < s->n_lengths; j++) seen |= s->lengths[j] == (int32_t)len[k];
        if (!seen) s->lengths[s->n_lengths++] = (int32_t)len[k];
    }
    qsort(s->lengths, (size_t)s->n_lengths, sizeof(int32_t), longest_first);
    vocab_map_index(v);
}

void added_set_free(AddedSet *s) {
    vocab_map_free(&s->content);
    free(s->id);
    free(s->special);
    free(s->lengths);
    memset(s, 0, sizeof *s);
}

int added_set_lookup(const AddedSet *s, const char *text, size_t len) {
    return s->n ? vocab_map_find(&s->content, (const uint8_t *)text, len) : -1;
}

size_t added_set_len(const AddedSet *s, int k) { return (size_t)(s->content.offset[k + 1] - s->content.offset[k]); }

int added_set_find(const AddedSet *s, const char *text, size_t len, size_t from, size_t *at) {
    if (s->n == 0) return -1;
    for (size_t i = from; i < len; i++) {
        if (!s->first[(uint8_t)text[i]]) continue;
        for (int j = 0; j < s->n_lengths; j++) {
            size_t L = (size_t)s->lengths[j];
            if (L > len - i) continue;
            int k = vocab_map_find(&s->content, (const uint8_t *)text + i, L);
            if (k >= 0) {
                *at = i;
                return k;
            }
        }
    }
    return -1;
}
