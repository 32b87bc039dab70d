#ifndef KVCPT_TOKEN_DECODER_H
#define KVCPT_TOKEN_DECODER_H
/* tokenizer.json's decoder for vocabularies stored as text (SentencePiece
 * style: "▁the", "<0x0A>"), with Hugging Face's semantics: each step maps
 * the list of token strings to a new list, and the last list is joined.
 * Steps: Replace (a literal string), ByteFallback (a run of "<0xNN>" tokens
 * becomes its bytes when they are UTF-8, else one U+FFFD per token), Fuse
 * (all tokens into one), Strip (up to `start` leading and `stop` trailing
 * copies of one character from each token), Metaspace (the replacement
 * becomes a space, and is dropped in the first token unless prepend_scheme
 * is "never"). No decoder at all joins the tokens with spaces. */
#include <stddef.h>
#include <stdint.h>

#include "tokenizer.h"

#define TOK_DECODER_MAX_STEPS 8

typedef enum { DEC_REPLACE, DEC_BYTE_FALLBACK, DEC_FUSE, DEC_STRIP, DEC_METASPACE } DecKind;

typedef struct {
    DecKind kind;
    char *text;        /* Replace: the pattern; Strip: the character; Metaspace: the replacement */
    char *replacement; /* Replace: what the pattern becomes */
    int64_t start, stop;      /* Strip */
    int keep_first;           /* Metaspace: prepend_scheme "never" */
} DecStep;

typedef struct {
    DecStep step[TOK_DECODER_MAX_STEPS];
    int n;
    int present; /* 0: tokenizer.json's decoder is null */
} TokDecoder;

/* Decodes the n token strings tok[i] (len[i] bytes each) and appends the text
 * to out. */
void tok_decoder_run(const TokDecoder *d, const char *const *tok, const size_t *len, int64_t n, ByteBuf *out);
void tok_decoder_free(TokDecoder *d);

#endif
