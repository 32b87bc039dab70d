#ifndef KVCPT_REFRESH_MASK_H
#define KVCPT_REFRESH_MASK_H
/* The RefreshKV training mask's fields and geometry: which rows are
 * masked, how many keys each sees, how long the selection records are.
 * What the mask means for attention is described in kernels/attention.h;
 * the CPU attention (attention.c), its oracle (attention_ref.c) and the
 * CUDA side's sizes (attention_cuda_size.c) all read it from here. */
#include <stdint.h>

#include "refresh_select.h"

typedef struct {
    int enabled;         /* 0: ordinary causal attention */
    int64_t L;           /* prefill length */
    int64_t K;           /* kept prefill keys per KV head, K >= L keeps all (evict: kept + local keys) */
    int64_t pool_kernel; /* odd max-pool width (stride 1, clipped at the edges); 1 = none */
    GroupAgg agg;        /* how a GQA group's query heads combine their scores */
    int evict;           /* 1: K bounds kept + local keys per row, as the eval's cache (kernels/attention.h) */
    int64_t restride;    /* r > 0: full rows that re-select at L-1 + r*m, m >= 1; 0: none */
    int64_t S;           /* refresh positions after the prefill: a training sequence is L + S tokens
                          * (the model's forward checks it; the attention ops take any T) */
} RefreshMask;

/* Number of selected keys per (batch row, KV head): min(K, L). */
int64_t refresh_num_selected(const RefreshMask *m);
/* 1 when positions >= L exist, i.e. the selection matters for this T. */
int refresh_active(const RefreshMask *m, int64_t T);
/* Query heads per GQA group whose scores the selection reads: 1 with
 * GROUP_AGG_FIRST, else Hq / Hkv. */
int64_t refresh_selection_heads(const RefreshMask *m, int64_t Hq, int64_t Hkv);
/* 1 when sel holds one record per row p >= L (evict or restride set). */
int refresh_per_row(const RefreshMask *m);
/* Most keys a listed row sees (W in kernels/attention.h): min(K, T-1) + 1
 * with evict, else min(K + T-1 - L, T-1) + 1. */
int64_t refresh_row_width(const RefreshMask *m, int64_t T);
/* Keys row p attends to: p + 1 for causal and full rows, else as
 * kernels/attention.h says (the paper's rows: min(K, L) + p - L + 1).
 * Needs the mask enabled. */
int64_t refresh_row_count(const RefreshMask *m, int64_t p);
/* int32 entries of sel per (batch row, KV head) at sequence length T:
 * refresh_num_selected, or (T - L) * (1 + W) records when refresh_per_row. */
int64_t refresh_sel_len(const RefreshMask *m, int64_t T);
/* 1 when row p is a full row (restride: p = L-1 + r*m, m >= 1). */
int refresh_full_row(const RefreshMask *m, int64_t p);
/* Row p (not a full row) of the epoch that began at `since` with nk
 * selected keys: how many of them it keeps (*c) and its first local key. */
void refresh_row_span(const RefreshMask *m, int64_t p, int64_t since, int64_t nk, int64_t *c, int64_t *first_local);
/* The mask that is off: ordinary causal attention (no pooling, max
 * aggregation, should it be enabled later). */
RefreshMask refresh_mask_off(void);
/* Checks L, K, kernel, evict, restride; dies naming the field. */
void refresh_mask_validate(const RefreshMask *m, const char *origin);
#endif
