#ifndef KVCPT_BENCH_OPS_DEVICE_H
#define KVCPT_BENCH_OPS_DEVICE_H
/* The device half of `kvcpt bench ops` (bench/bench_ops.c): every timed
 * op, an accelerator backend's bench hook (bench/bench_backend.h); the CUDA
 * backend's is bench/bench_ops_cuda.c. */
#include <stdint.h>

typedef struct {
    int64_t tokens, hidden, ffn, vocab, ce_rows; /* the shapes */
    int64_t reps;                                 /* timed calls per op, after one warm-up */
    int json;                                     /* one JSON object instead of a table */
} BenchOpsArgs;

typedef struct {
    /* Times every op on the visible device and prints the figures. */
    void (*run)(const BenchOpsArgs *a);
} BenchOpsDevice;

#endif
