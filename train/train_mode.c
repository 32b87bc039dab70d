#include "train_mode.h"

#include <stdio.h>
#include <string.h>

#include "../common/util.h"

TrainMode train_mode_resolve(const TrainConfig *c, int rank, int world, const Backend **backend) {
    *backend = backend_resolve(c->device);
    return train_mode_for_kind((*backend)->kind, c, rank, world);
}

TrainMode train_mode_for_kind(BackendKind kind, const TrainConfig *c, int rank, int world) {
    int optim_gpu = c->optim_device == 1 || strcmp(c->precision, "bf16sr") == 0;
    if (kind == BACKEND_HOST) {
        if (rank == 0 && (c->recompute || strcmp(c->precision, "fp32") || optim_gpu))
            warnf("config: 'recompute', 'precision' and 'optim_device' apply to the CUDA engine only; the CPU model "
                  "is fp32, keeps every activation and steps on the host");
        return TRAIN_HOST;
    }
    KV_CHECK(!(c->optim_device && strcmp(c->precision, "bf16") == 0),
             "config: precision bf16 with optim_device=1 would keep no fp32 master, so updates below half a bf16 step "
             "would be lost; use precision=bf16sr (stochastic rounding) or optim_device=0");
    KV_CHECK(world == 1 || !optim_gpu,
             "config: optim_device=1 and precision bf16sr step the engine's own parameters, for one rank only; this "
             "run has %d ranks: use optim_device=0 with precision fp32 or bf16 (master and optimizer sharded over "
             "the GPUs)",
             world);
    if (strcmp(c->precision, "bf16sr") == 0) return TRAIN_ACCEL_BF16SR;
    if (strcmp(c->precision, "bf16") == 0) return TRAIN_ACCEL_BF16;
    return optim_gpu ? TRAIN_ACCEL_FP32_OPTIM : TRAIN_ACCEL_FP32;
}

int train_mode_whole_on_device(TrainMode m) { return m == TRAIN_ACCEL_FP32_OPTIM || m == TRAIN_ACCEL_BF16SR; }

DecoderCudaPrecision train_mode_precision(TrainMode m) {
    return m == TRAIN_ACCEL_BF16 || m == TRAIN_ACCEL_BF16SR ? DECODER_CUDA_BF16_WEIGHTS : DECODER_CUDA_FP32;
}

int train_mode_stochastic(TrainMode m) { return m == TRAIN_ACCEL_BF16SR; }

static const char *mode_detail(TrainMode m) {
    switch (m) {
        case TRAIN_HOST: return "";
        case TRAIN_ACCEL_FP32: return " (master and optimizer sharded on the GPUs)";
        case TRAIN_ACCEL_BF16: return " (bf16 weights) (master and optimizer sharded on the GPUs)";
        case TRAIN_ACCEL_FP32_OPTIM: return " (optimizer on the device)";
        case TRAIN_ACCEL_BF16SR: return " (bf16 weights, stochastic rounding) (optimizer on the device)";
    }
    die("train: unknown mode %d", (int)m);
}

const char *train_mode_describe(TrainMode m, const Backend *be, char *buf, size_t cap) {
    snprintf(buf, cap, "%s%s", be->name, mode_detail(m));
    return buf;
}
