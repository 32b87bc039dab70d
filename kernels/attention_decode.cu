/* Inference attention for the evaluator on the GPU: the twins of
 * kernels/attention_decode.c, fp32 in and out, fp32 arithmetic, no float
 * atomics (every sum has one fixed order, so results are bit-identical run
 * to run).
 *
 * Prefill statistics (one causal sequence, nothing of size T x T):
 *   1. lse: a block owns 64 query rows of one head and walks the 64-key tiles
 *      0..its last row with an online max / sum; lse = m + log(l) per row.
 *   2. colsum: a block owns 64 keys of one head and walks the query tiles
 *      from its own tile to the end, summing exp(s - lse_p) down each column;
 *      each thread keeps its own column partials over the whole walk, and the
 *      16 partials of a column are added in a fixed order at the end.
 *   3. last rows: a block owns a 64 x 64 tile of the (W, T) window of one
 *      head and writes exp(s - lse_p), zero beyond p (tiles right of the
 *      diagonal are written as zeros without computing anything).
 *   Tiles: 256 threads as a 16 x 16 grid, each thread 4 consecutive rows x 4
 *   consecutive keys. Q and K tiles are stored transposed, (D, 64) with a
 *   row pitch of 68 floats, so that a thread's 4 rows (or keys) at one d are
 *   one aligned 16-byte load. Every kernel computes a score with the same
 *   code (fma over d ascending), so pass 2 and 3 see pass 1's scores bit for
 *   bit; lse of a row depends only on the row and the key tiles (which start
 *   at 0), so it does not change with the set of rows computed.
 *   Grids: lse (Hq, row tiles), colsum (Hq, key tiles): the head runs
 *   fastest so every head's longest tiles start first; last (key tiles,
 *   window tiles, Hq). Shared memory 2 * D * 68 floats (70 KB at D = 128).
 *
 * Decode (one query token per head, flash-decoding):
 *   A. grid (chunk, KV head g), 256 threads: a chunk of 256 listed keys. K in
 *      32-key tiles through shared memory (read once for the whole group):
 *      scores for the group's heads (warp = head, lane = key), kept in
 *      shared memory and, when probs is wanted, written raw to probs; then
 *      the chunk max m_c and sum l_c per head (one warp per head, fixed
 *      tree), weights exp(s - m_c); then V in 32-key tiles, each thread
 *      summing its (head, d) outputs over the keys in order: o_c.
 *   B. one block per query head: M = max m_c, Z = sum_c l_c e^(m_c - M) and
 *      out = sum_c o_c e^(m_c - M) / Z, chunks in ascending order.
 *   C. (probs only) probs = exp(s - M) / Z.
 *
 * Limits (checked, with a message): head dim 1 <= D <= 256 (shared memory);
 * prefill: T <= 65535 * 64;
 * decode: group * D <= 2048 (a thread's register outputs), Hkv <=
 * ATTENTION_DECODE_MAX_KV_HEADS, 1 <= n[g] <= max_n. The workspaces (lse;
 * decode partials) are static device buffers grown on demand, so the
 * launchers are meant for one host thread and the default stream. */
#include <stdint.h>

#include "cuda_common.cuh"
#include "cuda_reduce.cuh"

extern "C" {
#include "attention_decode.h"
}

static constexpr int kMaxHeadDim = 256;

/* ------------------------------------------------------------ workspaces */

/* A device buffer of at least n floats, kept between calls. cudaFree waits
 * for the device, so a buffer still in use by earlier kernels is never
 * freed under them. */
struct Workspace {
    float *ptr;
    size_t cap;
};

static float *workspace_floats(Workspace *w, size_t n) {
    if (n > w->cap) {
        if (w->ptr) CUDA_CHECK(cudaFree(w->ptr));
        CUDA_CHECK(cudaMalloc((void **)&w->ptr, sizeof(float) * n));
        w->cap = n;
    }
    return w->ptr;
}

static Workspace g_lse_ws, g_decode_ws;

/* --------------------------------------------------------- prefill tiles */

