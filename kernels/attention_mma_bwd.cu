/* Causal attention backward on tensor cores (FlashAttention-2), the bf16
 * engine's twin of attention_backward_cuda (kernels/attention_mma.h).
 * Deterministic: no atomics; every output element is one thread's sum in a
 * fixed order, written by one kernel and then added to by the next.
 *
 *   dsum   (B, Hq, T) = rowsum(dO * O), fp32, one warp per row.
 * The causal rows in one pass (ATTN_BWD_ONE_PASS, the default:
 * kernels/attention_mma_bwd_one_pass.cuh) or in two passes
 * (ATTN_BWD_TWO_PASS, KVCPT_ATTN_BWD=two_pass), these:
 *   dQ     rows [0, L): one block of 4 warps per (64-row tile, batch row x
 *          query head). Q and dO fragments stay in registers; per key tile
 *          up to the diagonal: S = Q K^T, P = exp(S scale - lse),
 *          dP = dO V^T (V rows are the .col operand, as K's), dS = P (dP -
 *          dsum), dQ += dS K (dS repacked from the accumulators into A
 *          fragments, K by ldmatrix.trans); dQ scaled once at the end.
 *   dK, dV every key: one block of 4 warps per (64-key tile, batch row x KV
 *          head), each warp 16 keys with K and V fragments in registers;
 *          per query head of the group, per query tile of rows [0, L) from
 *          the key tile's diagonal on: S^T = K Q^T, P^T = exp(S^T scale -
 *          lse), dV += P^T dO, dP^T = V dO^T, dS^T = P^T (dP^T - dsum),
 *          dK += dS^T Q (P^T and dS^T repacked in registers, dO and Q by
 *          ldmatrix.trans); written once (keys no causal row sees get 0).
 *   suffix the RefreshKV rows [L, T) in fp32 (unrounded inputs, like their
 *          forward): dQ of each row over its selected and local keys, one
 *          warp per (row, head); then each key a suffix row sees (the
 *          selected prefix keys and the local ones) gets those rows' dK and
 *          dV added, one warp per (key, KV head), heads then rows in order.
 * bf16 as in the forward: Q, K, V, dO rounded when loaded; P and dS rounded
 * before their products; fp32 sums. P in base 2 as in the forward: exp2f of
 * S scale log2(e) - lse log2(e).
 * Grid: x = batch row x head, y = the tile, so blocks start tile by tile
 * across all heads: dQ from the last query tile (the most key tiles) down,
 * dK/dV from the first key tile (the most query tiles) up, heaviest first;
 * the order changes no bit. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "attention_mma_bwd_one_pass.cuh"
#include "attention_mma_tiles.cuh"
#include "cuda_reduce.cuh"

extern "C" {
#include "attention_mma.h"
#include "attention_rows.h"
}

static constexpr int kTile = kMmaTile, kThreads = kMmaThreads;

template <int D> struct BwdSmem {
    static constexpr int ld = MmaTileLd<D>::ld;
    /* dQ: two bf16 tiles (Q, dO, then K, V) */
    static constexpr size_t dq_bytes = 2 * MmaTileLd<D>::tile_bytes;
    /* dK/dV: four bf16 tiles (K, V resident; Q, dO per step) and two fp32
     * rows (lse, dsum). K and V stay in shared memory, not registers: at
     * D = 128 their fragments beside the dK and dV accumulators would
     * spill */
    static constexpr size_t dkdv_bytes = 4 * MmaTileLd<D>::tile_bytes + (size_t)2 * kTile * sizeof(float);
};

