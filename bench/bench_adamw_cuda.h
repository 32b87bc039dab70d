#ifndef KVCPT_BENCH_ADAMW_CUDA_H
#define KVCPT_BENCH_ADAMW_CUDA_H
/* The CUDA half of `kvcpt bench adamw` (bench/bench_adamw.c).
 * bench_adamw_cuda() returns the table in a build with the CUDA backend
 * (bench/bench_adamw_cuda.c) and NULL otherwise (bench/bench_cuda_none.c);
 * the Makefile links one of the two. */
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
} BenchAdamwCuda;

const BenchAdamwCuda *bench_adamw_cuda(void);

#endif
