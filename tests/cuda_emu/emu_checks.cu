/* Checks of the CUDA emulator itself (run by tests/cuda_emu/test_cuda_emu_orders.sh),
 * built from this .cu file by tests/cuda_emu/cu2cc.sh as the kernels are.
 *   emu_checks limits          launch limits and launch errors as on sm_90:
 *                              ok / FAIL lines
 *   emu_checks race            planted races: prints "threads S of N stale"
 *                              and "blocks S of N stale" (the script knows
 *                              what each KVCPT_EMU_ORDER must give)
 *   emu_checks planted-launch  an oversized launch on a launch path written
 *                              as the project's are (CUDA_CHECK_LAUNCH):
 *                              must stop the program with the error
 * For the race detector (build/emu-race/emu_checks, tests/cuda_emu/test_cuda_emu_races.sh):
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
 *                              neighbouring bytes: must report nothing
 *   emu_checks warp            shuffles, __syncwarp and votes used as the
 *                              programming guide allows (partial masks,
 *                              widths, partial warps): ok / FAIL lines
 *   emu_checks shfl-exited | shfl-mask-caller | shfl-outside-mask |
 *              shfl-mixed-masks | shfl-partial-warp | syncwarp-vs-syncthreads
 *                              planted warp bugs: each must stop the program
 *                              with a message naming kernel, block, lane, mask
 *   emu_checks atomic-sum      planted schedule dependence: a float
 *                              atomicAdd over blocks (its digest must
 *                              differ between index and reverse order)
 *   emu_checks arith           a*b+c in a kernel is fused (as nvcc
 *                              contracts it); __fadd_rn(__fmul_rn(a,b),c) is not
 *   emu_checks sample-count    which blocks of a grid KVCPT_EMU_BLOCKS runs
 * Several devices (run with KVCPT_EMU_DEVICES=3, tests/cuda_emu/test_cuda_emu_devices.sh):
 *   emu_checks devices         cudaSetDevice/cudaGetDevice/properties per
 *                              device, an invalid ordinal refused and
 *                              recorded: ok / FAIL lines
 *   emu_checks cross-memcpy | cross-memset | cross-launch
 *                              planted: device 1's buffer used while device
 *                              0 is current; each must stop the program
 *                              with a message naming both devices
 * cp.async (kernels/cp_async.cuh):
 *   emu_checks cp-semantics    copies land at the wait covering their group,
 *                              not before (the plain build only: the race
 *                              variant reports those early reads): ok / FAIL
 *   emu_checks cp-ok           a double-buffered pipeline over 5 tiles in 3
 *                              blocks used rightly: ok / FAIL, no race report
 *   emu_checks cp-wait1 | cp-nosync | cp-overwrite
 *                              the same pipeline with a planted bug:
 *                              cp.async.wait_group 1 before the last tile
 *                              where 0 is needed; no __syncthreads after the
 *                              wait; no __syncthreads before the next tile's
 *                              copies overwrite the buffer another warp still
 *                              reads. Prints how many outputs are wrong, then
 *                              "not stopped" (the race variant stops each)
 *   emu_checks cp-misaligned-dst | cp-misaligned-src | cp-global-dst |
 *              cp-shared-src | cp-never-waited | cp-uncommitted
 *                              misuse every build stops: a destination or
 *                              source not 16-byte aligned, a global
 *                              destination, a shared source, a thread ending
 *                              with a copy in flight, a wait_group 0 that
 *                              cannot cover a copy never committed
 *   emu_checks cp-source-written | cp-dst-read
 *                              misuse the race variant reports: the source
 *                              written, the destination read, in flight
 * Planted out-of-bounds bugs, for the sanitizer build (build/emu-asan/
 * emu_checks, tests/sanitize_emu.sh asserts each report); each ends with a
 * "not stopped" line if it ran to the end:
 *   emu_checks oob-smem        a write one float past dynamic shared memory
 *   emu_checks oob-static-smem the same past a static __shared__ array
 *   emu_checks oob-global      a write one float past a cudaMalloc'd buffer
 *   emu_checks oob-carved      a write from one carved sub-buffer into the
 *                              red zone before the next (common/redzone.h)
 *   emu_checks overflow-8b     an int32 offset into logits of T x V at
 *                              Llama-3.1-8B's sizes (run it with
 *                              KVCPT_EMU_BLOCKS=sample) */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cuda_common.cuh"
#include "mma.cuh"

#include <kernels/cp_async.cuh>
#include "common/redzone.h"

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
    check(r == 32 && got == cfg, "a launch error stays until read, through later good launches", cudaGetErrorName(got));
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

/* ---- warp intrinsics ---- */

/* Every lane: a full-warp xor sum, a shfl from lane 3, down/up by 1 inside
 * 8-lane segments, and a ballot of odd lanes. */
__global__ void warp_full_kernel(int *out) {
    const int lane = threadIdx.x & 31;
    int v = lane + 1;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    out[threadIdx.x * 5 + 0] = v;
    out[threadIdx.x * 5 + 1] = __shfl_sync(0xffffffffu, lane * 10, 3);
    out[threadIdx.x * 5 + 2] = __shfl_down_sync(0xffffffffu, lane, 1, 8);
    out[threadIdx.x * 5 + 3] = __shfl_up_sync(0xffffffffu, lane, 1, 8);
    out[threadIdx.x * 5 + 4] = (int)__ballot_sync(0xffffffffu, lane & 1);
}
/* The two half warps shuffle apart (masks 0x0000ffff and 0xffff0000), then
 * lane 5 alone shuffles with itself before the whole warp syncs: different
 * masks at different call sites, all allowed. */
