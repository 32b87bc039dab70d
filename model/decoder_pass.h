#ifndef KVCPT_DECODER_PASS_H
#define KVCPT_DECODER_PASS_H
/* The whole model's forward and backward (embedding, the layers with the
 * sharding unit hooks, the final RMSNorm, the chunked cross-entropy head and
 * the mirror of all that), written once for both engines: the CPU reference
 * (model/decoder.c) and the CUDA engine (model/decoder_cuda.c) each hold a
 * DecoderPassState (model/decoder_buffers.h), point a DecoderPassModel at their own fields once,
 * when the model is created (its setters keep it current), and call these. What differs between them is data: the ops table (kernels and
 * memory operations), the activation element size, and which activations
 * the layers share and recompute (model/recompute.h). */
#include <stdint.h>

#include "decoder_buffers.h"
#include "decoder_layer.h"
#include "recompute.h"

/* What the pass reads of the engine's model: its own fields, pointed at. */
typedef struct {
    const DecoderOps *ops;
    const DecoderConfig *cfg;
    const RefreshMask *mask;
    const ModelTensors *w;
    ModelTensors *dw;
    DecoderUnitHooks hooks;          /* all NULL: every parameter is always in place */
    int act_size;                  /* bytes per ACT element (LayerActs): 4 or 2 */
    /* what the backward reruns before each layer's backward (model/recompute.h):
     * NONE nothing; FULL the layer's forward (with the forward's selection)
     * into one shared set, acts[0]; ATTN the two norms and the MLP half up
     * to h, into the rebuilt buffers every layer's set shares */
    DecoderRecompute recompute;
    int freeze_selection;          /* 1: reuse each layer's saved selection instead of recomputing it */
    int64_t ce_rows;               /* rows per logits chunk; 0: DECODER_CE_CHUNK_ROWS */
} DecoderPassModel;

/* pass, which the engine built over its own fields, cfg among them: dies,
 * naming who, when the engine's struct was copied or moved since (own_cfg,
 * its cfg field now, is elsewhere), since the pass would run on the old
 * place's buffers. */
const DecoderPassModel *decoder_pass_checked(const DecoderPassModel *pass, const DecoderConfig *own_cfg,
                                             const char *who);
/* The per-layer arrays (acts, sel, resid) of a state for c; the buffers
 * they point at are the engine's to allocate. */
void decoder_pass_state_init(DecoderPassState *s, const DecoderConfig *c);
void decoder_pass_state_free(DecoderPassState *s);
/* Validates mask (its S too) and stores it: the one set_mask of both engines. */
void decoder_pass_set_mask(RefreshMask *mask_out, const RefreshMask *mask);
/* Grows the RoPE tables to sequences of T tokens (computed on the host,
 * bit for bit the same everywhere, and copied to the engine). Returns the
 * change in engine bytes the tables hold. */
int64_t decoder_pass_ensure_rope(const DecoderOps *o, const DecoderConfig *c, DecoderPassState *s, int64_t T);
/* What a forward is for, said by the caller of each one. LOSS: the loss
 * alone, at the cost of the logits; the gradients are left as they are (a
 * backward after it recomputes the logits). TRAIN: a training step's
 * forward, which the backward follows: with targets it also adds the loss
 * head's weight gradient to dw->lm_head and leaves the final norm's output
 * gradient in the scratch while each chunk of logits is at hand, so the
 * step computes the logits once (one (BT, C) x (C, V) product less). The
 * same products summed in the same order onto the same buffer as the
 * backward's recomputation, so the gradients are the same bits. */
typedef enum { DECODER_FORWARD_LOSS = 0, DECODER_FORWARD_TRAIN = 1 } DecoderForwardMode;
/* The forward over s's buffers (grown by the engine to s->B, s->T): tokens
 * and targets are HOST (B, T) arrays (targets NULL or < 0: none). Returns
 * the mean loss over valid targets, summed in double over rows in order
 * (NaN when there are none). */
float decoder_pass_forward(const DecoderPassModel *m, DecoderPassState *s, const int32_t *tokens,
                           const int32_t *targets, DecoderForwardMode mode);
/* dw += d(mean loss)/d(params) for the last forward. */
void decoder_pass_backward(const DecoderPassModel *m, DecoderPassState *s);
/* Dies unless rows [row0, row0 + rows) lie in the last forward; what names
 * the caller. */
void decoder_pass_check_rows(const DecoderPassState *s, int64_t row0, int64_t rows, const char *what);
/* Rows per logits chunk (DecoderPassModel.ce_rows), and the backward's
 * buffers carved from s's scratch with a chunk of that many rows. */
int64_t decoder_pass_ce_rows(const DecoderPassModel *m);
DecoderBackwardBufs decoder_pass_bufs(const DecoderPassModel *m, const DecoderPassState *s);
/* Logits of rows [r0, r0 + rows) from the final normalised stream into
 * engine memory out ((rows, V)). */
void decoder_pass_logits_rows(const DecoderPassModel *m, const DecoderPassState *s, float *out, int64_t r0,
                              int64_t rows);
#endif
