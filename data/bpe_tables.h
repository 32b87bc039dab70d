#ifndef KVCPT_BPE_TABLES_H
#define KVCPT_BPE_TABLES_H
/* Hash tables behind the BPE: token bytes -> id, and (left id, right id) ->
 * (merge rank, merged id). Open addressing, built once, read-only after. */
#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint8_t *blob;       /* all token byte strings, back to back */
    int64_t *offset;     /* [n_ids + 1]: token i is blob[offset[i] .. offset[i+1]) */
    int32_t n_ids;
    int32_t *slots;      /* id or -1 */
    uint64_t mask;
} VocabMap;

typedef struct {
    uint64_t key;        /* (left << 32 | right) + 1; 0 marks an empty slot */
    int32_t rank;        /* position in the merges list: lower merges first */
    int32_t merged;
} PairSlot;

typedef struct {
    PairSlot *slots;
    uint64_t mask;
    int64_t count;
} PairMap;

uint64_t bytes_hash(const uint8_t *s, size_t n);

/* Builds the byte->id lookup over n_ids tokens already stored in blob/offset
 * (the caller fills those). Empty strings are not indexed. */
void vocab_map_index(VocabMap *v);
/* id of exactly these bytes, or -1 */
int32_t vocab_map_find(const VocabMap *v, const uint8_t *s, size_t n);
void vocab_map_free(VocabMap *v);

void pair_map_init(PairMap *p, int64_t expected);
/* Returns 0 when the pair was already present (a duplicated merge). */
int pair_map_insert(PairMap *p, int32_t left, int32_t right, int32_t rank, int32_t merged);
const PairSlot *pair_map_find(const PairMap *p, int32_t left, int32_t right);
void pair_map_free(PairMap *p);

#endif
