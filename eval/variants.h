#ifndef KVCPT_EVAL_VARIANTS_H
#define KVCPT_EVAL_VARIANTS_H
/* The policy variants one evaluation runs: the policies a list names, in
 * the registry's order (eval/policy.c), each with the run's options, and
 * refreshkv once per stride asked for. */
#include <stdint.h>

#include "policy.h"

/* The most variants a run holds. */
#define EVAL_MAX_VARIANTS 32

typedef struct {
    const char *name;  /* its registry name */
    PolicyOptions opt; /* every option but the budget, which depends on the context (EvalSettings.budget) */
} EvalVariant;

/* Fills v[0..n) from `policies` ("all", or a comma list of registry names:
 * an unknown name dies listing the known ones), each variant with the
 * options base; refreshkv once per qc[i] (a dynamic variant, QC stride
 * qc[i]) and once per fixed[i] (a fixed-stride variant). Returns n >= 1;
 * dies naming --policies when it selects nothing. */
int eval_expand_variants(EvalVariant *v, int cap, const char *policies, const PolicyOptions *base, const int64_t *qc,
                         int nqc, const int64_t *fixed, int nfix);
#endif
