#include <stdio.h>

#include "commands.h"

int cmd_unfinished(const char *cmd, const char *what, int argc, char **argv) {
    (void)argc;
    (void)argv;
    printf("usage: kvcpt %s [options]\n\n%s\n\n", cmd, what);
    printf("NOT IMPLEMENTED YET: 'kvcpt %s' is planned (see the open issue) but does not work in this build.\n", cmd);
    return 3; /* non-zero even for --help: nothing here works yet */
}
