#include "engine_cuda.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/redzone.h"
#include "../common/util.h"
#include "../kernels/attention_decode.h"
#include "../kernels/cuda_device.h"
#include "../kernels/embedding.h"
#include "../kernels/matmul.h"
#include "../kernels/rmsnorm.h"
#include "../kernels/rope.h"
#include "../model/decoder_cuda.h"
#include "engine_backend.h"

/* One engine's device state (DecodeEngine.device). */
typedef struct {
    DecodeModelCuda *g;
    float *caches;           /* device: every layer's K then V, (cap, Hkv, D) each */
    int32_t *keys_dev;       /* device: the step's packed key lists */
    int32_t *keys_packed;    /* host staging for keys_dev */
    int64_t off[ATTENTION_DECODE_MAX_KV_HEADS];
    float *probs_dev;        /* device (Hq, cap) */
    float *cache_host;       /* host: one layer's prefill K and V, for policies that read them */
    int64_t bytes;
} EngineCuda;

static EngineCuda *engine_cuda_of(const DecodeEngine *e) { return e->device; }

static const DecodeBackend gpu_backend; /* defined with its pieces below */

void decode_model_cuda_create(DecodeModelCuda *g, const Decoder *m) {
    memset(g, 0, sizeof *g);
    g->m = m;
    g->params = cuda_malloc_counted(&g->bytes, (int64_t)sizeof(float) * m->layout.total);
    cuda_memcpy_h2d(g->params, m->params, sizeof(float) * (size_t)m->layout.total);
    decoder_bind_tensors(&g->w, &m->cfg, &m->layout, g->params);
}

void decode_model_cuda_free(DecodeModelCuda *g) {
    cuda_free(g->params);
    if (g->rope_cos) cuda_free(g->rope_cos);
    if (g->work) cuda_free(g->work), cuda_free(g->tokens);
    free(g->w.layers);
    memset(g, 0, sizeof *g);
}

/* Device RoPE tables for cap positions: the engine's host tables, bit for
 * bit. Dynamic scaling's tables depend on the window's length: copied
 * again for an engine of another cap. */
static void ensure_rope(DecodeModelCuda *g, const DecodeEngine *e) {
    if (e->cap <= g->rope_cap && (!rope_tables_depend_on_length(&g->m->cfg) || e->cap == g->rope_len)) return;
    int64_t half = g->m->cfg.head_dim / 2, n = e->cap * half;
    if (e->cap > g->rope_cap) {
        if (g->rope_cos) cuda_free(g->rope_cos), g->bytes -= (int64_t)sizeof(float) * 2 * g->rope_cap * half;
        g->rope_cos = cuda_malloc_counted(&g->bytes, (int64_t)sizeof(float) * 2 * n);
        g->rope_sin = g->rope_cos + n;
        g->rope_cap = e->cap;
    }
    cuda_memcpy_h2d(g->rope_cos, e->rope_cos, sizeof(float) * (size_t)n);
    cuda_memcpy_h2d(g->rope_sin, e->rope_sin, sizeof(float) * (size_t)n);
    g->rope_len = e->cap;
}

static int64_t workspace_numel(const DecoderConfig *c, int64_t T, int64_t W) {
    int64_t C = c->hidden_size, Hq = c->num_attention_heads;
    return decoder_layer_acts_numel(c, T, 4) + 2 * T * C + Hq * T + Hq * W * T + C + 1 + c->vocab_size +
           6 * REDZONE_FLOATS; /* 6 takes in ensure_workspace */
}

static int64_t decode_model_cuda_workspace_bytes(const DecoderConfig *c, int64_t T, int64_t W) {
    return (int64_t)sizeof(float) * workspace_numel(c, T, W) + (int64_t)sizeof(int32_t) * T;
}

static int64_t engine_cuda_bytes_for(const DecoderConfig *c, int64_t cap) {
    int64_t KD = c->num_key_value_heads * c->head_dim;
    return (int64_t)sizeof(float) * (2 * c->num_hidden_layers * cap * KD + c->num_attention_heads * cap) +
           (int64_t)sizeof(int32_t) * c->num_key_value_heads * cap;
}

