#include "device_optim.h"

#include <stdlib.h>

#include "../common/util.h"
#include "../optim/clip.h"
#include "../optim/optim_cuda.h"

struct DeviceOptim {
    OptimCuda *opt;
    int stochastic;
};

DeviceOptim *device_optim_create(const DecoderCuda *g, const Optimizer *host, const ShardPlan *plan, int stochastic,
                                 uint64_t seed) {
    KV_CHECK(plan->world == 1 && plan->local_numel == g->layout.total,
             "optim_device=1: the optimizer steps the engine's own parameters for one rank only (this run has %d); "
             "sharded runs keep a master shard on each GPU (optim_device=0)",
             plan->world);
    KV_CHECK(!stochastic || g->precision == DECODER_CUDA_BF16_WEIGHTS,
             "stochastic rounding needs the bf16-weights engine (precision bf16sr)");
    KV_CHECK(g->precision != DECODER_CUDA_BF16_WEIGHTS || stochastic,
             "bf16 weights with the optimizer on the GPU keep no fp32 master, so updates below half a bf16 step "
             "would be lost: use precision=bf16sr (stochastic rounding), or optim_device=0");
    DeviceOptim *d = xcalloc(1, sizeof *d);
    d->opt = optim_cuda_create(host);
    d->stochastic = stochastic;
    OptimPlace *place = xmalloc(sizeof(OptimPlace) * (size_t)(host->nseg + 1));
    for (int s = 0; s < host->nseg; s++) {
        int64_t x = host->seg[s].offset;
        int ti = param_layout_tensor_at(&g->layout, x);
        const ParamTensor *t = &g->layout.t[ti];
        KV_CHECK(x + host->seg[s].numel <= t->offset + t->numel,
                 "optimizer segment %d [%lld, +%lld) crosses the end of tensor '%s'", s, (long long)x,
                 (long long)host->seg[s].numel, t->name);
        DecoderCudaPlace p = decoder_cuda_param_place(g, ti);
        place[s] = (OptimPlace){p.bf16 ? OPTIM_BF16 : OPTIM_F32, p.offset + (x - t->offset), p.bf16 && stochastic};
    }
    optim_cuda_set_places(d->opt, place, seed);
    free(place);
    return d;
}

void device_optim_free(DeviceOptim *d) {
    if (!d) return;
    optim_cuda_free(d->opt);
    free(d);
}

void device_optim_push(DeviceOptim *d, DecoderCuda *g, const float *master, const Optimizer *host) {
    decoder_cuda_upload_params(g, master);
    optim_cuda_upload(d->opt, host);
}

void device_optim_pull(const DeviceOptim *d, const DecoderCuda *g, float *master, Optimizer *host) {
    decoder_cuda_download_params(g, master);
    optim_cuda_download(d->opt, host);
}

double device_optim_grad_sum_squares(const DecoderCuda *g) { return grad_sum_squares_cuda(g->grads, g->layout.total); }

int device_optim_step(DeviceOptim *d, DecoderCuda *g, const AdamWHyper *h, int64_t step) {
    if (optim_cuda_step_placed(d->opt, g->params, g->wbf16, g->grads, OPTIM_F32, h, step)) return 1;
    decoder_cuda_sync_tied_head(g);
    return 0;
}

int64_t device_optim_bytes(const DeviceOptim *d) { return optim_cuda_bytes(d->opt); }
