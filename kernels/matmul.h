#ifndef KVCPT_MATMUL_H
#define KVCPT_MATMUL_H
/* Linear layers in the Hugging Face weight layout: weight is (OC, IC) and
 * out = inp @ weight^T. The CPU path calls BLAS (sgemm, fp32) through
 * blas_sgemm, whose bits do not depend on the thread count. */
#include <stdint.h>

#include "bf16.h"

/* The cuBLASLt workspace the CUDA launchers allocate once (Hopper kernels
 * want 32 MiB); memory plans count it. */
#define MATMUL_CUDA_WORKSPACE_BYTES ((int64_t)32 << 20)

/* out (N, OC) = inp (N, IC) @ weight (OC, IC)^T */
void matmul_forward_cpu(float *out, const float *inp, const float *weight, int64_t N, int64_t IC, int64_t OC);
/* dinp (N, IC) = dout @ weight (overwritten: every input gradient of the
 * model is one product, fused ones included); dweight (OC, IC) += dout^T @
 * inp (accumulated over micro-batches). Either may be NULL. */
void matmul_backward_cpu(float *dinp, float *dweight, const float *dout, const float *inp, const float *weight,
                         int64_t N, int64_t IC, int64_t OC);
/* The "bf16-rounded" linear layer, oracle of the bf16-weights engine: every
 * operand is rounded to bf16 (round to nearest even) before an fp32
 * product, fp32 output. Products of two bf16 values are exact in fp32, so a
 * GPU computing the same thing differs only in the order of its sums.
 *   out = bf16(inp) @ bf16(weight)^T
 *   dinp = bf16(dout) @ bf16(weight); dweight += bf16(dout)^T @ bf16(inp)
 * Either dinp or dweight may be NULL. */
void matmul_forward_bf16r_cpu(float *out, const float *inp, const float *weight, int64_t N, int64_t IC, int64_t OC);
void matmul_backward_bf16r_cpu(float *dinp, float *dweight, const float *dout, const float *inp, const float *weight,
                               int64_t N, int64_t IC, int64_t OC);

/* CUDA twins: same arguments, DEVICE pointers, default stream; results
 * match the CPU oracle within the tolerances of tests/gpu/test_ops_cuda.c. */
#ifdef __cplusplus
extern "C" {
#endif
/* cuBLASLt, strict fp32 (no TF32): the path the parity tests hold tight. */
void matmul_forward_cuda(float *out, const float *inp, const float *weight, int64_t N, int64_t IC, int64_t OC);
void matmul_backward_cuda(float *dinp, float *dweight, const float *dout, const float *inp, const float *weight,
                          int64_t N, int64_t IC, int64_t OC);
/* bf16 inputs, fp32 accumulation. out and dinp are rounded to bf16 once;
 * dweight (fp32) accumulates like the fp32 path. Either may be NULL. The
 * bf16 engine's ACT -> ACT products (the fused q|k|v and gate|up). */
void matmul_forward_bf16_cuda(bf16 *out, const bf16 *inp, const bf16 *weight, int64_t N, int64_t IC, int64_t OC);
void matmul_backward_bf16_cuda(bf16 *dinp, float *dweight, const bf16 *dout, const bf16 *inp, const bf16 *weight,
                               int64_t N, int64_t IC, int64_t OC);
/* bf16 activations with an fp32 side, the bf16 engine's other products:
 * bf16 inp -> fp32 out (wo and down, which a residual add follows);
 * bf16 dout -> fp32 dinp (the fused products' input gradient, which RMSNorm's
 * backward reads); fp32 dout (the residual stream's gradient, rounded to
 * bf16 into a workspace, as the CPU oracle rounds it) -> bf16 dinp. */
void matmul_forward_bf16_f32out_cuda(float *out, const bf16 *inp, const bf16 *weight, int64_t N, int64_t IC,
                                     int64_t OC);
/* The same with the residual add in cuBLASLt's epilogue: out = inp W^T +
 * add, add (N, OC) fp32 added to the fp32 accumulator before the result is
 * stored (one rounding, the bits of the product and then residual_add);
 * out may be add or another buffer (cuBLASLt's D != C). */
void matmul_forward_bf16_f32out_add_cuda(float *out, const float *add, const bf16 *inp, const bf16 *weight, int64_t N,
                                         int64_t IC, int64_t OC);
void matmul_backward_bf16_f32dinp_cuda(float *dinp, float *dweight, const bf16 *dout, const bf16 *inp,
                                       const bf16 *weight, int64_t N, int64_t IC, int64_t OC);
void matmul_backward_f32dout_cuda(bf16 *dinp, float *dweight, const float *dout, const bf16 *inp, const bf16 *weight,
                                  int64_t N, int64_t IC, int64_t OC);
/* The bf16-rounded layer above (fp32 pointers, weight rounded too): the
 * twin the op test holds against the CPU oracle. */
void matmul_forward_bf16r_cuda(float *out, const float *inp, const float *weight, int64_t N, int64_t IC, int64_t OC);
void matmul_backward_bf16r_cuda(float *dinp, float *dweight, const float *dout, const float *inp, const float *weight,
                                int64_t N, int64_t IC, int64_t OC);
/* The same math with the weight already in bf16 (the bf16-weights engine):
 * fp32 activations are rounded into a device workspace (grown on demand,
 * kept until matmul_cuda_release), then one bf16 gemm with fp32 output. */
void matmul_forward_bf16w_cuda(float *out, const float *inp, const bf16 *weight, int64_t N, int64_t IC, int64_t OC);
void matmul_backward_bf16w_cuda(float *dinp, float *dweight, const float *dout, const float *inp, const bf16 *weight,
                                int64_t N, int64_t IC, int64_t OC);
/* Frees the cuBLAS(Lt) handles and workspaces (they are created on first use). */
void matmul_cuda_release(void);
#ifdef __cplusplus
}
#endif
#endif
