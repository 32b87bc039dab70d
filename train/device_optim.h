#ifndef KVCPT_DEVICE_OPTIM_H
#define KVCPT_DEVICE_OPTIM_H
/* The optimizer on the GPU (config optim_device=1, implied by precision
 * bf16sr): the CUDA engine's parameters are the only current copy, the
 * 8-bit AdamW states live beside them, and a step moves nothing over the
 * bus but the losses, the clipping norm's chunk sums and the verdict of
 * the gradient check. The host's master copy and optimizer are refreshed
 * only for checkpoints and the final model. One rank: sharded runs keep an
 * fp32 master shard beside the engine on each GPU (parallel/fsdp_cuda.h).
 *
 * With bf16 weights there is no fp32 master at all, so the matrices must
 * be rounded stochastically (optim/adamw_math.h) or updates below half a
 * bf16 step would be lost; the embedding and norms stay fp32. */
#include <stdint.h>

#include "../parallel/shard_plan.h"
#include "../model/decoder_cuda.h"
#include "../optim/optimizer.h"

typedef struct DeviceOptim DeviceOptim;

/* host: the single rank's optimizer (segments at layout offsets, as a
 * world-of-one ShardPlan gives); stochastic: round bf16 matrices with
 * random bits keyed by seed (fp32 engines must pass 0). */
DeviceOptim *device_optim_create(const DecoderCuda *g, const Optimizer *host, const ShardPlan *plan, int stochastic,
                                 uint64_t seed);
void device_optim_free(DeviceOptim *d);
/* Host master parameters (layout order) and optimizer states -> device. */
void device_optim_push(DeviceOptim *d, DecoderCuda *g, const float *master, const Optimizer *host);
/* Device -> host master and states (before a checkpoint). */
void device_optim_pull(const DeviceOptim *d, const DecoderCuda *g, float *master, Optimizer *host);
/* Sum of squares of the engine's gradients (clip.h's chunks). */
double device_optim_grad_sum_squares(const DecoderCuda *g);
/* One AdamW step on the engine's gradients; 1 when a gradient is unusable
 * (nothing changed, a warning printed). */
int device_optim_step(DeviceOptim *d, DecoderCuda *g, const AdamWHyper *h, int64_t step);
int64_t device_optim_bytes(const DeviceOptim *d);
#endif
