#ifndef KVCPT_ATTENTION_MMA_TILES_CUH
#define KVCPT_ATTENTION_MMA_TILES_CUH
/* What the tensor-core attention kernels (kernels/attention_mma_fwd.cu,
 * attention_mma_bwd.cu) share: the tile shape, the bf16 tiles in shared
 * memory and their loader, and the shape check. Internal to those files. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "act_io.cuh"
#include "cuda_common.cuh"
#include "mma.cuh"

#include <kernels/cp_async.cuh>

extern "C" {
#include "attention.h"
#include "attention_shape.cuh"
}

static constexpr int kMmaTile = 64;     /* query rows or keys per block and per tile, 16 per warp */
static constexpr int kMmaThreads = 128; /* 4 warps */

/* The softmax runs in base 2: scores times scale * log2(e), probabilities
 * by exp2f (one ex2 each), lse stored in natural-log units (times ln 2). */
static constexpr float kLog2e = 1.4426950408889634f;
static constexpr float kLn2 = 0.6931471805599453f;

/* bf16 elements per shared row: D plus 8 (16 bytes) of padding, so rows
 * stay 16-byte aligned for ldmatrix and the 8 rows one ldmatrix reads fall
 * in distinct banks. */
template <int D> struct MmaTileLd {
    static constexpr int ld = D + 8;
    static constexpr size_t tile_bytes = (size_t)kMmaTile * ld * sizeof(uint16_t);
};

/* rows [p0, p0 + 64) of one head of x (row stride `stride` elements) into
 * dst (64 x ld) as bf16; rows at or past `limit` are zeros. fp32 inputs are
 * rounded (nearest even) pair by pair (kRows rows by kThr threads: the
 * forward's 128-row tiles too); bf16 inputs are copied 16 bytes (8
 * elements) at a time: their rows start 16-byte aligned, as the engine's
 * 256-byte-aligned buffers and head strides of D >= 16 elements give. */
template <int D, int kRows = kMmaTile, int kThr = kMmaThreads>
static __device__ void mma_load_rows_bf16(uint16_t *dst, const float *x, int64_t stride, int64_t p0, int64_t limit) {
    constexpr int ld = MmaTileLd<D>::ld, pairs = D / 2;
    for (int i = threadIdx.x; i < kRows * pairs; i += kThr) {
        const int r = i / pairs, c = 2 * (i % pairs);
        const int64_t p = p0 + r;
        float lo = 0.0f, hi = 0.0f;
        if (p < limit) {
            lo = x[p * stride + c];
            hi = x[p * stride + c + 1];
        }
        *(uint32_t *)&dst[r * ld + c] = mma_pack_bf16x2(lo, hi);
    }
}

template <int D>
static __device__ void mma_load_rows_bf16(uint16_t *dst, const bf16 *x, int64_t stride, int64_t p0, int64_t limit) {
    constexpr int ld = MmaTileLd<D>::ld, chunks = D / 8;
    for (int i = threadIdx.x; i < kMmaTile * chunks; i += kMmaThreads) {
        const int r = i / chunks, c = 8 * (i % chunks);
        const int64_t p = p0 + r;
        uint4 v = make_uint4(0u, 0u, 0u, 0u);
        if (p < limit) v = load_b128(x + p * stride + c);
        store_b128(&dst[r * ld + c], v);
    }
}

/* A fragments (16 rows x D, one per 16-column slice) of rows r0..r0+15 of
 * a tile: matrices = rows 0-7 / 8-15 at column 16kk, then at 16kk + 8 */
template <int D>
static __device__ void mma_load_a_frags(uint32_t a[D / 16][4], const uint16_t *tile, int r0, int lane) {
    constexpr int ld = MmaTileLd<D>::ld;
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++)
        ldmatrix_x4(a[kk], &tile[(r0 + (lane & 7) + 8 * ((lane >> 3) & 1)) * ld + kk * 16 + 8 * (lane >> 4)]);
}

/* c (16 x 64) = A (16 x D, fragments) X^T, X a 64-row tile: row j of X is
 * column j of the product (the mma's .col operand, ldmatrix without .trans) */
template <int D>
static __device__ void mma_mul_rows_t(float c[8][4], const uint32_t a[D / 16][4], const uint16_t *x, int lane) {
    constexpr int ld = MmaTileLd<D>::ld;
#pragma unroll
    for (int j = 0; j < 8; j++) {
        c[j][0] = c[j][1] = c[j][2] = c[j][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < D / 16; kk++) {
            uint32_t bf[2];
            ldmatrix_x2(bf, &x[(j * 8 + (lane & 7)) * ld + kk * 16 + 8 * ((lane >> 3) & 1)]);
            mma_m16n8k16_bf16(c[j], a[kk], bf, c[j]);
        }
    }
}