/* The prefill's workspace for T positions and W rows of statistics. */
static void ensure_workspace(DecodeModelCuda *g, int64_t T, int64_t W) {
    if (T <= g->cap_T && W <= g->cap_W) return;
    const DecoderConfig *c = &g->m->cfg;
    int64_t C = c->hidden_size, Hq = c->num_attention_heads, acts = decoder_layer_acts_numel(c, T, 4);
    if (g->work) cuda_free(g->work), cuda_free(g->tokens), g->bytes -= g->work_bytes;
    int64_t before = g->bytes, numel = workspace_numel(c, T, W);
    float *p = g->work = cuda_malloc_counted(&g->bytes, (int64_t)sizeof(float) * numel);
    decoder_layer_acts_carve(&g->acts, c, T, 4, p), p += acts;
    g->x[0] = redzone_take(&p, T * C);
    g->x[1] = redzone_take(&p, T * C);
    g->colsum = redzone_take(&p, Hq * T);
    g->last = redzone_take(&p, Hq * W * T);
    g->xf = redzone_take(&p, C);
    g->rstd = redzone_take(&p, 1);
    g->logits = p;
    g->tokens = cuda_malloc_counted(&g->bytes, (int64_t)sizeof(int32_t) * T);
    g->cap_T = T, g->cap_W = W, g->work_bytes = g->bytes - before;
}

void engine_create_cuda(DecodeEngine *e, Decoder *m, DecodeModelCuda *g, int64_t cap, int64_t W) {
    const DecoderConfig *c = &m->cfg;
    int64_t nl = c->num_hidden_layers, Hkv = c->num_key_value_heads, KD = Hkv * c->head_dim;
    KV_CHECK(Hkv <= ATTENTION_DECODE_MAX_KV_HEADS,
             "eval --device cuda: %lld KV heads, the decode kernel takes at "
             "most %d",
             (long long)Hkv, ATTENTION_DECODE_MAX_KV_HEADS);
    KV_CHECK(g->m == m, "eval --device cuda: the engine's model is not the one uploaded");
    engine_init_host(e, m, cap, W, 0);
    EngineCuda *ec = xcalloc(1, sizeof *ec);
    e->device = ec, e->backend = &gpu_backend;
    ec->g = g;
    e->w = &g->w;
    ec->caches = cuda_malloc_counted(&ec->bytes, (int64_t)sizeof(float) * 2 * nl * cap * KD);
    for (int64_t l = 0; l < nl; l++) e->kc[l] = ec->caches + 2 * l * cap * KD, e->vc[l] = e->kc[l] + cap * KD;
    ec->keys_dev = cuda_malloc_counted(&ec->bytes, (int64_t)sizeof(int32_t) * Hkv * cap);
    ec->keys_packed = xmalloc(sizeof(int32_t) * (size_t)(Hkv * cap));
    ec->probs_dev = cuda_malloc_counted(&ec->bytes, (int64_t)sizeof(float) * c->num_attention_heads * cap);
    ensure_rope(g, e);
}

static void gpu_release(DecodeEngine *e) {
    EngineCuda *ec = engine_cuda_of(e);
    cuda_free(ec->caches), cuda_free(ec->keys_dev), cuda_free(ec->probs_dev);
    free(ec->keys_packed), free(ec->cache_host), free(ec);
    e->device = NULL;
    /* views of the freed device caches: engine_free_host must not free them */
    for (int64_t l = 0; l < e->m->cfg.num_hidden_layers; l++) e->kc[l] = e->vc[l] = NULL;
}

/* Layer l's statistics, last outputs and last query down to the host. */
static void prefill_layer_stats(DecodeEngine *e, DecodeModelCuda *g, int64_t l, int64_t L, int64_t W) {
    const DecoderConfig *c = &e->m->cfg;
    int64_t Hq = c->num_attention_heads, KD = c->num_key_value_heads * c->head_dim, QD = Hq * c->head_dim;
    const LayerActs *a = &g->acts;
    cuda_memcpy_d2d(e->kc[l], a->k, sizeof(float) * (size_t)(L * KD));
    cuda_memcpy_d2d(e->vc[l], a->v, sizeof(float) * (size_t)(L * KD));
    attention_prefill_stats_cuda(g->colsum, g->last, a->q, a->k, L, Hq, c->num_key_value_heads, c->head_dim, W);
    cuda_memcpy_d2h(e->colsum[l], g->colsum, sizeof(float) * (size_t)(Hq * L));
    cuda_memcpy_d2h(e->last_probs[l], g->last, sizeof(float) * (size_t)(Hq * W * L));
    cuda_memcpy_d2h(e->last_out[l], a->att + (L - W) * QD, sizeof(float) * (size_t)(W * QD));
    cuda_memcpy_d2h(e->q_last[l], a->q + (L - 1) * QD, sizeof(float) * (size_t)QD);
    engine_unrotate_query(e, e->q_last[l], L - 1);
}

