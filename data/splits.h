#ifndef KVCPT_SPLITS_H
#define KVCPT_SPLITS_H
/* Deterministic train/dev/test assignment: by a hash of the document's text
 * (so a document lands in the same split whatever the input order, and
 * duplicates never straddle splits). The hash picks a bucket b = h mod 100,
 * read as the key (b mod 10) * 10 + b / 10 (its digits swapped); the first
 * train percent of the keys are train, the next dev percent dev, the rest
 * test. With the default 80/10/10 that is the rule of earlier datasets,
 * h mod 10: 0-7 train, 8 dev, 9 test; and a larger train share only moves
 * documents into train, never between dev and test. */
#include <stddef.h>
#include <stdint.h>

enum { SPLIT_TRAIN, SPLIT_DEV, SPLIT_TEST, SPLIT_COUNT };
extern const char *const split_names[SPLIT_COUNT];
/* The name a reader gives for every split of a dataset at once (eval --split all). */
#define SPLIT_ALL "all"

/* Percent of the documents per split, summing to 100. A split of 0 percent
 * is not written at all (no directory, no manifest entry). */
typedef struct {
    int percent[SPLIT_COUNT];
} SplitShares;

/* 80/10/10. */
SplitShares split_shares_default(void);
/* "TRAIN,DEV,TEST" (whole percents summing to 100, e.g. 80,10,10 or
 * 90,10,0) or "none" (100,0,0: every document in train); dies naming opt. */
SplitShares split_shares_parse(const char *spec, const char *opt);
/* The rule in words, for the manifest. */
void split_shares_rule(const SplitShares *s, const char *hash_text, char *out, size_t n);
/* The split of a document whose hash is h. */
int split_of_hash(uint64_t h, const SplitShares *s);
int split_of_text(const char *text, size_t len, uint64_t seed, const SplitShares *s);

#endif