__global__ void warp_halves_kernel(int *out) {
    const unsigned int lane = threadIdx.x & 31, half = lane < 16 ? 0x0000ffffu : 0xffff0000u;
    int v = (int)lane;
    for (int o = 8; o > 0; o >>= 1) v += __shfl_xor_sync(half, v, o, 16);
    if (lane == 5) v += __shfl_sync(1u << 5, 100, 5);
    __syncwarp();
    out[threadIdx.x] = v + __any_sync(0xffffffffu, lane == 31) + __all_sync(0xffffffffu, lane < 32);
}
/* A partial warp (48 threads: warp 1 has lanes 0..15) reducing over the
 * lanes that exist, with the full mask as the project's kernels pass it. */
__global__ void warp_partial_kernel(int *out) {
    int v = 1;
    for (int o = 8; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    out[threadIdx.x] = v;
}

static int warp(void) {
    int *d, h[64 * 5];
    CUDA_CHECK(cudaMalloc(&d, sizeof h));
    warp_full_kernel<<<1, 64>>>(d);
    CUDA_CHECK_LAUNCH();
    CUDA_CHECK(cudaMemcpy(h, d, sizeof(int) * 64 * 5, cudaMemcpyDeviceToHost));
    int good = 1;
    for (int t = 0; t < 64; t++) {
        const int lane = t & 31, seg = lane & ~7;
        const int want[5] = {528, 30, lane + 1 <= seg + 7 ? lane + 1 : lane, lane - 1 >= seg ? lane - 1 : lane,
                             (int)0xaaaaaaaau};
        for (int k = 0; k < 5; k++) good &= h[t * 5 + k] == want[k];
    }
    check(good, "full-warp xor sum, shfl from lane 3, down/up within 8-lane segments, ballot",
          "a lane got another value");
    warp_halves_kernel<<<1, 32>>>(d);
    CUDA_CHECK_LAUNCH();
    CUDA_CHECK(cudaMemcpy(h, d, sizeof(int) * 32, cudaMemcpyDeviceToHost));
    good = 1;
    for (int l = 0; l < 32; l++) good &= h[l] == (l < 16 ? 120 : 376) + (l == 5 ? 100 : 0) + 2;
    check(good, "half-warp masks at one call site, a one-lane shuffle, then __syncwarp and votes of the whole warp",
          "a lane got another value");
    warp_partial_kernel<<<1, 48>>>(d);
    CUDA_CHECK_LAUNCH();
    CUDA_CHECK(cudaMemcpy(h, d, sizeof(int) * 48, cudaMemcpyDeviceToHost));
    good = 1;
    for (int t = 0; t < 48; t++) good &= h[t] == 16;
    check(good, "a partial warp (48 threads) shuffles among the lanes that exist", "a lane got another value");
    CUDA_CHECK(cudaFree(d));
    return failures ? 1 : 0;
}

/* Planted: lanes 16..31 return early, the rest then reduce over the whole
 * warp; lanes 0..15 read the exited lanes (a GPU gives garbage). */
__global__ void shfl_exited_kernel(float *out) {
    if ((threadIdx.x & 31) >= 16) return;
    float v = 1.0f;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    out[threadIdx.x] = v;
}
/* Planted: the mask names lanes 0..15 only, but every lane calls. */
__global__ void shfl_mask_caller_kernel(float *out) { out[threadIdx.x] = __shfl_xor_sync(0x0000ffffu, 1.0f, 1); }
/* Planted: lanes 0..7 shuffle among themselves but lane 7 reads lane 8,
 * which is alive (at a __syncwarp of the other lanes) yet not taking part. */
__global__ void shfl_outside_mask_kernel(float *out) {
    if ((threadIdx.x & 31) < 8) out[threadIdx.x] = __shfl_down_sync(0x000000ffu, 1.0f, 1, 16);
    else __syncwarp(0xffffff00u);
}
/* Planted: a mask computed per lane, so the lanes of one shuffle disagree. */
__global__ void shfl_mixed_masks_kernel(float *out) {
    const unsigned int mask = (threadIdx.x & 31) < 16 ? 0x0000ffffu : 0xffffffffu;
    out[threadIdx.x] = __shfl_xor_sync(mask, 1.0f, 1);
}
/* Planted: a full-warp reduction in a block of 48 threads (warp 1 has 16
 * lanes), the bug cuda_reduce.cuh's "a multiple of 32" rule prevents. */
__global__ void shfl_partial_warp_kernel(float *out) {
    float v = 1.0f;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    out[threadIdx.x] = v;
}
/* Planted: lane 0 syncs the warp while the others wait at __syncthreads. */
__global__ void syncwarp_vs_syncthreads_kernel(float *out) {
    if (threadIdx.x == 0) __syncwarp();
    else __syncthreads();
    out[threadIdx.x] = 1.0f;
}

static int planted_warp(const char *which) {
    float *d;
    CUDA_CHECK(cudaMalloc(&d, sizeof(float) * 64));
    if (strcmp(which, "shfl-exited") == 0) shfl_exited_kernel<<<2, 64>>>(d);
    else if (strcmp(which, "shfl-mask-caller") == 0) shfl_mask_caller_kernel<<<1, 32>>>(d);
    else if (strcmp(which, "shfl-outside-mask") == 0) shfl_outside_mask_kernel<<<1, 32>>>(d);
    else if (strcmp(which, "shfl-mixed-masks") == 0) shfl_mixed_masks_kernel<<<1, 32>>>(d);
    else if (strcmp(which, "shfl-partial-warp") == 0) shfl_partial_warp_kernel<<<1, 48>>>(d);
    else syncwarp_vs_syncthreads_kernel<<<1, 32>>>(d);
    CUDA_CHECK_LAUNCH();
    CUDA_CHECK(cudaDeviceSynchronize());
    printf("planted warp bug %s was not stopped\n", which);
    return 0;
}

/* Planted schedule dependence: every block adds its term to one float with
 * atomicAdd, so the sum's rounding depends on the order the blocks run in
 * (within tolerance of any order, but not bit-identical). */
__global__ void atomic_sum_kernel(float *sum) {
    if (threadIdx.x == 0) atomicAdd(sum, 1.0f / (float)(blockIdx.x + 3));
}
static int atomic_sum(void) {
    float *d, h;
    CUDA_CHECK(cudaMalloc(&d, sizeof(float)));
    CUDA_CHECK(cudaMemset(d, 0, sizeof(float)));
    atomic_sum_kernel<<<257, 32>>>(d);
    CUDA_CHECK_LAUNCH();
    CUDA_CHECK(cudaMemcpy(&h, d, sizeof h, cudaMemcpyDeviceToHost));
    printf("sum %a\n", h);
    CUDA_CHECK(cudaFree(d));
    return 0;
}

/* ---- arithmetic: contraction as nvcc does it ---- */

/* x = {a, b, c}: out = {a*b + c, __fadd_rn(__fmul_rn(a, b), c), __fmaf_rn(a, b, c)} */
__global__ void arith_kernel(float *out, const float *x) {
    out[0] = x[0] * x[1] + x[2];
    out[1] = __fadd_rn(__fmul_rn(x[0], x[1]), x[2]);
    out[2] = __fmaf_rn(x[0], x[1], x[2]);
    out[3] = __fadd_rn(x[0] * x[1], x[2]);
    out[4] = __fmul_rn(x[0], x[1]) + x[2];
}

static int arith(void) {
    /* a = b = 1 + 2^-12: a*b = 1 + 2^-11 + 2^-24, which rounds (a tie, to
     * even) to 1 + 2^-11; with c = -(1 + 2^-11) the fused result is 2^-24
     * and the separately rounded one 0. */
    const float a = 1.0f + ldexpf(1.0f, -12), c = -(1.0f + ldexpf(1.0f, -11));
    const float hx[3] = {a, a, c};
    float *dx, *dout, h[5];
    CUDA_CHECK(cudaMalloc(&dx, sizeof hx));
    CUDA_CHECK(cudaMalloc(&dout, sizeof h));
    CUDA_CHECK(cudaMemcpy(dx, hx, sizeof hx, cudaMemcpyHostToDevice));
    arith_kernel<<<1, 1>>>(dout, dx);
    CUDA_CHECK_LAUNCH();
    CUDA_CHECK(cudaMemcpy(h, dout, sizeof h, cudaMemcpyDeviceToHost));
    const float fused = ldexpf(1.0f, -24);
    char why[256];
    snprintf(why, sizeof why,
             "a*b+c = %a, __fadd_rn(__fmul_rn) = %a, __fmaf_rn = %a, __fadd_rn(a*b, c) = %a, "
             "__fmul_rn(a,b) + c = %a",
             h[0], h[1], h[2], h[3], h[4]);
    printf("# %s\n", why);
    check(h[2] == fused, "__fmaf_rn(a, b, c) is the fused 2^-24", why);
#if defined(__FMA__) || defined(__aarch64__)
    check(h[0] == fused, "a*b + c in an emulated kernel is contracted into one FMA, as nvcc does by default", why);
#else
    printf("skip - a*b + c contraction: this build has no FMA instructions (-mfma needs a CPU with FMA)\n");
#endif
    check(h[1] == 0.0f && h[3] == 0.0f && h[4] == 0.0f,
          "__fadd_rn(__fmul_rn(a, b), c), __fadd_rn(a*b, c) and __fmul_rn(a, b) + c round the product first", why);
    CUDA_CHECK(cudaFree(dx));
    CUDA_CHECK(cudaFree(dout));
    return failures ? 1 : 0;
}

/* KVCPT_EMU_BLOCKS=sample: which blocks of a (100, 10, 3) grid ran. Prints
 * "ran N of 3000 corners C of 5" (the first and last block and the last
 * along each dimension). */
__global__ void mark_block_kernel(int *ran) { ran[blockIdx.x + 100 * (blockIdx.y + 10 * blockIdx.z)] = 1; }
static int sample_count(void) {
    const int n = 3000, corners[5] = {0, 2999, 99, 900, 2000};
    int *d, h[3000];
    CUDA_CHECK(cudaMalloc(&d, sizeof h));
    CUDA_CHECK(cudaMemset(d, 0, sizeof h));
    mark_block_kernel<<<dim3(100, 10, 3), 1>>>(d);
    CUDA_CHECK_LAUNCH();
    CUDA_CHECK(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost));
    int ran = 0, at_corners = 0;
    for (int i = 0; i < n; i++) ran += h[i];
    for (int i = 0; i < 5; i++) at_corners += h[corners[i]];
    printf("ran %d of %d corners %d of 5\n", ran, n, at_corners);
    return 0;
}

