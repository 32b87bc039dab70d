/* The ZeRO-3 device ops against their CPU oracles, bit for bit: the
 * owner's rank-ordered shard accumulation (world 1..4, sizes that are not
 * multiples of a block), the fixed-point norm's two passes (block sums and
 * max, then the 128-bit sum), and the optimizer's check alone
 * (optim_cuda_check): it names a planted inf or NaN, passes a good
 * gradient, prints nothing, and leaves the optimizer states untouched.
 * Skips without a GPU. */
#include <math.h>
#include <string.h>
#include <unistd.h>

#include "../../common/rng.h"
#include "../../common/util.h"
#include "../../optim/norm_fixed.h"
#include "../../optim/optimizer.h"
#include "../testlib.h"
#ifdef KVCPT_CUDA
#include "../../kernels/cuda_device.h"
#include "../../kernels/shard_accumulate.h"
#include "../../optim/optim_cuda.h"
#include "gpu_testlib.h"

static uint64_t bits_of(double x) {
    uint64_t u;
    memcpy(&u, &x, 8);
    return u;
}

static void test_accumulate(int world, int64_t n) {
    Rng r;
    rng_seed(&r, (uint64_t)(world * 77 + n));
    float *acc = xmalloc(sizeof(float) * (size_t)(n + 1)), *parts = xmalloc(sizeof(float) * (size_t)(world * n + 1));
    for (int64_t i = 0; i < n; i++) acc[i] = ldexpf(rng_normal(&r), (int)(rng_uniform(&r) * 20.0f) - 10);
    for (int64_t i = 0; i < world * n; i++) parts[i] = ldexpf(rng_normal(&r), (int)(rng_uniform(&r) * 20.0f) - 10);
    float *d_acc = dev_upload(acc, sizeof(float) * (size_t)(n + 1));
    float *d_parts = dev_upload(parts, sizeof(float) * (size_t)(world * n + 1));
    shard_accumulate_cpu(acc, parts, n, world);
    shard_accumulate_cuda(d_acc, d_parts, n, world);
    float *got = download(d_acc, n);
    char name[160];
    snprintf(name, sizeof name, "shard_accumulate_cuda world %d, n %lld: bit-identical to the CPU", world,
             (long long)n);
    tl_identical(name, got, acc, n);
    cuda_free(d_acc), cuda_free(d_parts);
    free(acc), free(parts), free(got);
}

/* Segments at scattered local offsets: partial last blocks, a 1-element
 * segment, one of exactly a block, and more blocks than a thread block. */
#define NSEG 5
static const ShardSegment segs[NSEG] = {{7, 0, 300, 300, 0},
                                        {400, 300, 256 * 300 + 17, 256 * 300 + 17, 1},
                                        {400 + 256 * 300 + 17, 0, 1, 1, 2},
                                        {400 + 256 * 300 + 18 + 5, 0, 256, 1024, 3},
                                        {400 + 256 * 300 + 18 + 5 + 256, 9, 1000, 2000, 4}};
#define LOCAL_N (400 + 256 * 300 + 18 + 5 + 256 + 1000)

/* Pass 1 on both, compared; returns the max (the CPU's) and leaves the
 * CPU blocks in blocks_out (nb of them) and the device blocks in *d_out. */
static double compare_block_sums(const float *g, const char *label, double *blocks_out, double **d_out, int64_t *nb) {
    *nb = shard_norm_block_count(segs, NSEG);
    float *dg = dev_upload(g, sizeof(float) * LOCAL_N);
    double *d_blocks = cuda_malloc(sizeof(double) * (size_t)(*nb + 1));
    double m_cpu = shard_block_sums_cpu(blocks_out, g, segs, NSEG);
    double m_gpu = shard_block_sums_cuda(d_blocks, dg, segs, NSEG);
    double *got = xmalloc(sizeof(double) * (size_t)(*nb + 1));
    cuda_memcpy_d2h(got, d_blocks, sizeof(double) * (size_t)*nb);
    int64_t differ = 0, first = -1;
    for (int64_t b = 0; b < *nb; b++)
        if (bits_of(got[b]) != bits_of(blocks_out[b])) differ++, first = first < 0 ? b : first;
    char name[200];
    snprintf(name, sizeof name, "%s: shard_block_sums_cuda's %lld blocks and max equal the CPU's bit for bit", label,
             (long long)*nb);
    tl_result(differ == 0 && bits_of(m_cpu) == bits_of(m_gpu), name,
              "%lld blocks differ (first %lld: %.17g vs %.17g); max %.17g vs %.17g", (long long)differ,
              (long long)first, first >= 0 ? got[first] : 0.0, first >= 0 ? blocks_out[first] : 0.0, m_gpu, m_cpu);
    cuda_free(dg);
    free(got);
    *d_out = d_blocks;
    return m_cpu;
}

