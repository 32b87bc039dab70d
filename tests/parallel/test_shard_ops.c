/* The ZeRO-3 gradient ops' CPU oracles: the owner's rank-ordered shard
 * accumulation against the rank-major loop the host-staged reduction ran,
 * and the fixed-point clipping norm (optim/norm_fixed.h): the same bits
 * when the blocks are split over 1, 2, 3 or 4 simulated ranks (each with
 * its own segments, local buffer, max and 128-bit partial, the partials
 * added in several orders), within the stated bound of a __float128
 * reference, on zero, NaN, inf, denormal-heavy and huge gradients, and
 * with the blocks cut where the segments say. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "../../common/rng.h"
#include "../../common/util.h"
#include "../../kernels/shard_accumulate.h"
#include "../../optim/norm_fixed.h"
#include "../../optim/norm_fixed_math.h"
#include "../testlib.h"

static uint64_t bits_of(double x) {
    uint64_t u;
    memcpy(&u, &x, 8);
    return u;
}

/* ---- shard accumulation ---- */

/* Values whose magnitudes vary over 2^20, so the order of fp32 adds shows. */
static float spread_value(Rng *r) { return ldexpf(rng_normal(r), (int)(rng_uniform(r) * 20.0f) - 10); }

static void test_accumulate(int world, int64_t n) {
    Rng r;
    rng_seed(&r, (uint64_t)(world * 1000 + n));
    float *acc = xmalloc(sizeof(float) * (size_t)(n + 1)), *ref = xmalloc(sizeof(float) * (size_t)(n + 1));
    float *rev = xmalloc(sizeof(float) * (size_t)(n + 1));
    float *parts = xmalloc(sizeof(float) * (size_t)(world * n + 1));
    for (int64_t i = 0; i < n; i++) acc[i] = spread_value(&r);
    for (int64_t i = 0; i < world * n; i++) parts[i] = spread_value(&r);
    memcpy(ref, acc, sizeof(float) * (size_t)n);
    memcpy(rev, acc, sizeof(float) * (size_t)n);
    /* the loop parallel/fsdp.c ran before: rank by rank over the whole piece */
    for (int w = 0; w < world; w++)
        for (int64_t i = 0; i < n; i++) ref[i] += parts[(int64_t)w * n + i];
    for (int w = world - 1; w >= 0; w--)
        for (int64_t i = 0; i < n; i++) rev[i] += parts[(int64_t)w * n + i];
    double *exact = xmalloc(sizeof(double) * (size_t)(n + 1));
    for (int64_t i = 0; i < n; i++) {
        exact[i] = acc[i];
        for (int w = 0; w < world; w++) exact[i] += parts[(int64_t)w * n + i];
    }
    shard_accumulate_cpu(acc, parts, n, world);
    char name[160];
    snprintf(name, sizeof name, "accumulate world %d, n %lld: bit-identical to the rank-major loop", world,
             (long long)n);
    tl_identical(name, acc, ref, n);
    /* and close to the double sum: a wrong piece or stride would be far off */
    int64_t far = 0;
    for (int64_t i = 0; i < n; i++) {
        double mag = fabs((double)ref[i] - exact[i]), lim = 0;
        for (int w = 0; w < world; w++) lim += fabs(parts[(int64_t)w * n + i]);
        far += mag > (lim + fabs((double)ref[i])) * (double)world * 1.2e-7;
    }
    snprintf(name, sizeof name, "accumulate world %d, n %lld: within fp32 rounding of the double sum", world,
             (long long)n);
    tl_result(far == 0, name, "%lld elements off", (long long)far);
    if (world >= 2 && n >= 100) { /* the data can tell the order apart */
        int64_t differ = 0;
        for (int64_t i = 0; i < n; i++) differ += memcmp(&rev[i], &ref[i], 4) != 0;
        snprintf(name, sizeof name, "accumulate world %d: reversed rank order gives other bits (%lld elements)", world,
                 (long long)differ);
        tl_result(differ > 0, name, "reversing the order changed nothing: the test could not see it");
    }
    free(acc), free(ref), free(rev), free(parts), free(exact);
}

/* ---- the fixed-point norm ---- */

#define NT 8
static const int64_t tensor_numel[NT] = {300, 70001, 4097, 1, 256, 131077, 513, 9000};

typedef struct {
    float *g;        /* the flat gradient */
    int64_t total;   /* elements */
    int64_t off[NT]; /* tensor offsets */
    int64_t nblocks; /* over all tensors */
} Grad;

