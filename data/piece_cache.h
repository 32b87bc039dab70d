#ifndef KVCPT_PIECE_CACHE_H
#define KVCPT_PIECE_CACHE_H
/* Memo of recent pre-tokens that needed BPE merging (words outside the
 * vocabulary recur within a document). Bounded: emptied when full. */
#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint64_t hash;
    int64_t key_off, ids_off;
    int32_t key_len, n_ids; /* key_len 0 marks an empty slot */
} PieceSlot;

typedef struct {
    PieceSlot *slots;
    uint64_t mask;
    int64_t count;
    uint8_t *keys;
    int64_t keys_n, keys_cap;
    uint32_t *ids;
    int64_t ids_n, ids_cap;
} PieceCache;

#define PIECE_CACHE_MAX_KEY 256 /* longer pieces rarely recur */

void piece_cache_init(PieceCache *c);
void piece_cache_free(PieceCache *c);
/* Returns the cached ids (and *n_ids) or NULL. */
const uint32_t *piece_cache_find(const PieceCache *c, uint64_t hash, const uint8_t *key, size_t len, int64_t *n_ids);
void piece_cache_put(PieceCache *c, uint64_t hash, const uint8_t *key, size_t len, const uint32_t *ids, int64_t n_ids);

#endif
