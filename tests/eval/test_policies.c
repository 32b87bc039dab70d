/* Hand-computed key choices of every policy on small constructed prefill
 * statistics (Hq = 2 query heads sharing Hkv = 1 KV head, D = 2). Each case
 * states the arithmetic in its comment; the test compares the policy's
 * chosen set with the set computed by hand. GQA aggregation is max unless
 * noted. Decode steps mimic the engine: choose, sort, append the current
 * position, update with per-head probabilities aligned to those keys. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../../common/util.h"
#include "../../eval/policy.h"
#include "../../kernels/refresh_select.h"
#include "../testlib.h"

#define HQ 2
#define D 2
#define C 2

typedef struct {
    int64_t L, W, cap;
    float *colsum, *last_probs, *last_out, *wo, *kc, *vc, *q_last;
} Fixture;

static void fx_init(Fixture *f, int64_t L, int64_t W, int64_t cap) {
    f->L = L, f->W = W, f->cap = cap;
    f->colsum = xcalloc((size_t)(HQ * L), sizeof(float));
    f->last_probs = xcalloc((size_t)(HQ * W * L), sizeof(float));
    f->last_out = xcalloc((size_t)(W * HQ * D), sizeof(float));
    f->wo = xcalloc((size_t)(C * HQ * D), sizeof(float));
    f->kc = xcalloc((size_t)(cap * D), sizeof(float));
    f->vc = xcalloc((size_t)(cap * D), sizeof(float));
    f->q_last = xcalloc((size_t)(HQ * D), sizeof(float));
}

static void fx_free(Fixture *f) {
    free(f->colsum), free(f->last_probs), free(f->last_out), free(f->wo), free(f->kc), free(f->vc), free(f->q_last);
}

/* Row r (query L-W+r) of head h: the first n values, zeros after. */
static void fx_row(Fixture *f, int64_t h, int64_t r, const float *vals, int64_t n) {
    memcpy(f->last_probs + (h * f->W + r) * f->L, vals, sizeof(float) * (size_t)n);
}

static PrefillLayer fx_pre(const Fixture *f) {
    PrefillLayer p = {f->colsum, f->last_probs, f->last_out, f->wo, f->kc, f->vc, f->q_last};
    return p;
}

/* RoPE tables for D = 2 (one pair): position t rotates by t radians. */
#define ROPE_CAP 64
static float rope_cos[ROPE_CAP], rope_sin[ROPE_CAP];

static void make(Policy *p, const char *name, const Fixture *f, PolicyOptions o, int64_t n_layers) {
    for (int t = 0; t < ROPE_CAP; t++) rope_cos[t] = cosf((float)t), rope_sin[t] = sinf((float)t);
    KV_CHECK(f->cap <= ROPE_CAP, "test fixture cap %lld exceeds the RoPE table", (long long)f->cap);
    PolicyShape sh = {n_layers, HQ, 1, D, C, f->L, f->W, f->cap, rope_cos, rope_sin};
    policy_create(p, name, &sh, &o);
}

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

static int32_t keybuf[64];
static int32_t *keys[1] = {keybuf};
static int64_t nkeys[1];
static const float q_zero[HQ * D]; /* the current query: only refreshkv reads it */
static const float *q_now = q_zero;  /* what expect_keys passes as the current query */

/* choose() at pos, sorted, compared with want[0..nwant-1] (ascending). */
static void expect_keys(Policy *p, int64_t layer, int64_t pos, const int32_t *want, int64_t nwant, const char *name) {
    p->choose(p, layer, pos, q_now, keys, nkeys);
    if (nkeys[0] == POLICY_EVERY_KEY) /* what the engine makes of it */
        for (nkeys[0] = 0; nkeys[0] < pos; nkeys[0]++) keybuf[nkeys[0]] = (int32_t)nkeys[0];
    qsort(keybuf, (size_t)nkeys[0], sizeof(int32_t), cmp_i32);
    int ok = nkeys[0] == nwant && memcmp(keybuf, want, sizeof(int32_t) * (size_t)nwant) == 0;
    char got[256] = "", exp[256] = "";
    for (int64_t i = 0; i < nkeys[0]; i++) snprintf(got + strlen(got), sizeof got - strlen(got), " %d", keybuf[i]);
    for (int64_t i = 0; i < nwant; i++) snprintf(exp + strlen(exp), sizeof exp - strlen(exp), " %d", want[i]);
    tl_result(ok, name, "chose {%s }, expected {%s }", got, exp);
}

/* The engine's half of a step after expect_keys: append pos, call update
 * with probs p0 (head 0) and p1 (head 1) aligned to the sorted keys + pos. */
static void step(Policy *p, int64_t layer, int64_t pos, const float *p0, const float *p1) {
    int64_t n = nkeys[0] + 1, max_n = pos + 1;
    keybuf[nkeys[0]] = (int32_t)pos;
    nkeys[0] = n;
    float *probs = xcalloc((size_t)(HQ * max_n), sizeof(float));
    memcpy(probs, p0, sizeof(float) * (size_t)n);
    memcpy(probs + max_n, p1, sizeof(float) * (size_t)n);
    if (p->update) p->update(p, layer, pos, keys, nkeys, probs, max_n);
    free(probs);
}

/* streaming, K = 5, 2 sinks, pos 12: sinks {0,1} + the 3 most recent
 * {9,10,11}. With pos <= K every past position. */
