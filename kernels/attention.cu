/* Causal GQA attention with the RefreshKV mask on the GPU: the twin of
 * kernels/attention.c (docs/model.md), fp32 in and out, fp32 arithmetic.
 *
 * Design (a first, readable version rather than a fast one):
 *
 * - Flash style. A block owns a 64-row query tile of one (batch, query head)
 *   and walks 64-key tiles, both staged in shared memory, with an online
 *   softmax; the forward pass saves lse = m + log(l) per row, and the backward
 *   recomputes P = exp(S - lse) from it. Nothing of size T x T exists, only
 *   the (B, Hq, T) lse and Dq = rowsum(dout * out).
 * - Key lists. A causal row p sees keys 0..p. A RefreshKV row p >= L sees the
 *   list sel[0..ks-1] ++ (L..T-1), cut at position p; since sel is ascending
 *   and below L, "list entry's position <= p" is the visibility test in both
 *   cases, and the same tile kernel serves both: the causal rows run over the
 *   identity list, the (few) refresh rows over the gathered list.
 * - Per-row records (evict, restride: each row >= L its own keys). The rows
 *   >= L run over the identity list too, and a bitmap per row (one bit per
 *   key, built from the records) is the extra visibility test; a 64-key
 *   tile is one word per row, and a tile no row of the block sees is
 *   skipped. Keys stay in ascending order, so a row that sees every key
 *   0..p (a full row; restride 1) repeats the causal arithmetic.
 * - Row results do not depend on the tiling of the queries: a row's scores,
 *   its per-tile max / sum trees and its accumulation order over keys depend
 *   only on the row and on the key tiles, and a key tile with nothing visible
 *   is an exact no-op (alpha = 1, p = 0). With K = L the gathered list is the
 *   identity, so masked and unmasked runs give the same bits (tested).
 * - Backward without atomics: dQ by a row-tile kernel (like the forward);
 *   dK/dV by a key-tile kernel, one block per (batch, KV head, 64 keys), that
 *   loops over the group's query heads (in order) and over query tiles (in
 *   order), so every dK/dV element is one thread's sequential sum. Refresh
 *   rows take part through a visibility test (a key < L is visible to rows
 *   >= L when it is selected, or by the row's bitmap with per-row records),
 *   so a selected key's causal and refresh terms land in one fixed order
 *   too.
 * - The suffix rows for the tensor-core path (attention_forward_rows_cuda):
 *   B * Hq row tiles are too few blocks for the GPU, so each row's key list
 *   is cut into chunks (attention_suffix_chunk_keys), a block per (row
 *   tile, head, chunk) runs the same tile loop over its chunk and leaves
 *   the rows' (max, sum, unnormalised output) partials, and a warp per row
 *   combines them in chunk order; no atomics, so any block order gives the
 *   same bits. The whole-T entries keep one block per row tile.
 * - GQA: query head h reads KV head h / (Hq/Hkv) in place; nothing is copied.
 *
 * Tiles: Br = Bc = 64 and 256 threads as a 16 x 16 grid; each thread owns a
 * 4 x 4 block of a score tile and 4 rows x D/16 columns of an accumulator.
 * Shared rows are padded to D + 1 floats so that the 16 key rows read in one
 * score step fall in distinct banks. At D = 128 the dK/dV kernel needs 163 KiB
 * of shared memory (K, V, Q, dO tiles plus P and dS), within sm_90's 227 KiB.
 * 64-bit offsets throughout: B*T*Hq*D overflows int32 at 8B shapes. */
#include <stdint.h>

#include <type_traits>

#include "act_io.cuh"
#include "cuda_common.cuh"
#include "cuda_reduce.cuh"

extern "C" {
#include "attention.h"
#include "attention_cuda_size.h"
#include "attention_rows.h"
#include "attention_shape.cuh"
}

static constexpr int kTile = 64;      /* Br = Bc: query rows and keys per tile */
static constexpr int kThreads = 256;  /* a 16 x 16 thread grid */
static constexpr int kGrid = 16;
static constexpr int kPerThread = kTile / kGrid;       /* 4 rows (or keys) per thread */
static constexpr int kRowsPerWarp = kTile / (kThreads / 32); /* 8: softmax rows owned by a warp */
static constexpr int kLdS = kTile + 1;                 /* padded score-tile row */

/* Shapes shared by the kernels (passed by value). */
struct AttnShape {
    int64_t B, T, Hq, Hkv, group;
    int64_t L;  /* first refresh row when active, else T */
    int64_t ks; /* selected keys per (batch row, KV head); 0 when inactive */
    int active;
    int per_row;   /* the rows >= L read their visibility bitmaps (evict, restride) */
    int64_t words; /* 64-bit words per bitmap row: ceil(T / 64) */
    float scale;
};

/* A row tile's key list: the identity, or sel ++ (L..T-1) for refresh rows. */
struct KeyList {
    const int32_t *sel; /* NULL: identity */
    int64_t ks, L, n;
};

__device__ __forceinline__ int64_t key_position(const KeyList &kl, int64_t i) {
    if (kl.sel == nullptr) return i;
    return i < kl.ks ? (int64_t)kl.sel[i] : kl.L + (i - kl.ks);
}

/* Row pitch of a staged (64, D) tile. */
template <int D> __device__ __forceinline__ constexpr int ld() { return D + 1; }

/* dst[r][d] = row pos[r] of a (T, H, D) tensor (base at (b, 0, head)), or 0
 * when pos[r] < 0; zero rows keep 0 * (finite) = 0 in the products. */
template <int D, typename E>
__device__ void load_tile(float *dst, const E *base, int64_t row_stride, const int64_t *pos) {
    for (int idx = threadIdx.x; idx < kTile * D; idx += kThreads) {
        const int r = idx / D, d = idx % D;
        const int64_t p = pos[r];
        dst[r * ld<D>() + d] = p >= 0 ? act_f32(base[p * row_stride + d]) : 0.0f;
    }
}

/* acc[i][j] = sum_d A[ty + 16i][d] * Bt[tx + 16j][d], d ascending. */
template <int D>
__device__ __forceinline__ void tile_dot(float acc[kPerThread][kPerThread], const float *A, const float *Bt, int ty,
                                         int tx) {
#pragma unroll
    for (int i = 0; i < kPerThread; i++)
#pragma unroll
        for (int j = 0; j < kPerThread; j++) acc[i][j] = 0.0f;
#pragma unroll 4
    for (int d = 0; d < D; d++) {
        float a[kPerThread], b[kPerThread];
#pragma unroll
        for (int i = 0; i < kPerThread; i++) a[i] = A[(ty + kGrid * i) * ld<D>() + d];
#pragma unroll
        for (int j = 0; j < kPerThread; j++) b[j] = Bt[(tx + kGrid * j) * ld<D>() + d];
#pragma unroll
        for (int i = 0; i < kPerThread; i++)
#pragma unroll
            for (int j = 0; j < kPerThread; j++) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    }
}

