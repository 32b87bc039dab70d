/* bf16 host conversions (kernels/bf16.h): round to nearest even, NaN and
 * infinity handling, exact round trip of every bf16 value. The GPU tests and
 * checkpoint code rely on these matching __float2bfloat16_rn. */
#include <math.h>
#include <string.h>

#include "../kernels/bf16.h"
#include "testlib.h"

static float from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static void check_bits(const char *name, uint32_t in, uint16_t want) {
    uint16_t got = bf16_bits_from_float(from_bits(in));
    tl_result(got == want, name, "0x%08x -> 0x%04x, want 0x%04x", in, got, want);
}

int main(void) {
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
