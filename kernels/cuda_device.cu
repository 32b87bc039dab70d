#include <stdio.h>

#include "cuda_common.cuh"
#include "cuda_device.h"

extern "C" {
#include "../common/util.h"
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
            fprintf(stderr,
                    "kvcpt: warning: CUDA is unusable, running without a GPU: cudaGetDeviceCount failed: %s (%d)\n",
                    cudaGetErrorString(err), (int)err);
        cudaGetLastError();
        n = 0;
    }
    cached = n;
    return n;
}

static int current_device(void) {
    int dev = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    return dev;
}

extern "C" int cuda_device_select(const char *what, int rank, int local_rank, int local_world, int share) {
    int count = cuda_device_count();
    KV_CHECK(count > 0, "%s: rank %d: no CUDA device is visible", what, rank);
    KV_CHECK(local_rank >= 0 && local_rank < local_world, "%s: rank %d: local rank %d of %d is not a rank", what, rank,
             local_rank, local_world);
    KV_CHECK(share || local_world <= count,
             "%s: %d ranks on this node but %d visible CUDA device%s: one GPU per rank; start at most %d ranks per "
             "node, make more devices visible (CUDA_VISIBLE_DEVICES), or set share_device=1 to let ranks share them",
             what, local_world, count, count == 1 ? "" : "s", count);
    int dev = local_rank % count;
    CUDA_CHECK(cudaSetDevice(dev));
    cudaDeviceProp p;
    CUDA_CHECK(cudaGetDeviceProperties(&p, dev));
    fprintf(stderr, "kvcpt %s: rank %d (local rank %d of %d): CUDA device %d of %d, %s, PCI bus %04x:%02x:%02x.0%s\n",
            what, rank, local_rank, local_world, dev, count, p.name, (unsigned)p.pciDomainID, (unsigned)p.pciBusID,
            (unsigned)p.pciDeviceID, local_world > count ? " (shared: share_device=1)" : "");
    return dev;
}

extern "C" double cuda_device_hbm_gbps(void) {
    int bus_bits = 0, mem_khz = 0, dev = current_device();
    CUDA_CHECK(cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&mem_khz, cudaDevAttrMemoryClockRate, dev));
    return 2.0 * (double)mem_khz * 1e3 * (bus_bits / 8.0) / 1e9; /* DDR: two transfers per clock */
}

extern "C" void cuda_device_describe(char *buf, size_t n) {
    cudaDeviceProp p;
    CUDA_CHECK(cudaGetDeviceProperties(&p, current_device()));
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
/* Bytes moved over the bus by the two helpers below, since the start: the
 * trainer logs them per step (what the step costs in PCIe traffic). */
static int64_t h2d_total, d2h_total;
extern "C" void cuda_memcpy_h2d(void *dst, const void *src, size_t bytes) {
    CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
    h2d_total += (int64_t)bytes;
}
extern "C" void cuda_memcpy_d2h(void *dst, const void *src, size_t bytes) {
    CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
    d2h_total += (int64_t)bytes;
}
extern "C" void cuda_transfer_bytes(int64_t *h2d, int64_t *d2h) {
    *h2d = h2d_total;
    *d2h = d2h_total;
}
extern "C" void cuda_memcpy_d2d(void *dst, const void *src, size_t bytes) {
    CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToDevice));
}
extern "C" void cuda_memset_zero(void *dst, size_t bytes) { CUDA_CHECK(cudaMemset(dst, 0, bytes)); }
extern "C" void cuda_host_pin(void *p, size_t bytes) {
    if (bytes) CUDA_CHECK(cudaHostRegister(p, bytes, cudaHostRegisterDefault));
}
extern "C" void cuda_host_unpin(void *p) { CUDA_CHECK(cudaHostUnregister(p)); }
extern "C" void cuda_memory_info(int64_t *free_bytes, int64_t *total_bytes) {
    size_t f = 0, t = 0;
    CUDA_CHECK(cudaMemGetInfo(&f, &t));
    *free_bytes = (int64_t)f, *total_bytes = (int64_t)t;
}
extern "C" void cuda_synchronize(void) { CUDA_CHECK(cudaDeviceSynchronize()); }
