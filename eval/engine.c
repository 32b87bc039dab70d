#include "engine.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../common/util.h"
#include "../kernels/attention_decode.h"
#include "../kernels/rmsnorm.h"
#include "../kernels/swiglu.h"
#include "row_matmul.h"

static float *alloc_f(int64_t n) { return xmalloc(sizeof(float) * (size_t)(n > 0 ? n : 1)); }

void engine_create(DecodeEngine *e, Llama *m, int64_t cap, int64_t W) {
    const LlamaConfig *c = &m->cfg;
    memset(e, 0, sizeof *e);
    e->m = m, e->cap = cap, e->W = W;
    int64_t nl = c->num_hidden_layers, Hq = c->num_attention_heads, Hkv = c->num_key_value_heads, D = c->head_dim;
    e->kc = xcalloc((size_t)nl, sizeof(float *)), e->vc = xcalloc((size_t)nl, sizeof(float *));
    e->colsum = xcalloc((size_t)nl, sizeof(float *)), e->last_probs = xcalloc((size_t)nl, sizeof(float *));
    e->last_out = xcalloc((size_t)nl, sizeof(float *));
    e->q_last = xcalloc((size_t)nl, sizeof(float *));
    for (int64_t l = 0; l < nl; l++) {
        e->kc[l] = alloc_f(cap * Hkv * D), e->vc[l] = alloc_f(cap * Hkv * D);
        e->colsum[l] = alloc_f(Hq * cap), e->last_probs[l] = alloc_f(Hq * W * cap), e->last_out[l] = alloc_f(W * Hq * D);
        e->q_last[l] = alloc_f(Hq * D);
    }
    RopeParams rp = {c->rope_theta, c->rope_llama3, c->rope_factor, c->rope_low_freq_factor, c->rope_high_freq_factor,
                     c->rope_original_max_pos};
    e->rope_cos = alloc_f(cap * D / 2), e->rope_sin = alloc_f(cap * D / 2);
    rope_table(e->rope_cos, e->rope_sin, cap, D, &rp);
    e->probs = alloc_f(Hq * cap);
    e->prefill_logits = alloc_f(c->vocab_size);
    e->keys = xcalloc((size_t)Hkv, sizeof(int32_t *));
    for (int64_t g = 0; g < Hkv; g++) e->keys[g] = xmalloc(sizeof(int32_t) * (size_t)cap);
    e->n = xcalloc((size_t)Hkv, sizeof(int64_t));
}

void engine_free(DecodeEngine *e) {
    int64_t nl = e->m->cfg.num_hidden_layers;
    for (int64_t l = 0; l < nl; l++) {
        free(e->kc[l]), free(e->vc[l]), free(e->colsum[l]), free(e->last_probs[l]), free(e->last_out[l]);
        free(e->q_last[l]);
    }
    for (int64_t g = 0; g < e->m->cfg.num_key_value_heads; g++) free(e->keys[g]);
    free(e->q_last), free(e->kc), free(e->vc), free(e->colsum), free(e->last_probs), free(e->last_out);
    free(e->keys), free(e->n), free(e->rope_cos), free(e->rope_sin), free(e->probs), free(e->prefill_logits);
    memset(e, 0, sizeof *e);
}

void engine_prefill(DecodeEngine *e, const int32_t *tokens, int64_t L) {
    Llama *m = e->m;
    const LlamaConfig *c = &m->cfg;
    KV_CHECK(L >= 1 && L < e->cap, "eval: prefill length %lld must be in [1, %lld)", (long long)L, (long long)e->cap);
    int64_t Hq = c->num_attention_heads, Hkv = c->num_key_value_heads, D = c->head_dim;
    RefreshMask keep = m->mask;
    m->mask.enabled = 0; /* the prefill is full causal attention for every policy */
    llama_forward(m, tokens, NULL, 1, L);
    m->mask = keep;
    e->L = L;
    int64_t W = e->W < L ? e->W : L;
    for (int64_t l = 0; l < c->num_hidden_layers; l++) {
        const LayerActs *a = &m->acts[l];
        memcpy(e->kc[l], a->k, sizeof(float) * (size_t)(L * Hkv * D));
        memcpy(e->vc[l], a->v, sizeof(float) * (size_t)(L * Hkv * D));
        attention_prefill_stats_cpu(e->colsum[l], e->last_probs[l], a->q, a->k, L, Hq, Hkv, D, W);
        memcpy(e->last_out[l], a->att + (L - W) * Hq * D, sizeof(float) * (size_t)(W * Hq * D));
        /* the saved q is rotated; rotating back (the RoPE transpose) gives the raw query */
        memcpy(e->q_last[l], a->q + (L - 1) * Hq * D, sizeof(float) * (size_t)(Hq * D));
        rope_backward_cpu(e->q_last[l], e->rope_cos + (L - 1) * (D / 2), e->rope_sin + (L - 1) * (D / 2), 1, 1, Hq, D);
    }
    llama_logits(m, e->prefill_logits, L - 1, 1);
}

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* Attention of one document's current token at layer l over its policy's
 * keys. q_raw: pre-RoPE query (what policies compare); q: rotated; att: output. */
