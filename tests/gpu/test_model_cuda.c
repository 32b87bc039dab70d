/* The whole model on the GPU (model/decoder_cuda.h) against the CPU reference
 * (model/decoder.h): loss, logits and every parameter's gradient, with the
 * RefreshKV mask on and off, GQA ratios 1/4/8, T not a multiple of the
 * attention tile, S = 1 and K below the tile, the eval cache's mask (evict
 * with restride, restride alone: per-row selections); then run-twice determinism,
 * recomputation, full and attn (bit-identical gradients, less memory) and ten training
 * steps with the CUDA 8-bit AdamW against the CPU model with the CPU one.
 *
 * Tolerances (fp32 on both sides; only the order of additions differs):
 *   quantity      atol                 rtol   why
 *   loss          1e-6                 1e-5   mean of B*T row losses in double
 *   logits        1e-5 * max|ref|      1e-4   two layers of fp32 sums in another order
 *   gradient      1e-4 * max|ref| (*)  1e-3   the same, through the backward; (*) per tensor
 *   train loss    0                    2e-3   ten steps apart; bf16's epsilon is 7.8e-3
 *
 * The bf16 engine (DECODER_CUDA_BF16_WEIGHTS: bf16 weights and activations,
 * fused q|k|v and gate|up):
 *   vs the CPU model rounding every activation where the engine stores bf16
 *   and every matmul weight (decoder_set_bf16_oracle), the same values into
 *   every op: loss, logits and every gradient within atol 2^-7 * max|ref|,
 *   rtol 2^-7 (one bf16 epsilon), AND at most 0.25 times as far (L2) from it
 *   as from the plain fp32 model. Not the fp32 rows above: rounding is a
 *   step, so an ulp of difference in another kernel next to a bf16 midpoint
 *   moves an operand by a whole bf16 step (see parity_bf16).
 *   vs the plain fp32 CPU model over 10 training steps (host fp32 master,
 *   same optimizer): losses within 3.9e-3 = 2^-8 relative, twice the largest
 *   relative error bf16 storage puts on any one weight.
 *   With head dims 16..128 the engine's attention runs on tensor cores
 *   (kernels/attention_mma.h); the GPU also rounds P and dS, which no oracle can do
 *   alike (it rounds against a running max), so there: two bf16 epsilons
 *   (2^-6) per element, the "nearer bf16r than fp32" ratio printed but not
 *   checked, and 2^-7 over the 10 steps.
 * precision bf16sr (matrices only in bf16, the optimizer on the device,
 * stochastic rounding; train/device_optim.h): the same 3.9e-3 against the
 * fp32 CPU model over 10 steps, and the parameters equal to
 * optim_step_rounded's on the device's own gradients (99% bit-identical:
 * one state code may differ on a GPU), a tied head's copy exactly the
 * updated embedding rounded.
 * Each check prints "# margin" (worst |d| over its atol), for recalibration
 * on a GPU. Under the CPU emulator the matmuls are the CPU's own
 * (tests/cuda_emu/matmul_emu.c), so there the difference is every other
 * kernel's. The cases include Qwen2 (q/k/v biases, drawn non-zero). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../common/rng.h"
#include "../testlib.h"

#ifdef KVCPT_CUDA
#include "../../kernels/cuda_device.h"
#include "../../model/decoder.h"
#include "../../model/decoder_cuda.h"
#include "../../optim/optim_cuda.h"
#include "../../optim/optimizer.h"
#include "../../parallel/shard_ckpt.h"
#include "../../train/device_optim.h"

typedef struct {
    const char *label;
    int64_t V, C, F, layers, Hq, Hkv, D;
    int tied;
    int64_t B, T;
    RefreshMask mask; /* enabled = 0: causal */
    int64_t S;
    int qwen2; /* the qwen2 family: q/k/v biases, drawn non-zero */
} Case;

static void make_config(DecoderConfig *c, const Case *k) {
    char json[1024];
    snprintf(
        json, sizeof json,
        "{\"model_type\":\"%s\",\"vocab_size\":%lld,\"hidden_size\":%lld,\"intermediate_size\":%lld,\"num_hidden_"
        "layers\":%lld,"
        "\"num_attention_heads\":%lld,\"num_key_value_heads\":%lld,\"head_dim\":%lld,\"rms_norm_eps\":1e-5,"
        "\"rope_theta\":500000.0,\"rope_scaling\":{\"rope_type\":\"llama3\",\"factor\":8.0,\"low_freq_factor\":1.0,"
        "\"high_freq_factor\":4.0,\"original_max_position_embeddings\":32},\"max_position_embeddings\":4096,"
        "\"tie_word_embeddings\":%s,\"initializer_range\":0.1}",
        k->qwen2 ? "qwen2" : "llama", (long long)k->V, (long long)k->C, (long long)k->F, (long long)k->layers,
        (long long)k->Hq, (long long)k->Hkv, (long long)k->D, k->tied ? "true" : "false");
    config_parse_json(c, json, k->label);
}

