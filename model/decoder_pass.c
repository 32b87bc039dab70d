#include "decoder_pass.h"

#include <math.h>
#include <stdlib.h>

#include "../common/redzone.h"
#include "../common/util.h"
#include "../kernels/rope.h"

void decoder_pass_state_init(DecoderPassState *s, const DecoderConfig *c) {
    s->acts = xcalloc((size_t)c->num_hidden_layers, sizeof(LayerActs));
    s->sel = xcalloc((size_t)c->num_hidden_layers, sizeof(int32_t *));
    s->resid = xcalloc((size_t)c->num_hidden_layers + 1, sizeof(float *));
}

void decoder_pass_state_free(DecoderPassState *s) {
    free(s->acts);
    free(s->sel);
    free(s->resid);
    s->acts = NULL, s->sel = NULL, s->resid = NULL;
}

const DecoderPassModel *decoder_pass_checked(const DecoderPassModel *pass, const DecoderConfig *own_cfg,
                                             const char *who) {
    KV_CHECK(pass->cfg == own_cfg, "%s: the model was moved after it was created (its pass points at the old place)",
             who);
    return pass;
}

void decoder_pass_set_mask(RefreshMask *mask_out, const RefreshMask *mask) {
    refresh_mask_validate(mask, "training mask");
    KV_CHECK(mask->S >= 0, "training mask: field 'S' must be >= 0 (got %lld)", (long long)mask->S);
    *mask_out = *mask;
}

int64_t decoder_pass_ensure_rope(const DecoderOps *o, const DecoderConfig *c, DecoderPassState *s, int64_t T) {
    /* a sequence of T tokens rotates by the tables for T, which only dynamic
     * scaling's change with T: other tables are kept while they are long enough */
    if (T <= s->rope_T && (!rope_tables_depend_on_length(c) || T == s->rope_len)) return 0;
    RopeParams rp = rope_params(c, T);
    int64_t half = c->head_dim / 2, rows = T > s->rope_T ? T : s->rope_T;
    size_t bytes = sizeof(float) * (size_t)(2 * rows * half), old = sizeof(float) * (size_t)(2 * s->rope_T * half);
    float *host = xmalloc(bytes);
    rope_table(host, host + rows * half, rows, c->head_dim, &rp);
    if (rows > s->rope_T) {
        if (s->rope_cos) o->release(s->rope_cos);
        s->rope_cos = o->alloc(bytes);
        s->rope_sin = s->rope_cos + rows * half;
    }
    o->copy_to_engine(s->rope_cos, host, bytes);
    free(host);
    s->rope_T = rows, s->rope_len = T;
    return (int64_t)bytes - (int64_t)old;
}

/* The sharding hooks, at the same points for every engine, so a sharded
 * engine gathers and reduces the same units in the same order. */
static void need_unit(const DecoderPassModel *m, int unit, int backward) {
    if (m->hooks.params_needed) m->hooks.params_needed(m->hooks.ctx, unit, backward);
}

static void grads_ready(const DecoderPassModel *m, int unit) {
    if (m->hooks.grads_ready) m->hooks.grads_ready(m->hooks.ctx, unit);
}

/* The head's weights: the tail unit, plus the embedding when tied. */
static void need_head(const DecoderPassModel *m, int backward) {
    need_unit(m, (int)m->cfg->num_hidden_layers + 1, backward);
    if (m->cfg->tie_word_embeddings) need_unit(m, 0, backward);
}

static LayerPass layer_pass(const DecoderPassModel *m, const DecoderPassState *s) {
    return (LayerPass){.ops = m->ops,
                       .cfg = m->cfg,
                       .mask = m->mask,
                       .rope_cos = s->rope_cos,
                       .rope_sin = s->rope_sin,
                       .B = s->B,
                       .T = s->T};
}

static LayerActs *acts_of(const DecoderPassModel *m, const DecoderPassState *s, int64_t l) {
    return &s->acts[m->recompute == DECODER_RECOMPUTE_FULL ? 0 : l];
}

/* Rebuilds what the recompute setting did not keep of layer l's
 * activations from what it kept (the layer's input; under ATTN also q, k,
 * v, att, lse and x2), with the forward's kernels and inputs: the same bits
 * the forward wrote. ATTN reruns the two norms, the gate|up product and
 * swiglu; FULL the whole layer up to the down projection's input. */
