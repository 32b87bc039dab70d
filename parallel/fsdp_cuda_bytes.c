/* The device bytes of one rank's shard buffers (parallel/fsdp_cuda.h), in
 * every build: the memory plan (train/cuda_mem_plan.h) sizes a CUDA run
 * without CUDA. */
#include <stdlib.h>

#include "../common/util.h"
#include "../optim/norm_fixed.h"
#include "fsdp_cuda.h"

/* The segments' state counts (OptimStateCounts) sized as optim_cuda_create
 * allocates them: a piece of a large tensor quantized as the whole tensor. */
int64_t fsdp_cuda_optim_bytes(const ShardPlan *p, OptimKind optim) {
    ShardSegment *s = NULL;
    int n = shard_segments(p, p->rank, &s);
    int64_t *numel = xmalloc(sizeof(int64_t) * (size_t)(n + 1)), *whole = xmalloc(sizeof(int64_t) * (size_t)(n + 1));
    for (int i = 0; i < n; i++) numel[i] = s[i].numel, whole[i] = s[i].tensor_numel;
    OptimStateCounts counts = optim_state_counts(optim, numel, whole, n);
    free(numel), free(whole), free(s);
    return optim_device_bytes(&counts, n);
}

FsdpCudaBytes fsdp_cuda_bytes(const ShardPlan *p, int bf16_weights, OptimKind optim) {
    FsdpCudaBytes b = {0};
    b.master = (int64_t)sizeof(float) * p->local_numel;
    b.grad_sum = b.master;
    b.exchange = (int64_t)sizeof(float) * p->world * shard_max_piece(p, -1);
    b.stage = bf16_weights ? (int64_t)sizeof(uint16_t) * (p->max_unit + shard_max_piece(p, p->rank)) : 0;
    ShardSegment *s = NULL;
    int n = shard_segments(p, p->rank, &s);
    b.blocks = (int64_t)sizeof(double) * shard_norm_block_count(s, n);
    free(s);
    b.optim = fsdp_cuda_optim_bytes(p, optim);
    b.total = b.master + b.grad_sum + b.exchange + b.stage + b.blocks + b.optim;
    return b;
}
