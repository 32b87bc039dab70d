#include "model_file.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "../common/util.h"
#include "model_export.h"

static int shape_equal(const TensorRef *r, const ParamTensor *p) {
    if (r->ndim != p->ndim) return 0;
    for (int d = 0; d < p->ndim; d++)
        if (r->shape[d] != p->shape[d]) return 0;
    return 1;
}

static void shape_str(char *buf, size_t n, int ndim, const int64_t *shape) {
    int k = snprintf(buf, n, "[");
    for (int d = 0; d < ndim && k > 0 && (size_t)k < n; d++)
        k += snprintf(buf + k, n - (size_t)k, d ? ", %lld" : "%lld", (long long)shape[d]);
    if (k > 0 && (size_t)k < n) snprintf(buf + k, n - (size_t)k, "]");
}

int model_match_layout(const TensorSet *s, const ParamLayout *pl, const DecoderConfig *cfg, int *skip_lm_head,
                       char *err, int errlen) {
    *skip_lm_head = 0;
    char a[128], b[128];
    for (int i = 0; i < s->n; i++) {
        const TensorRef *r = &s->t[i];
        int k = param_layout_find(pl, r->name);
        const ArchTensorNames *tn = arch_get(cfg->arch)->tensors;
        if (k < 0 && cfg->tie_word_embeddings && strcmp(r->name, tn->lm_head.hf) == 0) {
            k = param_layout_find(pl, tn->embed.hf);
            *skip_lm_head = 1;
        }
        if (k < 0) {
            snprintf(err, (size_t)errlen, "'%s' at byte %lld: tensor '%s' is not part of the model described by %s",
                     r->file, (long long)r->file_offset, r->name, cfg->name);
            return -1;
        }
        if (!shape_equal(r, &pl->t[k])) {
            shape_str(a, sizeof a, r->ndim, r->shape);
            shape_str(b, sizeof b, pl->t[k].ndim, pl->t[k].shape);
            snprintf(err, (size_t)errlen, "'%s' at byte %lld: tensor '%s' has shape %s, expected %s from %s", r->file,
                     (long long)r->file_offset, r->name, a, b, cfg->name);
            return -1;
        }
    }
    for (int k = 0; k < pl->n; k++)
        if (tensor_set_find(s, pl->t[k].name) < 0) {
            snprintf(err, (size_t)errlen, "tensor '%s' (shape %lld x %lld) is missing from the checkpoint",
                     pl->t[k].name, (long long)pl->t[k].shape[0], (long long)pl->t[k].shape[1]);
            return -1;
        }
    return 0;
}

void model_file_load_fp32(const char *dir, const DecoderConfig *cfg, const ParamLayout *pl, float *params) {
    TensorSet s;
    tensor_set_open_or_die(&s, dir);
    char err[1024];
    int skip_lm_head;
    if (model_match_layout(&s, pl, cfg, &skip_lm_head, err, sizeof err) != 0) die("%s: %s", dir, err);
    /* file order: each mapped page is touched once, front to back */
    for (int i = 0; i < s.n; i++) {
        int k = param_layout_find(pl, s.t[i].name);
        if (k < 0) continue; /* the tied model's redundant lm_head */
        const ParamTensor *p = &pl->t[k];
        const uint8_t *src = s.t[i].data;
        int64_t es = kv_dtype_size(s.t[i].dtype);
#pragma omp parallel for schedule(static)
        for (int64_t j = 0; j < p->numel; j += 1 << 16) {
            int64_t n = p->numel - j < (1 << 16) ? p->numel - j : (1 << 16);
            kv_convert(params + p->offset + j, KV_F32, src + j * es, s.t[i].dtype, n);
        }
    }
    tensor_set_close(&s);
}

char *config_json_with_dtype(const char *config_json, KvDtype dtype) {
    json_error_t je;
    json_t *root = json_loads(config_json, 0, &je);
    KV_CHECK(root && json_is_object(root), "config.json: invalid JSON at line %d: %s", je.line, je.text);
    const char *name = dtype == KV_F32 ? "float32" : dtype == KV_BF16 ? "bfloat16" : "float16";
    json_object_set_new(root, "torch_dtype", json_string(name));
    if (json_object_get(root, "dtype")) json_object_set_new(root, "dtype", json_string(name)); /* newer transformers */
    char *s = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    KV_CHECK(s != NULL, "cannot serialise config.json");
    json_decref(root);
    return s;
}

static ExportTensor *layout_exports(const ParamLayout *pl, const float *params, KvDtype dtype) {
    ExportTensor *t = xcalloc((size_t)pl->n, sizeof(ExportTensor));
    for (int i = 0; i < pl->n; i++) {
        const ParamTensor *p = &pl->t[i];
        t[i].out = (StTensorSpec){p->name, dtype, p->ndim, {p->shape[0], p->shape[1]}};
        t[i].src = params + p->offset;
        t[i].src_dtype = KV_F32;
    }
    return t;
}

static void write_config(const char *dir, const DecoderConfig *cfg, KvDtype dtype) {
    char *base = config_to_json(cfg), *js = config_json_with_dtype(base, dtype);
    write_text_file_atomic(dir, "config.json", js);
    free(base);
    free(js);
}

int model_file_save_hf_weights(const char *dir, const ParamLayout *pl, const float *params, KvDtype dtype,
                               int64_t shard_bytes) {
    ExportTensor *t = layout_exports(pl, params, dtype);
    int shards = export_hf(dir, t, pl->n, shard_bytes); /* it refuses values the dtype cannot hold before any write */
    free(t);
    return shards;
}

void model_file_save_hf(const char *dir, const DecoderConfig *cfg, const ParamLayout *pl, const float *params,
                        KvDtype dtype, int64_t shard_bytes) {
    model_file_save_hf_weights(dir, pl, params, dtype, shard_bytes);
    write_config(dir, cfg, dtype);
}

void model_file_save_native(const char *dir, const DecoderConfig *cfg, const ParamLayout *pl, const float *params,
                            KvDtype dtype) {
    ExportTensor *t = layout_exports(pl, params, dtype);
    export_native(dir, t, pl->n); /* first: it refuses values the dtype cannot hold before any write */
    write_config(dir, cfg, dtype);
    free(t);
}
