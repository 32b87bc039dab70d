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

/* C is cut into a grid of about BLAS_TILES tiles, one sgemm each, shaped
 * like C (rows per tile close to columns per tile), in multiples of
 * BLAS_TILE_ALIGN and never thinner than BLAS_TILE_MIN: enough tiles to keep
 * 16 cores busy, as few as that allows, because each tile packs its slices
 * of A and B again (a grid of 128 x 512 tiles spent a fifth of a SmolLM2
 * step packing). The grid depends on M and N alone. */
#define BLAS_TILES 16
#define BLAS_TILE_ALIGN 16
#define BLAS_TILE_MIN 128

/* Rows and columns per tile of blas_sgemm for an M x N output. */
void blas_tile_shape(int64_t M, int64_t N, int64_t *rows, int64_t *cols);

/* Row-major C (M, N) = alpha op(A) op(B) + beta C, like cblas_sgemm with
 * CblasRowMajor; op(X) is X^T when trans_x is nonzero. Dimensions and
 * leading dimensions must fit BLAS's int (dies otherwise). */
void blas_sgemm(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
                const float *B, int64_t ldb, float beta, float *C, int64_t ldc);

/* The same product as one untiled sgemm on the calling thread, for callers
 * whose own OpenMP tasks are the parallelism (the attention's blocks of
 * rows): inside a task blas_sgemm's tiles run one after another and only
 * pack A's and B's slices again. Untiled whatever the thread count, so it
 * keeps blas_sgemm's promise. */
void blas_sgemm_serial(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                       int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc);

/* What the run's BLAS is, for logs: blas_core_json's fields (the core, who
 * chose it, the CPU's instruction set) and "config", "blas_threads",
 * "omp_threads". Pins OpenBLAS to one thread first, like blas_sgemm. */
json_t *blas_info_json(void);
#endif
