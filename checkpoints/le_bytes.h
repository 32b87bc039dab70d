#ifndef KVCPT_LE_BYTES_H
#define KVCPT_LE_BYTES_H
/* Little-endian integer fields of the binary formats (native model,
 * training checkpoints), independent of the host's byte order. */
#include <stdint.h>

static inline uint64_t get_le(const uint8_t *p, int bytes) {
    uint64_t v = 0;
    for (int i = bytes - 1; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

static inline void put_le(uint8_t *p, uint64_t v, int bytes) {
    for (int i = 0; i < bytes; i++) p[i] = (uint8_t)(v >> (8 * i));
}
#endif
