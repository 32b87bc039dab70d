/* The CUDA engine (model/decoder_cuda.h) behind train_engine.h. The optimizer
 * always steps on the GPU, in one of two ways the mode picks:
 * - sharded (precision fp32 or bf16, any rank count): ZeRO-3 on the
 *   devices (parallel/fsdp_cuda.h): each GPU holds its shard of the fp32
 *   master, the gradient sum and the 8-bit AdamW states, and the engine
 *   streams its layers: each is all-gathered over NCCL into a slot just
 *   before it runs, and its gradient reduce-scattered into the owners as
 *   soon as its backward is done;
 * - whole (optim_device=1 or precision bf16sr, one rank): the engine's own
 *   parameters are the only copy and the optimizer steps them
 *   (device_optim.h).
 * The host's master shard and optimizer are refreshed only for a
 * checkpoint and the final model. The CUDA backend's train seam
 * (train_engine_cuda.h), which its entry registers. */
#include "train_engine_cuda.h"

#include <stdlib.h>

#include "../common/util.h"
#include "../kernels/attention_cuda_size.h"
#include "../kernels/attention_cudnn.h"
#include "../kernels/cuda_device.h"
#include "../model/decoder_cuda.h"
#include "../parallel/comm_device.h"
#include "../parallel/fsdp_cuda.h"
#include "cuda_mem_plan.h"
#include "device_optim.h"

typedef struct {
    TrainMode mode;
    uint64_t seed;            /* the stochastic rounding's key */
    Decoder *model;
    Fsdp *fsdp;
    DecoderCuda gpu;
    FsdpCuda *shards;         /* sharded modes, after push_state; else NULL */
    DeviceOptim *dopt;        /* whole modes, after push_state; else NULL */
    int64_t h2d_logged, d2h_logged; /* transfer totals at the last log record */
    int64_t traffic_logged[4];      /* fsdp_cuda_traffic's totals at the last log record */
} CudaEngine;

/* The step's sums: the shards' (sharded), or the engine's own gradients
 * (whole), which every micro-batch adds onto. */
static void cuda_begin_step(void *ctx) {
    CudaEngine *e = ctx;
    if (e->shards) fsdp_cuda_zero_grad_sum(e->shards);
    else decoder_cuda_zero_grad(&e->gpu);
}

/* Sharded: this micro-batch's gradient alone in the engine, zeroed before
 * the training forward (which adds the head's part), each unit handed to
 * its owners as the backward finishes it; whole: added to the sums. */
static float cuda_micro_batch(void *ctx, const int32_t *tokens, const int32_t *targets, int64_t batch, int64_t T) {
    CudaEngine *e = ctx;
    if (e->shards) decoder_cuda_zero_grad(&e->gpu);
    float loss = decoder_cuda_forward_train(&e->gpu, tokens, targets, batch, T);
    decoder_cuda_backward(&e->gpu);
    return loss;
}

/* Nothing to prepare or undo: a sharded engine gathers each layer as its
 * forward reaches it (every rank runs the same number of dev forwards),
 * and a whole one holds the current parameters already. */
static void cuda_begin_eval(void *ctx) {}
static void cuda_end_eval(void *ctx) {}

/* Loss-only: the gradients stay as they are. */
static float cuda_eval_forward(void *ctx, const int32_t *tokens, const int32_t *targets, int64_t batch, int64_t T) {
    CudaEngine *e = ctx;
    return decoder_cuda_forward(&e->gpu, tokens, targets, batch, T);
}

static double cuda_grad_sum_squares(void *ctx) {
    CudaEngine *e = ctx;
    return e->shards ? fsdp_cuda_grad_sum_squares(e->shards) : device_optim_grad_sum_squares(&e->gpu);
}

static int cuda_optim_step(void *ctx, const AdamWHyper *h, int64_t step) {
    CudaEngine *e = ctx;
    return e->shards ? fsdp_cuda_step(e->shards, h, step) : device_optim_step(e->dopt, &e->gpu, h, step);
}

/* The first push creates the device optimizer: after setup or a restore,
 * the host's shard (parameters and states) goes to the device once. */
static void cuda_push_state(void *ctx, Optimizer *opt) {
    CudaEngine *e = ctx;
    if (train_mode_whole_on_device(e->mode)) {
        if (!e->dopt)
            e->dopt = device_optim_create(&e->gpu, opt, &e->fsdp->plan, train_mode_stochastic(e->mode), e->seed);
        device_optim_push(e->dopt, &e->gpu, e->fsdp->master, opt);
        return;
    }
    if (!e->shards) e->shards = fsdp_cuda_create(e->fsdp, &e->gpu, opt);
    fsdp_cuda_push(e->shards, e->fsdp->master, opt);
}

