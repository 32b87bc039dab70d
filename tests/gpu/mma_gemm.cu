/* A bf16 GEMM on the tensor-core primitives of kernels/mma.cuh (see
 * mma_gemm.h). One warp per block computes a 16x16 tile of C: per 16-wide
 * slice of K it stages A's and B's tiles in shared memory (zero outside the
 * matrices), loads A's fragment with ldmatrix.x4 and B's either with
 * ldmatrix.x4 ([N][K] storage) or, for [K][N], with two ldmatrix.x2.trans
 * or one ldmatrix.x4.trans (b_kn 1 or 2 in the kernel), and
 * runs two m16n8k16 mmas (n 0..7 and 8..15), accumulating in fp32. Written
 * for clarity, not speed: it is the reference use of the fragment layouts. */
#include <stdint.h>

#include "kernels/cuda_common.cuh"
#include "kernels/mma.cuh"

#include "tests/gpu/mma_gemm.h"

/* Tile rows padded from 16 to 24 bf16 (48 bytes): every row start stays a
 * multiple of 16 bytes, as ldmatrix requires. */
#define MMA_TILE_LD 24

__global__ void __launch_bounds__(32)
    mma_gemm_kernel(float *C, const uint16_t *A, const uint16_t *B, int M, int N, int K,
                    int b_kn /* 0: [N][K]; [K][N] by 1: x2.trans, 2: x4.trans */, int bug) {
    __shared__ __align__(16) uint16_t sa[16 * MMA_TILE_LD], sb[16 * MMA_TILE_LD];
    const int lane = threadIdx.x;
    const int64_t m0 = (int64_t)blockIdx.y * 16, n0 = (int64_t)blockIdx.x * 16;
    float acc[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
    for (int64_t k0 = 0; k0 < K; k0 += 16) {
        for (int i = lane; i < 256; i += 32) {
            const int r = i >> 4, c = i & 15;
            /* sa[m][k]; sb[k][n] for [K][N] storage, else sb[n][k] */
            sa[r * MMA_TILE_LD + c] = (m0 + r < M && k0 + c < K) ? A[(m0 + r) * K + k0 + c] : (uint16_t)0;
            if (b_kn) sb[r * MMA_TILE_LD + c] = (k0 + r < K && n0 + c < N) ? B[(k0 + r) * N + n0 + c] : (uint16_t)0;
            else sb[r * MMA_TILE_LD + c] = (n0 + r < N && k0 + c < K) ? B[(n0 + r) * K + k0 + c] : (uint16_t)0;
        }
        __syncwarp();
        uint32_t a[4], b[2][2];
        /* matrices 0..3 = A rows 0-7 / 8-15 at column 0, then the same at column 8 */
        ldmatrix_x4(a, &sa[((lane & 7) + 8 * ((lane >> 3) & 1)) * MMA_TILE_LD + 8 * (lane >> 4)]);
        if (b_kn == 2) {
            /* matrices: k 0-7 and k 8-15 at n 0, then at n 8; transposed into (k, n) pairs */
            uint32_t r[4];
            const uint16_t *row = &sb[(lane & 15) * MMA_TILE_LD + 8 * (lane >> 4)];
            if (bug == MMA_BUG_NO_TRANS) ldmatrix_x4(r, row);
            else ldmatrix_x4_trans(r, row);
            b[0][0] = r[0], b[0][1] = r[1], b[1][0] = r[2], b[1][1] = r[3];
        } else if (b_kn) {
            /* per 8-column group j: matrices k 0-7 and k 8-15, transposed into (k, n) pairs */
            for (int j = 0; j < 2; j++) {
                const uint16_t *row = &sb[(lane & 15) * MMA_TILE_LD + 8 * j];
                if (bug == MMA_BUG_NO_TRANS) ldmatrix_x2(b[j], row);
                else ldmatrix_x2_trans(b[j], row);
            }
        } else {
            /* matrices: n 0-7 at k 0, n 0-7 at k 8, n 8-15 at k 0, n 8-15 at k 8 */
            uint32_t r[4];
            ldmatrix_x4(r, &sb[((lane & 7) + 8 * (lane >> 4)) * MMA_TILE_LD + 8 * ((lane >> 3) & 1)]);
            b[0][0] = r[0], b[0][1] = r[1], b[1][0] = r[2], b[1][1] = r[3];
        }
        if (bug == MMA_BUG_SWAP_A12) {
            const uint32_t t = a[1];
            a[1] = a[2], a[2] = t;
        }
        if (bug == MMA_BUG_SWAP_B_K)
            for (int j = 0; j < 2; j++) {
                const uint32_t t = b[j][0];
                b[j][0] = b[j][1], b[j][1] = t;
            }
        mma_m16n8k16_bf16(acc[0], a, b[0], acc[0]);
        mma_m16n8k16_bf16(acc[1], a, b[1], acc[1]);
        __syncwarp(); /* every lane's ldmatrix has read the tiles before the next fill */
    }
    /* the planted bug is a bijection too (no two lanes write one element), only the wrong one */
    const int wrong = bug == MMA_BUG_STORE_ROW;
    const int g = wrong ? (lane & 7) : (lane >> 2), t = wrong ? (lane >> 3) : (lane & 3);
    for (int j = 0; j < 2; j++)
        for (int i = 0; i < 4; i++) {
            const int64_t r = m0 + g + 8 * (i >> 1), c = n0 + 8 * j + 2 * t + (i & 1);
            if (r < M && c < N) C[r * N + c] = acc[j][i];
        }
}

extern "C" void mma_gemm_bf16(float *C, const uint16_t *A, const uint16_t *B, int M, int N, int K, MmaBLayout b_layout,
                              MmaBug bug) {
    if (M < 1 || N < 1 || K < 1) {
        fprintf(stderr, "mma_gemm_bf16: M=%d N=%d K=%d: every dimension must be at least 1\n", M, N, K);
        exit(1);
    }
    dim3 grid(ceil_div_u(N, 16), ceil_div_u(M, 16));
    mma_gemm_kernel<<<grid, 32>>>(C, A, B, M, N, K, b_layout == MMA_B_NK ? 0 : b_layout == MMA_B_KN ? 1 : 2, (int)bug);
    CUDA_CHECK_LAUNCH();
    CUDA_CHECK(cudaDeviceSynchronize());
}

__global__ void mma_pack_kernel(uint32_t *out, const float *in, int n_pairs) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n_pairs) out[i] = mma_pack_bf16x2(in[2 * i], in[2 * i + 1]);
}

extern "C" void mma_pack_bf16x2_cuda(uint32_t *out, const float *in, int n_pairs) {
    mma_pack_kernel<<<ceil_div_u(n_pairs, 128), 128>>>(out, in, n_pairs);
    CUDA_CHECK_LAUNCH();
    CUDA_CHECK(cudaDeviceSynchronize());
}
