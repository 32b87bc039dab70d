#include "ckpt.h"

#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/rng.h"
#include "../common/json_file.h"
#include "../common/remove_tree.h"
#include "../common/util.h"
#include "le_bytes.h"

static const char MAGIC[8] = {'K', 'V', 'C', 'P', 'T', 'C', 'K', 'P'};
enum { VERSION = 1, HEAD = 40, ENTRY = CKPT_NAME_LEN + 24, ALIGN = 64 };

static uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

/* Four independent multiply-rotate lanes keep this near memory speed. */
uint64_t ckpt_checksum(const void *p, int64_t n) {
    const uint64_t P1 = 0x9E3779B185EBCA87ull, P2 = 0xC2B2AE3D27D4EB4Full;
    uint64_t h[4] = {P1, P2, ~P1, ~P2};
    const uint8_t *b = p;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32)
        for (int l = 0; l < 4; l++) {
            uint64_t w;
            memcpy(&w, b + i + 8 * l, 8);
            h[l] = rotl(h[l] + w * P2, 31) * P1;
        }
    for (; i < n; i++) h[0] = rotl(h[0] ^ (b[i] * P1), 23) * P2;
    uint64_t x = (uint64_t)n;
    for (int l = 0; l < 4; l++) x = hash_u64(x ^ h[l]);
    return x;
}

uint64_t param_layout_hash(const ParamLayout *pl) {
    uint64_t h = hash_u64((uint64_t)pl->n);
    for (int i = 0; i < pl->n; i++) {
        const ParamTensor *t = &pl->t[i];
        int64_t nums[4] = {t->ndim, t->shape[0], t->shape[1], t->offset};
        h = hash_u64(h ^ ckpt_checksum(t->name, (int64_t)strlen(t->name)));
        h = hash_u64(h ^ ckpt_checksum(nums, sizeof nums));
    }
    return h;
}

void ckpt_step_dir(char *out, size_t n, const char *run_dir, int64_t step) {
    snprintf(out, n, "%s/ckpt/step_%08lld", run_dir, (long long)step);
}

/* ---------- writing ---------- */

static void encode_head(const CkptWriter *w, int64_t table_offset, uint8_t h[HEAD]) {
    memcpy(h, MAGIC, 8);
    put_le(h + 8, VERSION, 4);
    put_le(h + 12, (uint64_t)w->n, 4);
    put_le(h + 16, (uint64_t)w->step, 8);
    put_le(h + 24, (uint64_t)w->rank, 4);
    put_le(h + 28, (uint64_t)w->world, 4);
    put_le(h + 32, (uint64_t)table_offset, 8);
}

static void write_head(CkptWriter *w, int64_t table_offset) {
    uint8_t h[HEAD];
    encode_head(w, table_offset, h);
    fwrite_check(h, 1, HEAD, w->f, w->tmp);
}

static void pad_to_alignment(CkptWriter *w) {
    static const uint8_t zeros[ALIGN];
    int64_t pad = (ALIGN - w->pos % ALIGN) % ALIGN;
    if (pad) fwrite_check(zeros, 1, (size_t)pad, w->f, w->tmp);
    w->pos += pad;
}

void ckpt_writer_begin(CkptWriter *w, const char *run_dir, int64_t step, int rank, int world) {
    KV_CHECK(step >= 0 && world > 0 && rank >= 0 && rank < world, "checkpoint: bad step %lld / rank %d of world %d",
             (long long)step, rank, world);
    memset(w, 0, sizeof *w);
    ckpt_step_dir(w->dir, sizeof w->dir, run_dir, step);
    make_dirs(w->dir);
    snprintf(w->path, sizeof w->path, "%s/rank_%05d.bin", w->dir, rank);
    path_fmt(w->tmp, sizeof w->tmp, "%s.tmp", w->path);
    w->step = step, w->rank = rank, w->world = world;
    w->f = fopen_check(w->tmp, "wb");
    write_head(w, 0); /* table offset patched by finish */
    w->pos = HEAD;
}

