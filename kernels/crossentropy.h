#ifndef KVCPT_CROSSENTROPY_H
#define KVCPT_CROSSENTROPY_H
/* Softmax cross-entropy over a chunk of rows of logits (rows, V). The model
 * calls it chunk by chunk so that B*T*V logits never exist at once.
 * targets < 0 are ignored (loss 0, no gradient). */
#include <stdint.h>

/* losses (rows): -log softmax(logits)[target] (0 for ignored rows);
 * lse (rows): log-sum-exp of each row, kept for the backward pass. */
void crossentropy_forward_cpu(float *losses, float *lse, const float *logits, const int32_t *targets, int64_t rows,
                              int64_t V);
/* Overwrites logits with d(loss_scale * sum losses)/dlogits = scale*(softmax - onehot). */
void crossentropy_backward_cpu(float *logits, const float *lse, const int32_t *targets, int64_t rows, int64_t V,
                               float scale);
/* Both: losses and lse as the forward, then logits overwritten as the
 * backward, in one pass (the logits' gradient produced with the loss). */
void crossentropy_forward_backward_cpu(float *losses, float *lse, float *logits, const int32_t *targets, int64_t rows,
                                       int64_t V, float scale);

/* CUDA twins: same arguments, DEVICE pointers, default stream; results
 * match the CPU oracle within the tolerances of tests/gpu/test_ops_cuda.c. */
#ifdef __cplusplus
extern "C" {
#endif
/* One block per row; the exp-sum is accumulated in double. A target >= V
 * gives a NaN loss (the CPU would read out of bounds). */
void crossentropy_forward_cuda(float *losses, float *lse, const float *logits, const int32_t *targets, int64_t rows,
                               int64_t V);
void crossentropy_backward_cuda(float *logits, const float *lse, const int32_t *targets, int64_t rows, int64_t V,
                                float scale);
/* One kernel, one block per row: the same bits as the two above in turn. */
void crossentropy_forward_backward_cuda(float *losses, float *lse, float *logits, const int32_t *targets, int64_t rows,
                                        int64_t V, float scale);
#ifdef __cplusplus
}
#endif
#endif
