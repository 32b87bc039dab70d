#ifndef KVCPT_SAFETENSORS_H
#define KVCPT_SAFETENSORS_H
/* The safetensors file format (huggingface/safetensors): an 8-byte
 * little-endian header length N, N bytes of UTF-8 JSON starting with '{'
 * (padded with spaces), then the data buffer. Each tensor entry gives dtype,
 * shape and data_offsets [begin, end) relative to the data buffer; together
 * they must tile the buffer exactly (no holes, overlaps or duplicates).
 * "__metadata__" is an optional string -> string map.
 *
 * Readers validate everything before allocating anything sized by the file
 * and return an error naming the file, the byte offset and the expectation;
 * the *_or_die wrappers turn that into a fatal error. */
#include <stdint.h>
#include <stdio.h>

#include "dtype.h"
#include "mapped_file.h"

#define ST_MAX_HEADER_BYTES 100000000LL /* the reference implementation's limit */
#define ST_MAX_DIMS 8
#define ST_ERR_LEN 512

typedef struct {
    char *name;
    KvDtype dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    int64_t begin, end; /* byte range in the data buffer */
} StTensor;

typedef struct {
    StTensor *t; /* sorted by begin: the order of the bytes in the file */
    int n;
    char **meta_keys, **meta_values;
    int n_meta;
    int64_t data_start; /* 8 + header length: file offset of the data buffer */
} StHeader;

/* Parses a whole file image (buf, size): length prefix, JSON header and
 * offsets against the data that follows. No I/O; used by the fuzz harness.
 * Returns 0, or -1 with the reason in err (h is then empty). */
int st_parse(StHeader *h, const uint8_t *buf, int64_t size, const char *origin, char *err, int errlen);
void st_header_free(StHeader *h);

typedef struct {
    MappedFile map;
    StHeader h;
} StFile;

int st_open(StFile *f, const char *path, char *err, int errlen);
void st_close(StFile *f);
static inline const uint8_t *st_tensor_data(const StFile *f, int i) {
    return f->map.data + f->h.data_start + f->h.t[i].begin;
}

/* Writer: the header is fixed up front, then tensor bytes are streamed in
 * header order, so an export never holds more than the caller's chunk. The
 * file appears under its final name only after st_writer_end. */
typedef struct {
    const char *name;
    KvDtype dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
} StTensorSpec;

typedef struct {
    FILE *f;
    char *path, *tmp_path;
    int64_t data_bytes, written;
} StWriter;

int64_t st_spec_bytes(const StTensorSpec *t);
/* meta: n_meta key/value pairs (meta[2i], meta[2i+1]) for "__metadata__". */
void st_writer_begin(StWriter *w, const char *path, const StTensorSpec *t, int n, const char *const *meta, int n_meta);
void st_writer_write(StWriter *w, const void *bytes, int64_t n);
void st_writer_end(StWriter *w);

#endif