void ckpt_add_section(CkptWriter *w, const char *name, const void *data, int64_t bytes) {
    KV_CHECK(w->n < CKPT_MAX_SECTIONS, "checkpoint '%s': more than %d sections", w->path, CKPT_MAX_SECTIONS);
    KV_CHECK(name[0] && strlen(name) < CKPT_NAME_LEN, "checkpoint section name '%s' must be 1..%d bytes", name,
             CKPT_NAME_LEN - 1);
    KV_CHECK(bytes >= 0 && (bytes == 0 || data), "checkpoint section '%s': %lld bytes", name, (long long)bytes);
    for (int i = 0; i < w->n; i++)
        KV_CHECK(strcmp(w->s[i].name, name) != 0, "checkpoint section '%s' added twice", name);
    pad_to_alignment(w);
    CkptSection *s = &w->s[w->n++];
    memset(s, 0, sizeof *s);
    snprintf(s->name, sizeof s->name, "%s", name);
    s->offset = w->pos;
    s->bytes = bytes;
    s->checksum = ckpt_checksum(data, bytes);
    if (bytes) fwrite_check(data, 1, (size_t)bytes, w->f, w->tmp);
    w->pos += bytes;
}

static void encode_table(const CkptSection *s, int n, uint8_t *out) {
    for (int i = 0; i < n; i++, out += ENTRY) {
        memset(out, 0, ENTRY);
        memcpy(out, s[i].name, strlen(s[i].name));
        put_le(out + CKPT_NAME_LEN, (uint64_t)s[i].offset, 8);
        put_le(out + CKPT_NAME_LEN + 8, (uint64_t)s[i].bytes, 8);
        put_le(out + CKPT_NAME_LEN + 16, s[i].checksum, 8);
    }
}

/* Checksum over header and table, the same bytes a reader sees. */
static uint64_t file_checksum(const uint8_t *head, const uint8_t *table, int64_t table_bytes) {
    return hash_u64(ckpt_checksum(head, HEAD) ^ hash_u64(ckpt_checksum(table, table_bytes)));
}

CkptFileInfo ckpt_writer_finish(CkptWriter *w) {
    int64_t table_offset = w->pos, table_bytes = (int64_t)w->n * ENTRY;
    uint8_t *table = xmalloc((size_t)table_bytes + 1);
    encode_table(w->s, w->n, table);
    fwrite_check(table, 1, (size_t)table_bytes, w->f, w->tmp);
    if (fseek(w->f, 0, SEEK_SET) != 0) die("'%s': seek failed: %s", w->tmp, strerror(errno));
    write_head(w, table_offset);
    if (fflush(w->f) != 0 || fsync(fileno(w->f)) != 0) die("'%s': flush failed: %s", w->tmp, strerror(errno));
    fclose_check(w->f, w->tmp);
    rename_check(w->tmp, w->path);
    uint8_t head[HEAD];
    encode_head(w, table_offset, head);
    CkptFileInfo info = {.rank = w->rank, .bytes = table_offset + table_bytes};
    snprintf(info.file, sizeof info.file, "rank_%05d.bin", w->rank);
    info.checksum = file_checksum(head, table, table_bytes);
    free(table);
    return info;
}

static json_t *hex64(uint64_t v) {
    char b[24];
    snprintf(b, sizeof b, "%016llx", (unsigned long long)v);
    return json_string(b);
}

