#include "crossentropy.h"

#include <math.h>

#include "vector_math.h"

/* Interleaved partial sums, added in order at the end: a fixed order, so
 * the sums do not depend on the vector width or the thread count. */
#define CE_LANES 16

/* max_v z[v], vectorised in this file's clones */
VECTOR_CLONES static float row_max(const float *z, int64_t V) { return vector_max(z, V); }

/* sum_v exp(z[v] - m): V can be 128k terms, so the lanes accumulate in
 * double (as the CUDA twin's sum of expf terms). */
VECTOR_CLONES static double row_sum_exp(const float *z, float m, int64_t V) {
    double lane[CE_LANES] = {0};
    int64_t v = 0;
    for (; v + CE_LANES <= V; v += CE_LANES)
#pragma omp simd
        for (int l = 0; l < CE_LANES; l++) lane[l] += (double)exp_poly(z[v + l] - m);
    for (int l = 0; v + l < V; l++) lane[l] += (double)exp_poly(z[v + l] - m);
    double s = 0.0;
    for (int l = 0; l < CE_LANES; l++) s += lane[l];
    return s;
}

/* z = scale * exp(z - lse), in place. */
VECTOR_CLONES static void row_grad(float *z, float lse, float scale, int64_t V) {
#pragma omp simd
    for (int64_t v = 0; v < V; v++) z[v] = scale * exp_poly(z[v] - lse);
}

void crossentropy_forward_cpu(float *losses, float *lse, const float *logits, const int32_t *targets, int64_t rows,
                              int64_t V) {
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        const float *z = logits + r * V;
        float m = row_max(z, V);
        float l = m + (float)log(row_sum_exp(z, m, V));
        lse[r] = l;
        losses[r] = targets[r] >= 0 ? l - z[targets[r]] : 0.0f;
    }
}

void crossentropy_backward_cpu(float *logits, const float *lse, const int32_t *targets, int64_t rows, int64_t V,
                               float scale) {
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        float *z = logits + r * V;
        if (targets[r] < 0) {
            for (int64_t v = 0; v < V; v++) z[v] = 0.0f;
            continue;
        }
        row_grad(z, lse[r], scale, V);
        z[targets[r]] -= scale;
    }
}

/* The two in turn: the oracle of the fused CUDA kernel, and the CPU
 * engine's results unchanged. */
void crossentropy_forward_backward_cpu(float *losses, float *lse, float *logits, const int32_t *targets, int64_t rows,
                                       int64_t V, float scale) {
    crossentropy_forward_cpu(losses, lse, logits, targets, rows, V);
    crossentropy_backward_cpu(logits, lse, targets, rows, V, scale);
}
