#ifndef KVCPT_RESIDUAL_H
#define KVCPT_RESIDUAL_H
/* The residual connection: y += x, elementwise. Its own file because both
 * the CPU model and the CUDA engine add a residual twice per layer. */
#include <stdint.h>

void residual_add_cpu(float *y, const float *x, int64_t n);

#ifdef __cplusplus
extern "C" {
#endif
/* CUDA twin, DEVICE pointers, default stream: one fp32 add per element, so
 * bit-identical to the CPU. */
void residual_add_cuda(float *y, const float *x, int64_t n);
#ifdef __cplusplus
}
#endif
#endif
