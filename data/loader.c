#include "loader.h"

#include <stdlib.h>

#include "../common/rng.h"
#include "../common/util.h"

struct Loader {
    const DataSplit *split;
    int64_t sample_len;
    uint64_t seed;
    int rank, world;
    int64_t *eligible, n_eligible; /* document indices, ascending */
    int64_t *order;                /* this epoch's shuffled copy of eligible */
    int64_t order_epoch;
    LoaderPosition pos;
};

Loader *loader_open(const DataSplit *split, int64_t sample_len, uint64_t seed, int rank, int world_size) {
    KV_CHECK(world_size >= 1 && rank >= 0 && rank < world_size, "loader: rank %d is not in [0, world size %d)", rank,
             world_size);
    KV_CHECK(sample_len >= 1, "loader: sample length %lld must be >= 1", (long long)sample_len);
    Loader *l = xcalloc(1, sizeof *l);
    l->split = split;
    l->sample_len = sample_len;
    l->seed = seed;
    l->rank = rank;
    l->world = world_size;
    int64_t n = data_split_num_docs(split);
    l->eligible = xmalloc((size_t)(n ? n : 1) * sizeof(int64_t));
    for (int64_t d = 0; d < n; d++)
        if (data_split_doc_len(split, d) >= sample_len) l->eligible[l->n_eligible++] = d;
    KV_CHECK(l->n_eligible >= world_size,
             "loader: only %lld of %lld documents have >= %lld tokens, fewer than the %d ranks; prepare with "
             "--min-tokens %lld or use more text",
             (long long)l->n_eligible, (long long)n, (long long)sample_len, world_size, (long long)sample_len);
    l->order = xmalloc((size_t)l->n_eligible * sizeof(int64_t));
    l->order_epoch = -1;
    return l;
}

void loader_close(Loader *l) {
    if (!l) return;
    free(l->eligible);
    free(l->order);
    free(l);
}

int64_t loader_samples_per_epoch(const Loader *l) { return l->n_eligible / l->world; }
LoaderPosition loader_position(const Loader *l) { return l->pos; }

/* Fisher-Yates with a generator seeded by (seed, epoch) only, so every rank
 * computes the same order independently. */
static void shuffle_for_epoch(Loader *l, int64_t epoch) {
    if (l->order_epoch == epoch) return;
    for (int64_t i = 0; i < l->n_eligible; i++) l->order[i] = l->eligible[i];
    Rng rng;
    rng_seed(&rng, hash_u64(l->seed) ^ hash_u64((uint64_t)epoch + 0x5bd1e995ull));
    for (int64_t i = l->n_eligible - 1; i > 0; i--) {
        int64_t j = (int64_t)(rng_u64(&rng) % (uint64_t)(i + 1));
        int64_t t = l->order[i];
        l->order[i] = l->order[j];
        l->order[j] = t;
    }
    l->order_epoch = epoch;
}

void loader_seek(Loader *l, LoaderPosition pos) {
    KV_CHECK(pos.epoch >= 0 && pos.index >= 0 && pos.index <= loader_samples_per_epoch(l),
             "loader: position (epoch %lld, index %lld) is outside an epoch of %lld samples", (long long)pos.epoch,
             (long long)pos.index, (long long)loader_samples_per_epoch(l));
    l->pos = pos;
}

void loader_skip(Loader *l, int64_t n) {
    KV_CHECK(n >= 0, "loader: cannot skip %lld samples", (long long)n);
    int64_t per = loader_samples_per_epoch(l);
    if (l->pos.index >= per) l->pos.epoch++, l->pos.index = 0;
    int64_t at = l->pos.index + n;
    l->pos.epoch += at / per;
    l->pos.index = at % per;
}

int64_t loader_next(Loader *l, uint32_t *tokens_out) {
    if (l->pos.index >= loader_samples_per_epoch(l)) {
        l->pos.epoch++;
        l->pos.index = 0;
    }
    shuffle_for_epoch(l, l->pos.epoch);
    int64_t doc = l->order[l->pos.index * l->world + l->rank];
    data_split_read(l->split, doc, 0, l->sample_len, tokens_out);
    l->pos.index++;
    return doc;
}
