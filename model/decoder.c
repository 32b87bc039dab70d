#include "decoder.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../common/redzone.h"
#include "../common/rng.h"
#include "../common/util.h"
#include "../kernels/bias.h"
#include "../kernels/crossentropy.h"
#include "../kernels/embedding.h"
#include "../kernels/matmul.h"
#include "../kernels/residual.h"
#include "../kernels/rmsnorm.h"
#include "../kernels/swiglu.h"
#include "decoder_layer.h"
#include "decoder_pass.h"

void decoder_create(Decoder *m, const DecoderConfig *c) {
    memset(m, 0, sizeof *m);
    config_validate(c, c->name);
    m->cfg = *c;
    param_layout_build(&m->layout, c);
    m->params = xcalloc((size_t)m->layout.total, sizeof(float));
    m->grads = xcalloc((size_t)m->layout.total, sizeof(float));
    decoder_bind_tensors(&m->w, c, &m->layout, m->params);
    decoder_bind_tensors(&m->dw, c, &m->layout, m->grads);
    decoder_pass_state_init(&m->state, c);
    m->mask = refresh_mask_off();
    m->pass = (DecoderPassModel){
        .ops = &decoder_cpu_ops, .cfg = &m->cfg, .mask = &m->mask, .w = &m->w, .dw = &m->dw, .act_size = 4};
}

static void free_acts(Decoder *m) {
    DecoderPassState *s = &m->state;
    for (int64_t l = 0; l < m->cfg.num_hidden_layers; l++) {
        free(s->acts[l].xn1);
        free(s->sel[l]);
        memset(&s->acts[l], 0, sizeof s->acts[l]);
        s->sel[l] = NULL;
    }
    if (s->resid) free(s->resid[0]);
    free(s->tokens);
    free(s->xf);
    free(s->scratch);
    s->tokens = NULL, s->xf = NULL, s->scratch = NULL, s->cap_BT = 0, m->sel_cap = 0;
}

void decoder_free(Decoder *m) {
    free_acts(m);
    decoder_pass_state_free(&m->state);
    free(m->state.rope_cos);
    free(m->params);
    free(m->grads);
    free(m->w.layers);
    free(m->dw.layers);
    param_layout_free(&m->layout);
    memset(m, 0, sizeof *m);
}

void decoder_init_random(Decoder *m, uint64_t seed) {
    Rng r;
    rng_seed(&r, seed);
    float std = (float)m->cfg.initializer_range;
    for (int i = 0; i < m->layout.n; i++) {
        const ParamTensor *t = &m->layout.t[i];
        float *p = m->params + t->offset;
        int is_norm = t->kind == PT_ATTN_NORM || t->kind == PT_MLP_NORM || t->kind == PT_FINAL_NORM;
        /* biases start at zero, as transformers initialises nn.Linear's */
        int is_bias = t->kind == PT_BQ || t->kind == PT_BK || t->kind == PT_BV;
        for (int64_t j = 0; j < t->numel; j++) p[j] = is_norm ? 1.0f : is_bias ? 0.0f : std * rng_normal(&r);
    }
}

void decoder_set_mask(Decoder *m, const RefreshMask *mask) { decoder_pass_set_mask(&m->mask, mask); }

/* Grows the host buffers to B sequences of T tokens. */
static void ensure_acts(Decoder *m, int64_t B, int64_t T) {
    const DecoderConfig *c = &m->cfg;
    DecoderPassState *s = &m->state;
    int64_t BT = B * T;
    s->B = B, s->T = T;
    if (BT <= s->cap_BT) return;
    free_acts(m);
    s->cap_BT = BT;
    int64_t C = c->hidden_size, set = decoder_layer_acts_numel(c, BT, 4);
    for (int64_t l = 0; l < c->num_hidden_layers; l++)
        decoder_layer_acts_carve(&s->acts[l], c, BT, 4, xmalloc(sizeof(float) * (size_t)set));
    float *res = xmalloc(sizeof(float) * (size_t)((c->num_hidden_layers + 1) * BT * C));
    for (int64_t l = 0; l <= c->num_hidden_layers; l++) s->resid[l] = res + l * BT * C;
    s->tokens = xmalloc(sizeof(int32_t) * (size_t)(3 * BT));
    s->targets = s->tokens + BT, s->h_targets = s->tokens + 2 * BT;
    float *cur = xmalloc(sizeof(float) * (size_t)(BT * (C + 4) + 5 * REDZONE_FLOATS)); /* 5 takes */
    s->xf = redzone_take(&cur, BT * C), s->rstdf = redzone_take(&cur, BT), s->ce_lse = redzone_take(&cur, BT);
    s->losses = redzone_take(&cur, BT), s->h_losses = redzone_take(&cur, BT);
    s->scratch_numel = decoder_scratch_numel(c, BT, 4);
    s->scratch = xmalloc(sizeof(float) * (size_t)s->scratch_numel);
}

