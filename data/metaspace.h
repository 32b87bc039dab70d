#ifndef KVCPT_METASPACE_H
#define KVCPT_METASPACE_H
/* The Metaspace pre-tokenizer of SentencePiece-style tokenizer.json files
 * (Hugging Face's semantics): every space becomes the replacement character
 * ("▁"); the replacement goes in front of a piece that does not already
 * start with one (prepend_scheme "always"), only of the piece at the very
 * start of the text ("first"), or never; with split, the piece is then cut
 * before every replacement character (each "▁" starts a piece, "a▁▁b" is
 * "a", "▁", "▁b"). */
#include <stddef.h>

enum { METASPACE_NEVER, METASPACE_FIRST, METASPACE_ALWAYS };

typedef struct {
    char rep[5];    /* the replacement, one character in UTF-8 */
    size_t rep_len;
    int prepend;    /* METASPACE_* */
    int split;
} Metaspace;

typedef struct {
    char *buf;
    size_t cap;
} MetaspaceScratch;

/* Calls fn(ctx, piece, len) for the pieces of s[0..n); at_start: s begins at
 * the start of the text being encoded (for "first"). */
void metaspace_pretokenize(const Metaspace *m, MetaspaceScratch *w, const char *s, size_t n, int at_start,
                           void (*fn)(void *ctx, const char *piece, size_t len), void *ctx);
void metaspace_scratch_free(MetaspaceScratch *w);

#endif
