#ifndef KVCPT_MMA_CUH
#define KVCPT_MMA_CUH
/* Warp-level tensor-core primitives for bf16 inputs with fp32 accumulation:
 * mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 and
 * ldmatrix.sync.aligned.m8n8.{x2,x4}{,.trans}.shared.b16, plus packing two
 * floats into a bf16x2 register. Every lane of a full warp must call each of
 * these at the same point with the same arguments' shape (.sync.aligned):
 * never inside lane-dependent branches.
 *
 * With nvcc these are inline PTX (kernels/mma_isa.cuh). The CPU emulator's
 * build supplies its own kernels/mma_isa.cuh (tests/cuda_emu/include, first
 * on its include path): the emulator's warp-collective instructions
 * (tests/cuda_emu/emu_mma.cc), which place elements in lanes exactly as the
 * PTX ISA's "Matrix Fragments for mma.m16n8k16 with floating point type" and
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
/* The functions (in both builds):
 *   mma_pack_bf16x2(lo, hi)           lo and hi rounded to bf16 (nearest even), lo in the low half
 *   mma_m16n8k16_bf16(d, a, b, c)     d = A B + c on the fragments above; d may be c
 *   ldmatrix_x4[_trans](r, smem_row)  four 8x8 matrices, lane l addressing row l & 7 of matrix l >> 3
 *   ldmatrix_x2[_trans](r, smem_row)  two: lanes 0..15 address the rows, all 32 execute it
 * Included through the include path, so the emulator's build supplies its own. */
#include <kernels/mma_isa.cuh>

#endif
