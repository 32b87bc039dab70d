/* Causal attention forward on tensor cores (FlashAttention-2 tiling), the
 * bf16 engine's twin of attention_forward_cuda (kernels/attention_mma.h).
 *
 * One block of 8 warps per (128-row query tile, batch row x query head),
 * or of 4 per 64-row tile (KVCPT_ATTN_FWD_ROWS, below); each warp owns 16
 * query rows. Q's tile is rounded to bf16 into shared memory
 * once and held in registers as mma A fragments for the whole key loop.
 * Per 64-key tile, K and V sit in shared memory as bf16; then per warp:
 *   S (16 x 64) = Q K^T     8 n-tiles x D/16 mmas, K rows read by ldmatrix
 *                           (a row of K is a column of K^T: the .col operand)
 *   causal mask; online softmax per row in registers, in base 2 (scores
 *   times scale log2 e, one ex2 per probability; the 4 lanes of a quad
 *   hold one row's 16 values of a tile: two xor-shuffles); lse stored in
 *   natural log, as the backward reads it
 *   O (16 x D) += P V       P's fp32 accumulators are repacked to bf16 A
 *                           fragments in registers (an m16n8 C fragment pair
 *                           is exactly an m16n8k16 A fragment), V by
 *                           ldmatrix .trans (a row of V is a k-row of B)
 * Pipeline: two K/V buffers. While the warps compute on tile i in one, the
 * threads' cp.async copies of tile i + 1 fill the other; each thread waits
 * for its copies (cp.async.wait_group 0) after its products, and the one
 * __syncthreads at the top of the next iteration both publishes tile i + 1
 * to every warp and tells every thread that all warps are done with tile
 * i's buffer before tile i + 2's copies go there. Q is staged in the
 * second buffer before the loop (its fragments are in registers by then).
 * The bf16 instantiation (the engine's) copies with cp.async; the fp32-entry
 * one rounds while loading, which cp.async cannot do, so its loads of tile
 * i + 1 are synchronous (issued before tile i's products, in the same
 * schedule). Only the loads are pipelined; the arithmetic and its order are
 * those of a one-buffer loop, so the bits do not depend on it.
 * Only the diagonal tiles need the mask; a row always sees key 0, so the
 * running max is finite after the first tile. Rows of the tile past the
 * causal range are computed on zero-filled or real data and not stored.
 * A 128-row tile's first 4 warps also run its last key tile, all masked
 * for them: probabilities 0 and alpha exactly 1, so both tilings give the
 * same bits (tested), at under 1% more products at T = 8192.
 * Grid: x = batch row x query head, y = query tile from the last (the one
 * with the most key tiles) down, so blocks start heaviest first across all
 * heads and the short tiles fill the last wave; a tile's arithmetic does
 * not depend on when it runs, so the order changes no bit.
 * Occupancy (ptxas, sm_90, docs/cuda.md): 128-row tiles load each K/V
 * tile once per 128 query rows, half the shared-memory fills and L2 reads
 * per product of 64-row tiles (128 flops per byte of K/V at D = 128, not
 * 64: at 370 TFLOP/s, 2.9 TB/s from L2 instead of 5.8). At D = 128 the
 * bf16 kernel takes 207 registers, 1 block (8 warps) per SM, about
 * FlashAttention-2's occupancy there (2 blocks of 4 warps at up to 255
 * registers); held to 128 registers for 2 blocks it spills. Up to D = 64
 * it runs 2 blocks (16 warps) at 128 registers. The 64-row kernel runs 3 blocks of 4 warps at
 * 168 registers (__launch_bounds__(128, 3)). The fp32-entry
 * instantiations, which the engine does not run, take up to 231 registers
 * (1 or 2 blocks). None spills.
 * Shared memory at D = 128: 4 tiles (K and V, twice) of 64 x 136 bf16 =
 * 68 KiB (rows padded by 16 bytes: 16-byte aligned for ldmatrix and
 * cp.async, and the 8 rows an ldmatrix reads fall in distinct banks); Q's
 * 64 or 128 rows are staged in the second buffer before the loop. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "attention_mma_tiles.cuh"

extern "C" {
#include "attention_mma.h"
#include "attention_rows.h"
}

static constexpr int kKeys = kMmaTile;

/* The query tile: kWarps warps of 16 rows each, 4 (64 rows) or 8 (128).
 * KVCPT_ATTN_FWD_ROWS picks the engine's at compile time; the other is
 * built too, for the tests (attention_forward_mma_rows_planted_cuda). */
