/* The CUDA emulator's scheduler and host API (see include/cuda_runtime.h).
 *
 * A launch runs its blocks one after another. For a block, every CUDA thread
 * becomes a fiber with its own stack; the scheduler runs the runnable fibers
 * in turn (in the order KVCPT_EMU_ORDER picks: index, reverse or seeded
 * random; blocks too) until each one finishes or waits at a barrier. A block
 * barrier opens when every unfinished thread of the block waits at one; a
 * warp intrinsic (shuffle, __syncwarp, vote) completes when every live lane
 * named in its mask has called it with the same mask, and the lanes outside
 * the mask run on. If nothing can open, the kernel has diverged around a
 * barrier, which on a GPU is a hang or undefined: the emulator stops with a
 * message naming the kernel launch. */
#include <errno.h>
#include <unistd.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>

#include "emu_mma.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <string>
#include <vector>

/* The race variant (build/emu-race/) tells the detector what runs and when
 * barriers open; the plain build compiles these away. */
#ifdef KVCPT_EMU_RACE
#include "emu_race.h"
#define RACE_HOOK(call) emu::race::call
#else
#define RACE_HOOK(call) ((void)0)
#endif

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
/* Fiber i's stack starts i * kStackStride bytes into the block's stacks. A
 * power-of-two stride would put every fiber's hot top-of-stack frames in the
 * same cache set (L1 and L2 index by address bits below 64 KB), so that each
 * switch at a barrier missed to L3; the extra 17 cache lines per fiber spread
 * the stack tops over all the sets. */
const size_t kStackStride = kStackBytes + 17 * 64;
#ifndef KVCPT_EMU_ASAN
/* bytes after a launch's dynamic shared memory that must stay untouched (the
 * sanitizer build allocates exactly the launch's bytes instead, and
 * AddressSanitizer reports the first byte past them) */
const size_t kSmemGuard = 4096;
const unsigned char kGuardByte = 0xa5;
#endif

/* A lane's call of a warp intrinsic, kept while it waits for the other lanes
 * of its mask; result is filled in when they have all arrived. */
struct WarpCall {
    emu::WarpOp op;
    unsigned int mask;
    uint64_t value;
    unsigned int arg;
    int width;
    const void *site; /* the call's return address: which intrinsic in the code */
    uint64_t result;
    const void *in; /* a matrix instruction's operands and results (warp_matrix_op) */
    void *out;
};

/* A cp.async a thread issued and has not waited for (emu::cp_async_16). */
struct CpAsyncCopy {
    void *dst;
    const void *src;
    uint64_t group;   /* the thread's commit count when issued: the group it joins */
    const void *site; /* the issuing call's return address */
};

