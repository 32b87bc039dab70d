#ifndef KVCPT_ROPE_H
#define KVCPT_ROPE_H
/* Rotary position embedding in Hugging Face's rotate-half convention, with
 * the frequency rules of transformers' rope_scaling types (default, linear,
 * dynamic, yarn, llama3; transformers/modeling_rope_utils.py). Tables are
 * computed with transformers' fp32 arithmetic, step by step, so positions
 * far out round the same way: inv_freq bit for bit wherever torch's pow of
 * the base agrees with libm's powf (its vectorised pow can differ by an ulp). */
#include <stdint.h>

#include "bf16.h"

typedef enum { ROPE_DEFAULT = 0, ROPE_LINEAR, ROPE_DYNAMIC, ROPE_YARN, ROPE_LLAMA3 } RopeType;

/* One rope_scaling block, its defaults resolved as transformers resolves
 * them (a field a type does not read stays 0). */
typedef struct {
    RopeType type;
    double factor;                            /* every type but default */
    double low_freq_factor, high_freq_factor; /* llama3 */
    int64_t original_max_pos;                 /* yarn, llama3: the context the model was trained to */
    double attention_factor;                  /* yarn: 0 = from factor, mscale and mscale_all_dim */
    double beta_fast, beta_slow;              /* yarn: 0 = 32, 1 */
    double mscale, mscale_all_dim;            /* yarn: 0 = absent */
    int no_truncate;                          /* yarn: "truncate": false */
} RopeScaling;

typedef struct {
    double theta;
    RopeScaling s;
    int64_t max_pos; /* dynamic: max_position_embeddings, the length from which the base grows */
    int64_t seq_len; /* dynamic: the length of the sequence the tables are for */
} RopeParams;

/* inv_freq (D/2) after the type's rule. */
void rope_inv_freq(float *inv_freq, int64_t D, const RopeParams *p);
/* The factor cos and sin are scaled by (yarn's attention factor; 1 for the
 * other types), as transformers' attention_scaling. */
double rope_attention_factor(const RopeScaling *s);
/* cos, sin: (T, D/2) for positions 0..T-1. */
void rope_table(float *cos_t, float *sin_t, int64_t T, int64_t D, const RopeParams *p);
/* x: (B, T, H, D), rotated in place: x[i] = x[i]*cos - x[i+D/2]*sin, x[i+D/2] = x[i+D/2]*cos + x[i]*sin */
void rope_forward_cpu(float *x, const float *cos_t, const float *sin_t, int64_t B, int64_t T, int64_t H, int64_t D);
/* dx: (B, T, H, D) in place, the transpose rotation */
void rope_backward_cpu(float *dx, const float *cos_t, const float *sin_t, int64_t B, int64_t T, int64_t H, int64_t D);

/* The fused projection qkv: rows (b, t) of [q (Hq, D) | k (Hkv, D) | v (Hkv, D)],
 * (B, T, (Hq + 2 Hkv) D), as one matmul writes it. Split into q (B, T, Hq, D)
 * and k (B, T, Hkv, D), both rotated as rope_forward_cpu does, and v
 * (B, T, Hkv, D) copied: the layouts attention reads. */
void rope_split_forward_cpu(float *q, float *k, float *v, const float *qkv, const float *cos_t, const float *sin_t,
                            int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t D);
/* Its backward: dqkv rows [dq rotated back | dk rotated back | dv], overwritten. */
void rope_join_backward_cpu(float *dqkv, const float *dq, const float *dk, const float *dv, const float *cos_t,
                            const float *sin_t, int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t D);
/* CUDA twins: same arguments, DEVICE pointers, default stream; results
 * match the CPU oracle within the tolerances of tests/gpu/test_ops_cuda.c. */
#ifdef __cplusplus
extern "C" {
#endif
/* cos_t, sin_t: the rope_table() tables, copied to the device. */
void rope_forward_cuda(float *x, const float *cos_t, const float *sin_t, int64_t B, int64_t T, int64_t H, int64_t D);
void rope_backward_cuda(float *dx, const float *cos_t, const float *sin_t, int64_t B, int64_t T, int64_t H, int64_t D);
void rope_split_forward_cuda(float *q, float *k, float *v, const float *qkv, const float *cos_t, const float *sin_t,
                             int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t D);
void rope_join_backward_cuda(float *dqkv, const float *dq, const float *dk, const float *dv, const float *cos_t,
                             const float *sin_t, int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t D);
/* The bf16 engine's: bf16 qkv, q, k, v, dqkv; fp32 rotation, one rounding. */
void rope_split_forward_bf16_cuda(bf16 *q, bf16 *k, bf16 *v, const bf16 *qkv, const float *cos_t, const float *sin_t,
                                  int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t D);
void rope_join_backward_bf16_cuda(bf16 *dqkv, const float *dq, const float *dk, const float *dv, const float *cos_t,
                                  const float *sin_t, int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t D);
#ifdef __cplusplus
}
#endif
#endif
