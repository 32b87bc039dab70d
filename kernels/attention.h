#ifndef KVCPT_ATTENTION_H
#define KVCPT_ATTENTION_H
/* Causal GQA attention with the RefreshKV training mask (docs/model.md).
 *
 * Layouts: q (B, T, Hq, D); k, v (B, T, Hkv, D); out like q; lse (B, Hq, T).
 * Query head h uses KV head h / (Hq/Hkv): K/V are never copied per head.
 *
 * With the mask on, positions p < L attend causally to 0..p; positions
 * p >= L attend to TopK_g ∪ {L..p}, where TopK_g (per batch row and KV head)
 * comes from query L-1's attention over keys 0..L-1: aggregated over the
 * group's query heads, max-pooled, top-K (ties to the lower index), kept in
 * ascending order; the maths is the eval's own (kernels/refresh_select.h).
 * Keys are always visited in ascending position order, so with K >= L the
 * masked path performs the same arithmetic as the causal one and gives
 * bit-identical results.
 *
 * The paper's mask lets every row p >= L keep all K selected keys plus all
 * p - L + 1 local ones, while the eval's cache (eval/partial_cache.c,
 * eval/policy_refreshkv.c) holds a budget of K. Two fields make the mask the
 * one inference uses, so that CPT trains the attention the cache will run:
 *  - evict = 1: the budget K covers the kept keys and the local ones. Row p
 *    of an epoch that started at `since` (L, or a full row + 1) keeps the
 *    best min(#selected, max(0, K - (p - since))) selected keys, best meaning
 *    higher score first and, on equal scores, the higher position (the eval
 *    evicts the lowest score, the lower position first); when p - since > K
 *    only the K latest local keys remain. Row p sees
 *    kept ∪ [max(since, p - K), p) ∪ {p}: at most K + 1 keys.
 *  - restride = r > 0: rows p = L-1 + r*m, m >= 1 (eval --refresh-fixed r:
 *    decode step p - L + 1 divisible by r) attend to every key 0..p and
 *    re-select TopK from their own attention over 0..p (same aggregation,
 *    pooling, top-K and ties as at L-1); the next rows' since is p + 1.
 *    Without evict the kept set never shrinks (the paper's rows, refreshed).
 * The scores are the selection's pooled group scores; the whole selection
 * stays a constant of the backward. With either field set, sel holds one
 * record per row p >= L instead of TopK (refresh_sel_len, refresh_row_width):
 *   sel (B, Hkv, T - L, 1 + W), record [n, key_1 .. key_n, unused ..]:
 *   n = 0 marks a full row (keys 0..p), else its n visible keys ascending,
 *   the last one p itself.
 * Ascending keys keep the arithmetic of the causal rows: with K >= T (no key
 * ever evicted; refresh_mask_validate refuses K > L, the kernels take it) or
 * restride 1 (every row full) the results equal causal attention bit for
 * bit.
 *
 * This is the fast path (kernels/attention.c); the same maths as plain
 * loops, the tests' oracle, is kernels/attention_ref.h. The CUDA twins'
 * scratch sizes and launch shapes are in kernels/attention_cuda_size.h. */
#include <stdint.h>

#include "bf16.h"
#include "refresh_mask.h"

/* sel (B, Hkv, refresh_sel_len): the ascending selected key positions, or
 * with evict/restride the per-row records above. Requires refresh_active. */
void attention_refresh_select_cpu(int32_t *sel, const float *q, const float *k, int64_t B, int64_t T, int64_t Hq,
                                  int64_t Hkv, int64_t D, const RefreshMask *m);
/* sel may be NULL when !refresh_active(m, T). */
void attention_forward_cpu(float *out, float *lse, const float *q, const float *k, const float *v, const int32_t *sel,
                           int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t D, const RefreshMask *m);
/* What a causal prefill's attention leaves for the evaluator's KV-cache
 * policies (eval/policy.h, PrefillLayer), from the forward's own
 * probabilities: colsum (Hq, T) the attention each key received from all
 * queries (may be NULL); last (Hq, W, T) the probability rows of queries
 * T-W..T-1, zero past the query (may be NULL). W is clipped to T. */
