#ifndef KVCPT_LLAMA_H
#define KVCPT_LLAMA_H
/* The CPU reference Llama 3.1 (fp32 forward and backward). It is the oracle
 * for every CUDA kernel, and the model the CPU trainer and evaluator run.
 * Parameters and gradients are single flat buffers in ParamLayout order. */
#include <stdint.h>

#include "../kernels/rope.h"
#include "llama_buffers.h"
#include "llama_pass.h"

typedef struct {
    LlamaConfig cfg;
    ParamLayout layout;
    float *params, *grads;
    ModelTensors w, dw; /* views into params / grads */
    RefreshMask mask;    /* with it on, T must be mask.L + mask.S */
    /* The pass over this model's fields (model/llama_pass.h), built by
     * llama_create, so a Llama must stay where it was created. Its own
     * settings are set here: hooks (the sharding's unit hooks; all NULL:
     * every parameter is always in place) and freeze_selection (reuse the
     * saved selection instead of recomputing it); ops through
     * llama_set_bf16_oracle. */
    LlamaPassModel pass;

    LlamaPassState state; /* forward state for the last (B, T), host buffers */
    int64_t sel_cap;      /* int32 entries of each layer's state.sel[l] */
} Llama;

/* Allocates parameters and gradients (zeroed) for a validated config. */
void llama_create(Llama *m, const LlamaConfig *c);
void llama_free(Llama *m);
/* Hugging Face init: N(0, initializer_range) for linear and embedding weights, 1 for norms. */
void llama_init_random(Llama *m, uint64_t seed);
/* on: the oracle of the CUDA engine's bf16 mode: every activation the
 * engine stores in bf16 is rounded to a bf16 value, and every matmul rounds
 * its weight (and an fp32 operand) to bf16 first (matmul_*_bf16r_cpu);
 * off (the default): fp32. */
void llama_set_bf16_oracle(Llama *m, int on);
/* Sets (and validates) the training mask; enabled=0 means plain causal attention. */
void llama_set_mask(Llama *m, const RefreshMask *mask);
/* tokens, targets: (B, T); targets < 0 are ignored. Returns the mean loss over
 * valid targets (NaN when targets is NULL or none are valid). The loss
 * alone (LLAMA_FORWARD_LOSS): the gradients are left as they are, and a
 * backward after it recomputes the logits. */
float llama_forward(Llama *m, const int32_t *tokens, const int32_t *targets, int64_t B, int64_t T);
/* The same loss, as a training step's forward (LLAMA_FORWARD_TRAIN): with
 * targets it also adds the loss head's weight gradient to the gradients,
 * for the llama_backward that must follow with no llama_zero_grad in
 * between. The gradients are then the same bits as llama_forward's. */
float llama_forward_train(Llama *m, const int32_t *tokens, const int32_t *targets, int64_t B, int64_t T);
void llama_zero_grad(Llama *m);
/* grads += d(mean loss)/d(params) for the last forward. */
void llama_backward(Llama *m);
/* Logits of rows [row0, row0 + rows) of the last forward (row = b*T + t). */
void llama_logits(Llama *m, float *out, int64_t row0, int64_t rows);
/* Model FLOPs per token for forward+backward (the MFU convention: recompute
 * not counted), split into the matmuls, 6N with N the parameters but the
 * embedding lookup, and attention, 12 * layers * Hq * D * mean keys per query
 * (QK^T and PV forward, twice that backward, under the training mask). */
typedef struct {
    double matmul;
    double attention;
} FlopSplit;
FlopSplit llama_flops_split(const Llama *m, int64_t T);
/* matmul + attention of llama_flops_split */
double llama_flops_per_token(const Llama *m, int64_t T);

#endif
