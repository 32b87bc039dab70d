#include "rope.h"

#include <math.h>
#include <string.h>

void rope_inv_freq(float *inv_freq, int64_t D, const RopeParams *p) {
    const float two_pi = 6.283185307179586f;
    for (int64_t i = 0; i < D / 2; i++) {
        float inv = 1.0f / powf((float)p->theta, (float)(2 * i) / (float)D);
        if (p->llama3) {
            float old = (float)p->original_max_pos, lo = (float)p->low_freq_factor, hi = (float)p->high_freq_factor;
            float factor = (float)p->factor;
            float wavelen = two_pi / inv;
            if (wavelen > old / lo) { /* long wavelengths: slowed down by the factor */
                inv = inv / factor;
            } else if (!(wavelen < old / hi)) { /* medium band: blend */
                float smooth = (old / wavelen - lo) / (hi - lo);
                inv = (1.0f - smooth) * inv / factor + smooth * inv;
            }
        }
        inv_freq[i] = inv;
    }
}

void rope_table(float *cos_t, float *sin_t, int64_t T, int64_t D, const RopeParams *p) {
    int64_t half = D / 2;
    float inv[half > 0 ? half : 1];
    rope_inv_freq(inv, D, p);
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < T; t++)
        for (int64_t i = 0; i < half; i++) {
            float a = (float)t * inv[i];
            cos_t[t * half + i] = cosf(a);
            sin_t[t * half + i] = sinf(a);
        }
}

/* Rows of heads (b, t) rotated from src into dst (dst == src: in place);
 * the strides let one call read or write a head range of the fused
 * projection rows [q | k | v]. */
static void rotate_rows(float *dst, int64_t dst_stride, const float *src, int64_t src_stride, const float *cos_t,
                        const float *sin_t, int64_t B, int64_t T, int64_t H, int64_t D, float sign) {
    int64_t half = D / 2;
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < T; t++) {
            const float *c = cos_t + t * half, *s = sin_t + t * half;
            for (int64_t h = 0; h < H; h++) {
                const float *x = src + (b * T + t) * src_stride + h * D;
                float *y = dst + (b * T + t) * dst_stride + h * D;
                for (int64_t i = 0; i < half; i++) {
                    float x1 = x[i], x2 = x[i + half], sn = sign * s[i];
                    y[i] = x1 * c[i] - x2 * sn;
                    y[i + half] = x2 * c[i] + x1 * sn;
                }
            }
        }
}

static void copy_rows(float *dst, int64_t dst_stride, const float *src, int64_t src_stride, int64_t rows, int64_t n) {
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; r++) memcpy(dst + r * dst_stride, src + r * src_stride, sizeof(float) * (size_t)n);
}

void rope_forward_cpu(float *x, const float *cos_t, const float *sin_t, int64_t B, int64_t T, int64_t H, int64_t D) {
    rotate_rows(x, H * D, x, H * D, cos_t, sin_t, B, T, H, D, 1.0f);
}

void rope_backward_cpu(float *dx, const float *cos_t, const float *sin_t, int64_t B, int64_t T, int64_t H, int64_t D) {
    rotate_rows(dx, H * D, dx, H * D, cos_t, sin_t, B, T, H, D, -1.0f);
}

void rope_split_forward_cpu(float *q, float *k, float *v, const float *qkv, const float *cos_t, const float *sin_t,
                            int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t D) {
    int64_t QD = Hq * D, KD = Hkv * D, W = QD + 2 * KD;
    rotate_rows(q, QD, qkv, W, cos_t, sin_t, B, T, Hq, D, 1.0f);
    rotate_rows(k, KD, qkv + QD, W, cos_t, sin_t, B, T, Hkv, D, 1.0f);
    copy_rows(v, KD, qkv + QD + KD, W, B * T, KD);
}

void rope_join_backward_cpu(float *dqkv, const float *dq, const float *dk, const float *dv, const float *cos_t,
                            const float *sin_t, int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t D) {
    int64_t QD = Hq * D, KD = Hkv * D, W = QD + 2 * KD;
    rotate_rows(dqkv, W, dq, QD, cos_t, sin_t, B, T, Hq, D, -1.0f);
    rotate_rows(dqkv + QD, W, dk, KD, cos_t, sin_t, B, T, Hkv, D, -1.0f);
    copy_rows(dqkv + QD + KD, W, dv, KD, B * T, KD);
}
