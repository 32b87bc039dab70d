#ifndef KVCPT_OPTIM_CUDA_H
#define KVCPT_OPTIM_CUDA_H
/* The CUDA AdamW step (optim/adamw8bit.cu): the same segments, states and
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
/* Only the check optim_cuda_step starts with (the device twin of
 * optim_check_grads), for sharded steps where every rank must agree on
 * skipping before any rank updates: one launch, then the verdict (a
 * synchronizing copy). Returns 1 when a gradient is unusable, with
 * *optim_cuda_bad(o) naming the first, else 0; parameters and states are
 * never touched. Prints nothing: the caller decides whether and how to
 * warn (it knows whether the skip came from this rank or another). */
int optim_cuda_check(OptimCuda *o, const void *grads, OptimDtype gd, const AdamWHyper *h, int64_t step);
/* Device bytes it holds (states, segment table, code maps). */
int64_t optim_cuda_bytes(const OptimCuda *o);

/* Where one segment's parameters are when a model spreads them over an
 * fp32 and a bf16 buffer (the bf16-weights engine): the buffer's dtype,
 * the element offset there, and for bf16 whether updates are rounded
 * stochastically (adamw_round_bf16_sr) instead of to nearest even. */
typedef struct {
    OptimDtype dtype;
    int64_t offset;
    int stochastic;
} OptimPlace;
/* Records place[nseg] and the stochastic-rounding seed for every later
 * optim_cuda_step_placed (dies on a negative offset or stochastic fp32). */
void optim_cuda_set_places(OptimCuda *o, const OptimPlace *place, uint64_t sr_seed);
/* optim_cuda_step with each segment's parameters where its place says;
 * the random bits of element j of segment s are adamw_sr_bits(seed, step,
 * seg.offset + j), as in its CPU oracle optim_step_rounded. */
int optim_cuda_step_placed(OptimCuda *o, float *p32, void *p16, const void *grads, OptimDtype gd, const AdamWHyper *h,
                           int64_t step);

#ifdef __cplusplus
}
#endif
#endif
