/* The CUDA engine (model/llama_cuda.h) behind train_engine.h: forward and
 * backward on its own copy of the parameters. With the optimizer on the
 * host, the full parameters go up before each step and each micro-batch's
 * gradient comes down to the sharding hooks, so any rank count behaves as
 * on the CPU; with the optimizer on the device (one rank, device_optim.h),
 * the engine's parameters are the only current copy. The one file of the
 * trainer that names CUDA. */
#include "train_engine.h"

#include "../common/util.h"

#ifdef KVCPT_CUDA
#include <stdlib.h>

#include "../kernels/cuda_device.h"
#include "../model/llama_cuda.h"
#include "cuda_mem_plan.h"
#include "device_optim.h"

typedef struct {
    TrainMode mode;
    uint64_t seed;            /* the stochastic rounding's key */
    Llama *model;
    Fsdp *fsdp;
    LlamaCuda gpu;
    DeviceOptim *dopt;        /* engine optimizer, after push_state; else NULL */
} CudaEngine;

static void cuda_upload(CudaEngine *e) {
    fsdp_gather_all(e->fsdp);
    llama_cuda_upload_params(&e->gpu, e->model->params);
}

static void cuda_begin_step(void *ctx) {
    CudaEngine *e = ctx;
    if (e->dopt) llama_cuda_zero_grad(&e->gpu);
    else cuda_upload(e);
}

static float cuda_forward(void *ctx, const int32_t *tokens, const int32_t *targets, int64_t batch, int64_t T) {
    CudaEngine *e = ctx;
    return llama_cuda_forward(&e->gpu, tokens, targets, batch, T);
}

/* Host optimizer: this micro-batch's gradient alone into the host buffer,
 * each unit handed to sharding in the order the CPU backward finishes them. */
static void cuda_backward(void *ctx) {
    CudaEngine *e = ctx;
    if (e->dopt) {
        llama_cuda_backward(&e->gpu);
        return;
    }
    llama_cuda_zero_grad(&e->gpu);
    llama_cuda_backward(&e->gpu);
    llama_cuda_download_grads(&e->gpu, e->model->grads);
    LlamaUnitHooks *h = &e->model->hooks;
    int nl = (int)e->model->cfg.num_hidden_layers;
    if (h->grads_ready)
        for (int unit = nl + 1; unit >= 0; unit--) h->grads_ready(h->ctx, unit);
}

static void cuda_begin_eval(void *ctx) {
    CudaEngine *e = ctx;
    if (!e->dopt) cuda_upload(e); /* else the device already holds the only current copy */
}

static double cuda_grad_sum_squares(void *ctx) {
    CudaEngine *e = ctx;
    return device_optim_grad_sum_squares(&e->gpu);
}

static int cuda_optim_step(void *ctx, const AdamWHyper *h, int64_t step) {
    CudaEngine *e = ctx;
    return device_optim_step(e->dopt, &e->gpu, h, step);
}

/* The first push creates the device optimizer: after setup or a restore,
 * the host's parameters and states go to the device once. */
static void cuda_push_state(void *ctx, Optimizer *opt) {
    CudaEngine *e = ctx;
    if (!train_mode_optim_on_engine(e->mode)) return;
    if (!e->dopt)
        e->dopt = device_optim_create(&e->gpu, opt, &e->fsdp->plan, train_mode_stochastic(e->mode), e->seed);
    device_optim_push(e->dopt, &e->gpu, e->fsdp->master, opt);
}

static void cuda_pull_state(void *ctx, Optimizer *opt) {
    CudaEngine *e = ctx;
    if (e->dopt) device_optim_pull(e->dopt, &e->gpu, e->fsdp->master, opt);
}

static void cuda_log_fields(void *ctx, json_t *record) {
    CudaEngine *e = ctx;
    json_object_set_new(record, "gpu_engine_mb", json_real((double)llama_cuda_bytes(&e->gpu) / 1048576.0));
    if (e->dopt) json_object_set_new(record, "gpu_optim_mb", json_real((double)device_optim_bytes(e->dopt) / 1048576.0));
}

static void cuda_engine_free(void *ctx) {
    CudaEngine *e = ctx;
    device_optim_free(e->dopt);
    llama_cuda_free(&e->gpu);
    free(e);
}

