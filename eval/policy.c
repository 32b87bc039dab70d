#include "policy.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../common/options.h"
#include "../common/util.h"
#include "../kernels/refresh_select.h"
#include "policies.h"

static const PolicyInfo registry[] = {
    /* the reference, then the papers' baselines, then RefreshKV and later methods */
    {"full", policy_full_create, "every key (the reference)", ""}, /* options "": none from the command line */
    {"streaming", policy_streaming_create, "StreamingLLM: the first tokens (sinks) + the most recent", "--sinks"},
    {"h2o", policy_h2o_create, "H2O: the most recent + heavy hitters by cumulative attention",
     "--h2o-recent --h2o-score --agg"},
    {"snapkv", policy_snapkv_create, "SnapKV: prefill window scores, pooled top-K; evicts prefill entries",
     "--snapkv-window --snapkv-keep-window --snapkv-kernel --pool --snapkv-grow --agg"},
    {"tova", policy_tova_create, "TOVA: evicts the key the current query attends to least",
     "--tova-window --head-sets --tova-keep-last --agg"},
    {"refreshkv", policy_refreshkv_create, "RefreshKV: partial cache refreshed by query-similarity full steps",
     "--refresh-qc --refresh-fixed --threshold --refresh-query --snapkv-kernel --pool --agg"},
    {"restkv", policy_restkv_create, "ReST-KV: output-reconstruction indicator, EMA + adaptive-window smoothing",
     "--restkv-grow --restkv-shift --agg"},
    {"kvec", policy_kvec_create, "K-VEC: SnapKV scores with cross-head and cross-layer coverage",
     "--kvec-window --snapkv-kernel --pool --snapkv-grow --agg"},
};

const PolicyInfo *policy_registry(int *count) {
    *count = (int)(sizeof registry / sizeof registry[0]);
    return registry;
}

PolicyOptions policy_default_options(int64_t budget) {
    /* why each default is what it is: docs/eval.md, "Policy defaults" */
    PolicyOptions o = {.budget = budget,
                       .agg = GROUP_AGG_MAX,
                       .pool_kernel = 7,
                       .pool = POOL_MAX,
                       .window = 1,
                       .snapkv_grow = 0,
                       .snapkv_keep_window = 1,
                       .tova_keep_last = 0,
                       .tova_window = 1,
                       .head_sets = HEAD_SETS_SHARED,
                       .h2o_recent = 0.5,
                       .h2o_score = H2O_SCORE_SUM,
                       .once = 0,
                       .qc_stride = 10,
                       .threshold = 0.85,
                       .refresh_query = QUERY_POST_ROPE,
                       .fixed_stride = 0,
                       .sinks = 4,
                       .restkv_window = 32,
                       .restkv_alpha = 0.3,
                       .restkv_beta = 2000.0,
                       .restkv_kernel = 5,
                       .restkv_grow = 0,
                       .restkv_shift = RESTKV_SHIFT_PRINTED,
                       .kvec_window = 16,
                       .kvec_wide_window = 32,
                       .kvec_heads = 3,
                       .kvec_lambda = 1.0,
                       .kvec_keep_frac = 0.25};
    return o;
}

/* A whole decimal number, nothing before or after it ("1e3", "8x", "2.9"
 * and "" are not), that fits int64. */
static int parse_count(const char *s, int64_t *v) {
    char *end;
    errno = 0;
    long long x = strtoll(s, &end, 10);
    if (errno || end == s || *end || *s == '+' || *s == ' ' || *s == '\t') return 0;
    *v = (int64_t)x;
    return 1;
}

int64_t policy_budget(const char *spec, int64_t L) {
    int64_t b, n;
    const char *opt = options_spelled("K"); /* --K, or its alias --budget: as the user typed it */
    if (strncmp(spec, "L/", 2) == 0) {
        KV_CHECK(parse_count(spec + 2, &n) && n >= 1, "%s '%s': expected a count K or L/N with N a whole number >= 1",
                 opt, spec);
        b = L / n;
    } else {
        KV_CHECK(parse_count(spec, &b), "%s '%s': expected a count K or L/N with N a whole number >= 1", opt, spec);
    }
    KV_CHECK(b >= 1, "%s '%s' gives %lld keys at context %lld; it must be >= 1", opt, spec, (long long)b, (long long)L);
    KV_CHECK(b <= L, "%s '%s' gives %lld keys, above the context %lld", opt, spec, (long long)b, (long long)L);
    return b;
}

