/* The RefreshKV selection on the GPU (attention_refresh_select_cuda and its
 * bf16 twin, kernels/attention.h): the twin of attention_refresh_select_cpu.
 *
 * Scores: query n-1 over keys 0..n-1 (n = L at the end of the prefill,
 * n = p + 1 at a full row p), on a grid wide enough to fill the GPU: one
 * block per (batch row, KV head, query head of the group, chunk of
 * ATTN_SELECT_CHUNK_KEYS keys) takes the chunk's dot products and its
 * softmax statistics (max, sum); one block per (batch row, KV head, chunk)
 * then combines each head's statistics in chunk order into its softmax and
 * aggregates the group's heads, and another max-pools the aggregate. The
 * chunks depend on n alone, so the bits do not depend on the GPU or on the
 * block order. The paper mask keeps the largest on (batch row, KV head,
 * chunk) blocks too (select_topk); the per-row records on one block per
 * (batch row, KV head) and row.
 *
 * Top-k without a sort: the k-th largest pooled score is found by a radix
 * select over its float bits, a byte at a time (probabilities are >= 0 and
 * order like their bits), then the positions above it, and as many equal to
 * it as are still wanted, are taken by an ordered block scan. Ties go to the lower position
 * for the selection (the CPU's top-K) or to the higher one for what a listed
 * row keeps of it (the eval cache evicts the lowest score, the lower
 * position first). Exact and deterministic.
 *
 * Per-row records (evict or restride): the rows from L on are walked epoch
 * by epoch (an epoch starts at L or after a full row); an epoch's selection
 * is computed once, and each of its rows keeps the best c of it, c from the
 * budget, in ascending position, followed by its local keys: a block per
 * (batch row, KV head, row), the rows being independent. */
#include <stdint.h>

#include "act_io.cuh"
#include "cuda_common.cuh"
#include "cuda_reduce.cuh"

extern "C" {
#include "attention.h"
#include "attention_cuda_size.h"
#include "attention_rows.h"
#include "attention_shape.cuh"
}

static constexpr int kSelectThreads = 1024;

/* One chunk of keys [c K, c K + K), K = chunk_keys, c = blockIdx.y, of
 * head g*group + hh's scores of query n-1, blockIdx.x = (b, g, hh):
 * scores[blk, j] = scale q.k_j (one warp per key), and stats[blk, c] =
 * (max m_c, sum over the chunk of e^(s_j - m_c)), a fixed-tree block sum. */
template <typename E>
__global__ void select_scores_kernel(float *scores, float *stats, const E *q, const E *k, int64_t T, int64_t Hq,
                                     int64_t Hkv, int64_t D, int64_t n, int64_t nh, int64_t group, float scale,
                                     int64_t chunk_keys) {
    const int64_t blk = blockIdx.x, hh = blk % nh, bg = blk / nh, g = bg % Hkv, b = bg / Hkv;
    const int64_t h = g * group + hh, c = blockIdx.y, chunks = gridDim.y;
    const int64_t j_begin = c * chunk_keys, j_end = j_begin + chunk_keys < n ? j_begin + chunk_keys : n;
    const E *qrow = q + ((b * T + n - 1) * Hq + h) * D;
    float *pr = scores + blk * n;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    float mx = -INFINITY;
    for (int64_t j0 = j_begin; j0 < j_end; j0 += warps) { /* block-uniform bounds: all warps shuffle together */
        const int64_t j = j0 + warp;
        float acc = 0.0f;
        if (j < j_end) {
            const E *krow = k + ((b * T + j) * Hkv + g) * D;
            for (int64_t d = lane; d < D; d += 32) acc = fmaf(act_f32(qrow[d]), act_f32(krow[d]), acc);
        }
        const float sj = warp_sum(acc) * scale;
        if (j < j_end) {
            if (lane == 0) pr[j] = sj;
            mx = fmaxf(mx, sj);
        }
    }
    mx = block_max(mx); /* also orders the writes above before the reads below */
    float sum = 0.0f;
    for (int64_t j = j_begin + threadIdx.x; j < j_end; j += blockDim.x) sum += expf(pr[j] - mx);
    sum = block_sum(sum);
    if (threadIdx.x == 0) {
        stats[(blk * chunks + c) * 2] = mx;
        stats[(blk * chunks + c) * 2 + 1] = sum;
    }
}

