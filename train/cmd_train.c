#include "../common/commands.h"

int cmd_train(int argc, char **argv) {
    return cmd_unfinished("train", "Pretraining / RefreshKV continued pretraining from a JSON config.", argc, argv);
}
