#include "tfevents.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "util.h"

uint32_t tfevents_crc32c(const void *p, size_t n) {
    static uint32_t table[256];
    static int ready;
    if (!ready) {
        for (uint32_t i = 0; i < 256; i++) {
            uint32_t c = i;
            for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1;
            table[i] = c;
        }
        ready = 1;
    }
    const uint8_t *b = p;
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) c = table[(c ^ b[i]) & 0xff] ^ (c >> 8);
    return c ^ 0xffffffffu;
}

static uint32_t masked_crc(const void *p, size_t n) {
    uint32_t c = tfevents_crc32c(p, n);
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

/* ---- a protocol-buffer writer: just the wire types an Event uses ---- */

typedef struct {
    uint8_t *b;
    size_t n, cap;
} Buf;

static void put(Buf *b, const void *p, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->b = xrealloc(b->b, b->cap);
    }
    memcpy(b->b + b->n, p, n);
    b->n += n;
}

static void put_varint(Buf *b, uint64_t v) {
    uint8_t t[10];
    int k = 0;
    do {
        t[k++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
        v >>= 7;
    } while (v);
    put(b, t, (size_t)k);
}

static void put_le(Buf *b, uint64_t v, int bytes) {
    uint8_t t[8];
    for (int i = 0; i < bytes; i++) t[i] = (uint8_t)(v >> (8 * i));
    put(b, t, (size_t)bytes);
}

/* wire types: 0 varint, 1 fixed64, 2 length-delimited, 5 fixed32 */
static void put_key(Buf *b, int field, int wire) { put_varint(b, (uint64_t)field << 3 | (uint64_t)wire); }

static void put_bytes(Buf *b, int field, const void *p, size_t n) {
    put_key(b, field, 2);
    put_varint(b, n);
    put(b, p, n);
}

static void put_double(Buf *b, int field, double v) {
    uint64_t u;
    memcpy(&u, &v, sizeof u);
    put_key(b, field, 1);
    put_le(b, u, 8);
}

static void put_float(Buf *b, int field, float v) {
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    put_key(b, field, 5);
    put_le(b, u, 4);
}

static double wall_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Frames one record and writes it, flushed. */
static void write_record(TfEvents *e, const Buf *data) {
    Buf r = {0};
    put_le(&r, data->n, 8);
    uint32_t hc = masked_crc(r.b, 8);
    put_le(&r, hc, 4);
    put(&r, data->b, data->n);
    put_le(&r, masked_crc(data->b, data->n), 4);
    fwrite_check(r.b, 1, r.n, e->f, e->path);
    KV_CHECK(fflush(e->f) == 0, "cannot write '%s'", e->path);
    free(r.b);
}

void tfevents_open(TfEvents *e, const char *path, const char *mode) {
    path_fmt(e->path, sizeof e->path, "%s", path);
    int fresh = mode[0] == 'w' || access(path, F_OK) != 0;
    e->f = fopen_check(path, fresh ? "w" : "a");
    if (!fresh) return;
    Buf ev = {0};
    put_double(&ev, 1, wall_now());
    static const char version[] = "brain.Event:2";
    put_bytes(&ev, 3, version, sizeof version - 1);
    write_record(e, &ev);
    free(ev.b);
}

void tfevents_scalars(TfEvents *e, int64_t step, const char *const *tags, const double *values, int n) {
    Buf summary = {0}, value = {0}, ev = {0};
    for (int i = 0; i < n; i++) {
        value.n = 0;
        put_bytes(&value, 1, tags[i], strlen(tags[i]));
        put_float(&value, 2, (float)values[i]);
        put_bytes(&summary, 1, value.b, value.n);
    }
    put_double(&ev, 1, wall_now());
    put_key(&ev, 2, 0);
    put_varint(&ev, (uint64_t)step);
    put_bytes(&ev, 5, summary.b, summary.n);
    write_record(e, &ev);
    free(summary.b), free(value.b), free(ev.b);
}

void tfevents_close(TfEvents *e) {
    if (!e->f) return;
    fclose_check(e->f, e->path);
    e->f = NULL;
}

static uint64_t get_le(const uint8_t *p, int bytes) {
    uint64_t v = 0;
    for (int i = 0; i < bytes; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* A varint at *p (below end); 0 when it runs past end or past 10 bytes. */
static int get_varint(const uint8_t **p, const uint8_t *end, uint64_t *v) {
    *v = 0;
    for (int shift = 0; *p < end && shift < 70; shift += 7) {
        uint8_t c = *(*p)++;
        *v |= (uint64_t)(c & 0x7f) << shift;
        if (!(c & 0x80)) return 1;
    }
    return 0;
}

/* An Event's step field (0 when it has none: the file_version record); -1
 * when the bytes are not a protocol buffer of the wire types it may hold. */
static int64_t event_step(const uint8_t *p, size_t n) {
    const uint8_t *end = p + n;
    int64_t step = 0;
    while (p < end) {
        uint64_t key, v;
        if (!get_varint(&p, end, &key)) return -1;
        switch (key & 7) {
            case 0:
                if (!get_varint(&p, end, &v)) return -1;
                if (key >> 3 == 2) step = (int64_t)v;
                break;
            case 1:
                if (end - p < 8) return -1;
                p += 8;
                break;
            case 5:
                if (end - p < 4) return -1;
                p += 4;
                break;
            case 2:
                if (!get_varint(&p, end, &v) || v > (uint64_t)(end - p)) return -1;
                p += v;
                break;
            default: return -1;
        }
    }
    return step;
}

void tfevents_truncate(const char *path, int64_t step) {
    if (access(path, F_OK) != 0) return;
    int64_t len = 0;
    char *text = read_text_file(path, &len);
    const uint8_t *b = (const uint8_t *)text;
    char tmp[4300];
    path_fmt(tmp, sizeof tmp, "%s.tmp", path);
    FILE *o = fopen_check(tmp, "w");
    int64_t at = 0;
    while (at < len) {
        uint64_t n = 0;
        int whole = len - at >= 12;
        if (whole) n = get_le(b + at, 8);
        whole = whole && (uint32_t)get_le(b + at + 8, 4) == masked_crc(b + at, 8) && n <= (uint64_t)(len - at - 16) &&
                (uint32_t)get_le(b + at + 12 + n, 4) == masked_crc(b + at + 12, n);
        int64_t s = whole ? event_step(b + at + 12, n) : -1;
        if (s < 0) {
            warnf("'%s': the record at byte %lld is cut short or damaged; the events from there on are dropped "
                  "(log.jsonl holds every step)",
                  path, (long long)at);
            break;
        }
        if (s <= step) fwrite_check(b + at, 1, (size_t)(16 + n), o, tmp);
        at += 16 + (int64_t)n;
    }
    fclose_check(o, tmp);
    rename_check(tmp, path);
    free(text);
}
