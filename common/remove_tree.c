#define _XOPEN_SOURCE 700
#include "remove_tree.h"

#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util.h"

/* nftw with FTW_PHYS reports a link as FTW_SL and never enters what it
 * points to; FTW_DEPTH visits a directory after its contents, so rmdir
 * finds it empty; FTW_MOUNT keeps the walk on one file system. */
static int remove_entry(const char *path, const struct stat *st, int type, struct FTW *ftw) {
    (void)st;
    (void)ftw;
    if (type == FTW_DNR || type == FTW_NS) die("cannot remove '%s': it cannot be read", path);
    int rc = (type == FTW_DP) ? rmdir(path) : unlink(path);
    if (rc != 0 && errno != ENOENT) die("cannot remove '%s': %s", path, strerror(errno));
    return 0;
}

void remove_tree(const char *path) {
    struct stat st;
    if (lstat(path, &st) != 0) {
        if (errno == ENOENT) return;
        die("cannot remove '%s': %s", path, strerror(errno));
    }
    if (!S_ISDIR(st.st_mode)) {
        if (unlink(path) != 0 && errno != ENOENT) die("cannot remove '%s': %s", path, strerror(errno));
        return;
    }
    if (nftw(path, remove_entry, 16, FTW_PHYS | FTW_DEPTH | FTW_MOUNT) != 0)
        die("cannot remove '%s': %s", path, strerror(errno));
}

int is_real_dir(const char *path) {
    struct stat st;
    return lstat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static int remove_entry_quietly(const char *path, const struct stat *st, int type, struct FTW *ftw) {
    (void)st;
    (void)ftw;
    if (type == FTW_DP) rmdir(path);
    else unlink(path);
    return 0;
}

void remove_tree_best_effort(const char *path) {
    nftw(path, remove_entry_quietly, 16, FTW_PHYS | FTW_DEPTH | FTW_MOUNT);
}
