#include "report.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/build_info.h"
#include "../common/plot.h"
#include "../common/rng.h"
#include "../common/util.h"
#include "../kernels/blas.h"
#include "doc_pick.h"

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* exp(sum(x) / (per * n)) over n_boot resamples of x's n entries with
 * replacement: its 2.5% and 97.5% quantiles into lo and hi. The same seed
 * draws the same resamples for every x of n entries (paired intervals). */
static void boot_interval(const double *x, int64_t n, double per, int64_t n_boot, uint64_t seed, double *lo,
                          double *hi) {
    double *b = xmalloc(sizeof(double) * (size_t)n_boot);
    Rng r;
    rng_seed(&r, seed);
    for (int64_t i = 0; i < n_boot; i++) {
        double s = 0;
        for (int64_t d = 0; d < n; d++) s += x[rng_u64(&r) % (uint64_t)n];
        b[i] = exp(s / (per * (double)n));
    }
    qsort(b, (size_t)n_boot, sizeof(double), cmp_double);
    *lo = b[(int64_t)(0.025 * (double)(n_boot - 1))];
    *hi = b[(int64_t)(0.975 * (double)(n_boot - 1))];
    free(b);
}

void eval_cell_finish(EvalCell *c, int64_t n_boot, uint64_t seed) {
    double tot = 0;
    for (int64_t d = 0; d < c->n_docs; d++) tot += c->doc_nll[d];
    double per_doc = (double)c->last;
    c->ppl = exp(tot / (per_doc * (double)c->n_docs));
    boot_interval(c->doc_nll, c->n_docs, per_doc, n_boot, seed, &c->lo, &c->hi);
}

void eval_cell_ratio(EvalCell *after, const EvalCell *before, int64_t n_boot, uint64_t seed) {
    after->has_ratio = 0;
    int64_t n = after->n_docs;
    if (n == 0 || before->n_docs != n || before->last != after->last) return;
    for (int64_t d = 0; d < n; d++)
        if (!after->doc_index || !before->doc_index || after->doc_index[d] != before->doc_index[d]) return;
    /* per document, log(PPL after / PPL before) * S */
    double *diff = xmalloc(sizeof(double) * (size_t)n), S = (double)after->last, tot = 0;
    for (int64_t d = 0; d < n; d++) diff[d] = after->doc_nll[d] - before->doc_nll[d], tot += diff[d];
    after->ratio = exp(tot / (S * (double)n));
    boot_interval(diff, n, S, n_boot, seed, &after->ratio_lo, &after->ratio_hi);
    after->has_ratio = 1;
    free(diff);
}

/* cells are ordered policy-major, then context, then model */
/* One cell's text: a[0] is the first model's cell, a[1] the second's when n_models == 2. */
typedef void (*CellText)(char *v, size_t cap, const EvalCell *a, int n_models);

/* "PPL @ L 16384 yarn x2, K 2048, 5 docs [95% CI]": what the column's numbers
 * are over, its context tagged when a RoPE scaling carries it or it is
 * beyond what the RoPE covers (a model's BEYOND first) */
static void context_header(char *out, size_t cap, const EvalCell *a, int n_models, const char *before,
                           const char *after) {
    char tag[64] = "";
    for (int m = 0; m < n_models; m++) {
        char t[64];
        rope_context_tag(t, sizeof t, &a[m].rope);
        if (!tag[0] || !strcmp(t, "BEYOND")) snprintf(tag, sizeof tag, "%s", t);
    }
    snprintf(out, cap, "%sL %lld%s%s, K %lld, %lld docs%s", before, (long long)a[0].context, tag[0] ? " " : "", tag,
             (long long)a[0].budget, (long long)a[0].n_docs, after);
}

void eval_print_rope_notes(const EvalCell *cells, int n, int n_models, int n_contexts) {
    for (int c = 0; c < n_contexts && c * n_models < n; c++)
        for (int m = 0; m < n_models; m++) {
            const EvalCell *e = &cells[c * n_models + m];
            rope_context_print_note(&e->rope, e->context, e->model);
        }
}

/* A table with one column per context: "policy", then before<context>after
 * headers in columns `width` wide and a rule, then a row per policy. */
