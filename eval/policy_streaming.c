/* streaming (StreamingLLM): the first `sinks` positions plus the K - sinks
 * most recent ones; nothing depends on attention, so there is no state. */
#include <stdio.h>

#include <stddef.h>

#include "policies.h"
#include "policy.h"

static void streaming_init(Policy *p, int64_t layer, const PrefillLayer *pre) { (void)p, (void)layer, (void)pre; }

static void streaming_choose(Policy *p, int64_t layer, int64_t pos, const float *q, int32_t **keys, int64_t *n) {
    (void)layer, (void)q;
    int64_t K = p->opt.budget, sinks = p->opt.sinks < K ? p->opt.sinks : K;
    for (int64_t g = 0; g < p->shape.Hkv; g++) {
        int64_t c = 0;
        if (pos <= K) {
            for (int64_t j = 0; j < pos; j++) keys[g][c++] = (int32_t)j;
        } else {
            for (int64_t j = 0; j < sinks; j++) keys[g][c++] = (int32_t)j;
            for (int64_t j = pos - (K - sinks); j < pos; j++) keys[g][c++] = (int32_t)j;
        }
        n[g] = c;
    }
}

void policy_streaming_create(Policy *p) {
    snprintf(p->label, sizeof p->label, "streaming (sinks %lld)", (long long)p->opt.sinks);
    p->init = streaming_init;
    p->choose = streaming_choose;
    p->update = NULL; /* attention does not change its choice: the engine skips probabilities */
}