/* ---- planted out-of-bounds accesses (caught by the sanitizer build) ---- */

/* Off by one: the last thread writes one float past the launch's bytes. */
__global__ void smem_off_by_one_kernel(float *out, int n) {
    extern __shared__ float tile[];
    tile[threadIdx.x + 1] = (float)threadIdx.x; /* meant: tile[threadIdx.x] */
    __syncthreads();
    if (threadIdx.x == 0) out[0] = tile[1];
}
static int oob_smem(void) {
    float *out;
    CUDA_CHECK(cudaMalloc(&out, sizeof(float)));
    smem_off_by_one_kernel<<<1, 64, 64 * sizeof(float)>>>(out, 64);
    CUDA_CHECK_LAUNCH();
    printf("planted shared memory overrun was not stopped\n");
    return 0;
}

/* The same off-by-one on a static __shared__ array (a function static here:
 * UBSan checks the index against the array's bound, AddressSanitizer guards
 * it as a global). */
__global__ void static_smem_off_by_one_kernel(float *out) {
    __shared__ float tile[64];
    tile[threadIdx.x + 1] = (float)threadIdx.x; /* meant: tile[threadIdx.x] */
    __syncthreads();
    if (threadIdx.x == 0) out[0] = tile[1];
}
static int oob_static_smem(void) {
    float *out;
    CUDA_CHECK(cudaMalloc(&out, sizeof(float)));
    static_smem_off_by_one_kernel<<<1, 64>>>(out);
    CUDA_CHECK_LAUNCH();
    printf("planted static shared memory overrun was not stopped\n");
    return 0;
}

