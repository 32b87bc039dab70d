#ifndef KVCPT_PLAN_H
#define KVCPT_PLAN_H
/* Bytes per rank of a sharded training step (what `kvcpt plan` prints): the
 * parameter, gradient and optimizer shards come from the real shard plan and
 * optimizer rules (the largest rank's pieces); the gathered-unit buffers and
 * the saved activations follow the engine's layout. It is the budget of
 * device-resident FSDP (every byte on the device); today's GPU training
 * still shards on the host (docs/sharding.md), which this does not model;
 * train/cuda_mem_plan.h gives that engine's bytes, and `kvcpt plan` prints
 * both. */
#include <stdint.h>

#include "../model/config.h"
#include "../model/recompute.h"

typedef struct {
    int64_t seq, micro_batch, K; /* K > 0: the RefreshKV selection is saved per layer */
    int param_bytes, grad_bytes, act_bytes; /* 2 (bf16) or 4 (fp32) */
    int optim_8bit;
    LlamaRecompute recompute;    /* which activations the layers keep (model/recompute.h) */
} PlanInputs;

typedef struct {
    int ranks;
    LlamaRecompute recompute;    /* the setting the row was computed with */
    double params, grads, optim, unit_buffers, activations, total; /* bytes */
} PlanRow;

PlanRow plan_rank_bytes(const LlamaConfig *c, const PlanInputs *in, int ranks);

#endif
