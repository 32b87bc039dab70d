#include "provenance.h"

#include <dirent.h>
#include <limits.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common/build_info.h"
#include "../common/json_file.h"
#include "../common/util.h"
#include "../common/version.h"
#include "../data/sha256.h"
#include "../data/utf8.h"
#include "../kernels/refresh_select.h"

static void put(json_t *o, const char *key, json_t *v) {
    KV_CHECK(v != NULL && json_object_set_new(o, key, v) == 0, "eval.json: cannot store field '%s'", key);
}

static void append(json_t *a, json_t *v) {
    KV_CHECK(v != NULL && json_array_append_new(a, v) == 0, "eval.json: out of memory");
}

/* A resolved path as a JSON string, which must be UTF-8: a directory above
 * it whose name is not is recorded as null (the arguments themselves were
 * checked). */
static json_t *path_string(const char *path) {
    json_t *s = json_string(path);
    return s ? s : json_null();
}

/* The absolute form of a path that exists (the command may be re-run from
 * elsewhere); the path as given when it cannot be resolved. */
static json_t *absolute(const char *path) {
    char *r = realpath(path, NULL);
    json_t *s = path_string(r ? r : path);
    free(r);
    return s;
}

json_t *eval_provenance_new(int argc, char **argv, const char *data, const char *split) {
    json_t *p = json_object(), *args = json_array();
    KV_CHECK(p && args, "eval.json: out of memory");
    append(args, json_string("kvcpt"));
    for (int i = 0; i < argc; i++) {
        int64_t bad = utf8_first_invalid((const uint8_t *)argv[i], strlen(argv[i]));
        KV_CHECK(bad < 0,
                 "eval: argument '%s' is not valid UTF-8 (byte 0x%02x at offset %lld); eval.json records the "
                 "command line as JSON strings, which must be UTF-8",
                 argv[i], (unsigned)(uint8_t)argv[i][bad], (long long)bad);
        append(args, json_string(argv[i]));
    }
    put(p, "argv", args);
    put(p, "executable", absolute("/proc/self/exe"));
    char cwd[PATH_MAX];
    put(p, "cwd", getcwd(cwd, sizeof cwd) ? path_string(cwd) : json_null());
    put(p, "kvcpt_version", json_string(KVCPT_VERSION));
    put(p, "commit", json_string(kvcpt_commit()));
    put(p, "data", json_string(data));
    put(p, "data_absolute", absolute(data));
    put(p, "split", json_string(split));
    char mpath[4200], hex[65];
    path_fmt(mpath, sizeof mpath, "%s/manifest.json", data);
    sha256_file(mpath, hex);
    put(p, "manifest_sha256", json_string(hex));
    /* the manifest names its tokenizer by the SHA-256 of its tokenizer.json */
    json_error_t err;
    json_t *m = json_load_regular(mpath, 0, &err);
    KV_CHECK(m != NULL, "'%s': %s (line %d column %d)", mpath, err.text, err.line, err.column);
    const char *tok = json_string_value(json_object_get(json_object_get(m, "tokenizer"), "sha256"));
    KV_CHECK(tok != NULL, "'%s': tokenizer.sha256 missing", mpath);
    put(p, "tokenizer_sha256", json_string(tok));
    json_decref(m);
    put(p, "threads", json_integer(omp_get_max_threads()));
    put(p, "models", json_array());
    put(p, "policies", json_array());
    return p;
}

/* The files a model directory's weights and config are read from: the
 * safetensors (one file or shards and their index), a native model.kvcpt,
 * config.json. */
