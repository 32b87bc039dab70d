#ifndef KVCPT_ATTENTION_DECODE_H
#define KVCPT_ATTENTION_DECODE_H
/* Inference-mode attention for the evaluator.
 *
 * Prefill statistics: what KV-cache policies need from a full causal
 * prefill without keeping a T x T matrix: per query head the attention
 * each key received from all queries (H2O), and the probability rows of the
 * last W queries (SnapKV, RefreshKV, K-VEC, ReST-KV windows).
 *
 * Decode: one query token over a chosen list of cached key positions per
 * KV head, returning the probabilities so the policy can update itself. */
#include <stdint.h>

/* q (T, Hq, D), k (T, Hkv, D) post-RoPE, one sequence.
 * colsum (Hq, T): sum over queries p of softmax_p[j] (may be NULL);
 * last (Hq, W, T): probability rows of queries T-W..T-1, zero beyond p (may be NULL). */
void attention_prefill_stats_cpu(float *colsum, float *last, const float *q, const float *k, int64_t T, int64_t Hq,
                                 int64_t Hkv, int64_t D, int64_t W);

/* q (Hq, D); kc, vc: caches (cap, Hkv, D); keys[g] lists n[g] positions for KV head g.
 * out (Hq, D); probs: for head h of group g, n[g] values at probs + h * max_n. */
void attention_decode_cpu(float *out, float *probs, const float *q, const float *kc, const float *vc,
                          const int32_t *const *keys, const int64_t *n, int64_t max_n, int64_t Hq, int64_t Hkv,
                          int64_t D);
#endif
