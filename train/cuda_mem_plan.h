#ifndef KVCPT_CUDA_MEM_PLAN_H
#define KVCPT_CUDA_MEM_PLAN_H
/* Device bytes one rank's CUDA training engine needs, as the engine is
 * today: the whole model on each GPU (sharding is host-staged), so the
 * figure does not shrink with the rank count. Arithmetic from the same size
 * functions the engine allocates with (model/llama_cuda.h, the optimizer's
 * state counts), so `kvcpt plan --engine cuda` and the trainer's start-up
 * check agree with what llama_cuda_bytes and device_optim_bytes report.
 * In every build (no CUDA needed to plan). */
#include <stdint.h>

#include "../kernels/attention.h"
#include "../model/config.h"
#include "../model/llama_cuda.h"
#include "../optim/optimizer.h"
#include "train_config.h"
#include "train_mode.h"

typedef struct {
    LlamaCudaPrecision precision;
    int recompute;          /* one activation set instead of num_layers */
    int optim_device;       /* 8-bit (or fp32) AdamW states on the GPU, one rank */
    OptimKind optim;
    int64_t micro_batch, T; /* the largest forward: micro_batch sequences of T tokens */
    RefreshMask mask;       /* enabled = 0: no mask */
} CudaMemInputs;

typedef struct {
    int64_t params, wbf16, grads, rope; /* held from setup (llama_cuda_create, the first forward's RoPE tables) */
    int64_t acts;       /* allocated by the first forward (activations, selections, streams, scratch) */
    int64_t optim;      /* the device optimizer's states; 0 when it runs on the host */
    int64_t counted;    /* all of the above: llama_cuda_bytes + device_optim_bytes after a step */
    /* Not counted by the engine: the cuBLASLt workspace, the bf16 engine's
     * cast buffers (kept at their largest), and the largest temporary one
     * kernel launcher allocates and frees (attention backward, RefreshKV
     * selection, embedding backward's rows; an estimate: cub's sort space
     * and the small per-norm partial sums are left out). */
    int64_t workspace;
    int64_t total;      /* counted + workspace: what the GPU must have free */
} CudaMemPlan;

CudaMemPlan cuda_mem_plan(const LlamaConfig *c, const CudaMemInputs *in);

/* A training configuration's inputs (the mode resolved from it: precision
 * and optimizer placement); sequences are L + S tokens, micro_batch of them. */
CudaMemInputs cuda_mem_inputs_from_train(const TrainConfig *c, TrainMode mode);

/* One line per figure (GiB and bytes) to f, each prefixed with indent. */
#include <stdio.h>
void cuda_mem_plan_print(FILE *f, const CudaMemPlan *p, const char *indent);
#endif
