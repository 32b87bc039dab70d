/* The CPU engine: the host model itself. Sharding hooks gather each unit's
 * parameters as the passes reach it and scatter its gradients after. */
#include <stdlib.h>

#include "../common/util.h"
#include "train_engine.h"

typedef struct {
    Llama *model;
    Fsdp *fsdp;
} CpuEngine;

static void cpu_begin_step(void *ctx) {}

static float cpu_forward(void *ctx, const int32_t *tokens, const int32_t *targets, int64_t batch, int64_t T) {
    CpuEngine *e = ctx;
    return llama_forward(e->model, tokens, targets, batch, T);
}

static void cpu_backward(void *ctx) {
    CpuEngine *e = ctx;
    llama_zero_grad(e->model);
    llama_backward(e->model);
}

static void cpu_begin_eval(void *ctx) {
    CpuEngine *e = ctx;
    fsdp_gather_all(e->fsdp);
}

static void cpu_state(void *ctx, Optimizer *opt) {}
static void cpu_log_fields(void *ctx, json_t *record) {}
static void cpu_free(void *ctx) { free(ctx); }

TrainEngine train_engine_cpu_create(Llama *model, Fsdp *fsdp) {
    CpuEngine *e = xcalloc(1, sizeof *e);
    e->model = model, e->fsdp = fsdp;
    return (TrainEngine){.ctx = e,
                         .begin_step = cpu_begin_step,
                         .forward = cpu_forward,
                         .backward = cpu_backward,
                         .begin_eval = cpu_begin_eval,
                         .push_state = cpu_state,
                         .pull_state = cpu_state,
                         .log_fields = cpu_log_fields,
                         .free = cpu_free};
}

TrainEngine train_engine_create(TrainMode mode, const TrainConfig *c, Llama *model, Fsdp *fsdp, Comm *comm) {
    if (train_mode_device(mode) == DEVICE_CPU) return train_engine_cpu_create(model, fsdp);
    return train_engine_cuda_create(mode, c, model, fsdp, comm);
}
