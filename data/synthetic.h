#ifndef KVCPT_SYNTHETIC_H
#define KVCPT_SYNTHETIC_H
/* Deterministic long-range tasks in the prepared-data format, for runs
 * without a tokenizer (CI, the CPU demo). The last tokens of a document are
 * predictable only by retrieving the right positions far back.
 *
 * recall: the body lists (key value) pairs; the tail asks "marker key value"
 *   for keys bound in the first half of the body.
 * copy: the body is distinct random ids; the tail repeats, verbatim, a span
 *   that starts in the first half of the body. Each tail token after the
 *   first is the successor of its previous occurrence (an induction lookup),
 *   and the position it needs moves on by one each token, so a cache chosen
 *   once at the end of the prefill covers only the first few tail tokens
 *   while re-selecting from a later token's attention keeps up. With a fixed
 *   offset the lookup is by relative position (learnable in a few hundred
 *   steps by a tiny model); with a random start it is by content.
 * mqar (multi-query associative recall): the body is records "marker v1..vN"
 *   with markers distinct within the document and values drawn with
 *   replacement (so no value names its successor); the tail repeats records
 *   of the body chosen uniformly. After a repeated marker the values can
 *   only be found by content: the marker's first occurrence. The manifest
 *   records the rule (data/answers.h) that tells eval and the trainer which
 *   targets are answers. */
#include <stdint.h>

#include "splits.h"

typedef enum { SYNTH_TASK_RECALL = 0, SYNTH_TASK_COPY = 1, SYNTH_TASK_MQAR = 2 } SyntheticTask;

typedef struct {
    const char *out_dir;
    SyntheticTask task;
    int64_t vocab;      /* ids: 1 BOS, 2 query marker, task tokens above */
    int64_t doc_tokens; /* tokens per document, BOS included */
    int64_t query_tail; /* recall: query triples (marker key value); copy: the copied span; mqar: repeated records */
    int64_t copy_offset; /* copy: 0 = the span starts at random in the first half of the body;
                            N > 0 = every tail token repeats the token N positions earlier */
    int64_t values;     /* mqar: value tokens per record */
    int64_t markers;    /* mqar: marker ids [3, 3 + markers); 0 = the number of records in the body */
    int64_t docs;       /* total; split by a hash of the document index (splits.h) */
    uint64_t seed;
    const SplitShares *shares; /* NULL: 80/10/10 */
} SyntheticOptions;

#define SYNTH_BOS 1
#define SYNTH_QUERY 2

/* "recall" | "copy" | "mqar"; dies otherwise. */
SyntheticTask synthetic_task_parse(const char *name);
const char *synthetic_task_name(SyntheticTask t);
/* Dies naming the violated limit. */
void synthetic_validate(const SyntheticOptions *o);
void synthetic_write(const SyntheticOptions *o);
/* Document i (deterministic in seed and i) into out[0..doc_tokens-1]. */
void synthetic_document(const SyntheticOptions *o, int64_t i, uint32_t *out);
#endif
