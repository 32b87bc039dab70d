#include "output_paths.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common/util.h"

void eval_prepare_out_dir(const char *cmd, const char *option, const char *dir) {
    struct stat st;
    /* a regular file there would pass mkdir -p (EEXIST) and fail only at the first write */
    if (stat(dir, &st) == 0)
        KV_CHECK(S_ISDIR(st.st_mode), "%s: %s '%s' exists and is not a directory", cmd, option, dir);
    char failed[4200];
    int err = make_dirs_try(dir, failed, sizeof failed);
    KV_CHECK(err == 0, "%s: %s '%s': cannot create directory '%s': %s", cmd, option, dir, failed, strerror(err));
    KV_CHECK(stat(dir, &st) == 0 && S_ISDIR(st.st_mode), "%s: %s '%s' is not a directory after creating it", cmd,
             option, dir);
    KV_CHECK(access(dir, W_OK | X_OK) == 0, "%s: %s '%s': cannot create files there: %s", cmd, option, dir,
             strerror(errno));
}
