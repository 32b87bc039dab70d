#include "safetensors.h"

#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/util.h"

/* ---------- reading ---------- */

#define fail(err, errlen, origin, offset, ...) parse_error(err, errlen, "safetensors", origin, offset, __VA_ARGS__)

/* File offset of a tensor's key in the header, for messages (header start
 * when the key is spelled with escapes). */
static int64_t key_offset(const char *json, int64_t len, const char *name) {
    size_t nl = strlen(name);
    for (int64_t i = 0; i + (int64_t)nl + 2 <= len; i++)
        if (json[i] == '"' && memcmp(json + i + 1, name, nl) == 0 && json[i + 1 + nl] == '"') return 8 + i;
    return 8;
}

typedef struct {
    const char *origin, *json;
    int64_t len, data_bytes;
    char *err;
    int errlen;
} ParseCtx;

static int parse_nonneg(const ParseCtx *c, json_t *v, const char *name, const char *what, int64_t *out) {
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return fail(c->err, c->errlen, c->origin, key_offset(c->json, c->len, name),
                    "tensor '%s': expected %s to be non-negative integers", name, what);
    *out = (int64_t)json_integer_value(v);
    return 0;
}

/* computed only on failure: it scans the header */
#define KEY_AT key_offset(c->json, c->len, name)

static int parse_tensor(const ParseCtx *c, const char *name, json_t *v, StTensor *t) {
    if (!json_is_object(v) || json_object_size(v) != 3)
        return fail(c->err, c->errlen, c->origin, KEY_AT,
                    "tensor '%s': expected an object with exactly dtype, shape, data_offsets", name);
    json_t *dt = json_object_get(v, "dtype"), *sh = json_object_get(v, "shape"),
           *off = json_object_get(v, "data_offsets");
    if (!json_is_string(dt) || !json_is_array(sh) || !json_is_array(off))
        return fail(c->err, c->errlen, c->origin, KEY_AT,
                    "tensor '%s': expected \"dtype\" string, \"shape\" list, \"data_offsets\" list", name);
    if (kv_dtype_parse(json_string_value(dt), &t->dtype) != 0)
        return fail(c->err, c->errlen, c->origin, KEY_AT,
                    "tensor '%s': dtype '%s' is not supported (expected F32, BF16 or F16)", name,
                    json_string_value(dt));
    size_t nd = json_array_size(sh);
    if (nd > ST_MAX_DIMS)
        return fail(c->err, c->errlen, c->origin, KEY_AT, "tensor '%s': %zu dimensions, at most %d supported", name, nd,
                    ST_MAX_DIMS);
    t->ndim = (int)nd;
    int64_t bytes = kv_dtype_size(t->dtype);
    for (size_t i = 0; i < nd; i++) {
        if (parse_nonneg(c, json_array_get(sh, i), name, "shape entries", &t->shape[i])) return -1;
        if (__builtin_mul_overflow(bytes, t->shape[i], &bytes))
            return fail(c->err, c->errlen, c->origin, KEY_AT, "tensor '%s': shape product overflows 64 bits", name);
    }
    if (json_array_size(off) != 2)
        return fail(c->err, c->errlen, c->origin, KEY_AT, "tensor '%s': expected data_offsets [begin, end]", name);
    if (parse_nonneg(c, json_array_get(off, 0), name, "data_offsets", &t->begin) ||
        parse_nonneg(c, json_array_get(off, 1), name, "data_offsets", &t->end))
        return -1;
    int64_t ds = 8 + c->len;
    if (t->begin > t->end || t->end > c->data_bytes)
        return fail(c->err, c->errlen, c->origin, KEY_AT,
                    "tensor '%s': data_offsets [%lld, %lld] (file bytes %lld..%lld) must satisfy begin <= end <= %lld "
                    "(data buffer size; file size %lld)",
                    name, (long long)t->begin, (long long)t->end, (long long)(ds + t->begin), (long long)(ds + t->end),
                    (long long)c->data_bytes, (long long)(ds + c->data_bytes));
    if (t->end - t->begin != bytes)
        return fail(c->err, c->errlen, c->origin, KEY_AT,
                    "tensor '%s': shape and dtype %s need %lld bytes but data_offsets span %lld", name,
                    kv_dtype_name(t->dtype), (long long)bytes, (long long)(t->end - t->begin));
    t->name = xstrdup(name);
    return 0;
}
#undef KEY_AT

