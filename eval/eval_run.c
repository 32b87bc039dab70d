/* The evaluation behind `kvcpt eval` (eval/eval_run.h): models x contexts x
 * document batches x policy variants, and the outputs. */
#include "eval_run.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../checkpoints/model_source.h"
#include "../common/backend.h"
#include "../common/options.h"
#include "../common/util.h"
#include "../data/data_split.h"
#include "../kernels/blas_core.h"
#include "decode_device.h"
#include "doc_pick.h"
#include "engine.h"
#include "option_limits.h"
#include "output_paths.h"
#include "provenance.h"
#include "report.h"
#include "rope_context.h"

/* The documents of one (context, model): the pick and each one's input. */
typedef struct {
    DocPick pick;
    const char **source; /* (pick.n) into the run's DocSources; NULL when the manifest records no inputs' counts */
} ContextDocs;

typedef struct {
    const EvalSettings *s;
    DecoderConfig *cfg;            /* (n_models) each model's config, read once, with --rope-scaling's scaling */
    const DataSplit *split;
    DocSources sources;          /* the split's inputs (eval/doc_pick.h); n = 0 when not recorded */
    ContextDocs *docs;           /* (n_ctx, n_models) */
    EvalCell *cells;
    int64_t skipped;
    unsigned char *done;         /* (n_ctx, n_models) 1 once that context of that model is finished */
    const DecodeDevice *dev;     /* the backend's decode engine (Backend.decode); NULL: the host's */
    void *dev_model;             /* the model's weights on the device (dev->model_upload) */
    FILE *dump;                  /* --dump: one JSON line per (model, context, variant, document); NULL: off */
    char dump_tmp[4200];         /* where the dump is written until the run succeeds (--dump + ".tmp") */
    json_t *run;                 /* eval.json's "run": how it is made (eval/provenance.h) */
} EvalRun;

static EvalCell *cell(const EvalRun *r, int v, int c, int m) {
    return &r->cells[(v * r->s->n_contexts + c) * r->s->n_models + m];
}

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
    int64_t budget;     /* K at this context (EvalSettings.budget at L), given to every policy */
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
    snprintf(extra, sizeof extra, " doc %lld/%lld, %s",
             (long long)(x->docs_done + 1 < x->docs_total ? x->docs_done + 1 : x->docs_total), (long long)x->docs_total,
             x->what);
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
    int64_t n = x->sh.L + x->r->s->last;
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
    int64_t S = x->r->s->last, Hkv = x->sh.Hkv;
    fprintf(f,
            "{\"model_index\":%d,\"context\":%lld,\"budget\":%lld,\"policy\":\"%s\",\"label\":\"%s\",\"doc\":%lld,"
            "\"nll\":[",
            mi, (long long)x->sh.L, (long long)x->budget, p->name, p->label, (long long)doc);
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
    int64_t S = x->r->s->last, nl = x->sh.n_layers;
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
    const EvalSettings *s = r->s;
    int64_t S = s->last;
    int nv = s->n_variants, together = r->dev == NULL, per_call = together ? nv : 1;
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
                PolicyOptions o = s->variants[v].opt;
                o.budget = x->budget;
                policy_create(&pol[rows], s->variants[v].name, &x->sh, &o);
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
static int64_t fit_batch(const EvalRun *r, const Decoder *m, int64_t batch, int64_t L, int64_t S) {
    return r->dev ? r->dev->fit_batch(&m->cfg, L, S, EVAL_PREFILL_ROWS, batch) : batch;
}

static void create_engine(const EvalRun *r, DecodeEngine *e, Decoder *m, int64_t cap) {
    if (r->dev) r->dev->engine_create(e, m, r->dev_model, cap, EVAL_PREFILL_ROWS);
    else engine_create(e, m, cap, EVAL_PREFILL_ROWS);
}

/* Every eligible document at context L through every policy variant,
 * --batch documents at a time. */
