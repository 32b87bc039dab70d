#ifndef KVCPT_DECODER_LAYER_H
#define KVCPT_DECODER_LAYER_H
/* One decoder layer's forward and backward, written once for both engines:
 * the CPU reference (model/decoder.c) passes its _cpu ops, the CUDA engine
 * (model/decoder_cuda.c) their _cuda twins, which take the same arguments
 * (device pointers). The op order is the model's definition; the pass
 * around the layers is written once too (model/decoder_pass.h), and each
 * engine only owns its buffers. */
#include <stdint.h>

#include "decoder_buffers.h"

/* An engine's ops. Buffers marked ACT hold the engine's activation type
 * (LayerActs): float on the CPU and in the fp32 engine, bf16 in the bf16
 * engine, whose ops take them as float pointers to bf16 data (the layer
 * code is written once, and only the ops read them). Unmarked buffers are
 * fp32 everywhere. Every output is overwritten unless it says +=. */
typedef struct {
    /* out ACT; rstd (N) */
    void (*rmsnorm_forward)(float *out, float *rstd, const float *inp, const float *weight, int64_t N, int64_t C,
                            float eps);
    /* dinp += (the residual stream's gradient); dweight += */
    void (*rmsnorm_backward)(float *dinp, float *dweight, const float *dout, const float *inp, const float *weight,
                             const float *rstd, int64_t N, int64_t C);
    /* inp ACT -> out fp32 (what a residual add follows) */
    void (*matmul_forward)(float *out, const float *inp, const float *weight, int64_t N, int64_t IC, int64_t OC);
    /* inp ACT -> out ACT */
    void (*matmul_forward_act)(float *out, const float *inp, const float *weight, int64_t N, int64_t IC, int64_t OC);
    /* out = inp W^T + add (fp32, add (N, OC), out may be add): matmul_forward
     * with the residual add in the product's epilogue; NULL: the two ops */
    void (*matmul_forward_add)(float *out, const float *add, const float *inp, const float *weight, int64_t N,
                               int64_t IC, int64_t OC);
    /* dout ACT, inp ACT -> dinp fp32; dweight += */
    void (*matmul_backward)(float *dinp, float *dweight, const float *dout, const float *inp, const float *weight,
                            int64_t N, int64_t IC, int64_t OC);
    /* dout fp32, inp ACT -> dinp ACT; dweight += */
    void (*matmul_backward_act)(float *dinp, float *dweight, const float *dout, const float *inp, const float *weight,
                                int64_t N, int64_t IC, int64_t OC);
    /* fp32 activations on both sides, whatever the engine's ACT type: the
     * lm_head over the final norm's output (fp32 in every engine) */
    void (*head_forward)(float *out, const float *inp, const float *weight, int64_t N, int64_t IC, int64_t OC);
    void (*head_backward)(float *dinp, float *dweight, const float *dout, const float *inp, const float *weight,
                          int64_t N, int64_t IC, int64_t OC);
    /* out ACT (N, OC) += bias (OC, fp32) on every row: the q/k/v biases
     * (kernels/bias.h); unused by a family without them */
    void (*bias_add)(float *out, const float *bias, int64_t N, int64_t OC);
    /* dout ACT (N, OC) -> dbias (OC, fp32) += its column sums */
    void (*bias_backward)(float *dbias, const float *dout, int64_t N, int64_t OC);
    /* qkv ACT (rows [q | k | v]) -> q, k rotated, v: ACT (rope_split_forward_cpu) */
    void (*rope_split_forward)(float *q, float *k, float *v, const float *qkv, const float *cos_t, const float *sin_t,
                               int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t D);
    /* dq, dk, dv fp32 -> dqkv ACT */
    void (*rope_join_backward)(float *dqkv, const float *dq, const float *dk, const float *dv, const float *cos_t,
                               const float *sin_t, int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t D);
    /* q, k ACT */
    void (*attention_select)(int32_t *sel, const float *q, const float *k, int64_t B, int64_t T, int64_t Hq,
                             int64_t Hkv, int64_t D, const RefreshMask *m);
    /* q, k, v, out ACT; lse fp32 */
    void (*attention_forward)(float *out, float *lse, const float *q, const float *k, const float *v,
                              const int32_t *sel, int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t D,
                              const RefreshMask *m);
    /* attention_forward of one causal sequence that also writes the
     * evaluator's prefill statistics (kernels/attention.h); NULL in the
     * engines that have none (only the fp32 CPU one does) */
    void (*attention_forward_stats)(float *out, float *lse, const AttentionStats *st, const float *q, const float *k,
                                    const float *v, int64_t T, int64_t Hq, int64_t Hkv, int64_t D);
    /* dout, q, k, v, out ACT -> dq, dk, dv fp32 */
    void (*attention_backward)(float *dq, float *dk, float *dv, const float *dout, const float *q, const float *k,
                               const float *v, const float *out, const float *lse, const int32_t *sel, int64_t B,
                               int64_t T, int64_t Hq, int64_t Hkv, int64_t D, const RefreshMask *m);
    /* gu ACT (rows [gate | up], N x 2F) -> h ACT (N x F) */
    void (*swiglu_forward)(float *h, const float *gu, int64_t N, int64_t F);
    /* dh, gu ACT -> dgu ACT */
    void (*swiglu_backward)(float *dgu, const float *dh, const float *gu, int64_t N, int64_t F);
    /* y += x, fp32 */
    void (*residual_add)(float *y, const float *x, int64_t n);

    /* What the whole-model pass (model/decoder_pass.h) adds around the layers.
     * The final norm's output is fp32 in every engine (the lm_head reads it
     * through head_forward); its backward is rmsnorm_backward. */
    void (*final_norm_forward)(float *out, float *rstd, const float *inp, const float *weight, int64_t N, int64_t C,
                               float eps);
    /* out (N, C) = rows tokens of the fp32 table */
    void (*embedding_forward)(float *out, const int32_t *tokens, const float *table, int64_t N, int64_t C);
    /* dtable += scatter of dout's rows by token */
    void (*embedding_backward)(float *dtable, const float *dout, const int32_t *tokens, int64_t N, int64_t C);
    /* losses (N): -log softmax(logits)[target], 0 where target < 0; lse (N) */
    void (*crossentropy_forward)(float *losses, float *lse, const float *logits, const int32_t *targets, int64_t N,
                                 int64_t V);
    /* logits (N, V) -> scale * d(loss)/d(logits), in place */
    void (*crossentropy_backward)(float *logits, const float *lse, const int32_t *targets, int64_t N, int64_t V,
                                  float scale);
    /* both in turn, logits overwritten: the same results, one pass */
    void (*crossentropy_forward_backward)(float *losses, float *lse, float *logits, const int32_t *targets, int64_t N,
                                          int64_t V, float scale);
    /* x[0, n) = 0 */
    void (*zero)(float *x, int64_t n);
    /* Engine memory: allocate (dies when it cannot), free, and copy from
     * and to host memory. */
    void *(*alloc)(size_t bytes);
    void (*release)(void *p);
    void (*copy_to_engine)(void *dst, const void *host_src, size_t bytes);
    void (*copy_to_host)(void *host_dst, const void *src, size_t bytes);
} DecoderOps;

