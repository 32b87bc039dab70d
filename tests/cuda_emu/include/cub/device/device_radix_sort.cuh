#ifndef KVCPT_CUDA_EMU_CUB_RADIX_SORT_H
#define KVCPT_CUDA_EMU_CUB_RADIX_SORT_H
/* CPU stand-in for cub::DeviceRadixSort::SortPairs: a stable sort by key,
 * which is what a least-significant-digit radix sort is. Same two-call
 * protocol (a NULL buffer asks for the temporary size). */
#include <algorithm>
#include <numeric>
#include <vector>

#include <cuda_runtime.h>

namespace cub {
struct DeviceRadixSort {
    template <typename K, typename V>
    static cudaError_t SortPairs(void *tmp, size_t &tmp_bytes, const K *keys_in, K *keys_out, const V *vals_in,
                                 V *vals_out, int n, int begin_bit = 0, int end_bit = (int)sizeof(K) * 8,
                                 cudaStream_t st = 0) {
        (void)begin_bit, (void)end_bit, (void)st;
        if (!tmp) {
            tmp_bytes = 16;
            return cudaSuccess;
        }
        std::vector<int> order((size_t)n);
        std::iota(order.begin(), order.end(), 0);
        std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return keys_in[a] < keys_in[b]; });
        std::vector<K> k((size_t)n);
        std::vector<V> v((size_t)n);
        for (int i = 0; i < n; i++) k[(size_t)i] = keys_in[order[(size_t)i]], v[(size_t)i] = vals_in[order[(size_t)i]];
        std::copy(k.begin(), k.end(), keys_out);
        std::copy(v.begin(), v.end(), vals_out);
        return cudaSuccess;
    }
};
} // namespace cub
#endif
