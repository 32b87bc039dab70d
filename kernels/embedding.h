#ifndef KVCPT_EMBEDDING_H
#define KVCPT_EMBEDDING_H
/* Token embedding lookup: out[i] = wte[tokens[i]]. */
#include <stdint.h>

void embedding_forward_cpu(float *out, const int32_t *tokens, const float *wte, int64_t N, int64_t C);
/* dwte[tokens[i]] += dout[i]; deterministic (rows applied in order). */
void embedding_backward_cpu(float *dwte, const float *dout, const int32_t *tokens, int64_t N, int64_t C);
#endif
