/* Invariants of the decode engine and policies on a tiny random model:
 * full = exp(training forward loss) over the same targets; a budget covering
 * the whole context makes every policy equal full; refreshkv that never
 * refreshes equals snapkv; refreshkv --fixed-stride 1 equals full; the
 * evicting policies change the NLLs under a real budget. And the prefill
 * statistics the fused attention writes (attention_forward_stats_cpu) match
 * the separate scalar softmax (attention_prefill_stats_cpu), with out and lse
 * within rounding of attention_forward_cpu. The model's invariants hold for
 * Qwen2 too (q/k/v biases, drawn non-zero). */
#include <math.h>
#include <string.h>

#include "../../common/rng.h"
#include "../../common/util.h"
#include "../../eval/engine.h"
#include "../../kernels/attention_decode.h"
#include "../testlib.h"

#define L 48
#define S 9

static Decoder model;
static DecodeEngine eng;
static int32_t doc[L + S];

static void run(const char *name, PolicyOptions o, double *nll) {
    PolicyShape sh = {model.cfg.num_hidden_layers,
                      model.cfg.num_attention_heads,
                      model.cfg.num_key_value_heads,
                      model.cfg.head_dim,
                      model.cfg.hidden_size,
                      L,
                      32,
                      L + S,
                      NULL,
                      NULL};
    Policy p;
    policy_create(&p, name, &sh, &o);
    engine_decode(&eng, &p, doc, S, nll);
    policy_destroy(&p);
}

static double mean(const double *x, int n) {
    double s = 0;
    for (int i = 0; i < n; i++) s += x[i];
    return s / n;
}

static int same(const double *a, const double *b, int n) { return memcmp(a, b, sizeof(double) * (size_t)n) == 0; }

/* attention_forward_stats_cpu on random q, k, v of T positions (GQA Hq/Hkv,
 * window W): out and lse within rounding of attention_forward_cpu's; colsum and last
 * within float rounding of attention_prefill_stats_cpu (a probability
 * differs by a few ulp: the softmax's exp, the dot order; colsum adds T of
 * them); last zero past each query exactly as the oracle writes it. */
static void check_stats(int64_t T, int64_t Hq, int64_t Hkv, int64_t D, int64_t W, Rng *r) {
    int64_t nq = T * Hq * D, nk = T * Hkv * D, Wc = W < T ? W : T;
    float *q = xmalloc(sizeof(float) * (size_t)nq), *k = xmalloc(sizeof(float) * (size_t)nk);
    float *v = xmalloc(sizeof(float) * (size_t)nk);
    for (int64_t i = 0; i < nq; i++) q[i] = 2.0f * rng_normal(r);
    for (int64_t i = 0; i < nk; i++) k[i] = rng_normal(r), v[i] = rng_normal(r);
    float *out = xmalloc(sizeof(float) * (size_t)nq), *ref_out = xmalloc(sizeof(float) * (size_t)nq);
    float *lse = xmalloc(sizeof(float) * (size_t)(Hq * T)), *ref_lse = xmalloc(sizeof(float) * (size_t)(Hq * T));
    float *cs = xmalloc(sizeof(float) * (size_t)(Hq * T)), *ref_cs = xmalloc(sizeof(float) * (size_t)(Hq * T));
    float *last = xmalloc(sizeof(float) * (size_t)(Hq * Wc * T)),
          *ref_last = xmalloc(sizeof(float) * (size_t)(Hq * Wc * T));
    for (int64_t i = 0; i < Hq * Wc * T; i++) last[i] = NAN; /* every entry must be written */
    RefreshMask off = {0};
    attention_forward_cpu(ref_out, ref_lse, q, k, v, NULL, 1, T, Hq, Hkv, D, &off);
    attention_prefill_stats_cpu(ref_cs, ref_last, q, k, T, Hq, Hkv, D, W);
    AttentionStats st = {cs, last, W};
    attention_forward_stats_cpu(out, lse, &st, q, k, v, T, Hq, Hkv, D);
    char name[160];
    /* sgemm blocks against the row kernel: the same sums in another order */
    snprintf(name, sizeof name,
             "fused stats T %lld, Hq %lld, Hkv %lld, D %lld, W %lld: out within rounding of "
             "attention_forward_cpu",
             (long long)T, (long long)Hq, (long long)Hkv, (long long)D, (long long)W);
    tl_close(name, out, ref_out, nq, 1e-5, 1e-4);
    snprintf(name, sizeof name, "fused stats T %lld: lse within rounding of attention_forward_cpu", (long long)T);
    tl_close(name, lse, ref_lse, Hq * T, 1e-5, 1e-5);
    snprintf(name, sizeof name, "fused stats T %lld: colsum within rounding of the scalar softmax's", (long long)T);
    tl_close(name, cs, ref_cs, Hq * T, 1e-6 * (double)T, 1e-5);
    snprintf(name, sizeof name, "fused stats T %lld: the last %lld probability rows within rounding", (long long)T,
             (long long)Wc);
    tl_close(name, last, ref_last, Hq * Wc * T, 1e-7, 1e-5);
    /* colsum of a head sums to T (every query's probabilities sum to 1) */
    double worst = 0;
    for (int64_t h = 0; h < Hq; h++) {
        double sum = 0;
        for (int64_t t = 0; t < T; t++) sum += cs[h * T + t];
        worst = fmax(worst, fabs(sum - (double)T));
    }
    snprintf(name, sizeof name, "fused stats T %lld: each head's colsum sums to T", (long long)T);
    tl_result(worst <= 1e-5 * (double)T, name, "worst |sum - T| %.3g", worst);
    free(q), free(k), free(v), free(out), free(ref_out), free(lse), free(ref_lse), free(cs), free(ref_cs), free(last);
    free(ref_last);
}

