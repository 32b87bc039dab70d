/* The CUDA engine (model/decoder_cuda.h): built only with the CUDA backend
 * (nvcc or the CPU emulator; the Makefile's CUDA_C). Its sizes and packing,
 * which the memory plan needs in every build, are model/decoder_cuda_size.c. */
#include "decoder_cuda.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../common/redzone.h"
#include "../common/util.h"
#include "../kernels/attention_cudnn.h"
#include "../kernels/attention_mma.h"
#include "../kernels/bias.h"
#include "../kernels/crossentropy.h"
#include "../kernels/cuda_device.h"
#include "../kernels/embedding.h"
#include "../kernels/matmul.h"
#include "../kernels/residual.h"
#include "../kernels/rmsnorm.h"
#include "../kernels/swiglu.h"
#include "decoder_layer.h"
#include "decoder_pass.h"

static void zero(float *d, int64_t n) { cuda_memset_zero(d, sizeof(float) * (size_t)n); }

/* Packs the fp32 tensors into params and the matrices into wbf16, and binds
 * the views. The matrix views are the pun DecoderOps asks for: the layer code
 * (model/decoder_layer.c) is written once for every engine and precision, so
 * its weight arguments are const float *; here they hold bf16 addresses,
 * and only decoder_cuda_bf16_ops' matmul entries, which cast them back to
 * const bf16 *, ever receive them. Nothing dereferences them as floats. */
static void create_bf16_weights(DecoderCuda *g) {
    const ParamLayout *L = &g->layout;
    g->dev_offset = xmalloc(sizeof(int64_t) * (size_t)L->n);
    int64_t n32, n16;
    g->head_offset = decoder_cuda_pack_bf16(L, &g->cfg, g->dev_offset, &n32, &n16);
    DecoderCudaFixedBytes fb = decoder_cuda_fixed_bytes(L, &g->cfg, DECODER_CUDA_BF16_WEIGHTS);
    g->params = cuda_malloc_counted(&g->bytes_fixed, fb.params);
    g->wbf16 = cuda_malloc_counted(&g->bytes_fixed, fb.wbf16);
    g->w.layers = xcalloc((size_t)g->cfg.num_hidden_layers, sizeof(LayerTensors));
    for (int i = 0; i < L->n; i++)
        *decoder_tensor_slot(&g->w, &L->t[i]) = decoder_cuda_stays_fp32(&L->t[i])
                                                    ? g->params + g->dev_offset[i]
                                                    : (float *)(void *)(g->wbf16 + g->dev_offset[i]);
    if (g->head_offset >= 0) g->w.lm_head = (float *)(void *)(g->wbf16 + g->head_offset);
    /* the alignment padding after each packed tensor is nobody's: poisoned in
     * the emulator's sanitizer build, so a kernel reading or writing past
     * its tensor there is reported (common/redzone.h) */
    for (int i = 0; i < L->n; i++) {
        int64_t end = g->dev_offset[i] + L->t[i].numel;
        int64_t pad =
            i + 1 < L->n && decoder_cuda_continues_fused(&L->t[i + 1]) ? 0 : decoder_cuda_align_elems(end) - end;
        if (decoder_cuda_stays_fp32(&L->t[i]))
            REDZONE_POISON(g->params + g->dev_offset[i] + L->t[i].numel, sizeof(float) * (size_t)pad);
        else REDZONE_POISON(g->wbf16 + g->dev_offset[i] + L->t[i].numel, sizeof(bf16) * (size_t)pad);
    }
}

/* What both kinds of engine set up the same way. */
static void create_common(DecoderCuda *g, const DecoderConfig *c, DecoderRecompute recompute,
                          DecoderCudaPrecision precision) {
    memset(g, 0, sizeof *g);
    config_validate(c, c->name);
    decoder_recompute_check(recompute, "decoder_cuda_create");
    KV_CHECK(precision == DECODER_CUDA_FP32 || precision == DECODER_CUDA_BF16_WEIGHTS,
             "decoder_cuda_create: unknown precision %d", (int)precision);
    g->cfg = *c;
    g->recompute = recompute;
    g->precision = precision;
    param_layout_build(&g->layout, c);
    g->pass = (DecoderPassModel){.cfg = &g->cfg,
                                 .mask = &g->mask,
                                 .w = &g->w,
                                 .dw = &g->dw,
                                 .act_size = decoder_cuda_act_size(precision),
                                 .recompute = recompute,
                                 .ce_rows = DECODER_CUDA_CE_CHUNK_ROWS};
    /* KVCPT_ATTN (the pass's ops), checked before anything is allocated */
    decoder_cuda_set_attn(g, DECODER_ATTN_AUTO, "decoder_cuda_create");
    g->head_offset = -1;
    decoder_pass_state_init(&g->state, c);
    g->mask = refresh_mask_off();
}

