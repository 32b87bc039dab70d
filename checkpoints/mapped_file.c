#include "mapped_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common/util.h"

int mapped_file_open(MappedFile *m, const char *path, char *err, int errlen) {
    memset(m, 0, sizeof *m);
    int fd = open_regular_file(path);
    if (fd < 0) {
        snprintf(err, (size_t)errlen, "'%s': cannot open: %s", path, open_regular_strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        snprintf(err, (size_t)errlen, "'%s': cannot stat: %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    m->size = (int64_t)st.st_size;
    if (m->size > 0) {
        void *p = mmap(NULL, (size_t)m->size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            snprintf(err, (size_t)errlen, "'%s': cannot map %lld bytes: %s", path, (long long)m->size, strerror(errno));
            close(fd);
            return -1;
        }
        /* tensors are consumed front to back exactly once */
        madvise(p, (size_t)m->size, MADV_SEQUENTIAL);
        m->data = p;
    }
    close(fd);
    m->path = xstrdup(path);
    return 0;
}

void mapped_file_close(MappedFile *m) {
    if (m->data) munmap((void *)m->data, (size_t)m->size);
    free(m->path);
    memset(m, 0, sizeof *m);
}
