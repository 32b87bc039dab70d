/* The CUDA engine's device sizes and packing (model/decoder_cuda_size.h),
 * built in every build: the memory plan and `kvcpt plan` size a GPU run
 * without CUDA. */
#include "decoder_cuda_size.h"

#include <string.h>

#include "../common/util.h"
#include "../kernels/attention_cudnn_size.h"

DecoderCudaPrecision decoder_cuda_precision_parse(const char *s, const char *what) {
    if (strcmp(s, "fp32") == 0) return DECODER_CUDA_FP32;
    if (strcmp(s, "bf16") == 0) return DECODER_CUDA_BF16_WEIGHTS;
    die("%s: precision must be 'fp32' or 'bf16' (got '%s')", what, s);
}

const char *decoder_cuda_precision_name(DecoderCudaPrecision p) {
    return p == DECODER_CUDA_BF16_WEIGHTS ? "bf16" : "fp32";
}

int decoder_cuda_stays_fp32(const ParamTensor *t) {
    return t->kind == PT_EMBED || t->kind == PT_ATTN_NORM || t->kind == PT_MLP_NORM || t->kind == PT_FINAL_NORM ||
           t->kind == PT_BQ || t->kind == PT_BK || t->kind == PT_BV;
}

int64_t decoder_cuda_align_elems(int64_t n) { return (n + 127) / 128 * 128; }

int decoder_cuda_continues_fused(const ParamTensor *t) {
    return t->kind == PT_WK || t->kind == PT_WV || t->kind == PT_WUP || t->kind == PT_BK || t->kind == PT_BV;
}

/* Where tensor t goes in a packed buffer whose fill is *n: its offset, and
 * *n moves past it. */
static int64_t pack_place(int64_t *n, const ParamTensor *t) {
    if (!decoder_cuda_continues_fused(t)) *n = decoder_cuda_align_elems(*n);
    int64_t off = *n;
    *n += t->numel;
    return off;
}

int64_t decoder_cuda_pack_bf16(const ParamLayout *L, const DecoderConfig *c, int64_t *dev_offset, int64_t *n32,
                               int64_t *n16) {
    *n32 = 0, *n16 = 0;
    for (int i = 0; i < L->n; i++) {
        int64_t off = pack_place(decoder_cuda_stays_fp32(&L->t[i]) ? n32 : n16, &L->t[i]);
        if (dev_offset) dev_offset[i] = off;
    }
    int64_t head = -1;
    if (c->tie_word_embeddings)
        *n16 = decoder_cuda_align_elems(*n16), head = *n16, *n16 += c->vocab_size * c->hidden_size;
    *n32 = decoder_cuda_align_elems(*n32), *n16 = decoder_cuda_align_elems(*n16);
    return head;
}

DecoderCudaFixedBytes decoder_cuda_fixed_bytes(const ParamLayout *L, const DecoderConfig *c, DecoderCudaPrecision p) {
    DecoderCudaFixedBytes b = {(int64_t)sizeof(float) * L->total, 0, (int64_t)sizeof(float) * L->total};
    if (p == DECODER_CUDA_BF16_WEIGHTS) {
        int64_t n32, n16;
        decoder_cuda_pack_bf16(L, c, NULL, &n32, &n16);
        b.params = (int64_t)sizeof(float) * n32, b.wbf16 = (int64_t)sizeof(bf16) * n16;
    }
    return b;
}

static int is_layer_tensor(const ParamTensor *t) { return t->layer >= 0; }

DecoderCudaStreamPack decoder_cuda_stream_pack(const ParamLayout *L, const DecoderConfig *c, DecoderCudaPrecision p,
                                               int64_t *res_off, int64_t *slot_off) {
    DecoderCudaStreamPack z = {0};
    int bf = p == DECODER_CUDA_BF16_WEIGHTS;
    int64_t tail_begin = L->layer_begin0 + c->num_hidden_layers * L->layer_numel, embed_n = 0;
    for (int i = 0; i < L->n; i++)
        if (L->t[i].kind == PT_EMBED) embed_n = L->t[i].numel;
    for (int i = 0; i < L->n; i++) {
        const ParamTensor *t = &L->t[i];
        if (is_layer_tensor(t)) {
            if (t->layer != 0) continue;
            int64_t off;
            if (!bf) off = t->offset - L->layer_begin0, z.slot32 = L->layer_numel;
            else off = pack_place(decoder_cuda_stays_fp32(t) ? &z.slot32 : &z.slot16, t);
            if (slot_off) slot_off[z.layer_tensors] = off;
            z.layer_tensors++;
            continue;
        }
        int64_t off;
        if (!bf) off = t->kind == PT_EMBED ? 0 : embed_n + (t->offset - tail_begin);
        else off = pack_place(decoder_cuda_stays_fp32(t) ? &z.res32 : &z.res16, t);
        if (res_off) res_off[i] = off;
    }
    z.res_grads = embed_n + (L->total - tail_begin);
    if (!bf) z.res32 = z.res_grads;
    if (bf) {
        if (c->tie_word_embeddings)
            z.res16 = decoder_cuda_align_elems(z.res16) + c->vocab_size * c->hidden_size; /* the head's copy */
        z.res32 = decoder_cuda_align_elems(z.res32), z.res16 = decoder_cuda_align_elems(z.res16);
        z.slot32 = decoder_cuda_align_elems(z.slot32), z.slot16 = decoder_cuda_align_elems(z.slot16);
    }
    return z;
}

