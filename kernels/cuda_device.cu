#include <stdio.h>
#include <unistd.h>

#include "cuda_common.cuh"
#include "cuda_device.h"

/* Whether an NVIDIA kernel driver is installed. Without one, the runtime
 * also answers "insufficient driver", which then only means a machine
 * without a GPU. */
static int nvidia_driver_installed(void) {
#ifdef KVCPT_CUDA_EMU
    return emu_nvidia_driver_installed();
#else
    return access("/proc/driver/nvidia/version", F_OK) == 0;
#endif
}

extern "C" int cuda_device_count(void) {
    static int cached = -1;
    if (cached >= 0) return cached;
    int n = 0;
    cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess) {
        /* no GPU is an answer (zero); anything else (a driver older than the
         * runtime, a broken install) is said once, since device=auto would
         * otherwise fall back to the CPU without a word */
        if (err != cudaErrorNoDevice && !(err == cudaErrorInsufficientDriver && !nvidia_driver_installed()))
            fprintf(stderr, "kvcpt: warning: CUDA is unusable, running without a GPU: cudaGetDeviceCount failed: %s (%d)\n",
                    cudaGetErrorString(err), (int)err);
        cudaGetLastError();
        n = 0;
    }
    cached = n;
    return n;
}

extern "C" double cuda_device_hbm_gbps(void) {
    int bus_bits = 0, mem_khz = 0;
    CUDA_CHECK(cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, 0));
    CUDA_CHECK(cudaDeviceGetAttribute(&mem_khz, cudaDevAttrMemoryClockRate, 0));
    return 2.0 * (double)mem_khz * 1e3 * (bus_bits / 8.0) / 1e9; /* DDR: two transfers per clock */
}

extern "C" void cuda_device_describe(char *buf, size_t n) {
    cudaDeviceProp p;
    CUDA_CHECK(cudaGetDeviceProperties(&p, 0));
    snprintf(buf, n, "%s, sm_%d%d, %.1f GiB, %d SMs", p.name, p.major, p.minor, p.totalGlobalMem / 1073741824.0,
             p.multiProcessorCount);
}

extern "C" void *cuda_malloc(size_t bytes) {
    void *p = NULL;
    CUDA_CHECK(cudaMalloc(&p, bytes ? bytes : 1));
    return p;
}
extern "C" void *cuda_malloc_counted(int64_t *counter, int64_t bytes) {
    *counter += bytes;
    return cuda_malloc((size_t)bytes);
}
extern "C" void cuda_free(void *p) { CUDA_CHECK(cudaFree(p)); }
extern "C" void cuda_memcpy_h2d(void *dst, const void *src, size_t bytes) {
    CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
}
extern "C" void cuda_memcpy_d2h(void *dst, const void *src, size_t bytes) {
    CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
}
extern "C" void cuda_memcpy_d2d(void *dst, const void *src, size_t bytes) {
    CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToDevice));
}
extern "C" void cuda_memset_zero(void *dst, size_t bytes) { CUDA_CHECK(cudaMemset(dst, 0, bytes)); }
extern "C" void cuda_memory_info(int64_t *free_bytes, int64_t *total_bytes) {
    size_t f = 0, t = 0;
    CUDA_CHECK(cudaMemGetInfo(&f, &t));
    *free_bytes = (int64_t)f, *total_bytes = (int64_t)t;
}
extern "C" void cuda_synchronize(void) { CUDA_CHECK(cudaDeviceSynchronize()); }