/* The entries an engine takes straight from its fp32 kernel family: the
 * kernels named <op>_<backend> (the kernels/ headers; backend cpu or
 * cuda), which take the same arguments on every backend. */
#define DECODER_LAYER_KERNEL_OPS(backend)                                                                              \
    .rmsnorm_forward = rmsnorm_forward_##backend, .rmsnorm_backward = rmsnorm_backward_##backend,                      \
    .matmul_forward = matmul_forward_##backend, .matmul_forward_act = matmul_forward_##backend,                        \
    .matmul_backward = matmul_backward_##backend, .matmul_backward_act = matmul_backward_##backend,                    \
    .head_forward = matmul_forward_##backend, .head_backward = matmul_backward_##backend,                              \
    .bias_add = bias_add_##backend, .bias_backward = bias_backward_##backend,                                          \
    .rope_split_forward = rope_split_forward_##backend, .rope_join_backward = rope_join_backward_##backend,            \
    .attention_select = attention_refresh_select_##backend, .attention_forward = attention_forward_##backend,          \
    .attention_backward = attention_backward_##backend, .swiglu_forward = swiglu_fused_forward_##backend,              \
    .swiglu_backward = swiglu_fused_backward_##backend, .residual_add = residual_add_##backend
/* The same for the pass around the layers, fp32 in every precision. */
#define DECODER_PASS_KERNEL_OPS(backend)                                                                               \
    .final_norm_forward = rmsnorm_forward_##backend, .embedding_forward = embedding_forward_##backend,                 \
    .embedding_backward = embedding_backward_##backend, .crossentropy_forward = crossentropy_forward_##backend,        \
    .crossentropy_backward = crossentropy_backward_##backend,                                                          \
    .crossentropy_forward_backward = crossentropy_forward_backward_##backend
/* The CPU reference's ops (model/decoder.c): fp32, sgemm products; the
 * evaluator's prefill runs its layers with them too. */
extern const DecoderOps decoder_cpu_ops;

/* What every layer of one pass shares. */
typedef struct {
    const DecoderOps *ops;
    const DecoderConfig *cfg;
    const RefreshMask *mask;
    const float *rope_cos, *rope_sin;
    int64_t B, T;
    /* non-NULL: this layer's attention also writes these statistics
     * (ops->attention_forward_stats; B = 1, mask off) */
    const AttentionStats *stats;
    /* non-NULL: the attention is this hook's, not attention_select and
     * attention_forward's. The evaluator's decode step (T = 1, one row per
     * document, eval/engine.c) attends over each document's KV cache with
     * it: it reads a's q and k (rotated), v and qkv (the pre-RoPE rows) and
     * writes a->att; the rest of the layer is the model's. */
    void (*attend)(void *ctx, LayerActs *a);
    void *attend_ctx;
} LayerPass;

/* x -> out, saving a's activations. select: compute sel (B, Hkv, K) when the
 * mask is active, else reuse it. out NULL (a recompute) stops before the
 * down projection: the backward does not need it. */
void decoder_layer_forward(const LayerPass *p, const LayerTensors *w, LayerActs *a, int32_t *sel, const float *x,
                           float *out, int select);
/* Its two halves, which the recompute settings (model/recompute.h) rerun
 * apart. The attention half: x -> a's xn1 ... att, lse and x2 (the
 * residual stream after attention), the same select. The MLP half: a->x2
 * -> xn2, gu, h and out (out NULL: stops at h, the down projection's
 * input). */
void decoder_layer_forward_attn(const LayerPass *p, const LayerTensors *w, LayerActs *a, int32_t *sel, const float *x,
                                int select);
void decoder_layer_forward_mlp(const LayerPass *p, const LayerTensors *w, LayerActs *a, float *out);
/* The attention half's first op alone: x -> a->xn1, a->rstd1. */
void decoder_layer_attn_norm(const LayerPass *p, const LayerTensors *w, LayerActs *a, const float *x);
/* On entry g->dres = dLoss/d(layer output); on exit dLoss/d(layer input);
 * dw += the layer's parameter gradients. */
void decoder_layer_backward(const LayerPass *p, const LayerTensors *w, LayerTensors *dw, const LayerActs *a,
                            const int32_t *sel, const float *x, DecoderBackwardBufs *g);
#endif
