#include "attention_ref.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../common/util.h"

/* The mask (attention.h): without it, or for the prefill rows p < L, row p
 * sees keys 0..p (causal). From L on, the paper's mask shows the selected
 * prefill keys (sel holds them, per batch row and KV head) and every key
 * L..p; with evict or restride, sel holds one record per row p >= L,
 * [n, key_1 .. key_n]: the n keys it sees, or n = 0 for a full row (0..p). */
void attention_ref_row_mask(unsigned char *seen, const int32_t *sel, int64_t b, int64_t g, int64_t p, int64_t T,
                            int64_t Hkv, const RefreshMask *m) {
    memset(seen, 0, (size_t)T);
    if (!refresh_active(m, T) || p < m->L) {
        memset(seen, 1, (size_t)(p + 1));
        return;
    }
    const int32_t *mine = sel + (b * Hkv + g) * refresh_sel_len(m, T);
    if (!refresh_per_row(m)) {
        for (int64_t i = 0; i < refresh_num_selected(m); i++) seen[mine[i]] = 1;
        memset(seen + m->L, 1, (size_t)(p + 1 - m->L));
        return;
    }
    const int32_t *rec = mine + (p - m->L) * (1 + refresh_row_width(m, T));
    if (rec[0] == 0) memset(seen, 1, (size_t)(p + 1));
    for (int32_t i = 0; i < rec[0]; i++) seen[rec[1 + i]] = 1;
}

static const float *at(const float *x, int64_t b, int64_t t, int64_t head, int64_t T, int64_t H, int64_t D) {
    return x + ((b * T + t) * H + head) * D;
}

/* P[j], the probabilities of query row p of head h over keys 0..T-1 (0
 * where the mask hides a key); returns the row's log-sum-exp. */
static double row_probs(double *P, unsigned char *seen, const float *q, const float *k, const int32_t *sel, int64_t b,
                        int64_t h, int64_t p, int64_t T, int64_t Hq, int64_t Hkv, int64_t D, const RefreshMask *m) {
    int64_t g = h / (Hq / Hkv);
    attention_ref_row_mask(seen, sel, b, g, p, T, Hkv, m);
    const float *qr = at(q, b, p, h, T, Hq, D);
    double mx = -INFINITY, sum = 0;
    for (int64_t j = 0; j < T; j++) {
        if (!seen[j]) continue;
        double s = 0;
        for (int64_t c = 0; c < D; c++) s += (double)qr[c] * at(k, b, j, g, T, Hkv, D)[c];
        P[j] = s / sqrt((double)D);
        mx = P[j] > mx ? P[j] : mx;
    }
    for (int64_t j = 0; j < T; j++) sum += seen[j] ? exp(P[j] - mx) : 0;
    for (int64_t j = 0; j < T; j++) P[j] = seen[j] ? exp(P[j] - mx) / sum : 0;
    return mx + log(sum);
}

void attention_forward_ref(float *out, float *lse, const float *q, const float *k, const float *v, const int32_t *sel,
                           int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t D, const RefreshMask *m) {
    double *P = xmalloc(sizeof(double) * (size_t)T);
    unsigned char *seen = xmalloc((size_t)T);
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < Hq; h++)
            for (int64_t p = 0; p < T; p++) {
                lse[(b * Hq + h) * T + p] = (float)row_probs(P, seen, q, k, sel, b, h, p, T, Hq, Hkv, D, m);
                float *o = out + ((b * T + p) * Hq + h) * D;
                for (int64_t c = 0; c < D; c++) {
                    double a = 0;
                    for (int64_t j = 0; j < T; j++) a += P[j] * at(v, b, j, h / (Hq / Hkv), T, Hkv, D)[c];
                    o[c] = (float)a;
                }
            }
    free(P), free(seen);
}

/* With o = sum_j P_j v_j and dO = dout: dv_j += P_j dO, dP_j = dO . v_j,
 * dS_j = P_j (dP_j - dO . o) / sqrt(D), dq += dS_j k_j, dk_j += dS_j q. */
void attention_backward_ref(float *dq, float *dk, float *dv, const float *dout, const float *q, const float *k,
                            const float *v, const int32_t *sel, int64_t B, int64_t T, int64_t Hq, int64_t Hkv,
                            int64_t D, const RefreshMask *m) {
    size_t nkv = (size_t)(B * T * Hkv * D);
    double *P = xmalloc(sizeof(double) * (size_t)T), *o = xmalloc(sizeof(double) * (size_t)D);
    double *g_q = xmalloc(sizeof(double) * (size_t)D), *g_k = xcalloc(nkv, sizeof(double));
    double *g_v = xcalloc(nkv, sizeof(double));
    unsigned char *seen = xmalloc((size_t)T);
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < Hq; h++)
            for (int64_t p = 0; p < T; p++) {
                int64_t g = h / (Hq / Hkv);
                row_probs(P, seen, q, k, sel, b, h, p, T, Hq, Hkv, D, m);
                const float *qr = at(q, b, p, h, T, Hq, D), *dor = at(dout, b, p, h, T, Hq, D);
                double di = 0;
                for (int64_t c = 0; c < D; c++) {
                    o[c] = 0, g_q[c] = 0;
                    for (int64_t j = 0; j < T; j++) o[c] += P[j] * at(v, b, j, g, T, Hkv, D)[c];
                    di += dor[c] * o[c];
                }
                for (int64_t j = 0; j < T; j++) {
                    if (!seen[j]) continue;
                    const float *kj = at(k, b, j, g, T, Hkv, D), *vj = at(v, b, j, g, T, Hkv, D);
                    double dp = 0;
                    for (int64_t c = 0; c < D; c++) dp += (double)dor[c] * vj[c];
                    double ds = P[j] * (dp - di) / sqrt((double)D);
                    double *gk = g_k + ((b * T + j) * Hkv + g) * D, *gv = g_v + ((b * T + j) * Hkv + g) * D;
                    for (int64_t c = 0; c < D; c++) {
                        g_q[c] += ds * kj[c];
                        gk[c] += ds * qr[c];
                        gv[c] += P[j] * dor[c];
                    }
                }
                for (int64_t c = 0; c < D; c++) dq[((b * T + p) * Hq + h) * D + c] = (float)g_q[c];
            }
    for (size_t i = 0; i < nkv; i++) dk[i] = (float)g_k[i], dv[i] = (float)g_v[i];
    free(P), free(o), free(g_q), free(g_k), free(g_v), free(seen);
}