static void gpu_prefill(DecodeEngine *e, const int32_t *tokens, int64_t L) {
    DecodeModelCuda *g = engine_cuda_of(e)->g;
    const DecoderConfig *c = &e->m->cfg;
    int64_t C = c->hidden_size, W = e->W < L ? e->W : L;
    RefreshMask off = refresh_mask_off();
    decoder_check_inputs(c, &off, tokens, NULL, 1, L);
    ensure_workspace(g, L, e->W);
    cuda_memcpy_h2d(g->tokens, tokens, sizeof(int32_t) * (size_t)L);
    embedding_forward_cuda(g->x[0], g->tokens, g->w.embed, L, C);
    /* the mask is off: the prefill is full causal attention for every policy */
    LayerPass pass = {.ops = &decoder_cuda_ops,
                      .cfg = c,
                      .mask = &off,
                      .rope_cos = g->rope_cos,
                      .rope_sin = g->rope_sin,
                      .B = 1,
                      .T = L};
    for (int64_t l = 0; l < c->num_hidden_layers; l++) {
        decoder_layer_forward(&pass, &g->w.layers[l], &g->acts, NULL, g->x[l & 1], g->x[(l + 1) & 1], 0);
        prefill_layer_stats(e, g, l, L, W);
    }
    const float *last_row = g->x[c->num_hidden_layers & 1] + (L - 1) * C;
    rmsnorm_forward_cuda(g->xf, g->rstd, last_row, g->w.final_norm, 1, C, (float)c->rms_norm_eps);
    matmul_forward_cuda(g->logits, g->xf, g->w.lm_head, 1, C, c->vocab_size);
    cuda_memcpy_d2h(e->prefill_logits, g->logits, sizeof(float) * (size_t)c->vocab_size);
}

/* ---- the backend's decode-step pieces ---- */

static void gpu_rows_create(StepRows *r, const DecoderConfig *c, int64_t nb) {
    step_rows_carve(r, c, nb, cuda_malloc(sizeof(float) * (size_t)step_rows_numel(c, nb)));
    r->q_raw = xmalloc(sizeof(float) * (size_t)(nb * c->num_attention_heads * c->head_dim));
    r->logits_host = xmalloc(sizeof(float) * (size_t)(nb * c->vocab_size));
    r->tokens = cuda_malloc(sizeof(int32_t) * (size_t)nb);
}

static void gpu_rows_free(StepRows *r) {
    cuda_free(r->mem), cuda_free(r->tokens), free(r->q_raw), free(r->logits_host);
}

static void gpu_embed(DecodeEngine *const *e, StepRows *r, const int32_t *const *tokens, int64_t pos) {
    int32_t tok[r->nb];
    for (int64_t b = 0; b < r->nb; b++) tok[b] = tokens[b][pos];
    cuda_memcpy_h2d(r->tokens, tok, sizeof tok);
    embedding_forward_cuda(r->x[0], r->tokens, e[0]->w->embed, r->nb, e[0]->m->cfg.hidden_size);
}

/* The listed heads' keys side by side in keys_packed; off[g] their offset there. */
static int64_t pack_keys(DecodeEngine *e) {
    EngineCuda *ec = engine_cuda_of(e);
    int64_t count = 0;
    for (int64_t g = 0; g < e->m->cfg.num_key_value_heads; g++) {
        ec->off[g] = e->off[g] < 0 ? -1 : count;
        if (e->off[g] < 0) continue;
        memcpy(ec->keys_packed + count, e->keys[g], sizeof(int32_t) * (size_t)e->n[g]);
        count += e->n[g];
    }
    return count;
}

static void gpu_attend_one(DecodeEngine *e, Policy *p, StepRows *r, int64_t b, int64_t l, int64_t stride,
                           int64_t listed) {
    const DecoderConfig *c = &e->m->cfg;
    EngineCuda *ec = engine_cuda_of(e);
    int64_t Hq = c->num_attention_heads, D = c->head_dim, QD = Hq * D;
    if (listed > 0) cuda_memcpy_h2d(ec->keys_dev, ec->keys_packed, sizeof(int32_t) * (size_t)listed);
    float *probs = p->update ? ec->probs_dev : NULL;
    attention_decode_cuda(r->a.att + b * QD, probs, r->a.q + b * QD, e->kc[l], e->vc[l], ec->keys_dev, ec->off, e->n,
                          stride, Hq, c->num_key_value_heads, D);
    if (probs) cuda_memcpy_d2h(e->probs, probs, sizeof(float) * (size_t)(Hq * stride));
}

