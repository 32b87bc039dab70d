/* The CUDA emulator's data-race detector (see emu_race.h).
 *
 * On a GPU the threads of a block run at the same time, and so do the blocks
 * of a launch; the emulator runs one fiber at a time from one barrier to the
 * next, so a missing __syncthreads gives right answers here in most orders.
 * This file records, for every 4-byte granule of shared memory and of live
 * device allocations, the last write and up to two reads, each with who made
 * it (block, thread) and when (the block's barrier epoch and the warp's
 * sync epoch). Two accesses by different threads conflict when they touch a
 * common byte, at least one writes, not both are atomics, and no barrier
 * orders them:
 *   - threads of one block: no __syncthreads opened between them, and, for
 *     two lanes of one warp, no __syncwarp or shuffle either;
 *   - threads of different blocks of one launch: never ordered (a grid has
 *     no barrier; launches on the stream are ordered, so the records of an
 *     earlier launch no longer count).
 * A conflict is reported with the kernel, the memory (shared: which static
 * variable or the dynamic buffer; global: which cudaMalloc allocation) with
 * the offset, and both accesses (block and thread coordinates, source
 * line); the program stops at the end of that launch with exit status 66.
 *
 * What is kept is bounded (one write, two reads a granule), so a race can be
 * missed (say, a third concurrent reader, or two threads writing different
 * bytes of one granule, the older then forgotten); a report is never made
 * up: both accesses it names happened and nothing ordered them.
 *
 * gcc's -fsanitize=thread (on the kernels only) calls the __tsan_* entry
 * points below; libtsan is not linked. */
#include "emu_race.h"

#include <cuda_runtime.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace {

const size_t kGranule = 4;
const int kMaxReports = 8;        /* race reports printed a launch */
const int kRaceExitStatus = 66;

enum RegionKind { DYNAMIC_SMEM, STATIC_SMEM, DEVICE };

/* One access. tag says which block (shared memory) or launch (device
 * memory) it belongs to; a record with another tag is as good as empty, so
 * nothing needs clearing between blocks and launches. */
struct Access {
    uint32_t tag;
    uint32_t block;  /* linear block index in the launch */
    uint32_t bepoch; /* block barriers opened so far (all blocks together) */
    uint32_t wepoch; /* syncs of the thread's warp so far (per warp index) */
    int32_t pc;      /* the access's return address, relative to pc_base */
    uint16_t thread; /* linear thread index in the block */
    uint8_t mask;    /* bytes of the granule touched */
    uint8_t flags;
};
/* CP_ISSUE: a cp.async when issued (its source read; its destination taken
 * as written then too, since the bytes may land at any time from here);
 * CP_LAND: its destination written when a wait covering it ran */
enum { WRITE = 1, ATOMIC = 2, CP_ISSUE = 4, CP_LAND = 8 };

/* pending: the last cp.async in flight over the granule (when its tag is
 * current): in shared memory, the copy that will write it; in device
 * memory, one that reads it, with pending_count copies in flight there. */
struct Cell {
    Access w, r1, r2;
    Access pending;
    uint32_t pending_count;
};

struct Region {
    uintptr_t base = 0;
    size_t bytes = 0;
    Cell *shadow = nullptr;
    size_t shadow_bytes = 0;
    RegionKind kind = DEVICE;
    std::string name;
    unsigned long long id = 0; /* cudaMalloc sequence number */
};

/* Zeroed pages that cost nothing until touched: device allocations are large
 * and a test touches little of its shadow at a time. */
Cell *shadow_alloc(size_t bytes, size_t *shadow_bytes) {
    size_t n = (bytes + kGranule - 1) / kGranule;
    *shadow_bytes = (n ? n : 1) * sizeof(Cell);
    void *p = mmap(nullptr, *shadow_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
        fprintf(stderr, "kvcpt CUDA emulator (race detector): no memory for the shadow of %zu bytes\n", bytes);
        exit(1);
    }
    return (Cell *)p;
}

struct State {
    /* all set by the scheduler's thread only; the hooks return at once on any
     * other OS thread (host OpenMP workers) and outside launches */
    const char *kernel = "?";
    unsigned long long launch = 0;
    uint32_t launch_tag = 0, block_tag = 0;
    dim3 grid, block;
    uint32_t block_linear = 0;
    uint32_t thread = 0;
    uint32_t bepoch = 1;
    std::vector<uint32_t> wepoch = std::vector<uint32_t>(32, 1);
    int atomic_depth = 0;

