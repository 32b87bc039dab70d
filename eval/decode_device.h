#ifndef KVCPT_DECODE_DEVICE_H
#define KVCPT_DECODE_DEVICE_H
/* What `kvcpt eval` on an accelerator (and `kvcpt bench decode`) asks of
 * its decode engine, the backend's decode seam (Backend.decode,
 * common/backend.h): the CUDA backend's is eval/engine_cuda.c; the host
 * has none, its engine being eval/engine.h's own. The engines it creates
 * then run through eval/engine.h like host ones. */
#include <stdint.h>

#include "engine.h"

typedef struct DecodeDevice {
    /* Uploads m's weights once for every engine of its documents; *bytes:
     * what the device then holds for them. Free with model_free after the
     * last engine. */
    void *(*model_upload)(const Decoder *m, int64_t *bytes);
    void (*model_free)(void *model);
    /* engine_create on the device, over model (model_upload of m), for cap
     * positions and W prefill rows kept for policies. Free with engine_free. */
    void (*engine_create)(DecodeEngine *e, Decoder *m, void *model, int64_t cap, int64_t W);
    /* How many documents of L + S positions (W prefill rows each) decode at
     * once: batch, or fewer when the free device memory holds fewer (said on
     * stdout); dies, naming the sizes, when not even one fits. */
    int64_t (*fit_batch)(const DecoderConfig *c, int64_t L, int64_t S, int64_t W, int64_t batch);
} DecodeDevice;
#endif