/* dsum[(b, h, p)] = sum_d dout * out, one warp per row */
template <typename E>
__global__ void attention_mma_dsum_kernel(float *dsum, const E *dout, const E *out, int64_t B, int64_t T, int64_t Hq,
                                          int64_t D) {
    const int64_t w = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int lane = threadIdx.x & 31;
    if (w >= B * T * Hq) return; /* whole warps leave together: B*T*Hq rows, 32 lanes each */
    const int64_t b = w / (T * Hq), p = (w / Hq) % T, h = w % Hq;
    const E *o = out + w * D, *d = dout + w * D;
    float acc = 0.0f;
    for (int64_t i = lane; i < D; i += 32) acc += act_f32(d[i]) * act_f32(o[i]);
    for (int off = 16; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
    if (lane == 0) dsum[(b * Hq + h) * T + p] = acc;
}

template <int D, int kBug, typename E>
__global__ void __launch_bounds__(kThreads)
    attention_mma_dq_kernel(float *dq, const E *dout, const E *q, const E *k, const E *v, const float *lse,
                            const float *dsum, int64_t T, int64_t Hq, int64_t Hkv, int64_t L, float scale) {
    constexpr int ld = BwdSmem<D>::ld, KD = D / 16, ND = D / 8;
    extern __shared__ __align__(16) uint16_t smem_u16[];
    uint16_t *s0 = smem_u16, *s1 = s0 + kTile * ld; /* Q, dO; then K, V */
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int64_t b = blockIdx.x / Hq, h = blockIdx.x % Hq, hk = h / (Hq / Hkv);
    const int64_t q0 = (int64_t)(gridDim.y - 1 - blockIdx.y) * kTile, qstride = Hq * D, kvstride = Hkv * D;
    const float scale_log2 = scale * kLog2e;
    mma_load_rows_bf16<D>(s0, q + (b * T * Hq + h) * D, qstride, q0, L);
    mma_load_rows_bf16<D>(s1, dout + (b * T * Hq + h) * D, qstride, q0, L);
    __syncthreads();
    uint32_t qa[KD][4], da[KD][4];
    mma_load_a_frags<D>(qa, s0, warp * 16, lane);
    mma_load_a_frags<D>(da, s1, warp * 16, lane);
    const int64_t row[2] = {q0 + warp * 16 + g, q0 + warp * 16 + g + 8};
    float row_lse[2], row_dsum[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        row_lse[r] = row[r] < L ? lse[(b * Hq + h) * T + row[r]] * kLog2e : 0.0f;
        row_dsum[r] = row[r] < L ? dsum[(b * Hq + h) * T + row[r]] : 0.0f;
    }
    float acc[ND][4];
#pragma unroll
    for (int n = 0; n < ND; n++) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
    const E *kb = k + (b * T * Hkv + hk) * D, *vb = v + (b * T * Hkv + hk) * D;
    const int64_t last_key = (q0 + kTile < L ? q0 + kTile : L) - 1;
    for (int64_t k0 = 0; k0 <= last_key; k0 += kTile) {
        __syncthreads(); /* the previous tiles (and Q, dO at first) are read */
        mma_load_rows_bf16<D>(s0, kb, kvstride, k0, L);
        mma_load_rows_bf16<D>(s1, vb, kvstride, k0, L);
        __syncthreads();
        float p[8][4], dp[8][4];
        mma_mul_rows_t<D>(p, qa, s0, lane);
        mma_mul_rows_t<D>(dp, da, s1, lane);
#pragma unroll
        for (int j = 0; j < 8; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int64_t key = k0 + j * 8 + 2 * t + (e & 1), r = row[e >> 1];
                const float pr = key <= r && r < L ? exp2f(p[j][e] * scale_log2 - row_lse[e >> 1]) : 0.0f;
                p[j][e] = pr * (dp[j][e] - row_dsum[e >> 1]); /* dS */
            }
        mma_mul_acc<D, kBug == ATTN_MMA_BUG_PT_SWAP, kBug == ATTN_MMA_BUG_B_NO_TRANS>(acc, p, s0,
                                                                                      lane); /* dQ += dS K */
    }
    float *db = dq + (b * T * Hq + h) * D;
#pragma unroll
    for (int r = 0; r < 2; r++) {
        if (row[r] >= L) continue;
#pragma unroll
        for (int n = 0; n < ND; n++) {
            db[row[r] * qstride + n * 8 + 2 * t] = acc[n][2 * r] * scale;
            db[row[r] * qstride + n * 8 + 2 * t + 1] = acc[n][2 * r + 1] * scale;
        }
    }
}

template <int D, int kBug, typename E>
__global__ void __launch_bounds__(kThreads)
    attention_mma_dkdv_kernel(float *dk, float *dv, const E *dout, const E *q, const E *k, const E *v, const float *lse,
                              const float *dsum, int64_t T, int64_t Hq, int64_t Hkv, int64_t L, float scale) {
    constexpr int ld = BwdSmem<D>::ld, ND = D / 8;
    extern __shared__ __align__(16) uint16_t smem_u16[];
    uint16_t *sk = smem_u16, *sv = sk + kTile * ld, *s0 = sv + kTile * ld, *s1 = s0 + kTile * ld; /* K, V, Q, dO */
    float *s_lse = (float *)(s1 + kTile * ld), *s_dsum = s_lse + kTile;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int64_t b = blockIdx.x / Hkv, hk = blockIdx.x % Hkv, group = Hq / Hkv;
    const int64_t k0 = (int64_t)blockIdx.y * kTile, qstride = Hq * D, kvstride = Hkv * D;
    const float scale_log2 = scale * kLog2e;
    mma_load_rows_bf16<D>(sk, k + (b * T * Hkv + hk) * D, kvstride, k0, T);
    mma_load_rows_bf16<D>(sv, v + (b * T * Hkv + hk) * D, kvstride, k0, T);
    const int64_t key[2] = {k0 + warp * 16 + g, k0 + warp * 16 + g + 8};
    float dk_acc[ND][4], dv_acc[ND][4];
#pragma unroll
    for (int n = 0; n < ND; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) dk_acc[n][e] = dv_acc[n][e] = 0.0f;
    for (int64_t hh = 0; hh < group; hh++) {
        const int64_t h = hk * group + hh;
        for (int64_t q0 = k0; q0 < L; q0 += kTile) { /* rows before the key tile see none of it */
            __syncthreads(); /* every warp is done with the previous Q and dO tiles */
            mma_load_rows_bf16<D>(s0, q + (b * T * Hq + h) * D, qstride, q0, L);
            mma_load_rows_bf16<D>(s1, dout + (b * T * Hq + h) * D, qstride, q0, L);
            if (threadIdx.x < kTile) {
                const int64_t p = q0 + threadIdx.x;
                s_lse[threadIdx.x] = p < L ? lse[(b * Hq + h) * T + p] * kLog2e : 0.0f;
                s_dsum[threadIdx.x] = p < L ? dsum[(b * Hq + h) * T + p] : 0.0f;
            }
            __syncthreads();
            float pt[8][4], dpt[8][4]; /* (16 keys x 64 rows) */
            mma_mul_rows_t_smem<D>(pt, sk, warp * 16, s0, lane);  /* S^T = K Q^T */
            mma_mul_rows_t_smem<D>(dpt, sv, warp * 16, s1, lane); /* dP^T = V dO^T */
#pragma unroll
            for (int j = 0; j < 8; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int c = j * 8 + 2 * t + (e & 1);
                    const int64_t r = q0 + c;
                    const float pr = key[e >> 1] <= r && r < L ? exp2f(pt[j][e] * scale_log2 - s_lse[c]) : 0.0f;
                    pt[j][e] = pr;
                    dpt[j][e] = pr * (dpt[j][e] - s_dsum[c]); /* dS^T */
                }
            mma_mul_acc<D, kBug == ATTN_MMA_BUG_PT_SWAP, kBug == ATTN_MMA_BUG_B_NO_TRANS>(dv_acc, pt, s1,
                                                                                          lane);  /* dV += P^T dO */
            mma_mul_acc<D, kBug == ATTN_MMA_BUG_PT_SWAP, kBug == ATTN_MMA_BUG_B_NO_TRANS>(dk_acc, dpt, s0,
                                                                                          lane); /* dK += dS^T Q */
        }
    }
    float *dkb = dk + (b * T * Hkv + hk) * D, *dvb = dv + (b * T * Hkv + hk) * D;
#pragma unroll
    for (int r = 0; r < 2; r++) {
        if (key[r] >= T) continue;
#pragma unroll
        for (int n = 0; n < ND; n++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                dkb[key[r] * kvstride + n * 8 + 2 * t + e] = dk_acc[n][2 * r + e] * scale;
                dvb[key[r] * kvstride + n * 8 + 2 * t + e] = dv_acc[n][2 * r + e];
            }
    }
}

/* Sum over the warp's lanes of a[i] * b[i], i = lane, lane + 32, ... < D */
template <typename E> static __device__ float warp_dot(const E *a, const E *b, int64_t D, int lane) {
    float s = 0.0f;
    for (int64_t i = lane; i < D; i += 32) s += act_f32(a[i]) * act_f32(b[i]);
    for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
    return s;
}

/* The suffix rows' keys (kernels/attention.h): the paper's rows see
 * sel ++ (L..p); with per-row records (W > 0) row p sees its record's keys,
 * or every key 0..p when the record is a full row (n = 0). */
struct SuffixKeys {
    const int32_t *sel; /* the (b, KV head)'s selection or records */
    int64_t ks, L, W;   /* W: record width, 0 for the paper's rows */
};

__device__ __forceinline__ int64_t suffix_key_count(const SuffixKeys &sk, int64_t p) {
    if (sk.W == 0) return sk.ks + (p - sk.L + 1);
    const int32_t n = sk.sel[(p - sk.L) * (1 + sk.W)];
    return n == 0 ? p + 1 : n;
}

__device__ __forceinline__ int64_t suffix_key(const SuffixKeys &sk, int64_t p, int64_t i) {
    if (sk.W == 0) return i < sk.ks ? sk.sel[i] : sk.L + (i - sk.ks);
    const int32_t *rec = sk.sel + (p - sk.L) * (1 + sk.W);
    return rec[0] == 0 ? i : rec[1 + i];
}

/* The suffix kernels' blocks: kSuffixWarps warps share a row's keys (dQ) or
 * a key's rows (dK, dV), warp w taking every kSuffixWarps-th from w, and
 * their partials are summed in warp order: the same bits in any block
 * order, wider grids than a warp per row or key (the 8B shape's 50 rows
 * give 1600 (row, head) pairs, each over about 2048 keys). */
static constexpr int kSuffixWarps = 8;

/* The block's sum of each warp's a[c] for d = lane + 32 c < D, in warp
 * order, to thread d (threads from D on get 0); part: kSuffixWarps x 128
 * floats of shared memory (kBug ATTN_MMA_BUG_SUFFIX_WARP: the last warp's
 * left out). */
template <int kBug> static __device__ float suffix_warp_sum(float (*part)[128], const float a[4], int64_t D) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    for (int c = 0; c < 4 && lane + 32 * c < D; c++) part[warp][lane + 32 * c] = a[c];
    __syncthreads();
    float s = 0.0f;
    const int warps = kBug == ATTN_MMA_BUG_SUFFIX_WARP ? kSuffixWarps - 1 : kSuffixWarps;
    if (threadIdx.x < D)
        for (int w = 0; w < warps; w++) s += part[w][threadIdx.x];
    return s;
}

