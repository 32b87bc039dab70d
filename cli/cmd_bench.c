/* `kvcpt bench <target>`: each target prints figures (and JSON with --json);
 * benchmarks never assert timings. The targets live in bench/. */
#include <stdio.h>
#include <string.h>

#include "../bench/bench.h"
#include "commands.h"

typedef struct {
    const char *name;
    int (*fn)(int, char **);
    const char *summary;
} BenchTarget;

static const BenchTarget targets[] = {
    {"model", bench_model, "forward+backward tokens/s of a preset (CPU reference or CUDA)"},
    {"adamw", bench_adamw, "bytes moved per second by one (8-bit) AdamW step (CPU or CUDA)"},
    {"tokenizer", bench_tokenizer, "tokenizer MB/s, one thread and all cores, beside HF tokenizers and tiktoken"},
    {"decode", bench_decode, "decode ms/token of full, partial (streaming) and refreshkv steps at long contexts"},
    {"eval", bench_eval, "kvcpt eval's wall time beside kvpress + transformers (CPU, same documents and policies)"},
    {"ops", bench_ops, "time and GB/s or TFLOP/s of each CUDA simple op at 8B shapes"},
    {"matmul", bench_matmul, "the CPU step's sgemms at a preset's shapes beside threaded OpenBLAS"},
    {"attention", bench_attention, "CUDA attention kernels at an 8B layer's shape beside PyTorch SDPA"},
};
#define N_TARGETS (int)(sizeof targets / sizeof targets[0])

static void bench_usage(FILE *f) {
    fprintf(f, "usage: kvcpt bench <target> [options]   (kvcpt bench <target> --help)\n\ntargets:\n");
    for (int i = 0; i < N_TARGETS; i++) fprintf(f, "  %-10s %s\n", targets[i].name, targets[i].summary);
}

int cmd_bench(int argc, char **argv) {
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        bench_usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    for (int i = 0; i < N_TARGETS; i++)
        if (strcmp(argv[1], targets[i].name) == 0) return targets[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "kvcpt: error: unknown bench target '%s'\n", argv[1]);
    bench_usage(stderr);
    return 2;
}
