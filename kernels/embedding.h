#ifndef KVCPT_EMBEDDING_H
#define KVCPT_EMBEDDING_H
/* Token embedding lookup: out[i] = wte[tokens[i]]. */
#include <stdint.h>

void embedding_forward_cpu(float *out, const int32_t *tokens, const float *wte, int64_t N, int64_t C);
/* dwte[tokens[i]] += dout[i]; deterministic (rows applied in order). */
void embedding_backward_cpu(float *dwte, const float *dout, const int32_t *tokens, int64_t N, int64_t C);

/* CUDA twins: same arguments, DEVICE pointers, default stream; results
 * match the CPU oracle within the tolerances of tests/gpu/test_ops_cuda.c. */
#ifdef __cplusplus
extern "C" {
#endif
void embedding_forward_cuda(float *out, const int32_t *tokens, const float *wte, int64_t N, int64_t C);
/* Bit-identical to the CPU: rows of one token are added in row order. */
void embedding_backward_cuda(float *dwte, const float *dout, const int32_t *tokens, int64_t N, int64_t C);
#ifdef __cplusplus
}
#endif
#endif
