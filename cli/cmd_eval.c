/* `kvcpt eval`: inference-mode perplexity of the last S tokens of every test
 * document, for every KV-cache policy, at one or more context lengths, for
 * one model or two (before -> after CPT). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../checkpoints/model_source.h"
#include "../common/backend.h"
#include "../common/options.h"
#include "../common/util.h"
#include "../data/data_split.h"
#include "../data/utf8.h"
#include "../kernels/attention.h"
#include "../kernels/blas_core.h"
#include "commands.h"
#include "../eval/decode_device.h"
#include "../eval/doc_pick.h"
#include "../eval/engine.h"
#include "../eval/option_limits.h"
#include "../eval/output_paths.h"
#include "../eval/provenance.h"
#include "../eval/report.h"
#include "../eval/rope_context.h"

/* Documents decoded together by default: the fastest measured on the 2-core
 * CPU for the demo model and the small preset (docs/eval.md, "Batching"). */
#define EVAL_DEFAULT_BATCH 8

typedef struct {
    StringList models;
    const char *data, *split, *contexts, *budget, *policies, *out, *device, *agg, *refresh_qc, *refresh_fixed;
    const char *pool, *head_sets, *h2o_score, *dump, *snapkv_keep_window, *refresh_query, *restkv_shift, *pick;
    const char *rope_scaling;
    int64_t last, max_docs, boot, window, sinks, batch, kernel, tova_window, kvec_window;
    double threshold, h2o_recent, max_copy;
    int snapkv_grow, tova_keep_last, once, restkv_grow, quiet, allow_beyond;
} EvalArgs;

typedef struct {
    const char *name;
    PolicyOptions opt;
} Variant;

static int registered(const char *name) {
    int count;
    const PolicyInfo *reg = policy_registry(&count);
    for (int i = 0; i < count; i++)
        if (strcmp(reg[i].name, name) == 0) return 1;
    return 0;
}

static int wanted(const char *list, const char *name) {
    if (strcmp(list, "all") == 0) return 1;
    size_t n = strlen(name);
    for (const char *p = list; (p = strstr(p, name)); p += n)
        if ((p == list || p[-1] == ',') && (p[n] == ',' || p[n] == '\0')) return 1;
    return 0;
}

/* Expands --policies into concrete variants, in registry order; refreshkv
 * once per --refresh-qc and --refresh-fixed value. */
static int expand_policies(const EvalArgs *a, Variant *v, int cap) {
    char *copy = xstrdup(a->policies), *save = NULL;
    for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save))
        if (strcmp(t, "all") != 0 && !registered(t)) {
            Policy dummy; /* policy_create dies listing the known policies */
            PolicyShape sh = {0};
            PolicyOptions o = policy_default_options(1);
            policy_create(&dummy, t, &sh, &o);
        }
    free(copy);
    int64_t qc[8], fixed[8];
    int nqc = options_int_list(a->refresh_qc, qc, 8, "refresh-qc"), nfix = options_int_list(a->refresh_fixed, fixed, 8, "refresh-fixed");
    eval_check_strides("eval", "--refresh-qc", qc, nqc);
    eval_check_strides("eval", "--refresh-fixed", fixed, nfix);
    int count, n = 0;
    const PolicyInfo *reg = policy_registry(&count);
    for (int i = 0; i < count; i++) {
        if (!wanted(a->policies, reg[i].name)) continue;
        PolicyOptions o = policy_default_options(0);
        o.agg = group_agg_parse(a->agg, "--agg");
        o.window = a->window, o.snapkv_grow = a->snapkv_grow, o.threshold = a->threshold, o.sinks = a->sinks;
        /* the options that reproduce kvpress's choices (docs/eval.md, "kvpress as the peer") */
        o.pool_kernel = a->kernel, o.tova_keep_last = a->tova_keep_last, o.tova_window = a->tova_window;
        o.h2o_recent = a->h2o_recent, o.once = a->once;
        o.kvec_window = a->kvec_window, o.restkv_grow = a->restkv_grow;
        o.snapkv_keep_window = policy_enum_parse("--snapkv-keep-window", a->snapkv_keep_window, policy_on_off_names, 2);
        o.refresh_query = policy_enum_parse("--refresh-query", a->refresh_query, policy_query_rope_names, 2);
        o.restkv_shift = policy_enum_parse("--restkv-shift", a->restkv_shift, policy_restkv_shift_names, 2);
        o.pool = policy_enum_parse("--pool", a->pool, policy_pool_names, 2);
        o.head_sets = policy_enum_parse("--head-sets", a->head_sets, policy_head_sets_names, 2);
        o.h2o_score = policy_enum_parse("--h2o-score", a->h2o_score, policy_h2o_score_names, 2);
        int variants = strcmp(reg[i].name, "refreshkv") == 0 ? nqc + nfix : 1;
        for (int j = 0; j < variants; j++) {
            KV_CHECK(n < cap, "too many policy variants (at most %d)", cap);
            if (variants > 1 || strcmp(reg[i].name, "refreshkv") == 0) {
                o.qc_stride = j < nqc ? qc[j] : 0;
                o.fixed_stride = j < nqc ? 0 : fixed[j - nqc];
            }
            v[n++] = (Variant){reg[i].name, o};
        }
    }
    KV_CHECK(n > 0, "--policies '%s' selects nothing", a->policies);
    return n;
}