static void attend(DecodeEngine *e, Policy *p, int64_t l, int64_t pos, const float *q_raw, const float *q, float *att) {
    const LlamaConfig *c = &e->m->cfg;
    int64_t Hq = c->num_attention_heads, Hkv = c->num_key_value_heads, D = c->head_dim;
    p->choose(p, l, pos, q_raw, e->keys, e->n);
    for (int64_t g = 0; g < Hkv; g++) {
        KV_CHECK(e->n[g] >= 0 && e->n[g] <= pos, "policy %s chose %lld keys for position %lld", p->name,
                 (long long)e->n[g], (long long)pos);
        qsort(e->keys[g], (size_t)e->n[g], sizeof(int32_t), cmp_i32);
        for (int64_t i = 0; i < e->n[g]; i++)
            KV_CHECK(e->keys[g][i] >= 0 && e->keys[g][i] < pos && (i == 0 || e->keys[g][i] > e->keys[g][i - 1]),
                     "policy %s chose an invalid or repeated key %d at position %lld", p->name, e->keys[g][i],
                     (long long)pos);
        e->keys[g][e->n[g]++] = (int32_t)pos;
        e->kv_reads += e->n[g];
    }
    attention_decode_cpu(att, e->probs, q, e->kc[l], e->vc[l], (const int32_t *const *)e->keys, e->n, pos + 1, Hq,
                         Hkv, D);
    p->update(p, l, pos, e->keys, e->n, e->probs, pos + 1);
}

/* Activations of the nb documents of one decode step, one row each. */
typedef struct {
    int64_t nb;
    float *x, *xn, *rstd, *q, *q_raw, *k, *v, *att, *o, *g, *u, *h, *logits;
    float *mem;
} StepRows;

static void step_rows_create(StepRows *r, const LlamaConfig *c, int64_t nb) {
    int64_t C = c->hidden_size, F = c->intermediate_size, V = c->vocab_size;
    int64_t QD = c->num_attention_heads * c->head_dim, KD = c->num_key_value_heads * c->head_dim;
    r->nb = nb;
    float *p = r->mem = alloc_f(nb * (4 * C + 1 + 3 * QD + 2 * KD + 3 * F + V));
    r->x = p, p += nb * C;
    r->xn = p, p += nb * C;
    r->o = p, p += 2 * nb * C;
    r->rstd = p, p += nb;
    r->q = p, p += nb * QD;
    r->q_raw = p, p += nb * QD;
    r->att = p, p += nb * QD;
    r->k = p, p += nb * KD;
    r->v = p, p += nb * KD;
    r->g = p, p += nb * F;
    r->u = p, p += nb * F;
    r->h = p, p += nb * F;
    r->logits = p;
}

static void residual_add(float *x, const float *o, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] += o[i];
}

/* One layer of one decode step for every document: the projections as one
 * (nb, in) x (in, out) product, attention and policy per document in parallel. */
static void decode_layer(DecodeEngine *const *e, Policy *const *p, StepRows *r, int64_t l, int64_t pos) {
    const Llama *m = e[0]->m;
    const LlamaConfig *c = &m->cfg;
    const LayerTensors *w = &m->w.layers[l];
    int64_t nb = r->nb, C = c->hidden_size, F = c->intermediate_size, D = c->head_dim;
    int64_t QD = c->num_attention_heads * D, KD = c->num_key_value_heads * D, half = D / 2;
    float eps = (float)c->rms_norm_eps;
    rmsnorm_forward_cpu(r->xn, r->rstd, r->x, w->attn_norm, nb, C, eps);
    row_matmul_forward(r->q, r->xn, w->wq, nb, C, QD);
    row_matmul_forward(r->k, r->xn, w->wk, nb, C, KD);
    row_matmul_forward(r->v, r->xn, w->wv, nb, C, KD);
    memcpy(r->q_raw, r->q, sizeof(float) * (size_t)(nb * QD));
    /* every document is at the same position: one table row, T = 1 */
    rope_forward_cpu(r->q, e[0]->rope_cos + pos * half, e[0]->rope_sin + pos * half, nb, 1, c->num_attention_heads, D);
    rope_forward_cpu(r->k, e[0]->rope_cos + pos * half, e[0]->rope_sin + pos * half, nb, 1, c->num_key_value_heads, D);
#pragma omp parallel for schedule(dynamic) if (nb > 1)
    for (int64_t b = 0; b < nb; b++) {
        memcpy(e[b]->kc[l] + pos * KD, r->k + b * KD, sizeof(float) * (size_t)KD);
        memcpy(e[b]->vc[l] + pos * KD, r->v + b * KD, sizeof(float) * (size_t)KD);
        attend(e[b], p[b], l, pos, r->q_raw + b * QD, r->q + b * QD, r->att + b * QD);
    }
    row_matmul_forward(r->o, r->att, w->wo, nb, QD, C);
    residual_add(r->x, r->o, nb * C);
    rmsnorm_forward_cpu(r->xn, r->rstd, r->x, w->mlp_norm, nb, C, eps);
    row_matmul_forward(r->g, r->xn, w->wgate, nb, C, F);
    row_matmul_forward(r->u, r->xn, w->wup, nb, C, F);
    swiglu_forward_cpu(r->h, r->g, r->u, nb * F);
    row_matmul_forward(r->o, r->h, w->wdown, nb, F, C);
    residual_add(r->x, r->o, nb * C);
}

