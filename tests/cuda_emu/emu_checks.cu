/* Checks of the CUDA emulator itself (run by tests/test_cuda_emu_orders.sh),
 * built from this .cu file by tests/cuda_emu/cu2cc.sh as the kernels are.
 *   emu_checks limits          launch limits and launch errors as on sm_90:
 *                              ok / FAIL lines
 *   emu_checks race            planted races: prints "threads S of N stale"
 *                              and "blocks S of N stale" (the script knows
 *                              what each KVCPT_EMU_ORDER must give)
 *   emu_checks planted-launch  an oversized launch on a launch path written
 *                              as the project's are (CUDA_CHECK_LAUNCH):
 *                              must stop the program with the error
 * For the race detector (build/emu-race/emu_checks, tests/test_cuda_emu_races.sh):
 *   emu_checks race-threads    a shared value read with no __syncthreads after
 *                              thread 0 writes it
 *   emu_checks race-offbyone   each thread writes its two shared slots, the
 *                              second one index too far: its neighbour's
 *   emu_checks race-blocks     a flag block 0 writes and the other blocks read
 *   emu_checks race-warp       lanes of one warp read their neighbour's shared
 *                              slot with no __syncwarp after writing their own
 *   emu_checks race-warps      the same with __syncwarp, across two warps
 *                              (a warp sync does not order other warps)
 *   emu_checks race-atomic     a plain read of a counter other blocks add to
 *                              atomically
 *   emu_checks race-free       the same kernels made right, atomics, and
 *                              neighbouring bytes: must report nothing */
#include <stdio.h>
#include <string.h>

#include "cuda_common.cuh"

static int failures = 0;
static void check(int cond, const char *name, const char *why) {
    if (cond) printf("ok - %s\n", name);
    else printf("FAIL - %s: %s\n", name, why), failures++;
}

__global__ void mark_kernel(int *ran) { atomicAdd(ran, 1); }

__global__ void smem_kernel(int *ran, int bytes) {
    extern __shared__ unsigned char buf[];
    buf[0] = 1;
    buf[bytes - 1] = 2; /* the whole request is there */
    atomicAdd(ran, 1);
}
__global__ void smem_kernel_unraised(int *ran, int bytes) {
    extern __shared__ unsigned char buf[];
    buf[bytes - 1] = 2;
    atomicAdd(ran, 1);
}

/* 32 KB of static shared memory, next to the launch's dynamic bytes */
__global__ void static_smem_kernel(int *ran, int bytes) {
    __shared__ float big[8192];
    extern __shared__ unsigned char buf[];
    big[threadIdx.x] = 1.0f;
    buf[bytes - 1] = 2;
    atomicAdd(ran, 1);
}
__global__ void static_smem_kernel_raised(int *ran, int bytes) {
    __shared__ float big[8192];
    extern __shared__ unsigned char buf[];
    big[threadIdx.x] = 1.0f;
    buf[bytes - 1] = 2;
    atomicAdd(ran, 1);
}

