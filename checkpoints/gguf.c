#include "gguf.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/util.h"
#include "gguf_dequant.h"
#include "le_bytes.h"

#define fail(c, offset, ...) parse_error((c)->err, (c)->errlen, "gguf", (c)->origin, (offset), __VA_ARGS__)

/* The reading position in the file image; every read checks the bytes left. */
typedef struct {
    const uint8_t *buf;
    int64_t size, pos;
    const char *origin;
    char *err;
    int errlen;
} Cursor;

static const struct {
    const char *name;
    int bytes; /* 0: variable (string, array) */
} VTYPES[GGUF_TYPE_COUNT] = {
    {"uint8", 1}, {"int8", 1},   {"uint16", 2}, {"int16", 2},  {"uint32", 4}, {"int32", 4},   {"float32", 4},
    {"bool", 1},  {"string", 0}, {"array", 0},  {"uint64", 8}, {"int64", 8},  {"float64", 8},
};

const char *gguf_type_name(GgufType t) { return (unsigned)t < GGUF_TYPE_COUNT ? VTYPES[t].name : "?"; }

int gguf_type_is_int(GgufType t) {
    return t == GGUF_UINT8 || t == GGUF_INT8 || t == GGUF_UINT16 || t == GGUF_INT16 || t == GGUF_UINT32 ||
           t == GGUF_INT32 || t == GGUF_UINT64 || t == GGUF_INT64 || t == GGUF_BOOL;
}

static int64_t left(const Cursor *c) { return c->size - c->pos; }

/* what: the field being read, for the message */
static int need(Cursor *c, int64_t n, const char *what) {
    if (n <= left(c)) return 0;
    return fail(c, c->pos, "file ends inside %s: %lld bytes needed, %lld left (truncated?)", what, (long long)n,
                (long long)left(c));
}

static int rd_u32(Cursor *c, uint32_t *v, const char *what) {
    if (need(c, 4, what)) return -1;
    *v = (uint32_t)get_le(c->buf + c->pos, 4);
    c->pos += 4;
    return 0;
}

static int rd_u64(Cursor *c, uint64_t *v, const char *what) {
    if (need(c, 8, what)) return -1;
    *v = get_le(c->buf + c->pos, 8);
    c->pos += 8;
    return 0;
}

static int rd_str(Cursor *c, GgufStr *s, const char *what) {
    int64_t at = c->pos;
    uint64_t n;
    if (rd_u64(c, &n, what)) return -1;
    if (n > (uint64_t)left(c))
        return fail(c, at, "%s: string length %llu runs past the end of the file (%lld bytes left; truncated?)", what,
                    (unsigned long long)n, (long long)left(c));
    s->p = (const char *)c->buf + c->pos;
    s->len = n;
    c->pos += (int64_t)n;
    return 0;
}

/* A scalar of fixed size at the cursor into kv's i/u/f. */
static void load_scalar(GgufKV *kv, GgufType t, const uint8_t *p) {
    uint64_t raw = get_le(p, VTYPES[t].bytes);
    kv->u = raw;
    switch (t) {
        case GGUF_INT8: kv->i = (int8_t)raw; break;
        case GGUF_INT16: kv->i = (int16_t)raw; break;
        case GGUF_INT32: kv->i = (int32_t)raw; break;
        case GGUF_INT64: kv->i = (int64_t)raw; break;
        case GGUF_FLOAT32: {
            uint32_t b = (uint32_t)raw;
            float f;
            memcpy(&f, &b, 4);
            kv->f = f;
            break;
        }
        case GGUF_FLOAT64: memcpy(&kv->f, &raw, 8); break;
        default: kv->i = (int64_t)raw; break; /* unsigned: i is exact below 2^63 */
    }
}

