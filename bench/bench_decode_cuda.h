#ifndef KVCPT_BENCH_DECODE_CUDA_H
#define KVCPT_BENCH_DECODE_CUDA_H
/* The CUDA half of `kvcpt bench decode` (bench/bench_decode.c): the GPU
 * decode engine's weights and engines. bench_decode_cuda() returns the table
 * in a build with the CUDA backend (bench/bench_decode_cuda.c) and NULL
 * otherwise (bench/bench_cuda_none.c); the Makefile links one of the two. */
#include <stdint.h>

#include "../eval/engine.h"

struct DecodeModelCuda; /* eval/engine_cuda.h */

typedef struct {
    struct DecodeModelCuda *(*model_create)(const Llama *m); /* uploads m's weights */
    void (*model_destroy)(struct DecodeModelCuda *g);
    /* engine_create's GPU twin over g's weights (eval/engine_cuda.h) */
    void (*engine_create)(DecodeEngine *e, Llama *m, struct DecodeModelCuda *g, int64_t cap, int64_t W);
} BenchDecodeCuda;

const BenchDecodeCuda *bench_decode_cuda(void);

#endif
