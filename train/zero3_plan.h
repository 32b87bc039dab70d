#ifndef KVCPT_ZERO3_PLAN_H
#define KVCPT_ZERO3_PLAN_H
/* Bytes per rank of a fully sharded training step (the ZeRO-3 budget
 * `kvcpt plan` prints): every buffer sharded, units gathered one at a time.
 * Nothing of it is guessed beside the engines: the parameter and gradient
 * shards are the real shard plan's (the largest rank's pieces), the
 * optimizer states what the device optimizer allocates for a rank's
 * segments (fsdp_cuda_bytes, the optimizer's state counts), the
 * activations and RoPE tables what the CUDA engine's first forward
 * allocates for this shape, recompute setting and mask
 * (decoder_cuda_act_bytes, decoder_cuda_rope_bytes: the carving the engine
 * allocates with), at the activation element size asked for. Only the
 * gathered-unit buffers (two units of parameters and one of gradients) are
 * the budget's own: no engine gathers into device buffers of the shard
 * dtype today (docs/sharding.md). train/cuda_mem_plan.h gives the CUDA
 * engine as it runs, and `kvcpt plan` prints both. In every build. */
#include <stdint.h>

#include "../kernels/attention.h"
#include "../model/config.h"
#include "../model/recompute.h"
#include "../optim/optimizer.h"

typedef struct {
    int64_t seq, micro_batch; /* the largest forward: micro_batch sequences of seq tokens */
    RefreshMask mask;         /* enabled = 0: causal; evict and restride size the per-row selection records */
    int param_bytes, grad_bytes, act_bytes; /* 2 (bf16) or 4 (fp32) */
    OptimKind optim;
    DecoderRecompute recompute; /* which activations the layers keep (model/recompute.h) */
} PlanInputs;

typedef struct {
    int ranks;
    DecoderRecompute recompute; /* the setting the row was computed with */
    /* bytes; activations include the RoPE tables */
    int64_t params, grads, optim, unit_buffers, activations, total;
} PlanRow;

PlanRow plan_rank_bytes(const DecoderConfig *c, const PlanInputs *in, int ranks);

#endif
