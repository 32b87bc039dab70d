#ifndef KVCPT_MMA_CUH
#define KVCPT_MMA_CUH
/* Warp-level tensor-core primitives for bf16 inputs with fp32 accumulation:
 * mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 and
 * ldmatrix.sync.aligned.m8n8.{x2,x4}{,.trans}.shared.b16, plus packing two
 * floats into a bf16x2 register. Every lane of a full warp must call each of
 * these at the same point with the same arguments' shape (.sync.aligned):
 * never inside lane-dependent branches.
 *
 * With nvcc these are inline PTX. Under the CUDA emulator (KVCPT_CUDA_EMU)
 * they are the emulator's warp-collective instructions (tests/cuda_emu/
 * emu_mma.cc), which place elements in lanes exactly as the PTX ISA's
 * "Matrix Fragments for mma.m16n8k16 with floating point type" and
 * "ldmatrix" sections document, check that all 32 lanes take part, and check
 * ldmatrix's row addresses; the layouts are written out there.
 *
 * Fragments (g = lane >> 2, t = lane & 3; each uint32_t holds two bf16, the
 * lower column or k index in the low half):
 *   a[4]  A 16x16 row-major: a[0] = A[g][2t..2t+1],   a[1] = A[g+8][2t..2t+1],
 *                            a[2] = A[g][2t+8..2t+9], a[3] = A[g+8][2t+8..2t+9]
 *   b[2]  B 16x8 (k x n):    b[0] = B[2t..2t+1][g],   b[1] = B[2t+8..2t+9][g]
 *   c[4], d[4]  16x8 fp32:   c[0..1] = C[g][2t..2t+1], c[2..3] = C[g+8][2t..2t+1]
 *   ldmatrix: lanes 8j..8j+7 give the shared-memory addresses of rows 0..7 of
 *   matrix j (8 bf16 = 16 contiguous bytes, 16-byte aligned); r[j] of lane l
 *   = row g, elements 2t, 2t+1 of matrix j (with .trans: of its transpose).
 *   So ldmatrix_x4 of a row-major 16x16 tile, lane l addressing row
 *   (l & 7) + 8 ((l >> 3) & 1), column 8 (l >> 4), gives exactly a[4]. */
#include <stdint.h>

#include <cuda_bf16.h>

/* The emulator tells instructions apart by where they are inlined (lanes
 * reaching one mma from two branches are divergent), so there these must
 * always inline. */
#ifdef KVCPT_CUDA_EMU
#define MMA_FN static inline __attribute__((always_inline))
#else
#define MMA_FN static __device__ __forceinline__
#endif

/* lo and hi rounded to bf16 (nearest even), lo in the low half. */
MMA_FN uint32_t mma_pack_bf16x2(float lo, float hi) {
#ifdef KVCPT_CUDA_EMU
    return (uint32_t)__float2bfloat16_rn(lo).__x | (uint32_t)__float2bfloat16_rn(hi).__x << 16;
#else
    uint32_t r;
    /* cvt's first source goes to the upper half */
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
#endif
}

/* d = A B + c on the fragments above; d may be c. */
MMA_FN void mma_m16n8k16_bf16(float d[4], const uint32_t a[4], const uint32_t b[2], const float c[4]) {
#ifdef KVCPT_CUDA_EMU
    emu::mma_m16n8k16_bf16(d, a, b, c);
#else
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%10, %11, %12, %13};"
                 : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]),
                   "f"(c[2]), "f"(c[3]));
#endif
}

#ifndef KVCPT_CUDA_EMU
static __device__ __forceinline__ uint32_t mma_smem_addr(const void *p) {
    return (uint32_t)__cvta_generic_to_shared(p);
}
#endif

/* Four 8x8 matrices: lane l gives the address of row l & 7 of matrix l >> 3. */
MMA_FN void ldmatrix_x4(uint32_t r[4], const void *smem_row) {
#ifdef KVCPT_CUDA_EMU
    emu::ldmatrix_m8n8_b16(r, 4, false, smem_row);
#else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(mma_smem_addr(smem_row))
                 : "memory");
#endif
}
MMA_FN void ldmatrix_x4_trans(uint32_t r[4], const void *smem_row) {
#ifdef KVCPT_CUDA_EMU
    emu::ldmatrix_m8n8_b16(r, 4, true, smem_row);
#else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(mma_smem_addr(smem_row))
                 : "memory");
#endif
}
/* Two 8x8 matrices: lanes 0..15 give the row addresses (those of lanes 16..31
 * are not used, but the lanes must still execute it). */
MMA_FN void ldmatrix_x2(uint32_t r[2], const void *smem_row) {
#ifdef KVCPT_CUDA_EMU
    emu::ldmatrix_m8n8_b16(r, 2, false, smem_row);
#else
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];"
                 : "=r"(r[0]), "=r"(r[1])
                 : "r"(mma_smem_addr(smem_row))
                 : "memory");
#endif
}
MMA_FN void ldmatrix_x2_trans(uint32_t r[2], const void *smem_row) {
#ifdef KVCPT_CUDA_EMU
    emu::ldmatrix_m8n8_b16(r, 2, true, smem_row);
#else
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];"
                 : "=r"(r[0]), "=r"(r[1])
                 : "r"(mma_smem_addr(smem_row))
                 : "memory");
#endif
}

#endif