typedef struct {
    float *colsum, *last;
    int64_t W;
} AttentionStats;
/* attention_forward_cpu for one causal sequence (B = 1, no mask) that also
 * writes st: one pass over the scores instead of a second softmax. out and
 * lse are attention_forward_cpu's bit for bit (the same sgemm blocks), and
 * do not depend on the thread count. */
void attention_forward_stats_cpu(float *out, float *lse, const AttentionStats *st, const float *q, const float *k,
                                 const float *v, int64_t T, int64_t Hq, int64_t Hkv, int64_t D);
/* Writes (not accumulates) dq, dk, dv. The selection is a constant here. */
void attention_backward_cpu(float *dq, float *dk, float *dv, const float *dout, const float *q, const float *k,
                            const float *v, const float *out, const float *lse, const int32_t *sel, int64_t B,
                            int64_t T, int64_t Hq, int64_t Hkv, int64_t D, const RefreshMask *m);

/* 1 for the head dims the bf16 engine runs attention on tensor cores for
 * (kernels/attention_mma.h): 16, 32, 64, 128. */
int attention_tensor_core_head_dim(int64_t D);

/* CUDA twins (kernels/attention.cu, the selection in attention_select.cu)
 * for every mask above, the per-row records included: same arguments,
 * DEVICE pointers (q, k, v, out, lse, sel, dout, dq, dk, dv); the mask is a
 * host struct. Default stream, no synchronisation. Flash style: no T x T
 * buffer, K/V shared by the group's query heads, no float atomics (two runs
 * give the same bits). D must be 8, 16, 32, 64 or 128; other values stop
 * the program with a message.
 * Results match the CPU oracle within the tolerances of
 * tests/gpu/test_attention_cuda.c; the selection matches it exactly unless
 * two pooled scores straddling the top-K (or a row's keep) boundary differ
 * by rounding. */
#ifdef __cplusplus
extern "C" {
#endif
/* Requires refresh_active(m, T): dies otherwise. */
void attention_refresh_select_cuda(int32_t *sel, const float *q, const float *k, int64_t B, int64_t T, int64_t Hq,
                                   int64_t Hkv, int64_t D, const RefreshMask *m);
/* sel may be NULL when !refresh_active(m, T). */
void attention_forward_cuda(float *out, float *lse, const float *q, const float *k, const float *v, const int32_t *sel,
                            int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t D, const RefreshMask *m);
/* Writes (not accumulates) dq, dk, dv; out and lse are the forward's. */
void attention_backward_cuda(float *dq, float *dk, float *dv, const float *dout, const float *q, const float *k,
                             const float *v, const float *out, const float *lse, const int32_t *sel, int64_t B,
                             int64_t T, int64_t Hq, int64_t Hkv, int64_t D, const RefreshMask *m);
/* The same kernels on bf16 activations (the bf16 engine): q, k, v, out and
 * dout in bf16, read exactly into fp32; out rounded once when stored; lse,
 * dq, dk, dv fp32. On inputs that are bf16 values they give the fp32
 * entries' bits (out rounded). */
void attention_refresh_select_bf16_cuda(int32_t *sel, const bf16 *q, const bf16 *k, int64_t B, int64_t T, int64_t Hq,
                                        int64_t Hkv, int64_t D, const RefreshMask *m);
void attention_forward_bf16_cuda(bf16 *out, float *lse, const bf16 *q, const bf16 *k, const bf16 *v, const int32_t *sel,
                                 int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t D, const RefreshMask *m);
void attention_backward_bf16_cuda(float *dq, float *dk, float *dv, const bf16 *dout, const bf16 *q, const bf16 *k,
                                  const bf16 *v, const bf16 *out, const float *lse, const int32_t *sel, int64_t B,
                                  int64_t T, int64_t Hq, int64_t Hkv, int64_t D, const RefreshMask *m);
#ifdef __cplusplus
}
#endif
#endif
