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

#include <algorithm>
#include <map>
#include <vector>

/* The sanitizer build (build/emu-asan, KVCPT_EMU_ASAN): AddressSanitizer
 * must be told when a fiber switch moves to another stack, or it takes the
 * fibers' frames for wild stack writes and their fake stacks leak. */
#ifdef KVCPT_EMU_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
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
 * malloc'ed, so pages a fiber never touches cost nothing. AddressSanitizer's
 * red zones around every local make frames several times larger. */
#ifdef KVCPT_EMU_ASAN
const size_t kStackBytes = 512 * 1024;
#else
const size_t kStackBytes = 128 * 1024;
#endif
#ifndef KVCPT_EMU_ASAN
/* bytes after a launch's dynamic shared memory that must stay untouched (the
 * sanitizer build allocates exactly the launch's bytes instead, and
 * AddressSanitizer reports the first byte past them) */
const size_t kSmemGuard = 4096;
const unsigned char kGuardByte = 0xa5;
#endif

struct Block {
    std::vector<Fiber> fibers;
    char *stacks = nullptr;
    size_t stack_fibers = 0;
    char *smem = nullptr; /* the launch's dynamic shared memory */
    std::vector<uint64_t> slots; /* one shuffle slot per thread */
    std::vector<int> votes;      /* one __syncthreads_count vote per thread */
    const std::function<void()> *body = nullptr;
#ifdef EMU_FAST_SWITCH
    void *scheduler_sp;
#else
    ucontext_t scheduler;
#endif
    size_t current = 0;
    /* the scheduler's stack, as AddressSanitizer reports it on a fiber's first
     * entry (the sanitizer build only) */
    const void *scheduler_stack = nullptr;
    size_t scheduler_stack_bytes = 0;
} blk;

/* AddressSanitizer's side of a switch: before it, the stack being entered
 * (and where to keep the leaving one's fake stack, or null when the leaving
 * fiber is done for good); after it, the entered side picks its fake stack up. */
void switch_begin(void **fake_save, const void *bottom, size_t bytes) {
#ifdef KVCPT_EMU_ASAN
    __sanitizer_start_switch_fiber(fake_save, bottom, bytes);
#else
    (void)fake_save, (void)bottom, (void)bytes;
#endif
}
void switch_end(void *fake_save) {
#ifdef KVCPT_EMU_ASAN
    __sanitizer_finish_switch_fiber(fake_save, nullptr, nullptr);
#else
    (void)fake_save;
#endif
}

void to_scheduler(Fiber &f) {
    void *fake = nullptr;
    switch_begin(f.state == FINISHED ? nullptr : &fake, blk.scheduler_stack, blk.scheduler_stack_bytes);
#ifdef EMU_FAST_SWITCH
    emu_switch(&f.sp, blk.scheduler_sp);
#else
    swapcontext(&f.ctx, &blk.scheduler);
#endif
    switch_end(fake);
}

void to_fiber(Fiber &f, const char *stack) {
    void *fake = nullptr;
    switch_begin(&fake, stack, kStackBytes);
#ifdef EMU_FAST_SWITCH
    emu_switch(&blk.scheduler_sp, f.sp);
#else
    swapcontext(&blk.scheduler, &f.ctx);
#endif
    switch_end(fake);
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

void read_blocks_mode();

void read_order() {
    if (order_read) return;
    order_read = true;
    read_blocks_mode();
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
#ifdef KVCPT_EMU_ASAN
    /* first entry: no fake stack to resume; learn the scheduler's stack */
    __sanitizer_finish_switch_fiber(nullptr, &blk.scheduler_stack, &blk.scheduler_stack_bytes);
#endif
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
        return 1;
    }
    return 0;
}

