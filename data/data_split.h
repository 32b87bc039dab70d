#ifndef KVCPT_DATA_SPLIT_H
#define KVCPT_DATA_SPLIT_H
/* One prepared split (OUT/train, OUT/dev or OUT/test) as a list of documents
 * numbered 0..n-1 across its shards. Opening reads OUT/manifest.json (whose
 * presence marks a finished `prepare`), maps every shard it lists and checks
 * each shard's header and counts against the manifest. */
#include <stdint.h>

#include "answers.h"

typedef struct DataSplit DataSplit;

/* split_dir: e.g. "data/prepared/train"; the manifest is in its parent. */
DataSplit *data_split_open(const char *split_dir);
void data_split_close(DataSplit *s);

int64_t data_split_num_docs(const DataSplit *s);
int64_t data_split_doc_len(const DataSplit *s, int64_t doc);  /* tokens, BOS included */
/* The manifest's answer rule (present = 0 when it has none). */
const AnswerRule *data_split_answers(const DataSplit *s);
/* Copies tokens [start, start + n) of document doc into out. */
void data_split_read(const DataSplit *s, int64_t doc, int64_t start, int64_t n, uint32_t *out);

#endif