static int parse_value(Cursor *c, GgufKV *kv, const char *key) {
    if (VTYPES[kv->type].bytes > 0) {
        if (need(c, VTYPES[kv->type].bytes, "a metadata value")) return -1;
        load_scalar(kv, kv->type, c->buf + c->pos);
        if (kv->type == GGUF_BOOL && kv->u > 1)
            return fail(c, c->pos, "key '%s': bool value %llu (expected 0 or 1)", key, (unsigned long long)kv->u);
        c->pos += VTYPES[kv->type].bytes;
        return 0;
    }
    if (kv->type == GGUF_STRING) return rd_str(c, &kv->s, "a string value");
    /* array */
    int64_t at = c->pos;
    uint32_t et;
    uint64_t n;
    if (rd_u32(c, &et, "an array's element type") || rd_u64(c, &n, "an array's length")) return -1;
    if (et >= GGUF_TYPE_COUNT)
        return fail(c, at, "key '%s': unknown array element type %u (expected 0..%d)", key, et, GGUF_TYPE_COUNT - 1);
    if (et == GGUF_ARRAY) return fail(c, at, "key '%s': arrays of arrays are not supported", key);
    kv->arr_type = (GgufType)et;
    kv->arr_n = n;
    kv->arr_data = c->buf + c->pos;
    /* each element takes at least its fixed size (a string: its 8-byte length) */
    int64_t min_each = et == GGUF_STRING ? 8 : VTYPES[et].bytes;
    if (n > (uint64_t)(left(c) / min_each))
        return fail(c, at,
                    "key '%s': array of %llu %s elements needs at least %llu bytes but %lld are left "
                    "(truncated, or a corrupt count?)",
                    key, (unsigned long long)n, VTYPES[et].name, (unsigned long long)n * (unsigned long long)min_each,
                    (long long)left(c));
    if (et != GGUF_STRING) {
        c->pos += (int64_t)n * min_each;
        return 0;
    }
    kv->arr_str = xcalloc(n ? (size_t)n : 1, sizeof(GgufStr));
    for (uint64_t j = 0; j < n; j++) {
        int64_t el = c->pos;
        if (rd_str(c, &kv->arr_str[j], "an array's string")) {
            char keep[GGUF_ERR_LEN];
            snprintf(keep, sizeof keep, "%s", c->err);
            return fail(c, el, "key '%s' element %llu: %s", key, (unsigned long long)j, keep);
        }
    }
    return 0;
}

static int str_eq(GgufStr s, const char *z) { return s.len == strlen(z) && memcmp(s.p, z, s.len) == 0; }

static int parse_kvs(Cursor *c, GgufHeader *h) {
    for (int64_t k = 0; k < h->n_kv; k++) {
        GgufKV *kv = &h->kv[k];
        int64_t at = c->pos;
        if (rd_str(c, &kv->key, "a metadata key")) return -1;
        char key[256];
        snprintf(key, sizeof key, "%.*s", (int)(kv->key.len < 200 ? kv->key.len : 200), kv->key.p);
        if (kv->key.len == 0 || memchr(kv->key.p, 0, kv->key.len))
            return fail(c, at, "metadata key %lld is empty or holds a NUL byte", (long long)k);
        uint32_t t;
        if (rd_u32(c, &t, "a metadata value type")) return -1;
        if (t >= GGUF_TYPE_COUNT)
            return fail(c, c->pos - 4, "key '%s': unknown value type %u (expected 0..%d)", key, t, GGUF_TYPE_COUNT - 1);
        kv->type = (GgufType)t;
        kv->offset = c->pos;
        if (parse_value(c, kv, key)) return -1;
        if (str_eq(kv->key, "general.alignment")) {
            if (kv->type != GGUF_UINT32 || kv->u == 0 || (kv->u & (kv->u - 1)))
                return fail(c, kv->offset, "key 'general.alignment': expected a uint32 power of two, got %s %llu",
                            gguf_type_name(kv->type), (unsigned long long)kv->u);
            h->alignment = (int64_t)kv->u;
        }
    }
    return 0;
}

static int parse_tensor_info(Cursor *c, GgufTensor *t, int64_t index) {
    t->info_offset = c->pos;
    GgufStr name;
    if (rd_str(c, &name, "a tensor name")) return -1;
    if (name.len == 0 || memchr(name.p, 0, name.len))
        return fail(c, t->info_offset, "tensor %lld: empty name or a NUL byte in it", (long long)index);
    t->name = xmalloc(name.len + 1);
    memcpy(t->name, name.p, name.len);
    t->name[name.len] = 0;
    uint32_t nd;
    if (rd_u32(c, &nd, "a tensor's dimension count")) return -1;
    if (nd < 1 || nd > GGUF_MAX_DIMS)
        return fail(c, c->pos - 4, "tensor '%s': %u dimensions (expected 1..%d)", t->name, nd, GGUF_MAX_DIMS);
    t->ndim = (int)nd;
    t->numel = 1;
    for (uint32_t d = 0; d < nd; d++) {
        uint64_t ne;
        if (rd_u64(c, &ne, "a tensor's dimensions")) return -1;
        if (ne > (uint64_t)INT64_MAX || __builtin_mul_overflow(t->numel, (int64_t)ne, &t->numel))
            return fail(c, c->pos - 8, "tensor '%s': dimension %u = %llu makes the element count overflow 64 bits",
                        t->name, d, (unsigned long long)ne);
        t->ne[d] = (int64_t)ne;
    }
    uint32_t type;
    if (rd_u32(c, &type, "a tensor's type")) return -1;
    const GgmlTypeInfo *ti = ggml_type_info(type);
    if (!ti) return fail(c, c->pos - 4, "tensor '%s': unknown ggml type %u", t->name, type);
    t->type = type;
    if (t->ne[0] % ti->block)
        return fail(c, c->pos - 4, "tensor '%s': first dimension %lld is not a multiple of %s's block of %lld", t->name,
                    (long long)t->ne[0], ti->name, (long long)ti->block);
    if (__builtin_mul_overflow(t->numel / ti->block, ti->block_bytes, &t->bytes))
        return fail(c, c->pos - 4, "tensor '%s': byte size overflows 64 bits", t->name);
    uint64_t off;
    if (rd_u64(c, &off, "a tensor's data offset")) return -1;
    if (off > (uint64_t)INT64_MAX)
        return fail(c, c->pos - 8, "tensor '%s': data offset %llu", t->name, (unsigned long long)off);
    t->offset = (int64_t)off;
    return 0;
}

