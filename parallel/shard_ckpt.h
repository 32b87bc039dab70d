#ifndef KVCPT_SHARD_CKPT_H
#define KVCPT_SHARD_CKPT_H
/* Sharded training checkpoints on top of checkpoints/ckpt.h: every rank
 * writes its pieces ("pieces": n_units x [begin, end) of the flat layout),
 * its master parameters ("params") and its optimizer state ("optim"); rank
 * 0 writes the manifest once every rank file exists.
 *
 * Loading re-shards: a run with M ranks reads a checkpoint written by N.
 * Each rank rebuilds every old rank's plan (checked against the stored
 * pieces), loads that rank's optimizer through its own validated reader,
 * and copies the parameters and optimizer states (8-bit codes element by
 * element, absmax block by block; cuts never split a block) that overlap
 * its own pieces. So a resume with any rank count continues exactly. */
#include <stdint.h>

#include "../checkpoints/ckpt.h"
#include "../optim/optimizer.h"
#include "comm.h"
#include "shard_plan.h"

/* Adds the "pieces", "params" and "optim" sections of this rank. */
void shard_ckpt_add(CkptWriter *w, const ShardPlan *p, const float *master, const Optimizer *o);
/* Finishes this rank's file; rank 0 writes the manifest (and prunes) once all
 * ranks have finished theirs. Collective. */
void shard_ckpt_commit(Comm *c, CkptWriter *w, uint64_t layout_hash, int keep_last);
/* Fills master and o (this rank's pieces under p) from step_dir, whatever
 * rank count wrote it. */
void shard_ckpt_restore(const char *step_dir, const ShardPlan *p, float *master, Optimizer *o, uint64_t layout_hash);
/* Optimizer for rank r's shard under p (segments from shard_segments). */
Optimizer *shard_optimizer_create(OptimKind kind, const ShardPlan *p, int r);

#endif
