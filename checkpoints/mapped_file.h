#ifndef KVCPT_MAPPED_FILE_H
#define KVCPT_MAPPED_FILE_H
/* A whole file mapped read-only, so multi-GB checkpoints are paged in once
 * as they are consumed instead of being copied into heap buffers. */
#include <stdint.h>

typedef struct {
    char *path;           /* heap copy, for messages */
    const uint8_t *data;  /* NULL for an empty file */
    int64_t size;
} MappedFile;

/* Returns 0, or -1 with a message naming the path in err. */
int mapped_file_open(MappedFile *m, const char *path, char *err, int errlen);
void mapped_file_close(MappedFile *m);

#endif
