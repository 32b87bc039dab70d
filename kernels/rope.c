#include "rope.h"

#include <math.h>

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

static void rotate(float *x, const float *cos_t, const float *sin_t, int64_t B, int64_t T, int64_t H, int64_t D,
                   float sign) {
    int64_t half = D / 2;
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < T; t++) {
            const float *c = cos_t + t * half, *s = sin_t + t * half;
            for (int64_t h = 0; h < H; h++) {
                float *v = x + ((b * T + t) * H + h) * D;
                for (int64_t i = 0; i < half; i++) {
                    float x1 = v[i], x2 = v[i + half], sn = sign * s[i];
                    v[i] = x1 * c[i] - x2 * sn;
                    v[i + half] = x2 * c[i] + x1 * sn;
                }
            }
        }
}

void rope_forward_cpu(float *x, const float *cos_t, const float *sin_t, int64_t B, int64_t T, int64_t H, int64_t D) {
    rotate(x, cos_t, sin_t, B, T, H, D, 1.0f);
}

void rope_backward_cpu(float *dx, const float *cos_t, const float *sin_t, int64_t B, int64_t T, int64_t H, int64_t D) {
    rotate(dx, cos_t, sin_t, B, T, H, D, -1.0f);
}
