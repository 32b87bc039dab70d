/* The CUDA emulator's scheduler and host API (see include/cuda_runtime.h).
 *
 * A launch runs its blocks one after another. For a block, every CUDA thread
 * becomes a fiber with its own stack; the scheduler runs the runnable fibers
 * in turn (in the order KVCPT_EMU_ORDER picks: index, reverse or seeded
 * random; blocks too) until each one finishes or waits at a barrier. A block
 * barrier opens when every unfinished thread of the block waits at one; a
 * warp barrier (used by shuffles) opens when every unfinished lane of that
 * warp waits at one. If neither can open, the kernel has diverged around a
 * barrier, which on a GPU is a hang or undefined: the emulator stops with a
 * message naming the kernel launch. */
#include <unistd.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>

#include <map>
#include <vector>

/* The race variant (build/emu-race/) tells the detector what runs and when
 * barriers open; the plain build compiles these away. */
#ifdef KVCPT_EMU_RACE
#include "emu_race.h"
#define RACE_HOOK(call) emu::race::call
#else
#define RACE_HOOK(call) ((void)0)
#endif

/* Switching fibers: on x86-64 a six-register switch (callee-saved registers
 * and the stack pointer), because glibc's swapcontext makes two signal-mask
 * system calls per switch, which made the parity tests run for minutes.
 * Elsewhere, ucontext. */
#if defined(__x86_64__)
extern "C" void emu_switch(void **save_sp, void *load_sp);
asm(".text\n"
    ".globl emu_switch\n"
    ".type emu_switch,@function\n"
    "emu_switch:\n"
    "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
    "  movq %rsp, (%rdi)\n"
    "  movq %rsi, %rsp\n"
    "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n"
    "  ret\n"
    ".size emu_switch,.-emu_switch\n");
#define EMU_FAST_SWITCH 1
#endif

uint3 threadIdx, blockIdx;
dim3 blockDim, gridDim;

