#ifndef KVCPT_SCHEDULE_H
#define KVCPT_SCHEDULE_H
/* Learning-rate schedules: linear warm-up to the peak, then constant,
 * linear or cosine decay from the peak at step warmup + 1 towards
 * final_frac * peak, reached at step total_steps + 1, so the last step still
 * trains. Steps are 1-based (the step number the optimizer is about to take). */
#include <stdint.h>

typedef enum { LR_CONSTANT = 0, LR_LINEAR = 1, LR_COSINE = 2 } LrDecay;

typedef struct {
    double peak;           /* default 5e-6: the CPT recipe's (docs/optim.md) */
    int64_t warmup_steps;  /* default 20; step w reaches the peak */
    int64_t total_steps;   /* the last step; after it the lr stays at the end value */
    double final_frac;     /* end value as a fraction of peak; default 0 */
    LrDecay decay;         /* default linear */
} LrSchedule;

/* Dies naming the field on a schedule that makes no sense. */
void lr_schedule_check(const LrSchedule *s);
double lr_schedule(const LrSchedule *s, int64_t step);
/* "constant", "linear" or "cosine"; -1 for anything else. */
int lr_decay_parse(const char *name, LrDecay *out);

#endif