void ckpt_write_manifest(const char *run_dir, int64_t step, int world, uint64_t layout_hash, const CkptFileInfo *files,
                         int n_files, int keep_last) {
    KV_CHECK(n_files == world, "checkpoint step %lld: manifest needs all %d rank files, got %d", (long long)step, world,
             n_files);
    char dir[4096], path[4200], tmp[4300];
    ckpt_step_dir(dir, sizeof dir, run_dir, step);
    json_t *arr = json_array();
    for (int i = 0; i < n_files; i++) {
        path_fmt(path, sizeof path, "%s/%s", dir, files[i].file);
        KV_CHECK(file_size(path) == files[i].bytes,
                 "checkpoint: '%s' should be %lld bytes before the manifest is written", path,
                 (long long)files[i].bytes);
        json_array_append_new(arr, json_pack("{s:s,s:i,s:I,s:o}", "name", files[i].file, "rank", files[i].rank, "bytes",
                                             (json_int_t)files[i].bytes, "checksum", hex64(files[i].checksum)));
    }
    json_t *root = json_pack("{s:s,s:i,s:I,s:i,s:o,s:o}", "format", "kvcpt-checkpoint", "version", VERSION, "step",
                             (json_int_t)step, "world_size", world, "layout_hash", hex64(layout_hash), "files", arr);
    char *s = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    KV_CHECK(s != NULL, "cannot serialise a checkpoint manifest");
    json_decref(root);
    path_fmt(path, sizeof path, "%s/manifest.json", dir);
    path_fmt(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen_check(tmp, "wb");
    fwrite_check(s, 1, strlen(s), f, tmp);
    if (fflush(f) != 0 || fsync(fileno(f)) != 0) die("'%s': flush failed: %s", tmp, strerror(errno));
    fclose_check(f, tmp);
    rename_check(tmp, path);
    free(s);
    if (keep_last > 0) ckpt_prune(run_dir, keep_last);
}

/* ---------- listing, pruning ---------- */

typedef struct {
    int64_t step;
    int complete;
    char name[256]; /* the directory's own name: "step_31" as well as "step_00000031" */
} StepDir;

/* A complete directory whose manifest names another step than its own name
 * was renamed or copied by hand: resuming it would restart at the wrong step
 * (and pruning would count it as that step). It is skipped with a warning,
 * never used and never deleted. A manifest that does not parse is left to the
 * reader, which names what is wrong with it. */
static int step_matches_manifest(const char *dir, const char *mpath, int64_t step) {
    json_error_t je;
    json_t *m = json_load_regular(mpath, JSON_REJECT_DUPLICATES, &je);
    if (!m) return 1;
    json_t *st = json_object_get(m, "step");
    int same = !json_is_integer(st) || json_integer_value(st) == step;
    if (!same)
        warnf("'%s': its manifest says step %lld but the directory is named step %lld (renamed or copied?): skipped, "
              "not used for --resume and not pruned",
              dir, (long long)json_integer_value(st), (long long)step);
    json_decref(m);
    return same;
}

static int by_step(const void *a, const void *b) {
    const StepDir *x = a, *y = b;
    return (x->step > y->step) - (x->step < y->step);
}

static StepDir *list_steps(const char *run_dir, int *n) {
    char ck[4096], p[4400];
    path_fmt(ck, sizeof ck, "%s/ckpt", run_dir);
    *n = 0;
    DIR *d = opendir(ck);
    if (!d) return NULL;
    StepDir *v = NULL;
    struct dirent *e;
    while ((e = readdir(d))) {
        long long step;
        char tail;
        if (sscanf(e->d_name, "step_%lld%c", &step, &tail) != 1 || step < 0) continue;
        /* a link (or file) named like a checkpoint is not one kvcpt wrote:
         * pruning it would delete whatever it points to */
        path_fmt(p, sizeof p, "%s/%s", ck, e->d_name);
        if (!is_real_dir(p)) {
            warnf("'%s' is not a checkpoint directory (a link or a file): not used, not pruned", p);
            continue;
        }
        char dir[4400];
        path_fmt(dir, sizeof dir, "%s/%s", ck, e->d_name);
        path_fmt(p, sizeof p, "%s/%s/manifest.json", ck, e->d_name);
        int complete = file_size(p) >= 0;
        if (complete && !step_matches_manifest(dir, p, step)) continue;
        v = xrealloc(v, sizeof(StepDir) * (size_t)(*n + 1));
        v[*n] = (StepDir){.step = step, .complete = complete};
        KV_CHECK(strlen(e->d_name) < sizeof v[*n].name, "'%s': directory name too long", dir);
        strcpy(v[*n].name, e->d_name);
        (*n)++;
    }
    closedir(d);
    if (v) qsort(v, (size_t)*n, sizeof(StepDir), by_step);
    return v;
}

/* The manifest goes first, so a half-deleted directory is never complete. */
static void remove_step_dir(const char *dir) {
    char p[4400];
    path_fmt(p, sizeof p, "%s/manifest.json", dir);
    if (unlink(p) != 0 && errno != ENOENT) die("cannot remove '%s': %s", p, strerror(errno));
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        path_fmt(p, sizeof p, "%s/%s", dir, e->d_name);
        if (unlink(p) != 0) die("cannot remove '%s': %s", p, strerror(errno));
    }
    closedir(d);
    if (rmdir(dir) != 0) die("cannot remove directory '%s': %s", dir, strerror(errno));
}

