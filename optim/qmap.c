#include "qmap.h"

#include <stdlib.h>

#include "../common/util.h"
#include "adamw_math.h"

/* Exponent levels 10^-6 .. 10^0 (bitsandbytes' max_exponent_bits = 7);
 * the scales are Python's 10 ** e (double) rounded to fp32 as torch does. */
#define QMAP_EXPONENT_LEVELS 7
static const double level_scale[QMAP_EXPONENT_LEVELS] = {1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0};

/* torch.linspace(0.1, 1, n) in fp32, computed the way ATen's CPU kernel
 * does: from the start for the first half, from the end for the second. */
static void linspace_f32(float *out, int n) {
    const float start = 0.1f, end = 1.0f;
    const float step = (end - start) / (float)(n - 1);
    for (int i = 0; i < n; i++) out[i] = i < n / 2 ? start + step * (float)i : end - step * (float)(n - 1 - i);
}

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* Level i contributes 2^i midpoints (signed, mirrored to negative) or
 * 2^(i+1) (unsigned), each scaled by 10^(i-6): 254 values, then 0 and 1. */
void qmap_build(QuantMap *q, int is_signed) {
    float data[QMAP_CODES];
    int n = 0;
    for (int i = 0; i < QMAP_EXPONENT_LEVELS; i++) {
        int fraction_items = (is_signed ? (1 << i) : (1 << (i + 1))) + 1;
        float bounds[130];
        linspace_f32(bounds, fraction_items);
        float scale = (float)level_scale[i];
        for (int k = 0; k + 1 < fraction_items; k++) {
            float mean = (bounds[k] + bounds[k + 1]) / 2.0f;
            data[n++] = scale * mean;
            if (is_signed) data[n++] = -scale * mean;
        }
    }
    data[n++] = 0.0f;
    data[n++] = 1.0f;
    if (n != QMAP_CODES) die("internal: dynamic map has %d codes, expected %d", n, QMAP_CODES);
    qsort(data, QMAP_CODES, sizeof(float), cmp_float);
    for (int i = 0; i < QMAP_CODES; i++) {
        q->code[i] = data[i];
        if (data[i] == 0.0f) q->zero_index = (uint8_t)i;
    }
    for (int i = 0; i + 1 < QMAP_CODES; i++) q->mid[i] = (q->code[i] + q->code[i + 1]) * 0.5f;
}
