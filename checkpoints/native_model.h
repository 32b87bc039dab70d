#ifndef KVCPT_NATIVE_MODEL_H
#define KVCPT_NATIVE_MODEL_H
/* kvcpt's native model file (model.kvcpt inside a directory that also holds
 * config.json). Tensors keep the dtype they were given, so HF -> native ->
 * HF reproduces the tensor bytes exactly. Little-endian layout:
 *
 *   0  "KVCPTMDL"   8  u32 version (1)   12 u32 tensor count
 *  16  u64 table bytes   24 u64 data start (64-aligned)   32 u64 file size
 *  40  table, per tensor: u32 name length, name, u32 dtype (0 F32, 1 BF16,
 *      2 F16), u32 ndim, u64 shape[ndim], u64 offset (from data start,
 *      64-aligned), u64 bytes
 *      data start: tensor bytes in table order, each 64-byte aligned. */
#include <stdint.h>

#include "mapped_file.h"
#include "safetensors.h"

#define NATIVE_MODEL_FILE "model.kvcpt"

typedef struct {
    char *name;
    KvDtype dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    int64_t offset, bytes; /* offset from the data start */
} NmTensor;

typedef struct {
    MappedFile map;
    NmTensor *t;
    int n;
    int64_t data_start;
} NmFile;

/* Parses a whole file image; no I/O. Returns 0 or -1 with err set. */
int nm_parse(NmFile *f, const uint8_t *buf, int64_t size, const char *origin, char *err, int errlen);
int nm_open(NmFile *f, const char *path, char *err, int errlen);
void nm_close(NmFile *f);
static inline const uint8_t *nm_tensor_data(const NmFile *f, int i) {
    return f->map.data + f->data_start + f->t[i].offset;
}

/* Streaming writer, same contract as StWriter: bytes in spec order, file
 * published under its final name by nm_writer_end. */
typedef struct {
    FILE *f;
    char *path, *tmp_path;
    int64_t *ends; /* end offset of each tensor, from the data start */
    int64_t *begins;
    int n, cur;
    int64_t pos; /* bytes written after the data start */
} NmWriter;

void nm_writer_begin(NmWriter *w, const char *path, const StTensorSpec *t, int n);
void nm_writer_write(NmWriter *w, const void *bytes, int64_t n);
void nm_writer_end(NmWriter *w);

#endif
