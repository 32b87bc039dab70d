/* The CPU attention's blocked path at a length where it has several chunks
 * of query rows per block and one chunk straddles L (its first rows blocked,
 * the rest through the row kernels): forward and backward against a dense
 * float64 reference, causal and with the paper's mask, and the same bits on
 * 1 and 2 threads. At T = 1100 the row blocks are [0, 550), [550, 777),
 * [777, 952), [952, 1100): the first takes 3 chunks of up to 256 rows, and
 * the chunk [777, 952) holds L = 900. */
#include <math.h>
#include <omp.h>
#include <string.h>

#include "../common/rng.h"
#include "../common/util.h"
#include "../kernels/attention.h"
#include "testlib.h"

enum { T = 1100, L = 900, KS = 40, HQ = 2, HKV = 1, D = 8 };

/* 1 when row p sees key j: causal, and past L only the selected prefill keys */
static int visible(const int32_t *sel, int masked, int64_t p, int64_t j) {
    if (j > p) return 0;
    if (!masked || p < L || j >= L) return 1;
    for (int64_t i = 0; i < KS; i++)
        if (sel[i] == j) return 1;
    return 0;
}

/* out, dq, dk, dv in double from the definitions (HKV = 1: every head reads key head 0) */
static void dense(double *out, double *dq, double *dk, double *dv, const float *q, const float *k, const float *v,
                  const float *dout, const int32_t *sel, int masked) {
    double scale = 1.0 / sqrt((double)D);
    static double P[T], dP[T];
    memset(dk, 0, sizeof(double) * T * D);
    memset(dv, 0, sizeof(double) * T * D);
    for (int64_t h = 0; h < HQ; h++)
        for (int64_t p = 0; p < T; p++) {
            const float *qr = q + (p * HQ + h) * D, *dor = dout + (p * HQ + h) * D;
            double mx = -INFINITY, sum = 0, di = 0;
            for (int64_t j = 0; j <= p; j++) {
                P[j] = -INFINITY;
                if (!visible(sel, masked, p, j)) continue;
                double s = 0;
                for (int64_t c = 0; c < D; c++) s += (double)qr[c] * k[j * D + c];
                P[j] = s * scale;
                mx = P[j] > mx ? P[j] : mx;
            }
            for (int64_t j = 0; j <= p; j++) sum += P[j] == -INFINITY ? 0 : exp(P[j] - mx);
            for (int64_t j = 0; j <= p; j++) P[j] = P[j] == -INFINITY ? 0 : exp(P[j] - mx) / sum;
            double *o = out + (p * HQ + h) * D, *g = dq + (p * HQ + h) * D;
            for (int64_t c = 0; c < D; c++) {
                o[c] = 0, g[c] = 0;
                for (int64_t j = 0; j <= p; j++) o[c] += P[j] * v[j * D + c];
                di += dor[c] * o[c];
            }
            for (int64_t j = 0; j <= p; j++) {
                dP[j] = 0;
                for (int64_t c = 0; c < D; c++) dP[j] += (double)dor[c] * v[j * D + c];
                double ds = P[j] * (dP[j] - di) * scale;
                for (int64_t c = 0; c < D; c++) {
                    g[c] += ds * k[j * D + c];
                    dk[j * D + c] += ds * qr[c];
                    dv[j * D + c] += P[j] * dor[c];
                }
            }
        }
}

static void to_float(float *dst, const double *src, int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] = (float)src[i];
}

typedef struct {
    float o[T * HQ * D], lse[HQ * T], dq[T * HQ * D], dk[T * D], dv[T * D];
} Result;

static void run(Result *r, const float *q, const float *k, const float *v, const float *dout, const int32_t *sel,
                const RefreshMask *m) {
    attention_forward_cpu(r->o, r->lse, q, k, v, sel, 1, T, HQ, HKV, D, m);
    attention_backward_cpu(r->dq, r->dk, r->dv, dout, q, k, v, r->o, r->lse, sel, 1, T, HQ, HKV, D, m);
}

static void check_case(const char *tag, int masked, const float *q, const float *k, const float *v,
                       const float *dout) {
    RefreshMask m = masked ? (RefreshMask){.enabled = 1, .L = L, .K = KS, .pool_kernel = 7, .agg = GROUP_AGG_MAX} : refresh_mask_off();
    int32_t sel[KS];
    if (masked) attention_refresh_select_cpu(sel, q, k, 1, T, HQ, HKV, D, &m);
    static Result one, two;
    omp_set_num_threads(1);
    run(&one, q, k, v, dout, masked ? sel : NULL, &m);
    omp_set_num_threads(2);
    run(&two, q, k, v, dout, masked ? sel : NULL, &m);
    static double out[T * HQ * D], dq[T * HQ * D], dk[T * D], dv[T * D];
    static float f[T * HQ * D];
    dense(out, dq, dk, dv, q, k, v, dout, sel, masked);
    char name[160];
    const struct {
        const char *what;
        const float *got;
        const double *ref;
        int64_t n;
    } parts[] = {{"out", one.o, out, T * HQ * D}, {"dq", one.dq, dq, T * HQ * D}, {"dk", one.dk, dk, T * D},
                 {"dv", one.dv, dv, T * D}};
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
        to_float(f, parts[i].ref, parts[i].n);
        snprintf(name, sizeof name, "%s T %d: %s equals the float64 reference", tag, T, parts[i].what);
        tl_close_margin(name, parts[i].got, f, parts[i].n, 2e-6, 2e-5);
    }
    snprintf(name, sizeof name, "%s: out, lse, dq, dk, dv the same bits on 1 and 2 threads", tag);
    tl_result(memcmp(&one, &two, sizeof one) == 0, name, "some bits differ");
}

int main(void) {
    static float q[T * HQ * D], k[T * D], v[T * D], dout[T * HQ * D];
    Rng r;
    rng_seed(&r, 11);
    for (int64_t i = 0; i < T * HQ * D; i++) q[i] = rng_normal(&r), dout[i] = rng_normal(&r);
    for (int64_t i = 0; i < T * D; i++) k[i] = rng_normal(&r), v[i] = rng_normal(&r);
    check_case("causal", 0, q, k, v, dout);
    check_case("paper's mask L 900 K 40", 1, q, k, v, dout);
    return tl_finish();
}
