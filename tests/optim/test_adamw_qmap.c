/* The dynamic quantization maps: shape and values of bitsandbytes'
 * create_dynamic_map(signed=True/False), and nearest-code quantization. */
#include <math.h>
#include <string.h>

#include "../../common/rng.h"
#include "../../optim/adamw_math.h"
#include "../../optim/qmap.h"
#include "../testlib.h"

static int ascending(const QuantMap *q) {
    for (int i = 1; i < QMAP_CODES; i++)
        if (!(q->code[i - 1] < q->code[i])) return 0;
    return 1;
}

/* codes with magnitude in (0.1 s, s) for decade s = 10^(i-6) */
static int count_in_decade(const QuantMap *q, int i, int sign) {
    double s = pow(10.0, i - 6), n = 0;
    for (int k = 0; k < QMAP_CODES; k++) {
        double c = sign * (double)q->code[k];
        if (c > 0.1 * s && c < s) n++;
    }
    return (int)n;
}

static int close_rel(float a, double b) { return fabs(a - b) <= 1e-6 * fabs(b); }

static void check_signed(const QuantMap *q) {
    tl_result(ascending(q), "signed map: 256 strictly ascending codes", "");
    tl_result(q->code[255] == 1.0f && q->zero_index == 127 && q->code[127] == 0.0f, "signed map: 1 at 255, 0 at 127",
              "code[255]=%g zero_index=%d", q->code[255], q->zero_index);
    int mirrored = 1;
    for (int k = 0; k < 127; k++) mirrored &= q->code[k] == -q->code[254 - k];
    tl_result(mirrored, "signed map: negatives mirror the positives below 1", "");
    /* hand-derived from the construction (docs/optim.md): the last decade's
     * midpoints of linspace(0.1, 1, 65) end at 1 - 0.9/128; the first
     * decade's single midpoint is 0.55e-6 */
    tl_result(close_rel(q->code[0], -0.99296875) && close_rel(q->code[254], 0.99296875) &&
                  close_rel(q->code[128], 0.55e-6) && close_rel(q->code[126], -0.55e-6),
              "signed map: end and innermost codes", "code[0]=%.9g code[254]=%.9g code[128]=%.9g", q->code[0],
              q->code[254], q->code[128]);
    int per_decade = 1;
    for (int i = 0; i < 7; i++)
        per_decade &= count_in_decade(q, i, 1) == (1 << i) && count_in_decade(q, i, -1) == (1 << i);
    tl_result(per_decade, "signed map: 2^i codes of each sign in decade 10^(i-6)", "");
}

static void check_unsigned(const QuantMap *q) {
    tl_result(ascending(q), "unsigned map: 256 strictly ascending codes", "");
    tl_result(q->code[0] == 0.0f && q->zero_index == 0 && q->code[255] == 1.0f, "unsigned map: 0 at 0, 1 at 255",
              "code[0]=%g code[255]=%g", q->code[0], q->code[255]);
    tl_result(close_rel(q->code[1], 0.325e-6) && close_rel(q->code[2], 0.775e-6) &&
                  close_rel(q->code[254], 0.996484375),
              "unsigned map: innermost and end codes", "code[1]=%.9g code[2]=%.9g code[254]=%.9g", q->code[1],
              q->code[2], q->code[254]);
    int per_decade = 1;
    for (int i = 0; i < 7; i++) per_decade &= count_in_decade(q, i, 1) == (2 << i);
    tl_result(per_decade, "unsigned map: 2^(i+1) codes in decade 10^(i-6)", "");
}

static void check_quantize(const QuantMap *q, const char *name, int is_signed) {
    char label[96];
    int self = 1;
    for (int k = 0; k < QMAP_CODES; k++) self &= adamw_quantize(q->mid, q->code[k]) == k;
    snprintf(label, sizeof label, "%s map: every code quantizes to itself", name);
    tl_result(self, label, "");

    Rng r;
    rng_seed(&r, 7);
    int64_t worse = 0;
    float worst_x = 0;
    for (int t = 0; t < 200000; t++) {
        /* log-uniform magnitudes so every decade is exercised */
        float x = (float)pow(10.0, -7.5 + 7.5 * rng_uniform(&r));
        if (is_signed && (rng_u64(&r) & 1)) x = -x;
        int c = adamw_quantize(q->mid, x);
        double best = INFINITY;
        for (int k = 0; k < QMAP_CODES; k++) best = fmin(best, fabs((double)x - q->code[k]));
        /* float midpoints may misplace a value within one ulp of a midpoint */
        if (fabs((double)x - q->code[c]) > best + 1e-7 * fabs(x)) worse++, worst_x = x;
    }
    snprintf(label, sizeof label, "%s map: quantize picks the nearest code (200k values)", name);
    tl_result(worse == 0, label, "%lld values not nearest, e.g. %.9g", (long long)worse, worst_x);

    snprintf(label, sizeof label, "%s map: out of range clamps to the end codes", name);
    tl_result(adamw_quantize(q->mid, 2.0f) == 255 && adamw_quantize(q->mid, -2.0f) == 0, label, "");
}

int main(void) {
    QuantMap s, u;
    qmap_build(&s, 1);
    qmap_build(&u, 0);
    check_signed(&s);
    check_unsigned(&u);
    check_quantize(&s, "signed", 1);
    check_quantize(&u, "unsigned", 0);
    tl_result(adamw_quantize(s.mid, -1.0f) == 0, "signed map: -1 goes to the most negative code (-0.99296875)", "");
    for (int k = 0; k < QMAP_CODES; k += 51)
        printf("# signed code[%3d] = %.9g   unsigned code[%3d] = %.9g\n", k, s.code[k], k, u.code[k]);
    return tl_finish();
}