static void cuda_pull_state(void *ctx, Optimizer *opt) {
    CudaEngine *e = ctx;
    if (e->dopt) device_optim_pull(e->dopt, &e->gpu, e->fsdp->master, opt);
    if (e->shards) fsdp_cuda_pull(e->shards, e->fsdp->master, opt);
}

/* Device memory, and what moved since the last record: bytes between host
 * and device (tokens, losses, the norm's and the check's scalars; a
 * checkpoint's shard when one was written) and the collectives' bytes. */
static void cuda_log_fields(void *ctx, json_t *record) {
    CudaEngine *e = ctx;
    json_object_set_new(record, "gpu_engine_mb", json_real((double)decoder_cuda_bytes(&e->gpu) / 1048576.0));
    if (e->dopt)
        json_object_set_new(record, "gpu_optim_mb", json_real((double)device_optim_bytes(e->dopt) / 1048576.0));
    if (e->shards) {
        json_object_set_new(record, "gpu_shard_mb", json_real((double)fsdp_cuda_device_bytes(e->shards) / 1048576.0));
        int64_t now[4];
        fsdp_cuda_traffic(e->shards, &now[0], &now[1], &now[2], &now[3]);
        const char *keys[4] = {"gathers", "gather_bytes", "reduces", "reduce_bytes"};
        for (int i = 0; i < 4; i++) {
            json_object_set_new(record, keys[i], json_integer(now[i] - e->traffic_logged[i]));
            e->traffic_logged[i] = now[i];
        }
    }
    int64_t h2d = 0, d2h = 0;
    cuda_transfer_bytes(&h2d, &d2h);
    json_object_set_new(record, "h2d_bytes", json_integer(h2d - e->h2d_logged));
    json_object_set_new(record, "d2h_bytes", json_integer(d2h - e->d2h_logged));
    e->h2d_logged = h2d, e->d2h_logged = d2h;
}

static void cuda_engine_free(void *ctx) {
    CudaEngine *e = ctx;
    device_optim_free(e->dopt);
    fsdp_cuda_free(e->shards, &e->gpu);
    decoder_cuda_free(&e->gpu);
    free(e);
}

/* The plan's bytes against what this rank's GPU has free, before the engine
 * allocates anything: a run that cannot fit stops here with the figures and
 * the settings that shrink them, not with an allocation failure mid-step. */
static void check_fits(TrainMode mode, const TrainConfig *c, const DecoderConfig *mc, int rank, int world, int device) {
    CudaMemInputs in = cuda_mem_inputs_from_train(c, mode, world);
    CudaMemPlan p = cuda_mem_plan(mc, &in);
    int64_t free_b = 0, total_b = 0;
    cuda_memory_info(&free_b, &total_b);
    const double gib = 1024.0 * 1024.0 * 1024.0;
    if (p.total > free_b) {
        char fixes[512] = "";
        size_t n = 0;
        if (c->recompute == DECODER_RECOMPUTE_NONE)
            n += (size_t)snprintf(fixes + n, sizeof fixes - n, " recompute=attn or full,");
        if (c->recompute == DECODER_RECOMPUTE_ATTN)
            n += (size_t)snprintf(fixes + n, sizeof fixes - n, " recompute=full,");
        if (in.precision == DECODER_CUDA_FP32) n += (size_t)snprintf(fixes + n, sizeof fixes - n, " precision=bf16,");
        if (c->micro_batch > 1)
            n += (size_t)snprintf(fixes + n, sizeof fixes - n, " a smaller micro_batch (now %lld),",
                                  (long long)c->micro_batch);
        if (in.optim_device)
            n += (size_t)snprintf(fixes + n, sizeof fixes - n, " optim_device=0 (precision fp32 or bf16),");
        if (in.ranks > 0) n += (size_t)snprintf(fixes + n, sizeof fixes - n, " more ranks (now %d),", world);
        if (in.ranks == 1)
            n += (size_t)snprintf(fixes + n, sizeof fixes - n, " precision=bf16sr (one rank: no separate master),");
        snprintf(fixes + n, sizeof fixes - n, " shorter sequences (L + S = %lld)", (long long)in.T);
        const double mib = 1024.0 * 1024.0;
        die("train: the CUDA engine needs %lld bytes (%.2f GiB: %.1f MiB weights and gradients, %.1f MiB activations, "
            "%.1f MiB attention scratch, %.1f MiB optimizer, %.1f MiB shards, %.1f MiB workspace) on rank %d's GPU %d, "
            "but %lld "
            "bytes (%.2f GiB) of %.2f GiB are "
            "free; lower it with%s ('kvcpt plan --config FILE' prints the figures)",
            (long long)p.total, (double)p.total / gib, (double)(p.params + p.wbf16 + p.grads + p.rope) / mib,
            (double)p.acts / mib, (double)p.attn / mib, (double)p.optim / mib, (double)p.shards / mib,
            (double)p.workspace / mib, rank, device, (long long)free_b, (double)free_b / gib, (double)total_b / gib,
            fixes);
    }
    if (rank == 0)
        fprintf(
            stderr,
            "kvcpt train: device memory: the plan predicts %.2f GiB (%lld bytes) per GPU, %.2f GiB free of %.2f GiB: "
            "headroom %.2f GiB\n",
            (double)p.total / gib, (long long)p.total, (double)free_b / gib, (double)total_b / gib,
            (double)(free_b - p.total) / gib);
}

