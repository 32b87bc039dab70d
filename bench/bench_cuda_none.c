/* The benchmarks' CUDA halves in a build without the CUDA backend: none.
 * The Makefile links this file instead of bench/bench_*_cuda.c; every
 * target that needs a GPU refuses when its table is NULL. */
#include <stddef.h>

#include "bench_adamw_cuda.h"
#include "bench_attention_cuda.h"
#include "bench_decode_cuda.h"
#include "bench_model_cuda.h"
#include "bench_ops_cuda.h"

const BenchAdamwCuda *bench_adamw_cuda(void) { return NULL; }
const BenchAttentionCuda *bench_attention_cuda(void) { return NULL; }
const BenchDecodeCuda *bench_decode_cuda(void) { return NULL; }
const BenchModelCuda *bench_model_cuda(void) { return NULL; }
const BenchOpsCuda *bench_ops_cuda(void) { return NULL; }
