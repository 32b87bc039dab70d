#ifndef KVCPT_NORMALIZER_H
#define KVCPT_NORMALIZER_H
/* tokenizer.json's normalizer: the steps Hugging Face applies to each piece
 * of text between added tokens matched on the raw text, before the
 * pre-tokenizer sees it. Implemented: NFC (utf8proc's canonical composition,
 * as Qwen2's file asks), Prepend (a string in front of a non-empty piece,
 * SentencePiece's "▁") and Replace of a literal string (SentencePiece's
 * " " -> "▁"), alone or in a Sequence, applied in order. */
#include <stddef.h>
#include <stdint.h>

#define NORMALIZER_MAX_STEPS 8

typedef enum { NORM_NFC, NORM_PREPEND, NORM_REPLACE } NormKind;

typedef struct {
    NormKind kind;
    char *text;        /* Prepend: what goes in front; Replace: the pattern */
    char *replacement; /* Replace: what each occurrence becomes */
} NormStep;

typedef struct {
    NormStep step[NORMALIZER_MAX_STEPS];
    int n;
} Normalizer;

/* Scratch of one thread: two byte buffers the steps alternate between and
 * the code points NFC works on. */
typedef struct {
    char *buf[2];
    size_t cap[2];
    int32_t *cps;
    size_t cps_cap;
} NormScratch;

/* Runs the steps over s[0..n) (valid UTF-8) and returns the result, *out_len
 * bytes, in w (valid until the next call) or s itself when no step changed
 * anything. */
const char *normalize(const Normalizer *nz, NormScratch *w, const char *s, size_t n, size_t *out_len);
void norm_scratch_free(NormScratch *w);
void normalizer_free(Normalizer *nz);

#endif
