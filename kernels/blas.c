#include "blas.h"

#include <cblas.h>
#include <limits.h>
#include <math.h>
#include <omp.h>
#include <threads.h>

#include "../common/util.h"
#include "blas_core.h"

static once_flag pinned = ONCE_FLAG_INIT;

static void pin_one_thread(void) {
    /* An OpenMP build of OpenBLAS sets OpenMP's thread count along with its
     * own; the program's OpenMP teams keep theirs. */
    int omp = omp_get_max_threads();
    openblas_set_num_threads(1);
    omp_set_num_threads(omp);
}

/* BLAS takes int dimensions; a bigger matrix must be split by the caller. */
static int blas_dim(int64_t d, const char *what) {
    if (d < 0 || d > INT_MAX) die("blas: %s = %lld is outside the BLAS int range", what, (long long)d);
    return (int)d;
}

static int64_t round_up(int64_t x, int64_t to) { return (x + to - 1) / to * to; }

/* n split into `parts` tiles, aligned, at least BLAS_TILE_MIN (or n). */
static int64_t tile_size(int64_t n, int64_t parts) {
    int64_t size = round_up((n + parts - 1) / parts, BLAS_TILE_ALIGN);
    return size < BLAS_TILE_MIN ? BLAS_TILE_MIN : size;
}

void blas_tile_shape(int64_t M, int64_t N, int64_t *rows, int64_t *cols) {
    /* R x Cn = BLAS_TILES with R / Cn = M / N: each tile about square, which
     * keeps the packing (M Cn + N R per K) least */
    int64_t R = M > 0 && N > 0 ? (int64_t)lround(sqrt((double)BLAS_TILES * (double)M / (double)N)) : 1;
    R = R < 1 ? 1 : (R > BLAS_TILES ? BLAS_TILES : R);
    int64_t Cn = (BLAS_TILES + R - 1) / R;
    *rows = tile_size(M, R);
    *cols = tile_size(N, Cn);
}

void blas_sgemm(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
                const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
    call_once(&pinned, pin_one_thread);
    int k = blas_dim(K, "K"), la = blas_dim(lda, "lda"), lb = blas_dim(ldb, "ldb"), lc = blas_dim(ldc, "ldc");
    blas_dim(M, "M");
    blas_dim(N, "N");
    enum CBLAS_TRANSPOSE ta = trans_a ? CblasTrans : CblasNoTrans, tb = trans_b ? CblasTrans : CblasNoTrans;
    int64_t tr, tc;
    blas_tile_shape(M, N, &tr, &tc);
    int64_t row_tiles = (M + tr - 1) / tr, col_tiles = (N + tc - 1) / tc;
    int64_t tiles = row_tiles * col_tiles;
    /* the tiling depends on M and N only; which thread runs a tile does not matter */
#pragma omp parallel for schedule(dynamic, 1) if (tiles > 1)
    for (int64_t t = 0; t < tiles; t++) {
        int64_t r0 = t / col_tiles * tr, c0 = t % col_tiles * tc;
        int64_t rows = M - r0 < tr ? M - r0 : tr;
        int64_t cols = N - c0 < tc ? N - c0 : tc;
        /* rows r0.. of op(A) are columns of A when it is transposed; columns c0.. of op(B) are rows of B then */
        const float *a = trans_a ? A + r0 : A + r0 * lda, *b = trans_b ? B + c0 * ldb : B + c0;
        cblas_sgemm(CblasRowMajor, ta, tb, (int)rows, (int)cols, k, alpha, a, la, b, lb, beta, C + r0 * ldc + c0, lc);
    }
}

void blas_sgemm_serial(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                       int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
    call_once(&pinned, pin_one_thread);
    int m = blas_dim(M, "M"), n = blas_dim(N, "N"), k = blas_dim(K, "K");
    int la = blas_dim(lda, "lda"), lb = blas_dim(ldb, "ldb"), lc = blas_dim(ldc, "ldc");
    if (m == 0 || n == 0) return;
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha,
                A, la, B, lb, beta, C, lc);
}

json_t *blas_info_json(void) {
    call_once(&pinned, pin_one_thread);
    json_t *j = blas_core_json();
    if (json_object_set_new(j, "config", json_string(openblas_get_config())) != 0 ||
        json_object_set_new(j, "blas_threads", json_integer(openblas_get_num_threads())) != 0 ||
        json_object_set_new(j, "omp_threads", json_integer(omp_get_max_threads())) != 0)
        die("blas: cannot describe the BLAS configuration");
    return j;
}
