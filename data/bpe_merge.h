#ifndef KVCPT_BPE_MERGE_H
#define KVCPT_BPE_MERGE_H
/* Byte-pair merging of one pre-token: start from one token per byte and
 * repeatedly apply the lowest-ranked merge, leftmost first on ties (the
 * rule of Hugging Face's BPE and of llama3-tokenizer-js). A heap with lazy
 * invalidation makes it O(n log n), so long whitespace or symbol runs stay
 * cheap. */
#include <stddef.h>
#include <stdint.h>

#include "bpe_tables.h"

typedef struct {
    uint64_t key; /* rank << 32 | position of the left token */
    int32_t left, left_id, right_id, merged;
} BpeCandidate;

typedef struct {
    int32_t *tok, *prev, *next;
    int64_t cap;
    BpeCandidate *heap;
    int64_t heap_n, heap_cap;
} BpeScratch;

/* Writes the ids for bytes s[0..n) into out (capacity n); returns how many.
 * Every byte_id[s[i]] must be a token. */
int64_t bpe_merge(BpeScratch *w, const PairMap *merges, const int32_t byte_id[256], const uint8_t *s, size_t n,
                  uint32_t *out);
/* The same from n starting token ids (a piece with bytes that have no token
 * of their own, dropped or turned into the unknown token first). */
int64_t bpe_merge_symbols(BpeScratch *w, const PairMap *merges, const int32_t *sym, int64_t n, uint32_t *out);
void bpe_scratch_free(BpeScratch *w);

#endif
