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
 * here). Launches are checked against sm_90's limits (docs/emulator.md).
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
    cudaErrorInvalidDevice = 101,
    cudaErrorNotReady = 600, /* cudaEventQuery: not yet (never here: work completes at its call) */
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
typedef struct CUevent_st *cudaEvent_t;
#define cudaStreamDefault 0x0u
#define cudaStreamNonBlocking 0x1u
#define cudaEventDefault 0x0u
#define cudaEventDisableTiming 0x2u
typedef struct {
    char name[256];
    size_t totalGlobalMem;
    int major, minor, multiProcessorCount;
    int pciBusID, pciDeviceID, pciDomainID; /* distinct per emulated device */
} cudaDeviceProp;

cudaError_t cudaGetDeviceCount(int *n);
/* Emulator only: whether the played machine has an NVIDIA driver installed
 * (KVCPT_EMU_DEVICES, see emu_runtime.cc). */
int emu_nvidia_driver_installed(void);
/* The current device, per host thread as in the real runtime (a new thread
 * starts on device 0). KVCPT_EMU_DEVICES=N plays N devices. */
cudaError_t cudaSetDevice(int dev);
cudaError_t cudaGetDevice(int *dev);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int dev);
cudaError_t cudaDeviceGetAttribute(int *value, cudaDeviceAttr attr, int dev);
cudaError_t cudaMalloc(void **p, size_t bytes);
/* The emulated device's memory is the host's: free = available, total = physical RAM. */
cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes);
cudaError_t cudaMallocAsync(void **p, size_t bytes, cudaStream_t st);
/* Page-locking host memory for fast copies: refused (cudaErrorInvalidValue)
 * for device memory, a null or empty range, a range overlapping one already
 * registered, and, on unregistering, a pointer that was not registered. */
#define cudaHostRegisterDefault 0x0u
cudaError_t cudaHostRegister(void *p, size_t bytes, unsigned int flags);
cudaError_t cudaHostUnregister(void *p);
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
/* Streams and events. The emulator runs every launch, copy and collective
 * to completion at its call, so the host's call order is the order on every
 * stream and any cross-stream ordering is already satisfied: these are
 * handles whose creation, use and destruction are checked: an unknown or
 * destroyed handle is cudaErrorInvalidValue (on a GPU it is undefined
 * behaviour or cudaErrorInvalidResourceHandle). */
cudaError_t cudaStreamCreate(cudaStream_t *st);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *st, unsigned int flags);
cudaError_t cudaStreamDestroy(cudaStream_t st);
cudaError_t cudaEventCreate(cudaEvent_t *ev);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *ev, unsigned int flags);
cudaError_t cudaEventDestroy(cudaEvent_t ev);
cudaError_t cudaEventRecord(cudaEvent_t ev, cudaStream_t st);
cudaError_t cudaEventSynchronize(cudaEvent_t ev);
/* Thread-safe, as on a GPU (parallel/nccl_watchdog.c polls from its own thread). */
cudaError_t cudaEventQuery(cudaEvent_t ev);
cudaError_t cudaStreamWaitEvent(cudaStream_t st, cudaEvent_t ev, unsigned int flags);
/* Emulator only: 1 when st is the default stream (0) or a live stream. */
int emu_stream_valid(cudaStream_t st);
/* Emulator only: when p points into a live cudaMalloc allocation, 1, the
 * bytes from p to the allocation's end and the device it was allocated on
 * (either out pointer may be NULL); 0 for any other pointer (host memory,
 * freed memory). The emulated NCCL checks its buffers with it. */
int emu_device_extent(const void *p, size_t *bytes_after, int *device);
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
/* aligned as the real vector type: a misaligned dereference is undefined
 * behaviour that UBSan reports in the sanitizer build */
struct alignas(16) uint4 {
    unsigned int x, y, z, w;
};
inline uint4 make_uint4(unsigned int x, unsigned int y, unsigned int z, unsigned int w) { return uint4{x, y, z, w}; }

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
/* as CUDA defines it: an attribute, valid after "static" too (__shared__ __align__(16) T a[n]) */
#define __align__(n) __attribute__((aligned(n)))
#define __restrict__ __restrict

