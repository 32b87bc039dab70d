#include "bpe_tables.h"

#include <stdlib.h>
#include <string.h>

#include "../common/util.h"

uint64_t bytes_hash(const uint8_t *s, size_t n) {
    /* FNV-1a, then a final avalanche so that the low bits index well */
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 0x100000001b3ull;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    return h;
}

static uint64_t table_size_for(int64_t count) {
    uint64_t size = 1024;
    while (size < (uint64_t)count * 2) size <<= 1;
    return size;
}

void vocab_map_index(VocabMap *v) {
    uint64_t size = table_size_for(v->n_ids);
    v->mask = size - 1;
    v->slots = xmalloc(size * sizeof(int32_t));
    for (uint64_t i = 0; i < size; i++) v->slots[i] = -1;
    for (int32_t id = 0; id < v->n_ids; id++) {
        const uint8_t *s = v->blob + v->offset[id];
        size_t n = (size_t)(v->offset[id + 1] - v->offset[id]);
        if (n == 0 || vocab_map_find(v, s, n) >= 0) continue; /* first id wins for duplicates */
        uint64_t at = bytes_hash(s, n) & v->mask;
        while (v->slots[at] >= 0) at = (at + 1) & v->mask;
        v->slots[at] = id;
    }
}

int32_t vocab_map_find(const VocabMap *v, const uint8_t *s, size_t n) {
    uint64_t at = bytes_hash(s, n) & v->mask;
    for (;;) {
        int32_t id = v->slots[at];
        if (id < 0) return -1;
        size_t len = (size_t)(v->offset[id + 1] - v->offset[id]);
        if (len == n && memcmp(v->blob + v->offset[id], s, n) == 0) return id;
        at = (at + 1) & v->mask;
    }
}

void vocab_map_free(VocabMap *v) {
    free(v->blob);
    free(v->offset);
    free(v->slots);
    memset(v, 0, sizeof *v);
}

static uint64_t pair_key(int32_t left, int32_t right) {
    return (((uint64_t)(uint32_t)left << 32) | (uint32_t)right) + 1;
}

static uint64_t pair_slot(const PairMap *p, uint64_t key) {
    uint64_t h = key * 0x9E3779B97F4A7C15ull;
    return (h ^ (h >> 29)) & p->mask;
}

void pair_map_init(PairMap *p, int64_t expected) {
    uint64_t size = table_size_for(expected);
    p->mask = size - 1;
    p->count = 0;
    p->slots = xcalloc(size, sizeof(PairSlot));
}

int pair_map_insert(PairMap *p, int32_t left, int32_t right, int32_t rank, int32_t merged) {
    uint64_t key = pair_key(left, right);
    KV_CHECK((uint64_t)(p->count + 1) * 2 <= p->mask + 1, "pair map over capacity (%lld entries)", (long long)p->count);
    uint64_t at = pair_slot(p, key);
    while (p->slots[at].key) {
        if (p->slots[at].key == key) return 0;
        at = (at + 1) & p->mask;
    }
    p->slots[at] = (PairSlot){key, rank, merged};
    p->count++;
    return 1;
}

const PairSlot *pair_map_find(const PairMap *p, int32_t left, int32_t right) {
    uint64_t key = pair_key(left, right);
    uint64_t at = pair_slot(p, key);
    while (p->slots[at].key) {
        if (p->slots[at].key == key) return &p->slots[at];
        at = (at + 1) & p->mask;
    }
    return NULL;
}

void pair_map_free(PairMap *p) {
    free(p->slots);
    memset(p, 0, sizeof *p);
}
