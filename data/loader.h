#ifndef KVCPT_LOADER_H
#define KVCPT_LOADER_H
/* Training samples: the first sample_len (= L + S + 1) tokens of a document,
 * as in the paper; documents shorter than that are skipped. For each epoch
 * the eligible documents are shuffled by (seed, epoch); rank r of W takes
 * positions r, r + W, r + 2W, ... of that order, and the tail that does not
 * divide by W is dropped, so every rank has the same number of samples and
 * no two ranks share a document within an epoch. The position (epoch, index)
 * is all the state: saving it and seeking back to it resumes exactly. */
#include <stdint.h>

#include "data_split.h"

typedef struct {
    int64_t epoch;
    int64_t index; /* samples this rank has taken in the epoch */
} LoaderPosition;

typedef struct Loader Loader;

/* The split stays owned by the caller and must outlive the loader. */
Loader *loader_open(const DataSplit *split, int64_t sample_len, uint64_t seed, int rank, int world_size);
void loader_close(Loader *l);

int64_t loader_samples_per_epoch(const Loader *l); /* per rank */
/* Fills tokens_out[0 .. sample_len) and advances (to the next epoch at the
 * end of one). Returns the document index the sample came from. */
int64_t loader_next(Loader *l, uint32_t *tokens_out);
/* Advances past n samples without reading them (the samples other ranks take). */
void loader_skip(Loader *l, int64_t n);
LoaderPosition loader_position(const Loader *l);
void loader_seek(Loader *l, LoaderPosition pos);

#endif
