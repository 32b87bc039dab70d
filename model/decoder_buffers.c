#include "decoder_buffers.h"

#include "../common/redzone.h"
#include "../common/util.h"

float **decoder_tensor_slot(ModelTensors *w, const ParamTensor *t) {
    LayerTensors *L = t->layer >= 0 ? &w->layers[t->layer] : NULL;
    switch (t->kind) {
        case PT_EMBED: return &w->embed;
        case PT_FINAL_NORM: return &w->final_norm;
        case PT_LM_HEAD: return &w->lm_head;
        case PT_ATTN_NORM: return &L->attn_norm;
        case PT_WQ: return &L->wq;
        case PT_WK: return &L->wk;
        case PT_WV: return &L->wv;
        case PT_WO: return &L->wo;
        case PT_MLP_NORM: return &L->mlp_norm;
        case PT_WGATE: return &L->wgate;
        case PT_WUP: return &L->wup;
        case PT_WDOWN: return &L->wdown;
        case PT_BQ: return &L->bq;
        case PT_BK: return &L->bk;
        case PT_BV: return &L->bv;
    }
    die("llama: tensor '%s' has an unknown kind %d", t->name, (int)t->kind);
}

void decoder_bind_tensors(ModelTensors *w, const DecoderConfig *c, const ParamLayout *layout, float *base) {
    w->layers = xcalloc((size_t)c->num_hidden_layers, sizeof(LayerTensors));
    for (int i = 0; i < layout->n; i++) *decoder_tensor_slot(w, &layout->t[i]) = base + layout->t[i].offset;
    if (c->tie_word_embeddings) w->lm_head = w->embed;
}

/* Carves consecutive arrays out of one allocation: each starts 256 bytes
 * aligned (what cuBLASLt and the tensor-core kernels' vector loads like) and
 * is followed by a red zone in the emulator's sanitizer build
 * (common/redzone.h). With base NULL nothing is carved and off counts the
 * floats needed, so one list of takes gives both the size and the layout. */
typedef struct {
    float *base;
    int64_t off; /* floats */
} Carver;

static int64_t align_floats(int64_t n) { return (n + 63) / 64 * 64; }

static float *carve_elems(Carver *k, int64_t n, int elem_size) {
    float *p = k->base ? k->base + k->off : NULL;
    k->off += align_floats((n * elem_size + 3) / 4);
    if (k->base) REDZONE_POISON(k->base + k->off, sizeof(float) * REDZONE_FLOATS);
    k->off += REDZONE_FLOATS;
    return p;
}

static float *take(Carver *k, int64_t n) { return carve_elems(k, n, (int)sizeof(float)); }

static void check_act_size(int act_size) {
    KV_CHECK(act_size == 4 || act_size == 2, "llama: activation element size %d (4 or 2 bytes)", act_size);
}

/* What recompute=attn rebuilds in the backward first (so a whole set
 * starts with xn1, as the engines that free it by xn1 expect), then what it
 * keeps per layer: the whole set is the two parts one after the other. */
static void layer_acts_layout(LayerActs *a, const DecoderConfig *c, int64_t BT, int act, LayerActsPart part,
                              Carver *k) {
    int64_t C = c->hidden_size, F = c->intermediate_size, Hq = c->num_attention_heads;
    int64_t QD = Hq * c->head_dim, KD = c->num_key_value_heads * c->head_dim;
    check_act_size(act);
    KV_CHECK(part == LAYER_ACTS_ALL || part == LAYER_ACTS_KEPT || part == LAYER_ACTS_REBUILT,
             "llama: unknown activation set part %d", (int)part);
    if (part != LAYER_ACTS_KEPT) {
        a->xn1 = carve_elems(k, BT * C, act), a->rstd1 = take(k, BT);
        a->qkv = carve_elems(k, BT * (QD + 2 * KD), act), a->xn2 = carve_elems(k, BT * C, act);
        a->rstd2 = take(k, BT), a->gu = carve_elems(k, BT * 2 * F, act), a->h = carve_elems(k, BT * F, act);
    }
    if (part != LAYER_ACTS_REBUILT) {
        a->q = carve_elems(k, BT * QD, act);
        a->k = carve_elems(k, BT * KD, act), a->v = carve_elems(k, BT * KD, act), a->att = carve_elems(k, BT * QD, act);
        a->lse = take(k, BT * Hq), a->x2 = take(k, BT * C);
    }
}

