#ifndef KVCPT_GGUF_H
#define KVCPT_GGUF_H
/* The GGUF file format (llama.cpp, docs/gguf.md), version 3, little-endian:
 *   magic "GGUF", u32 version, u64 tensor count, u64 metadata count,
 *   metadata: key (u64 length + bytes), u32 value type, value,
 *   tensor infos: name, u32 n_dims, u64 ne[n_dims] (ne[0] varies fastest),
 *                 u32 ggml type, u64 offset relative to the data section,
 *   padding to general.alignment (default 32), then the data section.
 * Strings are u64 length + bytes, not NUL-terminated. Arrays are u32 element
 * type + u64 count + elements (arrays of arrays are refused here).
 *
 * The parser reads a whole file image and validates every count against the
 * bytes left before it allocates anything sized by the file; errors name the
 * file, the key or tensor and the byte offset. Strings stay pointers into the
 * image (the image must outlive the header). */
#include <stdint.h>

#include "mapped_file.h"

#define GGUF_MAX_DIMS 4 /* ggml's GGML_MAX_DIMS */
#define GGUF_DEFAULT_ALIGNMENT 32
#define GGUF_ERR_LEN 768

typedef enum {
    GGUF_UINT8 = 0,
    GGUF_INT8 = 1,
    GGUF_UINT16 = 2,
    GGUF_INT16 = 3,
    GGUF_UINT32 = 4,
    GGUF_INT32 = 5,
    GGUF_FLOAT32 = 6,
    GGUF_BOOL = 7,
    GGUF_STRING = 8,
    GGUF_ARRAY = 9,
    GGUF_UINT64 = 10,
    GGUF_INT64 = 11,
    GGUF_FLOAT64 = 12,
    GGUF_TYPE_COUNT
} GgufType;

typedef struct {
    const char *p; /* into the file image; not NUL-terminated */
    uint64_t len;
} GgufStr;

typedef struct {
    GgufStr key;
    GgufType type;
    int64_t offset;         /* file offset of the value (after the type) */
    /* scalars: integers and bools in i (or u for the unsigned), floats in f */
    int64_t i;
    uint64_t u;
    double f;
    GgufStr s;              /* GGUF_STRING */
    GgufType arr_type;      /* GGUF_ARRAY: element type, count, first element */
    uint64_t arr_n;
    const uint8_t *arr_data;
    GgufStr *arr_str;       /* arrays of strings: every element (heap) */
} GgufKV;

typedef struct {
    char *name;             /* heap, NUL-terminated */
    int ndim;
    int64_t ne[GGUF_MAX_DIMS];
    uint32_t type;          /* ggml type number (gguf_dequant.h) */
    int64_t numel, bytes;
    int64_t offset;         /* relative to the data section */
    int64_t info_offset;    /* file offset of the tensor's info, for messages */
} GgufTensor;

typedef struct {
    uint32_t version;
    GgufKV *kv;
    int64_t n_kv;
    GgufTensor *t;          /* in the order the file lists them */
    int64_t n_tensors;
    int64_t alignment;
    int64_t data_start;     /* file offset of the data section */
} GgufHeader;

/* 1 when the first bytes are GGUF's magic. */
int gguf_has_magic(const uint8_t *buf, int64_t size);
/* Returns 0, or -1 with "gguf '<origin>' at byte N: ..." in err (h empty). */
int gguf_parse(GgufHeader *h, const uint8_t *buf, int64_t size, const char *origin, char *err, int errlen);
void gguf_header_free(GgufHeader *h);

/* Index of the key or tensor named so, or -1. */
int64_t gguf_find_kv(const GgufHeader *h, const char *key);
int64_t gguf_find_tensor(const GgufHeader *h, const char *name);
/* The GGUF type's name ("uint32", "string", ...). */
const char *gguf_type_name(GgufType t);
/* 1 for the integer and bool types. */
int gguf_type_is_int(GgufType t);

typedef struct {
    MappedFile map;
    GgufHeader h;
} GgufFile;

int gguf_open(GgufFile *f, const char *path, char *err, int errlen);
void gguf_close(GgufFile *f);
static inline const uint8_t *gguf_tensor_data(const GgufFile *f, int64_t i) {
    return f->map.data + f->h.data_start + f->h.t[i].offset;
}
/* 1 when path is a regular file starting with the GGUF magic. */
int gguf_file_detect(const char *path);

#endif
