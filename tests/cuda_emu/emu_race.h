#ifndef KVCPT_CUDA_EMU_RACE_H
#define KVCPT_CUDA_EMU_RACE_H
/* The emulator's data-race detector (emu_race.cc), built only into the race
 * variant (build/emu-race/, -DKVCPT_EMU_RACE). The kernels' translation units
 * are compiled there with gcc's -fsanitize=thread, whose __tsan_read and
 * __tsan_write calls emu_race.cc answers itself (libtsan is not linked: it
 * knows nothing of fibers or barriers). The scheduler and host API
 * (emu_runtime.cc) are not instrumented; they tell the detector what the
 * accesses mean through the calls below: which launch, block and thread is
 * running, when a block or warp barrier opens, and where shared memory and
 * the live device allocations lie. Only accesses inside those are tracked. */
#include <stddef.h>
#include <stdint.h>

struct dim3;

namespace emu {
namespace race {

void launch_begin(const char *kernel, unsigned long long launch, const dim3 &grid, const dim3 &block);
/* Stops the program when the launch raced (after listing its races). */
void launch_end();
/* A block starts: its dynamic shared memory, and the fiber stacks and
 * shuffle slots, which are skipped without a lookup. */
void block_begin(size_t block_linear, const void *smem, size_t smem_bytes, const void *stacks, size_t stack_bytes);
/* The scheduler switches to thread `linear` of the running block. */
void thread_runs(size_t linear);
/* Every thread of the block passed a __syncthreads: all earlier accesses of
 * the block happen before all later ones. */
void block_synced();
/* Every lane of warp `warp` passed a __syncwarp or a shuffle. */
void warp_synced(size_t warp);
/* A static __shared__ variable of the running kernel. */
void static_smem(const void *var, size_t bytes, const char *name);
void device_alloc(const void *p, size_t bytes);
/* The running thread issued a cp.async of `bytes` from global src to shared
 * dst at `site` (the call's return address): the source is read now, the
 * destination may be written at any time until the copy completes, and
 * until then no thread may touch the destination nor write the source. */
void cp_async_issue(const void *dst, const void *src, size_t bytes, const void *site);
/* That copy completed at a wait (at `site`) in the issuing thread: its write
 * of dst is that thread's, at this point of its barrier intervals. */
void cp_async_complete(const void *dst, const void *src, size_t bytes, const void *site);
void device_free(const void *p);

} // namespace race
} // namespace emu

#endif