static void grad_init(Grad *G) {
    G->total = 0, G->nblocks = 0;
    for (int t = 0; t < NT; t++) {
        G->off[t] = G->total;
        G->total += tensor_numel[t];
        G->nblocks += (tensor_numel[t] + SHARD_ALIGN - 1) / SHARD_ALIGN;
    }
    G->g = xcalloc((size_t)G->total, sizeof(float));
}

/* Rank r of world gets the global blocks [NB r / W, NB (r + 1) / W): its
 * segments (pieces of tensors, cut on blocks from each tensor's start, as
 * ShardPlan cuts) and a local buffer holding them end to end. */
static int rank_segments(const Grad *G, int world, int rank, ShardSegment *segs, float *local) {
    int64_t b0 = G->nblocks * rank / world, b1 = G->nblocks * (rank + 1) / world, first = 0, at = 0;
    int nseg = 0;
    for (int t = 0; t < NT; t++) {
        int64_t nb = (tensor_numel[t] + SHARD_ALIGN - 1) / SHARD_ALIGN;
        int64_t lo = b0 > first ? b0 : first, hi = b1 < first + nb ? b1 : first + nb;
        if (lo < hi) {
            int64_t e0 = (lo - first) * SHARD_ALIGN, e1 = (hi - first) * SHARD_ALIGN;
            if (e1 > tensor_numel[t]) e1 = tensor_numel[t];
            segs[nseg] = (ShardSegment){at, G->off[t] + e0, e1 - e0, tensor_numel[t], t};
            memcpy(local + at, G->g + G->off[t] + e0, sizeof(float) * (size_t)(e1 - e0));
            at += e1 - e0;
            nseg++;
        }
        first += nb;
    }
    return nseg;
}

typedef struct {
    Fixed128 sum;
    double value, max;
    int E;
    double naive; /* per-rank double sums added in rank order: what a float reduction would give */
} NormResult;

/* One sharded norm over world simulated ranks; order 0 adds the partials
 * in rank order, 1 in reverse, 2 from the middle out. */
static NormResult sharded_norm(const Grad *G, int world, int order) {
    ShardSegment segs[NT];
    float *local[4];
    double *blocks[4], maxr[4];
    int nseg[4];
    int64_t count[4];
    NormResult res = {{0, 0}, 0, 0, 0, 0};
    for (int r = 0; r < world; r++) {
        local[r] = xmalloc(sizeof(float) * (size_t)G->total);
        nseg[r] = rank_segments(G, world, r, segs, local[r]);
        count[r] = shard_norm_block_count(segs, nseg[r]);
        KV_CHECK(count[r] == G->nblocks * (r + 1) / world - G->nblocks * r / world, "rank %d: %lld blocks", r,
                 (long long)count[r]);
        blocks[r] = xmalloc(sizeof(double) * (size_t)(count[r] + 1));
        maxr[r] = shard_block_sums_cpu(blocks[r], local[r], segs, nseg[r]);
        if (maxr[r] > res.max) res.max = maxr[r]; /* all finite here */
    }
    if (res.max > 0) {
        res.E = norm_fixed_exponent(res.max);
        Fixed128 part[4];
        for (int r = 0; r < world; r++) {
            part[r] = shard_fixed_sum_cpu(blocks[r], count[r], res.E);
            double s = 0;
            for (int64_t b = 0; b < count[r]; b++) s += blocks[r][b];
            res.naive += s;
        }
        for (int i = 0; i < world; i++) {
            int r = order == 0 ? i : order == 1 ? world - 1 - i : (world / 2 + i) % world;
            res.sum = fixed128_add(res.sum, part[r]);
        }
        res.value = fixed128_to_double(res.sum, res.E);
    }
    for (int r = 0; r < world; r++) free(local[r]), free(blocks[r]);
    return res;
}

/* The exact real sum of the block sums (1 rank), in __float128: 113 bits,
 * so its own rounding (< nblocks 2^-113 relative) is far below the bound. */
static __float128 reference_sum(const Grad *G) {
    ShardSegment segs[NT];
    float *local = xmalloc(sizeof(float) * (size_t)G->total);
    int nseg = rank_segments(G, 1, 0, segs, local);
    double *blocks = xmalloc(sizeof(double) * (size_t)G->nblocks);
    shard_block_sums_cpu(blocks, local, segs, nseg);
    __float128 s = 0;
    for (int64_t b = 0; b < G->nblocks; b++) s += (__float128)blocks[b];
    free(local), free(blocks);
    return s;
}

