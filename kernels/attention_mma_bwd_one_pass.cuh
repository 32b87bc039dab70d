#ifndef KVCPT_ATTENTION_MMA_BWD_ONE_PASS_CUH
#define KVCPT_ATTENTION_MMA_BWD_ONE_PASS_CUH
/* The tensor-core backward's causal rows in one pass per key tile
 * (FlashAttention-2's 5 products per tile), ATTN_BWD_ONE_PASS; included by
 * kernels/attention_mma_bwd.cu beside the two-pass kernels, which share its
 * dsum and suffix kernels.
 *
 * One block of 8 warps per (batch row x query head, group g of G) walks the
 * 128-key tiles g, g + G, ...; per key tile K and V sit in shared memory,
 * each warp 16 keys; per 64-row query tile from the diagonal: S^T = K Q^T, P^T =
 * exp(S^T scale - lse), dV += P^T dO, dP^T = V dO^T, dS^T = P^T (dP^T -
 * dsum), dK += dS^T Q (P^T and dS^T repacked in registers, dO and Q by
 * ldmatrix.trans), then dS^T through shared memory and dQ += dS K into the
 * block's own slice of a partial dQ (G, B, T, Hq, D; slice 0 is dq), each
 * warp 16 rows x half the columns. 128-key tiles (FlashAttention-2's for D = 128), not
 * 64: that partial dQ is read and written once per (key tile, query tile)
 * pair, so its traffic halves with the key tile. The key tile's dK, dV
 * (this query head's share) go to (B, T, Hq, D) partials. Then dq rows
 * [0, L) = scale * the slices in group order; dk, dv = the group's query
 * heads' shares in head order (keys no causal row sees get 0).
 * Pipeline: two buffers of (Q, dO, dS^T, lse, dsum). Per key tile, one
 * barrier after the last tile's dQ product (K, V and the buffers free),
 * then K, V and the first query tile copied, waited for, and a barrier. Per
 * query tile one barrier: the next tile's Q and dO copies (cp.async, bf16
 * inputs) are issued into the other buffer before the four register
 * products and waited for after them, so the barrier that makes this
 * tile's dS^T whole for the dQ product also publishes the next tile; the
 * dQ product reads this buffer's dS^T while a fast warp may already store
 * the next tile's into the other. The buffers change no bit.
 * Grid: x = batch row x query head, y = the group, so group 0 (key tiles 0,
 * G, ...: the most query tiles) starts first across all heads; the order
 * changes no bit. */
#include <stdint.h>

#include "attention_mma_tiles.cuh"
#include "cuda_reduce.cuh"

extern "C" {
#include "attention_mma.h"
}

static constexpr int kOnePassKeys = 128;      /* keys per key tile and block, 16 per warp */
static constexpr int kOnePassRows = kMmaTile; /* query rows per query tile */
static constexpr int kOnePassWarps = kOnePassKeys / 16, kOnePassThreads = 32 * kOnePassWarps;
static constexpr int kDsLd =
    kOnePassRows + 8; /* dS^T rows in shared memory: 128 rows (keys) of 64 query rows + padding */
static_assert(kOnePassWarps % 4 == 0, "the dQ product splits the columns over groups of 4 warps (16 rows each)");

template <int D> struct OnePassSmem {
    static constexpr int ld = MmaTileLd<D>::ld;
    /* K and V as bf16 (128 keys, resident per key tile), then two buffers,
     * each: Q, dO (bf16, 64 rows), dS^T (bf16, 128 keys x 64 rows: the dQ
     * product reads it across the warps) and two fp32 rows (lse, dsum).
     * While the products read one buffer the next query tile's copies land
     * in the other, and a warp may store the next tile's dS^T while another
     * still reads this one's. One buffer's parts at fixed offsets from its
     * start, so a single register moves between the buffers. K and V stay
     * in shared memory, not registers: at D = 128 their fragments beside
     * the dK and dV accumulators would spill */
    static constexpr size_t kv_bytes = (size_t)2 * kOnePassKeys * ld * sizeof(uint16_t);
    static constexpr size_t q_off = 0, do_off = (size_t)kOnePassRows * ld * sizeof(uint16_t);
    static constexpr size_t ds_off = 2 * do_off, lse_off = ds_off + (size_t)kOnePassKeys * kDsLd * sizeof(uint16_t);
    static constexpr size_t dsum_off = lse_off + kOnePassRows * sizeof(float);
    static constexpr size_t buf_bytes = dsum_off + kOnePassRows * sizeof(float);
    static constexpr size_t bytes = kv_bytes + 2 * buf_bytes;
    static_assert(do_off % 16 == 0 && lse_off % 16 == 0 && buf_bytes % 16 == 0, "16-byte aligned rows");
};