struct Block {
    std::vector<Fiber> fibers;
    char *stacks = nullptr;
    size_t stack_fibers = 0;
    char *smem = nullptr; /* the launch's dynamic shared memory */
    size_t smem_bytes = 0;
    std::vector<WarpCall> calls; /* each thread's pending warp intrinsic */
    std::vector<int> votes;      /* one __syncthreads_count vote per thread */
    std::vector<std::vector<CpAsyncCopy>> copies; /* each thread's cp.asyncs in flight, in issue order */
    std::vector<uint64_t> committed;               /* each thread's cp.async groups committed so far */
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
const char *kernel_name = "a kernel"; /* the running launch's, for messages */

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
std::vector<size_t> static_var_bytes; /* beside static_vars: each one's size */
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

/* A thread ending with cp.asyncs not waited for: their bytes would land at
 * no defined time, possibly after the block's shared memory went to the next
 * block, and nothing could read them in order. */
void check_copies_done() {
    const std::vector<CpAsyncCopy> &q = blk.copies[blk.current];
    if (q.empty()) return;
    const Fiber &f = blk.fibers[blk.current];
    fprintf(stderr,
            "kvcpt CUDA emulator: %s (launch %llu), block (%u,%u,%u), thread (%u,%u,%u): the thread ended with %zu "
            "cp.async cop%s never covered by a cp.async.wait_group or wait_all (the first issued at pc %p, to shared "
            "%p)\n",
            kernel_name, launches, blockIdx.x, blockIdx.y, blockIdx.z, f.tid.x, f.tid.y, f.tid.z, q.size(),
            q.size() == 1 ? "y" : "ies", q[0].site, q[0].dst);
    exit(1);
}

void fiber_main() {
#ifdef KVCPT_EMU_ASAN
    /* first entry: no fake stack to resume; learn the scheduler's stack */
    __sanitizer_finish_switch_fiber(nullptr, &blk.scheduler_stack, &blk.scheduler_stack_bytes);
#endif
    (*blk.body)();
    check_copies_done();
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

const char *warp_op_name(emu::WarpOp op) {
    switch (op) {
        case emu::WARP_SHFL_IDX: return "__shfl_sync";
        case emu::WARP_SHFL_UP: return "__shfl_up_sync";
        case emu::WARP_SHFL_DOWN: return "__shfl_down_sync";
        case emu::WARP_SHFL_XOR: return "__shfl_xor_sync";
        case emu::WARP_SYNCWARP: return "__syncwarp";
        case emu::WARP_BALLOT: return "__ballot_sync";
        case emu::WARP_ANY: return "__any_sync";
        case emu::WARP_ALL: return "__all_sync";
        case emu::WARP_MMA_M16N8K16_BF16: return "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32";
        case emu::WARP_LDMATRIX_M8N8: return "ldmatrix.sync.aligned.m8n8";
    }
    return "a warp intrinsic";
}

/* Undefined behaviour in a warp intrinsic: what a GPU would answer is
 * unknowable (a stale or arbitrary value, a hang), so stop and say where. */
[[noreturn]] void warp_error(size_t thread, const char *what) {
    const Fiber &f = blk.fibers[thread];
    const WarpCall &c = blk.calls[thread];
    fprintf(stderr,
            "kvcpt CUDA emulator: %s (launch %llu), block (%u,%u,%u), thread (%u,%u,%u) = warp %zu lane %zu: %s "
            "with mask 0x%08x: %s\n",
            kernel_name, launches, blockIdx.x, blockIdx.y, blockIdx.z, f.tid.x, f.tid.y, f.tid.z, thread / 32,
            thread % 32, warp_op_name(c.op), c.mask, what);
    exit(1);
}

/* The lane a shuffle reads, as the programming guide defines it for width:
 * the lane's own when the source falls outside its width-segment (up, down,
 * and xor towards a later segment; idx wraps within the segment). */
unsigned int shuffle_source(const WarpCall &c, unsigned int lane) {
    unsigned int w = (unsigned int)c.width, first = lane & ~(w - 1), last = first + w - 1;
    switch (c.op) {
        case emu::WARP_SHFL_IDX: return first + (c.arg & (w - 1));
        case emu::WARP_SHFL_UP: return (uint64_t)c.arg > lane - first ? lane : lane - c.arg;
        case emu::WARP_SHFL_DOWN: return (uint64_t)lane + c.arg > last ? lane : lane + c.arg;
        case emu::WARP_SHFL_XOR: {
            unsigned int src = lane ^ (c.arg & 31u);
            return src > last ? lane : src;
        }
        default: return lane;
    }
}

bool is_matrix_op(emu::WarpOp op) { return op == emu::WARP_MMA_M16N8K16_BF16 || op == emu::WARP_LDMATRIX_M8N8; }

/* Completes a matrix instruction that the live lanes of warp w (threads
 * w..w+31, of n) have all reached, lane i among them: .sync.aligned needs
 * all 32 lanes at the same instruction with the same qualifiers, so a
 * missing or exited lane, another call site or other qualifiers stop the
 * program; then every lane gets its registers (emu_mma.cc). */
void complete_matrix_op(size_t w, size_t n, size_t i) {
    const WarpCall &c = blk.calls[i];
    char why[240];
    const void *in[32];
    void *out[32];
    for (unsigned int l = 0; l < 32; l++) {
        if (w + l >= n) {
            snprintf(why, sizeof why,
                     "lane %u does not exist (the block has %zu threads, so this warp is partial): every lane of a "
                     "full warp must execute it (the PTX ISA: .aligned)",
                     l, n);
            warp_error(i, why);
        }
        if (blk.fibers[w + l].state == FINISHED) {
            snprintf(why, sizeof why,
                     "lane %u has exited (returned from the kernel): the PTX ISA leaves the instruction undefined when "
                     "any thread of the warp has exited",
                     l);
            warp_error(i, why);
        }
        const WarpCall &o = blk.calls[w + l];
        if (o.site != c.site) {
            snprintf(why, sizeof why,
                     "lane %u executes it from another place in the code (divergent lanes): .aligned requires every "
                     "lane of the warp to execute the same instruction",
                     l);
            warp_error(i, why);
        }
        if (o.arg != c.arg) {
            snprintf(why, sizeof why, "lane %u passes other qualifiers (0x%x, this lane 0x%x): the PTX ISA: undefined",
                     l, o.arg, c.arg);
            warp_error(i, why);
        }
        in[l] = o.in;
        out[l] = o.out;
    }
    if (c.op == emu::WARP_MMA_M16N8K16_BF16) emu::mma_m16n8k16_bf16_warp(in, out);
    else emu::ldmatrix_m8n8_warp(c.arg & 7u, (c.arg & 16u) != 0, in, out);
    for (unsigned int l = 0; l < 32; l++) blk.fibers[w + l].state = RUNNABLE;
}

/* Completes the intrinsic that lanes of warp w (threads w..w+31, of n) named
 * in mask have all called: computes each one's result, then lets them run. */
void complete_warp_op(size_t w, size_t n, unsigned int mask) {
    uint64_t ballot = 0;
    int all = 1;
    for (unsigned int l = 0; l < 32; l++)
        if (mask >> l & 1u && w + l < n && blk.fibers[w + l].state == AT_WARP_BARRIER) {
            ballot |= (uint64_t)(blk.calls[w + l].value != 0) << l;
            all &= blk.calls[w + l].value != 0;
        }
    char why[200];
    for (unsigned int l = 0; l < 32; l++) {
        if (!(mask >> l & 1u) || w + l >= n || blk.fibers[w + l].state != AT_WARP_BARRIER) continue;
        WarpCall &c = blk.calls[w + l];
        switch (c.op) {
            case emu::WARP_SYNCWARP: c.result = 0; break;
            case emu::WARP_BALLOT: c.result = ballot; break;
            case emu::WARP_ANY: c.result = ballot != 0; break;
            case emu::WARP_ALL: c.result = (uint64_t)all; break;
            default: {
                unsigned int src = shuffle_source(c, l);
                if (src == l) {
                    c.result = c.value;
                    break;
                }
                if (w + src >= n) {
                    snprintf(
                        why, sizeof why,
                        "reads lane %u, which does not exist (the block has %zu threads, so this warp is partial): a "
                        "GPU returns an undefined value",
                        src, n);
                    warp_error(w + l, why);
                }
                if (blk.fibers[w + src].state == FINISHED) {
                    snprintf(why, sizeof why,
                             "reads lane %u, which has exited (returned from the kernel): a GPU returns "
                             "an undefined value",
                             src);
                    warp_error(w + l, why);
                }
                if (!(mask >> src & 1u)) {
                    snprintf(why, sizeof why,
                             "reads lane %u, which is not in the mask and so not taking part: a GPU returns an "
                             "undefined value",
                             src);
                    warp_error(w + l, why);
                }
                c.result = blk.calls[w + src].value;
            }
        }
    }
    for (unsigned int l = 0; l < 32; l++)
        if (mask >> l & 1u && w + l < n && blk.fibers[w + l].state == AT_WARP_BARRIER)
            blk.fibers[w + l].state = RUNNABLE;
}

/* Two lanes at the same intrinsic in the code, one naming the other in its
 * mask, with different masks: the guide's "same mask" broken (a lane
 * computing its mask from its own data, say). Lanes at different call
 * sites may legitimately differ (one lane's private shuffle first, then a
 * shared one), so only the same site is checked. */
void check_same_site_masks(size_t w, size_t end) {
    size_t first = end;
    int uniform = 1;
    for (size_t i = w; i < end; i++) {
        if (blk.fibers[i].state != AT_WARP_BARRIER) continue;
        if (first == end) first = i;
        else if (blk.calls[i].site != blk.calls[first].site || blk.calls[i].mask != blk.calls[first].mask) uniform = 0;
    }
    if (uniform) return;
    for (size_t i = w; i < end; i++) {
        if (blk.fibers[i].state != AT_WARP_BARRIER) continue;
        for (size_t j = w; j < end; j++) {
            if (j == i || blk.fibers[j].state != AT_WARP_BARRIER) continue;
            const WarpCall &a = blk.calls[i], &b = blk.calls[j];
            if (a.site == b.site && a.mask != b.mask && a.mask >> (j - w) & 1u) {
                char why[160];
                snprintf(why, sizeof why,
                         "lane %zu, named in this mask, calls the same intrinsic with mask 0x%08x (the guide: "
                         "undefined)",
                         j - w, b.mask);
                warp_error(i, why);
            }
        }
    }
}

/* Whether every live lane named in lane i's mask waits at the same
 * intrinsic with the same mask. */
int warp_op_ready(size_t w, size_t n, size_t i) {
    const WarpCall &c = blk.calls[i];
    for (unsigned int l = 0; l < 32; l++) {
        if (!(c.mask >> l & 1u) || w + l >= n) continue;
        const Fiber &f = blk.fibers[w + l];
        if (f.state == FINISHED) continue;
        if (f.state != AT_WARP_BARRIER || blk.calls[w + l].mask != c.mask || blk.calls[w + l].op != c.op) return 0;
    }
    return 1;
}

/* Opens the barriers that every unfinished thread in scope has reached;
 * returns 0 when none can open. */
int open_barriers() {
    size_t n = blk.fibers.size();
    int opened = 0;
    for (size_t w = 0; w < n; w += 32) {
        size_t end = w + 32 < n ? w + 32 : n;
        check_same_site_masks(w, end);
        for (size_t i = w; i < end; i++)
            if (blk.fibers[i].state == AT_WARP_BARRIER && warp_op_ready(w, n, i)) {
                if (is_matrix_op(blk.calls[i].op)) complete_matrix_op(w, n, i);
                else complete_warp_op(w, n, blk.calls[i].mask);
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

/* Nothing can run and no barrier can open: name a lane that waits and one it
 * waits for. */
[[noreturn]] void report_stuck() {
    size_t n = blk.fibers.size();
    for (size_t i = 0; i < n; i++) {
        if (blk.fibers[i].state != AT_WARP_BARRIER) continue;
        size_t w = i & ~(size_t)31;
        const WarpCall &c = blk.calls[i];
        for (unsigned int l = 0; l < 32; l++) {
            if (!(c.mask >> l & 1u) || w + l >= n) continue;
            const Fiber &f = blk.fibers[w + l];
            const WarpCall &o = blk.calls[w + l];
            char why[200];
            if (f.state == AT_BLOCK_BARRIER)
                snprintf(why, sizeof why,
                         "lane %u, named in this mask, waits at __syncthreads: the warp can never meet", l);
            else if (f.state == AT_WARP_BARRIER && (o.mask != c.mask || o.op != c.op))
                snprintf(why, sizeof why,
                         "lane %u, named in this mask, waits at %s with mask 0x%08x: the lanes of one intrinsic must "
                         "pass the same mask (the guide: undefined; here they never meet)",
                         l, warp_op_name(o.op), o.mask);
            else continue;
            warp_error(i, why);
        }
    }
    fprintf(stderr,
            "kvcpt CUDA emulator: %s (launch %llu), block (%u,%u,%u): threads wait at barriers that cannot open "
            "(a __syncthreads not reached by every live thread of its block)\n",
            kernel_name, launches, blockIdx.x, blockIdx.y, blockIdx.z);
    exit(1);
}

void run_block(const emu::Config &c, size_t block_linear) {
    size_t n = (size_t)c.block.x * c.block.y * c.block.z;
    blk.fibers.assign(n, Fiber());
    blk.copies.resize(n);
    for (std::vector<CpAsyncCopy> &q : blk.copies) q.clear();
    blk.committed.assign(n, 0);
    if (blk.stack_fibers < n) {
        free(blk.stacks);
        blk.stacks = (char *)malloc(n * kStackStride);
        if (!blk.stacks) {
            fprintf(stderr, "kvcpt CUDA emulator: no memory for %zu fiber stacks\n", n);
            exit(1);
        }
        blk.stack_fibers = n;
    }
#ifdef KVCPT_EMU_ASAN
    /* the last block's fibers left frames (and their red zones) on these stacks */
    ASAN_UNPOISON_MEMORY_REGION(blk.stacks, n * kStackStride);
#endif
    RACE_HOOK(block_begin(block_linear, emu::dynamic_smem(), c.smem, blk.stacks, blk.stack_fibers * kStackStride));
    for (size_t i = 0; i < n; i++) {
        Fiber &f = blk.fibers[i];
        f.tid = {(unsigned int)(i % c.block.x), (unsigned int)(i / c.block.x % c.block.y),
                 (unsigned int)(i / ((size_t)c.block.x * c.block.y))};
        f.state = RUNNABLE;
        fiber_start(f, blk.stacks + i * kStackStride);
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
                to_fiber(blk.fibers[i], blk.stacks + i * kStackStride);
                ran = 1;
            }
            unfinished += blk.fibers[i].state != FINISHED;
        }
        if (!unfinished) return;
        if (!ran && !open_barriers()) report_stuck();
    }
}

/* A launch's dynamic shared memory: malloc's 16-byte alignment (what the
 * kernels' __align__(16) asks for) and, in the sanitizer build, exactly the
 * launch's bytes, so AddressSanitizer reports the first byte past them (a
 * zero-byte request gets one byte, poisoned); otherwise a guard follows. */
void alloc_smem(size_t bytes) {
    free(blk.smem);
    blk.smem_bytes = bytes;
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

void check_vector_access(const void *p, size_t bytes, const char *what) {
    if ((uintptr_t)p % bytes == 0) return;
    const Fiber &f = blk.fibers[blk.current];
    fprintf(stderr,
            "kvcpt CUDA emulator: %s (launch %llu), block (%u,%u,%u), thread (%u,%u,%u): %s of %zu bytes at %p, "
            "which is not %zu-byte aligned (a GPU stops the kernel: misaligned address)\n",
            kernel_name, launches, blockIdx.x, blockIdx.y, blockIdx.z, f.tid.x, f.tid.y, f.tid.z, what, bytes, p,
            bytes);
    exit(1);
}

/* What a GPU answers to a launch configuration: cudaSuccess, or the error the
 * launch sets without running anything. */
cudaError_t check_launch(const Config &c, const void *kernel) {
    if (!c.grid.x || !c.grid.y || !c.grid.z || !c.block.x || !c.block.y || !c.block.z)
        return cudaErrorInvalidConfiguration;
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
    kernel_name = c.name ? c.name : "a kernel";
    read_order();
    cudaError_t bad = check_launch(c, kernel);
    if (bad != cudaSuccess) {
        /* as on a GPU, nothing runs and the launch only sets the last error; with
         * KVCPT_EMU_TRACE_LAUNCH_ERRORS set, also a line naming it */
        if (getenv("KVCPT_EMU_TRACE_LAUNCH_ERRORS"))
            fprintf(
                stderr,
                "kvcpt CUDA emulator: launch %llu refused (%s): grid (%u,%u,%u) block (%u,%u,%u) dynamic smem %zu\n",
                launches, cudaGetErrorString(bad), c.grid.x, c.grid.y, c.grid.z, c.block.x, c.block.y, c.block.z,
                c.smem);
        last_error = bad;
        return;
    }
    static_vars.clear();
    static_var_bytes.clear();
    static_bytes = 0;
    RACE_HOOK(launch_begin(c.name, launches, c.grid, c.block));
    gridDim = c.grid;
    blockDim = c.block;
    blk.body = &body;
    size_t threads = (size_t)c.block.x * c.block.y * c.block.z;
    blk.calls.assign(threads, WarpCall());
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
        run_block(c, lin);
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
    RACE_HOOK(launch_end());
}

void *dynamic_smem() { return blk.smem; }
void static_smem(const void *var, size_t bytes, const char *name) {
    RACE_HOOK(static_smem(var, bytes, name));
    for (const void *v : static_vars)
        if (v == var) return;
    static_vars.push_back(var);
    static_var_bytes.push_back(bytes);
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
__attribute__((noinline)) uint64_t warp_op(WarpOp op, unsigned int mask, uint64_t value, unsigned int arg, int width) {
    size_t me = blk.current;
    WarpCall &call = blk.calls[me];
    call = {op, mask, value, arg, width, __builtin_return_address(0), 0, nullptr, nullptr};
    if (!(mask >> (me & 31) & 1u)) warp_error(me, "the calling lane is not in its own mask (the guide: undefined)");
    if (width < 1 || width > 32 || (width & (width - 1)))
        warp_error(me, "width is not a power of two from 1 to 32 (the guide: undefined)");
    wait_at(AT_WARP_BARRIER);
    return blk.calls[me].result;
}
__attribute__((noinline)) void warp_matrix_op(WarpOp op, unsigned int arg, const void *in, void *out) {
    size_t me = blk.current;
    WarpCall &call = blk.calls[me];
    call = {op, 0xffffffffu, 0, arg, 32, __builtin_return_address(0), 0, in, out};
    wait_at(AT_WARP_BARRIER);
}
void check_shared(const void *p, size_t bytes, size_t align, const char *what) {
    uintptr_t a = (uintptr_t)p;
    const char *why = nullptr;
    bool inside = a >= (uintptr_t)blk.smem && a - (uintptr_t)blk.smem <= blk.smem_bytes &&
                  bytes <= blk.smem_bytes - (a - (uintptr_t)blk.smem);
    for (size_t v = 0; v < static_vars.size() && !inside; v++) {
        uintptr_t s = (uintptr_t)static_vars[v];
        inside = a >= s && a - s <= static_var_bytes[v] && bytes <= static_var_bytes[v] - (a - s);
    }
    if (!inside)
        why = "does not lie inside the block's shared memory (its dynamic bytes or a static __shared__ variable)";
    else if (a % align) why = "is not aligned as the instruction requires";
    if (!why) return;
    size_t me = blk.current;
    const Fiber &f = blk.fibers[me];
    fprintf(stderr,
            "kvcpt CUDA emulator: %s (launch %llu), block (%u,%u,%u), thread (%u,%u,%u) = warp %zu lane %zu: %s: "
            "the %zu bytes at %p (%zu-byte alignment required) %s; the PTX ISA: undefined\n",
            kernel_name, launches, blockIdx.x, blockIdx.y, blockIdx.z, f.tid.x, f.tid.y, f.tid.z, me / 32, me % 32,
            what, bytes, p, align, why);
    exit(1);
}

__attribute__((noinline)) void cp_async_16(void *smem_dst, const void *global_src) {
    const void *site = __builtin_return_address(0);
    size_t me = blk.current;
    check_shared(smem_dst, 16, 16, "cp.async.cg.shared.global (the destination)");
    size_t after = 0;
    const char *why = nullptr;
    if ((uintptr_t)global_src % 16) why = "is not 16-byte aligned";
    else if (!emu_device_extent(global_src, &after, nullptr) || after < 16)
        why = "does not lie inside a cudaMalloc'd block (the source must be global memory)";
    if (why) {
        const Fiber &f = blk.fibers[me];
        fprintf(stderr,
                "kvcpt CUDA emulator: %s (launch %llu), block (%u,%u,%u), thread (%u,%u,%u): "
                "cp.async.cg.shared.global: the 16-byte source at %p %s; the PTX ISA: undefined\n",
                kernel_name, launches, blockIdx.x, blockIdx.y, blockIdx.z, f.tid.x, f.tid.y, f.tid.z, global_src, why);
        exit(1);
    }
    RACE_HOOK(cp_async_issue(smem_dst, global_src, 16, site));
    blk.copies[me].push_back({smem_dst, global_src, blk.committed[me], site});
}

void cp_async_commit() { blk.committed[blk.current]++; }

/* The bytes land here, in the issuing thread, in issue order: what a GPU
 * guarantees only once the wait returns. */
static void cp_async_complete(unsigned int n, const void *site) {
    size_t me = blk.current;
    std::vector<CpAsyncCopy> &q = blk.copies[me];
    const uint64_t committed = blk.committed[me];
    if (committed < n) return;
    const uint64_t limit = committed - n; /* groups below this one complete */
    size_t kept = 0;
    for (size_t i = 0; i < q.size(); i++) {
        if (q[i].group < limit) {
            memcpy(q[i].dst, q[i].src, 16);
            RACE_HOOK(cp_async_complete(q[i].dst, q[i].src, 16, site));
        } else {
            q[kept++] = q[i];
        }
    }
    q.resize(kept);
}

__attribute__((noinline)) void cp_async_wait(unsigned int n) { cp_async_complete(n, __builtin_return_address(0)); }

__attribute__((noinline)) void cp_async_wait_all() {
    cp_async_commit();
    cp_async_complete(0, __builtin_return_address(0));
}

} // namespace emu

/* KVCPT_EMU_DIGEST=PATH: a line per device-to-host copy (the launches run
 * so far, its size and an FNV-1a hash of its bytes) written to PATH, so that
 * runs under different KVCPT_EMU_ORDERs can be compared byte for byte
 * (tests/cuda_emu/test_cuda_emu_orders.sh): everything a test or the program reads
 * back from the device passes through here. Host threads may copy at the
 * same time (the decode engine's policies run side by side under OpenMP),
 * so the lines carry no sequence number and are compared as a sorted set. */
namespace {
std::mutex digest_mutex;
FILE *digest_file() {
    static bool opened = false;
    static FILE *f = nullptr;
    if (opened) return f;
    opened = true;
    const char *path = getenv("KVCPT_EMU_DIGEST");
    if (!path || !*path) return nullptr;
    f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "kvcpt CUDA emulator: KVCPT_EMU_DIGEST=%s: cannot open for writing\n", path);
        exit(1);
    }
    return f;
}
void digest_copy(const void *src, size_t bytes) {
    std::lock_guard<std::mutex> hold(digest_mutex);
    FILE *f = digest_file();
    if (!f) return;
    uint64_t h = 0xcbf29ce484222325ull;
    const unsigned char *p = (const unsigned char *)src;
    for (size_t i = 0; i < bytes; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    if (fprintf(f, "after launch %llu: %zu bytes, fnv1a64 %016llx\n", launches, bytes, (unsigned long long)h) < 0 ||
        fflush(f) != 0) {
        fprintf(stderr, "kvcpt CUDA emulator: KVCPT_EMU_DIGEST: write failed\n");
        exit(1);
    }
}
} // namespace

/* The emulated devices (KVCPT_EMU_DEVICES) and which one each cudaMalloc'd
 * block belongs to. The current device is per host thread, as in the real
 * runtime; the block table is shared by all threads (the decode engine's
 * policies copy from several at once), so it is locked. */
namespace {
thread_local int current_device = 0;
/* Every cudaMalloc'd block: its device (cross-device use faults on a GPU)
 * and its size (emu_device_extent: the emulated NCCL refuses host pointers,
 * buffers shorter than a collective's count and buffers of another device
 * than the communicator's). */
struct DeviceBlock {
    size_t bytes; /* as asked for, 0 included */
    int device;
};
std::mutex blocks_mutex;
std::map<uintptr_t, DeviceBlock> blocks; /* by start address */

[[noreturn]] void bad_devices_env(const char *env) {
    fprintf(stderr,
            "kvcpt CUDA emulator: KVCPT_EMU_DEVICES=%s: expected a device count from 0 to 64, no-driver or "
            "driver-too-old\n",
            env);
    exit(2);
}

/* The number of devices played: unset means one. */
int emu_device_count() {
    static int cached = -1;
    if (cached >= 0) return cached;
    const char *env = getenv("KVCPT_EMU_DEVICES");
    int n = 1;
    if (env && (strcmp(env, "no-driver") == 0 || strcmp(env, "driver-too-old") == 0)) n = 0;
    else if (env && *env) {
        char *end = nullptr;
        long v = strtol(env, &end, 10);
        if (*end || v < 0 || v > 64) bad_devices_env(env);
        n = (int)v;
    }
    cached = n;
    return n;
}

/* A bus id per device, spaced as on a multi-GPU node. */
int emu_pci_bus(int dev) { return 0x18 + 0x10 * dev; }

/* Each device's memory size (KVCPT_EMU_DEVICE_MEM: bytes with an optional
 * K, M or G suffix, powers of 1024; unset, an H100's 80G), so that a
 * program that asks for more than a GPU holds fails here as it would there. */
[[noreturn]] void bad_device_mem_env(const char *env) {
    fprintf(stderr,
            "kvcpt CUDA emulator: KVCPT_EMU_DEVICE_MEM=%s: expected a positive byte count with an optional K, M or G "
            "suffix (e.g. 80G)\n",
            env);
    exit(2);
}

size_t emu_device_mem() {
    static size_t cached = 0;
    if (cached) return cached;
    const char *env = getenv("KVCPT_EMU_DEVICE_MEM");
    size_t v = (size_t)80 << 30;
    if (env) {
        char *end = nullptr;
        errno = 0;
        unsigned long long n = strtoull(env, &end, 10);
        unsigned shift = 0;
        if (end == env || errno || *env == '-' || *env == '+') bad_device_mem_env(env);
        if (*end == 'K' || *end == 'k') shift = 10, end++;
        else if (*end == 'M' || *end == 'm') shift = 20, end++;
        else if (*end == 'G' || *end == 'g') shift = 30, end++;
        if (*end || n == 0 || n > (~0ull >> shift)) bad_device_mem_env(env);
        v = (size_t)(n << shift);
    }
    cached = v;
    return v;
}

/* Bytes of the live blocks per device (beside blocks, under its mutex). */
std::map<int, size_t> device_used;

size_t used_on(int dev) {
    std::lock_guard<std::mutex> hold(blocks_mutex);
    auto it = device_used.find(dev);
    return it == device_used.end() ? 0 : it->second;
}

void note_block(void *p, size_t bytes) {
    std::lock_guard<std::mutex> hold(blocks_mutex);
    blocks[(uintptr_t)p] = DeviceBlock{bytes, current_device};
    device_used[current_device] += bytes;
}

/* Freeing a block of another device than the current one is allowed: the
 * real cudaFree finds the block's device itself. */
void forget_block(void *p) {
    std::lock_guard<std::mutex> hold(blocks_mutex);
    auto it = blocks.find((uintptr_t)p);
    if (it == blocks.end()) return;
    device_used[it->second.device] -= it->second.bytes;
    blocks.erase(it);
}

/* The device of the block p points into, or -1 when p is in none (host memory). */
int device_of(const void *p) {
    std::lock_guard<std::mutex> hold(blocks_mutex);
    auto it = blocks.upper_bound((uintptr_t)p);
    if (it == blocks.begin()) return -1;
    --it;
    /* a zero-byte block still owns its address */
    return (uintptr_t)p < it->first + (it->second.bytes ? it->second.bytes : 1) ? it->second.device : -1;
}

/* A copy or set on another device's block: said, and the call fails. */
bool on_current_device(const char *call, const char *which, const void *p) {
    int d = device_of(p);
    if (d < 0 || d == current_device) return true;
    fprintf(stderr,
            "kvcpt CUDA emulator: %s: the %s %p is memory of device %d, but the current device is %d (no peer "
            "access: a GPU faults)\n",
            call, which, p, d, current_device);
    return false;
}
} // namespace

namespace emu {
void check_launch_pointer(const Config &c, int arg, const void *p) {
    check_stream_order(c.stream, p, c.name ? c.name : "a kernel", arg);
    int d = device_of(p);
    if (d < 0 || d == current_device) return;
    fprintf(stderr,
            "kvcpt CUDA emulator: %s (launch %llu): argument %d (%p) is memory of device %d, but the kernel runs on "
            "device %d (no peer access: a GPU faults)\n",
            c.name ? c.name : "a kernel", launches + 1, arg, p, d, current_device);
    exit(1);
}
} // namespace emu

/* The host waited for stream st's work so far (all streams' when all). */
namespace emu {
void host_synced(cudaStream_t st, bool all);
}

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
 * a driver older than the runtime; N, N devices; unset, one device. */
int emu_nvidia_driver_installed(void) {
    const char *env = getenv("KVCPT_EMU_DEVICES");
    return !(env && strcmp(env, "no-driver") == 0);
}
cudaError_t cudaGetDeviceCount(int *n) {
    const char *env = getenv("KVCPT_EMU_DEVICES");
    *n = 0;
    if (env && (strcmp(env, "driver-too-old") == 0 || strcmp(env, "no-driver") == 0))
        return record(cudaErrorInsufficientDriver);
    int count = emu_device_count();
    if (count == 0) return record(cudaErrorNoDevice);
    *n = count;
    return cudaSuccess;
}
/* The current device's size and what its live blocks leave of it. */
cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes) {
    size_t size = emu_device_mem(), used = used_on(current_device);
    *free_bytes = used < size ? size - used : 0;
    *total_bytes = size;
    return cudaSuccess;
}
namespace {
std::mutex pinned_mu;
std::map<uintptr_t, size_t> pinned; /* registered host ranges, by start */
} // namespace
cudaError_t cudaHostRegister(void *p, size_t bytes, unsigned int flags) {
    if (!p || !bytes || flags != cudaHostRegisterDefault || device_of(p) >= 0) return record(cudaErrorInvalidValue);
    std::lock_guard<std::mutex> lock(pinned_mu);
    uintptr_t a = (uintptr_t)p;
    auto next = pinned.lower_bound(a);
    if (next != pinned.end() && next->first < a + bytes) return record(cudaErrorInvalidValue);
    if (next != pinned.begin() && std::prev(next)->first + std::prev(next)->second > a)
        return record(cudaErrorInvalidValue);
    pinned[a] = bytes;
    return cudaSuccess;
}
cudaError_t cudaHostUnregister(void *p) {
    std::lock_guard<std::mutex> lock(pinned_mu);
    return pinned.erase((uintptr_t)p) ? cudaSuccess : record(cudaErrorInvalidValue);
}
cudaError_t cudaSetDevice(int dev) {
    if (dev < 0 || dev >= emu_device_count()) return record(cudaErrorInvalidDevice);
    current_device = dev;
    return cudaSuccess;
}
cudaError_t cudaGetDevice(int *dev) {
    *dev = current_device;
    return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int dev) {
    memset(p, 0, sizeof *p);
    if (dev < 0 || dev >= emu_device_count()) return record(cudaErrorInvalidDevice);
    snprintf(p->name, sizeof p->name, "kvcpt CUDA emulator (CPU fibers), emulated device %d", dev);
    p->totalGlobalMem = emu_device_mem();
    p->major = 9, p->minor = 0, p->multiProcessorCount = 1;
    p->pciBusID = emu_pci_bus(dev), p->pciDeviceID = 0, p->pciDomainID = 0;
    return cudaSuccess;
}
cudaError_t cudaDeviceGetAttribute(int *value, cudaDeviceAttr attr, int dev) {
    *value = attr == cudaDevAttrMultiProcessorCount ? 1 : attr == cudaDevAttrMemoryClockRate ? 1000000 : 64;
    return dev >= 0 && dev < emu_device_count() ? cudaSuccess : record(cudaErrorInvalidDevice);
}
/* the live allocations (defined in the last section of this file) */
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
    /* beyond the device's size: fails as the real runtime does, nothing allocated */
    size_t size = emu_device_mem(), used = used_on(current_device);
    if (bytes > size || used > size - bytes) {
        *p = nullptr;
        return record(cudaErrorMemoryAllocation);
    }
    *p = blocks_mode == BLOCKS_SAMPLE ? calloc(bytes ? bytes : 1, 1) : malloc(bytes ? bytes : 1);
    if (!*p) return record(cudaErrorMemoryAllocation);
    if (blocks_mode != BLOCKS_SAMPLE) memset(*p, 0xff, bytes);
    if (!bytes) emu_poison_redzone(*p, 1);
    RACE_HOOK(device_alloc(*p, bytes));
    note_block(*p, bytes);
    return cudaSuccess;
}
cudaError_t cudaMallocAsync(void **p, size_t bytes, cudaStream_t st) { return (void)st, cudaMalloc(p, bytes); }
cudaError_t cudaFree(void *p) {
    forget_block(p);
    RACE_HOOK(device_free(p));
    free(p);
    return cudaSuccess;
}
cudaError_t cudaFreeAsync(void *p, cudaStream_t st) { return (void)st, cudaFree(p); }
/* KVCPT_EMU_TRANSFERS=FILE: every byte copied host -> device and device ->
 * host by this process, written to FILE at exit ("h2d N d2h M"). Counted
 * here, below every caller, so a test can hold the program's own counters
 * (log.jsonl's h2d_bytes, d2h_bytes) to what really crossed. */
namespace {
std::atomic<unsigned long long> h2d_bytes{0}, d2h_bytes{0};
void write_transfers() {
    const char *path = getenv("KVCPT_EMU_TRANSFERS");
    FILE *f = path && *path ? fopen(path, "w") : nullptr;
    if (!f || fprintf(f, "h2d %llu d2h %llu\n", h2d_bytes.load(), d2h_bytes.load()) < 0 || fclose(f) != 0)
        fprintf(stderr, "kvcpt CUDA emulator: KVCPT_EMU_TRANSFERS=%s: cannot write the byte counts\n",
                path ? path : "");
}
void count_transfer(cudaMemcpyKind kind, size_t bytes) {
    static std::once_flag registered;
    if (!getenv("KVCPT_EMU_TRANSFERS")) return;
    std::call_once(registered, [] { atexit(write_transfers); });
    if (kind == cudaMemcpyHostToDevice) h2d_bytes += bytes;
    else if (kind == cudaMemcpyDeviceToHost) d2h_bytes += bytes;
}
} // namespace
cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind) {
    if (!on_current_device("cudaMemcpy", "destination", dst) || !on_current_device("cudaMemcpy", "source", src))
        return record(cudaErrorInvalidDevice);
    emu::check_stream_order(nullptr, src, "cudaMemcpy's source", -1);
    emu::check_stream_order(nullptr, dst, "cudaMemcpy's destination", -1);
    count_transfer(kind, bytes);
    if (kind == cudaMemcpyDeviceToHost) digest_copy(src, bytes);
    memmove(dst, src, bytes);
    return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind, cudaStream_t st) {
    (void)st;
    if (!on_current_device("cudaMemcpyAsync", "destination", dst) ||
        !on_current_device("cudaMemcpyAsync", "source", src))
        return record(cudaErrorInvalidDevice);
    return cudaMemcpy(dst, src, bytes, kind);
}
cudaError_t cudaMemset(void *dst, int value, size_t bytes) {
    if (!on_current_device("cudaMemset", "destination", dst)) return record(cudaErrorInvalidDevice);
    emu::check_stream_order(nullptr, dst, "cudaMemset's destination", -1);
    memset(dst, value, bytes);
    return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void *dst, int value, size_t bytes, cudaStream_t st) {
    return (void)st, cudaMemset(dst, value, bytes);
}
cudaError_t cudaDeviceSynchronize(void) {
    emu::host_synced(nullptr, true);
    return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t st) {
    if (!emu_stream_valid(st)) return record(cudaErrorInvalidValue);
    emu::host_synced(st, false);
    return cudaSuccess;
}
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
        case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
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
        case cudaErrorInvalidDevice: return "invalid device ordinal";
        case cudaErrorNotReady: return "device not ready";
        default: return "emulated error";
    }
}
}

