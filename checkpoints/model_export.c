#include "model_export.h"

#include <errno.h>
#include <glob.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/util.h"
#include "native_model.h"
#include "tensor_set.h"

enum { CHUNK_ELEMS = 1 << 20 };

typedef void (*SinkFn)(void *sink, const void *bytes, int64_t n);

/* Streams one tensor to a writer, converting in CHUNK_ELEMS pieces. */
static void stream_tensor(const ExportTensor *t, SinkFn sink, void *w, void *bounce) {
    int64_t numel = st_spec_bytes(&t->out) / kv_dtype_size(t->out.dtype);
    if (t->src_dtype == t->out.dtype) {
        sink(w, t->src, st_spec_bytes(&t->out));
        return;
    }
    const uint8_t *src = t->src;
    for (int64_t i = 0; i < numel; i += CHUNK_ELEMS) {
        int64_t k = numel - i < CHUNK_ELEMS ? numel - i : CHUNK_ELEMS;
        kv_convert(bounce, t->out.dtype, src + i * kv_dtype_size(t->src_dtype), t->src_dtype, k);
        sink(w, bounce, k * kv_dtype_size(t->out.dtype));
    }
}

/* Refuses, before anything is written, a tensor holding a finite value that
 * the output dtype cannot represent: rounding would silently store inf.
 * Values already inf or NaN in the source are copied as they are. */
static void check_range(const ExportTensor *t, int n) {
    for (int k = 0; k < n; k++) {
        KvDtype sd = t[k].src_dtype, dd = t[k].out.dtype;
        if (sd == dd || dd == KV_F32) continue;
        int64_t numel = st_spec_bytes(&t[k].out) / kv_dtype_size(dd);
        for (int64_t i = 0; i < numel; i++) {
            float f = kv_load_f32(t[k].src, sd, i);
            if (!kv_overflows(f, dd)) continue;
            char where[80] = "";
            if (t[k].out.ndim == 2)
                snprintf(where, sizeof where, " (row %lld, column %lld)", (long long)(i / t[k].out.shape[1]),
                         (long long)(i % t[k].out.shape[1]));
            die("cannot write tensor '%s' as %s: element %lld%s is %.9g, beyond %s's largest finite value %.9g, so "
                "it would become inf; nothing was written (choose a wider dtype, e.g. --to-dtype f32)",
                t[k].out.name, kv_dtype_name(dd), (long long)i, where, (double)f, kv_dtype_name(dd),
                (double)kv_dtype_max_finite(dd));
        }
    }
}

static void st_sink(void *w, const void *b, int64_t n) { st_writer_write(w, b, n); }
static void nm_sink(void *w, const void *b, int64_t n) { nm_writer_write(w, b, n); }

