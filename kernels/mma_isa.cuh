#ifndef KVCPT_MMA_ISA_CUH
#define KVCPT_MMA_ISA_CUH
/* The instructions under kernels/mma.cuh on a GPU: inline PTX for sm_80 and
 * later. kernels/mma.cuh documents the fragments and the calling rules.
 *
 * Reached through the include path (<kernels/mma_isa.cuh>): the CPU
 * emulator's build puts tests/cuda_emu/include first, whose
 * kernels/mma_isa.cuh gives the same functions as the emulator's
 * warp-collective instructions, so the kernels carry no emulator branches. */
#include <stdint.h>

#include <cuda_bf16.h>

#define MMA_FN static __device__ __forceinline__

/* lo and hi rounded to bf16 (nearest even), lo in the low half. */
MMA_FN uint32_t mma_pack_bf16x2(float lo, float hi) {
    uint32_t r;
    /* cvt's first source goes to the upper half */
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

/* d = A B + c on the fragments of kernels/mma.cuh; d may be c. */
MMA_FN void mma_m16n8k16_bf16(float d[4], const uint32_t a[4], const uint32_t b[2], const float c[4]) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%10, %11, %12, %13};"
                 : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]),
                   "f"(c[3]));
}

static __device__ __forceinline__ uint32_t mma_smem_addr(const void *p) {
    return (uint32_t)__cvta_generic_to_shared(p);
}

/* Four 8x8 matrices: lane l gives the address of row l & 7 of matrix l >> 3. */
MMA_FN void ldmatrix_x4(uint32_t r[4], const void *smem_row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(mma_smem_addr(smem_row))
                 : "memory");
}
MMA_FN void ldmatrix_x4_trans(uint32_t r[4], const void *smem_row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(mma_smem_addr(smem_row))
                 : "memory");
}
/* Two 8x8 matrices: lanes 0..15 give the row addresses (those of lanes 16..31
 * are not used, but the lanes must still execute it). */
MMA_FN void ldmatrix_x2(uint32_t r[2], const void *smem_row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];"
                 : "=r"(r[0]), "=r"(r[1])
                 : "r"(mma_smem_addr(smem_row))
                 : "memory");
}
MMA_FN void ldmatrix_x2_trans(uint32_t r[2], const void *smem_row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];"
                 : "=r"(r[0]), "=r"(r[1])
                 : "r"(mma_smem_addr(smem_row))
                 : "memory");
}

#endif
