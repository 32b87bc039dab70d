#include "../common/commands.h"
#include "../train/bench.h"

int bench_model(int argc, char **argv) {
    return cmd_unfinished("bench model", "forward+backward tokens/s of a model preset", argc, argv);
}
