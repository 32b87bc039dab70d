#ifndef KVCPT_EVAL_REPORT_H
#define KVCPT_EVAL_REPORT_H
/* Results of `kvcpt eval`: one cell per (policy, context, model) with the
 * per-document NLL sums, aggregated into PPL with a 95% bootstrap interval,
 * and printed as a table, JSON and a PNG bar chart. */
#include <stdint.h>

#include "../data/answers.h"
#include "rope_context.h"

typedef struct {
    const char *policy;   /* label with settings */
    const char *model;    /* model path */
    int64_t context, budget, last;
    int64_t n_docs;
    double *doc_nll;      /* sum of NLL over the scored tokens of each document */
    double ppl, lo, hi;   /* exp(mean NLL over all tokens) and its 95% interval */
    double ms_per_token, kv_bytes_per_token;
    char stride_info[512];/* refreshkv: effective stride per layer */
    /* per scored token, summed over the documents */
    double *step_nll;     /* (last) */
    int64_t *step_top1;   /* (last) documents whose target at that step was the argmax */
    int has_classes;      /* the data marks answers (data/answers.h): the class sums below are filled */
    double class_nll[ANSWER_CLASSES];
    int64_t class_n[ANSWER_CLASSES], class_top1[ANSWER_CLASSES];
    RopeContext rope;     /* the RoPE the window of context + last tokens ran with */
} EvalCell;

/* Fills ppl, lo, hi from doc_nll (documents resampled with replacement). */
void eval_cell_finish(EvalCell *c, int64_t n_boot, uint64_t seed);
/* Rows = policies, columns = context x model ("before -> after" with two models). */
void eval_print_table(const EvalCell *cells, int n, int n_models, int n_contexts);
/* A line per context and model that ran with a RoPE scaling past the
 * trained context, or with --rope-scaling, or beyond (the table's header
 * tags them). */
void eval_print_rope_notes(const EvalCell *cells, int n, int n_models, int n_contexts);
/* Returns the number of cells whose perplexity is not finite (written as
 * null with "finite": false). */
int eval_write_json(const char *path, const EvalCell *cells, int n, int64_t skipped_short, const char *device);
/* The bar chart of every cell's perplexity. Returns 1 when the PNG was
 * drawn, 0 after the plot code's warning saying why not. */
int eval_plot(const char *png, const EvalCell *cells, int n, int n_models, int n_contexts);
/* Top-1 accuracy per answer class (policy rows, before -> after with two
 * models); prints nothing when the data marks no answers. */
void eval_print_answers(const EvalCell *cells, int n, int n_models, int n_contexts);
/* One curve per policy over the decode steps of the first context and
 * model `mi`: top-1 accuracy when the data marks answers (the scored token
 * at a step is an answer in some documents only), else PPL per step.
 * Returns 1 when the PNG was drawn, 0 otherwise (as eval_plot). */
int eval_plot_steps(const char *png, const EvalCell *cells, int n, int n_models, int n_contexts, int mi);
#endif
