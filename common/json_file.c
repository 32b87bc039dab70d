#include "json_file.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "util.h"

json_t *json_load_regular(const char *path, size_t flags, json_error_t *err) {
    int fd = open_regular_file(path);
    if (fd < 0) {
        memset(err, 0, sizeof *err);
        snprintf(err->text, sizeof err->text, "%s", open_regular_strerror(errno));
        return NULL;
    }
    /* through stdio: jansson's json_loadfd reads one byte per read() call,
     * 9 million system calls (seconds) for Llama 3's tokenizer.json */
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        int e = errno;
        close(fd);
        memset(err, 0, sizeof *err);
        snprintf(err->text, sizeof err->text, "%s", strerror(e));
        return NULL;
    }
    json_t *root = json_loadf(f, flags, err);
    fclose(f);
    return root;
}