const char *policy_agg_name(int agg) {
    int known = agg == GROUP_AGG_MAX || agg == GROUP_AGG_MEAN || agg == GROUP_AGG_FIRST;
    return known ? group_agg_name((GroupAgg)agg) : "?";
}

const char *const policy_pool_names[2] = {"max", "avg"};
const char *const policy_head_sets_names[2] = {"group", "shared"};
const char *const policy_h2o_score_names[2] = {"sum", "mean"};
const char *const policy_query_rope_names[2] = {"post", "pre"};
const char *const policy_restkv_shift_names[2] = {"printed", "signed"};
const char *const policy_on_off_names[2] = {"off", "on"};

int policy_enum_parse(const char *option, const char *value, const char *const *names, int n) {
    char known[256] = "";
    for (int i = 0; i < n; i++) {
        if (strcmp(value, names[i]) == 0) return i;
        snprintf(known + strlen(known), sizeof known - strlen(known), "%s%s", i ? ", " : "", names[i]);
    }
    die("%s must be one of %s (got '%s')", option, known, value);
}

void policy_create(Policy *p, const char *name, const PolicyShape *shape, const PolicyOptions *opt) {
    int n;
    const PolicyInfo *r = policy_registry(&n);
    for (int i = 0; i < n; i++) {
        if (strcmp(r[i].name, name) != 0) continue;
        memset(p, 0, sizeof *p);
        p->name = r[i].name;
        p->shape = *shape;
        p->opt = *opt;
        KV_CHECK(opt->budget >= 1, "policy %s: budget must be >= 1 (got %lld)", name, (long long)opt->budget);
        snprintf(p->label, sizeof p->label, "%s", name);
        r[i].create(p);
        if (opt->once) policy_once_wrap(p);
        return;
    }
    char known[512] = "";
    for (int i = 0; i < n; i++)
        snprintf(known + strlen(known), sizeof known - strlen(known), "%s%s", i ? ", " : "", r[i].name);
    die("unknown policy '%s'; known policies: %s", name, known);
}

void policy_destroy(Policy *p) {
    if (p->destroy) p->destroy(p);
    free(p->full_steps_per_layer);
    memset(p, 0, sizeof *p);
}

void policy_group_scores(float *out, const float *per_head, int64_t head_stride, int64_t group, int64_t n, int agg) {
    select_group_scores(out, per_head, head_stride, group, n, agg);
}

void policy_pool(float *s, float *scratch, int64_t n, int64_t kernel, int pool) {
    if (kernel / 2 == 0) return;
    memcpy(scratch, s, sizeof(float) * (size_t)n);
    if (pool == POOL_MAX) select_max_pool(s, scratch, n, kernel);
    else select_avg_pool(s, scratch, n, kernel);
}

void policy_head_scope(const Policy *p, int64_t g, int64_t *first, int64_t *count) {
    int64_t group = p->shape.Hq / p->shape.Hkv;
    if (p->opt.head_sets == HEAD_SETS_SHARED) *first = 0, *count = p->shape.Hq;
    else *first = g * group, *count = group;
}

static int by_pos_asc(const void *a, const void *b) {
    const SelectRanked *x = a, *y = b;
    return (x->pos > y->pos) - (x->pos < y->pos);
}

/* a ranks before b: the higher score, equal scores the lower position
 * (select_top_k's order; a strict total order while no score is NaN) */
static int ranks_before(SelectRanked a, SelectRanked b) {
    return a.score > b.score || (a.score == b.score && a.pos < b.pos);
}

/* r[0..n) rearranged so that r[k] is the entry of rank k (0 the first) in
 * ranks_before's order: a quickselect with a median-of-three pivot. */
static SelectRanked nth_ranked(SelectRanked *r, int64_t n, int64_t k) {
    int64_t lo = 0, hi = n - 1;
    while (hi > lo) {
        int64_t mid = lo + (hi - lo) / 2;
        SelectRanked t;
        /* order r[lo], r[mid], r[hi]; the middle one is the pivot */
        if (ranks_before(r[mid], r[lo])) t = r[mid], r[mid] = r[lo], r[lo] = t;
        if (ranks_before(r[hi], r[lo])) t = r[hi], r[hi] = r[lo], r[lo] = t;
        if (ranks_before(r[hi], r[mid])) t = r[hi], r[hi] = r[mid], r[mid] = t;
        SelectRanked pv = r[mid];
        int64_t i = lo, j = hi;
        while (i <= j) { /* Hoare: entries are distinct under the order */
            while (ranks_before(r[i], pv)) i++;
            while (ranks_before(pv, r[j])) j--;
            if (i <= j) t = r[i], r[i] = r[j], r[j] = t, i++, j--;
        }
        if (k <= j) hi = j;
        else if (k >= i) lo = i;
        else break; /* r[k] is the pivot itself */
    }
    return r[k];
}

