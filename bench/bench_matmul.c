/* `kvcpt bench matmul`: the CPU training step's sgemms at a preset's shapes
 * (one layer's q|k|v, o, gate|up and down products, forward, input gradient
 * and weight gradient, and one cross-entropy chunk of the head), each timed
 * through blas_sgemm (fixed tiles, one OpenBLAS thread each, OpenMP over the
 * tiles: bits independent of the thread count) beside one cblas_sgemm call
 * with OpenBLAS's own threads (as many as OpenMP's; its bits depend on that
 * count). Prints the best of --reps calls of each and the step's total,
 * each shape weighted by how often a step runs it. Figures only. */
#include <cblas.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

#include "../common/checked.h"
#include "../common/options.h"
#include "../common/rng.h"
#include "../common/util.h"
#include "../kernels/blas.h"
#include "../kernels/blas_core.h"
#include "../model/config.h"
#include "../model/decoder_buffers.h"
#include "bench.h"

typedef struct {
    const char *name;
    int trans_a, trans_b;
    int64_t M, N, K;
    float beta;
    int64_t per_step; /* calls in one forward+backward */
} MatmulShape;

/* best seconds of reps calls: ours (blas_sgemm) or OpenBLAS threaded over one call */
static double time_shape(const MatmulShape *s, const float *A, const float *B, float *C, int reps, int openblas,
                         int threads) {
    int64_t lda = s->trans_a ? s->M : s->K, ldb = s->trans_b ? s->K : s->N;
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        double t0 = now_seconds();
        if (openblas) {
            openblas_set_num_threads(threads);
            cblas_sgemm(CblasRowMajor, s->trans_a ? CblasTrans : CblasNoTrans, s->trans_b ? CblasTrans : CblasNoTrans,
                        (int)s->M, (int)s->N, (int)s->K, 1.0f, A, (int)lda, B, (int)ldb, s->beta, C, (int)s->N);
        } else {
            blas_sgemm(s->trans_a, s->trans_b, s->M, s->N, s->K, 1.0f, A, lda, B, ldb, s->beta, C, s->N);
        }
        double dt = now_seconds() - t0;
        best = dt < best ? dt : best;
        if (openblas) { /* back to blas.h's single thread; OpenMP keeps its count */
            openblas_set_num_threads(1);
            omp_set_num_threads(threads);
        }
    }
    return best;
}

static float *random_matrix(int64_t n, uint64_t seed) {
    float *x = xmalloc(sizeof(float) * (size_t)n);
    Rng r;
    rng_seed(&r, seed);
    for (int64_t i = 0; i < n; i++) x[i] = rng_uniform(&r) * 2.0f - 1.0f;
    return x;
}

