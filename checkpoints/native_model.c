#include "native_model.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/util.h"
#include "le_bytes.h"

static const char MAGIC[8] = {'K', 'V', 'C', 'P', 'T', 'M', 'D', 'L'};
enum { VERSION = 1, FIXED = 40, ALIGN = 64, MAX_NAME = 4096 };

static int64_t align_up(int64_t x) { return (x + ALIGN - 1) / ALIGN * ALIGN; }

#define fail(err, errlen, origin, offset, ...) parse_error(err, errlen, "native model", origin, offset, __VA_ARGS__)

/* Bounded cursor over the table: every read is checked against its end. */
typedef struct {
    const uint8_t *buf;
    int64_t pos, end;
} Cursor;

static int take(Cursor *c, int64_t n, const uint8_t **out) {
    if (n < 0 || n > c->end - c->pos) return -1;
    *out = c->buf + c->pos;
    c->pos += n;
    return 0;
}

static int parse_entry(NmFile *f, Cursor *c, int64_t data_bytes, const char *origin, char *err, int errlen) {
    NmTensor *t = &f->t[f->n];
    int64_t at = c->pos;
    const uint8_t *p;
    if (take(c, 4, &p)) return fail(err, errlen, origin, at, "tensor %d: table ends inside its entry", f->n);
    int64_t nl = (int64_t)get_le(p, 4);
    if (nl == 0 || nl > MAX_NAME)
        return fail(err, errlen, origin, at, "tensor %d: name length %lld, expected 1..%d", f->n, (long long)nl,
                    MAX_NAME);
    const uint8_t *name;
    if (take(c, nl, &name) || take(c, 8, &p))
        return fail(err, errlen, origin, at, "tensor %d: table ends inside its entry", f->n);
    uint32_t dt = (uint32_t)get_le(p, 4), nd = (uint32_t)get_le(p + 4, 4);
    if (memchr(name, 0, (size_t)nl)) return fail(err, errlen, origin, at, "tensor %d: name contains a NUL byte", f->n);
    if (dt >= KV_DTYPE_COUNT)
        return fail(err, errlen, origin, at, "tensor %d: dtype code %u, expected 0..%d", f->n, dt, KV_DTYPE_COUNT - 1);
    if (nd > ST_MAX_DIMS)
        return fail(err, errlen, origin, at, "tensor %d: %u dimensions, at most %d", f->n, nd, ST_MAX_DIMS);
    if (take(c, 8 * (int64_t)nd + 16, &p))
        return fail(err, errlen, origin, at, "tensor %d: table ends inside its entry", f->n);
    t->dtype = (KvDtype)dt;
    t->ndim = (int)nd;
    uint64_t bytes = (uint64_t)kv_dtype_size(t->dtype);
    for (uint32_t i = 0; i < nd; i++) {
        t->shape[i] = (int64_t)get_le(p + 8 * i, 8);
        if (t->shape[i] < 0 || __builtin_mul_overflow(bytes, (uint64_t)t->shape[i], &bytes))
            return fail(err, errlen, origin, at, "tensor %d: shape entry %u is out of range", f->n, i);
    }
    t->offset = (int64_t)get_le(p + 8 * nd, 8);
    t->bytes = (int64_t)get_le(p + 8 * nd + 8, 8);
    if ((uint64_t)t->bytes != bytes)
        return fail(err, errlen, origin, at, "tensor %d: %lld bytes recorded, shape and dtype need %llu", f->n,
                    (long long)t->bytes, (unsigned long long)bytes);
    if (t->offset < 0 || t->offset % ALIGN || t->bytes < 0 || t->offset > data_bytes ||
        t->bytes > data_bytes - t->offset)
        return fail(err, errlen, origin, at,
                    "tensor %d: data [%lld, +%lld) must be 64-aligned and inside the %lld data bytes", f->n,
                    (long long)t->offset, (long long)t->bytes, (long long)data_bytes);
    t->name = xmalloc((size_t)nl + 1);
    memcpy(t->name, name, (size_t)nl);
    t->name[nl] = '\0';
    f->n++;
    return 0;
}

static int by_offset(const void *a, const void *b) {
    const NmTensor *x = a, *y = b;
    return (x->offset > y->offset) - (x->offset < y->offset);
}

