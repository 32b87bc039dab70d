/* The tensor-core primitives of kernels/mma.cuh (mma.sync m16n8k16 bf16 ->
 * fp32, ldmatrix x2/x4 with and without .trans, bf16x2 packing) through a
 * bf16 GEMM written with them (tests/gpu/mma_gemm.cu), on a GPU or under the
 * CUDA emulator, whose fragment layouts follow the PTX ISA.
 *
 * Reference: the fp64 sum of the same bf16 inputs' products. Tolerance per
 * element of C: |gpu - ref| <= K * 2^-23 * sum_k |a_mk b_kn|. The inputs are
 * exact in bf16 and every product of two bf16 values is exact in fp32 (16
 * significant bits), so the only error is the accumulation of K terms in
 * fp32: at most K additions, each off by less than 2^-23 of the running
 * magnitude even if the hardware truncates instead of rounding to nearest
 * (NVIDIA does not specify its internal accumulation bit for bit), and the
 * running magnitude never exceeds sum |a b|. A layout bug moves whole
 * products to other elements: errors of the order of the values themselves,
 * 10^5 times the tolerance at these sizes.
 *
 * Under the emulator, which states its accumulation (fp32 fmaf in k order,
 * from 0; tests/cuda_emu/emu_mma.cc), the result must also equal that model
 * bit for bit. Planted layout bugs (mma_gemm.h's MmaBug) must each put
 * elements outside the tolerance. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "../../common/rng.h"
#include "../../kernels/bf16.h"
#include "gpu_testlib.h"
#include "mma_gemm.h"

#ifdef KVCPT_CUDA
typedef struct {
    int M, N, K;
    MmaBLayout layout;
    uint16_t *A, *B;      /* host bf16 bits: A [M][K]; B [N][K] or [K][N] */
    uint16_t *dA, *dB;    /* device copies */
    double *ref, *absum;  /* [M][N]: fp64 sum of products, sum of |products| */
    float *model;         /* [M][N]: fp32 fmaf in k order (the emulator's stated order) */
} Case;

static float bval(uint16_t b) { return float_from_bf16_bits(b); }

static float b_at(const Case *c, int k, int n) {
    return bval(c->layout != MMA_B_NK ? c->B[(int64_t)k * c->N + n] : c->B[(int64_t)n * c->K + k]);
}

/* scale: values uniform in [-scale, scale) before rounding to bf16 */
static void case_init(Case *c, int M, int N, int K, MmaBLayout layout, uint64_t seed, float scale) {
    memset(c, 0, sizeof *c);
    c->M = M, c->N = N, c->K = K, c->layout = layout;
    Rng r;
    rng_seed(&r, seed);
    c->A = xmalloc(sizeof(uint16_t) * (size_t)M * (size_t)K);
    c->B = xmalloc(sizeof(uint16_t) * (size_t)N * (size_t)K);
    for (int64_t i = 0; i < (int64_t)M * K; i++) c->A[i] = bf16_bits_from_float(scale * (2.0f * rng_uniform(&r) - 1));
    for (int64_t i = 0; i < (int64_t)N * K; i++) c->B[i] = bf16_bits_from_float(scale * (2.0f * rng_uniform(&r) - 1));
    c->dA = dev_upload(c->A, sizeof(uint16_t) * (size_t)M * (size_t)K);
    c->dB = dev_upload(c->B, sizeof(uint16_t) * (size_t)N * (size_t)K);
    c->ref = xmalloc(sizeof(double) * (size_t)M * (size_t)N);
    c->absum = xmalloc(sizeof(double) * (size_t)M * (size_t)N);
    c->model = xmalloc(sizeof(float) * (size_t)M * (size_t)N);
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            double s = 0, a = 0;
            float f = 0.0f;
            for (int k = 0; k < K; k++) {
                float x = bval(c->A[(int64_t)m * K + k]), y = b_at(c, k, n);
                s += (double)x * (double)y;
                a += fabs((double)x * (double)y);
                f = fmaf(x, y, f);
            }
            c->ref[(int64_t)m * N + n] = s, c->absum[(int64_t)m * N + n] = a, c->model[(int64_t)m * N + n] = f;
        }
}

static void case_free(Case *c) {
    cuda_free(c->dA), cuda_free(c->dB);
    free(c->A), free(c->B), free(c->ref), free(c->absum), free(c->model);
}

/* C from the device, after filling it with NaN so unwritten elements show */
static float *run_gemm(const Case *c, MmaBug bug) {
    size_t n = (size_t)c->M * (size_t)c->N;
    float *nan_fill = xmalloc(sizeof(float) * n);
    for (size_t i = 0; i < n; i++) nan_fill[i] = NAN;
    float *dC = dev_upload(nan_fill, sizeof(float) * n);
    free(nan_fill);
    mma_gemm_bf16(dC, c->dA, c->dB, c->M, c->N, c->K, c->layout, bug);
    float *C = download(dC, (int64_t)n);
    cuda_free(dC);
    return C;
}

/* elements of C outside the tolerance; *worst: the largest |err| / tol */
static int64_t count_outside(const Case *c, const float *C, double *worst) {
    int64_t bad = 0;
    *worst = 0;
    for (int64_t i = 0; i < (int64_t)c->M * c->N; i++) {
        double tol = (double)c->K * ldexp(1.0, -23) * c->absum[i];
        double err = fabs((double)C[i] - c->ref[i]);
        if (!(err <= tol)) bad++;
        double ratio = tol > 0 ? err / tol : (err > 0 ? INFINITY : 0);
        if (ratio > *worst || isnan(ratio)) *worst = ratio;
    }
    return bad;
}

