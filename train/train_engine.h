#ifndef KVCPT_TRAIN_ENGINE_H
#define KVCPT_TRAIN_ENGINE_H
/* What the trainer's one step loop (train/trainer.c) asks of the engine
 * that runs forward and backward: the CPU model (train_engine_cpu.c), or an
 * accelerator backend's engine, made by its train seam (TrainDevice below,
 * Backend.train in common/backend.h; the CUDA backend's is
 * train_engine_cuda.c).
 *
 * Every engine steps the optimizer where it keeps the parameters. The CPU
 * engine works against the host's Decoder and its sharding
 * (parallel/fsdp.h): a backward hands each unit's gradient to the sharding
 * hooks in the order the CPU backward finishes them, and the host's
 * optimizer steps this rank's shard of the host master. The CUDA engine
 * steps on the GPUs' shards (parallel/fsdp_cuda.h) or, for one rank, on its
 * own whole parameters; the host's master shard and optimizer are then only
 * a checkpoint's staging.
 * Either way micro-batches add in the same order for every rank count. */
#include <jansson.h>
#include <stdint.h>

#include "../model/decoder.h"
#include "../optim/optimizer.h"
#include "../parallel/comm.h"
#include "../parallel/fsdp.h"
#include "train_config.h"
#include "train_mode.h"

typedef struct TrainEngine {
    void *ctx;
    /* Before a step's micro-batches: the step's gradient sums zeroed. */
    void (*begin_step)(void *ctx);
    /* One micro-batch of a step: a training forward of batch sequences of
     * T tokens (host memory in) and its backward, the gradient added to the
     * step's sums (on the CPU through the sharding hooks, into this rank's
     * shard); returns the mean loss. */
    float (*micro_batch)(void *ctx, const int32_t *tokens, const int32_t *targets, int64_t batch, int64_t T);
    /* Dev evaluation: begin_eval, loss-only forwards (every rank runs the
     * same number), end_eval. The CPU engine gathers the whole model and
     * runs without its sharding hooks (host collectives) until end_eval;
     * the CUDA engine needs neither (a sharded one gathers each layer as
     * its forward reaches it). The gradients are left as they are. */
    void (*begin_eval)(void *ctx);
    float (*eval_forward)(void *ctx, const int32_t *tokens, const int32_t *targets, int64_t batch, int64_t T);
    void (*end_eval)(void *ctx);
    /* The sum of squares of the accumulated gradients over all ranks (the
     * same on every rank), and one update (1 on every rank when any rank's
     * gradient is unusable: nothing changed anywhere). */
    double (*grad_sum_squares)(void *ctx);
    int (*optim_step)(void *ctx, const AdamWHyper *h, int64_t step);
    /* The host's optimizer and master (after setup or a restore) into the
     * engine, and back before a checkpoint; the CPU engine steps the host's
     * optimizer itself, so it only records which one. */
    void (*push_state)(void *ctx, Optimizer *opt);
    void (*pull_state)(void *ctx, Optimizer *opt);
    /* Adds the engine's own fields (memory held) to a log record. */
    void (*log_fields)(void *ctx, json_t *record);
    void (*free)(void *ctx);
} TrainEngine;

/* An accelerator backend's train seam: its engine for a mode (never
 * TRAIN_HOST), over the host model and its sharding (both must outlive it).
 * It first selects this rank's device, before anything else touches it. */
typedef struct TrainDevice {
    TrainEngine (*engine_create)(TrainMode mode, const TrainConfig *c, Decoder *model, Fsdp *fsdp, Comm *comm);
} TrainDevice;

/* The engine mode runs on, from backend be (train_mode_resolve's): the
 * CPU model on the host, be's train seam otherwise. */
TrainEngine train_engine_create(const Backend *be, TrainMode mode, const TrainConfig *c, Decoder *model, Fsdp *fsdp,
                                Comm *comm);
TrainEngine train_engine_cpu_create(Decoder *model, Fsdp *fsdp);
#endif
