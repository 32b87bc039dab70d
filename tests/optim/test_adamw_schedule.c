/* Learning-rate schedules, deterministic global-norm clipping, and the
 * clipping factor fused into the optimizer step. */
#include <math.h>
#include <omp.h>
#include <string.h>

#include "../../common/rng.h"
#include "../../common/util.h"
#include "../../optim/clip.h"
#include "../../optim/optimizer.h"
#include "../../optim/schedule.h"
#include "../testlib.h"

static int near(double a, double b) { return fabs(a - b) <= 1e-15 + 1e-12 * fabs(b); }

static void schedules(void) {
    LrSchedule s = {.peak = 5e-6, .warmup_steps = 20, .total_steps = 220, .final_frac = 0, .decay = LR_LINEAR};
    lr_schedule_check(&s);
    tl_result(near(lr_schedule(&s, 1), 5e-6 / 20) && near(lr_schedule(&s, 10), 2.5e-6) &&
                  near(lr_schedule(&s, 20), 5e-6),
              "warm-up: linear from peak/20 at step 1 to the peak at step 20", "");
    /* the decay's 200 steps 21..220 run at peak * (1 - (s - 21) / 200): the
     * last one still trains, the end value comes one step after it */
    tl_result(near(lr_schedule(&s, 21), 5e-6) && near(lr_schedule(&s, 121), 2.5e-6) &&
                  near(lr_schedule(&s, 220), 5e-6 / 200) && near(lr_schedule(&s, 221), 0) &&
                  near(lr_schedule(&s, 300), 0),
              "linear decay: the peak at step 21, half way at 121, peak/200 at the last step 220, zero after",
              "%g %g %g", lr_schedule(&s, 121), lr_schedule(&s, 220), lr_schedule(&s, 221));
    s.decay = LR_COSINE;
    s.final_frac = 0.1;
    tl_result(near(lr_schedule(&s, 121), 5e-6 * (0.1 + 0.9 * 0.5)) && near(lr_schedule(&s, 221), 5e-7) &&
                  lr_schedule(&s, 220) > 5e-7 * (1 + 1e-9) &&
                  near(lr_schedule(&s, 71), 5e-6 * (0.1 + 0.9 * 0.5 * (1 + cos(M_PI / 4)))),
              "cosine decay to 10%: midpoint, quarter point, above the end at the last step, the end after it", "");
    /* every step trains: a one-step run with no warm-up (and final 0) takes
     * its step at the peak, a two-step one its second at half of it */
    LrSchedule one = {.peak = 1e-3, .warmup_steps = 0, .total_steps = 1, .final_frac = 0, .decay = LR_LINEAR};
    LrSchedule two = one;
    two.total_steps = 2;
    LrSchedule cos1 = one;
    cos1.decay = LR_COSINE;
    tl_result(near(lr_schedule(&one, 1), 1e-3) && near(lr_schedule(&cos1, 1), 1e-3) && near(lr_schedule(&two, 2), 5e-4),
              "steps=1 warmup=0: the only step runs at the peak (linear and cosine); steps=2: the last at half",
              "%g %g %g", lr_schedule(&one, 1), lr_schedule(&cos1, 1), lr_schedule(&two, 2));
    s.decay = LR_CONSTANT;
    tl_result(near(lr_schedule(&s, 21), 5e-6) && near(lr_schedule(&s, 10000), 5e-6), "constant after warm-up", "");
    s.warmup_steps = 0;
    tl_result(near(lr_schedule(&s, 1), 5e-6), "no warm-up: the peak from step 1", "");
}

static void clipping(void) {
    int64_t n = 1000003;
    float *g = xmalloc((size_t)n * 4);
    Rng r;
    rng_seed(&r, 4);
    long double ref = 0;
    for (int64_t i = 0; i < n; i++) g[i] = 0.01f * rng_normal(&r), ref += (long double)g[i] * g[i];
    omp_set_num_threads(1);
    double s1 = grad_sum_squares(g, n);
    omp_set_num_threads(2);
    double s2 = grad_sum_squares(g, n);
    omp_set_num_threads(3);
    double s3 = grad_sum_squares(g, n);
    omp_set_num_threads(2);
    tl_result(memcmp(&s1, &s2, 8) == 0 && memcmp(&s1, &s3, 8) == 0, "sum of squares identical for 1, 2, 3 threads", "");
    tl_result(fabs(s1 - (double)ref) <= 1e-12 * (double)ref, "sum of squares matches a long double sum",
              "%.17g vs %.17Lg", s1, ref);
    tl_result(grad_clip_factor(10.0, 1.0) < 0.1 && near(grad_clip_factor(10.0, 1.0), 1.0 / (10.0 + 1e-6)) &&
                  grad_clip_factor(0.5, 1.0) == 1.0 && grad_clip_factor(10.0, 0) == 1.0,
              "clip factor: max_norm / (norm + 1e-6), capped at 1, off for max_norm 0", "");
    g[777] = NAN;
    tl_result(!isfinite(grad_sum_squares(g, n)), "a NaN gradient gives a non-finite norm", "");
    free(g);
}

/* grad_scale in AdamWHyper must equal scaling the gradients beforehand */
static void fused_scale(void) {
    int64_t off[2] = {0, 5000}, num[2] = {5000, 300};
    int64_t n = 5300;
    Optimizer *a = optim_create(OPTIM_ADAMW8BIT, off, num, 2), *b = optim_create(OPTIM_ADAMW8BIT, off, num, 2);
    float *pa = xmalloc(n * 4), *pb = xmalloc(n * 4), *g = xmalloc(n * 4), *gs = xmalloc(n * 4);
    Rng r;
    rng_seed(&r, 6);
    for (int64_t i = 0; i < n; i++) pa[i] = pb[i] = 0.1f * rng_normal(&r);
    AdamWHyper h = adamw_hyper_default(), h1 = h;
    for (int t = 1; t <= 4; t++) {
        for (int64_t i = 0; i < n; i++) g[i] = rng_normal(&r);
        h.grad_scale = grad_clip_factor(sqrt(grad_sum_squares(g, n)), 1.0);
        memcpy(gs, g, n * 4);
        grad_scale(gs, n, (float)h.grad_scale);
        optim_step(a, pa, g, &h, t);
        optim_step(b, pb, gs, &h1, t);
    }
    tl_identical("clipping fused into the step equals scaling the gradients first", pa, pb, n);
    optim_free(a), optim_free(b);
    free(pa), free(pb), free(g), free(gs);
}

int main(void) {
    schedules();
    clipping();
    fused_scale();
    return tl_finish();
}