static int by_name(const void *a, const void *b) {
    return strcmp((*(const GgufTensor *const *)a)->name, (*(const GgufTensor *const *)b)->name);
}

static int kv_by_key(const void *a, const void *b) {
    const GgufKV *x = *(const GgufKV *const *)a, *y = *(const GgufKV *const *)b;
    int r = memcmp(x->key.p, y->key.p, x->key.len < y->key.len ? x->key.len : y->key.len);
    return r ? r : (x->key.len > y->key.len) - (x->key.len < y->key.len);
}

/* Duplicate keys, found by sorting (a file may hold many). */
static int check_unique_keys(Cursor *c, GgufHeader *h) {
    GgufKV **order = xcalloc(h->n_kv ? (size_t)h->n_kv : 1, sizeof *order);
    for (int64_t i = 0; i < h->n_kv; i++) order[i] = &h->kv[i];
    qsort(order, (size_t)h->n_kv, sizeof *order, kv_by_key);
    int rc = 0;
    for (int64_t i = 1; i < h->n_kv && !rc; i++)
        if (kv_by_key(&order[i], &order[i - 1]) == 0) {
            const GgufKV *later = order[i]->offset > order[i - 1]->offset ? order[i] : order[i - 1];
            rc = fail(c, later->offset, "metadata key '%.*s' appears twice",
                      (int)(later->key.len < 200 ? later->key.len : 200), later->key.p);
        }
    free(order);
    return rc;
}

static int by_offset(const void *a, const void *b) {
    const GgufTensor *x = *(const GgufTensor *const *)a, *y = *(const GgufTensor *const *)b;
    return (x->offset > y->offset) - (x->offset < y->offset);
}

/* Offsets against the data section: aligned, inside the file, no overlap. */
static int check_tensor_data(Cursor *c, GgufHeader *h) {
    int64_t data_bytes = c->size - h->data_start;
    for (int64_t i = 0; i < h->n_tensors; i++) {
        const GgufTensor *t = &h->t[i];
        if (t->offset % h->alignment)
            return fail(c, t->info_offset, "tensor '%s': data offset %lld is not a multiple of the alignment %lld",
                        t->name, (long long)t->offset, (long long)h->alignment);
        if (t->offset > data_bytes || t->bytes > data_bytes - t->offset)
            return fail(c, t->info_offset,
                        "tensor '%s': %lld bytes at data offset %lld run past the end of the data section "
                        "(%lld bytes from file byte %lld; file size %lld; truncated?)",
                        t->name, (long long)t->bytes, (long long)t->offset, (long long)data_bytes,
                        (long long)h->data_start, (long long)c->size);
    }
    GgufTensor **order = xcalloc(h->n_tensors ? (size_t)h->n_tensors : 1, sizeof *order);
    for (int64_t i = 0; i < h->n_tensors; i++) order[i] = &h->t[i];
    /* sorted, so that a file listing many tensors is not checked in quadratic time */
    qsort(order, (size_t)h->n_tensors, sizeof *order, by_name);
    int rc = 0;
    for (int64_t i = 1; i < h->n_tensors && !rc; i++)
        if (strcmp(order[i]->name, order[i - 1]->name) == 0) {
            const GgufTensor *later = order[i]->info_offset > order[i - 1]->info_offset ? order[i] : order[i - 1];
            rc = fail(c, later->info_offset, "tensor name '%s' appears twice", later->name);
        }
    qsort(order, (size_t)h->n_tensors, sizeof *order, by_offset);
    for (int64_t i = 1; i < h->n_tensors && !rc; i++)
        if (order[i]->offset < order[i - 1]->offset + order[i - 1]->bytes)
            rc = fail(c, h->data_start + order[i]->offset,
                      "tensor '%s' (data offset %lld) overlaps tensor '%s' "
                      "(data bytes %lld..%lld)",
                      order[i]->name, (long long)order[i]->offset, order[i - 1]->name, (long long)order[i - 1]->offset,
                      (long long)(order[i - 1]->offset + order[i - 1]->bytes));
    free(order);
    return rc;
}

int gguf_has_magic(const uint8_t *buf, int64_t size) { return size >= 4 && memcmp(buf, "GGUF", 4) == 0; }