static void recompute_layer(const DecoderPassModel *m, const DecoderPassState *s, const LayerPass *pass, int64_t l) {
    LayerActs *a = acts_of(m, s, l);
    const LayerTensors *w = &m->w->layers[l];
    if (m->recompute == DECODER_RECOMPUTE_NONE) return;
    if (m->recompute == DECODER_RECOMPUTE_FULL) decoder_layer_forward_attn(pass, w, a, s->sel[l], s->resid[l], 0);
    else decoder_layer_attn_norm(pass, w, a, s->resid[l]);
    decoder_layer_forward_mlp(pass, w, a, NULL);
}

void decoder_pass_logits_rows(const DecoderPassModel *m, const DecoderPassState *s, float *out, int64_t r0,
                              int64_t rows) {
    m->ops->head_forward(out, s->xf + r0 * m->cfg->hidden_size, m->w->lm_head, rows, m->cfg->hidden_size,
                         m->cfg->vocab_size);
}

void decoder_pass_check_rows(const DecoderPassState *s, int64_t row0, int64_t rows, const char *what) {
    KV_CHECK(s->cap_BT > 0 && row0 >= 0 && row0 + rows <= s->B * s->T,
             "%s: rows [%lld, %lld) outside the last forward's %lld rows", what, (long long)row0,
             (long long)(row0 + rows), (long long)(s->B * s->T));
}

int64_t decoder_pass_ce_rows(const DecoderPassModel *m) { return m->ce_rows > 0 ? m->ce_rows : DECODER_CE_CHUNK_ROWS; }

static int64_t chunk_rows(const DecoderPassModel *m, int64_t BT, int64_t r0) {
    int64_t n = decoder_pass_ce_rows(m);
    return BT - r0 < n ? BT - r0 : n;
}

DecoderBackwardBufs decoder_pass_bufs(const DecoderPassModel *m, const DecoderPassState *s) {
    return decoder_backward_bufs_carve_rows(m->cfg, s->B * s->T, m->act_size, decoder_pass_ce_rows(m), s->scratch);
}

/* The loss head and its gradient in one pass over the logits chunks
 * (DECODER_FORWARD_TRAIN): the same kernels, on the same values, onto
 * dw->lm_head in the same order as the backward's recomputation, so the
 * gradients are the same bits; the backward's own sum, moved earlier. */
static void head_loss_and_grad(const DecoderPassModel *m, DecoderPassState *s) {
    const DecoderOps *o = m->ops;
    const DecoderConfig *c = m->cfg;
    int64_t BT = s->B * s->T, C = c->hidden_size, V = c->vocab_size;
    DecoderBackwardBufs g = decoder_pass_bufs(m, s);
    float scale = 1.0f / (float)s->n_targets;
    for (int64_t r0 = 0; r0 < BT; r0 += decoder_pass_ce_rows(m)) {
        int64_t rows = chunk_rows(m, BT, r0);
        decoder_pass_logits_rows(m, s, g.logits, r0, rows);
        o->crossentropy_forward_backward(s->losses + r0, s->ce_lse + r0, g.logits, s->targets + r0, rows, V, scale);
        o->head_backward(g.dxf + r0 * C, m->dw->lm_head, g.logits, s->xf + r0 * C, m->w->lm_head, rows, C, V);
    }
    s->head_grad_ready = 1;
}

