/* The RefreshKV suffix rows' forward for the tensor-core path
 * (kernels/attention_mma_suffix.h), split over the keys so that a few dozen
 * rows still fill the GPU: at the 8B CPT shape 50 rows x 32 heads see about
 * 2,100 keys each, which one block per 64-row tile ran as 32 blocks.
 *
 *   part     one warp per (row, split of 64 key-list entries, batch row x
 *            query head), four warps a block: over its entries in list
 *            order, an online softmax in base 2 (score times scale log2 e,
 *            exp2f), the running max m, sum l and unnormalised output o
 *            (lane d holds columns d, d + 32, ...) written to a scratch
 *            buffer; a split past the row's keys writes m = -inf, l = 0.
 *   combine  one warp per (row, batch row x query head): the splits in
 *            order, M = max m_s, l = sum l_s 2^(m_s - M), out = sum o_s
 *            2^(m_s - M) / l, lse = M ln 2 + log l.
 * The splits are fixed by the shapes and combined in a fixed order, so two
 * runs give the same bits; no atomics. fp32 throughout on the inputs as
 * they are (bf16 ones widened), like the causal rows' fp32 kernel. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "../common/checked.h"
#include "attention_mma_tiles.cuh"

extern "C" {
#include "attention_mma_suffix.h"
}

static constexpr int kSplitKeys = 64;     /* key-list entries per split */
static constexpr int kSuffixThreads = 128; /* 4 warps: 4 (row, split) pairs */

/* the scratch of one launch: per (batch row x head, row, split) */
struct SuffixParts {
    float *o;  /* (B*Hq, T - L, splits, D) unnormalised outputs */
    float *ml; /* (B*Hq, T - L, splits, 2) running max (base 2) and sum */
    int64_t splits;
};

template <typename E>
__global__ void __launch_bounds__(kSuffixThreads)
    suffix_forward_part_kernel(SuffixParts parts, const E *q, const E *k, const E *v, const int32_t *sel, int64_t T,
                               int64_t Hq, int64_t Hkv, int64_t D, int64_t L, int64_t ks, int64_t W, int64_t per,
                               float scale_log2) {
    const int lane = threadIdx.x & 31;
    const int64_t w = (int64_t)blockIdx.x * (kSuffixThreads / 32) + (threadIdx.x >> 5);
    const int64_t rows = T - L, r = w / parts.splits, split = w % parts.splits;
    if (r >= rows) return; /* whole warps leave together */
    const int64_t bh = blockIdx.y, b = bh / Hq, h = bh % Hq, hk = h / (Hq / Hkv), p = L + r;
    const int64_t qstride = Hq * D, kvstride = Hkv * D;
    const E *qp = q + (b * T * Hq + h) * D + p * qstride;
    const E *kb = k + (b * T * Hkv + hk) * D, *vb = v + (b * T * Hkv + hk) * D;
    const SuffixKeys sk = {sel + (b * Hkv + hk) * per, ks, L, W};
    const int64_t n = suffix_key_count(sk, p), i0 = split * kSplitKeys;
    const int64_t i1 = i0 + kSplitKeys < n ? i0 + kSplitKeys : n;
    float m = -INFINITY, l = 0.0f, o[4] = {0.0f, 0.0f, 0.0f, 0.0f}; /* d = lane + 32 c, D <= 128 */
    for (int64_t i = i0; i < i1; i++) {
        const int64_t j = suffix_key(sk, p, i);
        const float s = warp_dot(qp, kb + j * kvstride, D, lane) * scale_log2;
        const float m_new = fmaxf(m, s), alpha = exp2f(m - m_new), pr = exp2f(s - m_new);
        l = l * alpha + pr;
        for (int c = 0; c < 4 && lane + 32 * c < D; c++)
            o[c] = o[c] * alpha + pr * act_f32(vb[j * kvstride + lane + 32 * c]);
        m = m_new;
    }
    const int64_t slot = (bh * rows + r) * parts.splits + split;
    for (int c = 0; c < 4 && lane + 32 * c < D; c++) parts.o[slot * D + lane + 32 * c] = o[c];
    if (lane == 0) {
        parts.ml[2 * slot] = m;
        parts.ml[2 * slot + 1] = l;
    }
}

