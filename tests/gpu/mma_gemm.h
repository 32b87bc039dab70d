#ifndef KVCPT_TESTS_MMA_GEMM_H
#define KVCPT_TESTS_MMA_GEMM_H
/* A bf16 GEMM written with kernels/mma.cuh (ldmatrix from shared memory,
 * mma.sync, fragment store), the test of those primitives' layouts
 * (tests/gpu/test_mma.c), and the variants with planted layout bugs the test
 * must catch. */
#include <stdint.h>
#ifdef __cplusplus
extern "C" {
#endif

/* How B is stored and loaded: MMA_B_NK, B^T as [N][K] (a weight [out][in];
 * loaded with ldmatrix.x4), or [K][N] (as V in P V) loaded with two
 * ldmatrix.x2.trans (MMA_B_KN) or one ldmatrix.x4.trans (MMA_B_KN_X4). */
typedef enum { MMA_B_NK, MMA_B_KN, MMA_B_KN_X4, MMA_B_LAYOUTS } MmaBLayout;

/* The correct kernel, or one planted layout bug. */
typedef enum {
    MMA_BUG_NONE,
    MMA_BUG_SWAP_A12,   /* A's registers a1 and a2 exchanged before the mma */
    MMA_BUG_STORE_ROW,  /* C stored by lane (lane & 7, lane >> 3) instead of (lane >> 2, lane & 3) */
    MMA_BUG_NO_TRANS,   /* [K][N] storage loaded without .trans */
    MMA_BUG_SWAP_B_K,   /* B's registers b0 and b1 (k 0..7 and 8..15) exchanged */
    MMA_BUG_COUNT
} MmaBug;

/* Device C[M][N] (fp32) = A[M][K] B, A and B device bf16 bits (B laid out as
 * b_layout says); any M, N, K >= 1 (tiles are zero-padded). Synchronous. */
void mma_gemm_bf16(float *C, const uint16_t *A, const uint16_t *B, int M, int N, int K, MmaBLayout b_layout,
                   MmaBug bug);

/* Device out[i] = mma_pack_bf16x2(in[2i], in[2i + 1]) for i < n_pairs. */
void mma_pack_bf16x2_cuda(uint32_t *out, const float *in, int n_pairs);

#ifdef __cplusplus
}
#endif
#endif