/* Accumulator columns per thread: d = tx + 16j, j < kCols (D = 8 leaves half idle). */
template <int D> struct Cols {
    static constexpr int n = (D + kGrid - 1) / kGrid;
};

/* The way back for a thread's accumulator (rows ty + 16i, columns tx +
 * 16j): row r to base + pos[r] * row_stride, rows with pos < 0 skipped,
 * divided by div[r] when div is given (the forward's softmax sums). */
template <int D, typename E>
__device__ __forceinline__ void store_tile(E *base, int64_t row_stride, const int64_t *pos,
                                           const float (&acc)[kPerThread][Cols<D>::n], const float *div, int ty,
                                           int tx) {
#pragma unroll
    for (int i = 0; i < kPerThread; i++) {
        const int r = ty + kGrid * i;
        if (pos[r] < 0) continue;
        E *row = base + pos[r] * row_stride;
#pragma unroll
        for (int j = 0; j < Cols<D>::n; j++) {
            const int d = tx + kGrid * j;
            if (d < D) row[d] = act_from_f32<E>(div ? acc[i][j] / div[r] : acc[i][j]);
        }
    }
}

/* acc[i][j] += sum_c W[row_i][c] * X[c][d_j], c ascending, rows row_i = ty + 16i
 * of the (64, 65) weight tile W and columns of the staged (64, D) tile X. */
template <int D>
__device__ __forceinline__ void tile_accumulate(float acc[kPerThread][Cols<D>::n], const float *W, const float *X,
                                                int ty, int tx) {
#pragma unroll 4
    for (int c = 0; c < kTile; c++) {
        float w[kPerThread];
#pragma unroll
        for (int i = 0; i < kPerThread; i++) w[i] = W[(ty + kGrid * i) * kLdS + c];
#pragma unroll
        for (int j = 0; j < Cols<D>::n; j++) {
            const int d = tx + kGrid * j;
            const float x = d < D ? X[c * ld<D>() + d] : 0.0f;
#pragma unroll
            for (int i = 0; i < kPerThread; i++) acc[i][j] = fmaf(w[i], x, acc[i][j]);
        }
    }
}

/* Column-major variant for dK/dV: acc[i][j] += sum_r W[r][key_i] * X[r][d_j],
 * r ascending, keys key_i = ty + 16i. */
template <int D>
__device__ __forceinline__ void tile_accumulate_t(float acc[kPerThread][Cols<D>::n], const float *W, const float *X,
                                                  int ty, int tx) {
#pragma unroll 4
    for (int r = 0; r < kTile; r++) {
        float w[kPerThread];
#pragma unroll
        for (int i = 0; i < kPerThread; i++) w[i] = W[r * kLdS + ty + kGrid * i];
#pragma unroll
        for (int j = 0; j < Cols<D>::n; j++) {
            const int d = tx + kGrid * j;
            const float x = d < D ? X[r * ld<D>() + d] : 0.0f;
#pragma unroll
            for (int i = 0; i < kPerThread; i++) acc[i][j] = fmaf(w[i], x, acc[i][j]);
        }
    }
}

/* The row tile a block owns and its key list. Row tiles run in reverse so
 * that the long causal tiles start first. */
struct RowTile {
    int64_t b, h, g, q0, p_last;
    KeyList keys;
};

__device__ RowTile row_tile(const AttnShape &s, const int32_t *sel, int64_t row_begin, int64_t row_end, int use_sel) {
    RowTile t;
    t.b = blockIdx.y / s.Hq;
    t.h = blockIdx.y % s.Hq;
    t.g = t.h / s.group;
    t.q0 = row_begin + (int64_t)(gridDim.x - 1 - blockIdx.x) * kTile;
    t.p_last = (t.q0 + kTile < row_end ? t.q0 + kTile : row_end) - 1;
    if (use_sel) t.keys = KeyList{sel + (t.b * s.Hkv + t.g) * s.ks, s.ks, s.L, s.ks + (t.p_last - s.L + 1)};
    else t.keys = KeyList{nullptr, 0, 0, t.p_last + 1};
    return t;
}

/* Shared layout of the row-tile kernels: positions and the rows' bitmap
 * words first (8-byte aligned). */
template <int D> struct RowSmem {
    static constexpr size_t fwd_bytes =
        sizeof(int64_t) * 3 * kTile + sizeof(float) * (3 * kTile * (D + 1) + kTile * kLdS + 2 * kTile);
    static constexpr size_t dq_bytes =
        sizeof(int64_t) * 3 * kTile + sizeof(float) * (4 * kTile * (D + 1) + kTile * kLdS + 2 * kTile);
    static constexpr size_t dkdv_bytes = sizeof(int64_t) * 3 * kTile + sizeof(int) * kTile +
                                         sizeof(float) * (4 * kTile * (D + 1) + 2 * kTile * kLdS + 2 * kTile);
};

/* One online-softmax step for the 8 rows a warp owns: Ps holds the tile's
 * scaled scores (-inf where hidden) and becomes exp(s - m_new); alpha_s gets
 * each row's rescale factor for the output accumulator. */
__device__ __forceinline__ void online_softmax_step(float *Ps, float *alpha_s, float m_row[kRowsPerWarp],
                                                    float l_row[kRowsPerWarp], int warp, int lane) {
#pragma unroll
    for (int rr = 0; rr < kRowsPerWarp; rr++) {
        const int r = warp * kRowsPerWarp + rr;
        const float a = Ps[r * kLdS + lane], c = Ps[r * kLdS + lane + 32];
        const float m_new = fmaxf(m_row[rr], warp_max(fmaxf(a, c)));
        float pa = 0.0f, pc = 0.0f, alpha = 1.0f;
        if (m_new != -INFINITY) { /* else nothing visible yet: the row stays empty */
            pa = expf(a - m_new);
            pc = expf(c - m_new);
            alpha = m_row[rr] == m_new ? 1.0f : expf(m_row[rr] - m_new);
        }
        const float sum = warp_sum(pa + pc);
        l_row[rr] = fmaf(alpha, l_row[rr], sum);
        m_row[rr] = m_new;
        Ps[r * kLdS + lane] = pa;
        Ps[r * kLdS + lane + 32] = pc;
        if (lane == 0) alpha_s[r] = alpha;
    }
}

