#include "train_mode.h"

#include <string.h>

#include "../common/util.h"

TrainMode train_mode_resolve(const TrainConfig *c, int rank, int world) {
    return train_mode_for_device(backend_resolve(c->device), c, rank, world);
}

TrainMode train_mode_for_device(Device dev, const TrainConfig *c, int rank, int world) {
    int optim_gpu = c->optim_device == 1 || strcmp(c->precision, "bf16sr") == 0;
    if (dev == DEVICE_CPU) {
        if (rank == 0 && (c->recompute || strcmp(c->precision, "fp32") || optim_gpu))
            warnf("config: 'recompute', 'precision' and 'optim_device' apply to the CUDA engine only; the CPU model "
                  "is fp32, keeps every activation and steps on the host");
        return TRAIN_CPU;
    }
    KV_CHECK(!(c->optim_device && strcmp(c->precision, "bf16") == 0),
             "config: precision bf16 with optim_device=1 would keep no fp32 master, so updates below half a bf16 step "
             "would be lost; use precision=bf16sr (stochastic rounding) or optim_device=0");
    KV_CHECK(world == 1 || !optim_gpu,
             "config: optim_device=1 and precision bf16sr step the engine's own parameters, for one rank only; this "
             "run has %d ranks: use optim_device=0 with precision fp32 or bf16 (master and optimizer sharded over "
             "the GPUs)",
             world);
    if (strcmp(c->precision, "bf16sr") == 0) return TRAIN_CUDA_BF16SR;
    if (strcmp(c->precision, "bf16") == 0) return TRAIN_CUDA_BF16;
    return optim_gpu ? TRAIN_CUDA_FP32_OPTIM : TRAIN_CUDA_FP32;
}

Device train_mode_device(TrainMode m) { return m == TRAIN_CPU ? DEVICE_CPU : DEVICE_CUDA; }

int train_mode_whole_on_device(TrainMode m) { return m == TRAIN_CUDA_FP32_OPTIM || m == TRAIN_CUDA_BF16SR; }

LlamaCudaPrecision train_mode_precision(TrainMode m) {
    return m == TRAIN_CUDA_BF16 || m == TRAIN_CUDA_BF16SR ? LLAMA_CUDA_BF16_WEIGHTS : LLAMA_CUDA_FP32;
}

int train_mode_stochastic(TrainMode m) { return m == TRAIN_CUDA_BF16SR; }

const char *train_mode_describe(TrainMode m) {
    switch (m) {
    case TRAIN_CPU: return "cpu";
    case TRAIN_CUDA_FP32: return "cuda (master and optimizer sharded on the GPUs)";
    case TRAIN_CUDA_BF16: return "cuda (bf16 weights) (master and optimizer sharded on the GPUs)";
    case TRAIN_CUDA_FP32_OPTIM: return "cuda (optimizer on the device)";
    case TRAIN_CUDA_BF16SR: return "cuda (bf16 weights, stochastic rounding) (optimizer on the device)";
    }
    die("train: unknown mode %d", (int)m);
}
