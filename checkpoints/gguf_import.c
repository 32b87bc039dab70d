#include "gguf_import.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/util.h"
#include "../model/config.h"
#include "../model/params.h"
#include "ckpt.h"
#include "gguf.h"
#include "gguf_dequant.h"
#include "gguf_meta.h"
#include "gguf_tokenizer.h"
#include "model_export.h"
#include "model_file.h"

/* A family's key: llama.cpp names the model's keys after
 * general.architecture ("llama.embedding_length", "qwen2.embedding_length"). */
typedef struct {
    char s[96];
} GgufKey;

static GgufKey key(const char *prefix, const char *name) {
    GgufKey k;
    snprintf(k.s, sizeof k.s, "%s.%s", prefix, name);
    return k;
}

/* llama.cpp divides RoPE positions by ARCH.rope.scaling.factor (older
 * files: ARCH.rope.scale_linear; 0 means none), linearly when
 * ARCH.rope.scaling.type is absent, and multiplies the rotation by
 * ARCH.rope.scaling.attn_factor. The import maps neither onto config.json's
 * rope_scaling (model/config.h, model/rope_scaling.c): a file that asks for either is refused
 * rather than converted into a model that runs differently. */
static void check_rope_scaling(const GgufFile *f, const char *arch) {
    const char *p = f->map.path;
    GgufKey factor_keys[] = {key(arch, "rope.scaling.factor"), key(arch, "rope.scale_linear")};
    for (int i = 0; i < 2; i++) {
        double v = gguf_meta_float(f, factor_keys[i].s, 0, 0, 0, FLT_MAX, "0 (no scaling) or a positive float32");
        if (v != 0 && v != 1)
            die("gguf '%s' at byte %lld: key '%s' = %g scales RoPE positions, which is not supported (only 0 or 1: "
                "no scaling)",
                p, (long long)gguf_meta(f, factor_keys[i].s)->offset, factor_keys[i].s, v);
    }
    GgufKey attn_key = key(arch, "rope.scaling.attn_factor"), type_key = key(arch, "rope.scaling.type");
    double attn = gguf_meta_float(f, attn_key.s, 0, 1, -FLT_MAX, FLT_MAX, "a finite float32");
    if (attn != 1)
        die("gguf '%s' at byte %lld: key '%s' = %g is not supported (only 1)", p,
            (long long)gguf_meta(f, attn_key.s)->offset, attn_key.s, attn);
    char *type = gguf_meta_str(f, type_key.s, 0);
    if (type && strcmp(type, "none") != 0 && strcmp(type, "linear") != 0)
        die("gguf '%s' at byte %lld: %s '%s' is not supported (only none, or linear with no factor)", p,
            (long long)gguf_meta(f, type_key.s)->offset, type_key.s, type);
    free(type);
}

/* LlamaConfig from the family's keys (llama.cpp's LLM_KV names, under
 * general.architecture). */