static void print_table(const EvalCell *cells, int n, int n_models, int n_contexts, const char *before,
                        const char *after, int width, CellText text) {
    int per_policy = n_models * n_contexts;
    char(*h)[128] = xmalloc(sizeof *h * (size_t)n_contexts);
    for (int c = 0; c < n_contexts; c++) {
        context_header(h[c], sizeof h[c], &cells[c * n_models], n_models, before, after);
        if ((int)strlen(h[c]) > width) width = (int)strlen(h[c]);
    }
    printf("%-50s", "policy");
    for (int c = 0; c < n_contexts; c++) printf(" | %-*s", width, h[c]);
    free(h);
    printf("\n");
    for (int i = 0; i < 50 + n_contexts * (width + 3); i++) putchar('-');
    printf("\n");
    for (int p = 0; p < n / per_policy; p++) {
        printf("%-50s", cells[p * per_policy].policy);
        for (int c = 0; c < n_contexts; c++) {
            char v[96];
            text(v, sizeof v, &cells[p * per_policy + c * n_models], n_models);
            printf(" | %-*s", width, v);
        }
        printf("\n");
    }
}

static void ppl_text(char *v, size_t cap, const EvalCell *a, int n_models) {
    if (n_models == 2 && a[1].has_ratio)
        snprintf(v, cap, "%.3f -> %.3f x%.4f [%.4f, %.4f]", a[0].ppl, a[1].ppl, a[1].ratio, a[1].ratio_lo,
                 a[1].ratio_hi);
    else if (n_models == 2) snprintf(v, cap, "%.3f -> %.3f x? (other documents)", a[0].ppl, a[1].ppl);
    else snprintf(v, cap, "%.3f [%.3f, %.3f]", a[0].ppl, a[0].lo, a[0].hi);
}

void eval_print_table(const EvalCell *cells, int n, int n_models, int n_contexts) {
    printf("\n");
    if (n > 0)
        printf("PPL of the last S = %lld tokens of each document%s\n", (long long)cells[0].last,
               n_models == 2 ? ", before -> after, and x the paired ratio after/before (geometric mean over documents) "
                               "[its 95% paired bootstrap interval]"
                             : " [95% bootstrap interval over documents]");
    print_table(cells, n, n_models, n_contexts, "", "", n_models == 2 ? 44 : 30, ppl_text);
    printf("\n");
}

/* JSON has no NaN or infinity: such a number is written as null (and the
 * cell marked "finite": false), never dropped. */
static json_t *json_number_or_null(double x) { return isfinite(x) ? json_real(x) : json_null(); }

static void set_checked(json_t *o, const char *key, json_t *v) {
    KV_CHECK(v != NULL && json_object_set_new(o, key, v) == 0, "eval.json: cannot store field '%s'", key);
}

static double top1_accuracy(const EvalCell *c) {
    int64_t hits = 0;
    for (int64_t i = 0; i < c->last; i++) hits += c->step_top1[i];
    return c->n_docs > 0 ? (double)hits / (double)(c->n_docs * c->last) : NAN;
}

static json_t *number_array(const double *x, int64_t n) {
    json_t *a = json_array();
    KV_CHECK(a != NULL, "eval.json: out of memory");
    for (int64_t i = 0; i < n; i++)
        KV_CHECK(json_array_append_new(a, json_number_or_null(x[i])) == 0, "eval.json: out of memory");
    return a;
}

/* Decode step i's mean NLL and top-1 accuracy over the documents (NaN
 * without documents): eval.json's per_step and eval_steps.png. */
static double step_mean_nll(const EvalCell *c, int64_t i) {
    return c->n_docs > 0 ? c->step_nll[i] / (double)c->n_docs : NAN;
}

static double step_top1(const EvalCell *c, int64_t i) {
    return c->n_docs > 0 ? (double)c->step_top1[i] / (double)c->n_docs : NAN;
}

static json_t *per_step_json(const EvalCell *c) {
    double *nll = xmalloc(sizeof(double) * (size_t)c->last), *acc = xmalloc(sizeof(double) * (size_t)c->last);
    for (int64_t i = 0; i < c->last; i++) {
        nll[i] = step_mean_nll(c, i);
        acc[i] = step_top1(c, i);
    }
    json_t *o = json_object();
    KV_CHECK(o != NULL, "eval.json: out of memory");
    set_checked(o, "mean_nll", number_array(nll, c->last));
    set_checked(o, "top1_accuracy", number_array(acc, c->last));
    free(nll), free(acc);
    return o;
}

