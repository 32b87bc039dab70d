/* The attention-only A/B behind commit 003781f: one SmolLM2 layer's attention
 * (T 2098, 9 query heads, 3 KV heads, D 64, L 2048, K 256) forward then backward,
 * after one warm-up call. Built against build/libkvcpt.a of e859cef (old) and of
 * 003781f (new), from the repository root:
 *   cc -O2 -fopenmp -I. attention_ab.c build/libkvcpt.a -lopenblas -ljansson ... -o new
 *   OMP_NUM_THREADS=1 perf stat -e task-clock ./new 2 1     (2 timed reps, masked) */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "kernels/attention.h"
static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}
int main(int argc, char **argv) {
    int64_t B = 1, T = 2098, Hq = 9, Hkv = 3, D = 64;
    int reps = argc > 1 ? atoi(argv[1]) : 3;
    int masked = argc > 2 ? atoi(argv[2]) : 1;
    RefreshMask m = refresh_mask_off();
    if (masked) {
        m.enabled = 1;
        m.L = 2048;
        m.K = 256;
        m.pool_kernel = 7;
        m.agg = GROUP_AGG_MAX;
    }
    size_t nq = B * T * Hq * D, nk = B * T * Hkv * D;
    float *q = malloc(4 * nq), *k = malloc(4 * nk), *v = malloc(4 * nk), *o = malloc(4 * nq),
          *lse = malloc(4 * B * Hq * T), *dq = malloc(4 * nq), *dk = malloc(4 * nk), *dv = malloc(4 * nk),
          *dout = malloc(4 * nq);
    srand(1);
    for (size_t i = 0; i < nq; i++) {
        q[i] = rand() / (float)RAND_MAX - 0.5f;
        dout[i] = rand() / (float)RAND_MAX - 0.5f;
    }
    for (size_t i = 0; i < nk; i++) {
        k[i] = rand() / (float)RAND_MAX - 0.5f;
        v[i] = rand() / (float)RAND_MAX - 0.5f;
    }
    int32_t *sel = malloc(4 * (B * Hkv * (refresh_sel_len(&m, T) + 1)));
    if (masked) attention_refresh_select_cpu(sel, q, k, B, T, Hq, Hkv, D, &m);
    double tf = 0, tb = 0;
    double cs = 0;
    for (int r = 0; r <= reps; r++) {
        double t0 = now();
        attention_forward_cpu(o, lse, q, k, v, sel, B, T, Hq, Hkv, D, &m);
        double t1 = now();
        attention_backward_cpu(dq, dk, dv, dout, q, k, v, o, lse, sel, B, T, Hq, Hkv, D, &m);
        double t2 = now();
        if (r) {
            tf += t1 - t0;
            tb += t2 - t1;
        }
    }
    for (size_t i = 0; i < nq; i++) cs += dq[i] + o[i];
    for (size_t i = 0; i < nk; i++) cs += dk[i] + dv[i];
    printf("fwd %.2f ms bwd %.2f ms checksum %.9g\n", tf / reps * 1e3, tb / reps * 1e3, cs);
    return 0;
}