static void read_config(const GgufFile *f, DecoderConfig *c) {
    const char *p = f->map.path;
    char *arch = gguf_meta_str(f, "general.architecture", 1);
    const ModelArch *a = arch_by_gguf(arch);
    long long at = (long long)gguf_meta(f, "general.architecture")->offset;
    if (!a)
        die("gguf '%s' at byte %lld: general.architecture is '%s', an architecture kvcpt does not know (known: %s)", p,
            at, arch, arch_names());
    if (a->refused)
        die("gguf '%s' at byte %lld: general.architecture '%s' is recognised but not supported: %s", p, at, arch,
            a->refused);
    free(arch);
    const char *ka = a->gguf_arch;
    memset(c, 0, sizeof *c);
    c->arch = a->id;
    snprintf(c->name, sizeof c->name, "%.63s", p);
    c->hidden_size = gguf_meta_int(f, key(ka, "embedding_length").s, 1, 0);
    c->intermediate_size = gguf_meta_int(f, key(ka, "feed_forward_length").s, 1, 0);
    c->num_hidden_layers = gguf_meta_int(f, key(ka, "block_count").s, 1, 0);
    GgufKey heads = key(ka, "attention.head_count");
    c->num_attention_heads = gguf_meta_int(f, heads.s, 1, 0);
    c->num_key_value_heads = gguf_meta_int(f, key(ka, "attention.head_count_kv").s, 0, c->num_attention_heads);
    KV_CHECK(c->num_attention_heads > 0, "gguf '%s': %s must be positive", p, heads.s);
    c->head_dim = gguf_meta_int(f, key(ka, "attention.key_length").s, 0, c->hidden_size / c->num_attention_heads);
    GgufKey vkey = key(ka, "attention.value_length"), rkey = key(ka, "rope.dimension_count");
    int64_t vlen = gguf_meta_int(f, vkey.s, 0, c->head_dim);
    int64_t rot = gguf_meta_int(f, rkey.s, 0, c->head_dim);
    if (vlen != c->head_dim || rot != c->head_dim)
        die("gguf '%s': %s %lld and %s %lld must equal the head size %lld (Hugging Face's %s rotates whole "
            "heads)",
            p, vkey.s, (long long)vlen, rkey.s, (long long)rot, (long long)c->head_dim, a->hf_class);
    if (c->head_dim % 2)
        die("gguf '%s': head size %lld is odd; RoPE rotates pairs of dimensions", p, (long long)c->head_dim);
    /* the model computes in float32: each value must be a finite float32 */
    c->rms_norm_eps = gguf_meta_float(f, key(ka, "attention.layer_norm_rms_epsilon").s, 1, 0, FLT_TRUE_MIN, 1.0,
                                      "a float32 above 0 and at most 1");
    c->rope_theta = gguf_meta_float(f, key(ka, "rope.freq_base").s, 0, 10000.0, nextafter(1.0, 2.0), FLT_MAX,
                                    "a float32 above 1 (the base of RoPE's geometric frequencies)");
    check_rope_scaling(f, ka);
    c->max_position_embeddings = gguf_meta_int(f, key(ka, "context_length").s, 1, 0);
    c->initializer_range = 0.02;
    /* vocabulary: the embedding's rows (ARCH.vocab_size, when given, must agree) */
    const ArchTensorNames *tn = a->tensors;
    int64_t e = gguf_find_tensor(&f->h, tn->embed.gguf);
    if (e < 0) die("gguf '%s': tensor '%s' is missing", p, tn->embed.gguf);
    c->vocab_size = f->h.t[e].ndim == 2 ? f->h.t[e].ne[1] : 0;
    GgufKey vocab = key(ka, "vocab_size");
    int64_t v = gguf_meta_int(f, vocab.s, 0, c->vocab_size);
    if (v != c->vocab_size)
        die("gguf '%s': %s %lld but %s has %lld rows", p, vocab.s, (long long)v, tn->embed.gguf,
            (long long)c->vocab_size);
    c->tie_word_embeddings = gguf_find_tensor(&f->h, tn->lm_head.gguf) < 0;
    c->bos_token_id = gguf_meta_int(f, "tokenizer.ggml.bos_token_id", 0, -1);
    int64_t eos = gguf_meta_int(f, "tokenizer.ggml.eos_token_id", 0, -1);
    if (eos >= 0) c->eos_token_ids[c->n_eos++] = eos;
    config_validate(c, p);
}

/* Hugging Face's name for a GGUF tensor name, by the family's table
 * (model/arch.c); 0 when there is none. */
static int hf_name(const ArchTensorNames *tn, const char *g, char *out, size_t n) {
    const ArchTensorName *top[] = {&tn->embed, &tn->final_norm, &tn->lm_head};
    for (size_t i = 0; i < sizeof top / sizeof top[0]; i++)
        if (strcmp(g, top[i]->gguf) == 0) return snprintf(out, n, "%s", top[i]->hf) > 0;
    unsigned layer;
    int used = 0;
    if (sscanf(g, "blk.%u.%n", &layer, &used) != 1 || used == 0 || layer > 100000) return 0;
    char digits[16];
    snprintf(digits, sizeof digits, "%u", layer);
    if (strncmp(g + 4, digits, strlen(digits)) != 0 || g[4 + strlen(digits)] != '.') return 0; /* "blk.01." */
    for (size_t i = 0; i < sizeof tn->layer / sizeof tn->layer[0]; i++)
        if (strcmp(g + used, tn->layer[i].gguf) == 0)
            return snprintf(out, n, "model.layers.%u.%s", layer, tn->layer[i].hf) > 0;
    /* a family without biases has no such tensor in its layout, so a bias
     * in its file is refused by the caller as having no place */
    for (size_t i = 0; i < sizeof tn->qkv_bias / sizeof tn->qkv_bias[0]; i++)
        if (strcmp(g + used, tn->qkv_bias[i].gguf) == 0)
            return snprintf(out, n, "model.layers.%u.%s", layer, tn->qkv_bias[i].hf) > 0;
    return 0;
}

/* llama.cpp's converter interleaves each head's rows of q_proj and k_proj
 * in its llama files (the two halves rotated together by Hugging Face's
 * RoPE become adjacent rows for ggml's; its qwen2 files keep Hugging Face's
 * order, for ggml's NEOX RoPE); this puts them back, as transformers' GGUF
 * loader does:
 * GGUF row h*D + 2*i + j is Hugging Face row h*D + j*D/2 + i. */
