#include "engine.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../common/util.h"
#include "../kernels/attention_decode.h"
#include "../kernels/matmul.h"
#include "../kernels/rmsnorm.h"
#include "../kernels/swiglu.h"

static float *alloc_f(int64_t n) { return xmalloc(sizeof(float) * (size_t)(n > 0 ? n : 1)); }

void engine_create(DecodeEngine *e, Llama *m, int64_t cap, int64_t W) {
    const LlamaConfig *c = &m->cfg;
    memset(e, 0, sizeof *e);
    e->m = m, e->cap = cap, e->W = W;
    int64_t nl = c->num_hidden_layers, Hq = c->num_attention_heads, Hkv = c->num_key_value_heads, D = c->head_dim;
    int64_t C = c->hidden_size, F = c->intermediate_size, V = c->vocab_size;
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
    e->buf = alloc_f(4 * C + 3 * Hq * D + 2 * Hkv * D + 3 * F + 2 * V + Hq * cap);
    float *p = e->buf;
    e->x = p, p += C;
    e->xn = p, p += C;
    e->o = p, p += 2 * C;
    e->q = p, p += Hq * D;
    e->q_raw = p, p += Hq * D;
    e->att = p, p += Hq * D;
    e->k = p, p += Hkv * D;
    e->v = p, p += Hkv * D;
    e->g = p, p += F;
    e->u = p, p += F;
    e->h = p, p += F;
    e->logits = p, p += V;
    e->prefill_logits = p, p += V;
    e->probs = p;
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
    free(e->keys), free(e->n), free(e->rope_cos), free(e->rope_sin), free(e->buf);
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

/* Attention of the current token at layer l over the policy's keys. */
static void attend(DecodeEngine *e, Policy *p, int64_t l, int64_t pos) {
    const LlamaConfig *c = &e->m->cfg;
    int64_t Hq = c->num_attention_heads, Hkv = c->num_key_value_heads, D = c->head_dim;
    p->choose(p, l, pos, e->q_raw, e->keys, e->n);
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
    attention_decode_cpu(e->att, e->probs, e->q, e->kc[l], e->vc[l], (const int32_t *const *)e->keys, e->n, pos + 1,
                         Hq, Hkv, D);
    p->update(p, l, pos, e->keys, e->n, e->probs, pos + 1);
}

static void decode_layer(DecodeEngine *e, Policy *p, int64_t l, int64_t pos) {
    const LlamaConfig *c = &e->m->cfg;
    const LayerTensors *w = &e->m->w.layers[l];
    int64_t C = c->hidden_size, F = c->intermediate_size, D = c->head_dim;
    int64_t Hq = c->num_attention_heads, Hkv = c->num_key_value_heads, half = D / 2;
    float eps = (float)c->rms_norm_eps;
    rmsnorm_forward_cpu(e->xn, &e->rstd, e->x, w->attn_norm, 1, C, eps);
    matmul_forward_cpu(e->q, e->xn, w->wq, 1, C, Hq * D);
    matmul_forward_cpu(e->k, e->xn, w->wk, 1, C, Hkv * D);
    matmul_forward_cpu(e->v, e->xn, w->wv, 1, C, Hkv * D);
    memcpy(e->q_raw, e->q, sizeof(float) * (size_t)(Hq * D));
    rope_forward_cpu(e->q, e->rope_cos + pos * half, e->rope_sin + pos * half, 1, 1, Hq, D);
    rope_forward_cpu(e->k, e->rope_cos + pos * half, e->rope_sin + pos * half, 1, 1, Hkv, D);
    memcpy(e->kc[l] + pos * Hkv * D, e->k, sizeof(float) * (size_t)(Hkv * D));
    memcpy(e->vc[l] + pos * Hkv * D, e->v, sizeof(float) * (size_t)(Hkv * D));
    attend(e, p, l, pos);
    matmul_forward_cpu(e->o, e->att, w->wo, 1, Hq * D, C);
    for (int64_t i = 0; i < C; i++) e->x[i] += e->o[i];
    rmsnorm_forward_cpu(e->xn, &e->rstd, e->x, w->mlp_norm, 1, C, eps);
    matmul_forward_cpu(e->g, e->xn, w->wgate, 1, C, F);
    matmul_forward_cpu(e->u, e->xn, w->wup, 1, C, F);
    swiglu_forward_cpu(e->h, e->g, e->u, F);
    matmul_forward_cpu(e->o, e->h, w->wdown, 1, F, C);
    for (int64_t i = 0; i < C; i++) e->x[i] += e->o[i];
}

double nll_of(const float *logits, int64_t V, int32_t target) {
    double mx = -INFINITY, s = 0;
    for (int64_t v = 0; v < V; v++) mx = logits[v] > mx ? logits[v] : mx;
    for (int64_t v = 0; v < V; v++) s += exp((double)logits[v] - mx);
    return mx + log(s) - (double)logits[target];
}

void engine_decode(DecodeEngine *e, Policy *p, const int32_t *tokens, int64_t S, double *nll) {
    Llama *m = e->m;
    const LlamaConfig *c = &m->cfg;
    int64_t L = e->L, C = c->hidden_size, V = c->vocab_size;
    KV_CHECK(S >= 1 && L + S <= e->cap, "eval: L + S = %lld exceeds the engine's %lld positions", (long long)(L + S),
             (long long)e->cap);
    int64_t W = e->W < L ? e->W : L;
    for (int64_t l = 0; l < c->num_hidden_layers; l++) {
        PrefillLayer pre = {e->colsum[l], e->last_probs[l], e->last_out[l], m->w.layers[l].wo,
                            e->kc[l],     e->vc[l],         e->q_last[l]};
        p->shape.W = W;
        p->init(p, l, &pre);
    }
    nll[0] = nll_of(e->prefill_logits, V, tokens[L]);
    for (int64_t i = 1; i < S; i++) {
        int64_t pos = L + i - 1;
        memcpy(e->x, m->w.embed + (int64_t)tokens[pos] * C, sizeof(float) * (size_t)C);
        for (int64_t l = 0; l < c->num_hidden_layers; l++) decode_layer(e, p, l, pos);
        rmsnorm_forward_cpu(e->xn, &e->rstd, e->x, m->w.final_norm, 1, C, (float)c->rms_norm_eps);
        matmul_forward_cpu(e->logits, e->xn, m->w.lm_head, 1, C, V);
        nll[i] = nll_of(e->logits, V, tokens[pos + 1]);
    }
}