float decoder_pass_forward(const DecoderPassModel *m, DecoderPassState *s, const int32_t *tokens,
                           const int32_t *targets, DecoderForwardMode mode) {
    const DecoderOps *o = m->ops;
    const DecoderConfig *c = m->cfg;
    int64_t BT = s->B * s->T, C = c->hidden_size, V = c->vocab_size, nl = c->num_hidden_layers;
    for (int64_t i = 0; i < BT; i++) s->h_targets[i] = targets ? targets[i] : -1;
    o->copy_to_engine(s->tokens, tokens, sizeof(int32_t) * (size_t)BT);
    o->copy_to_engine(s->targets, s->h_targets, sizeof(int32_t) * (size_t)BT);
    LayerPass pass = layer_pass(m, s);
    need_unit(m, 0, 0);
    o->embedding_forward(s->resid[0], s->tokens, m->w->embed, BT, C);
    for (int64_t l = 0; l < nl; l++) {
        need_unit(m, (int)l + 1, 0);
        decoder_layer_forward(&pass, &m->w->layers[l], acts_of(m, s, l), s->sel[l], s->resid[l], s->resid[l + 1],
                              !m->freeze_selection);
    }
    need_head(m, 0);
    o->final_norm_forward(s->xf, s->rstdf, s->resid[nl], m->w->final_norm, BT, C, (float)c->rms_norm_eps);
    s->n_targets = 0;
    for (int64_t i = 0; i < BT; i++) s->n_targets += s->h_targets[i] >= 0;
    s->loss = NAN;
    s->head_grad_ready = 0;
    if (s->n_targets == 0) return s->loss;
    /* chunks of logits from the scratch's start, which the backward carves
     * into buffers with red zones (common/redzone.h) */
    REDZONE_CLEAR(s->scratch, sizeof(float) * (size_t)s->scratch_numel);
    if (mode == DECODER_FORWARD_TRAIN) {
        head_loss_and_grad(m, s);
    } else {
        for (int64_t r0 = 0; r0 < BT; r0 += decoder_pass_ce_rows(m)) {
            int64_t rows = chunk_rows(m, BT, r0);
            decoder_pass_logits_rows(m, s, s->scratch, r0, rows);
            o->crossentropy_forward(s->losses + r0, s->ce_lse + r0, s->scratch, s->targets + r0, rows, V);
        }
    }
    /* the mean in double over rows in order, the same on every engine */
    o->copy_to_host(s->h_losses, s->losses, sizeof(float) * (size_t)BT);
    double total = 0.0;
    for (int64_t i = 0; i < BT; i++) total += s->h_losses[i];
    s->loss = (float)(total / (double)s->n_targets);
    return s->loss;
}

void decoder_pass_backward(const DecoderPassModel *m, DecoderPassState *s) {
    const DecoderOps *o = m->ops;
    const DecoderConfig *c = m->cfg;
    KV_CHECK(s->cap_BT > 0 && s->n_targets > 0, "backward: needs a forward pass with at least one target");
    int64_t BT = s->B * s->T, C = c->hidden_size, V = c->vocab_size, nl = c->num_hidden_layers;
    const ModelTensors *w = m->w;
    ModelTensors *dw = m->dw;
    DecoderBackwardBufs g = decoder_pass_bufs(m, s);
    need_head(m, 1);
    if (!s->head_grad_ready) { /* else the training forward added it and left dxf */
        float scale = 1.0f / (float)s->n_targets;
        for (int64_t r0 = 0; r0 < BT; r0 += decoder_pass_ce_rows(m)) {
            int64_t rows = chunk_rows(m, BT, r0);
            decoder_pass_logits_rows(m, s, g.logits, r0, rows); /* recomputed: the forward kept only lse */
            o->crossentropy_backward(g.logits, s->ce_lse + r0, s->targets + r0, rows, V, scale);
            o->head_backward(g.dxf + r0 * C, dw->lm_head, g.logits, s->xf + r0 * C, w->lm_head, rows, C, V);
        }
    }
    s->head_grad_ready = 0; /* a second backward recomputes: the layers' backward reuses the scratch */
    o->zero(g.dres, BT * C);
    o->rmsnorm_backward(g.dres, dw->final_norm, g.dxf, s->resid[nl], w->final_norm, s->rstdf, BT, C);
    grads_ready(m, (int)nl + 1);
    LayerPass pass = layer_pass(m, s);
    for (int64_t l = nl - 1; l >= 0; l--) {
        need_unit(m, (int)l + 1, 1);
        LayerActs *a = acts_of(m, s, l);
        recompute_layer(m, s, &pass, l);
        decoder_layer_backward(&pass, &w->layers[l], &dw->layers[l], a, s->sel[l], s->resid[l], &g);
        grads_ready(m, (int)l + 1);
    }
    o->embedding_backward(dw->embed, g.dres, s->tokens, BT, C);
    grads_ready(m, 0);
}
