#ifndef KVCPT_BF16_H
#define KVCPT_BF16_H
/* bfloat16 storage shared by C and CUDA code. C sees the raw 16 bits
 * (uint16_t); CUDA sees __nv_bfloat16, which has the same size and layout,
 * so one declaration serves both sides of an extern "C" launcher. */
#include <stdint.h>
#include <string.h>

#if defined(__CUDACC__) || (defined(KVCPT_CUDA_EMU) && defined(__cplusplus)) /* the CPU emulator (tests/cuda_emu) */
#include <cuda_bf16.h>
typedef __nv_bfloat16 bf16;
#else
typedef uint16_t bf16;
#endif

/* fp32 -> bf16 bits, round to nearest even (NaN stays a quiet NaN), as
 * __float2bfloat16_rn does on the device. */
static inline uint16_t bf16_bits_from_float(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static inline float float_from_bf16_bits(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
#ifdef __cplusplus
extern "C" {
#endif
/* Device out = device in rounded to bf16, nearest even (kernels/bf16_cast.cu):
 * the operand cast of the bf16 matmuls, and the refresh of a bf16 copy of
 * an fp32 tensor. */
void cast_bf16_cuda(bf16 *out, const float *in, int64_t n);
#ifdef __cplusplus
}
#endif
#endif
