/* The CUDA backend's entry in the registry (common/backend.h), linked
 * whenever its kernels are: built by nvcc, or by the CPU emulator
 * (tests/cuda_emu). It gathers the seams the CUDA sources of each layer
 * define: the training engine (train/train_engine_cuda.c), the decode
 * engine (eval/engine_cuda.c) and the benchmarks' device halves
 * (bench/bench_*_cuda.c). Where CUDA is not built, backends/cuda_none.c
 * stands in. */
#include "../../bench/bench_backend.h"
#include "../../bench/bench_cuda.h"
#include "../../common/backend.h"
#include "../../eval/engine_cuda.h"
#include "../../kernels/cuda_device.h"
#include "../../train/train_engine_cuda.h"
#include "../backends.h"

/* what the CUDA kernels were built for: the Makefile passes nvcc's targets */
#if defined(KVCPT_CUDA_EMU)
#define CUDA_TARGET "the CPU emulator, tests/cuda_emu"
#elif defined(KVCPT_CUDA_ARCH)
#define CUDA_TARGET KVCPT_CUDA_ARCH
#else
#define CUDA_TARGET "unrecorded targets"
#endif

static const BenchHooks cuda_bench = {
    .adamw = &bench_adamw_cuda, .attention = &bench_attention_cuda, .model = &bench_model_cuda, .ops = &bench_ops_cuda};

static const Backend cuda = {.name = "cuda",
                             .label = "CUDA",
                             .kind = BACKEND_ACCEL,
                             .compiled = 1,
                             .built_for = CUDA_TARGET,
                             .device_count = cuda_device_count,
                             .train = &train_device_cuda,
                             .decode = &decode_device_cuda,
                             .bench = &cuda_bench};

const Backend *backend_cuda(void) { return &cuda; }
