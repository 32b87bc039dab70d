#ifndef KVCPT_OPTIM_CUDA_H
#define KVCPT_OPTIM_CUDA_H
/* The CUDA AdamW step (kernels/adamw8bit.cu): the same segments, states and
 * arithmetic as optim_step (its CPU oracle), on device buffers. Parameters
 * and gradients may be fp32 or bf16 (bf16 parameters are updated in fp32
 * and rounded to nearest even). Only compiled with KVCPT_CUDA. */
#include <stdint.h>

#include "optimizer.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { OPTIM_F32 = 0, OPTIM_BF16 = 1 } OptimDtype;

typedef struct OptimCuda OptimCuda;

/* Device copy of host's segments and current states. */
OptimCuda *optim_cuda_create(const Optimizer *host);
void optim_cuda_free(OptimCuda *o);
/* States device -> host (to save) and host -> device (after a load); host
 * must have the same segments and kind. */
void optim_cuda_download(const OptimCuda *o, Optimizer *host);
void optim_cuda_upload(OptimCuda *o, const Optimizer *host);

/* One step over every segment of d_params / d_grads. Two launches: a check
 * of every gradient, then (only if all are usable) the update, one pass
 * over params, grads and both states. Returns 0, or 1 with nothing changed
 * and *optim_cuda_bad(o) naming the first unusable gradient (a warning is
 * printed). Synchronizes to read the check's verdict. */
int optim_cuda_step(OptimCuda *o, void *d_params, OptimDtype param_dtype, const void *d_grads, OptimDtype grad_dtype,
                    const AdamWHyper *h, int64_t step);
const OptimBadGrad *optim_cuda_bad(const OptimCuda *o);

#ifdef __cplusplus
}
#endif
#endif