/* mma_mul_rows_t with A's rows r0..r0+15 read from a shared tile as needed,
 * for NJ column blocks of 8 from block j0 on (c[j] holds columns 8 (j0 + j)
 * .. 8 (j0 + j) + 7): all 64 columns, or a part where a kernel's registers
 * hold only that many accumulators at once */
template <int D, int NJ = 8>
static __device__ void mma_mul_rows_t_smem(float (&c)[NJ][4], const uint16_t *a_tile, int r0, const uint16_t *x,
                                           int lane, int j0 = 0) {
    constexpr int ld = MmaTileLd<D>::ld;
#pragma unroll
    for (int j = 0; j < NJ; j++) c[j][0] = c[j][1] = c[j][2] = c[j][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++) {
        uint32_t a[4];
        ldmatrix_x4(a, &a_tile[(r0 + (lane & 7) + 8 * ((lane >> 3) & 1)) * ld + kk * 16 + 8 * (lane >> 4)]);
#pragma unroll
        for (int j = 0; j < NJ; j++) {
            uint32_t bf[2];
            ldmatrix_x2(bf, &x[((j0 + j) * 8 + (lane & 7)) * ld + kk * 16 + 8 * ((lane >> 3) & 1)]);
            mma_m16n8k16_bf16(c[j], a, bf, c[j]);
        }
    }
}

/* acc (16 x D) += P (16 x 64, accumulator layout, rounded here) X, X a
 * 64-row tile read as the k-rows of B (ldmatrix .trans) */
template <int D, bool kSwapA12 = false, bool kNoTrans = false>
static __device__ void mma_mul_acc(float acc[D / 8][4], const float p[8][4], const uint16_t *x, int lane) {
    constexpr int ld = MmaTileLd<D>::ld;
#pragma unroll
    for (int c = 0; c < 4; c++) {
        uint32_t pa[4];
        pa[0] = mma_pack_bf16x2(p[2 * c][0], p[2 * c][1]);
        pa[1] = mma_pack_bf16x2(p[2 * c][2], p[2 * c][3]);
        pa[2] = mma_pack_bf16x2(p[2 * c + 1][0], p[2 * c + 1][1]);
        pa[3] = mma_pack_bf16x2(p[2 * c + 1][2], p[2 * c + 1][3]);
        if (kSwapA12) { /* a planted layout bug, for the tests */
            const uint32_t tmp = pa[1];
            pa[1] = pa[2];
            pa[2] = tmp;
        }
#pragma unroll
        for (int n = 0; n < D / 8; n += 2) {
            uint32_t xf[4];
            const uint16_t *xrow = &x[(c * 16 + (lane & 7) + 8 * ((lane >> 3) & 1)) * ld + n * 8 + 8 * (lane >> 4)];
            if (kNoTrans) ldmatrix_x4(xf, xrow); /* a planted layout bug, for the tests */
            else ldmatrix_x4_trans(xf, xrow);
            const uint32_t b0[2] = {xf[0], xf[1]}, b1[2] = {xf[2], xf[3]};
            mma_m16n8k16_bf16(acc[n], pa, b0, acc[n]);
            mma_m16n8k16_bf16(acc[n + 1], pa, b1, acc[n + 1]);
        }
    }
}

/* Stops the program, naming fn, on a shape the tensor-core kernels do not
 * take or an active mask without sel; 0 when there is nothing to compute. */
static int mma_checked(const char *fn, const int32_t *sel, int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t D,
                       const RefreshMask *m) {
    attention_check_shape(fn, B, T, Hq, Hkv, D, D == 16 || D == 32 || D == 64 || D == 128,
                          "head dim D must be 16, 32, 64 or 128 on tensor cores");
    refresh_mask_validate(m, fn);
    /* the tiles run along the grid's y dimension (heaviest first) */
    if ((T + kMmaTile - 1) / kMmaTile > 65535) {
        fprintf(stderr, "kvcpt: %s: T=%lld exceeds 65535 tiles of %d rows (the grid's y dimension)\n", fn, (long long)T,
                kMmaTile);
        exit(1);
    }
    if (B == 0 || T == 0) return 0;
    attention_check_sel(fn, sel, T, m);
    return 1;
}
#endif
