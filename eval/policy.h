#ifndef KVCPT_POLICY_H
#define KVCPT_POLICY_H
/* One interface for every KV-cache policy (docs/eval.md): a policy is initialised
 * from the prefill, chooses the cached keys each decode step attends to (per
 * layer and KV head), and updates itself from that step's attention. A new
 * policy is one new file plus one line in eval/policy.c's registry.
 *
 * Positions: the prefill fills 0..L-1; decode step i runs position L+i.
 * choose() returns past positions (< pos) in any order; the engine sorts them
 * and always adds the current position itself, last. */
#include <stdint.h>

typedef struct {
    int64_t n_layers, Hq, Hkv, D, C;
    int64_t L;       /* prefill length */
    int64_t W;       /* rows kept in last_probs */
    int64_t cap;     /* most positions a document reaches (L + S) */
    /* (cap, D/2) the engine's RoPE tables (kernels/rope.h), set before init:
     * refreshkv rotates its queries with them (--refresh-query post) */
    const float *rope_cos, *rope_sin;
} PolicyShape;

/* What the prefill leaves for one layer (valid during init only, except k/v caches). */
typedef struct {
    const float *colsum;     /* (Hq, L) attention received from all prefill queries */
    const float *last_probs; /* (Hq, W, L) rows of queries L-W..L-1 */
    const float *last_out;   /* (W, Hq, D) attention outputs (before o_proj) of those queries */
    const float *wo;         /* (C, Hq*D) o_proj weight */
    const float *kc, *vc;    /* prefill rows of the caches (L, Hkv, D): may be NULL unless reads_prefill_cache */
    const float *q_last;     /* (Hq, D) pre-RoPE query of position L-1 */
} PrefillLayer;

/* How a score row is smoothed before top-K (SnapKV, RefreshKV, K-VEC):
 * max over the kernel, window clipped at the edges (kvcpt, the SnapKV
 * paper's code), or the mean over the kernel with zeros past the edges
 * (torch avg_pool1d with padding kernel/2: what kvpress does). */
typedef enum { POOL_MAX = 0, POOL_AVG = 1 } PoolKind;
/* Which query heads score a KV head's keys: the heads of its own GQA group
 * (one set per KV head, aggregated by opt.agg), or every query head, one set
 * per layer shared by all KV heads and ranked by the mean over the heads
 * (TOVA's reference code and kvpress's TOVAPress). */
typedef enum { HEAD_SETS_GROUP = 0, HEAD_SETS_SHARED = 1 } HeadSets;
/* H2O's heavy-hitter score: attention received summed over the queries so
 * far (the paper), or that sum divided by how many queries could see the key
 * (kvpress's ObservedAttentionPress). */
typedef enum { H2O_SCORE_SUM = 0, H2O_SCORE_MEAN = 1 } H2OScore;
/* The query RefreshKV's similarity check compares: as it enters attention,
 * rotated to its position (the paper's argument: a similar query gives a
 * similar attention over the same cached keys), or the raw projection. */
typedef enum { QUERY_POST_ROPE = 0, QUERY_PRE_ROPE = 1 } QueryRope;
/* ReST-KV's window shift gamma (Eq. 12): as printed (gamma >= 0 whichever
 * way the importance drifts), or signed (the window moves the way it drifts). */
typedef enum { RESTKV_SHIFT_PRINTED = 0, RESTKV_SHIFT_SIGNED = 1 } RestShift;

/* Per-policy options; each policy reads the fields it needs. */
typedef struct {
    int64_t budget;          /* K: cached positions per KV head (the one place a policy reads it) */
    int agg;                 /* GroupAgg for GQA scores (default max) */
    int64_t pool_kernel;     /* SnapKV/RefreshKV pooling (7) */
    int pool;                /* PoolKind (max) */
    int64_t window;          /* SnapKV observation window (1) */
    int snapkv_grow;
    int snapkv_keep_window;  /* SnapKV: the observation window's own positions are always kept (on) */
    int tova_keep_last;      /* TOVA: the newest position is never evicted (off; kvpress: on) */
    int64_t tova_window;     /* TOVA: prefill queries whose eviction is replayed (1, at most W) */
    int head_sets;           /* HeadSets (shared); read by TOVA */
    double h2o_recent;       /* H2O: recent share of the budget (0.5) */
    int h2o_score;           /* H2OScore (sum) */
    int once;                /* choose at the first decode step only, then keep every new token (off) */
    int64_t qc_stride;       /* RefreshKV: similarity check every N steps (0: off) */
    double threshold;        /* RefreshKV cosine threshold (0.85) */
    int refresh_query;       /* QueryRope (post) */
    int64_t fixed_stride;    /* RefreshKV: full step every N steps (0: dynamic) */
    int64_t sinks;           /* StreamingLLM sink tokens (4) */
    int64_t restkv_window;   /* ReST-KV observation window S_w, always kept (32) */
    double restkv_alpha;     /* ReST-KV EMA factor (0.3) */
    double restkv_beta;      /* ReST-KV adaptive-window scale (2000) */
    int64_t restkv_kernel;   /* ReST-KV base smoothing window (5, paper App. B) */
    int restkv_grow;         /* ReST-KV: decode keeps every new token, the cache grows past K (off) */
    int restkv_shift;        /* RestShift (printed) */
    int64_t kvec_window;     /* K-VEC O: window of every head (16, the paper's O after Eq. 8) */
    int64_t kvec_wide_window; /* K-VEC O': window of the least focused heads (32) */
    int64_t kvec_heads;      /* K-VEC delta: heads that get the wide window (3) */
    double kvec_lambda;      /* K-VEC cross-layer focus weight (1.0) */
    double kvec_keep_frac;   /* K-VEC beta: budget fraction kept by the original score (0.25) */
} PolicyOptions;