/* agg[bg, j] for the keys j of chunk blockIdx.y, blockIdx.x = bg: each of
 * the group's nh heads' probability e^(s_j - M) / Z, M = max_c m_c and Z =
 * sum_c l_c e^(m_c - M) in chunk order, aggregated over the heads in order
 * (max, or their sum over group for the mean). kBug plants the test's bug. */
template <int kBug>
__global__ void select_aggregate_kernel(float *agg, const float *scores, const float *stats, int64_t n, int64_t nh,
                                        int64_t group, int agg_kind, int64_t chunk_keys) {
    extern __shared__ float mz[]; /* (M, Z) per head */
    const int64_t bg = blockIdx.x, c = blockIdx.y, chunks = gridDim.y;
    const int64_t j_begin = c * chunk_keys, j_end = j_begin + chunk_keys < n ? j_begin + chunk_keys : n;
    for (int64_t hh = threadIdx.x; hh < nh; hh += blockDim.x) {
        const float *st = stats + (bg * nh + hh) * chunks * 2;
        /* planted: the chunk normalised by its own statistics alone */
        const bool local = kBug == ATTN_SELECT_BUG_CHUNK_LOCAL;
        const int64_t i0 = local ? c : 0, i1 = local ? c + 1 : chunks;
        float M = -INFINITY, Z = 0.0f;
        for (int64_t i = i0; i < i1; i++) M = fmaxf(M, st[2 * i]);
        for (int64_t i = i0; i < i1; i++) Z += st[2 * i + 1] * expf(st[2 * i] - M);
        mz[2 * hh] = M;
        mz[2 * hh + 1] = Z;
    }
    __syncthreads();
    const float *pr = scores + bg * nh * n;
    for (int64_t j = j_begin + threadIdx.x; j < j_end; j += blockDim.x) {
        float x = expf(pr[j] - mz[0]) / mz[1];
        for (int64_t hh = 1; hh < nh; hh++) {
            const float y = expf(pr[hh * n + j] - mz[2 * hh]) / mz[2 * hh + 1];
            x = agg_kind == GROUP_AGG_MAX ? (y > x ? y : x) : x + y;
        }
        if (agg_kind == GROUP_AGG_MEAN) x /= (float)group;
        agg[bg * n + j] = x;
    }
}

/* pooled[bg, j] = bits of the max of agg[bg, j - radius .. j + radius], the
 * window clipped at the edges (scores >= 0 order like their bits). */
__global__ void select_pool_kernel(uint32_t *pooled, const float *agg, int64_t BG, int64_t n, int64_t radius) {
    GRID_STRIDE(i, BG * n) {
        const int64_t bg = i / n, j = i % n;
        const float *a = agg + bg * n;
        const int64_t lo = j - radius < 0 ? 0 : j - radius, hi = j + radius > n - 1 ? n - 1 : j + radius;
        float mx = a[lo];
        for (int64_t x = lo + 1; x <= hi; x++) mx = a[x] > mx ? a[x] : mx;
        pooled[i] = __float_as_uint(mx);
    }
}

/* Exclusive prefix sum of v over the block (1024 threads), and its total. */
__device__ int block_exclusive_scan(int v, int *total) {
    __shared__ int warp_part[32];
    __shared__ int block_total;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
    int incl = v;
    for (int o = 1; o < 32; o <<= 1) {
        const int up = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane >= o) incl += up;
    }
    __syncthreads(); /* an earlier call may still be reading warp_part */
    if (lane == 31) warp_part[warp] = incl;
    __syncthreads();
    if (warp == 0) {
        const int w = lane < nwarps ? warp_part[lane] : 0;
        int wi = w;
        for (int o = 1; o < 32; o <<= 1) {
            const int up = __shfl_up_sync(0xffffffffu, wi, o);
            if (lane >= o) wi += up;
        }
        if (lane < nwarps) warp_part[lane] = wi - w;
        if (lane == 31) block_total = wi;
    }
    __syncthreads();
    *total = block_total;
    return warp_part[warp] + incl - v;
}

