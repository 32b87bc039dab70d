#include "../common/commands.h"

int cmd_tokenize(int argc, char **argv) {
    return cmd_unfinished("tokenize", "Llama 3.1 tokenizer: text on stdin -> ids (--decode for the reverse).", argc, argv);
}
