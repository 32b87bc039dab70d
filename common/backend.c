#include "backend.h"

#include <stdio.h>
#include <string.h>

#include "util.h"

int backend_cuda_compiled(void) { return backend_cuda() != NULL; }

int backend_cuda_device_count(void) {
    const ComputeBackend *b = backend_cuda();
    return b ? b->device_count() : 0;
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
    const ComputeBackend *b = backend_cuda();
    if (b) printf("backend %s: compiled (%s); visible devices: %d\n", b->name, b->built_for, b->device_count());
    else printf("backend cuda: not compiled (nvcc was not found at build time)\n");
}