/* The want largest of pb[j], j < n, among the eligible (elig NULL: all):
 * every one above kth and eq_take of the eq_total equal to it. kth is the
 * largest bits value u with #(eligible pb >= u) >= want: the want-th largest
 * when 1 <= want <= #eligible, all ones when want <= 0, 0 when want exceeds
 * #eligible. */
struct TopK {
    uint32_t kth;
    int64_t eq_take, eq_total;
};

/* One radix round's choice, by warp 0: h counts the values at the prefix
 * by their next digit (at shift); the lane whose digit holds the rest-th
 * largest sets the prefix extended by it, the rest still wanted within it
 * and its count; lane 31 sets found = whether the total reaches rest. */
__device__ void pick_digit(const int *h, uint32_t prefix, int shift, int64_t rest, uint32_t *o_prefix, int64_t *o_rest,
                           int64_t *o_eq, int *o_found) {
    const int lane = threadIdx.x % 32;
    /* lane l holds digits 255-8l down to 248-8l: its exclusive prefix over lanes counts the larger digits */
    int64_t mine = 0;
    for (int i = 0; i < 8; i++) mine += h[255 - 8 * lane - i];
    int64_t incl = mine;
    for (int o = 1; o < 32; o <<= 1) {
        const int64_t up = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane >= o) incl += up;
    }
    int64_t above = incl - mine;
    if (lane == 31) *o_found = incl >= rest; /* the total at this prefix */
    for (int i = 0; i < 8; i++) {
        const int d = 255 - 8 * lane - i, c = h[d];
        if (above < rest && above + c >= rest) {
            *o_prefix = prefix | ((uint32_t)d << shift);
            *o_rest = rest - above;
            *o_eq = c;
        }
        above += c;
    }
}

/* Radix select over the bits, 8 at a time from the top: each round counts
 * the eligible values that share the digits chosen so far into 256 bins of
 * the next digit (integer atomics: the counts do not depend on their order),
 * then one warp picks the digit holding the want-th largest. Four rounds of
 * two barriers where a bit at a time took 32 block sums; the barriers are
 * most of the selection's cost under the emulator. */
__device__ TopK block_topk(const uint32_t *pb, const unsigned char *elig, int64_t n, int64_t want) {
    __shared__ int hist[2][256];
    __shared__ uint32_t s_prefix;
    __shared__ int64_t s_rest, s_eq;
    __shared__ int s_found;
    if (want <= 0) return TopK{0xffffffffu, want, 0}; /* no value reaches all ones: nothing above or equal */
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    for (int i = threadIdx.x; i < 256; i += blockDim.x) hist[0][i] = 0;
    __syncthreads(); /* also: an earlier call may still be reading s_prefix, s_rest, s_found */
    uint32_t prefix = 0, known = 0; /* the digits chosen so far, and their bits */
    int64_t rest = want;             /* how many are still wanted at or below the prefix */
    for (int shift = 24, round = 0; shift >= 0; shift -= 8, round++) {
        int *h = hist[round & 1];
        for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
            if ((!elig || elig[j]) && (pb[j] & known) == prefix) atomicAdd(&h[(pb[j] >> shift) & 255u], 1);
        __syncthreads();
        if (warp == 0) {
            pick_digit(h, prefix, shift, rest, &s_prefix, &s_rest, &s_eq, &s_found);
            for (int i = lane; i < 256; i += 32) hist[(round + 1) & 1][i] = 0;
        }
        __syncthreads();
        if (!s_found) break; /* fewer eligible than wanted: only in the first round */
        prefix = s_prefix;
        rest = s_rest;
        known |= 255u << shift;
    }
    if (s_found) return TopK{prefix, rest, s_eq};
    /* want exceeds the eligible: every eligible value reaches 0 */
    int above = 0, equal = 0;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
        above += (!elig || elig[j]) && pb[j] > 0u;
        equal += (!elig || elig[j]) && pb[j] == 0u;
    }
    const int64_t n_above = block_sum(above), n_equal = block_sum(equal);
    return TopK{0u, want - n_above, n_equal};
}

/* Calls take(j, slot) for the positions j in [begin, end) of t in
 * ascending order, slot their rank in that order; equal ones from the
 * lowest position (ties_high = 0) or the highest (1). above and equal: how
 * many larger and equal ones lie before begin. Returns the slot after the
 * last taken.
 * One scan per block of positions counts the equal and the larger ones
 * together (16 bits each: at most 1024 per block), and a position's slot
 * follows from the two. */
