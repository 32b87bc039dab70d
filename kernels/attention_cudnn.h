#ifndef KVCPT_ATTENTION_CUDNN_H
#define KVCPT_ATTENTION_CUDNN_H
/* The bf16 engine's attention through cuDNN's fused scaled-dot-product
 * attention (attn_impl cudnn, model/attn_impl.h), built on cuDNN's C graph
 * (backend) API, cudnn.h: the operation graph cudnn-frontend's SDPA node
 * lowers to (Q K^T, scale, causal mask by index comparison, softmax with
 * its statistics, P V; the backward's eight-product chain), handed to
 * cuDNN's heuristics, which pick the fused flash-attention engine.
 *
 * Same arguments and layouts as attention_forward_mma_bf16_cuda
 * (kernels/attention_mma.h): q (B, T, Hq, D), k and v (B, T, Hkv, D), out
 * like q, all bf16; lse (B, Hq, T) fp32, natural log of the scaled scores'
 * exp-sum; dq, dk, dv fp32, written (not accumulated). DEVICE pointers,
 * default stream, no synchronisation.
 *
 * The RefreshKV mask (the paper's rows; kernels/attention.h):
 *  - rows [0, L): one causal SDPA over q, k, v [0, L);
 *  - rows [L, T), the S suffix rows: per batch row and KV head the keys
 *    [TopK; L .. T-1] are gathered into a dense list of n = min(K, L) + S
 *    (kernels/attention_cudnn_gather.cu) and one SDPA runs the S rows over
 *    it with a bottom-right causal mask: suffix row i sees list entries
 *    0 .. n - S + i, i.e. every selected key and the local keys L .. L+i;
 *    its dK', dV' are scattered back and added into dk, dv.
 * The per-row records (mask_evict, mask_restride) are refused. cuDNN
 * writes dq, dk, dv in bf16 (the inputs' type), widened here to fp32.
 * D must be a multiple of 8 up to 128. cuDNN plans whose workspace
 * exceeds ATTN_CUDNN_WORKSPACE_CAP are passed over (refused when no other
 * engine configuration fits).
 *
 * Off unless asked for (attn_impl cudnn / KVCPT_ATTN=cudnn). Under the
 * emulator, tests/cuda_emu/cudnn_emu.c stands in for cuDNN: it checks
 * the graph's descriptors and runs the graph densely on the CPU. */
#include <stdint.h>

#include "attention.h"
#include "bf16.h"

#ifdef __cplusplus
extern "C" {
#endif
/* 1 when this build links cuDNN (cudnn.h was found beside CUDA). */
int attention_cudnn_built(void);
/* NULL when attn_impl cudnn can run this mask and head dim, else why not
 * (a sentence naming what to change). */
const char *attention_cudnn_unsupported(int64_t D, const RefreshMask *m);

void attention_forward_cudnn_bf16_cuda(bf16 *out, float *lse, const bf16 *q, const bf16 *k, const bf16 *v,
                                       const int32_t *sel, int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t D,
                                       const RefreshMask *m);
void attention_backward_cudnn_bf16_cuda(float *dq, float *dk, float *dv, const bf16 *dout, const bf16 *q, const bf16 *k,
                                        const bf16 *v, const bf16 *out, const float *lse, const int32_t *sel, int64_t B,
                                        int64_t T, int64_t Hq, int64_t Hkv, int64_t D, const RefreshMask *m);
/* NULL when cuDNN builds plans for the forward and backward of this shape
 * and mask (loading cuDNN and caching the plans), else why not, without
 * stopping the program: attention_cudnn_unsupported's reasons, or cuDNN's
 * refusal (no library, no engine for the graph). The entries above stop
 * the program with the same message instead. */
const char *attention_cudnn_probe(int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t D, const RefreshMask *m);
/* The region the calls carve their fixed-size buffers from
 * (attention_cudnn_scratch_layout, kernels/attention_cudnn_size.h, for the
 * call's shape and mask): bytes of DEVICE memory at base, the caller's
 * (the engine's, which its memory plan counts; model/decoder_cuda.c), used
 * until another is bound; a call whose layout needs more stops naming both
 * sizes. NULL: the module allocates its own, grown on demand and kept
 * until attention_cudnn_release. */
void attention_cudnn_use_scratch(void *base, int64_t bytes);
/* Bytes of cuDNN workspace the module holds now (the largest a plan asked
 * for, at most ATTN_CUDNN_WORKSPACE_CAP; 0 after release). */
int64_t attention_cudnn_workspace_bytes(void);
/* Frees the handle, the cached plans, the workspace and the module's own
 * region (not a bound one). */
void attention_cudnn_release(void);

/* Test hook: the same path with a planted bug, so the parity test shows it
 * catches each. */
typedef enum {
    ATTN_CUDNN_OK = 0,
    ATTN_CUDNN_BUG_SCATTER = 1,   /* backward: the suffix's dK', dV' scattered one list entry off */
    ATTN_CUDNN_BUG_TOP_LEFT = 2,  /* suffix rows masked top-left (row i sees list entries 0..i) */
    ATTN_CUDNN_BUG_SCALE = 3,     /* the graph's scale 1/D instead of 1/sqrt(D) */
    ATTN_CUDNN_BUG_K_STRIDE = 4,  /* K declared with the heads' stride and the positions' swapped */
} AttnCudnnBug;
void attention_cudnn_plant(AttnCudnnBug bug);
#ifdef __cplusplus
}
#endif
#endif
