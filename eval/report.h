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
    int variant;          /* index of its policy variant in eval.json's run.policies */
    int64_t context, budget, last;
    int64_t n_docs;
    double *doc_nll;      /* sum of NLL over the scored tokens of each document */
    const int64_t *doc_index;      /* (n_docs) each document's index in the split, in doc_nll's order */
    const double *doc_copy;        /* (n_docs) the share of its scored tokens that copy (eval/doc_pick.h) */
    const char *const *doc_source; /* (n_docs) its input as the manifest records it; NULL: not recorded */
    int64_t skipped_copy;          /* documents passed over for a copy share above the limit */
    double ppl, lo, hi;   /* exp(mean NLL over all tokens) and its 95% interval */
    /* the second model's cell of a before -> after run: after/before per
     * document, the geometric mean and its 95% paired bootstrap interval */
    int has_ratio;        /* both models scored the same documents: the three below are filled */
    double ratio, ratio_lo, ratio_hi;
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
/* Fills after's ratio fields against before, the same policy and context
 * of the first model: per document exp((NLL_after - NLL_before) / S), their
 * mean of logs (so the ratio of the two PPLs) and its interval from
 * resampling documents, the pair of a document together. has_ratio stays 0
 * when the two cells did not score the same documents in the same order. */
void eval_cell_ratio(EvalCell *after, const EvalCell *before, int64_t n_boot, uint64_t seed);
/* Rows = policies, columns = context x model ("before -> after" with two models). */
void eval_print_table(const EvalCell *cells, int n, int n_models, int n_contexts);
/* How the documents were chosen, for eval.json and the summary lines. */
typedef struct {
    int64_t skipped_short; /* at the first context: documents passed over as too short */
    const char *pick;      /* "first" or "interleave" (eval/doc_pick.h) */
    double max_copy;       /* the copy-share limit; 1: none */
} EvalDocRule;

/* A line per context and model that ran with a RoPE scaling past the
 * trained context, or with --rope-scaling, or beyond (the table's header
 * tags them). */
void eval_print_rope_notes(const EvalCell *cells, int n, int n_models, int n_contexts);
/* Returns the number of cells whose perplexity is not finite (written as
 * null with "finite": false). `run` (eval/provenance.h) is written as the
 * "run" field, how the file was made; it stays the caller's. */
struct json_t;
int eval_write_json(const char *path, const EvalCell *cells, int n, const EvalDocRule *rule, const char *device,
                    struct json_t *run);
/* Per context, the first model's documents: how many from each input, the
 * share of scored tokens that copy, and those passed over. */
void eval_print_documents(const EvalCell *cells, int n, int n_models, int n_contexts, const EvalDocRule *rule);
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