template <typename F>
__device__ int64_t block_take(const uint32_t *pb, const unsigned char *elig, int64_t begin, int64_t end, int64_t above,
                              int64_t equal, TopK t, int ties_high, F take) {
    /* the equal ones taken are those whose rank among the equal lies in [eq_lo, eq_hi) */
    const int64_t eq_lo = ties_high ? t.eq_total - t.eq_take : 0, eq_hi = ties_high ? t.eq_total : t.eq_take;
    const int64_t eq_before = (equal < eq_hi ? equal : eq_hi) - eq_lo;
    int64_t written = above + (eq_before > 0 ? eq_before : 0), equal_seen = equal;
    for (int64_t c0 = begin; c0 < end; c0 += blockDim.x) {
        const int64_t j = c0 + threadIdx.x;
        const int ok = j < end && (!elig || elig[j]);
        const uint32_t bits = ok ? pb[j] : 0u;
        const int is_eq = ok && bits == t.kth, is_gt = ok && bits > t.kth;
        int total;
        const int before = block_exclusive_scan(is_eq | is_gt << 16, &total);
        const int64_t eq_rank = equal_seen + (before & 0xffff), eq_end = equal_seen + (total & 0xffff);
        const int64_t lo = eq_lo > equal_seen ? eq_lo : equal_seen;
        const int64_t eq_taken_before = (eq_rank < eq_hi ? eq_rank : eq_hi) - lo;
        const int64_t eq_taken_block = (eq_end < eq_hi ? eq_end : eq_hi) - lo;
        const int taken = is_gt || (is_eq && eq_rank >= eq_lo && eq_rank < eq_hi);
        if (taken) take(j, written + (before >> 16) + (eq_taken_before > 0 ? eq_taken_before : 0));
        written += (total >> 16) + (eq_taken_block > 0 ? eq_taken_block : 0);
        equal_seen = eq_end;
    }
    return written;
}

/* The paper's selection, per (b, g): the ks best of the pooled scores, ties
 * to the lower position, written in ascending order. The same radix select
 * as block_topk, spread over (b, g, chunk of ATTN_SELECT_CHUNK_KEYS keys)
 * blocks: per digit, each chunk's 256 counts (select_topk_hist_kernel), then
 * one block per (b, g) sums them over the chunks and picks the digit
 * (select_topk_digit_kernel); then each chunk counts its larger and equal
 * ones (select_topk_count_kernel) and takes its part at the slots that the
 * earlier chunks' counts leave it (select_topk_take_kernel). Integer counts
 * only: the same set, slots and bits as one block, in any block order. */
struct TopKState {
    uint32_t prefix, known; /* the digits chosen so far, and their bits */
    int64_t rest, eq;       /* how many are still wanted at the prefix; how many share it */
};

/* Round shift's counts of chunk blockIdx.y of row blockIdx.x = bg into
 * hist[bg, chunk, 256] (round 24: the first, nothing chosen yet). */
__global__ void select_topk_hist_kernel(int *hist, const TopKState *st, const uint32_t *pooled, int64_t L, int shift,
                                        int64_t chunk_keys) {
    __shared__ int h[256];
    const int64_t bg = blockIdx.x, c = blockIdx.y;
    const uint32_t prefix = shift == 24 ? 0u : st[bg].prefix, known = shift == 24 ? 0u : st[bg].known;
    const uint32_t *pb = pooled + bg * L;
    const int64_t j_end = c * chunk_keys + chunk_keys < L ? c * chunk_keys + chunk_keys : L;
    for (int i = threadIdx.x; i < 256; i += blockDim.x) h[i] = 0;
    __syncthreads();
    for (int64_t j = c * chunk_keys + threadIdx.x; j < j_end; j += blockDim.x)
        if ((pb[j] & known) == prefix) atomicAdd(&h[(pb[j] >> shift) & 255u], 1);
    __syncthreads();
    for (int i = threadIdx.x; i < 256; i += blockDim.x) hist[(bg * gridDim.y + c) * 256 + i] = h[i];
}

