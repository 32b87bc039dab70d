#ifndef KVCPT_PRETOKENIZE_H
#define KVCPT_PRETOKENIZE_H
/* Llama 3 pre-tokenizer: the split regex of tokenizer.json, run by PCRE2
 * (UTF + UCP, JIT-compiled). Input must already be valid UTF-8. */
#include <stddef.h>
#include <stdint.h>

typedef struct Pretokenizer Pretokenizer;   /* compiled pattern, shared by threads */
typedef struct PretokenCursor PretokenCursor; /* per-thread match state */

Pretokenizer *pretokenizer_new(void);
void pretokenizer_free(Pretokenizer *p);

PretokenCursor *pretoken_cursor_new(const Pretokenizer *p);
void pretoken_cursor_free(PretokenCursor *c);
/* Finds the next piece of text[0..len) at or after *pos. Returns 1 and sets
 * [*start, *end) when found, 0 at the end of text. Every byte of the text is
 * covered by exactly one piece. */
int pretoken_next(PretokenCursor *c, const char *text, size_t len, size_t *pos, size_t *start, size_t *end);

#endif