static constexpr int kTile = 64;        /* rows and keys per tile */
static constexpr int kThreads = 256;    /* 16 x 16 */
static constexpr int kGrid = 16;
static constexpr int kPer = kTile / kGrid; /* 4 rows and 4 keys per thread */
static constexpr int kLdT = kTile + 4;  /* transposed tile pitch: 16-byte aligned rows */

struct alignas(16) Quad {
    float v[kPer];
};

struct PrefillShape {
    int64_t T, Hq, Hkv, D, group, W;
    float scale;
};

/* Shared memory of the prefill kernels: Qt, Kt (D x 68 each), then 64 lse
 * values; at least the (16, 64) table of column partials that the colsum
 * kernel lays over them at its end, which is larger when D < 8. */
static size_t prefill_smem_bytes(int64_t D) {
    const int64_t tiles = 2 * D * kLdT + kTile, partials = (int64_t)kGrid * kTile;
    return sizeof(float) * (size_t)(tiles > partials ? tiles : partials);
}

/* dst[d][r] = row first + r of a (rows, stride) tensor, or 0 past the last
 * row: the global reads run along d (coalesced), the transposed writes go to
 * shared memory. */
__device__ void load_tile_t(float *dst, const float *src, int64_t stride, int64_t first, int64_t last, int64_t D) {
    for (int64_t idx = threadIdx.x; idx < kTile * D; idx += kThreads) {
        const int64_t r = idx / D, d = idx % D, row = first + r;
        dst[d * kLdT + r] = row <= last ? src[row * stride + d] : 0.0f;
    }
}

/* acc[i][j] = scale * sum_d Qt[d][4ty + i] * Kt[d][4tx + j], fma over d ascending. */
__device__ __forceinline__ void tile_scores(float acc[kPer][kPer], const float *Qt, const float *Kt, int64_t D,
                                            float scale, int ty, int tx) {
#pragma unroll
    for (int i = 0; i < kPer; i++)
#pragma unroll
        for (int j = 0; j < kPer; j++) acc[i][j] = 0.0f;
#pragma unroll 4
    for (int64_t d = 0; d < D; d++) {
        const Quad a = *reinterpret_cast<const Quad *>(Qt + d * kLdT + kPer * ty);
        const Quad b = *reinterpret_cast<const Quad *>(Kt + d * kLdT + kPer * tx);
#pragma unroll
        for (int i = 0; i < kPer; i++)
#pragma unroll
            for (int j = 0; j < kPer; j++) acc[i][j] = fmaf(a.v[i], b.v[j], acc[i][j]);
    }
#pragma unroll
    for (int i = 0; i < kPer; i++)
#pragma unroll
        for (int j = 0; j < kPer; j++) acc[i][j] *= scale;
}

/* Max / sum over the 16 threads (tx) sharing a row: the 16-lane halves of a
 * warp, xor butterfly, so every lane gets the same bits. */