/* Rows [p0, p0 + kRows) of one head of x into dst (kRows x ld) as bf16,
 * as mma_load_rows_bf16 loads 64 with 4 warps (rows at or past limit are
 * zeros), by the block's 8 warps: fp32 inputs a pair at a time without
 * unrolling, as unrolled beside the dK and dV accumulators they spill at
 * D = 128; bf16 inputs 16 bytes at a time */
template <int D, int kRows>
static __device__ void bwd_load_rows(uint16_t *dst, const float *x, int64_t stride, int64_t p0, int64_t limit) {
    constexpr int ld = MmaTileLd<D>::ld, pairs = D / 2;
#pragma unroll 1
    for (int i = threadIdx.x; i < kRows * pairs; i += kOnePassThreads) {
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

template <int D, int kRows>
static __device__ void bwd_load_rows(uint16_t *dst, const bf16 *x, int64_t stride, int64_t p0, int64_t limit) {
    /* by cp.async, all in flight together and through no register (loaded
     * into registers beside the dK and dV accumulators they spilled at
     * D = 128), in the caller's open group: its cp_async_wait and then a
     * barrier publish the tile */
    constexpr int ld = MmaTileLd<D>::ld, chunks = D / 8;
#pragma unroll 1 /* the copies overlap anyway; unrolled, their addresses cost registers */
    for (int i = threadIdx.x; i < kRows * chunks; i += kOnePassThreads) {
        const int r = i / chunks, c = 8 * (i % chunks);
        const int64_t p = p0 + r;
        if (p < limit) cp_async_16(&dst[r * ld + c], x + p * stride + c);
        else store_b128(&dst[r * ld + c], make_uint4(0u, 0u, 0u, 0u));
    }
}

/* One query tile's inputs into the buffer at bufp (OnePassSmem's layout):
 * Q and dO rows [q0, q0 + 64) of query head h of batch row b (bf16 copies
 * in flight until the caller's cp_async_wait), and the rows' lse (times
 * log2 e: P is exp2 of base-2 scores) and dsum by plain stores; rows at or
 * past L are zeros. The offsets are computed here from the kernel's
 * arguments, not kept across its loop: beside the dK and dV accumulators
 * at D = 128 every register counts */
template <int D, typename E>
static __device__ void bwd_load_query_tile(unsigned char *bufp, const E *q, const E *dout, const float *lse,
                                           const float *dsum, int64_t b, int64_t h, int64_t T, int64_t Hq, int64_t q0,
                                           int64_t L) {
    using S = OnePassSmem<D>;
    const int64_t head = (b * T * Hq + h) * D, qstride = Hq * D;
    bwd_load_rows<D, kOnePassRows>((uint16_t *)(bufp + S::q_off), q + head, qstride, q0, L);
    bwd_load_rows<D, kOnePassRows>((uint16_t *)(bufp + S::do_off), dout + head, qstride, q0, L);
    if (threadIdx.x < kOnePassRows) {
        const int64_t p = q0 + threadIdx.x, row = (b * Hq + h) * T + p;
        ((float *)(bufp + S::lse_off))[threadIdx.x] = p < L ? lse[row] * kLog2e : 0.0f;
        ((float *)(bufp + S::dsum_off))[threadIdx.x] = p < L ? dsum[row] : 0.0f;
    }
}

/* acc (16 x kCols) = dS (rows r0..r0+15 of a 64-row x 128-key tile stored
 * transposed, dS^T[key][row] with row stride kDsLd) X[:, col0 .. col0 +
 * kCols), X a 128-row tile (the keys) read as the k-rows of B by
 * ldmatrix.trans. A's fragments come from the transposed store by
 * ldmatrix.trans: matrix m holds rows r0 + 8 (m & 1), keys 8 (m >> 1) */
template <int D, int kCols, bool kSwapA12, bool kNoTrans>
static __device__ void mma_mul_dst_x(float acc[kCols / 8][4], const uint16_t *dst, int r0, const uint16_t *x, int col0,
                                     int lane) {
    constexpr int ld = MmaTileLd<D>::ld;
#pragma unroll
    for (int n = 0; n < kCols / 8; n++) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
#pragma unroll
    for (int c = 0; c < kOnePassKeys / 16; c++) {
        uint32_t a[4];
        /* kSwapA12, a planted layout bug for the tests: matrices 1 and 2
         * (registers 1 and 2) swapped by swapping their addresses */
        const int key_half = kSwapA12 ? (lane >> 3) & 1 : lane >> 4, row_half = kSwapA12 ? lane >> 4 : (lane >> 3) & 1;
        ldmatrix_x4_trans(a, &dst[(c * 16 + (lane & 7) + 8 * key_half) * kDsLd + r0 + 8 * row_half]);
#pragma unroll
        for (int n = 0; n < kCols / 8; n += 2) {
            uint32_t xf[4];
            const uint16_t *xrow =
                &x[(c * 16 + (lane & 7) + 8 * ((lane >> 3) & 1)) * ld + col0 + n * 8 + 8 * (lane >> 4)];
            if (kNoTrans) ldmatrix_x4(xf, xrow); /* a planted layout bug, for the tests */
            else ldmatrix_x4_trans(xf, xrow);
            const uint32_t b0[2] = {xf[0], xf[1]}, b1[2] = {xf[2], xf[3]};
            mma_m16n8k16_bf16(acc[n], a, b0, acc[n]);
            mma_m16n8k16_bf16(acc[n + 1], a, b1, acc[n + 1]);
        }
    }
}

/* The causal rows' backward in one pass per key tile (FlashAttention-2's
 * five products). Block (batch row x query head, group g) walks the
 * 128-key tiles g, g + G, g + 2G, ... of its head; per key tile, K and V in
 * shared memory, each warp 16 keys, and per 64-row query tile of rows
 * [0, L) from the diagonal on:
 *   S^T = K Q^T, P^T = exp(S^T scale - lse), dP^T = V dO^T,
 *   dS^T = P^T (dP^T - dsum), dV += P^T dO, dK += dS^T Q   (registers)
 *   dQ_g[rows] += dS K      (dS via shared memory; warp w: rows 16 (w % 4),
 *                            columns part w / 4 of kParts)
 * dK and dV of the key tile (this query head's share) go to dk_part and
 * dv_part (B, T, Hq, D) once the query tiles are done. dQ_g is the group's
 * own (B, T, Hq, D) slice of the partial dQ: group 0's is dq itself (the
 * sum kernel adds the others to it in place), group g's is slice g - 1 of
 * dq_rest (G - 1, B, T, Hq, D). No other block writes it, so plain
 * read-add-writes in the block's fixed order (the first key tile g stores,
 * the later ones add; rows before key tile g's first key are never written
 * and the sum kernel does not read them).
 * At most one block per SM (the bounds' 1): ptxas may then take all 255
 * registers, where it chose 128 for some instantiations and spilled. */
template <int D, int kBug, typename E>
__global__ void __launch_bounds__(kOnePassThreads, 1)
    attention_mma_bwd_one_pass_kernel(float *dq, float *dq_rest, float *dk_part, float *dv_part, const E *dout,
                                      const E *q, const E *k, const E *v, const float *lse, const float *dsum,
                                      int64_t T, int64_t Hq, int64_t Hkv, int64_t L, float scale) {
    constexpr int ld = OnePassSmem<D>::ld, ND = D / 8;
    /* the dQ product's columns in kParts parts (one per group of 4 warps; a
     * part at least 16 columns, the x4 B loads' width), kCols at a time */
    constexpr int kParts = D / (kOnePassWarps / 4) >= 16 ? kOnePassWarps / 4 : 1, kPartCols = D / kParts;
    constexpr int kCols = kPartCols < 32 ? kPartCols : 32;
    constexpr bool kNoTrans = kBug == ATTN_MMA_BUG_B_NO_TRANS, kSwap = kBug == ATTN_MMA_BUG_PT_SWAP;
    extern __shared__ __align__(16) uint16_t smem_u16[];
    uint16_t *sk = smem_u16, *sv = sk + kOnePassKeys * ld;                 /* K, V */
    unsigned char *const bufs = (unsigned char *)(sv + kOnePassKeys * ld); /* the two buffers */
    using S = OnePassSmem<D>;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int64_t b = blockIdx.x / Hq, h = blockIdx.x % Hq, hk = h / (Hq / Hkv);
    const int G = (int)gridDim.y, grp = (int)blockIdx.y;
    const int nk = (int)((T + kOnePassKeys - 1) / kOnePassKeys); /* T <= INT32_MAX */
    const int64_t qstride = Hq * D, kvstride = Hkv * D;
    const float scale_log2 = scale * kLog2e;
    const int kl0 = warp * 16 + g; /* the warp's keys kl0 and kl0 + 8 of the key tile */
    for (int kt = grp; kt < nk; kt += G) {
        const int64_t k0 = (int64_t)kt * kOnePassKeys;
        /* every warp is done with the previous key tile: K and V, the last
         * dS^T and Q, dO buffers */
        __syncthreads();
        bwd_load_rows<D, kOnePassKeys>(sk, k + (b * T * Hkv + hk) * D, kvstride, k0, T);
        bwd_load_rows<D, kOnePassKeys>(sv, v + (b * T * Hkv + hk) * D, kvstride, k0, T);
        if (k0 < L) /* the first query tile into buffer 0 */
            bwd_load_query_tile<D>(bufs, q, dout, lse, dsum, b, h, T, Hq, k0, L);
        cp_async_commit();
        cp_async_wait<0>();
        __syncthreads(); /* K, V and the first query tile, landed in every thread, seen by all */
        float dk_acc[ND][4], dv_acc[ND][4];
#pragma unroll
        for (int n = 0; n < ND; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) dk_acc[n][e] = dv_acc[n][e] = 0.0f;
        int buf = 0; /* the query tile's buffer; the next tile's copies go to the other */
        for (int64_t q0 = k0; q0 < L; q0 += kOnePassRows, buf ^= 1) { /* rows before the key tile see none of it */
            /* key kl sees row c of the tile when kl <= c + diag (causal) and
             * c < rows (rows from L on are the suffix's); on the first query
             * tile the second half's keys see no row (P^T = 0, dS^T = 0) */
            const int diag = (int)(q0 - k0), rows = L - q0 < kOnePassRows ? (int)(L - q0) : kOnePassRows;
            /* the next query tile's copies, in flight through this tile's
             * products: its buffer was last read before the barrier that
             * ended the previous tile's products (the planted bug copies
             * into the buffer being read) */
            if (q0 + kOnePassRows < L)
                bwd_load_query_tile<D>(bufs + (kBug == ATTN_MMA_BUG_BWD_CP_BUF ? buf : buf ^ 1) * S::buf_bytes, q, dout,
                                       lse, dsum, b, h, T, Hq, q0 + kOnePassRows, L);
            cp_async_commit(); /* one group per query tile, empty after the last */
            unsigned char *const bp = bufs + buf * S::buf_bytes;
            const uint16_t *s0 = (const uint16_t *)(bp + S::q_off),
                           *s1 = (const uint16_t *)(bp + S::do_off); /* Q, dO */
            const float *s_lse = (const float *)(bp + S::lse_off), *s_dsum = (const float *)(bp + S::dsum_off);
            uint16_t *sds = (uint16_t *)(bp + S::ds_off); /* dS^T */
            {
                /* P^T, then dV, then dP^T half by half into dS^T in P^T's
                 * registers: at D = 128 a whole dP^T beside P^T and the dK,
                 * dV accumulators spills */
                float pt[8][4]; /* (16 keys x 64 rows) */
                mma_mul_rows_t_smem<D>(pt, sk, warp * 16, s0, lane); /* S^T = K Q^T */
#pragma unroll
                for (int j = 0; j < 8; j++)
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        const int c = j * 8 + 2 * t + (e & 1);
                        const bool seen = kl0 + 8 * (e >> 1) <= c + diag && c < rows;
                        pt[j][e] = seen ? exp2f(pt[j][e] * scale_log2 - s_lse[c]) : 0.0f;
                    }
                mma_mul_acc<D, kSwap, kNoTrans>(dv_acc, pt, s1, lane); /* dV += P^T dO */
#pragma unroll
                for (int half = 0; half < 2; half++) {
                    float dph[4][4];
                    mma_mul_rows_t_smem<D, 4>(dph, sv, warp * 16, s1, lane, 4 * half); /* dP^T = V dO^T */
#pragma unroll
                    for (int j = 0; j < 4; j++)
#pragma unroll
                        for (int e = 0; e < 4; e++) {
                            const int c = (half * 4 + j) * 8 + 2 * t + (e & 1);
                            pt[half * 4 + j][e] *= dph[j][e] - s_dsum[c]; /* dS^T */
                        }
                }
                float(&dpt)[8][4] = pt;
                mma_mul_acc<D, kSwap, kNoTrans>(dk_acc, dpt, s0, lane); /* dK += dS^T Q */
                /* dS^T to shared memory, rounded as the products round it:
                 * row = key (16 per warp), two query rows per 32-bit word */
#pragma unroll
                for (int j = 0; j < 8; j++)
#pragma unroll
                    for (int r = 0; r < 2; r++)
                        *(uint32_t *)&sds[(kl0 + 8 * r) * kDsLd + j * 8 + 2 * t] =
                            mma_pack_bf16x2(dpt[j][2 * r], dpt[j][2 * r + 1]);
            }
            /* the next query tile's copies landed in this thread (the
             * planted bug leaves them in flight into the next tile's
             * products) */
            if (kBug == ATTN_MMA_BUG_BWD_CP_WAIT1) cp_async_wait<1>();
            else cp_async_wait<0>();
            /* dS^T whole (each warp reads every key's) and the next query
             * tile seen by all */
            if (kBug != ATTN_MMA_BUG_DS_NO_SYNC) __syncthreads();
            /* dQ_g rows q0 + 16 (warp % 4) .. + 15, the part's columns,
             * += dS K, kCols columns at a time (at D = 16 one part: warps 4
             * to 7 have none) */
            /* the group's slice: (B, T, Hq, D) each */
            float *dqg = (grp == 0 ? dq : dq_rest + ((grp - 1) * ((int64_t)gridDim.x / Hq) * T) * qstride) +
                         (b * T + q0) * qstride + h * D;
            /* the warp's dQ rows ql0, ql0 + 8 of the query tile (warps w and
             * w + 4 share rows) and its columns part */
            const int ql0 = kl0 % kOnePassRows, part = kl0 / kOnePassRows;
#pragma unroll
            for (int col0 = 0; col0 < kPartCols; col0 += kCols) {
                if (part >= kParts) break;
                const int c0 = part * kPartCols + col0;
                float acc[kCols / 8][4];
                mma_mul_dst_x<D, kCols, kSwap, kNoTrans>(acc, sds, (warp % 4) * 16, sk, c0, lane);
#pragma unroll
                for (int r = 0; r < 2; r++) {
                    if (ql0 + 8 * r >= rows) continue;
                    float *dst = dqg + (ql0 + 8 * r) * qstride + c0 + 2 * t;
#pragma unroll
                    for (int n = 0; n < kCols / 8; n++)
#pragma unroll
                        for (int e = 0; e < 2; e++) /* the group's first key tile stores */
                            dst[n * 8 + e] = kt == grp ? acc[n][2 * r + e] : dst[n * 8 + e] + acc[n][2 * r + e];
                }
            }
        }
        float *dkb = dk_part + (b * T * Hq + h) * D + k0 * qstride,
              *dvb = dv_part + (b * T * Hq + h) * D + k0 * qstride;
#pragma unroll
        for (int r = 0; r < 2; r++) {
            if (k0 + kl0 + 8 * r >= T) continue;
#pragma unroll
            for (int n = 0; n < ND; n++)
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    const int64_t o = (kl0 + 8 * r) * qstride + n * 8 + 2 * t + e;
                    dkb[o] = dk_acc[n][2 * r + e];
                    dvb[o] = dv_acc[n][2 * r + e];
                }
        }
    }
}

