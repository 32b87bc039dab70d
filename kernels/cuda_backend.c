/* The CUDA backend's registration (common/backend.h), linked whenever the
 * CUDA kernels are: built by nvcc, or by the CPU emulator (tests/cuda_emu). */
#include "../common/backend.h"
#include "cuda_device.h"

/* what the CUDA kernels were built for: the Makefile passes nvcc's targets */
#if defined(KVCPT_CUDA_EMU)
#define CUDA_TARGET "the CPU emulator, tests/cuda_emu"
#elif defined(KVCPT_CUDA_ARCH)
#define CUDA_TARGET KVCPT_CUDA_ARCH
#else
#define CUDA_TARGET "unrecorded targets"
#endif

static const ComputeBackend cuda_backend = {
    .name = "cuda", .built_for = CUDA_TARGET, .device_count = cuda_device_count};

const ComputeBackend *backend_cuda(void) { return &cuda_backend; }
