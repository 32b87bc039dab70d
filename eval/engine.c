#include "engine.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../common/redzone.h"
#include "../common/util.h"
#include "../kernels/attention_decode.h"
#include "../kernels/bias.h"
#include "../kernels/embedding.h"
#include "../kernels/residual.h"
#include "../kernels/rope.h"
#include "../kernels/rmsnorm.h"
#include "../kernels/swiglu.h"
#include "../model/decoder_layer.h"
#include "../model/config.h"
#include "engine_backend.h"
#include "row_matmul.h"

static float *alloc_f(int64_t n) { return xmalloc(sizeof(float) * (size_t)(n > 0 ? n : 1)); }

static const DecodeBackend cpu_backend; /* defined with its pieces below */

void engine_init_host(DecodeEngine *e, Decoder *m, int64_t cap, int64_t W, int host_caches) {
    const DecoderConfig *c = &m->cfg;
    memset(e, 0, sizeof *e);
    e->m = m, e->w = &m->w, e->cap = cap, e->W = W;
    int64_t nl = c->num_hidden_layers, Hq = c->num_attention_heads, Hkv = c->num_key_value_heads, D = c->head_dim;
    e->kc = xcalloc((size_t)nl, sizeof(float *)), e->vc = xcalloc((size_t)nl, sizeof(float *));
    e->colsum = xcalloc((size_t)nl, sizeof(float *)), e->last_probs = xcalloc((size_t)nl, sizeof(float *));
    e->last_out = xcalloc((size_t)nl, sizeof(float *));
    e->q_last = xcalloc((size_t)nl, sizeof(float *));
    for (int64_t l = 0; l < nl; l++) {
        if (host_caches) e->kc[l] = alloc_f(cap * Hkv * D), e->vc[l] = alloc_f(cap * Hkv * D);
        e->colsum[l] = alloc_f(Hq * cap), e->last_probs[l] = alloc_f(Hq * W * cap),
        e->last_out[l] = alloc_f(W * Hq * D);
        e->q_last[l] = alloc_f(Hq * D);
    }
    /* tables for the whole window of cap tokens (dynamic scaling's depend on it) */
    RopeParams rp = rope_params(c, cap);
    e->rope_cos = alloc_f(cap * D / 2), e->rope_sin = alloc_f(cap * D / 2);
    rope_table(e->rope_cos, e->rope_sin, cap, D, &rp);
    e->probs = alloc_f(Hq * cap);
    e->prefill_logits = alloc_f(c->vocab_size);
    e->key_buf = xmalloc(sizeof(int32_t) * (size_t)(Hkv * cap));
    e->keys = xcalloc((size_t)Hkv, sizeof(int32_t *));
    for (int64_t g = 0; g < Hkv; g++) e->keys[g] = e->key_buf + g * cap;
    e->off = xcalloc((size_t)Hkv, sizeof(int64_t)), e->n = xcalloc((size_t)Hkv, sizeof(int64_t));
}

void engine_free_host(DecodeEngine *e) {
    int64_t nl = e->m->cfg.num_hidden_layers;
    for (int64_t l = 0; l < nl; l++) {
        free(e->kc[l]), free(e->vc[l]); /* NULL for a device engine: its backend's release freed its caches */
        free(e->colsum[l]), free(e->last_probs[l]), free(e->last_out[l]), free(e->q_last[l]);
    }
    free(e->q_last), free(e->kc), free(e->vc), free(e->colsum), free(e->last_probs), free(e->last_out);
    free(e->keys), free(e->key_buf), free(e->off), free(e->n), free(e->rope_cos), free(e->rope_sin), free(e->probs);
    free(e->prefill_logits);
    free(e->first_keys), free(e->first_n);
    memset(e, 0, sizeof *e);
}

void engine_create(DecodeEngine *e, Decoder *m, int64_t cap, int64_t W) {
    engine_init_host(e, m, cap, W, 1);
    e->backend = &cpu_backend;
}

void engine_record_first_step(DecodeEngine *e) {
    int64_t sets = e->m->cfg.num_hidden_layers * e->m->cfg.num_key_value_heads;
    if (!e->first_keys) e->first_keys = xmalloc(sizeof(int32_t) * (size_t)(sets * e->cap));
    if (!e->first_n) e->first_n = xcalloc((size_t)sets, sizeof(int64_t));
}

