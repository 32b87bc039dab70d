#ifndef KVCPT_CUDA_EMU_BF16_H
#define KVCPT_CUDA_EMU_BF16_H
/* CPU stand-in for cuda_bf16.h: the storage type and the two conversions the
 * kernels use, rounding to nearest even as the hardware does. */
#include <stdint.h>
#include <string.h>

struct __nv_bfloat16 {
    uint16_t __x;
};
typedef struct __nv_bfloat16 nv_bfloat16;

static inline float __bfloat162float(__nv_bfloat16 h) {
    uint32_t u = (uint32_t)h.__x << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static inline __nv_bfloat16 __float2bfloat16_rn(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    __nv_bfloat16 h;
    if ((u & 0x7fffffffu) > 0x7f800000u) h.__x = (uint16_t)((u >> 16) | 0x40u); /* NaN stays NaN */
    else h.__x = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    return h;
}
#endif
