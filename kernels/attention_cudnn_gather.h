#ifndef KVCPT_ATTENTION_CUDNN_GATHER_H
#define KVCPT_ATTENTION_CUDNN_GATHER_H
/* The cuDNN attention's data movement (kernels/attention_cudnn_gather.cu):
 * DEVICE pointers, default stream. The key list of (batch row b, KV head
 * g) is sel's nsel positions (sel (B, Hkv, nsel), below L) then L .. T-1. */
#include <stdint.h>

#include "bf16.h"

#ifdef __cplusplus
extern "C" {
#endif
/* kg, vg (B, Hkv, nsel + T - L, D): k, v (B, T, Hkv, D) at the list. */
void attention_cudnn_gather_kv_cuda(bf16 *kg, bf16 *vg, const bf16 *k, const bf16 *v, const int32_t *sel, int64_t B,
                                    int64_t T, int64_t Hkv, int64_t D, int64_t L, int64_t nsel);
/* dk, dv (B, T, Hkv, D) += dkg, dvg (B, Hkv, nsel + T - L, D) at the list's
 * positions; shift 1 plants a bug (every entry added one list entry off). */
void attention_cudnn_scatter_add_cuda(float *dk, float *dv, const bf16 *dkg, const bf16 *dvg, const int32_t *sel,
                                      int64_t B, int64_t T, int64_t Hkv, int64_t D, int64_t L, int64_t nsel, int shift);
/* dst[r * dst_ld + c] = src[r * src_ld + c] for rows x cols floats: the
 * suffix rows' lse between the engine's (B, Hq, T) and a dense (B, Hq, S)
 * cuDNN can take at 16-byte alignment. */
void attention_cudnn_copy_rows_cuda(float *dst, int64_t dst_ld, const float *src, int64_t src_ld, int64_t rows,
                                    int64_t cols);
/* out[i] = in[i] for n elements, bf16 to fp32 (exact). */
void attention_cudnn_widen_cuda(float *out, const bf16 *in, int64_t n);
#ifdef __cplusplus
}
#endif
#endif
