#ifndef KVCPT_BLAS_H
#define KVCPT_BLAS_H
/* The one way this program calls BLAS. Results must not depend on the
 * thread count: a plain run, `mpirun --bind-to core` (one core per rank)
 * and an unbound run must give the same bits. OpenBLAS does not promise
 * that: an sgemm split over 1 or 2 of its own threads differs in the last
 * bits. So OpenBLAS runs on one thread (set once, on first use) and the
 * parallelism is ours: OpenMP over tiles of the output, a partition fixed by
 * the shape alone, each tile one single-threaded sgemm over the whole K.
 * Every output element then sees the same sums in the same order whatever
 * OMP_NUM_THREADS, OPENBLAS_NUM_THREADS or the CPU binding are. */
#include <jansson.h>
#include <stdint.h>

/* C is cut into tiles of at most this many rows and columns, one sgemm each:
 * enough tiles to keep 16 cores busy at 1024 x 1024, each large enough that
 * packing its slices of A and B stays cheap next to its products. */
#define BLAS_TILE_ROWS 128
#define BLAS_TILE_COLS 512

/* Row-major C (M, N) = alpha op(A) op(B) + beta C, like cblas_sgemm with
 * CblasRowMajor; op(X) is X^T when trans_x is nonzero. Dimensions and
 * leading dimensions must fit BLAS's int (dies otherwise). */
void blas_sgemm(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
                const float *B, int64_t ldb, float beta, float *C, int64_t ldc);

/* What the run's BLAS is, for logs: {"core", "config", "blas_threads",
 * "omp_threads"}. Pins OpenBLAS to one thread first, like blas_sgemm. */
json_t *blas_info_json(void);
#endif
