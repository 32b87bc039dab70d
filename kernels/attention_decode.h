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

/* One decode step's keys, packed: KV head g attends to n[g] cached
 * positions, listed ascending at keys + off[g], or, when off[g] < 0, to
 * positions 0..n[g]-1 themselves (a full step: nothing to list or copy).
 * q (Hq, D) post-RoPE; kc, vc: caches (cap, Hkv, D); out (Hq, D).
 * probs (may be NULL): for head h of group g, n[g] values at probs + h * max_n. */
void attention_decode_cpu(float *out, float *probs, const float *q, const float *kc, const float *vc,
                          const int32_t *keys, const int64_t *off, const int64_t *n, int64_t max_n, int64_t Hq,
                          int64_t Hkv, int64_t D);

/* attention_decode_cpu over a cache in two parts: positions below split
 * are rows of kc/vc, positions split.. rows of kt/vt (row 0 = split), so
 * that several decodes (one per policy) share one prefill cache and each
 * owns only its new rows. split = 0 with kt = kc, vt = vc is the plain call. */
void attention_decode_split_cpu(float *out, float *probs, const float *q, const float *kc, const float *vc,
                                const float *kt, const float *vt, int64_t split, const int32_t *keys,
                                const int64_t *off, const int64_t *n, int64_t max_n, int64_t Hq, int64_t Hkv,
                                int64_t D);

/* CUDA twins: same arguments; every array is a DEVICE pointer except off and
 * n, which stay on the host (at most ATTENTION_DECODE_MAX_KV_HEADS entries,
 * passed to the kernels by value). Deterministic: no float atomics. */
#define ATTENTION_DECODE_MAX_KV_HEADS 64
#ifdef __cplusplus
extern "C" {
#endif
void attention_prefill_stats_cuda(float *colsum, float *last, const float *q, const float *k, int64_t T, int64_t Hq,
                                  int64_t Hkv, int64_t D, int64_t W);
void attention_decode_cuda(float *out, float *probs, const float *q, const float *kc, const float *vc,
                           const int32_t *keys, const int64_t *off, const int64_t *n, int64_t max_n, int64_t Hq,
                           int64_t Hkv, int64_t D);
#ifdef __cplusplus
}
#endif
#endif
