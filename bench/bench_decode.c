/* `kvcpt bench decode`: decode time per token of the KV-cache policies at
 * long contexts, on the CPU or the GPU engine (the latency table of docs/eval.md).
 * One document of random tokens is prefilled at each context, then each
 * policy decodes --steps tokens after it:
 *   full        every cached key at every step
 *   streaming   a partial step every step: K keys (sinks + recent)
 *   refreshkv   fixed stride N: one full step in N, partial steps between
 * so full vs streaming is a full step vs a K-key partial step, and
 * refreshkv their mix. Weights are random (timing does not depend on them). */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/backend.h"
#include "../common/checked.h"
#include "../common/options.h"
#include "../common/rng.h"
#include "../common/util.h"
#include "../eval/decode_device.h"
#include "../eval/engine.h"
#include "../eval/option_limits.h"
#include "../kernels/blas_core.h"
#include "bench.h"

typedef struct {
    const char *preset, *device, *contexts, *budget;
    int64_t steps, fixed;
    int json;
    Decoder m;
    const Backend *be;
    const DecodeDevice *dev;     /* the backend's decode engine (the eval command's); NULL: the host's */
    void *dev_model;             /* its weights on the device (dev->model_upload) */
} BenchDecode;

/* Uniform weights of the initializer's standard deviation, filled in
 * parallel: an 8B preset in seconds (timings do not depend on the values). */
static void random_weights(Decoder *m) {
    float a = (float)m->cfg.initializer_range * 1.7320508f; /* U(-a, a) has std a / sqrt(3) */
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < m->layout.total; i++)
        m->params[i] = a * ((float)(hash_u64((uint64_t)i) >> 40) * (2.0f / 16777216.0f) - 1.0f);
    for (int i = 0; i < m->layout.n; i++) {
        const ParamTensor *t = &m->layout.t[i];
        if (t->kind == PT_ATTN_NORM || t->kind == PT_MLP_NORM || t->kind == PT_FINAL_NORM)
            for (int64_t j = 0; j < t->numel; j++) m->params[t->offset + j] = 1.0f;
    }
}

static void engine_for(BenchDecode *b, DecodeEngine *e, int64_t cap) {
    if (b->dev) {
        b->dev->engine_create(e, &b->m, b->dev_model, cap, EVAL_PREFILL_ROWS);
        return;
    }
    engine_create(e, &b->m, cap, EVAL_PREFILL_ROWS);
}

static void report(const BenchDecode *b, int64_t L, int64_t K, double prefill_s, const Policy *p, double ms,
                   double kv_bytes) {
    double gbs = kv_bytes / (ms * 1e6);
    if (b->json)
        printf("{\"bench\":\"decode\",\"device\":\"%s\",\"preset\":\"%s\",\"context\":%lld,\"budget\":%lld,"
               "\"policy\":\"%s\",\"steps\":%lld,\"threads\":%d,\"prefill_s\":%.3f,\"ms_per_token\":%.3f,"
               "\"kv_bytes_per_token\":%.0f,\"kv_gb_per_s\":%.2f,\"blas_core\":\"%s\"}\n",
               b->be->name, b->preset, (long long)L, (long long)K, p->label, (long long)b->steps, omp_get_max_threads(),
               prefill_s, ms, kv_bytes, gbs, blas_core_name());
    else printf("  %-34s %9.3f ms/token  %10.3f MB KV read/token  %7.2f GB/s\n", p->label, ms, kv_bytes / 1e6, gbs);
}

