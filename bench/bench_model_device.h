#ifndef KVCPT_BENCH_MODEL_DEVICE_H
#define KVCPT_BENCH_MODEL_DEVICE_H
/* The device half of `kvcpt bench model` (bench/bench_model.c): the
 * engine's setup, one timed step and its memory figures, an accelerator
 * backend's bench hook (bench/bench_backend.h); the CUDA backend's is
 * bench/bench_model_cuda.c. */
#include <stdint.h>

#include "../model/decoder.h"
#include "../model/decoder_cuda.h"

typedef struct {
    /* The engine for m's config and parameters; mask (NULL: plain causal)
     * over its last mask->S positions. */
    DecoderCuda *(*create)(const Decoder *m, DecoderRecompute recompute, DecoderCudaPrecision precision,
                           const RefreshMask *mask);
    /* One forward+backward, synchronized; adds its seconds to *fwd and *bwd. */
    float (*timed_pass)(DecoderCuda *g, const int32_t *tok, const int32_t *tgt, int64_t B, int64_t T, double *fwd,
                        double *bwd);
    /* What the engine counted and what the driver says is in use (adds
     * cuBLASLt workspaces and the context), in MiB. */
    void (*memory_mb)(const DecoderCuda *g, double *engine_mb, double *device_used_mb);
    void (*destroy)(DecoderCuda *g);
} BenchModelDevice;

#endif
