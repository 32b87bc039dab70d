#include "crossentropy.h"

#include <math.h>

void crossentropy_forward_cpu(float *losses, float *lse, const float *logits, const int32_t *targets, int64_t rows,
                              int64_t V) {
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        const float *z = logits + r * V;
        float m = -INFINITY;
        for (int64_t v = 0; v < V; v++) m = z[v] > m ? z[v] : m;
        double s = 0.0; /* V can be 128k terms: accumulate in double */
        for (int64_t v = 0; v < V; v++) s += exp((double)(z[v] - m));
        float l = m + (float)log(s);
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
        for (int64_t v = 0; v < V; v++) z[v] = scale * expf(z[v] - lse[r]);
        z[targets[r]] -= scale;
    }
}