/* The model invariants on the tiny preset as family arch (Qwen2's with
 * non-zero q/k/v biases, which the decode step adds as the prefill does);
 * prefix names the family in the checks' names. */
static char prefix[32];

static const char *nm(const char *name) {
    static char buf[8][192];
    static int k;
    k = (k + 1) % 8;
    snprintf(buf[k], sizeof buf[k], "%s%s", prefix, name);
    return buf[k];
}

static void model_invariants(ArchId arch) {
    snprintf(prefix, sizeof prefix, "%s", arch == ARCH_LLAMA ? "" : "[qwen2] ");
    DecoderConfig c;
    config_load(&c, "tiny");
    c.arch = arch;
    c.initializer_range = 0.3;
    decoder_create(&model, &c);
    decoder_init_random(&model, 17);
    Rng br; /* biases start at zero: drawn, so that every path must add them */
    rng_seed(&br, 23);
    for (int i = 0; i < model.layout.n; i++) {
        const ParamTensor *t = &model.layout.t[i];
        if (t->kind == PT_BQ || t->kind == PT_BK || t->kind == PT_BV)
            for (int64_t j = 0; j < t->numel; j++) model.params[t->offset + j] = 0.5f * rng_normal(&br);
    }
    Rng r;
    rng_seed(&r, 3);
    for (int i = 0; i < L + S; i++) doc[i] = (int32_t)(rng_u64(&r) % (uint64_t)c.vocab_size);
    engine_create(&eng, &model, L + S, 32);
    engine_prefill(&eng, doc, L);

    double full[S], x[S];
    run("full", policy_default_options(L / 8), full);
    /* training forward over the same targets: positions L-1 .. L+S-2 */
    int32_t tgt[L + S - 1];
    for (int t = 0; t < L + S - 1; t++) tgt[t] = t >= L - 1 ? doc[t + 1] : -1;
    float loss = decoder_forward(&model, doc, tgt, 1, L + S - 1);
    double ppl_full = exp(mean(full, S)), ppl_train = exp((double)loss);
    tl_result(fabs(ppl_full - ppl_train) <= 1e-5 * ppl_train, nm("full PPL equals exp(training forward loss)"),
              "decode %.9f vs forward %.9f", ppl_full, ppl_train);
    /* top-1 of each scored token against the argmax of the training
     * forward's logits; targets set to each row's argmax make every token a hit */
    {
        int64_t V = c.vocab_size;
        float *lg = xmalloc(sizeof(float) * (size_t)(S * V));
        decoder_logits(&model, lg, L - 1, S);
        int32_t argmax_doc[L + S];
        memcpy(argmax_doc, doc, sizeof doc);
        decoder_forward(&model, doc, tgt, 1, L + S - 1);
        int hits_want = 0, agree = 1;
        uint8_t top1[S], top1_argmax[S];
        double nll_tmp[S];
        for (int i = 0; i < S; i++) hits_want += argmax_of(lg + i * V, V) == doc[L + i];
        Policy p;
        PolicyShape sh = {c.num_hidden_layers,
                          c.num_attention_heads,
                          c.num_key_value_heads,
                          c.head_dim,
                          c.hidden_size,
                          L,
                          32,
                          L + S,
                          NULL,
                          NULL};
        PolicyOptions o = policy_default_options(L / 8);
        policy_create(&p, "full", &sh, &o);
        DecodeEngine *ep = &eng;
        Policy *pp = &p;
        const int32_t *tp = doc;
        engine_decode_batch_top1(&ep, &pp, &tp, 1, S, nll_tmp, top1);
        policy_destroy(&p);
        int hits = 0;
        for (int i = 0; i < S; i++) hits += top1[i], agree &= top1[i] == (argmax_of(lg + i * V, V) == doc[L + i]);
        tl_result(agree, nm("top-1 hits of full decode equal the training forward's argmax hits"), "%d vs %d of %d",
                  hits, hits_want, S);
        /* a greedy continuation (each scored token the argmax given the ones
         * before it, from the training forward): every step is a hit */
        for (int i = 0; i < S; i++) {
            decoder_forward(&model, argmax_doc, NULL, 1, L + i);
            decoder_logits(&model, lg, L + i - 1, 1);
            argmax_doc[L + i] = (int32_t)argmax_of(lg, V);
        }
        DecodeEngine e2;
        engine_create(&e2, &model, L + S, 32);
        engine_prefill(&e2, argmax_doc, L);
        policy_create(&p, "full", &sh, &o);
        ep = &e2, tp = argmax_doc;
        engine_decode_batch_top1(&ep, &pp, &tp, 1, S, nll_tmp, top1_argmax);
        policy_destroy(&p);
        engine_free(&e2);
        hits = 0;
        for (int i = 0; i < S; i++) hits += top1_argmax[i];
        tl_result(hits == S, nm("top-1: a greedy continuation is a hit at every step"), "%d of %d hits", hits, S);
        free(lg);
    }

    const char *names[] = {"streaming", "snapkv", "refreshkv", "h2o", "tova", "restkv", "kvec"};
    for (int i = 0; i < (int)(sizeof names / sizeof names[0]); i++) {
        char t[96];
        run(names[i], policy_default_options(L + S), x);
        snprintf(t, sizeof t, "%sbudget >= context: %s equals full", prefix, names[i]);
        tl_result(same(x, full, S), t, "PPL %.6f vs %.6f", exp(mean(x, S)), ppl_full);
    }
    PolicyOptions never = policy_default_options(L / 8), snap = policy_default_options(L / 8);
    never.qc_stride = 0;
    snap.snapkv_keep_window = 0; /* RefreshKV's C_p is the top K of the last query's row, window included */
    double y[S];
    run("refreshkv", never, x);
    run("snapkv", snap, y);
    tl_result(same(x, y, S), nm("refreshkv that never refreshes equals snapkv"), "PPL %.6f vs %.6f", exp(mean(x, S)),
              exp(mean(y, S)));
    tl_result(!same(y, full, S), nm("snapkv with K = L/8 differs from full"),
              "identical NLLs: the budget had no effect");
    /* the new policies under a real budget: valid choices (the engine checks
     * them) and an effect on the NLLs; restkv needs K > S_w = 32 to score */
    const char *evictors[] = {"h2o", "tova", "restkv", "kvec"};
    for (int i = 0; i < 4; i++) {
        char t[96];
        run(evictors[i], policy_default_options(strcmp(evictors[i], "restkv") == 0 ? 40 : L / 8), x);
        snprintf(t, sizeof t, "%s%s with a budget below the context differs from full", prefix, evictors[i]);
        tl_result(!same(x, full, S) && isfinite(mean(x, S)), t, "PPL %.6f vs %.6f", exp(mean(x, S)), ppl_full);
    }
    PolicyOptions every = policy_default_options(L / 8);
    every.fixed_stride = 1;
    run("refreshkv", every, x);
    tl_result(same(x, full, S), nm("refreshkv --fixed-stride 1 equals full"), "PPL %.6f vs %.6f", exp(mean(x, S)),
              ppl_full);
    engine_free(&eng);
    decoder_free(&model);
}

int main(void) {
    Rng sr;
    rng_seed(&sr, 5);
    /* rows not divisible by the blocks, W above T, a single position, GQA 9/3 */
    check_stats(131, 4, 2, 16, 32, &sr);
    check_stats(20, 4, 1, 8, 32, &sr);
    check_stats(1, 2, 2, 8, 4, &sr);
    check_stats(300, 9, 3, 64, 32, &sr);
    check_stats(1100, 9, 3, 64, 32, &sr); /* several 256-row sgemm blocks per row block */
    model_invariants(ARCH_LLAMA);
    model_invariants(ARCH_QWEN2);
    return tl_finish();
}
