#include "tensor_set.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "../common/json_file.h"
#include "../common/util.h"

static int exists(const char *dir, const char *file) {
    char p[4096];
    path_fmt(p, sizeof p, "%s/%s", dir, file);
    return file_size(p) >= 0;
}

int tensor_set_detect(const char *dir) {
    if (exists(dir, NATIVE_MODEL_FILE)) return 1;
    if (exists(dir, HF_SINGLE_FILE) || exists(dir, HF_INDEX_FILE)) return 0;
    return -1;
}

static void add_ref(TensorSet *s, const char *name, KvDtype dt, int ndim, const int64_t *shape, int64_t bytes,
                    const uint8_t *data, const char *file, int64_t off) {
    TensorRef *r = &s->t[s->n++];
    *r = (TensorRef){name, dt, ndim, shape, bytes, data, file, off};
}

static int open_native(TensorSet *s, const char *dir, char *err, int errlen) {
    char p[4096];
    path_fmt(p, sizeof p, "%s/%s", dir, NATIVE_MODEL_FILE);
    if (nm_open(&s->native, p, err, errlen) != 0) return -1;
    s->format = TS_NATIVE;
    s->t = xcalloc((size_t)s->native.n + 1, sizeof(TensorRef));
    for (int i = 0; i < s->native.n; i++) {
        const NmTensor *t = &s->native.t[i];
        add_ref(s, t->name, t->dtype, t->ndim, t->shape, t->bytes, nm_tensor_data(&s->native, i), s->native.map.path,
                s->native.data_start + t->offset);
    }
    return 0;
}

static int add_shard_refs(TensorSet *s, const StFile *f) {
    s->t = xrealloc(s->t, sizeof(TensorRef) * (size_t)(s->n + f->h.n + 1));
    for (int i = 0; i < f->h.n; i++) {
        const StTensor *t = &f->h.t[i];
        add_ref(s, t->name, t->dtype, t->ndim, t->shape, t->end - t->begin, st_tensor_data(f, i), f->map.path,
                f->h.data_start + t->begin);
    }
    return 0;
}

static int open_shard(TensorSet *s, const char *dir, const char *file, char *err, int errlen) {
    char p[4096];
    path_fmt(p, sizeof p, "%s/%s", dir, file);
    s->shards = xrealloc(s->shards, sizeof(StFile) * (size_t)(s->n_shards + 1));
    if (st_open(&s->shards[s->n_shards], p, err, errlen) != 0) return -1;
    return add_shard_refs(s, &s->shards[s->n_shards++]);
}

static int index_fail(char *err, int errlen, const char *path, const char *what, const char *name) {
    snprintf(err, (size_t)errlen, "index '%s': %s%s%s", path, what, name ? ": " : "", name ? name : "");
    return -1;
}

/* The shard names of the index in order of first mention, validated: plain
 * file names inside the directory, never paths. */
static int index_shards(json_t *wm, const char *path, const char ***names, int *n, char *err, int errlen) {
    const char *k;
    json_t *v;
    *names = xcalloc(json_object_size(wm) + 1, sizeof(char *));
    *n = 0;
    json_object_foreach(wm, k, v) {
        if (!json_is_string(v))
            return index_fail(err, errlen, path, "weight_map values must be file names; bad entry", k);
        const char *f = json_string_value(v);
        if (!f[0] || strchr(f, '/') || strcmp(f, "..") == 0 || strcmp(f, ".") == 0)
            return index_fail(err, errlen, path, "expected a plain shard file name in weight_map, got", f);
        int seen = 0;
        for (int i = 0; i < *n && !seen; i++) seen = strcmp((*names)[i], f) == 0;
        if (!seen) (*names)[(*n)++] = f;
    }
    return 0;
}

/* Every tensor of every shard is listed for that shard, and every listed
 * tensor is present where the index says. */
static int check_index_agrees(const TensorSet *s, json_t *wm, const char *path, char *err, int errlen) {
    char msg[1024];
    for (int i = 0; i < s->n; i++) {
        json_t *v = json_object_get(wm, s->t[i].name);
        const char *base = strrchr(s->t[i].file, '/') ? strrchr(s->t[i].file, '/') + 1 : s->t[i].file;
        if (!v || strcmp(json_string_value(v), base) != 0) {
            snprintf(msg, sizeof msg, "tensor '%s' is in shard %s but the index maps it to %s", s->t[i].name, base,
                     v ? json_string_value(v) : "nothing");
            return index_fail(err, errlen, path, msg, NULL);
        }
    }
    if ((int)json_object_size(wm) != s->n)
        return index_fail(err, errlen, path, "weight_map lists tensors that are missing from their shards", NULL);
    return 0;
}

static int open_index(TensorSet *s, const char *dir, char *err, int errlen) {
    char path[4096];
    path_fmt(path, sizeof path, "%s/%s", dir, HF_INDEX_FILE);
    json_error_t je;
    json_t *root = json_load_regular(path, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        snprintf(err, (size_t)errlen, "index '%s' at byte %d (line %d): invalid JSON: %s", path, je.position, je.line,
                 je.text);
        return -1;
    }
    json_t *wm = json_object_get(root, "weight_map");
    const char **names = NULL;
    int n = 0, rc = 0;
    if (!json_is_object(wm)) rc = index_fail(err, errlen, path, "expected a \"weight_map\" object", NULL);
    if (!rc) rc = index_shards(wm, path, &names, &n, err, errlen);
    for (int i = 0; i < n && !rc; i++) rc = open_shard(s, dir, names[i], err, errlen);
    if (!rc) rc = check_index_agrees(s, wm, path, err, errlen);
    free(names);
    json_decref(root);
    return rc;
}

int tensor_set_open(TensorSet *s, const char *dir, char *err, int errlen) {
    memset(s, 0, sizeof *s);
    int kind = tensor_set_detect(dir), rc;
    s->format = kind == 1 ? TS_NATIVE : TS_HF;
    if (kind < 0) {
        snprintf(err, (size_t)errlen, "'%s': expected a model directory holding %s, %s or %s", dir, NATIVE_MODEL_FILE,
                 HF_SINGLE_FILE, HF_INDEX_FILE);
        return -1;
    }
    if (kind == 1) rc = open_native(s, dir, err, errlen);
    else if (exists(dir, HF_SINGLE_FILE)) rc = open_shard(s, dir, HF_SINGLE_FILE, err, errlen);
    else rc = open_index(s, dir, err, errlen);
    if (rc) tensor_set_close(s);
    return rc;
}

void tensor_set_open_or_die(TensorSet *s, const char *dir) {
    char err[1024];
    if (tensor_set_open(s, dir, err, sizeof err) != 0) die("%s", err);
}

int tensor_set_find(const TensorSet *s, const char *name) {
    for (int i = 0; i < s->n; i++)
        if (strcmp(s->t[i].name, name) == 0) return i;
    return -1;
}

void tensor_set_close(TensorSet *s) {
    if (s->format == TS_NATIVE) nm_close(&s->native);
    for (int i = 0; i < s->n_shards; i++) st_close(&s->shards[i]);
    free(s->shards);
    free(s->t);
    memset(s, 0, sizeof *s);
}
