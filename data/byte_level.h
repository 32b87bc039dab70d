#ifndef KVCPT_BYTE_LEVEL_H
#define KVCPT_BYTE_LEVEL_H
/* GPT-2 style byte-level alphabet: every byte 0..255 is written in
 * tokenizer.json as one printable code point (space -> U+0120 'Ġ', ...).
 * Vocabulary strings are stored in that alphabet; we convert them back to
 * raw bytes once at load time and work on bytes afterwards. */
#include <stddef.h>
#include <stdint.h>

/* Code point that stands for byte b in tokenizer.json. */
uint32_t byte_level_codepoint(uint8_t b);

/* Converts a UTF-8 string in the byte-level alphabet to raw bytes.
 * Returns the number of bytes written to out (capacity >= strlen(s)),
 * or -1 when s contains a code point outside the alphabet. */
int64_t byte_level_to_bytes(const char *s, size_t len, uint8_t *out);

#endif
