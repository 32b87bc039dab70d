/* full: every cached key, the reference every other policy is compared to. */
#include "policies.h"

static void full_init(Policy *p, int64_t layer, const PrefillLayer *pre) { (void)p, (void)layer, (void)pre; }

static void full_choose(Policy *p, int64_t layer, int64_t pos, const float *q, int32_t **keys, int64_t *n) {
    (void)layer, (void)q;
    for (int64_t g = 0; g < p->shape.Hkv; g++) {
        for (int64_t j = 0; j < pos; j++) keys[g][j] = (int32_t)j;
        n[g] = pos;
    }
}

static void full_update(Policy *p, int64_t layer, int64_t pos, int32_t *const *keys, const int64_t *n,
                        const float *probs, int64_t max_n) {
    (void)p, (void)layer, (void)pos, (void)keys, (void)n, (void)probs, (void)max_n;
}

void policy_full_create(Policy *p) {
    p->init = full_init;
    p->choose = full_choose;
    p->update = full_update;
}