void decoder_cuda_create(DecoderCuda *g, const DecoderConfig *c, DecoderRecompute recompute,
                         DecoderCudaPrecision precision) {
    create_common(g, c, recompute, precision);
    if (precision == DECODER_CUDA_BF16_WEIGHTS) {
        create_bf16_weights(g);
    } else {
        g->params = cuda_malloc_counted(&g->bytes_fixed, decoder_cuda_fixed_bytes(&g->layout, c, precision).params);
        decoder_bind_tensors(&g->w, c, &g->layout, g->params);
    }
    g->grads = cuda_malloc_counted(&g->bytes_fixed, decoder_cuda_fixed_bytes(&g->layout, c, precision).grads);
    zero(g->grads, g->layout.total);
    decoder_bind_tensors(&g->dw, c, &g->layout, g->grads);
}

void decoder_cuda_create_streamed(DecoderCuda *g, const DecoderConfig *c, DecoderRecompute recompute,
                                  DecoderCudaPrecision precision) {
    create_common(g, c, recompute, precision);
    const ParamLayout *L = &g->layout;
    int bf = precision == DECODER_CUDA_BF16_WEIGHTS;
    int64_t *res_off = xcalloc((size_t)L->n, sizeof(int64_t));
    g->slot_offset = xcalloc((size_t)L->n, sizeof(int64_t));
    DecoderCudaStreamPack z = decoder_cuda_stream_pack(L, c, precision, res_off, g->slot_offset);
    g->streamed = 1;
    g->params = cuda_malloc_counted(&g->bytes_fixed, (int64_t)sizeof(float) * z.res32);
    if (z.res16) g->wbf16 = cuda_malloc_counted(&g->bytes_fixed, (int64_t)sizeof(bf16) * z.res16);
    for (int s = 0; s < DECODER_CUDA_SLOTS; s++) {
        g->slot32[s] = cuda_malloc_counted(&g->bytes_fixed, (int64_t)sizeof(float) * z.slot32);
        if (z.slot16) g->slot16[s] = cuda_malloc_counted(&g->bytes_fixed, (int64_t)sizeof(bf16) * z.slot16);
    }
    g->resident_grads = z.res_grads;
    g->grads = cuda_malloc_counted(&g->bytes_fixed, (int64_t)sizeof(float) * z.res_grads);
    g->grad_slot = cuda_malloc_counted(&g->bytes_fixed, (int64_t)sizeof(float) * L->layer_numel);
    zero(g->grads, z.res_grads);
    g->w.layers = xcalloc((size_t)c->num_hidden_layers, sizeof(LayerTensors));
    g->dw.layers = xcalloc((size_t)c->num_hidden_layers, sizeof(LayerTensors));
    int64_t tail_begin = L->layer_begin0 + c->num_hidden_layers * L->layer_numel, embed_n = 0;
    for (int i = 0; i < L->n; i++)
        if (L->t[i].kind == PT_EMBED) embed_n = L->t[i].numel;
    for (int i = 0; i < L->n; i++) {
        const ParamTensor *t = &L->t[i];
        if (t->layer >= 0) continue; /* a layer's tensor: bound with its slot */
        *decoder_tensor_slot(&g->w, t) =
            bf && !decoder_cuda_stays_fp32(t) ? (float *)(void *)(g->wbf16 + res_off[i]) : g->params + res_off[i];
        *decoder_tensor_slot(&g->dw, t) = g->grads + (t->kind == PT_EMBED ? 0 : embed_n + (t->offset - tail_begin));
    }
    if (c->tie_word_embeddings) {
        g->dw.lm_head = g->dw.embed;
        if (bf) g->head_offset = z.res16 - decoder_cuda_align_elems(c->vocab_size * c->hidden_size);
        g->w.lm_head = bf ? (float *)(void *)(g->wbf16 + g->head_offset) : g->w.embed;
    }
    free(res_off);
}

/* The first layout tensor of a layer (its tensors follow in layer 0's order). */
static int layer_first_tensor(const DecoderCuda *g, int64_t layer) {
    KV_CHECK(g->streamed && layer >= 0 && layer < g->cfg.num_hidden_layers,
             "decoder_cuda: layer %lld of a %s engine cannot be bound", (long long)layer,
             g->streamed ? "streamed" : "whole");
    return param_layout_tensor_at(&g->layout, g->layout.layer_begin0 + layer * g->layout.layer_numel);
}

void decoder_cuda_bind_layer(DecoderCuda *g, int64_t layer, int slot) {
    KV_CHECK(slot >= 0 && slot < DECODER_CUDA_SLOTS, "decoder_cuda_bind_layer: slot %d", slot);
    int first = layer_first_tensor(g, layer), bf = g->precision == DECODER_CUDA_BF16_WEIGHTS;
    for (int k = 0; first + k < g->layout.n && g->layout.t[first + k].layer == layer; k++) {
        const ParamTensor *t = &g->layout.t[first + k];
        *decoder_tensor_slot(&g->w, t) = bf && !decoder_cuda_stays_fp32(t)
                                             ? (float *)(void *)(g->slot16[slot] + g->slot_offset[k])
                                             : g->slot32[slot] + g->slot_offset[k];
    }
}

