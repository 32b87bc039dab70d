#ifndef KVCPT_FSDP_CUDA_H
#define KVCPT_FSDP_CUDA_H
/* ZeRO-3 on the GPUs: parallel/fsdp.h's protocol with every buffer in device
 * memory and the collectives on NCCL (parallel/comm.h's nccl backend).
 *
 * Each rank's GPU holds its shard (ShardPlan) of the fp32 master, of the
 * gradient sum and of the 8-bit AdamW states. A unit's parameters are
 * all-gathered from the shards into the engine's working weights just
 * before the unit runs (the next unit's gather started in the background
 * on the communicator's stream, joined with events); its gradient is sent
 * to the owners as soon as backward finishes it (an all-to-all of the
 * pieces), and each owner adds the W pieces in rank order
 * (kernels/shard_accumulate.h) — the same float additions the host path
 * makes, so any rank count gives the one-rank numbers bit for bit. The
 * clipping norm is an exact fixed-point sum of block sums
 * (optim/norm_fixed.h), and the 8-bit AdamW step runs on each shard on its
 * device. Per step only the losses, the norm's two scalars and the
 * optimizer's verdict cross to the host.
 *
 * The engine streams its layers (decoder_cuda_create_streamed; config
 * reshard_after_forward=1, the default): only the
 * embedding, final norm and lm_head are resident (gathered once per step);
 * each layer is gathered into one of two weight slots just before it runs,
 * in the forward and again in the backward unless its slot still holds it,
 * and its gradient goes to the one gradient slot, sent to its owners as
 * soon as that layer's backward is done. Every forward and backward is
 * therefore collective: all ranks must run the same number of them (the
 * trainer's dev evaluation pads with forwards whose loss it drops). With a
 * whole engine (reshard_after_forward=0) every unit is gathered once per
 * step, on its first use, and stays in place for the step's other
 * micro-batches and its backward: fewer gathers, the whole model's weights
 * and one micro-batch's gradient on every GPU. */
#include <stdint.h>

#include "../model/decoder_cuda.h"
#include "../optim/optimizer.h"
#include "comm.h"
#include "fsdp.h"
#include "shard_plan.h"

/* Device bytes of one rank's shard buffers (every build, parallel/fsdp_cuda_bytes.c: the memory plan). */
typedef struct {
    int64_t master;   /* fp32, plan.local_numel */
    int64_t grad_sum; /* fp32, plan.local_numel */
    int64_t exchange; /* fp32, world x the largest piece: the all-to-all's receive buffer */
    int64_t stage;    /* bf16 engine: the largest unit in bf16 (a gathered unit before it is placed) and this
                       * rank's largest piece rounded to bf16 (what it sends); 0 in fp32 */
    int64_t blocks;   /* f64, one per norm block of the shard */
    int64_t optim;    /* the 8-bit AdamW states of the shard's segments */
    int64_t total;
} FsdpCudaBytes;
FsdpCudaBytes fsdp_cuda_bytes(const ShardPlan *p, int bf16_weights, OptimKind optim);
/* Its optim: the device optimizer's bytes for rank p->rank's segments (also
 * the whole model's, with a world-of-one plan: train/cuda_mem_plan.h). */
int64_t fsdp_cuda_optim_bytes(const ShardPlan *p, OptimKind optim);

typedef struct FsdpCuda FsdpCuda;

/* Over the host sharding's plan (f: its plan and segments; the host master
 * and optimizer stay the checkpoint's staging) and the engine g (streamed or whole),
 * whose unit hooks it installs. comm must be on NCCL (device buffers). */
FsdpCuda *fsdp_cuda_create(Fsdp *f, DecoderCuda *g, const Optimizer *host_opt);
void fsdp_cuda_free(FsdpCuda *d, DecoderCuda *g);
/* Host shard (master, states) -> device, after setup or a restore; every
 * unit is gathered again on its next use. */
void fsdp_cuda_push(FsdpCuda *d, const float *master, const Optimizer *host_opt);
/* Device shard -> host (a checkpoint, the final model), into the host
 * sharding's master and host_opt's states, page-locked at creation (they
 * must outlive the FsdpCuda). */
void fsdp_cuda_pull(const FsdpCuda *d, float *master, Optimizer *host_opt);
void fsdp_cuda_zero_grad_sum(FsdpCuda *d);
/* Sum of squares of the gradient sum over all ranks: the same bits for any
 * rank count. */
double fsdp_cuda_grad_sum_squares(FsdpCuda *d);
/* One AdamW step of every shard, unless any rank's shard holds an unusable
 * gradient: then nothing changes anywhere and 1 is returned on every rank. */
int fsdp_cuda_step(FsdpCuda *d, const AdamWHyper *h, int64_t step);
/* Device bytes held, and the collectives so far: their number and this
 * rank's bytes received from other ranks by gathers, sent to other ranks by
 * reduce-scatters. */
int64_t fsdp_cuda_device_bytes(const FsdpCuda *d);
void fsdp_cuda_traffic(const FsdpCuda *d, int64_t *gathers, int64_t *gather_bytes, int64_t *reduces,
                       int64_t *reduce_bytes);
#endif