    Region dyn;                                  /* the running block's dynamic shared memory */
    std::map<const void *, Region> statics;      /* static __shared__ variables, by address */
    std::vector<Region *> static_list;
    std::map<uintptr_t, Region> device;          /* live allocations, by base */
    unsigned long long allocations = 0;
    Region *last = nullptr;                      /* the region of the previous tracked access */
    uintptr_t skip_base = 0;
    size_t skip_bytes = 0;

    int races = 0;
    std::set<std::pair<int32_t, int32_t>> reported;
    std::map<int32_t, std::string> symbolized;
} st;

thread_local bool in_launch = false;
uint8_t cp_flags = 0; /* CP_ISSUE or CP_LAND while the runtime reports a cp.async's access */

/* The address an instrumented access returns to, kept as a 32-bit offset
 * from a function of this binary (the kernels are linked into it). */
uintptr_t pc_base() { return (uintptr_t)&shadow_alloc; }

Region *find(uintptr_t a) {
    Region *r = st.last;
    if (r && a - r->base < r->bytes) return r;
    if (a - st.dyn.base < st.dyn.bytes) return st.last = &st.dyn;
    for (Region *s : st.static_list)
        if (a - s->base < s->bytes) return st.last = s;
    auto it = st.device.upper_bound(a);
    if (it == st.device.begin()) return nullptr;
    --it;
    if (a - it->second.base < it->second.bytes) return st.last = &it->second;
    return nullptr;
}

/* "function at file:line" of an access, through addr2line (debug info is
 * there: the emulated kernels build with -g); the raw offset if that fails. */
const std::string &where(int32_t pc) {
    auto it = st.symbolized.find(pc);
    if (it != st.symbolized.end()) return it->second;
    uintptr_t addr = pc_base() + (intptr_t)pc - 1; /* inside the call instruction */
    char raw[64];
    snprintf(raw, sizeof raw, "pc %#lx", (unsigned long)addr);
    std::string out = raw;
    Dl_info info;
    if (dladdr((void *)addr, &info) && info.dli_fname) {
        char cmd[4096];
        snprintf(cmd, sizeof cmd, "addr2line -C -f -i -e '%s' %#lx 2>/dev/null", info.dli_fname,
                 (unsigned long)(addr - (uintptr_t)info.dli_fbase));
        FILE *p = popen(cmd, "r");
        if (p) {
            char fn[1024], line[1024];
            /* the first pair is the innermost inlined frame: the access itself,
             * unless it lies in the emulator's stand-ins for the instruction
             * wrappers (tests/cuda_emu/include: ldmatrix, cp.async), whose
             * callers in the kernel are the next frames out */
            while (fgets(fn, sizeof fn, p) && fgets(line, sizeof line, p)) {
                fn[strcspn(fn, "\n")] = 0;
                line[strcspn(line, "\n")] = 0;
                line[strcspn(line, " ")] = 0; /* drops a " (discriminator n)" */
                if (strcmp(fn, "??") == 0) break;
                out = std::string(fn) + " at " + line;
                if (!strstr(line, "tests/cuda_emu/include/")) break;
            }
            pclose(p);
        }
    }
    return st.symbolized[pc] = out;
}

void coords(uint32_t linear, const dim3 &d, unsigned *x, unsigned *y, unsigned *z) {
    *x = linear % d.x;
    *y = linear / d.x % d.y;
    *z = linear / (d.x * d.y);
}

void describe(const Access &a, const char *role) {
    unsigned bx, by, bz, tx, ty, tz;
    coords(a.block, st.grid, &bx, &by, &bz);
    coords(a.thread, st.block, &tx, &ty, &tz);
    const char *kind = a.flags & CP_ISSUE  ? "cp.async issued"
                       : a.flags & CP_LAND ? "cp.async write, landed at the wait"
                       : a.flags & ATOMIC  ? (a.flags & WRITE ? "atomic write" : "atomic read")
                                           : (a.flags & WRITE ? "write" : "read");
    fprintf(stderr, "  %s: %s by block (%u,%u,%u) thread (%u,%u,%u) (warp %u lane %u) in %s\n", role, kind, bx, by, bz,
            tx, ty, tz, a.thread / 32u, a.thread % 32u, where(a.pc).c_str());
}

