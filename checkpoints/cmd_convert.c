#include "../common/commands.h"

int cmd_convert(int argc, char **argv) {
    return cmd_unfinished("convert", "Hugging Face safetensors <-> native checkpoint conversion.", argc, argv);
}
