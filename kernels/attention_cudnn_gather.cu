/* The RefreshKV suffix rows under attn_impl cudnn (kernels/attention_cudnn.h):
 * the per-KV-head key list [TopK; L .. T-1] gathered into dense tensors for
 * cuDNN's SDPA, the list's gradients scattered back, and the widening of
 * cuDNN's bf16 gradients into the engine's fp32 ones. Grid-stride loops,
 * one element per thread step; bandwidth-bound and a few MB at the CPT
 * shape. The list of one (batch row, KV head) holds distinct positions
 * (the selection is below L, the local keys from L on), so the scatter's
 * read-add-write of each destination belongs to one thread: no atomics, the
 * same bits in any block order. */
#include "attention_cudnn_gather.h"
#include "bf16.h"
#include "cuda_common.cuh"
#include "cuda_reduce.cuh"

/* Position in the sequence of list entry j of (batch row b, KV head g). */
static __device__ __forceinline__ int64_t list_pos(const int32_t *sel, int64_t b, int64_t g, int64_t j, int64_t Hkv,
                                                   int64_t L, int64_t nsel) {
    return j < nsel ? (int64_t)sel[(b * Hkv + g) * nsel + j] : L + (j - nsel);
}

/* kg, vg (B, Hkv, n, D), n = nsel + T - L: row j of (b, g) is k, v at list_pos. */
__global__ static void gather_kv_kernel(bf16 *kg, bf16 *vg, const bf16 *k, const bf16 *v, const int32_t *sel, int64_t B,
                                        int64_t T, int64_t Hkv, int64_t D, int64_t L, int64_t nsel) {
    const int64_t n = nsel + T - L, total = B * Hkv * n * D;
    GRID_STRIDE(i, total) {
        const int64_t d = i % D, j = (i / D) % n, g = (i / (D * n)) % Hkv, b = i / (D * n * Hkv);
        const int64_t src = ((b * T + list_pos(sel, b, g, j, Hkv, L, nsel)) * Hkv + g) * D + d;
        kg[i] = k[src];
        vg[i] = v[src];
    }
}

/* dk, dv (B, T, Hkv, D) += the list's dkg, dvg (B, Hkv, n, D); one thread
 * step per (b, g, d) walks the list, so each destination is touched by
 * one thread. shift moves every destination by one list entry (a planted
 * bug for the parity test; 0 otherwise). */
__global__ static void scatter_add_kernel(float *dk, float *dv, const bf16 *dkg, const bf16 *dvg, const int32_t *sel,
                                          int64_t B, int64_t T, int64_t Hkv, int64_t D, int64_t L, int64_t nsel,
                                          int shift) {
    const int64_t n = nsel + T - L, total = B * Hkv * D;
    GRID_STRIDE(i, total) {
        const int64_t d = i % D, g = (i / D) % Hkv, b = i / (D * Hkv);
        for (int64_t j = 0; j < n; j++) {
            const int64_t jd = shift ? (j + 1) % n : j;
            const int64_t dst = ((b * T + list_pos(sel, b, g, jd, Hkv, L, nsel)) * Hkv + g) * D + d;
            const int64_t src = ((b * Hkv + g) * n + j) * D + d;
            dk[dst] += __bfloat162float(dkg[src]);
            dv[dst] += __bfloat162float(dvg[src]);
        }
    }
}

__global__ static void widen_kernel(float *out, const bf16 *in, int64_t n) {
    GRID_STRIDE(i, n) out[i] = __bfloat162float(in[i]);
}

__global__ static void copy_rows_kernel(float *dst, int64_t dst_ld, const float *src, int64_t src_ld, int64_t rows,
                                        int64_t cols) {
    GRID_STRIDE(i, rows * cols) dst[(i / cols) * dst_ld + i % cols] = src[(i / cols) * src_ld + i % cols];
}

extern "C" void attention_cudnn_copy_rows_cuda(float *dst, int64_t dst_ld, const float *src, int64_t src_ld,
                                               int64_t rows, int64_t cols) {
    if (rows <= 0 || cols <= 0) return;
    copy_rows_kernel<<<grid_for(rows * cols, 256), 256>>>(dst, dst_ld, src, src_ld, rows, cols);
    CUDA_CHECK_LAUNCH();
}

extern "C" void attention_cudnn_gather_kv_cuda(bf16 *kg, bf16 *vg, const bf16 *k, const bf16 *v, const int32_t *sel,
                                               int64_t B, int64_t T, int64_t Hkv, int64_t D, int64_t L, int64_t nsel) {
    const int64_t total = B * Hkv * (nsel + T - L) * D;
    if (total <= 0) return;
    gather_kv_kernel<<<grid_for(total, 256), 256>>>(kg, vg, k, v, sel, B, T, Hkv, D, L, nsel);
    CUDA_CHECK_LAUNCH();
}

extern "C" void attention_cudnn_scatter_add_cuda(float *dk, float *dv, const bf16 *dkg, const bf16 *dvg,
                                                 const int32_t *sel, int64_t B, int64_t T, int64_t Hkv, int64_t D,
                                                 int64_t L, int64_t nsel, int shift) {
    const int64_t total = B * Hkv * D;
    if (total <= 0 || T <= L) return;
    scatter_add_kernel<<<grid_for(total, 256), 256>>>(dk, dv, dkg, dvg, sel, B, T, Hkv, D, L, nsel, shift);
    CUDA_CHECK_LAUNCH();
}

extern "C" void attention_cudnn_widen_cuda(float *out, const bf16 *in, int64_t n) {
    if (n <= 0) return;
    widen_kernel<<<grid_for(n, 256), 256>>>(out, in, n);
    CUDA_CHECK_LAUNCH();
}
