#ifndef KVCPT_CUDA_EMU_CUBLAS_H
#define KVCPT_CUDA_EMU_CUBLAS_H
/* CPU stand-in: only what cuda_common.cuh's CUBLAS_CHECK names. cuBLAS(Lt)
 * itself is not emulated, so matmul.cu is not built for the emulator. */
typedef enum { CUBLAS_STATUS_SUCCESS = 0 } cublasStatus_t;
static inline const char *cublasGetStatusString(cublasStatus_t s) {
    return s == CUBLAS_STATUS_SUCCESS ? "success" : "error";
}
#endif