static int parse(Cursor *c, GgufHeader *h) {
    if (!gguf_has_magic(c->buf, c->size)) {
        if (c->size < 4)
            return fail(c, 0, "file is %lld bytes; expected at least the 4-byte magic \"GGUF\"", (long long)c->size);
        return fail(c, 0, "bad magic %02x %02x %02x %02x (expected \"GGUF\")", c->buf[0], c->buf[1], c->buf[2],
                    c->buf[3]);
    }
    c->pos = 4;
    if (rd_u32(c, &h->version, "the version")) return -1;
    if (h->version == 0x03000000u || h->version == 0x02000000u)
        return fail(c, 4, "version bytes read as %u: a big-endian GGUF file, which is not supported", h->version);
    if (h->version != 3) return fail(c, 4, "unsupported GGUF version %u (expected 3)", h->version);
    uint64_t nt, nkv;
    if (rd_u64(c, &nt, "the tensor count") || rd_u64(c, &nkv, "the metadata count")) return -1;
    /* the smallest metadata entry is 13 bytes (8-byte key length, 1 key byte,
     * type, 1-byte value), the smallest tensor info 33 (name length, 1 byte,
     * n_dims, one dimension, type, offset) */
    if (nkv > (uint64_t)(left(c) / 13))
        return fail(c, 16, "metadata count %llu cannot fit in the %lld bytes left (corrupt count?)",
                    (unsigned long long)nkv, (long long)left(c));
    if (nt > (uint64_t)(left(c) / 33))
        return fail(c, 8, "tensor count %llu cannot fit in the %lld bytes left (corrupt count?)",
                    (unsigned long long)nt, (long long)left(c));
    h->n_kv = (int64_t)nkv;
    h->n_tensors = (int64_t)nt;
    h->alignment = GGUF_DEFAULT_ALIGNMENT;
    h->kv = xcalloc(nkv ? (size_t)nkv : 1, sizeof(GgufKV));
    if (parse_kvs(c, h) || check_unique_keys(c, h)) return -1;
    if (nt > (uint64_t)(left(c) / 33))
        return fail(c, 8, "tensor count %llu cannot fit in the %lld bytes left after the metadata (corrupt count?)",
                    (unsigned long long)nt, (long long)left(c));
    h->t = xcalloc(nt ? (size_t)nt : 1, sizeof(GgufTensor));
    for (int64_t i = 0; i < h->n_tensors; i++)
        if (parse_tensor_info(c, &h->t[i], i)) return -1;
    int64_t pad = (h->alignment - c->pos % h->alignment) % h->alignment;
    h->data_start = c->pos + pad;
    if (h->n_tensors > 0 && h->data_start > c->size)
        return fail(c, c->pos, "file ends before the data section (at byte %lld after padding to %lld; truncated?)",
                    (long long)h->data_start, (long long)h->alignment);
    return check_tensor_data(c, h);
}

int gguf_parse(GgufHeader *h, const uint8_t *buf, int64_t size, const char *origin, char *err, int errlen) {
    memset(h, 0, sizeof *h);
    Cursor c = {buf, size, 0, origin, err, errlen};
    if (parse(&c, h) != 0) {
        gguf_header_free(h);
        return -1;
    }
    return 0;
}

void gguf_header_free(GgufHeader *h) {
    for (int64_t i = 0; i < h->n_kv && h->kv; i++) free(h->kv[i].arr_str);
    for (int64_t i = 0; i < h->n_tensors && h->t; i++) free(h->t[i].name);
    free(h->kv);
    free(h->t);
    memset(h, 0, sizeof *h);
}

int64_t gguf_find_kv(const GgufHeader *h, const char *key) {
    for (int64_t i = 0; i < h->n_kv; i++)
        if (str_eq(h->kv[i].key, key)) return i;
    return -1;
}

int64_t gguf_find_tensor(const GgufHeader *h, const char *name) {
    for (int64_t i = 0; i < h->n_tensors; i++)
        if (strcmp(h->t[i].name, name) == 0) return i;
    return -1;
}

int gguf_open(GgufFile *f, const char *path, char *err, int errlen) {
    memset(f, 0, sizeof *f);
    if (mapped_file_open(&f->map, path, err, errlen) != 0) return -1;
    if (gguf_parse(&f->h, f->map.data, f->map.size, path, err, errlen) != 0) {
        mapped_file_close(&f->map);
        return -1;
    }
    return 0;
}

void gguf_close(GgufFile *f) {
    gguf_header_free(&f->h);
    mapped_file_close(&f->map);
}

int gguf_file_detect(const char *path) {
    int fd = open_regular_file(path);
    if (fd < 0) return 0;
    uint8_t magic[4];
    ssize_t n = read(fd, magic, 4);
    close(fd);
    return n == 4 && gguf_has_magic(magic, 4);
}
