/* bf16 host conversions (kernels/bf16.h): round to nearest even, NaN and
 * infinity handling, exact round trip of every bf16 value. The GPU tests and
 * checkpoint code rely on these matching __float2bfloat16_rn. Stochastic
 * rounding (optim/adamw_math.h): only the two neighbours, unbiased,
 * representable values unchanged, bits a pure function of (seed, step,
 * index). */
#include <math.h>
#include <string.h>

#include "../../kernels/bf16.h"
#include "../../optim/adamw_math.h"
#include "../testlib.h"

static float from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static void check_bits(const char *name, uint32_t in, uint16_t want) {
    uint16_t got = bf16_bits_from_float(from_bits(in));
    tl_result(got == want, name, "0x%08x -> 0x%04x, want 0x%04x", in, got, want);
}

/* n draws of x's stochastic rounding (index i at step 7): the mean must be
 * x within 5 standard errors, every draw one of x's two bf16 neighbours. */
static void check_sr_unbiased(const char *name, float x) {
    const int64_t n = 200000;
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    float lo = from_bits(u & 0xffff0000u), hi = from_bits((u & 0xffff0000u) + 0x10000u); /* by magnitude */
    double sum = 0;
    int64_t outside = 0;
    for (int64_t i = 0; i < n; i++) {
        float y = adamw_round_bf16_sr(x, adamw_sr_bits(42, 7, i));
        outside += y != lo && y != hi;
        sum += y;
    }
    double p = ((double)x - lo) / ((double)hi - lo), se = fabs((double)hi - lo) * sqrt(p * (1 - p) / (double)n);
    double mean = sum / (double)n;
    tl_result(outside == 0 && fabs(mean - x) <= 5 * se + 1e-12, name,
              "x %.9g: mean %.9g (|d| %.3g, 5 se %.3g), %lld draws not a neighbour (%.9g, %.9g)", x, mean,
              fabs(mean - x), 5 * se, (long long)outside, lo, hi);
}

static void check_sr(void) {
    check_sr_unbiased("bf16 stochastic rounding: 1 + 0.3 step is unbiased", 1.0f + 0.3f * 0.0078125f);
    check_sr_unbiased("bf16 stochastic rounding: -0.1 (negative) is unbiased", -0.1f);
    check_sr_unbiased("bf16 stochastic rounding: 1e-3 + a hundredth of a step is unbiased",
                      1e-3f + 1e-3f * 0.0078125f * 0.01f);
    int64_t moved = 0;
    for (uint32_t b = 0; b < 65536u; b += 7) {
        float f = float_from_bf16_bits((uint16_t)b);
        if (isnan(f)) continue;
        for (int64_t i = 0; i < 16; i++) moved += adamw_round_bf16_sr(f, adamw_sr_bits(1, 1, i)) != f;
    }
    tl_result(moved == 0, "bf16 stochastic rounding leaves bf16 values unchanged", "%lld draws moved",
              (long long)moved);
    tl_result(isinf(adamw_round_bf16_sr(INFINITY, 0xffff)) && isnan(adamw_round_bf16_sr(NAN, 0xffff)),
              "bf16 stochastic rounding passes infinity and NaN", "");
    uint32_t a = adamw_sr_bits(5, 3, 1000), b = adamw_sr_bits(5, 3, 1000);
    int64_t same_step = 0, same_seed = 0;
    for (int64_t i = 0; i < 4096; i++) {
        same_step += adamw_sr_bits(5, 3, i) == adamw_sr_bits(5, 4, i);
        same_seed += adamw_sr_bits(5, 3, i) == adamw_sr_bits(6, 3, i);
    }
    /* two independent 16-bit draws agree with probability 2^-16: 4096 pairs give 0 or 1, rarely 2 */
    tl_result(a == b && a <= 0xffffu && same_step <= 3 && same_seed <= 3,
              "bf16 stochastic rounding bits: repeatable, 16 bits, new for each step and seed",
              "%u vs %u; equal across steps %lld, across seeds %lld of 4096", a, b, (long long)same_step,
              (long long)same_seed);
}

int main(void) {
    check_sr();
    check_bits("bf16 one", 0x3f800000u, 0x3f80);
    check_bits("bf16 below a tie rounds down", 0x3f807fffu, 0x3f80);
    check_bits("bf16 tie to even (down)", 0x3f808000u, 0x3f80);
    check_bits("bf16 tie to even (up)", 0x3f818000u, 0x3f82);
    check_bits("bf16 above a tie rounds up", 0x3f808001u, 0x3f81);
    check_bits("bf16 negative tie to even", 0xbf818000u, 0xbf82);
    check_bits("bf16 max float rounds to infinity", 0x7f7fffffu, 0x7f80);
    check_bits("bf16 infinity", 0x7f800000u, 0x7f80);
    check_bits("bf16 smallest subnormal rounds to zero", 0x00000001u, 0x0000);

    uint16_t nan_bits = bf16_bits_from_float(from_bits(0x7f800001u)); /* NaN whose payload sits in the low bits */
    tl_result(isnan(float_from_bf16_bits(nan_bits)), "bf16 NaN stays NaN", "got 0x%04x", nan_bits);

    int64_t bad = 0, first = -1;
    for (uint32_t b = 0; b < 65536u; b++) {
        float f = float_from_bf16_bits((uint16_t)b);
        if (isnan(f)) continue;
        if (bf16_bits_from_float(f) != b && bad++ == 0) first = b;
    }
    tl_result(bad == 0, "bf16 round trip of every non-NaN value", "%lld values changed, first 0x%04llx", (long long)bad,
              (long long)first);
    return tl_finish();
}
