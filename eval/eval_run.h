#ifndef KVCPT_EVAL_RUN_H
#define KVCPT_EVAL_RUN_H
/* One evaluation (`kvcpt eval`, docs/eval.md), from settings the command
 * line has parsed and checked (cli/cmd_eval.c): for each model, each
 * context L, every document of the split that is picked at L through every
 * policy variant, the perplexity of its last S tokens; then the tables on
 * stdout, eval.json (rewritten after each context, so that a failure later
 * keeps what is done), the plots and the --dump file. What only the data
 * or a model can tell (a context no document fills, a budget outside
 * [1, L], a window past what a model's RoPE covers, an output inside an
 * input) is checked here, before any model is loaded. */
#include <stdint.h>

#include "variants.h"

/* The most contexts a run holds. */
#define EVAL_MAX_CONTEXTS 8

typedef struct {
    const char *const *models; /* (n_models) model directories, GGUF files or presets */
    int n_models;              /* 1, or 2 for before -> after */
    const char *data, *split;  /* the prepared data directory and its split (train, dev, test, all) */
    const int64_t *contexts;   /* (n_contexts) the prefill lengths L, at most EVAL_MAX_CONTEXTS */
    int n_contexts;
    int64_t last;              /* S: scored tokens at the end of each document */
    const char *budget;        /* K per KV head at each context: "K" or "L/N" (policy_budget) */
    const EvalVariant *variants; /* (n_variants) eval_expand_variants */
    int n_variants;
    int pick;                  /* DOC_PICK_FIRST or DOC_PICK_INTERLEAVE (eval/doc_pick.h) */
    double max_copy;           /* the copy-share limit in [0, 1]; 1: none */
    int64_t max_docs;          /* documents per context at most; 0: all */
    int64_t batch;             /* documents decoded together (the results do not depend on it) */
    int64_t boot;              /* bootstrap resamples of the 95% intervals */
    const char *rope_scaling;  /* every model's RoPE scaling replaced by it (rope_scaling_override); NULL: none */
    int allow_beyond;          /* run a context past what a model's RoPE covers, labelled BEYOND */
    const char *dump;          /* the JSON lines of kept keys and NLLs; NULL: none */
    const char *out;           /* the directory of eval.json and the plots */
    const char *device;        /* "cpu" or "cuda"; NULL: cuda when a GPU is visible (backend_resolve) */
    int quiet;                 /* no progress on stderr */
    int argc;                  /* the command line, as eval.json records it (argv[0] = "eval") */
    char **argv;
    double t0;                 /* when the command started (now_seconds), for run.wall_seconds */
} EvalSettings;

/* Runs the evaluation; dies, after writing the outputs, when a perplexity
 * is not finite. */
void eval_run(const EvalSettings *s);
#endif
