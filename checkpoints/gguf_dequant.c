#include "gguf_dequant.h"

#include <string.h>

#include "dtype.h"

/* gguf-py's GGML_QUANT_SIZES (constants.py), indexed by type number; the
 * gaps are numbers retired from ggml (Q4_2, Q4_3, the repacked Q4_0_x_y and
 * IQ4_NL_x_y types), which no reader accepts. */
static const GgmlTypeInfo TYPES[] = {
    [0] = {"F32", 1, 4},         [1] = {"F16", 1, 2},         [2] = {"Q4_0", 32, 18},      [3] = {"Q4_1", 32, 20},
    [6] = {"Q5_0", 32, 22},      [7] = {"Q5_1", 32, 24},      [8] = {"Q8_0", 32, 34},      [9] = {"Q8_1", 32, 40},
    [10] = {"Q2_K", 256, 84},    [11] = {"Q3_K", 256, 110},   [12] = {"Q4_K", 256, 144},   [13] = {"Q5_K", 256, 176},
    [14] = {"Q6_K", 256, 210},   [15] = {"Q8_K", 256, 292},   [16] = {"IQ2_XXS", 256, 66}, [17] = {"IQ2_XS", 256, 74},
    [18] = {"IQ3_XXS", 256, 98}, [19] = {"IQ1_S", 256, 50},   [20] = {"IQ4_NL", 32, 18},   [21] = {"IQ3_S", 256, 110},
    [22] = {"IQ2_S", 256, 82},   [23] = {"IQ4_XS", 256, 136}, [24] = {"I8", 1, 1},         [25] = {"I16", 1, 2},
    [26] = {"I32", 1, 4},        [27] = {"I64", 1, 8},        [28] = {"F64", 1, 8},        [29] = {"IQ1_M", 256, 56},
    [30] = {"BF16", 1, 2},       [34] = {"TQ1_0", 256, 54},   [35] = {"TQ2_0", 256, 66},   [39] = {"MXFP4", 32, 17},
    [40] = {"NVFP4", 64, 36},    [41] = {"Q1_0", 128, 18},
};

const GgmlTypeInfo *ggml_type_info(uint32_t type) {
    if (type >= sizeof TYPES / sizeof TYPES[0] || !TYPES[type].name) return NULL;
    return &TYPES[type];
}

int ggml_type_dequantizable(uint32_t type) {
    return type == GGML_T_F32 || type == GGML_T_F16 || type == GGML_T_BF16 || type == GGML_T_Q8_0 ||
           type == GGML_T_Q4_0 || type == GGML_T_Q4_1;
}

static uint16_t u16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }

/* The block formats (ggml-common.h): an fp16 scale d (Q4_1: then an fp16
 * min m), then the quants. Q4 packs element j of the block in the low
 * nibble of byte j and element j + 16 in its high nibble. gguf-py widens
 * d and m to fp32 exactly and computes in fp32: Q8_0 and Q4_0 y = d * q,
 * Q4_1 y = (d * q) + m. The product is exact in fp32 (an 11-bit fp16
 * significand times a quant of at most 8 bits), so only Q4_1's addition
 * rounds, once, as here; adding m any other way (say d * (q + m / d))
 * would round differently. */
int ggml_dequantize(uint32_t type, const uint8_t *src, float *dst, int64_t n) {
    switch (type) {
        case GGML_T_F32: memcpy(dst, src, (size_t)n * 4); return 0;
        case GGML_T_F16:
            for (int64_t i = 0; i < n; i++) dst[i] = kv_f16_to_f32(u16(src + 2 * i));
            return 0;
        case GGML_T_BF16:
            for (int64_t i = 0; i < n; i++) dst[i] = kv_bf16_to_f32(u16(src + 2 * i));
            return 0;
        case GGML_T_Q8_0:
            for (int64_t b = 0; b < n / 32; b++) {
                const uint8_t *p = src + 34 * b;
                float d = kv_f16_to_f32(u16(p));
                for (int j = 0; j < 32; j++) dst[32 * b + j] = d * (float)(int8_t)p[2 + j];
            }
            return 0;
        case GGML_T_Q4_0:
            for (int64_t b = 0; b < n / 32; b++) {
                const uint8_t *p = src + 18 * b;
                float d = kv_f16_to_f32(u16(p));
                for (int j = 0; j < 16; j++) {
                    dst[32 * b + j] = d * (float)((p[2 + j] & 0x0f) - 8);
                    dst[32 * b + j + 16] = d * (float)((p[2 + j] >> 4) - 8);
                }
            }
            return 0;
        case GGML_T_Q4_1:
            for (int64_t b = 0; b < n / 32; b++) {
                const uint8_t *p = src + 20 * b;
                float d = kv_f16_to_f32(u16(p)), m = kv_f16_to_f32(u16(p + 2));
                for (int j = 0; j < 16; j++) {
                    float lo = d * (float)(p[4 + j] & 0x0f), hi = d * (float)(p[4 + j] >> 4);
                    dst[32 * b + j] = lo + m;
                    dst[32 * b + j + 16] = hi + m;
                }
            }
            return 0;
        default: return -1;
    }
}
