#ifndef KVCPT_CUDA_EMU_MMA_H
#define KVCPT_CUDA_EMU_MMA_H
/* The arithmetic and the fragment layouts of the emulated warp-level matrix
 * instructions (emu_mma.cc): given what each of the 32 lanes of a warp
 * passed, each lane's results. The scheduler (emu_runtime.cc) calls these
 * once every lane has arrived and the call has been checked. */
#include <stdint.h>

namespace emu {

/* mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32: in[l] points at lane
 * l's MmaBf16Lane (cuda_runtime.h), out[l] at its float d[4]. */
void mma_m16n8k16_bf16_warp(const void *const in[32], void *const out[32]);
/* ldmatrix.sync.aligned.m8n8.x{num}{.trans}.b16: in[l] points at the 16 bytes
 * of the row lane l addressed (read for l < 8 * num only), out[l] at its num
 * 32-bit registers. */
void ldmatrix_m8n8_warp(unsigned int num, bool trans, const void *const in[32], void *const out[32]);

} // namespace emu

#endif
