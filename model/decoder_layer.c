#include "decoder_layer.h"

#include <stddef.h>

#include "../common/util.h"

/* out = inp W^T + add: in the product's epilogue where the engine has it
 * (one rounding of the fp32 sum either way), else the product, then the add. */
static void matmul_add(const DecoderOps *o, float *out, const float *add, const float *inp, const float *weight,
                       int64_t N, int64_t IC, int64_t OC) {
    if (o->matmul_forward_add) {
        o->matmul_forward_add(out, add, inp, weight, N, IC, OC);
        return;
    }
    o->matmul_forward(out, inp, weight, N, IC, OC);
    o->residual_add(out, add, N * OC);
}

/* a's q, k, v -> a->att: the pass's hook, or the model's attention (the
 * mask's selection first when select says so; the statistics-writing
 * kernel when the pass asks for them). */
static void attention(const LayerPass *p, LayerActs *a, int32_t *sel, int select) {
    if (p->attend) {
        p->attend(p->attend_ctx, a);
        return;
    }
    const DecoderOps *o = p->ops;
    const DecoderConfig *c = p->cfg;
    int64_t B = p->B, T = p->T, D = c->head_dim, Hq = c->num_attention_heads, Hkv = c->num_key_value_heads;
    int active = refresh_active(p->mask, T);
    if (active && select) o->attention_select(sel, a->q, a->k, B, T, Hq, Hkv, D, p->mask);
    if (p->stats) {
        KV_CHECK(o->attention_forward_stats && B == 1 && !active,
                 "forward: attention statistics need one causal sequence on an engine that computes them");
        o->attention_forward_stats(a->att, a->lse, p->stats, a->q, a->k, a->v, T, Hq, Hkv, D);
    } else {
        o->attention_forward(a->att, a->lse, a->q, a->k, a->v, active ? sel : NULL, B, T, Hq, Hkv, D, p->mask);
    }
}

void decoder_layer_attn_norm(const LayerPass *p, const LayerTensors *w, LayerActs *a, const float *x) {
    const DecoderConfig *c = p->cfg;
    p->ops->rmsnorm_forward(a->xn1, a->rstd1, x, w->attn_norm, p->B * p->T, c->hidden_size, (float)c->rms_norm_eps);
}

void decoder_layer_forward_attn(const LayerPass *p, const LayerTensors *w, LayerActs *a, int32_t *sel, const float *x,
                                int select) {
    const DecoderOps *o = p->ops;
    const DecoderConfig *c = p->cfg;
    int64_t B = p->B, T = p->T, BT = B * T, C = c->hidden_size, D = c->head_dim;
    int64_t Hq = c->num_attention_heads, Hkv = c->num_key_value_heads;
    decoder_layer_attn_norm(p, w, a, x);
    /* q, k and v in one product: wq, wk, wv are consecutive (model/params.h),
     * so wq starts the stacked ((Hq + 2 Hkv) D, C) weight */
    o->matmul_forward_act(a->qkv, a->xn1, w->wq, BT, C, (Hq + 2 * Hkv) * D);
    /* the biases, where the family has them, before RoPE (bq starts the
     * consecutive [bq | bk | bv], as wq the stacked weight) */
    if (w->bq) o->bias_add(a->qkv, w->bq, BT, (Hq + 2 * Hkv) * D);
    o->rope_split_forward(a->q, a->k, a->v, a->qkv, p->rope_cos, p->rope_sin, B, T, Hq, Hkv, D);
    attention(p, a, sel, select);
    matmul_add(o, a->x2, x, a->att, w->wo, BT, Hq * D, C);
}

void decoder_layer_forward_mlp(const LayerPass *p, const LayerTensors *w, LayerActs *a, float *out) {
    const DecoderOps *o = p->ops;
    const DecoderConfig *c = p->cfg;
    int64_t BT = p->B * p->T, C = c->hidden_size, F = c->intermediate_size;
    o->rmsnorm_forward(a->xn2, a->rstd2, a->x2, w->mlp_norm, BT, C, (float)c->rms_norm_eps);
    /* gate and up in one product (wgate and wup are consecutive) */
    o->matmul_forward_act(a->gu, a->xn2, w->wgate, BT, C, 2 * F);
    o->swiglu_forward(a->h, a->gu, BT, F);
    if (!out) return;
    matmul_add(o, out, a->x2, a->h, w->wdown, BT, F, C);
}

void decoder_layer_forward(const LayerPass *p, const LayerTensors *w, LayerActs *a, int32_t *sel, const float *x,
                           float *out, int select) {
    decoder_layer_forward_attn(p, w, a, sel, x, select);
    decoder_layer_forward_mlp(p, w, a, out);
}

void decoder_layer_backward(const LayerPass *p, const LayerTensors *w, LayerTensors *dw, const LayerActs *a,
                            const int32_t *sel, const float *x, DecoderBackwardBufs *g) {
    const DecoderOps *o = p->ops;
    const DecoderConfig *c = p->cfg;
    int64_t B = p->B, T = p->T, BT = B * T, C = c->hidden_size, F = c->intermediate_size, D = c->head_dim;
    int64_t Hq = c->num_attention_heads, Hkv = c->num_key_value_heads;
    /* MLP: out = x2 + down(silu(gate(xn2)) * up(xn2)); each input gradient
     * is one product (the fused ones included), written, not accumulated */
    o->matmul_backward_act(g->dh, dw->wdown, g->dres, a->h, w->wdown, BT, F, C);
    o->swiglu_backward(g->dgu, g->dh, a->gu, BT, F);
    o->matmul_backward(g->dxn, dw->wgate, g->dgu, a->xn2, w->wgate, BT, C, 2 * F);
    o->rmsnorm_backward(g->dres, dw->mlp_norm, g->dxn, a->x2, w->mlp_norm, a->rstd2, BT, C);
    /* attention: x2 = x + o(attention(rope(q(xn1)), rope(k(xn1)), v(xn1))) */
    o->matmul_backward_act(g->datt, dw->wo, g->dres, a->att, w->wo, BT, Hq * D, C);
    int active = refresh_active(p->mask, T);
    o->attention_backward(g->dq, g->dk, g->dv, g->datt, a->q, a->k, a->v, a->att, a->lse, active ? sel : NULL, B, T, Hq,
                          Hkv, D, p->mask);
    o->rope_join_backward(g->dqkv, g->dq, g->dk, g->dv, p->rope_cos, p->rope_sin, B, T, Hq, Hkv, D);
    if (w->bq) o->bias_backward(dw->bq, g->dqkv, BT, (Hq + 2 * Hkv) * D);
    o->matmul_backward(g->dxn, dw->wq, g->dqkv, a->xn1, w->wq, BT, C, (Hq + 2 * Hkv) * D);
    o->rmsnorm_backward(g->dres, dw->attn_norm, g->dxn, x, w->attn_norm, a->rstd1, BT, C);
}