static void unpermute_rows(float *dst, const float *src, int64_t heads, int64_t head_dim, int64_t cols) {
    int64_t half = head_dim / 2;
    for (int64_t h = 0; h < heads; h++)
        for (int64_t i = 0; i < half; i++)
            for (int j = 0; j < 2; j++)
                memcpy(dst + (h * head_dim + j * half + i) * cols, src + (h * head_dim + 2 * i + j) * cols,
                       (size_t)cols * sizeof(float));
}

/* Dequantizes tensor g into dst (numel floats). One thread: the work is a
 * pass over memory (0.2 s of CPU for SmolLM2-135M), and OpenMP's spinning
 * threads made it 2.5x slower on a shared 2-core machine. */
static void dequant_tensor(const GgufFile *f, int64_t g, float *dst) {
    const GgufTensor *t = &f->h.t[g];
    if (ggml_dequantize(t->type, gguf_tensor_data(f, g), dst, t->numel) != 0)
        die("gguf '%s': tensor '%s': type %u cannot be dequantized", f->map.path, t->name, t->type);
}

/* Prints "tensor i of N" on stderr about once a second, once a conversion
 * has taken two seconds (a short one stays quiet). */
static void progress(double t0, double *last, int i, int n, const char *name) {
    double now = now_seconds();
    if (now - t0 < 2.0 || now - *last < 1.0) return;
    *last = now;
    fprintf(stderr, "kvcpt convert: tensor %d of %d (%s), %.1f s\n", i + 1, n, name, now - t0);
}

/* A GGUF file's model, checked whole: its config, its layout, and for every
 * tensor of the layout the GGUF tensor it comes from (by name and shape,
 * each dequantizable). */
typedef struct {
    GgufFile f;
    DecoderConfig cfg;
    ParamLayout pl;
    int *src_of; /* pl.n entries */
} GgufModel;

static void gguf_model_open(GgufModel *m, const char *gguf_path) {
    char err[GGUF_ERR_LEN];
    if (gguf_open(&m->f, gguf_path, err, sizeof err) != 0) die("%s", err);
    read_config(&m->f, &m->cfg);
    param_layout_build(&m->pl, &m->cfg);
    const ParamLayout *pl = &m->pl;

    /* every GGUF tensor has exactly one place in the layout, with its shape */
    int *src_of = m->src_of = xcalloc((size_t)pl->n, sizeof(int));
    for (int k = 0; k < pl->n; k++) src_of[k] = -1;
    for (int64_t g = 0; g < m->f.h.n_tensors; g++) {
        const GgufTensor *t = &m->f.h.t[g];
        char name[128];
        int k = hf_name(arch_get(m->cfg.arch)->tensors, t->name, name, sizeof name) ? param_layout_find(pl, name) : -1;
        if (k < 0)
            die("gguf '%s' at byte %lld: tensor '%s' has no place in a Hugging Face %s of this config%s", gguf_path,
                (long long)t->info_offset, t->name, arch_get(m->cfg.arch)->hf_class,
                strcmp(t->name, "rope_freqs.weight") == 0 ? " (Llama 3.1 RoPE scaling factors: not supported)" : "");
        if (!ggml_type_dequantizable(t->type))
            die("gguf '%s' at byte %lld: tensor '%s' is %s, which kvcpt cannot dequantize (supported: F32, F16, "
                "BF16, Q8_0, Q4_0, Q4_1)",
                gguf_path, (long long)t->info_offset, t->name, ggml_type_info(t->type)->name);
        const ParamTensor *p = &pl->t[k];
        int shape_ok = t->ndim == p->ndim;
        for (int d = 0; shape_ok && d < p->ndim; d++) shape_ok = t->ne[d] == p->shape[p->ndim - 1 - d];
        if (!shape_ok) {
            char want[64];
            if (p->ndim == 1) snprintf(want, sizeof want, "[%lld]", (long long)p->shape[0]);
            else snprintf(want, sizeof want, "[%lld, %lld]", (long long)p->shape[0], (long long)p->shape[1]);
            die("gguf '%s' at byte %lld: tensor '%s' (%s) has ne [%lld, %lld] (%d dims); the config needs "
                "Hugging Face shape %s (ne reversed)",
                gguf_path, (long long)t->info_offset, t->name, p->name, (long long)t->ne[0],
                (long long)(t->ndim > 1 ? t->ne[1] : 1), t->ndim, want);
        }
        src_of[k] = (int)g;
    }
    for (int k = 0; k < pl->n; k++)
        if (src_of[k] < 0) die("gguf '%s': no tensor for %s", gguf_path, pl->t[k].name);
}

static void gguf_model_close(GgufModel *m) {
    free(m->src_of);
    param_layout_free(&m->pl);
    gguf_close(&m->f);
}

