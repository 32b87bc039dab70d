/* CUDA AdamW against its CPU oracle on the same inputs: fp32 params agree
 * to within one quantization code per state element (the arithmetic is
 * shared and explicitly rounded, so they are expected to be identical);
 * bf16 params match the oracle rounded to bf16; rejected gradients leave
 * everything unchanged. Skips without a GPU. */
#include <math.h>
#include <string.h>

#include "../../common/backend.h"
#include "../../common/rng.h"
#include "../../common/util.h"
#include "../../optim/optimizer.h"
#include "../testlib.h"
#ifdef KVCPT_CUDA
#include "../../kernels/cuda_device.h"
#include "../../optim/optim_cuda.h"

#define NSEG 4
static const int64_t off[NSEG] = {0, 300000, 300000 + 4097 + 5, 300000 + 4097 + 5 + 1000};
static const int64_t num[NSEG] = {300000, 4097, 1000, 70001};
#define TOTAL (300000 + 4097 + 5 + 1000 + 70001)

static uint16_t to_bf16(float x) { /* round to nearest even, as __float2bfloat16_rn */
    uint32_t u;
    memcpy(&u, &x, 4);
    u += 0x7fff + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}
static float from_bf16(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float x;
    memcpy(&x, &u, 4);
    return x;
}

static int64_t code_diff(const uint8_t *a, const uint8_t *b, int64_t n, int *max_d) {
    int64_t differ = 0;
    *max_d = 0;
    for (int64_t i = 0; i < n; i++) {
        int d = abs((int)a[i] - (int)b[i]);
        differ += d != 0;
        if (d > *max_d) *max_d = d;
    }
    return differ;
}

static void run(OptimKind kind, OptimDtype pd, const char *label) {
    Optimizer *cpu = optim_create(kind, off, num, NSEG), *back = optim_create(kind, off, num, NSEG);
    OptimCuda *gpu = optim_cuda_create(cpu);
    float *p = xmalloc(TOTAL * 4), *g = xmalloc(TOTAL * 4), *pg = xmalloc(TOTAL * 4);
    uint16_t *pb = xmalloc(TOTAL * 2);
    void *dp = cuda_malloc(TOTAL * 4), *dg = cuda_malloc(TOTAL * 4);
    Rng r;
    rng_seed(&r, 17);
    for (int64_t i = 0; i < TOTAL; i++) p[i] = 0.1f * rng_normal(&r);
    if (pd == OPTIM_BF16) {
        for (int64_t i = 0; i < TOTAL; i++) pb[i] = to_bf16(p[i]), p[i] = from_bf16(pb[i]);
        cuda_memcpy_h2d(dp, pb, TOTAL * 2);
    } else {
        cuda_memcpy_h2d(dp, p, TOTAL * 4);
    }
    AdamWHyper h = adamw_hyper_default();
    h.lr = 1e-3;
    h.weight_decay = 0.01;
    int rejected_ok = 1;
    for (int t = 1; t <= 10; t++) {
        for (int64_t i = 0; i < TOTAL; i++) g[i] = 0.01f * rng_normal(&r);
        if (t == 5) { /* a NaN: both reject, nothing changes */
            g[off[3] + 777] = NAN;
            cuda_memcpy_h2d(dg, g, TOTAL * 4);
            int rc_g = optim_cuda_step(gpu, dp, pd, dg, OPTIM_F32, &h, t);
            int rc_c = optim_step(cpu, p, g, &h, t);
            rejected_ok &= rc_g == 1 && rc_c == 1 && optim_cuda_bad(gpu)->segment == 3 && optim_cuda_bad(gpu)->index == 777;
            g[off[3] + 777] = 0.0f;
        }
        cuda_memcpy_h2d(dg, g, TOTAL * 4);
        optim_cuda_step(gpu, dp, pd, dg, OPTIM_F32, &h, t);
        optim_step(cpu, p, g, &h, t);
        if (pd == OPTIM_BF16) for (int64_t i = 0; i < TOTAL; i++) p[i] = from_bf16(to_bf16(p[i]));
    }
    optim_cuda_download(gpu, back);
    if (pd == OPTIM_BF16) {
        cuda_memcpy_d2h(pb, dp, TOTAL * 2);
        for (int64_t i = 0; i < TOTAL; i++) pg[i] = from_bf16(pb[i]);
    } else {
        cuda_memcpy_d2h(pg, dp, TOTAL * 4);
    }
    char name[160];
    snprintf(name, sizeof name, "%s: rejected NaN step reported at segment 3 element 777 by both", label);
    tl_result(rejected_ok, name, "");
    int md = 0, vd = 0;
    int64_t mdiff = code_diff(back->m_code, cpu->m_code, cpu->n_code, &md);
    int64_t vdiff = code_diff(back->v_code, cpu->v_code, cpu->n_code, &vd);
    printf("# %s: codes differing m %lld (max %d), v %lld (max %d) of %lld\n", label, (long long)mdiff, md,
           (long long)vdiff, vd, (long long)cpu->n_code);
    snprintf(name, sizeof name, "%s: state codes within one code of the CPU oracle", label);
    tl_result(md <= 1 && vd <= 1, name, "max code difference m %d v %d", md, vd);
    snprintf(name, sizeof name, "%s: absmax matches the CPU oracle", label);
    tl_close(name, back->m_absmax, cpu->m_absmax, cpu->n_absmax, 0, 1e-6);
    snprintf(name, sizeof name, "%s: fp32 states match the CPU oracle", label);
    tl_close(name, back->m32, cpu->m32, cpu->n_f32, 1e-12, 1e-6);
    snprintf(name, sizeof name, "%s: params match the CPU oracle", label);
    tl_close(name, pg, p, TOTAL, 1e-7, pd == OPTIM_BF16 ? 8e-3 : 1e-6);
    cuda_free(dp), cuda_free(dg);
    free(p), free(g), free(pg), free(pb);
    optim_cuda_free(gpu);
    optim_free(cpu), optim_free(back);
}
#endif

int main(void) {
    if (backend_cuda_device_count() == 0) {
        tl_skip("adamw cuda vs cpu", "no CUDA device visible");
        return tl_finish();
    }
#ifdef KVCPT_CUDA
    run(OPTIM_ADAMW8BIT, OPTIM_F32, "adamw8bit fp32 params");
    run(OPTIM_ADAMW8BIT, OPTIM_BF16, "adamw8bit bf16 params");
    run(OPTIM_ADAMW, OPTIM_F32, "adamw fp32 params");
#endif
    return tl_finish();
}
