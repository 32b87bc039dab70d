/* attn_impl cudnn (kernels/attention_cudnn.c), forward and backward,
 * against the float64 oracle kernels/attention_ref.c on bf16-rounded q, k,
 * v and dout: causal and RefreshKV-masked shapes (the suffix rows over the
 * gathered [TopK; L..T-1] list, bottom-right causal, dK' and dV' scattered
 * back), GQA ratios 1 to 4, D = 16 to 128, B = 2, S = 1, K < L and K = L;
 * run-twice bits; the masks and head dims it refuses; the probe that
 * reports a refusal without stopping the program; planted bugs the
 * same comparisons must catch (the scatter one entry off, a top-left
 * suffix mask, the wrong scale, K's strides exchanged) and a descriptor
 * the stand-in refuses (a span past its allocation).
 *
 * Under the emulator cuDNN is tests/cuda_emu/cudnn_emu.c, which checks the
 * graph's descriptors and executes it densely in double (fp32 and bf16
 * where the graph declares them); on a GPU it is cuDNN itself.
 *
 * Tolerances: |got - ref| <= atol + rtol |ref|:
 *   out          4e-3  4e-3  out stored in bf16 (2^-9 relative); on a card
 *                            also P rounded to bf16 before P V
 *   lse          2e-5  2e-5  fp32 statistics of the same bf16 operands
 *   dq, dk, dv   2e-2  2e-2  P^T and dS^T rounded to bf16 (2^-9 relative
 *                            per term) before their products, over up to
 *                            T Hq/Hkv terms whose sizes exceed the sum
 *                            (dS cancels); dK and dV per query head in bf16
 *                            before the group sum, as the frontend declares
 *                            them; each gradient stored in bf16 (the
 *                            inputs' type) and, for keys a suffix row
 *                            sees, the prefix's and the suffix's bf16
 *                            parts added. Measured: up to 1.5 of a 1e-2
 *                            allowance (T=100, ratio 4: one dk and one dv
 *                            entry of an early key), under 0.8 of this one */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../common/rng.h"
#include "../testlib.h"

#ifdef KVCPT_CUDA
#include <math.h>

#include "../../common/util.h"
#include "../../kernels/attention.h"
#include "../../kernels/attention_cudnn.h"
#include "../../kernels/attention_ref.h"
#include "../../kernels/bf16.h"
#include "../../kernels/cuda_device.h"
#include "gpu_testlib.h"

static const double OUT_ATOL = 4e-3, OUT_RTOL = 4e-3, LSE_ATOL = 2e-5, LSE_RTOL = 2e-5;
static const double GRAD_ATOL = 2e-2, GRAD_RTOL = 2e-2;

static Rng rng;

typedef struct {
    const char *label;
    int64_t B, T, Hq, Hkv, D;
    RefreshMask m;
} Case;

/* The case's inputs (bf16 values, as floats for the oracle and bf16 on the
 * device), the oracle's results and the device buffers. */
typedef struct {
    int64_t nq, nkv, nlse;
    float *q, *k, *v, *dout;
    int32_t *sel;
    float *ref_out, *ref_lse, *ref_dq, *ref_dk, *ref_dv;
    bf16 *dq_in, *dk_in, *dv_in, *ddout, *dout_b;
    float *dlse, *ddq, *ddk, *ddv;
    int32_t *dsel;
} Fixture;

static bf16 *upload_bf16(const float *x, int64_t n) {
    uint16_t *h = xmalloc(sizeof(uint16_t) * (size_t)n);
    for (int64_t i = 0; i < n; i++) h[i] = bf16_bits_from_float(x[i]);
    bf16 *d = dev_upload(h, sizeof(uint16_t) * (size_t)n);
    free(h);
    return d;
}

