#include "../common/commands.h"

int cmd_prepare(int argc, char **argv) {
    return cmd_unfinished("prepare", "Tokenize JSON Lines / .zst / .txt into train/dev/test uint32 shards.", argc, argv);
}
