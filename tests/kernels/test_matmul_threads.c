/* The CPU matmuls give the same bits for any OpenMP thread count, and
 * OpenBLAS runs on one thread whatever OPENBLAS_NUM_THREADS says (the
 * parallelism is blas_sgemm's fixed tiles). The shapes leave partial tiles in
 * both dimensions; a double-precision product checks the tiles' addressing. */
#include <cblas.h>
#include <omp.h>
#include <string.h>

#include "../../common/rng.h"
#include "../../common/util.h"
#include "../../kernels/blas.h"
#include "../../kernels/matmul.h"
#include "../testlib.h"

typedef struct {
    int64_t N, IC, OC;
} Shape;

static float *random_floats(Rng *r, int64_t n) {
    float *x = xmalloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) x[i] = rng_uniform(r) * 2.0f - 1.0f;
    return x;
}

/* out, dinp and dweight of one layer, packed into one buffer */
static float *layer_outputs(const Shape *s, const float *inp, const float *w, const float *dout, int bf16r) {
    int64_t n_out = s->N * s->OC, n_dinp = s->N * s->IC, n_dw = s->OC * s->IC;
    float *r = xcalloc((size_t)(n_out + n_dinp + n_dw), sizeof(float));
    if (bf16r) {
        matmul_forward_bf16r_cpu(r, inp, w, s->N, s->IC, s->OC);
        matmul_backward_bf16r_cpu(r + n_out, r + n_out + n_dinp, dout, inp, w, s->N, s->IC, s->OC);
    } else {
        matmul_forward_cpu(r, inp, w, s->N, s->IC, s->OC);
        matmul_backward_cpu(r + n_out, r + n_out + n_dinp, dout, inp, w, s->N, s->IC, s->OC);
    }
    return r;
}

/* Double-precision out, dinp and dweight, rounded once, packed like layer_outputs. */
static float *double_outputs(const Shape *s, const float *inp, const float *w, const float *dout) {
    int64_t N = s->N, IC = s->IC, OC = s->OC;
    float *r = xmalloc(sizeof(float) * (size_t)(N * OC + N * IC + OC * IC)), *dinp = r + N * OC, *dw = dinp + N * IC;
    for (int64_t i = 0; i < N; i++)
        for (int64_t o = 0; o < OC; o++) {
            double acc = 0;
            for (int64_t c = 0; c < IC; c++) acc += (double)inp[i * IC + c] * w[o * IC + c];
            r[i * OC + o] = (float)acc;
        }
    for (int64_t i = 0; i < N; i++)
        for (int64_t c = 0; c < IC; c++) {
            double acc = 0;
            for (int64_t o = 0; o < OC; o++) acc += (double)dout[i * OC + o] * w[o * IC + c];
            dinp[i * IC + c] = (float)acc;
        }
    for (int64_t o = 0; o < OC; o++)
        for (int64_t c = 0; c < IC; c++) {
            double acc = 0;
            for (int64_t i = 0; i < N; i++) acc += (double)dout[i * OC + o] * inp[i * IC + c];
            dw[o * IC + c] = (float)acc;
        }
    return r;
}

static float *abs_copy(const float *x, int64_t n) {
    float *a = xmalloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) a[i] = fabsf(x[i]);
    return a;
}

/* The tiles cover every output exactly once: each element within fp32's
 * bound of the double product, |got - ref| <= 1e-6 + K u sum |a b| with K
 * the longest sum (every BLAS core sums in its own order, so an element
 * whose terms cancel can be off by more than its own size allows; a tile
 * missed or counted twice is off by whole terms). */
