/* `kvcpt bench model`: forward+backward throughput of a preset on the CPU
 * reference (the CUDA engine reports here once it exists). */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

#include "../common/backend.h"
#include "../common/options.h"
#include "../common/rng.h"
#include "../common/util.h"
#include "../train/bench.h"
#include "llama.h"

int bench_model(int argc, char **argv) {
    const char *preset = "small", *device = NULL, *agg = "max";
    int64_t batch = 1, seq = 1024, steps = 3, warmup = 1, L = 0, K = 0, pool = 7;
    int json = 0;
    const Option opts[] = {
        {"preset", OPT_STRING, &preset, "NAME|DIR", "model preset or HF config (default small)"},
        {"device", OPT_STRING, &device, "cpu|cuda", "backend (default: cuda when a GPU is visible)"},
        {"batch", OPT_INT, &batch, "B", "sequences per step (default 1)"},
        {"seq", OPT_INT, &seq, "T", "tokens per sequence (default 1024)"},
        {"L", OPT_INT, &L, "N", "RefreshKV prefill length; 0 = plain causal (default 0)"},
        {"K", OPT_INT, &K, "N", "selected keys per KV head (default L/8)"},
        {"pool", OPT_INT, &pool, "N", "selection max-pool kernel (default 7)"},
        {"agg", OPT_STRING, &agg, "max|mean|first", "GQA group aggregation (default max)"},
        {"steps", OPT_INT, &steps, "N", "timed steps (default 3)"},
        {"warmup", OPT_INT, &warmup, "N", "untimed steps first (default 1)"},
        {"json", OPT_FLAG, &json, NULL, "print one JSON object"},
        {0},
    };
    if (options_parse("bench model", "Forward+backward tokens/s of a model preset.", opts, argc, argv)) return 0;
    Device dev = backend_resolve(device);
    if (dev == DEVICE_CUDA) die("bench model --device cuda: the CUDA training engine is not built yet; use --device cpu");
    KV_CHECK(batch >= 1 && seq >= 2 && steps >= 1 && warmup >= 0, "bench model: --batch, --seq, --steps must be positive");
    LlamaConfig c;
    config_load(&c, preset);
    Llama m;
    llama_create(&m, &c);
    llama_init_random(&m, 1);
    if (L > 0) {
        RefreshMask mask = {1, L, K > 0 ? K : (L / 8 > 0 ? L / 8 : 1), pool, group_agg_parse(agg, "--agg")};
        llama_set_mask(&m, &mask, seq - L);
    }
    int32_t *tok = xmalloc(sizeof(int32_t) * (size_t)(2 * batch * seq)), *tgt = tok + batch * seq;
    Rng r;
    rng_seed(&r, 2);
    for (int64_t i = 0; i < batch * seq; i++) tok[i] = (int32_t)(rng_u64(&r) % (uint64_t)c.vocab_size);
    for (int64_t i = 0; i < batch * seq; i++) tgt[i] = (i % seq) + 1 < seq ? tok[i + 1] : -1;
    double t_fwd = 0, t_bwd = 0;
    float loss = 0;
    for (int64_t s = 0; s < warmup + steps; s++) {
        double t0 = now_seconds();
        loss = llama_forward(&m, tok, tgt, batch, seq);
        double t1 = now_seconds();
        llama_zero_grad(&m);
        llama_backward(&m);
        double t2 = now_seconds();
        if (s >= warmup) t_fwd += t1 - t0, t_bwd += t2 - t1;
    }
    double tokens = (double)(batch * seq * steps), secs = t_fwd + t_bwd;
    double tps = tokens / secs, gflops = llama_flops_per_token(&m, seq) * tps / 1e9;
    if (json)
        printf("{\"bench\":\"model\",\"device\":\"cpu\",\"preset\":\"%s\",\"params\":%lld,\"batch\":%lld,\"seq\":%lld,"
               "\"mask_L\":%lld,\"mask_K\":%lld,\"threads\":%d,\"steps\":%lld,\"tokens_per_s\":%.1f,"
               "\"forward_ms\":%.2f,\"backward_ms\":%.2f,\"gflops_per_s\":%.2f,\"loss\":%.5f}\n",
               preset, (long long)m.layout.total, (long long)batch, (long long)seq, (long long)L,
               (long long)(L > 0 ? m.mask.K : 0), omp_get_max_threads(), (long long)steps, tps,
               1e3 * t_fwd / (double)steps, 1e3 * t_bwd / (double)steps, gflops, loss);
    else
        printf("bench model: %s (%.2fM params) cpu, %d threads, batch %lld x seq %lld%s: %.1f tokens/s fwd+bwd "
               "(forward %.1f ms, backward %.1f ms per step, %.2f GFLOP/s)\n",
               preset, (double)m.layout.total / 1e6, omp_get_max_threads(), (long long)batch, (long long)seq,
               L > 0 ? " with RefreshKV mask" : "", tps, 1e3 * t_fwd / (double)steps, 1e3 * t_bwd / (double)steps,
               gflops);
    free(tok);
    llama_free(&m);
    return 0;
}