void decoder_cuda_bind_layer_grads(DecoderCuda *g, int64_t layer) {
    int first = layer_first_tensor(g, layer);
    int64_t begin = g->layout.layer_begin0 + layer * g->layout.layer_numel;
    for (int k = 0; first + k < g->layout.n && g->layout.t[first + k].layer == layer; k++)
        *decoder_tensor_slot(&g->dw, &g->layout.t[first + k]) = g->grad_slot + (g->layout.t[first + k].offset - begin);
    zero(g->grad_slot, g->layout.layer_numel);
}

/* The view of the tensor starting the layout range [begin, end). */
static float *view_at(DecoderCuda *g, ModelTensors *v, int64_t begin, int64_t end, const char *what) {
    KV_CHECK(begin >= 0 && begin < end && end <= g->layout.total, "%s: range [%lld, %lld) outside the %lld parameters",
             what, (long long)begin, (long long)end, (long long)g->layout.total);
    const ParamTensor *t = &g->layout.t[param_layout_tensor_at(&g->layout, begin)];
    KV_CHECK(t->offset == begin, "%s: range [%lld, %lld) starts inside tensor '%s'", what, (long long)begin,
             (long long)end, t->name);
    float *p = *decoder_tensor_slot(v, t);
    KV_CHECK(p, "%s: tensor '%s' is not bound to device memory (a streamed layer not bound)", what, t->name);
    return p;
}

float *decoder_cuda_grads_of(DecoderCuda *g, int64_t begin, int64_t end) {
    return view_at(g, &g->dw, begin, end, "decoder_cuda_grads_of");
}

static void free_acts(DecoderCuda *g) {
    DecoderPassState *s = &g->state;
    if (!s->cap_BT) return;
    /* each allocation starts with its part's first buffer: xn1 for a whole
     * set and for recompute=attn's shared rebuilt part, q for its kept one */
    int64_t sets = g->recompute == DECODER_RECOMPUTE_FULL ? 1 : g->cfg.num_hidden_layers;
    int attn = g->recompute == DECODER_RECOMPUTE_ATTN;
    for (int64_t l = 0; l < sets; l++) cuda_free(attn ? s->acts[l].q : s->acts[l].xn1);
    if (attn) cuda_free(s->acts[0].xn1);
    for (int64_t l = 0; l < g->cfg.num_hidden_layers; l++) {
        cuda_free(s->sel[l]);
        s->sel[l] = NULL;
    }
    cuda_free(s->resid[0]);
    cuda_free(s->tokens);
    cuda_free(s->xf);
    cuda_free(s->scratch);
    free(s->h_targets);
    free(s->h_losses);
    s->cap_BT = 0;
    g->sel_bytes = 0;
    g->bytes_acts = 0;
}

static void free_attn_scratch(DecoderCuda *g) {
    if (!g->attn_scratch) return;
    attention_cudnn_use_scratch(NULL, 0); /* the calls must not carve freed memory */
    cuda_free(g->attn_scratch);
    g->attn_scratch = NULL;
    g->bytes_attn = 0;
}

void decoder_cuda_free(DecoderCuda *g) {
    free_acts(g);
    free_attn_scratch(g);
    if (g->state.rope_cos) cuda_free(g->state.rope_cos);
    cuda_free(g->params);
    if (g->wbf16) cuda_free(g->wbf16);
    for (int s = 0; s < DECODER_CUDA_SLOTS; s++) {
        if (g->slot32[s]) cuda_free(g->slot32[s]);
        if (g->slot16[s]) cuda_free(g->slot16[s]);
    }
    if (g->grad_slot) cuda_free(g->grad_slot);
    free(g->slot_offset);
    free(g->dev_offset);
    cuda_free(g->grads);
    decoder_pass_state_free(&g->state);
    free(g->w.layers);
    free(g->dw.layers);
    param_layout_free(&g->layout);
    memset(g, 0, sizeof *g);
}

void decoder_cuda_set_mask(DecoderCuda *g, const RefreshMask *mask) { decoder_pass_set_mask(&g->mask, mask); }

/* One staging chunk between host fp32 and device bf16: rounded to nearest
 * even on the way up (kernels/bf16.h), widened exactly on the way down. */
static void move_chunk(bf16 *dev, const float *up, float *down, int64_t m, uint16_t *stage) {
    if (up) {
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < m; i++) stage[i] = bf16_bits_from_float(up[i]);
        cuda_memcpy_h2d(dev, stage, sizeof(uint16_t) * (size_t)m);
    } else {
        cuda_memcpy_d2h(stage, dev, sizeof(uint16_t) * (size_t)m);
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < m; i++) down[i] = float_from_bf16_bits(stage[i]);
    }
}

