#ifndef KVCPT_DECODER_BUFFERS_H
#define KVCPT_DECODER_BUFFERS_H
/* The buffers a whole-model pass works on, shared by the CPU reference
 * (model/decoder.h), the CUDA engine (model/decoder_cuda.h), the layer
 * (model/decoder_layer.h) and the pass (model/decoder_pass.h): tensor views,
 * activation sets, backward buffers and their carving, and the input
 * checks. Below all of them, so none includes another's header. */
#include <stdint.h>

#include "../kernels/attention.h"
#include "config.h"
#include "params.h"

typedef struct {
    float *attn_norm, *wq, *wk, *wv, *wo, *mlp_norm, *wgate, *wup, *wdown;
    float *bq, *bk, *bv; /* NULL in a family without q/k/v biases; else consecutive, bq starting the fused one */
} LayerTensors;

typedef struct {
    float *embed, *final_norm, *lm_head; /* lm_head == embed when tied */
    LayerTensors *layers;
} ModelTensors;

/* Saved forward state of one layer (what its backward needs), BT = B * T
 * rows. ACT buffers hold the engine's activation type, act_size bytes per
 * element: float (4) on the CPU and in the fp32 CUDA engine, bf16 (2) in the
 * bf16 one (model/decoder_layer.h); the others are fp32 everywhere. */
typedef struct {
    float *xn1;       /* (BT, C) ACT, RMSNorm of the layer input */
    float *rstd1;     /* (BT) */
    float *qkv;       /* (BT, (Hq + 2 Hkv) D) ACT, the fused projection [q | k | v] before RoPE */
    float *q;         /* (B, T, Hq, D) ACT, rotated */
    float *k, *v;     /* (B, T, Hkv, D) ACT, k rotated */
    float *att;       /* (BT, Hq D) ACT, attention output */
    float *lse;       /* (B, Hq, T) */
    float *x2;        /* (BT, C) residual stream after attention */
    float *xn2;       /* (BT, C) ACT */
    float *rstd2;     /* (BT) */
    float *gu;        /* (BT, 2F) ACT, the fused projection [gate | up] */
    float *h;         /* (BT, F) ACT, silu(gate) * up */
} LayerActs;

/* Sharding's view of a pass. Units are the ranges sharding gathers: 0 the
 * embedding, 1..N the layers, N+1 the tail (final norm, untied lm_head);
 * with tied embeddings the head is unit 0 again. */
typedef struct {
    void *ctx;
    /* unit's parameters must be in place before it runs */
    void (*params_needed)(void *ctx, int unit, int backward);
    /* unit's gradients for this backward are complete */
    void (*grads_ready)(void *ctx, int unit);
} DecoderUnitHooks;

/* Buffers of the pass for the last forward's (B, T). "engine" buffers live
 * where the ops run (host memory on the CPU, device memory on CUDA); "host"
 * ones are always host memory (on the CPU the copies between the two are
 * memcpy). The engine allocates them (it sizes them its own way); the pass
 * only reads and writes them. */
typedef struct {
    int64_t B, T;              /* the last forward's shape */
    int64_t cap_BT;            /* rows the buffers hold; 0: none yet */
    int32_t *tokens, *targets; /* engine (BT each) */
    int32_t *h_targets;        /* host (BT): the targets, -1 where none */
    float **resid;             /* num_layers + 1 engine residual streams (BT, C) */
    LayerActs *acts;           /* num_layers sets (with recompute=attn their rebuilt parts one shared buffer), or
                                * with recompute=full one shared set (model/decoder_pass.h) */
    int32_t **sel;             /* per layer, engine: (B, Hkv, refresh_sel_len) selected prefill keys */
    float *xf;                 /* engine (BT, C): the final norm's output */
    float *rstdf, *ce_lse;     /* engine (BT): its rstd, the loss head's log-sum-exp */
    float *losses;             /* engine (BT): per-row loss, 0 where no target */
    float *h_losses;           /* host (BT): losses copied back, summed there */
    float *rope_cos, *rope_sin;/* engine (rope_T, head_dim / 2) */
    int64_t rope_T;
    int64_t rope_len;          /* the sequence length the tables were computed for (dynamic scaling's depend on it) */
    float *scratch;            /* engine: backward buffers and logits chunks (decoder_backward_bufs_carve_rows) */
    int64_t scratch_numel;     /* floats of scratch */
    int64_t n_targets;         /* valid targets of the last forward */
    float loss;                /* its mean loss; NaN when none */
    /* 1: the last forward (DECODER_FORWARD_TRAIN) left the head's gradient
     * for the next backward: the final norm's output gradient in the
     * scratch's dxf, the weight's added to dw->lm_head */
    int head_grad_ready;
} DecoderPassState;