/* The bounds check is <= instead of <: thread n writes x[n]. */
__global__ void fill_past_kernel(float *x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i <= n) x[i] = 1.0f;
}
static int oob_global(void) {
    const int n = 1000;
    float *x;
    CUDA_CHECK(cudaMalloc(&x, sizeof(float) * n));
    fill_past_kernel<<<ceil_div_u(n + 1, 256), 256>>>(x, n);
    CUDA_CHECK_LAUNCH();
    printf("planted global memory overrun was not stopped\n");
    return 0;
}

/* Two sub-buffers carved from one allocation, as the engines carve theirs;
 * the kernel writes one float past the first (the red zone before the second). */
static int oob_carved(void) {
    const int n = 1000;
    float *mem, *cur;
    CUDA_CHECK(cudaMalloc(&mem, sizeof(float) * (2 * n + 2 * REDZONE_FLOATS)));
    cur = mem;
    float *a = redzone_take(&cur, n), *b = redzone_take(&cur, n);
    (void)b;
    fill_past_kernel<<<ceil_div_u(n + 1, 256), 256>>>(a, n);
    CUDA_CHECK_LAUNCH();
    printf("planted overrun into the next carved sub-buffer was not stopped\n");
    return 0;
}

/* A row offset in int: logits of T x V at Llama-3.1-8B's sizes hold more than
 * 2^31 floats, and the last rows' offsets overflow. The buffer is address
 * space only (KVCPT_EMU_BLOCKS=sample does not fill device memory). */
__global__ void logits_row_max_kernel(float *row_max, const float *logits, int V) {
    int row = blockIdx.x;
    int base = row * V; /* meant: (int64_t)row * V */
    if (threadIdx.x == 0) row_max[blockIdx.x] = logits[base + V - 1];
}
static int overflow_8b(void) {
    const int64_t T = 32768, V = 128256;
    float *logits, *row_max;
    CUDA_CHECK(cudaMalloc(&logits, sizeof(float) * (size_t)(T * V)));
    CUDA_CHECK(cudaMalloc(&row_max, sizeof(float) * (size_t)T));
    logits_row_max_kernel<<<(unsigned int)T, 32>>>(row_max, logits, (int)V);
    CUDA_CHECK_LAUNCH();
    printf("planted int32 offset overflow was not stopped\n");
    return 0;
}

/* ---- the warp-level matrix instructions (kernels/mma.cuh): planted misuse ---- */

/* Planted: every row address 2 bytes past a 16-byte boundary. */
__global__ void ldmatrix_misaligned_kernel(float *out) {
    __shared__ __align__(16) uint16_t tile[32 * 8 + 8];
    for (int i = threadIdx.x; i < 32 * 8 + 8; i += 32) tile[i] = 0;
    __syncwarp();
    uint32_t r[4];
    ldmatrix_x4(r, &tile[threadIdx.x * 8 + 1]);
    out[threadIdx.x] = (float)r[0];
}
/* Planted: ldmatrix pointed at global memory. */
__global__ void ldmatrix_global_kernel(float *out, const uint16_t *g) {
    uint32_t r[2];
    ldmatrix_x2(r, &g[(threadIdx.x & 15) * 8]);
    out[threadIdx.x] = (float)r[0];
}
/* Planted: the last row of lane 31 runs 16 bytes past the shared array. */
__global__ void ldmatrix_past_kernel(float *out) {
    __shared__ __align__(16) uint16_t tile[32 * 8];
    for (int i = threadIdx.x; i < 32 * 8; i += 32) tile[i] = 0;
    __syncwarp();
    uint32_t r[4];
    ldmatrix_x4_trans(r, &tile[(threadIdx.x + (threadIdx.x == 31)) * 8]);
    out[threadIdx.x] = (float)r[0];
}
/* Planted: a 16-byte vector load 8 bytes past an aligned address (a bf16
 * tile loader handed a row that does not start 16-byte aligned). */
__global__ void vector_misaligned_kernel(float *out, const uint16_t *g) {
    const uint4 v = load_b128(g + 4);
    out[threadIdx.x] = (float)v.x;
}
static __device__ void mma_ones(float *out) {
    const uint32_t one2 = mma_pack_bf16x2(1.0f, 1.0f), a[4] = {one2, one2, one2, one2}, b[2] = {one2, one2};
    float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    mma_m16n8k16_bf16(c, a, b, c);
    out[threadIdx.x] = c[0];
}
/* Planted: an mma in a block of 48 threads (warp 1 has 16 lanes). */
__global__ void mma_partial_warp_kernel(float *out) { mma_ones(out); }
/* Planted: lanes 16..31 have returned when lanes 0..15 reach the mma. */
__global__ void mma_exited_kernel(float *out) {
    if ((threadIdx.x & 31) >= 16) return;
    mma_ones(out);
}
/* Planted: the two halves of the warp reach mma.sync from different branches. */
__global__ void mma_divergent_kernel(float *out) {
    const uint32_t one2 = mma_pack_bf16x2(1.0f, 1.0f), two2 = mma_pack_bf16x2(2.0f, 2.0f);
    uint32_t a[4] = {one2, one2, one2, one2}, b[2] = {one2, one2};
    float c[4] = {0.0f, 0.0f, 0.0f, 0.0f}, d[4];
    if (threadIdx.x < 16) {
        mma_m16n8k16_bf16(d, a, b, c);
        out[threadIdx.x] = d[0];
    } else {
        b[1] = two2;
        mma_m16n8k16_bf16(d, a, b, c);
        out[threadIdx.x + 32] = d[1];
    }
}
/* The primitives used rightly: A = ones, B = ones, C = 0 gives 16 in every
 * element of D; an ldmatrix.x4 of rows r = lane gives lane l the elements
 * (l >> 2, 2 (l & 3)) of each matrix; an ldmatrix.x2.trans from dynamic
 * shared memory gives it the elements (2 (l & 3), l >> 2) and (2 (l & 3) + 1, l >> 2). */