static void test_norm(void) {
    float *g = xcalloc(LOCAL_N, sizeof(float));
    Rng r;
    rng_seed(&r, 42);
    /* magnitudes 2^-40 .. 2^20: the order of each block's adds shows in its bits */
    for (int64_t i = 0; i < LOCAL_N; i++) g[i] = ldexpf(rng_normal(&r), (int)(rng_uniform(&r) * 60.0f) - 40);
    int64_t nb;
    double *blocks = xmalloc(sizeof(double) * 400), *d_blocks;
    double m = compare_block_sums(g, "spread gradient", blocks, &d_blocks, &nb);
    int E = norm_fixed_exponent(m);
    Fixed128 c = shard_fixed_sum_cpu(blocks, nb, E), d = shard_fixed_sum_cuda(d_blocks, nb, E);
    tl_result(c.hi == d.hi && c.lo == d.lo, "shard_fixed_sum_cuda equals the CPU's 128-bit sum",
              "%016llx%016llx vs %016llx%016llx", (unsigned long long)d.hi, (unsigned long long)d.lo,
              (unsigned long long)c.hi, (unsigned long long)c.lo);
    /* sub-ranges, as ranks would hold them: the partials add to the whole */
    Fixed128 parts = fixed128_add(
        shard_fixed_sum_cuda(d_blocks, 100, E),
        fixed128_add(shard_fixed_sum_cuda(d_blocks + 100, 1, E), shard_fixed_sum_cuda(d_blocks + 101, nb - 101, E)));
    tl_result(parts.hi == c.hi && parts.lo == c.lo, "shard_fixed_sum_cuda over 3 ranges adds to the whole", "");
    Fixed128 z = shard_fixed_sum_cuda(d_blocks, 0, E);
    tl_result(z.hi == 0 && z.lo == 0, "shard_fixed_sum_cuda of no blocks is 0", "");
    /* a larger E (another rank's max): the same on both */
    c = shard_fixed_sum_cpu(blocks, nb, E + 30), d = shard_fixed_sum_cuda(d_blocks, nb, E + 30);
    tl_result(c.hi == d.hi && c.lo == d.lo, "shard_fixed_sum_cuda equals the CPU's with a larger E", "");
    cuda_free(d_blocks);

    /* non-finite: the max is +inf, then the positive quiet NaN */
    g[segs[1].local + 256 * 7 + 3] = -INFINITY;
    m = compare_block_sums(g, "an -inf gradient", blocks, &d_blocks, &nb);
    tl_result(bits_of(m) == 0x7ff0000000000000ull, "an -inf gradient: the max is +inf", "got %g", m);
    cuda_free(d_blocks);
    g[segs[4].local + 999] = -NAN;
    m = compare_block_sums(g, "a -NaN and an -inf gradient", blocks, &d_blocks, &nb);
    tl_result(bits_of(m) == 0x7ff8000000000000ull, "a -NaN gradient: the max is the positive quiet NaN", "bits %016llx",
              (unsigned long long)bits_of(m));
    cuda_free(d_blocks);
    memset(g, 0, sizeof(float) * LOCAL_N);
    m = compare_block_sums(g, "a zero gradient", blocks, &d_blocks, &nb);
    tl_result(bits_of(m) == 0, "a zero gradient: the max is +0", "got %g", m);
    cuda_free(d_blocks);
    free(g), free(blocks);
}

/* fn(arg) with stderr sent to a file; returns the bytes it wrote there. */
static long stderr_bytes_of(int (*fn)(void *), void *arg, int *rc) {
    char path[] = "/tmp/kvcpt_check_stderr_XXXXXX";
    int fd = mkstemp(path);
    KV_CHECK(fd >= 0, "mkstemp %s failed", path);
    fflush(stderr);
    int saved = dup(2);
    KV_CHECK(saved >= 0 && dup2(fd, 2) >= 0, "redirecting stderr to %s failed", path);
    *rc = fn(arg);
    fflush(stderr);
    KV_CHECK(dup2(saved, 2) >= 0, "restoring stderr failed");
    close(saved);
    long bytes = (long)lseek(fd, 0, SEEK_END);
    close(fd);
    unlink(path);
    return bytes;
}

#define ONSEG 3
static const int64_t ooff[ONSEG] = {0, 5000, 5000 + 4097 + 3};
static const int64_t onum[ONSEG] = {5000, 4097, 700};
#define OTOTAL (5000 + 4097 + 3 + 700)

typedef struct {
    OptimCuda *o;
    const void *dg;
    OptimDtype gd;
    AdamWHyper h;
} CheckArgs;

static int run_check(void *p) {
    CheckArgs *a = p;
    return optim_cuda_check(a->o, a->dg, a->gd, &a->h, 3);
}

static int same_states(const Optimizer *a, const Optimizer *b) {
    return memcmp(a->m_code, b->m_code, (size_t)a->n_code) == 0 &&
           memcmp(a->v_code, b->v_code, (size_t)a->n_code) == 0 &&
           memcmp(a->m_absmax, b->m_absmax, 4 * (size_t)a->n_absmax) == 0 &&
           memcmp(a->v_absmax, b->v_absmax, 4 * (size_t)a->n_absmax) == 0 &&
           memcmp(a->m32, b->m32, 4 * (size_t)a->n_f32) == 0 && memcmp(a->v32, b->v32, 4 * (size_t)a->n_f32) == 0;
}