static void random_batch(int32_t *tokens, int32_t *targets, int64_t n, int64_t V, uint64_t seed) {
    Rng r;
    rng_seed(&r, seed);
    for (int64_t i = 0; i < n; i++) {
        tokens[i] = (int32_t)(rng_uniform(&r) * (double)V) % (int32_t)V;
        targets[i] = i % 7 == 3 ? -1 : (int32_t)(rng_uniform(&r) * (double)V) % (int32_t)V; /* some ignored */
    }
}

static double max_abs(const float *x, int64_t n) {
    double m = 0;
    for (int64_t i = 0; i < n; i++) m = fabs(x[i]) > m ? fabs(x[i]) : m;
    return m;
}

/* tl_close with atol = rel_atol * max|ref|, plus the margin line. */
static int close_scaled(const char *name, const float *got, const float *ref, int64_t n, double rel_atol, double rtol) {
    return tl_close_margin(name, got, ref, n, rel_atol * max_abs(ref, n) + 1e-30, rtol);
}

/* k's mask over its S refresh positions. */
static RefreshMask case_mask(const Case *k) {
    RefreshMask m = k->mask;
    m.S = k->S;
    return m;
}

/* A device engine holding m's parameters, with k's mask. */
static void engine_like(DecoderCuda *g, const Decoder *m, const Case *k, DecoderRecompute recompute,
                        DecoderCudaPrecision prec) {
    decoder_cuda_create(g, &m->cfg, recompute, prec);
    decoder_cuda_upload_params(g, m->params);
    RefreshMask mask = case_mask(k);
    if (k->mask.enabled) decoder_cuda_set_mask(g, &mask);
}

static void setup_pair_prec(const Case *k, Decoder *m, DecoderCuda *g, DecoderRecompute recompute,
                            DecoderCudaPrecision prec) {
    DecoderConfig c;
    make_config(&c, k);
    decoder_create(m, &c);
    decoder_init_random(m, 1234);
    Rng r; /* biases start at zero: drawn here, so that their add is seen */
    rng_seed(&r, 4321);
    for (int i = 0; i < m->layout.n; i++) {
        const ParamTensor *t = &m->layout.t[i];
        if (t->kind == PT_BQ || t->kind == PT_BK || t->kind == PT_BV)
            for (int64_t j = 0; j < t->numel; j++) m->params[t->offset + j] = 0.5f * (float)rng_normal(&r);
    }
    RefreshMask mask = case_mask(k);
    if (k->mask.enabled) decoder_set_mask(m, &mask);
    engine_like(g, m, k, recompute, prec);
}

static void setup_pair(const Case *k, Decoder *m, DecoderCuda *g, DecoderRecompute recompute) {
    setup_pair_prec(k, m, g, recompute, DECODER_CUDA_FP32);
}

static float gpu_pass(DecoderCuda *g, const int32_t *tok, const int32_t *tgt, const Case *k, float *grads) {
    float loss = decoder_cuda_forward(g, tok, tgt, k->B, k->T);
    decoder_cuda_zero_grad(g);
    decoder_cuda_backward(g);
    decoder_cuda_download_grads(g, grads);
    return loss;
}

/* The same with the training forward (decoder_cuda_forward_train), which
 * computes the head's gradient: the gradients zeroed before the forward,
 * and the logits read in between when logits is non-NULL (they must not
 * overwrite what the forward left for the backward). */
static float gpu_pass_head_in_forward(DecoderCuda *g, const int32_t *tok, const int32_t *tgt, const Case *k,
                                      float *grads, float *logits) {
    decoder_cuda_zero_grad(g);
    float loss = decoder_cuda_forward_train(g, tok, tgt, k->B, k->T);
    if (logits) decoder_cuda_logits(g, logits, 0, k->B * k->T);
    decoder_cuda_backward(g);
    decoder_cuda_download_grads(g, grads);
    return loss;
}

static void check_grads(const char *label, const Decoder *m, const float *got) {
    char name[256];
    for (int i = 0; i < m->layout.n; i++) {
        const ParamTensor *t = &m->layout.t[i];
        snprintf(name, sizeof name, "%s: grad %s", label, t->name);
        close_scaled(name, got + t->offset, m->grads + t->offset, t->numel, 1e-4, 1e-3);
    }
}

/* g run again, and an engine of the same precision for each recompute
 * setting (full: every layer rerun; attn: the MLP half rerun), give the
 * first pass's loss and gradients bit for bit. held[r] is the device bytes
 * of the engine with setting r (held[NONE] g's), which the callers compare. */
