/* `kvcpt bench ops`: time of each CUDA simple op at Llama-3.1-8B shapes,
 * with achieved memory bandwidth (elementwise and reduction ops) or
 * TFLOP/s (matmuls). Figures only; nothing is asserted. */
#include <stdio.h>
#include <stdlib.h>

#include "../common/backend.h"
#include "../common/options.h"
#include "../common/util.h"
#include "bench.h"
#include "bench_backend.h"

int bench_ops(int argc, char **argv) {
    int64_t tokens = 8192, hidden = 4096, ffn = 14336, vocab = 128256, ce_rows = 1024, reps = 10;
    int json = 0;
    const Option opts[] = {
        {"tokens", OPT_INT, &tokens, "N", "rows of activations"},
        {"hidden", OPT_INT, &hidden, "C", "hidden size"},
        {"ffn", OPT_INT, &ffn, "F", "MLP size"},
        {"vocab", OPT_INT, &vocab, "V", "vocabulary"},
        {"ce-rows", OPT_INT, &ce_rows, "R", "rows per cross-entropy chunk"},
        {"reps", OPT_INT, &reps, "N", "timed calls per op, after one warm-up"},
        {"json", OPT_FLAG, &json, NULL, "print one JSON object"},
        {0},
    };
    if (options_parse("bench ops", "Time of each CUDA simple op at Llama-3.1-8B shapes.", opts, argc, argv)) return 0;
    KV_CHECK(tokens >= 1 && hidden >= 1 && ffn >= 1 && vocab >= 1 && ce_rows >= 1 && reps >= 1,
             "bench ops: every size and --reps must be positive");
    const BenchOpsDevice *cu = bench_hooks(backend_require_accel("bench ops"), "bench ops")->ops;
    const BenchOpsArgs args = {tokens, hidden, ffn, vocab, ce_rows, reps, json};
    cu->run(&args);
    return 0;
}
