#ifndef KVCPT_CUDA_COMMON_CUH
#define KVCPT_CUDA_COMMON_CUH
/* Checked CUDA / cuBLAS calls: every failure names the call site and the
 * library's own error string. */
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

/* through the include path, so the emulator's build can supply its own */
#include <kernels/platform.cuh>

#define CUDA_CHECK(call)                                                                                               \
    do {                                                                                                               \
        cudaError_t err_ = (call);                                                                                     \
        if (err_ != cudaSuccess) {                                                                                     \
            fprintf(stderr, "kvcpt: CUDA error %s (%s) in %s at %s:%d\n", cudaGetErrorName(err_),                      \
                    cudaGetErrorString(err_), #call, __FILE__, __LINE__);                                              \
            exit(1);                                                                                                   \
        }                                                                                                              \
    } while (0)

#define CUBLAS_CHECK(call)                                                                                             \
    do {                                                                                                               \
        cublasStatus_t st_ = (call);                                                                                   \
        if (st_ != CUBLAS_STATUS_SUCCESS) {                                                                            \
            fprintf(stderr, "kvcpt: cuBLAS error %d (%s) in %s at %s:%d\n", (int)st_, cublasGetStatusString(st_),      \
                    #call, __FILE__, __LINE__);                                                                        \
            exit(1);                                                                                                   \
        }                                                                                                              \
    } while (0)

/* Launch errors surface asynchronously; check right after every launch. */
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())

/* 16-byte vector load and store. p must be 16-byte aligned: a GPU stops the
 * kernel otherwise (misaligned address), and the emulator checks it
 * (kernels/platform.cuh). */
static __device__ __forceinline__ uint4 load_b128(const void *p) {
    vector_access_check(p, 16, "16-byte vector load");
    return *(const uint4 *)p;
}

static __device__ __forceinline__ void store_b128(void *p, uint4 v) {
    vector_access_check(p, 16, "16-byte vector store");
    *(uint4 *)p = v;
}

static inline unsigned int ceil_div_u(long long a, long long b) { return (unsigned int)((a + b - 1) / b); }

#endif