double nll_of(const float *logits, int64_t V, int32_t target) {
    double mx = -INFINITY, s = 0;
    for (int64_t v = 0; v < V; v++) mx = logits[v] > mx ? logits[v] : mx;
    for (int64_t v = 0; v < V; v++) s += exp((double)logits[v] - mx);
    return mx + log(s) - (double)logits[target];
}

static void policies_init(DecodeEngine *const *e, Policy *const *p, int64_t nb) {
    int64_t nl = e[0]->m->cfg.num_hidden_layers;
#pragma omp parallel for schedule(dynamic) if (nb > 1)
    for (int64_t b = 0; b < nb; b++) {
        const Llama *m = e[b]->m;
        p[b]->shape.W = e[b]->W < e[b]->L ? e[b]->W : e[b]->L;
        for (int64_t l = 0; l < nl; l++) {
            PrefillLayer pre = {e[b]->colsum[l],      e[b]->last_probs[l], e[b]->last_out[l], m->w.layers[l].wo,
                                e[b]->kc[l],          e[b]->vc[l],         e[b]->q_last[l]};
            p[b]->init(p[b], l, &pre);
        }
    }
}

void engine_decode_batch(DecodeEngine *const *e, Policy *const *p, const int32_t *const *tokens, int64_t nb,
                         int64_t S, double *nll) {
    KV_CHECK(nb >= 1, "eval: a decode batch needs at least one document (got %lld)", (long long)nb);
    const Llama *m = e[0]->m;
    const LlamaConfig *c = &m->cfg;
    int64_t L = e[0]->L, C = c->hidden_size, V = c->vocab_size;
    for (int64_t b = 0; b < nb; b++) {
        KV_CHECK(e[b]->m == m && e[b]->L == L, "eval: document %lld of a decode batch has another model or prefill "
                 "length (%lld, expected %lld)", (long long)b, (long long)e[b]->L, (long long)L);
        KV_CHECK(S >= 1 && L + S <= e[b]->cap, "eval: L + S = %lld exceeds the engine's %lld positions",
                 (long long)(L + S), (long long)e[b]->cap);
    }
    policies_init(e, p, nb);
    for (int64_t b = 0; b < nb; b++) nll[b * S] = nll_of(e[b]->prefill_logits, V, tokens[b][L]);
    StepRows r;
    step_rows_create(&r, c, nb);
    for (int64_t i = 1; i < S; i++) {
        int64_t pos = L + i - 1;
        for (int64_t b = 0; b < nb; b++)
            memcpy(r.x + b * C, m->w.embed + (int64_t)tokens[b][pos] * C, sizeof(float) * (size_t)C);
        for (int64_t l = 0; l < c->num_hidden_layers; l++) decode_layer(e, p, &r, l, pos);
        rmsnorm_forward_cpu(r.xn, r.rstd, r.x, m->w.final_norm, nb, C, (float)c->rms_norm_eps);
        row_matmul_forward(r.logits, r.xn, m->w.lm_head, nb, C, V);
#pragma omp parallel for schedule(static) if (nb > 1)
        for (int64_t b = 0; b < nb; b++) nll[b * S + i] = nll_of(r.logits + b * V, V, tokens[b][pos + 1]);
    }
    free(r.mem);
}

void engine_decode(DecodeEngine *e, Policy *p, const int32_t *tokens, int64_t S, double *nll) {
    engine_decode_batch(&e, &p, &tokens, 1, S, nll);
}
