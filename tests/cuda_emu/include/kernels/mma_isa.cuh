#ifndef KVCPT_MMA_ISA_CUH
#define KVCPT_MMA_ISA_CUH
/* kernels/mma.cuh's instructions under the CPU emulator: the emulator's
 * warp-collective instructions (tests/cuda_emu/emu_mma.cc), which place
 * elements in lanes exactly as the PTX ISA's "Matrix Fragments for
 * mma.m16n8k16 with floating point type" and "ldmatrix" sections document,
 * check that all 32 lanes take part, and check ldmatrix's row addresses.
 * The emulator's build finds this file before kernels/mma_isa.cuh (the PTX)
 * because tests/cuda_emu/include comes first on its include path. */
#include <stdint.h>

#include <cuda_bf16.h>

/* The emulator tells instructions apart by where they are inlined (lanes
 * reaching one mma from two branches are divergent), so these must always
 * inline. */
#define MMA_FN static inline __attribute__((always_inline))

MMA_FN uint32_t mma_pack_bf16x2(float lo, float hi) {
    return (uint32_t)__float2bfloat16_rn(lo).__x | (uint32_t)__float2bfloat16_rn(hi).__x << 16;
}

MMA_FN void mma_m16n8k16_bf16(float d[4], const uint32_t a[4], const uint32_t b[2], const float c[4]) {
    emu::mma_m16n8k16_bf16(d, a, b, c);
}

MMA_FN void ldmatrix_x4(uint32_t r[4], const void *smem_row) { emu::ldmatrix_m8n8_b16(r, 4, false, smem_row); }
MMA_FN void ldmatrix_x4_trans(uint32_t r[4], const void *smem_row) { emu::ldmatrix_m8n8_b16(r, 4, true, smem_row); }
MMA_FN void ldmatrix_x2(uint32_t r[2], const void *smem_row) { emu::ldmatrix_m8n8_b16(r, 2, false, smem_row); }
MMA_FN void ldmatrix_x2_trans(uint32_t r[2], const void *smem_row) { emu::ldmatrix_m8n8_b16(r, 2, true, smem_row); }

#endif
