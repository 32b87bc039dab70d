/* Growable token-id and byte buffers (token_buffers.h). */
#include <stdlib.h>
#include <string.h>

#include "../common/util.h"
#include "token_buffers.h"

void token_buf_push(TokenBuf *b, uint32_t id) {
    if (b->n == b->cap) {
        b->cap = b->cap ? 2 * b->cap : 1024;
        b->ids = xrealloc(b->ids, (size_t)b->cap * sizeof(uint32_t));
    }
    b->ids[b->n++] = id;
}

void token_buf_free(TokenBuf *b) {
    free(b->ids);
    memset(b, 0, sizeof *b);
}

void byte_buf_append(ByteBuf *b, const void *p, size_t n) {
    if (n == 0) return; /* an empty buffer has no data to copy to yet */
    if (b->n + (int64_t)n > b->cap) {
        b->cap = 2 * (b->n + (int64_t)n) + 256;
        b->data = xrealloc(b->data, (size_t)b->cap);
    }
    memcpy(b->data + b->n, p, n);
    b->n += (int64_t)n;
}

void byte_buf_free(ByteBuf *b) {
    free(b->data);
    memset(b, 0, sizeof *b);
}
