#ifndef KVCPT_LLAMA_LAYER_H
#define KVCPT_LLAMA_LAYER_H
/* One decoder layer's forward and backward, written once for both engines:
 * the CPU reference (model/llama.c) passes its _cpu ops, the CUDA engine
 * (model/llama_cuda.c) their _cuda twins, which take the same arguments
 * (device pointers). The op order is the model's definition; each engine
 * only owns its buffers and the passes around the layers. */
#include <stdint.h>

#include "llama.h"

typedef struct {
    void (*rmsnorm_forward)(float *out, float *rstd, const float *inp, const float *weight, int64_t N, int64_t C,
                            float eps);
    void (*rmsnorm_backward)(float *dinp, float *dweight, const float *dout, const float *inp, const float *weight,
                             const float *rstd, int64_t N, int64_t C);
    void (*matmul_forward)(float *out, const float *inp, const float *weight, int64_t N, int64_t IC, int64_t OC);
    void (*matmul_backward)(float *dinp, float *dweight, const float *dout, const float *inp, const float *weight,
                            int64_t N, int64_t IC, int64_t OC);
    void (*rope_forward)(float *x, const float *cos_t, const float *sin_t, int64_t B, int64_t T, int64_t H, int64_t D);
    void (*rope_backward)(float *dx, const float *cos_t, const float *sin_t, int64_t B, int64_t T, int64_t H,
                          int64_t D);
    void (*attention_select)(int32_t *sel, const float *q, const float *k, int64_t B, int64_t T, int64_t Hq,
                             int64_t Hkv, int64_t D, const RefreshMask *m);
    void (*attention_forward)(float *out, float *lse, const float *q, const float *k, const float *v,
                              const int32_t *sel, int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t D,
                              const RefreshMask *m);
    void (*attention_backward)(float *dq, float *dk, float *dv, const float *dout, const float *q, const float *k,
                               const float *v, const float *out, const float *lse, const int32_t *sel, int64_t B,
                               int64_t T, int64_t Hq, int64_t Hkv, int64_t D, const RefreshMask *m);
    void (*swiglu_forward)(float *h, const float *g, const float *u, int64_t n);
    void (*swiglu_backward)(float *dg, float *du, const float *dh, const float *g, const float *u, int64_t n);
    void (*residual_add)(float *y, const float *x, int64_t n);
    void (*zero)(float *x, int64_t n);
} LlamaOps;

/* What every layer of one pass shares. */
typedef struct {
    const LlamaOps *ops;
    const LlamaConfig *cfg;
    const RefreshMask *mask;
    const float *rope_cos, *rope_sin;
    int64_t B, T;
} LayerPass;

/* x -> out, saving a's activations. select: compute sel (B, Hkv, K) when the
 * mask is active, else reuse it. out NULL (a recompute) stops before the
 * down projection: the backward does not need it. */
void llama_layer_forward(const LayerPass *p, const LayerTensors *w, LayerActs *a, int32_t *sel, const float *x,
                         float *out, int select);
/* On entry g->dres = dLoss/d(layer output); on exit dLoss/d(layer input);
 * dw += the layer's parameter gradients. */
void llama_layer_backward(const LayerPass *p, const LayerTensors *w, LayerTensors *dw, const LayerActs *a,
                          const int32_t *sel, const float *x, LlamaBackwardBufs *g);
#endif