/* dq rows [0, L) = scale * the groups' slices summed in group order, in
 * place: slice 0 is dq itself, each element read before this thread writes
 * it; slice g > 0 is slice g - 1 of dq_rest. A row in 128-row span i (the
 * key tiles' spans) has slices 0..min(G - 1, i) (group g first writes at
 * its key tile g, from that tile's first key's row on). The planted group
 * bug stops one group short. */
template <int kBug>
__global__ void attention_mma_dq_sum_kernel(float *dq, const float *dq_rest, int64_t B, int64_t T, int64_t Hq,
                                            int64_t D, int64_t L, int64_t G, float scale) {
    const int64_t n = B * L * Hq * D, per_b = L * Hq * D, slice = B * T * Hq * D;
    GRID_STRIDE(i, n) {
        const int64_t b = i / per_b, rest = i % per_b, row = rest / (Hq * D);
        const int64_t off = b * T * Hq * D + rest;
        const int64_t tile = row / kOnePassKeys;
        const int64_t last = (tile < G - 1 ? tile : G - 1) - (kBug == ATTN_MMA_BUG_DQ_GROUP ? 1 : 0);
        float s = 0.0f;
        for (int64_t g = 0; g <= last; g++) s += g == 0 ? dq[off] : dq_rest[(g - 1) * slice + off];
        dq[off] = s * scale;
    }
}