static void check_bit_identity(const char *label, const Case *k, const Decoder *m, DecoderCuda *g,
                               DecoderCudaPrecision prec, const int32_t *tok, const int32_t *tgt, float loss,
                               const float *grads, float *again, int64_t held[DECODER_RECOMPUTE_COUNT]) {
    size_t bytes = sizeof(float) * (size_t)m->layout.total;
    char name[400];
    float loss2 = gpu_pass(g, tok, tgt, k, again);
    snprintf(name, sizeof name, "%s: a second run gives the same loss and gradients, bit for bit", label);
    tl_result(memcmp(&loss, &loss2, sizeof loss) == 0 && memcmp(grads, again, bytes) == 0, name,
              "loss %.9g vs %.9g, or gradients differ", loss, loss2);
    float *logits = malloc(sizeof(float) * (size_t)(k->B * k->T * k->V));
    for (int with_logits = 0; with_logits < 2; with_logits++) {
        float loss4 = gpu_pass_head_in_forward(g, tok, tgt, k, again, with_logits ? logits : NULL);
        snprintf(
            name, sizeof name,
            "%s: the head's gradient in the forward (logits once%s) gives the same loss and gradients, bit for bit",
            label, with_logits ? ", logits read before the backward" : "");
        tl_result(memcmp(&loss, &loss4, sizeof loss) == 0 && memcmp(grads, again, bytes) == 0, name,
                  "loss %.9g vs %.9g, or gradients differ", loss, loss4);
    }
    free(logits);
    held[DECODER_RECOMPUTE_NONE] = decoder_cuda_bytes(g);
    const DecoderRecompute settings[] = {DECODER_RECOMPUTE_FULL, DECODER_RECOMPUTE_ATTN};
    for (int i = 0; i < 2; i++) {
        DecoderCuda r;
        engine_like(&r, m, k, settings[i], prec);
        float loss3 = gpu_pass(&r, tok, tgt, k, again);
        snprintf(name, sizeof name, "%s: recompute=%s gives the same loss and gradients, bit for bit", label,
                 decoder_recompute_name(settings[i]));
        tl_result(memcmp(&loss, &loss3, sizeof loss) == 0 && memcmp(grads, again, bytes) == 0, name,
                  "loss %.9g vs %.9g, or gradients differ", loss, loss3);
        held[settings[i]] = decoder_cuda_bytes(&r);
        decoder_cuda_free(&r);
    }
}

/* Each setting that recomputes more holds less: full < attn < none. */
static void check_recompute_memory(const char *label, const int64_t held[DECODER_RECOMPUTE_COUNT]) {
    char name[400];
    snprintf(name, sizeof name, "%s: recompute=full holds less device memory than attn, attn less than none", label);
    tl_result(held[DECODER_RECOMPUTE_FULL] < held[DECODER_RECOMPUTE_ATTN] &&
                  held[DECODER_RECOMPUTE_ATTN] < held[DECODER_RECOMPUTE_NONE],
              name, "%lld, %lld and %lld bytes", (long long)held[DECODER_RECOMPUTE_FULL],
              (long long)held[DECODER_RECOMPUTE_ATTN], (long long)held[DECODER_RECOMPUTE_NONE]);
}

static void parity(const Case *k) {
    Decoder m;
    DecoderCuda g;
    setup_pair(k, &m, &g, DECODER_RECOMPUTE_NONE);
    int64_t BT = k->B * k->T, V = k->V, total = m.layout.total;
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)BT * 2), *tgt = tok + BT;
    random_batch(tok, tgt, BT, V, 77);
    float cpu_loss = decoder_forward(&m, tok, tgt, k->B, k->T);
    decoder_zero_grad(&m);
    decoder_backward(&m);
    float *grads = malloc(sizeof(float) * (size_t)total), *again = malloc(sizeof(float) * (size_t)total);
    float loss = gpu_pass(&g, tok, tgt, k, grads);
    char name[256];
    snprintf(name, sizeof name, "%s: loss", k->label);
    printf("# %s: cpu %.9g gpu %.9g\n", name, cpu_loss, loss);
    tl_close(name, &loss, &cpu_loss, 1, 1e-6, 1e-5);
    float *lc = malloc(sizeof(float) * (size_t)(BT * V)), *lg = malloc(sizeof(float) * (size_t)(BT * V));
    decoder_logits(&m, lc, 0, BT);
    decoder_cuda_logits(&g, lg, 0, BT);
    snprintf(name, sizeof name, "%s: logits", k->label);
    close_scaled(name, lg, lc, BT * V, 1e-5, 1e-4);
    check_grads(k->label, &m, grads);

    int64_t held[DECODER_RECOMPUTE_COUNT];
    check_bit_identity(k->label, k, &m, &g, DECODER_CUDA_FP32, tok, tgt, loss, grads, again, held);
    check_recompute_memory(k->label, held);
    decoder_cuda_free(&g);
    decoder_free(&m);
    free(tok), free(grads), free(again), free(lc), free(lg);
}

