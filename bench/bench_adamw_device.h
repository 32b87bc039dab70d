#ifndef KVCPT_BENCH_ADAMW_DEVICE_H
#define KVCPT_BENCH_ADAMW_DEVICE_H
/* The device half of `kvcpt bench adamw` (bench/bench_adamw.c), an
 * accelerator backend's bench hook (bench/bench_backend.h); the CUDA
 * backend's is bench/bench_adamw_cuda.c. */
#include <stddef.h>
#include <stdint.h>

#include "../optim/optim_cuda.h" /* OptimDtype */
#include "../optim/optimizer.h"

typedef struct {
    /* Seconds per step of o's device twin over p and g (host, n floats;
     * the device parameters in param_dtype), the best of `steps` timed
     * steps after one warm-up step. */
    double (*time_step)(Optimizer *o, const float *p, const float *g, OptimDtype param_dtype, const AdamWHyper *h,
                        int64_t n, int64_t steps);
    double (*hbm_gbps)(void);                  /* the device's peak memory bandwidth */
    void (*describe)(char *buf, size_t cap);   /* the device's name */
} BenchAdamwDevice;

#endif
