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
 * bit. */
#include <stdint.h>

#include "bf16.h"
#include "refresh_select.h"

typedef struct {
    int enabled;         /* 0: ordinary causal attention */
    int64_t L;           /* prefill length */
    int64_t K;           /* kept prefill keys per KV head, K >= L keeps all (evict: kept + local keys) */
    int64_t pool_kernel; /* odd max-pool width (stride 1, clipped at the edges); 1 = none */
    GroupAgg agg;        /* how a GQA group's query heads combine their scores */
    int evict;           /* 1: K bounds kept + local keys per row, as the eval's cache (see above) */
    int64_t restride;    /* r > 0: full rows that re-select at L-1 + r*m, m >= 1; 0: none */
    int64_t S;           /* refresh positions after the prefill: a training sequence is L + S tokens
                          * (the model's forward checks it; the attention ops take any T) */
} RefreshMask;

/* Number of selected keys per (batch row, KV head): min(K, L). */
int64_t refresh_num_selected(const RefreshMask *m);
/* 1 when positions >= L exist, i.e. the selection matters for this T. */
int refresh_active(const RefreshMask *m, int64_t T);
/* Query heads per GQA group whose scores the selection reads: 1 with
 * GROUP_AGG_FIRST, else Hq / Hkv. */
int64_t refresh_selection_heads(const RefreshMask *m, int64_t Hq, int64_t Hkv);
/* 1 when sel holds one record per row p >= L (evict or restride set). */
int refresh_per_row(const RefreshMask *m);
/* Most keys a listed row sees (W above): min(K, T-1) + 1 with evict, else
 * min(K + T-1 - L, T-1) + 1. */
int64_t refresh_row_width(const RefreshMask *m, int64_t T);
/* Keys row p attends to: p + 1 for causal and full rows, else as above
 * (the paper's rows: min(K, L) + p - L + 1). Needs the mask enabled. */
int64_t refresh_row_count(const RefreshMask *m, int64_t p);
/* int32 entries of sel per (batch row, KV head) at sequence length T:
 * refresh_num_selected, or (T - L) * (1 + W) records when refresh_per_row. */
int64_t refresh_sel_len(const RefreshMask *m, int64_t T);
/* The mask that is off: ordinary causal attention (no pooling, max
 * aggregation, should it be enabled later). */
RefreshMask refresh_mask_off(void);
/* Checks L, K, kernel, evict, restride; dies naming the field. */
void refresh_mask_validate(const RefreshMask *m, const char *origin);

/* Device bytes the CUDA attention allocates itself for one call (kernels/
 * attention.cu and attention_mma_*.cu: scores, the backward's row sums, the
 * rows' visibility bitmaps), an upper bound over its fp32 and tensor-core
 * paths, so that the memory plan (train/cuda_mem_plan.c) counts them. In
 * every build. */
int64_t attention_cuda_select_scratch_bytes(const RefreshMask *m, int64_t B, int64_t T, int64_t Hq, int64_t Hkv);
int64_t attention_cuda_forward_scratch_bytes(const RefreshMask *m, int64_t B, int64_t T, int64_t Hq, int64_t Hkv,
                                             int64_t D);
/* The tensor-core backward's causal rows (kernels/attention_mma_bwd.cu):
 * two passes, a dQ kernel per query tile (S, dP, dS K) and a dK/dV kernel
 * per key tile (S^T, dP^T, P^T dO, dS^T Q), 7 products per tile and no
 * partials; or FlashAttention-2's one pass per key tile, 5 products, its dQ
 * through G fp32 partials read and written per tile. Both give the
 * oracle's values within the tests' tolerance, not each other's bits. */
typedef enum { ATTN_BWD_TWO_PASS = 0, ATTN_BWD_ONE_PASS = 1 } AttnBwdVariant;
/* The engine's variant: the one scripts/step_arithmetic.py forecasts faster
 * at the 8B CPT shape (docs/cuda.md), chosen here and nowhere else. */
AttnBwdVariant attention_bwd_variant_default(void);
const char *attention_bwd_variant_name(AttnBwdVariant v);
/* The backward's bytes for variant v (the engine passes the default). */
int64_t attention_cuda_backward_scratch_bytes(const RefreshMask *m, int64_t B, int64_t T, int64_t Hq, int64_t Hkv,
                                              int64_t D, AttnBwdVariant v);
/* G, the one-pass backward's dQ groups per (batch row, query head):
 * enough blocks (B Hq G) for two waves on an H100's 132 SMs (one 8-warp
 * block per SM at D = 128), at most 8 (8 fp32 copies of dQ) and at most one
 * per 128-key tile. A function of the shape only, so the bits do not
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
void attention_forward_bf16_cuda(bf16 *out, float *lse, const bf16 *q, const bf16 *k, const bf16 *v,
                                 const int32_t *sel, int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t D,
                                 const RefreshMask *m);
void attention_backward_bf16_cuda(float *dq, float *dk, float *dv, const bf16 *dout, const bf16 *q, const bf16 *k,
                                  const bf16 *v, const bf16 *out, const float *lse, const int32_t *sel, int64_t B,
                                  int64_t T, int64_t Hq, int64_t Hkv, int64_t D, const RefreshMask *m);
#ifdef __cplusplus
}
#endif
#endif