namespace emu {
struct Config {
    dim3 grid, block;
    size_t smem;
    const char *name = nullptr; /* the kernel's name as the launch wrote it (cu2cc.sh), for messages */
    cudaStream_t stream;
    Config(dim3 g, dim3 b, size_t s = 0, cudaStream_t st = 0) : grid(g), block(b), smem(s), stream(st) {}
    Config &named(const char *n) {
        name = n;
        return *this;
    }
};
/* Runs body once per thread of every block of the grid, after checking the
 * launch as a GPU does: an invalid one runs nothing and sets the last error. */
void run_grid(const Config &c, const void *kernel, const std::function<void()> &body);
/* The block's dynamic shared memory (exactly the launch's smem bytes, 16-aligned, filled with 0xff bytes). */
void *dynamic_smem();
/* A static __shared__ variable of the running kernel (cu2cc.sh adds the call
 * after each declaration): counted once per launch against the limits. */
void static_smem(const void *var, size_t bytes, const char *name);
void block_barrier();
/* __syncthreads_count: a barrier that also counts the threads passing a nonzero value. */
int block_count(int predicate);
/* A vector load or store of `bytes` at p by the running thread: stops the
 * program, naming the kernel and thread, unless p is `bytes`-aligned (a GPU
 * faults with "misaligned address"). Kernels call it through
 * kernels/cuda_common.cuh's vector helpers. */
void check_vector_access(const void *p, size_t bytes, const char *what);
/* A pointer argument (number arg, from 0) of a launch: when it falls inside
 * a cudaMalloc'd block of another device than the current one, the program
 * stops naming the kernel and both devices (a GPU without peer access
 * faults). Pointers inside struct arguments are not seen. */
void check_launch_pointer(const Config &c, int arg, const void *p);
/* Stream order. Work runs at its call here, but on a GPU an operation on one
 * stream may still be running while another stream's work starts, unless an
 * event recorded after it was waited for (cudaStreamWaitEvent) or the host
 * synchronized. stream_writes notes that an operation enqueued on st (the
 * emulated NCCL's, on its own stream) writes [p, p + bytes); a kernel
 * argument or a copy on another stream that points into those bytes before
 * that stream is ordered after the operation stops the program, naming
 * both (on a GPU it would read a partly written buffer). */
void stream_writes(cudaStream_t st, const void *p, size_t bytes, const char *what);
void check_stream_order(cudaStream_t st, const void *p, const char *who, int arg);
template <typename A> inline void check_launch_arg(const Config &c, int arg, const A &a) {
    if constexpr (std::is_pointer<A>::value) check_launch_pointer(c, arg, (const void *)a);
}
template <typename F, typename... Args> void launch(const Config &c, F *kernel, Args... args) {
    int arg = 0;
    (check_launch_arg(c, arg++, args), ...);
    (void)arg;
    run_grid(c, (const void *)kernel, [=]() { kernel(args...); });
}

/* The warp-wide intrinsics, each its own operation: the lanes named in a
 * mask must all call the same one with the same mask (sm_70 and later allow
 * them to do so from different call sites). */
enum WarpOp {
    WARP_SHFL_IDX,
    WARP_SHFL_UP,
    WARP_SHFL_DOWN,
    WARP_SHFL_XOR,
    WARP_SYNCWARP,
    WARP_BALLOT,
    WARP_ANY,
    WARP_ALL,
    /* the warp-level matrix instructions (warp_matrix_op below, kernels/mma.cuh) */
    WARP_MMA_M16N8K16_BF16,
    WARP_LDMATRIX_M8N8
};
/* The calling lane's part in a warp intrinsic: it waits until every live lane
 * named in mask has called the same intrinsic with the same mask; then the
 * scheduler computes each lane's result from the values all of them passed
 * (a shuffle's source lane from arg and width, as the CUDA programming guide
 * defines them). What the guide leaves undefined (a mask without the caller,
 * a source lane outside the mask, exited or beyond blockDim, mismatched
 * masks, a width that is not a power of two up to 32) stops the program
 * with a message naming the kernel, block, lane and mask. It is defined in
 * emu_runtime.cc, never inlined: its return address tells call sites apart. */
uint64_t warp_op(WarpOp op, unsigned int mask, uint64_t value, unsigned int arg, int width);

/* The warp-level matrix instructions (mma.sync, ldmatrix: .sync.aligned in
 * the PTX ISA): every one of the 32 lanes of a full warp must execute the
 * same instruction (the same call site, the same qualifiers in arg); a lane
 * that has exited, a lane beyond a partial warp, or lanes at another call
 * site stop the program (the ISA: undefined). in is the calling lane's
 * operands, out receives its results; both stay on the lane's stack until
 * the warp completes (emu_mma.cc computes the results from all 32 ins).
 * The call site is the return address, so the wrappers below always
 * inline: each instruction in a kernel is its own site. */
void warp_matrix_op(WarpOp op, unsigned int arg, const void *in, void *out);
/* Stops the program unless [p, p + bytes) lies inside the running block's
 * shared memory (the launch's dynamic bytes or one static __shared__
 * variable) and p is a multiple of align: what ldmatrix's row addresses
 * must be. what names the instruction in the message. */
void check_shared(const void *p, size_t bytes, size_t align, const char *what);

/* cp.async (kernels/cp_async.cuh), per thread. cp_async_16 checks the copy
 * (a 16-byte aligned destination inside the block's shared memory, a 16-byte
 * aligned source inside a cudaMalloc'd block) and queues it in the thread's
 * open group, copying nothing; cp_async_commit closes that group;
 * cp_async_wait(n) performs, in issue order, the copies of every committed
 * group but the n most recent; cp_async_wait_all commits and waits for all.
 * A thread that ends with copies not waited for stops the program. Never
 * inlined: the return address is the call site named in reports. */
void cp_async_16(void *smem_dst, const void *global_src);
void cp_async_commit();
void cp_async_wait(unsigned int n);
void cp_async_wait_all();

/* One lane's operands of mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32
 * (the registers as the PTX ISA numbers them: a0..a3, b0..b1, c0..c3). */
struct MmaBf16Lane {
    uint32_t a[4], b[2];
    float c[4];
};
inline __attribute__((always_inline)) void mma_m16n8k16_bf16(float d[4], const uint32_t a[4], const uint32_t b[2],
                                                             const float c[4]) {
    MmaBf16Lane in;
    for (int i = 0; i < 4; i++) in.a[i] = a[i], in.c[i] = c[i];
    in.b[0] = b[0], in.b[1] = b[1];
    float out[4];
    warp_matrix_op(WARP_MMA_M16N8K16_BF16, 0, &in, out);
    for (int i = 0; i < 4; i++) d[i] = out[i];
}
/* ldmatrix.sync.aligned.m8n8.{x1,x2,x4}{,.trans}.shared.b16: lanes 8j..8j+7
 * give the rows of matrix j; only the lanes whose addresses are used read
 * their 16-byte row, here in the lane's own code, so the race detector sees
 * the read as that lane's (build/emu-race). */
typedef uint32_t __attribute__((__may_alias__)) SmemWord;
inline __attribute__((always_inline)) void ldmatrix_m8n8_b16(uint32_t *r, unsigned int num, bool trans,
                                                             const void *row) {
    unsigned int lane = (threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) & 31u;
    uint32_t words[4] = {0, 0, 0, 0};
    if (lane < 8 * num) {
        check_shared(row, 16, 16, "ldmatrix.sync.aligned.m8n8");
        const SmemWord *w = (const SmemWord *)row;
        for (int i = 0; i < 4; i++) words[i] = w[i];
    }
    uint32_t out[4];
    warp_matrix_op(WARP_LDMATRIX_M8N8, num | (trans ? 16u : 0u), words, out);
    for (unsigned int i = 0; i < num; i++) r[i] = out[i];
}

template <typename T> T shuffle(WarpOp op, unsigned int mask, T v, unsigned int arg, int width) {
    static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value, "emulated shuffles move at most 8 bytes");
    uint64_t bits = 0;
    memcpy(&bits, &v, sizeof(T));
    bits = warp_op(op, mask, bits, arg, width);
    T out;
    memcpy(&out, &bits, sizeof(T));
    return out;
}
} // namespace emu