static void check_rank_invariance(const Grad *G, const char *label) {
    NormResult one = sharded_norm(G, 1, 0);
    int same = 1;
    char why[256] = "";
    double naive_spread = 0;
    for (int world = 2; world <= 4; world++)
        for (int order = 0; order < 3; order++) {
            NormResult w = sharded_norm(G, world, order);
            if (w.sum.hi != one.sum.hi || w.sum.lo != one.sum.lo || bits_of(w.value) != bits_of(one.value) ||
                w.E != one.E) {
                same = 0;
                snprintf(why, sizeof why, "world %d order %d: %016llx%016llx (%.17g) vs 1 rank %016llx%016llx (%.17g)",
                         world, order, (unsigned long long)w.sum.hi, (unsigned long long)w.sum.lo, w.value,
                         (unsigned long long)one.sum.hi, (unsigned long long)one.sum.lo, one.value);
            }
            if (fabs(w.naive - one.naive) > naive_spread) naive_spread = fabs(w.naive - one.naive);
        }
    printf("# %s: sum %.17g (E %d); naive per-rank double sums differ from 1 rank's by up to %.3g\n", label, one.value,
           one.E, naive_spread);
    char name[200];
    snprintf(name, sizeof name, "%s: 1, 2, 3, 4 ranks, partials in 3 orders: identical bits", label);
    tl_result(same, name, "%s", why);

    /* within the header's bound of the exact sum: the Fixed128 is below it
     * by less than nblocks units, the double adds half an ulp */
    __float128 R = reference_sum(G);
    __float128 unit = (__float128)ldexp(1.0, one.E - NORM_FIXED_BITS);
    __float128 S = ((__float128)one.sum.hi * (__float128)18446744073709551616.0 + (__float128)one.sum.lo) * unit;
    __float128 slack = R * (__float128)ldexp(1.0, -105);
    int fixed_ok = R - S >= -slack && R - S < (__float128)G->nblocks * unit + slack;
    double rel = (double)(((__float128)one.value - R) / R), rel_fixed = (double)((R - S) / R);
    double bound = (double)G->nblocks * ldexp(1.0, one.E - NORM_FIXED_BITS) / one.max + ldexp(1.0, -53);
    printf("# %s: relative error fixed %.3g, double %.3g, bound %.3g\n", label, rel_fixed, rel, bound);
    snprintf(name, sizeof name, "%s: the 128-bit sum is below the exact sum by less than nblocks units", label);
    tl_result(fixed_ok, name, "exact - fixed = %.6g units, nblocks %lld", (double)((R - S) / unit),
              (long long)G->nblocks);
    snprintf(name, sizeof name, "%s: the double within nblocks 2^(E-100) / M + 2^-53 relative (<= 2^-72 + 2^-53)",
             label);
    tl_result(fabs(rel) <= bound && bound <= ldexp(1.0, -72) + ldexp(1.0, -53), name, "relative error %.3g, bound %.3g",
              rel, bound);
}

static void fill(Grad *G, int kind, uint64_t seed) {
    Rng r;
    rng_seed(&r, seed);
    for (int64_t i = 0; i < G->total; i++) {
        float x = rng_normal(&r);
        switch (kind) {
            case 0: G->g[i] = 0.03f * x; break;                                              /* typical */
            case 1: G->g[i] = ldexpf(x, (int)(rng_uniform(&r) * 60.0f) - 40); break;         /* 2^-40 .. 2^20 */
            case 2: G->g[i] = rng_uniform(&r) < 0.9f ? 1e-41f * x : 1e-38f * x; break;       /* fp32 denormals */
            case 3: G->g[i] = i < G->off[2] ? 1e30f * x : 1e-20f * x; break;                 /* huge and tiny */
            default: G->g[i] = i == G->off[5] + 1000 ? 3.0f : 0.0f; break;                   /* one nonzero */
        }
    }
}

static void test_fixed_sums(void) {
    Grad G;
    grad_init(&G);
    static const char *labels[] = {"typical gradient", "magnitudes 2^-40..2^20", "denormal-heavy gradient",
                                   "huge (1e30) and tiny gradient", "a single nonzero"};
    for (int kind = 0; kind < 5; kind++) {
        fill(&G, kind, 100 + (uint64_t)kind);
        check_rank_invariance(&G, labels[kind]);
    }
    /* a single 3: its square 9 is the whole sum, exactly */
    NormResult one = sharded_norm(&G, 3, 1);
    tl_result(one.value == 9.0, "a single nonzero 3: the sum is exactly 9 on 3 ranks", "got %.17g", one.value);
    memset(G.g, 0, sizeof(float) * (size_t)G.total);
    NormResult z = sharded_norm(&G, 1, 0);
    tl_result(z.max == 0.0 && bits_of(z.max) == 0, "an all-zero gradient: the max block sum is +0 (the sum is 0)",
              "max %g", z.max);
    free(G.g);
}

