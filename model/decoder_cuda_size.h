#ifndef KVCPT_DECODER_CUDA_SIZE_H
#define KVCPT_DECODER_CUDA_SIZE_H
/* The CUDA engine's (model/decoder_cuda.h) precision, device byte counts and
 * parameter packing, in every build: the engine allocates with these, and
 * the memory plan (train/cuda_mem_plan.h) and `kvcpt plan` add them up
 * without CUDA, so the two cannot drift apart. */
#include <stdint.h>

#include "../kernels/bf16.h"
#include "attn_impl.h"
#include "decoder.h"
#include "recompute.h"

typedef enum { DECODER_CUDA_FP32 = 0, DECODER_CUDA_BF16_WEIGHTS = 1 } DecoderCudaPrecision;
/* "fp32" or "bf16" -> precision; dies naming what (a flag or config key)
 * otherwise. */
DecoderCudaPrecision decoder_cuda_precision_parse(const char *s, const char *what);
const char *decoder_cuda_precision_name(DecoderCudaPrecision p);

/* The device bytes of the engine's buffers: decoder_cuda_create and the first
 * forward allocate with these. */
typedef struct {
    int64_t params;  /* fp32 parameters: every tensor (fp32), or the embedding and norms (bf16) */
    int64_t wbf16;   /* bf16 matrices packed 128-aligned, with a tied lm_head's copy; 0 in fp32 */
    int64_t grads;   /* fp32, every tensor */
} DecoderCudaFixedBytes;
DecoderCudaFixedBytes decoder_cuda_fixed_bytes(const ParamLayout *L, const DecoderConfig *c, DecoderCudaPrecision p);
/* The same for a streamed engine (decoder_cuda_create_streamed): the
 * resident tensors, DECODER_CUDA_SLOTS layer slots of weights and one of
 * gradients. */
#define DECODER_CUDA_SLOTS 2
/* Rows of fp32 logits the CUDA engine's loss head computes at once: a
 * (2048, V) chunk (1.05 GB at V = 128256) keeps each chunk's three products
 * large enough for the tensor cores (T = 8242 is 5 chunks, not 33), while
 * the chunk stays a small part of the 8B step's memory. */
#define DECODER_CUDA_CE_CHUNK_ROWS 2048
DecoderCudaFixedBytes decoder_cuda_streamed_bytes(const ParamLayout *L, const DecoderConfig *c, DecoderCudaPrecision p);
/* The RoPE cos and sin tables for sequences up to T. */
int64_t decoder_cuda_rope_bytes(const DecoderConfig *c, int64_t T);
/* What the first forward of B sequences of T tokens allocates under mask
 * (NULL or disabled: none; the engine's, as decoder_cuda_set_mask set it). */
typedef struct {
    int64_t sets;       /* layer activation sets: num_layers, or one with recompute=full */
    int64_t layer_set;  /* bytes of one set (decoder_layer_acts_part_numel: the whole set, or with
                         * recompute=attn its kept part) */
    int64_t shared_set; /* recompute=attn: bytes of the one rebuilt part every layer shares; else 0 */
    int64_t sel;        /* one layer's RefreshKV selection, every layer has one: B * Hkv * max(T,
                         * refresh_sel_len) int32 (the per-row records of evict and restride outgrow T) */
    int64_t resid;      /* num_layers + 1 residual streams */
    int64_t tokens;     /* tokens and targets */
    int64_t xf;         /* final norm output, its rstd, the CE lse and losses */
    int64_t scratch; /* backward buffers and a logits chunk (decoder_scratch_numel_rows, DECODER_CUDA_CE_CHUNK_ROWS) */
} DecoderCudaActBytes;
DecoderCudaActBytes decoder_cuda_act_bytes(const DecoderConfig *c, DecoderRecompute recompute, DecoderCudaPrecision p,
                                           int64_t B, int64_t T, const RefreshMask *mask);
/* All of them: sets x layer_set + shared_set + num_layers selections + the
 * rest, overflow-checked. */
int64_t decoder_cuda_act_total(const DecoderConfig *c, const DecoderCudaActBytes *ab);
/* The region attn cudnn carves its fixed-size buffers from (kernels/
 * attention_cudnn_size.h: bf16 gradients, softmax sums, dQ accumulator,
 * the suffix's gathered keys and values): the first forward of B sequences
 * of T tokens allocates it when the bf16 engine's attention is cudnn (a
 * resolved attn); 0 otherwise. One region for every layer: the calls run
 * one after another and keep nothing between them. */
int64_t decoder_cuda_attn_scratch_bytes(const DecoderConfig *c, DecoderCudaPrecision p, DecoderAttnImpl attn, int64_t B,
                                        int64_t T, const RefreshMask *mask);
/* Bytes per activation element (LayerActs' ACT buffers): 4, or 2 with bf16. */
int decoder_cuda_act_size(DecoderCudaPrecision p);

/* The packing the byte counts above come from, which the engine places its
 * tensors by. */
/* 1 for the tensors the bf16 engine keeps in fp32: read by fp32 kernels
 * (embedding lookup and its scatter-add, RMSNorm, the q/k/v bias add), and
 * small except the embedding. */
int decoder_cuda_stays_fp32(const ParamTensor *t);
/* n rounded up to 128 elements: every packed tensor starts 256-byte
 * aligned, as cuBLASLt likes. */
int64_t decoder_cuda_align_elems(int64_t n);
/* 1 for k after q, v after k, up after gate (and k's and v's biases after
 * q's): the second and third tensors of a fused product (model/decoder_layer.c)
 * follow their predecessor with no padding, so the stacked weight (bias) is
 * one matrix (vector) in the bf16 packing too. */
int decoder_cuda_continues_fused(const ParamTensor *t);
/* The bf16 engine's packing: each tensor's element offset in its buffer
 * (dev_offset, per layout tensor, when not NULL), the fp32 and bf16 element
 * counts (*n32, *n16); returns the tied lm_head copy's offset in the bf16
 * buffer (-1: none). */
int64_t decoder_cuda_pack_bf16(const ParamLayout *L, const DecoderConfig *c, int64_t *dev_offset, int64_t *n32,
                               int64_t *n16);
/* The streamed engine's packing. Resident tensors (embedding, final norm,
 * lm_head): in fp32 mode, each unit in layout order (embedding at 0, the
 * tail after it), so a unit is gathered in place; with bf16 weights the
 * embedding and final norm in the fp32 buffer, the lm_head (or a tied
 * lm_head's copy) in the bf16 one. A layer slot holds one layer laid out
 * as layer 0's tensors: in layout order (fp32), or the norms fp32 and the
 * matrices bf16, each 128-aligned. Gradients: the resident tensors as the
 * fp32 weights are, and one layer in layout order. */
typedef struct {
    int64_t res32, res16; /* resident elements, fp32 and bf16 */
    int64_t slot32, slot16; /* elements of one layer slot */
    int64_t res_grads; /* resident gradient elements */
    int layer_tensors; /* tensors per layer */
} DecoderCudaStreamPack;
/* res_off (per layout tensor, set for the resident ones) and slot_off (per
 * tensor of a layer) are filled when not NULL. */
DecoderCudaStreamPack decoder_cuda_stream_pack(const ParamLayout *L, const DecoderConfig *c, DecoderCudaPrecision p,
                                               int64_t *res_off, int64_t *slot_off);
#endif
