#ifndef KVCPT_CHECKED_H
#define KVCPT_CHECKED_H
/* int64 arithmetic that reports overflow instead of wrapping (signed
 * overflow is undefined behaviour in C): for sizes and positions computed
 * from user-given counts. Each returns 0 and sets *out, or returns -1. */
#include <stdint.h>

static inline int i64_add(int64_t a, int64_t b, int64_t *out) { return __builtin_add_overflow(a, b, out) ? -1 : 0; }
static inline int i64_mul(int64_t a, int64_t b, int64_t *out) { return __builtin_mul_overflow(a, b, out) ? -1 : 0; }

#endif