static uint16_t to_bf16(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* NaN stays NaN */
    u += 0x7fff + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}

static void test_check(OptimKind kind, OptimDtype gd, const char *label) {
    Optimizer *cpu = optim_create(kind, ooff, onum, ONSEG), *before = optim_create(kind, ooff, onum, ONSEG),
              *after = optim_create(kind, ooff, onum, ONSEG);
    OptimCuda *o = optim_cuda_create(cpu);
    float *p = xmalloc(OTOTAL * 4), *g = xmalloc(OTOTAL * 4), *p_after = xmalloc(OTOTAL * 4);
    uint16_t *g16 = xmalloc(OTOTAL * 2);
    Rng r;
    rng_seed(&r, 9);
    for (int64_t i = 0; i < OTOTAL; i++) p[i] = 0.1f * rng_normal(&r), g[i] = 0.01f * rng_normal(&r);
    void *dp = dev_upload(p, OTOTAL * 4), *dg = cuda_malloc(OTOTAL * 4);
    AdamWHyper h = adamw_hyper_default();
    h.lr = 1e-3;
    /* two real steps first, so the states are not all zero */
    cuda_memcpy_h2d(dg, g, OTOTAL * 4);
    optim_cuda_step(o, dp, OPTIM_F32, dg, OPTIM_F32, &h, 1);
    optim_cuda_step(o, dp, OPTIM_F32, dg, OPTIM_F32, &h, 2);
    optim_cuda_download(o, before);
    float *p_before = download(dp, OTOTAL);
    CheckArgs a = {o, dg, gd, h};
    char name[200];
    static const struct {
        int seg;
        int64_t index;
        float value;
    } planted[3] = {{-1, 0, 0}, {1, 17, INFINITY}, {0, 300, NAN}};
    for (int k = 0; k < 3; k++) {
        for (int64_t i = 0; i < OTOTAL; i++) g[i] = 0.01f * rng_normal(&r);
        if (planted[k].seg >= 0) {
            g[ooff[planted[k].seg] + planted[k].index] = planted[k].value;
            g[ooff[2] + 600] = -INFINITY; /* a later one: the first is named */
        }
        if (gd == OPTIM_F32) cuda_memcpy_h2d(dg, g, OTOTAL * 4);
        else {
            for (int64_t i = 0; i < OTOTAL; i++) g16[i] = to_bf16(g[i]);
            cuda_memcpy_h2d(dg, g16, OTOTAL * 2);
        }
        int rc;
        long printed = stderr_bytes_of(run_check, &a, &rc);
        const OptimBadGrad *bad = optim_cuda_bad(o);
        if (planted[k].seg < 0) {
            snprintf(name, sizeof name, "%s: a good gradient passes the check (0), silently", label);
            tl_result(rc == 0 && printed == 0, name, "rc %d, %ld bytes on stderr", rc, printed);
        } else {
            snprintf(name, sizeof name, "%s: a planted %g at segment %d element %lld: 1, the element named, silently",
                     label, planted[k].value, planted[k].seg, (long long)planted[k].index);
            int value_ok = isnan(planted[k].value) ? isnan(bad->value) : bad->value == planted[k].value;
            tl_result(rc == 1 && bad->segment == planted[k].seg && bad->index == planted[k].index && value_ok &&
                          printed == 0,
                      name, "rc %d, named segment %d element %lld value %g, %ld bytes on stderr", rc, bad->segment,
                      (long long)bad->index, bad->value, printed);
        }
    }
    optim_cuda_download(o, after);
    cuda_memcpy_d2h(p_after, dp, OTOTAL * 4);
    snprintf(name, sizeof name, "%s: three checks left the optimizer states untouched", label);
    tl_result(same_states(before, after), name, "the states changed");
    snprintf(name, sizeof name, "%s: and the parameters", label);
    tl_identical(name, p_after, p_before, OTOTAL);
    cuda_free(dp), cuda_free(dg);
    free(p), free(g), free(p_after), free(p_before), free(g16);
    optim_cuda_free(o);
    optim_free(cpu), optim_free(before), optim_free(after);
}
#endif

int main(void) {
#ifdef KVCPT_CUDA
    if (cuda_device_count() == 0) {
        tl_skip("shard ops cuda", "no CUDA device visible");
        return tl_finish();
    }
    for (int world = 1; world <= 4; world++) test_accumulate(world, 1000 + 3 * world);
    test_accumulate(3, 256 * 40 + 1);
    test_accumulate(2, 0);
    test_norm();
    test_check(OPTIM_ADAMW8BIT, OPTIM_F32, "adamw8bit fp32 grads");
    test_check(OPTIM_ADAMW8BIT, OPTIM_BF16, "adamw8bit bf16 grads");
    test_check(OPTIM_ADAMW, OPTIM_F32, "adamw fp32 grads");
#else
    tl_skip("shard ops cuda", "the CUDA backend was not compiled");
#endif
    return tl_finish();
}