static void fixture_make(Fixture *f, const Case *c) {
    memset(f, 0, sizeof *f);
    const int64_t B = c->B, T = c->T, Hq = c->Hq, Hkv = c->Hkv, D = c->D;
    f->nq = B * T * Hq * D, f->nkv = B * T * Hkv * D, f->nlse = B * Hq * T;
    f->q = host_normal_bf16(&rng, f->nq), f->k = host_normal_bf16(&rng, f->nkv);
    f->v = host_normal_bf16(&rng, f->nkv);
    f->dout = host_normal_bf16(&rng, f->nq);
    if (refresh_active(&c->m, T)) {
        const int64_t ns = B * Hkv * refresh_sel_len(&c->m, T);
        f->sel = xcalloc((size_t)ns, sizeof(int32_t));
        attention_refresh_select_cpu(f->sel, f->q, f->k, B, T, Hq, Hkv, D, &c->m);
        f->dsel = dev_upload(f->sel, sizeof(int32_t) * (size_t)ns);
    }
    f->ref_out = xmalloc(sizeof(float) * (size_t)f->nq), f->ref_lse = xmalloc(sizeof(float) * (size_t)f->nlse);
    attention_forward_ref(f->ref_out, f->ref_lse, f->q, f->k, f->v, f->sel, B, T, Hq, Hkv, D, &c->m);
    f->ref_dq = xmalloc(sizeof(float) * (size_t)f->nq);
    f->ref_dk = xmalloc(sizeof(float) * (size_t)f->nkv), f->ref_dv = xmalloc(sizeof(float) * (size_t)f->nkv);
    attention_backward_ref(f->ref_dq, f->ref_dk, f->ref_dv, f->dout, f->q, f->k, f->v, f->sel, B, T, Hq, Hkv, D, &c->m);
    f->dq_in = upload_bf16(f->q, f->nq), f->dk_in = upload_bf16(f->k, f->nkv), f->dv_in = upload_bf16(f->v, f->nkv);
    f->dout_b = upload_bf16(f->dout, f->nq);
    f->ddout = cuda_malloc(sizeof(bf16) * (size_t)f->nq); /* the forward's out */
    f->dlse = cuda_malloc(sizeof(float) * (size_t)f->nlse);
    f->ddq = cuda_malloc(sizeof(float) * (size_t)f->nq);
    f->ddk = cuda_malloc(sizeof(float) * (size_t)f->nkv), f->ddv = cuda_malloc(sizeof(float) * (size_t)f->nkv);
}

static void fixture_free(Fixture *f) {
    void *host[] = {f->q, f->k, f->v, f->dout, f->sel, f->ref_out, f->ref_lse, f->ref_dq, f->ref_dk, f->ref_dv};
    for (size_t i = 0; i < sizeof host / sizeof host[0]; i++) free(host[i]);
    void *dev[] = {f->dq_in, f->dk_in, f->dv_in, f->ddout, f->dout_b, f->dlse, f->ddq, f->ddk, f->ddv, f->dsel};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++)
        if (dev[i]) cuda_free(dev[i]);
}

/* Results of one forward + backward on the device, downloaded. */
typedef struct {
    float *out, *lse, *dq, *dk, *dv;
} Got;

static void run_device(const Case *c, Fixture *f, Got *g) {
    const int32_t *sel = refresh_active(&c->m, c->T) ? f->dsel : NULL;
    attention_forward_cudnn_bf16_cuda(f->ddout, f->dlse, f->dq_in, f->dk_in, f->dv_in, sel, c->B, c->T, c->Hq, c->Hkv,
                                      c->D, &c->m);
    attention_backward_cudnn_bf16_cuda(f->ddq, f->ddk, f->ddv, f->dout_b, f->dq_in, f->dk_in, f->dv_in, f->ddout,
                                       f->dlse, sel, c->B, c->T, c->Hq, c->Hkv, c->D, &c->m);
    cuda_synchronize();
    uint16_t *ob = xmalloc(sizeof(uint16_t) * (size_t)f->nq);
    cuda_memcpy_d2h(ob, f->ddout, sizeof(uint16_t) * (size_t)f->nq);
    g->out = xmalloc(sizeof(float) * (size_t)f->nq);
    for (int64_t i = 0; i < f->nq; i++) g->out[i] = float_from_bf16_bits(ob[i]);
    free(ob);
    g->lse = download(f->dlse, f->nlse), g->dq = download(f->ddq, f->nq);
    g->dk = download(f->ddk, f->nkv), g->dv = download(f->ddv, f->nkv);
}

static void got_free(Got *g) { free(g->out), free(g->lse), free(g->dq), free(g->dk), free(g->dv); }