/* Host (layout order, fp32) <-> the bf16 engine's places, one direction:
 * exactly one of up and down is non-NULL. The fp32 tensors are copied,
 * the matrices go through a bounded staging buffer; going up also fills a
 * tied lm_head's bf16 copy from the embedding. */
static void move_bf16_weights(const DecoderCuda *g, const float *up, float *down) {
    const ParamLayout *L = &g->layout;
    const int64_t stage_n = (int64_t)1 << 24; /* 32 MiB */
    uint16_t *stage = xmalloc(sizeof(uint16_t) * (size_t)stage_n);
    for (int i = 0; i < L->n; i++) {
        const ParamTensor *t = &L->t[i];
        int64_t n = t->numel;
        if (decoder_cuda_stays_fp32(t)) {
            if (up) cuda_memcpy_h2d(g->params + g->dev_offset[i], up + t->offset, sizeof(float) * (size_t)n);
            else cuda_memcpy_d2h(down + t->offset, g->params + g->dev_offset[i], sizeof(float) * (size_t)n);
        } else {
            for (int64_t o = 0; o < n; o += stage_n)
                move_chunk(g->wbf16 + g->dev_offset[i] + o, up ? up + t->offset + o : NULL,
                           up ? NULL : down + t->offset + o, n - o < stage_n ? n - o : stage_n, stage);
        }
        if (up && t->kind == PT_EMBED && g->head_offset >= 0)
            for (int64_t o = 0; o < n; o += stage_n)
                move_chunk(g->wbf16 + g->head_offset + o, up + t->offset + o, NULL, n - o < stage_n ? n - o : stage_n,
                           stage);
    }
    free(stage);
}

void decoder_cuda_install_params(DecoderCuda *g, const float *src, int64_t begin, int64_t end) {
    const ParamLayout *L = &g->layout;
    (void)view_at(g, &g->w, begin, end, "decoder_cuda_install_params"); /* checks the range's start */
    int bf = g->precision == DECODER_CUDA_BF16_WEIGHTS;
    for (int i = param_layout_tensor_at(L, begin); i < L->n && L->t[i].offset < end; i++) {
        const ParamTensor *t = &L->t[i];
        KV_CHECK(t->offset + t->numel <= end, "decoder_cuda_install_params: range [%lld, %lld) cuts tensor '%s'",
                 (long long)begin, (long long)end, t->name);
        const float *x = src + (t->offset - begin);
        float *dst = *decoder_tensor_slot(&g->w, t);
        KV_CHECK(dst, "decoder_cuda_install_params: tensor '%s' is not bound (a streamed layer not bound)", t->name);
        if (t->kind == PT_LM_HEAD && g->cfg.tie_word_embeddings) continue; /* the embedding's, below */
        if (!bf || decoder_cuda_stays_fp32(t)) {
            if (dst != x) cuda_memcpy_d2d(dst, x, sizeof(float) * (size_t)t->numel);
        } else {
            cast_bf16_cuda((bf16 *)(void *)dst, x, t->numel);
        }
        if (t->kind == PT_EMBED && g->head_offset >= 0) cast_bf16_cuda(g->wbf16 + g->head_offset, x, t->numel);
    }
}

int decoder_cuda_tensor_is_bf16(const DecoderCuda *g, int tensor) {
    KV_CHECK(tensor >= 0 && tensor < g->layout.n, "decoder_cuda_tensor_is_bf16: tensor %d outside [0, %d)", tensor,
             g->layout.n);
    return g->precision == DECODER_CUDA_BF16_WEIGHTS && !decoder_cuda_stays_fp32(&g->layout.t[tensor]);
}

float *decoder_cuda_params_in_place(DecoderCuda *g, int64_t begin, int64_t end) {
    float *base = view_at(g, &g->w, begin, end, "decoder_cuda_params_in_place");
    const ParamLayout *L = &g->layout;
    for (int i = param_layout_tensor_at(L, begin); i < L->n && L->t[i].offset < end; i++)
        if (decoder_cuda_tensor_is_bf16(g, i) ||
            *decoder_tensor_slot(&g->w, &L->t[i]) != base + (L->t[i].offset - begin))
            return NULL;
    return base;
}

void decoder_cuda_install_bf16(DecoderCuda *g, const bf16 *src, int64_t begin, int64_t end) {
    const ParamLayout *L = &g->layout;
    (void)view_at(g, &g->w, begin, end, "decoder_cuda_install_bf16"); /* checks the range's start */
    for (int i = param_layout_tensor_at(L, begin); i < L->n && L->t[i].offset < end; i++) {
        const ParamTensor *t = &L->t[i];
        KV_CHECK(t->offset + t->numel <= end, "decoder_cuda_install_bf16: range [%lld, %lld) cuts tensor '%s'",
                 (long long)begin, (long long)end, t->name);
        if (!decoder_cuda_tensor_is_bf16(g, i)) continue;
        float *dst = *decoder_tensor_slot(&g->w, t);
        KV_CHECK(dst, "decoder_cuda_install_bf16: tensor '%s' is not bound (a streamed layer not bound)", t->name);
        cuda_memcpy_d2d(dst, src + (t->offset - begin), sizeof(bf16) * (size_t)t->numel);
    }
}

