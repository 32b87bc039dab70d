#ifndef KVCPT_CP_ASYNC_CUH
#define KVCPT_CP_ASYNC_CUH
/* Asynchronous global-to-shared copies (cp.async, sm_80 and later): a thread
 * issues 16-byte copies that proceed while it computes, groups them with
 * cp_async_commit, and waits for groups with cp_async_wait<N>.
 *
 *   cp_async_16(smem_dst, global_src)  16 bytes, both 16-byte aligned; the
 *                                      destination is shared memory, the source
 *                                      global memory (cp.async.cg: cached in L2 only)
 *   cp_async_commit()                  closes the thread's open group (possibly empty)
 *   cp_async_wait<N>()                 until at most the N most recently committed
 *                                      groups of this thread are still in flight
 *   cp_async_wait_all()                commit, then wait for every group
 *
 * A copy's data is in shared memory only after a wait covering its group, in
 * the issuing thread; other threads see it after a barrier that follows that
 * wait (__syncthreads). Until the wait, the destination must not be read or
 * written, nor the source written, by any thread.
 *
 * Reached through the include path (<kernels/cp_async.cuh>): the CPU
 * emulator's build puts tests/cuda_emu/include first, whose
 * kernels/cp_async.cuh performs each copy at the wait that covers it and
 * checks the rules above (docs/emulator.md), so the kernels carry no
 * emulator branches. */
#include <stdint.h>

#define CP_ASYNC_FN static __device__ __forceinline__

CP_ASYNC_FN void cp_async_16(void *smem_dst, const void *global_src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;"
                 :
                 : "r"((uint32_t)__cvta_generic_to_shared(smem_dst)), "l"(__cvta_generic_to_global(global_src))
                 : "memory");
}

CP_ASYNC_FN void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }

template <int N> CP_ASYNC_FN void cp_async_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory"); }

CP_ASYNC_FN void cp_async_wait_all() { asm volatile("cp.async.wait_all;" ::: "memory"); }

#endif
