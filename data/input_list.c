#include "input_list.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common/util.h"
#include "doc_reader.h"

static void push(InputList *l, const char *path) {
    l->paths = xrealloc(l->paths, sizeof(char *) * (size_t)(l->count + 1));
    l->paths[l->count++] = xstrdup(path);
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

void input_list_skip(InputList *l, const char *dir) {
    struct stat st;
    if (stat(dir, &st) != 0) return;
    KV_CHECK(l->n_skip < (int)(sizeof l->skip / sizeof l->skip[0]),
             "internal error: too many skipped input directories");
    l->skip[l->n_skip].dev = (unsigned long long)st.st_dev;
    l->skip[l->n_skip].ino = (unsigned long long)st.st_ino;
    l->n_skip++;
}

static int skipped(const InputList *l, const struct stat *st) {
    for (int i = 0; i < l->n_skip; i++)
        if (l->skip[i].dev == (unsigned long long)st->st_dev && l->skip[i].ino == (unsigned long long)st->st_ino)
            return 1;
    return 0;
}

static void add_dir(InputList *l, const char *dir) {
    DIR *d = opendir(dir);
    if (!d) die("cannot read input directory '%s': %s", dir, strerror(errno));
    char **names = NULL;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        names = xrealloc(names, sizeof(char *) * (size_t)(n + 1));
        size_t len = strlen(dir) + strlen(e->d_name) + 2;
        names[n] = xmalloc(len);
        /* "texts/" and "texts" name the same files: no doubled slash */
        size_t dl = strlen(dir);
        snprintf(names[n++], len, "%.*s/%s", (int)(dl > 1 && dir[dl - 1] == '/' ? dl - 1 : dl), dir, e->d_name);
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof(char *), cmp_str);
    for (int i = 0; i < n; i++) {
        struct stat st;
        if (stat(names[i], &st) != 0) die("cannot stat '%s': %s", names[i], strerror(errno));
        if (S_ISDIR(st.st_mode)) {
            if (!skipped(l, &st)) add_dir(l, names[i]);
        } else if (doc_reader_supports(names[i])) input_list_add(l, names[i]);
        free(names[i]);
    }
    free(names);
}

void input_list_add(InputList *l, const char *path) {
    struct stat st;
    if (stat(path, &st) != 0) die("cannot read input '%s': %s", path, strerror(errno));
    if (S_ISDIR(st.st_mode)) {
        if (!skipped(l, &st)) add_dir(l, path);
        return;
    }
    if (!doc_reader_supports(path))
        die("input '%s': unknown type; expected .jsonl, .json or .txt, optionally compressed as .zst", path);
    if (access(path, R_OK) != 0) die("input '%s' is not readable: %s", path, strerror(errno));
    push(l, path);
}

void input_list_free(InputList *l) {
    for (int i = 0; i < l->count; i++) free(l->paths[i]);
    free(l->paths);
    l->paths = NULL;
    l->count = 0;
}