void decoder_cuda_upload_params(DecoderCuda *g, const float *host) {
    KV_CHECK(!g->streamed, "decoder_cuda_upload_params: a streamed engine holds no whole copy");
    if (g->precision == DECODER_CUDA_BF16_WEIGHTS) move_bf16_weights(g, host, NULL);
    else cuda_memcpy_h2d(g->params, host, sizeof(float) * (size_t)g->layout.total);
}

void decoder_cuda_download_grads(const DecoderCuda *g, float *host) {
    KV_CHECK(!g->streamed, "decoder_cuda_download_grads: a streamed engine holds no whole copy");
    cuda_memcpy_d2h(host, g->grads, sizeof(float) * (size_t)g->layout.total);
}

void decoder_cuda_download_params(const DecoderCuda *g, float *host) {
    KV_CHECK(!g->streamed, "decoder_cuda_download_params: a streamed engine holds no whole copy");
    if (g->precision == DECODER_CUDA_BF16_WEIGHTS) move_bf16_weights(g, NULL, host);
    else cuda_memcpy_d2h(host, g->params, sizeof(float) * (size_t)g->layout.total);
}

DecoderCudaPlace decoder_cuda_param_place(const DecoderCuda *g, int tensor) {
    KV_CHECK(tensor >= 0 && tensor < g->layout.n && !g->streamed,
             "decoder_cuda_param_place: tensor %d outside [0, %d), or a streamed engine", tensor, g->layout.n);
    const ParamTensor *t = &g->layout.t[tensor];
    if (g->precision != DECODER_CUDA_BF16_WEIGHTS) return (DecoderCudaPlace){0, t->offset};
    return (DecoderCudaPlace){!decoder_cuda_stays_fp32(t), g->dev_offset[tensor]};
}

void decoder_cuda_sync_tied_head(DecoderCuda *g) {
    if (g->head_offset < 0) return;
    cast_bf16_cuda(g->wbf16 + g->head_offset, g->w.embed, g->cfg.vocab_size * g->cfg.hidden_size);
}

/* Streamed: the resident gradients; a layer's slot is zeroed as it is bound. */
void decoder_cuda_zero_grad(DecoderCuda *g) { zero(g->grads, g->streamed ? g->resident_grads : g->layout.total); }

int64_t decoder_cuda_bytes(const DecoderCuda *g) { return g->bytes_fixed + g->bytes_acts + g->bytes_attn; }

/* Each layer's selection buffer at `bytes` at least, replacing smaller ones. */
static void ensure_sel(DecoderCuda *g, int64_t bytes) {
    if (bytes <= g->sel_bytes) return;
    for (int64_t l = 0; l < g->cfg.num_hidden_layers; l++) {
        if (g->state.sel[l]) {
            cuda_free(g->state.sel[l]);
            g->bytes_acts -= g->sel_bytes;
        }
        g->state.sel[l] = cuda_malloc_counted(&g->bytes_acts, bytes);
    }
    g->sel_bytes = bytes;
}

/* Grows the buffers to B sequences of T tokens: everything when B * T
 * grows, else the selections alone when the mask's records need more (the
 * mask is set after create, and T may change between calls). */
static void ensure_acts(DecoderCuda *g, int64_t B, int64_t T) {
    const DecoderConfig *c = &g->cfg;
    DecoderPassState *s = &g->state;
    int64_t BT = B * T, C = c->hidden_size, nl = c->num_hidden_layers;
    int act = decoder_cuda_act_size(g->precision);
    s->B = B, s->T = T;
    DecoderCudaActBytes ab = decoder_cuda_act_bytes(c, g->recompute, g->precision, B, T, &g->mask);
    if (BT <= s->cap_BT) {
        ensure_sel(g, ab.sel);
        return;
    }
    free_acts(g);
    s->cap_BT = BT;
    int attn = g->recompute == DECODER_RECOMPUTE_ATTN;
    for (int64_t l = 0; l < ab.sets; l++)
        decoder_layer_acts_carve_part(&s->acts[l], c, BT, act, attn ? LAYER_ACTS_KEPT : LAYER_ACTS_ALL,
                                      cuda_malloc_counted(&g->bytes_acts, ab.layer_set));
    if (attn) {
        /* one rebuilt part, refilled before each layer's backward: every set points at it */
        LayerActs r;
        decoder_layer_acts_carve_part(&r, c, BT, act, LAYER_ACTS_REBUILT,
                                      cuda_malloc_counted(&g->bytes_acts, ab.shared_set));
        for (int64_t l = 0; l < nl; l++) {
            LayerActs *a = &s->acts[l];
            a->xn1 = r.xn1, a->rstd1 = r.rstd1, a->qkv = r.qkv, a->xn2 = r.xn2, a->rstd2 = r.rstd2, a->gu = r.gu,
            a->h = r.h;
        }
    }
    ensure_sel(g, ab.sel);
    float *res = cuda_malloc_counted(&g->bytes_acts, ab.resid);
    for (int64_t l = 0; l <= nl; l++) s->resid[l] = res + l * BT * C;
    s->tokens = cuda_malloc_counted(&g->bytes_acts, ab.tokens);
    s->targets = s->tokens + BT;
    s->xf = cuda_malloc_counted(&g->bytes_acts, ab.xf);
    s->rstdf = s->xf + BT * C, s->ce_lse = s->rstdf + BT, s->losses = s->ce_lse + BT;
    s->scratch_numel = decoder_scratch_numel_rows(c, BT, act, DECODER_CUDA_CE_CHUNK_ROWS);
    s->scratch = cuda_malloc_counted(&g->bytes_acts, ab.scratch);
    s->h_targets = xmalloc(sizeof(int32_t) * (size_t)BT);
    s->h_losses = xmalloc(sizeof(float) * (size_t)BT);
}