void run_block(const emu::Config &c) {
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
#ifdef KVCPT_EMU_ASAN
    /* the last block's fibers left frames (and their red zones) on these stacks */
    ASAN_UNPOISON_MEMORY_REGION(blk.stacks, n * kStackBytes);
#endif
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
                to_fiber(blk.fibers[i], blk.stacks + i * kStackBytes);
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


/* A launch's dynamic shared memory: malloc's 16-byte alignment (what the
 * kernels' __align__(16) asks for) and, in the sanitizer build, exactly the
 * launch's bytes, so AddressSanitizer reports the first byte past them (a
 * zero-byte request gets one byte, poisoned); otherwise a guard follows. */
void alloc_smem(size_t bytes) {
    free(blk.smem);
#ifdef KVCPT_EMU_ASAN
    blk.smem = (char *)malloc(bytes ? bytes : 1);
#else
    blk.smem = (char *)malloc(bytes + kSmemGuard);
#endif
    if (!blk.smem) {
        fprintf(stderr, "kvcpt CUDA emulator: no memory for %zu bytes of dynamic shared memory\n", bytes);
        exit(1);
    }
#ifdef KVCPT_EMU_ASAN
    if (!bytes) ASAN_POISON_MEMORY_REGION(blk.smem, 1);
#endif
}

/* KVCPT_EMU_BLOCKS: all (the default) runs every block of a grid; sample
 * runs the first and the last block, the last block along each dimension
 * (the others at 0) and KVCPT_EMU_SAMPLE_BLOCKS (default 4) blocks drawn
 * with KVCPT_EMU_SEED, so that a kernel at Llama-3.1-8B's shapes runs in
 * seconds under the sanitizers: the largest indices a grid computes are at
 * its corners. Blocks not run leave their outputs as they were; results are
 * meaningless, bounds and overflows are what is checked. */
enum BlocksMode { BLOCKS_ALL, BLOCKS_SAMPLE };
BlocksMode blocks_mode = BLOCKS_ALL;
size_t sample_random = 4;

void read_blocks_mode() {
    const char *m = getenv("KVCPT_EMU_BLOCKS"), *n = getenv("KVCPT_EMU_SAMPLE_BLOCKS");
    if (!m || !*m || strcmp(m, "all") == 0) blocks_mode = BLOCKS_ALL;
    else if (strcmp(m, "sample") == 0) blocks_mode = BLOCKS_SAMPLE;
    else {
        fprintf(stderr, "kvcpt CUDA emulator: KVCPT_EMU_BLOCKS=%s: expected all or sample\n", m);
        exit(2);
    }
    if (n && *n) {
        char *end = nullptr;
        unsigned long long v = strtoull(n, &end, 10);
        if (*end || v > 1000000) {
            fprintf(stderr, "kvcpt CUDA emulator: KVCPT_EMU_SAMPLE_BLOCKS=%s: expected an integer 0..1000000\n", n);
            exit(2);
        }
        sample_random = (size_t)v;
    }
}

/* The sampled blocks of a grid, ascending and distinct (empty: all of them). */
void sample_blocks(std::vector<uint64_t> &out, dim3 g) {
    uint64_t n = (uint64_t)g.x * g.y * g.z, xy = (uint64_t)g.x * g.y;
    out.clear();
    if (n <= 4 + sample_random) return;
    out.push_back(0);
    out.push_back(n - 1);
    out.push_back(g.x - 1);                    /* (last, 0, 0) */
    out.push_back((uint64_t)(g.y - 1) * g.x);  /* (0, last, 0) */
    out.push_back((uint64_t)(g.z - 1) * xy);   /* (0, 0, last) */
    for (size_t i = 0; i < sample_random; i++) out.push_back(next_random() % n);
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
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
    gridDim = c.grid;
    blockDim = c.block;
    blk.body = &body;
    size_t threads = (size_t)c.block.x * c.block.y * c.block.z;
    blk.slots.assign(threads, 0);
    blk.votes.assign(threads, 0);
    size_t nblocks = (size_t)c.grid.x * c.grid.y * c.grid.z;
    /* the blocks to run, as linear indices; empty: all of them */
    std::vector<uint64_t> chosen;
    if (blocks_mode == BLOCKS_SAMPLE) sample_blocks(chosen, c.grid);
    size_t nrun = chosen.empty() ? nblocks : chosen.size();
    /* index order needs no table (grids of millions of blocks are common) */
    std::vector<uint32_t> perm;
    if (order != ORDER_INDEX) {
        if (nrun > 0xffffffffu) {
            fprintf(stderr, "kvcpt CUDA emulator: launch %llu: %zu blocks are too many to reorder\n", launches, nrun);
            exit(1);
        }
        make_order(perm, nrun);
    }
    alloc_smem(c.smem);
    for (size_t b = 0; b < nrun; b++) {
        size_t k = order == ORDER_INDEX ? b : perm[b];
        size_t lin = chosen.empty() ? k : (size_t)chosen[k];
        unsigned int x = (unsigned int)(lin % c.grid.x), y = (unsigned int)(lin / c.grid.x % c.grid.y),
                     z = (unsigned int)(lin / ((size_t)c.grid.x * c.grid.y));
        blockIdx = {x, y, z};
        /* all-ones bytes (NaN as floats): a kernel that reads dynamic shared
         * memory before writing it gets NaNs, which the parity tests see */
        memset(blk.smem, 0xff, c.smem);
#ifndef KVCPT_EMU_ASAN
        /* past the launch's bytes a guard of known bytes, checked after the
         * block, catches writes beyond what the launch asked for */
        unsigned char *guard = (unsigned char *)blk.smem + c.smem;
        memset(guard, kGuardByte, kSmemGuard);
#endif
        run_block(c);
#ifndef KVCPT_EMU_ASAN
        for (size_t i = 0; i < kSmemGuard; i++)
            if (guard[i] != kGuardByte) {
                fprintf(stderr,
                        "cuda emulator: a kernel wrote byte %zu past the end of its %zu bytes of dynamic shared memory "
                        "(block (%u, %u, %u) of grid (%u, %u, %u), %zu threads)\n",
                        i + 1, c.smem, x, y, z, c.grid.x, c.grid.y, c.grid.z, threads);
                abort();
            }
#endif
    }
    check_static_smem(c, kernel);
}

void *dynamic_smem() { return blk.smem; }
void static_smem(const void *var, size_t bytes) {
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
/* common/redzone.h's hooks: the gap after a sub-buffer carved out of one
 * allocation becomes unaddressable to AddressSanitizer, or addressable again
 * when the allocation is next used whole (no-ops outside the sanitizer build). */
void emu_poison_redzone(const void *p, size_t bytes) {
#ifdef KVCPT_EMU_ASAN
    ASAN_POISON_MEMORY_REGION(p, bytes);
#else
    (void)p, (void)bytes;
#endif
}
void emu_unpoison_redzone(const void *p, size_t bytes) {
#ifdef KVCPT_EMU_ASAN
    ASAN_UNPOISON_MEMORY_REGION(p, bytes);
#else
    (void)p, (void)bytes;
#endif
}
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
    /* calloc would hide kernels that read memory nobody wrote; fill with a NaN
     * pattern instead. Exactly the bytes asked for, so that in the sanitizer
     * build an access past them is reported (a zero-byte request gets one
     * byte, poisoned there). */
    /* KVCPT_EMU_BLOCKS=sample runs kernels at sizes whose buffers would not
     * fit in memory if every page were written, and results are not
     * compared: there device memory starts as zeros (calloc: pages nobody
     * touches stay unbacked), so an index array that a block not run should
     * have written (a gather list, an iota before a sort) reads as index 0,
     * in bounds, instead of garbage that would read as a false report */
    read_order();
    *p = blocks_mode == BLOCKS_SAMPLE ? calloc(bytes ? bytes : 1, 1) : malloc(bytes ? bytes : 1);
    if (!*p) return record(cudaErrorMemoryAllocation);
    if (blocks_mode != BLOCKS_SAMPLE) memset(*p, 0xff, bytes);
    if (!bytes) emu_poison_redzone(*p, 1);
    return cudaSuccess;
}
cudaError_t cudaMallocAsync(void **p, size_t bytes, cudaStream_t st) { return (void)st, cudaMalloc(p, bytes); }
cudaError_t cudaFree(void *p) {
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