/* Round shift's digit for row blockIdx.x = bg from its chunks' counts,
 * summed in chunk order (kBug ATTN_SELECT_BUG_TOPK_LAST_CHUNK: the last
 * chunk's left out). */
template <int kBug>
__global__ void select_topk_digit_kernel(TopKState *st, const int *hist, int64_t chunks, int shift, int64_t want) {
    __shared__ int h[256];
    __shared__ uint32_t s_prefix;
    __shared__ int64_t s_rest, s_eq;
    __shared__ int s_found;
    const int64_t bg = blockIdx.x;
    const TopKState s = shift == 24 ? TopKState{0u, 0u, want, 0} : st[bg];
    const int64_t summed = kBug == ATTN_SELECT_BUG_TOPK_LAST_CHUNK && chunks > 1 ? chunks - 1 : chunks;
    for (int i = threadIdx.x; i < 256; i += blockDim.x) {
        int sum = 0;
        for (int64_t c = 0; c < summed; c++) sum += hist[(bg * chunks + c) * 256 + i];
        h[i] = sum;
    }
    /* ks < L keys: the total always reaches rest; were it short (a planted
     * bug), digit 0 and the rest kept leave the slots below ks */
    if (threadIdx.x == 0) s_prefix = s.prefix, s_rest = s.rest, s_eq = 0;
    __syncthreads();
    if (threadIdx.x < 32) pick_digit(h, s.prefix, shift, s.rest, &s_prefix, &s_rest, &s_eq, &s_found);
    __syncthreads();
    if (threadIdx.x == 0) st[bg] = TopKState{s_prefix, s.known | 255u << shift, s_rest, s_eq};
}

/* How many of chunk blockIdx.y of row blockIdx.x = bg are above the k-th
 * largest and equal to it: counts[bg, chunk, 2]. */
__global__ void select_topk_count_kernel(int *counts, const TopKState *st, const uint32_t *pooled, int64_t L,
                                         int64_t chunk_keys) {
    const int64_t bg = blockIdx.x, c = blockIdx.y;
    const uint32_t kth = st[bg].prefix, *pb = pooled + bg * L;
    const int64_t j_end = c * chunk_keys + chunk_keys < L ? c * chunk_keys + chunk_keys : L;
    int above = 0, equal = 0;
    for (int64_t j = c * chunk_keys + threadIdx.x; j < j_end; j += blockDim.x) {
        above += pb[j] > kth;
        equal += pb[j] == kth;
    }
    above = block_sum(above);
    equal = block_sum(equal);
    if (threadIdx.x == 0) counts[(bg * gridDim.y + c) * 2] = above, counts[(bg * gridDim.y + c) * 2 + 1] = equal;
}

/* Chunk blockIdx.y's part of row blockIdx.x = bg's selection, after the
 * larger and equal ones of the chunks before it. */
__global__ void select_topk_take_kernel(int32_t *sel, const TopKState *st, const int *counts, const uint32_t *pooled,
                                        int64_t L, int64_t ks, int64_t chunk_keys) {
    const int64_t bg = blockIdx.x, c = blockIdx.y;
    const TopKState s = st[bg];
    const int64_t j_begin = c * chunk_keys, j_end = j_begin + chunk_keys < L ? j_begin + chunk_keys : L;
    int64_t above = 0, equal = 0;
    for (int64_t i = 0; i < c; i++)
        above += counts[(bg * gridDim.y + i) * 2], equal += counts[(bg * gridDim.y + i) * 2 + 1];
    int32_t *out = sel + bg * ks;
    block_take(pooled + bg * L, nullptr, j_begin, j_end, above, equal, TopK{s.prefix, s.rest, s.eq}, 0,
               [&](int64_t j, int64_t slot) {
                   if (slot < ks) out[slot] = (int32_t)j; /* always, unless a planted bug miscounts */
               });
}

/* The records of one epoch's rows [since, last] per (b, g) (attention.h),
 * in two kernels: this one marks the selection from query n-1 over keys
 * 0..n-1 in chosen, one block per (b, g); full >= 0: the full row that
 * ends the epoch, recorded as n = 0. */
