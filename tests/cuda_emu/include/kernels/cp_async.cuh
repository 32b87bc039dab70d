#ifndef KVCPT_CP_ASYNC_CUH
#define KVCPT_CP_ASYNC_CUH
/* kernels/cp_async.cuh under the CPU emulator (tests/cuda_emu/emu_runtime.cc):
 * a copy is checked when issued (16-byte alignment, a shared destination, a
 * global source) but performed only when a wait covering its group runs in
 * the issuing thread, so a destination read early holds stale bytes; the
 * race variant (build/emu-race) reports any access to a destination in
 * flight, a write to a source in flight, and a read by another thread not
 * ordered after the wait by a barrier. Found before kernels/cp_async.cuh
 * because tests/cuda_emu/include comes first on the emulator build's
 * include path. */
#include <stdint.h>

/* always inline: the emulator names the call site (the return address of its
 * entry point) in its reports */
#define CP_ASYNC_FN static inline __attribute__((always_inline))

CP_ASYNC_FN void cp_async_16(void *smem_dst, const void *global_src) { emu::cp_async_16(smem_dst, global_src); }

CP_ASYNC_FN void cp_async_commit() { emu::cp_async_commit(); }

template <int N> CP_ASYNC_FN void cp_async_wait() {
    static_assert(N >= 0, "cp.async.wait_group takes a non-negative count");
    emu::cp_async_wait((unsigned int)N);
}

CP_ASYNC_FN void cp_async_wait_all() { emu::cp_async_wait_all(); }

#endif
