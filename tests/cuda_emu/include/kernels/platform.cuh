#ifndef KVCPT_PLATFORM_CUH
#define KVCPT_PLATFORM_CUH
/* kernels/platform.cuh under the CPU emulator: the vector access check
 * reports a misaligned address as a GPU would stop on it, and the driver
 * probe answers as KVCPT_EMU_DEVICES says (tests/cuda_emu/emu_runtime.cc).
 * Found before kernels/platform.cuh because tests/cuda_emu/include comes
 * first on the emulator build's include path. */

static __device__ __forceinline__ void vector_access_check(const void *p, int bytes, const char *what) {
    emu::check_vector_access(p, (size_t)bytes, what);
}

static inline int nvidia_driver_installed(void) { return emu_nvidia_driver_installed(); }

#endif