void report(const Region &r, size_t granule, const Access &before, const Access &now, const char *why = nullptr) {
    st.races++;
    if (st.races > kMaxReports) return;
    if (!st.reported.insert({before.pc, now.pc}).second) return;
    unsigned byte = 0;
    while (!((before.mask & now.mask) >> byte & 1u)) byte++;
    size_t off = granule * kGranule + byte;
    char mem[512];
    if (r.kind == DYNAMIC_SMEM)
        snprintf(mem, sizeof mem, "shared memory: dynamic (extern __shared__) byte %zu of %zu", off, r.bytes);
    else if (r.kind == STATIC_SMEM)
        snprintf(mem, sizeof mem, "shared memory: static __shared__ %s, byte %zu of %zu", r.name.c_str(), off, r.bytes);
    else
        snprintf(mem, sizeof mem, "global memory: device allocation #%llu (%zu bytes at %p), byte %zu", r.id, r.bytes,
                 (void *)r.base, off);
    const char *between = why                         ? why
                          : before.block != now.block ? "different blocks of one launch: nothing orders them"
                          : before.thread / 32u == now.thread / 32u
                              ? "one warp, with no __syncthreads, __syncwarp or shuffle between them"
                              : "one block, with no __syncthreads between them";
    fprintf(stderr, "kvcpt CUDA emulator: DATA RACE in kernel %s (launch %llu) on %s (%s)\n", st.kernel, st.launch, mem,
            between);
    describe(before, "earlier");
    describe(now, "later  ");
}

/* the per-access checks run for every load and store of a kernel */
#define EMU_RACE_HOT inline __attribute__((always_inline))

/* Nothing orders the two accesses (both have the current tag). */
EMU_RACE_HOT bool concurrent(const Access &a, const Access &b) {
    if (a.block != b.block) return true;
    if (a.thread == b.thread) return false;
    if (a.bepoch != b.bepoch) return false;
    if (a.thread / 32u == b.thread / 32u && a.wepoch != b.wepoch) return false;
    return true;
}

EMU_RACE_HOT bool conflicts(const Access &old, const Access &now) {
    if (old.tag != now.tag || !(old.mask & now.mask)) return false;
    if (!((old.flags | now.flags) & WRITE)) return false;
    if (old.flags & now.flags & ATOMIC) return false;
    return concurrent(old, now);
}

/* A kept read that a new read by `now` may replace: empty, by the same
 * thread, or ordered before it (a later access that races with it races
 * with `now` too, unless it comes from now's own thread). */
EMU_RACE_HOT bool superseded(const Access &old, const Access &now) {
    if (old.tag != now.tag) return true;
    if (old.thread == now.thread && old.block == now.block) return true;
    return !concurrent(old, now);
}

/* the same thread in the same barrier interval (a repeated access) */
EMU_RACE_HOT bool same_moment(const Access &a, const Access &b) {
    return a.tag == b.tag && a.thread == b.thread && a.block == b.block && a.bepoch == b.bepoch && a.wepoch == b.wepoch;
}

EMU_RACE_HOT void check(Region &r, size_t g, const Access &now) {
    Cell &c = r.shadow[g];
    /* a cp.async in flight over the granule: its destination may not be
     * touched, its source not written, by any thread (the issuer included) */
    if (c.pending.tag == now.tag && c.pending.tag && (r.kind != DEVICE || (now.flags & WRITE)) &&
        (c.pending.mask & now.mask))
        report(r, g, c.pending, now,
               r.kind != DEVICE ? "a cp.async destination still in flight: no cp.async.wait_group covering its "
                                  "group has run in the issuing thread"
                                : "the source of a cp.async still in flight: no cp.async.wait_group covering its "
                                  "group has run in the issuing thread");
    /* Fast paths, exact: a thread reading again what it read in this interval
     * meets the same write (a write by another thread since would have been
     * reported against the read); a thread writing again what only it has
     * touched in this interval. */
    if (!(now.flags & WRITE) && same_moment(c.r1, now) && c.r1.flags == now.flags && !(now.mask & ~c.r1.mask)) return;
    if ((now.flags & WRITE) && same_moment(c.w, now) && c.w.flags == now.flags && !(now.mask & ~c.w.mask) &&
        c.r1.tag != now.tag && c.r2.tag != now.tag)
        return;
    if (conflicts(c.w, now)) report(r, g, c.w, now);
    if (now.flags & WRITE) {
        if (conflicts(c.r1, now)) report(r, g, c.r1, now);
        else if (conflicts(c.r2, now)) report(r, g, c.r2, now);
        c.w = now;
        /* a later access that races with a read the write covers races with
         * the write too; reads of other bytes of the granule stay */
        if (c.r1.tag == now.tag && !(c.r1.mask & ~now.mask)) c.r1.tag = 0;
        if (c.r2.tag == now.tag && !(c.r2.mask & ~now.mask)) c.r2.tag = 0;
        return;
    }
    /* keep two reads that nothing orders against each other, so a later
     * write by any thread meets one by another thread */
    if (superseded(c.r1, now)) c.r1 = now;
    else if (superseded(c.r2, now)) c.r2 = now;
}