/* attn cudnn: its region at this shape's size at least (grown, never
 * shrunk, like the activations), bound to the cuDNN calls, which other
 * engines may have bound to theirs since; freed when the attention is no
 * longer cudnn (decoder_cuda_set_attn may change it between passes). */
static void bind_attn_scratch(DecoderCuda *g) {
    const int64_t need =
        decoder_cuda_attn_scratch_bytes(&g->cfg, g->precision, g->attn, g->state.B, g->state.T, &g->mask);
    if (need == 0) {
        free_attn_scratch(g);
        return;
    }
    if (need > g->bytes_attn) {
        free_attn_scratch(g);
        g->attn_scratch = cuda_malloc_counted(&g->bytes_attn, need);
    }
    attention_cudnn_use_scratch(g->attn_scratch, g->bytes_attn);
}

/* The device memory operations of every CUDA table. */
#define DEVICE_MEMORY_OPS                                                                                              \
    .zero = zero, .alloc = cuda_malloc, .release = cuda_free, .copy_to_engine = cuda_memcpy_h2d,                       \
    .copy_to_host = cuda_memcpy_d2h

const DecoderOps decoder_cuda_ops = {
    DECODER_LAYER_KERNEL_OPS(cuda),
    DECODER_PASS_KERNEL_OPS(cuda),
    DEVICE_MEMORY_OPS,
};

/* The bf16 engine's ops. Its ACT buffers and its weight matrices hold bf16
 * behind float pointers (the pun DecoderOps and create_bf16_weights
 * describe); these entries are their only readers and cast them back. */
#define BF(p) ((bf16 *)(void *)(p))
#define CBF(p) ((const bf16 *)(const void *)(p))

static void bf_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *weight, int64_t N, int64_t C,
                               float eps) {
    rmsnorm_forward_bf16_cuda(BF(out), rstd, inp, weight, N, C, eps);
}

static void bf_matmul_forward(float *out, const float *inp, const float *weight, int64_t N, int64_t IC, int64_t OC) {
    matmul_forward_bf16_f32out_cuda(out, CBF(inp), CBF(weight), N, IC, OC);
}

static void bf_matmul_forward_add(float *out, const float *add, const float *inp, const float *weight, int64_t N,
                                  int64_t IC, int64_t OC) {
    matmul_forward_bf16_f32out_add_cuda(out, add, CBF(inp), CBF(weight), N, IC, OC);
}

static void bf_matmul_forward_act(float *out, const float *inp, const float *weight, int64_t N, int64_t IC,
                                  int64_t OC) {
    matmul_forward_bf16_cuda(BF(out), CBF(inp), CBF(weight), N, IC, OC);
}

static void bf_matmul_backward(float *dinp, float *dweight, const float *dout, const float *inp, const float *weight,
                               int64_t N, int64_t IC, int64_t OC) {
    matmul_backward_bf16_f32dinp_cuda(dinp, dweight, CBF(dout), CBF(inp), CBF(weight), N, IC, OC);
}

static void bf_matmul_backward_act(float *dinp, float *dweight, const float *dout, const float *inp,
                                   const float *weight, int64_t N, int64_t IC, int64_t OC) {
    matmul_backward_f32dout_cuda(BF(dinp), dweight, dout, CBF(inp), CBF(weight), N, IC, OC);
}

static void bf_head_forward(float *out, const float *inp, const float *weight, int64_t N, int64_t IC, int64_t OC) {
    matmul_forward_bf16w_cuda(out, inp, CBF(weight), N, IC, OC);
}

static void bf_head_backward(float *dinp, float *dweight, const float *dout, const float *inp, const float *weight,
                             int64_t N, int64_t IC, int64_t OC) {
    matmul_backward_bf16w_cuda(dinp, dweight, dout, inp, CBF(weight), N, IC, OC);
}

