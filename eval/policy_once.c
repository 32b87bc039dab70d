/* once: any policy, asked only at the first decode step (position L).
 * Its answer there is the set it keeps after the prefill; every later step
 * reads that set plus every token decoded since, and nothing is evicted
 * again. This is how kvpress works (a press compresses the cache once, in
 * the prefill's forward, and the cache then grows), so with --compress-once
 * the NLLs of a kvcpt policy and of its kvpress twin can be compared token
 * for token. The wrapped policy never sees the decode steps' attention
 * (update is NULL): its choice at position L depends on the prefill alone. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/util.h"
#include "policies.h"
#include "policy.h"

typedef struct {
    Policy inner;
    int32_t *keys; /* (n_layers, Hkv, L) the first step's choice */
    int64_t *n;    /* (n_layers, Hkv) its counts; POLICY_EVERY_KEY: every prefill position */
} OnceState;

static void once_init(Policy *p, int64_t layer, const PrefillLayer *pre) {
    OnceState *st = p->state;
    st->inner.shape = p->shape; /* the engine sets shape.W after creation */
    st->inner.init(&st->inner, layer, pre);
}

static void once_choose(Policy *p, int64_t layer, int64_t pos, const float *q, int32_t **keys, int64_t *n) {
    OnceState *st = p->state;
    int64_t L = p->shape.L, Hkv = p->shape.Hkv;
    int32_t *saved = st->keys + layer * Hkv * L;
    int64_t *cnt = st->n + layer * Hkv;
    if (pos == L) {
        st->inner.choose(&st->inner, layer, pos, q, keys, n);
        for (int64_t g = 0; g < Hkv; g++) {
            cnt[g] = n[g];
            if (n[g] != POLICY_EVERY_KEY) memcpy(saved + g * L, keys[g], sizeof(int32_t) * (size_t)n[g]);
        }
        return;
    }
    KV_CHECK(pos > L, "policy %s: decode position %lld before the prefill's end %lld", p->name, (long long)pos,
             (long long)L);
    for (int64_t g = 0; g < Hkv; g++) {
        int64_t c = 0;
        if (cnt[g] == POLICY_EVERY_KEY) {
            n[g] = POLICY_EVERY_KEY;
            continue;
        }
        for (int64_t i = 0; i < cnt[g]; i++) keys[g][c++] = saved[g * L + i];
        for (int64_t j = L; j < pos; j++) keys[g][c++] = (int32_t)j;
        n[g] = c;
    }
}

/* The inner policy's own destroy and its full_steps_per_layer (which p
 * only borrowed): what policy_destroy would do, done here so that this file
 * needs nothing of eval/policy.c, whose policy_create calls in. */
static void once_destroy(Policy *p) {
    OnceState *st = p->state;
    if (st->inner.destroy) st->inner.destroy(&st->inner);
    free(st->inner.full_steps_per_layer);
    p->full_steps_per_layer = NULL;
    free(st->keys), free(st->n);
    free(st);
}

void policy_once_wrap(Policy *p) {
    OnceState *st = xcalloc(1, sizeof *st);
    st->inner = *p;
    st->inner.opt.once = 0;
    int64_t sets = p->shape.n_layers * p->shape.Hkv;
    st->keys = xmalloc(sizeof(int32_t) * (size_t)(sets * p->shape.L + 1));
    st->n = xcalloc((size_t)(sets + 1), sizeof(int64_t));
    p->state = st;
    size_t len = strlen(p->label);
    snprintf(p->label + len, sizeof p->label - len, ", once");
    p->init = once_init;
    p->choose = once_choose;
    p->update = NULL; /* the choice is made before any decode step's attention: none is computed */
    p->destroy = once_destroy;
    p->reads_prefill_cache = st->inner.reads_prefill_cache;
    p->full_steps_per_layer = st->inner.full_steps_per_layer;
}
