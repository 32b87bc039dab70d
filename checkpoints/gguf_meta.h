#ifndef KVCPT_GGUF_META_H
#define KVCPT_GGUF_META_H
/* Typed access to a GGUF file's metadata for the importers. A key of the
 * wrong type is fatal, naming the file, the key, its byte offset, the type
 * found and the type expected. */
#include <stdint.h>

#include "gguf.h"

/* The entry for key, or NULL when absent. */
const GgufKV *gguf_meta(const GgufFile *f, const char *key);
/* Any integer type; absent: dies when required, else returns dflt. */
int64_t gguf_meta_int(const GgufFile *f, const char *key, int required, int64_t dflt);
/* float32, float64 or an integer, finite and within [lo, hi]; otherwise
 * fatal, naming the key, the value and `range` (the bounds in words). The
 * default is returned as given. */
double gguf_meta_float(const GgufFile *f, const char *key, int required, double dflt, double lo, double hi,
                       const char *range);
int gguf_meta_bool(const GgufFile *f, const char *key, int dflt);
/* A heap NUL-terminated copy, or NULL when absent and not required. A string
 * holding a NUL byte is refused. */
char *gguf_meta_str(const GgufFile *f, const char *key, int required);
/* An array whose elements are strings (want_strings) or integers; NULL when
 * absent and not required. */
const GgufKV *gguf_meta_array(const GgufFile *f, const char *key, int want_strings, int required);
/* An array of float32 (llama.cpp's tokenizer.ggml.scores); NULL when absent
 * and not required. */
const GgufKV *gguf_meta_f32_array(const GgufFile *f, const char *key, int required);
/* Element j of a float32 array. */
float gguf_arr_f32(const GgufKV *kv, uint64_t j);
/* Element j of an integer array. */
int64_t gguf_arr_int(const GgufKV *kv, uint64_t j);
/* File offset of element j of an array (of a string: its bytes), for messages. */
int64_t gguf_arr_offset(const GgufFile *f, const GgufKV *kv, uint64_t j);

#endif
