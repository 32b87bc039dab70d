#ifndef KVCPT_ENGINE_BACKEND_H
#define KVCPT_ENGINE_BACKEND_H
/* What eval/engine.c (the decode step, written once) asks of a backend:
 * the row-wise ops on its memory (a DecoderOps table), and the pieces whose
 * data movement differs between host and device: step buffers, token
 * embedding, attention of each document over its policy's keys, logits
 * back on the host, the prefill caches a policy's init reads, the prefill
 * itself and what an engine holds there. Each engine points at its
 * backend's table (DecodeEngine.backend): the CPU one lives in engine.c,
 * the GPU one in engine_cuda.c, and neither file includes the other. */
#include <stdint.h>

#include "../model/decoder_layer.h"
#include "engine.h"

/* Activations of the nb documents of one decode step, one row each, in the
 * backend's memory: the layer's own set (model/decoder_buffers.h, B = nb,
 * T = 1), the residual stream in and out of a layer, the final norm's
 * output and its rstd, the logits. q_raw (pre-RoPE queries, what policies
 * compare) and logits_host are always host memory. */
typedef struct {
    int64_t nb;
    LayerActs a;
    float *x[2], *xf, *rstd, *logits;
    float *mem, *q_raw, *logits_host;
    int32_t *tokens; /* (nb) the step's tokens, backend memory (the GPU's embedding reads them) */
} StepRows;

typedef struct DecodeBackend {
    const DecoderOps *ops;
    void (*rows_create)(StepRows *r, const DecoderConfig *c, int64_t nb);
    void (*rows_free)(StepRows *r);
    /* r->x[0] = embedding rows of tokens[b][pos] */
    void (*embed)(DecodeEngine *const *e, StepRows *r, const int32_t *const *tokens, int64_t pos);
    /* The layer's attention (LayerPass.attend) at layer l, position pos: from
     * r->a's rows keeps q_raw (the pre-RoPE queries of qkv), writes the
     * rotated k and v into each document's cache and r->a.att = each
     * document's attention over its policy's keys (engine_choose_keys), then
     * updates the policy. */
    void (*attend)(DecodeEngine *const *e, Policy *const *p, StepRows *r, int64_t l, int64_t pos);
    /* the backend's RoPE tables (rows 0..cap-1), what the layer's
     * rope_split_forward reads from the step's position on */
    void (*rope_tables)(const DecodeEngine *e, const float **cos_t, const float **sin_t);
    /* host view of r->logits (nb, V) */
    const float *(*logits)(StepRows *r, const DecoderConfig *c);
    /* host views of the prefill rows of layer l's caches, valid until the next call */
    void (*prefill_cache)(DecodeEngine *e, int64_t l, const float **kc, const float **vc);
    /* Full causal prefill of tokens[0..L-1] (e->L already set): caches, statistics, prefill logits. */
    void (*prefill)(DecodeEngine *e, const int32_t *tokens, int64_t L);
    /* Frees what the backend holds for e, before engine_free's host part (NULL: nothing). */
    void (*release)(DecodeEngine *e);
} DecodeBackend;

/* Floats of StepRows' carved part (a..logits) and the carving itself. */
int64_t step_rows_numel(const DecoderConfig *c, int64_t nb);
void step_rows_carve(StepRows *r, const DecoderConfig *c, int64_t nb, float *mem);
/* The host half of one document's attention at layer l: the policy's keys
 * for position pos, checked, sorted, pos appended, packed into e->off/e->n
 * (a head that keeps every position is a full step: off < 0). Returns the
 * longest list (the probability rows' stride). */
int64_t engine_choose_keys(DecodeEngine *e, Policy *p, int64_t l, int64_t pos, const float *q_raw);
/* The host parts of an engine both backends keep (statistics, keys, RoPE
 * tables, logits); host_caches: allocate kc/vc on the host too. */
void engine_init_host(DecodeEngine *e, Decoder *m, int64_t cap, int64_t W, int host_caches);
void engine_free_host(DecodeEngine *e);
/* The pre-RoPE query from a rotated one at position pos (host, in place;
 * under yarn scaled by its attention factor squared). */
void engine_unrotate_query(const DecodeEngine *e, float *q, int64_t pos);
#endif
