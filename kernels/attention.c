#include "attention.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../common/util.h"

int64_t refresh_num_selected(const RefreshMask *m) { return m->K < m->L ? m->K : m->L; }

int refresh_active(const RefreshMask *m, int64_t T) { return m->enabled && T > m->L; }

void refresh_mask_validate(const RefreshMask *m, const char *origin) {
    if (!m->enabled) return;
    KV_CHECK(m->L >= 1, "%s: mask field 'L' must be >= 1 (got %lld)", origin, (long long)m->L);
    KV_CHECK(m->K >= 1, "%s: mask field 'K' must be >= 1 (got %lld)", origin, (long long)m->K);
    KV_CHECK(m->K <= m->L, "%s: mask field 'K' (%lld) cannot exceed the prefill length 'L' (%lld)", origin,
             (long long)m->K, (long long)m->L);
    KV_CHECK(m->pool_kernel >= 1 && m->pool_kernel % 2 == 1,
             "%s: mask field 'pool_kernel' must be odd and >= 1 (got %lld)", origin, (long long)m->pool_kernel);
    KV_CHECK(m->agg == GROUP_AGG_MAX || m->agg == GROUP_AGG_MEAN || m->agg == GROUP_AGG_FIRST,
             "%s: mask field 'group_agg' is invalid", origin);
}

const char *group_agg_name(GroupAgg a) { return a == GROUP_AGG_MEAN ? "mean" : a == GROUP_AGG_FIRST ? "first" : "max"; }

GroupAgg group_agg_parse(const char *s, const char *origin) {
    if (strcmp(s, "max") == 0) return GROUP_AGG_MAX;
    if (strcmp(s, "mean") == 0) return GROUP_AGG_MEAN;
    if (strcmp(s, "first") == 0) return GROUP_AGG_FIRST;
    die("%s: group aggregation must be max, mean or first (got '%s')", origin, s);
}

static inline float dot(const float *a, const float *b, int64_t D) {
    float s = 0.0f;
    for (int64_t d = 0; d < D; d++) s += a[d] * b[d];
    return s;
}

/* Softmax over keys 0..n-1 of one query row into p (probabilities). */
static void softmax_row(float *p, const float *qrow, const float *kbase, int64_t kstride, int64_t n, int64_t D,
                        float scale) {
    float mx = -INFINITY;
    for (int64_t j = 0; j < n; j++) {
        p[j] = dot(qrow, kbase + j * kstride, D) * scale;
        mx = p[j] > mx ? p[j] : mx;
    }
    float sum = 0.0f;
    for (int64_t j = 0; j < n; j++) sum += (p[j] = expf(p[j] - mx));
    for (int64_t j = 0; j < n; j++) p[j] /= sum;
}

typedef struct {
    float score;
    int32_t pos;
} Scored;

/* Higher score first; equal scores keep the lower position first. */
static int by_score_then_pos(const void *a, const void *b) {
    const Scored *x = a, *y = b;
    if (x->score != y->score) return x->score > y->score ? -1 : 1;
    return (x->pos > y->pos) - (x->pos < y->pos);
}

