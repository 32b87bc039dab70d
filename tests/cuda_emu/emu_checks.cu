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
 *   emu_checks sample-count    which blocks of a grid KVCPT_EMU_BLOCKS runs
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
#include <stdio.h>
#include <string.h>

#include "cuda_common.cuh"
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

/* KVCPT_EMU_BLOCKS=sample: which blocks of a (100, 10, 3) grid ran. Prints
 * "ran N of 3000 corners C of 5" (the first and last block and the last
 * along each dimension). */
__global__ void mark_block_kernel(int *ran) {
    ran[blockIdx.x + 100 * (blockIdx.y + 10 * blockIdx.z)] = 1;
}
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

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "";
    if (strcmp(mode, "limits") == 0) return limits();
    if (strcmp(mode, "race") == 0) return race();
    if (strcmp(mode, "planted-launch") == 0) return planted_launch();
    if (strcmp(mode, "static-over") == 0) return static_over();
    if (strcmp(mode, "sample-count") == 0) return sample_count();
    if (strcmp(mode, "oob-smem") == 0) return oob_smem();
    if (strcmp(mode, "oob-static-smem") == 0) return oob_static_smem();
    if (strcmp(mode, "oob-global") == 0) return oob_global();
    if (strcmp(mode, "oob-carved") == 0) return oob_carved();
    if (strcmp(mode, "overflow-8b") == 0) return overflow_8b();
    fprintf(stderr, "usage: %s limits|race|planted-launch|static-over|sample-count|oob-smem|oob-static-smem|oob-global|oob-carved|overflow-8b\n",
            argv[0]);
    return 2;
}