static int parse_metadata(const ParseCtx *c, json_t *v, StHeader *h) {
    const char *name = "__metadata__";
#define KEY_AT key_offset(c->json, c->len, name)
    if (!json_is_object(v))
        return fail(c->err, c->errlen, c->origin, KEY_AT, "__metadata__: expected an object of strings");
    size_t n = json_object_size(v);
    h->meta_keys = xcalloc(n, sizeof(char *));
    h->meta_values = xcalloc(n, sizeof(char *));
    const char *k;
    json_t *s;
    json_object_foreach(v, k, s) {
        if (!json_is_string(s))
            return fail(c->err, c->errlen, c->origin, KEY_AT, "__metadata__['%s']: expected a string value", k);
        h->meta_keys[h->n_meta] = xstrdup(k);
        h->meta_values[h->n_meta++] = xstrdup(json_string_value(s));
    }
    return 0;
#undef KEY_AT
}

static int by_begin(const void *a, const void *b) {
    const StTensor *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return (x->end > y->end) - (x->end < y->end);
}

/* The tensors must tile [0, data_bytes) exactly. */
static int check_tiling(const ParseCtx *c, StHeader *h) {
    qsort(h->t, (size_t)h->n, sizeof(StTensor), by_begin);
    int64_t pos = 0, ds = 8 + c->len;
    for (int i = 0; i < h->n; i++) {
        const StTensor *t = &h->t[i];
        if (t->begin < pos)
            return fail(c->err, c->errlen, c->origin, ds + t->begin,
                        "tensor '%s' bytes [%lld, %lld) overlap tensor '%s' which ends at %lld", t->name,
                        (long long)t->begin, (long long)t->end, h->t[i - 1].name, (long long)pos);
        if (t->begin > pos)
            return fail(c->err, c->errlen, c->origin, ds + pos,
                        "hole in the data buffer: bytes [%lld, %lld) belong to no tensor (next is '%s')",
                        (long long)pos, (long long)t->begin, t->name);
        pos = t->end;
    }
    if (pos != c->data_bytes)
        return fail(c->err, c->errlen, c->origin, ds + pos,
                    "tensors cover %lld bytes of data but the file holds %lld after the header (expected them equal)",
                    (long long)pos, (long long)c->data_bytes);
    return 0;
}

