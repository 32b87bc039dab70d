#ifndef KVCPT_UTF8_H
#define KVCPT_UTF8_H
/* Strict UTF-8 (RFC 3629): no overlongs, no surrogates, nothing above
 * U+10FFFF. Text is validated once on input so that the regex engine can
 * skip its own per-call check. */
#include <stddef.h>
#include <stdint.h>

/* Decodes one code point; returns its byte length, or 0 if invalid/truncated. */
int utf8_decode_one(const uint8_t *s, size_t n, uint32_t *cp);

/* Returns -1 when all n bytes are valid UTF-8, else the offset of the first
 * byte of the first invalid sequence. */
int64_t utf8_first_invalid(const uint8_t *s, size_t n);

#endif