static int weight_file(const char *name) {
    size_t n = strlen(name);
    return strcmp(name, "config.json") == 0 || strcmp(name, "model.kvcpt") == 0 ||
           strcmp(name, "model.safetensors.index.json") == 0 || (n > 12 && strcmp(name + n - 12, ".safetensors") == 0);
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static json_t *file_entry(const char *path, const char *name) {
    json_t *f = json_object();
    KV_CHECK(f != NULL, "eval.json: out of memory");
    char hex[65];
    sha256_file(path, hex);
    put(f, "file", json_string(name));
    put(f, "bytes", json_integer((json_int_t)file_size(path)));
    put(f, "sha256", json_string(hex));
    return f;
}

void eval_provenance_add_model(json_t *prov, const char *spec) {
    json_t *m = json_object(), *files = json_array();
    KV_CHECK(m && files, "eval.json: out of memory");
    put(m, "path", json_string(spec));
    put(m, "path_absolute", absolute(spec));
    double t0 = now_seconds();
    struct stat st;
    if (stat(spec, &st) == 0 && S_ISREG(st.st_mode)) {
        append(files, file_entry(spec, spec)); /* a GGUF file */
    } else if (stat(spec, &st) == 0 && S_ISDIR(st.st_mode)) {
        DIR *d = opendir(spec);
        KV_CHECK(d != NULL, "eval: --model '%s': cannot list the directory", spec);
        char **names = NULL;
        size_t n = 0, cap = 0;
        for (struct dirent *e; (e = readdir(d));) {
            if (!weight_file(e->d_name)) continue;
            if (n == cap) names = xrealloc(names, sizeof(char *) * (cap = cap ? 2 * cap : 8));
            names[n++] = xstrdup(e->d_name);
        }
        closedir(d);
        qsort(names, n, sizeof(char *), cmp_str);
        for (size_t i = 0; i < n; i++) {
            char path[4200];
            path_fmt(path, sizeof path, "%s/%s", spec, names[i]);
            append(files, file_entry(path, names[i]));
            free(names[i]);
        }
        free(names);
    } /* else a preset: no file */
    put(m, "files", files);
    put(m, "hash_seconds", json_real(now_seconds() - t0));
    append(json_object_get(prov, "models"), m);
}

void eval_provenance_add_policy(json_t *prov, const char *name, const PolicyOptions *o) {
    json_t *p = json_object();
    KV_CHECK(p != NULL, "eval.json: out of memory");
    put(p, "name", json_string(name));
    put(p, "agg", json_string(group_agg_name((GroupAgg)o->agg)));
    put(p, "pool_kernel", json_integer(o->pool_kernel));
    put(p, "pool", json_string(policy_pool_names[o->pool]));
    put(p, "window", json_integer(o->window));
    put(p, "snapkv_grow", json_boolean(o->snapkv_grow));
    put(p, "snapkv_keep_window", json_string(policy_on_off_names[o->snapkv_keep_window]));
    put(p, "tova_keep_last", json_boolean(o->tova_keep_last));
    put(p, "tova_window", json_integer(o->tova_window));
    put(p, "head_sets", json_string(policy_head_sets_names[o->head_sets]));
    put(p, "h2o_recent", json_real(o->h2o_recent));
    put(p, "h2o_score", json_string(policy_h2o_score_names[o->h2o_score]));
    put(p, "compress_once", json_boolean(o->once));
    put(p, "qc_stride", json_integer(o->qc_stride));
    put(p, "threshold", json_real(o->threshold));
    put(p, "refresh_query", json_string(policy_query_rope_names[o->refresh_query]));
    put(p, "fixed_stride", json_integer(o->fixed_stride));
    put(p, "sinks", json_integer(o->sinks));
    put(p, "restkv_window", json_integer(o->restkv_window));
    put(p, "restkv_alpha", json_real(o->restkv_alpha));
    put(p, "restkv_beta", json_real(o->restkv_beta));
    put(p, "restkv_kernel", json_integer(o->restkv_kernel));
    put(p, "restkv_grow", json_boolean(o->restkv_grow));
    put(p, "restkv_shift", json_string(policy_restkv_shift_names[o->restkv_shift]));
    put(p, "kvec_window", json_integer(o->kvec_window));
    put(p, "kvec_wide_window", json_integer(o->kvec_wide_window));
    put(p, "kvec_heads", json_integer(o->kvec_heads));
    put(p, "kvec_lambda", json_real(o->kvec_lambda));
    put(p, "kvec_keep_frac", json_real(o->kvec_keep_frac));
    append(json_object_get(prov, "policies"), p);
}