/* The tokenizer files, checked against the embedding; 0, or -1 (both NULL)
 * when the file carries no tokenizer. */
static int gguf_model_tokenizer(const GgufModel *m, char **tok_json, char **tok_cfg) {
    if (gguf_tokenizer_json(&m->f, m->cfg.max_position_embeddings, tok_json, tok_cfg) != 0) return -1;
    const GgufKV *toks = gguf_meta(&m->f, "tokenizer.ggml.tokens");
    if ((int64_t)toks->arr_n > m->cfg.vocab_size)
        die("gguf '%s' at byte %lld: tokenizer.ggml.tokens lists %llu tokens but the embedding has %lld rows",
            m->f.map.path, (long long)toks->offset, (unsigned long long)toks->arr_n, (long long)m->cfg.vocab_size);
    return 0;
}

/* Every tensor dequantized into params (m->pl.total floats), q and k rows
 * put back in Hugging Face's order. */
static void gguf_model_dequant(const GgufModel *m, float *params) {
    const ParamLayout *pl = &m->pl;
    float *scratch = NULL;
    int64_t scratch_n = 0;
    double t0 = now_seconds(), last = 0;
    for (int k = 0; k < pl->n; k++) {
        const ParamTensor *p = &pl->t[k];
        progress(t0, &last, k, pl->n, p->name);
        if ((p->kind != PT_WQ && p->kind != PT_WK) || !arch_get(m->cfg.arch)->gguf_rope_rows) {
            dequant_tensor(&m->f, m->src_of[k], params + p->offset);
            continue;
        }
        if (scratch_n < p->numel) {
            free(scratch);
            scratch = xmalloc((size_t)p->numel * sizeof(float));
            scratch_n = p->numel;
        }
        dequant_tensor(&m->f, m->src_of[k], scratch);
        int64_t heads = p->kind == PT_WQ ? m->cfg.num_attention_heads : m->cfg.num_key_value_heads;
        unpermute_rows(params + p->offset, scratch, heads, m->cfg.head_dim, p->shape[1]);
    }
    free(scratch);
}

void gguf_import(const char *gguf_path, const char *to_dir, int native, KvDtype dtype, int64_t shard_bytes,
                 GgufImportStats *st) {
    memset(st, 0, sizeof *st);
    GgufModel m;
    gguf_model_open(&m, gguf_path);
    /* the tokenizer is checked before anything is written */
    char *tok_json = NULL, *tok_cfg = NULL;
    st->tokenizer = gguf_model_tokenizer(&m, &tok_json, &tok_cfg) == 0;
    size_t total;
    if (__builtin_mul_overflow((size_t)m.pl.total, sizeof(float), &total)) die("gguf '%s': model too large", gguf_path);
    float *params = xmalloc(total);
    gguf_model_dequant(&m, params);
    if (native) model_file_save_native(to_dir, &m.cfg, &m.pl, params, dtype);
    else model_file_save_hf(to_dir, &m.cfg, &m.pl, params, dtype, shard_bytes);
    if (st->tokenizer) {
        write_text_file_atomic(to_dir, "tokenizer.json", tok_json);
        write_text_file_atomic(to_dir, "tokenizer_config.json", tok_cfg);
    }
    st->tensors = m.pl.n;
    st->bytes = m.pl.total * kv_dtype_size(dtype);
    free(tok_json), free(tok_cfg), free(params);
    gguf_model_close(&m);
}

void gguf_read_config(const char *gguf_path, DecoderConfig *cfg) {
    GgufModel m;
    gguf_model_open(&m, gguf_path);
    *cfg = m.cfg;
    gguf_model_close(&m);
}

void gguf_load_fp32(const char *gguf_path, const DecoderConfig *cfg, const ParamLayout *pl, float *params) {
    GgufModel m;
    gguf_model_open(&m, gguf_path);
    /* the caller's layout came from this file's config: the same file read again must give the same one */
    KV_CHECK(param_layout_hash(&m.pl) == param_layout_hash(pl) && m.pl.total == pl->total,
             "gguf '%s': the file's model (%lld parameters) is not the one %s describes (%lld); was it replaced "
             "while kvcpt ran?",
             gguf_path, (long long)m.pl.total, cfg->name, (long long)pl->total);
    gguf_model_dequant(&m, params);
    gguf_model_close(&m);
}

int gguf_read_tokenizer(const char *gguf_path, char **tok_json, char **tok_cfg) {
    GgufModel m;
    gguf_model_open(&m, gguf_path);
    int rc = gguf_model_tokenizer(&m, tok_json, tok_cfg);
    gguf_model_close(&m);
    return rc;
}