/* The first step's list of KV head g (k, n entries with the current position last; ascending). */
static void record_first(DecodeEngine *e, int64_t l, int64_t g, const int32_t *k, int64_t n) {
    int64_t at = l * e->m->cfg.num_key_value_heads + g;
    e->first_n[at] = n - 1;
    for (int64_t i = 0; i < n - 1; i++) e->first_keys[at * e->cap + i] = k ? k[i] : (int32_t)i;
}

void engine_fork(DecodeEngine *f, const DecodeEngine *e) {
    KV_CHECK(e->backend == &cpu_backend && !e->forked && e->L >= 1, "eval: only a prefilled CPU engine can be forked");
    const DecoderConfig *c = &e->m->cfg;
    int64_t nl = c->num_hidden_layers, Hq = c->num_attention_heads, Hkv = c->num_key_value_heads, D = c->head_dim;
    int64_t tail = e->cap - e->L;
    memset(f, 0, sizeof *f);
    f->m = e->m, f->w = e->w, f->cap = e->cap, f->L = e->L, f->W = e->W, f->forked = 1, f->backend = e->backend;
    /* shared, read-only: the prefill's caches and what policies init from */
    f->kc = e->kc, f->vc = e->vc, f->colsum = e->colsum, f->last_probs = e->last_probs, f->last_out = e->last_out;
    f->q_last = e->q_last, f->rope_cos = e->rope_cos, f->rope_sin = e->rope_sin, f->prefill_logits = e->prefill_logits;
    f->kt = xcalloc((size_t)nl, sizeof(float *)), f->vt = xcalloc((size_t)nl, sizeof(float *));
    for (int64_t l = 0; l < nl; l++) f->kt[l] = alloc_f(tail * Hkv * D), f->vt[l] = alloc_f(tail * Hkv * D);
    f->probs = alloc_f(Hq * e->cap);
    f->key_buf = xmalloc(sizeof(int32_t) * (size_t)(Hkv * e->cap));
    f->keys = xcalloc((size_t)Hkv, sizeof(int32_t *));
    for (int64_t g = 0; g < Hkv; g++) f->keys[g] = f->key_buf + g * e->cap;
    f->off = xcalloc((size_t)Hkv, sizeof(int64_t)), f->n = xcalloc((size_t)Hkv, sizeof(int64_t));
    if (e->first_n) engine_record_first_step(f);
}

void engine_fork_free(DecodeEngine *f) {
    KV_CHECK(f->forked, "eval: engine_fork_free of an engine that is not a fork");
    for (int64_t l = 0; l < f->m->cfg.num_hidden_layers; l++) free(f->kt[l]), free(f->vt[l]);
    free(f->kt), free(f->vt), free(f->probs), free(f->key_buf), free(f->keys), free(f->off), free(f->n);
    free(f->first_keys), free(f->first_n);
    memset(f, 0, sizeof *f);
}

void engine_free(DecodeEngine *e) {
    KV_CHECK(!e->forked, "eval: a forked engine is freed with engine_fork_free");
    if (e->backend && e->backend->release) e->backend->release(e);
    engine_free_host(e);
}

/* Full causal prefill on the CPU, layer by layer through the model's own
 * layer forward (model/decoder_layer.h) with one reused activation set: eval
 * never runs a backward, so keeping every layer's activations (about 1 MB
 * per token for SmolLM2-135M: 9 GB at L = 8192, 17 GB at 16384) would only
 * cost memory. After each layer its K/V rows go to the caches and what the
 * policies read is kept; the statistics come from the prefill attention's
 * own probabilities (one pass over the scores), not a second L x L softmax.
 * The GPU engine's prefill (eval/engine_cuda.c) has the same shape. */
