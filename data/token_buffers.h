#ifndef KVCPT_TOKEN_BUFFERS_H
#define KVCPT_TOKEN_BUFFERS_H
/* The growable buffers the tokenizer's encoder and decoders write into:
 * token ids and bytes. Zero-initialised is empty. */
#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint32_t *ids; /* (cap,), the first n in use */
    int64_t n, cap;
} TokenBuf;

typedef struct {
    uint8_t *data; /* (cap,), the first n in use */
    int64_t n, cap;
} ByteBuf;

void token_buf_push(TokenBuf *b, uint32_t id);
void token_buf_free(TokenBuf *b);
void byte_buf_append(ByteBuf *b, const void *p, size_t n);
void byte_buf_free(ByteBuf *b);

#endif
