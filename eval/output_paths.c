#include "output_paths.h"

#include <errno.h>
#include <limits.h>
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

/* path's directory resolved (symbolic links and ".." gone) plus its last
 * name, into out (PATH_MAX bytes): the entry a rename into place replaces. */
static void resolve_entry(const char *cmd, const char *option, const char *path, char *out) {
    const char *slash = strrchr(path, '/');
    const char *name = slash ? slash + 1 : path;
    KV_CHECK(*name && strcmp(name, ".") != 0 && strcmp(name, "..") != 0,
             "%s: %s '%s' must name a file, not a directory", cmd, option, path);
    char parent[PATH_MAX];
    if (!slash) {
        snprintf(parent, sizeof parent, ".");
    } else if (slash == path) {
        snprintf(parent, sizeof parent, "/");
    } else {
        size_t n = (size_t)(slash - path);
        KV_CHECK(n < sizeof parent, "%s: %s '%s': the directory name is longer than %d bytes", cmd, option, path,
                 PATH_MAX - 1);
        memcpy(parent, path, n);
        parent[n] = '\0';
    }
    char real[PATH_MAX];
    KV_CHECK(realpath(parent, real) != NULL, "%s: %s '%s': its directory '%s' cannot be resolved: %s", cmd, option,
             path, parent, strerror(errno));
    int len = snprintf(out, PATH_MAX, "%s%s%s", real, strcmp(real, "/") == 0 ? "" : "/", name);
    KV_CHECK(len > 0 && len < PATH_MAX, "%s: %s '%s': the resolved path is longer than %d bytes", cmd, option, path,
             PATH_MAX - 1);
}

void eval_refuse_inside_input(const char *cmd, const char *option, const char *path, const char *input_option,
                              const char *input) {
    char at[PATH_MAX];
    resolve_entry(cmd, option, path, at);
    struct stat own;
    if (lstat(at, &own) == 0)
        KV_CHECK(!S_ISDIR(own.st_mode), "%s: %s '%s' is a directory; it must name a file", cmd, option, path);
    struct stat in;
    if (stat(input, &in) != 0) return;
    /* at, then each directory above it up to the root */
    for (;;) {
        struct stat st;
        if (stat(at, &st) == 0 && st.st_dev == in.st_dev && st.st_ino == in.st_ino)
            die("%s: %s '%s' is %s %s '%s': writing it would replace what the evaluation reads; choose a path "
                "outside the model and data directories",
                cmd, option, path, S_ISDIR(in.st_mode) ? "inside" : "the same file as", input_option, input);
        char *slash = strrchr(at, '/');
        if (!slash || slash == at) break;
        *slash = '\0';
    }
    struct stat root;
    KV_CHECK(stat("/", &root) == 0, "%s: cannot stat '/': %s", cmd, strerror(errno));
    KV_CHECK(!(root.st_dev == in.st_dev && root.st_ino == in.st_ino), "%s: %s '%s' is inside %s '/'", cmd, option, path,
             input_option);
}
