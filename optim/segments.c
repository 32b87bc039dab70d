#include "segments.h"

#include <stdlib.h>

#include "../common/util.h"

void optim_segments_from_layout(OptimSegments *s, const ParamLayout *pl, int64_t begin, int64_t end) {
    KV_CHECK(0 <= begin && begin <= end && end <= pl->total, "optimizer segments: range [%lld, %lld) is outside [0, %lld)",
             (long long)begin, (long long)end, (long long)pl->total);
    s->offset = xmalloc((size_t)(pl->n + 1) * sizeof(int64_t));
    s->numel = xmalloc((size_t)(pl->n + 1) * sizeof(int64_t));
    s->n = 0;
    for (int i = 0; i < pl->n; i++) {
        int64_t lo = pl->t[i].offset > begin ? pl->t[i].offset : begin;
        int64_t hi = pl->t[i].offset + pl->t[i].numel < end ? pl->t[i].offset + pl->t[i].numel : end;
        if (hi <= lo) continue;
        s->offset[s->n] = lo - begin;
        s->numel[s->n] = hi - lo;
        s->n++;
    }
}

void optim_segments_free(OptimSegments *s) {
    free(s->offset);
    free(s->numel);
    s->offset = s->numel = NULL;
    s->n = 0;
}
