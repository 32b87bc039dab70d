#ifndef KVCPT_OPTIM_SEGMENTS_H
#define KVCPT_OPTIM_SEGMENTS_H
/* The optimizer's segments for a range [begin, end) of the flat parameter
 * buffer: every tensor's part inside the range, offsets relative to begin.
 * [0, layout->total) gives one segment per tensor; a rank's shard gives the
 * pieces of the tensors it owns (a cut tensor contributes a partial piece). */
#include <stdint.h>

#include "../model/params.h"

typedef struct {
    int64_t *offset, *numel;
    int n;
} OptimSegments;

void optim_segments_from_layout(OptimSegments *s, const ParamLayout *pl, int64_t begin, int64_t end);
void optim_segments_free(OptimSegments *s);

#endif
