#ifndef KVCPT_ENGINE_CUDA_H
#define KVCPT_ENGINE_CUDA_H
/* The decode engine on one GPU (`kvcpt eval --device cuda`).
 *
 * What stays on the device: the weights (uploaded once per model, shared by
 * every document's engine), the K/V caches, the prefill's activations and
 * every decode step's rows. The prefill runs layer by layer through the
 * same decoder_layer_forward as training (one activation set, reused), and
 * computes the policies' statistics there (attention_prefill_stats_cuda);
 * only those statistics, the last position's logits and query, and one
 * step's logits per document come back to the host.
 *
 * The policies run on the host, unchanged: a step sends each document's
 * key lists (nothing for a head that keeps every position) and brings back
 * its attention only when the policy reads it (update != NULL).
 *
 * fp32 everywhere, like the CPU engine, which is its oracle
 * (tests/gpu/test_decode_cuda.c). Only compiled with the CUDA backend;
 * `kvcpt eval` reaches it through its table, decode_device_cuda (the CUDA
 * backend's decode seam, eval/decode_device.h). */
#include <stdint.h>

#include "decode_device.h"
#include "engine.h"

/* One model's device weights and the prefill's workspace, shared by the
 * engines of its documents. */
typedef struct DecodeModelCuda {
    const Decoder *m;
    float *params;           /* device, ParamLayout order */
    ModelTensors w;          /* device views */
    float *rope_cos, *rope_sin; /* device, rope_cap positions */
    int64_t rope_cap;
    int64_t rope_len;           /* the cap of the engine whose tables they hold */
    int64_t cap_T, cap_W;    /* the longest prefill and most statistics rows the workspace holds */
    int64_t work_bytes;
    LayerActs acts;          /* one layer's activations, reused by every layer */
    float *work;             /* acts + two residual streams + stats + final row + logits */
    float *x[2], *colsum, *last, *xf, *rstd, *logits;
    int32_t *tokens;
    int64_t bytes;           /* device bytes held (weights and workspace) */
} DecodeModelCuda;

/* Uploads m's parameters. */
void decode_model_cuda_create(DecodeModelCuda *g, const Decoder *m);
void decode_model_cuda_free(DecodeModelCuda *g);

/* engine_create's GPU twin: caches in device memory, weights from g (which
 * must outlive the engine). Free with engine_free. */
void engine_create_cuda(DecodeEngine *e, Decoder *m, DecodeModelCuda *g, int64_t cap, int64_t W);

/* The CUDA backend's decode seam (backends/cuda/backend.c registers it). */
extern const DecodeDevice decode_device_cuda;
#endif
