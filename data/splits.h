#ifndef KVCPT_SPLITS_H
#define KVCPT_SPLITS_H
/* Deterministic train/dev/test assignment: by a hash of the document's text
 * (so a document lands in the same split whatever the input order, and
 * duplicates never straddle splits): bucket = hash_u64(fnv1a64(text) ^ seed)
 * mod 10; 0-7 train, 8 dev, 9 test. */
#include <stddef.h>
#include <stdint.h>

enum { SPLIT_TRAIN, SPLIT_DEV, SPLIT_TEST, SPLIT_COUNT };
extern const char *const split_names[SPLIT_COUNT];

int split_of_text(const char *text, size_t len, uint64_t seed);

#endif