__global__ void mma_ok_kernel(float *out) {
    __shared__ __align__(16) uint16_t tile[32 * 8];
    extern __shared__ __align__(16) uint16_t dyn[];
    for (int i = threadIdx.x; i < 32 * 8; i += 32) tile[i] = (uint16_t)i, dyn[i] = (uint16_t)(1000 + i);
    __syncwarp();
    uint32_t r[4], t[2];
    ldmatrix_x4(r, &tile[threadIdx.x * 8]);
    ldmatrix_x2_trans(t, &dyn[(threadIdx.x & 15) * 8]);
    mma_ones(out);
    out[32 + threadIdx.x] = (float)(r[3] & 0xffffu);
    out[64 + threadIdx.x] = (float)(t[1] & 0xffffu);
    out[96 + threadIdx.x] = (float)(t[1] >> 16);
}

static int planted_mma(const char *which) {
    float *d;
    uint16_t *g;
    CUDA_CHECK(cudaMalloc(&d, sizeof(float) * 64));
    CUDA_CHECK(cudaMalloc(&g, sizeof(uint16_t) * 256));
    if (strcmp(which, "ldmatrix-misaligned") == 0) ldmatrix_misaligned_kernel<<<1, 32>>>(d);
    else if (strcmp(which, "ldmatrix-global") == 0) ldmatrix_global_kernel<<<1, 32>>>(d, g);
    else if (strcmp(which, "ldmatrix-past") == 0) ldmatrix_past_kernel<<<1, 32>>>(d);
    else if (strcmp(which, "vector-misaligned") == 0) vector_misaligned_kernel<<<1, 32>>>(d, g);
    else if (strcmp(which, "mma-partial-warp") == 0) mma_partial_warp_kernel<<<1, 48>>>(d);
    else if (strcmp(which, "mma-exited") == 0) mma_exited_kernel<<<1, 32>>>(d);
    else mma_divergent_kernel<<<1, 32>>>(d);
    CUDA_CHECK_LAUNCH();
    CUDA_CHECK(cudaDeviceSynchronize());
    printf("planted matrix instruction misuse %s was not stopped\n", which);
    return 0;
}
static int mma_ok(void) {
    float *d, h[128];
    CUDA_CHECK(cudaMalloc(&d, sizeof h));
    mma_ok_kernel<<<1, 32, 32 * 8 * sizeof(uint16_t)>>>(d);
    CUDA_CHECK_LAUNCH();
    CUDA_CHECK(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost));
    int bad = 0;
    for (int l = 0; l < 32; l++) {
        bad += h[l] != 16.0f;
        bad += h[32 + l] != (float)((24 + (l >> 2)) * 8 + 2 * (l & 3)); /* matrix 3: rows 24..31 */
        /* .x2.trans, matrix 1 (rows 8..15): element (2 (l & 3) + e, l >> 2) */
        bad += h[64 + l] != (float)(1000 + (8 + 2 * (l & 3)) * 8 + (l >> 2));
        bad += h[96 + l] != (float)(1000 + (8 + 2 * (l & 3) + 1) * 8 + (l >> 2));
    }
    printf("%s - matrix instructions used rightly: mma of ones = 16, ldmatrix.x4 places (l >> 2, 2 (l & 3)), "
           "ldmatrix.x2.trans from dynamic shared memory places (2 (l & 3), l >> 2)\n",
           bad ? "FAIL" : "ok");
    CUDA_CHECK(cudaFree(d));
    return bad != 0;
}

/* ---- several devices (KVCPT_EMU_DEVICES=3) ---- */

__global__ void fill_kernel(float *x, float v, int n) {
    int i = (int)(blockIdx.x * blockDim.x + threadIdx.x);
    if (i < n) x[i] = v;
}

static int devices(void) {
    int n = 0, cur = -1;
    CUDA_CHECK(cudaGetDeviceCount(&n));
    check(n == 3, "KVCPT_EMU_DEVICES=3 plays three devices", "cudaGetDeviceCount does not say 3");
    if (n != 3) return 1;
    int buses[3] = {0, 0, 0}, names = 1;
    for (int d = 0; d < 3; d++) {
        cudaDeviceProp p;
        CUDA_CHECK(cudaGetDeviceProperties(&p, d));
        buses[d] = p.pciBusID;
        names &= strstr(p.name, "emulated") != NULL;
    }
    check(names && buses[0] != buses[1] && buses[1] != buses[2] && buses[0] != buses[2],
          "each emulated device has its own PCI bus id and a name saying it is emulated", "bus ids or names");
    CUDA_CHECK(cudaGetDevice(&cur));
    check(cur == 0, "a thread starts on device 0", "cudaGetDevice is not 0");
    CUDA_CHECK(cudaSetDevice(2));
    CUDA_CHECK(cudaGetDevice(&cur));
    check(cur == 2, "cudaSetDevice(2) makes device 2 current", "cudaGetDevice does not say 2");
    cudaError_t bad = cudaSetDevice(3), last = cudaGetLastError();
    CUDA_CHECK(cudaGetDevice(&cur));
    check(bad == cudaErrorInvalidDevice && last == cudaErrorInvalidDevice && cur == 2 &&
              strcmp(cudaGetErrorName(bad), "cudaErrorInvalidDevice") == 0,
          "cudaSetDevice(3) of 3 devices: cudaErrorInvalidDevice, recorded for cudaGetLastError, device unchanged",
          "wrong error or device changed");
    cudaDeviceProp p;
    check(cudaGetDeviceProperties(&p, -1) == cudaErrorInvalidDevice && cudaGetLastError() == cudaErrorInvalidDevice,
          "cudaGetDeviceProperties(-1): cudaErrorInvalidDevice", "accepted");
    /* the same device's buffers work on it: copy, set, launch */
    float *x, h[64];
    CUDA_CHECK(cudaMalloc(&x, sizeof h));
    CUDA_CHECK(cudaMemset(x, 0, sizeof h));
    fill_kernel<<<1, 64>>>(x, 2.5f, 64);
    CUDA_CHECK_LAUNCH();
    CUDA_CHECK(cudaMemcpy(h, x, sizeof h, cudaMemcpyDeviceToHost));
    check(h[0] == 2.5f && h[63] == 2.5f, "device 2's buffer copies, sets and launches on device 2", "wrong values");
    CUDA_CHECK(cudaSetDevice(0));
    CUDA_CHECK(cudaFree(x)); /* freeing from another device is allowed, as cudaFree finds the block's device */
    return failures != 0;
}

