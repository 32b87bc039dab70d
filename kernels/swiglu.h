#ifndef KVCPT_SWIGLU_H
#define KVCPT_SWIGLU_H
/* SwiGLU gate: h = silu(g) * u, elementwise over n values. */
#include <stdint.h>

void swiglu_forward_cpu(float *h, const float *g, const float *u, int64_t n);
/* dg, du are overwritten (not accumulated). */
void swiglu_backward_cpu(float *dg, float *du, const float *dh, const float *g, const float *u, int64_t n);
#endif
