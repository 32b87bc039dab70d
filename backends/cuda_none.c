/* The CUDA backend's stand-in, linked in place of backends/cuda/ and the
 * CUDA sources of the layers when it is not built (no nvcc, or NO_CUDA=1):
 * it registers the name with no tables, so device=auto runs on the host
 * and --device cuda is refused with the way to build it
 * (common/backend.c). */
#include "backends.h"

static const Backend cuda_absent = {.name = "cuda",
                                    .label = "CUDA",
                                    .kind = BACKEND_ACCEL,
                                    .compiled = 0,
                                    .built_for = "nvcc was not found at build time",
                                    .hint = "install nvcc and run 'make'"};

const Backend *backend_cuda(void) { return &cuda_absent; }