/* ---- non-finite gradients ---- */

static double max_of(const float *g, int64_t n) {
    ShardSegment s = {0, 0, n, n, 0};
    double *blocks = xmalloc(sizeof(double) * (size_t)(shard_norm_block_count(&s, 1) + 1));
    double m = shard_block_sums_cpu(blocks, g, &s, 1);
    free(blocks);
    return m;
}

static void test_nonfinite(void) {
    enum { N = 2000 };
    float g[N];
    for (int i = 0; i < N; i++) g[i] = 0.5f;
    g[1500] = -INFINITY;
    double m = max_of(g, N);
    tl_result(bits_of(m) == 0x7ff0000000000000ull, "a -inf gradient: the max block sum is +inf", "got %g", m);
    g[100] = -NAN;
    m = max_of(g, N);
    tl_result(bits_of(m) == 0x7ff8000000000000ull, "a negative NaN beside an inf: the max is the positive quiet NaN",
              "got bits %016llx", (unsigned long long)bits_of(m));
    g[1500] = 0.5f;
    g[100] = NAN;
    m = max_of(g, N);
    tl_result(bits_of(m) == 0x7ff8000000000000ull, "a NaN gradient: the max is the positive quiet NaN",
              "got bits %016llx", (unsigned long long)bits_of(m));
    /* ranks agree on the max through the keys' integer max: a NaN on one
     * rank wins over another's inf, in any order (fmax would drop it) */
    double rank_max[4] = {1e300, NAN, INFINITY, 0.0};
    uint64_t fwd = 0, rev = 0;
    for (int r = 0; r < 4; r++) {
        uint64_t kf = nf_max_key(rank_max[r]), kr = nf_max_key(rank_max[3 - r]);
        fwd = kf > fwd ? kf : fwd, rev = kr > rev ? kr : rev;
    }
    tl_result(fwd == rev && bits_of(nf_key_value(fwd)) == 0x7ff8000000000000ull && !isnan(fmax(NAN, 1e300)),
              "ranks' maxima combined as keys: NaN beats inf and finite in any order", "key %016llx",
              (unsigned long long)fwd);
    rank_max[1] = 5.0;
    fwd = 0;
    for (int r = 0; r < 4; r++) fwd = nf_max_key(rank_max[r]) > fwd ? nf_max_key(rank_max[r]) : fwd;
    tl_result(nf_key_value(fwd) == INFINITY, "ranks' maxima combined as keys: inf beats finite", "");
    rank_max[2] = 7.0;
    fwd = 0;
    for (int r = 0; r < 4; r++) fwd = nf_max_key(rank_max[r]) > fwd ? nf_max_key(rank_max[r]) : fwd;
    tl_result(nf_key_value(fwd) == 1e300, "ranks' maxima combined as keys: the largest finite one", "");
    g[100] = 3e38f; /* finite, its square is not a float but is a double */
    m = max_of(g, N);
    tl_result(isfinite(m) && m > 8.9e76, "a 3e38 gradient: the block sum is finite in double", "got %g", m);
}

/* ---- block boundaries ---- */

static void test_block_boundaries(void) {
    enum { N = 1100 };
    float g[N];
    Rng r;
    rng_seed(&r, 5);
    for (int i = 0; i < N; i++) g[i] = rng_normal(&r);
    /* 300 = 256 + 44, 256, 1, 513 = 256 + 256 + 1, at local offsets 0, 300, 556, 557 */
    ShardSegment segs[4] = {
        {0, 5000, 300, 300, 0}, {300, 9000, 256, 512, 1}, {556, 0, 1, 1, 2}, {557, 700, 513, 2000, 3}};
    static const int64_t begin[7] = {0, 256, 300, 556, 557, 813, 1069}, end[7] = {256, 300, 556, 557, 813, 1069, 1070};
    int64_t nb = shard_norm_block_count(segs, 4);
    tl_result(nb == 7, "blocks: segments of 300, 256, 1, 513 elements are 2 + 1 + 1 + 3 blocks", "got %lld",
              (long long)nb);
    tl_result(shard_norm_block_count(segs, 1) == 2, "blocks: a 300-element segment is 2 blocks", "");
    double blocks[8], want[7], mx = 0;
    for (int b = 0; b < 7; b++) {
        double acc = 0;
        for (int64_t i = begin[b]; i < end[b]; i++) acc += (double)g[i] * (double)g[i];
        want[b] = acc;
        if (acc > mx) mx = acc;
    }
    double m = shard_block_sums_cpu(blocks, g, segs, 4);
    int same = m == mx;
    for (int b = 0; b < 7; b++) same &= bits_of(blocks[b]) == bits_of(want[b]);
    tl_result(same, "blocks: each sum covers exactly its block, in element order; the max is the largest", "");
}

