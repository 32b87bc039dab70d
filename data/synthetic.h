#ifndef KVCPT_SYNTHETIC_H
#define KVCPT_SYNTHETIC_H
/* A deterministic long-range task in the prepared-data format, for runs
 * without a tokenizer (CI, the CPU demo): associative recall. Each document
 * binds keys to values, lists (key value) pairs through the prefill, and
 * ends with queries "key value" for keys bound far back, so the last tokens
 * are predictable only by retrieving the right earlier positions. */
#include <stdint.h>

typedef struct {
    const char *out_dir;
    int64_t vocab;      /* ids: 1 BOS, 2 query marker, keys and values above */
    int64_t doc_tokens; /* tokens per document, BOS included */
    int64_t query_tail; /* the last tokens are query triples (marker key value) */
    int64_t docs;       /* total; split 80/10/10 by document index hash */
    uint64_t seed;
} SyntheticOptions;

#define SYNTH_BOS 1
#define SYNTH_QUERY 2

void synthetic_write(const SyntheticOptions *o);
/* Document i (deterministic in seed and i) into out[0..doc_tokens-1]. */
void synthetic_document(const SyntheticOptions *o, int64_t i, uint32_t *out);
#endif
