#ifndef KVCPT_PARAMS_H
#define KVCPT_PARAMS_H
/* The flat parameter layout: every tensor with its Hugging Face name and
 * shape, at a 64-bit offset in one contiguous buffer. Each layer's tensors
 * are contiguous so that a layer is one range (what sharding all-gathers).
 * Order: embed_tokens, layers 0..N-1 (input_layernorm, q, k, v, then q, k
 * and v's biases when the family has them (model/arch.h), o,
 * post_attention_layernorm, gate, up, down), norm, lm_head (untied only).
 * q, k, v's weights are consecutive, and so are their biases: the engines
 * run each three as one ((Hq + 2 Hkv) D, ...) tensor. */
#include <stdint.h>

#include "config.h"

typedef enum {
    PT_EMBED,
    PT_ATTN_NORM,
    PT_WQ,
    PT_WK,
    PT_WV,
    PT_WO,
    PT_MLP_NORM,
    PT_WGATE,
    PT_WUP,
    PT_WDOWN,
    PT_FINAL_NORM,
    PT_LM_HEAD,
    PT_BQ,
    PT_BK,
    PT_BV
} ParamKind;

typedef struct {
    char name[96];      /* e.g. "model.layers.3.self_attn.q_proj.weight" */
    ParamKind kind;
    int layer;          /* -1 for embed / final norm / lm_head */
    int ndim;
    int64_t shape[2];   /* HF (out_features, in_features) for linear weights */
    int64_t numel;
    int64_t offset;     /* in elements from the start of the flat buffer */
} ParamTensor;

typedef struct {
    ParamTensor *t;
    int n;
    int64_t total;          /* elements */
    int64_t layer_begin0;   /* offset of layer 0's first tensor */
    int64_t layer_numel;    /* elements per layer */
} ParamLayout;

void param_layout_build(ParamLayout *pl, const DecoderConfig *c);
void param_layout_free(ParamLayout *pl);
/* Index of the tensor named `name`, or -1. */
int param_layout_find(const ParamLayout *pl, const char *name);
/* Index of the tensor holding flat offset x (0 <= x < total). */
int param_layout_tensor_at(const ParamLayout *pl, int64_t x);

#endif