__global__ void select_chosen_kernel(int32_t *sel, const uint32_t *pooled, unsigned char *chosen, int64_t n, int64_t K,
                                     int64_t L, int64_t W, int64_t per, int64_t since, int64_t last, int64_t full) {
    const int64_t bg = blockIdx.x, nk = K < n ? K : n;
    int32_t *rec = sel + bg * per;
    if (full >= 0 && threadIdx.x == 0) rec[(full - L) * (1 + W)] = 0;
    if (last < since) return;
    const uint32_t *pb = pooled + bg * n;
    unsigned char *ch = chosen + bg * n;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) ch[j] = 0;
    __syncthreads();
    block_take(pb, nullptr, 0, n, 0, 0, block_topk(pb, nullptr, n, nk), 0, [&](int64_t j, int64_t) { ch[j] = 1; });
}

/* Then each row's best c of the chosen (c from the budget; equal scores
 * keep the higher position) in ascending order, then its local keys: one
 * block per (b, g) = blockIdx.x and row since + blockIdx.y (+ gridDim.y
 * ...), the rows being independent. */
__global__ void select_row_records_kernel(int32_t *sel, const uint32_t *pooled, const unsigned char *chosen, int64_t n,
                                          int64_t K, int evict, int64_t L, int64_t W, int64_t per, int64_t since,
                                          int64_t last) {
    const int64_t bg = blockIdx.x, nk = K < n ? K : n;
    int32_t *rec = sel + bg * per;
    const uint32_t *pb = pooled + bg * n;
    const unsigned char *ch = chosen + bg * n;
    for (int64_t p = since + blockIdx.y; p <= last; p += gridDim.y) {
        /* the budget: kept + local keys <= K with evict, the oldest local ones going last */
        int64_t c = nk, first_local = since;
        if (evict) {
            const int64_t room = K - (p - since);
            c = room < 0 ? 0 : (room < nk ? room : nk);
            if (p - since > K) first_local = p - K;
        }
        int32_t *row = rec + (p - L) * (1 + W);
        block_take(pb, ch, 0, n, 0, 0, block_topk(pb, ch, n, c), 1,
                   [&](int64_t j, int64_t slot) { row[1 + slot] = (int32_t)j; });
        for (int64_t i = threadIdx.x; i <= p - first_local; i += blockDim.x)
            row[1 + c + i] = (int32_t)(first_local + i);
        if (threadIdx.x == 0) row[0] = (int32_t)(c + p - first_local + 1);
    }
}

/* ks == L: every prefill position, in order. */
__global__ void select_all_kernel(int32_t *sel, int64_t BG, int64_t L) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < BG * L; i += (int64_t)gridDim.x * blockDim.x)
        sel[i] = (int32_t)(i % L);
}

/* ---------------------------------------------------------------- launchers */

/* Device scratch of one call, carved from one allocation of
 * attention_cuda_select_scratch_bytes (n: the most keys a selection sees). */
struct SelectScratch {
    float *scores, *agg; /* (BG, nh, n), (BG, n) */
    uint32_t *pooled; /* (BG, n) */
    float *stats; /* (BG, nh, chunks of n, 2) */
    unsigned char *chosen; /* (BG, n), per-row records only */
    void *base;
};

static SelectScratch select_scratch(const RefreshMask *m, int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t n) {
    const int64_t BG = B * Hkv, nh = refresh_selection_heads(m, Hq, Hkv);
    SelectScratch s;
    CUDA_CHECK(cudaMallocAsync(&s.base, (size_t)attention_cuda_select_scratch_bytes(m, B, T, Hq, Hkv), 0));
    s.scores = (float *)s.base;
    s.agg = s.scores + BG * nh * n;
    s.pooled = (uint32_t *)(s.agg + BG * n);
    s.stats = (float *)(s.pooled + BG * n);
    s.chosen = (unsigned char *)(s.stats + BG * nh * attention_select_chunks(n) * 2);
    return s;
}

/* The pooled group scores of query n-1 over keys 0..n-1 into s.pooled: the
 * chunks' scores, each head's softmax and the group's aggregate, the max
 * pool (kBug: a planted bug of the combine, for the tests). */
