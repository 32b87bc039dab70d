/* full: every cached key, the reference every other policy is compared to. */
#include <stddef.h>

#include "policies.h"
#include "policy.h"

static void full_init(Policy *p, int64_t layer, const PrefillLayer *pre) { (void)p, (void)layer, (void)pre; }

static void full_choose(Policy *p, int64_t layer, int64_t pos, const float *q, int32_t **keys, int64_t *n) {
    (void)layer, (void)q, (void)pos, (void)keys;
    for (int64_t g = 0; g < p->shape.Hkv; g++) n[g] = POLICY_EVERY_KEY;
}

void policy_full_create(Policy *p) {
    p->init = full_init;
    p->choose = full_choose;
    p->update = NULL; /* attention does not change its choice: the engine skips probabilities */
}
