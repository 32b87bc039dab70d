#include "convert_dest.h"

#include <dirent.h>
#include <errno.h>
#include <fnmatch.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../common/util.h"
#include "native_model.h"
#include "tensor_set.h"

/* Every name a conversion (HF, native or GGUF source; either output)
 * writes, copies along or removes: config.json, the tokenizer and
 * generation files, model.safetensors, its shards and index, model.kvcpt.
 * Any other *.safetensors counts too: left beside a new export it would
 * read as part of the model to a loader that globs the directory. */
static const struct {
    const char *pattern, *why;
} NAMES[] = {
    {"config.json", "the conversion writes it"},
    {"generation_config.json", "the conversion copies it from the source"},
    {"special_tokens_map.json", "the conversion copies it from the source"},
    {"tokenizer*.json", "the conversion writes or copies the tokenizer files"},
    {HF_INDEX_FILE, "the conversion writes or removes it"},
    {"*.safetensors", "the conversion writes or removes the model's safetensors files"},
    {NATIVE_MODEL_FILE, "the conversion writes or removes it"},
};

void convert_dest_check(const char *dir, int overwrite) {
    if (overwrite) return;
    /* names are matched one by one against the listing: dir itself may hold
     * glob characters */
    DIR *d = opendir(dir);
    if (!d) {
        if (errno == ENOENT) return;
        die("kvcpt convert: cannot list --to '%s' to check it holds no model files: %s", dir, strerror(errno));
    }
    errno = 0;
    for (struct dirent *e; (e = readdir(d)); errno = 0)
        for (size_t i = 0; i < sizeof NAMES / sizeof NAMES[0]; i++)
            if (fnmatch(NAMES[i].pattern, e->d_name, 0) == 0) {
                char name[256];
                snprintf(name, sizeof name, "%s", e->d_name);
                closedir(d);
                die("kvcpt convert: '%s' already holds '%s' (%s); nothing was changed: pass --overwrite to replace "
                    "the model files there, or choose another --to",
                    dir, name, NAMES[i].why);
            }
    if (errno) die("kvcpt convert: cannot list --to '%s': %s", dir, strerror(errno));
    closedir(d);
}

void convert_dest_check_inputs(const char *dir, const ConvertInput *inputs, int n) {
    DIR *d = opendir(dir);
    if (!d) {
        /* absent: nothing in it yet; not a directory: the export refuses it */
        if (errno == ENOENT || errno == ENOTDIR) return;
        die("kvcpt convert: cannot list --to '%s' to check it holds none of the inputs: %s", dir, strerror(errno));
    }
    struct stat *in = xcalloc((size_t)n + 1, sizeof(struct stat));
    int *known = xcalloc((size_t)n + 1, sizeof(int));
    /* an input that cannot be stat'ed is refused by its reader, naming it */
    for (int i = 0; i < n; i++) known[i] = stat(inputs[i].path, &in[i]) == 0;
    char name[256] = "";
    int found = -1, list_errno;
    errno = 0;
    for (struct dirent *e; found < 0 && (e = readdir(d)); errno = 0) {
        struct stat st;
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        if (fstatat(dirfd(d), e->d_name, &st, 0) != 0) continue; /* a dangling symlink is no input */
        for (int i = 0; i < n && found < 0; i++)
            if (known[i] && st.st_dev == in[i].st_dev && st.st_ino == in[i].st_ino) {
                snprintf(name, sizeof name, "%s", e->d_name);
                found = i;
            }
    }
    list_errno = found < 0 ? errno : 0;
    closedir(d);
    free(in);
    free(known);
    if (found >= 0)
        die("kvcpt convert: --to '%s' holds '%s', the same file as the input '%s' (%s); the conversion writes and "
            "removes files in --to and could replace or remove it, so nothing was changed: choose a --to that does "
            "not hold the input",
            dir, name, inputs[found].path, inputs[found].option);
    if (list_errno) die("kvcpt convert: cannot list --to '%s': %s", dir, strerror(list_errno));
}