/* ---- streams and events (for the emulated NCCL) ----
 * Everything runs at its call (see cuda_runtime.h), so streams and events
 * carry no work: they are checked handles. */
struct CUstream_st {
    unsigned int flags;
};
struct CUevent_st {
    unsigned int flags;
    cudaStream_t stream; /* of its last record */
    unsigned long long seq; /* that stream's operations before the record */
};
/* Stream order (cuda_runtime.h, emu::stream_writes): a clock per stream
 * (operations noted on it), what each stream has waited for of every other
 * one, what the host has, and the writes not yet known to be ordered. */
namespace emu {
namespace {
struct StreamClock {
    unsigned long long seq = 0;
    std::map<cudaStream_t, unsigned long long> known;
};
struct PendingWrite {
    uintptr_t lo, hi;
    cudaStream_t stream;
    unsigned long long seq;
    std::string what;
};
std::mutex order_mu;
std::map<cudaStream_t, StreamClock> clocks;
std::map<cudaStream_t, unsigned long long> host_known;
std::vector<PendingWrite> pending;
std::atomic<size_t> n_pending{0};

bool ordered_after(cudaStream_t reader, const PendingWrite &w) {
    if (reader == w.stream) return true;
    auto h = host_known.find(w.stream);
    if (h != host_known.end() && h->second >= w.seq) return true;
    auto c = clocks.find(reader);
    if (c == clocks.end()) return false;
    auto k = c->second.known.find(w.stream);
    return k != c->second.known.end() && k->second >= w.seq;
}
} // namespace

void stream_writes(cudaStream_t st, const void *p, size_t bytes, const char *what) {
    if (!p || !bytes) return;
    std::lock_guard<std::mutex> lock(order_mu);
    unsigned long long seq = ++clocks[st].seq;
    /* what the default stream, the engines' compute stream, is ordered after is done for everyone who reads */
    pending.erase(
        std::remove_if(pending.begin(), pending.end(), [](const PendingWrite &w) { return ordered_after(nullptr, w); }),
        pending.end());
    pending.push_back(PendingWrite{(uintptr_t)p, (uintptr_t)p + bytes, st, seq, what});
    n_pending = pending.size();
}

void host_synced(cudaStream_t st, bool all) {
    std::lock_guard<std::mutex> lock(order_mu);
    if (all)
        for (auto &c : clocks) host_known[c.first] = c.second.seq;
    else host_known[st] = clocks[st].seq;
}

void check_stream_order(cudaStream_t st, const void *p, const char *who, int arg) {
    if (n_pending.load() == 0 || !p) return;
    std::lock_guard<std::mutex> lock(order_mu);
    uintptr_t a = (uintptr_t)p;
    for (const PendingWrite &w : pending) {
        if (a < w.lo || a >= w.hi || ordered_after(st, w)) continue;
        char where[64] = "";
        if (arg >= 0) snprintf(where, sizeof where, " argument %d", arg);
        fprintf(stderr,
                "kvcpt CUDA emulator: %s%s (%p, on stream %p) points into bytes that %s on stream %p (its operation "
                "#%llu) may still be writing: nothing orders this stream after it (cudaStreamWaitEvent on an event "
                "recorded after it, or a synchronize); a GPU would read a partly written buffer\n",
                who, where, p, (void *)st, w.what.c_str(), (void *)w.stream, w.seq);
        exit(1);
    }
}
} // namespace emu
namespace {
std::mutex handles_mu; /* guards the two tables below */
std::map<const CUstream_st *, int> live_streams;
std::map<const CUevent_st *, int> live_events;
} // namespace

