#ifndef KVCPT_MODEL_EXPORT_H
#define KVCPT_MODEL_EXPORT_H
/* Writing a list of in-memory (or memory-mapped) tensors as a Hugging Face
 * directory (safetensors shards + index) or as a native model file,
 * converting dtype on the fly in bounded chunks. */
#include <stdint.h>

#include "safetensors.h"

typedef struct {
    StTensorSpec out;    /* name, output dtype and shape */
    const void *src;     /* elements in src_dtype, count = product of shape */
    KvDtype src_dtype;
} ExportTensor;

/* Both exports first check every value fits the output dtype: a finite
 * value that would round to inf is an error naming the tensor, the element
 * and the dtype's largest finite value, before the directory is touched.
 *
 * Shards are filled greedily in the given order: a new shard starts when the
 * next tensor would push the current one past shard_bytes. One shard is
 * written as model.safetensors (no index), several as
 * model-0000i-of-0000N.safetensors plus model.safetensors.index.json,
 * written last. A previous export in dir (and a native model file, which
 * would shadow this one) is removed first. Returns the
 * number of shards. */
int export_hf(const char *dir, const ExportTensor *t, int n, int64_t shard_bytes);
void export_native(const char *dir, const ExportTensor *t, int n);
/* Atomically writes text to dir/name. */
void write_text_file_atomic(const char *dir, const char *name, const char *text);
/* Atomically writes n bytes to dir/name. */
void write_file_atomic(const char *dir, const char *name, const void *bytes, int64_t n);

#endif
