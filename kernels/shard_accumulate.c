#include "shard_accumulate.h"

#include "../common/util.h"

void shard_accumulate_cpu(float *acc, const float *parts, int64_t n, int world) {
    KV_CHECK(n >= 0 && world >= 1, "shard_accumulate_cpu: %lld elements from %d ranks", (long long)n, world);
    /* element-major so each acc[i] is read and written once; per element the
     * adds are the same as rank-major, one fp32 add per rank in rank order */
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) {
        float a = acc[i];
        for (int r = 0; r < world; r++) a += parts[(int64_t)r * n + i];
        acc[i] = a;
    }
}
