/* The CUDA half of `kvcpt bench decode` (bench/bench_decode_cuda.h): linked
 * only in builds with the CUDA backend. */
#include "bench_decode_cuda.h"

#include <stdlib.h>

#include "../common/util.h"
#include "../eval/engine_cuda.h"

static DecodeModelCuda *decode_model_create(const Llama *m) {
    DecodeModelCuda *g = xcalloc(1, sizeof *g);
    decode_model_cuda_create(g, m);
    return g;
}

static void decode_model_destroy(DecodeModelCuda *g) {
    decode_model_cuda_free(g);
    free(g);
}

static const BenchDecodeCuda table = {decode_model_create, decode_model_destroy, engine_create_cuda};

const BenchDecodeCuda *bench_decode_cuda(void) { return &table; }