static Optimizer *make_optimizer(const Decoder *m) {
    /* one segment per tensor, as a world of one's shard plan gives them */
    const ParamLayout *pl = &m->layout;
    int64_t *off = malloc(sizeof(int64_t) * (size_t)pl->n), *num = malloc(sizeof(int64_t) * (size_t)pl->n);
    for (int i = 0; i < pl->n; i++) off[i] = pl->t[i].offset, num[i] = pl->t[i].numel;
    Optimizer *o = optim_create(OPTIM_ADAMW8BIT, off, num, pl->n);
    free(off), free(num);
    return o;
}

/* The losses of a CPU run and a GPU run side by side, step by step. */
typedef struct {
    double worst; /* largest |gpu - cpu| / |cpu| */
    float first, last_cpu, last_gpu;
    int ok_steps;
} LossCurve;

/* One CPU training step (forward, backward, optimizer); returns its loss. */
static float cpu_train_step(Decoder *m, Optimizer *o, const int32_t *tok, const int32_t *tgt, const Case *k,
                            const AdamWHyper *h, int64_t step, LossCurve *c) {
    float lc = decoder_forward(m, tok, tgt, k->B, k->T);
    decoder_zero_grad(m);
    decoder_backward(m);
    c->ok_steps &= optim_step(o, m->params, m->grads, h, step) == 0;
    return lc;
}

static void curve_add(LossCurve *c, const char *label, int64_t step, float lc, float lg) {
    double rel = fabs((double)lg - lc) / fabs((double)lc);
    c->worst = rel > c->worst ? rel : c->worst;
    printf("# %s step %lld: loss cpu %.7f gpu %.7f\n", label, (long long)step, lc, lg);
    if (step == 1) c->first = lc;
    c->last_cpu = lc, c->last_gpu = lg;
}

/* check: the name of "losses within bound"; both runs must also learn. */
static void curve_report(const LossCurve *c, const char *label, const char *check, double bound) {
    printf("# margin %s: worst relative difference %.3g\n", check, c->worst);
    tl_result(c->ok_steps && c->worst <= bound, check, "worst relative difference %.3g (steps ok %d)", c->worst,
              c->ok_steps);
    char name[256];
    snprintf(name, sizeof name, "%s: the training lowers the loss on both", label);
    tl_result(c->last_cpu < c->first - 0.05f && c->last_gpu < c->first - 0.05f, name,
              "first %.4f, last cpu %.4f gpu %.4f", c->first, c->last_cpu, c->last_gpu);
}

/* The fixed batch (seed 99; targets after the tokens) and the AdamW
 * settings of every ten-step comparison. */
static int32_t *steps_batch(const Case *k) {
    int64_t BT = k->B * k->T;
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)BT * 2);
    random_batch(tok, tok + BT, BT, k->V, 99);
    return tok;
}

static AdamWHyper steps_hyper(void) {
    AdamWHyper h = adamw_hyper_default();
    h.lr = 3e-3;
    return h;
}

/* Ten steps on one fixed batch: the CPU model with the CPU 8-bit AdamW,
 * the GPU engine with the CUDA one, everything device-resident. */
static void train_steps(const Case *k) {
    Decoder m;
    DecoderCuda g;
    setup_pair(k, &m, &g, DECODER_RECOMPUTE_NONE);
    int64_t BT = k->B * k->T;
    int32_t *tok = steps_batch(k), *tgt = tok + BT;
    Optimizer *oc = make_optimizer(&m), *host = make_optimizer(&m);
    OptimCuda *og = optim_cuda_create(host);
    AdamWHyper h = steps_hyper();
    LossCurve c = {.ok_steps = 1};
    for (int64_t step = 1; step <= 10; step++) {
        float lc = cpu_train_step(&m, oc, tok, tgt, k, &h, step, &c);
        float lg = decoder_cuda_forward(&g, tok, tgt, k->B, k->T);
        decoder_cuda_zero_grad(&g);
        decoder_cuda_backward(&g);
        c.ok_steps &= optim_cuda_step(og, g.params, OPTIM_F32, g.grads, OPTIM_F32, &h, step) == 0;
        curve_add(&c, k->label, step, lc, lg);
    }
    char name[256];
    snprintf(name, sizeof name, "%s: 10 training steps, GPU losses within 2e-3 of the CPU's", k->label);
    curve_report(&c, k->label, name, 2e-3);
    optim_cuda_free(og);
    optim_free(oc), optim_free(host);
    decoder_cuda_free(&g);
    decoder_free(&m);
    free(tok);
}

