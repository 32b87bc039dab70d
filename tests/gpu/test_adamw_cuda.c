/* CUDA AdamW against its CPU oracle on the same inputs: fp32 params agree
 * to within one quantization code per state element (the arithmetic is
 * shared and explicitly rounded, so they are expected to be identical);
 * bf16 params match the oracle rounded to bf16; rejected gradients leave
 * everything unchanged. Placed steps (parameters spread over an fp32 and a
 * bf16 buffer, some rounded stochastically) against optim_step_rounded.
 * The clipping norm's sum of squares against grad_sum_squares. Skips
 * without a GPU. */
#include <math.h>
#include <string.h>

#include "../../common/rng.h"
#include "../../common/util.h"
#include "../../optim/clip.h"
#include "../../optim/optimizer.h"
#include "../testlib.h"
#ifdef KVCPT_CUDA
#include "../../kernels/cuda_device.h"
#include "../../optim/optim_cuda.h"

#define NSEG 4
static const int64_t off[NSEG] = {0, 300000, 300000 + 4097 + 5, 300000 + 4097 + 5 + 1000};
static const int64_t num[NSEG] = {300000, 4097, 1000, 70001};
#define TOTAL (300000 + 4097 + 5 + 1000 + 70001)

static uint16_t to_bf16(float x) { /* round to nearest even, as __float2bfloat16_rn */
    uint32_t u;
    memcpy(&u, &x, 4);
    u += 0x7fff + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}
static float from_bf16(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float x;
    memcpy(&x, &u, 4);
    return x;
}

static int64_t code_diff(const uint8_t *a, const uint8_t *b, int64_t n, int *max_d) {
    int64_t differ = 0;
    *max_d = 0;
    for (int64_t i = 0; i < n; i++) {
        int d = abs((int)a[i] - (int)b[i]);
        differ += d != 0;
        if (d > *max_d) *max_d = d;
    }
    return differ;
}

