/* Linked in place of kernels/cuda_backend.c when the CUDA backend is not
 * built (no nvcc, or NO_CUDA=1): there is no CUDA table to register, so
 * device=auto runs on the CPU and --device cuda is refused by name
 * (common/backend.c). */
#include "backend.h"

#include <stddef.h>

const ComputeBackend *backend_cuda(void) { return NULL; }
