/* The CUDA half of `kvcpt bench model` (bench/bench_model_device.h): linked
 * only in builds with the CUDA backend. */
#include "bench_cuda.h"

#include <stdlib.h>

#include "../common/util.h"
#include "../kernels/cuda_device.h"

static DecoderCuda *model_create(const Decoder *m, DecoderRecompute recompute, DecoderCudaPrecision precision,
                                 const RefreshMask *mask) {
    DecoderCuda *g = xcalloc(1, sizeof *g);
    decoder_cuda_create(g, &m->cfg, recompute, precision);
    decoder_cuda_upload_params(g, m->params);
    if (mask) decoder_cuda_set_mask(g, mask);
    return g;
}

static float model_timed_pass(DecoderCuda *g, const int32_t *tok, const int32_t *tgt, int64_t B, int64_t T, double *fwd,
                              double *bwd) {
    double t0 = now_seconds();
    /* as the trainer's steps: zeroed before the training forward, which
     * adds the head's gradient (the logits once), so the forward's time
     * includes the head's backward products */
    decoder_cuda_zero_grad(g);
    float loss =
        decoder_cuda_forward_train(g, tok, tgt, B, T); /* returns after copying the losses back: synchronized */
    double t1 = now_seconds();
    decoder_cuda_backward(g);
    cuda_synchronize();
    *fwd += t1 - t0;
    *bwd += now_seconds() - t1;
    return loss;
}

static void model_memory_mb(const DecoderCuda *g, double *engine_mb, double *device_used_mb) {
    int64_t free_b = 0, total_b = 0;
    cuda_memory_info(&free_b, &total_b);
    *engine_mb = (double)decoder_cuda_bytes(g) / 1048576.0;
    *device_used_mb = (double)(total_b - free_b) / 1048576.0;
}

static void model_destroy(DecoderCuda *g) {
    decoder_cuda_free(g);
    free(g);
}

const BenchModelDevice bench_model_cuda = {model_create, model_timed_pass, model_memory_mb, model_destroy};
