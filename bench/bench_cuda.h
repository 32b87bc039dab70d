#ifndef KVCPT_BENCH_CUDA_H
#define KVCPT_BENCH_CUDA_H
/* The CUDA backend's bench hooks (bench/bench_backend.h), one per target,
 * each defined in bench/bench_TARGET_cuda.c; the CUDA backend's entry
 * (backends/cuda/backend.c) gathers them. Compiled only with it. */
#include "bench_adamw_device.h"
#include "bench_attention_device.h"
#include "bench_model_device.h"
#include "bench_ops_device.h"

extern const BenchAdamwDevice bench_adamw_cuda;
extern const BenchAttentionDevice bench_attention_cuda;
extern const BenchModelDevice bench_model_cuda;
extern const BenchOpsDevice bench_ops_cuda;
#endif
