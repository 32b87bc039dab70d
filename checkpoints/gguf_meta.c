#include "gguf_meta.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/util.h"
#include "le_bytes.h"

const GgufKV *gguf_meta(const GgufFile *f, const char *key) {
    int64_t i = gguf_find_kv(&f->h, key);
    return i < 0 ? NULL : &f->h.kv[i];
}

static const GgufKV *get(const GgufFile *f, const char *key, int required) {
    const GgufKV *kv = gguf_meta(f, key);
    if (!kv && required) die("gguf '%s': metadata key '%s' is missing (required)", f->map.path, key);
    return kv;
}

#define WRONG(kv, want)                                                                                                \
    die("gguf '%s' at byte %lld: key '%s' is %s%s%s; expected %s", f->map.path, (long long)(kv)->offset, key,          \
        gguf_type_name((kv)->type), (kv)->type == GGUF_ARRAY ? " of " : "",                                            \
        (kv)->type == GGUF_ARRAY ? gguf_type_name((kv)->arr_type) : "", want)

int64_t gguf_meta_int(const GgufFile *f, const char *key, int required, int64_t dflt) {
    const GgufKV *kv = get(f, key, required);
    if (!kv) return dflt;
    if (!gguf_type_is_int(kv->type)) WRONG(kv, "an integer");
    if (kv->type == GGUF_UINT64 && kv->u > (uint64_t)INT64_MAX)
        die("gguf '%s' at byte %lld: key '%s' = %llu is out of range", f->map.path, (long long)kv->offset, key,
            (unsigned long long)kv->u);
    return kv->i;
}

/* The shortest decimal that reads back as f in float32: llama.cpp stored the
 * config's 1e-5 as float32, and config.json should say 1e-5 again rather
 * than the float32's exact 9.99999974737875e-06. */
static double float32_decimal(float f) {
    char buf[64];
    for (int digits = 1; digits <= 9; digits++) {
        snprintf(buf, sizeof buf, "%.*g", digits, (double)f);
        double d = strtod(buf, NULL);
        if ((float)d == f) return d;
    }
    return (double)f;
}

double gguf_meta_float(const GgufFile *f, const char *key, int required, double dflt, double lo, double hi,
                       const char *range) {
    const GgufKV *kv = get(f, key, required);
    if (!kv) return dflt;
    double v;
    if (kv->type == GGUF_FLOAT32) v = float32_decimal((float)kv->f);
    else if (kv->type == GGUF_FLOAT64) v = kv->f;
    else if (gguf_type_is_int(kv->type) && kv->type != GGUF_BOOL) v = (double)kv->i;
    else WRONG(kv, "a number");
    /* NaN fails both comparisons; infinities fail the bounds, which callers
     * keep finite (config.json has no spelling for either) */
    if (!(v >= lo && v <= hi) || !isfinite(v))
        die("gguf '%s' at byte %lld: key '%s' = %g is out of range: expected %s", f->map.path, (long long)kv->offset,
            key, v, range);
    return v;
}

int gguf_meta_bool(const GgufFile *f, const char *key, int dflt) {
    const GgufKV *kv = get(f, key, 0);
    if (!kv) return dflt;
    if (kv->type != GGUF_BOOL) WRONG(kv, "a bool");
    return kv->u != 0;
}

char *gguf_meta_str(const GgufFile *f, const char *key, int required) {
    const GgufKV *kv = get(f, key, required);
    if (!kv) return NULL;
    if (kv->type != GGUF_STRING) WRONG(kv, "a string");
    if (memchr(kv->s.p, 0, kv->s.len))
        die("gguf '%s' at byte %lld: key '%s': the string holds a NUL byte", f->map.path, (long long)kv->offset, key);
    char *s = xmalloc(kv->s.len + 1);
    memcpy(s, kv->s.p, kv->s.len);
    s[kv->s.len] = 0;
    return s;
}

const GgufKV *gguf_meta_array(const GgufFile *f, const char *key, int want_strings, int required) {
    const GgufKV *kv = get(f, key, required);
    if (!kv) return NULL;
    int ok = kv->type == GGUF_ARRAY &&
             (want_strings ? kv->arr_type == GGUF_STRING : gguf_type_is_int(kv->arr_type) && kv->arr_type != GGUF_BOOL);
    if (!ok) WRONG(kv, want_strings ? "an array of strings" : "an array of integers");
    return kv;
}

const GgufKV *gguf_meta_f32_array(const GgufFile *f, const char *key, int required) {
    const GgufKV *kv = get(f, key, required);
    if (kv && (kv->type != GGUF_ARRAY || kv->arr_type != GGUF_FLOAT32)) WRONG(kv, "an array of float32");
    return kv;
}

float gguf_arr_f32(const GgufKV *kv, uint64_t j) {
    uint32_t bits = (uint32_t)get_le(kv->arr_data + 4 * j, 4);
    float v;
    memcpy(&v, &bits, sizeof v);
    return v;
}

/* bytes of one element of each fixed-size type */
static const int ELEM_SIZE[GGUF_TYPE_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};

int64_t gguf_arr_offset(const GgufFile *f, const GgufKV *kv, uint64_t j) {
    if (kv->arr_type == GGUF_STRING) return (int64_t)((const uint8_t *)kv->arr_str[j].p - f->map.data);
    return (int64_t)(kv->arr_data - f->map.data) + (int64_t)j * ELEM_SIZE[kv->arr_type];
}

int64_t gguf_arr_int(const GgufKV *kv, uint64_t j) {
    int s = ELEM_SIZE[kv->arr_type];
    uint64_t raw = get_le(kv->arr_data + j * (uint64_t)s, s);
    switch (kv->arr_type) {
        case GGUF_INT8: return (int8_t)raw;
        case GGUF_INT16: return (int16_t)raw;
        case GGUF_INT32: return (int32_t)raw;
        default: return (int64_t)raw;
    }
}