/* The bitmap word of row qp (>= L, or -1: none) for the keys k0..k0+63,
 * k0 a multiple of 64 (rowmask: (B*Hkv, T - L, words), attention_row_mask). */
__device__ __forceinline__ uint64_t row_word(const uint64_t *rowmask, const AttnShape &s, int64_t bg, int64_t qp,
                                             int64_t k0) {
    return qp < s.L ? 0ull : rowmask[(bg * (s.T - s.L) + qp - s.L) * s.words + k0 / kTile];
}

/* The key tile at i0 of a row tile: its positions into kpos and, with the
 * bitmaps, each row's word into rowbits. Returns whether any key of the
 * tile is visible to a row of it; a tile with none is skipped (an exact
 * no-op anyway). Every thread calls it. */
__device__ __forceinline__ int stage_key_tile(int64_t *kpos, uint64_t *rowbits, const int64_t *qpos, const RowTile &t,
                                              const AttnShape &s, const uint64_t *rowmask, int64_t i0) {
    const int tid = threadIdx.x;
    if (tid < kTile) kpos[tid] = i0 + tid < t.keys.n ? key_position(t.keys, i0 + tid) : -1;
    if (rowmask == nullptr) {
        __syncthreads();
        return 1;
    }
    uint64_t w = 0;
    if (tid < kTile) rowbits[tid] = w = row_word(rowmask, s, t.b * s.Hkv + t.g, qpos[tid], i0);
    return __syncthreads_or(w != 0);
}

/* Where the split suffix forward leaves a chunk's partials: part holds
 * (B*Hq, rows, chunks, D + 2) fp32, (m, l, o[0..D-1]) per row and chunk,
 * rows counted from row_begin; o is not yet divided by l. */
struct SuffixParts {
    float *part;
    int64_t chunk_keys, chunks, rows;
};

/* The forward of one row tile over the key list entries [i_begin, i_end)
 * (a multiple of 64 apart, or up to the list's end). Without parts: out
 * and lse; with them (kPartial): the row's (m, l, o) for chunk blockIdx.z. */
template <int D, typename E, bool kPartial>
__device__ __forceinline__ void forward_tile(E *out, float *lse, const E *q, const E *k, const E *v, const int32_t *sel,
                                             const AttnShape &s, int64_t row_begin, int64_t row_end, int use_sel,
                                             const uint64_t *rowmask, const SuffixParts &parts) {
    extern __shared__ __align__(16) unsigned char smem[];
    int64_t *qpos = (int64_t *)smem, *kpos = qpos + kTile;
    uint64_t *rowbits = (uint64_t *)(kpos + kTile);
    float *Qs = (float *)(rowbits + kTile), *Ks = Qs + kTile * ld<D>(), *Vs = Ks + kTile * ld<D>();
    float *Ps = Vs + kTile * ld<D>(), *alpha_s = Ps + kTile * kLdS, *l_s = alpha_s + kTile;
    const int tid = threadIdx.x, ty = tid / kGrid, tx = tid % kGrid, warp = tid / 32, lane = tid % 32;
    const RowTile t = row_tile(s, sel, row_begin, row_end, use_sel);
    const int64_t qstride = s.Hq * D, kvstride = s.Hkv * D;
    const E *kb = k + (t.b * s.T * s.Hkv + t.g) * D, *vb = v + (t.b * s.T * s.Hkv + t.g) * D;

    if (tid < kTile) qpos[tid] = t.q0 + tid <= t.p_last ? t.q0 + tid : -1;
    __syncthreads();
    load_tile<D>(Qs, q + (t.b * s.T * s.Hq + t.h) * D, qstride, qpos);

    float o[kPerThread][Cols<D>::n] = {};
    float m_row[kRowsPerWarp], l_row[kRowsPerWarp];
#pragma unroll
    for (int rr = 0; rr < kRowsPerWarp; rr++) m_row[rr] = -INFINITY, l_row[rr] = 0.0f;

    int64_t i_begin = 0, i_end = t.keys.n;
    if (kPartial) {
        i_begin = (int64_t)blockIdx.z * parts.chunk_keys;
        i_end = i_begin + parts.chunk_keys < t.keys.n ? i_begin + parts.chunk_keys : t.keys.n;
    }
    for (int64_t i0 = i_begin; i0 < i_end; i0 += kTile) {
        __syncthreads(); /* the previous tile's readers are done */
        if (!stage_key_tile(kpos, rowbits, qpos, t, s, rowmask, i0)) continue;
        load_tile<D>(Ks, kb, kvstride, kpos);
        load_tile<D>(Vs, vb, kvstride, kpos);
        __syncthreads();
        float acc[kPerThread][kPerThread];
        tile_dot<D>(acc, Qs, Ks, ty, tx);
#pragma unroll
        for (int i = 0; i < kPerThread; i++)
#pragma unroll
            for (int j = 0; j < kPerThread; j++) {
                const int r = ty + kGrid * i, c = tx + kGrid * j;
                const bool vis =
                    qpos[r] >= 0 && kpos[c] >= 0 && kpos[c] <= qpos[r] && (rowmask == nullptr || (rowbits[r] >> c & 1));
                Ps[r * kLdS + c] = vis ? acc[i][j] * s.scale : -INFINITY;
            }
        __syncthreads();
        online_softmax_step(Ps, alpha_s, m_row, l_row, warp, lane);
        __syncthreads();
#pragma unroll
        for (int i = 0; i < kPerThread; i++) {
            const float alpha = alpha_s[ty + kGrid * i];
#pragma unroll
            for (int j = 0; j < Cols<D>::n; j++) o[i][j] *= alpha;
        }
        tile_accumulate<D>(o, Ps, Vs, ty, tx);
    }

    if (kPartial) {
        /* the row's slot for this chunk: (m, l) by the warp's lane 0, o by the tile's owners */
        const int64_t row0 = (t.b * s.Hq + t.h) * parts.rows - row_begin;
        const int64_t pitch = (int64_t)(D + 2), chunk = blockIdx.z;
        if (lane == 0)
#pragma unroll
            for (int rr = 0; rr < kRowsPerWarp; rr++) {
                const int r = warp * kRowsPerWarp + rr;
                if (qpos[r] < 0) continue;
                float *slot = parts.part + ((row0 + qpos[r]) * parts.chunks + chunk) * pitch;
                slot[0] = m_row[rr];
                slot[1] = l_row[rr];
            }
#pragma unroll
        for (int i = 0; i < kPerThread; i++) {
            const int r = ty + kGrid * i;
            if (qpos[r] < 0) continue;
            float *slot = parts.part + ((row0 + qpos[r]) * parts.chunks + chunk) * pitch + 2;
#pragma unroll
            for (int j = 0; j < Cols<D>::n; j++) {
                const int d = tx + kGrid * j;
                if (d < D) slot[d] = o[i][j];
            }
        }
        return;
    }
    if (lane == 0)
#pragma unroll
        for (int rr = 0; rr < kRowsPerWarp; rr++) {
            const int r = warp * kRowsPerWarp + rr;
            l_s[r] = l_row[rr];
            if (qpos[r] >= 0) lse[(t.b * s.Hq + t.h) * s.T + qpos[r]] = m_row[rr] + logf(l_row[rr]);
        }
    __syncthreads();
    store_tile<D>(out + (t.b * s.T * s.Hq + t.h) * D, qstride, qpos, o, l_s, ty, tx);
}

