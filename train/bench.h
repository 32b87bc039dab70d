#ifndef KVCPT_BENCH_H
#define KVCPT_BENCH_H
/* Benchmark targets of `kvcpt bench`; argv[0] is the target name. */
int bench_model(int argc, char **argv); /* model/bench_model.c */
int bench_ops(int argc, char **argv);   /* kernels/bench_ops.c */
#endif
