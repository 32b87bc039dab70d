#include "embedding.h"

#include <string.h>

void embedding_forward_cpu(float *out, const int32_t *tokens, const float *wte, int64_t N, int64_t C) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < N; i++) memcpy(out + i * C, wte + (int64_t)tokens[i] * C, sizeof(float) * (size_t)C);
}

void embedding_backward_cpu(float *dwte, const float *dout, const int32_t *tokens, int64_t N, int64_t C) {
    /* threads own column ranges, so repeated tokens accumulate in row order */
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < C; c++)
        for (int64_t i = 0; i < N; i++) dwte[(int64_t)tokens[i] * C + c] += dout[i * C + c];
}