static json_t *answers_json(const EvalCell *c) {
    json_t *o = json_object();
    KV_CHECK(o != NULL, "eval.json: out of memory");
    for (int k = 0; k < ANSWER_CLASSES; k++) {
        json_t *e = json_object();
        KV_CHECK(e != NULL, "eval.json: out of memory");
        double n = (double)c->class_n[k];
        set_checked(e, "tokens", json_integer((json_int_t)c->class_n[k]));
        set_checked(e, "ppl", json_number_or_null(n > 0 ? exp(c->class_nll[k] / n) : NAN));
        set_checked(e, "top1_accuracy", json_number_or_null(n > 0 ? (double)c->class_top1[k] / n : NAN));
        set_checked(o, answer_class_name((AnswerClass)k), e);
    }
    return o;
}

static json_t *int_array(const int64_t *x, int64_t n) {
    json_t *a = json_array();
    KV_CHECK(a != NULL, "eval.json: out of memory");
    for (int64_t i = 0; i < n; i++)
        KV_CHECK(json_array_append_new(a, json_integer((json_int_t)x[i])) == 0, "eval.json: out of memory");
    return a;
}

static json_t *string_array(const char *const *x, int64_t n) {
    json_t *a = json_array();
    KV_CHECK(a != NULL, "eval.json: out of memory");
    for (int64_t i = 0; i < n; i++)
        KV_CHECK(json_array_append_new(a, json_string(x[i])) == 0, "eval.json: out of memory");
    return a;
}

/* The RoPE a cell ran with: the rope_scaling block (as config.json and
 * transformers read it; null without), where it came from, and the window
 * against the trained and covered contexts. */
static json_t *rope_json(const RopeContext *rc) {
    json_t *o = json_object();
    KV_CHECK(o != NULL, "eval.json: out of memory");
    json_t *block = json_loads(rc->scaling_json, JSON_DECODE_ANY, NULL);
    set_checked(o, "rope_scaling", block);
    set_checked(o, "from", json_string(rc->from_option ? "--rope-scaling" : "config.json"));
    set_checked(o, "tokens", json_integer((json_int_t)rc->tokens));
    set_checked(o, "trained_context", json_integer((json_int_t)rc->trained));
    set_checked(o, "covered_context", json_integer((json_int_t)rc->covered));
    set_checked(o, "extension_used", json_boolean(rc->extended));
    set_checked(o, "beyond_covered_context", json_boolean(rc->beyond));
    return o;
}

