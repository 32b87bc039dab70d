#include "zero3_plan.h"

#include "../common/util.h"
#include "../model/decoder_cuda_size.h"
#include "../parallel/fsdp_cuda.h"
#include "../parallel/shard_plan.h"

static int64_t add_checked(int64_t a, int64_t b) {
    int64_t r;
    KV_CHECK(!__builtin_add_overflow(a, b, &r), "ZeRO-3 plan: the bytes per rank overflow 64 bits");
    return r;
}

static int64_t mul_checked(int64_t a, int64_t b) {
    int64_t r;
    KV_CHECK(!__builtin_mul_overflow(a, b, &r), "ZeRO-3 plan: the bytes per rank overflow 64 bits (%lld x %lld)",
             (long long)a, (long long)b);
    return r;
}

/* The CUDA engine whose activation sets hold act_bytes per element: the
 * engine's precision decides nothing else of its activations. */
static int64_t activation_bytes(const DecoderConfig *c, const PlanInputs *in) {
    KV_CHECK(in->act_bytes == 2 || in->act_bytes == 4, "ZeRO-3 plan: activations of %d bytes (2 or 4)", in->act_bytes);
    DecoderCudaPrecision p = in->act_bytes == 2 ? DECODER_CUDA_BF16_WEIGHTS : DECODER_CUDA_FP32;
    DecoderCudaActBytes ab = decoder_cuda_act_bytes(c, in->recompute, p, in->micro_batch, in->seq, &in->mask);
    return add_checked(decoder_cuda_act_total(c, &ab), decoder_cuda_rope_bytes(c, in->seq));
}

PlanRow plan_rank_bytes(const DecoderConfig *c, const PlanInputs *in, int ranks) {
    KV_CHECK(ranks >= 1, "ZeRO-3 plan: %d ranks", ranks);
    ParamLayout pl;
    param_layout_build(&pl, c);
    PlanRow row = {.ranks = ranks, .recompute = in->recompute};
    int64_t max_local = 0, max_unit = 0;
    for (int r = 0; r < ranks; r++) {
        ShardPlan p;
        shard_plan_build(&p, &pl, ranks, r);
        int64_t o = fsdp_cuda_optim_bytes(&p, in->optim);
        if (p.local_numel > max_local) max_local = p.local_numel;
        if (o > row.optim) row.optim = o;
        max_unit = p.max_unit;
        shard_plan_free(&p);
    }
    row.params = mul_checked(max_local, in->param_bytes);
    row.grads = mul_checked(max_local, in->grad_bytes);
    /* one rank holds its shard only; more gather two units (current + prefetched) and one unit's gradients */
    if (ranks > 1) row.unit_buffers = mul_checked(max_unit, 2 * (int64_t)in->param_bytes + in->grad_bytes);
    row.activations = activation_bytes(c, in);
    int64_t parts[] = {row.params, row.grads, row.optim, row.unit_buffers, row.activations};
    for (int i = 0; i < (int)(sizeof parts / sizeof parts[0]); i++) row.total = add_checked(row.total, parts[i]);
    param_layout_free(&pl);
    return row;
}
