#include "self_restart.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void self_restart(char **argv, const RestartVar *vars, int n) {
    int changed = 0;
    for (int i = 0; i < n; i++) {
        const char *now = getenv(vars[i].name);
        if (vars[i].keep_user && now) continue;
        if (now && strcmp(now, vars[i].value) == 0) continue;
        if (setenv(vars[i].name, vars[i].value, 1) != 0) {
            fprintf(stderr, "kvcpt: note: cannot set %s=%s (%s); going on without it\n", vars[i].name, vars[i].value,
                    strerror(errno));
            continue;
        }
        changed = 1;
    }
    if (!changed) return;
    execv("/proc/self/exe", argv);
    fprintf(stderr, "kvcpt: note: could not run again with");
    for (int i = 0; i < n; i++) fprintf(stderr, " %s=%s", vars[i].name, vars[i].value);
    fprintf(stderr, " (%s); going on with the settings it started with\n", strerror(errno));
}
