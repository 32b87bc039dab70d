#include "bench_backend.h"

#include "../common/util.h"

const BenchHooks *bench_hooks(const Backend *be, const char *who) {
    KV_CHECK(be->kind == BACKEND_ACCEL && be->bench, "%s: the %s backend has no device benchmarks", who, be->label);
    return be->bench;
}
