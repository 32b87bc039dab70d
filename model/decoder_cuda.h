#ifndef KVCPT_DECODER_CUDA_H
#define KVCPT_DECODER_CUDA_H
/* The whole model forward and backward on one GPU: the CPU reference
 * (model/decoder.h) step for step, with every op replaced by its CUDA twin.
 * Parameters, gradients and activations live in device memory; only
 * tokens, targets, per-row losses and (on request) logits and gradients
 * cross the bus. fp32 everywhere (cuBLASLt strict fp32 matmuls), so the
 * CPU reference is its oracle to fp32 rounding; no float atomics, so two
 * runs give the same bits.
 *
 * Recompute (an option): only each layer's input is kept; the backward
 * reruns the layer's forward into one shared set of activation buffers
 * (with the forward's selection), which cuts activation memory from
 * num_layers sets to one at the cost of a second forward. The kernels are
 * deterministic, so the gradients are bit-identical either way.
 *
 * bf16 (an option, DECODER_CUDA_BF16_WEIGHTS): every matrix (q, k, v, o,
 * gate, up, down, lm_head) lives on the device in bf16, rounded from the
 * fp32 master copy at each upload; the embedding table and the norm
 * weights stay fp32 (the kernels that read them are fp32). Activations
 * between ops are bf16 too (LayerActs' ACT buffers: norm outputs, q|k|v,
 * q, k, v, attention output, gate|up, h), every product bf16 x bf16 with
 * fp32 accumulation; the residual stream, its gradient, the norms'
 * statistics and the weight gradients stay fp32 (docs/cuda.md says why).
 * The CPU model with decoder_set_bf16_oracle, which rounds every activation
 * where this engine stores bf16, is its oracle to fp32 summation order.
 *
 * Built only with the CUDA backend (nvcc found, or the CPU emulator); its
 * sizes and packing, in every build, are model/decoder_cuda_size.h. */
#include <stdint.h>

#include "../kernels/bf16.h"
#include "attn_impl.h"
#include "decoder.h"
#include "decoder_cuda_size.h"
#include "decoder_layer.h"

typedef struct DecoderCuda DecoderCuda; /* holders (the trainer) may name it in any build */

struct DecoderCuda {
    DecoderConfig cfg;
    ParamLayout layout;
    DecoderCudaPrecision precision;
    /* fp32: params holds every tensor in ParamLayout order. bf16 weights:
     * params holds only the fp32 tensors (embedding, norms) and wbf16 the
     * matrices, each packed in layout order at dev_offset[i] (elements,
     * 128-aligned), plus the tied lm_head's bf16 copy of the embedding at
     * head_offset. grads: fp32, ParamLayout order, in both modes. */
    float *params, *grads;   /* device */
    bf16 *wbf16;             /* device, NULL in fp32 mode */
    int64_t *dev_offset;     /* per layout tensor, bf16 mode */
    int64_t head_offset;     /* tied lm_head copy in wbf16, or -1 */
    ModelTensors w, dw;      /* device views; see ops for bf16 matrices */
    DecoderAttnImpl attn;      /* the attention kernels, resolved (mma or cuda-core; model/attn_impl.h) */
    RefreshMask mask;            /* with it on, T must be mask.L + mask.S */
    DecoderRecompute recompute;    /* what the backward reruns (model/recompute.h) */
    /* The pass over this engine's fields (model/decoder_pass.h), built by
     * decoder_cuda_create*, so a DecoderCuda must stay where it was created:
     * pass.ops is decoder_cuda_ops_for(precision, attn) (decoder_cuda_set_attn
     * keeps it so), pass.hooks the sharding's unit hooks (all NULL: every
     * parameter is always in place; parallel/fsdp_cuda.h sets them). */
    DecoderPassModel pass;
    /* Streamed layers (decoder_cuda_create_streamed, the sharded engine): the
     * embedding, final norm and lm_head are resident in params / wbf16 /
     * grads; a layer's weights live in a slot only while it runs, its
     * gradient in the one gradient slot, and decoder_cuda_bind_layer* point
     * the layer's views there. 0 and NULL otherwise. */
    int streamed;
    float *slot32[DECODER_CUDA_SLOTS]; /* device: a layer's fp32 tensors (layout order in fp32; the norms in bf16) */
    bf16 *slot16[DECODER_CUDA_SLOTS];  /* device, bf16: a layer's matrices, packed 128-aligned */
    float *grad_slot;                /* device (layer_numel): one layer's gradient, layout order */
    int64_t *slot_offset;            /* per tensor of a layer (9): offset in its slot buffer */
    int64_t resident_grads;          /* elements of the resident gradient buffer */

    /* forward state for the last (B, T): device buffers but h_targets and
     * h_losses; acts: num_layers sets, one with recompute=full, or with
     * recompute=attn num_layers attention halves sharing one MLP half */
    DecoderPassState state;
    int64_t sel_bytes;           /* bytes of each layer's state.sel[l] buffer */
    /* attn cudnn: the region its calls carve (decoder_cuda_attn_scratch_bytes),
     * bound to them before each pass; NULL with any other attention */
    void *attn_scratch;
    int64_t bytes_fixed, bytes_acts, bytes_attn; /* device memory held (bytes_attn: attn_scratch's) */
};

/* The _cuda twins of model/decoder_layer.h's ops (device pointers); the
 * decode engine (eval/engine_cuda.c) runs its steps with them too. */
extern const DecoderOps decoder_cuda_ops;
/* The same with bf16 weights: the matmul entries take a weight pointer
 * typed const float * that points at bf16 data (see decoder_cuda.c). */