/* The bf16-weights engine against the CPU model with bf16-rounded matmuls:
 * the same math, so the fp32 tolerances above apply; then run-twice and
 * recompute bit identity, and less device memory than the fp32 engine. */
static double l2_dist(const float *a, const float *b, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
    return sqrt(s);
}

/* got vs the bf16r oracle: every element within the bf16 tolerance, and got
 * at most BF16R_RATIO as far (L2) from the oracle as from the fp32 model,
 * i.e. the engine computes the bf16-rounded math, not the fp32 one. */
#define BF16_TOL 7.8125e-3 /* 2^-7: one bf16 epsilon */
/* With attention on tensor cores (head dims 16..128) the engine also rounds
 * P and dS to bf16, which the oracle does not model (the GPU rounds P
 * relative to a running row max, so no oracle can round alike): two bf16
 * epsilons. Measured on the D = 16 case: worst 1.7 x 2^-7 (a k_proj
 * gradient, where dS's rounding meets dK's cancelling sum). */
#define BF16_TOL_MMA 1.5625e-2 /* 2^-6 */
#define BF16R_RATIO 0.25
static void check_bf16r(const char *name, const float *got, const float *ref_r, const float *ref_f, int64_t n,
                        double tol) {
    double dr = l2_dist(got, ref_r, n), df = l2_dist(got, ref_f, n);
    double ratio = df > 0 ? dr / df : (dr > 0 ? INFINITY : 0);
    char full[480];
    snprintf(full, sizeof full, "%s: within bf16 tolerance (%g) of the bf16r oracle", name, tol);
    close_scaled(full, got, ref_r, n, tol, tol);
    snprintf(full, sizeof full, "%s: nearer the bf16r oracle than the fp32 model", name);
    if (tol > BF16_TOL) { /* the oracle leaves P and dS unrounded: how near is a figure, not a check */
        printf("# %s: |gpu - bf16r| / |gpu - fp32| = %.3g (not checked with tensor-core attention)\n", full, ratio);
        return;
    }
    printf("# margin %s: |gpu - bf16r| / |gpu - fp32| = %.3g (allowed %.2g)\n", full, ratio, BF16R_RATIO);
    tl_result(ratio <= BF16R_RATIO, full, "L2 distance %.3g to bf16r, %.3g to fp32", dr, df);
}

/* Ten training steps against the fp32 CPU curve: 2^-8 relative (twice the
 * largest relative error bf16 storage puts on one weight); with attention
 * on tensor cores 2^-7, since q, k, v, P and dS are rounded too (measured
 * 6.3e-3 on the D = 16 case). */
static double train_tol(const Case *k) { return attention_tensor_core_head_dim(k->D) ? 7.8125e-3 : 3.90625e-3; }

/* The bf16-weights engine against the CPU model with bf16-rounded matmuls
 * (the same math) and the plain fp32 model. Bit-equal inputs round alike,
 * but rounding is a step function: where another kernel's fp32 result
 * differs from the CPU's by an ulp (allowed above) next to a rounding
 * midpoint, the operand moves by a whole bf16 step, and that propagates.
 * So the fp32 tolerances cannot hold here (they do hold where no operand
 * flips: measured 0 on the tied case), and the checks are check_bf16r's.
 * Then run-twice and recompute bit identity, and less memory than fp32. */
