#ifndef KVCPT_GGUF_IMPORT_H
#define KVCPT_GGUF_IMPORT_H
/* A llama-architecture GGUF file (llama.cpp) as a Hugging Face Llama
 * directory: config.json, weights (fp32, or rounded to bf16/f16) under Hugging Face's names and
 * layouts, tokenizer.json and tokenizer_config.json; or as a native one. */
#include <stdint.h>

#include "../model/config.h"
#include "../model/params.h"
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

/* The same file read in place, nothing written (eval --model FILE.gguf,
 * train's model=FILE.gguf): its config; its weights dequantized into params
 * (pl->total floats, pl built from that config); its tokenizer files as
 * gguf_import writes them (heap strings; 0, or -1 with both NULL when the
 * file has none). Each validates the whole model first, as gguf_import does. */
void gguf_read_config(const char *gguf_path, DecoderConfig *cfg);
void gguf_load_fp32(const char *gguf_path, const DecoderConfig *cfg, const ParamLayout *pl, float *params);
int gguf_read_tokenizer(const char *gguf_path, char **tokenizer_json, char **tokenizer_config_json);

#endif