static void test_streaming(void) {
    Fixture f;
    fx_init(&f, 10, 2, 16);
    PolicyOptions o = policy_default_options(5);
    o.sinks = 2;
    Policy p;
    make(&p, "streaming", &f, o, 1);
    PrefillLayer pre = fx_pre(&f);
    p.init(&p, 0, &pre);
    expect_keys(&p, 0, 12, (int32_t[]){0, 1, 9, 10, 11}, 5, "streaming: sinks + most recent");
    expect_keys(&p, 0, 5, (int32_t[]){0, 1, 2, 3, 4}, 5, "streaming: pos <= K keeps every past position");
    policy_destroy(&p);
    fx_free(&f);
}

/* The last prefill row (query 9) of each head, L = 10. */
static const float snap_h0[10] = {0.30f, 0, 0, 0.05f, 0, 0, 0.20f, 0, 0.05f, 0.40f};
static const float snap_h1[10] = {0.01f, 0.01f, 0.25f, 0.01f, 0.01f, 0.10f, 0.01f, 0.01f, 0.01f, 0.58f};

/* snapkv, window 1, K = 3. Max over heads of the last row:
 *   [.30 .01 .25 .05 .01 .10 .20 .01 .05 .58]
 * kernel 1: top-3 = {9 (.58), 0 (.30), 2 (.25)}. Decode pos 11: one new
 * token (10) joined, so the lowest prefill entry (2, .25) is evicted:
 * {0, 9, 10}. Kernel 3 (max over t-1..t+1, clipped):
 *   [.30 .30 .25 .25 .10 .20 .20 .20 .58 .58] -> {8, 9} then .30 at 0 and 1,
 * ties to the lower position: {0, 8, 9}. Those cases turn the window off.
 * Default, the window (position 9) is kept and the prefix 0..8 alone is
 * pooled (SnapKV's code, kvpress): kernel 3 over
 *   [.30 .01 .25 .05 .01 .10 .20 .01 .05] -> [.30 .30 .25 .25 .10 .20 .20 .20 .05],
 * top K - 1 = 2: {0, 1} (.30), so {0, 1, 9}; kernel 1: {0 (.30), 2 (.25)} + 9,
 * and pos 11 evicts 2 (the window last): {0, 9, 10}. */
static void test_snapkv(void) {
    Fixture f;
    fx_init(&f, 10, 2, 16);
    fx_row(&f, 0, 1, snap_h0, 10);
    fx_row(&f, 1, 1, snap_h1, 10);
    PrefillLayer pre = fx_pre(&f);
    PolicyOptions o = policy_default_options(3);
    o.pool_kernel = 1, o.snapkv_keep_window = 0;
    Policy p;
    make(&p, "snapkv", &f, o, 1);
    p.init(&p, 0, &pre);
    expect_keys(&p, 0, 10, (int32_t[]){0, 2, 9}, 3, "snapkv: top-K of the last query's attention");
    expect_keys(&p, 0, 11, (int32_t[]){0, 9, 10}, 3, "snapkv: a new token evicts the lowest prefill entry");
    policy_destroy(&p);
    o.pool_kernel = 3;
    make(&p, "snapkv", &f, o, 1);
    p.init(&p, 0, &pre);
    expect_keys(&p, 0, 10, (int32_t[]){0, 8, 9}, 3, "snapkv: max-pooled scores (kernel 3)");
    policy_destroy(&p);
    o = policy_default_options(3);
    o.pool_kernel = 3;
    make(&p, "snapkv", &f, o, 1);
    p.init(&p, 0, &pre);
    expect_keys(&p, 0, 10, (int32_t[]){0, 1, 9}, 3, "snapkv: by default the window is kept and only the prefix pooled");
    policy_destroy(&p);
    o.pool_kernel = 1;
    make(&p, "snapkv", &f, o, 1);
    p.init(&p, 0, &pre);
    expect_keys(&p, 0, 10, (int32_t[]){0, 2, 9}, 3, "snapkv: window kept, top K - 1 of the prefix");
    expect_keys(&p, 0, 11, (int32_t[]){0, 9, 10}, 3, "snapkv: window kept, a new token evicts the lowest prefix entry");
    policy_destroy(&p);
    o.budget = 1;
    make(&p, "snapkv", &f, o, 1);
    p.init(&p, 0, &pre);
    expect_keys(&p, 0, 10, (int32_t[]){9}, 1, "snapkv: a budget no larger than the window keeps the window's newest");
    policy_destroy(&p);
    fx_free(&f);
}

/* refreshkv --fixed-stride 2, K = 3, kernel 1, same prefill as snapkv:
 * C_p = {0, 2, 9}. Step 1 (pos 10) is partial: {0, 2, 9}. Step 2 (pos 11)
 * is full: every key 0..10; its attention (over 0..11) is head 0: .6 at 4,
 * .2 at 11; head 1: .3 at 7, .1 at 1 (rest spread thinly at .01), so the
 * re-selected C_p is {4 (.6), 7 (.3), 11 (.2)} and since = 12: step 3
 * (pos 12) attends to exactly {4, 7, 11}; step 4 (pos 13) is full again. */