int bench_matmul(int argc, char **argv) {
    const char *preset = "small";
    int64_t seq = 1024, reps = 3;
    int json = 0;
    const Option opts[] = {
        {"preset", OPT_STRING, &preset, "NAME|DIR", "model preset or HF config"},
        {"seq", OPT_INT, &seq, "T", "tokens per step (batch 1)"},
        {"reps", OPT_INT, &reps, "N", "timed calls per shape (best kept), after one untimed"},
        {"json", OPT_FLAG, &json, NULL, "print one JSON object"},
        {0},
    };
    if (options_parse("bench matmul",
                      "The CPU step's sgemms: blas_sgemm's fixed tiles beside threaded OpenBLAS, same shapes.", opts,
                      argc, argv))
        return 0;
    KV_CHECK(seq >= 1 && reps >= 1 && reps <= 1000, "bench matmul: --seq must be >= 1 and --reps in [1, 1000]");
    DecoderConfig c;
    config_load(&c, preset);
    int64_t T = seq, C = c.hidden_size, F = c.intermediate_size, V = c.vocab_size, nl = c.num_hidden_layers;
    int64_t QKV = (c.num_attention_heads + 2 * c.num_key_value_heads) * c.head_dim,
            QD = c.num_attention_heads * c.head_dim;
    int64_t R = T < DECODER_CE_CHUNK_ROWS ? T : DECODER_CE_CHUNK_ROWS, chunks = (T + R - 1) / R;
    /* the head's logits are computed in the forward and again in the backward */
    const MatmulShape shapes[] = {
        {"q|k|v forward", 0, 1, T, QKV, C, 0.0f, nl},
        {"q|k|v dinp", 0, 0, T, C, QKV, 0.0f, nl},
        {"q|k|v dweight", 1, 0, QKV, C, T, 1.0f, nl},
        {"o forward", 0, 1, T, C, QD, 0.0f, nl},
        {"o dinp", 0, 0, T, QD, C, 0.0f, nl},
        {"o dweight", 1, 0, C, QD, T, 1.0f, nl},
        {"gate|up forward", 0, 1, T, 2 * F, C, 0.0f, nl},
        {"gate|up dinp", 0, 0, T, C, 2 * F, 0.0f, nl},
        {"gate|up dweight", 1, 0, 2 * F, C, T, 1.0f, nl},
        {"down forward", 0, 1, T, C, F, 0.0f, nl},
        {"down dinp", 0, 0, T, F, C, 0.0f, nl},
        {"down dweight", 1, 0, C, F, T, 1.0f, nl},
        {"head logits", 0, 1, R, V, C, 0.0f, 2 * chunks},
        {"head dinp", 0, 0, R, C, V, 0.0f, chunks},
        {"head dweight", 1, 0, V, C, R, 1.0f, chunks},
    };
    int ns = (int)(sizeof shapes / sizeof shapes[0]);
    int64_t most = 0;
    for (int i = 0; i < ns; i++) {
        int64_t a, b, o;
        KV_CHECK(i64_mul(shapes[i].M, shapes[i].K, &a) == 0 && i64_mul(shapes[i].K, shapes[i].N, &b) == 0 &&
                     i64_mul(shapes[i].M, shapes[i].N, &o) == 0,
                 "bench matmul: shape %s overflows", shapes[i].name);
        most = a > most ? a : most;
        most = b > most ? b : most;
        most = o > most ? o : most;
    }
    float *A = random_matrix(most, 1), *B = random_matrix(most, 2), *Cm = random_matrix(most, 3);
    int threads = omp_get_max_threads();
    double ours_step = 0, ob_step = 0, flops_step = 0;
    if (json)
        printf("{\"bench\":\"matmul\",\"preset\":\"%s\",\"seq\":%lld,\"threads\":%d,\"shapes\":[", preset, (long long)T,
               threads);
    else
        printf("bench matmul: %s, T %lld, %d threads: blas_sgemm (fixed tiles) vs one OpenBLAS call on %d threads, "
               "best of %lld\n",
               preset, (long long)T, threads, threads, (long long)reps);
    for (int i = 0; i < ns; i++) {
        const MatmulShape *s = &shapes[i];
        time_shape(s, A, B, Cm, 1, 0, threads); /* untimed: first touches, tiles' packing buffers */
        time_shape(s, A, B, Cm, 1, 1, threads);
        double ours = time_shape(s, A, B, Cm, (int)reps, 0, threads),
               ob = time_shape(s, A, B, Cm, (int)reps, 1, threads);
        double fl = 2.0 * (double)s->M * (double)s->N * (double)s->K;
        ours_step += ours * (double)s->per_step, ob_step += ob * (double)s->per_step;
        flops_step += fl * (double)s->per_step;
        if (json)
            printf("%s{\"name\":\"%s\",\"M\":%lld,\"N\":%lld,\"K\":%lld,\"per_step\":%lld,\"ms\":%.3f,\"openblas_ms\":%"
                   ".3f}",
                   i ? "," : "", s->name, (long long)s->M, (long long)s->N, (long long)s->K, (long long)s->per_step,
                   1e3 * ours, 1e3 * ob);
        else
            printf("  %-16s M %6lld N %6lld K %6lld  x%-4lld  %8.2f ms %6.1f GFLOP/s | OpenBLAS %8.2f ms %6.1f GFLOP/s "
                   "| ours / OpenBLAS time %.2f\n",
                   s->name, (long long)s->M, (long long)s->N, (long long)s->K, (long long)s->per_step, 1e3 * ours,
                   fl / ours / 1e9, 1e3 * ob, fl / ob / 1e9, ours / ob);
    }
    if (json) {
        char *blas = blas_core_json_text();
        printf("],\"step_s\":%.3f,\"openblas_step_s\":%.3f,\"step_gflop\":%.1f,\"blas\":%s}\n", ours_step, ob_step,
               flops_step / 1e9, blas);
        free(blas);
    } else {
        printf("  one step's matmuls: %.2f s (%.1f GFLOP/s) | OpenBLAS %.2f s (%.1f GFLOP/s) | ours / OpenBLAS time "
               "%.2f\n",
               ours_step, flops_step / ours_step / 1e9, ob_step, flops_step / ob_step / 1e9, ours_step / ob_step);
        printf("  BLAS: %s\n", blas_core_summary());
    }
    free(A);
    free(B);
    free(Cm);
    return 0;
}
