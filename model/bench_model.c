/* `kvcpt bench model`: forward+backward throughput of a preset on the CPU
 * reference or the CUDA engine (model/llama_cuda.h, fp32 or --precision bf16). */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

#include "../common/backend.h"
#include "../common/options.h"
#include "../common/rng.h"
#include "../common/util.h"
#include "../train/bench.h"
#include "llama.h"
#include "llama_cuda.h"
#ifdef KVCPT_CUDA
#include "../kernels/cuda_device.h"
#endif

typedef struct {
    Llama m;
    LlamaCuda *gpu; /* NULL: the CPU reference */
} BenchModel;

/* Random parameters at the init's scale, filled in parallel: the serial
 * llama_init_random takes minutes at 8B, and a benchmark needs realistic
 * magnitudes, not the training init's exact values. */
static void bench_fill_params(Llama *m, uint64_t seed) {
    float std = (float)m->cfg.initializer_range;
    for (int i = 0; i < m->layout.n; i++) {
        const ParamTensor *t = &m->layout.t[i];
        float *p = m->params + t->offset;
        int is_norm = t->kind == PT_ATTN_NORM || t->kind == PT_MLP_NORM || t->kind == PT_FINAL_NORM;
        const int64_t chunk = 1 << 20, nchunks = (t->numel + chunk - 1) / chunk;
#pragma omp parallel for schedule(static)
        for (int64_t c = 0; c < nchunks; c++) {
            Rng r;
            rng_seed(&r, seed ^ ((uint64_t)i << 40) ^ (uint64_t)c);
            int64_t end = (c + 1) * chunk < t->numel ? (c + 1) * chunk : t->numel;
            for (int64_t j = c * chunk; j < end; j++) p[j] = is_norm ? 1.0f : std * rng_normal(&r);
        }
    }
}

/* One forward+backward; adds its seconds to *fwd and *bwd. */
static float timed_pass(BenchModel *b, const int32_t *tok, const int32_t *tgt, int64_t B, int64_t T, double *fwd,
                        double *bwd) {
    double t0 = now_seconds();
    float loss;
#ifdef KVCPT_CUDA
    if (b->gpu) { /* forward returns after copying the losses back: synchronized */
        loss = llama_cuda_forward(b->gpu, tok, tgt, B, T);
        double t1 = now_seconds();
        llama_cuda_zero_grad(b->gpu);
        llama_cuda_backward(b->gpu);
        cuda_synchronize();
        *fwd += t1 - t0, *bwd += now_seconds() - t1;
        return loss;
    }
#endif
    loss = llama_forward(&b->m, tok, tgt, B, T);
    double t1 = now_seconds();
    llama_zero_grad(&b->m);
    llama_backward(&b->m);
    *fwd += t1 - t0, *bwd += now_seconds() - t1;
    return loss;
}

