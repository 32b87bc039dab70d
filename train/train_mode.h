#ifndef KVCPT_TRAIN_MODE_H
#define KVCPT_TRAIN_MODE_H
/* How a training run computes, resolved once from the configuration and the
 * rank count: the backend (config 'device', common/backend.h), an
 * accelerator engine's precision, and where the optimizer steps (the CPU's
 * shards on the host; the devices' shards on the devices; or, for one rank,
 * the engine's own parameters with no separate master). Impossible
 * combinations are refused here, with the fix named, before anything is
 * allocated. */
#include <stddef.h>

#include "../common/backend.h"
#include "../model/decoder_cuda_size.h"
#include "train_config.h"

typedef enum {
    TRAIN_HOST = 0,          /* fp32 CPU model; optimizer sharded on the host (MPI) */
    TRAIN_ACCEL_FP32,        /* device engine, fp32 weights; fp32 master and optimizer sharded on the devices */
    TRAIN_ACCEL_BF16,        /* bf16 matrices rounded from the devices' sharded fp32 master */
    TRAIN_ACCEL_FP32_OPTIM,  /* fp32 weights are the master, stepped on the device (one rank) */
    TRAIN_ACCEL_BF16SR,      /* bf16 matrices only, stochastic rounding, stepped on the device (one rank) */
} TrainMode;

/* Resolves backend x precision x optimizer placement x ranks; *backend: the
 * backend config 'device' names (backend_resolve). Dies naming the keys of
 * an impossible combination (the device optimizer with several ranks, bf16
 * weights stepped on the device without stochastic rounding). Warns, on
 * rank 0, about accelerator-only keys set for a CPU run. */
TrainMode train_mode_resolve(const TrainConfig *c, int rank, int world, const Backend **backend);
/* The same for a kind of backend, whatever this machine has (memory plans). */
TrainMode train_mode_for_kind(BackendKind kind, const TrainConfig *c, int rank, int world);
/* 1 when the engine's own parameters are the master (one rank, no shards). */
int train_mode_whole_on_device(TrainMode m);
/* The device engine's weight precision (fp32 on the host). */
DecoderCudaPrecision train_mode_precision(TrainMode m);
/* 1 when bf16 matrices are rounded stochastically by the device optimizer. */
int train_mode_stochastic(TrainMode m);
/* The mode on backend be, e.g. "cuda (bf16 weights)", for the startup
 * lines; buf holds it (cap bytes). */
const char *train_mode_describe(TrainMode m, const Backend *be, char *buf, size_t cap);
#endif