int eval_write_json(const char *path, const EvalCell *cells, int n, const EvalDocRule *rule, const char *device,
                    json_t *run) {
    json_t *arr = json_array();
    int non_finite = 0;
    KV_CHECK(arr != NULL, "eval.json: out of memory");
    for (int i = 0; i < n; i++) {
        const EvalCell *c = &cells[i];
        int finite = isfinite(c->ppl) && isfinite(c->lo) && isfinite(c->hi);
        json_t *docs = json_array(), *ci = json_array(), *o = json_object();
        KV_CHECK(docs && ci && o, "eval.json: out of memory");
        for (int64_t d = 0; d < c->n_docs; d++) {
            double p = exp(c->doc_nll[d] / (double)c->last);
            finite = finite && isfinite(p);
            KV_CHECK(json_array_append_new(docs, json_number_or_null(p)) == 0, "eval.json: out of memory");
        }
        KV_CHECK(json_array_append_new(ci, json_number_or_null(c->lo)) == 0 &&
                     json_array_append_new(ci, json_number_or_null(c->hi)) == 0,
                 "eval.json: out of memory");
        set_checked(o, "policy", json_string(c->policy));
        set_checked(o, "model", json_string(c->model));
        set_checked(o, "variant", json_integer(c->variant));
        set_checked(o, "context", json_integer((json_int_t)c->context));
        set_checked(o, "budget", json_integer((json_int_t)c->budget));
        set_checked(o, "last", json_integer((json_int_t)c->last));
        set_checked(o, "documents", json_integer((json_int_t)c->n_docs));
        set_checked(o, "ppl", json_number_or_null(c->ppl));
        set_checked(o, "ppl_ci95", ci);
        if (c->has_ratio) {
            json_t *rci = json_array();
            KV_CHECK(rci && json_array_append_new(rci, json_number_or_null(c->ratio_lo)) == 0 &&
                         json_array_append_new(rci, json_number_or_null(c->ratio_hi)) == 0,
                     "eval.json: out of memory");
            set_checked(o, "ppl_ratio_to_before", json_number_or_null(c->ratio));
            set_checked(o, "ppl_ratio_ci95", rci);
        }
        set_checked(o, "finite", json_boolean(finite));
        set_checked(o, "decode_ms_per_token", json_number_or_null(c->ms_per_token));
        set_checked(o, "kv_bytes_per_token", json_number_or_null(c->kv_bytes_per_token));
        set_checked(o, "ppl_per_document", docs);
        if (c->doc_index) {
            set_checked(o, "document_index", int_array(c->doc_index, c->n_docs));
            if (c->doc_source) set_checked(o, "document_source", string_array(c->doc_source, c->n_docs));
            set_checked(o, "copy_share_per_document", number_array(c->doc_copy, c->n_docs));
            set_checked(o, "documents_skipped_copy_share", json_integer((json_int_t)c->skipped_copy));
        }
        if (c->stride_info[0]) set_checked(o, "effective_stride_per_layer", json_loads(c->stride_info, 0, NULL));
        set_checked(o, "top1_accuracy", json_number_or_null(top1_accuracy(c)));
        set_checked(o, "per_step", per_step_json(c));
        if (c->has_classes) set_checked(o, "answers", answers_json(c));
        set_checked(o, "rope", rope_json(&c->rope));
        KV_CHECK(json_array_append_new(arr, o) == 0, "eval.json: out of memory");
        non_finite += !finite;
    }
    json_t *root = json_object();
    KV_CHECK(root != NULL, "eval.json: out of memory");
    set_checked(root, "device", json_string(device));
    set_checked(root, "commit", json_string(kvcpt_commit()));
    /* the BLAS beside the device: another core type may give other bits */
    set_checked(root, "blas", blas_info_json());
    set_checked(root, "run", json_incref(run));
    set_checked(root, "results", arr);
    set_checked(root, "documents_skipped_too_short", json_integer((json_int_t)rule->skipped_short));
    set_checked(root, "document_pick", json_string(rule->pick));
    set_checked(root, "max_copy_share", json_real(rule->max_copy));
    set_checked(root, "copy_ngram", json_integer(DOC_COPY_NGRAM));
    set_checked(root, "cells_not_finite", json_integer(non_finite));
    char tmp[4200];
    path_fmt(tmp, sizeof tmp, "%s.tmp", path);
    FILE *jf = fopen_check(tmp, "w");
    if (json_dumpf(root, jf, JSON_INDENT(2) | JSON_PRESERVE_ORDER) != 0) die("cannot write '%s'", tmp);
    fclose_check(jf, tmp);
    rename_check(tmp, path);
    json_decref(root);
    return non_finite;
}

void eval_print_documents(const EvalCell *cells, int n, int n_models, int n_contexts, const EvalDocRule *rule) {
    (void)n;
    for (int ci = 0; ci < n_contexts; ci++) {
        const EvalCell *c = &cells[ci * n_models]; /* the first policy's cell: every policy scores the same documents */
        if (!c->doc_index) continue;
        double mean = 0, mx = 0;
        for (int64_t d = 0; d < c->n_docs; d++) mean += c->doc_copy[d], mx = c->doc_copy[d] > mx ? c->doc_copy[d] : mx;
        mean /= c->n_docs > 0 ? (double)c->n_docs : 1.0;
        printf("documents at L = %lld: %lld (pick %s", (long long)c->context, (long long)c->n_docs, rule->pick);
        /* per input, in the order the inputs first appear */
        for (int64_t d = 0; c->doc_source && d < c->n_docs; d++) {
            int64_t k = 0, seen = 0;
            for (int64_t e = 0; e < c->n_docs; e++) {
                seen += e < d && strcmp(c->doc_source[e], c->doc_source[d]) == 0;
                k += strcmp(c->doc_source[e], c->doc_source[d]) == 0;
            }
            if (!seen) printf("%s %s %lld", d ? "," : ":", c->doc_source[d], (long long)k);
        }
        printf("); scored tokens copying an earlier %d-gram of the window: mean %.3f, max %.3f", DOC_COPY_NGRAM, mean,
               mx);
        if (rule->max_copy < 1)
            printf("; %lld passed over above --max-copy-share %g", (long long)c->skipped_copy, rule->max_copy);
        printf("\n");
    }
}

