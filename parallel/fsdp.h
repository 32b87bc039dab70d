#ifndef KVCPT_FSDP_H
#define KVCPT_FSDP_H
/* ZeRO-3 over a Comm: each rank keeps the master copy of its pieces
 * (ShardPlan) and the sum of its pieces' gradients; a unit's parameters are
 * all-gathered into the model's working buffer just before the unit runs,
 * and its gradients are reduce-scattered into the owners as soon as the
 * unit's backward is done.
 *
 * The reduce-scatter is deterministic and independent of the rank count:
 * micro-batches run in rounds, rank r taking micro-batch round * W + r; an
 * all-to-all brings every rank's piece-gradient to the piece's owner, which
 * adds them in rank order. So the owner's sum is g_0 + g_1 + g_2 + ... in
 * micro-batch order, exactly what one rank adding its micro-batches one by
 * one computes. The gradient norm adds per-block sums in global block order
 * (see shard_plan.h), so it is the same number for any rank count too.
 *
 * On CPU the model's working buffers are full size (the CPU path is for
 * exactness tests and small models); the GPU engine is meant to hold only
 * the units in flight. */
#include <stdint.h>

#include "../model/decoder.h"
#include "comm.h"
#include "shard_plan.h"

typedef struct {
    Comm *comm;
    ShardPlan plan;
    float *master;      /* plan.local_numel: this rank's parameters */
    float *grad_sum;    /* plan.local_numel: sum over micro-batches of the gradients */
    float *work_params, *work_grads; /* the model's full-size buffers */
    float *exchange;    /* world * largest piece: all-to-all receive buffer */
    int reshard_after_forward;
    int prefetched;     /* unit whose gather runs in the background, or -1 */
    int64_t gathers, reduces; /* collectives issued (for the log) */
    ShardSegment *segs;
    int nseg;
    int64_t *counts, *displs, *scounts, *sdispls, *rcounts, *rdispls; /* world each */
} Fsdp;

/* Takes this rank's pieces of m's current parameters as the master copy
 * (every rank must hold the same full parameters at this point) and
 * installs the hooks on m. */
void fsdp_init(Fsdp *f, Comm *comm, Decoder *m, int reshard_after_forward);
void fsdp_free(Fsdp *f, Decoder *m);

/* Blocking gather (waits for a background one first). */
void fsdp_gather_unit(Fsdp *f, int unit);
/* Every unit: the working buffer then holds the whole current model. */
void fsdp_gather_all(Fsdp *f);
void fsdp_zero_grad_sum(Fsdp *f);
/* Adds this round's gradients of unit (one micro-batch per rank) into the owners' sums. */
void fsdp_reduce_unit(Fsdp *f, int unit);
/* Sum of squares of grad_sum over all ranks, in global block order. */
double fsdp_grad_sum_squares(Fsdp *f);
/* All ranks' values of one double, in rank order (out: world entries). */
void fsdp_gather_f64(Fsdp *f, const double *mine, int64_t n_mine, double *out);

#endif
