#include "attention_decode.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../common/util.h"
#include "dot_lanes.h"

static inline float dot(const float *a, const float *b, int64_t D) {
    float s = 0.0f;
    for (int64_t d = 0; d < D; d++) s += a[d] * b[d];
    return s;
}

void attention_prefill_stats_cpu(float *colsum, float *last, const float *q, const float *k, int64_t T, int64_t Hq,
                                 int64_t Hkv, int64_t D, int64_t W) {
    int64_t group = Hq / Hkv;
    float scale = 1.0f / sqrtf((float)D);
    if (W > T) W = T;
#pragma omp parallel
    {
        float *p = xmalloc(sizeof(float) * (size_t)T);
#pragma omp for schedule(dynamic)
        for (int64_t h = 0; h < Hq; h++) {
            const float *kb = k + (h / group) * D;
            if (colsum) memset(colsum + h * T, 0, sizeof(float) * (size_t)T);
            if (last) memset(last + h * W * T, 0, sizeof(float) * (size_t)(W * T));
            for (int64_t t = 0; t < T; t++) {
                if (!colsum && t < T - W) continue;
                const float *qr = q + (t * Hq + h) * D;
                float mx = -INFINITY, sum = 0.0f;
                for (int64_t j = 0; j <= t; j++) {
                    p[j] = dot(qr, kb + j * Hkv * D, D) * scale;
                    mx = p[j] > mx ? p[j] : mx;
                }
                for (int64_t j = 0; j <= t; j++) sum += (p[j] = expf(p[j] - mx));
                for (int64_t j = 0; j <= t; j++) p[j] /= sum;
                if (colsum)
                    for (int64_t j = 0; j <= t; j++) colsum[h * T + j] += p[j];
                if (last && t >= T - W) memcpy(last + (h * W + t - (T - W)) * T, p, sizeof(float) * (size_t)(t + 1));
            }
        }
        free(p);
    }
}

void attention_decode_cpu(float *out, float *probs, const float *q, const float *kc, const float *vc,
                          const int32_t *keys, const int64_t *off, const int64_t *n, int64_t max_n, int64_t Hq,
                          int64_t Hkv, int64_t D) {
    attention_decode_split_cpu(out, probs, q, kc, vc, kc, vc, 0, keys, off, n, max_n, Hq, Hkv, D);
}

/* head_dim up to which the output accumulates in a local array (below). */
#define DECODE_LOCAL_D 256

/* decode_head's work with D known at the call (64 and 128 are constants
 * there, so the output sums stay in vector registers across the keys
 * instead of going through o in memory at every key: the compiler cannot
 * keep o, which may alias the caches, in registers). The sums are the same
 * operations in the same order as accumulating into o, so the same bits. */
static inline __attribute__((always_inline)) void head_body(float *o, float *p, int normalise, const float *qr,
                                                            const float *kc, const float *vc, const float *kt,
                                                            const float *vt, int64_t split, const int32_t *kp,
                                                            int64_t cnt, int64_t g, int64_t Hkv, int64_t D,
                                                            float scale) {
    float mx = -INFINITY, sum = 0.0f, acc[DECODE_LOCAL_D];
    for (int64_t t = 0; t < cnt; t++) {
        int64_t j = kp ? kp[t] : t;
        const float *kr = j < split ? kc + (j * Hkv + g) * D : kt + ((j - split) * Hkv + g) * D;
        p[t] = dot_lanes(qr, kr, D) * scale;
        mx = p[t] > mx ? p[t] : mx;
    }
    for (int64_t t = 0; t < cnt; t++) sum += (p[t] = expf(p[t] - mx));
    for (int64_t d = 0; d < D; d++) acc[d] = 0.0f;
    for (int64_t t = 0; t < cnt; t++) {
        int64_t j = kp ? kp[t] : t;
        const float *restrict vr = j < split ? vc + (j * Hkv + g) * D : vt + ((j - split) * Hkv + g) * D;
        const float pt = p[t];
        /* element-wise over d: the same bits vectorised or not */
#pragma omp simd
        for (int64_t d = 0; d < D; d++) acc[d] += pt * vr[d];
    }
    for (int64_t d = 0; d < D; d++) o[d] = acc[d] / sum;
    if (normalise)
        for (int64_t t = 0; t < cnt; t++) p[t] /= sum;
}

/* One query head's attention over its KV head's listed keys (all of them
 * when kp is NULL): scores with dot_lanes (a fixed order, so every clone
 * gives the same bits), softmax, output. Compiled for AVX-512, AVX2 and
 * baseline x86-64, picked at load time: the decode of a long context spends
 * its time here. p: cnt floats of scratch, or the probabilities wanted.
 * D <= DECODE_LOCAL_D. */
__attribute__((target_clones("avx512f", "avx2", "default"))) static void
decode_head(float *o, float *p, int normalise, const float *qr, const float *kc, const float *vc, const float *kt,
            const float *vt, int64_t split, const int32_t *kp, int64_t cnt, int64_t g, int64_t Hkv, int64_t D,
            float scale) {
    if (D == 64) head_body(o, p, normalise, qr, kc, vc, kt, vt, split, kp, cnt, g, Hkv, 64, scale);
    else if (D == 128) head_body(o, p, normalise, qr, kc, vc, kt, vt, split, kp, cnt, g, Hkv, 128, scale);
    else head_body(o, p, normalise, qr, kc, vc, kt, vt, split, kp, cnt, g, Hkv, D, scale);
}

void attention_decode_split_cpu(float *out, float *probs, const float *q, const float *kc, const float *vc,
                                const float *kt, const float *vt, int64_t split, const int32_t *keys,
                                const int64_t *off, const int64_t *n, int64_t max_n, int64_t Hq, int64_t Hkv,
                                int64_t D) {
    int64_t group = Hq / Hkv;
    float scale = 1.0f / sqrtf((float)D);
    KV_CHECK(D >= 1 && D <= DECODE_LOCAL_D, "attention_decode: head_dim %lld must be in [1, %d]", (long long)D,
             DECODE_LOCAL_D);
#pragma omp parallel for schedule(static) if (max_n > 4096)
    for (int64_t h = 0; h < Hq; h++) {
        int64_t g = h / group, cnt = n[g];
        const int32_t *kp = off[g] >= 0 ? keys + off[g] : NULL;
        float *p = probs ? probs + h * max_n : xmalloc(sizeof(float) * (size_t)(cnt > 0 ? cnt : 1));
        decode_head(out + h * D, p, probs != NULL, q + h * D, kc, vc, kt, vt, split, kp, cnt, g, Hkv, D, scale);
        if (!probs) free(p);
    }
}