/* The documents of one (context, model): the pick and each one's input. */
typedef struct {
    DocPick pick;
    const char **source; /* (pick.n) into the run's DocSources; NULL when the manifest records no inputs' counts */
} ContextDocs;

typedef struct {
    const EvalArgs *a;
    const DataSplit *split;
    DocSources sources;          /* the split's inputs (eval/doc_pick.h); n = 0 when not recorded */
    int pick;                    /* DOC_PICK_FIRST or DOC_PICK_INTERLEAVE */
    ContextDocs *docs;           /* (n_ctx, n_models) */
    Variant *var;
    int n_var, n_models, n_ctx;
    int64_t ctx[8];
    EvalCell *cells;
    int64_t skipped;
    unsigned char *done;         /* (n_ctx, n_models) 1 once that context of that model is finished */
    const DecodeDevice *gpu;     /* the GPU's decode engine; NULL: the CPU engine */
    void *gpu_model;             /* the model's weights on the GPU (gpu->model_upload) */
    FILE *dump;                  /* --dump: one JSON line per (model, context, variant, document); NULL: off */
    char dump_tmp[4200];         /* where the dump is written until the run succeeds (--dump + ".tmp") */
    json_t *run;                 /* eval.json's "run": how it is made (eval/provenance.h) */
    double t0;                   /* when the command started, for run.wall_seconds */
} EvalRun;

static EvalCell *cell(const EvalRun *r, int v, int c, int m) { return &r->cells[(v * r->n_ctx + c) * r->n_models + m]; }

static void stride_json(char *out, size_t n, const Policy *p, int64_t layers, int64_t steps) {
    size_t k = (size_t)snprintf(out, n, "[");
    for (int64_t l = 0; l < layers && k < n; l++) {
        int64_t f = p->full_steps_per_layer[l];
        k += (size_t)(f > 0 ? snprintf(out + k, n - k, "%s%.2f", l ? "," : "", (double)steps / (double)f)
                            : snprintf(out + k, n - k, "%snull", l ? "," : ""));
    }
    if (k < n) snprintf(out + k, n - k, "]");
}

/* What one context of one model needs while its documents go through. */
typedef struct {
    EvalRun *r;
    int ci;
    PolicyShape sh;
    DecodeEngine *eng;  /* one per document of a batch */
    int32_t **tok;      /* (batch, L + S) */
    uint8_t **cls;      /* (batch, L + S): AnswerClass of each token as a target; NULL without answers */
    int64_t *doc;       /* (batch) the document index of each slot */
    int64_t *full_tot;  /* (variants, layers) refreshkv full steps */
    /* progress on stderr, in tokens: a prefill counts L, a decode step one per row */
    Progress pr;
    int64_t tokens_done, docs_done, docs_total, step_rows;
    char what[192]; /* a label (95) and three counts fit */
} ContextRun;

/* "doc i/N, <what>" after the tokens so far. */
static void show_progress(ContextRun *x) {
    char extra[256];
    snprintf(extra, sizeof extra, " doc %lld/%lld, %s", (long long)(x->docs_done + 1 < x->docs_total
             ? x->docs_done + 1 : x->docs_total), (long long)x->docs_total, x->what);
    progress_update(&x->pr, x->tokens_done, extra);
}

/* engine_decode_batch's step hook: one token per row of the call. */
static void on_decode_step(void *ctx, int64_t step, int64_t steps) {
    ContextRun *x = ctx;
    x->tokens_done += x->step_rows;
    char *at = strstr(x->what, " step ");
    if (at) snprintf(at, sizeof x->what - (size_t)(at - x->what), " step %lld/%lld", (long long)step, (long long)steps);
    show_progress(x);
}

/* Reads document d into tok (checking its ids against the vocabulary). */
static void read_doc(const ContextRun *x, int64_t d, int32_t *tok, uint32_t *buf, int64_t vocab) {
    int64_t n = x->sh.L + x->r->a->last;
    data_split_read(x->r->split, d, 0, n, buf);
    for (int64_t i = 0; i < n; i++) {
        KV_CHECK(buf[i] < (uint32_t)vocab, "document %lld token %lld = %u is outside the model's vocabulary of %lld",
                 (long long)d, (long long)i, buf[i], (long long)vocab);
        tok[i] = (int32_t)buf[i];
    }
}

/* One --dump line: a document's kept keys at the first decode step (e's
 * record), per layer and KV head, and its S NLLs. */
static void dump_doc(const ContextRun *x, int mi, const Policy *p, int64_t doc, const DecodeEngine *e,
                     const double *nll) {
    FILE *f = x->r->dump;
    int64_t S = x->r->a->last, Hkv = x->sh.Hkv;
    fprintf(f, "{\"model_index\":%d,\"context\":%lld,\"budget\":%lld,\"policy\":\"%s\",\"label\":\"%s\",\"doc\":%lld,"
            "\"nll\":[", mi, (long long)x->sh.L, (long long)x->sh.budget, p->name, p->label, (long long)doc);
    for (int64_t i = 0; i < S; i++) fprintf(f, "%s%.17g", i ? "," : "", nll[i]);
    fprintf(f, "],\"keys\":[");
    for (int64_t l = 0; l < x->sh.n_layers; l++) {
        fprintf(f, "%s[", l ? "," : "");
        for (int64_t g = 0; g < Hkv; g++) {
            const int32_t *k = e->first_keys + (l * Hkv + g) * e->cap;
            fprintf(f, "%s[", g ? "," : "");
            for (int64_t i = 0; i < e->first_n[l * Hkv + g]; i++) fprintf(f, "%s%d", i ? "," : "", k[i]);
            fprintf(f, "]");
        }
        fprintf(f, "]");
    }
    KV_CHECK(fprintf(f, "]}\n") > 0, "eval --dump: cannot write %s", x->r->dump_tmp);
}

