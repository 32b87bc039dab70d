#ifndef KVCPT_BENCH_BACKEND_H
#define KVCPT_BENCH_BACKEND_H
/* What the benchmarks ask of an accelerator backend (Backend.bench,
 * common/backend.h): the timed device half of each target that has one.
 * `kvcpt bench decode` needs none of its own: it times the eval command's
 * decode device (Backend.decode). */
#include "../common/backend.h"
#include "bench_adamw_device.h"
#include "bench_attention_device.h"
#include "bench_model_device.h"
#include "bench_ops_device.h"

typedef struct BenchHooks {
    const BenchAdamwDevice *adamw;
    const BenchAttentionDevice *attention;
    const BenchModelDevice *model;
    const BenchOpsDevice *ops;
} BenchHooks;

/* be's hooks (be an accelerator); dies naming who when it has none. */
const BenchHooks *bench_hooks(const Backend *be, const char *who);
#endif