#ifndef KVCPT_ATTN_FWD_ROWS
#define KVCPT_ATTN_FWD_ROWS 128
#endif
static_assert(KVCPT_ATTN_FWD_ROWS == 64 || KVCPT_ATTN_FWD_ROWS == 128, "KVCPT_ATTN_FWD_ROWS must be 64 or 128");
static constexpr int kDefaultWarps = KVCPT_ATTN_FWD_ROWS / 16;

/* Blocks per SM each instantiation is held to (__launch_bounds__), so that
 * ptxas budgets registers for that many without a spill (the report in
 * docs/cuda.md): the bf16 64-row kernels 3 blocks of 4 warps (168
 * registers); the bf16 128-row ones 2 blocks of 8 (128 registers) up to
 * D = 64 and 1 at D = 128, where 128 registers spill (ptxas takes 207);
 * the fp32-entry ones 1 (they spill under the bf16 bounds; the engine
 * does not run them). */
template <int D, int kWarps, typename E> struct FwdMinBlocks {
    static constexpr int n = 1;
};
template <int D> struct FwdMinBlocks<D, 4, bf16> {
    static constexpr int n = 3;
};
template <int D> struct FwdMinBlocks<D, 8, bf16> {
    static constexpr int n = D < 128 ? 2 : 1;
};

/* rows [p0, p0 + kTileRows) of one head of x (row stride `stride`) into
 * dst (kTileRows x ld) as bf16, by kThr threads; rows at or past `limit`
 * are zeros. bf16 rows are copied with cp.async, in flight until a
 * cp_async_wait covers the group the caller commits next (the zeros are
 * plain stores); a thread keeps one 16-byte column and steps down the rows,
 * so one pointer pair walks the tile (no register to spare). fp32 rows are
 * rounded (nearest even) pair by pair and stored at once: cp.async copies
 * bytes, it cannot round. */
template <int D, int kTileRows, int kThr>
static __device__ void fwd_load_rows(uint16_t *dst, const float *x, int64_t stride, int64_t p0, int64_t limit) {
    mma_load_rows_bf16<D, kTileRows, kThr>(dst, x, stride, p0, limit);
}

template <int D, int kTileRows, int kThr>
static __device__ void fwd_load_rows(uint16_t *dst, const bf16 *x, int64_t stride, int64_t p0, int64_t limit) {
    constexpr int ld = MmaTileLd<D>::ld, chunks = D / 8, rows_per_pass = kThr / chunks;
    static_assert(kThr % chunks == 0, "a pass covers whole rows");
    const int r0 = threadIdx.x / chunks, c = 8 * (threadIdx.x % chunks);
    const bf16 *src = x + (p0 + r0) * stride + c;
    uint16_t *d = dst + r0 * ld + c;
#pragma unroll
    for (int r = r0; r < kTileRows; r += rows_per_pass) {
        if (p0 + r < limit) cp_async_16(d, src);
        else store_b128(d, make_uint4(0u, 0u, 0u, 0u));
        src += rows_per_pass * stride;
        d += rows_per_pass * ld;
    }
}

