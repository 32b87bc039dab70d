#include "byte_level.h"

#include "utf8.h"

/* Bytes that are printable Latin-1 keep their own code point; the other 68
 * bytes are numbered from U+0100 upwards in byte order. */
static int is_printable_latin1(unsigned b) {
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

uint32_t byte_level_codepoint(uint8_t b) {
    if (is_printable_latin1(b)) return b;
    uint32_t n = 0;
    for (unsigned x = 0; x < b; x++)
        if (!is_printable_latin1(x)) n++;
    return 0x100 + n;
}

static int codepoint_to_byte(uint32_t cp) {
    static int16_t table[0x200];
    static int ready;
    if (!ready) { /* idempotent, so a race between threads writes equal values */
        for (int i = 0; i < 0x200; i++) table[i] = -1;
        for (int b = 0; b < 256; b++) table[byte_level_codepoint((uint8_t)b)] = (int16_t)b;
        ready = 1;
    }
    return cp < 0x200 ? table[cp] : -1;
}

int64_t byte_level_to_bytes(const char *s, size_t len, uint8_t *out) {
    int64_t n = 0;
    size_t i = 0;
    while (i < len) {
        uint32_t cp;
        int k = utf8_decode_one((const uint8_t *)s + i, len - i, &cp);
        if (k <= 0) return -1;
        int b = codepoint_to_byte(cp);
        if (b < 0) return -1;
        out[n++] = (uint8_t)b;
        i += (size_t)k;
    }
    return n;
}