int bench_model(int argc, char **argv) {
    const char *preset = "small", *device = NULL, *agg = "max", *precision = "fp32";
    int64_t batch = 1, seq = 1024, steps = 3, warmup = 1, L = 0, K = 0, pool = 7;
    int json = 0, recompute = 0;
    const Option opts[] = {
        {"preset", OPT_STRING, &preset, "NAME|DIR", "model preset or HF config"},
        {"device", OPT_STRING, &device, "cpu|cuda", "backend; absent: cuda when a GPU is visible"},
        {"precision", OPT_STRING, &precision, "fp32|bf16", "CUDA engine: bf16 device matrices"},
        {"batch", OPT_INT, &batch, "B", "sequences per step"},
        {"seq", OPT_INT, &seq, "T", "tokens per sequence"},
        {"L", OPT_INT, &L, "N", "RefreshKV prefill length; 0 = plain causal"},
        {"K", OPT_INT, &K, "N", "selected keys per KV head; 0: L/8"},
        {"pool", OPT_INT, &pool, "N", "selection max-pool kernel"},
        {"agg", OPT_STRING, &agg, "max|mean|first", "GQA group aggregation"},
        {"steps", OPT_INT, &steps, "N", "timed steps"},
        {"warmup", OPT_INT, &warmup, "N", "untimed steps first"},
        {"recompute", OPT_FLAG, &recompute, NULL, "CUDA engine: recompute each layer's activations in backward"},
        {"json", OPT_FLAG, &json, NULL, "print one JSON object"},
        {0},
    };
    if (options_parse("bench model", "Forward+backward tokens/s of a model preset.", opts, argc, argv)) return 0;
    Device dev = backend_resolve(device);
    LlamaCudaPrecision prec = llama_cuda_precision_parse(precision, "bench model --precision");
    KV_CHECK(batch >= 1 && seq >= 2 && steps >= 1 && warmup >= 0, "bench model: --batch, --seq, --steps must be positive");
    LlamaConfig c;
    config_load(&c, preset);
    BenchModel b = {0};
    llama_create(&b.m, &c);
    double t_setup = now_seconds();
    bench_fill_params(&b.m, 1);
    if (L > 0) {
        RefreshMask mask = {1, L, K > 0 ? K : (L / 8 > 0 ? L / 8 : 1), pool, group_agg_parse(agg, "--agg")};
        llama_set_mask(&b.m, &mask, seq - L);
    }
#ifdef KVCPT_CUDA
    if (dev == DEVICE_CUDA) {
        b.gpu = xcalloc(1, sizeof *b.gpu);
        llama_cuda_create(b.gpu, &c, recompute, prec);
        llama_cuda_upload_params(b.gpu, b.m.params);
        if (L > 0) llama_cuda_set_mask(b.gpu, &b.m.mask, b.m.mask_S);
    }
#endif
    fprintf(stderr, "bench model: set up in %.1f s\n", now_seconds() - t_setup);
    int32_t *tok = xmalloc(sizeof(int32_t) * (size_t)(2 * batch * seq)), *tgt = tok + batch * seq;
    Rng r;
    rng_seed(&r, 2);
    for (int64_t i = 0; i < batch * seq; i++) tok[i] = (int32_t)(rng_u64(&r) % (uint64_t)c.vocab_size);
    for (int64_t i = 0; i < batch * seq; i++) tgt[i] = (i % seq) + 1 < seq ? tok[i + 1] : -1;
    double t_fwd = 0, t_bwd = 0;
    float loss = 0;
    for (int64_t s = 0; s < warmup; s++) {
        double dummy_f = 0, dummy_b = 0;
        timed_pass(&b, tok, tgt, batch, seq, &dummy_f, &dummy_b);
        fprintf(stderr, "bench model: warm-up step %lld/%lld, %.1f s\n", (long long)s + 1, (long long)warmup, dummy_f + dummy_b);
    }
    for (int64_t s = 0; s < steps; s++) {
        loss = timed_pass(&b, tok, tgt, batch, seq, &t_fwd, &t_bwd);
        fprintf(stderr, "bench model: step %lld/%lld, %.1f s so far\n", (long long)s + 1, (long long)steps, t_fwd + t_bwd);
    }
    const char *dname = backend_name(dev);
    /* engine_mb: what the engine counted; device_used_mb: what the driver says is
     * in use after the timed steps (adds cuBLASLt workspaces and the context) */
    double engine_mb = 0, device_used_mb = 0;
#ifdef KVCPT_CUDA
    if (b.gpu) {
        int64_t free_b = 0, total_b = 0;
        cuda_memory_info(&free_b, &total_b);
        engine_mb = (double)llama_cuda_bytes(b.gpu) / 1048576.0;
        device_used_mb = (double)(total_b - free_b) / 1048576.0;
    }
#endif
    double tokens = (double)(batch * seq * steps), secs = t_fwd + t_bwd;
    double tps = tokens / secs, gflops = llama_flops_per_token(&b.m, seq) * tps / 1e9;
    if (json)
        printf("{\"bench\":\"model\",\"device\":\"%s\",\"precision\":\"%s\",\"recompute\":%d,\"engine_mb\":%.1f,\"device_used_mb\":%.1f,\"preset\":\"%s\",\"params\":%lld,\"batch\":%lld,\"seq\":%lld,"
               "\"mask_L\":%lld,\"mask_K\":%lld,\"threads\":%d,\"steps\":%lld,\"tokens_per_s\":%.1f,"
               "\"forward_ms\":%.2f,\"backward_ms\":%.2f,\"gflops_per_s\":%.2f,\"loss\":%.5f}\n",
               dname, llama_cuda_precision_name(prec), recompute, engine_mb, device_used_mb, preset, (long long)b.m.layout.total, (long long)batch, (long long)seq, (long long)L,
               (long long)(L > 0 ? b.m.mask.K : 0), omp_get_max_threads(), (long long)steps, tps,
               1e3 * t_fwd / (double)steps, 1e3 * t_bwd / (double)steps, gflops, loss);
    else
        printf("bench model: %s (%.2fM params) %s%s, %d threads, batch %lld x seq %lld%s: %.1f tokens/s fwd+bwd "
               "(forward %.1f ms, backward %.1f ms per step, %.2f GFLOP/s)\n",
               preset, (double)b.m.layout.total / 1e6, dname,
               dev == DEVICE_CUDA && prec == LLAMA_CUDA_BF16_WEIGHTS ? " (bf16 weights)" : "", omp_get_max_threads(), (long long)batch, (long long)seq,
               L > 0 ? " with RefreshKV mask" : "", tps, 1e3 * t_fwd / (double)steps, 1e3 * t_bwd / (double)steps,
               gflops);
    free(tok);
#ifdef KVCPT_CUDA
    if (b.gpu) llama_cuda_free(b.gpu);
#endif
    free(b.gpu);
    llama_free(&b.m);
    return 0;
}