DecoderCudaFixedBytes decoder_cuda_streamed_bytes(const ParamLayout *L, const DecoderConfig *c,
                                                  DecoderCudaPrecision p) {
    DecoderCudaStreamPack z = decoder_cuda_stream_pack(L, c, p, NULL, NULL);
    return (DecoderCudaFixedBytes){(int64_t)sizeof(float) * (z.res32 + DECODER_CUDA_SLOTS * z.slot32),
                                   (int64_t)sizeof(bf16) * (z.res16 + DECODER_CUDA_SLOTS * z.slot16),
                                   (int64_t)sizeof(float) * (z.res_grads + L->layer_numel)};
}

int64_t decoder_cuda_rope_bytes(const DecoderConfig *c, int64_t T) {
    return (int64_t)sizeof(float) * 2 * T * (c->head_dim / 2);
}

int decoder_cuda_act_size(DecoderCudaPrecision p) {
    return p == DECODER_CUDA_BF16_WEIGHTS ? (int)sizeof(bf16) : (int)sizeof(float);
}

static int64_t mul_checked(int64_t a, int64_t b, const char *what) {
    int64_t r;
    KV_CHECK(!__builtin_mul_overflow(a, b, &r), "decoder_cuda: %s overflows 64 bits (%lld x %lld)", what, (long long)a,
             (long long)b);
    return r;
}

/* One layer's selection: B * Hkv * refresh_sel_len entries under an active
 * mask (the per-row records of evict and restride can far outgrow T), never
 * fewer than B * T * Hkv. */
static int64_t sel_bytes(const DecoderConfig *c, int64_t B, int64_t T, const RefreshMask *mask) {
    int64_t per = T;
    if (mask && refresh_active(mask, T)) {
        int64_t n = refresh_sel_len(mask, T);
        if (n > per) per = n;
    }
    int64_t n = mul_checked(mul_checked(B, c->num_key_value_heads, "the selection's rows"), per, "the selection");
    return mul_checked(n, (int64_t)sizeof(int32_t), "the selection's bytes");
}

DecoderCudaActBytes decoder_cuda_act_bytes(const DecoderConfig *c, DecoderRecompute recompute, DecoderCudaPrecision p,
                                           int64_t B, int64_t T, const RefreshMask *mask) {
    decoder_recompute_check(recompute, "decoder_cuda_act_bytes");
    int64_t C = c->hidden_size, nl = c->num_hidden_layers, BT = B * T;
    int act = decoder_cuda_act_size(p);
    int attn = recompute == DECODER_RECOMPUTE_ATTN;
    int64_t kept = decoder_layer_acts_part_numel(c, BT, act, attn ? LAYER_ACTS_KEPT : LAYER_ACTS_ALL);
    return (DecoderCudaActBytes){
        .sets = recompute == DECODER_RECOMPUTE_FULL ? 1 : nl,
        .layer_set = mul_checked((int64_t)sizeof(float), kept, "a layer's activation set"),
        .shared_set =
            attn ? mul_checked((int64_t)sizeof(float), decoder_layer_acts_part_numel(c, BT, act, LAYER_ACTS_REBUILT),
                               "the shared rebuilt activations")
                 : 0,
        .sel = sel_bytes(c, B, T, mask),
        .resid = (int64_t)sizeof(float) * (nl + 1) * BT * C,
        .tokens = (int64_t)sizeof(int32_t) * 2 * BT,
        .xf = (int64_t)sizeof(float) * BT * (C + 3),
        .scratch = (int64_t)sizeof(float) * decoder_scratch_numel_rows(c, BT, act, DECODER_CUDA_CE_CHUNK_ROWS),
    };
}

int64_t decoder_cuda_act_total(const DecoderConfig *c, const DecoderCudaActBytes *ab) {
    int64_t sets = mul_checked(ab->sets, ab->layer_set, "the layers' activation sets");
    int64_t sel = mul_checked(c->num_hidden_layers, ab->sel, "the layers' selections");
    int64_t parts[] = {sets, ab->shared_set, sel, ab->resid, ab->tokens, ab->xf, ab->scratch}, total = 0;
    for (int i = 0; i < (int)(sizeof parts / sizeof parts[0]); i++)
        KV_CHECK(!__builtin_add_overflow(total, parts[i], &total),
                 "decoder_cuda: the activation bytes overflow 64 bits");
    return total;
}

int64_t decoder_cuda_attn_scratch_bytes(const DecoderConfig *c, DecoderCudaPrecision p, DecoderAttnImpl attn, int64_t B,
                                        int64_t T, const RefreshMask *mask) {
    if (attn != DECODER_ATTN_CUDNN || p != DECODER_CUDA_BF16_WEIGHTS) return 0;
    return attention_cudnn_scratch_layout(mask, B, T, c->num_attention_heads, c->num_key_value_heads, c->head_dim)
        .bytes;
}