static void test_refreshkv(void) {
    Fixture f;
    fx_init(&f, 10, 2, 16);
    fx_row(&f, 0, 1, snap_h0, 10);
    fx_row(&f, 1, 1, snap_h1, 10);
    PrefillLayer pre = fx_pre(&f);
    PolicyOptions o = policy_default_options(3);
    o.pool_kernel = 1;
    o.fixed_stride = 2;
    Policy p;
    make(&p, "refreshkv", &f, o, 1);
    p.init(&p, 0, &pre);
    float none[12] = {0};
    expect_keys(&p, 0, 10, (int32_t[]){0, 2, 9}, 3, "refreshkv: step 1 attends to the prefill selection");
    step(&p, 0, 10, none, none);
    expect_keys(&p, 0, 11, (int32_t[]){0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 11, "refreshkv: step 2 is a full step");
    float h0[12] = {0, 0, 0, 0, 0.6f, 0, 0, 0, 0, 0, 0, 0.2f}, h1[12];
    for (int i = 0; i < 12; i++) h1[i] = 0.01f;
    h1[7] = 0.3f, h1[1] = 0.1f;
    step(&p, 0, 11, h0, h1);
    expect_keys(&p, 0, 12, (int32_t[]){4, 7, 11}, 3, "refreshkv: C_p re-selected from the full step's attention");
    step(&p, 0, 12, none, none);
    expect_keys(&p, 0, 13, (int32_t[]){0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, 13,
                "refreshkv: step 4 is a full step again");
    tl_result(p.full_steps_per_layer[0] == 2, "refreshkv: counts its full steps", "%lld",
              (long long)p.full_steps_per_layer[0]);
    policy_destroy(&p);
    fx_free(&f);
}

/* refreshkv's similarity check, QC stride 1, s = .85, K = 3, kernel 1:
 * C_p = {0, 2, 9} as above; position t rotates by t radians (make()).
 * The prefill's last query (position 9) is (1, 0) in both heads.
 *  A: the query at 10 has the same content, (1, 0). Before RoPE the two are
 *     identical (cosine 1); after RoPE they are 1 radian apart (cosine
 *     cos 1 = .54 < .85). Default (post-RoPE, the paper's argument): step 1
 *     is a full step; --refresh-query pre: it attends to C_p.
 *  B: the query at 10 is (cos 1, -sin 1), (1, 0) turned back by 1 radian:
 *     after RoPE it equals position 9's (cosine 1, no refresh); before RoPE
 *     the cosine is .54 (a full step). */
static void refreshkv_check(const Fixture *f, int query, const float *q10, int full, const char *name) {
    PolicyOptions o = policy_default_options(3);
    o.pool_kernel = 1, o.qc_stride = 1;
    if (query >= 0) o.refresh_query = query;
    PrefillLayer pre = fx_pre(f);
    Policy p;
    make(&p, "refreshkv", f, o, 1);
    p.init(&p, 0, &pre);
    q_now = q10;
    if (full) expect_keys(&p, 0, 10, (int32_t[]){0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, 10, name);
    else expect_keys(&p, 0, 10, (int32_t[]){0, 2, 9}, 3, name);
    q_now = q_zero;
    policy_destroy(&p);
}

static void test_refreshkv_query(void) {
    Fixture f;
    fx_init(&f, 10, 2, 16);
    fx_row(&f, 0, 1, snap_h0, 10);
    fx_row(&f, 1, 1, snap_h1, 10);
    f.q_last[0 * D + 0] = 1, f.q_last[1 * D + 0] = 1;
    const float same[HQ * D] = {1, 0, 1, 0};
    const float back[HQ * D] = {cosf(1.0f), -sinf(1.0f), cosf(1.0f), -sinf(1.0f)};
    refreshkv_check(&f, -1, same, 1, "refreshkv: by default the check compares queries after RoPE (A: full step)");
    refreshkv_check(&f, QUERY_POST_ROPE, back, 0, "refreshkv --refresh-query post: same rotated query, no refresh (B)");
    refreshkv_check(&f, QUERY_PRE_ROPE, same, 0, "refreshkv --refresh-query pre: same content, no refresh (A)");
    refreshkv_check(&f, QUERY_PRE_ROPE, back, 1, "refreshkv --refresh-query pre: other content, full step (B)");
    fx_free(&f);
}

/* h2o, K = 4: 2 recent + 2 heavy. Column sums (L = 10), max over heads:
 *   head 0 [5 .5 .2 1 .1 .3 2.5 .4 1 1], head 1 [4 .6 .1 1.2 .2 .1 .5 .3 2 1]
 *   max    [5 .6 .2 1.2 .2 .3 2.5 .4 ...]; heavy = top-2 of 0..7 = {0, 6}.
 * pos 10 attends to {0, 6} + recent {8, 9}. Its attention over [0 6 8 9 10]:
 * head 0 [.1 .1 .1 .1 .6], head 1 [.05 .05 .8 .05 .05]. Cumulative, max over
 * heads: 0: max(5.1, 4.05) = 5.1; 6: max(2.6, .55) = 2.6; 8: max(1.1, 2.8)
 * = 2.8. Position 8 leaves the recent window and joins the heavy set
 * {0, 6, 8}; the lowest (6, 2.6) is evicted: pos 11 attends to {0, 8, 9, 10}.
 * (Without the decode step's attention 8 would have had 2 < 2.5 and gone.) */
static void test_h2o(void) {
    Fixture f;
    fx_init(&f, 10, 2, 16);
    const float c0[10] = {5, 0.5f, 0.2f, 1, 0.1f, 0.3f, 2.5f, 0.4f, 1, 1};
    const float c1[10] = {4, 0.6f, 0.1f, 1.2f, 0.2f, 0.1f, 0.5f, 0.3f, 2, 1};
    memcpy(f.colsum, c0, sizeof c0), memcpy(f.colsum + 10, c1, sizeof c1);
    PrefillLayer pre = fx_pre(&f);
    Policy p;
    make(&p, "h2o", &f, policy_default_options(4), 1);
    p.init(&p, 0, &pre);
    expect_keys(&p, 0, 10, (int32_t[]){0, 6, 8, 9}, 4, "h2o: heavy hitters by prefill column sums + recent");
    step(&p, 0, 10, (float[]){0.1f, 0.1f, 0.1f, 0.1f, 0.6f}, (float[]){0.05f, 0.05f, 0.8f, 0.05f, 0.05f});
    expect_keys(&p, 0, 11, (int32_t[]){0, 8, 9, 10}, 4,
                "h2o: decode attention accumulates; lowest heavy entry evicted");
    policy_destroy(&p);
    fx_free(&f);
}

/* tova, K = 4, L = 10, W = 3 (rows are queries 7, 8, 9). Entering the
 * window the cache is {0..6}.
 * Query 7 joins (8 entries): its rows over 0..7,
 *   head 0 [.30 .05 .05 .20 .05 .05 .10 .20], head 1 [.40 .10 .05 .05 .15 .05 .05 .15]
 *   max    [.40 .10 .05 .20 .15 .05 .10 .20] -> keep the top 4 {0, 3, 4, 7}.
 * Query 8 joins: {0,3,4,7,8}. Rows renormalised over that set:
 *   head 0 [.10 .30 .30 .02 .04 .10 .10 .02 .02]: over the set .10 .02 .04 .02 .02,
 *     sum .20 -> 0:.5 3:.1 4:.2 7:.1 8:.1
 *   head 1 [.20 0 0 .20 .15 0 0 .15 .30]: sum 1 -> 0:.2 3:.2 4:.15 7:.15 8:.3
 *   max 0:.5 3:.2 4:.2 7:.15 8:.3 -> evict 7. (Without the renormalisation
 *   4 and 7 would tie at .15 and 4 would go.)
 * Query 9 joins: {0,3,4,8,9}.
 *   head 0 [.05 .1 .1 .3 .05 .1 .1 .1 .05 .05]: sum .5 -> 0:.1 3:.6 4:.1 8:.1 9:.1
 *   head 1 [.12 .1 .1 .1 .2 .1 .1 0 .08 .1]: sum .6 -> 0:.2 3:.167 4:.333 8:.133 9:.167
 *   max 0:.2 3:.6 4:.333 8:.133 9:.167 -> evict 8: cache {0, 3, 4, 9}.
 * Decode pos 10 attends to {0,3,4,9} + itself: head 0 [.1 .1 .1 .1 .6],
 * head 1 [.3 .3 .05 .3 .05]; max: 4 lowest (.1) -> pos 11 attends to
 * {0, 3, 9, 10}. That is --head-sets group --tova-window 3.
 * Default (TOVA's code): one shared set ranked by the mean over the heads of
 * the last query's row, the prompt reduced once. Query 9's rows, mean:
 *   [.085 .1 .1 .2 .125 .1 .1 .05 .065 .075] -> 3 and 4, then .1 at 1, 2, 5,
 *   6: ties evict the lower position, so {3, 4, 5, 6}.
 * Decode pos 10 attends to {3,4,5,6} + itself: head 0 [.15 .01 .3 .24 .3],
 * head 1 [.15 .2 .3 .05 .3]; mean [.15 .105 .3 .145 .3]: 4 goes -> {3, 5, 6, 10}
 * (the group max [.15 .2 .3 .24 .3] would evict 3). */
static void test_tova(void) {
    Fixture f;
    fx_init(&f, 10, 3, 16);
    fx_row(&f, 0, 0, (float[]){0.30f, 0.05f, 0.05f, 0.20f, 0.05f, 0.05f, 0.10f, 0.20f}, 8);
    fx_row(&f, 1, 0, (float[]){0.40f, 0.10f, 0.05f, 0.05f, 0.15f, 0.05f, 0.05f, 0.15f}, 8);
    fx_row(&f, 0, 1, (float[]){0.10f, 0.30f, 0.30f, 0.02f, 0.04f, 0.10f, 0.10f, 0.02f, 0.02f}, 9);
    fx_row(&f, 1, 1, (float[]){0.20f, 0, 0, 0.20f, 0.15f, 0, 0, 0.15f, 0.30f}, 9);
    fx_row(&f, 0, 2, (float[]){0.05f, 0.1f, 0.1f, 0.3f, 0.05f, 0.1f, 0.1f, 0.1f, 0.05f, 0.05f}, 10);
    fx_row(&f, 1, 2, (float[]){0.12f, 0.1f, 0.1f, 0.1f, 0.2f, 0.1f, 0.1f, 0, 0.08f, 0.1f}, 10);
    PrefillLayer pre = fx_pre(&f);
    Policy p;
    PolicyOptions o = policy_default_options(4);
    o.head_sets = HEAD_SETS_GROUP, o.tova_window = 3;
    make(&p, "tova", &f, o, 1);
    p.init(&p, 0, &pre);
    expect_keys(&p, 0, 10, (int32_t[]){0, 3, 4, 9}, 4, "tova: prefill window evicts one by one (renormalised rows)");
    step(&p, 0, 10, (float[]){0.1f, 0.1f, 0.1f, 0.1f, 0.6f}, (float[]){0.3f, 0.3f, 0.05f, 0.3f, 0.05f});
    expect_keys(&p, 0, 11, (int32_t[]){0, 3, 9, 10}, 4, "tova: decode evicts the current query's least attended key");
    policy_destroy(&p);
    make(&p, "tova", &f, policy_default_options(4), 1);
    p.init(&p, 0, &pre);
    expect_keys(&p, 0, 10, (int32_t[]){3, 4, 5, 6}, 4,
                "tova: by default the last query's head-mean row reduces the prompt once");
    step(&p, 0, 10, (float[]){0.15f, 0.01f, 0.3f, 0.24f, 0.3f}, (float[]){0.15f, 0.2f, 0.3f, 0.05f, 0.3f});
    expect_keys(&p, 0, 11, (int32_t[]){3, 5, 6, 10}, 4, "tova: by default decode evicts by the mean over all heads");
    policy_destroy(&p);
    fx_free(&f);
}

/* ReST-KV fixture: L = 10, W = S_w = 2 (queries 8 and 9), prefix 0..7, the
 * window {8, 9} always kept. W_O of head 0 is I, of head 1 is 2I (C = D = 2),
 * so ||MHA - v_n W_O|| = ||z - v_n|| for head 0 and 2 ||z - v_n|| for head 1.
 *   v: 0 (1,0) 1 (0,1) 2 (1,0) 3 (3,0) 4 (0,2) 5 (1,1) 6 (0,0) 7 (2,0), 8 (0,1), 9 (1,0)
 *   z: head 0 (1,0) in both rows; head 1 (0,1) in both rows.
 *   distances head 0: [0 1.414 0 2 2.236 1 1 1]; head 1: [2.828 0 2.828 6.325 2 2 2 4.472]
 * Attention rows (A/(1-A): .5 -> 1, .2 -> .25, .1 -> 1/9):
 *   head 0 q8 [.5 .1 0 .2 0 0 0 .1 | .1]      -> I = [0 .157 0 .5 0 0 0 .111]
 *   head 0 q9 [.5 0 0 .2 .1 0 0 0 | .1 .1]    -> I = [0 0 0 .5 .248 0 0 0]
 *   head 1 q8 [0 .5 .2 0 0 .1 0 0 | .2]       -> I = [0 0 .707 0 0 .222 0 0]
 *   head 1 q9 [0 .5 .1 0 .1 0 0 0 | .2 .1]    -> I = [0 0 .314 0 .222 0 0 0]
 * EMA (alpha .3, q9 newest): head 0 [0 .110 0 .5 .0745 0 0 .0778],
 *   head 1 [0 0 .589 0 .0667 .156 0 0]. Positions 0 and 1 have the most
 *   attention (.5) but their values equal the output: they score 0. */
static void restkv_fixture(Fixture *f) {
    fx_init(f, 10, 2, 16);
    f->wo[0 * 4 + 0] = 1, f->wo[1 * 4 + 1] = 1, f->wo[0 * 4 + 2] = 2, f->wo[1 * 4 + 3] = 2;
    const float v[10][2] = {{1, 0}, {0, 1}, {1, 0}, {3, 0}, {0, 2}, {1, 1}, {0, 0}, {2, 0}, {0, 1}, {1, 0}};
    memcpy(f->vc, v, sizeof v);
    for (int r = 0; r < 2; r++) f->last_out[(r * HQ + 0) * D + 0] = 1, f->last_out[(r * HQ + 1) * D + 1] = 1;
    fx_row(f, 0, 0, (float[]){0.5f, 0.1f, 0, 0.2f, 0, 0, 0, 0.1f, 0.1f}, 9);
    fx_row(f, 0, 1, (float[]){0.5f, 0, 0, 0.2f, 0.1f, 0, 0, 0, 0.1f, 0.1f}, 10);
    fx_row(f, 1, 0, (float[]){0, 0.5f, 0.2f, 0, 0, 0.1f, 0, 0, 0.2f}, 9);
    fx_row(f, 1, 1, (float[]){0, 0.5f, 0.1f, 0, 0.1f, 0, 0, 0, 0.2f, 0.1f}, 10);
}

static PolicyOptions restkv_options(int64_t K, int64_t kernel, double beta) {
    PolicyOptions o = policy_default_options(K);
    o.restkv_window = 2, o.restkv_kernel = kernel, o.restkv_beta = beta;
    return o;
}

static void restkv_case(const Fixture *f, PolicyOptions o, const int32_t *want, int64_t nwant, const char *name) {
    PrefillLayer pre = fx_pre(f);
    Policy p;
    make(&p, "restkv", f, o, 1);
    p.init(&p, 0, &pre);
    expect_keys(&p, 0, 10, want, nwant, name);
    policy_destroy(&p);
}

/* Case A's set {2 (.589), 3 (.5), 5 (.156), 8, 9} decoding one token:
 * by default 10 joins and the lowest prefix entry (5) goes, the cache stays
 * at K = 5: {2, 3, 8, 9, 10}; --restkv-grow keeps all six. grow < 0: the default. */
static void restkv_decode(const Fixture *f, int grow, const int32_t *want, int64_t nwant, const char *name) {
    PolicyOptions o = restkv_options(5, 1, 2000);
    if (grow >= 0) o.restkv_grow = grow;
    PrefillLayer pre = fx_pre(f);
    Policy p;
    make(&p, "restkv", f, o, 1);
    p.init(&p, 0, &pre);
    expect_keys(&p, 0, 10, (int32_t[]){2, 3, 5, 8, 9}, 5, "restkv: the set before decode");
    float none[16] = {0};
    step(&p, 0, 10, none, none);
    expect_keys(&p, 0, 11, want, nwant, name);
    policy_destroy(&p);
}

/* Drift (Eq. 10, top-b of each query's raw I, b = K - S_w; ties to the lower
 * position): with b = 3, head 0 front (q8) {1,3,7} mean 3.67, rear (q9)
 * {0,3,4} 2.33; head 1 front {0,2,5} 2.33, rear {0,2,4} 2: both drift left,
 * so gamma = floor(dD/beta) = 0, W_s = k.
 *  A: K = 5, k = 1: max over heads [0 .110 .589 .5 .0745 .156 0 .0778]
 *     -> top 3 {2, 3, 5} + {8, 9}.
 *  B: K = 5, k = 3 (mean of n-1..n+1, edges clamped): head 0
 *     [.037 .037 .203 .191 .191 .025 .026 .052], head 1
 *     [0 .196 .196 .219 .074 .074 .052 0]; max top 3 = {3 .219, 2 .203, 1 .196}.
 * With b = 2: head 0 front {3,1} mean 2, rear {3,4} 3.5 (drift right),
 * head 1 front {2,5} 3.5, rear {2,4} 3 (left).
 *  C: K = 4, k = 1, beta 2000: Eq. 12 as printed gives head 0 gamma =
 *     floor(1.5/2000) + 1 = 1, W_s = 1: its score at n is its EMA at n+1
 *     (clamped at 7): [.110 0 .5 .0745 0 0 .0778 .0778]; head 1 unshifted.
 *     Max [.110 0 .589 .0745 .0667 .156 .0778 .0778] -> {2, 5} + {8, 9}.
 *  D: K = 4, k = 1, beta 1: head 0 W_s = 1 + 2 floor(1.5) = 3, gamma =
 *     floor(1.5) + 1 = 2: mean of EMA n+1..n+3 -> [.203 .192 .192 .025 .026
 *     .052 .078 .078]; head 1 W_s = 1, gamma = floor(.5) = 0. Max
 *     [.203 .192 .589 .025 .067 .156 .078 .078] -> {0, 2} + {8, 9}.
 *  E: K = 2 <= S_w: the 2 most recent {8, 9}. */
static void test_restkv(void) {
    Fixture f;
    restkv_fixture(&f);
    restkv_case(&f, restkv_options(5, 1, 2000), (int32_t[]){2, 3, 5, 8, 9}, 5,
                "restkv: reconstruction indicator + EMA, top-K");
    restkv_case(&f, restkv_options(5, 3, 2000), (int32_t[]){1, 2, 3, 8, 9}, 5, "restkv: spatial smoothing window 3");
    restkv_case(&f, restkv_options(4, 1, 2000), (int32_t[]){2, 5, 8, 9}, 4,
                "restkv: rightward drift shifts the window (Eq. 12)");
    restkv_case(&f, restkv_options(4, 1, 1.0), (int32_t[]){0, 2, 8, 9}, 4,
                "restkv: drift over beta widens the window (Eq. 11)");
    restkv_case(&f, restkv_options(2, 5, 2000), (int32_t[]){8, 9}, 2, "restkv: K <= S_w keeps the most recent");
    restkv_decode(&f, -1, (int32_t[]){2, 3, 8, 9, 10}, 5, "restkv: by default decode evicts to stay at K");
    restkv_decode(&f, 1, (int32_t[]){2, 3, 5, 8, 9, 10}, 6, "restkv --restkv-grow: decode appends without eviction");
    /* G: K = 5, k = 1, beta 1, b = 3: head 0 drifts left by 1.33 (W_s = 3),
     * head 1 by .33 (W_s = 1, gamma 0). Eq. 12 as printed: head 0 gamma =
     * floor(1.33) = +1, its score at n the mean of EMA n..n+2 (clamped):
     *   [.037 .203 .192 .192 .025 .026 .052 .078]; max with head 1
     *   [.037 .203 .589 .192 .067 .156 .052 .078] -> {1, 2, 3} + {8, 9}.
     * Signed: gamma = -1, the mean of EMA n-2..n: [0 .037 .037 .203 .192 .192
     *   .025 .026]; max [0 .037 .589 .203 .192 .192 .025 .026] -> 2, 3, then
     *   4 and 5 tie (the same three EMA values), the lower wins: {2, 3, 4, 8, 9}. */
    PolicyOptions o = restkv_options(5, 1, 1.0);
    restkv_case(&f, o, (int32_t[]){1, 2, 3, 8, 9}, 5,
                "restkv: by default Eq. 12's shift as printed (leftward drift, +1)");
    o.restkv_shift = RESTKV_SHIFT_SIGNED;
    restkv_case(&f, o, (int32_t[]){2, 3, 4, 8, 9}, 5, "restkv --restkv-shift signed: leftward drift shifts left");
    fx_free(&f);
    /* F: head 0's W_O is not symmetric, W = [[1 1] [0 1]] (out_c = sum_d
     * wo[c][d] z_d), and q9 gives position 4 attention .5. W (z - v_4) =
     * W (1,-2) = (-1,-2): distance sqrt 5 (the transpose would give sqrt 2),
     * I_q9[4] = 1 * 2.236; head 0 EMA [0 .078 0 .5 .671 0 0 .078]. K = 3,
     * b = 1: head 0 top-1 moves from 3 (q8) to 4 (q9), head 1 stays at 2
     * (dD = 0): Eq. 12 gives gamma = 1 for both, W_s = 1, so each head's
     * score at n is its EMA at n+1: head 0 [.078 0 .5 .671 0 0 .078 .078],
     * head 1 [0 .589 0 .067 .156 0 0 0]; max top-1 = 3 (.671) -> {3, 8, 9}
     * (with the transposed W_O, .424 < .589 and it would be {1, 8, 9}). */
    restkv_fixture(&f);
    f.wo[0 * 4 + 1] = 1;
    f.last_probs[(0 * 2 + 1) * 10 + 4] = 0.5f;
    restkv_case(&f, restkv_options(3, 1, 2000), (int32_t[]){3, 8, 9}, 3,
                "restkv: output distance uses W_O's orientation");
    fx_free(&f);
}

/* K-VEC, L = 8, W = 2 (queries 6, 7), O = 1, O' = 2, delta = 1, lambda = 1,
 * beta = .25 of K = 4 -> 1 preserved, kernel 1.
 * Layer 0. head 0 rows q6 [.1 .1 .1 .1 .1 .1 .4], q7 [.3 0 0 .25 0 0 .05 .4];
 *   head 1 rows q6 [.1 .1 .05 .05 .1 .5 .1], q7 [.1 .1 .1 .1 .1 .1 .2 .2].
 *   Window-1 scores are the q7 rows; std: head 0 .145, head 1 .043, so head 1
 *   takes O' = 2: P1 = [.1 .1 .075 .075 .1 .3 .15 .1].
 *   P = max(P0, P1) = [.3 .1 .075 .25 .1 .3 .15 .4]; I = max of the q7 rows =
 *   [.3 .1 .1 .25 .1 .1 .2 .4]; coverage 0 -> P' = P + I =
 *   [.6 .2 .175 .5 .2 .4 .35 .8]; top-1 of P (7) preserved; top 4 = {0,3,5,7}.
 *   With delta = 0 (no wide window): P = [.3 .1 .1 .25 .1 .1 .2 .4], P' = 2P
 *   -> {0, 3, 6, 7}.
 * Layer 1 (coverage n_t / 2: 0, 3, 5, 7 were kept once). head 0 rows
 *   q6 [.2 .1 .1 .1 .1 .1 .3], q7 [.3 .05 .05 .15 .1 .05 .05 .25]; head 1 rows
 *   q6 [.1 .1 .1 .1 .2 .2 .2], q7 [.2 .1 .1 .1 .1 .1 .1 .2]. std: head 0 .094,
 *   head 1 .043 -> head 1 wide: P1 = [.15 .1 .1 .1 .15 .15 .15 .1].
 *   P = [.3 .1 .1 .15 .15 .15 .15 .25]; I = [.3 .1 .1 .15 .1 .1 .1 .25];
 *   focus = I (1 - cov) = [.15 .1 .1 .075 .1 .05 .1 .125];
 *   P' = [.45 .2 .2 .225 .25 .2 .25 .375], 0 preserved -> {0, 4, 6, 7}
 *   (without the coverage term 3 (.3) would beat 4 and 6 (.25): {0,3,4,7}). */
static void kvec_fixture(Fixture *f) { fx_init(f, 8, 2, 12); }

static void kvec_layer0(Fixture *f) {
    fx_row(f, 0, 0, (float[]){0.1f, 0.1f, 0.1f, 0.1f, 0.1f, 0.1f, 0.4f}, 7);
    fx_row(f, 0, 1, (float[]){0.3f, 0, 0, 0.25f, 0, 0, 0.05f, 0.4f}, 8);
    fx_row(f, 1, 0, (float[]){0.1f, 0.1f, 0.05f, 0.05f, 0.1f, 0.5f, 0.1f}, 7);
    fx_row(f, 1, 1, (float[]){0.1f, 0.1f, 0.1f, 0.1f, 0.1f, 0.1f, 0.2f, 0.2f}, 8);
}

static void kvec_layer1(Fixture *f) {
    fx_row(f, 0, 0, (float[]){0.2f, 0.1f, 0.1f, 0.1f, 0.1f, 0.1f, 0.3f}, 7);
    fx_row(f, 0, 1, (float[]){0.3f, 0.05f, 0.05f, 0.15f, 0.1f, 0.05f, 0.05f, 0.25f}, 8);
    fx_row(f, 1, 0, (float[]){0.1f, 0.1f, 0.1f, 0.1f, 0.2f, 0.2f, 0.2f}, 7);
    fx_row(f, 1, 1, (float[]){0.2f, 0.1f, 0.1f, 0.1f, 0.1f, 0.1f, 0.1f, 0.2f}, 8);
}

static PolicyOptions kvec_options(void) {
    PolicyOptions o = policy_default_options(4);
    o.pool_kernel = 1, o.kvec_window = 1, o.kvec_wide_window = 2, o.kvec_heads = 1;
    return o;
}

static void kvec_out_of_order(void *arg) {
    (void)arg;
    Fixture f;
    kvec_fixture(&f);
    Policy p;
    make(&p, "kvec", &f, kvec_options(), 2);
    PrefillLayer pre = fx_pre(&f);
    p.init(&p, 1, &pre);
}

static void test_kvec(void) {
    Fixture f;
    kvec_fixture(&f);
    Policy p;
    make(&p, "kvec", &f, kvec_options(), 2);
    kvec_layer0(&f);
    PrefillLayer pre = fx_pre(&f);
    p.init(&p, 0, &pre);
    kvec_layer1(&f);
    p.init(&p, 1, &pre);
    expect_keys(&p, 0, 8, (int32_t[]){0, 3, 5, 7}, 4, "kvec: wide window for the least focused head (layer 0)");
    expect_keys(&p, 1, 8, (int32_t[]){0, 4, 6, 7}, 4, "kvec: cross-layer coverage favours uncovered tokens (layer 1)");
    expect_keys(&p, 0, 9, (int32_t[]){0, 3, 7, 8}, 4, "kvec: decode evicts the lowest adjusted prefill entry");
    policy_destroy(&p);
    PolicyOptions o = kvec_options();
    o.kvec_heads = 0;
    make(&p, "kvec", &f, o, 2);
    kvec_layer0(&f);
    p.init(&p, 0, &pre);
    expect_keys(&p, 0, 8, (int32_t[]){0, 3, 6, 7}, 4, "kvec: delta = 0 keeps window-O scores");
    policy_destroy(&p);
    fx_free(&f);
    tl_expect_death("kvec: layers out of order are refused", kvec_out_of_order, NULL, "in order");
}

/* K-VEC's own window O (default 16, the paper's; SnapKV's window stays 1).
 * L = 20, W = 17 rows (queries 3..19), both heads alike, delta = 0, K = 1
 * (no preserved entry), kernel 1. Row 0 (query 3) puts 1 at 15, rows 1..15
 * put .05 at 10, row 16 (query 19) .5 at 5. The focus term is the same
 * window's max over heads, P' = 2P, so the top of P is kept:
 *   O = 1: 5 (.5); O = 16: 10 (.75/16 = .047 > .5/16); O = 17: 15 (1/17 = .059). */
static void test_kvec_window(void) {
    Fixture f;
    fx_init(&f, 20, 17, 24);
    for (int h = 0; h < HQ; h++) {
        f.last_probs[(h * 17 + 0) * 20 + 15] = 1.0f;
        for (int r = 1; r < 16; r++) f.last_probs[(h * 17 + r) * 20 + 10] = 0.05f;
        f.last_probs[(h * 17 + 16) * 20 + 5] = 0.5f;
    }
    PrefillLayer pre = fx_pre(&f);
    const int64_t windows[4] = {0, 1, 16, 17}; /* 0: the default */
    const int32_t want[4] = {10, 5, 10, 15};
    for (int i = 0; i < 4; i++) {
        PolicyOptions o = policy_default_options(1);
        o.pool_kernel = 1, o.kvec_heads = 0;
        if (windows[i]) o.kvec_window = windows[i];
        Policy p;
        make(&p, "kvec", &f, o, 1);
        p.init(&p, 0, &pre);
        char name[96];
        if (windows[i]) snprintf(name, sizeof name, "kvec: observation window O = %lld", (long long)windows[i]);
        else snprintf(name, sizeof name, "kvec: the default observation window is O = 16, not SnapKV's 1");
        expect_keys(&p, 0, 20, &want[i], 1, name);
        policy_destroy(&p);
    }
    fx_free(&f);
}

/* The definition policy_top_k must meet: every score sorted, higher first,
 * equal scores to the lower position, the first k taken, by position. */
static int64_t top_k_by_sort(int32_t *pos, float *score, const float *s, int64_t n, int64_t k) {
    SelectRanked *r = xmalloc(sizeof(SelectRanked) * (size_t)n);
    int64_t m = select_top_k(r, s, n, k);
    int32_t *flag = xcalloc((size_t)n, sizeof(int32_t));
    for (int64_t j = 0; j < m; j++) flag[r[j].pos] = 1;
    int64_t c = 0;
    for (int64_t j = 0; j < n; j++)
        if (flag[j]) pos[c] = (int32_t)j, score[c] = s[j], c++;
    free(r), free(flag);
    return m;
}

/* policy_top_k against the full sort on scores built to tie: few distinct
 * values (ties decided by position), -0 beside +0, infinities, runs that
 * ascend, descend or repeat one value, every k from 0 past n; and a NaN,
 * which takes the sort itself. Scores compared by their bits. */
static void test_top_k(void) {
    enum { N = 97 };
    float s[N], sc[N], sc_ref[N];
    int32_t pos[N], pos_ref[N];
    uint64_t seed = 12345;
    int bad = 0;
    char why[160] = "";
    for (int shape = 0; shape < 7 && !bad; shape++)
        for (int64_t n = 1; n <= N && !bad; n += (n < 12 ? 1 : 17)) {
            for (int64_t j = 0; j < n; j++) {
                seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
                int v = (int)((seed >> 33) % 5);
                float x = shape == 0   ? (float)v - 2.0f
                          : shape == 1 ? (v == 0   ? -0.0f
                                          : v == 1 ? 0.0f
                                          : v == 2 ? INFINITY
                                          : v == 3 ? -INFINITY
                                                   : 1.0f)
                          : shape == 2 ? (float)j
                          : shape == 3 ? (float)(n - j)
                          : shape == 4 ? 0.5f
                                       : (float)(seed >> 40) / 16777216.0f;
                s[j] = x;
            }
            if (shape == 6) s[n / 2] = NAN;
            for (int64_t k = 0; k <= n + 1 && !bad; k++) {
                int64_t m = policy_top_k(pos, sc, s, n, k), mr = top_k_by_sort(pos_ref, sc_ref, s, n, k);
                if (shape == 6) { /* the NaN case's reference is the sort's own order */
                    SelectRanked *r = xmalloc(sizeof(SelectRanked) * (size_t)n);
                    select_top_k(r, s, n, k);
                    for (int64_t j = 0; j < mr; j++) pos_ref[j] = r[j].pos;
                    qsort(pos_ref, (size_t)mr, sizeof(int32_t), cmp_i32);
                    for (int64_t j = 0; j < mr; j++) sc_ref[j] = s[pos_ref[j]];
                    free(r);
                }
                bad = m != mr || memcmp(pos, pos_ref, sizeof(int32_t) * (size_t)m) != 0 ||
                      memcmp(sc, sc_ref, sizeof(float) * (size_t)m) != 0;
                if (bad)
                    snprintf(why, sizeof why, "shape %d, n %lld, k %lld: kept %lld, the sort %lld, or other keys",
                             shape, (long long)n, (long long)k, (long long)m, (long long)mr);
            }
        }
    tl_result(!bad, "policy_top_k keeps the full sort's keys and scores (ties, signed zeros, infinities, NaN)", "%s",
              why);
}

int main(void) {
    test_top_k();
    test_streaming();
    test_snapkv();
    test_refreshkv();
    test_refreshkv_query();
    test_h2o();
    test_tova();
    test_restkv();
    test_kvec();
    test_kvec_window();
    return tl_finish();
}
