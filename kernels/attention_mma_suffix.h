#ifndef KVCPT_ATTENTION_MMA_SUFFIX_H
#define KVCPT_ATTENTION_MMA_SUFFIX_H
/* The forward of the RefreshKV suffix rows [L, T) for the tensor-core
 * attention (kernels/attention_mma_fwd.cu): the few rows that see the
 * selected keys and the local ones (or, with per-row records, each its own
 * keys), in fp32 on unrounded inputs. Internal to the kernels; the
 * arguments are attention_forward_mma_cuda's, with m active for T. */
#include <stdint.h>

#include "attention.h"

#ifdef __cplusplus
extern "C" {
#endif
/* out and lse of the rows [L, T) */
void attention_mma_suffix_forward_cuda(float *out, float *lse, const float *q, const float *k, const float *v,
                                       const int32_t *sel, int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t D,
                                       const RefreshMask *m);
void attention_mma_suffix_forward_bf16_cuda(bf16 *out, float *lse, const bf16 *q, const bf16 *k, const bf16 *v,
                                            const int32_t *sel, int64_t B, int64_t T, int64_t Hq, int64_t Hkv,
                                            int64_t D, const RefreshMask *m);
#ifdef __cplusplus
}
#endif
#endif