static int *ran;
static int runs(void) {
    int n = 0;
    CUDA_CHECK(cudaMemcpy(&n, ran, sizeof n, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemset(ran, 0, sizeof(int)));
    return n;
}

/* A refused launch: nothing ran, the error is peeked (and stays), then read
 * (and reset). */
static void expect_refused(const char *name, cudaError_t want) {
    char n[256], why[256];
    int r = runs();
    cudaError_t peek = cudaPeekAtLastError(), peek2 = cudaPeekAtLastError(), got = cudaGetLastError(),
                after = cudaGetLastError();
    snprintf(n, sizeof n, "%s: refused with %s (\"%s\"), nothing ran, error read once", name, cudaGetErrorName(want),
             cudaGetErrorString(want));
    snprintf(why, sizeof why, "ran %d threads; peek %s, peek again %s, get %s, get again %s", r, cudaGetErrorName(peek),
             cudaGetErrorName(peek2), cudaGetErrorName(got), cudaGetErrorName(after));
    check(r == 0 && peek == want && peek2 == want && got == want && after == cudaSuccess, n, why);
}

static void expect_ran(const char *name, int threads) {
    char n[256], why[256];
    int r = runs();
    cudaError_t got = cudaGetLastError();
    snprintf(n, sizeof n, "%s: runs all %d threads, no error", name, threads);
    snprintf(why, sizeof why, "ran %d threads, last error %s", r, cudaGetErrorName(got));
    check(r == threads && got == cudaSuccess, n, why);
}

static int limits(void) {
    CUDA_CHECK(cudaMalloc(&ran, sizeof(int)));
    CUDA_CHECK(cudaMemset(ran, 0, sizeof(int)));
    const cudaError_t cfg = cudaErrorInvalidConfiguration, val = cudaErrorInvalidValue;

    mark_kernel<<<1, 1024>>>(ran);
    expect_ran("block of 1024 threads", 1024);
    mark_kernel<<<1, 1025>>>(ran);
    expect_refused("block of 1025 threads", cfg);
    mark_kernel<<<1, dim3(32, 32, 2)>>>(ran);
    expect_refused("block (32,32,2): 2048 threads", cfg);
    mark_kernel<<<1, dim3(1, 1, 65)>>>(ran);
    expect_refused("block z of 65", cfg);
    mark_kernel<<<1, dim3(1, 1025, 1)>>>(ran);
    expect_refused("block y of 1025", cfg);
    mark_kernel<<<1, dim3(1, 1, 64)>>>(ran);
    expect_ran("block z of 64", 64);
    mark_kernel<<<dim3(1, 65536, 1), 1>>>(ran);
    expect_refused("grid y of 65536", cfg);
    mark_kernel<<<dim3(1, 1, 65536), 1>>>(ran);
    expect_refused("grid z of 65536", cfg);
    mark_kernel<<<dim3(0x80000000u, 1, 1), 1>>>(ran);
    expect_refused("grid x of 2^31", cfg);
    mark_kernel<<<0, 32>>>(ran);
    expect_refused("grid of 0 blocks", cfg);
    mark_kernel<<<1, 0>>>(ran);
    expect_refused("block of 0 threads", cfg);

    const int k48 = 48 * 1024, k227 = 227 * 1024;
    smem_kernel_unraised<<<1, 1, k48>>>(ran, k48);
    expect_ran("48 KB dynamic shared memory without the attribute", 1);
    smem_kernel_unraised<<<1, 1, k48 + 1>>>(ran, k48 + 1);
    expect_refused("48 KB + 1 dynamic shared memory without the attribute", val);
    check(cudaFuncSetAttribute(smem_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, k227) == cudaSuccess &&
              cudaGetLastError() == cudaSuccess,
          "cudaFuncSetAttribute to 227 KB succeeds", "it failed");
    smem_kernel<<<1, 1, k48 + 1>>>(ran, k48 + 1);
    expect_ran("48 KB + 1 dynamic shared memory with the attribute at 227 KB", 1);
    smem_kernel<<<1, 1, k227>>>(ran, k227);
    expect_ran("227 KB dynamic shared memory with the attribute", 1);
    smem_kernel<<<1, 1, k227 + 1>>>(ran, k227 + 1);
    expect_refused("227 KB + 1 dynamic shared memory with the attribute at 227 KB", val);
    smem_kernel_unraised<<<1, 1, k48 + 1>>>(ran, k48 + 1);
    expect_refused("the attribute is per kernel: another kernel still has 48 KB", val);
    cudaError_t e = cudaFuncSetAttribute(smem_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, k227 + 1);
    check(e == val && cudaGetLastError() == val && cudaGetLastError() == cudaSuccess,
          "cudaFuncSetAttribute to 227 KB + 1 fails with cudaErrorInvalidValue and sets the last error",
          cudaGetErrorName(e));
    smem_kernel<<<1, 1, k227>>>(ran, k227);
    expect_ran("a refused cudaFuncSetAttribute leaves the kernel's limit as it was", 1);
    CUDA_CHECK(cudaFuncSetAttribute(smem_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 1000));
    smem_kernel<<<1, 1, 1001>>>(ran, 1001);
    expect_refused("the attribute can lower a kernel's limit below 48 KB", val);

    static_smem_kernel<<<1, 1, 16 * 1024>>>(ran, 16 * 1024);
    expect_ran("32 KB static and 16 KB dynamic shared memory without the attribute", 1);
    CUDA_CHECK(cudaFuncSetAttribute(static_smem_kernel_raised, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 * 1024));
    static_smem_kernel_raised<<<1, 1, 64 * 1024>>>(ran, 64 * 1024);
    expect_ran("32 KB static and 64 KB dynamic shared memory with the attribute at 64 KB", 1);

    /* sticky until read: a good launch after a bad one leaves the error */
    mark_kernel<<<1, 2048>>>(ran);
    mark_kernel<<<1, 32>>>(ran);
    int r = runs();
    cudaError_t got = cudaGetLastError();
    check(r == 32 && got == cfg, "a launch error stays until read, through later good launches",
          cudaGetErrorName(got));
    check(strcmp(cudaGetErrorString(cfg), "invalid configuration argument") == 0 &&
              strcmp(cudaGetErrorName(cfg), "cudaErrorInvalidConfiguration") == 0 &&
              strcmp(cudaGetErrorString(val), "invalid argument") == 0,
          "cudaGetErrorString and cudaGetErrorName name the launch errors as the runtime does",
          cudaGetErrorString(cfg));
    CUDA_CHECK(cudaFree(ran));
    return failures ? 1 : 0;
}

/* Planted race: thread 0 writes shared memory and the others read it with no
 * __syncthreads between; on a GPU they may read before the write. */
__global__ void race_threads_kernel(int *out, int v) {
    __shared__ int s;
    if (threadIdx.x == 0) s = v;
    out[threadIdx.x] = s;
}
/* Planted race between blocks: block 0 sets a flag the others read. */
__global__ void race_blocks_kernel(int *out, int *flag) {
    if (blockIdx.x == 0 && threadIdx.x == 0) *flag = 1;
    if (threadIdx.x == 0) out[blockIdx.x] = *flag;
}

/* Each thread owns the two slots 2t and 2t+1; with off = 1 the second write
 * goes to 2t+2, the neighbour's first slot, in the same barrier interval. */
__global__ void pairs_kernel(int *out, int off) {
    __shared__ int pairs[2 * 256 + 2];
    const int t = threadIdx.x;
    pairs[2 * t] = t;
    pairs[2 * t + 1 + off] = -t;
    __syncthreads();
    out[t] = pairs[2 * t] + pairs[2 * t + 1];
}
/* Lanes write their slot then read the next lane's: ordered only by the
 * __syncwarp (sync = 1), and only within the warp. */
__global__ void neighbour_kernel(int *out, int sync) {
    __shared__ int lanes[1024];
    const int t = threadIdx.x, next = (t + 1) % blockDim.x;
    lanes[t] = 3 * t;
    if (sync) __syncwarp();
    out[t] = lanes[next];
}
/* The same made right by a shuffle between the write and the read (a shuffle
 * syncs the warp as __syncwarp does). */
__global__ void neighbour_shuffle_kernel(int *out) {
    __shared__ int lanes[32];
    const int t = threadIdx.x;
    lanes[t] = 3 * t;
    int from_next = __shfl_down_sync(0xffffffffu, t, 1);
    out[t] = lanes[(t + 1) % 32] + from_next;
}
/* Every block adds to one counter; with peek = 1, thread 0 of each block
 * also reads it plainly, which races with the other blocks' atomics. */
__global__ void count_kernel(int *counter, int *out, int peek) {
    atomicAdd(counter, 1);
    atomicMax(counter + 1, (int)blockIdx.x);
    if (peek && threadIdx.x == 0) out[blockIdx.x] = *counter;
}
/* Neighbouring bytes and bf16-sized halves of one 4-byte word written by
 * different threads at once: no common byte, no race. */
__global__ void bytes_kernel(unsigned char *bytes, unsigned short *halves) {
    __shared__ unsigned char sb[256];
    const int t = threadIdx.x;
    sb[t] = (unsigned char)t;
    bytes[blockIdx.x * blockDim.x + t] = (unsigned char)t;
    halves[blockIdx.x * blockDim.x + t] = (unsigned short)t;
    __syncthreads();
    bytes[blockIdx.x * blockDim.x + t] = sb[255 - t];
}
/* The shared value of race_threads_kernel behind a barrier, in several
 * blocks: each block's shared memory is its own. */
__global__ void broadcast_kernel(int *out, int v) {
    __shared__ int s;
    if (threadIdx.x == 0) s = v + (int)blockIdx.x;
    __syncthreads();
    out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}

__global__ void read_counter_kernel(int *out, const int *counter) {
    if (threadIdx.x == 0) out[blockIdx.x] = counter[0] + counter[1];
}

static int race_one(const char *which) {
    const int n = 256;
    int *out, *flag;
    CUDA_CHECK(cudaMalloc(&out, sizeof(int) * 4 * n));
    CUDA_CHECK(cudaMalloc(&flag, 2 * sizeof(int)));
    CUDA_CHECK(cudaMemset(flag, 0, 2 * sizeof(int)));
    if (strcmp(which, "race-threads") == 0) race_threads_kernel<<<1, n>>>(out, 42);
    else if (strcmp(which, "race-offbyone") == 0) pairs_kernel<<<1, n>>>(out, 1);
    else if (strcmp(which, "race-blocks") == 0) race_blocks_kernel<<<64, 32>>>(out, flag);
    else if (strcmp(which, "race-warp") == 0) neighbour_kernel<<<1, 32>>>(out, 0);
    else if (strcmp(which, "race-warps") == 0) neighbour_kernel<<<1, 64>>>(out, 1);
    else if (strcmp(which, "race-atomic") == 0) count_kernel<<<8, 32>>>(flag, out, 1);
    else {
        fprintf(stderr, "unknown race %s\n", which);
        return 2;
    }
    CUDA_CHECK_LAUNCH();
    CUDA_CHECK(cudaDeviceSynchronize());
    printf("planted race %s was not stopped\n", which);
    return 0;
}

static int race_free(void) {
    const int n = 256;
    int *out, *counter, h[2];
    unsigned char *bytes;
    unsigned short *halves;
    CUDA_CHECK(cudaMalloc(&out, sizeof(int) * 4 * n));
    CUDA_CHECK(cudaMalloc(&counter, 2 * sizeof(int)));
    CUDA_CHECK(cudaMalloc(&bytes, 4 * n));
    CUDA_CHECK(cudaMalloc(&halves, 4 * n * sizeof(unsigned short)));
    CUDA_CHECK(cudaMemset(counter, 0, 2 * sizeof(int)));
    pairs_kernel<<<1, n>>>(out, 0);
    CUDA_CHECK_LAUNCH();
    neighbour_kernel<<<1, 32>>>(out, 1);
    CUDA_CHECK_LAUNCH();
    neighbour_shuffle_kernel<<<1, 32>>>(out);
    CUDA_CHECK_LAUNCH();
    count_kernel<<<8, 32>>>(counter, out, 0);
    CUDA_CHECK_LAUNCH();
    CUDA_CHECK(cudaMemcpy(h, counter, sizeof h, cudaMemcpyDeviceToHost));
    check(h[0] == 256 && h[1] == 7, "race-free: atomics of 8 blocks on one counter", "wrong count");
    bytes_kernel<<<4, n>>>(bytes, halves);
    CUDA_CHECK_LAUNCH();
    broadcast_kernel<<<4, n>>>(out, 42);
    CUDA_CHECK_LAUNCH();
    /* every block reads what the previous launch's atomics wrote */
    read_counter_kernel<<<64, 32>>>(out, counter);
    CUDA_CHECK_LAUNCH();
    CUDA_CHECK(cudaDeviceSynchronize());
    printf("race-free kernels ran to the end\n");
    return failures ? 1 : 0;
}

static int race(void) {
    const int n = 256, nb = 64;
    int *out, *flag, h[256];
    CUDA_CHECK(cudaMalloc(&out, sizeof(int) * n));
    CUDA_CHECK(cudaMalloc(&flag, sizeof(int)));
    int stale = 0;
    race_threads_kernel<<<1, n>>>(out, 42);
    CUDA_CHECK_LAUNCH();
    CUDA_CHECK(cudaMemcpy(h, out, sizeof h, cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++) stale += h[i] != 42;
    printf("threads %d of %d stale\n", stale, n);
    CUDA_CHECK(cudaMemset(flag, 0, sizeof(int)));
    race_blocks_kernel<<<nb, 32>>>(out, flag);
    CUDA_CHECK_LAUNCH();
    CUDA_CHECK(cudaMemcpy(h, out, sizeof(int) * nb, cudaMemcpyDeviceToHost));
    stale = 0;
    for (int i = 0; i < nb; i++) stale += h[i] != 1;
    printf("blocks %d of %d stale\n", stale, nb);
    return 0;
}

/* Planted bug on a project-like launch path: a thread count over the limit. */
static const int kPlantedThreads = 2048;
__global__ void scale_kernel(float *x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= a;
}
static void scale_cuda(float *x, float a, int n) {
    scale_kernel<<<ceil_div_u(n, kPlantedThreads), kPlantedThreads>>>(x, a, n);
    CUDA_CHECK_LAUNCH();
}
static int planted_launch(void) {
    float *x;
    CUDA_CHECK(cudaMalloc(&x, sizeof(float) * 4096));
    scale_cuda(x, 2.0f, 4096);
    printf("planted launch was not stopped\n");
    return 0;
}

/* Static shared memory pushing a launch over 48 KB without the attribute. */
static int static_over(void) {
    CUDA_CHECK(cudaMalloc(&ran, sizeof(int)));
    static_smem_kernel<<<1, 1, 16 * 1024 + 1>>>(ran, 16 * 1024 + 1);
    CUDA_CHECK_LAUNCH();
    printf("static shared memory over the limit was not stopped\n");
    return 0;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "";
    if (strcmp(mode, "limits") == 0) return limits();
    if (strcmp(mode, "race") == 0) return race();
    if (strcmp(mode, "planted-launch") == 0) return planted_launch();
    if (strcmp(mode, "static-over") == 0) return static_over();
    if (strcmp(mode, "race-free") == 0) return race_free();
    if (strncmp(mode, "race-", 5) == 0) return race_one(mode);
    fprintf(stderr, "usage: %s limits|race|planted-launch|static-over|race-free|race-NAME\n", argv[0]);
    return 2;
}
