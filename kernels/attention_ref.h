#ifndef KVCPT_ATTENTION_REF_H
#define KVCPT_ATTENTION_REF_H
/* The attention oracle: softmax(Q K^T / sqrt(D) + mask) V written out as
 * plain loops in double, one query row at a time, with no blocking, no
 * vector code and no shortcuts. The attention tests hold the CPU fast path
 * (kernels/attention.c) to it; it is never on a training or eval path.
 *
 * Same arguments and layouts as attention_forward_cpu (kernels/attention.h):
 * q (B, T, Hq, D); k, v (B, T, Hkv, D); out like q; lse (B, Hq, T); query
 * head h reads KV head h / (Hq / Hkv) (GQA). sel is the selection
 * attention_refresh_select_cpu wrote (NULL when !refresh_active(m, T)): the
 * reference takes the selection as given and checks the attention over it;
 * the selection has its own tests. Results are rounded to float once. */
#include <stdint.h>

#include "refresh_mask.h"

/* seen[j] (j < T) = 1 when query row p of (batch row b, KV head g) attends
 * to key j under m and sel, else 0 (the mask of attention.h as a table). */
void attention_ref_row_mask(unsigned char *seen, const int32_t *sel, int64_t b, int64_t g, int64_t p, int64_t T,
                            int64_t Hkv, const RefreshMask *m);
void attention_forward_ref(float *out, float *lse, const float *q, const float *k, const float *v, const int32_t *sel,
                           int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t D, const RefreshMask *m);
/* dq, dk, dv (written, not accumulated) of sum(out * dout), from the
 * definitions: the probabilities are recomputed here, so no output of the
 * path under test feeds the oracle. */
void attention_backward_ref(float *dq, float *dk, float *dv, const float *dout, const float *q, const float *k,
                            const float *v, const int32_t *sel, int64_t B, int64_t T, int64_t Hq, int64_t Hkv,
                            int64_t D, const RefreshMask *m);
#endif