/* One document's S NLLs (and top-1 hits) of variant v into its cell. */
static void account_doc(ContextRun *x, int mi, int v, Policy *p, int64_t b, const double *nll, const uint8_t *top1) {
    EvalCell *c = cell(x->r, v, x->ci, mi);
    int64_t S = x->r->a->last, nl = x->sh.n_layers;
    double sum = 0;
    for (int64_t i = 0; i < S; i++) {
        sum += nll[i];
        c->step_nll[i] += nll[i], c->step_top1[i] += top1[i];
        if (x->cls) {
            int k = x->cls[b][x->sh.L + i];
            c->class_nll[k] += nll[i], c->class_n[k]++, c->class_top1[k] += top1[i];
        }
    }
    c->doc_nll[c->n_docs++] = sum;
    if (p->full_steps_per_layer)
        for (int64_t l = 0; l < nl; l++) x->full_tot[v * nl + l] += p->full_steps_per_layer[l];
    if (!c->policy) c->policy = xstrdup(p->label);
}

/* The nb prefilled documents through every policy variant; results are
 * appended in document order, as the unbatched loop would. On the CPU all
 * variants of all nb documents decode as one batch, one row per (variant,
 * document) on a fork of the document's engine (engine_fork): they share
 * the prefill, and each decode step reads every weight once for all rows
 * instead of once per variant. Each row's results are those of decoding it
 * alone (engine_decode_batch). On the GPU each engine holds its own device
 * caches, so the variants run one after another over the nb documents. */
static void decode_batch(ContextRun *x, int mi, int64_t nb) {
    EvalRun *r = x->r;
    int64_t S = r->a->last;
    int nv = r->n_var, together = r->gpu == NULL, per_call = together ? nv : 1;
    int64_t rows_max = nb * per_call;
    DecodeEngine **e = xmalloc(sizeof(DecodeEngine *) * (size_t)rows_max);
    DecodeEngine *forks = together ? xcalloc((size_t)rows_max, sizeof(DecodeEngine)) : NULL;
    Policy *pol = xmalloc(sizeof(Policy) * (size_t)rows_max), **pp = xmalloc(sizeof(Policy *) * (size_t)rows_max);
    const int32_t **tok = xmalloc(sizeof(int32_t *) * (size_t)rows_max);
    double *nll = xmalloc(sizeof(double) * (size_t)(rows_max * S));
    uint8_t *top1 = xmalloc((size_t)(rows_max * S));
    for (int v0 = 0; v0 < nv; v0 += per_call) {
        int64_t rows = 0;
        for (int v = v0; v < v0 + per_call; v++)
            for (int64_t b = 0; b < nb; b++, rows++) {
                if (together) engine_fork(&forks[rows], &x->eng[b]), e[rows] = &forks[rows];
                else e[rows] = &x->eng[b];
                e[rows]->kv_reads = 0, e[rows]->decode_s = 0;
                PolicyOptions o = r->var[v].opt;
                o.budget = x->sh.budget;
                policy_create(&pol[rows], r->var[v].name, &x->sh, &o);
                pp[rows] = &pol[rows], tok[rows] = x->tok[b];
            }
        if (together)
            snprintf(x->what, sizeof x->what, "decode: %d variants x %lld document(s) step 0/%lld", nv, (long long)nb,
                     (long long)(S - 1));
        else
            snprintf(x->what, sizeof x->what, "decode: %s x %lld document(s) step 0/%lld", pol[0].label, (long long)nb,
                     (long long)(S - 1));
        x->step_rows = rows;
        show_progress(x);
        e[0]->on_step = on_decode_step, e[0]->step_ctx = x;
        engine_decode_batch_top1(e, pp, tok, rows, S, nll, top1);
        e[0]->on_step = NULL, e[0]->step_ctx = NULL;
        double steps = (double)(S > 1 ? S - 1 : 1);
        for (int v = v0; v < v0 + per_call; v++) {
            EvalCell *c = cell(r, v, x->ci, mi);
            for (int64_t b = 0; b < nb; b++) {
                int64_t row = (v - v0) * nb + b;
                /* the row's share of the call's wall time: its own policy's cost (engine.h, docs/eval.md) */
                c->ms_per_token += 1e3 * e[row]->decode_s / steps;
                c->kv_bytes_per_token += engine_kv_bytes(e[row]) / steps;
                account_doc(x, mi, v, &pol[row], b, nll + row * S, top1 + row * S);
                if (r->dump) dump_doc(x, mi, &pol[row], x->doc[b], e[row], nll + row * S);
                policy_destroy(&pol[row]);
                if (together) engine_fork_free(&forks[row]);
            }
        }
    }
    free(e), free(forks), free(pol), free(pp), free(tok), free(nll), free(top1);
}

/* On the GPU each document of a batch holds its own caches: fewer documents
 * at once when --batch would not fit the free device memory. */
static int64_t fit_batch(const EvalRun *r, const Llama *m, int64_t batch, int64_t L, int64_t S) {
    return r->gpu ? r->gpu->fit_batch(&m->cfg, L, S, EVAL_PREFILL_ROWS, batch) : batch;
}