void ckpt_prune(const char *run_dir, int keep_last) {
    int n, complete = 0;
    StepDir *v = list_steps(run_dir, &n);
    for (int i = n - 1; i >= 0; i--) {
        char dir[4400];
        path_fmt(dir, sizeof dir, "%s/ckpt/%s", run_dir, v[i].name);
        if (v[i].complete && ++complete <= keep_last) continue;
        /* older complete ones beyond N, and incomplete leftovers below a kept one */
        if (v[i].complete || complete > 0) remove_step_dir(dir);
    }
    free(v);
}

int ckpt_find_latest(const char *run_dir, char *out, size_t n, int64_t *step) {
    int count, found = 0;
    StepDir *v = list_steps(run_dir, &count);
    for (int i = count - 1; i >= 0 && !found; i--)
        if (v[i].complete) {
            path_fmt(out, n, "%s/ckpt/%s", run_dir, v[i].name);
            if (step) *step = v[i].step;
            found = 1;
        }
    free(v);
    return found;
}

/* ---------- reading ---------- */

#define fail(err, errlen, origin, offset, ...) parse_error(err, errlen, "checkpoint", origin, offset, __VA_ARGS__)

static int parse_table(CkptReader *r, const uint8_t *t, int64_t table_offset, const char *origin, char *err,
                       int errlen) {
    int64_t prev_end = HEAD;
    for (int i = 0; i < r->n; i++, t += ENTRY) {
        CkptSection *s = &r->s[i];
        int64_t at = table_offset + (int64_t)i * ENTRY;
        if (!memchr(t, 0, CKPT_NAME_LEN) || t[0] == 0)
            return fail(err, errlen, origin, at, "section %d: expected a NUL-terminated name of 1..%d bytes", i,
                        CKPT_NAME_LEN - 1);
        memcpy(s->name, t, CKPT_NAME_LEN);
        s->offset = (int64_t)get_le(t + CKPT_NAME_LEN, 8);
        s->bytes = (int64_t)get_le(t + CKPT_NAME_LEN + 8, 8);
        s->checksum = get_le(t + CKPT_NAME_LEN + 16, 8);
        if (s->offset < prev_end || s->offset % ALIGN || s->bytes < 0 || s->bytes > table_offset - s->offset)
            return fail(err, errlen, origin, at,
                        "section '%s': bytes [%lld, +%lld) must be 64-aligned, in order, and end by the table at %lld",
                        s->name, (long long)s->offset, (long long)s->bytes, (long long)table_offset);
        for (int j = 0; j < i; j++)
            if (strcmp(r->s[j].name, s->name) == 0)
                return fail(err, errlen, origin, at, "section '%s' appears twice", s->name);
        prev_end = s->offset + s->bytes;
    }
    return 0;
}

