#include "piece_cache.h"

#include <stdlib.h>
#include <string.h>

#include "../common/util.h"

#define SLOTS (1 << 16)
#define MAX_ENTRIES (SLOTS / 2)

void piece_cache_init(PieceCache *c) {
    memset(c, 0, sizeof *c);
    c->slots = xcalloc(SLOTS, sizeof(PieceSlot));
    c->mask = SLOTS - 1;
}

void piece_cache_free(PieceCache *c) {
    free(c->slots);
    free(c->keys);
    free(c->ids);
    memset(c, 0, sizeof *c);
}

const uint32_t *piece_cache_find(const PieceCache *c, uint64_t hash, const uint8_t *key, size_t len, int64_t *n_ids) {
    for (uint64_t at = hash & c->mask;; at = (at + 1) & c->mask) {
        const PieceSlot *s = &c->slots[at];
        if (s->key_len == 0) return NULL;
        if (s->hash == hash && (size_t)s->key_len == len && memcmp(c->keys + s->key_off, key, len) == 0) {
            *n_ids = s->n_ids;
            return c->ids + s->ids_off;
        }
    }
}

static void clear(PieceCache *c) {
    memset(c->slots, 0, SLOTS * sizeof(PieceSlot));
    c->count = c->keys_n = c->ids_n = 0;
}

void piece_cache_put(PieceCache *c, uint64_t hash, const uint8_t *key, size_t len, const uint32_t *ids, int64_t n_ids) {
    if (len == 0 || len > PIECE_CACHE_MAX_KEY) return;
    if (c->count >= MAX_ENTRIES) clear(c);
    if (c->keys_n + (int64_t)len > c->keys_cap) {
        c->keys_cap = 2 * (c->keys_n + (int64_t)len);
        c->keys = xrealloc(c->keys, (size_t)c->keys_cap);
    }
    if (c->ids_n + n_ids > c->ids_cap) {
        c->ids_cap = 2 * (c->ids_n + n_ids);
        c->ids = xrealloc(c->ids, (size_t)c->ids_cap * sizeof(uint32_t));
    }
    uint64_t at = hash & c->mask;
    while (c->slots[at].key_len != 0) at = (at + 1) & c->mask;
    memcpy(c->keys + c->keys_n, key, len);
    memcpy(c->ids + c->ids_n, ids, (size_t)n_ids * sizeof(uint32_t));
    c->slots[at] = (PieceSlot){hash, c->keys_n, c->ids_n, (int32_t)len, (int32_t)n_ids};
    c->keys_n += (int64_t)len;
    c->ids_n += n_ids;
    c->count++;
}