extern "C" {
int emu_device_extent(const void *p, size_t *bytes_after, int *device) {
    std::lock_guard<std::mutex> lock(blocks_mutex);
    uintptr_t a = (uintptr_t)p;
    auto it = blocks.upper_bound(a);
    if (!p || it == blocks.begin()) return 0;
    --it;
    /* a pointer one past the end belongs to no allocation (a zero-byte one
     * included): only a zero-element operation may pass it, and callers
     * skip the check for those */
    if (a >= it->first + it->second.bytes) return 0;
    if (bytes_after) *bytes_after = it->first + it->second.bytes - a;
    if (device) *device = it->second.device;
    return 1;
}
int emu_stream_valid(cudaStream_t st) {
    if (!st) return 1;
    std::lock_guard<std::mutex> lock(handles_mu);
    return live_streams.count(st) != 0;
}
static int event_valid(cudaEvent_t ev) {
    std::lock_guard<std::mutex> lock(handles_mu);
    return ev && live_events.count(ev) != 0;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *st, unsigned int flags) {
    if (!st || (flags & ~cudaStreamNonBlocking)) return record(cudaErrorInvalidValue);
    *st = new CUstream_st{flags};
    std::lock_guard<std::mutex> lock(handles_mu);
    live_streams[*st] = 1;
    return cudaSuccess;
}
cudaError_t cudaStreamCreate(cudaStream_t *st) { return cudaStreamCreateWithFlags(st, cudaStreamDefault); }
cudaError_t cudaStreamDestroy(cudaStream_t st) {
    std::lock_guard<std::mutex> lock(handles_mu);
    if (!st || !live_streams.erase(st)) return record(cudaErrorInvalidValue);
    delete st;
    return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *ev, unsigned int flags) {
    if (!ev || (flags & ~(cudaEventDisableTiming | 0x1u | 0x4u))) return record(cudaErrorInvalidValue);
    *ev = new CUevent_st{flags, nullptr, 0};
    std::lock_guard<std::mutex> lock(handles_mu);
    live_events[*ev] = 1;
    return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t *ev) { return cudaEventCreateWithFlags(ev, cudaEventDefault); }
cudaError_t cudaEventDestroy(cudaEvent_t ev) {
    std::lock_guard<std::mutex> lock(handles_mu);
    if (!ev || !live_events.erase(ev)) return record(cudaErrorInvalidValue);
    delete ev;
    return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t ev, cudaStream_t st) {
    if (!event_valid(ev) || !emu_stream_valid(st)) return record(cudaErrorInvalidValue);
    std::lock_guard<std::mutex> lock(emu::order_mu);
    ev->stream = st;
    ev->seq = emu::clocks[st].seq;
    return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t ev) {
    if (!event_valid(ev)) return record(cudaErrorInvalidValue);
    std::lock_guard<std::mutex> lock(emu::order_mu);
    unsigned long long &h = emu::host_known[ev->stream];
    if (ev->seq > h) h = ev->seq;
    return cudaSuccess;
}
/* the work before the record ran at its call: a live event is always complete */
cudaError_t cudaEventQuery(cudaEvent_t ev) { return event_valid(ev) ? cudaSuccess : record(cudaErrorInvalidValue); }
cudaError_t cudaStreamWaitEvent(cudaStream_t st, cudaEvent_t ev, unsigned int flags) {
    if (!event_valid(ev) || !emu_stream_valid(st) || flags != 0) return record(cudaErrorInvalidValue);
    std::lock_guard<std::mutex> lock(emu::order_mu);
    unsigned long long &k = emu::clocks[st].known[ev->stream];
    if (ev->seq > k) k = ev->seq;
    return cudaSuccess;
}
}
