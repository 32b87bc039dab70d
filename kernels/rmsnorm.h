#ifndef KVCPT_RMSNORM_H
#define KVCPT_RMSNORM_H
/* RMSNorm as Hugging Face LlamaRMSNorm: y = w * x * rsqrt(mean(x^2) + eps),
 * statistics in fp32. rstd (N) is saved for the backward pass. */
#include <stdint.h>

void rmsnorm_forward_cpu(float *out, float *rstd, const float *inp, const float *weight, int64_t N, int64_t C, float eps);
/* dinp (N, C) += ..., dweight (C) += ... */
void rmsnorm_backward_cpu(float *dinp, float *dweight, const float *dout, const float *inp, const float *weight,
                          const float *rstd, int64_t N, int64_t C);
#endif