static int check_disjoint_unique(NmFile *f, const char *origin, char *err, int errlen) {
    NmTensor *s = xmalloc(sizeof(NmTensor) * (size_t)(f->n ? f->n : 1));
    memcpy(s, f->t, sizeof(NmTensor) * (size_t)f->n);
    qsort(s, (size_t)f->n, sizeof(NmTensor), by_offset);
    int rc = 0;
    for (int i = 1; i < f->n && !rc; i++)
        if (s[i].offset < s[i - 1].offset + s[i - 1].bytes)
            rc = fail(err, errlen, origin, f->data_start + s[i].offset, "tensor '%s' overlaps tensor '%s'", s[i].name,
                      s[i - 1].name);
    free(s);
    for (int i = 0; i < f->n && !rc; i++)
        for (int j = i + 1; j < f->n && !rc; j++)
            if (strcmp(f->t[i].name, f->t[j].name) == 0)
                rc = fail(err, errlen, origin, FIXED, "tensor '%s' appears twice", f->t[i].name);
    return rc;
}

int nm_parse(NmFile *f, const uint8_t *buf, int64_t size, const char *origin, char *err, int errlen) {
    memset(f, 0, sizeof *f);
    if (size < FIXED)
        return fail(err, errlen, origin, 0, "file is %lld bytes, expected at least %d", (long long)size, FIXED);
    if (memcmp(buf, MAGIC, 8) != 0) return fail(err, errlen, origin, 0, "expected magic \"KVCPTMDL\"");
    uint32_t version = (uint32_t)get_le(buf + 8, 4), n = (uint32_t)get_le(buf + 12, 4);
    uint64_t table = get_le(buf + 16, 8), ds = get_le(buf + 24, 8), fsz = get_le(buf + 32, 8);
    if (version != VERSION) return fail(err, errlen, origin, 8, "version %u, expected %d", version, VERSION);
    if (fsz != (uint64_t)size)
        return fail(err, errlen, origin, 32, "header says %llu bytes, file has %lld (truncated?)",
                    (unsigned long long)fsz, (long long)size);
    if (table > (uint64_t)size || ds % ALIGN || ds < FIXED + table || ds > (uint64_t)size)
        return fail(err, errlen, origin, 16, "table of %llu bytes / data start %llu do not fit a %lld-byte file",
                    (unsigned long long)table, (unsigned long long)ds, (long long)size);
    if ((uint64_t)n > table / 32) /* an entry takes at least 32 bytes */
        return fail(err, errlen, origin, 12, "%u tensors cannot fit a %llu-byte table", n, (unsigned long long)table);
    f->data_start = (int64_t)ds;
    f->t = xcalloc(n ? n : 1, sizeof(NmTensor));
    Cursor c = {buf, FIXED, FIXED + (int64_t)table};
    int rc = 0;
    for (uint32_t i = 0; i < n && !rc; i++) rc = parse_entry(f, &c, size - (int64_t)ds, origin, err, errlen);
    if (!rc && c.pos != c.end)
        rc = fail(err, errlen, origin, c.pos, "%lld unused bytes at the end of the table", (long long)(c.end - c.pos));
    if (!rc) rc = check_disjoint_unique(f, origin, err, errlen);
    if (rc) {
        for (int i = 0; i < f->n; i++) free(f->t[i].name);
        free(f->t);
        memset(f, 0, sizeof *f);
    }
    return rc;
}

int nm_open(NmFile *f, const char *path, char *err, int errlen) {
    MappedFile m;
    if (mapped_file_open(&m, path, err, errlen) != 0) return -1;
    if (nm_parse(f, m.data, m.size, path, err, errlen) != 0) {
        mapped_file_close(&m);
        return -1;
    }
    f->map = m;
    return 0;
}

void nm_close(NmFile *f) {
    for (int i = 0; i < f->n; i++) free(f->t[i].name);
    free(f->t);
    mapped_file_close(&f->map);
    memset(f, 0, sizeof *f);
}

/* ---------- writing ---------- */

static void write_zeros(NmWriter *w, int64_t n) {
    static const uint8_t zeros[ALIGN];
    KV_CHECK(n >= 0 && n < ALIGN, "internal: padding of %lld bytes", (long long)n);
    if (n) fwrite_check(zeros, 1, (size_t)n, w->f, w->tmp_path);
}