template <int D, int kWarps, int kBug, typename E>
__global__ void __launch_bounds__(32 * kWarps, FwdMinBlocks<D, kWarps, E>::n)
    attention_forward_mma_kernel(E *out, float *lse, const E *q, const E *k, const E *v, int64_t T, int64_t Hq,
                                 int64_t Hkv, int64_t L, float scale) {
    constexpr int ld = MmaTileLd<D>::ld, KD = D / 16, ND = D / 8, kThr = 32 * kWarps, kRows = 16 * kWarps;
    constexpr int64_t tile = (int64_t)kKeys * ld; /* elements of one 64-row tile */
    static_assert(kRows <= 2 * kKeys, "Q is staged in one K/V buffer (two 64-row tiles)");
    extern __shared__ __align__(16) uint16_t smem_u16[];
    /* buffer b (0 or 1): its K tile at smem_u16 + 2 b tile, its V tile after it */
    uint16_t *const sq = smem_u16 + 2 * tile; /* Q is staged in buffer 1 (its K tile, and V's for 128 rows) */
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int64_t b = blockIdx.x / Hq, h = blockIdx.x % Hq, hk = h / (Hq / Hkv);
    const int64_t q0 = (int64_t)(gridDim.y - 1 - blockIdx.y) * kRows; /* heaviest first */
    const int64_t qstride = Hq * D, kvstride = Hkv * D;
    const E *kb = k + (b * T * Hkv + hk) * D, *vb = v + (b * T * Hkv + hk) * D;
    /* the softmax in base 2 (one ex2 per probability): p = 2^(s c - m),
     * c = scale log2 e, m the running max of s c: one fma per score, the
     * max taken over the raw scores s (c > 0: it commutes with scaling) */
    const float c2 = kBug == ATTN_MMA_BUG_EXP2_SCALE ? scale : scale * kLog2e;

    if (kBug == ATTN_MMA_BUG_Q_ROWS) { /* planted: Q loaded as a K/V tile's 64 rows, the rest left zero */
        fwd_load_rows<D, kKeys, kThr>(sq, q + (b * T * Hq + h) * D, qstride, q0, L);
        for (int i = threadIdx.x; i < (kRows - kKeys) * ld; i += kThr) sq[kKeys * ld + i] = 0;
    } else {
        fwd_load_rows<D, kRows, kThr>(sq, q + (b * T * Hq + h) * D, qstride, q0, L);
    }
    fwd_load_rows<D, kKeys, kThr>(smem_u16, kb, kvstride, 0, L);
    fwd_load_rows<D, kKeys, kThr>(smem_u16 + tile, vb, kvstride, 0, L);
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();
    uint32_t qa[KD][4]; /* A fragments of this warp's 16 rows */
    mma_load_a_frags<D>(qa, sq, warp * 16, lane);

    /* this lane's rows: g and g + 8 of the warp's 16 */
    const int64_t row[2] = {q0 + warp * 16 + g, q0 + warp * 16 + g + 8};
    float o[ND][4];
#pragma unroll
    for (int n = 0; n < ND; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    /* m: the running max of the scores times c, rounded; l: this lane's
     * partial sums */
    float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f};

    const int64_t last_key = (q0 + kRows < L ? q0 + kRows : L) - 1;
    for (int64_t k0 = 0; k0 <= last_key; k0 += kKeys) {
        /* the buffer holding tile k0: tiles alternate between the two */
        const int cur = (int)(k0 / kKeys) & 1;
        /* every thread's copies of tile k0 have landed (its wait ran before
         * this barrier), and every warp is done with the other buffer (tile
         * k0 - 64, or Q's staging) */
        if (kBug != ATTN_MMA_BUG_CP_NO_SYNC) __syncthreads();
        uint16_t *const next = smem_u16 + (cur ^ 1) * 2 * tile;
        if (k0 + kKeys <= last_key) {
            fwd_load_rows<D, kKeys, kThr>(next, kb, kvstride, k0 + kKeys, L);
            fwd_load_rows<D, kKeys, kThr>(next + tile, vb, kvstride, k0 + kKeys, L);
        }
        cp_async_commit();
        const uint16_t *const sk = smem_u16 + cur * 2 * tile, *const sv = sk + tile;

        float s[8][4];
        mma_mul_rows_t<D>(s, qa, sk, lane); /* S = Q K^T */

        /* mask (keys past the row), then the tile's row max; a warp
         * whose rows all lie past the tile's keys needs no mask */
        const bool diagonal = k0 + kKeys - 1 > q0 + warp * 16;
        float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int j = 0; j < 8; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int64_t key = k0 + j * 8 + 2 * t + (e & 1);
                if (diagonal && key > row[e >> 1]) s[j][e] = -INFINITY;
                mx[e >> 1] = fmaxf(mx[e >> 1], s[j][e]);
            }
        float alpha[2], msub[2];
#pragma unroll
        for (int r = 0; r < 2; r++) {
            /* the quad (lanes 4g..4g+3) holds the row */
            const int x1 = kBug == ATTN_MMA_BUG_ROW_MAX ? 4 : 1, x2 = kBug == ATTN_MMA_BUG_ROW_MAX ? 8 : 2;
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], x1));
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], x2));
            /* rounded (not fused into a later fma), so that a max that
             * stays gives alpha = 2^0 = 1 exactly; rounding keeps order */
            const float m_new = fmaxf(m_run[r], __fmul_rn(mx[r], c2));
            /* every row sees key 0 in the first tile, so m is finite from
             * there on; the guard keeps -inf - -inf out regardless */
            msub[r] = m_new == -INFINITY ? 0.0f : m_new;
            alpha[r] = exp2f(m_run[r] - msub[r]);
            m_run[r] = m_new;
            l_run[r] *= alpha[r];
        }