inline void __syncthreads() { emu::block_barrier(); }
inline int __syncthreads_count(int p) { return emu::block_count(p); }
inline int __syncthreads_or(int p) { return emu::block_count(p) > 0; }
inline void __syncwarp(unsigned int mask = 0xffffffffu) { emu::warp_op(emu::WARP_SYNCWARP, mask, 0, 0, 32); }
template <typename T> T __shfl_sync(unsigned int mask, T v, int src, int width = 32) {
    return emu::shuffle(emu::WARP_SHFL_IDX, mask, v, (unsigned int)src, width);
}
template <typename T> T __shfl_xor_sync(unsigned int mask, T v, int lane_mask, int width = 32) {
    return emu::shuffle(emu::WARP_SHFL_XOR, mask, v, (unsigned int)lane_mask, width);
}
template <typename T> T __shfl_down_sync(unsigned int mask, T v, unsigned int delta, int width = 32) {
    return emu::shuffle(emu::WARP_SHFL_DOWN, mask, v, delta, width);
}
template <typename T> T __shfl_up_sync(unsigned int mask, T v, unsigned int delta, int width = 32) {
    return emu::shuffle(emu::WARP_SHFL_UP, mask, v, delta, width);
}
inline unsigned int __ballot_sync(unsigned int mask, int predicate) {
    return (unsigned int)emu::warp_op(emu::WARP_BALLOT, mask, predicate != 0, 0, 32);
}
inline int __any_sync(unsigned int mask, int predicate) {
    return (int)emu::warp_op(emu::WARP_ANY, mask, predicate != 0, 0, 32);
}
inline int __all_sync(unsigned int mask, int predicate) {
    return (int)emu::warp_op(emu::WARP_ALL, mask, predicate != 0, 0, 32);
}