/* dQ of the suffix rows p in [L, T): one block per (row, batch row x query
 * head), its warps over the row's keys */
template <int kBug, typename E>
__global__ void attention_mma_suffix_dq_kernel(float *dq, const E *dout, const E *q, const E *k, const E *v,
                                               const float *lse, const float *dsum, const int32_t *sel, int64_t T,
                                               int64_t Hq, int64_t Hkv, int64_t D, int64_t L, int64_t ks, int64_t W,
                                               int64_t per, float scale) {
    __shared__ float part[kSuffixWarps][128];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int64_t p = L + blockIdx.x, b = blockIdx.y / Hq, h = blockIdx.y % Hq, hk = h / (Hq / Hkv);
    const int64_t qstride = Hq * D, kvstride = Hkv * D, row = (b * Hq + h) * T + p;
    const E *qp = q + (b * T * Hq + h) * D + p * qstride, *dop = dout + (b * T * Hq + h) * D + p * qstride;
    const E *kb = k + (b * T * Hkv + hk) * D, *vb = v + (b * T * Hkv + hk) * D;
    const SuffixKeys sk = {sel + (b * Hkv + hk) * per, ks, L, W};
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f}; /* d = lane + 32 i, D <= 128 */
    const int64_t n = suffix_key_count(sk, p);
    for (int64_t i = warp; i < n; i += kSuffixWarps) {
        const int64_t j = suffix_key(sk, p, i);
        const float pr = expf(warp_dot(qp, kb + j * kvstride, D, lane) * scale - lse[row]);
        const float ds = pr * (warp_dot(dop, vb + j * kvstride, D, lane) - dsum[row]);
        for (int c = 0; c < 4 && lane + 32 * c < D; c++) acc[c] += ds * act_f32(kb[j * kvstride + lane + 32 * c]);
    }
    const float s = suffix_warp_sum<kBug>(part, acc, D);
    if (threadIdx.x < D) dq[(b * T * Hq + h) * D + p * qstride + threadIdx.x] = s * scale;
}