static void create_engine(const EvalRun *r, DecodeEngine *e, Llama *m, int64_t cap) {
    if (r->gpu) r->gpu->engine_create(e, m, r->gpu_model, cap, EVAL_PREFILL_ROWS);
    else engine_create(e, m, cap, EVAL_PREFILL_ROWS);
}

/* Every eligible document at context L through every policy variant,
 * --batch documents at a time. */
static void eval_context(EvalRun *r, Llama *m, int mi, int ci, const char *model_name) {
    const EvalArgs *a = r->a;
    int64_t L = r->ctx[ci], S = a->last, nd = data_split_num_docs(r->split), used = 0, nl = m->cfg.num_hidden_layers;
    int64_t want = a->max_docs > 0 && a->max_docs < nd ? a->max_docs : nd;
    int64_t batch = a->batch < want ? a->batch : (want > 0 ? want : 1);
    batch = fit_batch(r, m, batch, L, S);
    ContextRun x = {.r = r, .ci = ci};
    x.sh = (PolicyShape){nl, m->cfg.num_attention_heads, m->cfg.num_key_value_heads, m->cfg.head_dim,
                         m->cfg.hidden_size, L, EVAL_PREFILL_ROWS, policy_budget(a->budget, L), L + S, NULL, NULL};
    x.eng = xcalloc((size_t)batch, sizeof(DecodeEngine));
    x.tok = xcalloc((size_t)batch, sizeof(int32_t *));
    x.doc = xcalloc((size_t)batch, sizeof(int64_t));
    for (int64_t b = 0; b < batch; b++) {
        create_engine(r, &x.eng[b], m, L + S);
        if (r->dump) engine_record_first_step(&x.eng[b]);
        x.tok[b] = xmalloc(sizeof(int32_t) * (size_t)(L + S));
    }
    const AnswerRule *rule = data_split_answers(r->split);
    if (rule->present) {
        x.cls = xcalloc((size_t)batch, sizeof(uint8_t *));
        for (int64_t b = 0; b < batch; b++) x.cls[b] = xmalloc((size_t)(L + S));
    }
    uint32_t *buf = xmalloc(sizeof(uint32_t) * (size_t)(L + S));
    x.full_tot = xcalloc((size_t)(r->n_var * nl), sizeof(int64_t));
    for (int v = 0; v < r->n_var; v++) {
        EvalCell *c = cell(r, v, ci, mi);
        *c = (EvalCell){.model = model_name, .variant = v, .context = L, .budget = x.sh.budget, .last = S};
        rope_context_describe(&c->rope, &m->cfg, L + S, a->rope_scaling != NULL);
        c->doc_nll = xmalloc(sizeof(double) * (size_t)(nd > 0 ? nd : 1));
        c->step_nll = xcalloc((size_t)S, sizeof(double));
        c->step_top1 = xcalloc((size_t)S, sizeof(int64_t));
        c->has_classes = rule->present;
    }
    /* the documents, in the order they are scored (eval/doc_pick.h) */
    ContextDocs *cd = &r->docs[ci * r->n_models + mi];
    doc_pick(&cd->pick, r->split, &r->sources, r->pick, L, S, want, a->max_copy);
    if (mi == 0 && ci == 0) r->skipped = cd->pick.skipped_short;
    if (r->sources.n > 0) {
        cd->source = xmalloc(sizeof(char *) * (size_t)(cd->pick.n > 0 ? cd->pick.n : 1));
        for (int64_t i = 0; i < cd->pick.n; i++) cd->source[i] = r->sources.path[doc_source_of(&r->sources, cd->pick.doc[i])];
    }
    for (int v = 0; v < r->n_var; v++) {
        EvalCell *c = cell(r, v, ci, mi);
        c->doc_index = cd->pick.doc, c->doc_copy = cd->pick.copy_share, c->doc_source = cd->source;
        c->skipped_copy = cd->pick.skipped_copy;
    }
    /* the tokens the context will run: each document's prefill, then S - 1 steps per variant */
    progress_begin(&x.pr, "eval", cd->pick.n * (L + (S - 1) * r->n_var), "tok");
    x.pr.log_interval = 10, x.pr.quiet = a->quiet;
    x.docs_total = cd->pick.n;
    int64_t nb = 0;
    for (int64_t i = 0; i < cd->pick.n; i++) {
        int64_t d = cd->pick.doc[i];
        read_doc(&x, d, x.tok[nb], buf, m->cfg.vocab_size);
        if (x.cls) answer_classify(rule, buf, L + S, x.cls[nb]);
        x.doc[nb] = d;
        x.docs_done = used + nb;
        snprintf(x.what, sizeof x.what, "prefill of %lld tokens (L = %lld)", (long long)L, (long long)L);
        show_progress(&x);
        engine_prefill(&x.eng[nb], x.tok[nb], L);
        x.tokens_done += L;
        if (++nb == batch) decode_batch(&x, mi, nb), used += nb, nb = 0;
    }
    if (nb > 0) decode_batch(&x, mi, nb), used += nb;
    char fin[96];
    snprintf(fin, sizeof fin, " %lld document(s) at L = %lld done", (long long)used, (long long)L);
    progress_end(&x.pr, x.tokens_done, fin);
    KV_CHECK(used > 0, "no document of split '%s' has the %lld tokens context %lld + last %lld + 1 needs (%lld skipped)%s",
             a->split, (long long)(L + S + 1), (long long)L, (long long)S, (long long)cd->pick.skipped_short,
             cd->pick.skipped_copy > 0 ? " with a copy share within --max-copy-share" : "");
    for (int v = 0; v < r->n_var; v++) {
        EvalCell *c = cell(r, v, ci, mi);
        c->ms_per_token /= (double)used, c->kv_bytes_per_token /= (double)used;
        eval_cell_finish(c, a->boot, 1234); /* same resamples for every policy: paired intervals */
        if (strcmp(r->var[v].name, "refreshkv") == 0) {
            Policy tmp = {.full_steps_per_layer = x.full_tot + v * nl};
            stride_json(c->stride_info, sizeof c->stride_info, &tmp, nl, used * (S - 1));
        }
    }
    for (int64_t b = 0; b < batch; b++) {
        engine_free(&x.eng[b]);
        free(x.tok[b]);
        if (x.cls) free(x.cls[b]);
    }
    free(x.eng), free(x.tok), free(x.cls), free(x.doc), free(buf), free(x.full_tot);
}

