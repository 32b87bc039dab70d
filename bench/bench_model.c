/* `kvcpt bench model`: forward+backward throughput of a preset on the CPU
 * reference or the CUDA engine (model/decoder_cuda.h, fp32 or --precision bf16).
 * On the CPU it then runs the same config, shape and step in PyTorch
 * (scripts/bench_torch_model.py: the transformers class of the config's
 * family, LlamaForCausalLM or MistralForCausalLM, eager mode, fp32, kvcpt's
 * thread count) and prints both rates and their ratio. */
#include <jansson.h>
#include <limits.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/backend.h"
#include "../common/checked.h"
#include "../common/options.h"
#include "../common/rng.h"
#include "../common/subprocess.h"
#include "../common/util.h"
#include "../kernels/blas_core.h"
#include "../model/decoder.h"
#include "../model/decoder_cuda.h"
#include "bench.h"
#include "bench_backend.h"

typedef struct {
    Decoder m;
    DecoderCuda *gpu;            /* NULL: the CPU reference */
    const BenchModelDevice *cu;  /* the device half; NULL on the host */
} BenchModel;

/* Random parameters at the init's scale, filled in parallel: the serial
 * decoder_init_random takes minutes at 8B, and a benchmark needs realistic
 * magnitudes, not the training init's exact values. */
static void bench_fill_params(Decoder *m, uint64_t seed) {
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
    if (b->gpu) return b->cu->timed_pass(b->gpu, tok, tgt, B, T, fwd, bwd);
    /* as the CPU trainer's steps: zeroed before the training forward, which
     * adds the head's gradient (the logits once), so the forward's time
     * includes the head's backward products */
    double t0 = now_seconds();
    decoder_zero_grad(&b->m);
    float loss = decoder_forward_train(&b->m, tok, tgt, B, T);
    double t1 = now_seconds();
    decoder_backward(&b->m);
    *fwd += t1 - t0, *bwd += now_seconds() - t1;
    return loss;
}

/* The PyTorch peer's result; tokens_per_s < 0: it did not run, why says so. */
typedef struct {
    double tokens_per_s, forward_ms, backward_ms, loss;
    int64_t params;
    char version[64], cls[64], why[9000];
} TorchPeer;

/* Runs scripts/bench_torch_model.py on the config c with kvcpt's shape, step
 * counts, mask and thread count. */
static void run_torch_peer(TorchPeer *p, const char *python, const char *attn, const DecoderConfig *c, int64_t batch,
                           int64_t seq, int64_t steps, int64_t warmup, const RefreshMask *mask, int threads) {
    memset(p, 0, sizeof *p);
    p->tokens_per_s = -1;
    char script[4200], cfg_path[] = "/tmp/kvcpt_bench_model_cfg_XXXXXX",
                       log_path[] = "/tmp/kvcpt_bench_model_log_XXXXXX";
    exe_dir_path(script, sizeof script, "scripts/bench_torch_model.py");
    int fd = mkstemp(cfg_path);
    KV_CHECK(fd >= 0, "bench model: cannot create a temporary file %s", cfg_path);
    char *text = config_to_json(c);
    FILE *f = fdopen(fd, "w");
    KV_CHECK(f != NULL && fputs(text, f) != EOF, "bench model: writing %s", cfg_path);
    fclose_check(f, cfg_path);
    free(text);
    int log_fd = mkstemp(log_path);
    KV_CHECK(log_fd >= 0, "bench model: cannot create a temporary file %s", log_path);
    close(log_fd);
    char sb[24], st[24], ss[24], sw[24], sth[24], sl[24], sk[24], sp[24];
    snprintf(sb, sizeof sb, "%lld", (long long)batch);
    snprintf(st, sizeof st, "%lld", (long long)seq);
    snprintf(ss, sizeof ss, "%lld", (long long)steps);
    snprintf(sw, sizeof sw, "%lld", (long long)warmup);
    snprintf(sth, sizeof sth, "%d", threads);
    snprintf(sl, sizeof sl, "%lld", (long long)(mask->enabled ? mask->L : 0));
    snprintf(sk, sizeof sk, "%lld", (long long)(mask->enabled ? mask->K : 0));
    snprintf(sp, sizeof sp, "%lld", (long long)mask->pool_kernel);
    const char *argv[] = {python,      script, "--config", cfg_path, "--batch",  sb,
                          "--seq",     st,     "--steps",  ss,       "--warmup", sw,
                          "--threads", sth,    "--attn",   attn,     "--mask-L", sl,
                          "--mask-K",  sk,     "--pool",   sp,       "--agg",    group_agg_name(mask->agg),
                          NULL};
    fprintf(stderr, "bench model: running the PyTorch peer (%s %s)\n", python, script);
    char line[4096], err[512];
    int rc = subprocess_run(argv, NULL, log_path, line, sizeof line);
    subprocess_last_line(log_path, err, sizeof err);
    unlink(cfg_path);
    unlink(log_path);
    if (rc != 0) {
        if (rc < 0 && !subprocess_found(python))
            snprintf(p->why, sizeof p->why, "%s not found (run 'make setup', or pass --python)", python);
        else snprintf(p->why, sizeof p->why, "%s %s failed%s%s", python, script, err[0] ? ": " : "", err);
        return;
    }
    json_t *res = json_loads(line, 0, NULL);
    json_t *tps = res ? json_object_get(res, "tokens_per_s") : NULL;
    if (!json_is_number(tps) || json_number_value(tps) <= 0) {
        snprintf(p->why, sizeof p->why, "%s printed no tokens_per_s", script);
        json_decref(res);
        return;
    }
    p->tokens_per_s = json_number_value(tps);
    p->forward_ms = json_number_value(json_object_get(res, "forward_ms"));
    p->backward_ms = json_number_value(json_object_get(res, "backward_ms"));
    p->loss = json_number_value(json_object_get(res, "loss"));
    p->params = json_integer_value(json_object_get(res, "params"));
    const char *v = json_string_value(json_object_get(res, "torch"));
    snprintf(p->version, sizeof p->version, "%s", v ? v : "?");
    const char *cls = json_string_value(json_object_get(res, "class"));
    snprintf(p->cls, sizeof p->cls, "%s", cls ? cls : "?");
    json_decref(res);
}

