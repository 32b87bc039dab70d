#ifndef KVCPT_DTYPE_H
#define KVCPT_DTYPE_H
/* Element types of stored tensors and the scalar conversions between them.
 * Header-only static inline so that host code and CUDA code (which compiles
 * this header as C++) share one definition of the rounding rules.
 *
 * fp32 -> bf16 rounds to nearest, ties to even, as torch's
 * tensor.to(torch.bfloat16) does; NaN stays a quiet NaN with its sign.
 * fp32 -> f16 also rounds to nearest even; overflow gives +-inf, and values
 * below the f16 subnormal range round to signed zero. */
#include <stdint.h>
#include <string.h>

typedef enum { KV_F32 = 0, KV_BF16 = 1, KV_F16 = 2, KV_DTYPE_COUNT } KvDtype;

static inline int64_t kv_dtype_size(KvDtype d) { return d == KV_F32 ? 4 : 2; }

/* Names as the safetensors header spells them. */
static inline const char *kv_dtype_name(KvDtype d) {
    return d == KV_F32 ? "F32" : d == KV_BF16 ? "BF16" : d == KV_F16 ? "F16" : "?";
}

/* Returns 0 and sets *out for "F32", "BF16", "F16"; -1 otherwise. */
static inline int kv_dtype_parse(const char *s, KvDtype *out) {
    for (int d = 0; d < KV_DTYPE_COUNT; d++)
        if (strcmp(s, kv_dtype_name((KvDtype)d)) == 0) {
            *out = (KvDtype)d;
            return 0;
        }
    return -1;
}

static inline uint32_t kv_f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static inline float kv_bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline float kv_bf16_to_f32(uint16_t h) { return kv_bits_f32((uint32_t)h << 16); }

static inline uint16_t kv_f32_to_bf16(float f) {
    uint32_t u = kv_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u); /* quiet the NaN */
    uint32_t rounding_bias = 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)((u + rounding_bias) >> 16);
}

static inline float kv_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    if (exp == 0x1f) return kv_bits_f32(sign | 0x7f800000u | (man << 13));
    if (exp != 0) return kv_bits_f32(sign | ((exp + 112u) << 23) | (man << 13));
    if (man == 0) return kv_bits_f32(sign);
    /* subnormal: value = man * 2^-24, exact in fp32 */
    float v = (float)man * (1.0f / 16777216.0f);
    return sign ? -v : v;
}

static inline uint16_t kv_f32_to_f16(float f) {
    uint32_t u = kv_f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* >= 65520 rounds to inf */
    if (a >= 0x38800000u) {                                   /* normal f16 range */
        uint32_t r = a - 0x38000000u;                         /* rebias exponent 127 -> 15 */
        r += 0xfffu + ((r >> 13) & 1u);
        return (uint16_t)(sign | (r >> 13));
    }
    if (a < 0x33000000u) return sign; /* below half the smallest subnormal */
    /* subnormal: shift the full significand, round to nearest even */
    uint32_t e = a >> 23, m = (a & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126u - e; /* 14..24 */
    uint32_t q = m >> shift, rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (q & 1u))) q++;
    return (uint16_t)(sign | q);
}

/* The largest finite value of d, as fp32 (F16 65504, BF16 about 3.39e38). */
static inline float kv_dtype_max_finite(KvDtype d) {
    return d == KV_F16 ? kv_f16_to_f32(0x7bffu) : d == KV_BF16 ? kv_bf16_to_f32(0x7f7fu) : kv_bits_f32(0x7f7fffffu);
}

/* 1 when the finite f becomes +-inf in d: round-to-nearest-even carries
 * values past d's largest finite one into the infinity pattern. An inf or
 * NaN f is 0: it stays what it was, nothing overflowed. */
static inline int kv_overflows(float f, KvDtype d) {
    if ((kv_f32_bits(f) & 0x7f800000u) == 0x7f800000u || d == KV_F32) return 0;
    uint16_t h = d == KV_BF16 ? kv_f32_to_bf16(f) : kv_f32_to_f16(f);
    return (h & 0x7fffu) == (d == KV_BF16 ? 0x7f80u : 0x7c00u);
}

/* Reads element i of a buffer of dtype d as fp32. */
static inline float kv_load_f32(const void *p, KvDtype d, int64_t i) {
    if (d == KV_F32) {
        float f;
        memcpy(&f, (const char *)p + 4 * i, 4);
        return f;
    }
    uint16_t h;
    memcpy(&h, (const char *)p + 2 * i, 2);
    return d == KV_BF16 ? kv_bf16_to_f32(h) : kv_f16_to_f32(h);
}

/* Converts n elements between dtypes (dst and src must not overlap). Equal
 * dtypes copy bytes unchanged; everything else goes through fp32. */
static inline void kv_convert(void *dst, KvDtype dd, const void *src, KvDtype sd, int64_t n) {
    if (dd == sd) {
        memcpy(dst, src, (size_t)(n * kv_dtype_size(sd)));
        return;
    }
    for (int64_t i = 0; i < n; i++) {
        float f = kv_load_f32(src, sd, i);
        if (dd == KV_F32) {
            memcpy((char *)dst + 4 * i, &f, 4);
        } else {
            uint16_t h = dd == KV_BF16 ? kv_f32_to_bf16(f) : kv_f32_to_f16(f);
            memcpy((char *)dst + 2 * i, &h, 2);
        }
    }
}

#endif