static void load_model(Llama *m, const char *dir, const char *rope_spec) {
    LlamaConfig c;
    eval_model_config(&c, dir, rope_spec);
    llama_create(m, &c);
    model_source_load_fp32(dir, &c, &m->layout, m->params);
}

/* With the GPU backend, m's weights go to the device once for all its contexts. */
static void model_to_device(EvalRun *r, const Llama *m, Device dev) {
    r->gpu = NULL, r->gpu_model = NULL;
    if (dev != DEVICE_CUDA) return;
    r->gpu = decode_device_cuda();
    KV_CHECK(r->gpu, "eval --device cuda: this binary was built without the CUDA decode engine");
    int64_t bytes = 0;
    r->gpu_model = r->gpu->model_upload(m, &bytes);
    printf("eval: CUDA decode engine, %.1f MB of weights on the GPU\n", (double)bytes / 1e6);
}

static void model_off_device(EvalRun *r) {
    if (r->gpu) r->gpu->model_free(r->gpu_model);
    r->gpu = NULL, r->gpu_model = NULL;
}

/* The option values the policies read, before anything is loaded: each is
 * refused naming the option instead of running clamped, or past a buffer,
 * under a label that shows the asked value. */
static void check_options(const EvalArgs *a) {
    KV_CHECK(a->max_copy >= 0 && a->max_copy <= 1, "eval: --max-copy-share %g is not a share in [0, 1]", a->max_copy);
    eval_check_shared_policy_options("eval", a->kernel, a->window, a->sinks);
    eval_check_window("eval", "--tova-window", a->tova_window);
    eval_check_window("eval", "--kvec-window", a->kvec_window);
    /* eval.json records each model's path as a JSON string, which must be UTF-8 */
    for (int i = 0; i < a->models.count; i++) {
        const char *m = a->models.items[i];
        int64_t bad = utf8_first_invalid((const uint8_t *)m, strlen(m));
        KV_CHECK(bad < 0, "eval: --model '%s' is not valid UTF-8 (byte 0x%02x at offset %lld); eval.json could not "
                 "record it", m, (unsigned)(uint8_t)m[bad], (long long)bad);
    }
}

/* Every context against the data before any model is loaded, so that a
 * context no document can fill is found before the others are computed:
 * each needs a document of at least L + S + 1 tokens and a budget in [1, L]. */
static void check_contexts(const EvalRun *r) {
    const EvalArgs *a = r->a;
    int64_t nd = data_split_num_docs(r->split), longest = 0;
    for (int64_t d = 0; d < nd; d++) {
        int64_t n = data_split_doc_len(r->split, d);
        if (n > longest) longest = n;
    }
    for (int ci = 0; ci < r->n_ctx; ci++) {
        int64_t L = r->ctx[ci];
        KV_CHECK(L >= 1, "eval: %s %lld: a context must be >= 1", options_spelled("L"), (long long)L);
        /* L + S + 1 > longest, written so that a huge L cannot wrap */
        KV_CHECK(L <= longest - a->last - 1, "eval: %s %lld: context %lld + %s %lld + 1 needs a document of %lld "
                 "tokens, but the longest of split '%s' (%lld documents) has %lld", options_spelled("L"), (long long)L,
                 (long long)L, options_spelled("S"), (long long)a->last, L > INT64_MAX - a->last - 1 ? (long long)INT64_MAX : (long long)(L + a->last + 1),
                 a->split, (long long)nd, (long long)longest);
        policy_budget(a->budget, L); /* dies naming --K (or --budget) when K is outside [1, L] */
    }
}

/* eval.json with the contexts finished so far (the cells in their usual
 * order, the unfinished ones left out), written after each context so that
 * a failure later in the run keeps what is done. Returns the count of cells
 * whose perplexity is not finite. */
