#ifndef KVCPT_BENCH_OPS_CUDA_H
#define KVCPT_BENCH_OPS_CUDA_H
/* The CUDA half of `kvcpt bench ops` (bench/bench_ops.c): every timed op.
 * bench_ops_cuda() returns the table in a build with the CUDA backend
 * (bench/bench_ops_cuda.c) and NULL otherwise (bench/bench_cuda_none.c);
 * the Makefile links one of the two. */
#include <stdint.h>

typedef struct {
    int64_t tokens, hidden, ffn, vocab, ce_rows; /* the shapes */
    int64_t reps;                                 /* timed calls per op, after one warm-up */
    int json;                                     /* one JSON object instead of a table */
} BenchOpsArgs;

typedef struct {
    /* Times every op on the visible device and prints the figures. */
    void (*run)(const BenchOpsArgs *a);
} BenchOpsCuda;

const BenchOpsCuda *bench_ops_cuda(void);

#endif