static void gpu_attend(DecodeEngine *const *e, Policy *const *p, StepRows *r, int64_t l, int64_t pos) {
    const DecoderConfig *c = &e[0]->m->cfg;
    int64_t nb = r->nb, D = c->head_dim, Hq = c->num_attention_heads, Hkv = c->num_key_value_heads;
    int64_t QD = Hq * D, KD = Hkv * D, stride[nb], listed[nb];
    const LayerActs *a = &r->a;
    for (int64_t b = 0; b < nb; b++) {
        cuda_memcpy_d2h(r->q_raw + b * QD, a->qkv + b * (QD + 2 * KD), sizeof(float) * (size_t)QD);
        cuda_memcpy_d2d(e[b]->kc[l] + pos * KD, a->k + b * KD, sizeof(float) * (size_t)KD);
        cuda_memcpy_d2d(e[b]->vc[l] + pos * KD, a->v + b * KD, sizeof(float) * (size_t)KD);
    }
    /* the policies' host work side by side; the GPU work one document after another */
#pragma omp parallel for schedule(dynamic) if (nb > 1)
    for (int64_t b = 0; b < nb; b++)
        stride[b] = engine_choose_keys(e[b], p[b], l, pos, r->q_raw + b * QD), listed[b] = pack_keys(e[b]);
    for (int64_t b = 0; b < nb; b++) gpu_attend_one(e[b], p[b], r, b, l, stride[b], listed[b]);
#pragma omp parallel for schedule(dynamic) if (nb > 1)
    for (int64_t b = 0; b < nb; b++)
        if (p[b]->update) p[b]->update(p[b], l, pos, e[b]->keys, e[b]->n, e[b]->probs, stride[b]);
}

static void gpu_rope_tables(const DecodeEngine *e, const float **cos_t, const float **sin_t) {
    const DecodeModelCuda *g = engine_cuda_of(e)->g;
    *cos_t = g->rope_cos, *sin_t = g->rope_sin;
}

static const float *gpu_logits(StepRows *r, const DecoderConfig *c) {
    cuda_memcpy_d2h(r->logits_host, r->logits, sizeof(float) * (size_t)(r->nb * c->vocab_size));
    return r->logits_host;
}

static void gpu_prefill_cache(DecodeEngine *e, int64_t l, const float **kc, const float **vc) {
    EngineCuda *ec = engine_cuda_of(e);
    int64_t n = e->L * e->m->cfg.num_key_value_heads * e->m->cfg.head_dim;
    if (!ec->cache_host)
        ec->cache_host =
            xmalloc(sizeof(float) * (size_t)(2 * e->cap * e->m->cfg.num_key_value_heads * e->m->cfg.head_dim));
    cuda_memcpy_d2h(ec->cache_host, e->kc[l], sizeof(float) * (size_t)n);
    cuda_memcpy_d2h(ec->cache_host + n, e->vc[l], sizeof(float) * (size_t)n);
    *kc = ec->cache_host, *vc = ec->cache_host + n;
}

static const DecodeBackend gpu_backend = {.ops = &decoder_cuda_ops,
                                          .rows_create = gpu_rows_create,
                                          .rows_free = gpu_rows_free,
                                          .embed = gpu_embed,
                                          .attend = gpu_attend,
                                          .rope_tables = gpu_rope_tables,
                                          .logits = gpu_logits,
                                          .prefill_cache = gpu_prefill_cache,
                                          .prefill = gpu_prefill,
                                          .release = gpu_release};

/* ---- the eval command's entry (eval/decode_device.h) ---- */

static void *gpu_model_upload(const Decoder *m, int64_t *bytes) {
    DecodeModelCuda *g = xmalloc(sizeof *g);
    decode_model_cuda_create(g, m);
    *bytes = g->bytes;
    return g;
}

static void gpu_model_free(void *model) {
    decode_model_cuda_free(model);
    free(model);
}

static void gpu_engine_create(DecodeEngine *e, Decoder *m, void *model, int64_t cap, int64_t W) {
    engine_create_cuda(e, m, model, cap, W);
}

/* Each document of a batch holds its own caches: fewer documents at once
 * when the batch would not fit the free device memory. */
static int64_t gpu_fit_batch(const DecoderConfig *c, int64_t L, int64_t S, int64_t W, int64_t batch) {
    int64_t free_b, total_b, per = engine_cuda_bytes_for(c, L + S);
    int64_t work = decode_model_cuda_workspace_bytes(c, L, W), spare = (int64_t)1 << 30;
    cuda_memory_info(&free_b, &total_b);
    int64_t fit = (free_b - work - spare) / per;
    KV_CHECK(fit >= 1,
             "eval --device cuda: context %lld needs %.2f GB of caches per document and %.2f GB of prefill "
             "workspace, but %.2f GB of %.2f GB are free; hint: a shorter --context or --device cpu",
             (long long)L, (double)per / 1e9, (double)work / 1e9, (double)free_b / 1e9, (double)total_b / 1e9);
    if (fit < batch) {
        printf("eval: %lld documents at a time at context %lld (not %lld): %.2f GB of caches each, %.2f GB free\n",
               (long long)fit, (long long)L, (long long)batch, (double)per / 1e9, (double)free_b / 1e9);
        return fit;
    }
    return batch;
}

const DecodeDevice decode_device_cuda = {.model_upload = gpu_model_upload,
                                         .model_free = gpu_model_free,
                                         .engine_create = gpu_engine_create,
                                         .fit_batch = gpu_fit_batch};