static void bf_bias_add(float *out, const float *bias, int64_t N, int64_t OC) {
    bias_add_bf16_cuda(BF(out), bias, N, OC);
}

static void bf_bias_backward(float *dbias, const float *dout, int64_t N, int64_t OC) {
    bias_backward_bf16_cuda(dbias, CBF(dout), N, OC);
}

static void bf_rope_split(float *q, float *k, float *v, const float *qkv, const float *cos_t, const float *sin_t,
                          int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t D) {
    rope_split_forward_bf16_cuda(BF(q), BF(k), BF(v), CBF(qkv), cos_t, sin_t, B, T, Hq, Hkv, D);
}

static void bf_rope_join(float *dqkv, const float *dq, const float *dk, const float *dv, const float *cos_t,
                         const float *sin_t, int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t D) {
    rope_join_backward_bf16_cuda(BF(dqkv), dq, dk, dv, cos_t, sin_t, B, T, Hq, Hkv, D);
}

static void bf_select(int32_t *sel, const float *q, const float *k, int64_t B, int64_t T, int64_t Hq, int64_t Hkv,
                      int64_t D, const RefreshMask *m) {
    attention_refresh_select_bf16_cuda(sel, CBF(q), CBF(k), B, T, Hq, Hkv, D, m);
}

static void bf_attention_forward(float *out, float *lse, const float *q, const float *k, const float *v,
                                 const int32_t *sel, int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t D,
                                 const RefreshMask *m) {
    attention_forward_bf16_cuda(BF(out), lse, CBF(q), CBF(k), CBF(v), sel, B, T, Hq, Hkv, D, m);
}

static void bf_attention_backward(float *dq, float *dk, float *dv, const float *dout, const float *q, const float *k,
                                  const float *v, const float *out, const float *lse, const int32_t *sel, int64_t B,
                                  int64_t T, int64_t Hq, int64_t Hkv, int64_t D, const RefreshMask *m) {
    attention_backward_bf16_cuda(dq, dk, dv, CBF(dout), CBF(q), CBF(k), CBF(v), CBF(out), lse, sel, B, T, Hq, Hkv, D,
                                 m);
}

static void bf_attention_forward_mma(float *out, float *lse, const float *q, const float *k, const float *v,
                                     const int32_t *sel, int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t D,
                                     const RefreshMask *m) {
    attention_forward_mma_bf16_cuda(BF(out), lse, CBF(q), CBF(k), CBF(v), sel, B, T, Hq, Hkv, D, m);
}

static void bf_attention_backward_mma(float *dq, float *dk, float *dv, const float *dout, const float *q,
                                      const float *k, const float *v, const float *out, const float *lse,
                                      const int32_t *sel, int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t D,
                                      const RefreshMask *m) {
    attention_backward_mma_bf16_cuda(dq, dk, dv, CBF(dout), CBF(q), CBF(k), CBF(v), CBF(out), lse, sel, B, T, Hq, Hkv,
                                     D, m);
}

static void bf_attention_forward_cudnn(float *out, float *lse, const float *q, const float *k, const float *v,
                                       const int32_t *sel, int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t D,
                                       const RefreshMask *m) {
    attention_forward_cudnn_bf16_cuda(BF(out), lse, CBF(q), CBF(k), CBF(v), sel, B, T, Hq, Hkv, D, m);
}

static void bf_attention_backward_cudnn(float *dq, float *dk, float *dv, const float *dout, const float *q,
                                        const float *k, const float *v, const float *out, const float *lse,
                                        const int32_t *sel, int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t D,
                                        const RefreshMask *m) {
    attention_backward_cudnn_bf16_cuda(dq, dk, dv, CBF(dout), CBF(q), CBF(k), CBF(v), CBF(out), lse, sel, B, T, Hq, Hkv,
                                       D, m);
}

static void bf_swiglu_forward(float *h, const float *gu, int64_t N, int64_t F) {
    swiglu_fused_forward_bf16_cuda(BF(h), CBF(gu), N, F);
}

static void bf_swiglu_backward(float *dgu, const float *dh, const float *gu, int64_t N, int64_t F) {
    swiglu_fused_backward_bf16_cuda(BF(dgu), CBF(dh), CBF(gu), N, F);
}

/* What the two bf16 tables share: they differ in attention only. */
#define BF16_OPS_BUT_ATTENTION                                                                                         \
    .rmsnorm_forward = bf_rmsnorm_forward, .rmsnorm_backward = rmsnorm_backward_cuda,                                  \
    .matmul_forward = bf_matmul_forward, .matmul_forward_act = bf_matmul_forward_act,                                  \
    .matmul_forward_add = bf_matmul_forward_add, .matmul_backward = bf_matmul_backward,                                \
    .matmul_backward_act = bf_matmul_backward_act, .head_forward = bf_head_forward, .head_backward = bf_head_backward, \
    .bias_add = bf_bias_add, .bias_backward = bf_bias_backward, .rope_split_forward = bf_rope_split,                   \
    .rope_join_backward = bf_rope_join, .attention_select = bf_select, .swiglu_forward = bf_swiglu_forward,            \
    .swiglu_backward = bf_swiglu_backward, .residual_add = residual_add_cuda, DECODER_PASS_KERNEL_OPS(cuda),           \
    DEVICE_MEMORY_OPS