/* The plan's bytes against what this rank's GPU has free, before the engine
 * allocates anything: a run that cannot fit stops here with the figures and
 * the settings that shrink them, not with an allocation failure mid-step. */
static void check_fits(TrainMode mode, const TrainConfig *c, const LlamaConfig *mc, int rank, int device) {
    CudaMemInputs in = cuda_mem_inputs_from_train(c, mode);
    CudaMemPlan p = cuda_mem_plan(mc, &in);
    int64_t free_b = 0, total_b = 0;
    cuda_memory_info(&free_b, &total_b);
    const double gib = 1024.0 * 1024.0 * 1024.0;
    if (p.total > free_b) {
        char fixes[512] = "";
        size_t n = 0;
        if (!c->recompute) n += (size_t)snprintf(fixes + n, sizeof fixes - n, " recompute=1,");
        if (in.precision == LLAMA_CUDA_FP32) n += (size_t)snprintf(fixes + n, sizeof fixes - n, " precision=bf16,");
        if (c->micro_batch > 1)
            n += (size_t)snprintf(fixes + n, sizeof fixes - n, " a smaller micro_batch (now %lld),", (long long)c->micro_batch);
        if (in.optim_device) n += (size_t)snprintf(fixes + n, sizeof fixes - n, " optim_device=0 (precision fp32 or bf16),");
        snprintf(fixes + n, sizeof fixes - n, " shorter sequences (L + S = %lld)", (long long)in.T);
        const double mib = 1024.0 * 1024.0;
        die("train: the CUDA engine needs %lld bytes (%.2f GiB: %.1f MiB weights and gradients, %.1f MiB activations, "
            "%.1f MiB optimizer, %.1f MiB workspace) on rank %d's GPU %d, but %lld bytes (%.2f GiB) of %.2f GiB are "
            "free; lower it with%s ('kvcpt plan --config FILE' prints the figures)",
            (long long)p.total, (double)p.total / gib, (double)(p.params + p.wbf16 + p.grads + p.rope) / mib,
            (double)p.acts / mib, (double)p.optim / mib, (double)p.workspace / mib, rank, device, (long long)free_b,
            (double)free_b / gib, (double)total_b / gib, fixes);
    }
    if (rank == 0)
        fprintf(stderr,
                "kvcpt train: device memory: the plan predicts %.2f GiB (%lld bytes) per GPU, %.2f GiB free of %.2f GiB: "
                "headroom %.2f GiB\n",
                (double)p.total / gib, (long long)p.total, (double)free_b / gib, (double)total_b / gib,
                (double)(free_b - p.total) / gib);
}

TrainEngine train_engine_cuda_create(TrainMode mode, const TrainConfig *c, Llama *model, Fsdp *fsdp, Comm *comm) {
    /* this rank's GPU first: every allocation below lands on it */
    int device = cuda_device_select("train", comm_rank(comm), comm_local_rank(comm), comm_local_world(comm),
                                    (int)c->share_device);
    check_fits(mode, c, &model->cfg, comm_rank(comm), device);
    CudaEngine *e = xcalloc(1, sizeof *e);
    e->mode = mode, e->seed = (uint64_t)c->seed, e->model = model, e->fsdp = fsdp;
    llama_cuda_create(&e->gpu, &model->cfg, (int)c->recompute, train_mode_precision(mode));
    if (model->mask.enabled) llama_cuda_set_mask(&e->gpu, &model->mask, model->mask_S);
    int on_engine = train_mode_optim_on_engine(mode);
    return (TrainEngine){.ctx = e,
                         .begin_step = cuda_begin_step,
                         .forward = cuda_forward,
                         .backward = cuda_backward,
                         .begin_eval = cuda_begin_eval,
                         .grad_sum_squares = on_engine ? cuda_grad_sum_squares : NULL,
                         .optim_step = on_engine ? cuda_optim_step : NULL,
                         .push_state = cuda_push_state,
                         .pull_state = cuda_pull_state,
                         .log_fields = cuda_log_fields,
                         .free = cuda_engine_free};
}
#else
TrainEngine train_engine_cuda_create(TrainMode mode, const TrainConfig *c, Llama *model, Fsdp *fsdp, Comm *comm) {
    die("train: device cuda: this binary was built without the CUDA backend; hint: install nvcc and run 'make'");
}
#endif
