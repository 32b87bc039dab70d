#include "attention_cudnn_size.h"

#include "../common/checked.h"
#include "../common/util.h"

/* The next buffer of elems elements of es bytes at *off (256-aligned), *off
 * moved past it. */
static int64_t place(int64_t *off, int64_t elems, int64_t es, const char *what) {
    int64_t at = (*off + 255) / 256 * 256, bytes;
    KV_CHECK(at >= *off && i64_mul(elems, es, &bytes) == 0 && i64_add(at, bytes, off) == 0,
             "attention_cudnn: the scratch's %s overflows int64", what);
    return at;
}

/* a * b * c * d, checked */
static int64_t prod4(int64_t a, int64_t b, int64_t c, int64_t d, const char *what) {
    int64_t r;
    KV_CHECK(i64_mul(a, b, &r) == 0 && i64_mul(r, c, &r) == 0 && i64_mul(r, d, &r) == 0,
             "attention_cudnn: the scratch's %s overflows int64", what);
    return r;
}

AttnCudnnScratch attention_cudnn_scratch_layout(const RefreshMask *m, int64_t B, int64_t T, int64_t Hq, int64_t Hkv,
                                                int64_t D) {
    KV_CHECK(B > 0 && T > 0 && Hq > 0 && Hkv > 0 && D > 0,
             "attention_cudnn: bad shape B %lld T %lld Hq %lld Hkv %lld D %lld", (long long)B, (long long)T,
             (long long)Hq, (long long)Hkv, (long long)D);
    const int active = m && refresh_active(m, T);
    const int64_t L = active ? m->L : T, S = active ? T - m->L : 0, n = active ? refresh_num_selected(m) + S : 0;
    const int64_t rows = L > S ? L : S, bf = 2, f32 = (int64_t)sizeof(float);
    AttnCudnnScratch s;
    int64_t off = 0;
    s.gq = place(&off, prod4(B, T, Hq, D, "dQ"), bf, "dQ");
    s.gk = place(&off, prod4(B, T, Hkv, D, "dK"), bf, "dK");
    s.gv = place(&off, prod4(B, T, Hkv, D, "dV"), bf, "dV");
    s.ssum = place(&off, prod4(B, Hq, rows, 1, "softmax sums"), f32, "softmax sums");
    s.dqacc = place(&off, prod4(B, Hq, rows, D, "dQ accumulator"), f32, "dQ accumulator");
    const int64_t list = prod4(B, Hkv, n, D, "key list");
    s.kg = place(&off, list, bf, "key list");
    s.vg = place(&off, list, bf, "value list");
    s.dkg = place(&off, list, bf, "key list's gradient");
    s.dvg = place(&off, list, bf, "value list's gradient");
    s.lse = place(&off, prod4(B, Hq, S, 1, "suffix lse"), f32, "suffix lse");
    s.bytes = (off + 255) / 256 * 256;
    return s;
}