template <int D, typename E>
__global__ void __launch_bounds__(kThreads)
    attention_forward_kernel(E *out, float *lse, const E *q, const E *k, const E *v, const int32_t *sel, AttnShape s,
                             int64_t row_begin, int64_t row_end, int use_sel, const uint64_t *rowmask) {
    forward_tile<D, E, false>(out, lse, q, k, v, sel, s, row_begin, row_end, use_sel, rowmask, SuffixParts{});
}

/* One chunk of the suffix rows' key lists: grid (row tiles, B*Hq, chunks). */
template <int D, typename E>
__global__ void __launch_bounds__(kThreads)
    attention_suffix_chunk_kernel(const E *q, const E *k, const E *v, const int32_t *sel, AttnShape s,
                                  int64_t row_begin, int64_t row_end, int use_sel, const uint64_t *rowmask,
                                  SuffixParts parts) {
    forward_tile<D, E, true>(nullptr, nullptr, q, k, v, sel, s, row_begin, row_end, use_sel, rowmask, parts);
}

/* out and lse of the suffix rows from their chunks' partials, one warp per
 * (row, batch row x query head), 8 per block: M = max m_c, l = sum_c l_c
 * e^(m_c - M), out = sum_c o_c e^(m_c - M) / l, chunks in ascending order,
 * so the bits do not depend on which chunk's block ran first. A chunk the
 * row sees nothing of (m_c = -inf) adds nothing. */
template <int D, typename E, int kBug>
__global__ void __launch_bounds__(kThreads)
    attention_suffix_combine_kernel(E *out, float *lse, AttnShape s, int64_t row_begin, SuffixParts parts) {
    constexpr int kLaneCols = (D + 31) / 32;
    const int lane = threadIdx.x % 32;
    const int64_t w = (int64_t)blockIdx.x * (kThreads / 32) + threadIdx.x / 32;
    if (w >= s.B * s.Hq * parts.rows) return; /* a whole warp: no shuffles or barriers below */
    const int64_t bh = w / parts.rows, p = row_begin + w % parts.rows, b = bh / s.Hq, h = bh % s.Hq;
    const int64_t pitch = (int64_t)(D + 2);
    const float *slots = parts.part + w * parts.chunks * pitch;
    const int64_t chunks = kBug == ATTN_SUFFIX_BUG_DROP_LAST_CHUNK ? parts.chunks - 1 : parts.chunks;
    float M = -INFINITY;
    for (int64_t c = 0; c < chunks; c++) M = fmaxf(M, slots[c * pitch]);
    float l = 0.0f, o[kLaneCols] = {};
    for (int64_t c = 0; c < chunks; c++) {
        const float mc = slots[c * pitch];
        if (mc == -INFINITY) continue;
        /* the planted bug weighs chunk c by the next chunk's max */
        const float wc = expf((kBug == ATTN_SUFFIX_BUG_NEXT_MAX ? slots[(c + 1) % chunks * pitch] : mc) - M);
        l = fmaf(wc, slots[c * pitch + 1], l);
#pragma unroll
        for (int j = 0; j < kLaneCols; j++) {
            const int d = lane + 32 * j;
            if (d < D) o[j] = fmaf(wc, slots[c * pitch + 2 + d], o[j]);
        }
    }
    if (lane == 0) lse[bh * s.T + p] = M + logf(l);
    E *row = out + ((b * s.T + p) * s.Hq + h) * D;
#pragma unroll
    for (int j = 0; j < kLaneCols; j++) {
        const int d = lane + 32 * j;
        if (d < D) row[d] = act_from_f32<E>(o[j] / l);
    }
}

/* dsum[(b, h, p)] = sum_d dout * out (one warp per row; Dq of the backward).
 * The loop bounds are the same for the whole block, so every warp reaches
 * the shuffles together. */
template <typename E>
__global__ void attention_dsum_kernel(float *dsum, const E *dout, const E *out, int64_t B, int64_t T, int64_t Hq,
                                      int64_t D) {
    const int lane = threadIdx.x % 32;
    const int64_t rows = B * T * Hq, per_block = blockDim.x / 32;
    for (int64_t first = (int64_t)blockIdx.x * per_block; first < rows; first += (int64_t)gridDim.x * per_block) {
        const int64_t row = first + threadIdx.x / 32;
        float acc = 0.0f;
        if (row < rows)
            for (int64_t d = lane; d < D; d += 32)
                acc = fmaf(act_f32(dout[row * D + d]), act_f32(out[row * D + d]), acc);
        acc = warp_sum(acc);
        if (lane == 0 && row < rows) {
            const int64_t h = row % Hq, p = (row / Hq) % T, b = row / Hq / T;
            dsum[(b * Hq + h) * T + p] = acc;
        }
    }
}

/* dQ of a row tile: dS = P * (dP - Dq) * scale with P = exp(S - lse),
 * dq = dS K summed over the key list in order. */