/* s as a JSON string literal (escaped); the caller frees it. */
static char *json_quote(const char *s) {
    json_t *j = json_string(s);
    char *out = j ? json_dumps(j, JSON_ENCODE_ANY) : NULL;
    json_decref(j);
    return out ? out : xstrdup("\"?\"");
}

/* The counts against the model and each other, before any of them sizes a
 * buffer: a sequence holds at most max_position_embeddings positions; a
 * step's batch x seq tokens stay within int32 (2^31 tokens, already more
 * host memory than a machine has, and the bound that keeps every per-step
 * buffer's byte count inside int64 for configs that pass config_validate);
 * the RefreshKV mask needs 0 <= K <= L < seq and an odd pool kernel. */
static void check_counts(const DecoderConfig *c, const char *preset, int64_t batch, int64_t seq, int64_t L, int64_t K,
                         int64_t pool) {
    int64_t max_pos = c->max_position_embeddings, tokens;
    if (seq < 2 || seq > max_pos)
        die("bench model: --seq %lld is out of range: it must be in [2, %lld] (preset '%s' has max_position_embeddings "
            "%lld)",
            (long long)seq, (long long)max_pos, preset, (long long)max_pos);
    if (batch < 1 || i64_mul(batch, seq, &tokens) != 0 || tokens > INT32_MAX)
        die("bench model: --batch %lld is out of range: with --seq %lld it must be in [1, %lld] (batch x seq tokens "
            "per step at most %d)",
            (long long)batch, (long long)seq, (long long)(INT32_MAX / seq), INT32_MAX);
    if (L < 0 || L >= seq)
        die("bench model: --L %lld is out of range: with --seq %lld it must be in [0, %lld] (0: plain causal)",
            (long long)L, (long long)seq, (long long)(seq - 1));
    if (K < 0 || K > L)
        die("bench model: --K %lld is out of range: with --L %lld it must be in [0, %lld] (0: L/8)", (long long)K,
            (long long)L, (long long)L);
    if (pool < 1 || pool % 2 == 0)
        die("bench model: --pool %lld is out of range: it must be odd and >= 1", (long long)pool);
}