static void prefill_cpu(DecodeEngine *e, const int32_t *tokens, int64_t L) {
    const Decoder *m = e->m;
    const DecoderConfig *c = &m->cfg;
    int64_t C = c->hidden_size, Hq = c->num_attention_heads, Hkv = c->num_key_value_heads, D = c->head_dim;
    int64_t W = e->W < L ? e->W : L;
    /* the mask is off: the prefill is full causal attention for every policy */
    RefreshMask off = refresh_mask_off();
    decoder_check_inputs(c, &off, tokens, NULL, 1, L);
    LayerActs a;
    float *acts = xmalloc(sizeof(float) * (size_t)decoder_layer_acts_numel(c, L, 4));
    decoder_layer_acts_carve(&a, c, L, 4, acts);
    float *x[2] = {alloc_f(L * C), alloc_f(L * C)}, *xf = alloc_f(C), rstd;
    embedding_forward_cpu(x[0], tokens, m->w.embed, L, C);
    LayerPass pass = {.ops = &decoder_cpu_ops,
                      .cfg = c,
                      .mask = &off,
                      .rope_cos = e->rope_cos,
                      .rope_sin = e->rope_sin,
                      .B = 1,
                      .T = L};
    for (int64_t l = 0; l < c->num_hidden_layers; l++) {
        AttentionStats st = {e->colsum[l], e->last_probs[l], W};
        pass.stats = &st;
        decoder_layer_forward(&pass, &m->w.layers[l], &a, NULL, x[l & 1], x[(l + 1) & 1], 0);
        memcpy(e->kc[l], a.k, sizeof(float) * (size_t)(L * Hkv * D));
        memcpy(e->vc[l], a.v, sizeof(float) * (size_t)(L * Hkv * D));
        memcpy(e->last_out[l], a.att + (L - W) * Hq * D, sizeof(float) * (size_t)(W * Hq * D));
        memcpy(e->q_last[l], a.q + (L - 1) * Hq * D, sizeof(float) * (size_t)(Hq * D));
        engine_unrotate_query(e, e->q_last[l], L - 1);
    }
    /* only position L-1's logits are needed: the final norm of that row (rows
     * are independent) and the head over it */
    const float *last_row = x[c->num_hidden_layers & 1] + (L - 1) * C;
    rmsnorm_forward_cpu(xf, &rstd, last_row, m->w.final_norm, 1, C, (float)c->rms_norm_eps);
    decoder_cpu_ops.head_forward(e->prefill_logits, xf, m->w.lm_head, 1, C, c->vocab_size);
    free(acts), free(x[0]), free(x[1]), free(xf);
}

void engine_unrotate_query(const DecodeEngine *e, float *q, int64_t pos) {
    const DecoderConfig *c = &e->m->cfg;
    int64_t D = c->head_dim;
    /* the saved q is rotated; rotating back (the RoPE transpose) gives the
     * raw query (under yarn, times its attention factor squared: the tables
     * carry it, and the query's only reader, refreshkv's cosine, does not
     * see a scale) */
    rope_backward_cpu(q, e->rope_cos + pos * (D / 2), e->rope_sin + pos * (D / 2), 1, 1, c->num_attention_heads, D);
}

void engine_prefill(DecodeEngine *e, const int32_t *tokens, int64_t L) {
    KV_CHECK(!e->forked, "eval: a forked engine decodes its parent's prefill, it does not prefill");
    KV_CHECK(L >= 1 && L < e->cap, "eval: prefill length %lld must be in [1, %lld)", (long long)L, (long long)e->cap);
    e->L = L;
    e->backend->prefill(e, tokens, L);
}

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* Sorts k[0..n) unless it already ascends (full steps and most policies'
 * lists do: a linear check instead of n log n per head, layer and step). */
static void sort_keys(int32_t *k, int64_t n) {
    for (int64_t i = 1; i < n; i++)
        if (k[i] <= k[i - 1]) {
            qsort(k, (size_t)n, sizeof(int32_t), cmp_i32);
            return;
        }
}

int64_t engine_choose_keys(DecodeEngine *e, Policy *p, int64_t l, int64_t pos, const float *q_raw) {
    int64_t Hkv = e->m->cfg.num_key_value_heads, longest = 0;
    p->choose(p, l, pos, q_raw, e->keys, e->n);
    for (int64_t g = 0; g < Hkv; g++) {
        int32_t *k = e->keys[g];
        if (e->n[g] == POLICY_EVERY_KEY) {
            e->n[g] = pos + 1, e->off[g] = -1;
            if (p->update) /* it reads probabilities aligned with the list */
                for (int64_t i = 0; i <= pos; i++) k[i] = (int32_t)i;
            if (e->first_n && pos == e->L) record_first(e, l, g, NULL, e->n[g]);
        } else {
            KV_CHECK(e->n[g] >= 0 && e->n[g] <= pos, "policy %s chose %lld keys for position %lld", p->name,
                     (long long)e->n[g], (long long)pos);
            sort_keys(k, e->n[g]);
            for (int64_t i = 0; i < e->n[g]; i++)
                KV_CHECK(k[i] >= 0 && k[i] < pos && (i == 0 || k[i] > k[i - 1]),
                         "policy %s chose an invalid or repeated key %d at position %lld", p->name, k[i],
                         (long long)pos);
            k[e->n[g]++] = (int32_t)pos;
            if (e->first_n && pos == e->L) record_first(e, l, g, k, e->n[g]);
            /* ascending and distinct: ending at n-1 means every position 0..n-1 */
            e->off[g] = k[e->n[g] - 1] == e->n[g] - 1 ? -1 : g * e->cap;
        }
        e->kv_reads += e->n[g];
        longest = e->n[g] > longest ? e->n[g] : longest;
    }
    return longest;
}

