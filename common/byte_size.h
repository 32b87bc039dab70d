#ifndef KVCPT_BYTE_SIZE_H
#define KVCPT_BYTE_SIZE_H
/* Sizes written as people write them: "5GB" is 5e9 bytes, as transformers
 * counts shard sizes; KB/MB/GB/TB are powers of ten, KiB/MiB/GiB powers of
 * two; a bare number is bytes. Shared by `convert --shard-size` and the
 * trainer's model_shard_size key, so both read the same text the same way. */
#include <stdint.h>

/* 0 and *bytes (>= 1, below 9e18), or -1 for text that is not such a size. */
int byte_size_parse(const char *s, int64_t *bytes);

#endif