static void parity_bf16(const Case *k) {
    Decoder m, f;
    DecoderCuda g, r;
    setup_pair_prec(k, &m, &g, DECODER_RECOMPUTE_NONE, DECODER_CUDA_BF16_WEIGHTS);
    decoder_set_bf16_oracle(&m, 1);
    decoder_create(&f, &m.cfg);
    memcpy(f.params, m.params, sizeof(float) * (size_t)m.layout.total);
    RefreshMask mask = case_mask(k);
    if (k->mask.enabled) decoder_set_mask(&f, &mask);
    int64_t BT = k->B * k->T, V = k->V, total = m.layout.total;
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)BT * 2), *tgt = tok + BT;
    random_batch(tok, tgt, BT, V, 77);
    float cpu_loss = decoder_forward(&m, tok, tgt, k->B, k->T), f_loss = decoder_forward(&f, tok, tgt, k->B, k->T);
    decoder_zero_grad(&m), decoder_zero_grad(&f);
    decoder_backward(&m), decoder_backward(&f);
    float *grads = malloc(sizeof(float) * (size_t)total), *again = malloc(sizeof(float) * (size_t)total);
    float loss = gpu_pass(&g, tok, tgt, k, grads);
    char label[160], name[400];
    snprintf(label, sizeof label, "bf16 weights %s", k->label);
    snprintf(name, sizeof name, "%s: loss", label);
    printf("# %s: cpu bf16r %.9g gpu %.9g cpu fp32 %.9g\n", name, cpu_loss, loss, f_loss);
    const double tol = attention_tensor_core_head_dim(k->D) ? BF16_TOL_MMA : BF16_TOL;
    check_bf16r(name, &loss, &cpu_loss, &f_loss, 1, tol);
    float *lc = malloc(sizeof(float) * (size_t)(BT * V)), *lg = malloc(sizeof(float) * (size_t)(BT * V));
    float *lf = malloc(sizeof(float) * (size_t)(BT * V));
    decoder_logits(&m, lc, 0, BT);
    decoder_logits(&f, lf, 0, BT);
    decoder_cuda_logits(&g, lg, 0, BT);
    snprintf(name, sizeof name, "%s: logits", label);
    check_bf16r(name, lg, lc, lf, BT * V, tol);
    for (int i = 0; i < m.layout.n; i++) {
        const ParamTensor *t = &m.layout.t[i];
        snprintf(name, sizeof name, "%s: grad %s", label, t->name);
        check_bf16r(name, grads + t->offset, m.grads + t->offset, f.grads + t->offset, t->numel, tol);
    }
    decoder_free(&f);
    free(lf);

    int64_t held[DECODER_RECOMPUTE_COUNT];
    check_bit_identity(label, k, &m, &g, DECODER_CUDA_BF16_WEIGHTS, tok, tgt, loss, grads, again, held);
    check_recompute_memory(label, held);
    engine_like(&r, &m, k, DECODER_RECOMPUTE_NONE, DECODER_CUDA_FP32);
    float loss4 = gpu_pass(&r, tok, tgt, k, again);
    snprintf(name, sizeof name, "%s: holds less device memory than fp32", label);
    tl_result(decoder_cuda_bytes(&g) < decoder_cuda_bytes(&r), name, "%lld bytes vs %lld in fp32",
              (long long)decoder_cuda_bytes(&g), (long long)decoder_cuda_bytes(&r));
    printf("# %s: device bytes bf16 %lld fp32 %lld; loss bf16 %.7f fp32 %.7f\n", label,
           (long long)decoder_cuda_bytes(&g), (long long)decoder_cuda_bytes(&r), loss, loss4);
    snprintf(name, sizeof name, "%s: rounding the matrices changes the loss (the mode is on)", label);
    tl_result(loss != loss4, name, "bf16 and fp32 engines give the same loss %.9g", loss);
    decoder_cuda_free(&r);
    decoder_cuda_free(&g);
    decoder_free(&m);
    free(tok), free(grads), free(again), free(lc), free(lg);
}

/* The check: ten steps with the same seed, the bf16-weights engine
 * (fp32 master on the host, stepped there, uploaded each step, as the
 * trainer does) against the plain fp32 CPU model, same optimizer. */
static void train_steps_bf16(const Case *k) {
    Decoder m;
    DecoderCuda g;
    setup_pair_prec(k, &m, &g, DECODER_RECOMPUTE_NONE, DECODER_CUDA_BF16_WEIGHTS);
    int64_t BT = k->B * k->T, total = m.layout.total;
    int32_t *tok = steps_batch(k), *tgt = tok + BT;
    float *master = malloc(sizeof(float) * (size_t)total), *grads = malloc(sizeof(float) * (size_t)total);
    memcpy(master, m.params, sizeof(float) * (size_t)total);
    Optimizer *oc = make_optimizer(&m), *og = make_optimizer(&m);
    AdamWHyper h = steps_hyper();
    LossCurve c = {.ok_steps = 1};
    char label[160], name[256];
    snprintf(label, sizeof label, "bf16 weights %s", k->label);
    for (int64_t step = 1; step <= 10; step++) {
        float lc = cpu_train_step(&m, oc, tok, tgt, k, &h, step, &c);
        decoder_cuda_upload_params(&g, master);
        float lg = gpu_pass(&g, tok, tgt, k, grads);
        c.ok_steps &= optim_step(og, master, grads, &h, step) == 0;
        curve_add(&c, label, step, lc, lg);
    }
    snprintf(name, sizeof name, "%s: 10 training steps, losses within %.2g of the fp32 CPU's", label, train_tol(k));
    curve_report(&c, label, name, train_tol(k));
    optim_free(oc), optim_free(og);
    decoder_cuda_free(&g);
    decoder_free(&m);
    free(tok), free(master), free(grads);
}