/* ---- the CPU backend ---- */

int64_t step_rows_numel(const DecoderConfig *c, int64_t nb) {
    return decoder_layer_acts_numel(c, nb, 4) + nb * (3 * c->hidden_size + 1 + c->vocab_size) +
           4 * REDZONE_FLOATS; /* 4 takes below */
}

void step_rows_carve(StepRows *r, const DecoderConfig *c, int64_t nb, float *mem) {
    int64_t C = c->hidden_size;
    float *p = r->mem = mem;
    r->nb = nb;
    decoder_layer_acts_carve(&r->a, c, nb, 4, p), p += decoder_layer_acts_numel(c, nb, 4);
    r->x[0] = redzone_take(&p, nb * C);
    r->x[1] = redzone_take(&p, nb * C);
    r->xf = redzone_take(&p, nb * C);
    r->rstd = redzone_take(&p, nb);
    r->logits = p;
}

static void cpu_rows_create(StepRows *r, const DecoderConfig *c, int64_t nb) {
    step_rows_carve(r, c, nb, alloc_f(step_rows_numel(c, nb)));
    r->q_raw = alloc_f(nb * c->num_attention_heads * c->head_dim);
    r->logits_host = r->logits;
}

static void cpu_rows_free(StepRows *r) { free(r->mem), free(r->q_raw); }

static void cpu_embed(DecodeEngine *const *e, StepRows *r, const int32_t *const *tokens, int64_t pos) {
    int64_t C = e[0]->m->cfg.hidden_size;
    for (int64_t b = 0; b < r->nb; b++)
        memcpy(r->x[0] + b * C, e[0]->w->embed + (int64_t)tokens[b][pos] * C, sizeof(float) * (size_t)C);
}

static void cpu_attend(DecodeEngine *const *e, Policy *const *p, StepRows *r, int64_t l, int64_t pos) {
    const DecoderConfig *c = &e[0]->m->cfg;
    int64_t nb = r->nb, D = c->head_dim, Hq = c->num_attention_heads, Hkv = c->num_key_value_heads;
    int64_t QD = Hq * D, KD = Hkv * D;
    const LayerActs *a = &r->a;
    for (int64_t b = 0; b < nb; b++) memcpy(r->q_raw + b * QD, a->qkv + b * (QD + 2 * KD), sizeof(float) * (size_t)QD);
#pragma omp parallel for schedule(dynamic) if (nb > 1)
    for (int64_t b = 0; b < nb; b++) {
        DecodeEngine *d = e[b];
        /* a fork writes its own rows from L on; the prefill's rows stay its parent's */
        int64_t split = d->kt ? d->L : 0;
        float *kt = d->kt ? d->kt[l] : d->kc[l], *vt = d->kt ? d->vt[l] : d->vc[l];
        memcpy(kt + (pos - split) * KD, a->k + b * KD, sizeof(float) * (size_t)KD);
        memcpy(vt + (pos - split) * KD, a->v + b * KD, sizeof(float) * (size_t)KD);
        double t0 = now_seconds(); /* one row runs on one thread: its own time */
        int64_t stride = engine_choose_keys(d, p[b], l, pos, r->q_raw + b * QD);
        float *probs = p[b]->update ? d->probs : NULL;
        attention_decode_split_cpu(a->att + b * QD, probs, a->q + b * QD, d->kc[l], d->vc[l], kt, vt, split, d->key_buf,
                                   d->off, d->n, stride, Hq, Hkv, D);
        if (p[b]->update) p[b]->update(p[b], l, pos, d->keys, d->n, probs, stride);
        d->own_s += now_seconds() - t0;
    }
}

static void cpu_rope_tables(const DecodeEngine *e, const float **cos_t, const float **sin_t) {
    *cos_t = e->rope_cos, *sin_t = e->rope_sin;
}

static const float *cpu_logits(StepRows *r, const DecoderConfig *c) { return r->logits; }

static void cpu_prefill_cache(DecodeEngine *e, int64_t l, const float **kc, const float **vc) {
    *kc = e->kc[l], *vc = e->vc[l];
}