static void run_case(const Case *c) {
    char name[256];
    Fixture f;
    fixture_make(&f, c);
    Got g, g2;
    run_device(c, &f, &g);
    const char *what[5] = {"out", "lse", "dq", "dk", "dv"};
    const float *got[5] = {g.out, g.lse, g.dq, g.dk, g.dv};
    const float *ref[5] = {f.ref_out, f.ref_lse, f.ref_dq, f.ref_dk, f.ref_dv};
    const int64_t n[5] = {f.nq, f.nlse, f.nq, f.nkv, f.nkv};
    const double atol[5] = {OUT_ATOL, LSE_ATOL, GRAD_ATOL, GRAD_ATOL, GRAD_ATOL};
    const double rtol[5] = {OUT_RTOL, LSE_RTOL, GRAD_RTOL, GRAD_RTOL, GRAD_RTOL};
    for (int i = 0; i < 5; i++) {
        snprintf(name, sizeof name, "cudnn %s: %s", what[i], c->label);
        tl_close_margin(name, got[i], ref[i], n[i], atol[i], rtol[i]);
    }
    run_device(c, &f, &g2);
    int same = 1;
    const float *got2[5] = {g2.out, g2.lse, g2.dq, g2.dk, g2.dv};
    for (int i = 0; i < 5; i++) same &= memcmp(got[i], got2[i], sizeof(float) * (size_t)n[i]) == 0;
    snprintf(name, sizeof name, "cudnn rerun gives the same bits (out, lse, dq, dk, dv): %s", c->label);
    tl_result(same, name, "the two runs differ");
    got_free(&g), got_free(&g2);
    fixture_free(&f);
}

/* A planted bug must push some output past its tolerance. */
static void plant_case(const Case *c, AttnCudnnBug bug, const char *what) {
    char name[256];
    Fixture f;
    fixture_make(&f, c);
    Got g;
    attention_cudnn_plant(bug);
    run_device(c, &f, &g);
    attention_cudnn_plant(ATTN_CUDNN_OK);
    attention_cudnn_release(); /* the planted plans go */
    const double worst[5] = {worst_ratio(g.out, f.ref_out, f.nq, OUT_ATOL, OUT_RTOL),
                             worst_ratio(g.lse, f.ref_lse, f.nlse, LSE_ATOL, LSE_RTOL),
                             worst_ratio(g.dq, f.ref_dq, f.nq, GRAD_ATOL, GRAD_RTOL),
                             worst_ratio(g.dk, f.ref_dk, f.nkv, GRAD_ATOL, GRAD_RTOL),
                             worst_ratio(g.dv, f.ref_dv, f.nkv, GRAD_ATOL, GRAD_RTOL)};
    double w = 0;
    for (int i = 0; i < 5; i++) w = worst[i] > w || isnan(worst[i]) ? worst[i] : w;
    snprintf(name, sizeof name, "planted bug caught (%s): %s", what, c->label);
    tl_result(w > 1 || isnan(w), name, "worst ratio %.3g (out %.3g lse %.3g dq %.3g dk %.3g dv %.3g)", w, worst[0],
              worst[1], worst[2], worst[3], worst[4]);
    got_free(&g);
    fixture_free(&f);
}

/* A run expected to stop the program: the fixture is made before the fork
 * (the oracle's OpenMP threads do not survive one). */
typedef struct {
    const Case *c;
    Fixture f;
    AttnCudnnBug bug;
} Death;

static void run_death(void *arg) {
    Death *d = arg;
    Got g;
    attention_cudnn_plant(d->bug);
    run_device(d->c, &d->f, &g);
}

static void expect_death(const char *name, const Case *c, AttnCudnnBug bug, const char *expect) {
    Death d = {c, {0}, bug};
    fixture_make(&d.f, c);
    tl_expect_death(name, run_death, &d, expect);
    fixture_free(&d.f);
}