/* IEEE single operations that nvcc never merges into a multiply-add. The
 * emulated kernels build with contraction on (-ffp-contract=fast, and FMA
 * instructions where the CPU has them) as nvcc builds device code, so g++
 * would fuse a*b + c across these inline functions; the empty asm
 * statements make each operand and result an opaque register value that no
 * fused instruction can absorb (emu_checks arith proves it). */
#if defined(__x86_64__)
#define EMU_OPAQUE_FLOAT(v) asm volatile("" : "+x"(v))
#elif defined(__aarch64__)
#define EMU_OPAQUE_FLOAT(v) asm volatile("" : "+w"(v))
#else
#define EMU_OPAQUE_FLOAT(v) asm volatile("" : "+m"(v))
#endif
inline float __fmul_rn(float a, float b) {
    float r = a * b;
    EMU_OPAQUE_FLOAT(r);
    return r;
}
inline float __fadd_rn(float a, float b) {
    EMU_OPAQUE_FLOAT(a);
    EMU_OPAQUE_FLOAT(b);
    return a + b;
}
inline float __fsub_rn(float a, float b) {
    EMU_OPAQUE_FLOAT(a);
    EMU_OPAQUE_FLOAT(b);
    return a - b;
}
inline double __dmul_rn(double a, double b) {
    double r = a * b;
    EMU_OPAQUE_FLOAT(r);
    return r;
}
inline double __dadd_rn(double a, double b) {
    EMU_OPAQUE_FLOAT(a);
    EMU_OPAQUE_FLOAT(b);
    return a + b;
}
inline long long __double_as_longlong(double d) {
    long long i;
    memcpy(&i, &d, 8);
    return i;
}
inline double __longlong_as_double(long long i) {
    double d;
    memcpy(&d, &i, 8);
    return d;
}
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fsqrt_rn(float x) { return sqrtf(x); }
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

/* Atomics: fibers never preempt each other, so plain read-modify-write is
 * atomic. The race variant (build/emu-race/, emu_race.cc) marks the accesses
 * inside one as atomic, which never race with each other. */
#ifdef KVCPT_EMU_RACE
namespace emu {
namespace race {
void atomic_begin();
void atomic_end();
struct AtomicScope {
    AtomicScope() { atomic_begin(); }
    ~AtomicScope() { atomic_end(); }
};
} // namespace race
} // namespace emu
#define EMU_ATOMIC_SCOPE emu::race::AtomicScope emu_atomic_scope_
#else
#define EMU_ATOMIC_SCOPE
#endif
template <typename T> T atomicAdd(T *p, T v) {
    EMU_ATOMIC_SCOPE;
    T old = *p;
    *p = old + v;
    return old;
}
template <typename T> T atomicMax(T *p, T v) {
    EMU_ATOMIC_SCOPE;
    T old = *p;
    if (v > old) *p = v;
    return old;
}
template <typename T> T atomicMin(T *p, T v) {
    EMU_ATOMIC_SCOPE;
    T old = *p;
    if (v < old) *p = v;
    return old;
}
template <typename T> T atomicOr(T *p, T v) {
    EMU_ATOMIC_SCOPE;
    T old = *p;
    *p = old | v;
    return old;
}
template <typename T> T atomicExch(T *p, T v) {
    EMU_ATOMIC_SCOPE;
    T old = *p;
    *p = v;
    return old;
}
template <typename T> T atomicCAS(T *p, T cmp, T v) {
    EMU_ATOMIC_SCOPE;
    T old = *p;
    if (old == cmp) *p = v;
    return old;
}
inline void __threadfence() {}
#endif /* __cplusplus */
#endif
