/* Optimizer state files: a fixed little-endian header, the segment table,
 * the state arrays, then a checksum of everything before it. */
#include <stdlib.h>
#include <string.h>

#include "../common/util.h"
#include "optimizer.h"

#define OPTIM_MAGIC "KVOPTST\0"
#define OPTIM_VERSION 1u

typedef struct {
    char magic[8];
    uint32_t version, kind, nseg, block;
    uint32_t min_8bit_numel, reserved;
    int64_t n_code, n_absmax, n_f32;
} OptimFileHeader;

/* 64-bit FNV-1a over 8-byte words (fast enough for 16 GB of 8B states). */
typedef struct {
    uint64_t h;
} Checksum;

static void checksum_add(Checksum *c, const void *p, size_t n) {
    const unsigned char *b = p;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, b + i, 8);
        c->h = (c->h ^ w) * 0x100000001b3ull;
    }
    for (; i < n; i++) c->h = (c->h ^ b[i]) * 0x100000001b3ull;
}

static void write_hashed(const void *p, size_t size, size_t count, FILE *f, const char *path, Checksum *c) {
    fwrite_check(p, size, count, f, path);
    checksum_add(c, p, size * count);
}

static void read_hashed(void *p, size_t size, size_t count, FILE *f, const char *path, Checksum *c) {
    fread_check(p, size, count, f, path);
    checksum_add(c, p, size * count);
}

static OptimFileHeader header_of(const Optimizer *o) {
    OptimFileHeader h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, OPTIM_MAGIC, 8);
    h.version = OPTIM_VERSION;
    h.kind = (uint32_t)o->kind;
    h.nseg = (uint32_t)o->nseg;
    h.block = OPTIM_BLOCK;
    h.min_8bit_numel = OPTIM_MIN_8BIT_NUMEL;
    h.n_code = o->n_code;
    h.n_absmax = o->n_absmax;
    h.n_f32 = o->n_f32;
    return h;
}

void optim_save(const Optimizer *o, FILE *f, const char *path) {
    Checksum c = {0xcbf29ce484222325ull};
    OptimFileHeader h = header_of(o);
    write_hashed(&h, sizeof h, 1, f, path, &c);
    for (int i = 0; i < o->nseg; i++) {
        int64_t pair[2] = {o->seg[i].offset, o->seg[i].numel};
        write_hashed(pair, sizeof(int64_t), 2, f, path, &c);
    }
    write_hashed(o->m_absmax, sizeof(float), (size_t)o->n_absmax, f, path, &c);
    write_hashed(o->v_absmax, sizeof(float), (size_t)o->n_absmax, f, path, &c);
    write_hashed(o->m_code, 1, (size_t)o->n_code, f, path, &c);
    write_hashed(o->v_code, 1, (size_t)o->n_code, f, path, &c);
    write_hashed(o->m32, sizeof(float), (size_t)o->n_f32, f, path, &c);
    write_hashed(o->v32, sizeof(float), (size_t)o->n_f32, f, path, &c);
    fwrite_check(&c.h, sizeof c.h, 1, f, path);
}

static void check_header(const Optimizer *o, const OptimFileHeader *got, const char *path, long at) {
    OptimFileHeader want = header_of(o);
    KV_CHECK(memcmp(got->magic, OPTIM_MAGIC, 8) == 0, "'%s' offset %ld: not an optimizer state (bad magic)", path, at);
    KV_CHECK(got->version == OPTIM_VERSION, "'%s' offset %ld: optimizer state version %u, expected %u", path, at,
             got->version, OPTIM_VERSION);
    KV_CHECK(got->kind == want.kind, "'%s' offset %ld: optimizer state is %s, this run uses %s", path, at,
             got->kind == OPTIM_ADAMW8BIT ? "adamw8bit"
             : got->kind == OPTIM_ADAMW   ? "adamw"
                                          : "an unknown kind",
             optim_kind_name(o->kind));
    KV_CHECK(got->block == want.block && got->min_8bit_numel == want.min_8bit_numel,
             "'%s' offset %ld: block %u / 8-bit threshold %u, expected %u / %u", path, at, got->block,
             got->min_8bit_numel, want.block, want.min_8bit_numel);
    KV_CHECK(got->nseg == want.nseg, "'%s' offset %ld: %u segments, this run has %u", path, at, got->nseg, want.nseg);
    KV_CHECK(
        got->n_code == want.n_code && got->n_absmax == want.n_absmax && got->n_f32 == want.n_f32,
        "'%s' offset %ld: state sizes (codes %lld, blocks %lld, fp32 %lld) differ from this run's (%lld, %lld, %lld)",
        path, at, (long long)got->n_code, (long long)got->n_absmax, (long long)got->n_f32, (long long)want.n_code,
        (long long)want.n_absmax, (long long)want.n_f32);
}

void optim_load(Optimizer *o, FILE *f, const char *path) {
    Checksum c = {0xcbf29ce484222325ull};
    OptimFileHeader h;
    long at = ftell(f);
    read_hashed(&h, sizeof h, 1, f, path, &c);
    check_header(o, &h, path, at);
    for (int i = 0; i < o->nseg; i++) {
        int64_t pair[2];
        long seg_at = ftell(f);
        read_hashed(pair, sizeof(int64_t), 2, f, path, &c);
        KV_CHECK(pair[0] == o->seg[i].offset && pair[1] == o->seg[i].numel,
                 "'%s' offset %ld: segment %d is [%lld, +%lld), this run's is [%lld, +%lld)", path, seg_at, i,
                 (long long)pair[0], (long long)pair[1], (long long)o->seg[i].offset, (long long)o->seg[i].numel);
    }
    read_hashed(o->m_absmax, sizeof(float), (size_t)o->n_absmax, f, path, &c);
    read_hashed(o->v_absmax, sizeof(float), (size_t)o->n_absmax, f, path, &c);
    read_hashed(o->m_code, 1, (size_t)o->n_code, f, path, &c);
    read_hashed(o->v_code, 1, (size_t)o->n_code, f, path, &c);
    read_hashed(o->m32, sizeof(float), (size_t)o->n_f32, f, path, &c);
    read_hashed(o->v32, sizeof(float), (size_t)o->n_f32, f, path, &c);
    uint64_t stored;
    long sum_at = ftell(f);
    fread_check(&stored, sizeof stored, 1, f, path);
    KV_CHECK(stored == c.h,
             "'%s' offset %ld: optimizer state checksum %016llx does not match the data (%016llx): "
             "the state is corrupt",
             path, sum_at, (unsigned long long)stored, (unsigned long long)c.h);
}