int ckpt_parse(CkptReader *r, const uint8_t *buf, int64_t size, const char *origin, char *err, int errlen) {
    memset(r, 0, sizeof *r);
    if (size < HEAD)
        return fail(err, errlen, origin, 0, "file is %lld bytes, expected at least %d", (long long)size, HEAD);
    if (memcmp(buf, MAGIC, 8) != 0) return fail(err, errlen, origin, 0, "expected magic \"KVCPTCKP\"");
    uint32_t version = (uint32_t)get_le(buf + 8, 4), n = (uint32_t)get_le(buf + 12, 4);
    if (version != VERSION) return fail(err, errlen, origin, 8, "version %u, expected %d", version, VERSION);
    if (n > CKPT_MAX_SECTIONS) return fail(err, errlen, origin, 12, "%u sections, at most %d", n, CKPT_MAX_SECTIONS);
    uint64_t table_offset = get_le(buf + 32, 8);
    if (table_offset < HEAD || table_offset > (uint64_t)size || (uint64_t)size - table_offset != (uint64_t)n * ENTRY)
        return fail(err, errlen, origin, 32, "table at %llu with %u entries must end the %lld-byte file (truncated?)",
                    (unsigned long long)table_offset, n, (long long)size);
    r->step = (int64_t)get_le(buf + 16, 8);
    r->rank = (int)get_le(buf + 24, 4);
    r->world = (int)get_le(buf + 28, 4);
    if (r->step < 0 || r->world <= 0 || r->rank < 0 || r->rank >= r->world)
        return fail(err, errlen, origin, 16, "step %lld rank %d world %d are inconsistent", (long long)r->step, r->rank,
                    r->world);
    r->n = (int)n;
    r->s = xcalloc(n ? n : 1, sizeof(CkptSection));
    if (parse_table(r, buf + table_offset, (int64_t)table_offset, origin, err, errlen) != 0) {
        free(r->s);
        memset(r, 0, sizeof *r);
        return -1;
    }
    return 0;
}

static uint64_t parse_hex(json_t *v, const char *path, const char *what) {
    const char *s = json_string_value(v);
    char *end;
    KV_CHECK(s && strlen(s) == 16, "'%s': field '%s' must be 16 hex digits", path, what);
    uint64_t x = strtoull(s, &end, 16);
    KV_CHECK(*end == '\0', "'%s': field '%s' must be 16 hex digits", path, what);
    return x;
}

/* The manifest's entry for rank: checks world size, layout hash, step. */
static json_t *manifest_entry(json_t *m, const char *path, int rank, int world, uint64_t layout_hash, int64_t *step) {
    json_t *fmt = json_object_get(m, "format"), *ws = json_object_get(m, "world_size"),
           *files = json_object_get(m, "files");
    json_t *st = json_object_get(m, "step");
    KV_CHECK(json_is_string(fmt) && strcmp(json_string_value(fmt), "kvcpt-checkpoint") == 0,
             "'%s': expected \"format\": \"kvcpt-checkpoint\"", path);
    KV_CHECK(json_is_integer(ws) && json_integer_value(ws) == world,
             "'%s': checkpoint was written by %lld ranks, the reader expected %d", path,
             json_is_integer(ws) ? (long long)json_integer_value(ws) : -1LL, world);
    KV_CHECK(json_is_integer(st) && json_is_array(files) && (int)json_array_size(files) == world,
             "'%s': expected integer \"step\" and a \"files\" list with %d entries", path, world);
    if (layout_hash) {
        uint64_t h = parse_hex(json_object_get(m, "layout_hash"), path, "layout_hash");
        KV_CHECK(h == layout_hash, "'%s': layout hash %016llx differs from this model's %016llx (other config?)", path,
                 (unsigned long long)h, (unsigned long long)layout_hash);
    }
    *step = (int64_t)json_integer_value(st);
    /* a step_N directory must hold step N: a renamed or copied one would
     * resume the wrong step and make keep_last delete the wrong checkpoint */
    const char *dir = strstr(path, "/step_");
    long long named = 0;
    char slash = 0;
    if (dir && sscanf(dir, "/step_%lld%c", &named, &slash) == 2 && slash == '/')
        KV_CHECK(named == *step, "'%s': the manifest says step %lld but its directory is named step %lld", path,
                 (long long)*step, named);
    for (size_t i = 0; i < json_array_size(files); i++) {
        json_t *e = json_array_get(files, i), *rk = json_object_get(e, "rank");
        if (json_is_integer(rk) && json_integer_value(rk) == rank) return e;
    }
    die("'%s': no file listed for rank %d", path, rank);
}