/* Each device's memory size (run with KVCPT_EMU_DEVICES=2
 * KVCPT_EMU_DEVICE_MEM=1M): cudaMemGetInfo counts the current device's live
 * blocks against it, and a cudaMalloc past it fails as on a GPU. */
static int device_mem(void) {
    const size_t M = (size_t)1 << 20;
    size_t fr = 0, total = 0;
    CUDA_CHECK(cudaMemGetInfo(&fr, &total));
    check(total == M && fr == M, "KVCPT_EMU_DEVICE_MEM=1M: cudaMemGetInfo says 1 MiB total, all free", "wrong sizes");
    void *a = NULL, *b = NULL, *c = (void *)&fr;
    CUDA_CHECK(cudaMalloc(&a, 600 * 1024));
    CUDA_CHECK(cudaMemGetInfo(&fr, &total));
    check(fr == M - 600 * 1024 && total == M, "after a 600 KiB block: free = size - allocated", "free not reduced");
    cudaError_t e = cudaMalloc(&c, 500 * 1024), last = cudaGetLastError();
    check(e == cudaErrorMemoryAllocation && last == cudaErrorMemoryAllocation && c == NULL &&
              strcmp(cudaGetErrorName(e), "cudaErrorMemoryAllocation") == 0,
          "a 500 KiB block past the device's size: cudaErrorMemoryAllocation, recorded for cudaGetLastError",
          "the allocation did not fail as a GPU's does");
    CUDA_CHECK(cudaMemGetInfo(&fr, &total));
    check(fr == M - 600 * 1024, "the failed allocation takes nothing", "free changed");
    /* another device has its own memory */
    CUDA_CHECK(cudaSetDevice(1));
    CUDA_CHECK(cudaMemGetInfo(&fr, &total));
    check(fr == M, "device 1's memory is its own (all free while device 0 holds 600 KiB)", "shared counts");
    CUDA_CHECK(cudaMalloc(&b, 500 * 1024));
    CUDA_CHECK(cudaSetDevice(0));
    CUDA_CHECK(cudaFree(a));
    CUDA_CHECK(cudaMemGetInfo(&fr, &total));
    check(fr == M, "freeing gives the bytes back", "free not restored");
    CUDA_CHECK(cudaMalloc(&a, 1000 * 1024));
    check(cudaGetLastError() == cudaSuccess, "after the free, 1000 KiB fits", "refused");
    CUDA_CHECK(cudaFree(a));
    CUDA_CHECK(cudaFree(b));
    return failures != 0;
}

/* Device 1's buffer used while device 0 is current: a GPU without peer access faults. */
static int cross_device(const char *which) {
    float *x, h[64];
    CUDA_CHECK(cudaSetDevice(1));
    CUDA_CHECK(cudaMalloc(&x, sizeof h));
    CUDA_CHECK(cudaSetDevice(0));
    if (strcmp(which, "cross-memcpy") == 0) CUDA_CHECK(cudaMemcpy(h, x + 8, sizeof(float) * 8, cudaMemcpyDeviceToHost));
    else if (strcmp(which, "cross-memset") == 0) CUDA_CHECK(cudaMemset(x, 0, sizeof h));
    else {
        fill_kernel<<<1, 64>>>(x + 3, 1.0f, 61);
        CUDA_CHECK_LAUNCH();
    }
    printf("cross-device %s was not stopped\n", which);
    return 0;
}

/* ---- cp.async (kernels/cp_async.cuh) ---- */

enum CpBug { CP_OK = 0, CP_BUG_WAIT1, CP_BUG_NO_SYNC, CP_BUG_OVERWRITE };
static constexpr int kCpThreads = 64; /* two warps, one 16-byte chunk each per tile */

/* Each block streams `tiles` tiles of 64 x 4 floats through two shared
 * buffers: tile kt + 1 is copied while tile kt is read. Thread t reads the
 * chunk thread 63 - t copied (the other warp's), so the barriers matter. */
__global__ void cp_pipeline_kernel(float *out, const float *in, int tiles, int bug) {
    __shared__ __align__(16) float buf[2][kCpThreads * 4];
    const int t = threadIdx.x;
    const float *src = in + (size_t)blockIdx.x * tiles * kCpThreads * 4;
    cp_async_16(&buf[0][4 * t], src + 4 * t);
    cp_async_commit();
    for (int kt = 0; kt < tiles; kt++) {
        const int cur = kt & 1;
        if (kt + 1 < tiles) {
            cp_async_16(&buf[cur ^ 1][4 * t], src + (size_t)(kt + 1) * kCpThreads * 4 + 4 * t);
            cp_async_commit();
            cp_async_wait<1>(); /* tile kt has landed; tile kt + 1 may still fly */
        } else if (bug == CP_BUG_WAIT1) {
            cp_async_wait<1>(); /* planted: no newer group, so this leaves the last tile in flight */
        } else {
            cp_async_wait<0>();
        }
        if (bug != CP_BUG_NO_SYNC) __syncthreads(); /* every thread's chunk has landed: visible to all */
        const int from = kCpThreads - 1 - t;
        float sum = 0.0f;
        for (int i = 0; i < 4; i++) sum += buf[cur][4 * from + i];
        out[((size_t)blockIdx.x * tiles + kt) * kCpThreads + t] = sum;
        if (bug != CP_BUG_OVERWRITE) __syncthreads(); /* every warp is done with buf[cur] before it is refilled */
    }
    cp_async_wait_all();
}