#pragma unroll
        for (int j = 0; j < 8; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const float p = exp2f(fmaf(s[j][e], c2, -msub[e >> 1]));
                s[j][e] = p;
                l_run[e >> 1] += p;
            }
#pragma unroll
        for (int n = 0; n < ND; n++) {
            o[n][0] *= alpha[0];
            o[n][1] *= alpha[0];
            o[n][2] *= alpha[1];
            o[n][3] *= alpha[1];
        }

        mma_mul_acc<D, kBug == ATTN_MMA_BUG_P_SWAP, kBug == ATTN_MMA_BUG_V_NO_TRANS>(o, s, sv, lane); /* O += P V */

        /* tile k0 + 64's copies, in flight during the products above, land */
        if (kBug == ATTN_MMA_BUG_CP_WAIT1) cp_async_wait<1>(); /* planted: leaves the newest group in flight */
        else cp_async_wait<0>();
    }

    /* the row sums over the quad, then out = O / l and lse in natural log,
     * as the backward reads it: (m + log2 l) ln 2 */
#pragma unroll
    for (int r = 0; r < 2; r++) {
        l_run[r] += __shfl_xor_sync(0xffffffffu, l_run[r], 1);
        l_run[r] += __shfl_xor_sync(0xffffffffu, l_run[r], 2);
    }
    E *ob = out + (b * T * Hq + h) * D;
#pragma unroll
    for (int r = 0; r < 2; r++) {
        if (row[r] >= L) continue;
        const float inv = 1.0f / l_run[r];
#pragma unroll
        for (int n = 0; n < ND; n++) {
            ob[row[r] * qstride + n * 8 + 2 * t] = act_from_f32<E>(o[n][2 * r] * inv);
            ob[row[r] * qstride + n * 8 + 2 * t + 1] = act_from_f32<E>(o[n][2 * r + 1] * inv);
        }
        const float lse2 = m_run[r] + log2f(l_run[r]);
        if (t == 0) lse[(b * Hq + h) * T + row[r]] = kBug == ATTN_MMA_BUG_LSE_LOG2 ? lse2 : lse2 * kLn2;
    }
}

