#ifndef KVCPT_CUDA_MEM_PLAN_H
#define KVCPT_CUDA_MEM_PLAN_H
/* Device bytes one rank's CUDA training engine needs: sharded (any rank
 * count), the streamed engine's resident tensors (embedding, final norm,
 * lm_head), two layer slots of weights and one of gradients, the
 * activations, and this rank's shards (fp32 master, gradient sum,
 * optimizer states, parallel/fsdp_cuda.h), which shrink with the rank
 * count; whole (one rank, the optimizer stepping the engine's own
 * parameters), every weight and gradient and the optimizer states.
 * Arithmetic from the same size functions the engine allocates with
 * (model/decoder_cuda_size.h, fsdp_cuda_bytes, the optimizer's state counts), so
 * `kvcpt plan --engine cuda` and the trainer's start-up check agree with
 * what the engine reports holding. In every build (no CUDA needed). */
#include <stdint.h>
#include <stdio.h>

#include "../kernels/attention.h"
#include "../model/config.h"
#include "../model/decoder_cuda_size.h"
#include "../optim/optimizer.h"
#include "train_config.h"
#include "train_mode.h"

typedef struct {
    DecoderCudaPrecision precision;
    DecoderRecompute recompute; /* which activations the layers keep (model/recompute.h) */
    int optim_device;       /* the whole model's AdamW states beside the engine's parameters (one rank) */
    OptimKind optim;
    int64_t micro_batch, T; /* the largest forward: micro_batch sequences of T tokens */
    RefreshMask mask;       /* enabled = 0: no mask */
    int ranks;              /* sharded modes: the shards for this rank count (the largest rank's); 0: none */
    int streamed; /* sharded, reshard_after_forward=1: resident tensors and layer slots, not the whole model */
    DecoderAttnImpl attn; /* cudnn (with bf16): its scratch region and workspace cap; else the engine's kernels */
} CudaMemInputs;

typedef struct {
    int64_t params, wbf16, grads, rope; /* held from setup (decoder_cuda_create, the first forward's RoPE tables) */
    int64_t acts; /* allocated by the first forward (activations, selections, streams, scratch) */
    int64_t optim; /* the whole-model device optimizer's states (optim_device=1, bf16sr) */
    int64_t shards; /* this rank's shards (fsdp_cuda_bytes: master, gradient sum, states, exchange) */
    int64_t attn; /* attn cudnn's scratch region, held from the first forward (decoder_cuda_attn_scratch_bytes) */
    int64_t counted; /* all of the above: what the engine reports holding after a step */
    /* Not counted by the engine: the cuBLASLt workspace, the bf16 engine's
     * cast buffers (kept at their largest), and the largest temporary one
     * kernel launcher allocates and frees (the attention's selection,
     * forward and backward scratch as kernels/attention.h's
     * attention_cuda_*_scratch_bytes count them, the embedding backward's
     * rows; an estimate: cub's sort space and the small per-norm partial
     * sums are left out); with attn cudnn, cuDNN's workspace at its cap
     * (ATTN_CUDNN_WORKSPACE_CAP, kernels/attention_cudnn_size.h: no plan
     * wanting more is used) in place of the other kernels' scratch. */
    int64_t workspace;
    int64_t cudnn_workspace; /* of workspace: cuDNN's at its cap with attn cudnn, else 0 */
    int64_t total; /* counted + workspace: what the GPU must have free */
} CudaMemPlan;

CudaMemPlan cuda_mem_plan(const DecoderConfig *c, const CudaMemInputs *in);

/* A training configuration's inputs (the mode resolved from it: precision
 * and optimizer placement) for ranks ranks; sequences are L + S tokens,
 * micro_batch of them. */
CudaMemInputs cuda_mem_inputs_from_train(const TrainConfig *c, TrainMode mode, int ranks);

/* One line per figure (GiB and bytes) to f, each prefixed with indent. */
void cuda_mem_plan_print(FILE *f, const CudaMemPlan *p, const char *indent);
#endif
