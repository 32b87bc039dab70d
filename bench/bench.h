#ifndef KVCPT_BENCH_H
#define KVCPT_BENCH_H
/* Benchmark targets of `kvcpt bench` (cli/cmd_bench.c dispatches to them),
 * one file each in bench/; argv[0] is the target name. */
int bench_model(int argc, char **argv);     /* bench/bench_model.c */
int bench_adamw(int argc, char **argv);     /* bench/bench_adamw.c */
int bench_tokenizer(int argc, char **argv); /* bench/bench_tokenizer.c */
int bench_ops(int argc, char **argv);       /* bench/bench_ops.c */
int bench_attention(int argc, char **argv); /* bench/bench_attention.c */
int bench_decode(int argc, char **argv);    /* bench/bench_decode.c */
int bench_eval(int argc, char **argv);      /* bench/bench_eval.c */
int bench_matmul(int argc, char **argv);    /* bench/bench_matmul.c */
#endif