static void check_values(const Shape *s, const float *inp, const float *w, const float *dout, const float *got) {
    int64_t total = s->N * s->OC + s->N * s->IC + s->OC * s->IC;
    float *ref = double_outputs(s, inp, w, dout);
    float *ai = abs_copy(inp, s->N * s->IC), *aw = abs_copy(w, s->OC * s->IC), *ad = abs_copy(dout, s->N * s->OC);
    float *mag = double_outputs(s, ai, aw, ad);
    int64_t K = s->N > s->IC ? s->N : s->IC, bad = 0, worst = 0;
    K = K > s->OC ? K : s->OC;
    double u = ldexp(1.0, -24), worst_excess = 0;
    for (int64_t i = 0; i < total; i++) {
        double d = fabs((double)got[i] - (double)ref[i]), bound = 1e-6 + (double)K * u * mag[i];
        if (!(d <= bound)) {
            bad++;
            if (d / bound > worst_excess) worst_excess = d / bound, worst = i;
        }
    }
    char name[160];
    snprintf(name, sizeof name,
             "fp32 N=%lld IC=%lld OC=%lld: out, dinp, dweight within fp32's bound of a double product", (long long)s->N,
             (long long)s->IC, (long long)s->OC);
    tl_result(bad == 0, name, "%lld of %lld elements outside; worst [%lld] got %.9g ref %.9g bound %.3g",
              (long long)bad, (long long)total, (long long)worst, got[worst], ref[worst],
              1e-6 + (double)K * u * mag[worst]);
    free(ref), free(mag), free(ai), free(aw), free(ad);
}

static void check_shape(const Shape *s, int bf16r) {
    Rng r;
    rng_seed(&r, (uint64_t)(s->N * 7919 + s->IC * 31 + s->OC));
    float *inp = random_floats(&r, s->N * s->IC), *w = random_floats(&r, s->OC * s->IC);
    float *dout = random_floats(&r, s->N * s->OC);
    int64_t total = s->N * s->OC + s->N * s->IC + s->OC * s->IC;
    omp_set_num_threads(1);
    float *ref = layer_outputs(s, inp, w, dout, bf16r);
    if (!bf16r) check_values(s, inp, w, dout, ref);
    const int threads[] = {2, 3, 4};
    for (size_t t = 0; t < sizeof threads / sizeof threads[0]; t++) {
        omp_set_num_threads(threads[t]);
        float *got = layer_outputs(s, inp, w, dout, bf16r);
        char name[160];
        snprintf(name, sizeof name, "%s N=%lld IC=%lld OC=%lld: %d threads give the bits of 1",
                 bf16r ? "bf16r" : "fp32", (long long)s->N, (long long)s->IC, (long long)s->OC, threads[t]);
        tl_identical(name, got, ref, total);
        free(got);
    }
    free(inp), free(w), free(dout), free(ref);
}

int main(void) {
    /* OPENBLAS_NUM_THREADS unset: OpenBLAS starts with one thread per core */
    int omp = omp_get_max_threads();
    json_t *info = blas_info_json(); /* pins OpenBLAS, as the first matmul would */
    const char *core = json_string_value(json_object_get(info, "core"));
    tl_result(core && core[0] && json_integer_value(json_object_get(info, "blas_threads")) == 1 &&
                  json_integer_value(json_object_get(info, "omp_threads")) == omp,
              "blas_info_json names the core and the thread counts", "core %s, %lld BLAS threads",
              core ? core : "(none)", (long long)json_integer_value(json_object_get(info, "blas_threads")));
    json_decref(info);
    tl_result(openblas_get_num_threads() == 1, "OpenBLAS runs on one thread once pinned",
              "openblas_get_num_threads() = %d", openblas_get_num_threads());
    tl_result(omp_get_max_threads() == omp, "pinning OpenBLAS leaves OpenMP's thread count alone", "%d threads, was %d",
              omp_get_max_threads(), omp);
    const Shape shapes[] = {{1, 64, 48},
                            {BLAS_TILE_MIN + 3, 4 * BLAS_TILE_MIN + 5, 2 * BLAS_TILE_MIN + 5},
                            {3 * BLAS_TILE_MIN - 1, 200, 5 * BLAS_TILE_MIN}};
    int64_t tr, tc;
    blas_tile_shape(shapes[1].N, shapes[1].OC, &tr, &tc);
    tl_result(shapes[1].N > tr && shapes[1].N % tr != 0 && shapes[1].OC > tc && shapes[1].OC % tc != 0,
              "the second shape's output has several tiles each way, the last ones partial", "tiles of %lld x %lld",
              (long long)tr, (long long)tc);
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        check_shape(&shapes[i], 0);
        check_shape(&shapes[i], 1);
    }
    return tl_failed ? 1 : 0;
}