/* One context: prefill, then each policy over the same decode positions. */
static void bench_context(BenchDecode *b, int64_t L, Rng *r) {
    const DecoderConfig *c = &b->m.cfg;
    int64_t S = b->steps + 1, K = policy_budget(b->budget, L);
    int32_t *tok = xmalloc(sizeof(int32_t) * (size_t)(L + S));
    for (int64_t i = 0; i < L + S; i++) tok[i] = (int32_t)(rng_u64(r) % (uint64_t)c->vocab_size);
    DecodeEngine e;
    engine_for(b, &e, L + S);
    double t0 = now_seconds();
    engine_prefill(&e, tok, L);
    double prefill_s = now_seconds() - t0;
    if (!b->json)
        printf("context %lld, budget %lld, %s: prefill %.2f s; %lld decode steps per policy; BLAS: %s\n", (long long)L,
               (long long)K, b->be->name, prefill_s, (long long)b->steps, blas_core_summary());
    const char *names[] = {"full", "streaming", "refreshkv"};
    double *nll = xmalloc(sizeof(double) * (size_t)S);
    for (int i = 0; i < 3; i++) {
        PolicyOptions o = policy_default_options(K);
        o.fixed_stride = b->fixed;
        PolicyShape sh = {c->num_hidden_layers,
                          c->num_attention_heads,
                          c->num_key_value_heads,
                          c->head_dim,
                          c->hidden_size,
                          L,
                          EVAL_PREFILL_ROWS,
                          L + S,
                          NULL,
                          NULL}; /* the engine sets the RoPE tables */
        Policy p;
        policy_create(&p, names[i], &sh, &o);
        e.kv_reads = 0;
        t0 = now_seconds();
        engine_decode(&e, &p, tok, S, nll);
        double ms = 1e3 * (now_seconds() - t0) / (double)b->steps;
        report(b, L, K, prefill_s, &p, ms, engine_kv_bytes(&e) / (double)b->steps);
        policy_destroy(&p);
    }
    free(nll), free(tok);
    engine_free(&e);
}

/* The engine holds the prefill's L positions, then steps + 1 decoded
 * tokens: L + steps + 1 positions, all of which must be positions the model
 * has (max_position_embeddings), and whose sum must not wrap. */
static void check_positions(const BenchDecode *b, int64_t L, int64_t max_pos) {
    int64_t need;
    if (i64_add(b->steps, 2, &need) != 0 || need > max_pos)
        die("bench decode: --steps %lld is out of range: with at least one prefill position, it must be in [1, %lld] "
            "(preset '%s' has max_position_embeddings %lld; a context holds L + steps + 1 positions)",
            (long long)b->steps, (long long)(max_pos - 2), b->preset, (long long)max_pos);
    int64_t hi = max_pos - b->steps - 1;
    if (L < 1 || L > hi)
        die("bench decode: %s %lld is out of range: with --steps %lld it must be in [1, %lld] (preset '%s' has "
            "max_position_embeddings %lld; a context holds L + steps + 1 positions)",
            options_spelled("L"), (long long)L, (long long)b->steps, (long long)hi, b->preset, (long long)max_pos);
}

int bench_decode(int argc, char **argv) {
    BenchDecode b = {.preset = "small", .contexts = "1024", .budget = "L/8", .steps = 20, .fixed = 10};
    const Option opts[] = {
        {"preset", OPT_STRING, &b.preset, "NAME|DIR", "model preset or HF config"},
        {"device", OPT_STRING, &b.device, "cpu|cuda", "backend; absent: cuda when a GPU is visible"},
        {"L", OPT_STRING, &b.contexts, "L1,L2", "prefill lengths"},
        {"context", OPT_ALIAS, NULL, "L", NULL},
        {"K", OPT_STRING, &b.budget, "K|L/N", "keys per KV head of a partial step"},
        {"budget", OPT_ALIAS, NULL, "K", NULL},
        {"steps", OPT_INT, &b.steps, "N", "timed decode steps per policy (20: two refreshkv strides)"},
        {"refresh-fixed", OPT_INT, &b.fixed, "N", "refreshkv: one full step in N"},
        {"json", OPT_FLAG, &b.json, NULL, "one JSON object per policy and context"},
        {0},
    };
    if (options_parse("bench decode", "Decode ms/token per KV-cache policy at long contexts.", opts, argc, argv))
        return 0;
    KV_CHECK(b.steps >= 1, "bench decode: --steps must be >= 1 (got %lld)", (long long)b.steps);
    eval_check_strides("bench decode", "--refresh-fixed", &b.fixed, 1);
    b.be = backend_resolve(b.device);
    int64_t ctx[8];
    int n_ctx = options_int_list(b.contexts, ctx, 8, "L");
    DecoderConfig c;
    config_load(&c, b.preset);
    for (int i = 0; i < n_ctx; i++) check_positions(&b, ctx[i], c.max_position_embeddings);
    decoder_create(&b.m, &c);
    random_weights(&b.m);
    b.dev = b.be->decode;
    if (b.dev) {
        int64_t bytes;
        b.dev_model = b.dev->model_upload(&b.m, &bytes);
    }
    Rng r;
    rng_seed(&r, 3);
    for (int i = 0; i < n_ctx; i++) bench_context(&b, ctx[i], &r);
    if (b.dev) b.dev->model_free(b.dev_model);
    decoder_free(&b.m);
    return 0;
}
