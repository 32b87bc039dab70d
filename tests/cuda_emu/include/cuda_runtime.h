#ifndef KVCPT_CUDA_EMU_RUNTIME_H
#define KVCPT_CUDA_EMU_RUNTIME_H
/* A CPU stand-in for the part of the CUDA runtime that kvcpt's kernels use,
 * so that the .cu files can run on a machine without a GPU (CI) and be
 * checked against their CPU twins. It is test infrastructure, not a backend:
 * every block runs in turn on one OS thread, and each CUDA thread of the
 * block is a fiber (its own stack) that yields at __syncthreads and at warp
 * shuffles. That makes the kernels' index arithmetic, tiling, shared memory
 * use, barriers and warp reductions real; timing, memory coalescing and
 * blocks running at the same time are not modelled (blocks never overlap
 * here). Launches are checked against sm_90's limits (docs/cuda.md).
 *
 * The host half (types, cudaMalloc, cudaMemcpy, ...) is plain C so that C
 * test files can include it; the device half needs C++17 and is used by the
 * .cu files after tests/cuda_emu/cu2cc.sh has rewritten their launches. */
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInvalidConfiguration = 9,
    cudaErrorInsufficientDriver = 35,
    cudaErrorNoDevice = 100,
    cudaErrorLaunchFailure = 719
} cudaError_t;
typedef enum {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
    cudaMemcpyDefault = 4
} cudaMemcpyKind;
typedef enum {
    cudaDevAttrMultiProcessorCount = 16,
    cudaDevAttrMemoryClockRate = 36,
    cudaDevAttrGlobalMemoryBusWidth = 37
} cudaDeviceAttr;
typedef struct CUstream_st *cudaStream_t;
typedef struct {
    char name[256];
    size_t totalGlobalMem;
    int major, minor, multiProcessorCount;
} cudaDeviceProp;

cudaError_t cudaGetDeviceCount(int *n);
/* Emulator only: whether the played machine has an NVIDIA driver installed
 * (KVCPT_EMU_DEVICES, see emu_runtime.cc). */
int emu_nvidia_driver_installed(void);
cudaError_t cudaSetDevice(int dev);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int dev);
cudaError_t cudaDeviceGetAttribute(int *value, cudaDeviceAttr attr, int dev);
cudaError_t cudaMalloc(void **p, size_t bytes);
/* The emulated device's memory is the host's: free = available, total = physical RAM. */
cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes);
cudaError_t cudaMallocAsync(void **p, size_t bytes, cudaStream_t st);
cudaError_t cudaFree(void *p);
cudaError_t cudaFreeAsync(void *p, cudaStream_t st);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind, cudaStream_t st);
cudaError_t cudaMemset(void *dst, int value, size_t bytes);
cudaError_t cudaMemsetAsync(void *dst, int value, size_t bytes, cudaStream_t st);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaStreamSynchronize(cudaStream_t st);
/* The last error any runtime call (a launch included) produced; cudaGetLastError
 * also resets it to cudaSuccess, cudaPeekAtLastError leaves it. */
cudaError_t cudaGetLastError(void);
cudaError_t cudaPeekAtLastError(void);
/* Emulator only, behind cudaFuncSetAttribute: the per-kernel limit of dynamic
 * shared memory a launch may request (sm_90: 48 KB until raised, 227 KB at most). */
cudaError_t emu_func_set_max_dynamic_smem(const void *kernel, int attr, int value);
/* Emulator only: makes [p, p + bytes) unaddressable to AddressSanitizer in the
 * sanitizer build (build/emu-asan), or addressable again; no-ops otherwise
 * (common/redzone.h). */
void emu_poison_redzone(const void *p, size_t bytes);
void emu_unpoison_redzone(const void *p, size_t bytes);
const char *cudaGetErrorName(cudaError_t e);
const char *cudaGetErrorString(cudaError_t e);

#ifdef __cplusplus
}
#endif

#ifdef __cplusplus
#include <math.h>
#include <string.h>

#include <functional>
#include <type_traits>

struct dim3 {
    unsigned int x, y, z;
    constexpr dim3(unsigned int x_ = 1, unsigned int y_ = 1, unsigned int z_ = 1) : x(x_), y(y_), z(z_) {}
};
struct uint3 {
    unsigned int x, y, z;
};

/* As the real runtime's C++ overloads: typed pointers need no cast. */
template <typename T> cudaError_t cudaMalloc(T **p, size_t bytes) { return cudaMalloc((void **)p, bytes); }
template <typename T> cudaError_t cudaMallocAsync(T **p, size_t bytes, cudaStream_t st) {
    return cudaMallocAsync((void **)p, bytes, st);
}

enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
/* As on sm_90: a kernel may take 48 KB of dynamic shared memory until this raises
 * its limit; more than 227 KB is cudaErrorInvalidValue. */
template <typename F> cudaError_t cudaFuncSetAttribute(F *kernel, cudaFuncAttribute attr, int value) {
    return emu_func_set_max_dynamic_smem((const void *)kernel, (int)attr, value);
}