template <int D, typename E>
__global__ void __launch_bounds__(kThreads)
    attention_dq_kernel(float *dq, const E *dout, const E *q, const E *k, const E *v, const float *lse,
                        const float *dsum, const int32_t *sel, AttnShape s, int64_t row_begin, int64_t row_end,
                        int use_sel, const uint64_t *rowmask) {
    extern __shared__ __align__(16) unsigned char smem[];
    int64_t *qpos = (int64_t *)smem, *kpos = qpos + kTile;
    uint64_t *rowbits = (uint64_t *)(kpos + kTile);
    float *Qs = (float *)(rowbits + kTile), *dOs = Qs + kTile * ld<D>(), *Ks = dOs + kTile * ld<D>();
    float *Vs = Ks + kTile * ld<D>(), *dSs = Vs + kTile * ld<D>(), *lse_s = dSs + kTile * kLdS, *dsum_s = lse_s + kTile;
    const int tid = threadIdx.x, ty = tid / kGrid, tx = tid % kGrid;
    const RowTile t = row_tile(s, sel, row_begin, row_end, use_sel);
    const int64_t qstride = s.Hq * D, kvstride = s.Hkv * D, qoff = (t.b * s.T * s.Hq + t.h) * D;
    const E *kb = k + (t.b * s.T * s.Hkv + t.g) * D, *vb = v + (t.b * s.T * s.Hkv + t.g) * D;

    if (tid < kTile) {
        const int64_t p = t.q0 + tid <= t.p_last ? t.q0 + tid : -1;
        qpos[tid] = p;
        lse_s[tid] = p >= 0 ? lse[(t.b * s.Hq + t.h) * s.T + p] : 0.0f;
        dsum_s[tid] = p >= 0 ? dsum[(t.b * s.Hq + t.h) * s.T + p] : 0.0f;
    }
    __syncthreads();
    load_tile<D>(Qs, q + qoff, qstride, qpos);
    load_tile<D>(dOs, dout + qoff, qstride, qpos);

    float acc_dq[kPerThread][Cols<D>::n] = {};
    for (int64_t i0 = 0; i0 < t.keys.n; i0 += kTile) {
        __syncthreads();
        if (!stage_key_tile(kpos, rowbits, qpos, t, s, rowmask, i0)) continue;
        load_tile<D>(Ks, kb, kvstride, kpos);
        load_tile<D>(Vs, vb, kvstride, kpos);
        __syncthreads();
        float sc[kPerThread][kPerThread], dp[kPerThread][kPerThread];
        tile_dot<D>(sc, Qs, Ks, ty, tx);
        tile_dot<D>(dp, dOs, Vs, ty, tx);
#pragma unroll
        for (int i = 0; i < kPerThread; i++)
#pragma unroll
            for (int j = 0; j < kPerThread; j++) {
                const int r = ty + kGrid * i, c = tx + kGrid * j;
                const bool vis =
                    qpos[r] >= 0 && kpos[c] >= 0 && kpos[c] <= qpos[r] && (rowmask == nullptr || (rowbits[r] >> c & 1));
                const float p = vis ? expf(sc[i][j] * s.scale - lse_s[r]) : 0.0f;
                dSs[r * kLdS + c] = vis ? p * (dp[i][j] - dsum_s[r]) * s.scale : 0.0f;
            }
        __syncthreads();
        tile_accumulate<D>(acc_dq, dSs, Ks, ty, tx);
    }
    store_tile<D>(dq + qoff, qstride, qpos, acc_dq, nullptr, ty, tx);
}

/* Whether query row qp sees key kp (both real positions, kp column c of
 * its tile) under the mask: a row >= L by its bitmap word (per-row records)
 * or by the selection. */
__device__ __forceinline__ bool key_visible(const AttnShape &s, int64_t qp, int64_t kp, int selected, uint64_t bits,
                                            int c) {
    if (qp < 0 || kp < 0 || kp > qp) return false;
    if (!s.active || qp < s.L) return true;
    if (s.per_row) return bits >> c & 1;
    return kp >= s.L || selected != 0;
}

/* dK, dV of 64 keys of one (b, KV head): the group's query heads in order,
 * each over its query tiles in order; rows >= L see keys < L only when they
 * are selected. Each thread owns 4 keys x D/16 columns of dK and dV. */
template <int D, typename E>
__global__ void __launch_bounds__(kThreads)
    attention_dkdv_kernel(float *dk, float *dv, const E *dout, const E *q, const E *k, const E *v, const float *lse,
                          const float *dsum, const unsigned char *selected, const uint64_t *rowmask, AttnShape s) {
    extern __shared__ __align__(16) unsigned char smem[];
    int64_t *qpos = (int64_t *)smem, *kpos = qpos + kTile;
    uint64_t *rowbits = (uint64_t *)(kpos + kTile);
    int *ksel = (int *)(rowbits + kTile);
    float *Ks = (float *)(ksel + kTile), *Vs = Ks + kTile * ld<D>(), *Qs = Vs + kTile * ld<D>();
    float *dOs = Qs + kTile * ld<D>(), *Ps = dOs + kTile * ld<D>(), *dSs = Ps + kTile * kLdS;
    float *lse_s = dSs + kTile * kLdS, *dsum_s = lse_s + kTile;
    const int tid = threadIdx.x, ty = tid / kGrid, tx = tid % kGrid;
    const int64_t b = blockIdx.y / s.Hkv, g = blockIdx.y % s.Hkv, k0 = (int64_t)blockIdx.x * kTile;
    const int64_t qstride = s.Hq * D, kvstride = s.Hkv * D, kvoff = (b * s.T * s.Hkv + g) * D;

    int my_sel = 0;
    if (tid < kTile) {
        const int64_t p = k0 + tid;
        kpos[tid] = p < s.T ? p : -1;
        my_sel = s.active && !s.per_row && p < s.L ? selected[(b * s.Hkv + g) * s.L + p] : 0;
        ksel[tid] = my_sel;
    }
    /* rows >= L matter to a tile of prefill keys only if one of them is
     * selected (with the bitmaps, any key may be) */
    const int any_sel = __syncthreads_or(my_sel);
    const int64_t row_end = s.active && !s.per_row && k0 + kTile <= s.L && !any_sel ? s.L : s.T;
    load_tile<D>(Ks, k + kvoff, kvstride, kpos);
    load_tile<D>(Vs, v + kvoff, kvstride, kpos);

    float acc_dk[kPerThread][Cols<D>::n] = {}, acc_dv[kPerThread][Cols<D>::n] = {};
    for (int64_t hh = 0; hh < s.group; hh++) {
        const int64_t h = g * s.group + hh, qoff = (b * s.T * s.Hq + h) * D;
        for (int64_t q0 = k0; q0 < row_end; q0 += kTile) {
            __syncthreads(); /* previous readers of Qs, dOs, Ps, dSs, qpos are done */
            if (tid < kTile) {
                const int64_t p = q0 + tid < row_end ? q0 + tid : -1;
                qpos[tid] = p;
                lse_s[tid] = p >= 0 ? lse[(b * s.Hq + h) * s.T + p] : 0.0f;
                dsum_s[tid] = p >= 0 ? dsum[(b * s.Hq + h) * s.T + p] : 0.0f;
                if (s.per_row) rowbits[tid] = p >= 0 ? row_word(rowmask, s, b * s.Hkv + g, p, k0) : 0ull;
            }
            /* with the bitmaps, a tile of rows >= L that sees none of these keys is skipped (an exact no-op) */
            if (s.per_row) {
                const int needed = tid < kTile && qpos[tid] >= 0 && (qpos[tid] < s.L || rowbits[tid] != 0);
                if (!__syncthreads_or(needed)) continue;
            } else {
                __syncthreads();
            }
            load_tile<D>(Qs, q + qoff, qstride, qpos);
            load_tile<D>(dOs, dout + qoff, qstride, qpos);
            __syncthreads();
            float sc[kPerThread][kPerThread], dp[kPerThread][kPerThread];
            tile_dot<D>(sc, Qs, Ks, ty, tx); /* rows ty + 16i, keys tx + 16j */
            tile_dot<D>(dp, dOs, Vs, ty, tx);
#pragma unroll
            for (int i = 0; i < kPerThread; i++)
#pragma unroll
                for (int j = 0; j < kPerThread; j++) {
                    const int r = ty + kGrid * i, c = tx + kGrid * j;
                    const bool vis = key_visible(s, qpos[r], kpos[c], ksel[c], s.per_row ? rowbits[r] : 0ull, c);
                    const float p = vis ? expf(sc[i][j] * s.scale - lse_s[r]) : 0.0f;
                    Ps[r * kLdS + c] = p;
                    dSs[r * kLdS + c] = vis ? p * (dp[i][j] - dsum_s[r]) * s.scale : 0.0f;
                }
            __syncthreads();
            tile_accumulate_t<D>(acc_dv, Ps, dOs, ty, tx);
            tile_accumulate_t<D>(acc_dk, dSs, Qs, ty, tx);
        }
    }
#pragma unroll
    for (int i = 0; i < kPerThread; i++) {
        const int c = ty + kGrid * i;
        if (kpos[c] < 0) continue;
        const int64_t off = kvoff + kpos[c] * kvstride;
#pragma unroll
        for (int j = 0; j < Cols<D>::n; j++) {
            const int d = tx + kGrid * j;
            if (d < D) dk[off + d] = acc_dk[i][j], dv[off + d] = acc_dv[i][j];
        }
    }
}