static void run(OptimKind kind, OptimDtype pd, const char *label) {
    Optimizer *cpu = optim_create(kind, off, num, NSEG), *back = optim_create(kind, off, num, NSEG);
    OptimCuda *gpu = optim_cuda_create(cpu);
    float *p = xmalloc(TOTAL * 4), *g = xmalloc(TOTAL * 4), *pg = xmalloc(TOTAL * 4);
    uint16_t *pb = xmalloc(TOTAL * 2);
    void *dp = cuda_malloc(TOTAL * 4), *dg = cuda_malloc(TOTAL * 4);
    Rng r;
    rng_seed(&r, 17);
    for (int64_t i = 0; i < TOTAL; i++) p[i] = 0.1f * rng_normal(&r);
    if (pd == OPTIM_BF16) {
        for (int64_t i = 0; i < TOTAL; i++) pb[i] = to_bf16(p[i]), p[i] = from_bf16(pb[i]);
        cuda_memcpy_h2d(dp, pb, TOTAL * 2);
    } else {
        cuda_memcpy_h2d(dp, p, TOTAL * 4);
    }
    AdamWHyper h = adamw_hyper_default();
    h.lr = 1e-3;
    h.weight_decay = 0.01;
    int rejected_ok = 1;
    for (int t = 1; t <= 10; t++) {
        for (int64_t i = 0; i < TOTAL; i++) g[i] = 0.01f * rng_normal(&r);
        if (t == 5) { /* a NaN: both reject, nothing changes */
            g[off[3] + 777] = NAN;
            cuda_memcpy_h2d(dg, g, TOTAL * 4);
            int rc_g = optim_cuda_step(gpu, dp, pd, dg, OPTIM_F32, &h, t);
            int rc_c = optim_step(cpu, p, g, &h, t);
            rejected_ok &=
                rc_g == 1 && rc_c == 1 && optim_cuda_bad(gpu)->segment == 3 && optim_cuda_bad(gpu)->index == 777;
            g[off[3] + 777] = 0.0f;
        }
        cuda_memcpy_h2d(dg, g, TOTAL * 4);
        optim_cuda_step(gpu, dp, pd, dg, OPTIM_F32, &h, t);
        optim_step(cpu, p, g, &h, t);
        if (pd == OPTIM_BF16)
            for (int64_t i = 0; i < TOTAL; i++) p[i] = from_bf16(to_bf16(p[i]));
    }
    optim_cuda_download(gpu, back);
    if (pd == OPTIM_BF16) {
        cuda_memcpy_d2h(pb, dp, TOTAL * 2);
        for (int64_t i = 0; i < TOTAL; i++) pg[i] = from_bf16(pb[i]);
    } else {
        cuda_memcpy_d2h(pg, dp, TOTAL * 4);
    }
    char name[160];
    snprintf(name, sizeof name, "%s: rejected NaN step reported at segment 3 element 777 by both", label);
    tl_result(rejected_ok, name, "");
    int md = 0, vd = 0;
    int64_t mdiff = code_diff(back->m_code, cpu->m_code, cpu->n_code, &md);
    int64_t vdiff = code_diff(back->v_code, cpu->v_code, cpu->n_code, &vd);
    printf("# %s: codes differing m %lld (max %d), v %lld (max %d) of %lld\n", label, (long long)mdiff, md,
           (long long)vdiff, vd, (long long)cpu->n_code);
    snprintf(name, sizeof name, "%s: state codes within one code of the CPU oracle", label);
    tl_result(md <= 1 && vd <= 1, name, "max code difference m %d v %d", md, vd);
    snprintf(name, sizeof name, "%s: absmax matches the CPU oracle", label);
    tl_close(name, back->m_absmax, cpu->m_absmax, cpu->n_absmax, 0, 1e-6);
    snprintf(name, sizeof name, "%s: fp32 states match the CPU oracle", label);
    tl_close(name, back->m32, cpu->m32, cpu->n_f32, 1e-12, 1e-6);
    snprintf(name, sizeof name, "%s: params match the CPU oracle", label);
    tl_close(name, pg, p, TOTAL, 1e-7, pd == OPTIM_BF16 ? 8e-3 : 1e-6);
    cuda_free(dp), cuda_free(dg);
    free(p), free(g), free(pg), free(pb);
    optim_cuda_free(gpu);
    optim_free(cpu), optim_free(back);
}
/* Segments 0 and 3 bf16 with stochastic rounding, 1 fp32, 2 bf16 to
 * nearest, packed in another order and at other offsets than the
 * gradients'; the CPU oracle steps one fp32 buffer in gradient order. */
static const OptimPlace places[NSEG] = {
    {OPTIM_BF16, 70001 + 1000 + 16, 1}, {OPTIM_F32, 13, 0}, {OPTIM_BF16, 70001 + 8, 0}, {OPTIM_BF16, 0, 1}};
static const uint8_t rounding[NSEG] = {OPTIM_ROUND_STOCHASTIC, OPTIM_ROUND_NONE, OPTIM_ROUND_NEAREST,
                                       OPTIM_ROUND_STOCHASTIC};
#define P16_TOTAL (70001 + 1000 + 16 + 300000)
#define P32_TOTAL (13 + 4097)

static void placed_upload(void *d32, void *d16, const float *p) {
    float *h32 = xcalloc(P32_TOTAL, 4);
    uint16_t *h16 = xcalloc(P16_TOTAL, 2);
    for (int s = 0; s < NSEG; s++)
        for (int64_t j = 0; j < num[s]; j++) {
            if (places[s].dtype == OPTIM_F32) h32[places[s].offset + j] = p[off[s] + j];
            else h16[places[s].offset + j] = to_bf16(p[off[s] + j]);
        }
    cuda_memcpy_h2d(d32, h32, P32_TOTAL * 4);
    cuda_memcpy_h2d(d16, h16, P16_TOTAL * 2);
    free(h32), free(h16);
}