/* The decode step's ops: what the layer forward calls, attention aside (the
 * step's hook). row_matmul keeps each row's bits independent of the batch,
 * and each output is one dot product whatever the product's width, so the
 * fused [q | k | v] and [gate | up] rows are those of separate products. */
static const DecoderOps cpu_decode_ops = {
    .rmsnorm_forward = rmsnorm_forward_cpu,
    .matmul_forward = row_matmul_forward,
    .matmul_forward_act = row_matmul_forward,
    .bias_add = bias_add_cpu,
    .rope_split_forward = rope_split_forward_cpu,
    .swiglu_forward = swiglu_fused_forward_cpu,
    .residual_add = residual_add_cpu,
};

static const DecodeBackend cpu_backend = {.ops = &cpu_decode_ops,
                                          .rows_create = cpu_rows_create,
                                          .rows_free = cpu_rows_free,
                                          .embed = cpu_embed,
                                          .attend = cpu_attend,
                                          .rope_tables = cpu_rope_tables,
                                          .logits = cpu_logits,
                                          .prefill_cache = cpu_prefill_cache,
                                          .prefill = prefill_cpu,
                                          .release = NULL};

/* ---- the decode step, for either backend ---- */

/* What the step's attention hook (LayerPass.attend) needs: the backend's
 * attention of every document at layer l, position pos, and its time. */
typedef struct {
    const DecodeBackend *be;
    DecodeEngine *const *e;
    Policy *const *p;
    StepRows *r;
    int64_t l, pos;
    double attend_s;
} StepAttend;

static void step_attend(void *ctx, LayerActs *a) {
    StepAttend *s = ctx;
    double t0 = now_seconds();
    s->be->attend(s->e, s->p, s->r, s->l, s->pos);
    s->attend_s += now_seconds() - t0;
}

/* One decode step's layers for every document: the model's layer forward
 * (model/decoder_layer.h) over nb rows of T = 1, its projections each one
 * (nb, in) x (in, out) product, with the step's hook for attention and
 * policy per document. Returns the residual stream after the last layer. */
static const float *decode_layers(const DecodeBackend *be, DecodeEngine *const *e, Policy *const *p, StepRows *r,
                                  int64_t pos, double *attend_s) {
    const DecoderConfig *c = &e[0]->m->cfg;
    int64_t half = c->head_dim / 2;
    const float *cos_t, *sin_t;
    be->rope_tables(e[0], &cos_t, &sin_t);
    RefreshMask off = refresh_mask_off();
    StepAttend sa = {be, e, p, r, 0, pos, 0};
    /* every document is at the same position: one table row */
    LayerPass pass = {.ops = be->ops,
                      .cfg = c,
                      .mask = &off,
                      .rope_cos = cos_t + pos * half,
                      .rope_sin = sin_t + pos * half,
                      .B = r->nb,
                      .T = 1,
                      .attend = step_attend,
                      .attend_ctx = &sa};
    for (int64_t l = 0; l < c->num_hidden_layers; l++) {
        sa.l = l;
        decoder_layer_forward(&pass, &e[0]->w->layers[l], &r->a, NULL, r->x[l & 1], r->x[(l + 1) & 1], 0);
    }
    *attend_s += sa.attend_s;
    return r->x[c->num_hidden_layers & 1];
}

double engine_kv_bytes(const DecodeEngine *e) {
    return (double)e->kv_reads * 2.0 * (double)e->m->cfg.head_dim * sizeof(float);
}

double nll_of(const float *logits, int64_t V, int32_t target) {
    double mx = -INFINITY, s = 0;
    for (int64_t v = 0; v < V; v++) mx = logits[v] > mx ? logits[v] : mx;
    for (int64_t v = 0; v < V; v++) s += exp((double)logits[v] - mx);
    return mx + log(s) - (double)logits[target];
}

int64_t argmax_of(const float *logits, int64_t V) {
    int64_t best = 0;
    for (int64_t v = 1; v < V; v++)
        if (logits[v] > logits[best]) best = v;
    return best;
}

/* One scored token: its NLL and, when wanted, whether it was the argmax. */
static void score_token(const float *logits, int64_t V, int32_t target, double *nll, uint8_t *top1) {
    *nll = nll_of(logits, V, target);
    if (top1) *top1 = argmax_of(logits, V) == target;
}

