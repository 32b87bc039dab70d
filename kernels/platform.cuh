#ifndef KVCPT_PLATFORM_CUH
#define KVCPT_PLATFORM_CUH
/* What a real GPU does by itself and the CPU emulator must be told to do,
 * beside the tensor-core instructions (kernels/mma_isa.cuh): the vector
 * access check and the driver probe. On a GPU the check is empty (the
 * hardware stops a misaligned access) and the probe reads /proc.
 *
 * Reached through the include path (<kernels/platform.cuh>): the CPU
 * emulator's build puts tests/cuda_emu/include first, whose
 * kernels/platform.cuh supplies its versions, so the kernels carry no
 * emulator branches. */
#include <unistd.h>

/* A vector access of bytes at p (what names it in a report): p must be
 * aligned to bytes. */
static __device__ __forceinline__ void vector_access_check(const void *p, int bytes, const char *what) {}

/* Whether an NVIDIA kernel driver is installed. */
static inline int nvidia_driver_installed(void) { return access("/proc/driver/nvidia/version", F_OK) == 0; }

#endif