static void placed_download(float *p, const void *d32, const void *d16) {
    float *h32 = xmalloc(P32_TOTAL * 4);
    uint16_t *h16 = xmalloc(P16_TOTAL * 2);
    cuda_memcpy_d2h(h32, d32, P32_TOTAL * 4);
    cuda_memcpy_d2h(h16, d16, P16_TOTAL * 2);
    for (int s = 0; s < NSEG; s++)
        for (int64_t j = 0; j < num[s]; j++)
            p[off[s] + j] =
                places[s].dtype == OPTIM_F32 ? h32[places[s].offset + j] : from_bf16(h16[places[s].offset + j]);
    free(h32), free(h16);
}

/* Elements of segment s that differ between a and b. */
static int64_t seg_changed(const float *a, const float *b, int s) {
    int64_t n = 0;
    for (int64_t j = 0; j < num[s]; j++) n += a[off[s] + j] != b[off[s] + j];
    return n;
}

/* lr 1e-5 on weights of scale 0.1: each update is far below half a bf16
 * step (2.4e-4 at 0.1), so rounding to nearest moves only the few weights
 * within ~3e-3 of zero; stochastic rounding moves many more, and the
 * oracle says exactly which. */
static void run_placed(OptimKind kind, const char *label) {
    Optimizer *cpu = optim_create(kind, off, num, NSEG), *back = optim_create(kind, off, num, NSEG);
    OptimCuda *gpu = optim_cuda_create(cpu);
    optim_cuda_set_places(gpu, places, 99);
    float *p = xmalloc(TOTAL * 4), *g = xmalloc(TOTAL * 4), *pg = xmalloc(TOTAL * 4), *p0 = xmalloc(TOTAL * 4);
    void *d32 = cuda_malloc(P32_TOTAL * 4), *d16 = cuda_malloc(P16_TOTAL * 2), *dg = cuda_malloc(TOTAL * 4);
    Rng r;
    rng_seed(&r, 23);
    for (int64_t i = 0; i < TOTAL; i++) p[i] = 0.1f * rng_normal(&r);
    for (int s = 0; s < NSEG; s++)
        if (rounding[s] != OPTIM_ROUND_NONE)
            for (int64_t j = 0; j < num[s]; j++) p[off[s] + j] = from_bf16(to_bf16(p[off[s] + j]));
    memcpy(p0, p, TOTAL * 4);
    placed_upload(d32, d16, p);
    AdamWHyper h = adamw_hyper_default();
    h.lr = 1e-5;
    int rc_ok = 1;
    for (int t = 1; t <= 10; t++) {
        for (int64_t i = 0; i < TOTAL; i++) g[i] = 0.01f * rng_normal(&r);
        cuda_memcpy_h2d(dg, g, TOTAL * 4);
        rc_ok &= optim_cuda_step_placed(gpu, d32, d16, dg, OPTIM_F32, &h, t) == 0;
        rc_ok &= optim_step_rounded(cpu, p, g, &h, t, rounding, 99) == 0;
    }
    memcpy(pg, p, TOTAL * 4); /* the gaps between segments */
    placed_download(pg, d32, d16);
    optim_cuda_download(gpu, back);
    char name[160];
    snprintf(name, sizeof name, "%s: every placed step accepted by both", label);
    tl_result(rc_ok, name, "");
    int64_t same = 0;
    for (int64_t i = 0; i < TOTAL; i++) same += pg[i] == p[i];
    printf(
        "# %s: %lld of %lld params identical to the oracle; moved (oracle) seg0 %lld seg1 %lld seg2 %lld seg3 %lld\n",
        label, (long long)same, (long long)TOTAL, (long long)seg_changed(p, p0, 0), (long long)seg_changed(p, p0, 1),
        (long long)seg_changed(p, p0, 2), (long long)seg_changed(p, p0, 3));
    /* one code of state difference (allowed above) can move a stochastic draw by one bf16 step */
    snprintf(name, sizeof name, "%s: params within one bf16 step of the oracle", label);
    tl_close(name, pg, p, TOTAL, 1e-7, 8e-3);
    snprintf(name, sizeof name, "%s: params 99.9%% bit-identical to the oracle", label);
    tl_result(same >= TOTAL - TOTAL / 1000, name, "%lld identical of %lld", (long long)same, (long long)TOTAL);
    snprintf(name, sizeof name, "%s: states match the oracle", label);
    int md = 0, vd = 0;
    code_diff(back->m_code, cpu->m_code, cpu->n_code, &md);
    code_diff(back->v_code, cpu->v_code, cpu->n_code, &vd);
    tl_result(md <= 1 && vd <= 1, name, "max code difference m %d v %d", md, vd);
    snprintf(name, sizeof name, "%s: nearest rounding loses most small updates, stochastic keeps 4x as many", label);
    int64_t c0 = seg_changed(pg, p0, 0), c1 = seg_changed(pg, p0, 1), c2 = seg_changed(pg, p0, 2),
            c3 = seg_changed(pg, p0, 3);
    double f2 = (double)c2 / (double)num[2];
    tl_result(f2 < 0.05 && c0 > 4 * f2 * (double)num[0] && c3 > 4 * f2 * (double)num[3] && c1 >= num[1] - num[1] / 100,
              name, "changed seg0 %lld/%lld seg1 %lld/%lld seg2 %lld/%lld seg3 %lld/%lld", (long long)c0,
              (long long)num[0], (long long)c1, (long long)num[1], (long long)c2, (long long)num[2], (long long)c3,
              (long long)num[3]);
    cuda_free(d32), cuda_free(d16), cuda_free(dg);
    free(p), free(g), free(pg), free(p0);
    optim_cuda_free(gpu);
    optim_free(cpu), optim_free(back);
}
/* Chunked as the CPU; a chunk's sum in another order: equal to ~1e-15. */
static void check_sum_squares(int64_t n, const char *label) {
    float *g = xmalloc(sizeof(float) * (size_t)(n + 1));
    Rng r;
    rng_seed(&r, (uint64_t)n + 5);
    for (int64_t i = 0; i < n; i++) g[i] = 0.03f * rng_normal(&r);
    void *d = cuda_malloc(sizeof(float) * (size_t)(n + 1));
    cuda_memcpy_h2d(d, g, sizeof(float) * (size_t)n);
    double want = grad_sum_squares(g, n), got = grad_sum_squares_cuda(d, n);
    tl_result(fabs(got - want) <= 1e-12 * want + 1e-300 && (n > 0 || got == 0.0), label, "got %.17g want %.17g", got,
              want);
    if (n > 0) {
        g[n / 2] = INFINITY;
        cuda_memcpy_h2d(d, g, sizeof(float) * (size_t)n);
        got = grad_sum_squares_cuda(d, n);
        char name[160];
        snprintf(name, sizeof name, "%s, an infinite gradient gives an infinite sum", label);
        tl_result(isinf(got), name, "got %g", got);
    }
    cuda_free(d);
    free(g);
}
#endif

int main(void) {
#ifdef KVCPT_CUDA
    if (cuda_device_count() == 0) {
        tl_skip("adamw cuda vs cpu", "no CUDA device visible");
        return tl_finish();
    }
    run(OPTIM_ADAMW8BIT, OPTIM_F32, "adamw8bit fp32 params");
    run(OPTIM_ADAMW8BIT, OPTIM_BF16, "adamw8bit bf16 params");
    run(OPTIM_ADAMW, OPTIM_F32, "adamw fp32 params");
    run_placed(OPTIM_ADAMW8BIT, "adamw8bit placed params");
    run_placed(OPTIM_ADAMW, "adamw placed params");
    check_sum_squares(3 * GRAD_SUM_CHUNK + 17, "sum of squares: 3 chunks and 17 elements match the CPU");
    check_sum_squares(5, "sum of squares: 5 elements match the CPU");
    check_sum_squares(0, "sum of squares: an empty buffer is 0");
#else
    tl_skip("adamw cuda vs cpu", "the CUDA backend was not compiled");
#endif
    return tl_finish();
}