static void policies_init(const DecodeBackend *be, DecodeEngine *const *e, Policy *const *p, int64_t nb) {
    int64_t nl = e[0]->m->cfg.num_hidden_layers;
#pragma omp parallel for schedule(dynamic) if (nb > 1)
    for (int64_t b = 0; b < nb; b++) {
        const Decoder *m = e[b]->m;
        p[b]->shape.W = e[b]->W < e[b]->L ? e[b]->W : e[b]->L;
        p[b]->shape.rope_cos = e[b]->rope_cos,
        p[b]->shape.rope_sin = e[b]->rope_sin; /* host tables on either backend */
        for (int64_t l = 0; l < nl; l++) {
            const float *kc = NULL, *vc = NULL;
            if (p[b]->reads_prefill_cache) be->prefill_cache(e[b], l, &kc, &vc);
            PrefillLayer pre = {e[b]->colsum[l], e[b]->last_probs[l], e[b]->last_out[l], m->w.layers[l].wo, kc, vc,
                                e[b]->q_last[l]};
            p[b]->init(p[b], l, &pre);
        }
    }
}

void engine_decode_batch_top1(DecodeEngine *const *e, Policy *const *p, const int32_t *const *tokens, int64_t nb,
                              int64_t S, double *nll, uint8_t *top1) {
    KV_CHECK(nb >= 1, "eval: a decode batch needs at least one document (got %lld)", (long long)nb);
    const Decoder *m = e[0]->m;
    const DecoderConfig *c = &m->cfg;
    const DecodeBackend *be = e[0]->backend;
    int64_t L = e[0]->L, C = c->hidden_size, V = c->vocab_size;
    for (int64_t b = 0; b < nb; b++) {
        KV_CHECK(e[b]->m == m && e[b]->L == L && e[b]->backend == be,
                 "eval: document %lld of a decode batch has "
                 "another model, backend or prefill length (%lld, expected %lld)",
                 (long long)b, (long long)e[b]->L, (long long)L);
        KV_CHECK(S >= 1 && L + S <= e[b]->cap, "eval: L + S = %lld exceeds the engine's %lld positions",
                 (long long)(L + S), (long long)e[b]->cap);
    }
    double t_call = now_seconds(), attend_s = 0, own_sum = 0;
    double *own0 = xmalloc(sizeof(double) * (size_t)nb);
    for (int64_t b = 0; b < nb; b++) own0[b] = e[b]->own_s;
    policies_init(be, e, p, nb);
    for (int64_t b = 0; b < nb; b++)
        score_token(e[b]->prefill_logits, V, tokens[b][L], nll + b * S, top1 ? top1 + b * S : NULL);
    StepRows r;
    be->rows_create(&r, c, nb);
    for (int64_t i = 1; i < S; i++) {
        int64_t pos = L + i - 1;
        be->embed(e, &r, tokens, pos);
        const float *x = decode_layers(be, e, p, &r, pos, &attend_s);
        be->ops->rmsnorm_forward(r.xf, r.rstd, x, e[0]->w->final_norm, nb, C, (float)c->rms_norm_eps);
        be->ops->matmul_forward(r.logits, r.xf, e[0]->w->lm_head, nb, C, V);
        const float *logits = be->logits(&r, c);
#pragma omp parallel for schedule(dynamic) if (nb > 1) /* rows to threads as they come free */
        for (int64_t b = 0; b < nb; b++)
            score_token(logits + b * V, V, tokens[b][pos + 1], nll + b * S + i, top1 ? top1 + b * S + i : NULL);
        if (e[0]->on_step) e[0]->on_step(e[0]->step_ctx, i, S - 1);
    }
    be->rows_free(&r);
    /* the wall time, apportioned to the rows (engine.h) */
    double wall = now_seconds() - t_call, shared = wall > attend_s ? wall - attend_s : 0;
    for (int64_t b = 0; b < nb; b++) own_sum += e[b]->own_s - own0[b];
    for (int64_t b = 0; b < nb; b++)
        e[b]->decode_s += shared / (double)nb + (own_sum > 0 ? (wall - shared) * (e[b]->own_s - own0[b]) / own_sum
                                                             : (wall - shared) / (double)nb);
    free(own0);
}

void engine_decode_batch(DecodeEngine *const *e, Policy *const *p, const int32_t *const *tokens, int64_t nb, int64_t S,
                         double *nll) {
    engine_decode_batch_top1(e, p, tokens, nb, S, nll, NULL);
}

void engine_decode(DecodeEngine *e, Policy *p, const int32_t *tokens, int64_t S, double *nll) {
    engine_decode_batch(&e, &p, &tokens, 1, S, nll);
}
