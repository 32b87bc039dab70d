#include "rope.h"

#include <math.h>
#include <string.h>

#include "parallel_min.h"

/* transformers' inverse frequencies 1 / base^(2i/D), in fp32 (torch's
 * float32 tensor arithmetic) */
static float base_inv(float base, int64_t i, int64_t D) { return 1.0f / powf(base, (float)(2 * i) / (float)D); }

/* torch divides a Python float by a tensor as reciprocal(x) * float */
static float rdiv(double num, float x) { return (1.0f / x) * (float)num; }

static void llama3_rule(float *inv_freq, int64_t D, const RopeParams *p) {
    const RopeScaling *s = &p->s;
    double old = (double)s->original_max_pos, lo = s->low_freq_factor, hi = s->high_freq_factor;
    float factor = (float)s->factor, flo = (float)lo, band = (float)(hi - lo);
    float long_edge = (float)(old / lo), short_edge = (float)(old / hi);
    for (int64_t i = 0; i < D / 2; i++) {
        float inv = inv_freq[i], wavelen = rdiv(2 * M_PI, inv);
        if (wavelen > long_edge) { /* long wavelengths: slowed down by the factor */
            inv = inv / factor;
        } else if (!(wavelen < short_edge)) { /* medium band: blend */
            float smooth = (rdiv(old, wavelen) - flo) / band;
            inv = (1.0f - smooth) * inv / factor + smooth * inv;
        }
        inv_freq[i] = inv;
    }
}

/* Dynamic NTK: the base grows with the sequence length past
 * max_position_embeddings. transformers computes the initial base in
 * Python doubles and, once a forward's length passes max_position_embeddings,
 * the grown one from a float32 tensor of that length: both ways kept. */
static float dynamic_base(const RopeParams *p, int64_t D) {
    double f = p->s.factor, e = (double)D / (double)(D - 2);
    if (p->seq_len <= p->max_pos)
        return (float)(p->theta * pow(f * (double)p->max_pos / (double)p->max_pos - (f - 1), e));
    float x = (float)f * (float)p->seq_len;
    x = x / (float)p->max_pos;
    x = x - (float)(f - 1);
    /* torch raises a float32 scalar to a Python float in double */
    return (float)p->theta * (float)pow((double)x, e);
}

/* YaRN: frequencies blended between interpolated (divided by the factor)
 * and extrapolated (unchanged) over the dimensions that turn between
 * beta_slow and beta_fast times in the original context. */
static double yarn_correction_dim(double rotations, int64_t D, double base, int64_t original) {
    return ((double)D * log((double)original / (rotations * 2 * M_PI))) / (2 * log(base));
}

static void yarn_rule(float *inv_freq, int64_t D, const RopeParams *p) {
    const RopeScaling *s = &p->s;
    double fast = s->beta_fast != 0 ? s->beta_fast : 32, slow = s->beta_slow != 0 ? s->beta_slow : 1;
    double low = yarn_correction_dim(fast, D, p->theta, s->original_max_pos);
    double high = yarn_correction_dim(slow, D, p->theta, s->original_max_pos);
    if (!s->no_truncate) low = floor(low), high = ceil(high);
    if (low < 0) low = 0;
    if (high > (double)(D - 1)) high = (double)(D - 1);
    if (low == high) high += 0.001; /* no singular ramp */
    float flow = (float)low, span = (float)(high - low), factor = (float)s->factor;
    for (int64_t i = 0; i < D / 2; i++) {
        float pos_freq = powf((float)p->theta, (float)(2 * i) / (float)D);
        float extrapolation = 1.0f / pos_freq, interpolation = 1.0f / (factor * pos_freq);
        float ramp = ((float)i - flow) / span;
        ramp = ramp < 0.0f ? 0.0f : ramp > 1.0f ? 1.0f : ramp;
        float keep = 1.0f - ramp; /* the share extrapolated */
        float a = interpolation * (1.0f - keep), b = extrapolation * keep;
        inv_freq[i] = a + b;
    }
}

void rope_inv_freq(float *inv_freq, int64_t D, const RopeParams *p) {
    if (p->s.type == ROPE_YARN) {
        yarn_rule(inv_freq, D, p);
        return;
    }
    float base = p->s.type == ROPE_DYNAMIC ? dynamic_base(p, D) : (float)p->theta;
    for (int64_t i = 0; i < D / 2; i++) inv_freq[i] = base_inv(base, i, D);
    if (p->s.type == ROPE_LINEAR)
        for (int64_t i = 0; i < D / 2; i++) inv_freq[i] = inv_freq[i] / (float)p->s.factor;
    if (p->s.type == ROPE_LLAMA3) llama3_rule(inv_freq, D, p);
}

static double yarn_mscale(double scale, double mscale) { return scale <= 1 ? 1.0 : 0.1 * mscale * log(scale) + 1.0; }

double rope_attention_factor(const RopeScaling *s) {
    if (s->type != ROPE_YARN) return 1.0;
    if (s->attention_factor != 0) return s->attention_factor;
    if (s->mscale != 0 && s->mscale_all_dim != 0)
        return yarn_mscale(s->factor, s->mscale) / yarn_mscale(s->factor, s->mscale_all_dim);
    return yarn_mscale(s->factor, 1);
}

void rope_table(float *cos_t, float *sin_t, int64_t T, int64_t D, const RopeParams *p) {
    int64_t half = D / 2;
    float inv[half > 0 ? half : 1];
    rope_inv_freq(inv, D, p);
    /* yarn's attention factor scales q and k through the tables, as transformers' */
    float scale = (float)rope_attention_factor(&p->s);
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < T; t++)
        for (int64_t i = 0; i < half; i++) {
            float a = (float)t * inv[i];
            cos_t[t * half + i] = cosf(a) * scale;
            sin_t[t * half + i] = sinf(a) * scale;
        }
}

/* Rows of heads (b, t) rotated from src into dst (dst == src: in place);
 * the strides let one call read or write a head range of the fused
 * projection rows [q | k | v]. */
static void rotate_rows(float *dst, int64_t dst_stride, const float *src, int64_t src_stride, const float *cos_t,
                        const float *sin_t, int64_t B, int64_t T, int64_t H, int64_t D, float sign) {
    int64_t half = D / 2;
#pragma omp parallel for collapse(2) schedule(static) if (B * T * H * D >= KERNEL_PARALLEL_MIN_FLOATS)
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
#pragma omp parallel for schedule(static) if (rows * n >= KERNEL_PARALLEL_MIN_FLOATS)
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