/* dK, dV += the suffix rows' share, for each key they see: blockIdx.x < ks
 * the selected prefix keys, then the local keys L..T-1; with per-row
 * records (rowmask set) every key j, for the rows whose bitmap holds it.
 * One block per (key, batch row x KV head), its warps over the pairs
 * (group's head, row) */
template <int kBug, typename E>
__global__ void attention_mma_suffix_dkdv_kernel(float *dk, float *dv, const E *dout, const E *q, const E *k,
                                                 const E *v, const float *lse, const float *dsum, const int32_t *sel,
                                                 const uint64_t *rowmask, int64_t words, int64_t T, int64_t Hq,
                                                 int64_t Hkv, int64_t D, int64_t L, int64_t ks, float scale) {
    __shared__ float part[2][kSuffixWarps][128];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int64_t b = blockIdx.y / Hkv, hk = blockIdx.y % Hkv, group = Hq / Hkv;
    const int64_t i = blockIdx.x;
    const int64_t j = rowmask ? i : i < ks ? sel[(b * Hkv + hk) * ks + i] : L + (i - ks);
    const uint64_t *rows = rowmask ? rowmask + blockIdx.y * (T - L) * words + j / 64 : nullptr;
    const int64_t qstride = Hq * D, kvstride = Hkv * D;
    const E *kj = k + (b * T * Hkv + hk) * D + j * kvstride, *vj = v + (b * T * Hkv + hk) * D + j * kvstride;
    float ak[4] = {0.0f, 0.0f, 0.0f, 0.0f}, av[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    const int64_t p0 = j < L ? L : j, nrows = T - p0; /* a local key j is seen from row j on */
    for (int64_t pair = warp; pair < group * nrows; pair += kSuffixWarps) {
        const int64_t h = hk * group + pair / nrows, p = p0 + pair % nrows;
        if (rows && !(rows[(p - L) * words] >> (j % 64) & 1)) continue; /* the same for every lane */
        const int64_t row = (b * Hq + h) * T + p;
        const E *qp = q + (b * T * Hq + h) * D + p * qstride, *dop = dout + (b * T * Hq + h) * D + p * qstride;
        const float pr = expf(warp_dot(qp, kj, D, lane) * scale - lse[row]);
        const float ds = pr * (warp_dot(dop, vj, D, lane) - dsum[row]);
        for (int c = 0; c < 4 && lane + 32 * c < D; c++) {
            av[c] += pr * act_f32(dop[lane + 32 * c]);
            ak[c] += ds * act_f32(qp[lane + 32 * c]);
        }
    }
    const float sk = suffix_warp_sum<kBug>(part[0], ak, D), sv = suffix_warp_sum<kBug>(part[1], av, D);
    if (threadIdx.x < D) {
        dk[(b * T * Hkv + hk) * D + j * kvstride + threadIdx.x] += sk * scale;
        dv[(b * T * Hkv + hk) * D + j * kvstride + threadIdx.x] += sv;
    }
}

template <int D, int kBug, typename E>
static void launch_causal(float *dq, float *dk, float *dv, const E *dout, const E *q, const E *k, const E *v,
                          const float *lse, const float *dsum, int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t L,
                          float scale) {
    const size_t dq_bytes = BwdSmem<D>::dq_bytes, dkdv_bytes = BwdSmem<D>::dkdv_bytes;
    CUDA_CHECK(cudaFuncSetAttribute(attention_mma_dq_kernel<D, kBug, E>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    (int)dq_bytes));
    CUDA_CHECK(cudaFuncSetAttribute(attention_mma_dkdv_kernel<D, kBug, E>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    (int)dkdv_bytes));
    if (L > 0) {
        attention_mma_dq_kernel<D, kBug, E><<<dim3((unsigned int)(B * Hq), ceil_div_u(L, kTile)), kThreads, dq_bytes>>>(
            dq, dout, q, k, v, lse, dsum, T, Hq, Hkv, L, scale);
        CUDA_CHECK_LAUNCH();
    }
    attention_mma_dkdv_kernel<D, kBug, E>
        <<<dim3((unsigned int)(B * Hkv), ceil_div_u(T, kTile)), kThreads, dkdv_bytes>>>(dk, dv, dout, q, k, v, lse,
                                                                                        dsum, T, Hq, Hkv, L, scale);
    CUDA_CHECK_LAUNCH();
}

template <int kBug, typename E>
static void backward(float *dq, float *dk, float *dv, const E *dout, const E *q, const E *k, const E *v, const E *out,
                     const float *lse, const int32_t *sel, int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t D,
                     const RefreshMask *m, AttnBwdVariant variant, int64_t groups, const char *fn) {
    if (!mma_checked(fn, sel, B, T, Hq, Hkv, D, m)) return;
    const int active = refresh_active(m, T), per_row = active && refresh_per_row(m);
    const int64_t L = active ? m->L : T, ks = active ? refresh_num_selected(m) : 0;
    const int64_t W = per_row ? refresh_row_width(m, T) : 0, per = per_row ? refresh_sel_len(m, T) : ks;
    const int one_pass = variant == ATTN_BWD_ONE_PASS;
    const int64_t G = one_pass ? (groups > 0 ? groups : attention_mma_bwd_groups(B, T, Hq)) : 0;
    const int64_t nk = (T + kOnePassKeys - 1) / kOnePassKeys;
    if (G > nk || G > 65535) {
        fprintf(stderr, "kvcpt: %s: %lld dQ groups for %lld key tiles\n", fn, (long long)G, (long long)nk);
        exit(1);
    }
    const float scale = 1.0f / sqrtf((float)D);
    /* dsum (B, Hq, T); the one pass's dq_rest (G - 1, B, T, Hq, D: its
     * partial dQ but group 0's, which is dq itself), dk_part and dv_part (B,
     * T, Hq, D) after it: attention_cuda_backward_scratch_bytes
     * counts them. No product overflows: mma_checked bounds B Hq, T, D and
     * G is at most 8 by default (a test's own choice otherwise) */
    const int64_t n_dsum = B * Hq * T, n_head = B * T * Hq * D;
    float *dsum;
    CUDA_CHECK(
        cudaMallocAsync((void **)&dsum, sizeof(float) * (size_t)(n_dsum + (one_pass ? (G + 1) * n_head : 0)), 0));
    attention_mma_dsum_kernel<E><<<grid_for(B * T * Hq * 32, 256), 256>>>(dsum, dout, out, B, T, Hq, D);
    CUDA_CHECK_LAUNCH();
    /* the suffix rows' plant plants nothing in the causal kernels */
    constexpr int kCausalBug = kBug == ATTN_MMA_BUG_SUFFIX_WARP ? ATTN_MMA_OK : kBug;
    if (one_pass) {
        float *dq_rest = dsum + n_dsum, *dk_part = dq_rest + (G - 1) * n_head, *dv_part = dk_part + n_head;
        switch (D) {
            case 16:
                launch_causal_one_pass<16, kCausalBug>(dq, dk, dv, dq_rest, dk_part, dv_part, dout, q, k, v, lse, dsum,
                                                       B, T, Hq, Hkv, L, G, scale);
                break;
            case 32:
                launch_causal_one_pass<32, kCausalBug>(dq, dk, dv, dq_rest, dk_part, dv_part, dout, q, k, v, lse, dsum,
                                                       B, T, Hq, Hkv, L, G, scale);
                break;
            case 64:
                launch_causal_one_pass<64, kCausalBug>(dq, dk, dv, dq_rest, dk_part, dv_part, dout, q, k, v, lse, dsum,
                                                       B, T, Hq, Hkv, L, G, scale);
                break;
            default:
                launch_causal_one_pass<128, kCausalBug>(dq, dk, dv, dq_rest, dk_part, dv_part, dout, q, k, v, lse, dsum,
                                                        B, T, Hq, Hkv, L, G, scale);
                break;
        }
    } else {
        /* the one pass's own plants (dQ groups, dS^T barrier) plant nothing here */
        constexpr int kTwoBug = kBug == ATTN_MMA_BUG_B_NO_TRANS || kBug == ATTN_MMA_BUG_PT_SWAP ? kBug : ATTN_MMA_OK;
        switch (D) {
            case 16: launch_causal<16, kTwoBug>(dq, dk, dv, dout, q, k, v, lse, dsum, B, T, Hq, Hkv, L, scale); break;
            case 32: launch_causal<32, kTwoBug>(dq, dk, dv, dout, q, k, v, lse, dsum, B, T, Hq, Hkv, L, scale); break;
            case 64: launch_causal<64, kTwoBug>(dq, dk, dv, dout, q, k, v, lse, dsum, B, T, Hq, Hkv, L, scale); break;
            default: launch_causal<128, kTwoBug>(dq, dk, dv, dout, q, k, v, lse, dsum, B, T, Hq, Hkv, L, scale); break;
        }
    }
    if (active) {
        constexpr int kSuffixBug = kBug == ATTN_MMA_BUG_SUFFIX_WARP ? kBug : ATTN_MMA_OK;
        attention_mma_suffix_dq_kernel<kSuffixBug, E>
            <<<dim3((unsigned int)(T - L), (unsigned int)(B * Hq)), 32 * kSuffixWarps>>>(
                dq, dout, q, k, v, lse, dsum, sel, T, Hq, Hkv, D, L, ks, W, per, scale);
        CUDA_CHECK_LAUNCH();
        /* per-row records: any key may be seen, found through the rows' bitmaps */
        uint64_t *rowmask = attention_row_mask_cuda(sel, B, T, Hkv, m);
        attention_mma_suffix_dkdv_kernel<kSuffixBug, E>
            <<<dim3((unsigned int)(per_row ? T : ks + T - L), (unsigned int)(B * Hkv)), 32 * kSuffixWarps>>>(
                dk, dv, dout, q, k, v, lse, dsum, sel, rowmask, attention_row_mask_words(T), T, Hq, Hkv, D, L, ks,
                scale);
        CUDA_CHECK_LAUNCH();
        if (rowmask) CUDA_CHECK(cudaFreeAsync(rowmask, 0));
    }
    CUDA_CHECK(cudaFreeAsync(dsum, 0));
}

extern "C" void attention_backward_mma_variant_cuda(float *dq, float *dk, float *dv, const float *dout, const float *q,
                                                    const float *k, const float *v, const float *out, const float *lse,
                                                    const int32_t *sel, int64_t B, int64_t T, int64_t Hq, int64_t Hkv,
                                                    int64_t D, const RefreshMask *m, AttnBwdVariant variant) {
    backward<ATTN_MMA_OK>(dq, dk, dv, dout, q, k, v, out, lse, sel, B, T, Hq, Hkv, D, m, variant, 0,
                          "attention_backward_mma_variant_cuda");
}

extern "C" void attention_backward_mma_bf16_variant_cuda(float *dq, float *dk, float *dv, const bf16 *dout,
                                                         const bf16 *q, const bf16 *k, const bf16 *v, const bf16 *out,
                                                         const float *lse, const int32_t *sel, int64_t B, int64_t T,
                                                         int64_t Hq, int64_t Hkv, int64_t D, const RefreshMask *m,
                                                         AttnBwdVariant variant) {
    backward<ATTN_MMA_OK>(dq, dk, dv, dout, q, k, v, out, lse, sel, B, T, Hq, Hkv, D, m, variant, 0,
                          "attention_backward_mma_bf16_variant_cuda");
}

extern "C" void attention_backward_mma_cuda(float *dq, float *dk, float *dv, const float *dout, const float *q,
                                            const float *k, const float *v, const float *out, const float *lse,
                                            const int32_t *sel, int64_t B, int64_t T, int64_t Hq, int64_t Hkv,
                                            int64_t D, const RefreshMask *m) {
    backward<ATTN_MMA_OK>(dq, dk, dv, dout, q, k, v, out, lse, sel, B, T, Hq, Hkv, D, m,
                          attention_bwd_variant_default(), 0, "attention_backward_mma_cuda");
}

extern "C" void attention_backward_mma_bf16_cuda(float *dq, float *dk, float *dv, const bf16 *dout, const bf16 *q,
                                                 const bf16 *k, const bf16 *v, const bf16 *out, const float *lse,
                                                 const int32_t *sel, int64_t B, int64_t T, int64_t Hq, int64_t Hkv,
                                                 int64_t D, const RefreshMask *m) {
    backward<ATTN_MMA_OK>(dq, dk, dv, dout, q, k, v, out, lse, sel, B, T, Hq, Hkv, D, m,
                          attention_bwd_variant_default(), 0, "attention_backward_mma_bf16_cuda");
}

extern "C" void attention_backward_mma_planted_cuda(float *dq, float *dk, float *dv, const float *dout, const float *q,
                                                    const float *k, const float *v, const float *out, const float *lse,
                                                    const int32_t *sel, int64_t B, int64_t T, int64_t Hq, int64_t Hkv,
                                                    int64_t D, const RefreshMask *m, AttnBwdVariant variant,
                                                    int64_t groups, AttnMmaBug bug) {
    const char *fn = "attention_backward_mma_planted_cuda";
    switch (bug) {
        case ATTN_MMA_BUG_B_NO_TRANS:
            backward<ATTN_MMA_BUG_B_NO_TRANS>(dq, dk, dv, dout, q, k, v, out, lse, sel, B, T, Hq, Hkv, D, m, variant,
                                              groups, fn);
            break;
        case ATTN_MMA_BUG_PT_SWAP:
            backward<ATTN_MMA_BUG_PT_SWAP>(dq, dk, dv, dout, q, k, v, out, lse, sel, B, T, Hq, Hkv, D, m, variant,
                                           groups, fn);
            break;
        case ATTN_MMA_BUG_DQ_GROUP:
            backward<ATTN_MMA_BUG_DQ_GROUP>(dq, dk, dv, dout, q, k, v, out, lse, sel, B, T, Hq, Hkv, D, m, variant,
                                            groups, fn);
            break;
        case ATTN_MMA_BUG_DS_NO_SYNC:
            backward<ATTN_MMA_BUG_DS_NO_SYNC>(dq, dk, dv, dout, q, k, v, out, lse, sel, B, T, Hq, Hkv, D, m, variant,
                                              groups, fn);
            break;
        case ATTN_MMA_BUG_SUFFIX_WARP:
            backward<ATTN_MMA_BUG_SUFFIX_WARP>(dq, dk, dv, dout, q, k, v, out, lse, sel, B, T, Hq, Hkv, D, m, variant,
                                               groups, fn);
            break;
        default:
            backward<ATTN_MMA_OK>(dq, dk, dv, dout, q, k, v, out, lse, sel, B, T, Hq, Hkv, D, m, variant, groups, fn);
            break;
    }
}

extern "C" void attention_backward_mma_bf16_planted_cuda(float *dq, float *dk, float *dv, const bf16 *dout,
                                                         const bf16 *q, const bf16 *k, const bf16 *v, const bf16 *out,
                                                         const float *lse, const int32_t *sel, int64_t B, int64_t T,
                                                         int64_t Hq, int64_t Hkv, int64_t D, const RefreshMask *m,
                                                         AttnMmaBug bug) {
    const char *fn = "attention_backward_mma_bf16_planted_cuda";
    const AttnBwdVariant one = ATTN_BWD_ONE_PASS;
    switch (bug) {
        case ATTN_MMA_BUG_BWD_CP_WAIT1:
            backward<ATTN_MMA_BUG_BWD_CP_WAIT1>(dq, dk, dv, dout, q, k, v, out, lse, sel, B, T, Hq, Hkv, D, m, one, 0,
                                                fn);
            break;
        case ATTN_MMA_BUG_BWD_CP_BUF:
            backward<ATTN_MMA_BUG_BWD_CP_BUF>(dq, dk, dv, dout, q, k, v, out, lse, sel, B, T, Hq, Hkv, D, m, one, 0,
                                              fn);
            break;
        default:
            backward<ATTN_MMA_OK>(dq, dk, dv, dout, q, k, v, out, lse, sel, B, T, Hq, Hkv, D, m, one, 0, fn);
            break;
    }
}
