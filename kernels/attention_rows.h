#ifndef KVCPT_ATTENTION_ROWS_H
#define KVCPT_ATTENTION_ROWS_H
/* Row-range entries of the fp32 CUDA attention (kernels/attention.cu) for
 * the tensor-core path (kernels/attention_mma_*.cu), which computes the
 * causal rows itself and leaves the few RefreshKV suffix rows to these.
 * Internal to the kernels; the arguments are attention_forward_cuda's. */
#include <stdint.h>

#include "attention.h"
#include "attention_cuda_size.h"

#ifdef __cplusplus
extern "C" {
#endif
/* out and lse of rows [row_begin, row_end), which lie all before L or all
 * from L on (the suffix rows gather their keys through sel, split over key
 * chunks when attention_suffix_chunks > 1: bits that can differ from
 * attention_forward_cuda's by rounding, within its tolerances). */
void attention_forward_rows_cuda(float *out, float *lse, const float *q, const float *k, const float *v,
                                 const int32_t *sel, int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t D,
                                 const RefreshMask *m, int64_t row_begin, int64_t row_end);
void attention_forward_rows_bf16_cuda(bf16 *out, float *lse, const bf16 *q, const bf16 *k, const bf16 *v,
                                      const int32_t *sel, int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t D,
                                      const RefreshMask *m, int64_t row_begin, int64_t row_end);
/* Test hook: the fp32 entry with a planted bug in the combine of the split
 * suffix rows' chunks (attention_suffix_chunks), so that the tests show
 * they catch one; ATTN_SUFFIX_OK runs it unplanted. */
enum {
    ATTN_SUFFIX_OK = 0,
    ATTN_SUFFIX_BUG_DROP_LAST_CHUNK = 1, /* the last chunk's partials left out */
    ATTN_SUFFIX_BUG_NEXT_MAX = 2,        /* partials out of order: chunk c weighed by chunk c + 1's max */
};
void attention_forward_rows_planted_cuda(float *out, float *lse, const float *q, const float *k, const float *v,
                                         const int32_t *sel, int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t D,
                                         const RefreshMask *m, int64_t row_begin, int64_t row_end, int bug);
/* Test hook: attention_refresh_select_cuda with a planted bug in the
 * combine of its key chunks (ATTN_SELECT_CHUNK_KEYS): their softmax
 * statistics, or the paper mask's top-K counts, so that the tests show they
 * catch one; ATTN_SELECT_OK runs it unplanted. */
enum {
    ATTN_SELECT_OK = 0,
    ATTN_SELECT_BUG_CHUNK_LOCAL = 1,     /* each chunk's keys normalised by its own max and sum, not all chunks' */
    ATTN_SELECT_BUG_TOPK_LAST_CHUNK = 2, /* the top-K's radix counts summed without the last chunk's */
};
void attention_refresh_select_planted_cuda(int32_t *sel, const float *q, const float *k, int64_t B, int64_t T,
                                           int64_t Hq, int64_t Hkv, int64_t D, const RefreshMask *m, int bug);
/* The rows' visibility bitmaps (B*Hkv, T - L, attention_row_mask_words(T))
 * uint64: bit j % 64 of word j / 64 set when row p >= L sees key j, from
 * the per-row records in sel (evict or restride, kernels/attention.h).
 * Allocated on the default stream (attention_cuda_forward_scratch_bytes;
 * the caller frees them with cudaFreeAsync), NULL when the mask has no
 * per-row records. */
uint64_t *attention_row_mask_cuda(const int32_t *sel, int64_t B, int64_t T, int64_t Hkv, const RefreshMask *m);
#ifdef __cplusplus
}
#endif
#endif