int64_t decoder_layer_acts_part_numel(const DecoderConfig *c, int64_t BT, int act_size, LayerActsPart part) {
    LayerActs a;
    Carver k = {NULL, 0};
    layer_acts_layout(&a, c, BT, act_size, part, &k);
    return k.off;
}

void decoder_layer_acts_carve_part(LayerActs *a, const DecoderConfig *c, int64_t BT, int act_size, LayerActsPart part,
                                   float *base) {
    Carver k = {base, 0};
    layer_acts_layout(a, c, BT, act_size, part, &k);
}

int64_t decoder_layer_acts_numel(const DecoderConfig *c, int64_t BT, int act_size) {
    return decoder_layer_acts_part_numel(c, BT, act_size, LAYER_ACTS_ALL);
}

void decoder_layer_acts_carve(LayerActs *a, const DecoderConfig *c, int64_t BT, int act_size, float *base) {
    decoder_layer_acts_carve_part(a, c, BT, act_size, LAYER_ACTS_ALL, base);
}

static DecoderBackwardBufs backward_bufs_layout(const DecoderConfig *c, int64_t BT, int act, int64_t ce_rows,
                                                Carver *k) {
    int64_t C = c->hidden_size, F = c->intermediate_size;
    int64_t QD = c->num_attention_heads * c->head_dim, KD = c->num_key_value_heads * c->head_dim;
    KV_CHECK(ce_rows >= 1, "llama: %lld rows per logits chunk", (long long)ce_rows);
    int64_t chunk = BT < ce_rows ? BT : ce_rows;
    check_act_size(act);
    DecoderBackwardBufs g;
    g.dres = take(k, BT * C), g.dxn = take(k, BT * C), g.dxf = take(k, BT * C);
    g.dq = take(k, BT * QD), g.dk = take(k, BT * KD), g.dv = take(k, BT * KD);
    g.datt = carve_elems(k, BT * QD, act), g.dqkv = carve_elems(k, BT * (QD + 2 * KD), act);
    g.dh = carve_elems(k, BT * F, act), g.dgu = carve_elems(k, BT * 2 * F, act);
    g.logits = take(k, chunk * c->vocab_size);
    return g;
}

int64_t decoder_scratch_numel_rows(const DecoderConfig *c, int64_t BT, int act_size, int64_t ce_rows) {
    Carver k = {NULL, 0};
    (void)backward_bufs_layout(c, BT, act_size, ce_rows, &k);
    return k.off;
}

DecoderBackwardBufs decoder_backward_bufs_carve_rows(const DecoderConfig *c, int64_t BT, int act_size, int64_t ce_rows,
                                                     float *scratch) {
    Carver k = {scratch, 0};
    return backward_bufs_layout(c, BT, act_size, ce_rows, &k);
}

int64_t decoder_scratch_numel(const DecoderConfig *c, int64_t BT, int act_size) {
    return decoder_scratch_numel_rows(c, BT, act_size, DECODER_CE_CHUNK_ROWS);
}

void decoder_check_inputs(const DecoderConfig *c, const RefreshMask *mask, const int32_t *tokens,
                          const int32_t *targets, int64_t B, int64_t T) {
    KV_CHECK(B >= 1 && T >= 1, "forward: batch %lld x sequence %lld must be positive", (long long)B, (long long)T);
    if (mask->enabled)
        KV_CHECK(T == mask->L + mask->S,
                 "forward: with the RefreshKV mask the sequence length must be L + S = %lld + %lld (got %lld)",
                 (long long)mask->L, (long long)mask->S, (long long)T);
    for (int64_t i = 0; i < B * T; i++) {
        KV_CHECK(tokens[i] >= 0 && tokens[i] < c->vocab_size, "forward: token %d at position %lld is outside [0, %lld)",
                 tokens[i], (long long)i, (long long)c->vocab_size);
        KV_CHECK(!targets || targets[i] < c->vocab_size, "forward: target %d at position %lld is >= vocab_size %lld",
                 targets[i], (long long)i, (long long)c->vocab_size);
    }
}