__attribute__((noinline)) void access_tracked(uintptr_t a, size_t size, bool write, void *ret) {
    Region *r = find(a);
    if (!r) return;
    uintptr_t end = a + size;
    if (end > r->base + r->bytes) end = r->base + r->bytes; /* an access past the region is not a race */
    Access now;
    now.tag = r->kind == DEVICE ? st.launch_tag : st.block_tag;
    now.block = st.block_linear;
    now.bepoch = st.bepoch;
    now.wepoch = st.wepoch[st.thread / 32u];
    now.pc = (int32_t)((intptr_t)ret - (intptr_t)pc_base());
    now.thread = (uint16_t)st.thread;
    now.flags = (uint8_t)((write ? WRITE : 0) | (st.atomic_depth ? ATOMIC : 0) | cp_flags);
    for (uintptr_t x = a; x < end;) {
        size_t off = x - r->base, g = off / kGranule, lo = off % kGranule;
        size_t n = kGranule - lo < end - x ? kGranule - lo : end - x;
        now.mask = (uint8_t)(((1u << n) - 1u) << lo);
        check(*r, g, now);
        x += n;
    }
}

/* Inlined into each entry point: most accesses a kernel makes outside
 * shared and device memory are to its fiber's stack (per-thread arrays),
 * and they return here, before the tracked path saves any register. */
EMU_RACE_HOT void access(const void *p, size_t size, bool write, void *ret) {
    uintptr_t a = (uintptr_t)p;
    if (!in_launch || !size || a - st.skip_base < st.skip_bytes) return;
    access_tracked(a, size, write, ret);
}

} // namespace

