#ifndef KVCPT_TRAIN_MODE_H
#define KVCPT_TRAIN_MODE_H
/* How a training run computes, resolved once from the configuration and the
 * rank count: the device (config 'device'), the CUDA engine's precision,
 * and where the optimizer steps (the CPU's shards on the host; the GPUs'
 * shards on the devices; or, for one rank, the CUDA engine's own
 * parameters with no separate master). Impossible combinations are refused
 * here, with the fix named, before anything is allocated. */
#include "../common/backend.h"
#include "../model/llama_cuda_size.h"
#include "train_config.h"

typedef enum {
    TRAIN_CPU = 0,          /* fp32 CPU model; optimizer sharded on the host (MPI) */
    TRAIN_CUDA_FP32,        /* CUDA engine, fp32 weights; fp32 master and optimizer sharded on the GPUs (NCCL) */
    TRAIN_CUDA_BF16,        /* bf16 matrices rounded from the GPUs' sharded fp32 master (NCCL) */
    TRAIN_CUDA_FP32_OPTIM,  /* fp32 weights are the master, stepped on the GPU (one rank) */
    TRAIN_CUDA_BF16SR,      /* bf16 matrices only, stochastic rounding, stepped on the GPU (one rank) */
} TrainMode;

/* Resolves device x precision x optimizer placement x ranks; dies naming the
 * keys of an impossible combination (the GPU optimizer with several ranks,
 * bf16 weights stepped on the GPU without stochastic rounding). Warns, on
 * rank 0, about CUDA-only keys set for a CPU run. */
TrainMode train_mode_resolve(const TrainConfig *c, int rank, int world);
/* The same for a given device, whatever this machine has (memory plans). */
TrainMode train_mode_for_device(Device dev, const TrainConfig *c, int rank, int world);
Device train_mode_device(TrainMode m);
/* 1 when the engine's own parameters are the master (one rank, no shards). */
int train_mode_whole_on_device(TrainMode m);
/* The CUDA engine's weight precision (fp32 for the CPU). */
LlamaCudaPrecision train_mode_precision(TrainMode m);
/* 1 when bf16 matrices are rounded stochastically by the GPU optimizer. */
int train_mode_stochastic(TrainMode m);
/* e.g. "cuda (bf16 weights)", for the startup line. */
const char *train_mode_describe(TrainMode m);
#endif