void ckpt_reader_open(CkptReader *r, const char *step_dir, int rank, int world, uint64_t layout_hash) {
    char mpath[4200], fpath[4200], err[1024];
    path_fmt(mpath, sizeof mpath, "%s/manifest.json", step_dir);
    json_error_t je;
    json_t *m = json_load_regular(mpath, JSON_REJECT_DUPLICATES, &je);
    if (!m) die("'%s' at byte %d: %s (a checkpoint without a manifest is incomplete)", mpath, je.position, je.text);
    int64_t step;
    json_t *e = manifest_entry(m, mpath, rank, world, layout_hash, &step);
    json_t *name = json_object_get(e, "name"), *bytes = json_object_get(e, "bytes");
    KV_CHECK(json_is_string(name) && !strchr(json_string_value(name), '/') && json_is_integer(bytes),
             "'%s': rank %d entry needs a plain file \"name\" and integer \"bytes\"", mpath, rank);
    path_fmt(fpath, sizeof fpath, "%s/%s", step_dir, json_string_value(name));
    uint64_t want_sum = parse_hex(json_object_get(e, "checksum"), mpath, "checksum");
    int64_t want_bytes = (int64_t)json_integer_value(bytes);
    json_decref(m);
    MappedFile map;
    if (mapped_file_open(&map, fpath, err, sizeof err) != 0) die("%s", err);
    KV_CHECK(map.size == want_bytes, "'%s': %lld bytes, the manifest says %lld", fpath, (long long)map.size,
             (long long)want_bytes);
    if (ckpt_parse(r, map.data, map.size, fpath, err, sizeof err) != 0) die("%s", err);
    r->map = map;
    int64_t table_offset = (int64_t)get_le(map.data + 32, 8);
    KV_CHECK(file_checksum(map.data, map.data + table_offset, map.size - table_offset) == want_sum,
             "'%s' at byte 0: header/table checksum differs from the manifest's", fpath);
    KV_CHECK(r->step == step && r->rank == rank && r->world == world,
             "'%s' at byte 16: holds step %lld rank %d of %d, the manifest says step %lld rank %d of %d", fpath,
             (long long)r->step, r->rank, r->world, (long long)step, rank, world);
}

int ckpt_manifest_world(const char *step_dir) {
    char mpath[4200];
    path_fmt(mpath, sizeof mpath, "%s/manifest.json", step_dir);
    json_error_t je;
    json_t *m = json_load_regular(mpath, JSON_REJECT_DUPLICATES, &je);
    if (!m) die("'%s' at byte %d: %s (a checkpoint without a manifest is incomplete)", mpath, je.position, je.text);
    json_t *ws = json_object_get(m, "world_size");
    KV_CHECK(json_is_integer(ws) && json_integer_value(ws) >= 1 && json_integer_value(ws) <= 1 << 20,
             "'%s': \"world_size\" must be an integer in [1, 2^20]", mpath);
    int w = (int)json_integer_value(ws);
    json_decref(m);
    return w;
}

const void *ckpt_get_section(const CkptReader *r, const char *name, int64_t *bytes) {
    for (int i = 0; i < r->n; i++) {
        const CkptSection *s = &r->s[i];
        if (strcmp(s->name, name) != 0) continue;
        const uint8_t *p = r->map.data + s->offset;
        KV_CHECK(ckpt_checksum(p, s->bytes) == s->checksum,
                 "'%s' at byte %lld: section '%s' (%lld bytes) fails its checksum; the file is corrupt", r->map.path,
                 (long long)s->offset, name, (long long)s->bytes);
        *bytes = s->bytes;
        return p;
    }
    return NULL;
}

void ckpt_read_section(const CkptReader *r, const char *name, void *dst, int64_t bytes) {
    int64_t got;
    const void *p = ckpt_get_section(r, name, &got);
    KV_CHECK(p != NULL, "'%s': checkpoint has no section '%s'", r->map.path, name);
    KV_CHECK(got == bytes, "'%s': section '%s' holds %lld bytes, expected %lld", r->map.path, name, (long long)got,
             (long long)bytes);
    if (bytes) memcpy(dst, p, (size_t)bytes);
}

void ckpt_reader_close(CkptReader *r) {
    free(r->s);
    mapped_file_close(&r->map);
    memset(r, 0, sizeof *r);
}