extern const DecoderOps decoder_cuda_bf16_ops;
/* bf16 weights and tensor-core attention (kernels/attention_mma.h) */
extern const DecoderOps decoder_cuda_bf16_mma_ops;
/* bf16 weights and cuDNN's fused attention (kernels/attention_cudnn.h) */
extern const DecoderOps decoder_cuda_bf16_cudnn_ops;
/* The engine's ops: fp32; or bf16 weights, with attention on tensor cores
 * (attn mma), on the fp32 engine's CUDA-core kernels reading bf16 (attn
 * cuda-core) or through cuDNN (attn cudnn; a resolved attn, never auto). */
const DecoderOps *decoder_cuda_ops_for(DecoderCudaPrecision precision, DecoderAttnImpl attn);
/* The attention kernels the engine runs from now on:
 * decoder_attn_impl_resolve(requested, what, ...) for its precision and head
 * dim. decoder_cuda_create* resolve auto (KVCPT_ATTN, else tensor cores where
 * the head dim allows: 16, 32, 64, 128; the tests' D = 8 models run the
 * CUDA-core kernels); a config key sets it again after. */
void decoder_cuda_set_attn(DecoderCuda *g, DecoderAttnImpl requested, const char *what);

void decoder_cuda_create(DecoderCuda *g, const DecoderConfig *c, DecoderRecompute recompute,
                         DecoderCudaPrecision precision);
/* The streamed engine: only the resident tensors and the slots are
 * allocated; forward and backward need unit hooks that bind each layer
 * before it runs (parallel/fsdp_cuda.h). */
void decoder_cuda_create_streamed(DecoderCuda *g, const DecoderConfig *c, DecoderRecompute recompute,
                                  DecoderCudaPrecision precision);
/* Streamed: layer's weight views into slot (its contents are the caller's
 * to fill), and its gradient views into the gradient slot, zeroed. */
void decoder_cuda_bind_layer(DecoderCuda *g, int64_t layer, int slot);
void decoder_cuda_bind_layer_grads(DecoderCuda *g, int64_t layer);
/* Where the fp32 gradients of the layout range [begin, end) (whole
 * tensors, contiguous in layout order) are now. */
float *decoder_cuda_grads_of(DecoderCuda *g, int64_t begin, int64_t end);
void decoder_cuda_free(DecoderCuda *g);
void decoder_cuda_set_mask(DecoderCuda *g, const RefreshMask *mask);
/* host (layout.total floats) -> device parameters (rounded to bf16 for
 * the matrices in bf16 mode) */
void decoder_cuda_upload_params(DecoderCuda *g, const float *host);
/* Layout range [begin, end) of fp32 values already on the device (src,
 * end - begin floats, e.g. a unit just all-gathered) into the engine's
 * places (where the views point now: a streamed layer must be bound):
 * copied for fp32 tensors, rounded to nearest even for bf16 matrices (and
 * the tied lm_head's copy when the embedding is in range). The range must
 * cover whole tensors. */
void decoder_cuda_install_params(DecoderCuda *g, const float *src, int64_t begin, int64_t end);
/* Where the fp32 layout range [begin, end) can be written directly: the
 * views themselves, when every tensor in it is fp32 on this engine and they
 * lie in layout order (always with fp32 weights; the embedding unit with
 * bf16 ones); else NULL. */
float *decoder_cuda_params_in_place(DecoderCuda *g, int64_t begin, int64_t end);
/* 1 when layout tensor i lives in bf16 on this engine. */
int decoder_cuda_tensor_is_bf16(const DecoderCuda *g, int tensor);
/* bf16 values of the layout range [begin, end) (src, layout order, already
 * on the device) into the places of its bf16 tensors; its fp32 tensors are
 * left alone (a sharded engine gathers those in fp32 where they live). */
void decoder_cuda_install_bf16(DecoderCuda *g, const bf16 *src, int64_t begin, int64_t end);
/* device gradients -> host (layout.total floats) */
void decoder_cuda_download_grads(const DecoderCuda *g, float *host);
/* device parameters -> host (layout.total floats; bf16 matrices widened
 * exactly): the inverse of the upload when the device holds the only
 * current copy (the optimizer stepping on the device). */
void decoder_cuda_download_params(const DecoderCuda *g, float *host);
/* Where layout tensor i's parameters live on the device: in params (fp32)
 * or wbf16 (bf16), at an element offset. */
typedef struct {
    int bf16;
    int64_t offset;
} DecoderCudaPlace;
DecoderCudaPlace decoder_cuda_param_place(const DecoderCuda *g, int tensor);
/* bf16 weights with tied embeddings: the lm_head's bf16 copy rounded again
 * from the fp32 embedding, on the device (after an update there). A no-op
 * otherwise. */
void decoder_cuda_sync_tied_head(DecoderCuda *g);
/* Same contracts as decoder_forward and decoder_forward_train; tokens and
 * targets are HOST arrays. */
float decoder_cuda_forward(DecoderCuda *g, const int32_t *tokens, const int32_t *targets, int64_t B, int64_t T);
float decoder_cuda_forward_train(DecoderCuda *g, const int32_t *tokens, const int32_t *targets, int64_t B, int64_t T);
void decoder_cuda_zero_grad(DecoderCuda *g);
/* grads += d(mean loss)/d(params) for the last forward. */
void decoder_cuda_backward(DecoderCuda *g);
/* Logits of rows [row0, row0 + rows) of the last forward into HOST out. */
void decoder_cuda_logits(DecoderCuda *g, float *out, int64_t row0, int64_t rows);
/* Device bytes this engine holds now (parameters, gradients, activations,
 * attn cudnn's scratch region). */
int64_t decoder_cuda_bytes(const DecoderCuda *g);
#endif
