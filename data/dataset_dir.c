#define _XOPEN_SOURCE 700
#include "dataset_dir.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common/remove_tree.h"
#include "../common/util.h"
#include "splits.h"

/* The build directory while it is unpublished: removed at exit, so a run
 * that dies leaves the previous dataset as the only one. */
static char *unpublished;

static void remove_unpublished(void) {
    if (unpublished) remove_tree_best_effort(unpublished);
}

static char *concat(const char *a, const char *b) {
    size_t n = strlen(a) + strlen(b) + 1;
    char *s = xmalloc(n);
    snprintf(s, n, "%s%s", a, b);
    return s;
}

/* name is BASE.tmp-PID or BASE.old-PID with PID a process that is gone. */
static int is_dead_leftover(const char *name, const char *base) {
    size_t n = strlen(base);
    if (strncmp(name, base, n) != 0 || (strncmp(name + n, ".tmp-", 5) != 0 && strncmp(name + n, ".old-", 5) != 0))
        return 0;
    const char *digits = name + n + 5;
    char *end;
    errno = 0;
    long pid = strtol(digits, &end, 10);
    if (end == digits || *end || errno || pid <= 0 || pid > INT_MAX) return 0;
    return kill((pid_t)pid, 0) != 0 && errno == ESRCH;
}

static void remove_dead_leftovers(const char *out) {
    char *parent = xstrdup(out);
    char *slash = strrchr(parent, '/');
    const char *base = out + (slash - parent) + 1;
    if (slash == parent) slash[1] = '\0'; /* OUT directly under / */
    else *slash = '\0';
    DIR *dir = opendir(parent);
    if (!dir) die("prepare: cannot read '%s', the directory of --out: %s", parent, strerror(errno));
    struct dirent *e;
    while ((e = readdir(dir))) {
        if (!is_dead_leftover(e->d_name, base)) continue;
        char path[PATH_MAX + 256];
        path_fmt(path, sizeof path, "%s/%s", strcmp(parent, "/") ? parent : "", e->d_name);
        fprintf(stderr, "prepare: removing '%s', left by a run that was killed\n", path);
        remove_tree(path);
    }
    closedir(dir);
    free(parent);
}

void dataset_dir_begin(DatasetDir *d, const char *out_dir) {
    make_dirs(out_dir);
    char resolved[PATH_MAX];
    if (!realpath(out_dir, resolved)) die("prepare: cannot resolve --out '%s': %s", out_dir, strerror(errno));
    KV_CHECK(strcmp(resolved, "/") != 0, "prepare: --out '%s' is the root directory", out_dir);
    d->out = xstrdup(resolved);
    char suffix[64];
    snprintf(suffix, sizeof suffix, ".tmp-%ld", (long)getpid());
    d->tmp = concat(d->out, suffix);
    snprintf(suffix, sizeof suffix, ".old-%ld", (long)getpid());
    d->old = concat(d->out, suffix);
    remove_dead_leftovers(d->out);
    if (!unpublished) atexit(remove_unpublished);
    unpublished = d->tmp;
    /* one of ours can only be there if an earlier process had our PID and was killed */
    if (is_real_dir(d->tmp)) remove_tree(d->tmp);
    if (mkdir(d->tmp, 0755) != 0) die("prepare: cannot create the build directory '%s': %s", d->tmp, strerror(errno));
}

/* Moves from/name to to/name; a missing from/name is fine (a first run has
 * no previous dataset). */
static void move_entry(const char *from, const char *to, const char *name) {
    char a[PATH_MAX + 64], b[PATH_MAX + 64];
    path_fmt(a, sizeof a, "%s/%s", from, name);
    path_fmt(b, sizeof b, "%s/%s", to, name);
    if (rename(a, b) != 0 && errno != ENOENT) die("prepare: cannot move '%s' to '%s': %s", a, b, strerror(errno));
}

void dataset_dir_publish(DatasetDir *d) {
    if (mkdir(d->old, 0755) != 0)
        die("prepare: cannot create '%s' for the previous dataset: %s", d->old, strerror(errno));
    /* the manifest first: from here on OUT is not a dataset until the new manifest arrives */
    move_entry(d->out, d->old, "manifest.json");
    for (int s = 0; s < SPLIT_COUNT; s++) move_entry(d->out, d->old, split_names[s]);
    for (int s = 0; s < SPLIT_COUNT; s++) move_entry(d->tmp, d->out, split_names[s]);
    move_entry(d->tmp, d->out, "manifest.json");
    unpublished = NULL;
    if (rmdir(d->tmp) != 0) die("prepare: cannot remove the emptied build directory '%s': %s", d->tmp, strerror(errno));
    remove_tree(d->old);
}

void dataset_dir_free(DatasetDir *d) {
    free(d->out);
    free(d->tmp);
    free(d->old);
}