template <typename E>
__global__ void __launch_bounds__(kSuffixThreads)
    suffix_forward_combine_kernel(E *out, float *lse, SuffixParts parts, int64_t T, int64_t Hq, int64_t D,
                                  int64_t L, int64_t BH) {
    const int lane = threadIdx.x & 31;
    const int64_t w = (int64_t)blockIdx.x * (kSuffixThreads / 32) + (threadIdx.x >> 5);
    const int64_t rows = T - L, bh = w / rows, r = w % rows;
    if (bh >= BH) return; /* whole warps leave together */
    const int64_t b = bh / Hq, h = bh % Hq, p = L + r, slot0 = (bh * rows + r) * parts.splits;
    float mx = -INFINITY;
    for (int64_t s = 0; s < parts.splits; s++) mx = fmaxf(mx, parts.ml[2 * (slot0 + s)]);
    float l = 0.0f, o[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int64_t s = 0; s < parts.splits; s++) {
        const float ms = parts.ml[2 * (slot0 + s)];
        if (ms == -INFINITY) continue; /* a split past the row's keys */
        const float f = exp2f(ms - mx);
        l += parts.ml[2 * (slot0 + s) + 1] * f;
        for (int c = 0; c < 4 && lane + 32 * c < D; c++) o[c] += parts.o[(slot0 + s) * D + lane + 32 * c] * f;
    }
    E *op = out + (b * T * Hq + h) * D + p * Hq * D;
    const float inv = 1.0f / l;
    for (int c = 0; c < 4 && lane + 32 * c < D; c++) op[lane + 32 * c] = act_from_f32<E>(o[c] * inv);
    if (lane == 0) lse[bh * T + p] = mx * kLn2 + logf(l);
}

template <typename E>
static void suffix_forward(E *out, float *lse, const E *q, const E *k, const E *v, const int32_t *sel, int64_t B,
                           int64_t T, int64_t Hq, int64_t Hkv, int64_t D, const RefreshMask *m) {
    const int per_row = refresh_per_row(m);
    const int64_t L = m->L, rows = T - L, ks = refresh_num_selected(m), BH = B * Hq;
    const int64_t W = per_row ? refresh_row_width(m, T) : 0, per = per_row ? refresh_sel_len(m, T) : ks;
    /* the longest key list a row can have: a full record sees every key */
    const int64_t max_keys = per_row ? T : ks + rows;
    SuffixParts parts;
    parts.splits = (max_keys + kSplitKeys - 1) / kSplitKeys;
    int64_t slots, floats;
    if (i64_mul(BH, rows, &slots) || i64_mul(slots, parts.splits, &slots) || i64_mul(slots, D + 2, &floats) ||
        floats > INT64_MAX / (int64_t)sizeof(float)) {
        fprintf(stderr, "kvcpt: attention suffix rows: B*Hq=%lld x %lld rows x %lld splits overflows\n",
                (long long)BH, (long long)rows, (long long)parts.splits);
        exit(1);
    }
    float *scratch;
    CUDA_CHECK(cudaMallocAsync((void **)&scratch, sizeof(float) * (size_t)floats, 0));
    parts.o = scratch;
    parts.ml = scratch + slots * D;
    const int64_t warps = rows * parts.splits, per_block = kSuffixThreads / 32;
    suffix_forward_part_kernel<E><<<dim3(ceil_div_u(warps, per_block), (unsigned int)BH), kSuffixThreads>>>(
        parts, q, k, v, sel, T, Hq, Hkv, D, L, ks, W, per, kLog2e / sqrtf((float)D));
    CUDA_CHECK_LAUNCH();
    suffix_forward_combine_kernel<E><<<ceil_div_u(BH * rows, per_block), kSuffixThreads>>>(out, lse, parts, T, Hq, D,
                                                                                            L, BH);
    CUDA_CHECK_LAUNCH();
    CUDA_CHECK(cudaFreeAsync(scratch, 0));
}

extern "C" void attention_mma_suffix_forward_cuda(float *out, float *lse, const float *q, const float *k,
                                                  const float *v, const int32_t *sel, int64_t B, int64_t T, int64_t Hq,
                                                  int64_t Hkv, int64_t D, const RefreshMask *m) {
    suffix_forward(out, lse, q, k, v, sel, B, T, Hq, Hkv, D, m);
}

extern "C" void attention_mma_suffix_forward_bf16_cuda(bf16 *out, float *lse, const bf16 *q, const bf16 *k,
                                                       const bf16 *v, const int32_t *sel, int64_t B, int64_t T,
                                                       int64_t Hq, int64_t Hkv, int64_t D, const RefreshMask *m) {
    suffix_forward(out, lse, q, k, v, sel, B, T, Hq, Hkv, D, m);
}