__device__ __forceinline__ float row_max16(float v) {
    for (int o = kGrid / 2; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
__device__ __forceinline__ float row_sum16(float v) {
    for (int o = kGrid / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* lse[h][p] for rows row_begin..T-1; query tiles start at row_begin, run
 * longest first (grid y reversed), key tiles start at 0. */
__global__ void __launch_bounds__(kThreads)
    prefill_lse_kernel(float *lse, const float *q, const float *k, PrefillShape s, int64_t row_begin) {
    extern __shared__ __align__(16) float smem[];
    float *Qt = smem, *Kt = Qt + s.D * kLdT;
    const int tid = threadIdx.x, ty = tid / kGrid, tx = tid % kGrid;
    const int64_t h = blockIdx.x, g = h / s.group, D = s.D;
    const int64_t q0 = row_begin + (int64_t)(gridDim.y - 1 - blockIdx.y) * kTile;
    const int64_t q_last = q0 + kTile - 1 < s.T - 1 ? q0 + kTile - 1 : s.T - 1;
    load_tile_t(Qt, q + h * D, s.Hq * D, q0, q_last, D);

    float m[kPer], l[kPer];
#pragma unroll
    for (int i = 0; i < kPer; i++) m[i] = -INFINITY, l[i] = 0.0f;
    for (int64_t k0 = 0; k0 <= q_last; k0 += kTile) {
        __syncthreads(); /* the previous tile's readers are done */
        load_tile_t(Kt, k + g * D, s.Hkv * D, k0, q_last, D);
        __syncthreads();
        float sc[kPer][kPer];
        tile_scores(sc, Qt, Kt, D, s.scale, ty, tx);
#pragma unroll
        for (int i = 0; i < kPer; i++) {
            const int64_t p = q0 + kPer * ty + i;
            float tmax = -INFINITY;
#pragma unroll
            for (int j = 0; j < kPer; j++)
                if (k0 + kPer * tx + j <= p && p <= q_last) tmax = fmaxf(tmax, sc[i][j]);
            const float m_new = fmaxf(m[i], row_max16(tmax));
            float part = 0.0f;
            if (m_new != -INFINITY) /* else nothing visible yet (or a padding row) */
#pragma unroll
                for (int j = 0; j < kPer; j++)
                    if (k0 + kPer * tx + j <= p && p <= q_last) part += expf(sc[i][j] - m_new);
            const float sum = row_sum16(part);
            if (m_new != -INFINITY) {
                const float alpha = m[i] == m_new ? 1.0f : expf(m[i] - m_new);
                l[i] = fmaf(alpha, l[i], sum);
                m[i] = m_new;
            }
        }
    }
    if (tx == 0)
#pragma unroll
        for (int i = 0; i < kPer; i++) {
            const int64_t p = q0 + kPer * ty + i;
            if (p <= q_last) lse[h * s.T + p] = m[i] + logf(l[i]);
        }
}

/* colsum[h][j] for the 64 keys of tile blockIdx.y: query tiles from the
 * diagonal one to the end, in order. */
__global__ void __launch_bounds__(kThreads)
    prefill_colsum_kernel(float *colsum, const float *lse, const float *q, const float *k, PrefillShape s) {
    extern __shared__ __align__(16) float smem[];
    float *Qt = smem, *Kt = Qt + s.D * kLdT, *lse_s = Kt + s.D * kLdT;
    const int tid = threadIdx.x, ty = tid / kGrid, tx = tid % kGrid;
    const int64_t h = blockIdx.x, g = h / s.group, D = s.D, k0 = (int64_t)blockIdx.y * kTile;
    load_tile_t(Kt, k + g * D, s.Hkv * D, k0, s.T - 1, D);

    float col[kPer] = {};
    for (int64_t q0 = k0; q0 < s.T; q0 += kTile) {
        __syncthreads();
        load_tile_t(Qt, q + h * D, s.Hq * D, q0, s.T - 1, D);
        if (tid < kTile) lse_s[tid] = q0 + tid < s.T ? lse[h * s.T + q0 + tid] : 0.0f;
        __syncthreads();
        float sc[kPer][kPer];
        tile_scores(sc, Qt, Kt, D, s.scale, ty, tx);
#pragma unroll
        for (int i = 0; i < kPer; i++) {
            const int64_t p = q0 + kPer * ty + i;
#pragma unroll
            for (int j = 0; j < kPer; j++)
                if (k0 + kPer * tx + j <= p && p < s.T) col[j] += expf(sc[i][j] - lse_s[kPer * ty + i]);
        }
    }
    __syncthreads(); /* Qt becomes the (16, 64) table of column partials */
    float *part = Qt;
#pragma unroll
    for (int j = 0; j < kPer; j++) part[ty * kTile + kPer * tx + j] = col[j];
    __syncthreads();
    if (tid < kTile && k0 + tid < s.T) {
        float sum = 0.0f;
        for (int r = 0; r < kGrid; r++) sum += part[r * kTile + tid];
        colsum[h * s.T + k0 + tid] = sum;
    }
}

/* last[h][w][j] for the 64 x 64 tile (window rows blockIdx.y, keys
 * blockIdx.x) of head blockIdx.z; window row w is query T - W + w. */
__global__ void __launch_bounds__(kThreads)
    prefill_last_kernel(float *last, const float *lse, const float *q, const float *k, PrefillShape s) {
    extern __shared__ __align__(16) float smem[];
    float *Qt = smem, *Kt = Qt + s.D * kLdT, *lse_s = Kt + s.D * kLdT;
    const int tid = threadIdx.x, ty = tid / kGrid, tx = tid % kGrid;
    const int64_t h = blockIdx.z, g = h / s.group, D = s.D;
    const int64_t w0 = (int64_t)blockIdx.y * kTile, k0 = (int64_t)blockIdx.x * kTile, row0 = s.T - s.W;
    const int64_t w_last = w0 + kTile - 1 < s.W - 1 ? w0 + kTile - 1 : s.W - 1;
    float sc[kPer][kPer] = {};
    const bool any_visible = k0 <= row0 + w_last; /* block-uniform */
    if (any_visible) {
        load_tile_t(Qt, q + h * D, s.Hq * D, row0 + w0, row0 + w_last, D);
        load_tile_t(Kt, k + g * D, s.Hkv * D, k0, s.T - 1, D);
        if (tid < kTile) lse_s[tid] = w0 + tid <= w_last ? lse[h * s.T + row0 + w0 + tid] : 0.0f;
        __syncthreads();
        tile_scores(sc, Qt, Kt, D, s.scale, ty, tx);
    }
#pragma unroll
    for (int i = 0; i < kPer; i++) {
        const int64_t w = w0 + kPer * ty + i, p = row0 + w;
        if (w > w_last) continue;
        float *row = last + (h * s.W + w) * s.T;
#pragma unroll
        for (int j = 0; j < kPer; j++) {
            const int64_t key = k0 + kPer * tx + j;
            if (key < s.T) row[key] = any_visible && key <= p ? expf(sc[i][j] - lse_s[kPer * ty + i]) : 0.0f;
        }
    }
}

static const char *kPrefillFn = "attention_prefill_stats_cuda", *kDecodeFn = "attention_decode_cuda";

/* len is T for the prefill, max_n for the decode. */
static void die_shape(const char *fn, const char *why, int64_t len, int64_t Hq, int64_t Hkv, int64_t D) {
    fprintf(stderr, "kvcpt: %s: %s (%s=%lld Hq=%lld Hkv=%lld D=%lld)\n", fn, why, fn == kPrefillFn ? "T" : "max_n",
            (long long)len, (long long)Hq, (long long)Hkv, (long long)D);
    exit(1);
}

static void check_heads(const char *fn, int64_t len, int64_t Hq, int64_t Hkv, int64_t D) {
    if (Hq <= 0 || Hkv <= 0) die_shape(fn, "Hq and Hkv must be > 0", len, Hq, Hkv, D);
    if (Hq % Hkv != 0) die_shape(fn, "Hkv must divide Hq", len, Hq, Hkv, D);
    if (D < 1 || D > kMaxHeadDim) die_shape(fn, "head dim D must be in 1..256", len, Hq, Hkv, D);
}

static void set_smem(const void *kernel, size_t bytes) {
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
}

extern "C" void attention_prefill_stats_cuda(float *colsum, float *last, const float *q, const float *k, int64_t T,
                                             int64_t Hq, int64_t Hkv, int64_t D, int64_t W) {
    const char *fn = kPrefillFn;
    check_heads(fn, T, Hq, Hkv, D);
    if (T < 0 || W < 0) die_shape(fn, "T and W must be >= 0", T, Hq, Hkv, D);
    if (Hq > 65535) die_shape(fn, "Hq exceeds the grid's dimension (65535)", T, Hq, Hkv, D);
    if ((T + kTile - 1) / kTile > 65535) die_shape(fn, "T exceeds 65535 tiles of 64", T, Hq, Hkv, D);
    if (W > T) W = T;
    if (T == 0 || (!colsum && (!last || W == 0))) return;
    const PrefillShape s = {T, Hq, Hkv, D, Hq / Hkv, W, 1.0f / sqrtf((float)D)};
    const size_t bytes = prefill_smem_bytes(D);
    float *lse = workspace_floats(&g_lse_ws, (size_t)(Hq * T));

    /* without colsum only the window's rows need their lse */
    const int64_t row_begin = colsum ? 0 : T - W;
    set_smem((const void *)prefill_lse_kernel, bytes);
    const dim3 row_tiles((unsigned int)Hq, ceil_div_u(T - row_begin, kTile));
    prefill_lse_kernel<<<row_tiles, kThreads, bytes>>>(lse, q, k, s, row_begin);
    CUDA_CHECK_LAUNCH();
    if (colsum) {
        set_smem((const void *)prefill_colsum_kernel, bytes);
        const dim3 key_tiles((unsigned int)Hq, ceil_div_u(T, kTile));
        prefill_colsum_kernel<<<key_tiles, kThreads, bytes>>>(colsum, lse, q, k, s);
        CUDA_CHECK_LAUNCH();
    }
    if (last && W > 0) {
        set_smem((const void *)prefill_last_kernel, bytes);
        const dim3 grid(ceil_div_u(T, kTile), ceil_div_u(W, kTile), (unsigned int)Hq);
        prefill_last_kernel<<<grid, kThreads, bytes>>>(last, lse, q, k, s);
        CUDA_CHECK_LAUNCH();
    }
}

/* ---------------------------------------------------------------- decode */

static constexpr int kChunk = 256;          /* keys per block of kernel A */
static constexpr int kKeyTile = 32;         /* keys per staged K / V tile */
static constexpr int kDecThreads = 256;     /* 8 warps */
static constexpr int kMaxGroupDim = 2048;   /* group * D */
static constexpr int kOutPerThread = kMaxGroupDim / kDecThreads;
static constexpr int kCombineThreads = 128;
static_assert(kChunk == kDecThreads, "kernel A loads one position per thread");

/* Every KV head's key list, by value (off and n live on the host). */
struct DecodeKeys {
    int64_t off[ATTENTION_DECODE_MAX_KV_HEADS], n[ATTENTION_DECODE_MAX_KV_HEADS];
};

struct DecodeShape {
    int64_t Hq, Hkv, group, D, max_n, chunks;
    float scale;
};

/* The decode workspace: per (g, chunk, head of the group) the chunk's
 * partial output (D floats), max and sum; per query head M and Z. */
struct DecodeParts {
    float *o, *m, *l, *stats;
};

/* Shared memory of kernel A: positions, q of the group, the chunk's scores
 * (then weights), one staged K or V tile with rows padded to D + 1. */
static size_t decode_smem_bytes(int64_t group, int64_t D) {
    return sizeof(int64_t) * kChunk + sizeof(float) * (size_t)(group * D + group * kChunk + kKeyTile * (D + 1));
}

/* tile[r][d] = row pos[r] of a (cap, Hkv, D) cache at KV head g, or 0 for r >= nk. */
__device__ void load_kv_tile(float *tile, const float *cache, const int64_t *pos, int nk, const DecodeShape &s,
                             int64_t g) {
    const int64_t D = s.D;
    for (int64_t idx = threadIdx.x; idx < kKeyTile * D; idx += kDecThreads) {
        const int64_t r = idx / D, d = idx % D;
        tile[r * (D + 1) + d] = r < nk ? cache[(pos[r] * s.Hkv + g) * D + d] : 0.0f;
    }
}

__global__ void __launch_bounds__(kDecThreads)
    decode_chunk_kernel(DecodeParts parts, float *probs, const float *q, const float *kc, const float *vc,
                        const int32_t *key_list, DecodeKeys keys, DecodeShape s) {
    extern __shared__ __align__(16) unsigned char dsmem[];
    const int64_t g = blockIdx.y, c = blockIdx.x, G = s.group, D = s.D, t0 = c * kChunk;
    const int64_t cnt = keys.n[g];
    if (t0 >= cnt) return; /* a shorter list than the longest one: nothing here */
    const int nk = (int)(cnt - t0 < kChunk ? cnt - t0 : kChunk);
    int64_t *pos = (int64_t *)dsmem;
    float *q_s = (float *)(pos + kChunk), *w_s = q_s + G * D, *tile = w_s + G * kChunk;
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, warps = kDecThreads / 32;

    const int32_t *list = keys.off[g] >= 0 ? key_list + keys.off[g] : nullptr;
    if (tid < nk) pos[tid] = list ? (int64_t)list[t0 + tid] : t0 + tid;
    for (int64_t e = tid; e < G * D; e += kDecThreads) q_s[e] = q[g * G * D + e];

    /* scores: warp = head of the group, lane = key of the tile */
    for (int r0 = 0; r0 < nk; r0 += kKeyTile) {
        const int tk = nk - r0 < kKeyTile ? nk - r0 : kKeyTile;
        __syncthreads(); /* pos and q_s are written; the previous tile is read */
        load_kv_tile(tile, kc, pos + r0, tk, s, g);
        __syncthreads();
        for (int64_t hh = warp; hh < G; hh += warps) {
            if (lane >= tk) continue;
            const float *qr = q_s + hh * D, *kr = tile + lane * (D + 1);
            float acc = 0.0f;
            for (int64_t d = 0; d < D; d++) acc = fmaf(qr[d], kr[d], acc);
            const float sc = acc * s.scale;
            w_s[hh * kChunk + r0 + lane] = sc;
            if (probs) probs[(g * G + hh) * s.max_n + t0 + r0 + lane] = sc;
        }
    }
    __syncthreads();

    /* chunk max and sum per head; the scores become weights exp(s - m_c) */
    const int64_t part_row = (g * s.chunks + c) * G; /* first (g, c, head) row */
    for (int64_t hh = warp; hh < G; hh += warps) {   /* warp-uniform: the shuffles see every lane */
        float *w = w_s + hh * kChunk, mx = -INFINITY, sum = 0.0f;
        for (int r = lane; r < nk; r += 32) mx = fmaxf(mx, w[r]);
        mx = warp_max(mx);
        for (int r = lane; r < nk; r += 32) sum += (w[r] = expf(w[r] - mx));
        sum = warp_sum(sum);
        if (lane == 0) parts.m[part_row + hh] = mx, parts.l[part_row + hh] = sum;
    }

    /* o_c[hh][d] = sum over the chunk's keys, in order, of w * v */
    float acc[kOutPerThread] = {};
    for (int r0 = 0; r0 < nk; r0 += kKeyTile) {
        const int tk = nk - r0 < kKeyTile ? nk - r0 : kKeyTile;
        __syncthreads(); /* the weights are final; the previous tile is read */
        load_kv_tile(tile, vc, pos + r0, tk, s, g);
        __syncthreads();
#pragma unroll
        for (int i = 0; i < kOutPerThread; i++) {
            const int64_t e = tid + (int64_t)kDecThreads * i, hh = e / D, d = e % D;
            if (e >= G * D) break;
            const float *w = w_s + hh * kChunk + r0;
            for (int r = 0; r < tk; r++) acc[i] = fmaf(w[r], tile[r * (D + 1) + d], acc[i]);
        }
    }
#pragma unroll
    for (int i = 0; i < kOutPerThread; i++) {
        const int64_t e = tid + (int64_t)kDecThreads * i;
        if (e < G * D) parts.o[part_row * D + e] = acc[i];
    }
}

/* out of one query head from its group's chunks, in ascending order. */
__global__ void __launch_bounds__(kCombineThreads)
    decode_combine_kernel(float *out, DecodeParts parts, DecodeKeys keys, DecodeShape s) {
    const int64_t h = blockIdx.x, G = s.group, g = h / G, hh = h % G, D = s.D;
    const int64_t chunks = (keys.n[g] + kChunk - 1) / kChunk, row0 = g * s.chunks * G + hh;
    float M = -INFINITY, Z = 0.0f;
    for (int64_t c = 0; c < chunks; c++) M = fmaxf(M, parts.m[row0 + c * G]);
    for (int64_t c = 0; c < chunks; c++) {
        const float mc = parts.m[row0 + c * G];
        Z = fmaf(parts.l[row0 + c * G], mc == M ? 1.0f : expf(mc - M), Z);
    }
    for (int64_t d = threadIdx.x; d < D; d += kCombineThreads) {
        float acc = 0.0f;
        for (int64_t c = 0; c < chunks; c++) {
            const float mc = parts.m[row0 + c * G];
            acc = fmaf(parts.o[(row0 + c * G) * D + d], mc == M ? 1.0f : expf(mc - M), acc);
        }
        out[h * D + d] = acc / Z;
    }
    if (threadIdx.x == 0) parts.stats[2 * h] = M, parts.stats[2 * h + 1] = Z;
}

/* probs[h][t] = exp(s - M_h) / Z_h over each head's n[g] entries. */
__global__ void decode_normalize_kernel(float *probs, DecodeParts parts, DecodeKeys keys, DecodeShape s) {
    GRID_STRIDE(i, s.Hq * s.max_n) {
        const int64_t h = i / s.max_n, t = i % s.max_n;
        if (t >= keys.n[h / s.group]) continue;
        probs[i] = expf(probs[i] - parts.stats[2 * h]) / parts.stats[2 * h + 1];
    }
}

static void check_decode(const int64_t *off, const int64_t *n, int64_t max_n, int64_t Hq, int64_t Hkv, int64_t D) {
    const char *fn = kDecodeFn;
    check_heads(fn, max_n, Hq, Hkv, D);
    if (Hkv > ATTENTION_DECODE_MAX_KV_HEADS)
        die_shape(fn, "Hkv exceeds ATTENTION_DECODE_MAX_KV_HEADS (64)", max_n, Hq, Hkv, D);
    if ((Hq / Hkv) * D > kMaxGroupDim)
        die_shape(fn, "group * D exceeds 2048 (a block's register outputs)", max_n, Hq, Hkv, D);
    for (int64_t g = 0; g < Hkv; g++)
        if (n[g] < 1 || n[g] > max_n || n[g] > INT32_MAX) {
            fprintf(stderr, "kvcpt: %s: KV head %lld attends to %lld keys; expected 1..max_n (%lld)\n", fn,
                    (long long)g, (long long)n[g], (long long)max_n);
            exit(1);
        }
}

extern "C" void attention_decode_cuda(float *out, float *probs, const float *q, const float *kc, const float *vc,
                                      const int32_t *keys, const int64_t *off, const int64_t *n, int64_t max_n,
                                      int64_t Hq, int64_t Hkv, int64_t D) {
    check_decode(off, n, max_n, Hq, Hkv, D);
    DecodeKeys kl;
    int64_t longest = 0;
    for (int64_t g = 0; g < Hkv; g++) {
        kl.off[g] = off[g], kl.n[g] = n[g];
        longest = n[g] > longest ? n[g] : longest;
    }
    const int64_t G = Hq / Hkv, chunks = (longest + kChunk - 1) / kChunk;
    const DecodeShape s = {Hq, Hkv, G, D, max_n, chunks, 1.0f / sqrtf((float)D)};
    const int64_t rows = Hkv * chunks * G; /* (g, chunk, head of the group) */
    float *ws = workspace_floats(&g_decode_ws, (size_t)(rows * D + 2 * rows + 2 * Hq));
    const DecodeParts parts = {ws, ws + rows * D, ws + rows * D + rows, ws + rows * D + 2 * rows};

    const size_t bytes = decode_smem_bytes(G, D);
    set_smem((const void *)decode_chunk_kernel, bytes);
    const dim3 grid((unsigned int)chunks, (unsigned int)Hkv);
    decode_chunk_kernel<<<grid, kDecThreads, bytes>>>(parts, probs, q, kc, vc, keys, kl, s);
    CUDA_CHECK_LAUNCH();
    decode_combine_kernel<<<(unsigned int)Hq, kCombineThreads>>>(out, parts, kl, s);
    CUDA_CHECK_LAUNCH();
    if (probs) {
        decode_normalize_kernel<<<grid_for(Hq * max_n, 256), 256>>>(probs, parts, kl, s);
        CUDA_CHECK_LAUNCH();
    }
}