/* dk, dv (B, T, Hkv, D) = the group's query heads' shares summed in head
 * order (dk times scale) */
__global__ void attention_mma_dkdv_sum_kernel(float *dk, float *dv, const float *dk_part, const float *dv_part,
                                              int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t D, float scale) {
    const int64_t n = B * T * Hkv * D, group = Hq / Hkv;
    GRID_STRIDE(i, n) {
        const int64_t bt = i / (Hkv * D), hk = i / D % Hkv, d = i % D;
        const int64_t base = (bt * Hq + hk * group) * D + d;
        float sk = 0.0f, sv = 0.0f;
        for (int64_t hh = 0; hh < group; hh++) {
            sk += dk_part[base + hh * D];
            sv += dv_part[base + hh * D];
        }
        dk[i] = sk * scale;
        dv[i] = sv;
    }
}

template <int D, int kBug, typename E>
static void launch_causal_one_pass(float *dq, float *dk, float *dv, float *dq_rest, float *dk_part, float *dv_part,
                                   const E *dout, const E *q, const E *k, const E *v, const float *lse,
                                   const float *dsum, int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t L,
                                   int64_t G, float scale) {
    const size_t bytes = OnePassSmem<D>::bytes;
    CUDA_CHECK(cudaFuncSetAttribute(attention_mma_bwd_one_pass_kernel<D, kBug, E>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
    /* y = the group: group 0 (the most query tiles) starts first across all heads */
    attention_mma_bwd_one_pass_kernel<D, kBug, E>
        <<<dim3((unsigned int)(B * Hq), (unsigned int)G), kOnePassThreads, bytes>>>(
            dq, dq_rest, dk_part, dv_part, dout, q, k, v, lse, dsum, T, Hq, Hkv, L, scale);
    CUDA_CHECK_LAUNCH();
    if (L > 0) {
        attention_mma_dq_sum_kernel<kBug>
            <<<grid_for(B * L * Hq * D, 256), 256>>>(dq, dq_rest, B, T, Hq, D, L, G, scale);
        CUDA_CHECK_LAUNCH();
    }
    attention_mma_dkdv_sum_kernel<<<grid_for(B * T * Hkv * D, 256), 256>>>(dk, dv, dk_part, dv_part, B, T, Hq, Hkv, D,
                                                                           scale);
    CUDA_CHECK_LAUNCH();
}

#endif
