#ifndef KVCPT_MATMUL_H
#define KVCPT_MATMUL_H
/* Linear layers in the Hugging Face weight layout: weight is (OC, IC) and
 * out = inp @ weight^T. The CPU path calls BLAS (sgemm, fp32). */
#include <stdint.h>

/* out (N, OC) = inp (N, IC) @ weight (OC, IC)^T */
void matmul_forward_cpu(float *out, const float *inp, const float *weight, int64_t N, int64_t IC, int64_t OC);
/* dinp (N, IC) += dout @ weight; dweight (OC, IC) += dout^T @ inp. Either may be NULL. */
void matmul_backward_cpu(float *dinp, float *dweight, const float *dout, const float *inp, const float *weight,
                         int64_t N, int64_t IC, int64_t OC);
#endif