void write_text_file_atomic(const char *dir, const char *name, const char *text) {
    char path[4096], tmp[4200];
    path_fmt(path, sizeof path, "%s/%s", dir, name);
    path_fmt(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen_check(tmp, "wb");
    fwrite_check(text, 1, strlen(text), f, tmp);
    fputc('\n', f);
    fclose_check(f, tmp);
    rename_check(tmp, path);
}

void write_file_atomic(const char *dir, const char *name, const void *bytes, int64_t n) {
    char dst[4096], tmp[4200];
    path_fmt(dst, sizeof dst, "%s/%s", dir, name);
    path_fmt(tmp, sizeof tmp, "%s.tmp", dst);
    FILE *f = fopen_check(tmp, "wb");
    if (n > 0) fwrite_check(bytes, 1, (size_t)n, f, tmp);
    fclose_check(f, tmp);
    rename_check(tmp, dst);
}

static void remove_if_present(const char *path) {
    if (unlink(path) != 0 && errno != ENOENT) die("cannot remove '%s': %s", path, strerror(errno));
}

/* An earlier HF export's weights: the index goes first so a crash midway
 * leaves no loadable mix of files. */
static void remove_hf_weights(const char *dir) {
    char p[4096];
    path_fmt(p, sizeof p, "%s/%s", dir, HF_INDEX_FILE);
    remove_if_present(p);
    path_fmt(p, sizeof p, "%s/%s", dir, HF_SINGLE_FILE);
    remove_if_present(p);
    path_fmt(p, sizeof p, "%s/model-[0-9][0-9][0-9][0-9][0-9]-of-[0-9][0-9][0-9][0-9][0-9].safetensors", dir);
    glob_t g;
    if (glob(p, 0, NULL, &g) == 0)
        for (size_t i = 0; i < g.gl_pathc; i++) remove_if_present(g.gl_pathv[i]);
    globfree(&g);
}

/* Before an HF export: the earlier HF weights, and a native model file
 * (loaders prefer it, so it would shadow the new export). */
static void remove_previous_hf(const char *dir) {
    char p[4096];
    path_fmt(p, sizeof p, "%s/%s", dir, NATIVE_MODEL_FILE);
    remove_if_present(p);
    remove_hf_weights(dir);
}

/* shard_of[i] for each tensor; returns the shard count. */
static int plan_shards(const ExportTensor *t, int n, int64_t shard_bytes, int *shard_of) {
    int shard = 0;
    int64_t used = 0;
    for (int i = 0; i < n; i++) {
        int64_t b = st_spec_bytes(&t[i].out);
        if (used > 0 && used + b > shard_bytes) shard++, used = 0;
        shard_of[i] = shard;
        used += b;
    }
    return n ? shard + 1 : 1;
}

static void write_index(const char *dir, const ExportTensor *t, int n, const int *shard_of, int n_shards) {
    json_t *wm = json_object();
    int64_t total = 0;
    char f[64];
    for (int i = 0; i < n; i++) {
        snprintf(f, sizeof f, "model-%05d-of-%05d.safetensors", shard_of[i] + 1, n_shards);
        json_object_set_new(wm, t[i].out.name, json_string(f));
        total += st_spec_bytes(&t[i].out);
    }
    json_t *root = json_pack("{s:{s:I},s:o}", "metadata", "total_size", (json_int_t)total, "weight_map", wm);
    char *s = json_dumps(root, JSON_INDENT(2) | JSON_SORT_KEYS);
    KV_CHECK(s != NULL, "cannot serialise the safetensors index");
    write_text_file_atomic(dir, HF_INDEX_FILE, s);
    free(s);
    json_decref(root);
}

int export_hf(const char *dir, const ExportTensor *t, int n, int64_t shard_bytes) {
    KV_CHECK(shard_bytes > 0, "shard size must be positive (got %lld)", (long long)shard_bytes);
    check_range(t, n);
    make_dirs(dir);
    remove_previous_hf(dir);
    int *shard_of = xcalloc((size_t)n + 1, sizeof(int));
    int n_shards = plan_shards(t, n, shard_bytes, shard_of);
    StTensorSpec *specs = xcalloc((size_t)n + 1, sizeof(StTensorSpec));
    void *bounce = xmalloc((size_t)CHUNK_ELEMS * 4);
    static const char *const meta[] = {"format", "pt"}; /* transformers refuses files without it */
    for (int s = 0, i = 0; s < n_shards; s++) {
        int first = i, k = 0;
        while (i < n && shard_of[i] == s) specs[k++] = t[i++].out;
        char path[4096];
        if (n_shards == 1) path_fmt(path, sizeof path, "%s/%s", dir, HF_SINGLE_FILE);
        else path_fmt(path, sizeof path, "%s/model-%05d-of-%05d.safetensors", dir, s + 1, n_shards);
        StWriter w;
        st_writer_begin(&w, path, specs, k, meta, 1);
        for (int j = first; j < i; j++) stream_tensor(&t[j], st_sink, &w, bounce);
        st_writer_end(&w);
    }
    if (n_shards > 1) write_index(dir, t, n, shard_of, n_shards);
    free(bounce);
    free(specs);
    free(shard_of);
    return n_shards;
}

void export_native(const char *dir, const ExportTensor *t, int n) {
    check_range(t, n);
    make_dirs(dir);
    StTensorSpec *specs = xcalloc((size_t)n + 1, sizeof(StTensorSpec));
    for (int i = 0; i < n; i++) specs[i] = t[i].out;
    char path[4096];
    path_fmt(path, sizeof path, "%s/%s", dir, NATIVE_MODEL_FILE);
    void *bounce = xmalloc((size_t)CHUNK_ELEMS * 4);
    NmWriter w;
    nm_writer_begin(&w, path, specs, n);
    for (int i = 0; i < n; i++) stream_tensor(&t[i], nm_sink, &w, bounce);
    nm_writer_end(&w);
    /* after the native file is in place (kvcpt loads it first): an earlier
     * HF export's weights would otherwise stay beside it, and transformers,
     * which reads only those, would load the old model */
    remove_hf_weights(dir);
    free(bounce);
    free(specs);
}
