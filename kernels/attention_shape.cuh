#ifndef KVCPT_ATTENTION_SHAPE_CUH
#define KVCPT_ATTENTION_SHAPE_CUH
/* The argument checks every CUDA attention entry makes (kernels/
 * attention.cu, attention_select.cu, attention_mma_fwd.cu,
 * attention_mma_bwd.cu): a bad shape or a missing selection stops the
 * program with a message naming the op.
 * Include after attention.h (inside its extern "C" block). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* d_ok: whether this family takes head dim D; d_rule says which it takes. */
static inline void attention_check_shape(const char *fn, int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t D,
                                         int d_ok, const char *d_rule) {
    const char *why = NULL;
    if (B < 0 || T < 0 || Hq <= 0 || Hkv <= 0) why = "B, T must be >= 0 and Hq, Hkv > 0";
    else if (Hq % Hkv != 0) why = "Hkv must divide Hq";
    else if (!d_ok) why = d_rule;
    else if (B * Hq > 65535) why = "B * Hq exceeds the grid's y dimension (65535)";
    else if (T > INT32_MAX) why = "T exceeds int32 positions";
    if (why) {
        fprintf(stderr, "kvcpt: %s: %s (B=%lld T=%lld Hq=%lld Hkv=%lld D=%lld)\n", fn, why, (long long)B, (long long)T,
                (long long)Hq, (long long)Hkv, (long long)D);
        exit(1);
    }
}

/* The fp32 gather family (kernels/attention.cu, attention_select.cu) takes
 * every head dim the rows of a thread tile divide. */
static inline void attention_check_gather_shape(const char *fn, int64_t B, int64_t T, int64_t Hq, int64_t Hkv,
                                                int64_t D) {
    attention_check_shape(fn, B, T, Hq, Hkv, D, D == 8 || D == 16 || D == 32 || D == 64 || D == 128,
                          "head dim D must be 8, 16, 32, 64 or 128");
}

/* With the mask active for T, sel must be given. */
static inline void attention_check_sel(const char *fn, const int32_t *sel, int64_t T, const RefreshMask *m) {
    if (refresh_active(m, T) && sel == NULL) {
        fprintf(stderr, "kvcpt: %s: the mask is active (T=%lld > L=%lld) but sel is NULL\n", fn, (long long)T,
                (long long)m->L);
        exit(1);
    }
}
#endif
