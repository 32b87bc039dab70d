#include "bpe_merge.h"

#include <stdlib.h>

#include "../common/util.h"

static void reserve(BpeScratch *w, int64_t n) {
    if (n <= w->cap) return;
    int64_t cap = n > 2 * w->cap ? n : 2 * w->cap;
    w->tok = xrealloc(w->tok, (size_t)cap * sizeof(int32_t));
    w->prev = xrealloc(w->prev, (size_t)cap * sizeof(int32_t));
    w->next = xrealloc(w->next, (size_t)cap * sizeof(int32_t));
    w->cap = cap;
}

static void heap_push(BpeScratch *w, BpeCandidate c) {
    if (w->heap_n == w->heap_cap) {
        w->heap_cap = w->heap_cap ? 2 * w->heap_cap : 256;
        w->heap = xrealloc(w->heap, (size_t)w->heap_cap * sizeof(BpeCandidate));
    }
    int64_t i = w->heap_n++;
    while (i > 0) {
        int64_t parent = (i - 1) / 2;
        if (w->heap[parent].key <= c.key) break;
        w->heap[i] = w->heap[parent];
        i = parent;
    }
    w->heap[i] = c;
}

static BpeCandidate heap_pop(BpeScratch *w) {
    BpeCandidate top = w->heap[0], last = w->heap[--w->heap_n];
    int64_t i = 0, n = w->heap_n;
    for (;;) {
        int64_t child = 2 * i + 1;
        if (child >= n) break;
        if (child + 1 < n && w->heap[child + 1].key < w->heap[child].key) child++;
        if (w->heap[child].key >= last.key) break;
        w->heap[i] = w->heap[child];
        i = child;
    }
    if (n > 0) w->heap[i] = last;
    return top;
}

static void consider(BpeScratch *w, const PairMap *merges, int32_t left) {
    if (left < 0 || w->next[left] < 0) return;
    int32_t right = w->next[left];
    const PairSlot *m = pair_map_find(merges, w->tok[left], w->tok[right]);
    if (!m) return;
    heap_push(w, (BpeCandidate){((uint64_t)(uint32_t)m->rank << 32) | (uint32_t)left, left, w->tok[left], w->tok[right],
                                m->merged});
}

/* Merges the n symbols already in w->tok. */
static int64_t merge_all(BpeScratch *w, const PairMap *merges, int32_t n, uint32_t *out) {
    if (n == 0) return 0;
    for (int32_t i = 0; i < n; i++) {
        w->prev[i] = i - 1;
        w->next[i] = i + 1 < n ? i + 1 : -1;
    }
    w->heap_n = 0;
    for (int32_t i = 0; i + 1 < n; i++) consider(w, merges, i);
    while (w->heap_n > 0) {
        BpeCandidate c = heap_pop(w);
        int32_t right = w->next[c.left];
        /* stale when either side has been merged since it was queued; a
         * merged-away left token has tok == -1 */
        if (right < 0 || w->tok[c.left] != c.left_id || w->tok[right] != c.right_id) continue;
        w->tok[c.left] = c.merged;
        w->tok[right] = -1;
        w->next[c.left] = w->next[right];
        if (w->next[right] >= 0) w->prev[w->next[right]] = c.left;
        consider(w, merges, w->prev[c.left]);
        consider(w, merges, c.left);
    }
    int64_t k = 0;
    for (int32_t i = 0; i >= 0; i = w->next[i]) out[k++] = (uint32_t)w->tok[i];
    return k;
}

int64_t bpe_merge(BpeScratch *w, const PairMap *merges, const int32_t byte_id[256], const uint8_t *s, size_t n,
                  uint32_t *out) {
    KV_CHECK(n < (size_t)INT32_MAX, "pre-token of %zu bytes is too long for the BPE", n);
    reserve(w, (int64_t)n);
    for (int32_t i = 0; i < (int32_t)n; i++) w->tok[i] = byte_id[s[i]];
    return merge_all(w, merges, (int32_t)n, out);
}

int64_t bpe_merge_symbols(BpeScratch *w, const PairMap *merges, const int32_t *sym, int64_t n, uint32_t *out) {
    KV_CHECK(n < INT32_MAX, "pre-token of %lld symbols is too long for the BPE", (long long)n);
    reserve(w, n);
    for (int64_t i = 0; i < n; i++) w->tok[i] = sym[i];
    return merge_all(w, merges, (int32_t)n, out);
}

void bpe_scratch_free(BpeScratch *w) {
    free(w->tok);
    free(w->prev);
    free(w->next);
    free(w->heap);
}
