#include "report.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/plot.h"
#include "../common/rng.h"
#include "../common/util.h"
#include "../kernels/blas.h"

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

void eval_cell_finish(EvalCell *c, int64_t n_boot, uint64_t seed) {
    double tot = 0;
    for (int64_t d = 0; d < c->n_docs; d++) tot += c->doc_nll[d];
    double per_doc = (double)c->last;
    c->ppl = exp(tot / (per_doc * (double)c->n_docs));
    double *b = xmalloc(sizeof(double) * (size_t)n_boot);
    Rng r;
    rng_seed(&r, seed);
    for (int64_t i = 0; i < n_boot; i++) {
        double s = 0;
        for (int64_t d = 0; d < c->n_docs; d++) s += c->doc_nll[rng_u64(&r) % (uint64_t)c->n_docs];
        b[i] = exp(s / (per_doc * (double)c->n_docs));
    }
    qsort(b, (size_t)n_boot, sizeof(double), cmp_double);
    c->lo = b[(int64_t)(0.025 * (double)(n_boot - 1))];
    c->hi = b[(int64_t)(0.975 * (double)(n_boot - 1))];
    free(b);
}

/* cells are ordered policy-major, then context, then model */
void eval_print_table(const EvalCell *cells, int n, int n_models, int n_contexts) {
    int per_policy = n_models * n_contexts;
    printf("\n%-50s", "policy");
    for (int c = 0; c < n_contexts; c++) {
        char h[64];
        snprintf(h, sizeof h, "PPL @ %lld%s", (long long)cells[c * n_models].context,
                 n_models == 2 ? " (before -> after)" : " [95% CI]");
        printf(" | %-30s", h);
    }
    printf("\n");
    for (int i = 0; i < 50 + n_contexts * 33; i++) putchar('-');
    printf("\n");
    for (int p = 0; p < n / per_policy; p++) {
        printf("%-50s", cells[p * per_policy].policy);
        for (int c = 0; c < n_contexts; c++) {
            const EvalCell *a = &cells[p * per_policy + c * n_models];
            char v[96];
            if (n_models == 2)
                snprintf(v, sizeof v, "%.3f -> %.3f", a[0].ppl, a[1].ppl);
            else
                snprintf(v, sizeof v, "%.3f [%.3f, %.3f]", a[0].ppl, a[0].lo, a[0].hi);
            printf(" | %-30s", v);
        }
        printf("\n");
    }
    printf("\n");
}

void eval_write_json(const char *path, const EvalCell *cells, int n, int64_t skipped_short, const char *device) {
    json_t *arr = json_array();
    for (int i = 0; i < n; i++) {
        const EvalCell *c = &cells[i];
        json_t *docs = json_array();
        for (int64_t d = 0; d < c->n_docs; d++) json_array_append_new(docs, json_real(exp(c->doc_nll[d] / (double)c->last)));
        json_t *o = json_pack("{s:s,s:s,s:I,s:I,s:I,s:I,s:f,s:[f,f],s:f,s:f,s:o}", "policy", c->policy, "model",
                              c->model, "context", (json_int_t)c->context, "budget", (json_int_t)c->budget, "last",
                              (json_int_t)c->last, "documents", (json_int_t)c->n_docs, "ppl", c->ppl, "ppl_ci95",
                              c->lo, c->hi, "decode_ms_per_token", c->ms_per_token, "kv_bytes_per_token",
                              c->kv_bytes_per_token, "ppl_per_document", docs);
        if (c->stride_info[0]) json_object_set_new(o, "effective_stride_per_layer", json_loads(c->stride_info, 0, NULL));
        json_array_append_new(arr, o);
    }
    /* the BLAS beside the device: another core type may give other bits */
    json_t *root = json_pack("{s:s,s:o,s:o,s:I}", "device", device, "blas", blas_info_json(), "results", arr,
                             "documents_skipped_too_short", (json_int_t)skipped_short);
    if (!root) die("cannot build the JSON report for '%s'", path);
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    if (json_dump_file(root, tmp, JSON_INDENT(2) | JSON_PRESERVE_ORDER) != 0) die("cannot write '%s'", tmp);
    rename_check(tmp, path);
    json_decref(root);
}

void eval_plot(const char *png, const EvalCell *cells, int n, int n_models, int n_contexts) {
    int per_policy = n_models * n_contexts, rows = n / per_policy;
    const char **row_names = xmalloc(sizeof(char *) * (size_t)rows);
    char(*cols)[64] = xmalloc(64 * (size_t)per_policy);
    const char **col_names = xmalloc(sizeof(char *) * (size_t)per_policy);
    double *v = xmalloc(sizeof(double) * (size_t)n);
    for (int p = 0; p < rows; p++) row_names[p] = cells[p * per_policy].policy;
    for (int j = 0; j < per_policy; j++) {
        const EvalCell *c = &cells[j];
        snprintf(cols[j], 64, "%lld %s", (long long)c->context,
                 n_models == 2 ? (j % 2 ? "after" : "before") : "");
        col_names[j] = cols[j];
    }
    for (int i = 0; i < n; i++) v[i] = cells[i].ppl;
    plot_bars_png(png, "kvcpt eval: perplexity of the last tokens per KV-cache policy", "PPL", row_names, rows,
                  col_names, per_policy, v);
    free(row_names), free(cols), free(col_names), free(v);
}
