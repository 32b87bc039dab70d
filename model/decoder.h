#ifndef KVCPT_DECODER_H
#define KVCPT_DECODER_H
/* The CPU reference Llama 3.1 (fp32 forward and backward). It is the oracle
 * for every CUDA kernel, and the model the CPU trainer and evaluator run.
 * Parameters and gradients are single flat buffers in ParamLayout order. */
#include <stdint.h>

#include "../kernels/rope.h"
#include "decoder_buffers.h"
#include "decoder_pass.h"

typedef struct {
    DecoderConfig cfg;
    ParamLayout layout;
    float *params, *grads;
    ModelTensors w, dw; /* views into params / grads */
    RefreshMask mask;    /* with it on, T must be mask.L + mask.S */
    /* The pass over this model's fields (model/decoder_pass.h), built by
     * decoder_create, so a Decoder must stay where it was created. Its own
     * settings are set here: hooks (the sharding's unit hooks; all NULL:
     * every parameter is always in place) and freeze_selection (reuse the
     * saved selection instead of recomputing it); ops through
     * decoder_set_bf16_oracle. */
    DecoderPassModel pass;

    DecoderPassState state; /* forward state for the last (B, T), host buffers */
    int64_t sel_cap;      /* int32 entries of each layer's state.sel[l] */
} Decoder;

/* Allocates parameters and gradients (zeroed) for a validated config. */
void decoder_create(Decoder *m, const DecoderConfig *c);
void decoder_free(Decoder *m);
/* Hugging Face init: N(0, initializer_range) for linear and embedding weights, 1 for norms. */
void decoder_init_random(Decoder *m, uint64_t seed);
/* on: the oracle of the CUDA engine's bf16 mode: every activation the
 * engine stores in bf16 is rounded to a bf16 value, and every matmul rounds
 * its weight (and an fp32 operand) to bf16 first (matmul_*_bf16r_cpu);
 * off (the default): fp32. */
void decoder_set_bf16_oracle(Decoder *m, int on);
/* Sets (and validates) the training mask; enabled=0 means plain causal attention. */
void decoder_set_mask(Decoder *m, const RefreshMask *mask);
/* tokens, targets: (B, T); targets < 0 are ignored. Returns the mean loss over
 * valid targets (NaN when targets is NULL or none are valid). The loss
 * alone (DECODER_FORWARD_LOSS): the gradients are left as they are, and a
 * backward after it recomputes the logits. */
float decoder_forward(Decoder *m, const int32_t *tokens, const int32_t *targets, int64_t B, int64_t T);
/* The same loss, as a training step's forward (DECODER_FORWARD_TRAIN): with
 * targets it also adds the loss head's weight gradient to the gradients,
 * for the decoder_backward that must follow with no decoder_zero_grad in
 * between. The gradients are then the same bits as decoder_forward's. */
float decoder_forward_train(Decoder *m, const int32_t *tokens, const int32_t *targets, int64_t B, int64_t T);
void decoder_zero_grad(Decoder *m);
/* grads += d(mean loss)/d(params) for the last forward. */
void decoder_backward(Decoder *m);
/* Logits of rows [row0, row0 + rows) of the last forward (row = b*T + t). */
void decoder_logits(Decoder *m, float *out, int64_t row0, int64_t rows);
/* Model FLOPs per token for forward+backward (the MFU convention: recompute
 * not counted), split into the matmuls, 6N with N the parameters but the
 * embedding lookup, and attention, 12 * layers * Hq * D * mean keys per query
 * (QK^T and PV forward, twice that backward, under the training mask). */
typedef struct {
    double matmul;
    double attention;
} FlopSplit;
FlopSplit decoder_flops_split(const Decoder *m, int64_t T);
/* matmul + attention of decoder_flops_split */
double decoder_flops_per_token(const Decoder *m, int64_t T);

#endif