namespace {

enum FiberState { RUNNABLE, AT_BLOCK_BARRIER, AT_WARP_BARRIER, FINISHED };

struct Fiber {
#ifdef EMU_FAST_SWITCH
    void *sp;
#else
    ucontext_t ctx;
#endif
    uint3 tid;
    FiberState state;
};

/* Kernels keep small per-thread arrays (rows of accumulators); the stacks are
 * malloc'ed, so pages a fiber never touches cost nothing. */
const size_t kStackBytes = 128 * 1024;
/* bytes after a launch's dynamic shared memory that must stay untouched */
const size_t kSmemGuard = 4096;
const unsigned char kGuardByte = 0xa5;

struct Block {
    std::vector<Fiber> fibers;
    char *stacks = nullptr;
    size_t stack_fibers = 0;
    std::vector<char> smem;
    std::vector<uint64_t> slots; /* one shuffle slot per thread */
    std::vector<int> votes;      /* one __syncthreads_count vote per thread */
    const std::function<void()> *body = nullptr;
#ifdef EMU_FAST_SWITCH
    void *scheduler_sp;
#else
    ucontext_t scheduler;
#endif
    size_t current = 0;
} blk;

void to_scheduler(Fiber &f) {
#ifdef EMU_FAST_SWITCH
    emu_switch(&f.sp, blk.scheduler_sp);
#else
    swapcontext(&f.ctx, &blk.scheduler);
#endif
}

void to_fiber(Fiber &f) {
#ifdef EMU_FAST_SWITCH
    emu_switch(&blk.scheduler_sp, f.sp);
#else
    swapcontext(&blk.scheduler, &f.ctx);
#endif
}

unsigned long long launches = 0;

/* The last error of any runtime call, as the real runtime keeps it: launches
 * and failed calls set it; cudaGetLastError reads and resets it. */
cudaError_t last_error = cudaSuccess;
cudaError_t record(cudaError_t e) {
    if (e != cudaSuccess) last_error = e;
    return e;
}

/* sm_90's limits of dynamic shared memory per block: the default every kernel
 * gets, and the most cudaFuncSetAttribute may raise it to. */
const size_t kDefaultDynSmem = 48 * 1024, kMaxDynSmem = 227 * 1024;
std::map<const void *, size_t> max_dyn_smem; /* kernels whose limit was raised */
/* the static __shared__ variables the running launch has declared so far */
std::vector<const void *> static_vars;
size_t static_bytes = 0;

/* The order in which the threads of a block start and resume after each
 * barrier, and in which the blocks of a grid run (KVCPT_EMU_ORDER, seeded by
 * KVCPT_EMU_SEED): a GPU promises neither, so a kernel that only works in
 * index order has a race. */
enum Order { ORDER_INDEX, ORDER_REVERSE, ORDER_RANDOM };
Order order = ORDER_INDEX;
uint64_t rng_state = 0;
bool order_read = false;

uint64_t next_random() { /* splitmix64 */
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void read_order() {
    if (order_read) return;
    order_read = true;
    const char *o = getenv("KVCPT_EMU_ORDER"), *seed = getenv("KVCPT_EMU_SEED");
    if (!o || !*o || strcmp(o, "index") == 0) order = ORDER_INDEX;
    else if (strcmp(o, "reverse") == 0) order = ORDER_REVERSE;
    else if (strcmp(o, "random") == 0) order = ORDER_RANDOM;
    else {
        fprintf(stderr, "kvcpt CUDA emulator: KVCPT_EMU_ORDER=%s: expected index, reverse or random\n", o);
        exit(2);
    }
    char *end = nullptr;
    rng_state = seed && *seed ? strtoull(seed, &end, 10) : 1;
    if (seed && *seed && *end) {
        fprintf(stderr, "kvcpt CUDA emulator: KVCPT_EMU_SEED=%s: expected a non-negative integer\n", seed);
        exit(2);
    }
}

/* perm = 0..n-1 in the chosen order (a fresh shuffle on every call when random) */
void make_order(std::vector<uint32_t> &perm, size_t n) {
    perm.resize(n);
    for (size_t i = 0; i < n; i++) perm[i] = (uint32_t)(order == ORDER_REVERSE ? n - 1 - i : i);
    if (order == ORDER_RANDOM)
        for (size_t i = n; i > 1; i--) {
            size_t j = next_random() % i;
            uint32_t t = perm[i - 1];
            perm[i - 1] = perm[j];
            perm[j] = t;
        }
}

void fiber_main() {
    (*blk.body)();
    blk.fibers[blk.current].state = FINISHED;
    to_scheduler(blk.fibers[blk.current]);
}

void wait_at(FiberState s) {
    Fiber &f = blk.fibers[blk.current];
    f.state = s;
    to_scheduler(f);
}

/* A new fiber's stack, set up so that its first switch "returns" into fiber_main. */
void fiber_start(Fiber &f, char *stack) {
#ifdef EMU_FAST_SWITCH
    uintptr_t top = ((uintptr_t)(stack + kStackBytes) & ~(uintptr_t)15) - 16;
    void **sp = (void **)top;
    sp[1] = nullptr;                   /* fiber_main's would-be return address: it never returns */
    sp[0] = (void *)&fiber_main;       /* popped by emu_switch's ret; then rsp = top + 8, as after a call */
    for (int r = 1; r <= 6; r++) sp[-r] = nullptr; /* rbp rbx r12..r15 */
    f.sp = (void *)(sp - 6);
#else
    getcontext(&f.ctx);
    f.ctx.uc_stack.ss_sp = stack;
    f.ctx.uc_stack.ss_size = kStackBytes;
    f.ctx.uc_link = nullptr;
    makecontext(&f.ctx, fiber_main, 0);
#endif
}

/* Opens the barriers that every unfinished thread in scope has reached;
 * returns 0 when none can open. */
int open_barriers() {
    size_t n = blk.fibers.size();
    int opened = 0;
    for (size_t w = 0; w < n; w += 32) {
        size_t end = w + 32 < n ? w + 32 : n;
        int waiting = 0, others = 0;
        for (size_t i = w; i < end; i++) {
            if (blk.fibers[i].state == AT_WARP_BARRIER) waiting++;
            else if (blk.fibers[i].state != FINISHED) others++;
        }
        if (waiting && !others) {
            for (size_t i = w; i < end; i++)
                if (blk.fibers[i].state == AT_WARP_BARRIER) blk.fibers[i].state = RUNNABLE;
            RACE_HOOK(warp_synced(w / 32));
            opened = 1;
        }
    }
    if (opened) return 1;
    int at_block = 0, others = 0;
    for (const Fiber &f : blk.fibers) {
        if (f.state == AT_BLOCK_BARRIER) at_block++;
        else if (f.state != FINISHED) others++;
    }
    if (at_block && !others) {
        for (Fiber &f : blk.fibers)
            if (f.state == AT_BLOCK_BARRIER) f.state = RUNNABLE;
        RACE_HOOK(block_synced());
        return 1;
    }
    return 0;
}

void run_block(const emu::Config &c, size_t block_linear) {
    size_t n = (size_t)c.block.x * c.block.y * c.block.z;
    blk.fibers.assign(n, Fiber());
    if (blk.stack_fibers < n) {
        free(blk.stacks);
        blk.stacks = (char *)malloc(n * kStackBytes);
        if (!blk.stacks) {
            fprintf(stderr, "kvcpt CUDA emulator: no memory for %zu fiber stacks\n", n);
            exit(1);
        }
        blk.stack_fibers = n;
    }
    RACE_HOOK(block_begin(block_linear, emu::dynamic_smem(), c.smem, blk.stacks, blk.stack_fibers * kStackBytes));
    for (size_t i = 0; i < n; i++) {
        Fiber &f = blk.fibers[i];
        f.tid = {(unsigned int)(i % c.block.x), (unsigned int)(i / c.block.x % c.block.y),
                 (unsigned int)(i / ((size_t)c.block.x * c.block.y))};
        f.state = RUNNABLE;
        fiber_start(f, blk.stacks + i * kStackBytes);
    }
    std::vector<uint32_t> perm;
    make_order(perm, n);
    for (;;) {
        int ran = 0, unfinished = 0;
        if (order == ORDER_RANDOM) make_order(perm, n);
        for (size_t k = 0; k < n; k++) {
            size_t i = perm[k];
            if (blk.fibers[i].state == RUNNABLE) {
                blk.current = i;
                threadIdx = blk.fibers[i].tid;
                RACE_HOOK(thread_runs(i));
                to_fiber(blk.fibers[i]);
                ran = 1;
            }
            unfinished += blk.fibers[i].state != FINISHED;
        }
        if (!unfinished) return;
        if (!ran && !open_barriers()) {
            fprintf(stderr,
                    "kvcpt CUDA emulator: launch %llu, block (%u,%u,%u): threads wait at barriers that cannot open "
                    "(a __syncthreads or shuffle not reached by every live thread of its block or warp)\n",
                    launches, blockIdx.x, blockIdx.y, blockIdx.z);
            exit(1);
        }
    }
}

} // namespace

namespace emu {

/* What a GPU answers to a launch configuration: cudaSuccess, or the error the
 * launch sets without running anything. */
cudaError_t check_launch(const Config &c, const void *kernel) {
    if (!c.grid.x || !c.grid.y || !c.grid.z || !c.block.x || !c.block.y || !c.block.z) return cudaErrorInvalidConfiguration;
    if (c.block.x > 1024 || c.block.y > 1024 || c.block.z > 64 || (uint64_t)c.block.x * c.block.y * c.block.z > 1024)
        return cudaErrorInvalidConfiguration;
    if (c.grid.x > 0x7fffffffu || c.grid.y > 65535 || c.grid.z > 65535) return cudaErrorInvalidConfiguration;
    auto raised = max_dyn_smem.find(kernel);
    size_t limit = raised == max_dyn_smem.end() ? kDefaultDynSmem : raised->second;
    if (c.smem > limit) return cudaErrorInvalidValue;
    return cudaSuccess;
}

/* Static shared memory is known only once the kernel's declarations have run,
 * so a launch over a limit because of it stops the program after the launch
 * (a GPU refuses it with cudaErrorInvalidValue; over 48 KB of static shared
 * memory does not even compile). */
void check_static_smem(const Config &c, const void *kernel) {
    if (!static_bytes) return;
    auto raised = max_dyn_smem.find(kernel);
    const char *why = nullptr;
    if (static_bytes > kDefaultDynSmem) why = "over 48 KB of static shared memory (ptxas refuses it)";
    else if (raised == max_dyn_smem.end() && static_bytes + c.smem > kDefaultDynSmem)
        why = "static plus dynamic shared memory over 48 KB without cudaFuncSetAttribute";
    else if (raised != max_dyn_smem.end() && static_bytes + raised->second > kMaxDynSmem)
        why = "static shared memory plus the kernel's raised dynamic limit over 227 KB";
    if (why) {
        fprintf(stderr,
                "kvcpt CUDA emulator: launch %llu: %s: %zu bytes static, %zu dynamic; a GPU refuses this launch "
                "(cudaErrorInvalidValue)\n",
                launches, why, static_bytes, c.smem);
        exit(1);
    }
}

void run_grid(const Config &c, const void *kernel, const std::function<void()> &body) {
    launches++;
    read_order();
    cudaError_t bad = check_launch(c, kernel);
    if (bad != cudaSuccess) {
        /* as on a GPU, nothing runs and the launch only sets the last error; with
         * KVCPT_EMU_TRACE_LAUNCH_ERRORS set, also a line naming it */
        if (getenv("KVCPT_EMU_TRACE_LAUNCH_ERRORS"))
            fprintf(stderr,
                    "kvcpt CUDA emulator: launch %llu refused (%s): grid (%u,%u,%u) block (%u,%u,%u) dynamic smem %zu\n",
                    launches, cudaGetErrorString(bad), c.grid.x, c.grid.y, c.grid.z, c.block.x, c.block.y, c.block.z,
                    c.smem);
        last_error = bad;
        return;
    }
    static_vars.clear();
    static_bytes = 0;
    RACE_HOOK(launch_begin(c.name, launches, c.grid, c.block));
    gridDim = c.grid;
    blockDim = c.block;
    blk.body = &body;
    size_t threads = (size_t)c.block.x * c.block.y * c.block.z;
    blk.slots.assign(threads, 0);
    blk.votes.assign(threads, 0);
    size_t nblocks = (size_t)c.grid.x * c.grid.y * c.grid.z;
    /* index order needs no table (grids of millions of blocks are common) */
    std::vector<uint32_t> perm;
    if (order != ORDER_INDEX) {
        if (nblocks > 0xffffffffu) {
            fprintf(stderr, "kvcpt CUDA emulator: launch %llu: %zu blocks are too many to reorder\n", launches, nblocks);
            exit(1);
        }
        make_order(perm, nblocks);
    }
    for (size_t b = 0; b < nblocks; b++) {
        size_t lin = order == ORDER_INDEX ? b : perm[b];
        unsigned int x = (unsigned int)(lin % c.grid.x), y = (unsigned int)(lin / c.grid.x % c.grid.y),
                     z = (unsigned int)(lin / ((size_t)c.grid.x * c.grid.y));
        blockIdx = {x, y, z};
        /* all-ones bytes (NaN as floats): a kernel that reads dynamic shared
         * memory before writing it gets NaNs, which the parity tests see;
         * past the launch's bytes a guard of known bytes, checked after
         * the block, catches writes beyond what the launch asked for */
        blk.smem.assign(c.smem + 16 + kSmemGuard, (char)0xff);
        unsigned char *guard = (unsigned char *)dynamic_smem() + c.smem;
        memset(guard, kGuardByte, kSmemGuard);
        run_block(c, lin);
        for (size_t i = 0; i < kSmemGuard; i++)
            if (guard[i] != kGuardByte) {
                fprintf(stderr,
                        "cuda emulator: a kernel wrote byte %zu past the end of its %zu bytes of dynamic shared memory "
                        "(block (%u, %u, %u) of grid (%u, %u, %u), %zu threads)\n",
                        i + 1, c.smem, x, y, z, c.grid.x, c.grid.y, c.grid.z, threads);
                abort();
            }
    }
    check_static_smem(c, kernel);
    RACE_HOOK(launch_end());
}

void *dynamic_smem() {
    uintptr_t p = (uintptr_t)blk.smem.data();
    return (void *)((p + 15) & ~(uintptr_t)15);
}
void static_smem(const void *var, size_t bytes, const char *name) {
    RACE_HOOK(static_smem(var, bytes, name));
    for (const void *v : static_vars)
        if (v == var) return;
    static_vars.push_back(var);
    static_bytes += bytes;
}
void block_barrier() { wait_at(AT_BLOCK_BARRIER); }
int block_count(int predicate) {
    size_t me = blk.current;
    blk.votes[me] = predicate != 0;
    wait_at(AT_BLOCK_BARRIER);
    int n = 0;
    for (int v : blk.votes) n += v;
    wait_at(AT_BLOCK_BARRIER); /* every thread has counted before any vote is cleared */
    blk.votes[me] = 0;
    return n;
}
void warp_barrier() { wait_at(AT_WARP_BARRIER); }
unsigned int lane_id() { return (unsigned int)(blk.current & 31); }
void *warp_slot(unsigned int lane) { return &blk.slots[(blk.current & ~(size_t)31) + lane]; }

} // namespace emu

/* ---- host API: device memory is host memory ---- */
extern "C" {
/* KVCPT_EMU_DEVICES plays the machine the runtime meets: 0, a driver but no
 * GPU; no-driver, no NVIDIA driver at all (the runtime then answers
 * "insufficient driver", as it does on a CPU-only machine); driver-too-old,
 * a driver older than the runtime; unset, one device. */
int emu_nvidia_driver_installed(void) {
    const char *env = getenv("KVCPT_EMU_DEVICES");
    return !(env && strcmp(env, "no-driver") == 0);
}
cudaError_t cudaGetDeviceCount(int *n) {
    const char *env = getenv("KVCPT_EMU_DEVICES");
    *n = 0;
    if (env && strcmp(env, "0") == 0) return record(cudaErrorNoDevice);
    if (env && (strcmp(env, "driver-too-old") == 0 || strcmp(env, "no-driver") == 0)) return record(cudaErrorInsufficientDriver);
    *n = 1;
    return cudaSuccess;
}
cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes) {
    long page = sysconf(_SC_PAGESIZE);
    *free_bytes = (size_t)sysconf(_SC_AVPHYS_PAGES) * (size_t)page;
    *total_bytes = (size_t)sysconf(_SC_PHYS_PAGES) * (size_t)page;
    return cudaSuccess;
}
cudaError_t cudaSetDevice(int dev) { return dev == 0 ? cudaSuccess : record(cudaErrorInvalidValue); }
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int dev) {
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "kvcpt CUDA emulator (CPU fibers)");
    p->totalGlobalMem = (size_t)1 << 34;
    p->major = 9, p->minor = 0, p->multiProcessorCount = 1;
    return dev == 0 ? cudaSuccess : record(cudaErrorInvalidValue);
}
cudaError_t cudaDeviceGetAttribute(int *value, cudaDeviceAttr attr, int dev) {
    *value = attr == cudaDevAttrMultiProcessorCount ? 1 : attr == cudaDevAttrMemoryClockRate ? 1000000 : 64;
    return dev == 0 ? cudaSuccess : record(cudaErrorInvalidValue);
}
cudaError_t cudaMalloc(void **p, size_t bytes) {
    /* calloc would hide kernels that read memory nobody wrote; fill with a NaN pattern instead */
    *p = malloc(bytes ? bytes : 1);
    if (!*p) return record(cudaErrorMemoryAllocation);
    memset(*p, 0xff, bytes);
    RACE_HOOK(device_alloc(*p, bytes));
    return cudaSuccess;
}
cudaError_t cudaMallocAsync(void **p, size_t bytes, cudaStream_t st) { return (void)st, cudaMalloc(p, bytes); }
cudaError_t cudaFree(void *p) {
    RACE_HOOK(device_free(p));
    free(p);
    return cudaSuccess;
}
cudaError_t cudaFreeAsync(void *p, cudaStream_t st) { return (void)st, cudaFree(p); }
cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind) {
    (void)kind;
    memmove(dst, src, bytes);
    return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind, cudaStream_t st) {
    return (void)st, cudaMemcpy(dst, src, bytes, kind);
}
cudaError_t cudaMemset(void *dst, int value, size_t bytes) {
    memset(dst, value, bytes);
    return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void *dst, int value, size_t bytes, cudaStream_t st) {
    return (void)st, cudaMemset(dst, value, bytes);
}
cudaError_t cudaDeviceSynchronize(void) { return cudaSuccess; }
cudaError_t cudaStreamSynchronize(cudaStream_t st) { return (void)st, cudaSuccess; }
cudaError_t cudaGetLastError(void) {
    cudaError_t e = last_error;
    last_error = cudaSuccess;
    return e;
}
cudaError_t cudaPeekAtLastError(void) { return last_error; }
cudaError_t emu_func_set_max_dynamic_smem(const void *kernel, int attr, int value) {
    if (!kernel) return record(cudaErrorInvalidValue); /* the real runtime: cudaErrorInvalidDeviceFunction */
    if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize) return record(cudaErrorInvalidValue);
    if (value < 0 || (size_t)value > kMaxDynSmem) return record(cudaErrorInvalidValue);
    max_dyn_smem[kernel] = (size_t)value;
    return cudaSuccess;
}
const char *cudaGetErrorName(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInsufficientDriver: return "cudaErrorInsufficientDriver";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    default: return "cudaErrorUnknown";
    }
}
const char *cudaGetErrorString(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    case cudaErrorInsufficientDriver: return "CUDA driver version is insufficient for CUDA runtime version";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    default: return "emulated error";
    }
}
}
