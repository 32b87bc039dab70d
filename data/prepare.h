#ifndef KVCPT_PREPARE_H
#define KVCPT_PREPARE_H
/* Text -> token shards: read documents (doc_reader), tokenize them in
 * parallel (OpenMP, one TokEncoder per thread, batch order preserved so the
 * output does not depend on the thread count), prepend the tokenizer's BOS
 * when it has one (tokenizer_bos_id), drop documents
 * shorter than min_tokens, split them (80/10/10 unless told; splits.h) and write
 * OUT/{train,dev,test}/shard_NNNNNN.bin (shard.h) plus OUT/manifest.json; a
 * split of 0 percent is not written.
 * The dataset is built in a directory beside OUT and replaces the previous
 * one only when complete (dataset_dir.h): on any error the previous dataset
 * stays as it was. An output directory inside an input directory is not
 * read as input. */
#include <stdint.h>

#include "splits.h"

typedef struct {
    const char **inputs;
    int n_inputs;
    const char *out_dir;
    const char *tokenizer_path;
    int64_t min_tokens;     /* counting the BOS, if one is prepended */
    int64_t shard_tokens;   /* start a new shard beyond this many tokens */
    int threads;            /* 0: all cores */
    int allow_special;
    uint64_t split_seed;
    const SplitShares *shares; /* NULL: 80/10/10 */
    int allow_empty;        /* write a dataset even when no document is kept */
} PrepareOptions;

#define MANIFEST_FORMAT "kvcpt-prepared"
#define MANIFEST_VERSION 1

void prepare_run(const PrepareOptions *o);

#endif