int eval_plot(const char *png, const EvalCell *cells, int n, int n_models, int n_contexts) {
    int per_policy = n_models * n_contexts, rows = n / per_policy;
    const char **row_names = xmalloc(sizeof(char *) * (size_t)rows);
    char(*cols)[64] = xmalloc(64 * (size_t)per_policy);
    const char **col_names = xmalloc(sizeof(char *) * (size_t)per_policy);
    double *v = xmalloc(sizeof(double) * (size_t)n), *lo = xmalloc(sizeof(double) * (size_t)n),
           *hi = xmalloc(sizeof(double) * (size_t)n);
    for (int p = 0; p < rows; p++) row_names[p] = cells[p * per_policy].policy;
    for (int j = 0; j < per_policy; j++) {
        const EvalCell *c = &cells[j];
        snprintf(cols[j], 64, "context %lld%s", (long long)c->context,
                 n_models == 2 ? (j % 2 ? ": after" : ": before") : "");
        col_names[j] = cols[j];
    }
    for (int i = 0; i < n; i++) v[i] = cells[i].ppl, lo[i] = cells[i].lo, hi[i] = cells[i].hi;
    int drawn = plot_bars_png(png, "kvcpt eval: perplexity of the last tokens per KV-cache policy",
                              "PPL (lower is better); whiskers: 95% bootstrap interval over documents", row_names, rows,
                              col_names, per_policy, v, lo, hi);
    free(row_names), free(cols), free(col_names), free(v), free(lo), free(hi);
    return drawn;
}

static double class_accuracy(const EvalCell *c, AnswerClass k) {
    return c->class_n[k] > 0 ? (double)c->class_top1[k] / (double)c->class_n[k] : NAN;
}

static void answers_text(char *v, size_t cap, const EvalCell *a, int n_models) {
    if (n_models == 2)
        snprintf(v, cap, "%.3f -> %.3f | %.3f -> %.3f", class_accuracy(&a[0], ANSWER_FIRST),
                 class_accuracy(&a[1], ANSWER_FIRST), class_accuracy(&a[0], ANSWER_REST),
                 class_accuracy(&a[1], ANSWER_REST));
    else snprintf(v, cap, "%.3f | %.3f", class_accuracy(&a[0], ANSWER_FIRST), class_accuracy(&a[0], ANSWER_REST));
}

void eval_print_answers(const EvalCell *cells, int n, int n_models, int n_contexts) {
    if (n == 0 || !cells[0].has_classes) return;
    printf("top-1 accuracy of the answers: the first value after a repeated marker (a jump to its record) | the "
           "values after it%s\n",
           n_models == 2 ? " (before -> after)" : "");
    print_table(cells, n, n_models, n_contexts, "@ ", ": first | rest", 31, answers_text);
    const EvalCell *c0 = &cells[0];
    printf("(%lld first and %lld later answers per policy and model; the other %lld scored tokens are random)\n\n",
           (long long)c0->class_n[ANSWER_FIRST], (long long)c0->class_n[ANSWER_REST],
           (long long)c0->class_n[ANSWER_NONE]);
}

int eval_plot_steps(const char *png, const EvalCell *cells, int n, int n_models, int n_contexts, int mi) {
    int per_policy = n_models * n_contexts, rows = n / per_policy;
    int64_t S = cells[0].last;
    PlotSeries *s = xcalloc((size_t)rows, sizeof *s);
    double *x = xmalloc(sizeof(double) * (size_t)S), *y = xmalloc(sizeof(double) * (size_t)(S * rows));
    for (int64_t i = 0; i < S; i++) x[i] = (double)(i + 1);
    int acc = cells[0].has_classes;
    for (int p = 0; p < rows; p++) {
        const EvalCell *c = &cells[p * per_policy + mi];
        for (int64_t i = 0; i < S; i++) y[p * S + i] = acc ? step_top1(c, i) : exp(step_mean_nll(c, i));
        s[p] = (PlotSeries){c->policy, x, y + p * S, S};
    }
    char title[256];
    snprintf(title, sizeof title, "kvcpt eval: %s per decode step (context %lld, %s)", acc ? "top-1 accuracy" : "PPL",
             (long long)cells[0].context, n_models == 2 ? (mi ? "after CPT" : "before CPT") : "one model");
    /* PPL on a log axis: one step's spike (a policy that dropped the key
     * the next token copies) would otherwise flatten every other curve */
    int drawn = plot_lines_png(png, title, "decode step", acc ? "top-1 accuracy over documents" : "PPL over documents",
                               s, rows, !acc);
    free(s), free(x), free(y);
    return drawn;
}