/* ---- 128-bit arithmetic ---- */

static void die_overflow(void *arg) { fixed128_add((Fixed128){UINT64_MAX, UINT64_MAX}, (Fixed128){0, 1}); }
static void die_big_block(void *arg) {
    double b[4] = {1, 2, 3, 8};
    shard_fixed_sum_cpu(b, 4, 3); /* 8 is not below 2^3 */
}
static void die_nan_block(void *arg) {
    double b[3] = {1, NAN, 3};
    shard_fixed_sum_cpu(b, 3, 3);
}
static void die_zero_max(void *arg) { norm_fixed_exponent(0.0); }

static void test_fixed128(void) {
    Fixed128 s = fixed128_add((Fixed128){0, UINT64_MAX}, (Fixed128){0, 1});
    tl_result(s.hi == 1 && s.lo == 0, "fixed128_add carries out of the low word", "got %llx %llx",
              (unsigned long long)s.hi, (unsigned long long)s.lo);
    tl_result(fixed128_to_double((Fixed128){0, 1}, 100) == 1.0 && fixed128_to_double((Fixed128){0, 3}, 99) == 1.5 &&
                  fixed128_to_double((Fixed128){1, 0}, 100) == 0x1p64,
              "fixed128_to_double scales by 2^(E - 100)", "");
    /* 2^64 + 2^11 is half an ulp above 2^64: ties to even; one more and it rounds up */
    double tie = fixed128_to_double((Fixed128){1, 2048}, 100), up = fixed128_to_double((Fixed128){1, 2049}, 100);
    tl_result(tie == 0x1p64 && up == 0x1p64 + 0x1p12, "fixed128_to_double rounds once: a tie to even, sticky bits up",
              "tie %.17g up %.17g", tie, up);
    double top = fixed128_to_double((Fixed128){0x4000000000000000ull, 1}, 100);
    tl_result(top == 0x1p126, "fixed128_to_double: 2^126 + 1 is 2^126", "got %.17g", top);
    /* a block of 2^E - ulp quantizes to just below 2^100 */
    double b = nextafter(8.0, 0.0);
    Fixed128 q = shard_fixed_sum_cpu(&b, 1, 3);
    tl_result(q.hi == (1ull << 36) - 1 && q.lo == ~0ull - ((1ull << 47) - 1),
              "the largest block below 2^E is floor(b 2^(100 - E)) exactly", "got %llx %016llx",
              (unsigned long long)q.hi, (unsigned long long)q.lo);
    tl_result(norm_fixed_exponent(1.0) == 1 && norm_fixed_exponent(0.75) == 0 && norm_fixed_exponent(1e-80) == -265,
              "norm_fixed_exponent: the E with M < 2^E", "E(1) %d E(0.75) %d E(1e-80) %d", norm_fixed_exponent(1.0),
              norm_fixed_exponent(0.75), norm_fixed_exponent(1e-80));
    tl_expect_death("fixed128_add dies on overflow", die_overflow, NULL, "overflows 128 bits");
    tl_expect_death("shard_fixed_sum_cpu dies naming a block not below 2^E", die_big_block, NULL, "block 3");
    tl_expect_death("shard_fixed_sum_cpu dies naming a NaN block", die_nan_block, NULL, "block 1");
    tl_expect_death("norm_fixed_exponent dies on a zero max", die_zero_max, NULL, "not finite and positive");
}

int main(void) {
    for (int world = 1; world <= 4; world++) test_accumulate(world, 1000 + world);
    test_accumulate(3, 0);
    test_fixed128();
    test_block_boundaries();
    test_nonfinite();
    test_fixed_sums();
    return tl_finish();
}
