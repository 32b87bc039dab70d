/* The CPU attention's blocked path at a length where it has several chunks
 * of query rows per block and one chunk straddles L (its first rows blocked,
 * the rest through the row kernels): forward and backward against the
 * dense float64 oracle (kernels/attention_ref.h), causal and with the
 * paper's mask, and the same bits on 1 and 2 threads. At T = 1100 the row
 * blocks are [0, 550), [550, 777), [777, 952), [952, 1100): the first takes
 * 3 chunks of up to 256 rows, and the chunk [777, 952) holds L = 900. */
#include <omp.h>
#include <string.h>

#include "../../common/rng.h"
#include "../../common/util.h"
#include "../../kernels/attention.h"
#include "../../kernels/attention_ref.h"
#include "../testlib.h"

enum { T = 1100, L = 900, KS = 40, HQ = 2, HKV = 1, D = 8 };

typedef struct {
    float o[T * HQ * D], lse[HQ * T], dq[T * HQ * D], dk[T * D], dv[T * D];
} Result;

static void run(Result *r, const float *q, const float *k, const float *v, const float *dout, const int32_t *sel,
                const RefreshMask *m) {
    attention_forward_cpu(r->o, r->lse, q, k, v, sel, 1, T, HQ, HKV, D, m);
    attention_backward_cpu(r->dq, r->dk, r->dv, dout, q, k, v, r->o, r->lse, sel, 1, T, HQ, HKV, D, m);
}

static void check_case(const char *tag, int masked, const float *q, const float *k, const float *v, const float *dout) {
    RefreshMask m = masked ? (RefreshMask){.enabled = 1, .L = L, .K = KS, .pool_kernel = 7, .agg = GROUP_AGG_MAX}
                           : refresh_mask_off();
    int32_t sel[KS];
    if (masked) attention_refresh_select_cpu(sel, q, k, 1, T, HQ, HKV, D, &m);
    static Result one, two;
    omp_set_num_threads(1);
    run(&one, q, k, v, dout, masked ? sel : NULL, &m);
    omp_set_num_threads(2);
    run(&two, q, k, v, dout, masked ? sel : NULL, &m);
    static Result ref;
    attention_forward_ref(ref.o, ref.lse, q, k, v, masked ? sel : NULL, 1, T, HQ, HKV, D, &m);
    attention_backward_ref(ref.dq, ref.dk, ref.dv, dout, q, k, v, masked ? sel : NULL, 1, T, HQ, HKV, D, &m);
    char name[160];
    const struct {
        const char *what;
        const float *got, *ref;
        int64_t n;
    } parts[] = {{"out", one.o, ref.o, T * HQ * D},
                 {"lse", one.lse, ref.lse, HQ * T},
                 {"dq", one.dq, ref.dq, T * HQ * D},
                 {"dk", one.dk, ref.dk, T * D},
                 {"dv", one.dv, ref.dv, T * D}};
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
        snprintf(name, sizeof name, "%s T %d: %s equals the float64 reference", tag, T, parts[i].what);
        tl_close_margin(name, parts[i].got, parts[i].ref, parts[i].n, 2e-6, 2e-5);
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