/* Rows of logits the CPU loss computes at once: bounds the (rows, V)
 * buffer (the CUDA engine's is DECODER_CUDA_CE_CHUNK_ROWS). */
#define DECODER_CE_CHUNK_ROWS 256

/* Backward work buffers, carved from one scratch allocation; ACT as in
 * LayerActs. */
typedef struct {
    float *dres;      /* (BT, C) gradient of the residual stream */
    float *dxn;       /* (BT, C) gradient of a norm's output */
    float *dxf;       /* (BT, C) gradient of the final norm's output */
    float *dq;        /* (B, T, Hq, D) */
    float *dk, *dv;   /* (B, T, Hkv, D) */
    float *datt;      /* (BT, Hq D) ACT */
    float *dqkv;      /* (BT, (Hq + 2 Hkv) D) ACT */
    float *dh;        /* (BT, F) ACT */
    float *dgu;       /* (BT, 2F) ACT */
    float *logits;    /* (min(BT, ce_rows), V), the rest of the scratch */
} DecoderBackwardBufs;

/* Shared with the CUDA engine (model/decoder_cuda.h), so both sides have the
 * same tensor views, buffer layouts and input checks. Pointers may be host
 * or device ones; nothing here dereferences them. */
/* The ModelTensors field that holds tensor t (w->layers allocated). */
float **decoder_tensor_slot(ModelTensors *w, const ParamTensor *t);
void decoder_bind_tensors(ModelTensors *w, const DecoderConfig *c, const ParamLayout *layout, float *base);
/* The parts of a layer's activation set (LayerActs), as recompute=attn
 * (model/recompute.h) holds them: all of it; what it keeps per layer (q, k,
 * v after RoPE, att, lse, and x2, the residual stream after attention);
 * what it rebuilds before each layer's backward into one set the layers
 * share (xn1 and rstd1 from the layer's input, xn2, rstd2, gu, h from x2,
 * and the fused q|k|v rows, a forward temporary the backward never reads). */
typedef enum { LAYER_ACTS_ALL, LAYER_ACTS_KEPT, LAYER_ACTS_REBUILT } LayerActsPart;
/* The floats one layer's activation set needs (every buffer starting 256
 * bytes aligned, red zones included), and the carving of base into it;
 * act_size: 4 (float) or 2 (bf16) bytes per ACT element. */
int64_t decoder_layer_acts_numel(const DecoderConfig *c, int64_t BT, int act_size);
void decoder_layer_acts_carve(LayerActs *a, const DecoderConfig *c, int64_t BT, int act_size, float *base);
/* The same for one part (ALL is ATTN + MLP, the sets above); the carving
 * sets only that part's fields. */
int64_t decoder_layer_acts_part_numel(const DecoderConfig *c, int64_t BT, int act_size, LayerActsPart part);
void decoder_layer_acts_carve_part(LayerActs *a, const DecoderConfig *c, int64_t BT, int act_size, LayerActsPart part,
                                   float *base);
/* The backward's scratch with a logits chunk of ce_rows rows (the _rows
 * forms), or of DECODER_CE_CHUNK_ROWS. */
int64_t decoder_scratch_numel_rows(const DecoderConfig *c, int64_t BT, int act_size, int64_t ce_rows);
DecoderBackwardBufs decoder_backward_bufs_carve_rows(const DecoderConfig *c, int64_t BT, int act_size, int64_t ce_rows,
                                                     float *scratch);
int64_t decoder_scratch_numel(const DecoderConfig *c, int64_t BT, int act_size);
/* Dies naming the first bad token, target or shape (with mask on, T must
 * be mask->L + mask->S). */
void decoder_check_inputs(const DecoderConfig *c, const RefreshMask *mask, const int32_t *tokens,
                          const int32_t *targets, int64_t B, int64_t T);
#endif
