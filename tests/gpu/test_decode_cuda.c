/* The decode engine on the GPU (eval/engine_cuda.h) against the CPU engine
 * (eval/engine.h), its oracle: the prefill's statistics (what the policies
 * start from), then every policy's NLLs over a batch of documents, the keys
 * each one read, and GPU run-twice bit identity.
 *
 * Tolerances (fp32 on both sides; only the order of additions differs):
 *   quantity          atol    rtol   why
 *   colsum, last      2e-5    1e-4   sums of T probabilities, expf vs the CPU's
 *   last_out, q_last  1e-5    1e-4   two layers of fp32 sums in another order
 *   prefill logits    1e-4    1e-4   the same, through the head
 *   NLL per token     1e-4    1e-4   S - 1 decode steps, each a whole model
 *   keys read         exact          the same policy decisions (a flip needs a
 *                                    score tie at rounding level)
 * Each comparison prints "# margin" lines for recalibration on a GPU. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../common/rng.h"
#include "../../kernels/cuda_device.h"
#include "../testlib.h"

#ifdef KVCPT_CUDA
#include "../../common/util.h"
#include "../../eval/engine.h"
#include "../../eval/engine_cuda.h"

#define DOCS 2
#define W 32

typedef struct {
    const char *label;
    int64_t Hq, Hkv, D, L, S;
} Case;

static Decoder model;
static DecodeModelCuda gpu;
static DecodeEngine cpu_eng[DOCS], gpu_eng[DOCS];
static int32_t *doc[DOCS];

static void make_policies(Policy *p, const char *name, const PolicyOptions *o, const Case *k) {
    PolicyShape sh = {model.cfg.num_hidden_layers,
                      model.cfg.num_attention_heads,
                      model.cfg.num_key_value_heads,
                      model.cfg.head_dim,
                      model.cfg.hidden_size,
                      k->L,
                      W,
                      k->L + k->S,
                      NULL,
                      NULL};
    for (int i = 0; i < DOCS; i++) policy_create(&p[i], name, &sh, o);
}

static void check_prefill(const Case *k) {
    const DecoderConfig *c = &model.cfg;
    int64_t Hq = c->num_attention_heads, D = c->head_dim, L = k->L, w = W < L ? W : L;
    char t[160];
    for (int64_t l = 0; l < c->num_hidden_layers; l++) {
        DecodeEngine *a = &gpu_eng[0], *b = &cpu_eng[0];
        snprintf(t, sizeof t, "%s: prefill layer %lld colsum", k->label, (long long)l);
        tl_close_margin(t, a->colsum[l], b->colsum[l], Hq * L, 2e-5, 1e-4);
        snprintf(t, sizeof t, "%s: prefill layer %lld last %lld probability rows", k->label, (long long)l,
                 (long long)w);
        tl_close_margin(t, a->last_probs[l], b->last_probs[l], Hq * w * L, 2e-5, 1e-4);
        snprintf(t, sizeof t, "%s: prefill layer %lld last attention outputs", k->label, (long long)l);
        tl_close_margin(t, a->last_out[l], b->last_out[l], w * Hq * D, 1e-5, 1e-4);
        snprintf(t, sizeof t, "%s: prefill layer %lld last raw query", k->label, (long long)l);
        tl_close_margin(t, a->q_last[l], b->q_last[l], Hq * D, 1e-5, 1e-4);
    }
    snprintf(t, sizeof t, "%s: prefill logits of position L-1", k->label);
    tl_close_margin(t, gpu_eng[0].prefill_logits, cpu_eng[0].prefill_logits, c->vocab_size, 1e-4, 1e-4);
}

static void decode(DecodeEngine *eng, const char *name, const PolicyOptions *o, const Case *k, double *nll,
                   int64_t *reads) {
    Policy p[DOCS], *pp[DOCS];
    DecodeEngine *ep[DOCS];
    make_policies(p, name, o, k);
    for (int d = 0; d < DOCS; d++) pp[d] = &p[d], ep[d] = &eng[d], eng[d].kv_reads = 0;
    engine_decode_batch(ep, pp, (const int32_t *const *)doc, DOCS, k->S, nll);
    for (int d = 0; d < DOCS; d++) reads[d] = eng[d].kv_reads, policy_destroy(&p[d]);
}

static void check_policy(const char *name, PolicyOptions o, const char *variant, const Case *k) {
    int64_t n = DOCS * k->S, reads_c[DOCS], reads_g[DOCS], reads_g2[DOCS];
    double *nc = xmalloc(sizeof(double) * (size_t)n), *ng = xmalloc(sizeof(double) * (size_t)n);
    double *ng2 = xmalloc(sizeof(double) * (size_t)n);
    decode(cpu_eng, name, &o, k, nc, reads_c);
    decode(gpu_eng, name, &o, k, ng, reads_g);
    decode(gpu_eng, name, &o, k, ng2, reads_g2);
    float *fc = xmalloc(sizeof(float) * (size_t)n), *fg = xmalloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) fc[i] = (float)nc[i], fg[i] = (float)ng[i];
    char t[192];
    snprintf(t, sizeof t, "%s: %s%s NLLs on the GPU match the CPU engine", k->label, name, variant);
    tl_close_margin(t, fg, fc, n, 1e-4, 1e-4);
    snprintf(t, sizeof t, "%s: %s%s reads the same keys on the GPU", k->label, name, variant);
    tl_result(memcmp(reads_c, reads_g, sizeof reads_c) == 0, t, "document 0: %lld vs %lld cached entries",
              (long long)reads_g[0], (long long)reads_c[0]);
    snprintf(t, sizeof t, "%s: %s%s twice on the GPU gives the same bits", k->label, name, variant);
    tl_result(memcmp(ng, ng2, sizeof(double) * (size_t)n) == 0 && memcmp(reads_g, reads_g2, sizeof reads_g) == 0, t,
              "step 1: %.17g vs %.17g", ng[1], ng2[1]);
    free(nc), free(ng), free(ng2), free(fc), free(fg);
}

static void run_case(const Case *k) {
    DecoderConfig c;
    config_load(&c, "tiny");
    c.num_attention_heads = k->Hq, c.num_key_value_heads = k->Hkv, c.head_dim = k->D;
    c.initializer_range = 0.3;
    decoder_create(&model, &c);
    decoder_init_random(&model, 41);
    decode_model_cuda_create(&gpu, &model);
    Rng r;
    rng_seed(&r, 5);
    for (int d = 0; d < DOCS; d++) {
        doc[d] = xmalloc(sizeof(int32_t) * (size_t)(k->L + k->S));
        for (int64_t i = 0; i < k->L + k->S; i++) doc[d][i] = (int32_t)(rng_u64(&r) % (uint64_t)c.vocab_size);
        engine_create(&cpu_eng[d], &model, k->L + k->S, W);
        engine_create_cuda(&gpu_eng[d], &model, &gpu, k->L + k->S, W);
        engine_prefill(&cpu_eng[d], doc[d], k->L);
        engine_prefill(&gpu_eng[d], doc[d], k->L);
    }
    check_prefill(k);
    int count;
    const PolicyInfo *reg = policy_registry(&count);
    for (int i = 0; i < count; i++)
        check_policy(reg[i].name, policy_default_options(strcmp(reg[i].name, "restkv") == 0 ? 40 : k->L / 8), "", k);
    PolicyOptions fixed = policy_default_options(k->L / 8);
    fixed.fixed_stride = 3;
    check_policy("refreshkv", fixed, " (fixed stride 3)", k);
    for (int d = 0; d < DOCS; d++) engine_free(&cpu_eng[d]), engine_free(&gpu_eng[d]), free(doc[d]);
    decode_model_cuda_free(&gpu);
    decoder_free(&model);
}
#endif

int main(void) {
#ifdef KVCPT_CUDA
    if (cuda_device_count() == 0) {
        tl_skip("decode engine cuda vs cpu", "no CUDA device visible");
        return tl_finish();
    }
    /* label, Hq, Hkv, D, L (not a multiple of any tile), S */
    const Case cases[] = {
        {"gqa2 D8 L45", 4, 2, 8, 45, 7},
        {"gqa4 D16 L70", 8, 2, 16, 70, 6},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(&cases[i]);
#else
    tl_skip("decode engine cuda vs cpu", "the CUDA backend was not compiled");
#endif
    return tl_finish();
}