static void run_all(void) {
    rng_seed(&rng, 20261128);
    const RefreshMask causal = {.enabled = 0, .L = 0, .K = 0, .pool_kernel = 1, .agg = GROUP_AGG_MAX};
    const Case cases[] = {
        {"T=1 causal, D=16", 1, 1, 2, 1, 16, causal},
        {"T=70 causal, B=2, ratio 2, D=32", 2, 70, 4, 2, 32, causal},
        {"T=100 L=80 K=20 pool 3, ratio 4, D=64",
         1,
         100,
         8,
         2,
         64,
         {.enabled = 1, .L = 80, .K = 20, .pool_kernel = 3, .agg = GROUP_AGG_MAX}},
        {"T=71 L=70 K=9 (S=1), B=2, ratio 4, D=32, agg mean",
         2,
         71,
         4,
         1,
         32,
         {.enabled = 1, .L = 70, .K = 9, .pool_kernel = 5, .agg = GROUP_AGG_MEAN}},
        {"T=90 L=70 K=L, ratio 1, D=16",
         1,
         90,
         2,
         2,
         16,
         {.enabled = 1, .L = 70, .K = 70, .pool_kernel = 7, .agg = GROUP_AGG_MAX}},
        {"T=40 L=30 K=10, B=2, ratio 2, D=128",
         2,
         40,
         4,
         2,
         128,
         {.enabled = 1, .L = 30, .K = 10, .pool_kernel = 3, .agg = GROUP_AGG_MAX}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        if (tl_case_selected(cases[i].label)) run_case(&cases[i]);

    const Case plant = {"T=40 L=30 K=10, ratio 2, D=32",
                        1,
                        40,
                        4,
                        2,
                        32,
                        {.enabled = 1, .L = 30, .K = 10, .pool_kernel = 3, .agg = GROUP_AGG_MAX}};
    if (tl_case_selected("planted")) {
        plant_case(&plant, ATTN_CUDNN_BUG_SCATTER, "dK', dV' scattered one list entry off");
        plant_case(&plant, ATTN_CUDNN_BUG_TOP_LEFT, "suffix rows masked top-left");
        plant_case(&plant, ATTN_CUDNN_BUG_SCALE, "scale 1/D");
        /* K's head and position strides exchanged: a descriptor the
         * stand-in refuses, as overlapping here and, where it does not
         * overlap, as reaching past K's allocation */
        expect_death("planted bug refused (K's strides exchanged: elements overlap): T=40 L=30 K=10, ratio 2, D=32",
                     &plant, ATTN_CUDNN_BUG_K_STRIDE, "put two elements at one place");
        const Case small = {"T=3 causal, ratio 1, D=8, 8 KV heads", 1, 3, 8, 8, 8, causal};
        expect_death("planted bug refused (K's strides exchanged: span past the allocation): T=3 causal, 8 KV heads",
                     &small, ATTN_CUDNN_BUG_K_STRIDE, "left in its device allocation");
    }
    if (tl_case_selected("probe")) {
        /* the probe builds the plans or says why not, and the program goes on */
        const char *why = attention_cudnn_probe(plant.B, plant.T, plant.Hq, plant.Hkv, plant.D, &plant.m);
        tl_result(why == NULL, "probe: cuDNN builds the plans of T=40 L=30 K=10, ratio 2, D=32", "%s", why ? why : "");
        attention_cudnn_release();
        attention_cudnn_plant(ATTN_CUDNN_BUG_K_STRIDE);
        why = attention_cudnn_probe(plant.B, plant.T, plant.Hq, plant.Hkv, plant.D, &plant.m);
        attention_cudnn_plant(ATTN_CUDNN_OK);
        tl_result(why && strstr(why, "finalizing a tensor"),
                  "probe: a descriptor cuDNN refuses (K's strides exchanged) is reported, not fatal", "got %s",
                  why ? why : "NULL");
        static const RefreshMask evict = {
            .enabled = 1, .L = 30, .K = 10, .pool_kernel = 3, .agg = GROUP_AGG_MAX, .evict = 1};
        why = attention_cudnn_probe(1, 40, 4, 2, 32, &evict);
        tl_result(why && strstr(why, "mask_evict"), "probe: mask_evict is reported", "got %s", why ? why : "NULL");
        attention_cudnn_release();
    }
    if (tl_case_selected("refused")) {
        static const Case evict = {
            "evict",
            1,
            40,
            4,
            2,
            32,
            {.enabled = 1, .L = 30, .K = 10, .pool_kernel = 3, .agg = GROUP_AGG_MAX, .evict = 1}};
        static const Case d20 = {"D=20", 1, 8, 2, 1, 20, {.enabled = 0, .L = 0, .K = 0, .pool_kernel = 1}};
        expect_death("refused: mask_evict under attn_impl cudnn", &evict, ATTN_CUDNN_OK, "mask_evict");
        expect_death("refused: head dim 20 under attn_impl cudnn", &d20, ATTN_CUDNN_OK, "multiples of 8");
    }
    attention_cudnn_release();
}
#endif

int main(void) {
#ifdef KVCPT_CUDA
    if (cuda_device_count() == 0) {
        tl_skip("cuDNN attention", "no CUDA device visible");
        return tl_finish();
    }
    if (!attention_cudnn_built()) {
        tl_skip("cuDNN attention", "built without cuDNN");
        return tl_finish();
    }
    run_all();
#else
    tl_skip("cuDNN attention", "the CUDA backend was not compiled");
#endif
    return tl_finish();
}
