#include "../common/commands.h"

int cmd_eval(int argc, char **argv) {
    return cmd_unfinished("eval", "Inference-mode perplexity of every KV-cache policy.", argc, argv);
}