/* bf16 weights and activations, attention on the fp32 CUDA-core kernels
 * (reading bf16): head dims the tensor-core kernels do not take */
const DecoderOps decoder_cuda_bf16_ops = {
    BF16_OPS_BUT_ATTENTION,
    .attention_forward = bf_attention_forward,
    .attention_backward = bf_attention_backward,
};

/* The same with attention on tensor cores (kernels/attention_mma.h), for
 * head dims the mma kernels take (16, 32, 64, 128: every Llama 3). */
const DecoderOps decoder_cuda_bf16_mma_ops = {
    BF16_OPS_BUT_ATTENTION,
    .attention_forward = bf_attention_forward_mma,
    .attention_backward = bf_attention_backward_mma,
};

/* The same with cuDNN's fused attention (kernels/attention_cudnn.h), only
 * when named (attn cudnn). */
const DecoderOps decoder_cuda_bf16_cudnn_ops = {
    BF16_OPS_BUT_ATTENTION,
    .attention_forward = bf_attention_forward_cudnn,
    .attention_backward = bf_attention_backward_cudnn,
};

const DecoderOps *decoder_cuda_ops_for(DecoderCudaPrecision precision, DecoderAttnImpl attn) {
    KV_CHECK(attn != DECODER_ATTN_AUTO, "decoder_cuda_ops_for: resolve the attention implementation first");
    if (precision != DECODER_CUDA_BF16_WEIGHTS) return &decoder_cuda_ops;
    return attn == DECODER_ATTN_MMA     ? &decoder_cuda_bf16_mma_ops
           : attn == DECODER_ATTN_CUDNN ? &decoder_cuda_bf16_cudnn_ops
                                        : &decoder_cuda_bf16_ops;
}

void decoder_cuda_set_attn(DecoderCuda *g, DecoderAttnImpl requested, const char *what) {
    g->attn = decoder_attn_impl_resolve(requested, what, g->precision == DECODER_CUDA_BF16_WEIGHTS, g->cfg.head_dim);
    g->pass.ops = decoder_cuda_ops_for(g->precision, g->attn);
}

static const DecoderPassModel *pass_of(const DecoderCuda *g) {
    return decoder_pass_checked(&g->pass, &g->cfg, "decoder_cuda");
}

static float forward(DecoderCuda *g, const int32_t *tokens, const int32_t *targets, int64_t B, int64_t T,
                     DecoderForwardMode mode) {
    const DecoderPassModel *pm = pass_of(g);
    decoder_check_inputs(&g->cfg, &g->mask, tokens, targets, B, T);
    KV_CHECK(!g->streamed || pm->hooks.params_needed, "decoder_cuda_forward: a streamed engine needs unit hooks");
    ensure_acts(g, B, T);
    bind_attn_scratch(g);
    g->bytes_fixed += decoder_pass_ensure_rope(pm->ops, &g->cfg, &g->state, T);
    return decoder_pass_forward(pm, &g->state, tokens, targets, mode);
}

float decoder_cuda_forward(DecoderCuda *g, const int32_t *tokens, const int32_t *targets, int64_t B, int64_t T) {
    return forward(g, tokens, targets, B, T, DECODER_FORWARD_LOSS);
}

float decoder_cuda_forward_train(DecoderCuda *g, const int32_t *tokens, const int32_t *targets, int64_t B, int64_t T) {
    return forward(g, tokens, targets, B, T, DECODER_FORWARD_TRAIN);
}

void decoder_cuda_logits(DecoderCuda *g, float *out, int64_t row0, int64_t rows) {
    DecoderPassState *s = &g->state;
    decoder_pass_check_rows(s, row0, rows, "decoder_cuda_logits");
    const DecoderPassModel *pm = pass_of(g);
    int64_t V = g->cfg.vocab_size, n_max = decoder_pass_ce_rows(pm);
    /* into the backward's logits chunk, so the dxf a training forward left
     * for the next backward (decoder_cuda_forward_train) stays */
    DecoderBackwardBufs b = decoder_pass_bufs(pm, s);
    for (int64_t r0 = 0; r0 < rows; r0 += n_max) {
        int64_t n = rows - r0 < n_max ? rows - r0 : n_max;
        decoder_pass_logits_rows(pm, s, b.logits, row0 + r0, n);
        cuda_memcpy_d2h(out + r0 * V, b.logits, sizeof(float) * (size_t)(n * V));
    }
}

void decoder_cuda_backward(DecoderCuda *g) {
    const DecoderPassModel *pm = pass_of(g);
    bind_attn_scratch(g);
    decoder_pass_backward(pm, &g->state);
}
