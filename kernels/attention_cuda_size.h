#ifndef KVCPT_ATTENTION_CUDA_SIZE_H
#define KVCPT_ATTENTION_CUDA_SIZE_H
/* The CUDA attention's own arithmetic of sizes and launch shapes (kernels/
 * attention.cu, attention_select.cu, attention_mma_*.cu): scratch bytes,
 * bitmap words, the split suffix's chunks and the one-pass backward's dQ
 * groups. Plain C, compiled in every build, so that the memory plan
 * (train/cuda_mem_plan.c) and the tests can count what a GPU would
 * allocate without one. The CPU attention (kernels/attention.c) needs none
 * of it. */
#include <stdint.h>

#include "refresh_mask.h"

/* Device bytes the CUDA attention allocates itself for one call (kernels/
 * attention.cu and attention_mma_*.cu: scores, the backward's row sums, the
 * rows' visibility bitmaps), an upper bound over its fp32 and tensor-core
 * paths, so that the memory plan (train/cuda_mem_plan.c) counts them. In
 * every build. */
int64_t attention_cuda_select_scratch_bytes(const RefreshMask *m, int64_t B, int64_t T, int64_t Hq, int64_t Hkv);
/* Keys per block of the RefreshKV selection's score kernels (kernels/
 * attention_select.cu): a split by the key count alone, so that the sums'
 * order, and so the selection, does not depend on the GPU. 512 gives the
 * 8B shape (n = 8192 keys, 32 query heads) 512 blocks; and the chunks of
 * n keys. */
#define ATTN_SELECT_CHUNK_KEYS 512
int64_t attention_select_chunks(int64_t n);
int64_t attention_cuda_forward_scratch_bytes(const RefreshMask *m, int64_t B, int64_t T, int64_t Hq, int64_t Hkv,
                                             int64_t D);
/* The tensor-core backward's causal rows (kernels/attention_mma_bwd.cu):
 * two passes, a dQ kernel per query tile (S, dP, dS K) and a dK/dV kernel
 * per key tile (S^T, dP^T, P^T dO, dS^T Q), 7 products per tile and no
 * partials; or FlashAttention-2's one pass per key tile, 5 products, its dQ
 * through G fp32 partials read and written per tile. Both give the
 * oracle's values within the tests' tolerance, not each other's bits. */
typedef enum { ATTN_BWD_TWO_PASS = 0, ATTN_BWD_ONE_PASS = 1 } AttnBwdVariant;
/* The engine's variant, chosen here and nowhere else: the one pass
 * (FlashAttention-2's structure, its Q/dO tiles double-buffered), unless
 * the environment variable KVCPT_ATTN_BWD names two_pass (or one_pass); any
 * other value stops the program naming the variable. */
#define ATTN_BWD_ENV "KVCPT_ATTN_BWD"
AttnBwdVariant attention_bwd_variant_default(void);
const char *attention_bwd_variant_name(AttnBwdVariant v);
/* The backward's bytes for variant v (the engine passes the default). */
int64_t attention_cuda_backward_scratch_bytes(const RefreshMask *m, int64_t B, int64_t T, int64_t Hq, int64_t Hkv,
                                              int64_t D, AttnBwdVariant v);
/* G, the one-pass backward's dQ groups per (batch row, query head): as
 * many as keep the blocks (B Hq G) within one wave on an H100's 132 SMs
 * (one 8-warp block per SM at D = 128), at least 1, at most 8 and at most
 * one per 128-key tile. Each group past the first costs an fp32 copy of dQ
 * (the first is dq itself) while the partial dQ traffic, per (key tile,
 * query tile) pair, is the same for any G: at the 8B CPT shape (B Hq = 32)
 * G = 4 (128 blocks) keeps the one pass within an 80 GB card where two
 * waves (G = 8) did not. A function of the shape only, so the bits do not
 * depend on the device. */
int64_t attention_mma_bwd_groups(int64_t B, int64_t T, int64_t Hq);
/* 64-bit words per listed row of the bitmaps above: ceil(T / 64). */
int64_t attention_row_mask_words(int64_t T);
/* Bytes of the rows' visibility bitmaps alone (attention_row_mask_cuda). */
int64_t attention_cuda_row_mask_bytes(const RefreshMask *m, int64_t B, int64_t T, int64_t Hkv);
/* The split suffix forward (the tensor-core path's rows [L, T), kernels/
 * attention.cu): each row's key list cut into chunks of this many entries
 * (a multiple of 64, fixed by the shape alone), one block per (row tile,
 * head, chunk), so that B * Hq small row tiles still fill the GPU; then a
 * fixed-order combine of the chunks' (max, sum, output) partials, held in
 * attention_suffix_partial_bytes of fp32 (0 when one chunk suffices, and
 * then the unsplit kernel runs). 0 when the mask is inactive. */
int64_t attention_suffix_chunk_keys(const RefreshMask *m, int64_t B, int64_t T, int64_t Hq);
int64_t attention_suffix_chunks(const RefreshMask *m, int64_t B, int64_t T, int64_t Hq);
int64_t attention_suffix_partial_bytes(const RefreshMask *m, int64_t B, int64_t T, int64_t Hq, int64_t D);

#endif