/* Each layer's selection: B * Hkv * refresh_sel_len entries, sized by the
 * mask rather than by B * T, since the per-row records of mask_evict and
 * mask_restride can outgrow it. */
static void ensure_sel(Decoder *m, int64_t B, int64_t T) {
    int64_t per = refresh_active(&m->mask, T) ? refresh_sel_len(&m->mask, T) : 1;
    int64_t need = B * m->cfg.num_key_value_heads * per;
    if (need <= m->sel_cap) return;
    for (int64_t l = 0; l < m->cfg.num_hidden_layers; l++) {
        free(m->state.sel[l]);
        m->state.sel[l] = xmalloc(sizeof(int32_t) * (size_t)need);
    }
    m->sel_cap = need;
}

/* The CPU's engine memory is host memory. */
static void *host_alloc(size_t bytes) { return xmalloc(bytes); }

static void host_copy(void *dst, const void *src, size_t bytes) { memcpy(dst, src, bytes); }

static void host_zero(float *x, int64_t n) { memset(x, 0, sizeof(float) * (size_t)n); }

/* The memory operations of both CPU tables. */
#define HOST_MEMORY_OPS                                                                                                \
    .zero = host_zero, .alloc = host_alloc, .release = free, .copy_to_engine = host_copy, .copy_to_host = host_copy

const DecoderOps decoder_cpu_ops = {
    DECODER_LAYER_KERNEL_OPS(cpu),
    .attention_forward_stats = attention_forward_stats_cpu,
    DECODER_PASS_KERNEL_OPS(cpu),
    HOST_MEMORY_OPS,
};

/* The bf16 engine's oracle. Its activations (the ACT buffers) are bf16:
 * here they stay floats, rounded to bf16 values wherever the engine stores
 * one, so every op reads exactly the values the engine's op reads. Matmuls
 * round their weight (and an fp32 operand) the same way; the sums stay fp32.
 * What remains between the two is summation order, and the tensor-core
 * attention's rounding of P and dS (tests/gpu/test_model_cuda.c). */
static void round_bf16(float *x, int64_t n) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) x[i] = float_from_bf16_bits(bf16_bits_from_float(x[i]));
}

static void rmsnorm_forward_bf16r(float *out, float *rstd, const float *inp, const float *weight, int64_t N, int64_t C,
                                  float eps) {
    rmsnorm_forward_cpu(out, rstd, inp, weight, N, C, eps);
    round_bf16(out, N * C);
}

static void matmul_forward_act_bf16r(float *out, const float *inp, const float *weight, int64_t N, int64_t IC,
                                     int64_t OC) {
    matmul_forward_bf16r_cpu(out, inp, weight, N, IC, OC);
    round_bf16(out, N * OC);
}

static void matmul_backward_act_bf16r(float *dinp, float *dweight, const float *dout, const float *inp,
                                      const float *weight, int64_t N, int64_t IC, int64_t OC) {
    matmul_backward_bf16r_cpu(dinp, dweight, dout, inp, weight, N, IC, OC);
    if (dinp) round_bf16(dinp, N * IC);
}

static void rope_split_forward_bf16r(float *q, float *k, float *v, const float *qkv, const float *cos_t,
                                     const float *sin_t, int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t D) {
    rope_split_forward_cpu(q, k, v, qkv, cos_t, sin_t, B, T, Hq, Hkv, D);
    round_bf16(q, B * T * Hq * D);
    round_bf16(k, B * T * Hkv * D); /* v is a copy of bf16 values */
}

static void rope_join_backward_bf16r(float *dqkv, const float *dq, const float *dk, const float *dv, const float *cos_t,
                                     const float *sin_t, int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t D) {
    rope_join_backward_cpu(dqkv, dq, dk, dv, cos_t, sin_t, B, T, Hq, Hkv, D);
    round_bf16(dqkv, B * T * (Hq + 2 * Hkv) * D);
}

static void attention_forward_bf16r(float *out, float *lse, const float *q, const float *k, const float *v,
                                    const int32_t *sel, int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t D,
                                    const RefreshMask *m) {
    attention_forward_cpu(out, lse, q, k, v, sel, B, T, Hq, Hkv, D, m);
    round_bf16(out, B * T * Hq * D);
}

