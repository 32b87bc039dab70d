#ifndef KVCPT_ATTENTION_MMA_H
#define KVCPT_ATTENTION_MMA_H
/* Tensor-core (mma.sync bf16 x bf16 -> fp32) twins of the CUDA attention in
 * kernels/attention.h, for the bf16 engine: the same arguments and layouts,
 * fp32 tensors in device memory. The causal rows [0, L) run on tensor cores
 * (FlashAttention-2 tiling, online softmax, no T x T buffer, GQA without
 * copies, no float atomics: the same bits for any block order; the
 * one-pass backward's dQ goes through per-group partial sums, see
 * attention_mma_bwd_groups): Q, K and V are
 * rounded to bf16 as they are loaded, and so are the probabilities P before
 * P V; every product sums in fp32. The RefreshKV suffix rows [L, T), a few
 * dozen, keep the fp32 gather kernel of kernels/attention.cu (unrounded
 * inputs), with the per-row records (evict, restride) as well. So with K = L the rows before L equal the unmasked run's bit for
 * bit, the rows from L on do not. D must be 16, 32, 64 or 128. */
#include <stdint.h>

#include "attention.h"
#include "attention_cuda_size.h"

#ifdef __cplusplus
extern "C" {
#endif
/* sel may be NULL when !refresh_active(m, T). */
void attention_forward_mma_cuda(float *out, float *lse, const float *q, const float *k, const float *v,
                                const int32_t *sel, int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t D,
                                const RefreshMask *m);

/* Writes (not accumulates) dq, dk, dv; out and lse are the forward's. */
void attention_backward_mma_cuda(float *dq, float *dk, float *dv, const float *dout, const float *q, const float *k,
                                 const float *v, const float *out, const float *lse, const int32_t *sel, int64_t B,
                                 int64_t T, int64_t Hq, int64_t Hkv, int64_t D, const RefreshMask *m);

/* The same on bf16 activations (the bf16 engine): q, k, v, out and dout in
 * bf16 (loaded as they are, 16 bytes at a time: each buffer 16-byte
 * aligned), out rounded once when stored; lse, dq, dk, dv fp32. On inputs
 * that are bf16 values they give the fp32 entries' bits (out rounded). */
void attention_forward_mma_bf16_cuda(bf16 *out, float *lse, const bf16 *q, const bf16 *k, const bf16 *v,
                                     const int32_t *sel, int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t D,
                                     const RefreshMask *m);
void attention_backward_mma_bf16_cuda(float *dq, float *dk, float *dv, const bf16 *dout, const bf16 *q, const bf16 *k,
                                      const bf16 *v, const bf16 *out, const float *lse, const int32_t *sel, int64_t B,
                                      int64_t T, int64_t Hq, int64_t Hkv, int64_t D, const RefreshMask *m);

/* The entries above run attention_bwd_variant_default(); these run the
 * variant named (kernels/attention_cuda_size.h AttnBwdVariant), so tests and
 * `kvcpt bench attention` can set them side by side. The one pass: each
 * block walks key tiles g, g + G, ... of one query head and adds dS K into
 * its own fp32 slice of a partial dQ (G, B, T, Hq, D; slice 0 is dq); a
 * second kernel sums the slices in group order. */
void attention_backward_mma_variant_cuda(float *dq, float *dk, float *dv, const float *dout, const float *q,
                                         const float *k, const float *v, const float *out, const float *lse,
                                         const int32_t *sel, int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t D,
                                         const RefreshMask *m, AttnBwdVariant variant);
void attention_backward_mma_bf16_variant_cuda(float *dq, float *dk, float *dv, const bf16 *dout, const bf16 *q,
                                              const bf16 *k, const bf16 *v, const bf16 *out, const float *lse,
                                              const int32_t *sel, int64_t B, int64_t T, int64_t Hq, int64_t Hkv,
                                              int64_t D, const RefreshMask *m, AttnBwdVariant variant);

/* Test hooks: the same kernels with a planted bug, so the parity test (and
 * the race detector, for the missing barrier) can show that it catches each
 * one. */
typedef enum {
    ATTN_MMA_OK = 0,
    ATTN_MMA_BUG_P_SWAP = 1,      /* forward: P's A fragment with registers 1 and 2 swapped */
    ATTN_MMA_BUG_V_NO_TRANS = 2,  /* forward: V loaded with ldmatrix without .trans */
    ATTN_MMA_BUG_ROW_MAX = 3,     /* forward: the row max reduced across lanes of other rows */
    ATTN_MMA_BUG_B_NO_TRANS = 4,  /* backward: K, Q, dO as B of dS K, dS^T Q, P^T dO without .trans */
    ATTN_MMA_BUG_PT_SWAP = 5, /* backward: P^T, dS^T (and the one pass's dS) fragments with registers 1 and 2 swapped */
    ATTN_MMA_BUG_DQ_GROUP = 6, /* one-pass backward: the dQ sum stops one group short */
    ATTN_MMA_BUG_DS_NO_SYNC = 7, /* one-pass backward: no barrier between storing dS^T and the dQ product reading it */
    ATTN_MMA_BUG_CP_WAIT1 =
        16, /* forward, bf16 entry: the next K/V tile's cp.async waited for with wait_group 1, not 0 */
    ATTN_MMA_BUG_CP_NO_SYNC = 17, /* forward, bf16 entry: no __syncthreads between a landed K/V tile and its reads */
    ATTN_MMA_BUG_BWD_CP_WAIT1 =
        18, /* one-pass backward, bf16 entry: the next Q/dO tile waited for with wait_group 1, not 0 */
    ATTN_MMA_BUG_BWD_CP_BUF =
        19, /* one-pass backward, bf16 entry: the next Q/dO tile copied into the buffer being read */
    ATTN_MMA_BUG_EXP2_SCALE = 20, /* forward: probabilities 2^(s scale), the log2 e factor left out */
    ATTN_MMA_BUG_LSE_LOG2 = 21, /* forward: lse stored in log2 units, not natural log */
    ATTN_MMA_BUG_Q_ROWS = 22, /* forward: Q loaded as 64 rows (a K/V tile's), a 128-row tile's second half zero */
    ATTN_MMA_BUG_SUFFIX_WARP = 23, /* backward: the suffix rows' dQ and dK/dV sums without their last warp's part */
} AttnMmaBug;
void attention_forward_mma_planted_cuda(float *out, float *lse, const float *q, const float *k, const float *v,
                                        const int32_t *sel, int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t D,
                                        const RefreshMask *m, AttnMmaBug bug);
/* The planted entries above with the query tile of `rows` rows (64 or 128,
 * 4 or 8 warps; 0: attention_mma_fwd_rows()), so the tests run both. */
void attention_forward_mma_rows_planted_cuda(float *out, float *lse, const float *q, const float *k, const float *v,
                                             const int32_t *sel, int64_t B, int64_t T, int64_t Hq, int64_t Hkv,
                                             int64_t D, const RefreshMask *m, int rows, AttnMmaBug bug);
void attention_forward_mma_bf16_rows_planted_cuda(bf16 *out, float *lse, const bf16 *q, const bf16 *k, const bf16 *v,
                                                  const int32_t *sel, int64_t B, int64_t T, int64_t Hq, int64_t Hkv,
                                                  int64_t D, const RefreshMask *m, int rows, AttnMmaBug bug);
/* The query-tile rows of the forward the entries above run (64 or 128),
 * fixed at build time by KVCPT_ATTN_FWD_ROWS. */
int attention_mma_fwd_rows(void);
/* The bf16 entry with a planted bug of its cp.async pipeline (the fp32
 * entry loads synchronously); the other values run it unplanted. */
void attention_forward_mma_bf16_planted_cuda(bf16 *out, float *lse, const bf16 *q, const bf16 *k, const bf16 *v,
                                             const int32_t *sel, int64_t B, int64_t T, int64_t Hq, int64_t Hkv,
                                             int64_t D, const RefreshMask *m, AttnMmaBug bug);
/* The backward variant named, with a planted bug (the one pass's bugs plant
 * nothing in the two passes) and groups dQ groups (the one pass; 1 ..
 * ceil(T / 128), 0 for attention_mma_bwd_groups' choice), so the tests can
 * run blocks over several key tiles at small T. */
void attention_backward_mma_planted_cuda(float *dq, float *dk, float *dv, const float *dout, const float *q,
                                         const float *k, const float *v, const float *out, const float *lse,
                                         const int32_t *sel, int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t D,
                                         const RefreshMask *m, AttnBwdVariant variant, int64_t groups, AttnMmaBug bug);
/* The one pass's bf16 entry with a planted bug of its cp.async pipeline
 * (the fp32 entry rounds while loading, so it stores synchronously); the
 * other values run it unplanted. */
void attention_backward_mma_bf16_planted_cuda(float *dq, float *dk, float *dv, const bf16 *dout, const bf16 *q,
                                              const bf16 *k, const bf16 *v, const bf16 *out, const float *lse,
                                              const int32_t *sel, int64_t B, int64_t T, int64_t Hq, int64_t Hkv,
                                              int64_t D, const RefreshMask *m, AttnMmaBug bug);
#ifdef __cplusplus
}
#endif
#endif