static int by_pos(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* Group-aggregated, max-pooled scores of query L-1 over keys 0..L-1. */
static void selection_scores(float *pooled, float *agg, float *p, const float *q, const float *k, int64_t b, int64_t g,
                             int64_t T, int64_t Hq, int64_t Hkv, int64_t D, const RefreshMask *m) {
    int64_t L = m->L, group = Hq / Hkv, nh = m->agg == GROUP_AGG_FIRST ? 1 : group;
    float scale = 1.0f / sqrtf((float)D);
    const float *kbase = k + (b * T * Hkv + g) * D;
    for (int64_t hh = 0; hh < nh; hh++) {
        int64_t h = g * group + hh;
        softmax_row(p, q + ((b * T + L - 1) * Hq + h) * D, kbase, Hkv * D, L, D, scale);
        for (int64_t j = 0; j < L; j++) {
            if (hh == 0) agg[j] = p[j];
            else if (m->agg == GROUP_AGG_MAX) agg[j] = p[j] > agg[j] ? p[j] : agg[j];
            else agg[j] += p[j];
        }
    }
    if (m->agg == GROUP_AGG_MEAN)
        for (int64_t j = 0; j < L; j++) agg[j] /= (float)group;
    int64_t r = m->pool_kernel / 2;
    for (int64_t j = 0; j < L; j++) {
        int64_t lo = j - r < 0 ? 0 : j - r, hi = j + r > L - 1 ? L - 1 : j + r;
        float mx = agg[lo];
        for (int64_t i = lo + 1; i <= hi; i++) mx = agg[i] > mx ? agg[i] : mx;
        pooled[j] = mx;
    }
}

void attention_refresh_select_cpu(int32_t *sel, const float *q, const float *k, int64_t B, int64_t T, int64_t Hq,
                                  int64_t Hkv, int64_t D, const RefreshMask *m) {
    int64_t L = m->L, ks = refresh_num_selected(m);
#pragma omp parallel
    {
        float *pooled = xmalloc(sizeof(float) * (size_t)L * 3);
        Scored *order = xmalloc(sizeof(Scored) * (size_t)L);
#pragma omp for collapse(2) schedule(static)
        for (int64_t b = 0; b < B; b++)
            for (int64_t g = 0; g < Hkv; g++) {
                int32_t *out = sel + (b * Hkv + g) * ks;
                if (ks == L) { /* every prefill key: no scores needed */
                    for (int64_t j = 0; j < L; j++) out[j] = (int32_t)j;
                    continue;
                }
                selection_scores(pooled, pooled + L, pooled + 2 * L, q, k, b, g, T, Hq, Hkv, D, m);
                for (int64_t j = 0; j < L; j++) order[j] = (Scored){pooled[j], (int32_t)j};
                qsort(order, (size_t)L, sizeof(Scored), by_score_then_pos);
                for (int64_t j = 0; j < ks; j++) out[j] = order[j].pos;
                qsort(out, (size_t)ks, sizeof(int32_t), by_pos);
            }
        free(pooled);
        free(order);
    }
}

/* Key positions visible to query p of KV head g: keys[0..*n-1]. For the
 * masked rows this is sel followed by L..p; for causal rows it is 0..p. */
static const int32_t *keys_for(int32_t *buf, int64_t *n, int64_t p, const int32_t *sel_bg, int64_t ks,
                               const RefreshMask *m, int64_t T) {
    if (!refresh_active(m, T) || p < m->L) {
        *n = p + 1;
        for (int64_t j = 0; j <= p; j++) buf[j] = (int32_t)j;
        return buf;
    }
    memcpy(buf, sel_bg, sizeof(int32_t) * (size_t)ks);
    for (int64_t j = m->L; j <= p; j++) buf[ks + j - m->L] = (int32_t)j;
    *n = ks + (p - m->L + 1);
    return buf;
}

void attention_forward_cpu(float *out, float *lse, const float *q, const float *k, const float *v, const int32_t *sel,
                           int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t D, const RefreshMask *m) {
    int64_t group = Hq / Hkv, ks = refresh_active(m, T) ? refresh_num_selected(m) : 0;
    float scale = 1.0f / sqrtf((float)D);
#pragma omp parallel
    {
        float *s = xmalloc(sizeof(float) * (size_t)(T + D));
        int32_t *keys = xmalloc(sizeof(int32_t) * (size_t)T);
        float *acc = s + T;
#pragma omp for collapse(2) schedule(dynamic)
        for (int64_t b = 0; b < B; b++)
            for (int64_t h = 0; h < Hq; h++) {
                int64_t g = h / group;
                const float *kb = k + (b * T * Hkv + g) * D, *vb = v + (b * T * Hkv + g) * D;
                const int32_t *sel_bg = ks ? sel + (b * Hkv + g) * ks : NULL;
                for (int64_t p = 0; p < T; p++) {
                    int64_t n;
                    const int32_t *kp = keys_for(keys, &n, p, sel_bg, ks, m, T);
                    const float *qrow = q + ((b * T + p) * Hq + h) * D;
                    float mx = -INFINITY, sum = 0.0f;
                    for (int64_t t = 0; t < n; t++) {
                        s[t] = dot(qrow, kb + (int64_t)kp[t] * Hkv * D, D) * scale;
                        mx = s[t] > mx ? s[t] : mx;
                    }
                    memset(acc, 0, sizeof(float) * (size_t)D);
                    for (int64_t t = 0; t < n; t++) {
                        float e = expf(s[t] - mx);
                        sum += e;
                        const float *vr = vb + (int64_t)kp[t] * Hkv * D;
                        for (int64_t d = 0; d < D; d++) acc[d] += e * vr[d];
                    }
                    float *o = out + ((b * T + p) * Hq + h) * D;
                    for (int64_t d = 0; d < D; d++) o[d] = acc[d] / sum;
                    lse[(b * Hq + h) * T + p] = mx + logf(sum);
                }
            }
        free(s);
        free(keys);
    }
}

void attention_backward_cpu(float *dq, float *dk, float *dv, const float *dout, const float *q, const float *k,
                            const float *v, const float *out, const float *lse, const int32_t *sel, int64_t B,
                            int64_t T, int64_t Hq, int64_t Hkv, int64_t D, const RefreshMask *m) {
    int64_t group = Hq / Hkv, ks = refresh_active(m, T) ? refresh_num_selected(m) : 0;
    float scale = 1.0f / sqrtf((float)D);
    /* one (b, g) per task: dk/dv of a KV head only receive from its own group */
#pragma omp parallel
    {
        int32_t *keys = xmalloc(sizeof(int32_t) * (size_t)T);
#pragma omp for collapse(2) schedule(dynamic)
        for (int64_t b = 0; b < B; b++)
            for (int64_t g = 0; g < Hkv; g++) {
                int64_t kvs = Hkv * D;
                const float *kb = k + (b * T * Hkv + g) * D, *vb = v + (b * T * Hkv + g) * D;
                float *dkb = dk + (b * T * Hkv + g) * D, *dvb = dv + (b * T * Hkv + g) * D;
                for (int64_t t = 0; t < T; t++) {
                    memset(dkb + t * kvs, 0, sizeof(float) * (size_t)D);
                    memset(dvb + t * kvs, 0, sizeof(float) * (size_t)D);
                }
                const int32_t *sel_bg = ks ? sel + (b * Hkv + g) * ks : NULL;
                for (int64_t h = g * group; h < (g + 1) * group; h++)
                    for (int64_t p = 0; p < T; p++) {
                        int64_t n, row = (b * T + p) * Hq + h;
                        const int32_t *kp = keys_for(keys, &n, p, sel_bg, ks, m, T);
                        const float *qrow = q + row * D, *dorow = dout + row * D;
                        float *dqrow = dq + row * D, l = lse[(b * Hq + h) * T + p];
                        float di = dot(dorow, out + row * D, D);
                        memset(dqrow, 0, sizeof(float) * (size_t)D);
                        for (int64_t t = 0; t < n; t++) {
                            int64_t j = kp[t];
                            const float *kr = kb + j * kvs, *vr = vb + j * kvs;
                            float pr = expf(dot(qrow, kr, D) * scale - l);
                            float ds = pr * (dot(dorow, vr, D) - di) * scale;
                            float *dkr = dkb + j * kvs, *dvr = dvb + j * kvs;
                            for (int64_t d = 0; d < D; d++) {
                                dqrow[d] += ds * kr[d];
                                dkr[d] += ds * qrow[d];
                                dvr[d] += pr * dorow[d];
                            }
                        }
                    }
            }
        free(keys);
    }
}