/* selected[(b, g, pos)] = 1 for each selected prefill position. */
__global__ void attention_mark_selected_kernel(unsigned char *selected, const int32_t *sel, int64_t BG, int64_t ks,
                                               int64_t L) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < BG * ks;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t bg = i / ks, pos = sel[i];
        if (pos >= 0 && pos < L) selected[bg * L + pos] = 1;
    }
}

/* rowmask[(bg, p - L), w]: bit j % 64 of word j / 64 is set when row p >= L
 * sees key j: every key 0..p for a full row (n = 0), else the record's keys
 * (attention.h). One thread per (bg, row). */
__global__ void attention_row_mask_kernel(uint64_t *rowmask, const int32_t *sel, int64_t BG, int64_t T, int64_t L,
                                          int64_t W, int64_t per, int64_t words) {
    GRID_STRIDE(i, BG * (T - L)) {
        const int64_t bg = i / (T - L), p = L + i % (T - L);
        const int32_t *rec = sel + bg * per + (p - L) * (1 + W);
        uint64_t *bits = rowmask + i * words;
        for (int64_t w = 0; w < words; w++) bits[w] = 0ull;
        if (rec[0] == 0) {
            for (int64_t w = 0; w < (p + 1) / 64; w++) bits[w] = ~0ull;
            if ((p + 1) % 64) bits[(p + 1) / 64] = (1ull << ((p + 1) % 64)) - 1ull;
        } else {
            for (int32_t c = 1; c <= rec[0]; c++) bits[rec[c] / 64] |= 1ull << (rec[c] % 64);
        }
    }
}

/* ---------------------------------------------------------------- launchers */

static AttnShape make_shape(int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t D, const RefreshMask *m) {
    AttnShape s;
    s.B = B, s.T = T, s.Hq = Hq, s.Hkv = Hkv, s.group = Hq / Hkv;
    s.active = refresh_active(m, T);
    s.L = s.active ? m->L : T;
    s.ks = s.active ? refresh_num_selected(m) : 0;
    s.per_row = s.active && refresh_per_row(m);
    s.words = attention_row_mask_words(T);
    s.scale = 1.0f / sqrtf((float)D);
    return s;
}

static unsigned int tiles(int64_t n) { return ceil_div_u(n, kTile); }

/* The shared entry of forward and backward: checks the shape and the mask,
 * fills *s; 0 when there is nothing to compute. */
static int checked_shape(AttnShape *s, const char *fn, const int32_t *sel, int64_t B, int64_t T, int64_t Hq,
                         int64_t Hkv, int64_t D, const RefreshMask *m) {
    attention_check_gather_shape(fn, B, T, Hq, Hkv, D);
    refresh_mask_validate(m, fn);
    if (B == 0 || T == 0) return 0;
    *s = make_shape(B, T, Hq, Hkv, D, m);
    attention_check_sel(fn, sel, T, m);
    return 1;
}

extern "C" uint64_t *attention_row_mask_cuda(const int32_t *sel, int64_t B, int64_t T, int64_t Hkv,
                                             const RefreshMask *m) {
    const int64_t bytes = attention_cuda_row_mask_bytes(m, B, T, Hkv), BG = B * Hkv;
    if (bytes == 0) return nullptr; /* no per-row records (or no row >= L) */
    uint64_t *rowmask;
    CUDA_CHECK(cudaMallocAsync((void **)&rowmask, (size_t)bytes, 0));
    attention_row_mask_kernel<<<grid_for(BG * (T - m->L), 256), 256>>>(
        rowmask, sel, BG, T, m->L, refresh_row_width(m, T), refresh_sel_len(m, T), attention_row_mask_words(T));
    CUDA_CHECK_LAUNCH();
    return rowmask;
}

/* Calls f(std::integral_constant<int, D>) for a head dim attention_check_gather_shape accepted. */
template <typename F> static void with_head_dim(int64_t D, F f) {
    switch (D) {
        case 8: f(std::integral_constant<int, 8>()); break;
        case 16: f(std::integral_constant<int, 16>()); break;
        case 32: f(std::integral_constant<int, 32>()); break;
        case 64: f(std::integral_constant<int, 64>()); break;
        default: f(std::integral_constant<int, 128>()); break;
    }
}

