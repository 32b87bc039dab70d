/* Causal attention forward on tensor cores (FlashAttention-2 tiling), the
 * bf16 engine's twin of attention_forward_cuda (kernels/attention_mma.h).
 *
 * One block of 4 warps per (64-row query tile, batch row x query head); each
 * warp owns 16 query rows. Q's tile is rounded to bf16 into shared memory
 * once and held in registers as mma A fragments for the whole key loop.
 * Per 64-key tile, K and V sit in shared memory as bf16; then per warp:
 *   S (16 x 64) = Q K^T     8 n-tiles x D/16 mmas, K rows read by ldmatrix
 *                           (a row of K is a column of K^T: the .col operand)
 *   causal mask, scale; online softmax per row in registers (the 4 lanes of
 *   a quad hold one row's 16 values of a tile: two xor-shuffles)
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
 * Only the diagonal tile needs the mask; a row always sees key 0, so the
 * running max is finite after the first tile. Rows of the tile past the
 * causal range are computed on zero-filled or real data and not stored.
 * Grid: x = batch row x query head, y = query tile from the last (the one
 * with the most key tiles) down, so blocks start heaviest first across all
 * heads and the short tiles fill the last wave; a tile's arithmetic does
 * not depend on when it runs, so the order changes no bit.
 * Occupancy: the bf16 instantiation (the engine's) is held to 168
 * registers by __launch_bounds__(128, 3), so 3 blocks (12 warps) share an
 * SM (3 x 69 KiB of shared memory fits in 228 KiB, with the 1 KiB per block
 * the SM keeps); ptxas puts it there without a spill. The fp32-entry one
 * spills under the same bound, and without it takes 208 registers at
 * D = 128 (2 blocks); the engine does not run it. The softmax stays
 * in expf: the base-2 form (scores times scale log2 e, exp2f) made the bf16
 * kernel spill at 168 registers.
 * Shared memory at D = 128: 4 tiles (K and V, twice) of 64 x 136 bf16 =
 * 68 KiB (rows padded by 16 bytes: 16-byte aligned for ldmatrix and
 * cp.async, and the 8 rows an ldmatrix reads fall in distinct banks). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "attention_mma_tiles.cuh"

extern "C" {
#include "attention_mma.h"
#include "attention_rows.h"
}

static constexpr int kRows = kMmaTile, kKeys = kMmaTile, kThreads = kMmaThreads;

template <typename E> struct FwdMinBlocks {
    static constexpr int n = 1;
};
template <> struct FwdMinBlocks<bf16> {
    static constexpr int n = 3;
};

template <int D, int kBug, typename E>
__global__ void __launch_bounds__(kThreads, FwdMinBlocks<E>::n)
    attention_forward_mma_kernel(E *out, float *lse, const E *q, const E *k, const E *v, int64_t T, int64_t Hq,
                                 int64_t Hkv, int64_t L, float scale) {
    constexpr int ld = MmaTileLd<D>::ld, KD = D / 16, ND = D / 8;
    constexpr int64_t tile = (int64_t)kKeys * ld; /* elements of one 64-row tile */
    extern __shared__ __align__(16) uint16_t smem_u16[];
    /* buffer b (0 or 1): its K tile at smem_u16 + 2 b tile, its V tile after it */
    uint16_t *const sq = smem_u16 + 2 * tile; /* Q is staged in buffer 1's K tile */
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int64_t b = blockIdx.x / Hq, h = blockIdx.x % Hq, hk = h / (Hq / Hkv);
    const int64_t q0 = (int64_t)(gridDim.y - 1 - blockIdx.y) * kRows; /* heaviest first */
    const int64_t qstride = Hq * D, kvstride = Hkv * D;
    const E *kb = k + (b * T * Hkv + hk) * D, *vb = v + (b * T * Hkv + hk) * D;

    mma_load_rows_bf16_async<D>(sq, q + (b * T * Hq + h) * D, qstride, q0, L);
    mma_load_rows_bf16_async<D>(smem_u16, kb, kvstride, 0, L);
    mma_load_rows_bf16_async<D>(smem_u16 + tile, vb, kvstride, 0, L);
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
    float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f}; /* l: this lane's partial sums */

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
            mma_load_rows_bf16_async<D>(next, kb, kvstride, k0 + kKeys, L);
            mma_load_rows_bf16_async<D>(next + tile, vb, kvstride, k0 + kKeys, L);
        }
        cp_async_commit();
        const uint16_t *const sk = smem_u16 + cur * 2 * tile, *const sv = sk + tile;

        float s[8][4];
        mma_mul_rows_t<D>(s, qa, sk, lane); /* S = Q K^T */

        /* scale and mask (keys past the row), then the tile's row max */
        const bool diagonal = k0 + kKeys - 1 > q0;
        float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int j = 0; j < 8; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int64_t key = k0 + j * 8 + 2 * t + (e & 1);
                float x = s[j][e] * scale;
                if (diagonal && key > row[e >> 1]) x = -INFINITY;
                s[j][e] = x;
                mx[e >> 1] = fmaxf(mx[e >> 1], x);
            }
        float alpha[2], msub[2];
#pragma unroll
        for (int r = 0; r < 2; r++) {
            /* the quad (lanes 4g..4g+3) holds the row */
            const int x1 = kBug == ATTN_MMA_BUG_ROW_MAX ? 4 : 1, x2 = kBug == ATTN_MMA_BUG_ROW_MAX ? 8 : 2;
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], x1));
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], x2));
            const float m_new = fmaxf(m_run[r], mx[r]);
            msub[r] = m_new == -INFINITY ? 0.0f : m_new;
            alpha[r] = expf(m_run[r] - msub[r]);
            m_run[r] = m_new;
            l_run[r] *= alpha[r];
        }
