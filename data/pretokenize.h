#ifndef KVCPT_PRETOKENIZE_H
#define KVCPT_PRETOKENIZE_H
/* Pre-tokenizer: a chain of split regexes (PCRE2 spelling, see
 * regex_translate.h; UTF + UCP, JIT-compiled), as Hugging Face applies a
 * Sequence of Split/Digits/ByteLevel pre-tokenizers: stage k splits every
 * piece of stage k-1 on its own (the piece is the whole subject, so a
 * look-ahead sees the piece's end as the end of text), and each match and
 * each gap between matches is a piece (behavior "Isolated"). With one stage
 * the text goes through a single regex pass; with none it is one piece.
 * Input must already be valid UTF-8. */
#include <stddef.h>
#include <stdint.h>

#define PRETOKENIZE_MAX_STAGES 8

typedef struct Pretokenizer Pretokenizer;     /* compiled stages, shared by threads */
typedef struct PretokenCursor PretokenCursor; /* per-thread match state */

Pretokenizer *pretokenizer_new(void);
/* Appends a stage; returns 0 and a message in err when the pattern does not
 * compile (or there are too many stages). */
int pretokenizer_add_stage(Pretokenizer *p, const char *pcre2_pattern, char *err, size_t err_cap);
int pretokenizer_stages(const Pretokenizer *p);
void pretokenizer_free(Pretokenizer *p);

PretokenCursor *pretoken_cursor_new(const Pretokenizer *p);
void pretoken_cursor_free(PretokenCursor *c);

/* Calls fn(ctx, piece, len) for each piece of text[0..len), in order; the
 * pieces cover every byte exactly once and none is empty. Returns 1; or 0
 * when a regex fails (a pattern that needs more JIT stack than PCRE2 has,
 * for one), after passing on some of the pieces before the failure. */
typedef void (*PretokenFn)(void *ctx, const char *piece, size_t len);
int pretokenize(PretokenCursor *c, const char *text, size_t len, PretokenFn fn, void *ctx);
/* After pretokenize() returned 0: PCRE2's message, the failing stage, and
 * where in the text that stage's failed search started. */
const char *pretoken_cursor_error(const PretokenCursor *c, int *stage, const char **at);

#endif