template <int D, typename E>
static void forward_rows(E *out, float *lse, const E *q, const E *k, const E *v, const int32_t *sel, const AttnShape &s,
                         int64_t row_begin, int64_t row_end, int use_sel, const uint64_t *rowmask) {
    if (row_end <= row_begin) return;
    const size_t bytes = RowSmem<D>::fwd_bytes;
    CUDA_CHECK(
        cudaFuncSetAttribute(attention_forward_kernel<D, E>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
    attention_forward_kernel<D, E><<<dim3(tiles(row_end - row_begin), (unsigned int)(s.B * s.Hq)), kThreads, bytes>>>(
        out, lse, q, k, v, sel, s, row_begin, row_end, use_sel, rowmask);
    CUDA_CHECK_LAUNCH();
}

/* The rows [row_begin, row_end) >= L split over key chunks (attention.h,
 * attention_suffix_chunk_keys): the chunk kernel, then the combine. */
template <int D, typename E, int kBug>
static void forward_suffix_split(E *out, float *lse, const E *q, const E *k, const E *v, const int32_t *sel,
                                 const AttnShape &s, const RefreshMask *m, int64_t row_begin, int64_t row_end,
                                 const uint64_t *rowmask) {
    SuffixParts parts;
    parts.chunk_keys = attention_suffix_chunk_keys(m, s.B, s.T, s.Hq);
    parts.chunks = attention_suffix_chunks(m, s.B, s.T, s.Hq);
    parts.rows = row_end - row_begin;
    /* the bytes attention_suffix_partial_bytes counts for the whole suffix (overflow-checked there), or fewer */
    const int64_t bytes = attention_suffix_partial_bytes(m, s.B, s.T, s.Hq, D) / (s.T - s.L) * parts.rows;
    CUDA_CHECK(cudaMallocAsync((void **)&parts.part, (size_t)bytes, 0));
    const size_t smem = RowSmem<D>::fwd_bytes;
    CUDA_CHECK(cudaFuncSetAttribute(attention_suffix_chunk_kernel<D, E>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    (int)smem));
    const dim3 grid(tiles(parts.rows), (unsigned int)(s.B * s.Hq), (unsigned int)parts.chunks);
    attention_suffix_chunk_kernel<D, E>
        <<<grid, kThreads, smem>>>(q, k, v, sel, s, row_begin, row_end, !s.per_row, rowmask, parts);
    CUDA_CHECK_LAUNCH();
    const unsigned int combine_blocks = ceil_div_u(s.B * s.Hq * parts.rows, kThreads / 32);
    attention_suffix_combine_kernel<D, E, kBug><<<combine_blocks, kThreads>>>(out, lse, s, row_begin, parts);
    CUDA_CHECK_LAUNCH();
    CUDA_CHECK(cudaFreeAsync(parts.part, 0));
}

/* The rows [L, T): over the gathered list sel ++ (L..T-1), or with per-row
 * records over every key 0..p through the rows' bitmaps. The whole-T
 * forward runs them unsplit, like the causal rows (so that K = L gives the
 * unmasked bits); the tensor-core path's row-range entry (split) spreads
 * them over key chunks when B * Hq row tiles would leave most SMs idle. */
template <int D, typename E, int kBug = ATTN_SUFFIX_OK>
static void forward_suffix(E *out, float *lse, const E *q, const E *k, const E *v, const int32_t *sel,
                           const AttnShape &s, const RefreshMask *m, int64_t row_begin, int64_t row_end, int split) {
    if (row_end <= row_begin) return;
    uint64_t *rowmask = attention_row_mask_cuda(sel, s.B, s.T, s.Hkv, m);
    if (split && attention_suffix_chunks(m, s.B, s.T, s.Hq) > 1)
        forward_suffix_split<D, E, kBug>(out, lse, q, k, v, sel, s, m, row_begin, row_end, rowmask);
    else forward_rows<D>(out, lse, q, k, v, sel, s, row_begin, row_end, !s.per_row, rowmask);
    if (rowmask) CUDA_CHECK(cudaFreeAsync(rowmask, 0));
}

template <typename E>
static void forward(E *out, float *lse, const E *q, const E *k, const E *v, const int32_t *sel, int64_t B, int64_t T,
                    int64_t Hq, int64_t Hkv, int64_t D, const RefreshMask *m, const char *fn) {
    AttnShape s;
    if (!checked_shape(&s, fn, sel, B, T, Hq, Hkv, D, m)) return;
    with_head_dim(D, [&](auto d) {
        constexpr int kD = decltype(d)::value;
        forward_rows<kD>(out, lse, q, k, v, sel, s, 0, s.L, 0, nullptr); /* causal rows */
        if (s.active) forward_suffix<kD>(out, lse, q, k, v, sel, s, m, s.L, s.T, 0);
    });
}

template <int kBug = ATTN_SUFFIX_OK, typename E>
static void forward_row_range(E *out, float *lse, const E *q, const E *k, const E *v, const int32_t *sel, int64_t B,
                              int64_t T, int64_t Hq, int64_t Hkv, int64_t D, const RefreshMask *m, int64_t row_begin,
                              int64_t row_end, const char *fn) {
    AttnShape s;
    if (!checked_shape(&s, fn, sel, B, T, Hq, Hkv, D, m)) return;
    if (s.active && row_begin < s.L && row_end > s.L) {
        fprintf(stderr, "kvcpt: %s: rows [%lld, %lld) straddle L = %lld\n", fn, (long long)row_begin,
                (long long)row_end, (long long)s.L);
        exit(1);
    }
    with_head_dim(D, [&](auto d) {
        constexpr int kD = decltype(d)::value;
        if (s.active && row_begin >= s.L)
            forward_suffix<kD, E, kBug>(out, lse, q, k, v, sel, s, m, row_begin, row_end, 1);
        else forward_rows<kD>(out, lse, q, k, v, sel, s, row_begin, row_end, 0, nullptr);
    });
}

extern "C" void attention_forward_cuda(float *out, float *lse, const float *q, const float *k, const float *v,
                                       const int32_t *sel, int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t D,
                                       const RefreshMask *m) {
    forward(out, lse, q, k, v, sel, B, T, Hq, Hkv, D, m, "attention_forward_cuda");
}

extern "C" void attention_forward_bf16_cuda(bf16 *out, float *lse, const bf16 *q, const bf16 *k, const bf16 *v,
                                            const int32_t *sel, int64_t B, int64_t T, int64_t Hq, int64_t Hkv,
                                            int64_t D, const RefreshMask *m) {
    forward(out, lse, q, k, v, sel, B, T, Hq, Hkv, D, m, "attention_forward_bf16_cuda");
}

/* The forward on rows [row_begin, row_end) only (kernels/attention_rows.h):
 * the tensor-core path hands it the RefreshKV suffix rows. */
extern "C" void attention_forward_rows_cuda(float *out, float *lse, const float *q, const float *k, const float *v,
                                            const int32_t *sel, int64_t B, int64_t T, int64_t Hq, int64_t Hkv,
                                            int64_t D, const RefreshMask *m, int64_t row_begin, int64_t row_end) {
    forward_row_range(out, lse, q, k, v, sel, B, T, Hq, Hkv, D, m, row_begin, row_end, "attention_forward_rows_cuda");
}

extern "C" void attention_forward_rows_planted_cuda(float *out, float *lse, const float *q, const float *k,
                                                    const float *v, const int32_t *sel, int64_t B, int64_t T,
                                                    int64_t Hq, int64_t Hkv, int64_t D, const RefreshMask *m,
                                                    int64_t row_begin, int64_t row_end, int bug) {
    const char *fn = "attention_forward_rows_planted_cuda";
    switch (bug) {
        case ATTN_SUFFIX_BUG_DROP_LAST_CHUNK:
            forward_row_range<ATTN_SUFFIX_BUG_DROP_LAST_CHUNK>(out, lse, q, k, v, sel, B, T, Hq, Hkv, D, m, row_begin,
                                                               row_end, fn);
            break;
        case ATTN_SUFFIX_BUG_NEXT_MAX:
            forward_row_range<ATTN_SUFFIX_BUG_NEXT_MAX>(out, lse, q, k, v, sel, B, T, Hq, Hkv, D, m, row_begin, row_end,
                                                        fn);
            break;
        default: forward_row_range(out, lse, q, k, v, sel, B, T, Hq, Hkv, D, m, row_begin, row_end, fn); break;
    }
}

extern "C" void attention_forward_rows_bf16_cuda(bf16 *out, float *lse, const bf16 *q, const bf16 *k, const bf16 *v,
                                                 const int32_t *sel, int64_t B, int64_t T, int64_t Hq, int64_t Hkv,
                                                 int64_t D, const RefreshMask *m, int64_t row_begin, int64_t row_end) {
    forward_row_range(out, lse, q, k, v, sel, B, T, Hq, Hkv, D, m, row_begin, row_end,
                      "attention_forward_rows_bf16_cuda");
}

template <int D, typename E>
static void dq_rows(float *dq, const E *dout, const E *q, const E *k, const E *v, const float *lse, const float *dsum,
                    const int32_t *sel, const AttnShape &s, int64_t row_begin, int64_t row_end, int use_sel,
                    const uint64_t *rowmask) {
    if (row_end <= row_begin) return;
    const size_t bytes = RowSmem<D>::dq_bytes;
    CUDA_CHECK(
        cudaFuncSetAttribute(attention_dq_kernel<D, E>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
    attention_dq_kernel<D, E><<<dim3(tiles(row_end - row_begin), (unsigned int)(s.B * s.Hq)), kThreads, bytes>>>(
        dq, dout, q, k, v, lse, dsum, sel, s, row_begin, row_end, use_sel, rowmask);
    CUDA_CHECK_LAUNCH();
}

template <int D, typename E>
static void backward_d(float *dq, float *dk, float *dv, const E *dout, const E *q, const E *k, const E *v,
                       const float *lse, const float *dsum, const int32_t *sel, const unsigned char *selected,
                       const uint64_t *rowmask, const AttnShape &s) {
    dq_rows<D>(dq, dout, q, k, v, lse, dsum, sel, s, 0, s.L, 0, nullptr);
    if (s.active) dq_rows<D>(dq, dout, q, k, v, lse, dsum, sel, s, s.L, s.T, !s.per_row, rowmask);
    const size_t bytes = RowSmem<D>::dkdv_bytes;
    CUDA_CHECK(
        cudaFuncSetAttribute(attention_dkdv_kernel<D, E>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
    attention_dkdv_kernel<D, E><<<dim3(tiles(s.T), (unsigned int)(s.B * s.Hkv)), kThreads, bytes>>>(
        dk, dv, dout, q, k, v, lse, dsum, selected, rowmask, s);
    CUDA_CHECK_LAUNCH();
}

template <typename E>
static void backward(float *dq, float *dk, float *dv, const E *dout, const E *q, const E *k, const E *v, const E *out,
                     const float *lse, const int32_t *sel, int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t D,
                     const RefreshMask *m, const char *fn) {
    AttnShape s;
    if (!checked_shape(&s, fn, sel, B, T, Hq, Hkv, D, m)) return;
    float *dsum;
    CUDA_CHECK(cudaMallocAsync((void **)&dsum, sizeof(float) * (size_t)(B * Hq * T), 0));
    attention_dsum_kernel<E><<<grid_for(B * T * Hq * 32, 256), 256>>>(dsum, dout, out, B, T, Hq, D);
    CUDA_CHECK_LAUNCH();
    unsigned char *selected = NULL;
    uint64_t *rowmask = attention_row_mask_cuda(sel, s.B, s.T, s.Hkv, m);
    if (s.active && !s.per_row) {
        const size_t n = (size_t)(B * Hkv * s.L);
        CUDA_CHECK(cudaMallocAsync((void **)&selected, n, 0));
        CUDA_CHECK(cudaMemsetAsync(selected, 0, n, 0));
        attention_mark_selected_kernel<<<grid_for(B * Hkv * s.ks, 256), 256>>>(selected, sel, B * Hkv, s.ks, s.L);
        CUDA_CHECK_LAUNCH();
    }
    with_head_dim(D, [&](auto d) {
        backward_d<decltype(d)::value>(dq, dk, dv, dout, q, k, v, lse, dsum, sel, selected, rowmask, s);
    });
    CUDA_CHECK(cudaFreeAsync(dsum, 0));
    if (selected) CUDA_CHECK(cudaFreeAsync(selected, 0));
    if (rowmask) CUDA_CHECK(cudaFreeAsync(rowmask, 0));
}

extern "C" void attention_backward_cuda(float *dq, float *dk, float *dv, const float *dout, const float *q,
                                        const float *k, const float *v, const float *out, const float *lse,
                                        const int32_t *sel, int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t D,
                                        const RefreshMask *m) {
    backward(dq, dk, dv, dout, q, k, v, out, lse, sel, B, T, Hq, Hkv, D, m, "attention_backward_cuda");
}

extern "C" void attention_backward_bf16_cuda(float *dq, float *dk, float *dv, const bf16 *dout, const bf16 *q,
                                             const bf16 *k, const bf16 *v, const bf16 *out, const float *lse,
                                             const int32_t *sel, int64_t B, int64_t T, int64_t Hq, int64_t Hkv,
                                             int64_t D, const RefreshMask *m) {
    backward(dq, dk, dv, dout, q, k, v, out, lse, sel, B, T, Hq, Hkv, D, m, "attention_backward_bf16_cuda");
}