#pragma unroll
        for (int j = 0; j < 8; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const float p = expf(s[j][e] - msub[e >> 1]);
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

    /* the row sums over the quad, then out = O / l and lse = m + log l */
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
        if (t == 0) lse[(b * Hq + h) * T + row[r]] = m_run[r] + logf(l_run[r]);
    }
}

template <int D, int kBug, typename E>
static void launch_causal(E *out, float *lse, const E *q, const E *k, const E *v, int64_t B, int64_t T, int64_t Hq,
                          int64_t Hkv, int64_t L) {
    const size_t bytes = 4 * MmaTileLd<D>::tile_bytes; /* K and V, two buffers (Q staged in the second) */
    CUDA_CHECK(cudaFuncSetAttribute(attention_forward_mma_kernel<D, kBug, E>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
    attention_forward_mma_kernel<D, kBug, E><<<dim3((unsigned int)(B * Hq), ceil_div_u(L, kRows)), kThreads, bytes>>>(
        out, lse, q, k, v, T, Hq, Hkv, L, 1.0f / sqrtf((float)D));
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

template <int kBug, typename E>
static void forward(E *out, float *lse, const E *q, const E *k, const E *v, const int32_t *sel, int64_t B, int64_t T,
                    int64_t Hq, int64_t Hkv, int64_t D, const RefreshMask *m, const char *fn) {
    if (!mma_checked(fn, sel, B, T, Hq, Hkv, D, m)) return;
    const int active = refresh_active(m, T);
    const int64_t L = active ? m->L : T;
    switch (D) {
    case 16: launch_causal<16, kBug>(out, lse, q, k, v, B, T, Hq, Hkv, L); break;
    case 32: launch_causal<32, kBug>(out, lse, q, k, v, B, T, Hq, Hkv, L); break;
    case 64: launch_causal<64, kBug>(out, lse, q, k, v, B, T, Hq, Hkv, L); break;
    default: launch_causal<128, kBug>(out, lse, q, k, v, B, T, Hq, Hkv, L); break;
    }
    /* the suffix rows: the selected keys and the local ones, fp32 gather kernel */
    if (active) forward_suffix(out, lse, q, k, v, sel, B, T, Hq, Hkv, D, m, L);
}

extern "C" void attention_forward_mma_cuda(float *out, float *lse, const float *q, const float *k, const float *v,
                                           const int32_t *sel, int64_t B, int64_t T, int64_t Hq, int64_t Hkv,
                                           int64_t D, const RefreshMask *m) {
    forward<ATTN_MMA_OK>(out, lse, q, k, v, sel, B, T, Hq, Hkv, D, m, "attention_forward_mma_cuda");
}

extern "C" void attention_forward_mma_bf16_cuda(bf16 *out, float *lse, const bf16 *q, const bf16 *k, const bf16 *v,
                                                const int32_t *sel, int64_t B, int64_t T, int64_t Hq, int64_t Hkv,
                                                int64_t D, const RefreshMask *m) {
    forward<ATTN_MMA_OK>(out, lse, q, k, v, sel, B, T, Hq, Hkv, D, m, "attention_forward_mma_bf16_cuda");
}

extern "C" void attention_forward_mma_bf16_planted_cuda(bf16 *out, float *lse, const bf16 *q, const bf16 *k,
                                                        const bf16 *v, const int32_t *sel, int64_t B, int64_t T,
                                                        int64_t Hq, int64_t Hkv, int64_t D, const RefreshMask *m,
                                                        AttnMmaBug bug) {
    const char *fn = "attention_forward_mma_bf16_planted_cuda";
    switch (bug) {
    case ATTN_MMA_BUG_CP_WAIT1: forward<ATTN_MMA_BUG_CP_WAIT1>(out, lse, q, k, v, sel, B, T, Hq, Hkv, D, m, fn); break;
    case ATTN_MMA_BUG_CP_NO_SYNC: forward<ATTN_MMA_BUG_CP_NO_SYNC>(out, lse, q, k, v, sel, B, T, Hq, Hkv, D, m, fn); break;
    default: forward<ATTN_MMA_OK>(out, lse, q, k, v, sel, B, T, Hq, Hkv, D, m, fn); break;
    }
}

extern "C" void attention_forward_mma_planted_cuda(float *out, float *lse, const float *q, const float *k,
                                                   const float *v, const int32_t *sel, int64_t B, int64_t T,
                                                   int64_t Hq, int64_t Hkv, int64_t D, const RefreshMask *m,
                                                   AttnMmaBug bug) {
    const char *fn = "attention_forward_mma_planted_cuda";
    switch (bug) {
    case ATTN_MMA_BUG_P_SWAP: forward<ATTN_MMA_BUG_P_SWAP>(out, lse, q, k, v, sel, B, T, Hq, Hkv, D, m, fn); break;
    case ATTN_MMA_BUG_V_NO_TRANS: forward<ATTN_MMA_BUG_V_NO_TRANS>(out, lse, q, k, v, sel, B, T, Hq, Hkv, D, m, fn); break;
    case ATTN_MMA_BUG_ROW_MAX: forward<ATTN_MMA_BUG_ROW_MAX>(out, lse, q, k, v, sel, B, T, Hq, Hkv, D, m, fn); break;
    default: forward<ATTN_MMA_OK>(out, lse, q, k, v, sel, B, T, Hq, Hkv, D, m, fn); break;
    }
}