/* choose()'s n[g] for "every cached position" (see Policy.choose). */
#define POLICY_EVERY_KEY (-1)

typedef struct Policy Policy;
struct Policy {
    const char *name;
    char label[96];          /* name with its settings, for tables */
    PolicyShape shape;
    PolicyOptions opt;
    void *state;
    void (*init)(Policy *p, int64_t layer, const PrefillLayer *pre);
    /* q: (Hq, D) pre-RoPE query of the current token at this layer (content,
     * not position: what RefreshKV compares). keys[g] has room for
     * pos entries; n[g] receives the count, or POLICY_EVERY_KEY (keys[g]
     * untouched) for every position < pos: a full step, which the engine
     * then runs without building, checking or sending a list. */
    void (*choose)(Policy *p, int64_t layer, int64_t pos, const float *q, int32_t **keys, int64_t *n);
    /* probs for head h at probs + h*max_n, aligned with keys[h/group] (current position last).
     * NULL when the policy never looks at attention: the engine then computes no probabilities
     * (on the GPU, nothing crosses the bus). */
    void (*update)(Policy *p, int64_t layer, int64_t pos, int32_t *const *keys, const int64_t *n, const float *probs,
                   int64_t max_n);
    void (*destroy)(Policy *p);
    int reads_prefill_cache; /* init reads pre->kc / pre->vc (the GPU engine then copies them to the host) */
    /* RefreshKV: full-attention decode steps per layer (NULL for other policies) */
    int64_t *full_steps_per_layer;
    int64_t decode_steps;
};

typedef struct {
    const char *name;
    void (*create)(Policy *p);
    const char *summary;
    const char *options; /* the eval options that tune it, as named in --help */
} PolicyInfo;

/* Creates policy `name` (dies listing the known ones otherwise). */
void policy_create(Policy *p, const char *name, const PolicyShape *shape, const PolicyOptions *opt);
void policy_destroy(Policy *p);
const PolicyInfo *policy_registry(int *count);
PolicyOptions policy_default_options(int64_t budget);
/* --K's (--budget's) "K" or "L/N" at context L: dies unless 1 <= K <= L,
 * naming the option as the user typed it. */
int64_t policy_budget(const char *spec, int64_t L);
/* "max", "mean" or "first": the GroupAgg's name, for labels. */
const char *policy_agg_name(int agg);
/* The option value's index in names[0..n) (an enum's value); dies naming
 * the option and the accepted values otherwise. */
int policy_enum_parse(const char *option, const char *value, const char *const *names, int n);
extern const char *const policy_pool_names[2], *const policy_head_sets_names[2], *const policy_h2o_score_names[2];
extern const char *const policy_query_rope_names[2], *const policy_restkv_shift_names[2], *const policy_on_off_names[2];

/* Shared helpers for policies: in-place forms of the selection maths the
 * training mask uses too (kernels/refresh_select.h), same operations in the
 * same order. */
/* out[j] = aggregate over the group's heads of per_head[h*head_stride + j] (GroupAgg). */
void policy_group_scores(float *out, const float *per_head, int64_t head_stride, int64_t group, int64_t n, int agg);
/* In-place pooling of kind `pool` (PoolKind) with an odd kernel (scratch: n
 * floats): the max over the window clipped at the edges, or the mean over the
 * kernel with zeros past the edges (divided by the kernel everywhere). */
void policy_pool(float *s, float *scratch, int64_t n, int64_t kernel, int pool);
/* The query heads that score KV head g's keys (HeadSets): [*first, *first + *count). */
void policy_head_scope(const Policy *p, int64_t g, int64_t *first, int64_t *count);
/* The k highest of scores[0..n-1] (ties to the lower position), ascending by
 * position into pos_out, their scores into score_out; returns min(k, n). */
int64_t policy_top_k(int32_t *pos_out, float *score_out, const float *scores, int64_t n, int64_t k);

/* A scored set of cached positions per (layer, KV head): what SnapKV,
 * RefreshKV and the score-based evictors keep. */
typedef struct {
    int32_t *pos;
    float *score;
    int64_t n, cap;
} KeptSet;
void kept_init(KeptSet *s, int64_t cap);
void kept_free(KeptSet *s);
void kept_push(KeptSet *s, int32_t pos, float score);
/* Removes the entry with the lowest score (ties: the lower position). */
void kept_evict_lowest(KeptSet *s);
/* Evicts the lowest-scored entries (ties: the lower position) until k remain;
 * the same result as calling kept_evict_lowest n - k times. */
void kept_shrink_to(KeptSet *s, int64_t k);
#endif