void nm_writer_begin(NmWriter *w, const char *path, const StTensorSpec *t, int n) {
    memset(w, 0, sizeof *w);
    int64_t table = 0, pos = 0;
    w->begins = xcalloc((size_t)n + 1, sizeof(int64_t));
    w->ends = xcalloc((size_t)n + 1, sizeof(int64_t));
    for (int i = 0; i < n; i++) {
        table += 4 + (int64_t)strlen(t[i].name) + 8 + 8 * t[i].ndim + 16;
        w->begins[i] = align_up(pos);
        pos = w->ends[i] = w->begins[i] + st_spec_bytes(&t[i]);
    }
    int64_t ds = align_up(FIXED + table);
    uint8_t *head = xcalloc((size_t)ds, 1);
    memcpy(head, MAGIC, 8);
    put_le(head + 8, VERSION, 4);
    put_le(head + 12, (uint64_t)n, 4);
    put_le(head + 16, (uint64_t)table, 8);
    put_le(head + 24, (uint64_t)ds, 8);
    put_le(head + 32, (uint64_t)(ds + pos), 8);
    uint8_t *p = head + FIXED;
    for (int i = 0; i < n; i++) {
        size_t nl = strlen(t[i].name);
        put_le(p, nl, 4);
        memcpy(p + 4, t[i].name, nl);
        p += 4 + nl;
        put_le(p, (uint64_t)t[i].dtype, 4);
        put_le(p + 4, (uint64_t)t[i].ndim, 4);
        p += 8;
        for (int d = 0; d < t[i].ndim; d++, p += 8) put_le(p, (uint64_t)t[i].shape[d], 8);
        put_le(p, (uint64_t)w->begins[i], 8);
        put_le(p + 8, (uint64_t)(w->ends[i] - w->begins[i]), 8);
        p += 16;
    }
    w->path = xstrdup(path);
    w->tmp_path = xmalloc(strlen(path) + 8);
    sprintf(w->tmp_path, "%s.tmp", path);
    w->f = fopen_check(w->tmp_path, "wb");
    fwrite_check(head, 1, (size_t)ds, w->f, w->tmp_path);
    free(head);
    w->n = n;
}

/* Bytes arrive tensor after tensor; padding goes in at each boundary. */
void nm_writer_write(NmWriter *w, const void *bytes, int64_t n) {
    const uint8_t *b = bytes;
    while (n > 0) {
        while (w->cur < w->n && w->pos == w->ends[w->cur]) w->cur++;
        KV_CHECK(w->cur < w->n, "'%s': writing %lld bytes past the last tensor", w->tmp_path, (long long)n);
        if (w->pos < w->begins[w->cur]) {
            write_zeros(w, w->begins[w->cur] - w->pos);
            w->pos = w->begins[w->cur];
        }
        int64_t k = w->ends[w->cur] - w->pos < n ? w->ends[w->cur] - w->pos : n;
        fwrite_check(b, 1, (size_t)k, w->f, w->tmp_path);
        w->pos += k, b += k, n -= k;
    }
}

void nm_writer_end(NmWriter *w) {
    while (w->cur < w->n && w->pos == w->ends[w->cur]) w->cur++;
    /* trailing zero-sized tensors may still need their alignment padding */
    if (w->cur < w->n && w->ends[w->cur] == w->begins[w->cur] && w->pos <= w->begins[w->cur]) {
        for (int i = w->cur; i < w->n; i++)
            KV_CHECK(w->ends[i] == w->begins[i], "'%s': tensor %d was never written", w->tmp_path, i);
        write_zeros(w, w->begins[w->n - 1] - w->pos);
        w->pos = w->begins[w->n - 1];
        w->cur = w->n;
    }
    KV_CHECK(w->cur == w->n, "'%s': only %d of %d tensors written", w->tmp_path, w->cur, w->n);
    if (fflush(w->f) != 0 || fsync(fileno(w->f)) != 0) die("'%s': flush failed: %s", w->tmp_path, strerror(errno));
    fclose_check(w->f, w->tmp_path);
    rename_check(w->tmp_path, w->path);
    free(w->path), free(w->tmp_path), free(w->begins), free(w->ends);
    memset(w, 0, sizeof *w);
}