/* Runs the pipeline; returns how many of its outputs are wrong. */
static int cp_pipeline(int bug) {
    const int blocks = 3, tiles = 5, n = blocks * tiles * kCpThreads * 4, nout = blocks * tiles * kCpThreads;
    float *in, *out, *h = (float *)malloc(sizeof(float) * (size_t)n);
    for (int i = 0; i < n; i++) h[i] = (float)i;
    CUDA_CHECK(cudaMalloc(&in, sizeof(float) * (size_t)n));
    CUDA_CHECK(cudaMalloc(&out, sizeof(float) * (size_t)nout));
    CUDA_CHECK(cudaMemcpy(in, h, sizeof(float) * (size_t)n, cudaMemcpyHostToDevice));
    cp_pipeline_kernel<<<blocks, kCpThreads>>>(out, in, tiles, bug);
    CUDA_CHECK_LAUNCH();
    CUDA_CHECK(cudaMemcpy(h, out, sizeof(float) * (size_t)nout, cudaMemcpyDeviceToHost));
    int wrong = 0;
    for (int b = 0; b < blocks; b++)
        for (int kt = 0; kt < tiles; kt++)
            for (int t = 0; t < kCpThreads; t++) {
                const int first = ((b * tiles + kt) * kCpThreads + (kCpThreads - 1 - t)) * 4;
                const float want = (float)(4 * first + 6); /* first + first+1 + first+2 + first+3 */
                wrong += h[(b * tiles + kt) * kCpThreads + t] != want;
            }
    CUDA_CHECK(cudaFree(in));
    CUDA_CHECK(cudaFree(out));
    free(h);
    return wrong;
}

/* What the emulator promises of a copy, observed from the issuing thread:
 * out[0..5] = the destination before any wait (stale), after wait_group 1
 * with two groups committed (the first landed, the second not), after
 * wait_group 0 (both), then a copy never committed: after wait_group 0
 * (still stale) and after wait_all (landed). */
__global__ void cp_semantics_kernel(float *out, const float *g) {
    __shared__ __align__(16) float s[12];
    for (int i = 0; i < 12; i++) s[i] = -1.0f;
    cp_async_16(&s[0], g);
    cp_async_commit();
    cp_async_16(&s[4], g + 4);
    cp_async_commit();
    out[0] = s[0];
    cp_async_wait<1>();
    out[1] = s[0];
    out[2] = s[4];
    cp_async_wait<0>();
    out[3] = s[4];
    cp_async_16(&s[8], g + 8);
    cp_async_wait<0>();
    out[4] = s[8];
    cp_async_wait_all();
    out[5] = s[8];
}

static int cp_semantics(void) {
    float *g, *out, h[12];
    for (int i = 0; i < 12; i++) h[i] = (float)(10 + i);
    CUDA_CHECK(cudaMalloc(&g, sizeof h));
    CUDA_CHECK(cudaMalloc(&out, sizeof h));
    CUDA_CHECK(cudaMemcpy(g, h, sizeof h, cudaMemcpyHostToDevice));
    cp_semantics_kernel<<<1, 1>>>(out, g);
    CUDA_CHECK_LAUNCH();
    CUDA_CHECK(cudaMemcpy(h, out, sizeof(float) * 6, cudaMemcpyDeviceToHost));
    check(h[0] == -1.0f, "cp.async: the destination read before any wait is stale", "it already holds the copy");
    check(h[1] == 10.0f && h[2] == -1.0f, "cp.async: wait_group 1 lands the older of two groups, not the newer",
          "wrong bytes after wait_group 1");
    check(h[3] == 14.0f, "cp.async: wait_group 0 lands every committed group", "the second copy did not land");
    check(h[4] == -1.0f && h[5] == 18.0f, "cp.async: a copy never committed lands at wait_all, not at wait_group 0",
          "wrong bytes around the uncommitted copy");
    CUDA_CHECK(cudaFree(g));
    CUDA_CHECK(cudaFree(out));
    return failures ? 1 : 0;
}

static int cp_ok(void) {
    const int wrong = cp_pipeline(CP_OK);
    char why[64];
    snprintf(why, sizeof why, "%d outputs wrong", wrong);
    check(wrong == 0, "cp.async double-buffered pipeline used rightly: every output right", why);
    return failures ? 1 : 0;
}

static int cp_planted(const char *which) {
    const int bug = strcmp(which, "cp-wait1") == 0    ? CP_BUG_WAIT1
                    : strcmp(which, "cp-nosync") == 0 ? CP_BUG_NO_SYNC
                                                      : CP_BUG_OVERWRITE;
    const int wrong = cp_pipeline(bug);
    printf("planted cp.async bug %s: %d of %d outputs wrong\n", which, wrong, 3 * 5 * kCpThreads);
    printf("planted cp.async bug %s was not stopped\n", which);
    return 0;
}

enum CpMisuse {
    CP_MIS_DST_ALIGN,
    CP_MIS_SRC_ALIGN,
    CP_MIS_GLOBAL_DST,
    CP_MIS_SHARED_SRC,
    CP_MIS_NEVER_WAITED,
    CP_MIS_UNCOMMITTED,
    CP_MIS_SOURCE_WRITTEN,
    CP_MIS_DST_READ
};

