#ifndef KVCPT_GGUF_IMPORT_H
#define KVCPT_GGUF_IMPORT_H
/* A llama-architecture GGUF file (llama.cpp) as a Hugging Face Llama
 * directory: config.json, weights (fp32, or rounded to bf16/f16) under Hugging Face's names and
 * layouts, tokenizer.json and tokenizer_config.json; or as a native one. */
#include <stdint.h>

#include "dtype.h"

typedef struct {
    int tensors;
    int64_t bytes;       /* weight bytes written */
    int tokenizer;       /* 1 when tokenizer files were written */
} GgufImportStats;

/* Validates the whole file (metadata, every tensor's name, shape and type,
 * the tokenizer) before writing anything; each output file appears under its
 * final name only once complete. Dies naming the file, key or tensor and
 * byte offset on bad input. */
void gguf_import(const char *gguf_path, const char *to_dir, int native, KvDtype dtype, int64_t shard_bytes,
                 GgufImportStats *st);

#endif