template <int D, int kWarps, int kBug, typename E>
static void launch_causal(E *out, float *lse, const E *q, const E *k, const E *v, int64_t B, int64_t T, int64_t Hq,
                          int64_t Hkv, int64_t L) {
    const size_t bytes = 4 * MmaTileLd<D>::tile_bytes; /* K and V, two buffers (Q staged in the second) */
    CUDA_CHECK(cudaFuncSetAttribute(attention_forward_mma_kernel<D, kWarps, kBug, E>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
    const dim3 grid((unsigned int)(B * Hq), ceil_div_u(L, 16 * kWarps));
    const float scale = 1.0f / sqrtf((float)D);
    attention_forward_mma_kernel<D, kWarps, kBug, E>
        <<<grid, 32 * kWarps, bytes>>>(out, lse, q, k, v, T, Hq, Hkv, L, scale);
    CUDA_CHECK_LAUNCH();
}

/* The suffix rows' fp32 gather kernel, for either element type. */
static void forward_suffix(float *out, float *lse, const float *q, const float *k, const float *v, const int32_t *sel,
                           int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t D, const RefreshMask *m, int64_t L) {
    attention_forward_rows_cuda(out, lse, q, k, v, sel, B, T, Hq, Hkv, D, m, L, T);
}

static void forward_suffix(bf16 *out, float *lse, const bf16 *q, const bf16 *k, const bf16 *v, const int32_t *sel,
                           int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t D, const RefreshMask *m, int64_t L) {
    attention_forward_rows_bf16_cuda(out, lse, q, k, v, sel, B, T, Hq, Hkv, D, m, L, T);
}

template <int kWarps, int kBug, typename E>
static void forward(E *out, float *lse, const E *q, const E *k, const E *v, const int32_t *sel, int64_t B, int64_t T,
                    int64_t Hq, int64_t Hkv, int64_t D, const RefreshMask *m, const char *fn) {
    if (!mma_checked(fn, sel, B, T, Hq, Hkv, D, m)) return;
    const int active = refresh_active(m, T);
    const int64_t L = active ? m->L : T;
    switch (D) {
        case 16: launch_causal<16, kWarps, kBug>(out, lse, q, k, v, B, T, Hq, Hkv, L); break;
        case 32: launch_causal<32, kWarps, kBug>(out, lse, q, k, v, B, T, Hq, Hkv, L); break;
        case 64: launch_causal<64, kWarps, kBug>(out, lse, q, k, v, B, T, Hq, Hkv, L); break;
        default: launch_causal<128, kWarps, kBug>(out, lse, q, k, v, B, T, Hq, Hkv, L); break;
    }
    /* the suffix rows: the selected keys and the local ones, fp32 gather kernel */
    if (active) forward_suffix(out, lse, q, k, v, sel, B, T, Hq, Hkv, D, m, L);
}

/* forward with the query tile of `rows` rows (64 or 128; 0: the default) */
template <int kBug, typename E>
static void forward_tile(E *out, float *lse, const E *q, const E *k, const E *v, const int32_t *sel, int64_t B,
                         int64_t T, int64_t Hq, int64_t Hkv, int64_t D, const RefreshMask *m, int rows,
                         const char *fn) {
    if (rows == 0) rows = KVCPT_ATTN_FWD_ROWS;
    if (rows == 64) forward<4, kBug>(out, lse, q, k, v, sel, B, T, Hq, Hkv, D, m, fn);
    else if (rows == 128) forward<8, kBug>(out, lse, q, k, v, sel, B, T, Hq, Hkv, D, m, fn);
    else {
        fprintf(stderr, "kvcpt: %s: query tile rows=%d (must be 64 or 128)\n", fn, rows);
        exit(1);
    }
}

extern "C" int attention_mma_fwd_rows(void) { return KVCPT_ATTN_FWD_ROWS; }

extern "C" void attention_forward_mma_cuda(float *out, float *lse, const float *q, const float *k, const float *v,
                                           const int32_t *sel, int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t D,
                                           const RefreshMask *m) {
    forward<kDefaultWarps, ATTN_MMA_OK>(out, lse, q, k, v, sel, B, T, Hq, Hkv, D, m, "attention_forward_mma_cuda");
}

extern "C" void attention_forward_mma_bf16_cuda(bf16 *out, float *lse, const bf16 *q, const bf16 *k, const bf16 *v,
                                                const int32_t *sel, int64_t B, int64_t T, int64_t Hq, int64_t Hkv,
                                                int64_t D, const RefreshMask *m) {
    forward<kDefaultWarps, ATTN_MMA_OK>(out, lse, q, k, v, sel, B, T, Hq, Hkv, D, m, "attention_forward_mma_bf16_cuda");
}

extern "C" void attention_forward_mma_bf16_rows_planted_cuda(bf16 *out, float *lse, const bf16 *q, const bf16 *k,
                                                             const bf16 *v, const int32_t *sel, int64_t B, int64_t T,
                                                             int64_t Hq, int64_t Hkv, int64_t D, const RefreshMask *m,
                                                             int rows, AttnMmaBug bug) {
    const char *fn = "attention_forward_mma_bf16_rows_planted_cuda";
#define FWD_BF16(BUG) forward_tile<BUG>(out, lse, q, k, v, sel, B, T, Hq, Hkv, D, m, rows, fn)
    switch (bug) {
        case ATTN_MMA_BUG_CP_WAIT1: FWD_BF16(ATTN_MMA_BUG_CP_WAIT1); break;
        case ATTN_MMA_BUG_CP_NO_SYNC: FWD_BF16(ATTN_MMA_BUG_CP_NO_SYNC); break;
        default: FWD_BF16(ATTN_MMA_OK); break;
    }
#undef FWD_BF16
}

extern "C" void attention_forward_mma_bf16_planted_cuda(bf16 *out, float *lse, const bf16 *q, const bf16 *k,
                                                        const bf16 *v, const int32_t *sel, int64_t B, int64_t T,
                                                        int64_t Hq, int64_t Hkv, int64_t D, const RefreshMask *m,
                                                        AttnMmaBug bug) {
    attention_forward_mma_bf16_rows_planted_cuda(out, lse, q, k, v, sel, B, T, Hq, Hkv, D, m, 0, bug);
}

extern "C" void attention_forward_mma_rows_planted_cuda(float *out, float *lse, const float *q, const float *k,
                                                        const float *v, const int32_t *sel, int64_t B, int64_t T,
                                                        int64_t Hq, int64_t Hkv, int64_t D, const RefreshMask *m,
                                                        int rows, AttnMmaBug bug) {
    const char *fn = "attention_forward_mma_rows_planted_cuda";
#define FWD_F32(BUG) forward_tile<BUG>(out, lse, q, k, v, sel, B, T, Hq, Hkv, D, m, rows, fn)
    switch (bug) {
        case ATTN_MMA_BUG_P_SWAP: FWD_F32(ATTN_MMA_BUG_P_SWAP); break;
        case ATTN_MMA_BUG_V_NO_TRANS: FWD_F32(ATTN_MMA_BUG_V_NO_TRANS); break;
        case ATTN_MMA_BUG_ROW_MAX: FWD_F32(ATTN_MMA_BUG_ROW_MAX); break;
        case ATTN_MMA_BUG_EXP2_SCALE: FWD_F32(ATTN_MMA_BUG_EXP2_SCALE); break;
        case ATTN_MMA_BUG_LSE_LOG2: FWD_F32(ATTN_MMA_BUG_LSE_LOG2); break;
        case ATTN_MMA_BUG_Q_ROWS: FWD_F32(ATTN_MMA_BUG_Q_ROWS); break;
        default: FWD_F32(ATTN_MMA_OK); break;
    }
#undef FWD_F32
}

extern "C" void attention_forward_mma_planted_cuda(float *out, float *lse, const float *q, const float *k,
                                                   const float *v, const int32_t *sel, int64_t B, int64_t T, int64_t Hq,
                                                   int64_t Hkv, int64_t D, const RefreshMask *m, AttnMmaBug bug) {
    attention_forward_mma_rows_planted_cuda(out, lse, q, k, v, sel, B, T, Hq, Hkv, D, m, 0, bug);
}