/* precision bf16sr as the trainer runs it (train/device_optim.h): bf16
 * matrices only, the 8-bit AdamW on the device, matrices rounded
 * stochastically. Against the plain fp32 CPU model (the check:
 * losses within 3.9e-3 over 10 steps), and against its own oracle on the
 * same gradients: each step the device's gradients also go to
 * optim_step_rounded on a host copy of the parameters (same seed), so the
 * engine's placement of every tensor, the random bits' keys and the tied
 * head's refresh are checked exactly: parameters bit-identical (the GPU
 * may differ by one state code, as test_adamw_cuda allows, hence 99%),
 * and a tied lm_head's bf16 copy equal to the embedding rounded. */
static void train_steps_bf16sr(const Case *k) {
    Decoder m;
    DecoderCuda g;
    setup_pair_prec(k, &m, &g, DECODER_RECOMPUTE_NONE, DECODER_CUDA_BF16_WEIGHTS);
    int64_t BT = k->B * k->T, total = m.layout.total;
    ShardPlan plan;
    shard_plan_build(&plan, &m.layout, 1, 0);
    Optimizer *oc = make_optimizer(&m), *host = shard_optimizer_create(OPTIM_ADAMW8BIT, &plan, 0);
    Optimizer *orc = shard_optimizer_create(OPTIM_ADAMW8BIT, &plan, 0);
    DeviceOptim *d = device_optim_create(&g, host, &plan, 1, 77);
    device_optim_push(d, &g, m.params, host);
    float *want = malloc(sizeof(float) * (size_t)total), *grads = malloc(sizeof(float) * (size_t)total);
    float *got = malloc(sizeof(float) * (size_t)total);
    decoder_cuda_download_params(&g, want); /* the matrices as the device rounded them */
    uint8_t *rounding = calloc((size_t)orc->nseg, 1);
    for (int s = 0; s < orc->nseg; s++)
        for (int ti = 0; ti < m.layout.n; ti++)
            if (m.layout.t[ti].offset == orc->seg[s].offset && decoder_cuda_param_place(&g, ti).bf16)
                rounding[s] = OPTIM_ROUND_STOCHASTIC;
    int32_t *tok = steps_batch(k), *tgt = tok + BT;
    AdamWHyper h = steps_hyper();
    LossCurve c = {.ok_steps = 1};
    char label[160], name[256];
    snprintf(label, sizeof label, "bf16sr %s", k->label);
    for (int64_t step = 1; step <= 10; step++) {
        float lc = cpu_train_step(&m, oc, tok, tgt, k, &h, step, &c);
        float lg = gpu_pass(&g, tok, tgt, k, grads);
        c.ok_steps &= device_optim_step(d, &g, &h, step) == 0;
        c.ok_steps &= optim_step_rounded(orc, want, grads, &h, step, rounding, 77) == 0;
        curve_add(&c, label, step, lc, lg);
    }
    snprintf(name, sizeof name, "%s: 10 training steps on the device, losses within %.2g of the fp32 CPU's", label,
             train_tol(k));
    curve_report(&c, label, name, train_tol(k));
    decoder_cuda_download_params(&g, got);
    int64_t same = 0;
    for (int64_t i = 0; i < total; i++) same += got[i] == want[i];
    printf("# %s: %lld of %lld parameters bit-identical to optim_step_rounded on the same gradients\n", label,
           (long long)same, (long long)total);
    snprintf(name, sizeof name, "%s: parameters after 10 device steps equal the CPU oracle's on the same gradients",
             label);
    tl_result(same >= total - total / 100, name, "%lld of %lld identical", (long long)same, (long long)total);
    if (g.head_offset >= 0) {
        int64_t n = k->V * k->C, off = 0;
        uint16_t *head = malloc(sizeof(uint16_t) * (size_t)n);
        cuda_memcpy_d2h(head, g.wbf16 + g.head_offset, sizeof(uint16_t) * (size_t)n);
        for (int64_t i = 0; i < n; i++) off += head[i] != bf16_bits_from_float(got[m.layout.t[0].offset + i]);
        snprintf(name, sizeof name, "%s: the tied lm_head's bf16 copy is the updated embedding rounded", label);
        tl_result(off == 0 && m.layout.t[0].kind == PT_EMBED, name, "%lld of %lld differ", (long long)off,
                  (long long)n);
        free(head);
    }
    device_optim_free(d);
    optim_free(oc), optim_free(orc), optim_free(host);
    shard_plan_free(&plan);
    decoder_cuda_free(&g);
    decoder_free(&m);
    free(tok), free(got), free(want), free(grads), free(rounding);
}

static void bad_token(void *arg) {
    DecoderCuda *g = arg;
    int32_t tok[4] = {1, 2, 999, 3};
    decoder_cuda_forward(g, tok, NULL, 1, 4);
}

