#ifndef KVCPT_NCCL_CHECK_H
#define KVCPT_NCCL_CHECK_H
/* CUDA_CHECK and NCCL_CHECK for the C files of the NCCL backend (the
 * kernels' .cu files have theirs in kernels/cuda_common.cuh): a failed call
 * ends the program naming the call, the file and line, and the library's
 * own reason. */
#include <cuda_runtime.h>
#include <nccl.h>

#include "../common/util.h"

#define CUDA_CHECK(call)                                                                                               \
    do {                                                                                                               \
        cudaError_t cuda_rc_ = (call);                                                                                 \
        if (cuda_rc_ != cudaSuccess)                                                                                   \
            die("%s:%d: %s failed: %s", __FILE__, __LINE__, #call, cudaGetErrorString(cuda_rc_));                      \
    } while (0)
#define NCCL_CHECK(call)                                                                                               \
    do {                                                                                                               \
        ncclResult_t nccl_rc_ = (call);                                                                                \
        if (nccl_rc_ != ncclSuccess)                                                                                   \
            die("%s:%d: %s failed: %s", __FILE__, __LINE__, #call, ncclGetErrorString(nccl_rc_));                      \
    } while (0)
#endif
