#include "schedule.h"

#include <math.h>
#include <string.h>

#include "../common/util.h"

void lr_schedule_check(const LrSchedule *s) {
    KV_CHECK(isfinite(s->peak) && s->peak >= 0, "lr schedule: peak lr must be finite and >= 0, got %g", s->peak);
    KV_CHECK(s->warmup_steps >= 0, "lr schedule: warm-up steps must be >= 0, got %lld", (long long)s->warmup_steps);
    KV_CHECK(s->total_steps >= s->warmup_steps, "lr schedule: total steps %lld < warm-up steps %lld",
             (long long)s->total_steps, (long long)s->warmup_steps);
    KV_CHECK(s->final_frac >= 0 && s->final_frac <= 1, "lr schedule: final fraction must be in [0, 1], got %g",
             s->final_frac);
    KV_CHECK(s->decay == LR_CONSTANT || s->decay == LR_LINEAR || s->decay == LR_COSINE, "lr schedule: unknown decay %d",
             (int)s->decay);
}

double lr_schedule(const LrSchedule *s, int64_t step) {
    if (step < 1) step = 1;
    if (step <= s->warmup_steps) return s->peak * (double)step / (double)s->warmup_steps;
    if (s->decay == LR_CONSTANT || s->total_steps <= s->warmup_steps) return s->peak;
    /* the decay's first step (warmup + 1) runs at the peak and its last one
     * (total) at 1/(total - warmup) of the way above the end value, which is
     * reached one step later: every step trains, as in Hugging Face's
     * get_linear_schedule_with_warmup and torchtitan (a one-step run with no
     * warm-up takes its step at the peak, not at final_frac = 0) */
    double progress = (double)(step - s->warmup_steps - 1) / (double)(s->total_steps - s->warmup_steps);
    if (progress > 1) progress = 1;
    double shape = s->decay == LR_LINEAR ? 1.0 - progress : 0.5 * (1.0 + cos(M_PI * progress));
    return s->peak * (s->final_frac + (1.0 - s->final_frac) * shape);
}

int lr_decay_parse(const char *name, LrDecay *out) {
    if (strcmp(name, "constant") == 0) *out = LR_CONSTANT;
    else if (strcmp(name, "linear") == 0) *out = LR_LINEAR;
    else if (strcmp(name, "cosine") == 0) *out = LR_COSINE;
    else return -1;
    return 0;
}
