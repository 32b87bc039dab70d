#ifndef KVCPT_CLIP_H
#define KVCPT_CLIP_H
/* Global-norm gradient clipping. Sums are deterministic: fixed chunks of
 * GRAD_SUM_CHUNK elements, each summed in order in double, the chunk sums
 * then added in order, whatever the thread count. A non-finite gradient
 * gives a non-finite sum (callers skip the step then). */
#include <stdint.h>

#define GRAD_SUM_CHUNK 65536

double grad_sum_squares(const float *g, int64_t n);
/* The same over a device buffer (optim/grad_norm.cu; KVCPT_CUDA builds):
 * the same chunks, a chunk's own sum in another order, so it agrees to
 * double rounding. */
double grad_sum_squares_cuda(const float *g, int64_t n);
/* torch.nn.utils.clip_grad_norm_'s factor: min(1, max_norm / (norm + 1e-6));
 * 1 when max_norm <= 0 (clipping off). Pass it as AdamWHyper.grad_scale to
 * fuse clipping into the optimizer step, or apply it with grad_scale(). */
double grad_clip_factor(double norm, double max_norm);
void grad_scale(float *g, int64_t n, float s);

#endif
