#ifndef KVCPT_SWIGLU_H
#define KVCPT_SWIGLU_H
/* SwiGLU gate: h = silu(g) * u, elementwise, in the layout the MLP writes:
 * gu (N, 2F), each row [gate (F) | up (F)] as one matmul against the stacked
 * gate and up weights writes it; h (N, F). The backward overwrites dgu
 * (N, 2F) in the same layout. */
#include <stdint.h>

#include "bf16.h"

void swiglu_fused_forward_cpu(float *h, const float *gu, int64_t N, int64_t F);
void swiglu_fused_backward_cpu(float *dgu, const float *dh, const float *gu, int64_t N, int64_t F);
/* CUDA twins: same arguments, DEVICE pointers, default stream; results
 * match the CPU oracle within the tolerances of tests/gpu/test_ops_cuda.c. */
#ifdef __cplusplus
extern "C" {
#endif
/* fp32, and bf16 storage with fp32 arithmetic (one rounding per output). */
void swiglu_fused_forward_cuda(float *h, const float *gu, int64_t N, int64_t F);
void swiglu_fused_backward_cuda(float *dgu, const float *dh, const float *gu, int64_t N, int64_t F);
void swiglu_fused_forward_bf16_cuda(bf16 *h, const bf16 *gu, int64_t N, int64_t F);
void swiglu_fused_backward_bf16_cuda(bf16 *dgu, const bf16 *dh, const bf16 *gu, int64_t N, int64_t F);
#ifdef __cplusplus
}
#endif
#endif
