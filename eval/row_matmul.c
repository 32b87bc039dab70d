#include "row_matmul.h"

#include "../kernels/dot_lanes.h"

/* Compiled for AVX-512, AVX2 and baseline x86-64, picked at load time.
 * Contraction is off (-std=c11) and the reduction order is fixed (DOT_LANES
 * interleaved partial sums, then the lanes in order), so every clone does the
 * same IEEE operations; only the speed differs. */
#define VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
/* below this many multiply-adds a parallel region costs more than it saves */
#define PARALLEL_MIN_MACS (1 << 18)

/* Output column o of every row: weight row o is read once for all N rows,
 * four rows at a time (dot_lanes4: the bits of dot_lanes row by row). */
VECTOR_CLONES
static void column(float *out, const float *inp, const float *weight, int64_t N, int64_t IC, int64_t OC, int64_t o) {
    const float *w = weight + o * IC;
    int64_t r = 0;
    for (; r + 4 <= N; r += 4) {
        float s[4];
        const float *x = inp + r * IC;
        dot_lanes4(s, w, x, x + IC, x + 2 * IC, x + 3 * IC, IC);
        for (int i = 0; i < 4; i++) out[(r + i) * OC + o] = s[i];
    }
    for (; r < N; r++) out[r * OC + o] = dot_lanes(w, inp + r * IC, IC);
}

void row_matmul_forward(float *out, const float *inp, const float *weight, int64_t N, int64_t IC, int64_t OC) {
    /* columns split across threads: each output stays one dot product on one
     * thread. Handed out in chunks as threads come free rather than in fixed
     * halves: on a shared machine a thread that waits for a core would hold
     * up the step with its half, thousands of times per eval */
#pragma omp parallel for schedule(dynamic, 32) if (N * IC * OC >= PARALLEL_MIN_MACS)
    for (int64_t o = 0; o < OC; o++) column(out, inp, weight, N, IC, OC, o);
}