static int write_finished(const EvalRun *r, const char *path, const char *device) {
    int total = r->n_var * r->n_ctx * r->n_models, n = 0;
    EvalCell *done = xmalloc(sizeof(EvalCell) * (size_t)total);
    for (int v = 0; v < r->n_var; v++)
        for (int c = 0; c < r->n_ctx; c++)
            for (int m = 0; m < r->n_models; m++)
                if (r->done[c * r->n_models + m]) done[n++] = *cell(r, v, c, m);
    EvalDocRule rule = {r->skipped, doc_pick_names[r->pick], r->a->max_copy};
    /* the documents scored at each context finished so far (the first model's; both score the same) */
    json_t *docs = json_array();
    KV_CHECK(docs != NULL, "eval.json: out of memory");
    for (int c = 0; c < r->n_ctx; c++)
        if (r->done[c * r->n_models])
            KV_CHECK(json_array_append_new(docs, json_integer((json_int_t)r->docs[c * r->n_models].pick.n)) == 0,
                     "eval.json: out of memory");
    KV_CHECK(json_object_set_new(r->run, "documents", docs) == 0 &&
                 json_object_set_new(r->run, "device", json_string(device)) == 0 &&
                 json_object_set_new(r->run, "wall_seconds", json_real(now_seconds() - r->t0)) == 0,
             "eval.json: out of memory");
    int non_finite = eval_write_json(path, done, n, &rule, device, r->run);
    free(done);
    return non_finite;
}

/* Names a PNG as written only when it was drawn; the plot code has already
 * warned why not (no gnuplot, a path it cannot write...). */
static void report_plot(const char *png, int drawn, const char *what) {
    if (drawn)
        printf("wrote %s (%s)\n", png, what);
    else
        warnf("eval: %s was not drawn (%s); eval.json holds every number", png, what);
}