/* The running fiber's coordinates; the scheduler rewrites them on every switch. */
extern uint3 threadIdx, blockIdx;
extern dim3 blockDim, gridDim;

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__
/* One block runs at a time, so a function-level static is exactly "shared by
 * the threads of this block". */
#define __shared__ static
#define __launch_bounds__(...)
#define __align__(n) alignas(n)
#define __restrict__ __restrict

namespace emu {
struct Config {
    dim3 grid, block;
    size_t smem;
    Config(dim3 g, dim3 b, size_t s = 0, cudaStream_t st = 0) : grid(g), block(b), smem(s) { (void)st; }
};
/* Runs body once per thread of every block of the grid, after checking the
 * launch as a GPU does: an invalid one runs nothing and sets the last error. */
void run_grid(const Config &c, const void *kernel, const std::function<void()> &body);
/* The block's dynamic shared memory (exactly the launch's smem bytes, 16-aligned, filled with 0xff bytes). */
void *dynamic_smem();
/* A static __shared__ variable of the running kernel (cu2cc.sh adds the call
 * after each declaration): counted once per launch against the limits. */
void static_smem(const void *var, size_t bytes);
void block_barrier();
/* __syncthreads_count: a barrier that also counts the threads passing a nonzero value. */
int block_count(int predicate);
void warp_barrier();
/* Exchange slot of the calling lane in its warp (8 bytes). */
void *warp_slot(unsigned int lane);
unsigned int lane_id();

template <typename F, typename... Args> void launch(const Config &c, F *kernel, Args... args) {
    run_grid(c, (const void *)kernel, [=]() { kernel(args...); });
}

template <typename T> T shuffle_from(T v, unsigned int src_lane) {
    static_assert(sizeof(T) <= 8, "emulated shuffles move at most 8 bytes");
    unsigned int lane = lane_id();
    memcpy(warp_slot(lane), &v, sizeof(T));
    warp_barrier();
    T out;
    memcpy(&out, warp_slot(src_lane & 31u), sizeof(T));
    warp_barrier(); /* nobody may overwrite a slot before every lane has read */
    return out;
}
} // namespace emu

inline void __syncthreads() { emu::block_barrier(); }
inline int __syncthreads_count(int p) { return emu::block_count(p); }
inline int __syncthreads_or(int p) { return emu::block_count(p) > 0; }
inline void __syncwarp(unsigned int mask = 0xffffffffu) {
    (void)mask;
    emu::warp_barrier();
}
template <typename T> T __shfl_xor_sync(unsigned int mask, T v, int lane_mask, int width = 32) {
    (void)mask, (void)width;
    return emu::shuffle_from(v, emu::lane_id() ^ (unsigned int)lane_mask);
}
template <typename T> T __shfl_sync(unsigned int mask, T v, int src, int width = 32) {
    (void)mask;
    unsigned int base = emu::lane_id() & ~(unsigned int)(width - 1);
    return emu::shuffle_from(v, base + ((unsigned int)src & (unsigned int)(width - 1)));
}
template <typename T> T __shfl_down_sync(unsigned int mask, T v, unsigned int delta, int width = 32) {
    (void)mask;
    unsigned int lane = emu::lane_id(), in_seg = lane & (unsigned int)(width - 1);
    return emu::shuffle_from(v, in_seg + delta < (unsigned int)width ? lane + delta : lane);
}
template <typename T> T __shfl_up_sync(unsigned int mask, T v, unsigned int delta, int width = 32) {
    (void)mask;
    unsigned int lane = emu::lane_id(), in_seg = lane & (unsigned int)(width - 1);
    return emu::shuffle_from(v, in_seg >= delta ? lane - delta : lane);
}

/* IEEE single operations without contraction: the emulated .cu files are
 * compiled with -ffp-contract=off, so these are exact twins of the intrinsics. */
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
inline float __expf(float x) { return expf(x); }
inline float __logf(float x) { return logf(x); }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x); }
inline int __float2int_rn(float x) { return (int)nearbyintf(x); }
inline float __int_as_float(int i) {
    float f;
    memcpy(&f, &i, 4);
    return f;
}
inline float __uint_as_float(unsigned int u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
inline unsigned int __float_as_uint(float f) {
    unsigned int u;
    memcpy(&u, &f, 4);
    return u;
}
inline int __float_as_int(float f) {
    int i;
    memcpy(&i, &f, 4);
    return i;
}

/* Atomics: fibers never preempt each other, so plain read-modify-write is atomic. */
template <typename T> T atomicAdd(T *p, T v) {
    T old = *p;
    *p = old + v;
    return old;
}
template <typename T> T atomicMax(T *p, T v) {
    T old = *p;
    if (v > old) *p = v;
    return old;
}
template <typename T> T atomicMin(T *p, T v) {
    T old = *p;
    if (v < old) *p = v;
    return old;
}
template <typename T> T atomicOr(T *p, T v) {
    T old = *p;
    *p = old | v;
    return old;
}
template <typename T> T atomicExch(T *p, T v) {
    T old = *p;
    *p = v;
    return old;
}
template <typename T> T atomicCAS(T *p, T cmp, T v) {
    T old = *p;
    if (old == cmp) *p = v;
    return old;
}
inline void __threadfence() {}
#endif /* __cplusplus */
#endif
