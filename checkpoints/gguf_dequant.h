#ifndef KVCPT_GGUF_DEQUANT_H
#define KVCPT_GGUF_DEQUANT_H
/* ggml tensor types as GGUF numbers them: their names and block geometry
 * (every known type, so a reader can check any tensor's byte size), and
 * dequantization to fp32 of the types kvcpt imports: F32, F16, BF16, Q8_0,
 * Q4_0, Q4_1. Results are bit-identical to the gguf Python package's
 * gguf.quants.dequantize (llama.cpp's reference). */
#include <stdint.h>

typedef struct {
    const char *name;   /* "Q4_1", as llama.cpp spells it */
    int64_t block;      /* elements per block */
    int64_t block_bytes;
} GgmlTypeInfo;

/* Geometry of ggml type `type`, or NULL for a number no ggml release used. */
const GgmlTypeInfo *ggml_type_info(uint32_t type);
/* 1 when gguf_dequantize handles `type`. */
int ggml_type_dequantizable(uint32_t type);
/* Dequantizes n elements (n a multiple of the type's block) from src, laid
 * out as ggml stores them, into dst. Returns 0, or -1 for a type it does not
 * handle (nothing written). */
int ggml_dequantize(uint32_t type, const uint8_t *src, float *dst, int64_t n);

enum { GGML_T_F32 = 0, GGML_T_F16 = 1, GGML_T_Q4_0 = 2, GGML_T_Q4_1 = 3, GGML_T_Q8_0 = 8, GGML_T_BF16 = 30 };

#endif
