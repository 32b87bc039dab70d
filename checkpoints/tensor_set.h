#ifndef KVCPT_TENSOR_SET_H
#define KVCPT_TENSOR_SET_H
/* All tensors of a model directory, whatever its format: a native directory
 * (model.kvcpt), a single Hugging Face model.safetensors, or shards listed by
 * model.safetensors.index.json. Files are memory-mapped; each TensorRef
 * points straight at its bytes, so a tensor is read once, by its consumer. */
#include <stdint.h>

#include "native_model.h"
#include "safetensors.h"

typedef enum { TS_NATIVE, TS_HF } TensorSetFormat;

typedef struct {
    const char *name;
    KvDtype dtype;
    int ndim;
    const int64_t *shape;
    int64_t bytes;
    const uint8_t *data;
    const char *file;     /* for messages */
    int64_t file_offset;
} TensorRef;

typedef struct {
    TensorSetFormat format;
    NmFile native;
    StFile *shards;
    int n_shards;
    TensorRef *t; /* file order: shard by shard, offset by offset */
    int n;
} TensorSet;

/* Returns 0 or -1 with err naming the file, the offset and the expectation. */
int tensor_set_open(TensorSet *s, const char *dir, char *err, int errlen);
void tensor_set_open_or_die(TensorSet *s, const char *dir);
int tensor_set_find(const TensorSet *s, const char *name);
void tensor_set_close(TensorSet *s);
/* 1 when dir holds a native model, 0 for Hugging Face safetensors, -1 neither. */
int tensor_set_detect(const char *dir);

#define HF_SINGLE_FILE "model.safetensors"
#define HF_INDEX_FILE "model.safetensors.index.json"

#endif