static void bias_add_bf16r(float *out, const float *bias, int64_t N, int64_t OC) {
    bias_add_cpu(out, bias, N, OC);
    round_bf16(out, N * OC);
}

static void swiglu_forward_bf16r(float *h, const float *gu, int64_t N, int64_t F) {
    swiglu_fused_forward_cpu(h, gu, N, F);
    round_bf16(h, N * F);
}

static void swiglu_backward_bf16r(float *dgu, const float *dh, const float *gu, int64_t N, int64_t F) {
    swiglu_fused_backward_cpu(dgu, dh, gu, N, F);
    round_bf16(dgu, N * 2 * F);
}

static const DecoderOps cpu_bf16r_ops = {
    .rmsnorm_forward = rmsnorm_forward_bf16r,
    .rmsnorm_backward = rmsnorm_backward_cpu,
    .matmul_forward = matmul_forward_bf16r_cpu,
    .matmul_forward_act = matmul_forward_act_bf16r,
    .matmul_backward = matmul_backward_bf16r_cpu,
    .matmul_backward_act = matmul_backward_act_bf16r,
    .head_forward = matmul_forward_bf16r_cpu,
    .head_backward = matmul_backward_bf16r_cpu,
    .bias_add = bias_add_bf16r,
    .bias_backward = bias_backward_cpu,
    .rope_split_forward = rope_split_forward_bf16r,
    .rope_join_backward = rope_join_backward_bf16r,
    .attention_select = attention_refresh_select_cpu,
    .attention_forward = attention_forward_bf16r,
    .attention_backward = attention_backward_cpu,
    .swiglu_forward = swiglu_forward_bf16r,
    .swiglu_backward = swiglu_backward_bf16r,
    .residual_add = residual_add_cpu,
    DECODER_PASS_KERNEL_OPS(cpu),
    HOST_MEMORY_OPS,
};

void decoder_set_bf16_oracle(Decoder *m, int on) { m->pass.ops = on ? &cpu_bf16r_ops : &decoder_cpu_ops; }

static const DecoderPassModel *pass_of(const Decoder *m) { return decoder_pass_checked(&m->pass, &m->cfg, "llama"); }

static float forward(Decoder *m, const int32_t *tokens, const int32_t *targets, int64_t B, int64_t T,
                     DecoderForwardMode mode) {
    const DecoderPassModel *pm = pass_of(m);
    decoder_check_inputs(&m->cfg, &m->mask, tokens, targets, B, T);
    ensure_acts(m, B, T);
    ensure_sel(m, B, T);
    (void)decoder_pass_ensure_rope(pm->ops, &m->cfg, &m->state, T);
    return decoder_pass_forward(pm, &m->state, tokens, targets, mode);
}

float decoder_forward(Decoder *m, const int32_t *tokens, const int32_t *targets, int64_t B, int64_t T) {
    return forward(m, tokens, targets, B, T, DECODER_FORWARD_LOSS);
}

float decoder_forward_train(Decoder *m, const int32_t *tokens, const int32_t *targets, int64_t B, int64_t T) {
    return forward(m, tokens, targets, B, T, DECODER_FORWARD_TRAIN);
}

void decoder_logits(Decoder *m, float *out, int64_t row0, int64_t rows) {
    decoder_pass_check_rows(&m->state, row0, rows, "decoder_logits");
    decoder_pass_logits_rows(pass_of(m), &m->state, out, row0, rows);
}

void decoder_zero_grad(Decoder *m) { memset(m->grads, 0, sizeof(float) * (size_t)m->layout.total); }

void decoder_backward(Decoder *m) { decoder_pass_backward(pass_of(m), &m->state); }

FlopSplit decoder_flops_split(const Decoder *m, int64_t T) {
    const DecoderConfig *c = &m->cfg;
    /* matmul parameters: everything but the embedding lookup (which the tied
     * lm_head does use as a matmul) */
    double n = (double)m->layout.total - (c->tie_word_embeddings ? 0.0 : (double)(c->vocab_size * c->hidden_size));
    double pairs = 0.0; /* (query, key) pairs actually visited */
    int active = refresh_active(&m->mask, T);
    for (int64_t p = 0; p < T; p++) pairs += active ? (double)refresh_row_count(&m->mask, p) : (double)(p + 1);
    FlopSplit f;
    f.matmul = 6.0 * n;
    f.attention =
        T > 0 ? 12.0 * (double)c->num_hidden_layers * (double)(c->num_attention_heads * c->head_dim) * pairs / (double)T
              : 0.0;
    return f;
}

double decoder_flops_per_token(const Decoder *m, int64_t T) {
    FlopSplit f = decoder_flops_split(m, T);
    return f.matmul + f.attention;
}