static int parse_json(StHeader *h, const ParseCtx *c) {
    if (c->len < 2 || c->json[0] != '{')
        return fail(c->err, c->errlen, c->origin, 8, "expected the JSON header to start with '{'");
    json_error_t je;
    json_t *root = json_loadb(c->json, (size_t)c->len, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return fail(c->err, c->errlen, c->origin, 8 + (int64_t)je.position,
                    "invalid JSON header (line %d column %d): %s", je.line, je.column, je.text);
    if (!json_is_object(root)) {
        json_decref(root);
        return fail(c->err, c->errlen, c->origin, 8, "expected the JSON header to be an object");
    }
    h->t = xcalloc(json_object_size(root), sizeof(StTensor));
    const char *key;
    json_t *v;
    int rc = 0;
    json_object_foreach(root, key, v) {
        if (strcmp(key, "__metadata__") == 0) rc = parse_metadata(c, v, h);
        else if (key[0] == '\0') rc = fail(c->err, c->errlen, c->origin, 8, "expected non-empty tensor names");
        else if ((rc = parse_tensor(c, key, v, &h->t[h->n])) == 0) h->n++;
        if (rc) break;
    }
    json_decref(root);
    return rc ? rc : check_tiling(c, h);
}

int st_parse(StHeader *h, const uint8_t *buf, int64_t size, const char *origin, char *err, int errlen) {
    memset(h, 0, sizeof *h);
    if (size < 8)
        return fail(err, errlen, origin, 0, "file is %lld bytes; expected at least the 8-byte header length",
                    (long long)size);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = (n << 8) | buf[i];
    if (n > (uint64_t)ST_MAX_HEADER_BYTES)
        return fail(err, errlen, origin, 0, "header length %llu exceeds the %lld-byte limit", (unsigned long long)n,
                    ST_MAX_HEADER_BYTES);
    if ((int64_t)n > size - 8)
        return fail(err, errlen, origin, 0, "header length %llu runs past the end of the file (%lld bytes; truncated?)",
                    (unsigned long long)n, (long long)size);
    ParseCtx c = {origin, (const char *)buf + 8, (int64_t)n, size - 8 - (int64_t)n, err, errlen};
    h->data_start = 8 + (int64_t)n;
    if (parse_json(h, &c) != 0) {
        st_header_free(h);
        return -1;
    }
    return 0;
}

void st_header_free(StHeader *h) {
    for (int i = 0; i < h->n; i++) free(h->t[i].name);
    for (int i = 0; i < h->n_meta; i++) free(h->meta_keys[i]), free(h->meta_values[i]);
    free(h->t);
    free(h->meta_keys);
    free(h->meta_values);
    memset(h, 0, sizeof *h);
}

int st_open(StFile *f, const char *path, char *err, int errlen) {
    memset(f, 0, sizeof *f);
    if (mapped_file_open(&f->map, path, err, errlen) != 0) return -1;
    if (st_parse(&f->h, f->map.data, f->map.size, path, err, errlen) != 0) {
        mapped_file_close(&f->map);
        return -1;
    }
    return 0;
}

void st_close(StFile *f) {
    st_header_free(&f->h);
    mapped_file_close(&f->map);
}

/* ---------- writing ---------- */

int64_t st_spec_bytes(const StTensorSpec *t) {
    int64_t b = kv_dtype_size(t->dtype);
    for (int i = 0; i < t->ndim; i++) b *= t->shape[i];
    return b;
}

static char *header_json(const StTensorSpec *t, int n, const char *const *meta, int n_meta, int64_t *data_bytes) {
    json_t *root = json_object();
    if (n_meta > 0) {
        json_t *m = json_object();
        for (int i = 0; i < n_meta; i++) json_object_set_new(m, meta[2 * i], json_string(meta[2 * i + 1]));
        json_object_set_new(root, "__metadata__", m);
    }
    int64_t pos = 0;
    for (int i = 0; i < n; i++) {
        KV_CHECK(t[i].ndim >= 0 && t[i].ndim <= ST_MAX_DIMS, "tensor '%s': %d dimensions", t[i].name, t[i].ndim);
        json_t *shape = json_array();
        for (int d = 0; d < t[i].ndim; d++) json_array_append_new(shape, json_integer(t[i].shape[d]));
        int64_t end = pos + st_spec_bytes(&t[i]);
        json_t *e = json_pack("{s:s,s:o,s:[I,I]}", "dtype", kv_dtype_name(t[i].dtype), "shape", shape, "data_offsets",
                              (json_int_t)pos, (json_int_t)end);
        KV_CHECK(e && json_object_get(root, t[i].name) == NULL, "tensor '%s' listed twice for one file", t[i].name);
        json_object_set_new(root, t[i].name, e);
        pos = end;
    }
    char *s = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(root);
    KV_CHECK(s != NULL, "cannot serialise a safetensors header");
    *data_bytes = pos;
    return s;
}

void st_writer_begin(StWriter *w, const char *path, const StTensorSpec *t, int n, const char *const *meta, int n_meta) {
    memset(w, 0, sizeof *w);
    char *js = header_json(t, n, meta, n_meta, &w->data_bytes);
    size_t len = strlen(js), padded = (len + 7) & ~(size_t)7; /* data starts 8-aligned, like the Python writer */
    w->path = xstrdup(path);
    w->tmp_path = xmalloc(strlen(path) + 8);
    sprintf(w->tmp_path, "%s.tmp", path);
    w->f = fopen_check(w->tmp_path, "wb");
    uint8_t le[8];
    for (int i = 0; i < 8; i++) le[i] = (uint8_t)((uint64_t)padded >> (8 * i));
    fwrite_check(le, 1, 8, w->f, w->tmp_path);
    fwrite_check(js, 1, len, w->f, w->tmp_path);
    for (size_t i = len; i < padded; i++) fputc(' ', w->f);
    free(js);
}

void st_writer_write(StWriter *w, const void *bytes, int64_t n) {
    KV_CHECK(w->written + n <= w->data_bytes, "'%s': writing %lld bytes past the %lld announced in the header",
             w->tmp_path, (long long)(w->written + n - w->data_bytes), (long long)w->data_bytes);
    if (n > 0) fwrite_check(bytes, 1, (size_t)n, w->f, w->tmp_path);
    w->written += n;
}

void st_writer_end(StWriter *w) {
    KV_CHECK(w->written == w->data_bytes, "'%s': %lld tensor bytes written but the header announces %lld", w->tmp_path,
             (long long)w->written, (long long)w->data_bytes);
    if (fflush(w->f) != 0 || fsync(fileno(w->f)) != 0) die("'%s': flush failed: %s", w->tmp_path, strerror(errno));
    fclose_check(w->f, w->tmp_path);
    rename_check(w->tmp_path, w->path);
    free(w->path);
    free(w->tmp_path);
    memset(w, 0, sizeof *w);
}
