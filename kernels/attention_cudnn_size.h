#ifndef KVCPT_ATTENTION_CUDNN_SIZE_H
#define KVCPT_ATTENTION_CUDNN_SIZE_H
/* The cuDNN attention's scratch (kernels/attention_cudnn.c), as plain C in
 * every build, so that the memory plan (train/cuda_mem_plan.c, `kvcpt
 * plan`) and the engine that carves it (model/decoder_cuda.c) count the same
 * bytes without cuDNN or a GPU. */
#include <stdint.h>

#include "refresh_mask.h"

/* The most workspace a cuDNN plan may ask for: a plan is built only from
 * an engine configuration whose workspace fits (the next one cuDNN's
 * heuristics rank is tried), and a graph for which none fits is refused,
 * naming this cap. The memory plan counts the cap among the temporaries
 * (CudaMemPlan.workspace): only cuDNN knows a plan's workspace, at run time.
 * Why a cap and not "not counted": a plan that cannot say how much memory
 * a run needs cannot stop it before the first step; with the cap, the
 * trainer's start-up check and `kvcpt plan` hold the worst case, and a
 * card whose cuDNN wants more says so at the probe, before anything
 * trains. The graphs hand cuDNN its statistics and dQ accumulator as their
 * own tensors (below), so what its fused engines add should be small. */
#define ATTN_CUDNN_WORKSPACE_CAP ((int64_t)128 << 20)

/* The fixed-size buffers of one call of shape (B, T, Hq, Hkv, D) under
 * mask m, as byte offsets into one region (each 256-byte aligned; cuDNN
 * wants 16): the bf16 gradients cuDNN writes before they are widened to
 * fp32 (gq (B, T, Hq, D), gk and gv (B, T, Hkv, D)), the backward's softmax
 * sums (B, Hq, rows) and fp32 dQ accumulator (B, Hq, rows, D) with rows the
 * larger of the two calls' query rows (L, and S = T - L), and under an
 * active mask the gathered suffix keys and values and their gradients (kg,
 * vg, dkg, dvg: B, Hkv, min(K, L) + S, D, bf16) and the suffix's dense lse
 * (B, Hq, S). bytes is the region's size; a buffer of no elements takes none. */
typedef struct {
    int64_t gq, gk, gv, ssum, dqacc, kg, vg, dkg, dvg, lse;
    int64_t bytes;
} AttnCudnnScratch;

AttnCudnnScratch attention_cudnn_scratch_layout(const RefreshMask *m, int64_t B, int64_t T, int64_t Hq, int64_t Hkv,
                                                int64_t D);
#endif