/* The top k by sorting everything: the order's definition, kept for scores
 * with a NaN, where no order is total and the sort's own sequence of
 * comparisons decides (so such a run keeps its keys). */
static int64_t top_k_sorted(int32_t *pos_out, float *score_out, const float *scores, int64_t n, int64_t k) {
    SelectRanked *r = xmalloc(sizeof(SelectRanked) * (size_t)(n > 0 ? n : 1));
    int64_t m = select_top_k(r, scores, n, k);
    qsort(r, (size_t)m, sizeof(SelectRanked), by_pos_asc);
    for (int64_t j = 0; j < m; j++) pos_out[j] = r[j].pos, score_out[j] = r[j].score;
    free(r);
    return m;
}

/* The same set as sorting all n scores, found in linear expected time: the
 * entry of rank m-1 by quickselect, then one pass in position order keeping
 * every entry that ranks no lower (exactly m of them, ascending). Policies
 * select over the whole cache at init and at every refresh, and a full sort
 * of thousands of scores per (layer, KV head) was a tenth of an eval's time. */
int64_t policy_top_k(int32_t *pos_out, float *score_out, const float *scores, int64_t n, int64_t k) {
    int64_t m = k < n ? k : n;
    for (int64_t j = 0; j < n; j++)
        if (scores[j] != scores[j]) return top_k_sorted(pos_out, score_out, scores, n, k);
    if (m <= 0) return m;
    SelectRanked last = {0.0f, (int32_t)(n - 1)};
    if (m < n) {
        SelectRanked *r = xmalloc(sizeof(SelectRanked) * (size_t)n);
        for (int64_t j = 0; j < n; j++) r[j] = (SelectRanked){scores[j], (int32_t)j};
        last = nth_ranked(r, n, m - 1);
        free(r);
    }
    int64_t c = 0;
    for (int64_t j = 0; j < n; j++) {
        SelectRanked e = {scores[j], (int32_t)j};
        if (m == n || !ranks_before(last, e)) pos_out[c] = (int32_t)j, score_out[c] = scores[j], c++;
    }
    KV_CHECK(c == m, "policy_top_k: kept %lld of %lld scores, expected %lld", (long long)c, (long long)n, (long long)m);
    return m;
}

void kept_init(KeptSet *s, int64_t cap) {
    s->pos = xmalloc(sizeof(int32_t) * (size_t)cap);
    s->score = xmalloc(sizeof(float) * (size_t)cap);
    s->n = 0, s->cap = cap;
}

void kept_free(KeptSet *s) {
    free(s->pos);
    free(s->score);
    memset(s, 0, sizeof *s);
}

void kept_push(KeptSet *s, int32_t pos, float score) {
    KV_CHECK(s->n < s->cap, "kept set overflow (%lld entries)", (long long)s->cap);
    s->pos[s->n] = pos, s->score[s->n] = score, s->n++;
}

void kept_evict_lowest(KeptSet *s) {
    if (s->n == 0) return;
    int64_t w = 0;
    for (int64_t i = 1; i < s->n; i++)
        if (s->score[i] < s->score[w] || (s->score[i] == s->score[w] && s->pos[i] < s->pos[w])) w = i;
    s->n--;
    s->pos[w] = s->pos[s->n], s->score[w] = s->score[s->n];
}

static int by_score_then_pos_asc(const void *a, const void *b) {
    const SelectRanked *x = a, *y = b;
    if (x->score != y->score) return x->score < y->score ? -1 : 1;
    return (x->pos > y->pos) - (x->pos < y->pos);
}

void kept_shrink_to(KeptSet *s, int64_t k) {
    if (k < 0) k = 0;
    if (s->n <= k) return;
    SelectRanked *r = xmalloc(sizeof(SelectRanked) * (size_t)s->n);
    for (int64_t i = 0; i < s->n; i++) r[i] = (SelectRanked){s->score[i], s->pos[i]};
    qsort(r, (size_t)s->n, sizeof(SelectRanked), by_score_then_pos_asc);
    int64_t drop = s->n - k;
    for (int64_t i = 0; i < k; i++) s->pos[i] = r[drop + i].pos, s->score[i] = r[drop + i].score;
    s->n = k;
    free(r);
}