int bench_model(int argc, char **argv) {
    const char *preset = "small", *device = NULL, *agg = "max", *precision = "fp32";
    int64_t batch = 1, seq = 1024, steps = 3, warmup = 1, L = 0, K = 0, pool = 7;
    const char *python = NULL, *torch_attn = "sdpa";
    int json = 0, no_peers = 0;
    const char *recompute_s = "none";
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
        {"recompute", OPT_STRING, &recompute_s, "none|attn|full",
         "CUDA engine: what the backward reruns (attn: the norms and the MLP's gate|up product and swiglu; full: "
         "each layer's forward)"},
        {"no-peers", OPT_FLAG, &no_peers, NULL, "skip the PyTorch peer (it runs on the CPU unless this is given)"},
        {"python", OPT_STRING, &python, "PATH",
         "the peer's interpreter; absent: $KVCPT_PYTHON, else third_party/venv/bin/python"},
        {"torch-attn", OPT_STRING, &torch_attn, "sdpa|eager", "the peer's transformers attention"},
        {"json", OPT_FLAG, &json, NULL, "print one JSON object"},
        {0},
    };
    if (options_parse("bench model", "Forward+backward tokens/s of a model preset; on the CPU beside PyTorch's.", opts,
                      argc, argv))
        return 0;
    const Backend *be = backend_resolve(device);
    DecoderCudaPrecision prec = decoder_cuda_precision_parse(precision, "bench model --precision");
    KV_CHECK(batch >= 1 && seq >= 2 && steps >= 1 && warmup >= 0,
             "bench model: --batch, --seq, --steps must be positive");
    KV_CHECK(strcmp(torch_attn, "sdpa") == 0 || strcmp(torch_attn, "eager") == 0,
             "bench model: --torch-attn must be sdpa or eager (got '%s')", torch_attn);
    char default_python[4200];
    if (!python) python = getenv("KVCPT_PYTHON");
    if (!python || !*python) {
        exe_dir_path(default_python, sizeof default_python, "third_party/venv/bin/python");
        python = default_python;
    }
    DecoderConfig c;
    config_load(&c, preset);
    check_counts(&c, preset, batch, seq, L, K, pool);
    BenchModel b = {0};
    b.cu = be->kind == BACKEND_ACCEL ? bench_hooks(be, "bench model")->model : NULL;
    decoder_create(&b.m, &c);
    double t_setup = now_seconds();
    bench_fill_params(&b.m, 1);
    if (L > 0) {
        RefreshMask mask = {.enabled = 1,
                            .L = L,
                            .K = K > 0 ? K : (L / 8 > 0 ? L / 8 : 1),
                            .pool_kernel = pool,
                            .agg = group_agg_parse(agg, "--agg"),
                            .S = seq - L};
        decoder_set_mask(&b.m, &mask);
    }
    DecoderRecompute recompute = decoder_recompute_parse(recompute_s, "bench model --recompute");
    if (b.cu) b.gpu = b.cu->create(&b.m, recompute, prec, L > 0 ? &b.m.mask : NULL);
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
        fprintf(stderr, "bench model: warm-up step %lld/%lld, %.1f s\n", (long long)s + 1, (long long)warmup,
                dummy_f + dummy_b);
    }
    for (int64_t s = 0; s < steps; s++) {
        loss = timed_pass(&b, tok, tgt, batch, seq, &t_fwd, &t_bwd);
        fprintf(stderr, "bench model: step %lld/%lld, %.1f s so far\n", (long long)s + 1, (long long)steps,
                t_fwd + t_bwd);
    }
    const char *dname = be->name;
    /* engine_mb: what the engine counted; device_used_mb: what the driver says is
     * in use after the timed steps (adds cuBLASLt workspaces and the context) */
    double engine_mb = 0, device_used_mb = 0;
    if (b.gpu) b.cu->memory_mb(b.gpu, &engine_mb, &device_used_mb);
    double tokens = (double)(batch * seq * steps), secs = t_fwd + t_bwd;
    double tps = tokens / secs, gflops = decoder_flops_per_token(&b.m, seq) * tps / 1e9;
    /* model FLOPs of one timed step (batch x seq tokens), by kind */
    FlopSplit per_tok = decoder_flops_split(&b.m, seq);
    double step_tokens = (double)(batch * seq), matmul_flops = per_tok.matmul * step_tokens,
           attn_flops = per_tok.attention * step_tokens;
    int64_t params = b.m.layout.total;
    RefreshMask mask = b.m.mask;
    free(tok);
    if (b.gpu) b.cu->destroy(b.gpu);
    decoder_free(&b.m); /* before the peer runs: the two never hold memory at once */
    int threads = omp_get_max_threads(), peer = !no_peers && be->kind == BACKEND_HOST;
    TorchPeer tp = {.tokens_per_s = -1};
    if (peer) {
        run_torch_peer(&tp, python, torch_attn, &c, batch, seq, steps, warmup, &mask, threads);
        if (tp.tokens_per_s > 0 && tp.params != params)
            fprintf(stderr, "bench model: warning: the PyTorch model has %lld parameters, kvcpt's %lld\n",
                    (long long)tp.params, (long long)params);
    }
    const char *peer_attn = L > 0 ? "sdpa with the RefreshKV mask" : torch_attn;
    if (json) {
        char *qpreset = json_quote(preset);
        printf("{\"bench\":\"model\",\"device\":\"%s\",\"precision\":\"%s\",\"recompute\":\"%s\",\"engine_mb\":%.1f,"
               "\"device_used_mb\":%.1f,\"preset\":%s,\"params\":%lld,\"batch\":%lld,\"seq\":%lld,"
               "\"mask_L\":%lld,\"mask_K\":%lld,\"threads\":%d,\"steps\":%lld,\"tokens_per_s\":%.1f,"
               "\"forward_ms\":%.2f,\"backward_ms\":%.2f,\"gflops_per_s\":%.2f,\"matmul_flops_per_step\":%.6e,"
               "\"attention_flops_per_step\":%.6e,\"loss\":%.5f",
               dname, decoder_cuda_precision_name(prec), decoder_recompute_name(recompute), engine_mb, device_used_mb,
               qpreset, (long long)params, (long long)batch, (long long)seq, (long long)L,
               (long long)(L > 0 ? mask.K : 0), threads, (long long)steps, tps, 1e3 * t_fwd / (double)steps,
               1e3 * t_bwd / (double)steps, gflops, matmul_flops, attn_flops, loss);
        free(qpreset);
        if (tp.tokens_per_s > 0)
            printf(
                ",\"torch_tokens_per_s\":%.1f,\"torch_forward_ms\":%.2f,\"torch_backward_ms\":%.2f,\"torch_loss\":%.5f,"
                "\"torch_params\":%lld,\"torch_version\":\"%s\",\"torch_class\":\"%s\",\"torch_attn\":\"%s\","
                "\"kvcpt_over_torch\":%.3f",
                tp.tokens_per_s, tp.forward_ms, tp.backward_ms, tp.loss, (long long)tp.params, tp.version, tp.cls,
                peer_attn, tps / tp.tokens_per_s);
        else if (peer) {
            char *why = json_quote(tp.why);
            printf(",\"torch_tokens_per_s\":null,\"kvcpt_over_torch\":null,\"torch_why\":%s", why);
            free(why);
        }
        if (be->kind == BACKEND_HOST) {
            char *blas = blas_core_json_text();
            printf(",\"blas\":%s", blas);
            free(blas);
        }
        printf("}\n");
    } else {
        printf("bench model: %s (%.2fM params) %s%s, %d threads, batch %lld x seq %lld%s: %.1f tokens/s fwd+bwd "
               "(forward %.1f ms, backward %.1f ms per step, %.2f GFLOP/s)\n",
               preset, (double)params / 1e6, dname,
               be->kind == BACKEND_ACCEL && prec == DECODER_CUDA_BF16_WEIGHTS ? " (bf16 weights)" : "", threads,
               (long long)batch, (long long)seq, L > 0 ? " with RefreshKV mask" : "", tps, 1e3 * t_fwd / (double)steps,
               1e3 * t_bwd / (double)steps, gflops);
        printf("  model FLOPs per step: %.4g GFLOP = matmuls %.4g + attention %.4g (%.1f%%; recompute not counted)\n",
               (matmul_flops + attn_flops) / 1e9, matmul_flops / 1e9, attn_flops / 1e9,
               100.0 * attn_flops / (matmul_flops + attn_flops > 0 ? matmul_flops + attn_flops : 1.0));
        if (tp.tokens_per_s > 0)
            printf("  PyTorch %s (transformers %s, %s, eager mode, fp32, %d threads): %.1f tokens/s "
                   "(forward %.1f ms, backward %.1f ms per step); kvcpt / PyTorch = %.2fx\n",
                   tp.version, tp.cls, peer_attn, threads, tp.tokens_per_s, tp.forward_ms, tp.backward_ms,
                   tps / tp.tokens_per_s);
        else if (peer) printf("  PyTorch peer: %s; kvcpt's figure alone\n", tp.why);
        if (be->kind == BACKEND_HOST) printf("  BLAS: %s\n", blas_core_summary());
    }
    return 0;
}