namespace emu {
namespace race {

void launch_begin(const char *kernel, unsigned long long launch, const dim3 &grid, const dim3 &block) {
    st.kernel = kernel ? kernel : "(unnamed kernel)";
    st.launch = launch;
    if (++st.launch_tag == 0) st.launch_tag = 1; /* tag 0 marks an empty record */
    st.grid = grid;
    st.block = block;
    size_t threads = (size_t)block.x * block.y * block.z;
    if (st.wepoch.size() < (threads + 31) / 32) st.wepoch.resize((threads + 31) / 32, 1);
    st.races = 0;
    st.reported.clear();
    st.last = nullptr;
    in_launch = true;
}

void launch_end() {
    in_launch = false;
    st.last = nullptr;
    st.dyn = Region();
    if (!st.races) return;
    fprintf(stderr,
            "kvcpt CUDA emulator: %d conflicting access%s in kernel %s (launch %llu)%s; stopping (exit status %d)\n",
            st.races, st.races == 1 ? "" : "es", st.kernel, st.launch,
            st.races > kMaxReports ? ", the first ones reported above" : "", kRaceExitStatus);
    fflush(stdout);
    exit(kRaceExitStatus);
}

void block_begin(size_t block_linear, const void *smem, size_t smem_bytes, const void *stacks, size_t stack_bytes) {
    st.block_linear = (uint32_t)block_linear;
    if (++st.block_tag == 0) st.block_tag = 1;
    static Cell *dyn_shadow = nullptr;
    static size_t dyn_shadow_bytes = 0;
    size_t need = (smem_bytes + kGranule - 1) / kGranule * sizeof(Cell);
    if (need > dyn_shadow_bytes) {
        if (dyn_shadow) munmap(dyn_shadow, dyn_shadow_bytes);
        dyn_shadow = shadow_alloc(smem_bytes, &dyn_shadow_bytes);
    }
    st.dyn.base = (uintptr_t)smem;
    st.dyn.bytes = smem_bytes;
    st.dyn.shadow = dyn_shadow;
    st.dyn.kind = DYNAMIC_SMEM;
    st.skip_base = (uintptr_t)stacks;
    st.skip_bytes = stack_bytes;
    st.last = nullptr;
}

void thread_runs(size_t linear) { st.thread = (uint32_t)linear; }
void block_synced() { st.bepoch++; }
void warp_synced(size_t warp) { st.wepoch[warp]++; }

void static_smem(const void *var, size_t bytes, const char *name) {
    auto it = st.statics.find(var);
    if (it != st.statics.end()) return;
    Region &r = st.statics[var];
    r.base = (uintptr_t)var;
    r.bytes = bytes;
    r.kind = STATIC_SMEM;
    r.name = name ? name : "?";
    r.shadow = shadow_alloc(bytes, &r.shadow_bytes);
    st.static_list.push_back(&r);
}

void device_alloc(const void *p, size_t bytes) {
    Region r;
    r.base = (uintptr_t)p;
    r.bytes = bytes;
    r.kind = DEVICE;
    r.id = ++st.allocations;
    r.shadow = shadow_alloc(bytes, &r.shadow_bytes);
    st.device[r.base] = r;
}

void device_free(const void *p) {
    auto it = st.device.find((uintptr_t)p);
    if (it == st.device.end()) return;
    if (st.last == &it->second) st.last = nullptr;
    munmap(it->second.shadow, it->second.shadow_bytes);
    st.device.erase(it);
}

/* what access_tracked does, with the access's flags given */
static void access_flagged(const void *p, size_t bytes, uint8_t flags, const void *site) {
    const int depth = st.atomic_depth;
    st.atomic_depth = 0;
    cp_flags = flags;
    access_tracked((uintptr_t)p, bytes, (flags & WRITE) != 0, (void *)site);
    cp_flags = 0;
    st.atomic_depth = depth;
}

/* Marks (or, with add false, clears) the granules of [p, p + bytes) as under
 * a cp.async in flight, on behalf of the running thread. */
static void mark_pending(const void *p, size_t bytes, bool add, const void *site) {
    uintptr_t a = (uintptr_t)p;
    Region *r = find(a);
    if (!r) return;
    uintptr_t end = a + bytes;
    if (end > r->base + r->bytes) end = r->base + r->bytes;
    const uint32_t tag = r->kind == DEVICE ? st.launch_tag : st.block_tag;
    for (uintptr_t x = a; x < end;) {
        size_t off = x - r->base, g = off / kGranule, lo = off % kGranule;
        size_t n = kGranule - lo < end - x ? kGranule - lo : end - x;
        Cell &c = r->shadow[g];
        if (add) {
            if (c.pending.tag != tag) c.pending_count = 0;
            c.pending.tag = tag;
            c.pending.block = st.block_linear;
            c.pending.bepoch = st.bepoch;
            c.pending.wepoch = st.wepoch[st.thread / 32u];
            c.pending.pc = (int32_t)((intptr_t)site - (intptr_t)pc_base());
            c.pending.thread = (uint16_t)st.thread;
            c.pending.mask =
                (uint8_t)(c.pending_count ? c.pending.mask | (((1u << n) - 1u) << lo) : ((1u << n) - 1u) << lo);
            c.pending.flags = (uint8_t)(r->kind == DEVICE ? CP_ISSUE : WRITE | CP_ISSUE);
            c.pending_count++;
        } else if (c.pending.tag == tag && c.pending_count && --c.pending_count == 0) {
            c.pending.tag = 0;
        }
        x += n;
    }
}

void cp_async_issue(const void *dst, const void *src, size_t bytes, const void *site) {
    if (!in_launch) return;
    access_flagged(src, bytes, CP_ISSUE, site);
    access_flagged(dst, bytes, WRITE | CP_ISSUE, site);
    mark_pending(src, bytes, true, site);
    mark_pending(dst, bytes, true, site);
}

void cp_async_complete(const void *dst, const void *src, size_t bytes, const void *site) {
    if (!in_launch) return;
    mark_pending(src, bytes, false, site);
    mark_pending(dst, bytes, false, site);
    access_flagged(dst, bytes, WRITE | CP_LAND, site);
}

void atomic_begin() { st.atomic_depth++; }
void atomic_end() { st.atomic_depth--; }

} // namespace race
} // namespace emu

/* ---- what gcc's -fsanitize=thread instrumentation calls ---- */
extern "C" {
#define EMU_RACE_SIZED(n)                                                                                              \
    void __tsan_read##n(void *p) { access(p, n, false, __builtin_return_address(0)); }                                 \
    void __tsan_write##n(void *p) { access(p, n, true, __builtin_return_address(0)); }                                 \
    void __tsan_unaligned_read##n(void *p) { access(p, n, false, __builtin_return_address(0)); }                       \
    void __tsan_unaligned_write##n(void *p) { access(p, n, true, __builtin_return_address(0)); }
EMU_RACE_SIZED(1)
EMU_RACE_SIZED(2)
EMU_RACE_SIZED(4)
EMU_RACE_SIZED(8)
EMU_RACE_SIZED(16)
#undef EMU_RACE_SIZED
void __tsan_read_range(void *p, unsigned long size) { access(p, size, false, __builtin_return_address(0)); }
void __tsan_write_range(void *p, unsigned long size) { access(p, size, true, __builtin_return_address(0)); }
void __tsan_func_entry(void *caller) { (void)caller; }
void __tsan_func_exit(void) {}
void __tsan_init(void) {}
void __tsan_vptr_update(void **vptr, void *value) { (void)vptr, (void)value; }
void __tsan_vptr_read(void **vptr) { (void)vptr; }
}