static void bad_input(const Case *k) {
    Decoder m;
    DecoderCuda g;
    setup_pair(k, &m, &g, DECODER_RECOMPUTE_NONE);
    tl_expect_death("gpu engine: a token outside the vocabulary stops with a message", bad_token, &g, "outside");
    decoder_cuda_free(&g);
    decoder_free(&m);
}
#endif

int main(void) {
#ifdef KVCPT_CUDA
    if (cuda_device_count() == 0) {
        tl_skip("model cuda vs cpu", "no CUDA device visible");
        return tl_finish();
    }
    /* label, V, C, F, layers, Hq, Hkv, D, tied, B, T, mask {.enabled = on, .L = L, .K = K, .pool_kernel = pool,
        .agg = agg, .evict = evict, .restride = restride}, S */
    const Case cases[] = {
        {"gqa4 mask L40 S9 K6",
         96,
         32,
         40,
         2,
         4,
         1,
         8,
         0,
         2,
         49,
         {.enabled = 1, .L = 40, .K = 6, .pool_kernel = 7, .agg = GROUP_AGG_MAX},
         9,
         0},
        {"gqa8 tied mask S1",
         80,
         48,
         64,
         2,
         8,
         1,
         16,
         1,
         1,
         21,
         {.enabled = 1, .L = 20, .K = 4, .pool_kernel = 3, .agg = GROUP_AGG_MEAN},
         1,
         0},
        {"gqa1 causal T70",
         64,
         32,
         48,
         2,
         2,
         2,
         32,
         0,
         1,
         70,
         {.enabled = 0, .L = 0, .K = 0, .pool_kernel = 1, .agg = GROUP_AGG_MAX},
         0,
         0},
        /* the eval cache's mask, per-row records in sel (kernels/attention.h):
         * K 3 evicts kept keys, then local ones at row 44; row 45 is full
         * and re-selects; without evict, rows 23 and 27 are full */
        {"gqa4 evict restride6 L40 S9 K3",
         96,
         32,
         40,
         2,
         4,
         1,
         8,
         0,
         2,
         49,
         {.enabled = 1, .L = 40, .K = 3, .pool_kernel = 7, .agg = GROUP_AGG_MAX, .evict = 1, .restride = 6},
         9,
         0},
        {"gqa8 tied restride4 S9 D16",
         80,
         48,
         64,
         2,
         8,
         1,
         16,
         1,
         1,
         29,
         {.enabled = 1, .L = 20, .K = 4, .pool_kernel = 3, .agg = GROUP_AGG_MEAN, .restride = 4},
         9,
         0},
        /* Qwen2: the q/k/v biases added after the fused product, their
         * gradients the column sums (kernels/bias.h) */
        {"qwen2 gqa2 mask L40 S9 K6",
         96,
         32,
         40,
         2,
         4,
         2,
         8,
         0,
         2,
         49,
         {.enabled = 1, .L = 40, .K = 6, .pool_kernel = 7, .agg = GROUP_AGG_MAX},
         9,
         1},
        {"qwen2 tied causal T40 D16",
         80,
         48,
         64,
         2,
         4,
         2,
         16,
         1,
         1,
         40,
         {.enabled = 0, .L = 0, .K = 0, .pool_kernel = 1, .agg = GROUP_AGG_MAX},
         0,
         1},
    };
    /* each run as "kind: label", which KVCPT_TEST_CASES can select */
    const struct {
        const char *kind;
        void (*run)(const Case *);
        int c;
    } runs[] = {
        {"parity", parity, 0},
        {"parity", parity, 1},
        {"parity", parity, 2},
        {"train steps", train_steps, 0},
        {"bf16 parity", parity_bf16, 0},
        {"bf16 parity", parity_bf16, 1},
        {"bf16 parity", parity_bf16, 2},
        {"bf16 train steps", train_steps_bf16, 0},
        {"bf16 train steps", train_steps_bf16, 1},
        {"bf16sr train steps", train_steps_bf16sr, 0},
        {"bf16sr train steps", train_steps_bf16sr, 1},
        {"bad input", bad_input, 2},
        {"parity", parity, 3},
        {"parity", parity, 4},
        {"bf16 parity", parity_bf16, 3},
        {"bf16 parity", parity_bf16, 4},
        {"parity", parity, 5},
        {"bf16 parity", parity_bf16, 5},
        {"bf16 parity", parity_bf16, 6},
    };
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        char label[256];
        snprintf(label, sizeof label, "%s: %s", runs[i].kind, cases[runs[i].c].label);
        if (tl_case_selected(label)) runs[i].run(&cases[runs[i].c]);
    }
#else
    tl_skip("model cuda vs cpu", "the CUDA backend was not compiled");
#endif
    return tl_finish();
}