int cmd_eval(int argc, char **argv) {
    double t0 = now_seconds();
    const PolicyOptions d = policy_default_options(0); /* the policies' defaults, written once in eval/policy.c */
    EvalArgs a = {.split = "test", .contexts = "8192", .budget = "L/8", .policies = "all", .out = "runs/eval",
                  .agg = "max", .refresh_qc = "", .refresh_fixed = "10,25,50", .last = 50, .boot = 1000,
                  .window = 1, .sinks = 4, .threshold = 0.85, .batch = EVAL_DEFAULT_BATCH,
                  .kernel = d.pool_kernel, .pool = policy_pool_names[d.pool],
                  .snapkv_keep_window = policy_on_off_names[d.snapkv_keep_window], .tova_keep_last = d.tova_keep_last,
                  .tova_window = d.tova_window, .head_sets = policy_head_sets_names[d.head_sets],
                  .h2o_recent = d.h2o_recent, .h2o_score = policy_h2o_score_names[d.h2o_score], .once = d.once,
                  .refresh_query = policy_query_rope_names[d.refresh_query], .kvec_window = d.kvec_window,
                  .restkv_grow = d.restkv_grow, .restkv_shift = policy_restkv_shift_names[d.restkv_shift],
                  .pick = doc_pick_names[DOC_PICK_FIRST], .max_copy = 1.0};
    const Option opts[] = {
        {"model", OPT_STRINGS, &a.models, "DIR|FILE.gguf", "model directory (Hugging Face, or native) or llama.cpp GGUF file; give two for before -> after"},
        {"data", OPT_STRING, &a.data, "DIR", "prepared data directory (kvcpt prepare --out)"},
        {"split", OPT_STRING, &a.split, "NAME", "train | dev | test | all (every split the data has)"},
        {"L", OPT_STRING, &a.contexts, "L1,L2", "prefill lengths"},
        {"context", OPT_ALIAS, NULL, "L", NULL},
        {"S", OPT_POSITIVE, &a.last, "S", "scored tokens at the end of each document"},
        {"last", OPT_ALIAS, NULL, "S", NULL},
        {"K", OPT_STRING, &a.budget, "K|L/N", "cached keys per KV head"},
        {"budget", OPT_ALIAS, NULL, "K", NULL},
        {"policies", OPT_STRING, &a.policies, "LIST", "comma list of the policies named above, or all"},
        {"refresh-qc", OPT_STRING, &a.refresh_qc, "N,..", "refreshkv dynamic variants, QC strides (e.g. 5,10)"},
        {"refresh-fixed", OPT_STRING, &a.refresh_fixed, "N,..", "refreshkv fixed-stride variants"},
        {"threshold", OPT_FLOAT, &a.threshold, "S", "refreshkv cosine threshold"},
        {"refresh-query", OPT_STRING, &a.refresh_query, "post|pre", "refreshkv compares queries after RoPE (the paper) or before"},
        {"agg", OPT_STRING, &a.agg, "max|mean|first", "GQA aggregation of scores"},
        {"snapkv-window", OPT_INT, &a.window, "W", "SnapKV observation window"},
        {"snapkv-keep-window", OPT_STRING, &a.snapkv_keep_window, "on|off", "snapkv keeps its window, scores the rest (SnapKV's code, kvpress)"},
        {"snapkv-grow", OPT_FLAG, &a.snapkv_grow, NULL, "SnapKV keeps every new token"},
        {"sinks", OPT_COUNT, &a.sinks, "N", "StreamingLLM sink tokens"},
        {"snapkv-kernel", OPT_INT, &a.kernel, "K", "pooling kernel of snapkv, refreshkv, kvec"},
        {"pool", OPT_STRING, &a.pool, "max|avg", "that pooling: max, or kvpress's zero-padded avg"},
        {"tova-window", OPT_INT, &a.tova_window, "N", "prefill queries TOVA replays (1: the prompt reduced once, TOVA's code)"},
        {"head-sets", OPT_STRING, &a.head_sets, "group|shared", "tova: per-KV-head sets by --agg, or one per layer by the mean of all heads (TOVA's code)"},
        {"tova-keep-last", OPT_FLAG, &a.tova_keep_last, NULL, "tova never evicts the newest position (kvpress)"},
        {"restkv-grow", OPT_FLAG, &a.restkv_grow, NULL, "restkv keeps every new token (cache K + S - 1) instead of staying at K"},
        {"restkv-shift", OPT_STRING, &a.restkv_shift, "printed|signed", "restkv Eq. 12 window shift as printed (>= 0) or signed by the drift"},
        {"kvec-window", OPT_INT, &a.kvec_window, "O", "K-VEC observation window O (below O' = 32)"},
        {"h2o-recent", OPT_FLOAT, &a.h2o_recent, "F", "h2o recent share of the budget (kvpress: 0)"},
        {"h2o-score", OPT_STRING, &a.h2o_score, "sum|mean", "h2o attention summed, or per query (kvpress)"},
        {"compress-once", OPT_FLAG, &a.once, NULL, "policies choose at the first decode step only, then keep every new token (kvpress)"},
        {"dump", OPT_STRING, &a.dump, "FILE", "JSON lines: per document and variant the keys kept after prefill and the S NLLs"},
        {"max-docs", OPT_COUNT, &a.max_docs, "N", "evaluate at most N documents; 0: all"},
        {"pick", OPT_STRING, &a.pick, "first|interleave", "documents in the split's order, or round robin over the inputs prepare recorded"},
        {"max-copy-share", OPT_FLOAT, &a.max_copy, "F", "pass over a document when more than F of its scored tokens copy an earlier 8-gram of the window"},
        {"batch", OPT_POSITIVE, &a.batch, "N", "documents decoded together (same results for any N)"},
        {"bootstrap", OPT_POSITIVE, &a.boot, "N", "bootstrap resamples for the 95% interval"},
        {"out", OPT_STRING, &a.out, "DIR", "writes eval.json and eval.png there"},
        {"rope-scaling", OPT_STRING, &a.rope_scaling, "TYPE:F|JSON", "RoPE scaling in place of the model's, as transformers reads rope_scaling: yarn:2, linear:2, dynamic:2, none, or a JSON block"},
        {"allow-beyond-context", OPT_FLAG, &a.allow_beyond, NULL, "run a context past what the model's RoPE covers (labelled BEYOND) instead of refusing it"},
        {"device", OPT_STRING, &a.device, "cpu|cuda", "backend; absent: cuda when a GPU is visible"},
        {"quiet", OPT_FLAG, &a.quiet, NULL, "no progress on stderr (document, variant, tokens/s, elapsed, ETA)"},
        {0},
    };
    /* the policies a user can name, with what each keeps, from the registry
     * itself, so the help cannot miss one */
    char summary[4096];
    int n_reg = 0, at = snprintf(summary, sizeof summary,
                                 "Perplexity of the last S tokens per KV-cache policy (docs/eval.md).\n\n"
                                 "policies (--policies NAME,NAME or all), each with the options that tune it:");
    const PolicyInfo *reg = policy_registry(&n_reg);
    for (int i = 0; i < n_reg && at > 0 && at < (int)sizeof summary; i++)
        at += snprintf(summary + at, sizeof summary - (size_t)at, "\n  %-10s %s\n  %-10s   options: %s", reg[i].name,
                       reg[i].summary, "", reg[i].options[0] ? reg[i].options : "none");
    if (at > 0 && at < (int)sizeof summary)
        at += snprintf(summary + at, sizeof summary - (size_t)at, "\n--compress-once applies to any of them.");
    KV_CHECK(at > 0 && at < (int)sizeof summary, "eval: help text longer than %zu bytes", sizeof summary);
    if (options_parse("eval", summary, opts, argc, argv)) return 0;
    KV_CHECK(a.models.count == 1 || a.models.count == 2, "eval: give one --model, or two for before -> after");
    KV_CHECK(a.data, "eval: --data is required");
    check_options(&a);
    EvalRun r = {.a = &a, .n_models = a.models.count, .t0 = t0};
    r.n_ctx = options_int_list(a.contexts, r.ctx, 8, "L");
    Variant var[32];
    r.n_var = expand_policies(&a, var, 32);
    /* every model's config.json before any work (after the options, which
     * need no file): a second model refused only after the first one's
     * contexts were evaluated wastes them */
    for (int i = 0; i < a.models.count; i++) {
        LlamaConfig c;
        model_source_config(&c, a.models.items[i], "eval: --model");
    }
    r.var = var;
    /* --dump is replaced only at the end (a rename), but it must not name an input at all */
    if (a.dump) {
        for (int i = 0; i < a.models.count; i++)
            eval_refuse_inside_input("eval", "--dump", a.dump, "--model", a.models.items[i]);
        eval_refuse_inside_input("eval", "--dump", a.dump, "--data", a.data);
    }
    char dir[4200];
    path_fmt(dir, sizeof dir, "%s/%s", a.data, a.split);
    DataSplit *split = data_split_open(dir);
    r.split = split;
    r.pick = policy_enum_parse("--pick", a.pick, doc_pick_names, 2);
    doc_sources_load(&r.sources, a.data, a.split, data_split_num_docs(split));
    check_contexts(&r);
    r.run = eval_provenance_new(argc, argv, a.data, a.split);
    json_t *ls = json_array();
    KV_CHECK(ls != NULL, "eval.json: out of memory");
    for (int ci = 0; ci < r.n_ctx; ci++)
        KV_CHECK(json_array_append_new(ls, json_integer((json_int_t)r.ctx[ci])) == 0, "eval.json: out of memory");
    KV_CHECK(json_object_set_new(r.run, "L", ls) == 0 && json_object_set_new(r.run, "S", json_integer(a.last)) == 0 &&
                 json_object_set_new(r.run, "K", json_string(a.budget)) == 0 &&
                 json_object_set_new(r.run, "max_docs", json_integer(a.max_docs)) == 0 &&
                 json_object_set_new(r.run, "pick", json_string(a.pick)) == 0 &&
                 json_object_set_new(r.run, "max_copy_share", json_real(a.max_copy)) == 0 &&
                 json_object_set_new(r.run, "batch", json_integer(a.batch)) == 0 &&
                 json_object_set_new(r.run, "bootstrap", json_integer(a.boot)) == 0,
             "eval.json: out of memory");
    for (int v = 0; v < r.n_var; v++) eval_provenance_add_policy(r.run, var[v].name, &var[v].opt);
    for (int i = 0; i < a.models.count; i++) eval_provenance_add_model(r.run, a.models.items[i]);
    for (int i = 0; i < a.models.count; i++)
        eval_check_rope_contexts(a.models.items[i], a.rope_scaling, r.ctx, r.n_ctx, a.last, a.allow_beyond);
    Device dev = backend_resolve(a.device);
    eval_prepare_out_dir("eval", "--out", a.out);
    if (!a.quiet && dev == DEVICE_CPU) fprintf(stderr, "kvcpt eval: device cpu, %s\n", blas_core_summary());
    if (a.dump) {
        /* a .tmp that fopen_check removes if the run dies: an earlier good
         * dump stays until this one is complete */
        path_fmt(r.dump_tmp, sizeof r.dump_tmp, "%s.tmp", a.dump);
        r.dump = fopen_check(r.dump_tmp, "w");
    }
    int n_cells = r.n_var * r.n_ctx * r.n_models;
    r.cells = xcalloc((size_t)n_cells, sizeof(EvalCell));
    r.done = xcalloc((size_t)(r.n_ctx * r.n_models), 1);
    r.docs = xcalloc((size_t)(r.n_ctx * r.n_models), sizeof(ContextDocs));
    char path[4200];
    path_fmt(path, sizeof path, "%s/eval.json", a.out);
    int non_finite = 0;
    for (int mi = 0; mi < r.n_models; mi++) {
        Llama m;
        load_model(&m, a.models.items[mi], a.rope_scaling);
        model_to_device(&r, &m, dev);
        for (int ci = 0; ci < r.n_ctx; ci++) {
            eval_context(&r, &m, mi, ci, a.models.items[mi]);
            /* the same resamples as the intervals: paired over the documents */
            if (mi == 1)
                for (int v = 0; v < r.n_var; v++) eval_cell_ratio(cell(&r, v, ci, 1), cell(&r, v, ci, 0), a.boot, 1234);
            r.done[ci * r.n_models + mi] = 1;
            non_finite = write_finished(&r, path, backend_name(dev));
        }
        model_off_device(&r);
        llama_free(&m);
    }
    if (r.dump) {
        fclose_check(r.dump, r.dump_tmp);
        rename_check(r.dump_tmp, a.dump);
    }
    eval_print_table(r.cells, n_cells, r.n_models, r.n_ctx);
    EvalDocRule rule = {r.skipped, doc_pick_names[r.pick], a.max_copy};
    eval_print_documents(r.cells, n_cells, r.n_models, r.n_ctx, &rule);
    eval_print_rope_notes(r.cells, n_cells, r.n_models, r.n_ctx);
    eval_print_answers(r.cells, n_cells, r.n_models, r.n_ctx);
    printf("wrote %s (%lld documents skipped as shorter than context + last + 1)\n", path, (long long)r.skipped);
    path_fmt(path, sizeof path, "%s/eval.png", a.out);
    report_plot(path, eval_plot(path, r.cells, n_cells, r.n_models, r.n_ctx), "perplexity per policy");
    for (int mi = 0; mi < r.n_models; mi++) {
        path_fmt(path, sizeof path, "%s/eval_steps%s.png", a.out, r.n_models == 2 && mi == 0 ? "_before" : "");
        report_plot(path, eval_plot_steps(path, r.cells, n_cells, r.n_models, r.n_ctx, mi),
                    r.n_models == 2 && mi == 0 ? "per-step curves, before" : "per-step curves");
    }
    /* written first so the cells can be read, then a failure: a NaN
     * perplexity means the weights or the arithmetic are broken */
    if (non_finite > 0)
        die("eval: %d of %d results are not finite (NaN or infinite perplexity; null in %s/eval.json): check the "
            "model's weights", non_finite, n_cells, a.out);
    for (int i = 0; i < n_cells; i++) {
        free(r.cells[i].doc_nll), free(r.cells[i].step_nll), free(r.cells[i].step_top1);
        free((void *)r.cells[i].policy);
    }
    free(r.cells);
    free(r.done);
    for (int i = 0; i < r.n_ctx * r.n_models; i++) doc_pick_free(&r.docs[i].pick), free(r.docs[i].source);
    free(r.docs);
    json_decref(r.run);
    doc_sources_free(&r.sources);
    free((void *)a.models.items);
    data_split_close(split);
    return 0;
}