template <int kBug, typename E>
static void pooled_scores(const SelectScratch &s, const E *q, const E *k, int64_t B, int64_t T, int64_t Hq, int64_t Hkv,
                          int64_t D, int64_t n, const RefreshMask *m) {
    const int64_t group = Hq / Hkv, nh = refresh_selection_heads(m, Hq, Hkv), BG = B * Hkv;
    const int64_t chunks = attention_select_chunks(n);
    const dim3 heads_grid((unsigned int)(BG * nh), (unsigned int)chunks),
        group_grid((unsigned int)BG, (unsigned int)chunks);
    select_scores_kernel<E><<<heads_grid, 256>>>(s.scores, s.stats, q, k, T, Hq, Hkv, D, n, nh, group,
                                                 1.0f / sqrtf((float)D), (int64_t)ATTN_SELECT_CHUNK_KEYS);
    CUDA_CHECK_LAUNCH();
    const size_t mz_bytes = sizeof(float) * 2 * (size_t)nh;
    select_aggregate_kernel<kBug><<<group_grid, 256, mz_bytes>>>(s.agg, s.scores, s.stats, n, nh, group, (int)m->agg,
                                                                 (int64_t)ATTN_SELECT_CHUNK_KEYS);
    CUDA_CHECK_LAUNCH();
    select_pool_kernel<<<grid_for(BG * n, 256), 256>>>(s.pooled, s.agg, BG, n, m->pool_kernel / 2);
    CUDA_CHECK_LAUNCH();
}

/* The ks best of each row's L pooled scores into sel (BG, ks): four radix
 * rounds of a histogram and a digit kernel, then the count and take
 * kernels, over (BG, chunks) blocks (the digit kernel: BG). */
template <int kBug> static void select_topk(int32_t *sel, const uint32_t *pooled, int64_t BG, int64_t L, int64_t ks) {
    const int64_t chunks = attention_select_chunks(L), chunk_keys = ATTN_SELECT_CHUNK_KEYS;
    const dim3 grid((unsigned int)BG, (unsigned int)chunks);
    /* BG * chunks * 258 ints: about half the scores' scratch (BG * nh * L floats), so no overflow */
    const size_t hist_bytes = sizeof(int) * 256 * (size_t)(BG * chunks),
                 counts_bytes = sizeof(int) * 2 * (size_t)(BG * chunks);
    void *base;
    CUDA_CHECK(cudaMallocAsync(&base, hist_bytes + counts_bytes + sizeof(TopKState) * (size_t)BG, 0));
    int *hist = (int *)base, *counts = hist + 256 * BG * chunks;
    TopKState *st = (TopKState *)(counts + 2 * BG * chunks); /* 8-byte aligned: an even count of ints before */
    for (int shift = 24; shift >= 0; shift -= 8) {
        select_topk_hist_kernel<<<grid, 256>>>(hist, st, pooled, L, shift, chunk_keys);
        CUDA_CHECK_LAUNCH();
        select_topk_digit_kernel<kBug><<<(unsigned int)BG, 256>>>(st, hist, chunks, shift, ks);
        CUDA_CHECK_LAUNCH();
    }
    select_topk_count_kernel<<<grid, 256>>>(counts, st, pooled, L, chunk_keys);
    CUDA_CHECK_LAUNCH();
    select_topk_take_kernel<<<grid, 256>>>(sel, st, counts, pooled, L, ks, chunk_keys);
    CUDA_CHECK_LAUNCH();
    CUDA_CHECK(cudaFreeAsync(base, 0));
}

/* Per-row records: epoch by epoch from L (attention.h). */
template <int kBug, typename E>
static void select_rows(int32_t *sel, const E *q, const E *k, int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t D,
                        const RefreshMask *m) {
    const int64_t L = m->L, r = m->restride, BG = B * Hkv;
    const int64_t W = refresh_row_width(m, T), per = refresh_sel_len(m, T);
    SelectScratch s = select_scratch(m, B, T, Hq, Hkv, T);
    for (int64_t since = L; since < T;) {
        /* the epoch's rows since..last, then its full row (step p - L + 1 a multiple of r) */
        int64_t full = r > 0 ? since + r - 1 : -1;
        if (full > T - 1) full = -1;
        const int64_t last = full >= 0 ? full - 1 : T - 1, n = since; /* the selection saw keys 0..since-1 */
        if (last >= since) pooled_scores<kBug>(s, q, k, B, T, Hq, Hkv, D, n, m);
        select_chosen_kernel<<<(unsigned int)BG, kSelectThreads>>>(sel, s.pooled, s.chosen, n, m->K, L, W, per, since,
                                                                   last, full);
        CUDA_CHECK_LAUNCH();
        if (last >= since) {
            const int64_t rows = last - since + 1;
            const dim3 grid((unsigned int)BG, (unsigned int)(rows < 65535 ? rows : 65535));
            select_row_records_kernel<<<grid, kSelectThreads>>>(sel, s.pooled, s.chosen, n, m->K, m->evict, L, W, per,
                                                                since, last);
            CUDA_CHECK_LAUNCH();
        }
        if (full < 0) break;
        since = full + 1;
    }
    CUDA_CHECK(cudaFreeAsync(s.base, 0));
}

