#include "backend.h"

#include <stdio.h>
#include <string.h>

#include "util.h"

#ifdef KVCPT_CUDA
#include "../kernels/cuda_device.h"
#endif

/* what the CUDA kernels were built for: the Makefile passes nvcc's targets */
#if defined(KVCPT_CUDA_EMU)
#define CUDA_TARGET "the CPU emulator, tests/cuda_emu"
#elif defined(KVCPT_CUDA_ARCH)
#define CUDA_TARGET KVCPT_CUDA_ARCH
#else
#define CUDA_TARGET "unrecorded targets"
#endif

int backend_cuda_compiled(void) {
#ifdef KVCPT_CUDA
    return 1;
#else
    return 0;
#endif
}

int backend_cuda_device_count(void) {
#ifdef KVCPT_CUDA
    return cuda_device_count();
#else
    return 0;
#endif
}

Device backend_resolve(const char *requested) {
    if (!requested || strcmp(requested, "auto") == 0) return backend_cuda_device_count() > 0 ? DEVICE_CUDA : DEVICE_CPU;
    if (strcmp(requested, "cpu") == 0) return DEVICE_CPU;
    if (strcmp(requested, "cuda") == 0) {
        if (!backend_cuda_compiled())
            die("--device cuda: this binary was built without the CUDA backend; hint: install nvcc and run 'make'");
        if (backend_cuda_device_count() == 0) die("--device cuda: no CUDA device is visible");
        return DEVICE_CUDA;
    }
    die("--device must be cpu or cuda (got '%s')", requested);
}

const char *backend_name(Device d) { return d == DEVICE_CUDA ? "cuda" : "cpu"; }

void backend_describe(void) {
    printf("backend cpu: C11 + OpenMP + OpenBLAS (always built)\n");
#ifdef KVCPT_CUDA
    printf("backend cuda: compiled (%s); visible devices: %d\n", CUDA_TARGET, cuda_device_count());
#else
    printf("backend cuda: not compiled (nvcc was not found at build time)\n");
#endif
}