__global__ void cp_misuse_kernel(float *g, int which) {
    __shared__ __align__(16) float s[4 * 32 + 4];
    const int t = threadIdx.x;
    if (which == CP_MIS_DST_ALIGN) cp_async_16(&s[4 * t + 1], g + 4 * t);
    else if (which == CP_MIS_SRC_ALIGN) cp_async_16(&s[4 * t], g + 4 * t + 2);
    else if (which == CP_MIS_GLOBAL_DST) cp_async_16(g + 256 + 4 * t, g + 4 * t);
    else if (which == CP_MIS_SHARED_SRC) cp_async_16(&s[4 * t], &s[4 * ((t + 1) % 32)]);
    else cp_async_16(&s[4 * t], g + 4 * t);
    if (which == CP_MIS_UNCOMMITTED) {
        cp_async_wait<0>(); /* planted: the copy's group was never committed */
        return;
    }
    cp_async_commit();
    if (which == CP_MIS_NEVER_WAITED) return; /* planted */
    if (which == CP_MIS_SOURCE_WRITTEN) g[4 * t] = 1.0f; /* planted: the source in flight */
    float early = 0.0f;
    if (which == CP_MIS_DST_READ) early = s[4 * t]; /* planted: the destination in flight */
    cp_async_wait<0>();
    g[512 + t] = s[4 * t] + early;
}

static int cp_misuse(const char *which) {
    static const char *const names[] = {"cp-misaligned-dst", "cp-misaligned-src", "cp-global-dst",     "cp-shared-src",
                                        "cp-never-waited",   "cp-uncommitted",    "cp-source-written", "cp-dst-read"};
    int k = 0;
    while (k < 8 && strcmp(which, names[k]) != 0) k++;
    if (k == 8) {
        fprintf(stderr, "unknown cp.async check %s\n", which);
        return 2;
    }
    float *g;
    CUDA_CHECK(cudaMalloc(&g, sizeof(float) * 1024));
    CUDA_CHECK(cudaMemset(g, 0, sizeof(float) * 1024));
    cp_misuse_kernel<<<1, 32>>>(g, k);
    CUDA_CHECK_LAUNCH();
    CUDA_CHECK(cudaDeviceSynchronize());
    printf("planted cp.async misuse %s was not stopped\n", which);
    return 0;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "";
    if (strcmp(mode, "limits") == 0) return limits();
    if (strcmp(mode, "race") == 0) return race();
    if (strcmp(mode, "planted-launch") == 0) return planted_launch();
    if (strcmp(mode, "static-over") == 0) return static_over();
    if (strcmp(mode, "warp") == 0) return warp();
    if (strcmp(mode, "arith") == 0) return arith();
    if (strcmp(mode, "atomic-sum") == 0) return atomic_sum();
    if (strcmp(mode, "shfl-exited") == 0 || strcmp(mode, "shfl-mask-caller") == 0 ||
        strcmp(mode, "shfl-outside-mask") == 0 || strcmp(mode, "shfl-mixed-masks") == 0 ||
        strcmp(mode, "shfl-partial-warp") == 0 || strcmp(mode, "syncwarp-vs-syncthreads") == 0)
        return planted_warp(mode);
    if (strcmp(mode, "ldmatrix-misaligned") == 0 || strcmp(mode, "ldmatrix-global") == 0 ||
        strcmp(mode, "ldmatrix-past") == 0 || strcmp(mode, "vector-misaligned") == 0 ||
        strcmp(mode, "mma-partial-warp") == 0 || strcmp(mode, "mma-exited") == 0 || strcmp(mode, "mma-divergent") == 0)
        return planted_mma(mode);
    if (strcmp(mode, "mma-ok") == 0) return mma_ok();
    if (strcmp(mode, "sample-count") == 0) return sample_count();
    if (strcmp(mode, "oob-smem") == 0) return oob_smem();
    if (strcmp(mode, "oob-static-smem") == 0) return oob_static_smem();
    if (strcmp(mode, "oob-global") == 0) return oob_global();
    if (strcmp(mode, "oob-carved") == 0) return oob_carved();
    if (strcmp(mode, "overflow-8b") == 0) return overflow_8b();
    if (strcmp(mode, "race-free") == 0) return race_free();
    if (strcmp(mode, "devices") == 0) return devices();
    if (strcmp(mode, "device-mem") == 0) return device_mem();
    if (strncmp(mode, "cross-", 6) == 0) return cross_device(mode);
    if (strncmp(mode, "race-", 5) == 0) return race_one(mode);
    if (strcmp(mode, "cp-semantics") == 0) return cp_semantics();
    if (strcmp(mode, "cp-ok") == 0) return cp_ok();
    if (strcmp(mode, "cp-wait1") == 0 || strcmp(mode, "cp-nosync") == 0 || strcmp(mode, "cp-overwrite") == 0)
        return cp_planted(mode);
    if (strncmp(mode, "cp-", 3) == 0) return cp_misuse(mode);
    fprintf(
        stderr,
        "usage: %s limits|race|planted-launch|static-over|race-free|race-NAME|warp|arith|shfl-exited|shfl-mask-caller|"
        "shfl-outside-mask|shfl-mixed-masks|shfl-partial-warp|syncwarp-vs-syncthreads|atomic-sum|"
        "sample-count|oob-smem|oob-static-smem|oob-global|oob-carved|overflow-8b|mma-ok|ldmatrix-misaligned|"
        "ldmatrix-global|ldmatrix-past|vector-misaligned|mma-partial-warp|mma-exited|mma-divergent|devices|cross-"
        "memcpy|"
        "cross-memset|cross-launch|cp-semantics|cp-ok|cp-wait1|cp-nosync|cp-overwrite|cp-misaligned-dst|"
        "cp-misaligned-src|cp-global-dst|cp-shared-src|cp-never-waited|cp-uncommitted|cp-source-written|"
        "cp-dst-read\n",
        argv[0]);
    return 2;
}
