#ifndef KVCPT_TRAIN_ENGINE_CUDA_H
#define KVCPT_TRAIN_ENGINE_CUDA_H
/* The CUDA backend's train seam (train/train_engine.h): the training engine
 * on this rank's GPU, train/train_engine_cuda.c. Compiled only with the
 * CUDA backend, whose entry (backends/cuda/backend.c) registers it. */
#include "train_engine.h"

extern const TrainDevice train_device_cuda;
#endif