static void eval_context(EvalRun *r, Decoder *m, int mi, int ci, const char *model_name) {
    const EvalSettings *s = r->s;
    int64_t L = s->contexts[ci], S = s->last, nd = data_split_num_docs(r->split), used = 0,
            nl = m->cfg.num_hidden_layers;
    int64_t want = s->max_docs > 0 && s->max_docs < nd ? s->max_docs : nd;
    int64_t batch = s->batch < want ? s->batch : (want > 0 ? want : 1);
    batch = fit_batch(r, m, batch, L, S);
    ContextRun x = {.r = r, .ci = ci, .budget = policy_budget(s->budget, L)};
    x.sh = (PolicyShape){nl,
                         m->cfg.num_attention_heads,
                         m->cfg.num_key_value_heads,
                         m->cfg.head_dim,
                         m->cfg.hidden_size,
                         L,
                         EVAL_PREFILL_ROWS,
                         L + S,
                         NULL,
                         NULL};
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
    x.full_tot = xcalloc((size_t)(s->n_variants * nl), sizeof(int64_t));
    for (int v = 0; v < s->n_variants; v++) {
        EvalCell *c = cell(r, v, ci, mi);
        *c = (EvalCell){.model = model_name, .variant = v, .context = L, .budget = x.budget, .last = S};
        rope_context_describe(&c->rope, &m->cfg, L + S, s->rope_scaling != NULL);
        c->doc_nll = xmalloc(sizeof(double) * (size_t)(nd > 0 ? nd : 1));
        c->step_nll = xcalloc((size_t)S, sizeof(double));
        c->step_top1 = xcalloc((size_t)S, sizeof(int64_t));
        c->has_classes = rule->present;
    }
    /* the documents, in the order they are scored (eval/doc_pick.h) */
    ContextDocs *cd = &r->docs[ci * s->n_models + mi];
    doc_pick(&cd->pick, r->split, &r->sources, s->pick, L, S, want, s->max_copy);
    if (mi == 0 && ci == 0) r->skipped = cd->pick.skipped_short;
    if (r->sources.n > 0) {
        cd->source = xmalloc(sizeof(char *) * (size_t)(cd->pick.n > 0 ? cd->pick.n : 1));
        for (int64_t i = 0; i < cd->pick.n; i++)
            cd->source[i] = r->sources.path[doc_source_of(&r->sources, cd->pick.doc[i])];
    }
    for (int v = 0; v < s->n_variants; v++) {
        EvalCell *c = cell(r, v, ci, mi);
        c->doc_index = cd->pick.doc, c->doc_copy = cd->pick.copy_share, c->doc_source = cd->source;
        c->skipped_copy = cd->pick.skipped_copy;
    }
    /* the tokens the context will run: each document's prefill, then S - 1 steps per variant */
    progress_begin(&x.pr, "eval", cd->pick.n * (L + (S - 1) * s->n_variants), "tok");
    x.pr.log_interval = 10, x.pr.quiet = s->quiet;
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
    KV_CHECK(used > 0,
             "no document of split '%s' has the %lld tokens context %lld + last %lld + 1 needs (%lld skipped)%s",
             s->split, (long long)(L + S + 1), (long long)L, (long long)S, (long long)cd->pick.skipped_short,
             cd->pick.skipped_copy > 0 ? " with a copy share within --max-copy-share" : "");
    for (int v = 0; v < s->n_variants; v++) {
        EvalCell *c = cell(r, v, ci, mi);
        c->ms_per_token /= (double)used, c->kv_bytes_per_token /= (double)used;
        eval_cell_finish(c, s->boot, 1234); /* same resamples for every policy: paired intervals */
        if (strcmp(s->variants[v].name, "refreshkv") == 0) {
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

/* Model mi from the config read at the start; its load time goes beside
 * its hash time in eval.json's run.models, so that a timing of the run can
 * leave both out, as a peer's timing leaves out its own model load. */
static void load_model(const EvalRun *r, Decoder *m, int mi) {
    double t0 = now_seconds();
    decoder_create(m, &r->cfg[mi]);
    model_source_load_fp32(r->s->models[mi], &r->cfg[mi], &m->layout, m->params);
    json_t *entry = json_array_get(json_object_get(r->run, "models"), (size_t)mi);
    KV_CHECK(entry && json_object_set_new(entry, "load_seconds", json_real(now_seconds() - t0)) == 0,
             "eval.json: out of memory");
}

/* On an accelerator, m's weights go to the device once for all its contexts. */
static void model_to_device(EvalRun *r, const Decoder *m, const Backend *be) {
    r->dev = NULL, r->dev_model = NULL;
    if (be->kind == BACKEND_HOST) return;
    r->dev = be->decode;
    KV_CHECK(r->dev, "eval --device %s: the %s backend has no decode engine", be->name, be->label);
    int64_t bytes = 0;
    r->dev_model = r->dev->model_upload(m, &bytes);
    printf("eval: %s decode engine, %.1f MB of weights on the device\n", be->label, (double)bytes / 1e6);
}

static void model_off_device(EvalRun *r) {
    if (r->dev) r->dev->model_free(r->dev_model);
    r->dev = NULL, r->dev_model = NULL;
}

/* Every context against the data before any model is loaded, so that a
 * context no document can fill is found before the others are computed:
 * each needs a document of at least L + S + 1 tokens and a budget in [1, L]. */
static void check_contexts(const EvalRun *r) {
    const EvalSettings *s = r->s;
    int64_t nd = data_split_num_docs(r->split), longest = 0;
    for (int64_t d = 0; d < nd; d++) {
        int64_t n = data_split_doc_len(r->split, d);
        if (n > longest) longest = n;
    }
    for (int ci = 0; ci < s->n_contexts; ci++) {
        int64_t L = s->contexts[ci];
        KV_CHECK(L >= 1, "eval: %s %lld: a context must be >= 1", options_spelled("L"), (long long)L);
        /* L + S + 1 > longest, written so that a huge L cannot wrap */
        KV_CHECK(L <= longest - s->last - 1,
                 "eval: %s %lld: context %lld + %s %lld + 1 needs a document of %lld "
                 "tokens, but the longest of split '%s' (%lld documents) has %lld",
                 options_spelled("L"), (long long)L, (long long)L, options_spelled("S"), (long long)s->last,
                 L > INT64_MAX - s->last - 1 ? (long long)INT64_MAX : (long long)(L + s->last + 1), s->split,
                 (long long)nd, (long long)longest);
        policy_budget(s->budget, L); /* dies naming --K (or --budget) when K is outside [1, L] */
    }
}

/* eval.json with the contexts finished so far (the cells in their usual
 * order, the unfinished ones left out), written after each context so that
 * a failure later in the run keeps what is done. Returns the count of cells
 * whose perplexity is not finite. */
static int write_finished(const EvalRun *r, const char *path, const char *device) {
    const EvalSettings *s = r->s;
    int total = s->n_variants * s->n_contexts * s->n_models, n = 0;
    EvalCell *done = xmalloc(sizeof(EvalCell) * (size_t)total);
    for (int v = 0; v < s->n_variants; v++)
        for (int c = 0; c < s->n_contexts; c++)
            for (int m = 0; m < s->n_models; m++)
                if (r->done[c * s->n_models + m]) done[n++] = *cell(r, v, c, m);
    EvalDocRule rule = {r->skipped, doc_pick_names[s->pick], s->max_copy};
    /* the documents scored at each context finished so far (the first model's; both score the same) */
    json_t *docs = json_array();
    KV_CHECK(docs != NULL, "eval.json: out of memory");
    for (int c = 0; c < s->n_contexts; c++)
        if (r->done[c * s->n_models])
            KV_CHECK(json_array_append_new(docs, json_integer((json_int_t)r->docs[c * s->n_models].pick.n)) == 0,
                     "eval.json: out of memory");
    KV_CHECK(json_object_set_new(r->run, "documents", docs) == 0 &&
                 json_object_set_new(r->run, "device", json_string(device)) == 0 &&
                 json_object_set_new(r->run, "wall_seconds", json_real(now_seconds() - s->t0)) == 0,
             "eval.json: out of memory");
    int non_finite = eval_write_json(path, done, n, &rule, device, r->run);
    free(done);
    return non_finite;
}

/* Names a PNG as written only when it was drawn; the plot code has already
 * warned why not (no gnuplot, a path it cannot write...). */
static void report_plot(const char *png, int drawn, const char *what) {
    if (drawn) printf("wrote %s (%s)\n", png, what);
    else warnf("eval: %s was not drawn (%s); eval.json holds every number", png, what);
}

/* Each model's config.json, read once before any work (the models are
 * loaded from these): a second model refused only after the first one's
 * contexts were evaluated would waste them. */
static void read_configs(EvalRun *r) {
    const EvalSettings *s = r->s;
    r->cfg = xcalloc((size_t)s->n_models, sizeof(DecoderConfig));
    for (int i = 0; i < s->n_models; i++) eval_model_config(&r->cfg[i], s->models[i], s->rope_scaling);
}

/* eval.json's "run" (eval/provenance.h): the command, the data, the
 * settings, every variant's options and each model's files. */
static json_t *provenance(const EvalRun *r) {
    const EvalSettings *s = r->s;
    json_t *run = eval_provenance_new(s->argc, s->argv, s->data, s->split), *ls = json_array();
    KV_CHECK(ls != NULL, "eval.json: out of memory");
    for (int ci = 0; ci < s->n_contexts; ci++)
        KV_CHECK(json_array_append_new(ls, json_integer((json_int_t)s->contexts[ci])) == 0, "eval.json: out of memory");
    KV_CHECK(json_object_set_new(run, "L", ls) == 0 && json_object_set_new(run, "S", json_integer(s->last)) == 0 &&
                 json_object_set_new(run, "K", json_string(s->budget)) == 0 &&
                 json_object_set_new(run, "max_docs", json_integer(s->max_docs)) == 0 &&
                 json_object_set_new(run, "pick", json_string(doc_pick_names[s->pick])) == 0 &&
                 json_object_set_new(run, "max_copy_share", json_real(s->max_copy)) == 0 &&
                 json_object_set_new(run, "batch", json_integer(s->batch)) == 0 &&
                 json_object_set_new(run, "bootstrap", json_integer(s->boot)) == 0,
             "eval.json: out of memory");
    for (int v = 0; v < s->n_variants; v++) eval_provenance_add_policy(run, s->variants[v].name, &s->variants[v].opt);
    for (int i = 0; i < s->n_models; i++) eval_provenance_add_model(run, s->models[i]);
    return run;
}

/* The tables on stdout and the plots, once every context is done. */
static void report(const EvalRun *r, const char *json_path) {
    const EvalSettings *s = r->s;
    int n_cells = s->n_variants * s->n_contexts * s->n_models;
    eval_print_table(r->cells, n_cells, s->n_models, s->n_contexts);
    EvalDocRule rule = {r->skipped, doc_pick_names[s->pick], s->max_copy};
    eval_print_documents(r->cells, n_cells, s->n_models, s->n_contexts, &rule);
    eval_print_rope_notes(r->cells, n_cells, s->n_models, s->n_contexts);
    eval_print_answers(r->cells, n_cells, s->n_models, s->n_contexts);
    printf("wrote %s (%lld documents skipped as shorter than context + last + 1)\n", json_path, (long long)r->skipped);
    char path[4200];
    path_fmt(path, sizeof path, "%s/eval.png", s->out);
    report_plot(path, eval_plot(path, r->cells, n_cells, s->n_models, s->n_contexts), "perplexity per policy");
    for (int mi = 0; mi < s->n_models; mi++) {
        path_fmt(path, sizeof path, "%s/eval_steps%s.png", s->out, s->n_models == 2 && mi == 0 ? "_before" : "");
        report_plot(path, eval_plot_steps(path, r->cells, n_cells, s->n_models, s->n_contexts, mi),
                    s->n_models == 2 && mi == 0 ? "per-step curves, before" : "per-step curves");
    }
}

void eval_run(const EvalSettings *s) {
    KV_CHECK(s->n_contexts >= 1 && s->n_contexts <= EVAL_MAX_CONTEXTS && s->n_variants >= 1 && s->n_models >= 1,
             "eval: %d contexts, %d policy variants, %d models: at least one of each, at most %d contexts",
             s->n_contexts, s->n_variants, s->n_models, EVAL_MAX_CONTEXTS);
    EvalRun r = {.s = s};
    read_configs(&r);
    /* --dump is replaced only at the end (a rename), but it must not name an input at all */
    if (s->dump) {
        for (int i = 0; i < s->n_models; i++)
            eval_refuse_inside_input("eval", "--dump", s->dump, "--model", s->models[i]);
        eval_refuse_inside_input("eval", "--dump", s->dump, "--data", s->data);
    }
    char path[4200];
    path_fmt(path, sizeof path, "%s/%s", s->data, s->split);
    DataSplit *split = data_split_open(path);
    r.split = split;
    doc_sources_load(&r.sources, s->data, s->split, data_split_num_docs(split));
    check_contexts(&r);
    r.run = provenance(&r);
    for (int i = 0; i < s->n_models; i++)
        eval_check_rope_contexts(&r.cfg[i], s->models[i], s->rope_scaling != NULL, s->contexts, s->n_contexts, s->last,
                                 s->allow_beyond);
    const Backend *be = backend_resolve(s->device);
    eval_prepare_out_dir("eval", "--out", s->out);
    if (!s->quiet && be->kind == BACKEND_HOST)
        fprintf(stderr, "kvcpt eval: device %s, %s\n", be->name, blas_core_summary());
    if (s->dump) {
        /* a .tmp that fopen_check removes if the run dies: an earlier good
         * dump stays until this one is complete */
        path_fmt(r.dump_tmp, sizeof r.dump_tmp, "%s.tmp", s->dump);
        r.dump = fopen_check(r.dump_tmp, "w");
    }
    int n_cells = s->n_variants * s->n_contexts * s->n_models;
    r.cells = xcalloc((size_t)n_cells, sizeof(EvalCell));
    r.done = xcalloc((size_t)(s->n_contexts * s->n_models), 1);
    r.docs = xcalloc((size_t)(s->n_contexts * s->n_models), sizeof(ContextDocs));
    path_fmt(path, sizeof path, "%s/eval.json", s->out);
    int non_finite = 0;
    for (int mi = 0; mi < s->n_models; mi++) {
        Decoder m;
        load_model(&r, &m, mi);
        model_to_device(&r, &m, be);
        for (int ci = 0; ci < s->n_contexts; ci++) {
            eval_context(&r, &m, mi, ci, s->models[mi]);
            /* the same resamples as the intervals: paired over the documents */
            if (mi == 1)
                for (int v = 0; v < s->n_variants; v++)
                    eval_cell_ratio(cell(&r, v, ci, 1), cell(&r, v, ci, 0), s->boot, 1234);
            r.done[ci * s->n_models + mi] = 1;
            non_finite = write_finished(&r, path, be->name);
        }
        model_off_device(&r);
        decoder_free(&m);
    }
    if (r.dump) {
        fclose_check(r.dump, r.dump_tmp);
        rename_check(r.dump_tmp, s->dump);
    }
    report(&r, path);
    /* written first so the cells can be read, then a failure: a NaN
     * perplexity means the weights or the arithmetic are broken */
    if (non_finite > 0)
        die("eval: %d of %d results are not finite (NaN or infinite perplexity; null in %s/eval.json): check the "
            "model's weights",
            non_finite, n_cells, s->out);
    for (int i = 0; i < n_cells; i++) {
        free(r.cells[i].doc_nll), free(r.cells[i].step_nll), free(r.cells[i].step_top1);
        free((void *)r.cells[i].policy);
    }
    free(r.cells);
    free(r.done);
    for (int i = 0; i < s->n_contexts * s->n_models; i++) doc_pick_free(&r.docs[i].pick), free(r.docs[i].source);
    free(r.docs);
    free(r.cfg);
    json_decref(r.run);
    doc_sources_free(&r.sources);
    data_split_close(split);
}