static TrainEngine cuda_engine_create(TrainMode mode, const TrainConfig *c, Decoder *model, Fsdp *fsdp, Comm *comm) {
    /* the attention kernels (the config key, else KVCPT_ATTN), refused before anything is allocated */
    const DecoderAttnImpl attn =
        decoder_attn_impl_resolve((DecoderAttnImpl)c->attn_impl, "config 'attn_impl'",
                                  train_mode_precision(mode) == DECODER_CUDA_BF16_WEIGHTS, model->cfg.head_dim);
    if (attn == DECODER_ATTN_CUDNN && model->mask.enabled && refresh_per_row(&model->mask))
        die("config 'attn_impl' is cudnn, which runs the paper's RefreshKV rows only: set mask_evict=0 and "
            "mask_restride=0, or attn_impl mma or cuda-core");
    /* this rank's GPU first: every allocation below lands on it */
    int device = cuda_device_select("train", comm_rank(comm), comm_local_rank(comm), comm_local_world(comm),
                                    (int)c->share_device);
    check_fits(mode, c, &model->cfg, comm_rank(comm), comm_world(comm), device);
    /* the device collectives bind to the device just selected; sharded steps
     * move their device buffers with them (MPI stays for the host's control
     * plane): NCCL over several ranks, copies on the GPU for one */
    if (!train_mode_whole_on_device(mode)) comm_use_device(comm);
    CudaEngine *e = xcalloc(1, sizeof *e);
    e->mode = mode, e->seed = (uint64_t)c->seed, e->model = model, e->fsdp = fsdp;
    /* sharded: layers streamed through slots, unless reshard_after_forward=0
     * keeps every gathered unit for the step (the whole model) */
    if (!train_mode_whole_on_device(mode) && c->reshard_after_forward)
        decoder_cuda_create_streamed(&e->gpu, &model->cfg, (DecoderRecompute)c->recompute, train_mode_precision(mode));
    else decoder_cuda_create(&e->gpu, &model->cfg, (DecoderRecompute)c->recompute, train_mode_precision(mode));
    decoder_cuda_set_attn(&e->gpu, attn, "config 'attn_impl'");
    if (attn == DECODER_ATTN_CUDNN) { /* cuDNN's plans for the training shape, before the first step */
        const char *why = attention_cudnn_probe(c->micro_batch, c->L + c->S, model->cfg.num_attention_heads,
                                                model->cfg.num_key_value_heads, model->cfg.head_dim, &model->mask);
        if (why) die("config 'attn_impl' is cudnn, but %s", why);
    }
    if (comm_rank(comm) == 0)
        fprintf(stderr, "kvcpt train: attention on %s%s%s\n",
                attn == DECODER_ATTN_MMA     ? "tensor cores (mma)"
                : attn == DECODER_ATTN_CUDNN ? "cuDNN's fused attention (cudnn; not yet validated on a GPU)"
                                             : "the CUDA-core kernels (cuda-core)",
                attn == DECODER_ATTN_MMA ? ", backward " : "",
                attn == DECODER_ATTN_MMA ? attention_bwd_variant_name(attention_bwd_variant_default()) : "");
    if (model->mask.enabled) decoder_cuda_set_mask(&e->gpu, &model->mask);
    cuda_transfer_bytes(&e->h2d_logged, &e->d2h_logged);
    return (TrainEngine){.ctx = e,
                         .begin_step = cuda_begin_step,
                         .micro_batch = cuda_micro_batch,
                         .begin_eval = cuda_begin_eval,
                         .eval_forward = cuda_eval_forward,
                         .end_eval = cuda_end_eval,
                         .grad_sum_squares = cuda_grad_sum_squares,
                         .optim_step = cuda_optim_step,
                         .push_state = cuda_push_state,
                         .pull_state = cuda_pull_state,
                         .log_fields = cuda_log_fields,
                         .free = cuda_engine_free};
}

const TrainDevice train_device_cuda = {.engine_create = cuda_engine_create};
