/* The CPU engine: the host model itself. Sharding hooks gather each unit's
 * parameters as the passes reach it and scatter its gradients after; the
 * optimizer steps this rank's shard of the host master (parallel/fsdp.h). */
#include <stdlib.h>

#include "../common/util.h"
#include "train_engine.h"

typedef struct {
    Decoder *model;
    Fsdp *fsdp;
    Optimizer *opt; /* the host's, over this rank's shard (push_state) */
    DecoderUnitHooks hooks; /* the model's sharding hooks, set aside between begin_eval and end_eval */
} CpuEngine;

static void cpu_begin_step(void *ctx) {
    CpuEngine *e = ctx;
    fsdp_zero_grad_sum(e->fsdp);
}

/* The model's gradient holds this micro-batch's alone: zeroed before the
 * training forward, which adds the head's part; the hooks hand each unit's
 * to the shard's sums as the backward finishes it. */
static float cpu_micro_batch(void *ctx, const int32_t *tokens, const int32_t *targets, int64_t batch, int64_t T) {
    CpuEngine *e = ctx;
    decoder_zero_grad(e->model);
    float loss = decoder_forward_train(e->model, tokens, targets, batch, T);
    decoder_backward(e->model);
    return loss;
}

/* The hooks are host collectives over units the passes reach: the eval's
 * forwards read the whole model, gathered once. */
static void cpu_begin_eval(void *ctx) {
    CpuEngine *e = ctx;
    fsdp_gather_all(e->fsdp);
    e->hooks = e->model->pass.hooks;
    e->model->pass.hooks = (DecoderUnitHooks){0};
}

static float cpu_eval_forward(void *ctx, const int32_t *tokens, const int32_t *targets, int64_t batch, int64_t T) {
    CpuEngine *e = ctx;
    return decoder_forward(e->model, tokens, targets, batch, T);
}

static void cpu_end_eval(void *ctx) {
    CpuEngine *e = ctx;
    e->model->pass.hooks = e->hooks;
}

static double cpu_grad_sum_squares(void *ctx) {
    CpuEngine *e = ctx;
    return fsdp_grad_sum_squares(e->fsdp);
}

/* Updates this rank's shard, unless any rank's shard holds an unusable gradient. */
static int cpu_optim_step(void *ctx, const AdamWHyper *h, int64_t step) {
    CpuEngine *e = ctx;
    KV_CHECK(e->opt, "train: the CPU engine stepped before its optimizer was pushed");
    int bad = optim_check_grads(e->opt, e->fsdp->grad_sum, h, step);
    if (comm_max_i64(e->fsdp->comm, bad)) return 1;
    KV_CHECK(optim_step(e->opt, e->fsdp->master, e->fsdp->grad_sum, h, step) == 0,
             "step %lld: the optimizer rejected gradients its check accepted", (long long)step);
    return 0;
}

/* The host's optimizer is the one this engine steps, over the host master
 * itself: nothing to copy either way. */
static void cpu_push_state(void *ctx, Optimizer *opt) {
    CpuEngine *e = ctx;
    e->opt = opt;
}

static void cpu_pull_state(void *ctx, Optimizer *opt) {}
static void cpu_log_fields(void *ctx, json_t *record) {}
static void cpu_free(void *ctx) { free(ctx); }

TrainEngine train_engine_cpu_create(Decoder *model, Fsdp *fsdp) {
    CpuEngine *e = xcalloc(1, sizeof *e);
    e->model = model, e->fsdp = fsdp;
    return (TrainEngine){.ctx = e,
                         .begin_step = cpu_begin_step,
                         .micro_batch = cpu_micro_batch,
                         .begin_eval = cpu_begin_eval,
                         .eval_forward = cpu_eval_forward,
                         .end_eval = cpu_end_eval,
                         .grad_sum_squares = cpu_grad_sum_squares,
                         .optim_step = cpu_optim_step,
                         .push_state = cpu_push_state,
                         .pull_state = cpu_pull_state,
                         .log_fields = cpu_log_fields,
                         .free = cpu_free};
}

TrainEngine train_engine_create(const Backend *be, TrainMode mode, const TrainConfig *c, Decoder *model, Fsdp *fsdp,
                                Comm *comm) {
    if (mode == TRAIN_HOST) return train_engine_cpu_create(model, fsdp);
    KV_CHECK(be->kind == BACKEND_ACCEL && be->train, "train: the %s backend has no training engine", be->label);
    return be->train->engine_create(mode, c, model, fsdp, comm);
}