template <int kBug, typename E>
static void refresh_select(int32_t *sel, const E *q, const E *k, int64_t B, int64_t T, int64_t Hq, int64_t Hkv,
                           int64_t D, const RefreshMask *m, const char *fn) {
    attention_check_gather_shape(fn, B, T, Hq, Hkv, D);
    refresh_mask_validate(m, fn);
    if (!refresh_active(m, T)) {
        fprintf(stderr, "kvcpt: %s: the mask is not active (enabled=%d, T=%lld, L=%lld)\n", fn, m->enabled,
                (long long)T, (long long)m->L);
        exit(1);
    }
    const int64_t L = m->L, ks = refresh_num_selected(m), BG = B * Hkv, n_max = refresh_per_row(m) ? T : L;
    if (attention_select_chunks(n_max) > 65535) { /* the score kernels' grid y dimension */
        fprintf(stderr, "kvcpt: %s: %lld keys exceed 65535 chunks of %d\n", fn, (long long)n_max,
                ATTN_SELECT_CHUNK_KEYS);
        exit(1);
    }
    if (BG == 0) return;
    if (refresh_per_row(m)) {
        select_rows<kBug>(sel, q, k, B, T, Hq, Hkv, D, m);
        return;
    }
    if (ks == L) { /* every prefill key: no scores needed */
        select_all_kernel<<<grid_for(BG * L, 256), 256>>>(sel, BG, L);
        CUDA_CHECK_LAUNCH();
        return;
    }
    SelectScratch s = select_scratch(m, B, T, Hq, Hkv, L);
    pooled_scores<kBug>(s, q, k, B, T, Hq, Hkv, D, L, m);
    select_topk<kBug>(sel, s.pooled, BG, L, ks);
    CUDA_CHECK(cudaFreeAsync(s.base, 0));
}

extern "C" void attention_refresh_select_cuda(int32_t *sel, const float *q, const float *k, int64_t B, int64_t T,
                                              int64_t Hq, int64_t Hkv, int64_t D, const RefreshMask *m) {
    refresh_select<ATTN_SELECT_OK>(sel, q, k, B, T, Hq, Hkv, D, m, "attention_refresh_select_cuda");
}

extern "C" void attention_refresh_select_bf16_cuda(int32_t *sel, const bf16 *q, const bf16 *k, int64_t B, int64_t T,
                                                   int64_t Hq, int64_t Hkv, int64_t D, const RefreshMask *m) {
    refresh_select<ATTN_SELECT_OK>(sel, q, k, B, T, Hq, Hkv, D, m, "attention_refresh_select_bf16_cuda");
}

extern "C" void attention_refresh_select_planted_cuda(int32_t *sel, const float *q, const float *k, int64_t B,
                                                      int64_t T, int64_t Hq, int64_t Hkv, int64_t D,
                                                      const RefreshMask *m, int bug) {
    const char *fn = "attention_refresh_select_planted_cuda";
    if (bug == ATTN_SELECT_BUG_CHUNK_LOCAL)
        refresh_select<ATTN_SELECT_BUG_CHUNK_LOCAL>(sel, q, k, B, T, Hq, Hkv, D, m, fn);
    else if (bug == ATTN_SELECT_BUG_TOPK_LAST_CHUNK)
        refresh_select<ATTN_SELECT_BUG_TOPK_LAST_CHUNK>(sel, q, k, B, T, Hq, Hkv, D, m, fn);
    else refresh_select<ATTN_SELECT_OK>(sel, q, k, B, T, Hq, Hkv, D, m, fn);
}