static const char *layout_name(MmaBLayout l) {
    if (l == MMA_B_KN) return "B [K][N], ldmatrix.x2.trans";
    if (l == MMA_B_KN_X4) return "B [K][N], ldmatrix.x4.trans";
    return "B [N][K], ldmatrix.x4";
}
static const char *bug_name(MmaBug b) {
    switch (b) {
        case MMA_BUG_SWAP_A12: return "A registers a1/a2 swapped";
        case MMA_BUG_STORE_ROW: return "C stored with the wrong lane-to-(row, col) map";
        case MMA_BUG_NO_TRANS: return "ldmatrix without .trans where .trans is needed";
        case MMA_BUG_SWAP_B_K: return "B registers b0/b1 swapped";
        default: return "none";
    }
}

static void check_shape(int M, int N, int K, MmaBLayout layout, uint64_t seed, float scale, int planted) {
    Case c;
    case_init(&c, M, N, K, layout, seed, scale);
    char name[200];
    float *C = run_gemm(&c, MMA_BUG_NONE);
    double worst;
    int64_t bad = count_outside(&c, C, &worst);
    snprintf(name, sizeof name, "mma gemm M=%d N=%d K=%d scale %g, %s: within K 2^-23 sum|ab| of the fp64 sum", M, N, K,
             (double)scale, layout_name(layout));
    printf("# margin %.3g of the tolerance used (%s)\n", worst, name);
    tl_result(bad == 0, name, "%lld of %lld elements outside (worst |err|/tol %.3g)", (long long)bad, (long long)M * N,
              worst);
#ifdef KVCPT_CUDA_EMU
    snprintf(name, sizeof name, "mma gemm M=%d N=%d K=%d, %s: emulated mma = fp32 fmaf in k order, bit for bit", M, N,
             K, layout_name(layout));
    tl_identical(name, C, c.model, (int64_t)M * N);
#endif
    free(C);
    for (int b = MMA_BUG_NONE + 1; planted && b < MMA_BUG_COUNT; b++) {
        if (b == MMA_BUG_NO_TRANS && layout == MMA_B_NK) continue;
        float *Cb = run_gemm(&c, (MmaBug)b);
        int64_t nb = count_outside(&c, Cb, &worst);
        snprintf(name, sizeof name, "planted bug caught: %s (M=%d N=%d K=%d, %s)", bug_name((MmaBug)b), M, N, K,
                 layout_name(layout));
        tl_result(nb > 0, name, "every element within tolerance: the test cannot see this bug");
        if (nb > 0)
            printf("# %s: %lld of %lld elements outside the tolerance\n", bug_name((MmaBug)b), (long long)nb,
                   (long long)M * N);
        free(Cb);
    }
    case_free(&c);
}

/* mma_pack_bf16x2: lo in the low half, each rounded to nearest even like
 * bf16_bits_from_float (ties, values just off ties, +-0, inf, subnormals). */
static void check_pack(void) {
    enum { P = 8 };
    const float in[2 * P] = {1.0f,       -2.5f,    1.00390625f,   1.01171875f, /* ties: to even down, up */
                             1.0039063f, -0.0f,    0.0f,          INFINITY,    -INFINITY, 3.0e-39f,
                             65504.0f,   -1.0e-3f, 3.3895314e38f, 0.33333334f, -7.0f,     123.456f};
    uint32_t want[P];
    for (int i = 0; i < P; i++)
        want[i] = (uint32_t)bf16_bits_from_float(in[2 * i]) | (uint32_t)bf16_bits_from_float(in[2 * i + 1]) << 16;
    float *din = dev_upload(in, sizeof in);
    uint32_t *dout = cuda_malloc(sizeof want), got[P];
    mma_pack_bf16x2_cuda(dout, din, P);
    cuda_memcpy_d2h(got, dout, sizeof got);
    int same = memcmp(got, want, sizeof got) == 0;
    int first = 0;
    while (first < P - 1 && got[first] == want[first]) first++;
    tl_result(same, "mma_pack_bf16x2: two floats to bf16 (nearest even), the first in the low half",
              "pair %d: got 0x%08x, want 0x%08x", first, got[first], want[first]);
    cuda_free(din), cuda_free(dout);
}

static void run_all(void) {
    check_pack();
    static const struct {
        int M, N, K, planted;
        float scale;
    } shapes[] = {
        {16, 16, 16, 1, 1.0f},   /* one tile, one k step */
        {32, 48, 64, 0, 1.0f},   /* multiples of the tile */
        {40, 24, 48, 1, 1.0f},   /* M, N not multiples of 16 */
        {17, 9, 23, 0, 1.0f},    /* nothing a multiple */
        {1, 1, 1, 0, 1.0f},      /* one element, one term */
        {50, 37, 100, 0, 8.0f},  /* larger values: exponents differ across terms */
        {64, 40, 520, 0, 1.0f},  /* 33 k steps: the accumulation across mmas */
    };
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int l = 0; l < MMA_B_LAYOUTS; l++)
            check_shape(shapes[s].M, shapes[s].N, shapes[s].K, (MmaBLayout)l, 1000 + s * MMA_B_LAYOUTS + (uint64_t)l,
                        shapes[s].scale, shapes[s].planted);
}
#endif

int main(void) {
#ifdef KVCPT_CUDA
    if (cuda_device_count() == 0) {
        tl_skip("mma primitives", "no CUDA device visible");
        return tl_finish();
    }
    run_all();
#else
    tl_skip("mma primitives", "the CUDA backend was not compiled");
#endif
    return tl_finish();
}
